"""Under mpiexec with the survivors kept alive: rank 0 leaves the program
(argv[1]: "raise" an uncaught exception, or "exit" through sys.exit) with
its comm and windows open, and then sits in MPI_Finalize, which waits for
the others; each other rank waits on one object (argv[2]) and prints
"RESULT <rank> <exception> <exc.rank>". No timeout: a peer that is never
told waits until the test gives up on it."""
import sys

from mpi4py import MPI
import numpy as np

import shmtopo

how, what = sys.argv[1], sys.argv[2]
comm = shmtopo.Comm.from_mpi(MPI.COMM_WORLD)
win = comm.allocate(4096)
mpi_win = MPI.Win.Allocate_shared(4096, 1, comm=MPI.COMM_WORLD)
awin = shmtopo.accelerate(mpi_win)
if comm.rank == 0 and what == "lock":
    awin.Lock(1)  # held as it leaves
MPI.COMM_WORLD.Barrier()
if comm.rank == 0:
    if how == "raise":
        raise RuntimeError("rank 0 leaves with its windows open")
    sys.exit(3)
waits = {
    "fence": win.fence,
    "peer_fence": lambda: win.peer_fence(0),
    "accelerated_fence": awin.Fence,
    "lock": lambda: awin.Lock(1),
    "barrier": comm.barrier,
}
try:
    waits[what]()
    print(f"RESULT {comm.rank} returned None", flush=True)
except shmtopo.ShmtopoError as exc:
    sys.stdout.write(f"RESULT {comm.rank} {type(exc).__name__} {exc.rank}\n")
    sys.stdout.flush()
# a normal exit: the MPI_Finalize rank 0 sits in ends when this rank's comes
# (MPICH's waits for every rank)
