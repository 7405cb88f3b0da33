"""Small calls on a comm that spans nodes, each next to mpi4py's same call
on the same arrays, interleaved: the lower-case barrier, allreduce, reduce
and bcast (one element), and the drop-in's Allreduce and a Bcast of a derived
datatype (handed to MPI after the agreement). Run it on real nodes, or on
simulated ones (SHMTOPO_NODE_SIZE=1: every rank a node of its own).

    SHMTOPO_NODE_SIZE=1 mpiexec -n 2 python benchmarks/across_nodes.py [--calls 5000] [--repeats 7]

Prints the load before the run, then per call the median over the
repetitions of the slowest rank's time per call (min-max), shmtopo then
mpi4py, and their ratio. The last row is the floor of a call across nodes
as shmtopo makes it: one MPI allgather of a few bytes between the leaders.
"""

import numpy as np
from mpi4py import MPI

import shmtopo
from shmtopo.bench import mpi_library, print_against_mpi4py, time_pairs, timing_args

W = MPI.COMM_WORLD


def calls(comm, accelerated, plain):
    x, out = np.ones(1), np.empty(1)
    small, small_out = np.ones(4, np.int8), np.empty(4, np.int8)
    spread = np.zeros(8)
    every_other = MPI.DOUBLE.Create_vector(4, 1, 2).Commit()
    mine, everyone = np.zeros(8, np.uint8), np.zeros(8 * W.size, np.uint8)
    return {
        "barrier": (lambda: comm.barrier(), lambda: plain.Barrier()),
        "allreduce": (lambda: comm.allreduce(x, out=out), lambda: plain.Allreduce(x, out)),
        "reduce": (lambda: comm.reduce(x, "sum", 0, out=out), lambda: plain.Reduce(x, out, MPI.SUM, 0)),
        "bcast": (lambda: comm.bcast(out, 0, out=out), lambda: plain.Bcast(out, 0)),
        "Allreduce int8": (lambda: accelerated.Allreduce(small, small_out), lambda: plain.Allreduce(small, small_out)),
        "Bcast derived": (lambda: accelerated.Bcast([spread, 1, every_other], 0),
                          lambda: plain.Bcast([spread, 1, every_other], 0)),
        "floor: Allgather": (lambda: plain.Allgather(mine, everyone), lambda: plain.Allgather(mine, everyone)),
    }


def main():
    args = timing_args(__doc__, W.rank)
    plain = W.Dup()
    accelerated = shmtopo.accelerate(W.Dup())
    with shmtopo.Comm.from_mpi(W) as comm:
        times = time_pairs(calls(comm, accelerated, plain), W, args.calls, args.repeats)
        nnodes = comm.nnodes
    accelerated.Free()
    plain.Free()
    if W.rank == 0:
        print(f"{W.size} ranks in {nnodes} nodes, {mpi_library()}; per call, median (min-max) of {args.repeats}")
        print_against_mpi4py(times, 0.0, "shmtopo", width=17)


if __name__ == "__main__":
    main()
