"""The across-nodes half of hierarchical collectives: shared memory inside
each node, mpi4py between one leader per node (node rank 0), shared memory
again; and MPI's own calls between all ranks for the rooted and
varying-count collectives once the job agreed on them.

mpi4py is imported inside the functions that use it: shmtopo imports without
it (it is an optional extra), and importing it starts MPI.
"""
from __future__ import annotations

from typing import Any, Callable, TypeVar

import numpy as np

from .. import _oob, agreement
from .._base import CommLike
from .._native import lib
from .._types import BY_CODE, Array, dtype_code
from ..job import NodePlan
from .node import checked, node_bcast, node_reduce, pointer

T = TypeVar("T")

_MPI_OPS = ("SUM", "PROD", "MIN", "MAX", "BAND", "BOR", "BXOR", "LAND", "LOR", "LXOR", "MAXLOC", "MINLOC")


# mpi4py cannot type a structured array from its buffer: the pair types by name
_MPI_PAIRS = {lib.SHMTOPO_FLOAT_INT: "FLOAT_INT", lib.SHMTOPO_DOUBLE_INT: "DOUBLE_INT",
              lib.SHMTOPO_LONG_INT: "LONG_INT", lib.SHMTOPO_2INT: "INT_INT", lib.SHMTOPO_SHORT_INT: "SHORT_INT"}


def _mpi_op(opc: int, code: int) -> Any:
    from mpi4py import MPI

    name = _MPI_OPS[opc]
    if code == lib.SHMTOPO_BOOL and name in ("BAND", "BOR", "BXOR"):
        name = "L" + name[1:]  # MPI's bitwise ops take no C_BOOL; on 0/1 they are the logical ones
    return getattr(MPI, name)


def _typed(a: np.ndarray, code: int) -> Any:
    """a as an MPI buffer of its element type (code: its shmtopo dtype)."""
    from mpi4py import MPI

    if code in _MPI_PAIRS:
        return [a.reshape(-1).view(np.uint8), getattr(MPI, _MPI_PAIRS[code])]
    return a


def _as_bytes(a: np.ndarray) -> Any:
    """a as bytes, for calls that only move data (any element type)."""
    return a.reshape(-1).view(np.uint8)


def _wait(plan: NodePlan, request: Any, what: str, *buffers: Any) -> None:
    _oob.wait(request, plan.timeout, what, *buffers)


def run_across_nodes(comm: CommLike, fn: Callable[..., T], *args: Any) -> T:
    """Run the across-nodes half of a call; an exception in it leaves the
    comm (peers fail instead of waiting) and propagates."""
    try:
        return fn(comm, *args)
    except BaseException:
        agreement.leave(comm)
        raise


def node_root(plan: NodePlan, root: int) -> tuple[int, int]:
    return plan.node_of[root], plan.local_of[root]


def leaders_allreduce(comm: CommLike, result: np.ndarray, opc: int, code: int) -> None:
    """The node leaders' partials (of shmtopo dtype `code`) reduced in place."""
    from mpi4py import MPI

    plan = comm.plan
    if plan.leaders is not None and result.size:
        _wait(plan, plan.leaders.Iallreduce(MPI.IN_PLACE, _typed(result, code), op=_mpi_op(opc, code)),
              "allreduce between nodes", result)


def leaders_reduce(comm: CommLike, result: np.ndarray, opc: int, root_node: int, code: int) -> None:
    plan = comm.plan
    if plan.leaders is not None and result.size:
        # No MPI_IN_PLACE: MPICH 4.0.2's Reduce crashes with it at a root
        # other than 0 (and wants a receive buffer on every rank).
        mine = result.copy()
        out = result if plan.leaders.Get_rank() == root_node else np.empty_like(mine)
        _wait(plan, plan.leaders.Ireduce(_typed(mine, code), _typed(out, code), op=_mpi_op(opc, code),
                                         root=root_node), "reduce between nodes", mine, out)


def leaders_bcast(comm: CommLike, result: np.ndarray, root_node: int) -> None:
    plan = comm.plan
    if plan.leaders is not None and result.size:
        _wait(plan, plan.leaders.Ibcast(_as_bytes(result), root=root_node), "bcast between nodes", result)


def leaders_allgather(comm: CommLike, node_rows: np.ndarray, result: np.ndarray, count: int) -> None:
    """Leaders gather whole nodes in node order; rows then go to world ranks."""
    plan = comm.plan
    if plan.leaders is not None and result.size:
        counts = [n * count * result.itemsize for n in plan.node_sizes]  # bytes
        gathered = np.empty_like(result)
        _wait(plan, plan.leaders.Iallgatherv(_as_bytes(node_rows), [_as_bytes(gathered), counts]),
              "allgather between nodes", node_rows, gathered)
        result[plan.world_order] = gathered


def world_alltoall(comm: CommLike, a: np.ndarray, result: np.ndarray) -> None:
    """Across nodes there is no shared memory to use: MPI's own alltoall."""
    plan = comm.plan
    _wait(plan, plan.world.Ialltoall(_as_bytes(a), _as_bytes(result)), "alltoall", a, result)


def _copy_if_aliased(a: np.ndarray, result: np.ndarray | None) -> np.ndarray:
    return a.copy() if result is not None and np.may_share_memory(a, result) else a


def _vector_spec(array: np.ndarray, counts: Any, displs: Any) -> Any:
    return [array, (counts.tolist(), displs.tolist())]


def world_gatherv(comm: CommLike, a: np.ndarray, result: np.ndarray | None, counts: Any, displs: Any,
                  root: int) -> None:
    plan = comm.plan
    recv = _vector_spec(result, counts, displs) if result is not None else None
    mine = _copy_if_aliased(a, result)
    _wait(plan, plan.world.Igatherv(mine, recv, root=root), "gatherv", mine, result)


def world_scatterv(comm: CommLike, a: np.ndarray | None, result: np.ndarray, counts: Any, displs: Any,
                   root: int) -> None:
    plan = comm.plan
    send = _vector_spec(_copy_if_aliased(a, result), counts, displs) if a is not None else None
    _wait(plan, plan.world.Iscatterv(send, result, root=root), "scatterv", send, result)


def world_allgatherv(comm: CommLike, a: np.ndarray, result: np.ndarray, counts: Any, displs: Any) -> None:
    plan = comm.plan
    mine = _copy_if_aliased(a, result)
    _wait(plan, plan.world.Iallgatherv(mine, _vector_spec(result, counts, displs)), "allgatherv", mine, result)


def world_alltoallv(comm: CommLike, a: np.ndarray, result: np.ndarray, sendcounts: Any, sdispls: Any,
                    recvcounts: Any, rdispls: Any) -> None:
    plan = comm.plan
    _wait(plan, plan.world.Ialltoallv(_vector_spec(a, sendcounts, sdispls), _vector_spec(result, recvcounts, rdispls)),
          "alltoallv", a, result)


# ---- hierarchical: shared memory, the leaders, shared memory ---------------

def _node_partial(comm: CommLike, a: Array, result: Array, opc: int, alg: int) -> tuple[Array, int]:
    """The node's reduction, at its rank 0, in the type the reduction
    accumulates in, and that type's code: into result itself, or for 16-bit
    floats into a float32 partial (a exactly widened), which crosses nodes
    unrounded."""
    code = dtype_code(a)
    acc = lib.shmtopo_dtype_accumulator(code)
    if acc == code:
        node_reduce(comm, a, result, opc, 0, alg)
        return result, code
    part = a.astype(BY_CODE[acc])
    node_reduce(comm, part, part, opc, 0, alg)
    return part, acc


def _rounded(part: Array, result: Array) -> None:
    """result = the job's partial rounded once (where they differ)."""
    if part is not result:
        checked(lib.shmtopo_reduce_round(pointer(result), pointer(part), result.size, dtype_code(result)))


def hier_allreduce(comm: CommLike, a: Array, result: Array, opc: int, alg: int) -> None:
    part, code = _node_partial(comm, a, result, opc, alg)
    leaders_allreduce(comm, part, opc, code)
    if comm.rank == 0:
        _rounded(part, result)
    node_bcast(comm, result, 0)


def hier_reduce(comm: CommLike, a: Array, result: Array, opc: int, root: int, alg: int) -> None:
    root_node, root_local = node_root(comm.plan, root)
    part, code = _node_partial(comm, a, result, opc, alg)
    leaders_reduce(comm, part, opc, root_node, code)
    if comm.plan.node_index == root_node and comm.rank == 0:
        _rounded(part, result)
    if comm.plan.node_index == root_node and root_local != 0:
        node_bcast(comm, result, 0)


def hier_bcast(comm: CommLike, result: Array, root: int) -> None:
    root_node, root_local = node_root(comm.plan, root)
    if comm.plan.node_index == root_node:
        node_bcast(comm, result, root_local)
    leaders_bcast(comm, result, root_node)
    if comm.plan.node_index != root_node:
        node_bcast(comm, result, 0)


def hier_allgather(comm: CommLike, a: Array, result: Array) -> None:
    node_rows = np.empty((comm.size,) + a.shape, a.dtype)
    checked(lib.shmtopo_allgather(comm.handle, pointer(a), pointer(node_rows), a.size, dtype_code(a)))
    leaders_allgather(comm, node_rows, result, a.size)
    node_bcast(comm, result, 0)
