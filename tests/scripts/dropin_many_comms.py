"""Under mpiexec (tests/test_dropin_programs.py): a program keeps
thousands of derived comms (argv[1] of them: Dup, Split, Create_cart, Sub),
as libraries that derive a comm per array or per plan do, and uses a few.
The shared memory they add to the node (RssShmem of every rank, summed: the
pages each process touched; the node's own count, Shmem, moves with every
other program) must stay under argv[2] MiB; it is checked every 500 comms,
so that a program whose comms each cost a segment stops early instead of
filling the node. Rank 0 prints "comms N added B" (bytes)."""
import sys

import numpy as np
from mpi4py import MPI

import shmtopo

world = shmtopo.accelerate(MPI.COMM_WORLD, timeout=60)
rank, n = world.Get_rank(), world.Get_size()
count, limit = int(sys.argv[1]), int(sys.argv[2]) << 20
# MPICH gives a process 2048 communicators at most (its context ids): its own limit
MPI_ALLOWS = 1900 if MPI.Get_library_version().startswith("MPICH") else count
count = min(count, MPI_ALLOWS)


def rss_shmem():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("RssShmem:"):
                return int(line.split()[1]) * 1024
    return 0


def added():
    return MPI.COMM_WORLD.allreduce(rss_shmem() - before)  # the same on every rank


out = np.zeros(2)
world.Allreduce(np.ones(2), out)
before = rss_shmem()
kept = []
for i in range(count):
    if i % 100 == 1:
        kept.append(world.Split(0, n - rank))
    elif i % 100 == 2:
        cart = world.Create_cart([n], periods=[False])
        kept += [cart, cart.Sub([True])]
    else:
        kept.append(world.Dup())
    if (i + 1) % 500 == 0 and added() > limit:
        break
for c in kept[:3] + kept[-3:]:  # a few used: each makes its shmtopo comm then
    c.Allreduce(np.ones(2), out)
    assert out[0] == n and c.shm_stats() == {"Allreduce": (1, 0)}, (out, c.shm_stats())
total = added()
if rank == 0:
    print(f"comms {len(kept)} added {total} asked {count}", flush=True)
for c in (kept if rank % 2 else kept[::-1]):
    c.Free()
world.shm_free()
