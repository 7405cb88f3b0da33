"""A window with a fence, then allreduce, bcast (every root) and allgather
across the nodes: each rank prints what it got, "RANK <world rank> <json>"
(tests/test_realnodes.py computes what it should be)."""
import hashlib
import json

import numpy as np
from mpi4py import MPI

import shmtopo


def data(rank, count, dtype):
    rng = np.random.default_rng(1000 * rank + count)
    if np.dtype(dtype).kind == "f":
        return (rng.random(count) * 4 - 2).astype(dtype)
    return rng.integers(-3, 4, count).astype(dtype)


world = MPI.COMM_WORLD
with shmtopo.Comm.from_mpi(world) as comm:
    out = {}
    # the window is the node's: node ranks, node size
    with comm.allocate(shape=(comm.size,), dtype=np.int64) as win:
        win.local[:] = 1000 * comm.world_rank + np.arange(comm.size)
        win.fence()
        out["window_parts"] = [win.query(r).tolist() for r in range(comm.size)]
        win.fence()
        win.query(0)[comm.rank] = comm.world_rank
        win.fence()
        out["window_rank0"] = win.query(0).tolist()
    for dtype in ("float64", "int32"):
        for count in (1, 1000, 70000):
            got = comm.allreduce(data(comm.world_rank, count, dtype), "sum")
            # its bits, short: long lines of several ranks may come out interleaved
            out[f"allreduce_{dtype}_{count}"] = hashlib.sha256(got.tobytes()).hexdigest()
    out["bcast"] = [comm.bcast(np.full(5, comm.world_rank, np.int64), root=root).tolist()
                    for root in range(comm.world_size)]
    out["allgather"] = comm.allgather(np.array([comm.world_rank, 10 * comm.world_rank], np.int32)).tolist()
    out["node_of"] = comm.plan.node_of
    out["local_of"] = comm.plan.local_of
    out["nnodes"] = comm.nnodes
print(f"RANK {world.Get_rank()} {json.dumps(out)}", flush=True)
