"""One rank's arguments to a collective, normalised: arrays made
C-contiguous, dtype, op and root turned into the core's codes, the result
array made or checked, counts and displacements as size_t arrays. Each
raises ShmtopoValueError on its own rank; the public calls (api.py) run them
inside agreement.normalised, so the rank then fails the call on every rank.

Counts and displacements are element counts, one per rank of the job; the
v-variants take 1-D arrays (others are flattened).
"""
from __future__ import annotations

import itertools
import operator
from typing import Any, NamedTuple, Optional

import numpy as np

from .._base import CommLike
from .._native import ffi
from .._types import (ALGORITHMS, OPS, SIZES, Array, address_of, check_apart, checked_root, contiguous, dtype_code,
                      result_array, table_code)
from ..errors import ShmtopoValueError

def reduce_args(comm: CommLike, what: str, array: Any, op: Any, out: Any, algorithm: Any,
                 root: Any) -> tuple[Array, int, int, int, int, Optional[Array]]:
    a = contiguous(array)
    code = dtype_code(a)
    opc = table_code(OPS, op, "operation")
    alg = table_code(ALGORITHMS, algorithm, "algorithm")
    r = -1 if root is None else checked_root(comm, root)
    mine = r < 0 or r == comm.world_rank or comm.nnodes > 1
    result = result_array(out, a.shape, a.dtype, what) if mine else None
    if result is not None:
        check_apart(what, a, result)
    return a, code, opc, alg, r, result


def bcast_args(comm: CommLike, array: Any, root: Any, out: Any) -> tuple[Array, int, int, Array]:
    a = contiguous(array)
    code = dtype_code(a)
    r = checked_root(comm, root)
    result = result_array(out, a.shape, a.dtype, "bcast")
    if result is not a:
        check_apart("bcast", a, result)
    return a, code, r, result


def block_shape(comm: CommLike, a: Array, what: str) -> tuple[int, ...]:
    nranks = comm.world_size
    if a.ndim == 0 or a.shape[0] % nranks:
        raise ShmtopoValueError(f"{what}: the first axis ({a.shape[:1]}) must split into {nranks} equal blocks")
    return (a.shape[0] // nranks,) + a.shape[1:]


def blocks_args(comm: CommLike, what: str, array: Any, op: Any,
                 out: Any) -> tuple[Array, int, int, tuple[int, ...], Array]:
    a = contiguous(array)
    code = dtype_code(a)
    opc = table_code(OPS, op, "operation") if op is not None else -1
    block = block_shape(comm, a, what)
    result = result_array(out, block if op is not None else a.shape, a.dtype, what)
    check_apart(what, a, result, in_place_at=address_of(result))
    return a, code, opc, block, result


def allgather_args(comm: CommLike, array: Any, out: Any) -> tuple[Array, int, Array]:
    a = contiguous(array)
    code = dtype_code(a)
    result = result_array(out, (comm.world_size,) + a.shape, a.dtype, "allgather")
    check_apart("allgather", a, result, in_place_at=address_of(result) + comm.world_rank * a.nbytes)
    return a, code, result


def counts_array(comm: CommLike, values: Any, what: str, name: str) -> Array:
    """nranks non-negative element counts as an array of size_t."""
    if values is None:
        raise ShmtopoValueError(f"{what}: {name} is needed here")
    if type(values) is np.ndarray and values.dtype == SIZES and values.shape == (comm.world_size,):
        return values  # already what the core takes (unsigned: none negative)
    try:
        items = [operator.index(v) for v in (values.tolist() if isinstance(values, np.ndarray) else values)]
    except TypeError:
        raise ShmtopoValueError(f"{what}: {name} must be a sequence of integers, not {values!r}") from None
    if any(isinstance(v, (bool, np.bool_)) for v in values):
        raise ShmtopoValueError(f"{what}: {name} must be a sequence of integers, not {values!r}")
    if len(items) != comm.world_size:
        raise ShmtopoValueError(f"{what}: {name} has {len(items)} entries, needs one per rank ({comm.world_size})")
    if any(v < 0 or v >= 2**62 for v in items):
        raise ShmtopoValueError(f"{what}: {name} must be >= 0, not {items}")
    return np.array(items, SIZES)


def counts_layout(comm: CommLike, what: str, counts: Any, displs: Any, prefix: str = "") -> tuple[Array, Array]:
    """counts and displacements; displacements default to the exclusive
    prefix sums of the counts (blocks back to back)."""
    c = counts_array(comm, counts, what, prefix + "counts")
    if displs is None:
        # Python ints: for a few counts much cheaper than numpy's cumsum
        return c, np.array([0, *itertools.accumulate(c.tolist()[:-1])], SIZES)
    return c, counts_array(comm, displs, what, prefix + "displs")


def layout_end(counts: Array, displs: Array) -> int:
    """One past the last element a layout reaches."""
    return max((d + n for n, d in zip(counts.tolist(), displs.tolist()) if n), default=0)


def flat_out(out: Any, what: str, dtype: np.dtype[Any] | None, need: int, exact: bool = False) -> Array:
    """out as a writable C-contiguous 1-D view, of `dtype`, holding `need`
    elements (exactly, or at least)."""
    if not isinstance(out, np.ndarray) or not out.flags.c_contiguous or not out.flags.writeable:
        raise ShmtopoValueError(f"{what}: out must be a writable C-contiguous numpy array")
    if dtype is not None and out.dtype != dtype:
        raise ShmtopoValueError(f"{what}: out holds {out.dtype}, the data is {dtype}")
    if out.size < need or (exact and out.size != need):
        raise ShmtopoValueError(f"{what}: out has {out.size} elements, needs {need}")
    return out.reshape(-1)


def as_returned(result: Array, out: Any) -> Array:
    """What a call returns: out as the caller passed it, else the new array."""
    given: Array = result if out is None else out
    return given


def check_apart_at(what: str, a: Array, result: Array, offset: int) -> None:
    """check_apart, where in place puts a at `offset` bytes into result (the
    address is only looked up when the two share memory at all)."""
    if a.size and result.size and np.may_share_memory(a, result):
        check_apart(what, a, result, in_place_at=address_of(result) + offset)


def own_block(result: Array, displs: Array, counts: Array, rank: int) -> Array:
    """This rank's block of a layout's array (in place: the input is there)."""
    return result[int(displs[rank]):int(displs[rank] + counts[rank])]


def gather_args(comm: CommLike, array: Any, root: Any, out: Any) -> tuple[Array, int, int, Array | None]:
    r = checked_root(comm, root)
    me, n = comm.world_rank, comm.world_size
    if array is None:
        # in place: the root's block already lies in out
        if me != r or out is None:
            raise ShmtopoValueError("gather: array may be None only on the root, with out holding its block")
        if not isinstance(out, np.ndarray) or out.ndim == 0 or out.shape[0] != n:
            raise ShmtopoValueError(f"gather: out must have shape ({n}, ...)")
        whole = result_array(out, out.shape, out.dtype, "gather")
        return whole[me], dtype_code(whole), r, whole
    a = contiguous(array)
    code = dtype_code(a)
    result = result_array(out, (n,) + a.shape, a.dtype, "gather") if me == r else None
    if result is not None:
        check_apart_at("gather", a, result, me * a.nbytes)
    return a, code, r, result


def equal_blocks(comm: CommLike, block: int) -> tuple[Array, Array]:
    """The counts and displacements of one `block`-element block per rank
    (gather and scatter across nodes take the v-variants' MPI calls)."""
    return np.full(comm.world_size, block, SIZES), np.arange(comm.world_size, dtype=SIZES) * block


def scatter_args(comm: CommLike, array: Any, root: Any, out: Any) -> tuple[Array | None, int, int, Array]:
    r = checked_root(comm, root)
    me, n = comm.world_rank, comm.world_size
    if me == r:
        a = contiguous(array)
        if a.ndim == 0 or a.shape[0] != n:
            raise ShmtopoValueError(f"scatter: on the root, array must have shape ({n}, ...): one block per "
                                    f"rank, not {a.shape}")
        result = result_array(out, a.shape[1:], a.dtype, "scatter")
        check_apart_at("scatter", result, a, me * result.nbytes)
        return a, dtype_code(a), r, result
    if out is None:
        if array is None:
            raise ShmtopoValueError("scatter: out (this rank's block) is needed where array is None")
        shape = np.asarray(array)
        return None, dtype_code(shape), r, np.empty(shape.shape[1:], shape.dtype)
    flat_out(out, "scatter", None, 0)  # checks it
    result = out
    return None, dtype_code(result), r, result


def gatherv_args(comm: CommLike, array: Any, counts: Any, displs: Any, root: Any,
                  out: Any) -> tuple[Array, int, int, Array | None, Array | None, Array | None, Array | None]:
    r = checked_root(comm, root)
    me = comm.world_rank
    if me != r:
        a = contiguous(array).reshape(-1)
        return a, dtype_code(a), r, None, None, None, None
    c, d = counts_layout(comm, "gatherv", counts, displs)
    need = layout_end(c, d)
    if array is None:  # in place: the root's block already lies in out
        if out is None:
            raise ShmtopoValueError("gatherv: array may be None only with out holding the root's block")
        result = flat_out(out, "gatherv", None, need)
        return own_block(result, d, c, me), dtype_code(result), r, result, c, d, out
    a = contiguous(array).reshape(-1)
    code = dtype_code(a)
    result = np.empty(need, a.dtype) if out is None else flat_out(out, "gatherv", a.dtype, need)
    check_apart_at("gatherv", a, result, int(d[me]) * a.itemsize)
    return a, code, r, result, c, d, as_returned(result, out)


def scatterv_args(comm: CommLike, array: Any, counts: Any, displs: Any, root: Any,
                   out: Any) -> tuple[Array | None, int, int, Array, Array | None, Array | None, Array]:
    r = checked_root(comm, root)
    me = comm.world_rank
    if me != r:
        if out is None:
            raise ShmtopoValueError("scatterv: out (this rank's block) is needed")
        result = flat_out(out, "scatterv", None, 0)
        return None, dtype_code(result), r, result, None, None, out
    c, d = counts_layout(comm, "scatterv", counts, displs)
    a = contiguous(array).reshape(-1)
    code = dtype_code(a)
    if a.size < layout_end(c, d):
        raise ShmtopoValueError(f"scatterv: array has {a.size} elements, the counts and displs reach {layout_end(c, d)}")
    mine = int(c[me])
    result = np.empty(mine, a.dtype) if out is None else flat_out(out, "scatterv", a.dtype, mine, exact=True)
    check_apart_at("scatterv", result, a, int(d[me]) * a.itemsize)
    return a, code, r, result, c, d, as_returned(result, out)


def allgatherv_args(comm: CommLike, array: Any, counts: Any, displs: Any,
                     out: Any) -> tuple[Array, int, Array, Array, Array, Array]:
    c, d = counts_layout(comm, "allgatherv", counts, displs)
    me, need = comm.world_rank, layout_end(c, d)
    if array is None:  # in place: this rank's block already lies in out
        if out is None:
            raise ShmtopoValueError("allgatherv: array may be None only with out holding this rank's block")
        result = flat_out(out, "allgatherv", None, need)
        a = own_block(result, d, c, me)
    else:
        a = contiguous(array).reshape(-1)
        result = np.empty(need, a.dtype) if out is None else flat_out(out, "allgatherv", a.dtype, need)
        check_apart_at("allgatherv", a, result, int(d[me]) * a.itemsize)
    code = dtype_code(a)
    if a.size != c[me]:
        raise ShmtopoValueError(f"allgatherv: this rank passes {a.size} elements, but counts[{me}] is {c[me]}")
    return a, code, result, c, d, as_returned(result, out)


def alltoallv_args(comm: CommLike, array: Any, sendcounts: Any, sdispls: Any, recvcounts: Any, rdispls: Any,
                    out: Any) -> tuple[Array, int, Array, Array, Array, Array, Array, Array]:
    sc, sd = counts_layout(comm, "alltoallv", sendcounts, sdispls, "send")
    rc, rd = counts_layout(comm, "alltoallv", recvcounts, rdispls, "recv")
    a = contiguous(array).reshape(-1)
    code = dtype_code(a)
    if a.size < layout_end(sc, sd):
        raise ShmtopoValueError(f"alltoallv: array has {a.size} elements, sendcounts and sdispls reach "
                                f"{layout_end(sc, sd)}")
    need = layout_end(rc, rd)
    result = np.empty(need, a.dtype) if out is None else flat_out(out, "alltoallv", a.dtype, need)
    if a.size and result.size and np.may_share_memory(a, result):
        raise ShmtopoValueError("alltoallv: the result overlaps the input")
    return a, code, result, sc, sd, rc, rd, as_returned(result, out)


class TypeRuns(NamedTuple):
    """A flattened datatype: where one element's bytes lie, in the order they
    travel, as runs of contiguous bytes (offsets from the element's start,
    lengths); elements lie `extent` bytes apart. lo and hi: an element's first
    byte and one past its last (from its start); size: its bytes."""
    offsets: Array  # int64
    lengths: Array  # uint64
    extent: int
    size: int
    lo: int
    hi: int


def type_runs(offsets: Any, lengths: Any, extent: int) -> TypeRuns:
    """The runs of a type whose element's bytes lie at offsets[i] for
    lengths[i] bytes, in that order; runs of 0 bytes are dropped."""
    o = np.ascontiguousarray(offsets, np.int64).reshape(-1)
    n = np.ascontiguousarray(lengths, np.int64).reshape(-1)
    if o.shape != n.shape:
        raise ShmtopoValueError(f"runs: {o.size} offsets and {n.size} lengths")
    if (n < 0).any():
        raise ShmtopoValueError("runs: a length is negative")
    keep = n > 0
    o, n = o[keep], n[keep].astype(np.uint64)
    lo = int(o.min()) if o.size else 0
    hi = int((o + n.astype(np.int64)).max()) if o.size else 0
    return TypeRuns(o, n, operator.index(extent), int(n.sum()), lo, hi)


class TypedBlocks:
    """One side of an alltoallw, checked and laid out as the core takes it:
    a block per rank, (displ, count, TypeRuns); sizes: each block's bytes;
    [first, end): the bytes of the buffer the blocks reach. Made once, it
    serves every call with the same layout."""

    __slots__ = ("ranks", "table", "sizes", "first", "end", "_keep")

    def __init__(self, blocks: Any, n: int, what: str) -> None:
        if len(blocks) != n:
            raise ShmtopoValueError(f"alltoallw: {what}: {len(blocks)} blocks for {n} ranks")
        self.ranks = n
        self.table = ffi.new("shmtopo_typed_block_t[]", n)
        self._keep: list[Any] = []
        self.sizes: list[int] = []
        self.first, self.end = 0, 0
        for p, (displ, count, runs) in enumerate(blocks):
            displ, count = operator.index(displ), operator.index(count)
            if count < 0:
                raise ShmtopoValueError(f"alltoallw: {what}: block {p} has a negative count ({count})")
            size = count * runs.size
            self.sizes.append(size)
            if not size:
                continue
            last = (count - 1) * runs.extent
            first, end = displ + runs.lo + min(0, last), displ + runs.hi + max(0, last)
            self.first, self.end = (first, end) if not self._keep else (min(self.first, first), max(self.end, end))
            offsets, lengths = ffi.from_buffer("int64_t[]", runs.offsets), ffi.from_buffer("uint64_t[]", runs.lengths)
            self._keep += (offsets, lengths)
            self.table[p] = (displ, count, runs.extent, runs.offsets.size, offsets, lengths)

    def bytes_of(self, comm: CommLike, buf: Any, what: str, writable: bool) -> Array:
        """buf's bytes, which every block must lie in."""
        if self.ranks != comm.world_size:
            raise ShmtopoValueError(f"alltoallw: {what}: blocks for {self.ranks} ranks on a comm of {comm.world_size}")
        raw = buf.reshape(-1).view(np.uint8) if isinstance(buf, np.ndarray) else np.frombuffer(buf, np.uint8)
        if writable and not raw.flags.writeable:
            raise ShmtopoValueError(f"alltoallw: {what}: the buffer is read-only")
        if self._keep and (self.first < 0 or self.end > raw.size):
            raise ShmtopoValueError(f"alltoallw: {what}: the blocks reach bytes [{self.first}, {self.end}) of a "
                                    f"buffer of {raw.size}")
        return raw


def reduce_scatter_counts_args(comm: CommLike, array: Any, op: Any, counts: Any,
                                out: Any) -> tuple[Array, int, int, Array, Array, Array]:
    c = counts_array(comm, counts, "reduce_scatter", "counts")
    a = contiguous(array).reshape(-1)
    code = dtype_code(a)
    opc = table_code(OPS, op, "operation")
    if a.size != int(c.sum()):
        raise ShmtopoValueError(f"reduce_scatter: array has {a.size} elements, the counts add up to {int(c.sum())}")
    mine = int(c[comm.world_rank])
    if out is None:
        result = np.empty(mine, a.dtype)
    elif isinstance(out, np.ndarray) and a.size and np.may_share_memory(out, a) and address_of(out) == address_of(a):
        result = flat_out(out, "reduce_scatter", a.dtype, mine)[:mine]  # in place: the result at its start
    else:
        result = flat_out(out, "reduce_scatter", a.dtype, mine, exact=True)
        check_apart("reduce_scatter", a, result, in_place_at=address_of(result))
    return a, code, opc, c, result, as_returned(result, out)


def scan_args(comm: CommLike, what: str, array: Any, op: Any, out: Any,
               exclusive: bool) -> tuple[Array, int, int, Array]:
    a = contiguous(array)
    code = dtype_code(a)
    opc = table_code(OPS, op, "operation")
    if out is None:
        result = np.zeros(a.shape, a.dtype) if exclusive else np.empty(a.shape, a.dtype)
    else:
        result = result_array(out, a.shape, a.dtype, what)
    check_apart(what, a, result)
    return a, code, opc, result
