"""Where each rank runs, as the system and shmtopo see it: one line per rank,
"RANK <world rank> <json>" (tests/test_realnodes.py)."""
import json
import os
import socket

from mpi4py import MPI

import shmtopo

world = MPI.COMM_WORLD
shared = world.Split_type(MPI.COMM_TYPE_SHARED)
with shmtopo.Comm.from_mpi(world) as comm:
    record = {
        "hostname": socket.gethostname(),
        "pid_ns": os.stat("/proc/self/ns/pid").st_ino,
        "ipc_ns": os.stat("/proc/self/ns/ipc").st_ino,
        "net_ns": os.stat("/proc/self/ns/net").st_ino,
        "dev_shm": os.stat("/dev/shm").st_dev,
        "tmp": os.stat("/tmp").st_dev,
        "shared_size": shared.Get_size(),
        "nnodes": comm.nnodes,
        "node_sizes": comm.plan.node_sizes,
        "node_index": comm.plan.node_index,
        "node_of": comm.plan.node_of,
        "rank": comm.rank,
        "size": comm.size,
        "world_rank": comm.world_rank,
        "world_size": comm.world_size,
    }
    comm.barrier()
shared.Free()
print(f"RANK {world.Get_rank()} {json.dumps(record)}", flush=True)
