"""Run under mpiexec with HWLOC_SYNTHETIC set to two NUMA nodes of one CPU
each (tests/test_placement.py): every rank binds itself to one CPU, holds
the node's shared (synthetic) topology, and checks that each rank's part of
a window is given the NUMA node of its CPU -- modelled, not bound, since the
topology is not this machine's -- and that interleave takes both nodes.
Prints "RANK r ok", or the failure."""
import os
import sys

from mpi4py import MPI

import shmtopo

world = MPI.COMM_WORLD
cpus = sorted(os.sched_getaffinity(0))
mine = cpus[world.Get_rank() % len(cpus)]
os.sched_setaffinity(0, {mine})
try:
    with shmtopo.Comm.from_mpi(world) as comm, shmtopo.share_topology(comm) as topo:
        assert topo.nbobjs("numanode") == 2 and not topo.this_system, (topo.nbobjs("numanode"), topo.this_system)
        where = comm.mpi.allgather(mine)  # each rank's CPU; CPU c lies in NUMA node c here
        for contiguous in (False, True):
            with comm.allocate(8192, contiguous=contiguous) as win:
                assert win.numa_nodes == [{c} for c in where], (win.numa_nodes, where)
                assert win.placement_report == [f"local on NUMA node {c}: modelled, not bound" for c in where], \
                    win.placement_report
                win.local[:] = comm.rank
                win.fence()
                assert all((win.query(r) == r).all() for r in range(comm.size))
            with comm.allocate(8192, contiguous=contiguous, placement="interleave") as win:
                assert win.numa_nodes == [{0, 1}] * comm.size, win.numa_nodes
                assert all(r.startswith("interleave") and r.endswith("NUMA nodes 0-1: modelled, not bound")
                           for r in win.placement_report), win.placement_report
except BaseException as exc:  # noqa: BLE001 - reported, and the job fails
    print(f"RANK {world.Get_rank()} failed: {exc!r}", flush=True)
    sys.exit(1)
print(f"RANK {world.Get_rank()} ok", flush=True)
