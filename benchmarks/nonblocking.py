"""Nonblocking collectives on an accelerated comm (shmtopo.accelerate), and
the own API's (comm.iallreduce: the rows named "own"), each next to the
same call on the plain mpi4py comm, interleaved: waited at once (what the
request costs), and a 1 MiB Iallreduce overlapped with 1 ms of sleep (a
wait that leaves the CPU free, as for I/O) and with about 1 ms of
computation (numpy, which lets the progress thread run beside it).

    mpiexec -n 2 python benchmarks/nonblocking.py [--calls 2000] [--repeats 7]

Prints the load before the run, then per row the median over the
repetitions of the slowest rank's time per iteration, with its min-max,
accelerated then plain, and the ratio. Each overlap row comes after its
floor: the sleep or the computation alone, and the blocking 1 MiB
Allreduce alone (an overlap is perfect where the row equals the larger).
With as many ranks as cores, the computation and the progress thread
share each core: the Allreduce's own CPU time then adds to the row.
"""
import argparse
import os
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # the computation takes one core per rank

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

import shmtopo  # noqa: E402
from shmtopo import progress  # noqa: E402
from shmtopo.bench import mpi_library, print_against_mpi4py, print_load, time_against_mpi4py  # noqa: E402

W = MPI.COMM_WORLD
MIB = 1 << 17  # doubles in 1 MiB


class Work:
    """About `seconds` of computation that releases the GIL (numpy ufuncs
    on 256 KiB arrays), the same number of passes on every rank."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.a, self.b, self.c = (np.random.default_rng(1).random(1 << 15) for _ in range(3))
        passes = 1
        while True:
            t0 = time.perf_counter()
            self.run(passes)
            took = time.perf_counter() - t0
            if took > seconds / 4:
                break
            passes *= 2
        self.passes = W.allreduce(max(1, round(passes * seconds / took)), op=MPI.MAX)

    def run(self, passes: int | None = None) -> None:
        for _ in range(self.passes if passes is None else passes):
            np.multiply(self.a, self.b, out=self.c)
            np.add(self.c, self.a, out=self.c)


def rows(rank: int, work: Work, own: shmtopo.Comm) -> dict:
    """name: (one iteration on a comm, iterations per timing relative to
    --calls). The rows named "own" run shmtopo's own API (``own``) where the
    others run the accelerated comm, next to the same mpi4py calls."""
    small, small_out = np.full(1, 0.5 * rank), np.empty(1)
    big, big_out = np.full(MIB, 0.5 * rank), np.empty(MIB)
    bcast = np.zeros(1)

    def overlapped(c, run=work.run):
        request = c.Iallreduce(big, big_out)
        run()
        request.Wait()

    def sleep():
        time.sleep(work.seconds)

    def own_small(c):
        if c is W:
            c.Iallreduce(small, small_out).Wait()
        else:
            own.iallreduce(small, out=small_out).wait()

    def own_overlapped(c, run):
        if c is W:
            return overlapped(c, run)
        request = own.iallreduce(big, out=big_out)
        run()
        request.wait()

    return {
        "Iallreduce 8 B, Wait": (lambda c: c.Iallreduce(small, small_out).Wait(), 1),
        "Ibcast 8 B, Wait": (lambda c: c.Ibcast(bcast, root=0).Wait(), 1),
        "Ibarrier, Wait": (lambda c: c.Ibarrier().Wait(), 1),
        "Iallreduce 1 MiB, Wait": (lambda c: c.Iallreduce(big, big_out).Wait(), 0.05),
        "Allreduce 1 MiB alone": (lambda c: c.Allreduce(big, big_out), 0.05),
        "sleep alone": (lambda c: sleep(), 0.05),
        "Iallreduce 1 MiB + sleep, Wait": (lambda c: overlapped(c, sleep), 0.05),
        "compute alone": (lambda c: work.run(), 0.05),
        "Iallreduce 1 MiB + compute, Wait": (overlapped, 0.05),
        "own iallreduce 8 B, wait": (lambda c: own_small(c), 1),
        "own iallreduce 1 MiB + sleep, wait": (lambda c: own_overlapped(c, sleep), 0.05),
        "own iallreduce 1 MiB + compute": (lambda c: own_overlapped(c, work.run), 0.05),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=2000, help="iterations per timing of the small rows (default 2000)")
    p.add_argument("--repeats", type=int, default=7, help="interleaved repetitions (default 7)")
    p.add_argument("--compute", type=float, default=1e-3, help="seconds of computation to overlap (default 0.001)")
    p.add_argument("--start-at-once", action="store_true",
                   help="the progress thread takes a call after the short grace even where the node has no spare "
                        "core (as it does where it has one)")
    args = p.parse_args()
    if args.start_at_once:
        progress.GRACE_WITHOUT_SPARE_CORES = progress.GRACE
    if W.rank == 0:
        print_load()
    acomm = shmtopo.accelerate(W)
    own = shmtopo.Comm.from_mpi(W)
    work = Work(args.compute)
    table = rows(W.rank, work, own)
    times = time_against_mpi4py(table, acomm, W, args.calls, args.repeats)
    delegated = {k: v for k, v in acomm.shm_stats().items() if v[1]}
    own.free()
    acomm.shm_free()
    if W.rank:
        return
    assert not delegated, delegated
    print(f"{W.size} ranks, {mpi_library()}; per iteration, median (min-max) of {args.repeats}; "
          f"computation: {work.passes} passes of numpy on 3 x 256 KiB; the thread takes a call after "
          f"{progress.GRACE_WITHOUT_SPARE_CORES if 2 * W.size > (os.cpu_count() or 1) else progress.GRACE:g} s")
    print_against_mpi4py(times, 0.0, "accelerated", width=34, digits=1)


if __name__ == "__main__":
    main()
