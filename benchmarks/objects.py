"""mpi4py's lower-case collectives of Python objects on an accelerated comm
(shmtopo.accelerate), each next to the same call on the plain mpi4py comm,
interleaved, and next to the floor of a call that meets every rank (one
cache line one way, half the round trip shmtopo.floor measures here).

    mpiexec -n 2 python benchmarks/objects.py [--calls 5000] [--repeats 7]

Prints the load before the run, then per call the median over the
repetitions of the slowest rank's time per call, with its min-max,
accelerated then plain, and the ratios to plain and to the floor.
"""

import numpy as np
from mpi4py import MPI

import shmtopo
from shmtopo import floor
from shmtopo.bench import check_floor_held, mpi_library, print_against_mpi4py, time_against_mpi4py, timing_args

W = MPI.COMM_WORLD


def calls(rank, n):
    """name: (call on a comm, calls per timing relative to --calls)."""
    small = {"dt": 0.1, "steps": 100, "name": "run"}
    big = np.ones(1 << 17)  # 1 MiB
    return {
        "allreduce(float)": (lambda c: c.allreduce(0.5 * rank), 1),
        "allreduce(int, MAX)": (lambda c: c.allreduce(rank, op=MPI.MAX), 1),
        "allreduce(8 doubles)": (lambda c: c.allreduce(np.full(8, 0.5)), 1),
        "bcast(dict)": (lambda c: c.bcast(small if rank == 0 else None), 1),
        "allgather(int)": (lambda c: c.allgather(rank), 1),
        "gather(tuple)": (lambda c: c.gather((rank, "x")), 1),
        "scatter(int)": (lambda c: c.scatter(list(range(n)) if rank == 0 else None), 1),
        "alltoall(int)": (lambda c: c.alltoall(list(range(n))), 1),
        "scan(float)": (lambda c: c.scan(0.5 * rank), 1),
        "barrier()": (lambda c: c.barrier(), 1),
        "bcast(1 MiB array)": (lambda c: c.bcast(big if rank == 0 else None), 0.01),
        "allreduce(1 MiB array)": (lambda c: c.allreduce(big), 0.01),
    }


def main():
    args = timing_args(__doc__, W.rank)
    acomm = shmtopo.accelerate(W)
    shm = acomm.shm_comm
    measured = floor.measure(shm, copies=False)
    one_way = floor.Model(measured).L() if W.size > 1 else 0.0
    table = calls(W.rank, W.size)
    times = time_against_mpi4py(table, acomm, W, args.calls, args.repeats)
    check_floor_held(shm, measured)
    delegated = {k: v for k, v in acomm.shm_stats().items() if v[1]}
    acomm.shm_free()
    if W.rank:
        return
    assert not delegated, delegated
    print(f"{W.size} ranks, {mpi_library()}; "
          f"floor (one line one way) {one_way * 1e6:.3f} us; per call, median (min-max) of {args.repeats}")
    print_against_mpi4py(times, one_way, "accelerated", width=24, digits=2)


if __name__ == "__main__":
    main()
