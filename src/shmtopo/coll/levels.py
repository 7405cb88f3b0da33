"""Collectives in levels taken from the node's shared topology.

On a big node a flat collective has every rank read every other rank's
data, across packages and NUMA nodes alike. In levels, data crosses an
outer boundary (a package) once per group instead of once per rank:

- the *structure*: each rank sits on one PU of the shared topology (its
  binding, else the CPU it runs on; with a topology of another machine,
  synthetic or XML, rank r takes PU r in logical order). For each level type
  (innermost first, ``SHMTOPO_COLL_LEVELS`` or auto: l3, numanode, package)
  the ranks are cut into groups: maximal runs of *consecutive* ranks inside
  one object of that type. Tier 0 holds those groups; tier i+1 the leaders
  (lowest rank) of tier i's groups, cut again by the next type; a last tier
  holds the remaining leaders together. A level that splits nothing (one
  group, or every group a single unit) is left out.
- ``bcast``: the data goes up from the root to the top tier (a bcast in each
  tier group on the way) and down to every other group, each group's leader
  passing it on: every group reads it across its boundary once.
- ``reduce``/``allreduce``: the result must keep the bits of the flat
  algorithms, which fold in rank order, ((a0 op a1) op a2) op a3. Groups
  being consecutive rank ranges, group 0 folds its ranks (a reduce on its
  group comm), its leader hands the partial to group 1's leader, which folds
  its own input into it first (partial op a_k: what the flat fold does next)
  and gives that as its input to group 1's reduce; and so on: a chain in
  group order, the same fold, so the same bits. The chain is pipelined in
  chunks (group g folds chunk c while group g+1 folds chunk c-1), the hand-off
  going through a window of the leaders with a peer fence per chunk.
  allreduce then bcasts the last group's result; reduce carries it only to
  the root.

A levelled call starts with the whole comm's agreement (every collective
does), then runs on sub-comms of the comm (made once, at the first levelled
call, from mpi4py splits of the comm's own communicator): each of those
steps is again an agreement, of the group only. Small calls and barrier stay
flat: their whole cost is that first step. Used for arrays from MIN_BYTES
per rank on comms of at least AUTO_MIN_RANKS ranks (auto), or of any size
with an explicit list; comms made with from_callbacks (no MPI to split) and
multi-node comms stay flat.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Optional

import numpy as np
import numpy.typing as npt

from .. import agreement
from .._base import CommLike
from .._native import ffi, lib
from .._types import DTYPES
from ..bitmap import Bitmap
from ..errors import ShmtopoError, check
from ..topology import share_topology
from .node import WINDOW_MIN, node_allgather, node_bcast, node_reduce

Array = npt.NDArray[Any]

#: auto: levels from this many ranks on (below, a node's ranks rarely span
#: more than one L3 or NUMA node, and each level adds a step).
AUTO_MIN_RANKS = 8
#: Levels for arrays from this many bytes per rank: smaller calls are one
#: flat step, the agreement itself (and they take the fast C entry).
MIN_BYTES = WINDOW_MIN
#: auto's level types, innermost first.
AUTO_TYPES = ("l3", "numanode", "package")
#: Bytes per chunk of the pipelined reduce chain.
CHUNK = 1 << 20
#: In a signature's extra word: the call runs in levels (so a rank on
#: another path cannot pass the agreement).
LEVELLED_MARK = 0x4C56  # "LV"


@dataclass(frozen=True)
class Tier:
    """One tier: its type ("numanode", ..., "node" for the last) and its
    groups, each the comm ranks that take part in it (leader first)."""
    type: str
    groups: tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class Structure:
    """Where the comm's ranks sit, in levels (the same on every rank)."""
    nranks: int
    tiers: tuple[Tier, ...]   # empty: flat
    why_flat: str = ""

    def describe(self) -> str:
        if not self.tiers:
            return f"flat ({self.why_flat})"
        parts, inner = [], "rank"
        for tier in self.tiers:
            sizes = sorted({len(g) for g in tier.groups})
            size = str(sizes[0]) if len(sizes) == 1 else f"{sizes[0]}-{sizes[-1]}"
            n = len(tier.groups)
            unit = "" if inner == "rank" else f" {inner}"
            parts.append(f"{tier.type} ({n} group{'s' if n > 1 else ''} of {size}{unit})")
            inner = tier.type
        return " > ".join(parts)

    def group_of(self, tier: int, rank: int) -> int | None:
        for i, members in enumerate(self.tiers[tier].groups):
            if rank in members:
                return i
        return None


def structure_of(pu_objects: list[list[int]], types: list[str]) -> Structure:
    """The structure from each rank's object index per type
    (pu_objects[rank][t], -1 when none holds its PU)."""
    n = len(pu_objects)
    units: list[list[int]] = [[r] for r in range(n)]   # ranks of each unit, in rank order
    tiers: list[Tier] = []
    for t, name in enumerate(types):
        # runs of consecutive units whose first ranks sit in one object;
        # each run holds whole units, so the levels nest by construction
        runs: list[list[int]] = []
        for u, ranks in enumerate(units):
            if runs and pu_objects[units[runs[-1][-1]][0]][t] == pu_objects[ranks[0]][t]:
                runs[-1].append(u)
            else:
                runs.append([u])
        if len(runs) == 1 or len(runs) == len(units):
            continue  # splits nothing: not a level
        groups = tuple(tuple(units[u][0] for u in run) if tiers else
                       tuple(r for u in run for r in units[u]) for run in runs)
        tiers.append(Tier(name, groups))
        units = [[r for u in run for r in units[u]] for run in runs]
    if not tiers:
        return Structure(n, (), f"{', '.join(types) or 'no level types'}: "
                                "no level splits the ranks into groups of consecutive ranks")
    leaders = tuple(u[0] for u in units)
    return Structure(n, tuple(tiers) + (Tier("node", (leaders,)),))


# ---- the comm's setting and where its ranks sit ------------------------------

def setting(comm: CommLike) -> tuple[int, list[str]]:
    """(mode, types) of the comm's agreed SHMTOPO_COLL_LEVELS."""
    mode, types = ffi.new("int *"), ffi.new("int[4]")
    check(lib.shmtopo_comm_coll_levels(comm.handle, mode, types))
    names = [ffi.string(lib.shmtopo_level_type_name(t)).decode() for t in types if t]
    return int(mode[0]), names


def _place(topo: Any, rank: int) -> Any:
    """This rank's PU (a Bitmap of one CPU): its binding's first CPU, else
    the one it last ran on; with a topology of another machine (synthetic,
    XML), PU `rank` in logical order (wrapping around)."""
    pus = topo.objects("pu")
    try:
        bound = topo.get_cpubind()
        whole = topo.root.cpuset
        where = bound if bound and bound != whole else topo.get_last_cpu_location(thread=False)
    except ShmtopoError:  # not this machine: no binding to read
        return pus[rank % len(pus)].cpuset
    first = where.first if where else None
    return Bitmap([first]) if first is not None else pus[rank % len(pus)].cpuset


def _indices(topo: Any, pu: Any, types: list[str]) -> list[int]:
    found = []
    for name in types:
        objs = topo.objects(name)
        found.append(next((i for i, o in enumerate(objs) if pu <= o.cpuset), -1))
    return found


def places_on(topo: Any, nranks: int, types: list[str]) -> tuple[list[str], list[list[int]]]:
    """Local, for a topology of another machine: rank r on PU r in logical
    order (as _place puts it there). Returns the types the topology has and
    each rank's object index per type, ready for structure_of."""
    present = [t for t in types if topo.nbobjs(t) > 0]
    pus = topo.objects("pu")
    return present, [_indices(topo, pus[r % len(pus)].cpuset, present) for r in range(nranks)]


def find_structure(comm: CommLike, types: list[str]) -> Structure:
    """Collective: every rank's place in the shared topology, exchanged with
    an allgather of the comm, and the structure they give."""
    with share_topology(comm) as topo:
        def mine() -> Array:
            present = [t for t in types if topo.nbobjs(t) > 0]
            idx = _indices(topo, _place(topo, comm.rank), present)
            full = [idx[present.index(t)] if t in present else -1 for t in types]
            return np.array(full, dtype=np.int64)

        row = agreement.normalised(comm, lib.SHMTOPO_KIND_ALLGATHER, mine)
    everyone = np.empty((comm.size, len(types)), np.int64)
    node_allgather(comm, row, everyone)
    keep = [t for i, t in enumerate(types) if (everyone[:, i] >= 0).all()]
    cols = [types.index(t) for t in keep]
    return structure_of([[int(everyone[r, c]) for c in cols] for r in range(comm.size)], keep)


def wanted(comm: CommLike) -> tuple[list[str], str]:
    """The level types this comm would use, or [] and why not."""
    if comm.nnodes > 1:
        return [], "multi-node comm: the levels are the nodes"
    if comm.mpi is None:
        return [], "a comm made with from_callbacks (levels split its MPI communicator)"
    mode, types = setting(comm)
    if mode == lib.SHMTOPO_LEVELS_FLAT:
        return [], "SHMTOPO_COLL_LEVELS=flat"
    if mode == lib.SHMTOPO_LEVELS_AUTO:
        if comm.size < AUTO_MIN_RANKS:
            return [], f"auto: flat below {AUTO_MIN_RANKS} ranks"
        return list(AUTO_TYPES), ""
    if comm.size < 2:
        return [], "one rank"
    return types, ""


# ---- the sub-comms -----------------------------------------------------------

class Levels:
    """A comm's levels: its structure and this rank's sub-comm at each tier
    it takes part in, plus the chain of tier-0 leaders with its window."""

    def __init__(self, comm: CommLike, structure: Structure):
        self.structure = structure
        self.calls = 0
        self.comms: list[Optional[CommLike]] = []
        self.chain: Optional[CommLike] = None
        self.window: Any = None
        self._tmp: Array | None = None
        try:
            for t in range(len(structure.tiers)):
                self.comms.append(_sub(comm, structure.group_of(t, comm.rank)))
            leaders = [g[0] for g in structure.tiers[0].groups]
            chain_color = 0 if comm.rank in leaders else None
            if len(structure.tiers) == 2:  # the top tier is the chain
                self.chain = self.comms[1]
            else:
                self.chain = _sub(comm, chain_color)
            if self.chain is not None:
                self.window = self.chain.allocate(2 * CHUNK)
            failure: BaseException | None = None
        except Exception as exc:  # noqa: BLE001 - every rank hears of it below
            failure = exc
        # every rank learns whether all sub-comms were made; on a failure
        # anywhere all free theirs (in one order: tier by tier, then the chain)
        try:
            if failure is not None:
                agreement.refuse(comm, lib.SHMTOPO_KIND_SPLIT, failure)
            agreement.agree(comm, lib.SHMTOPO_KIND_SPLIT, extra=LEVELLED_MARK)
        except BaseException:
            self.free()
            raise

    def free(self) -> None:
        """Collective (each sub-comm over its members)."""
        if self.window is not None:
            self.window.free()
            self.window = None
        seen = set()
        for sub in self.comms + [self.chain]:
            if sub is not None and id(sub) not in seen:
                seen.add(id(sub))
                sub.free()
        self.comms, self.chain = [], None

    def abandon(self) -> None:
        if self.window is not None:
            self.window.abandon()
        for sub in self.comms + [self.chain]:
            if sub is not None:
                sub.abandon()
        self.comms, self.chain, self.window = [], None, None

    def release(self) -> None:
        """Local: the comm's clean release (Comm.release), for each sub-comm."""
        if self.window is not None:
            self.window.release()
        seen = set()
        for sub in self.comms + [self.chain]:
            if sub is not None and id(sub) not in seen:
                seen.add(id(sub))
                sub.release()
        self.comms, self.chain, self.window = [], None, None

    # -- bcast -------------------------------------------------------------
    def bcast(self, me: int, buf: Array, root: int, dest: int | None = None) -> None:
        """In place: buf becomes root's buf on every rank (dest: on that
        rank, and on the ranks that pass it on)."""
        tiers = self.structure.tiers
        up: dict[int, tuple[int, int]] = {}  # tier -> (group, holder)
        holder = root
        for t in range(len(tiers)):
            g = self.structure.group_of(t, holder)
            assert g is not None
            up[t] = (g, holder)
            holder = tiers[t].groups[g][0]
        path: dict[int, int] = {}  # tier -> dest's group there
        if dest is not None:
            at = dest
            for t in range(len(tiers)):
                g = self.structure.group_of(t, at)
                assert g is not None
                path[t] = g
                at = tiers[t].groups[g][0]
        steps = [(t, up[t][1]) for t in range(len(tiers)) if self.comms[t] is not None
                 and self.structure.group_of(t, me) == up[t][0]]
        for t in reversed(range(len(tiers))):
            g = self.structure.group_of(t, me)
            if self.comms[t] is None or g is None or g == up[t][0] or (dest is not None and path[t] != g):
                continue
            steps.append((t, tiers[t].groups[g][0]))
        for t, src in steps:
            sub = self.comms[t]
            assert sub is not None
            g = self.structure.group_of(t, me)
            assert g is not None
            node_bcast(sub, buf, tiers[t].groups[g].index(src))

    # -- the reduce chain ----------------------------------------------------
    def reduce(self, me: int, a: Array, result: Array | None, opc: int) -> Array | None:
        """The fold of every rank's a in rank order; returned on the last
        group's leader (into result when given there), None elsewhere."""
        groups = self.structure.tiers[0].groups
        g = self.structure.group_of(0, me)
        assert g is not None
        group = self.comms[0]
        assert group is not None
        last = len(groups) - 1
        leader = groups[g][0] == me
        flat_in = a.reshape(-1)
        out: Array | None = None
        if leader and g == last:
            out = (result if result is not None else np.empty_like(a)).reshape(-1)
        per = max(1, CHUNK // max(a.itemsize, 1))
        code = DTYPES[a.dtype]
        if leader and g > 0 and (self._tmp is None or self._tmp.nbytes < min(a.nbytes, CHUNK)):
            self._tmp = np.empty(CHUNK, np.uint8)
        win = self.window
        for c, off in enumerate(range(0, a.size, per)):
            m = min(per, a.size - off)
            mine = flat_in[off:off + m]
            dst: Array | None = None
            if leader:
                assert win is not None
                slot = (c % 2) * CHUNK
                if g > 0:  # partial op a_first: the flat fold's next step
                    win.peer_fence(g - 1)
                    assert self._tmp is not None
                    x = self._tmp[:m * a.itemsize].view(a.dtype)
                    x[...] = win.query(g - 1)[slot:slot + m * a.itemsize].view(a.dtype)
                    check(lib.shmtopo_reduce_local(ffi.from_buffer(x), ffi.from_buffer(mine), m, code, opc))
                    mine = x
                if g < last:
                    dst = win.local[slot:slot + m * a.itemsize].view(a.dtype)
                else:
                    assert out is not None
                    dst = out[off:off + m]
            node_reduce(group, mine, dst, opc, 0, lib.SHMTOPO_COLL_AUTO)
            if leader and g < last:
                assert win is not None
                win.peer_fence(g + 1)
        if out is None:
            return None
        return out.reshape(a.shape)


def _sub(comm: CommLike, color: int | None) -> Optional[CommLike]:
    """The sub-comm of the ranks with this color (None: not a member)."""
    made = comm.split_by_color(color)
    if made is None:
        return None
    _settle_flat(made)  # a sub-comm never levels itself
    check(lib.shmtopo_comm_set_timeout(made.handle, comm.timeout))
    return made


#: A comm's levels when it has none (decided once; sub-comms never have any).
FLAT: Any = object()
#: The key the levels of a comm are attached under (comm.attributes).
_LEVELS = object()


def _held(comm: CommLike) -> Any:
    """The comm's levels: None (not decided yet), FLAT or its Levels."""
    return comm.attributes.get(_LEVELS)


def _settle_flat(comm: CommLike) -> None:
    """The comm has no levels, for good: large calls may take the fast entry."""
    comm.attributes.set(_LEVELS, FLAT)
    comm.allow_fast_windows(True)


def _attach(comm: CommLike, made: "Levels") -> None:
    comm.attributes.set(_LEVELS, made, free=Levels.free, abandon=Levels.abandon, release=Levels.release)


# ---- the hooks the collectives call ------------------------------------------------

def wanted_for(comm: CommLike, nbytes: int, alg: int) -> bool:
    """Whether a call of nbytes per rank runs in levels: the same answer on
    every rank (the setting, size and count are agreed). Levels not made yet
    count as wanted; :func:`ready` makes them after the call's agreement."""
    held = _held(comm)
    if held is FLAT or nbytes < MIN_BYTES or alg != lib.SHMTOPO_COLL_AUTO:
        return False
    if isinstance(held, Levels):
        return True
    if not wanted(comm)[0]:
        _settle_flat(comm)
        return False
    return True


def ready(comm: CommLike) -> Levels | None:
    """After the call's agreement: the comm's levels, made at the first
    levelled call (collective), or None when the topology gives none."""
    held = _held(comm)
    if isinstance(held, Levels):
        return held
    found = find_structure(comm, wanted(comm)[0])
    if not found.tiers:
        _settle_flat(comm)
        return None
    made = Levels(comm, found)
    _attach(comm, made)
    return made


@contextmanager
def _running(comm: CommLike, lv: Levels) -> Iterator[None]:
    """A levelled call's data phase: a failure on this rank (a wait that
    failed, Ctrl-C) abandons the sub-comms and leaves the comm, so that peers
    waiting in other groups, or on the chain, fail too instead of hanging."""
    try:
        yield
    except BaseException:
        lv.abandon()
        _settle_flat(comm)
        agreement.leave(comm)
        raise
    lv.calls += 1


def _last_leader(lv: Levels) -> int:
    return lv.structure.tiers[0].groups[-1][0]


def allreduce(comm: CommLike, a: Array, result: Array, opc: int) -> bool:
    """Collective, after the call's agreement: result = the rank-order fold
    of every rank's a. False when the comm turned out to have no levels."""
    lv = ready(comm)
    if lv is None:
        return False
    with _running(comm, lv):
        lv.reduce(comm.rank, a, result, opc)
        lv.bcast(comm.rank, result, _last_leader(lv))
    return True


def reduce(comm: CommLike, a: Array, result: Array | None, opc: int, root: int) -> bool:
    """As allreduce, the result on root only (result: root's out)."""
    lv = ready(comm)
    if lv is None:
        return False
    last = _last_leader(lv)
    with _running(comm, lv):
        got = lv.reduce(comm.rank, a, result if comm.rank == root else None, opc)
        if root != last:
            buf = got if got is not None else result if comm.rank == root else np.empty_like(a)
            assert buf is not None
            lv.bcast(comm.rank, buf, last, dest=root)
    return True


def bcast(comm: CommLike, buf: Array, root: int) -> bool:
    """Collective, after the call's agreement: buf becomes root's buf."""
    lv = ready(comm)
    if lv is None:
        return False
    with _running(comm, lv):
        lv.bcast(comm.rank, buf, root)
    return True


def describe(comm: CommLike) -> str:
    """Collective: the comm's level structure as info prints it."""
    types, why = wanted(comm)
    held = _held(comm)
    if isinstance(held, Levels):
        return held.structure.describe() + f"; for arrays from {MIN_BYTES // 1024} KiB"
    if not types:
        if comm.nnodes == 1 and comm.mpi is not None and setting(comm)[0] == lib.SHMTOPO_LEVELS_AUTO:
            return f"{find_structure(comm, list(AUTO_TYPES)).describe()}; {why}"
        return f"flat ({why})"
    return find_structure(comm, types).describe() + f"; for arrays from {MIN_BYTES // 1024} KiB"


def levelled_calls(comm: CommLike) -> int:
    """How many calls of the comm ran in levels (a test hook)."""
    held = _held(comm)
    return held.calls if isinstance(held, Levels) else 0
