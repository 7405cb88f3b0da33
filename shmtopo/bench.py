"""Fence benchmark: shmtopo against mpi4py in the same run, as ratios.

Run under mpiexec: ``mpiexec -n 2 python -m shmtopo bench``. Every figure is
the best of three timed runs of the slowest rank's mean time per operation.
"""
from __future__ import annotations

import time
from typing import Callable

import numpy as np


def _time_per_op(mpi, body: Callable[[int], None], seconds: float) -> float:
    """Seconds per operation of body(n), which performs n operations."""
    from mpi4py import MPI

    n = 16
    while True:  # calibrate so that one run takes about `seconds`
        mpi.Barrier()
        t0 = time.perf_counter()
        body(n)
        elapsed = mpi.allreduce(time.perf_counter() - t0, op=MPI.MAX)
        if elapsed > seconds / 8:
            break
        n *= 4
    n = max(1, int(n * seconds / elapsed))
    best = float("inf")
    for _ in range(3):
        mpi.Barrier()
        t0 = time.perf_counter()
        body(n)
        best = min(best, mpi.allreduce(time.perf_counter() - t0, op=MPI.MAX) / n)
    return best


def _loop(fn: Callable[[], None]) -> Callable[[int], None]:
    def body(n: int) -> None:
        for _ in range(n):
            fn()
    return body


def run_fence_bench(seconds: float = 0.3) -> list[tuple[str, float, str]]:
    """Print (on rank 0) and return rows of (operation, µs per op, baseline)."""
    from mpi4py import MPI

    import shmtopo

    world = MPI.COMM_WORLD
    comm = shmtopo.Comm.from_mpi(world)
    mpi = comm.mpi
    rank, size = comm.rank, comm.size
    partner = rank ^ 1 if (rank ^ 1) < size else None
    rows: list[tuple[str, float, str]] = []

    def measure(name: str, body: Callable[[int], None], baseline: str = "") -> None:
        rows.append((name, _time_per_op(mpi, body, seconds) * 1e6, baseline))

    measure("mpi4py Barrier()", _loop(mpi.Barrier))
    mpiwin = MPI.Win.Allocate_shared(8, 1, comm=mpi)
    mpiwin.Fence()
    measure("mpi4py Win.Fence() (Allocate_shared)", _loop(mpiwin.Fence))
    mpiwin.Fence()
    mpiwin.Free()
    empty = np.empty(0, np.uint8)
    if partner is not None:
        measure("mpi4py Sendrecv(0 B) with partner",
                _loop(lambda: mpi.Sendrecv(empty, partner, 0, empty, partner, 0)))

    for alg in ("linear", "rd", "dissemination"):
        with comm.allocate(64, fence=alg) as win:
            measure(f"shmtopo fence {alg}", _loop(win.fence), "mpi4py Win.Fence() (Allocate_shared)")
            measure(f"shmtopo fence {alg}, loop in C", win.fence_loop,
                    "mpi4py Win.Fence() (Allocate_shared)")
    with comm.allocate(64) as win:
        auto = win.fence_algorithm
        measure(f"shmtopo fence auto (= {auto})", _loop(win.fence), "mpi4py Win.Fence() (Allocate_shared)")
        if partner is not None:
            measure("shmtopo peer_fence with partner", _loop(lambda: win.peer_fence(partner)),
                    "mpi4py Sendrecv(0 B) with partner")
            measure("shmtopo peer_fence, loop in C", lambda n: win.peer_fence_loop(partner, n),
                    "mpi4py Sendrecv(0 B) with partner")

    if rank == 0:
        _print_table(rows, comm)
    comm.free()
    return rows


def _print_table(rows, comm) -> None:
    from mpi4py import MPI

    import shmtopo

    times = {name: t for name, t, _ in rows}
    lib = MPI.Get_library_version().strip().splitlines()[0]
    print(f"\nshmtopo {shmtopo.__version__} fence benchmark: {comm.size} ranks on {comm.ncpus} CPUs"
          f"{' (oversubscribed)' if comm.oversubscribed else ''}; {lib}")
    print(f"{'operation':46} {'us/op':>9}  {'ratio':>6}  baseline")
    for name, t, baseline in rows:
        ratio = f"{t / times[baseline]:6.3g}" if baseline in times else ""
        print(f"{name:46} {t:9.3f}  {ratio:>6}  {baseline}")
    print("ratio < 1: shmtopo is faster. Python rows include the Python call, as mpi4py's do.",
          flush=True)
