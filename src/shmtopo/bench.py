"""Benchmarks: shmtopo against mpi4py in the same run, and both against the
hardware floor measured in that run (shmtopo.floor).

Run under mpiexec: ``mpiexec -n 2 python -m shmtopo bench [--collectives |
--floor]``. Every figure is the median, with its min-max, of ``repeats``
(at least 5) repetitions of the slowest rank's mean time per operation; the
repetitions are interleaved (each runs every row once, shmtopo's and
mpi4py's alternately), so a burst of interference on this machine hits both
sides instead of one. The 1-minute load average is printed before the run,
with a warning when the machine is busy, and the floor's round trip is
measured again after the rows, with a warning when the cores were moved.
"""
from __future__ import annotations

import argparse
import functools
import os
import time
from typing import Any, Callable, Mapping

import numpy as np

from . import __version__
from .accel import accelerate
from ._native import lib
from .comm import Comm
from .floor import REPEATS, SIZES, Floor, Model, Stat, measure, moved

# (operation, µs per op, baseline row, floor seconds)
FenceRow = tuple[str, Stat, str, float]
# (operation, bytes, mpi4py, shmtopo, floor seconds)
CollectiveRow = tuple[str, int, Stat, Stat, float]

# A figure taken with the 1-minute load average at or above this is not
# fit to publish.
BUSY_LOAD = 0.3
# Time of one repetition of one floor probe (the floor has ~60 probes).
FLOOR_SECONDS = 0.02


def print_load() -> float:
    """Print the 1-minute load average (with a warning when busy); returns it."""
    load = os.getloadavg()[0]
    print(f"load average (1 min) before the run: {load:.2f}", flush=True)
    if load >= BUSY_LOAD:
        print(f"WARNING: load average {load:.2f} >= {BUSY_LOAD}: the machine is busy; these figures are "
              "not fit to publish", flush=True)
    return load


def check_floor_held(comm: Comm, floor: Floor, seconds: float = FLOOR_SECONDS, repeats: int = REPEATS) -> None:
    """Collective, after a run's rows: the round trip measured again; rank 0
    prints it beside the one the rows were set against, with a warning when
    the two cores were moved meanwhile."""
    after = measure(comm, min(seconds, FLOOR_SECONDS), repeats, copies=False)
    change = moved(floor, after)
    if comm.rank == 0 and after.round_trip is not None and floor.round_trip is not None:
        print(f"floor again after the rows: the cache line to the other core and back "
              f"{_num(after.round_trip.median * 1e6)} us (before the rows: "
              f"{_num(floor.round_trip.median * 1e6)} us)", flush=True)
        if change:
            print(f"WARNING: {change} during the run: the two cores were moved (a VM's host, another job), so "
                  "'x floor' holds only for the rows timed where the floor was measured; run again", flush=True)


def _calibrate(mpi: Any, body: Callable[[int], None], seconds: float) -> int:
    """n such that body(n), n operations, takes about `seconds` on the
    slowest rank (every rank gets the same n)."""
    from mpi4py import MPI

    n = 16
    while True:
        mpi.Barrier()
        t0 = time.perf_counter()
        body(n)
        elapsed = mpi.allreduce(time.perf_counter() - t0, op=MPI.MAX)
        if elapsed > seconds / 8:
            break
        n *= 4
    return max(1, int(n * seconds / elapsed))


def _run(mpi: Any, body: Callable[[int], None], n: int) -> float:
    """Seconds per operation of body(n) on the slowest rank."""
    from mpi4py import MPI

    mpi.Barrier()
    t0 = time.perf_counter()
    body(n)
    return float(mpi.allreduce(time.perf_counter() - t0, op=MPI.MAX)) / n


def interleaved(mpi: Any, bodies: list[Callable[[int], None]], seconds: float,
                repeats: int = REPEATS) -> list[Stat]:
    """Time every body `repeats` times, round-robin (each repetition runs
    every body once, in order); one Stat (seconds per operation) each."""
    counts = [_calibrate(mpi, body, seconds) for body in bodies]
    samples: list[list[float]] = [[] for _ in bodies]
    for _ in range(repeats):
        for i, body in enumerate(bodies):
            samples[i].append(_run(mpi, body, counts[i]))
    return [Stat.of(s) for s in samples]


def _loop(fn: Callable[[], object]) -> Callable[[int], None]:
    def body(n: int) -> None:
        for _ in range(n):
            fn()
    return body


def _us(s: Stat) -> str:
    """'median (min-max)' in microseconds."""
    return f"{_num(s.median * 1e6)} ({_num(s.lo * 1e6)}-{_num(s.hi * 1e6)})"


def _num(x: float) -> str:
    return f"{x:.3g}" if x < 1000 else f"{x:.0f}"


def _times_floor(t: float, floor: float) -> str:
    """t as a multiple of the floor, in significant digits: on a busy machine
    the floor can measure far above a call, and a fixed number of decimals
    would print a positive ratio as 0."""
    return _num(t / floor) if floor > 0 else "-"


def timing_args(doc: str, rank: int, calls: int = 5000, repeats: int = 7) -> argparse.Namespace:
    """A benchmark's --calls and --repeats (its docstring's first line says
    what it is); rank 0 then prints the load before the run."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--calls", type=int, default=calls, help=f"calls per timing (default {calls})")
    p.add_argument("--repeats", type=int, default=repeats, help=f"interleaved repetitions (default {repeats})")
    args = p.parse_args()
    if rank == 0:
        print_load()
    return args


def time_pairs(table: Mapping[str, tuple[Callable[[], object], Callable[[], object]]], world: Any, calls: int,
               repeats: int, shares: dict[str, float] | None = None) -> dict[str, tuple[list[float], list[float]]]:
    """Collective over ``world``: each name's two calls (shmtopo's, then
    mpi4py's) timed ``calls`` times in turn (times its share, where given),
    ``repeats`` rounds interleaved; per name, the slowest rank's seconds per
    call of each round, shmtopo's then mpi4py's (what print_against_mpi4py
    prints)."""
    from mpi4py import MPI

    times: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in table}
    for _ in range(repeats):
        for name, pair in table.items():
            count = max(1, int(calls * (shares or {}).get(name, 1.0)))
            for side, fn in enumerate(pair):
                fn()  # warm
                world.Barrier()
                t0 = time.perf_counter()
                for _ in range(count):
                    fn()
                times[name][side].append(world.allreduce((time.perf_counter() - t0) / count, op=MPI.MAX))
    return times


def time_against_mpi4py(table: dict[str, tuple[Callable[[Any], None], float]], acomm: Any, world: Any,
                        calls: int, repeats: int) -> dict[str, tuple[list[float], list[float]]]:
    """time_pairs of each ``step(comm)`` of the table (name: (step, share of
    ``calls``)) on the accelerated comm and on the plain one."""
    pairs = {name: (functools.partial(step, acomm), functools.partial(step, world)) for name, (step, _) in table.items()}
    return time_pairs(pairs, world, calls, repeats, {name: share for name, (_, share) in table.items()})


def print_against_mpi4py(times: dict[str, tuple[list[float], list[float]]], one_way: float, ours: str,
                         width: int = 15, digits: int = 3) -> None:
    """The table of a benchmark that times each call both ways: per name,
    shmtopo's and mpi4py's median seconds per call over the repetitions
    (min-max), in µs, their ratio, and shmtopo's as a multiple of one_way
    (the floor: one cache line one way; 0 where there is none)."""
    cells = 2 * digits + 16
    print(f"{'call':{width}} {ours + ' us':>{cells}} {'mpi4py us':>{cells}} {'x mpi4py':>9} {'x floor':>8}")
    for name, (mine, theirs) in times.items():
        a, b = Stat.of(mine), Stat.of(theirs)
        cell = [f"{s.median * 1e6:.{digits}f} ({s.lo * 1e6:.{digits}f}-{s.hi * 1e6:.{digits}f})" for s in (a, b)]
        ratio = f"{_times_floor(a.median, one_way):>8}"
        print(f"{name:{width}} {cell[0]:>{cells}} {cell[1]:>{cells}} {_num(a.median / b.median):>9} {ratio}")


def mpi_library() -> str:
    """The first line of the MPI library's version (Open MPI ends its string
    with a NUL, which would end up in tables and titles)."""
    from mpi4py import MPI

    return str(MPI.Get_library_version()).replace("\0", "").strip().splitlines()[0].strip()


def _title(comm: Comm, what: str) -> str:

    lib = mpi_library()
    return (f"\nshmtopo {__version__} {what}: {comm.size} ranks on {comm.ncpus} CPUs"
            f"{' (oversubscribed)' if comm.oversubscribed else ''}; {lib}")


# -- the floor -----------------------------------------------------------------

def _cell(s: Stat | None, nbytes: int) -> str:
    if s is None:
        return "-"
    rate = f"{nbytes / s.median / 1e9:.3g}" if s.median > 0 else "inf"
    return f"{_us(s)} {rate}"


def print_floor(floor: Floor, repeats: int = REPEATS) -> None:
    """The measured pieces, as a table."""
    print(f"\nfloor, measured here (in C; median (min-max) of {repeats} interleaved repetitions): "
          + "; ".join(floor.placement))
    if floor.oversubscribed:
        print("  the node is oversubscribed: the model assumes a core per rank, which this run lacks")
    if floor.round_trip is not None:
        rt = floor.round_trip
        print(f"  cache line to the other core and back: {_us(rt)} us; one way (L) {_num(rt.median / 2 * 1e6)} us")
    else:
        print("  cache line round trip, copies across cores: need 2 ranks")
    if floor.local:
        print(f"  {'bytes':>9}  {'across, one way: us (min-max) GB/s':>36}  {'across, both at once':>32}  "
              f"{'local, in cache':>30}  {'local, from DRAM':>30}  {'rewrite what the other read':>30}  "
              f"{'across by single copy (CMA)':>30}")
        for n in sorted(floor.local):
            print(f"  {n:>9}  {_cell(floor.across_one.get(n), n):>36}  {_cell(floor.across_both.get(n), n):>32}  "
                  f"{_cell(floor.local.get(n), n):>30}  {_cell(floor.dram.get(n), n):>30}  "
                  f"{_cell(floor.rewrite.get(n), n):>30}  {_cell(floor.across_cma.get(n), n):>30}")
        print("  across: one core copies what the other has just written (both at once: each the other's, "
              "the slower side; GB/s per direction)")
        print("  rewrite: a core fills its buffer again (memset) right after the other core copied it, so each "
              "line is first taken back from the other core's cache: what reusing a shared buffer costs")
        print("  single copy: across, one way, by process_vm_readv out of the writer's own memory, as the "
              "collectives copy large private arrays (- where the comm has no single copy)")
    if floor.reduce:
        rates = ", ".join(f"{name} {floor.reduce_bytes / s.median / 1e9:.3g} "
                          f"({floor.reduce_bytes / s.hi / 1e9:.3g}-{floor.reduce_bytes / s.lo / 1e9:.3g})"
                          for name, s in floor.reduce.items())
        print(f"  reduction kernel (sum, dst = a + b, {floor.reduce_bytes >> 10} KiB each, in cache), GB/s of "
              f"one input: {rates}")


def print_floor_model(model: Model, sizes: list[int]) -> None:
    """The floor per operation and size, for this comm's ranks."""
    ops = ("allreduce", "bcast", "reduce", "allgather")
    print(f"\nfloor per operation (model, {model.p} ranks, float64; us):")
    if model.p > 1:
        print(f"  fence {_num(model.time('fence') * 1e6)}, peer fence {_num(model.time('peer_fence') * 1e6)}")
    print(f"  {'bytes':>9} " + " ".join(f"{op:>10}" for op in ops))
    for n in sizes:
        print(f"  {n:>9} " + " ".join(f"{_num(model.time(op, n) * 1e6):>10}" for op in ops))
    print("  the model: README, section Benchmarks (and shmtopo.floor.Model)")


def run_floor_bench(seconds: float = FLOOR_SECONDS, repeats: int = REPEATS,
                    max_bytes: int = 8 << 20) -> Floor:
    """Collective: measure the floor and print it (rank 0) with the model."""
    from mpi4py import MPI


    comm = Comm.from_mpi(MPI.COMM_WORLD)
    try:
        if comm.rank == 0:
            print_load()
        sizes = [n for n in SIZES if n <= max_bytes]
        floor = measure(comm, seconds, repeats, sizes)
        if comm.rank == 0:
            print(_title(comm, "hardware floor"))
            print_floor(floor, repeats)
            print_floor_model(Model(floor), sizes)
    finally:
        comm.free()
    return floor


# -- fences --------------------------------------------------------------------

def run_fence_bench(seconds: float = 0.3, repeats: int = REPEATS) -> list[tuple[str, Stat, str, float]]:
    """Print (on rank 0) and return rows of (operation, Stat, baseline, floor seconds)."""
    from mpi4py import MPI


    comm = Comm.from_mpi(MPI.COMM_WORLD)
    if comm.rank == 0:
        print_load()
    floor = measure(comm, min(seconds, FLOOR_SECONDS), repeats, copies=False)
    model = Model(floor)
    mpi = comm.mpi
    rank, size = comm.rank, comm.size
    partner = rank ^ 1 if (rank ^ 1) < size else None
    pairs = size > 1  # with an odd size the last rank has no partner and idles
    idle = lambda n: None  # noqa: E731 - every rank must take part in each measurement
    fence_base, pair_base = "mpi4py Win.Fence() (Allocate_shared)", "mpi4py Sendrecv(0 B) with partner"
    mpiwin = MPI.Win.Allocate_shared(8, 1, comm=mpi)
    mpiwin.Fence()
    wins = {alg: comm.allocate(64, fence=alg) for alg in ("linear", "rd", "dissemination", None)}
    auto = wins[None]
    empty = np.empty(0, np.uint8)
    # (name, body, baseline, floor operation)
    cases: list[tuple[str, Callable[[int], None], str, str]] = [
        ("mpi4py Barrier()", _loop(mpi.Barrier), "", "fence"),
        (fence_base, _loop(mpiwin.Fence), "", "fence"),
    ]
    if pairs:
        cases.append((pair_base, _loop(lambda: mpi.Sendrecv(empty, partner, 0, empty, partner, 0))
                      if partner is not None else idle, "", "peer_fence"))
    for alg in ("linear", "rd", "dissemination"):
        cases.append((f"shmtopo fence {alg}", _loop(wins[alg].fence), fence_base, "fence"))
        cases.append((f"shmtopo fence {alg}, loop in C", wins[alg].fence_loop, fence_base, "fence"))
    cases.append((f"shmtopo fence auto (= {auto.fence_algorithm})", _loop(auto.fence), fence_base, "fence"))
    if pairs:
        cases.append(("shmtopo peer_fence with partner",
                      _loop(lambda: auto.peer_fence(partner)) if partner is not None else idle,
                      pair_base, "peer_fence"))
        cases.append(("shmtopo peer_fence, loop in C",
                      (lambda n: auto.peer_fence_loop(partner, n)) if partner is not None else idle,
                      pair_base, "peer_fence"))
    try:
        stats = interleaved(mpi, [body for _, body, _, _ in cases], seconds, repeats)
    finally:
        for win in wins.values():
            win.free()
        mpiwin.Fence()
        mpiwin.Free()
    rows = [(name, stat, base, model.time(op)) for (name, _, base, op), stat in zip(cases, stats)]
    if rank == 0:
        print(_title(comm, "fence benchmark"))
        print_floor(floor, repeats)
        _print_fence_table(rows, floor, repeats)
    check_floor_held(comm, floor, seconds, repeats)
    comm.free()
    return rows


def _print_fence_table(rows: list[FenceRow], floor: Floor, repeats: int) -> None:
    times = {name: stat.median for name, stat, _, _ in rows}
    print(f"\n{'operation':46} {'us/op (min-max)':>24} {'x floor':>8} {'ratio':>6}  baseline")
    for name, stat, baseline, fl in rows:
        ratio = f"{stat.median / times[baseline]:6.3g}" if baseline in times else ""
        print(f"{name:46} {_us(stat):>24} {_times_floor(stat.median, fl):>8} {ratio:>6}  {baseline}")
    print(f"median (min-max) of {repeats} interleaved repetitions; ratio < 1: shmtopo is faster; x floor: the\n"
          "time over the floor (a fence: ceil(log2 p) lines one way; a peer fence or Sendrecv: one).\n"
          "Python rows include the Python call, as mpi4py's do.", flush=True)
    if floor.round_trip is not None:
        rt = floor.round_trip.median
        fence = times[next(name for name, *_ in rows if name.startswith("shmtopo fence auto"))]
        base = times["mpi4py Win.Fence() (Allocate_shared)"]
        print(f"target fence <= 0.5 x mpi4py Win.Fence() and <= 3 x the round trip ({rt * 1e6:.3g} us): "
              f"measured {fence / base:.2f} x Win.Fence(), {fence / rt:.2f} x the round trip", flush=True)


# -- shared windows: shmtopo.accelerate(win) against MPI's own -----------------------

#: (operation, mpi4py on MPI's window, the same call on the accelerated window, floor seconds)
WindowRow = tuple[str, Stat, Stat, float]
# The targets: the accelerated call's time over MPI's, at most.
WINDOW_TARGETS = {"Fence()": 0.5, "Fetch_and_op + Flush, 8 B": 0.3, "Lock_all() ... Unlock_all()": 0.3,
                  "Put 8 B": 0.3, "Get 8 B": 0.3, "Put 1 MiB": 1.0, "Get 1 MiB": 1.0}


def run_window_bench(seconds: float = 0.1, repeats: int = REPEATS) -> list[WindowRow]:
    """Every rank calls the same thing on a window of Allocate_shared, plain
    and accelerated (shmtopo.accelerate(win)), in interleaved rounds; the
    one-sided calls target the next rank. Print (rank 0) and return the rows."""
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    comm = Comm.from_mpi(world)
    if comm.rank == 0:
        print_load()
    floor = measure(comm, min(seconds, FLOOR_SECONDS), repeats, copies=True)
    model = Model(floor)
    rank, size = world.Get_rank(), world.Get_size()
    target = (rank + 1) % size
    big = 1 << 20
    plain = MPI.Win.Allocate_shared(big, 1, comm=world)
    fast = accelerate(MPI.Win.Allocate_shared(big, 1, comm=world))
    one, got = np.ones(1, np.int64), np.zeros(1, np.int64)
    small, large = np.zeros(1, np.int64), np.zeros(big, np.uint8)
    line = 2 * model.L() if size > 1 else 0.0  # an atomic on another core's line: there and back

    def epochs(win: Any) -> Callable[[int], None]:
        return _loop(lambda: (win.Lock_all(), win.Unlock_all()))

    def locked(win: Any, call: Callable[[Any], object]) -> Callable[[int], None]:
        def body(n: int) -> None:
            win.Lock_all()
            for _ in range(n):
                call(win)
            win.Unlock_all()
        return body

    cases: list[tuple[str, Callable[[Any], Callable[[int], None]], float]] = [
        ("Fence()", lambda w: _loop(w.Fence), model.time("fence") if size > 1 else 0.0),
        ("Lock_all() ... Unlock_all()", epochs, 0.0),
        ("Lock(excl) ... Unlock()", lambda w: _loop(lambda: (w.Lock(target), w.Unlock(target))), line),
        ("Fetch_and_op + Flush, 8 B", lambda w: locked(w, lambda w: (w.Fetch_and_op(one, got, target, 8),
                                                                     w.Flush(target))), line),
        ("Accumulate SUM 8 B", lambda w: locked(w, lambda w: w.Accumulate(one, target, 16)), line),
        ("Compare_and_swap 8 B", lambda w: locked(w, lambda w: w.Compare_and_swap(one, got, small, target, 24)),
         line),
        ("Put 8 B", lambda w: locked(w, lambda w: w.Put(small, target, 32)), 0.0),
        ("Get 8 B", lambda w: locked(w, lambda w: w.Get(small, target, 32)), line),
        ("Put 1 MiB", lambda w: locked(w, lambda w: w.Put(large, target)), model.X1(big) if size > 1 else 0.0),
        ("Get 1 MiB", lambda w: locked(w, lambda w: w.Get(large, target)), model.X1(big) if size > 1 else 0.0),
    ]
    plain.Fence()
    fast.Fence()
    bodies = [make(w) for _, make, _ in cases for w in (plain, fast)]
    try:
        stats = interleaved(world, bodies, seconds, repeats)
    finally:
        plain.Free()
        fast.Free()
    rows = [(name, stats[2 * i], stats[2 * i + 1], fl) for i, (name, _, fl) in enumerate(cases)]
    if rank == 0:
        print(_title(comm, "shared-window benchmark (shmtopo.accelerate(win) against MPI's window)"))
        print(f"\n{'operation':30} {'mpi4py us (min-max)':>24} {'accelerated us (min-max)':>26} {'ratio':>6} "
              f"{'x floor':>8} {'target':>7}")
        for name, mpi_stat, shm_stat, fl in rows:
            target_ratio = WINDOW_TARGETS.get(name)
            print(f"{name:30} {_us(mpi_stat):>24} {_us(shm_stat):>26} {shm_stat.median / mpi_stat.median:6.2f} "
                  f"{_times_floor(shm_stat.median, fl):>8} {'' if target_ratio is None else target_ratio:>7}")
        print(f"median (min-max) of {repeats} interleaved repetitions, per call, from Python on both sides; "
              "ratio < 1: the\naccelerated window is faster; the one-sided calls target the next rank inside "
              "Lock_all; floor: an atomic\nor a small Get, one cache line there and back; 1 MiB, one core "
              "copying what another wrote (X1).", flush=True)
    check_floor_held(comm, floor, seconds, repeats)
    comm.free()
    return rows


# -- collectives ---------------------------------------------------------------

# 8 B ... 32 MiB in steps of 4 (cut at max_bytes), plus 1 MiB, a size the targets name
COLLECTIVE_SIZES = sorted({8 * 4**k for k in range(12)} | {1 << 20})
_ROW_ORDER = ["allreduce", "allreduce persistent", "allreduce in window", "bcast", "bcast in window",
              "reduce", "allgather", "allgather in window", "gather", "scatter", "alltoall"]
# The drop-in's upper-case calls (shmtopo.accelerate), after the lower-case rows
# they run; their mpi4py figure is the raw call on the same buffers in the same rounds.
DROPIN = " (drop-in)"
_DROPIN_ROWS = {"allreduce": "Allreduce", "bcast": "Bcast", "reduce": "Reduce", "allgather": "Allgather",
                "gather": "Gather", "scatter": "Scatter", "alltoall": "Alltoall"}
_ROW_ORDER += [f"{upper}{DROPIN}" for upper in _DROPIN_ROWS.values()]
# Small bcast and reduce on a second comm made with SHMTOPO_RUN_AHEAD=1 (where
# the first does not run ahead), against the plain mpi4py calls of the same rounds
AHEAD = " (run ahead)"
AHEAD_MAX = lib.SHMTOPO_AHEAD_MAX  # bytes, up to which calls run ahead
_ROW_ORDER += [f"bcast{AHEAD}", f"reduce{AHEAD}"]


def _floor_op(name: str) -> tuple[str, bool]:
    """The model's operation of a row, and whether the row works in place."""
    op = name.split()[0].lower()
    return op, name in ("allreduce in window", "bcast", "bcast in window", f"Bcast{DROPIN}", f"bcast{AHEAD}")


def run_collective_bench(seconds: float = 0.1, max_bytes: int = 16 << 20,
                         plot: str | None = None, repeats: int = REPEATS) -> list[CollectiveRow]:
    """shmtopo's window collectives against mpi4py's in one run (float64
    data, preallocated outputs on both sides), after the floor. Prints a
    table on rank 0 and, with `plot`, writes a PNG of latency against size
    with the floor as a line. Rows: (operation, bytes, mpi4py Stat, shmtopo
    Stat, floor seconds)."""
    from mpi4py import MPI


    world = MPI.COMM_WORLD
    comm = Comm.from_mpi(world)
    acomm = accelerate(world)  # the drop-in's rows
    ahead = _comm_running_ahead(world) if comm.size > 1 and not comm.runs_ahead else None
    if comm.rank == 0:
        print_load()
    mpi = comm.mpi
    sizes = [n for n in COLLECTIVE_SIZES if n <= max_bytes]
    floor = measure(comm, min(seconds, FLOOR_SECONDS), repeats, [n for n in SIZES if n <= max(sizes)])
    model = Model(floor)
    if comm.rank == 0:
        print(_title(comm, "collectives"))
        print_floor(floor, repeats)
    rows = []
    is_root = comm.rank == 0
    # The in-window rows: every rank's array is its part of a window of the
    # comm; allreduce and bcast put the result there too (against mpi4py with
    # MPI.IN_PLACE on a private array), allgather into a private array.
    win = comm.allocate(shape=(max(sizes) // 8,), dtype=np.float64)
    for nbytes in sizes:
        count = max(1, nbytes // 8)
        a = np.full(count, comm.rank + 1.0)
        out = np.empty_like(a)
        gathered = np.empty((comm.size, count))
        swapped = np.empty_like(gathered)  # gather, scatter, alltoall: count elements per rank's block
        private, shared = np.zeros(count), win.local[:count]
        shared[:] = 0.0  # sums in place stay 0: no overflow over many repetitions
        cases = {
            "allreduce": (lambda: mpi.Allreduce(a, out), lambda: comm.allreduce(a, out=out)),
            "bcast": (lambda: mpi.Bcast(out, root=0), lambda: comm.bcast(out, root=0, out=out)),
            "reduce": (lambda: mpi.Reduce(a, out, root=0),
                       lambda: comm.reduce(a, root=0, out=out if is_root else None)),
            "allgather": (lambda: mpi.Allgather(a, gathered), lambda: comm.allgather(a, out=gathered)),
            "allreduce in window": (lambda: mpi.Allreduce(MPI.IN_PLACE, private),
                                    lambda: comm.allreduce(shared, out=shared)),
            "bcast in window": (lambda: mpi.Bcast(private, root=0),
                                lambda: comm.bcast(shared, root=0, out=shared)),
            "allgather in window": (lambda: mpi.Allgather(a, gathered),
                                    lambda: comm.allgather(shared, out=gathered)),
            "gather": (lambda: mpi.Gather(a, gathered, root=0), lambda: comm.gather(a, 0, out=gathered)),
            "scatter": (lambda: mpi.Scatter(gathered, out, root=0), lambda: comm.scatter(gathered, 0, out=out)),
            "alltoall": (lambda: mpi.Alltoall(gathered, swapped), lambda: comm.alltoall(gathered, out=swapped)),
        }
        # the drop-in: mpi4py's own calls, word for word, on the accelerated comm
        dropin: dict[str, Callable[[], object]] = {
            "allreduce": lambda: acomm.Allreduce(a, out),
            "bcast": lambda: acomm.Bcast(out, root=0),
            "reduce": lambda: acomm.Reduce(a, out, root=0),
            "allgather": lambda: acomm.Allgather(a, gathered),
            "gather": lambda: acomm.Gather(a, gathered, root=0),
            "scatter": lambda: acomm.Scatter(gathered, out, root=0),
            "alltoall": lambda: acomm.Alltoall(gathered, swapped),
        }
        if ahead is not None and nbytes <= AHEAD_MAX:
            dropin["bcast" + AHEAD] = lambda: ahead.bcast(out, root=0, out=out)
            dropin["reduce" + AHEAD] = lambda: ahead.reduce(a, root=0, out=out if is_root else None)
        with comm.allreduce_init(a, out) as req:
            # mpi4py and shmtopo alternate: (mpi, shm) per case; the persistent
            # row's and the drop-in rows' baselines are the plain mpi4py calls,
            # timed in the same rounds
            bodies = [_loop(fn) for pair in cases.values() for fn in pair] + [_loop(req.start)]
            bodies += [_loop(fn) for fn in dropin.values()]
            stats = interleaved(mpi, bodies, seconds, repeats)
        for i, name in enumerate(cases):
            op, in_place = _floor_op(name)
            rows.append((name, nbytes, stats[2 * i], stats[2 * i + 1], model.time(op, nbytes, in_place)))
        rows.append(("allreduce persistent", nbytes, stats[0], stats[2 * len(cases)],
                     model.time("allreduce", nbytes)))
        for j, lower in enumerate(dropin):
            i = list(cases).index(lower.split()[0])
            name = lower if lower.endswith(AHEAD) else f"{_DROPIN_ROWS[lower]}{DROPIN}"
            op, in_place = _floor_op(name)
            rows.append((name, nbytes, stats[2 * i], stats[2 * len(cases) + 1 + j], model.time(op, nbytes, in_place)))
    win.free()
    acomm.shm_free()
    if ahead is not None:
        ahead.free()
    if comm.rank == 0:
        _print_collective_table(rows, repeats)
        _print_targets(rows)
        if plot:
            lib = mpi_library()
            _plot(rows, plot, f"{comm.size} ranks, " + " ".join(lib.split(",")[0].split()))
    check_floor_held(comm, floor, seconds, repeats)
    comm.free()
    return rows


def _comm_running_ahead(world: Any) -> Comm:
    """A second comm of the same ranks with SHMTOPO_RUN_AHEAD=1 (read at creation)."""

    before = os.environ.get("SHMTOPO_RUN_AHEAD")
    os.environ["SHMTOPO_RUN_AHEAD"] = "1"
    try:
        return Comm.from_mpi(world)
    finally:
        if before is None:
            del os.environ["SHMTOPO_RUN_AHEAD"]
        else:
            os.environ["SHMTOPO_RUN_AHEAD"] = before


def _print_collective_table(rows: list[CollectiveRow], repeats: int) -> None:
    print(f"\n{'operation':22} {'bytes':>9} {'floor us':>9} {'mpi4py us (min-max)':>26} {'x floor':>8} "
          f"{'shmtopo us (min-max)':>26} {'x floor':>8} {'ratio':>6} {'GB/s (shm)':>10}")
    for name, nbytes, tm, ts, fl in sorted(rows, key=lambda r: (r[1], _ROW_ORDER.index(r[0]))):
        print(f"{name:22} {nbytes:9d} {_num(fl * 1e6):>9} {_us(tm):>26} {_times_floor(tm.median, fl):>8} "
              f"{_us(ts):>26} {_times_floor(ts.median, fl):>8} {ts.median / tm.median:6.2f} "
              f"{nbytes / ts.median / 1e9:10.2f}")
    print(f"median (min-max) of {repeats} interleaved repetitions (mpi4py and shmtopo alternately); ratio =\n"
          "shmtopo time / mpi4py time (< 1: shmtopo faster); x floor = time / the floor of the operation (the\n"
          "model: README); persistent = allreduce_init + start(); in window = the input is this rank's part of\n"
          "a shmtopo window (zero-copy path); allreduce and bcast there also receive in place, against mpi4py\n"
          "with MPI.IN_PLACE on a private array; (drop-in) = mpi4py's upper-case call on shmtopo.accelerate(\n"
          "COMM_WORLD), against the same call on COMM_WORLD; (run ahead) = a comm made with\n"
          "SHMTOPO_RUN_AHEAD=1 (README: Running ahead)", flush=True)
    _print_dropin_overhead(rows)


def _print_dropin_overhead(rows: list[CollectiveRow]) -> None:
    """The drop-in's cost over shmtopo's own API, at the smallest size: the
    difference of the medians of the two rows, measured in the same rounds."""
    found = {(name, n): ts for name, n, _, ts, _ in rows}
    sizes = sorted(n for name, n, *_ in rows if name == "allreduce")
    if not sizes:
        return
    n = sizes[0]
    parts = [f"{upper} {(found[f'{upper}{DROPIN}', n].median - found[lower, n].median) * 1e6:+.3f}"
             for lower, upper in _DROPIN_ROWS.items() if (lower, n) in found and (f"{upper}{DROPIN}", n) in found]
    print(f"drop-in over shmtopo's own API at {n} B, us per call (median difference): " + ", ".join(parts)
          + "; target <= 0.2", flush=True)


# The targets of issue 13, 2 ranks: (row, bytes, what is compared, bound).
TARGETS = [("allreduce", 8, "mpi4py", 0.4),
           ("allreduce in window", 1 << 20, "floor", 1.3),
           ("allreduce", 1 << 20, "floor", 1.6),
           ("bcast", 8 << 20, "mpi4py", 1 / 1.5)]


def _print_targets(rows: list[CollectiveRow]) -> None:
    """One line per target that this run's sizes reach."""
    found = {(name, n): (tm, ts, fl) for name, n, tm, ts, fl in rows}
    for name, nbytes, against, bound in TARGETS:
        if (name, nbytes) not in found:
            continue
        tm, ts, fl = found[name, nbytes]
        if against == "mpi4py":
            measured = f"{ts.median / tm.median:.2f} x mpi4py"
            if name == "bcast":
                measured += f" ({tm.median / ts.median:.2f}x its throughput)"
        else:
            measured = f"{_times_floor(ts.median, fl)} x floor"
        print(f"target {name} {nbytes} B: <= {bound:.2f} x {against}; measured {measured}")


def _plot(rows: list[CollectiveRow], path: str, title: str) -> list[list[str]]:
    """Write the PNG; returns each panel's legend labels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = ["allreduce", "bcast", "reduce", "allgather"]
    fig, axes = plt.subplots(1, 4, figsize=(16, 4), sharey=False)
    for ax, name in zip(axes, names):
        data = [(n, tm.median, ts.median, fl) for op, n, tm, ts, fl in rows if op == name]
        sizes = [d[0] for d in data]
        ax.loglog(sizes, [d[1] * 1e6 for d in data], "o-", label="mpi4py")
        ax.loglog(sizes, [d[2] * 1e6 for d in data], "s-", label="shmtopo")
        if name == "allreduce":
            pers = [ts.median * 1e6 for op, n, tm, ts, fl in rows if op == "allreduce persistent"]
            ax.loglog(sizes, pers, "^--", label="shmtopo persistent")
        dropin = [(n, ts.median * 1e6) for op, n, tm, ts, fl in rows if op == f"{_DROPIN_ROWS[name]}{DROPIN}"]
        if dropin:
            ax.loglog([d[0] for d in dropin], [d[1] for d in dropin], "v:", label="shmtopo drop-in (upper case)")
        ahead = [(n, ts.median * 1e6) for op, n, tm, ts, fl in rows if op == f"{name}{AHEAD}"]
        if ahead:
            ax.loglog([d[0] for d in ahead], [d[1] for d in ahead], "P-.", label="shmtopo run ahead")
        window = [(n, tm.median, ts.median) for op, n, tm, ts, fl in rows if op == f"{name} in window"]
        if window and name != "allgather":  # allgather's baseline is the plain call above
            ax.loglog([w[0] for w in window], [w[1] * 1e6 for w in window], "o:", color="C0", alpha=0.5,
                      label="mpi4py IN_PLACE")
        if window:
            ax.loglog([w[0] for w in window], [w[2] * 1e6 for w in window], "D--", label="shmtopo in window")
        floor = [(d[0], d[3] * 1e6) for d in data if d[3] > 0]
        if floor:
            ax.loglog([f[0] for f in floor], [f[1] for f in floor], "k-", linewidth=2, alpha=0.6,
                      label="floor (measured here)")
        ax.legend(fontsize=7)
        ax.set_title(name)
        ax.set_xlabel("bytes")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("latency (us), median of the repetitions")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    labels = [ax.get_legend_handles_labels()[1] for ax in axes]
    plt.close(fig)
    return labels
