"""The topology shared per node, on real nodes: every rank's record, one line
"RANK <world rank> <json>" (tests/test_realnodes.py). Run with
SHMTOPO_TOPO_DIR on a directory all nodes share, several rounds, each round
also making a new comm on every rank (whose creation sweeps stale files)
while other nodes share theirs: no node may remove another's live file."""
import json
import socket
import sys

from mpi4py import MPI

import shmtopo

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 1
world = MPI.COMM_WORLD
sources, counts = [], []
with shmtopo.Comm.from_mpi(world) as comm:
    for i in range(rounds):
        with shmtopo.share_topology(comm, source="shmem" if i % 2 == 0 else None) as topo:
            sources.append(topo.source)
            counts.append(topo.nbobjs("pu"))
            with shmtopo.Comm.from_mpi(world) as other:  # its creation sweeps, as every comm's does
                other.barrier()
record = {"hostname": socket.gethostname(), "sources": sources, "pus": counts, "node_index": comm.plan.node_index}
sys.stdout.write(f"RANK {world.Get_rank()} {json.dumps(record)}\n")
sys.stdout.flush()
