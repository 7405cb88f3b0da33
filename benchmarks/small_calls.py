"""One-element calls of the lower-case API, each next to mpi4py's same call
on the same arrays, interleaved, and next to the floor of a call that meets
every rank (one cache line one way, half the round trip shmtopo.floor
measures here): those with no row in bench --collectives (scan, exscan,
reduce_scatter and the v-variants, out given), and the barrier, bcast and
reduce, whose rows here are the quick check of how ranks wait when they
outnumber the cores (mpiexec -n 4 on 2 cores; SHMTOPO_SPIN_NS and
SHMTOPO_YIELD_NS change the waits).

    mpiexec -n 2 python benchmarks/small_calls.py [--calls 20000] [--repeats 7] [--layers]

Prints the load before the run, then per call the median over the
repetitions of the slowest rank's time per call, with its min-max, shmtopo
then mpi4py, and the ratios to mpi4py and to the floor.

--layers: where an 8-byte allreduce's time goes instead, one layer added
per row (each statement timed in a loop of its own, as timeit does, so no
Python function call wraps it): the loop alone, a C call that returns at
once, a fence, a barrier (the agreement added), the allreduce (its arrays,
the data, the sum), its persistent form and the drop-in's Allreduce.
"""
import argparse
import statistics
import timeit

import numpy as np
from mpi4py import MPI

import shmtopo
from shmtopo import floor
from shmtopo.bench import check_floor_held, mpi_library, print_against_mpi4py, print_load, time_pairs

W = MPI.COMM_WORLD


def calls(comm):
    n, D = W.size, MPI.DOUBLE
    x, out, xs, outn, out1 = np.ones(1), np.empty(1), np.ones(n), np.empty(n), np.empty(1)
    counts, displs = np.ones(n, np.int64), np.arange(n, dtype=np.int64)
    return {
        "barrier": (lambda: comm.barrier(), lambda: W.Barrier()),
        "bcast": (lambda: comm.bcast(out, 0, out=out), lambda: W.Bcast(out, 0)),
        "reduce": (lambda: comm.reduce(x, "sum", 0, out=out), lambda: W.Reduce(x, out, MPI.SUM, 0)),
        "scan": (lambda: comm.scan(x, out=out), lambda: W.Scan(x, out)),
        "exscan": (lambda: comm.exscan(x, out=out), lambda: W.Exscan(x, out)),
        "reduce_scatter": (lambda: comm.reduce_scatter(xs, out=out1), lambda: W.Reduce_scatter_block(xs, out1)),
        "gatherv": (lambda: comm.gatherv(x, counts, displs, 0, out=outn),
                    lambda: W.Gatherv(x, [outn, counts, displs, D], 0)),
        "scatterv": (lambda: comm.scatterv(xs, counts, displs, 0, out=out1),
                     lambda: W.Scatterv([xs, counts, displs, D], out1, 0)),
        "allgatherv": (lambda: comm.allgatherv(x, counts, displs, out=outn),
                       lambda: W.Allgatherv(x, [outn, counts, displs, D])),
        "alltoallv": (lambda: comm.alltoallv(xs, counts, displs, counts, displs, out=outn),
                      lambda: W.Alltoallv([xs, counts, displs, D], [outn, counts, displs, D])),
    }


#: (what the row adds, statement): the layers of a small call, each row one more
LAYERS = [
    ("the loop alone", "pass"),
    ("a C call that returns at once (5 arguments)", "declining(0, None, a, out, 'sum')"),
    ("fence: one C method, post and wait", "fence()"),
    ("barrier: + the agreement (signature posted, checked)", "barrier()"),
    ("allreduce 8 B: + arrays read, data in the line, sum", "allreduce(a, out=out)"),
    ("allreduce 8 B, persistent: arguments read once", "start()"),
    ("Allreduce 8 B, drop-in: + mpi4py's arguments", "Allreduce(a, out)"),
]


def layers(comm, calls, repeats, one_way):
    """Print the time per call of each layer (slowest rank, median and min-max)."""
    from shmtopo import _fastpath
    a, out, send, recv = np.ones(1), np.empty(1), np.ones(1), np.empty(1)
    acomm = shmtopo.accelerate(W)
    win = comm.allocate(64)
    req = comm.allreduce_init(send, recv, "sum")
    names = {"a": a, "out": out, "declining": _fastpath.allreduce, "fence": win.fence, "barrier": comm.barrier,
             "allreduce": comm.allreduce, "start": req.start, "Allreduce": acomm.Allreduce}
    timers = [timeit.Timer(statement, globals=names) for _, statement in LAYERS]
    times = [[] for _ in LAYERS]
    for _ in range(repeats):
        for timer, row in zip(timers, times):
            W.Barrier()
            row.append(W.allreduce(timer.timeit(calls) / calls, op=MPI.MAX))
    req.free()
    win.free()
    acomm.shm_free()
    if W.rank:
        return
    print(f"{W.size} ranks, {mpi_library()}; floor (one line one way) {one_way * 1e6:.3f} us; "
          f"per call, median (min-max) of {repeats}")
    print(f"{'layer':55} {'us':>22} {'x floor':>8}")
    for (what, _), row in zip(LAYERS, times):
        m = statistics.median(row)
        ratio = f"{m / one_way:8.2f}" if one_way else f"{'-':>8}"
        print(f"{what:55} {f'{m * 1e6:.3f} ({min(row) * 1e6:.3f}-{max(row) * 1e6:.3f})':>22} {ratio}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=20000, help="calls per timing (default 20000)")
    p.add_argument("--repeats", type=int, default=7, help="interleaved repetitions (default 7)")
    p.add_argument("--layers", action="store_true", help="where an 8-byte allreduce's time goes, layer by layer")
    args = p.parse_args()
    if W.rank == 0:
        print_load()
    with shmtopo.Comm.from_mpi(W) as comm:
        measured = floor.measure(comm, copies=False)
        one_way = floor.Model(measured).L() if W.size > 1 else 0.0
        if args.layers:
            layers(comm, args.calls, args.repeats, one_way)
            check_floor_held(comm, measured)
            return
        times = time_pairs(calls(comm), W, args.calls, args.repeats)
        check_floor_held(comm, measured)
    if W.rank:
        return
    print(f"{W.size} ranks, {mpi_library()}; "
          f"floor (one line one way) {one_way * 1e6:.3f} us; per call, median (min-max) of {args.repeats}")
    print_against_mpi4py(times, one_way, "shmtopo")


if __name__ == "__main__":
    main()
