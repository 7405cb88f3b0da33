"""Under mpiexec: allocate a window of every backend, then rank 1 kills
itself with SIGKILL; the survivors report the dead peer and exit. The test
then checks that /dev/shm holds nothing of ours.

Rank 0 marks "windows ready" in the file named by argv[1], not on stdout:
when a rank dies, mpiexec tears the job down and may drop output it has
not forwarded yet (MPICH's Hydra did, in CI)."""
import os
import signal
import sys

from mpi4py import MPI

import shmtopo

comm = shmtopo.Comm.from_mpi(MPI.COMM_WORLD)
windows = [comm.allocate(1 << 16, backend=b) for b in ("posix", "memfd", "sysv")]
windows.append(comm.allocate(1 << 16, contiguous=True))
for win in windows:
    win.fence()
if comm.rank == 0:
    with open(sys.argv[1], "w") as marker:
        marker.write("windows ready")
# rank 1 dies only once the marker is written
MPI.COMM_WORLD.Barrier()
if comm.rank == 1:
    os.kill(os.getpid(), signal.SIGKILL)
try:
    windows[0].fence()
except shmtopo.PeerDeadError as exc:
    print(f"rank {comm.rank}: {exc}", flush=True)
    sys.stdout.flush()
    os._exit(0)
