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

def _as_bytes(a: np.ndarray) -> Any:
    """a as bytes, for calls that only move data (any element type)."""
    return a.reshape(-1).view(np.uint8)


def _wait(plan: NodePlan, request: Any, what: str, *buffers: Any) -> None:
    _oob.wait(request, plan.timeout, what, *buffers, news=plan.news)


def run_across_nodes(comm: CommLike, fn: Callable[..., T], *args: Any) -> T:
    """Run the across-nodes half of a call; an exception in it leaves the
    comm (peers fail instead of waiting) and propagates."""
    try:
        return fn(comm, *args)
    except BaseException as exc:
        agreement.heard_of(comm, exc)
        agreement.leave(comm)
        raise


def node_root(plan: NodePlan, root: int) -> tuple[int, int]:
    return plan.node_of[root], plan.local_of[root]


# ---- reductions between the leaders ------------------------------------------
# MPI only moves the node partials, as bytes; shmtopo's own kernels fold them,
# in node order. MPI's op kernels are not C's arithmetic: Open MPI's AVX ones
# saturate 8- and 16-bit integer sums, where C and numpy wrap.

#: up to this many bytes per leader (or with two nodes) the leaders gather
#: whole partials and each folds them all: one exchange. Beyond, each leader
#: folds one block of every partial (an alltoall), then the blocks go round.
WHOLE_PARTIALS = 256 * 1024


def _fold_rows(rows: np.ndarray, opc: int, code: int) -> np.ndarray:
    """rows[0] op rows[1] op ... in row (node) order, into rows[0]."""
    for k in range(1, len(rows)):
        checked(lib.shmtopo_reduce_local(pointer(rows[0]), pointer(rows[k]), rows[0].size, code, opc))
    folded: np.ndarray = rows[0]
    return folded


def _blocks(n: int, parts: int, itemsize: int) -> tuple[list[int], list[int]]:
    """n elements in `parts` consecutive blocks (the first n % parts one
    longer): their sizes and offsets, in bytes."""
    sizes = [(n // parts + (k < n % parts)) * itemsize for k in range(parts)]
    return sizes, [sum(sizes[:k]) for k in range(parts)]


def _whole(plan: NodePlan, nbytes: int) -> bool:
    return plan.nnodes == 2 or nbytes <= WHOLE_PARTIALS


def _folded_block(plan: NodePlan, partial: np.ndarray, opc: int, code: int, what: str
                  ) -> tuple[np.ndarray, list[int], list[int]]:
    """This leader's block of the job's reduction (every node's partial's
    block folded in node order), and the blocks' byte sizes and offsets."""
    leaders, nodes = plan.leaders, plan.nnodes
    sizes, offsets = _blocks(partial.size, nodes, partial.itemsize)
    mine = plan.node_index
    rows = np.empty((nodes, sizes[mine] // partial.itemsize), partial.dtype)
    _wait(plan, leaders.Ialltoallv([_as_bytes(partial), (sizes, offsets)],
                                   [_as_bytes(rows), ([sizes[mine]] * nodes, [sizes[mine] * k for k in range(nodes)])]),
          what, partial, rows)
    return _fold_rows(rows, opc, code), sizes, offsets


def leaders_allreduce(comm: CommLike, result: np.ndarray, opc: int, code: int) -> None:
    """The node leaders' partials (of shmtopo dtype `code`) reduced in place,
    folded in node order (the same bits on every leader)."""
    plan = comm.plan
    if plan.leaders is None or not result.size:
        return
    what = "allreduce between nodes"
    if _whole(plan, result.nbytes):
        rows = np.empty((plan.nnodes,) + result.shape, result.dtype)
        plan.exchange.allgather(_as_bytes(result), _as_bytes(rows))
        result[...] = _fold_rows(rows, opc, code)
        return
    block, sizes, offsets = _folded_block(plan, result, opc, code, what)
    _wait(plan, plan.leaders.Iallgatherv(_as_bytes(block), [_as_bytes(result), (sizes, offsets)]),
          what, block, result)


def leaders_reduce(comm: CommLike, result: np.ndarray, opc: int, root_node: int, code: int) -> None:
    """As leaders_allreduce, the reduction on the leader of `root_node` only."""
    plan = comm.plan
    if plan.leaders is None or not result.size:
        return
    what = "reduce between nodes"
    at_root = plan.node_index == root_node
    if _whole(plan, result.nbytes):
        mine = result.copy()
        rows = np.empty((plan.nnodes,) + result.shape, result.dtype) if at_root else None
        _wait(plan, plan.leaders.Igather(_as_bytes(mine), None if rows is None else _as_bytes(rows), root=root_node),
              what, mine, rows)
        if rows is not None:
            result[...] = _fold_rows(rows, opc, code)
        return
    block, sizes, offsets = _folded_block(plan, result, opc, code, what)
    _wait(plan, plan.leaders.Igatherv(_as_bytes(block), [_as_bytes(result), (sizes, offsets)] if at_root else None,
                                      root=root_node), what, block, result)


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
    """Across nodes there is no shared memory to use: MPI's own alltoall
    (which takes no aliased buffers: in place, the input is copied first)."""
    plan = comm.plan
    mine = _copy_if_aliased(a, result)
    _wait(plan, plan.world.Ialltoall(_as_bytes(mine), _as_bytes(result)), "alltoall", mine, result)


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
