"""Under mpiexec, 4 ranks in simulated nodes of 2: every rank sends news
(NodePlan.announce) that no rank will read, then abandons the comm, then
makes a new comm and runs a collective on it, five times. The news stays
unreceived on the plans' own communicators: freeing those would let a later
communicator take their context and meet the messages (Open MPI segfaulted
in the next Comm.from_mpi). Each rank prints "<rank> ok"."""
import numpy as np, shmtopo
from mpi4py import MPI
W = MPI.COMM_WORLD
for i in range(5):
    comm = shmtopo.Comm.from_mpi(W, node_size=2, timeout=20)
    comm.allreduce(np.ones(2))
    comm.plan.announce(comm.world_rank, left=True)  # every rank: news no rank reads
    comm.abandon()
    fresh = shmtopo.Comm.from_mpi(W, node_size=2, timeout=20)
    assert fresh.allreduce(np.ones(2))[0] == W.size
    fresh.free()
print(W.rank, "ok", flush=True)
