"""The across-nodes half of hierarchical collectives: shared memory inside
each node (shmtopo's native core), mpi4py between one leader per node (node
rank 0). Used when Comm.from_mpi finds more than one node, or simulates
several with node_size= / SHMTOPO_NODE_SIZE."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .collectives import DTYPES, node_bcast, node_reduce
from ._native import ffi, lib
from .errors import last_error

if TYPE_CHECKING:
    from .comm import Comm


def _mpi_op(op: str):
    from mpi4py import MPI

    return {"sum": MPI.SUM, "prod": MPI.PROD, "min": MPI.MIN, "max": MPI.MAX,
            "band": MPI.BAND, "bor": MPI.BOR, "bxor": MPI.BXOR}[op]


def leaders_allreduce(comm: "Comm", result: np.ndarray, op: str) -> None:
    from mpi4py import MPI

    if comm.rank == 0 and result.size:
        comm._leaders.Allreduce(MPI.IN_PLACE, result, op=_mpi_op(op))


def hierarchical_reduce(comm: "Comm", a: np.ndarray, result: np.ndarray, op: str, opc: int,
                        root: int, alg: int) -> np.ndarray | None:
    root_node, root_local = comm._node_of[root], comm._local_of[root]
    node_reduce(comm, a, result, opc, 0, alg)
    if comm.rank == 0 and result.size:
        leaders = comm._leaders
        # No MPI_IN_PLACE: MPICH 4.0.2's Reduce crashes with it at a root
        # other than 0 (and wants a receive buffer on every rank).
        mine = result.copy()
        leaders.Reduce(mine, result if leaders.Get_rank() == root_node else np.empty_like(mine),
                       op=_mpi_op(op), root=root_node)
    if comm._node_index == root_node and root_local != 0:
        node_bcast(comm, result, 0)
    return result if comm.world_rank == root else None


def hierarchical_bcast(comm: "Comm", result: np.ndarray, root: int) -> np.ndarray:
    root_node, root_local = comm._node_of[root], comm._local_of[root]
    if comm._node_index == root_node:
        node_bcast(comm, result, root_local)
    if comm.rank == 0 and result.size:
        comm._leaders.Bcast(result, root=root_node)
    if comm._node_index != root_node:
        node_bcast(comm, result, 0)
    return result


def hierarchical_allgather(comm: "Comm", a: np.ndarray, result: np.ndarray) -> np.ndarray:
    node_rows = np.empty((comm.size,) + a.shape, a.dtype)
    if lib.shmtopo_allgather(comm.handle, ffi.from_buffer(a) if a.size else ffi.NULL,
                             ffi.from_buffer(node_rows) if node_rows.size else ffi.NULL,
                             a.size, DTYPES[a.dtype]) < 0:
        raise last_error()
    if comm.rank == 0 and result.size:
        # leaders gather whole nodes in node order, then rows go to world ranks
        counts = [n * a.size for n in comm._node_sizes]
        gathered = np.empty_like(result)
        comm._leaders.Allgatherv(node_rows, [gathered, counts])
        result[comm._world_order] = gathered
    node_bcast(comm, result, 0)
    return result
