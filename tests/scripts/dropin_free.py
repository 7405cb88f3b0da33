"""Under mpiexec (tests/test_dropin_programs.py): the drop-in's Free() and
shm_free() are local, as MPI_Comm_free is in practice. Accelerated comms are
freed in opposite orders on different ranks, from ``__del__`` when each
rank's garbage collector happens to run (rank 0 before an MPI call, the
others after it), and right after a large collective that a slowed peer is
still finishing. Every rank prints "done" when it got through; a Free that
waited for the others would hang (or, with the timeout, raise in __del__,
which Python prints as "Exception ignored")."""
import gc
import time

import numpy as np
from mpi4py import MPI

import shmtopo

world = shmtopo.accelerate(MPI.COMM_WORLD, timeout=30)
rank, n = world.Get_rank(), world.Get_size()
out = np.zeros(2)


def used(comm):
    """comm, with one collective run in shared memory on it."""
    comm.Allreduce(np.ones(2), out)
    assert out[0] == comm.Get_size(), out
    return comm


# 1. Free and shm_free in opposite orders on odd and even ranks
comms = [used(world.Dup()), used(world.Dup()), used(world.Split(0, n - rank))]
for c in (comms if rank % 2 == 0 else comms[::-1]):
    c.Free()
pair = [used(world.Dup()), used(world.Dup())]
for c in (pair if rank % 2 == 0 else pair[::-1]):
    c.shm_free()
for c in pair:
    c.Allreduce(np.ones(2), out)  # MPI's now, on every rank
    assert out[0] == n and c.shm_stats()["Allreduce"] == (1, 1), c.shm_stats()
    c.Free()


# 2. from __del__, when the collector runs: at a different moment on each rank
class Plan:
    """A library object that frees its communicator when it is collected."""

    def __init__(self, comm):
        self.comm = used(comm.Dup())
        self.cycle = self  # only the collector frees it

    def __del__(self):
        self.comm.Free()


gc.disable()
for i in range(4):
    plan = Plan(world)
    del plan
    if rank == 0:
        gc.collect()  # rank 0 frees now; the others are in MPI's Split below
    split = world.Split(rank % 2, rank)
    split.Barrier()
    split.Free()
    if rank != 0:
        gc.collect()
gc.enable()

# 3. a rank frees while a peer still finishes the collective before (it reads
# this rank's scratch memory): the peer must not fail because this rank is gone
for delay in (0.0, 0.05):
    big = world.Dup()
    x, y = np.ones(1 << 17), np.zeros(1 << 17)  # through the scratch buffers
    for _ in range(3):
        big.Allreduce(x, y)
    if rank == n - 1:
        time.sleep(delay)
    big.Allreduce(x, y)
    assert y[0] == n, y[0]
    big.Free()

world.Barrier()
print(f"rank {rank} done", flush=True)
world.shm_free()
