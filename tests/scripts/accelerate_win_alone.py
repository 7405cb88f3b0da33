"""Under mpiexec -n 2: rank 1 never takes part; rank 0's accelerate(win)
must give up after its timeout (argv[1]: "keyword" timeout=1, "variable"
SHMTOPO_TIMEOUT=1) and print "RESULT <exception>"; then both leave
without MPI."""
import os
import sys
import time

from mpi4py import MPI

import shmtopo

win = MPI.Win.Allocate_shared(64, 1, comm=MPI.COMM_WORLD)
if MPI.COMM_WORLD.Get_rank() == 0:
    try:
        if sys.argv[1] == "keyword":
            shmtopo.accelerate(win, timeout=1)
        else:
            os.environ["SHMTOPO_TIMEOUT"] = "1"
            shmtopo.accelerate(win)
        outcome = "accelerated"
    except Exception as exc:  # noqa: BLE001 - the test reads it
        outcome = type(exc).__name__
    sys.stdout.write(f"RESULT {outcome}\n")
    sys.stdout.flush()
else:
    time.sleep(4)  # alive past rank 0's timeout: it must time out, not hear of a death
os._exit(0)
