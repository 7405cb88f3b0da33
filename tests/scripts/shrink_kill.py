"""Under mpiexec (Open MPI, told not to end the job when a rank dies): one
rank, chosen by the seed, is SIGKILLed at a random moment of a random mix
of calls on a Comm.from_mpi; every survivor prints what it raised, shrinks,
runs every collective and window call on the new comm, and prints
"survivor R: <error> <rank> -> R' of N' ok". MPI itself cannot go on without
the dead rank (no ULFM), so survivors leave without MPI_Finalize."""
import os
import random
import signal
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import shmtopo  # noqa: E402
from test_shrink import churn, exercise  # noqa: E402

seed = int(sys.argv[1])
comm = shmtopo.Comm.from_mpi(timeout=30)
rng = random.Random(seed)
victim = rng.randrange(comm.size)
win = comm.allocate(shape=(comm.size,), dtype="int64")
comm.barrier()
if comm.rank == victim:
    threading.Timer(rng.uniform(0, 0.03), os.kill, (os.getpid(), signal.SIGKILL)).start()
try:
    churn(comm, win, seed)
    first = "no error"
except shmtopo.ShmtopoError as exc:
    first = f"{type(exc).__name__} {exc.rank}"
new = comm.shrink()
exercise(new, seed % 1000)
print(f"survivor {comm.rank}: {first} -> {new.rank} of {new.size} ok", flush=True)
new.free()
comm.free()
os._exit(0)
