"""Under mpiexec (tests/test_accelerate.py): for each culprit (first,
middle, last rank) and each accelerated collective, the culprit describes
its buffer with a derived datatype, so that it alone would hand the call to
MPI. Every rank must raise ShmtopoValueError, and quickly; rank 0 prints
every rank's outcome, one line per call. argv[1]: simulated node size (0:
the real node)."""
import sys
import time

import numpy as np
from mpi4py import MPI

import shmtopo

world = MPI.COMM_WORLD
rank, n = world.Get_rank(), world.Get_size()
node_size = int(sys.argv[1]) or None
acomm = shmtopo.accelerate(world, node_size=node_size, timeout=20)
pair = MPI.DOUBLE.Create_contiguous(2).Commit()
lines = []

for culprit in sorted({0, n // 2, n - 1}):
    odd = rank == culprit

    def buf(a):
        return [a, 2, pair] if odd else [a, MPI.DOUBLE]  # 4 doubles either way

    def vbuf(a):  # 4 doubles per rank either way
        return [a, ([2] * n, [2 * r for r in range(n)]), pair] if odd else [a, MPI.DOUBLE]

    calls = {
        "Bcast": lambda: acomm.Bcast(buf(np.ones(4)), root=0),
        "Reduce": lambda: acomm.Reduce(buf(np.ones(4)), buf(np.zeros(4)), MPI.SUM, root=n - 1),
        "Allreduce": lambda: acomm.Allreduce(buf(np.ones(4)), buf(np.zeros(4))),
        "Allgather": lambda: acomm.Allgather(buf(np.ones(4)), buf(np.zeros(4 * n))),
        "Alltoall": lambda: acomm.Alltoall(buf(np.ones(4 * n)), buf(np.zeros(4 * n))),
        "Reduce_scatter_block": lambda: acomm.Reduce_scatter_block(buf(np.ones(4 * n)), buf(np.zeros(4))),
        "Gather": lambda: acomm.Gather(buf(np.ones(4)), buf(np.zeros(4 * n)), root=n - 1),
        "Allgatherv": lambda: acomm.Allgatherv(buf(np.ones(4)), vbuf(np.zeros(4 * n))),
        "Scan": lambda: acomm.Scan(buf(np.ones(4)), buf(np.zeros(4))),
    }
    for name, call in calls.items():
        t0 = time.monotonic()
        try:
            call()
            outcome = "returned"
        except Exception as exc:  # noqa: BLE001 - reported, the test judges
            outcome = f"{type(exc).__name__} (rank {getattr(exc, 'rank', None)})"
        lines.append(f"rank {rank} culprit {culprit} {name}: {outcome} in {time.monotonic() - t0:.3f} s")

everyone = world.gather(lines, root=0)
if rank == 0:
    print(f"calls {len(calls)}")
    print("\n".join(line for mine in everyone for line in mine), flush=True)
pair.Free()
acomm.shm_free()
