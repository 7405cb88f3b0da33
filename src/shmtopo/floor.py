"""The hardware floor: what this machine allows a collective to cost.

:func:`measure` times the pieces collectives are made of, in C
(``native/floor.c``), on the cores where the job placed its ranks: ranks 0
and 1 of the node's comm, pinned wherever the job pinned them, while any
other rank sleeps in a barrier. :class:`Model` turns those figures into a
floor time per operation and size (the model is stated in the README and in
:meth:`Model.time`). ``python -m shmtopo bench --floor`` prints both.

Every figure is the median of ``repeats`` (at least 5) repetitions, the
probes interleaved (each repetition runs every probe once), with the min and
max beside it.
"""
from __future__ import annotations

import math
import os
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from ._native import ffi, lib
from .bitmap import Bitmap
from .errors import check

# Copy sizes: 8 B ... 8 MiB in steps of 4, plus 1 MiB (the collectives' sizes).
SIZES = sorted({8 * 4**k for k in range(11)} | {1 << 20})
REPEATS = 5
# The reduction kernel's arrays: two inputs and the output, all in L1/L2.
REDUCE_BYTES = 16 << 10
DTYPES = ["float64", "float32", "int64", "int32", "int16", "int8",
          "uint64", "uint32", "uint16", "uint8"]
_DTYPE_NUMBERS = {"int8": 0, "int16": 1, "int32": 2, "int64": 3, "uint8": 4, "uint16": 5,
                  "uint32": 6, "uint64": 7, "float32": 8, "float64": 9}
PAIR_PROBES = ("round_trip", "across_one", "across_both", "across_cma")
# The waits inside a probe give up after this long when the comm has no timeout.
PROBE_TIMEOUT = 60.0


@dataclass(frozen=True)
class Stat:
    """A figure from repetitions: the median and the range (seconds)."""

    median: float
    lo: float
    hi: float

    @classmethod
    def of(cls, samples: Sequence[float]) -> "Stat":
        return cls(statistics.median(samples), min(samples), max(samples))


@dataclass
class Floor:
    """The measured pieces (seconds). Copies are per copy of `size` bytes;
    the cross-core ones are empty and `round_trip` None on a 1-rank comm."""

    ranks: int                                   # ranks on the node (the model's p)
    ncpus: int
    oversubscribed: bool
    placement: list[str] = field(default_factory=list)   # where ranks 0 and 1 ran
    round_trip: Stat | None = None               # one cache line A -> B -> A
    across_one: dict[int, Stat] = field(default_factory=dict)   # B copies what A wrote
    across_both: dict[int, Stat] = field(default_factory=dict)  # both at once (slower side)
    rewrite: dict[int, Stat] = field(default_factory=dict)      # A refills what B has just copied
    across_cma: dict[int, Stat] = field(default_factory=dict)   # across_one by process_vm_readv
    local: dict[int, Stat] = field(default_factory=dict)        # out of this core's cache
    dram: dict[int, Stat] = field(default_factory=dict)         # out of memory, caches flushed
    reduce: dict[str, Stat] = field(default_factory=dict)       # kernel over REDUCE_BYTES
    reduce_bytes: int = REDUCE_BYTES


# A round trip measured again after a run may differ from the one the run's
# figures are set against by this factor before the two cores count as moved.
DRIFT = 1.5


def moved(before: Floor, after: Floor) -> str | None:
    """How the cache-line round trip changed between two measurements on the
    same ranks, when it changed by more than DRIFT, else None. A VM's host
    can move two vCPUs between placements whose latencies differ 4-fold, in
    the middle of a run; a time over the floor then compares a row with a
    floor measured elsewhere."""
    if before.round_trip is None or after.round_trip is None:
        return None
    a, b = before.round_trip.median, after.round_trip.median
    if max(a, b) <= DRIFT * min(a, b):
        return None
    return f"the cache line's round trip went from {a * 1e6:.3g} us to {b * 1e6:.3g} us"


# -- measurement -------------------------------------------------------------

def _probe(fn: Callable[..., int], *args: Any) -> float:
    out = ffi.new("double *")
    check(fn(*args, out))
    return float(out[0])


def _probe_at(at: int, fn: Callable[..., int], *args: Any) -> Callable[[int], float]:
    """run(rounds) of the probe fn(*args), the round count passed at `at`."""
    return lambda rounds: _probe(fn, *args[:at], rounds, *args[at:])


def _rounds(trial: Callable[[int], float], budget: float, first: int) -> int:
    """Rounds of a probe that take about `budget` seconds of wall time."""
    t0 = time.perf_counter()
    trial(first)
    per_round = (time.perf_counter() - t0) / first
    return max(3, min(10**7, int(budget / max(per_round, 1e-9))))


def measure(comm: Any, seconds: float = 0.02, repeats: int = REPEATS,
            sizes: Sequence[int] = SIZES, copies: bool = True) -> Floor:
    """Collective over ``comm`` (needs ``comm.mpi``): measure the floor.
    ``seconds``: time of one repetition of one probe. ``copies=False``
    measures only the round trip (what fences need). Returns the same
    Floor on every rank."""
    if repeats < 1:
        raise ValueError("repeats must be >= 1")
    mpi = comm.mpi
    rank, size = comm.rank, comm.size
    timeout = comm.timeout or PROBE_TIMEOUT
    floor = Floor(ranks=size, ncpus=comm.ncpus, oversubscribed=comm.oversubscribed)
    sizes = sorted(sizes) if copies else []
    # Only ranks 0 and 1 need memory: their probe regions, in a window.
    region = lib.shmtopo_floor_region(max(sizes, default=8))
    win = comm.allocate(region if rank < 2 else 0) if size > 1 else None
    try:
        if rank < 2:
            local = _measure_pair(comm, win, floor, seconds, repeats, sizes, copies, timeout,
                                  cma=comm.single_copy == "cma")
        else:
            local = None
        comm.barrier()  # the other ranks sleep here meanwhile
    finally:
        if win is not None:
            win.free()
    result: Floor = mpi.bcast(local, root=0)
    return result


def _where() -> str:
    cpus = sorted(os.sched_getaffinity(0))
    bound = f"bound to CPU {cpus[0]}" if len(cpus) == 1 else f"unbound ({Bitmap(cpus)})"
    return f"on CPU {lib.shmtopo_floor_cpu()}, {bound}"


def _measure_pair(comm: Any, win: Any, floor: Floor, seconds: float, repeats: int,
                  sizes: list[int], copies: bool, timeout: float, cma: bool) -> Floor | None:
    """Ranks 0 and 1 (or rank 0 alone): the probes. Returns the Floor on
    rank 0, None on rank 1."""
    mpi = comm.mpi
    rank = comm.rank
    pair = win is not None
    other = 1 - rank
    where_start = _where()
    probes: list[tuple[str, Any, Callable[[int], float]]] = []   # (kind, key, run(rounds))
    if pair:
        mine = ffi.cast("void *", win.query(rank).__array_interface__["data"][0])
        peer = ffi.cast("void *", win.query(other).__array_interface__["data"][0])
        peer_pid = comm.pid(other)
        probes.append(("round_trip", None, _probe_at(3, lib.shmtopo_floor_pingpong, mine, peer, rank,
                                                     peer_pid, timeout)))
        for nbytes in sizes:
            role = lib.SHMTOPO_FLOOR_READER if rank == 1 else lib.SHMTOPO_FLOOR_WRITER
            probes.append(("across_one", nbytes, _probe_at(4, lib.shmtopo_floor_copy, mine, peer, role,
                                                           nbytes, peer_pid, timeout)))
            probes.append(("across_both", nbytes, _probe_at(4, lib.shmtopo_floor_copy, mine, peer,
                                                            lib.SHMTOPO_FLOOR_BOTH, nbytes, peer_pid, timeout)))
            if cma:  # single copy's own mechanism, where the comm found it works
                role = lib.SHMTOPO_FLOOR_READER_CMA if rank == 1 else lib.SHMTOPO_FLOOR_WRITER
                probes.append(("across_cma", nbytes, _probe_at(4, lib.shmtopo_floor_copy, mine, peer, role,
                                                               nbytes, peer_pid, timeout)))
    if rank == 0 and copies:  # rank 0 alone
        for nbytes in sizes:
            probes.append(("local", nbytes, _probe_at(2, lib.shmtopo_floor_copy_local, nbytes, 0)))
            if _dram_supported():
                probes.append(("dram", nbytes, _probe_at(2, lib.shmtopo_floor_copy_local, nbytes, 1)))
        for name in DTYPES:
            probes.append(("reduce", name, _probe_at(3, lib.shmtopo_floor_reduce, _DTYPE_NUMBERS[name],
                                                     lib.SHMTOPO_OP_SUM, REDUCE_BYTES)))
    # Rank 0's own probes run while rank 1 sleeps in a peer fence: a spinning
    # neighbour can slow a core down (SMT siblings, a shared host).
    paired = [i for i, (kind, _, _) in enumerate(probes) if kind in PAIR_PROBES]
    alone = [i for i in range(len(probes)) if i not in paired]

    def each(indices: list[int], fn: Callable[[int], None]) -> None:
        for i in indices:
            fn(i)
        if pair:
            win.peer_fence(other)

    # Calibrate each probe once; the pair probes' round counts must agree.
    rounds = [0] * len(probes)

    def calibrate(i: int) -> None:
        rounds[i] = _rounds(probes[i][2], seconds, 1000 if probes[i][0] == "round_trip" else 2)

    each(paired + alone, calibrate)
    if pair:
        theirs = mpi.sendrecv([rounds[i] for i in paired], dest=other, source=other)
        for i, n in zip(paired, theirs):
            rounds[i] = max(rounds[i], n)
    samples: list[list[float]] = [[] for _ in probes]
    for _ in range(repeats):  # interleaved: every probe once per repetition
        each(paired + alone, lambda i: samples[i].append(probes[i][2](rounds[i])))
    where = where_start if where_start == _where() else f"{where_start}, then {_where()}"
    # The cross-core copies are timed by their readers: rank 1 one way, both
    # ranks both ways (where the slower of the two counts); rank 0, the
    # writer one way, times its refills of what rank 1 has just copied.
    crossed = {kind: [samples[i] for i, p in enumerate(probes) if p[0] == kind]
               for kind in ("across_one", "across_both", "across_cma")}
    if pair and rank == 1:
        mpi.send((where, crossed), dest=0)
        return None
    floor.placement = [f"rank 0 {where}"]
    if pair:
        where1, crossed1 = mpi.recv(source=1)
        floor.placement.append(f"rank 1 {where1}")
        for nbytes, s in zip(sizes, crossed1["across_one"]):
            floor.across_one[nbytes] = Stat.of(s)
        for nbytes, s in zip(sizes, crossed1["across_cma"]):
            floor.across_cma[nbytes] = Stat.of(s)
        for nbytes, s0, s1 in zip(sizes, crossed["across_both"], crossed1["across_both"]):
            floor.across_both[nbytes] = Stat.of([max(a, b) for a, b in zip(s0, s1)])
    for i, (kind, key, _) in enumerate(probes):
        if kind == "round_trip":
            floor.round_trip = Stat.of(samples[i])
        elif kind == "across_one" and pair:
            floor.rewrite[key] = Stat.of(samples[i])
        elif kind in ("local", "dram", "reduce"):
            getattr(floor, kind)[key] = Stat.of(samples[i])
    return floor


_DRAM: bool | None = None


def _dram_supported() -> bool:
    global _DRAM
    if _DRAM is None:
        out = ffi.new("double *")
        _DRAM = lib.shmtopo_floor_copy_local(4096, 1, 1, out) == 0
    return _DRAM


# -- the model ---------------------------------------------------------------

def _interpolate(table: dict[int, Stat], nbytes: float) -> float:
    """Seconds for `nbytes` from figures at measured sizes: straight lines
    between them in log-log, the smallest size's time below it (latency
    bound), the largest size's bandwidth above it."""
    if nbytes <= 0:
        return 0.0
    if not table:
        raise ValueError("no figures measured")
    sizes = sorted(table)
    if nbytes <= sizes[0]:
        return table[sizes[0]].median
    if nbytes >= sizes[-1]:
        return table[sizes[-1]].median * nbytes / sizes[-1]
    for a, b in zip(sizes, sizes[1:]):
        if a <= nbytes <= b:
            ta, tb = table[a].median, table[b].median
            if ta <= 0 or tb <= 0:
                return ta + (tb - ta) * (nbytes - a) / (b - a)
            w = math.log(nbytes / a) / math.log(b / a)
            return math.exp(math.log(ta) + w * (math.log(tb) - math.log(ta)))
    raise AssertionError("unreachable")


# The operations the model knows, and what their rows in the benchmarks are.
OPERATIONS = ("fence", "peer_fence", "allreduce", "bcast", "reduce", "allgather", "gather", "scatter", "alltoall")


class Model:
    """Floor times (seconds) from a Floor, for p ranks of one core each
    (p defaults to the ranks the Floor was measured with).

    L        one way of a cache line between two cores: half the round trip
    X1(n)    one core copies n bytes another core has just written
    X2(n)    the same while that core copies n bytes from it (both ways at once)
    C(n)     a core copies n bytes it has just written itself
    R(n)     the reduction kernel over n bytes (dst = a op b, in cache; float64
             unless said)

    With q = p - 1 (every term 0 for p = 1 except the local copy of a result
    into a separate output):

    fence      ceil(log2 p) * L: dissemination's rounds, each one line one way
    peer_fence L (and mpi4py's Sendrecv of 0 bytes)
    allreduce  min( max(X2(qN), q R(N)),                     every rank reads all
                    max(X2(qN/p), q R(N/p)) + X2(qN/p) )     reduce-scatter + allgather
    reduce     min( max(X1(qN), q R(N)),                     the root reads all
                    max(X2(qN/p), q R(N/p)) + X1(qN/p) )     reduce-scatter + gather
    bcast      min( X1(N), X2(qN/p) )                        receivers read alone, or
                                                             all cores copy a share
    allgather  X2(qN) + C(N)                                 every block to every rank
    gather     max(X1(N), C(N))                              each rank's block crosses at once,
                                                             the root copies its own meanwhile
    scatter    X1(N)                                         each rank reads its block
    alltoall   X2(qN) + C(N)                                 every rank reads a block of each

    (gather, scatter and alltoall: N is one rank's block, as OSU counts it;
    C(N) is the block a rank keeps, 0 in place)

    No call that waits for another rank's data ends before word of that
    data has crossed: allreduce, allgather and alltoall, where every rank
    waits for every other, take at least the fence's floor; bcast, reduce,
    gather and scatter, where the root or the receivers wait for the
    others, at least L. The copy probes X1 and X2 start once the data is
    there (their synchronisation is not timed), so for small N they are
    below L and the data terms alone would put an 8-byte allreduce under a
    fence, which it contains.

    A phase that reads across cores and reduces what it reads costs the
    slower of the two (the kernel runs on the data as it arrives); phases one
    after the other add up. For p > 2 the all-at-once rate of two cores
    stands for every core's: optimistic on a big node, so still a floor.
    """

    def __init__(self, floor: Floor, ranks: int | None = None, dtype: str = "float64"):
        self.floor = floor
        self.p = floor.ranks if ranks is None else ranks
        self.dtype = dtype
        if self.p < 1:
            raise ValueError("ranks must be >= 1")

    # the pieces
    def L(self) -> float:
        if self.floor.round_trip is None:
            raise ValueError("no round trip measured (a 1-rank comm)")
        return self.floor.round_trip.median / 2

    def X1(self, n: float) -> float:
        return _interpolate(self.floor.across_one, n)

    def X2(self, n: float) -> float:
        return _interpolate(self.floor.across_both, n)

    def C(self, n: float) -> float:
        return _interpolate(self.floor.local, n)

    def R(self, n: float) -> float:
        per_byte = self.floor.reduce[self.dtype].median / self.floor.reduce_bytes
        return per_byte * n

    def time(self, op: str, nbytes: int = 0, in_place: bool = False) -> float:
        """The floor of `op` on `nbytes` per rank (see the class docstring).
        in_place: the result replaces the input (no local copy at p = 1)."""
        if op not in OPERATIONS:
            raise ValueError(f"unknown operation {op!r}; expected one of {', '.join(OPERATIONS)}")
        p, N = self.p, float(nbytes)
        if op == "fence":
            return 0.0 if p == 1 else math.ceil(math.log2(p)) * self.L()
        if op == "peer_fence":
            return 0.0 if p == 1 else self.L()
        if p == 1:
            return 0.0 if in_place or op == "bcast" or N == 0 else self.C(N)
        every_rank_waits = op in ("allreduce", "allgather", "alltoall")
        return max(self._data_time(op, N, in_place), self.time("fence") if every_rank_waits else self.L())

    def _data_time(self, op: str, N: float, in_place: bool) -> float:
        """The data terms of `op` alone (p >= 2), without the wait for word of them."""
        p, q = self.p, self.p - 1
        own = 0.0 if in_place or N == 0 else self.C(N)
        if op == "allreduce":
            whole = max(self.X2(q * N), q * self.R(N))
            split = max(self.X2(q * N / p), q * self.R(N / p)) + self.X2(q * N / p)
            return min(whole, split)
        if op == "reduce":
            whole = max(self.X1(q * N), q * self.R(N))
            split = max(self.X2(q * N / p), q * self.R(N / p)) + self.X1(q * N / p)
            return min(whole, split)
        if op == "bcast":
            return min(self.X1(N), self.X2(q * N / p))
        if op == "gather":
            return max(self.X1(N), own)
        if op == "scatter":
            return self.X1(N)
        return self.X2(q * N) + own  # allgather, alltoall
