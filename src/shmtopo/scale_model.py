"""The floor model at scale, on paper: what flat and levelled collectives
would cost at 8-128 ranks on nodes this project has no access to.

The measured floor (:mod:`shmtopo.floor`) knows two cores of this machine.
On a big node the cost of moving a byte depends on where the two cores sit:
one L3, one NUMA node, one package, or two packages. Here each level of a
machine has four figures, taken as inputs (:data:`MACHINES`):

    latency   one cache line one way between two cores whose innermost
              common object is of this level's type
    read      bytes/s one core reads from a core at that distance
    exit      bytes/s out of (or into) one object of this type, all its
              cores together: a CCD's fabric link, a package's socket links

A step of an algorithm is a set of reads that run at once. It costs the
slowest of: each reader's reads one after another after its farthest
latency (reduced as they arrive, at the machine's reduction rate, where the
step reduces), and each object's traffic across its boundary at its exit
rate. Steps one after another add up.

The ranks sit on PU r in logical order of the machine's topology, hwloc's
synthetic description loaded here (as the levelled collectives place the
ranks of a foreign topology), and the levels are those the code builds:
:func:`shmtopo.coll.levels.structure_of` on that placement. The
algorithms are the flat ones of :class:`shmtopo.floor.Model` (the cheaper
of "one rank reads all" and "every rank reduces or copies a 1/p share")
and the levelled ones of ``coll/levels.py``: bcast tier by tier from the
top; reduce as the chain of the innermost groups, pipelined in chunks;
allreduce as that chain then a levelled bcast from the chain's last leader.
The barrier is dissemination over all ranks (what the code runs, for every
call's agreement too); its levelled form, each tier's groups in turn up and
one line per tier back down, is not built and is priced here to show what
it would give. Not part of any floor: the agreement every call starts with.

``python -m shmtopo scaling`` prints the predictions and plots them.
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable, Sequence

from .coll.levels import AUTO_TYPES, CHUNK, Structure, places_on, structure_of
from .topology import Topology

NS = 1e-9
GB = 1e9
RANKS = (8, 16, 32, 64, 128)
SIZES = (64 << 10, 1 << 20, 16 << 20)
OPERATIONS = ("barrier", "bcast", "reduce", "allreduce")
#: The plot's other chunk for the reduce chain: with the code's 1 MiB, an
#: array of one chunk crosses the chain's G groups one after another.
WHAT_IF_CHUNK = 64 << 10
TOP = "machine"   # the level of two cores that share no object of the listed types


@dataclass(frozen=True)
class Level:
    """Figures of one level (see the module docstring); exit is None for
    the top, which has no boundary in the node."""
    latency: float
    read: float
    exit: float | None


@dataclass(frozen=True)
class Machine:
    name: str
    synthetic: str            # hwloc's synthetic description
    types: tuple[str, ...]    # the types whose objects set a distance, innermost first
    levels: dict[str, Level]  # per type, and TOP
    reduce: float             # bytes/s of the reduction kernel on one core (float64 sum, in cache)
    about: str


# Round figures of the order published for these parts (core-to-core latency
# charts, fabric and socket-link bandwidths); inputs to replace with
# measurements, not measurements. What the model shows is where levels win,
# which follows from the ratios between levels more than from the values.
MACHINES: tuple[Machine, ...] = (
    Machine("2-socket AMD EPYC 7763 (NPS4)", "pack:2 numa:4 l3:2 core:8 pu:1", ("l3", "numanode", "package"),
            {"l3": Level(25 * NS, 40 * GB, 50 * GB), "numanode": Level(90 * NS, 25 * GB, 100 * GB),
             "package": Level(110 * NS, 25 * GB, 100 * GB), TOP: Level(190 * NS, 20 * GB, None)},
            30 * GB, "2 x 64 cores; a CCD of 8 cores per 32 MB L3, 2 CCDs per NUMA quadrant"),
    Machine("2-socket Huawei Kunpeng 920-6426", "pack:2 numa:2 l3:1 core:32 pu:1", ("l3", "numanode", "package"),
            {"l3": Level(40 * NS, 20 * GB, 60 * GB), "numanode": Level(40 * NS, 20 * GB, 60 * GB),
             "package": Level(110 * NS, 15 * GB, 60 * GB), TOP: Level(200 * NS, 10 * GB, None)},
            15 * GB, "2 x 64 cores; a die (SCCL) of 32 cores per L3 and NUMA node"),
    Machine("Intel Xeon Phi 7210 (KNL, SNC-4)", "pack:1 numa:4 l2:8 core:2 pu:1", ("l2", "numanode", "package"),
            {"l2": Level(30 * NS, 10 * GB, 30 * GB), "numanode": Level(100 * NS, 6 * GB, 150 * GB),
             "package": Level(130 * NS, 6 * GB, None), TOP: Level(130 * NS, 6 * GB, None)},
            10 * GB, "64 cores; tiles of 2 cores per 1 MB L2, 4 NUMA quadrants"),
)

Read = tuple[int, int, float]   # (source rank, reading rank, bytes)


class Layout:
    """nranks ranks on a machine: where each sits, the levels the code
    would build from level_types (SHMTOPO_COLL_LEVELS; auto's by default),
    and the cost of steps. chunk: the reduce chain's (the code's by
    default)."""

    def __init__(self, machine: Machine, nranks: int, level_types: Sequence[str] = AUTO_TYPES,
                 chunk: int = CHUNK):
        self.machine = machine
        self.chunk = chunk
        topo = Topology.from_synthetic(machine.synthetic)
        self.pus = topo.nbobjs("pu")
        if not 1 <= nranks <= self.pus:
            raise ValueError(f"{machine.name} has {self.pus} PUs: {nranks} ranks do not fit one to a core")
        self.nranks = nranks
        self.types, self.places = places_on(topo, nranks, list(machine.types))
        level_names, level_places = places_on(topo, nranks, list(level_types))
        self.structure: Structure = structure_of(level_places, level_names)

    def level(self, a: int, b: int) -> Level:
        """The figures of the innermost object the two ranks share."""
        for t, name in enumerate(self.types):
            if self.places[a][t] == self.places[b][t]:
                return self.machine.levels[name]
        return self.machine.levels[TOP]

    # -- one step: reads that run at once --------------------------------------
    def step(self, reads: Iterable[Read], reduces: bool = False) -> float:
        busy: dict[int, float] = defaultdict(float)
        farthest: dict[int, float] = defaultdict(float)
        folded: dict[int, float] = defaultdict(float)
        crossing: dict[tuple[int, int, int], float] = defaultdict(float)  # (type, object, 0 out / 1 in)
        for src, dst, nbytes in reads:
            if src == dst or nbytes <= 0:
                continue
            lv = self.level(src, dst)
            busy[dst] += nbytes / lv.read
            farthest[dst] = max(farthest[dst], lv.latency)
            folded[dst] += nbytes
            for t in range(len(self.types)):
                a, b = self.places[src][t], self.places[dst][t]
                if a != b:
                    crossing[(t, a, 0)] += nbytes
                    crossing[(t, b, 1)] += nbytes
        worst = 0.0
        for dst, reading in busy.items():
            work = max(reading, folded[dst] / self.machine.reduce) if reduces else reading
            worst = max(worst, farthest[dst] + work)
        for (t, _, _), nbytes in crossing.items():
            exit_rate = self.machine.levels[self.types[t]].exit
            if exit_rate:
                worst = max(worst, nbytes / exit_rate)
        return worst

    # -- flat: the algorithms of floor.Model over a set of ranks ---------------------
    def bcast_steps(self, groups: Sequence[tuple[Sequence[int], int]], n: float) -> float:
        """Each group's members get n bytes from its source, all groups at
        once: the cheaper of reading the whole, or a 1/k share each then
        the others' shares."""
        whole = self.step((src, r, n) for members, src in groups for r in members)
        split = (self.step((src, r, n / len(m)) for m, src in groups for r in m)
                 + self.step((a, b, n / len(m)) for m, _ in groups for a in m for b in m))
        return min(whole, split)

    def reduce_steps(self, groups: Sequence[tuple[Sequence[int], int]], n: float, everyone: bool) -> float:
        """Each group folds n bytes per member onto its destination (or,
        everyone: onto every member), all groups at once."""
        if everyone:
            whole = self.step(((a, b, n) for m, _ in groups for a in m for b in m), reduces=True)
        else:
            whole = self.step(((a, dst, n) for m, dst in groups for a in m), reduces=True)
        shares = self.step(((a, b, n / len(m)) for m, _ in groups for a in m for b in m), reduces=True)
        if everyone:
            back = self.step((a, b, n / len(m)) for m, _ in groups for a in m for b in m)
        else:
            back = self.step((a, dst, n / len(m)) for m, dst in groups for a in m)
        return min(whole, shares + back)

    def barrier_steps(self, groups: Sequence[Sequence[int]]) -> float:
        """Dissemination in each group, all groups at once: round k, every
        member signals the one 2^k further on."""
        rounds = max(math.ceil(math.log2(len(m))) for m in groups if len(m) > 1) if any(
            len(m) > 1 for m in groups) else 0
        total = 0.0
        for k in range(rounds):
            worst = 0.0
            for m in groups:
                for i, r in enumerate(m):
                    if len(m) > 1 << k:
                        worst = max(worst, self.level(r, m[(i + (1 << k)) % len(m)]).latency)
            total += worst
        return total

    def flat(self, op: str, n: float) -> float:
        everyone = [(list(range(self.nranks)), 0)]
        if op == "barrier":
            return self.barrier_steps([everyone[0][0]])
        if op == "bcast":
            return self.bcast_steps(everyone, n)
        if op == "reduce":
            return self.reduce_steps(everyone, n, everyone=False)
        if op == "allreduce":
            return self.reduce_steps(everyone, n, everyone=True)
        raise ValueError(f"unknown operation {op!r}; expected one of {', '.join(OPERATIONS)}")

    # -- levelled: the algorithms of coll/levels.py ----------------------------------
    def levelled(self, op: str, n: float) -> float:
        """None of the tiers: the flat cost (the code stays flat)."""
        tiers = self.structure.tiers
        if not tiers:
            return self.flat(op, n)
        if op == "barrier":
            up = sum(self.barrier_steps([list(g) for g in tier.groups]) for tier in tiers)
            down = sum(max(self.level(g[0], r).latency for g in tier.groups for r in g if r != g[0])
                       for tier in tiers if any(len(g) > 1 for g in tier.groups))
            return up + down
        if op == "bcast":
            return self.levelled_bcast(0, n)
        chain = self.chain(n)
        if op == "reduce":
            return chain  # to the chain's last leader; the code carries it on to another root
        if op == "allreduce":
            return chain + self.levelled_bcast(tiers[0].groups[-1][0], n)
        raise ValueError(f"unknown operation {op!r}; expected one of {', '.join(OPERATIONS)}")

    def levelled_bcast(self, root: int, n: float) -> float:
        """As the code runs it: up from root, each tier's group holding the
        data passing it on in turn (a step per tier), then down from the top,
        every other group of a tier at once."""
        tiers = self.structure.tiers
        total, holder, up = 0.0, root, []
        for t, tier in enumerate(tiers):
            g = self.structure.group_of(t, holder)
            assert g is not None
            up.append(g)
            if len(tier.groups[g]) > 1:
                total += self.bcast_steps([(tier.groups[g], holder)], n)
            holder = tier.groups[g][0]
        for t in reversed(range(len(tiers))):
            others = [(g, g[0]) for i, g in enumerate(tiers[t].groups) if i != up[t] and len(g) > 1]
            if others:
                total += self.bcast_steps(others, n)
        return total

    def chain(self, n: float) -> float:
        """The innermost groups each fold a chunk onto their leader, and
        each leader folds the previous group's partial in first: a pipeline
        of one stage per group, chunk by chunk."""
        groups = self.structure.tiers[0].groups
        chunk = min(n, self.chunk)
        chunks = math.ceil(n / chunk)
        fold = self.reduce_steps([(g, g[0]) for g in groups], chunk, everyone=False)
        hops = [self.step([(groups[i - 1][0], groups[i][0], chunk)], reduces=True) for i in range(1, len(groups))]
        return (chunks + len(groups) - 1) * (fold + max(hops, default=0.0))


@dataclass(frozen=True)
class Prediction:
    machine: str
    ranks: int
    op: str
    nbytes: int
    flat: float
    levelled: float
    structure: str


def predict(machines: Sequence[Machine] = MACHINES, ranks: Sequence[int] = RANKS,
            sizes: Sequence[int] = SIZES, ops: Sequence[str] = OPERATIONS, chunk: int = CHUNK) -> list[Prediction]:
    """Every machine at every rank count that fits it, one rank per core."""
    out = []
    for machine in machines:
        for p in ranks:
            try:
                layout = Layout(machine, p, chunk=chunk)
            except ValueError:
                continue
            for op in ops:
                for nbytes in ([0] if op == "barrier" else sizes):
                    out.append(Prediction(machine.name, p, op, nbytes, layout.flat(op, nbytes),
                                          layout.levelled(op, nbytes), layout.structure.describe()))
    return out


def _size(nbytes: int) -> str:
    if nbytes == 0:
        return "-"
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift:
            return f"{nbytes >> shift} {unit}"
    return f"{nbytes} B"


def report(predictions: Sequence[Prediction]) -> str:
    lines = []
    for name in dict.fromkeys(x.machine for x in predictions):
        machine = next(m for m in MACHINES if m.name == name)
        lines.append(f"== {name}: {machine.about} (synthetic: {machine.synthetic})")
        for level, lv in machine.levels.items():
            exit_text = f", exit {lv.exit / GB:g} GB/s" if lv.exit else ""
            lines.append(f"   {level:9} latency {lv.latency / NS:g} ns, read {lv.read / GB:g} GB/s{exit_text}")
        lines.append(f"   reduction kernel {machine.reduce / GB:g} GB/s per core")
        mine = [x for x in predictions if x.machine == name]
        for ranks in sorted({x.ranks for x in mine}):
            lines.append(f"   {ranks} ranks, levels (auto): {next(x.structure for x in mine if x.ranks == ranks)}")
        lines.append(f"   {'op':10} {'size':>7} {'ranks':>5} {'flat us':>10} {'levels us':>10} {'levels/flat':>11}")
        for x in mine:
            note = "  (levelled barrier not built)" if x.op == "barrier" else ""
            lines.append(f"   {x.op:10} {_size(x.nbytes):>7} {x.ranks:5d} {x.flat * 1e6:10.2f} "
                         f"{x.levelled * 1e6:10.2f} {x.levelled / x.flat if x.flat else 1.0:11.2f}{note}")
    return "\n".join(lines)


def plot(predictions: Sequence[Prediction], path: str, nbytes: int = 1 << 20,
         what_if: tuple[str, Sequence[Prediction]] | None = None) -> None:
    """A grid: one row per machine, one column per operation (barrier, and
    the others at nbytes per rank), flat and levelled against ranks;
    what_if: (label, predictions) drawn as a third line where it differs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    machines = list(dict.fromkeys(p.machine for p in predictions))
    fig, axes = plt.subplots(len(machines), len(OPERATIONS), figsize=(4 * len(OPERATIONS), 3.2 * len(machines)),
                             squeeze=False)
    for row, machine in zip(axes, machines):
        for ax, op in zip(row, OPERATIONS):
            size = 0 if op == "barrier" else nbytes
            pts = [p for p in predictions if p.machine == machine and p.op == op and p.nbytes == size]
            ax.plot([p.ranks for p in pts], [p.flat * 1e6 for p in pts], "o-", label="flat")
            ax.plot([p.ranks for p in pts], [p.levelled * 1e6 for p in pts], "s--",
                    label="levels (not built)" if op == "barrier" else "levels")
            if what_if is not None:
                other = [p for p in what_if[1] if p.machine == machine and p.op == op and p.nbytes == size]
                if [p.levelled for p in other] != [p.levelled for p in pts]:
                    ax.plot([p.ranks for p in other], [p.levelled * 1e6 for p in other], "^:", label=what_if[0])
            ax.set_xscale("log", base=2)
            ax.set_title(f"{machine}\n{op}" + ("" if op == "barrier" else f" {_size(size)} per rank"), fontsize=8)
            ax.set_xlabel("ranks, one per core")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=7)
        row[0].set_ylabel("floor on paper (us)")
    fig.suptitle("The floor model at scale, on paper (assumed per-level figures; not measured)")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
