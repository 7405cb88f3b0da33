"""Under mpiexec -n 2 with SHMTOPO_NODE_SIZE=1 (tests/test_share.py, opt-in):
a 2.1 GiB array built in place on node 0 and shared with node 1, beyond
what one MPI call's int count can carry; each rank checks a sample and a
checksum of every 64 MiB block, and prints "large ok"."""
import numpy as np
from mpi4py import MPI

import shmtopo

world = MPI.COMM_WORLD
n = (2 << 30) + (100 << 20)  # 2.1 GiB
with shmtopo.Comm.from_mpi(world) as comm:
    assert comm.nnodes == 2
    table = comm.shared_array(n // 8, np.int64)
    if world.rank == 0:
        table[:] = np.arange(n // 8)
    frozen = comm.share(table, root=0)
    del table
    step = (64 << 20) // 8
    sums = np.array([int(frozen[i:i + step].sum()) for i in range(0, n // 8, step)], dtype=np.int64)
    want = np.array([int(np.arange(i, min(i + step, n // 8)).sum()) for i in range(0, n // 8, step)], np.int64)
    assert (sums == want).all(), "a block differs"
    assert frozen[-1] == n // 8 - 1 and not frozen.flags.writeable
    del frozen
    print("large ok", flush=True)
