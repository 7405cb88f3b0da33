"""Under mpiexec (tests/test_share.py): a share of 8 MiB from rank 0 during
which one rank kills itself with SIGKILL at a given point; every survivor
writes what it raised into DIR/rank<R>.txt ("PeerDeadError <rank> ...").

    share_kill.py DIR root|reader start|write|scatter|keep

root: rank 0 dies; reader: the last rank. start: before the share's header,
write: while the root writes the data into the node's segment (the root
only: an array that is not one run of its memory), scatter: when the ranks
of the root's node start to copy their parts of it (a contiguous array:
the root has written half of its own part), keep: after the data is
everywhere, before the window is freed.
Every rank writes its pid into DIR/pid<R>.txt first, for the test to look
for what the job's processes left in /dev/shm."""
import os
import signal
import sys
import time
from pathlib import Path

import numpy as np
from mpi4py import MPI

import shmtopo
from shmtopo import sharing

out, victim, point = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
world = MPI.COMM_WORLD
(out / f"pid{world.rank}.txt").write_text(str(os.getpid()))
comm = shmtopo.Comm.from_mpi(world, timeout=60)
dies = world.rank == (0 if victim == "root" else world.size - 1)


def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)


comm.share(np.ones(1 << 20) if world.rank == 0 else None)  # a warm-up share: every rank is in
world.Barrier()
if dies and point == "write":
    original = sharing._Payload.write

    def write(self, dest):
        dest[: len(dest) // 2] = 1  # half written
        die()
    sharing._Payload.write = write
if dies and point == "scatter":
    def scatter(comm, source, dest, root):
        dest[: len(dest) // 2] = 1  # half written
        die()
    sharing.node_scatter = scatter
if dies and point == "keep":
    sharing._keep = die
try:
    if dies and point == "start":
        die()
    data = np.arange(2 << 20, dtype=np.float64)[::2] if point == "write" else np.arange(1 << 20, dtype=np.float64)
    comm.share(data if world.rank == 0 else None)
    result = "no error"
except BaseException as exc:  # noqa: BLE001 - reported
    result = f"{type(exc).__name__} {getattr(exc, 'rank', None)} {exc}"
(out / f"rank{world.rank}.tmp").write_text(result)
os.rename(out / f"rank{world.rank}.tmp", out / f"rank{world.rank}.txt")
# an exit without MPI_Finalize ends the job: first every survivor has its say
deadline = time.monotonic() + 90
while len(list(out.glob("rank*.txt"))) < world.size - 1 and time.monotonic() < deadline:
    time.sleep(0.05)
os._exit(0)
