"""Window collectives on a Comm: barrier, bcast, reduce, allreduce,
allgather, reduce_scatter, alltoall.

Inside a node they run in shmtopo's native core over shared scratch buffers.
When the comm spans several nodes (Comm.from_mpi on a multi-node job), they
are hierarchical: shared memory inside each node, mpi4py between one leader
per node, shared memory again. Ranks and roots are ranks of the comm given
to from_mpi (comm.world_rank); every rank must call the same collectives in
the same order with matching arguments, or every rank raises.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from . import _fastpath
from ._native import ffi, lib
from .errors import ShmtopoValueError, last_error

if TYPE_CHECKING:
    from .comm import Comm

DTYPES = {np.dtype(t): code for t, code in [
    (np.int8, lib.SHMTOPO_INT8), (np.int16, lib.SHMTOPO_INT16), (np.int32, lib.SHMTOPO_INT32),
    (np.int64, lib.SHMTOPO_INT64), (np.uint8, lib.SHMTOPO_UINT8), (np.uint16, lib.SHMTOPO_UINT16),
    (np.uint32, lib.SHMTOPO_UINT32), (np.uint64, lib.SHMTOPO_UINT64),
    (np.float32, lib.SHMTOPO_FLOAT32), (np.float64, lib.SHMTOPO_FLOAT64)]}
OPS = {"sum": lib.SHMTOPO_OP_SUM, "prod": lib.SHMTOPO_OP_PROD, "min": lib.SHMTOPO_OP_MIN,
       "max": lib.SHMTOPO_OP_MAX, "band": lib.SHMTOPO_OP_BAND, "bor": lib.SHMTOPO_OP_BOR,
       "bxor": lib.SHMTOPO_OP_BXOR}
ALGORITHMS = {None: lib.SHMTOPO_COLL_AUTO, "auto": lib.SHMTOPO_COLL_AUTO,
              "flat": lib.SHMTOPO_COLL_FLAT, "rsag": lib.SHMTOPO_COLL_RSAG}
NULL = ffi.NULL
_from_buffer = ffi.from_buffer
_barrier = lib.shmtopo_barrier


WINDOW_MIN = 64 * 1024  # smaller arrays: the copy path is as fast, and finding the window costs

# Arrays below WINDOW_MIN on a single-node comm go through _fastpath, which
# calls the same native functions (the one libshmtopo.so both modules link)
# without cffi's per-call Python costs.
_fastpath.bind(np.ndarray, np.empty_like, OPS, WINDOW_MIN,
               tuple(sorted(DTYPES, key=DTYPES.__getitem__)), last_error)
_fast_allreduce, _fast_reduce = _fastpath.allreduce, _fastpath.reduce
_fast_bcast, _fast_allgather = _fastpath.bcast, _fastpath.allgather


def _in_window(comm: "Comm", a: np.ndarray):
    """(window, offset) when a (C-contiguous, large) lies in this rank's part
    of one of the comm's windows: the zero-copy path. The size rule is the same
    on every rank, so ranks agree on whether to look."""
    if a.nbytes < WINDOW_MIN or not comm._windows or not a.flags.c_contiguous:
        return None
    for win in comm._windows:
        offset = win._offset_of(a)
        if offset is not None:
            return win, offset
    return None


class _Invalid(Exception):
    """A local argument error; every rank must still fail with it."""


def _contiguous(array: Any) -> np.ndarray:
    a = np.asarray(array)
    return a if a.flags.c_contiguous else np.ascontiguousarray(a)


def _code(table: dict, key: Any, what: str) -> int:
    try:
        return table[key]
    except (KeyError, TypeError):
        raise _Invalid(f"unsupported {what} {key!r} (expected one of "
                       f"{', '.join(str(k) for k in table if k is not None)})") from None


def _result(out: Any, shape: tuple, dtype: np.dtype, what: str) -> np.ndarray:
    if out is None:
        return np.empty(shape, dtype)
    if type(out) is np.ndarray and out.dtype == dtype and out.shape == shape and out.flags.c_contiguous \
            and out.flags.writeable:
        return out  # the common case, checked cheaply
    if not isinstance(out, np.ndarray) or not out.flags.c_contiguous or not out.flags.writeable:
        raise _Invalid(f"{what}: out must be a writable C-contiguous numpy array")
    if out.dtype != dtype or out.size != math.prod(shape):
        raise _Invalid(f"{what}: out has {out.size} x {out.dtype}, needs {shape} of {dtype}")
    return out


def _run(comm: "Comm", fn, *args) -> None:
    if fn(comm.handle, *args) < 0:
        raise last_error()


def _fail_everywhere(comm: "Comm", fn, exc: _Invalid, *poison_args) -> None:
    """Take part in the collective with an invalid element type, so that the
    peers fail too instead of waiting, then raise the local error."""
    fn(comm.handle, *poison_args)
    raise ShmtopoValueError(str(exc), 22) from None


# ---- node-local (shared memory) -----------------------------------------


def node_barrier(comm: "Comm") -> None:
    _run(comm, lib.shmtopo_barrier)


def node_bcast(comm: "Comm", a: np.ndarray, root: int, source: np.ndarray | None = None) -> None:
    """In place: a becomes the node root's a (read straight from the root's
    window part when `source`, the array given by the caller, lies in one)."""
    code = DTYPES.get(a.dtype, -1)
    found = _in_window(comm, a if source is None else source)
    if found:
        win, offset = found
        if lib.shmtopo_win_bcast(win._h, offset, _from_buffer(a), a.size, code, root) < 0:
            raise last_error()
        return
    _run(comm, lib.shmtopo_bcast, _from_buffer(a) if a.size else NULL, a.size, code, root)


def node_reduce(comm: "Comm", a: np.ndarray, out: np.ndarray | None, op: int, root: int, alg: int) -> None:
    code = DTYPES.get(a.dtype, -1)
    recv = _from_buffer(out) if out is not None and out.size else NULL
    found = _in_window(comm, a)
    if found:
        win, offset = found
        if lib.shmtopo_win_reduce(win._h, offset, recv, a.size, code, op, root, alg) < 0:
            raise last_error()
    elif root < 0:
        _run(comm, lib.shmtopo_allreduce, _from_buffer(a) if a.size else NULL, recv, a.size, code, op, alg)
    else:
        _run(comm, lib.shmtopo_reduce, _from_buffer(a) if a.size else NULL, recv, a.size, code, op, root, alg)


# ---- public operations ---------------------------------------------------


def barrier(comm: "Comm") -> None:
    """Collective: no rank leaves before every rank arrived."""
    if _barrier(comm._h) < 0:
        raise last_error()
    if comm._leaders is not None:
        if comm.rank == 0:  # only node leaders are in the leaders' comm
            comm._leaders.Barrier()
        node_barrier(comm)


def allreduce(comm: "Comm", array: Any, op: str = "sum", *, out: Any = None,
              algorithm: str | None = None) -> np.ndarray:
    """Collective: the element-wise reduction of every rank's array.

    op: sum, prod, min, max (band, bor, bxor for integers). algorithm: None
    (by size), "flat" or "rsag". Returns out (a new array when None)."""
    if algorithm is None:
        result = _fast_allreduce(comm._fast, array, out, op)
        if result is not None:
            return result
    a = _contiguous(array)
    try:
        opc = _code(OPS, op, "operation")
        alg = _code(ALGORITHMS, algorithm, "algorithm")
        _code(DTYPES, a.dtype, "dtype")
        result = _result(out, a.shape, a.dtype, "allreduce")
    except _Invalid as exc:
        _fail_everywhere(comm, lib.shmtopo_allreduce, exc, NULL, NULL, 0, -1, 0, 0)
    node_reduce(comm, a, result, opc, -1 if comm._leaders is None else 0, alg)
    if comm._leaders is not None:
        from .multinode import leaders_allreduce
        leaders_allreduce(comm, result, op)
        node_bcast(comm, result, 0)
    return result


def reduce(comm: "Comm", array: Any, op: str = "sum", root: int = 0, *, out: Any = None,
           algorithm: str | None = None) -> np.ndarray | None:
    """Collective: the reduction on rank `root` (returned there; None elsewhere)."""
    if algorithm is None and type(root) is int:
        result = _fast_reduce(comm._fast, array, out, op, root, root == comm.world_rank)
        if result is not NotImplemented:
            return result
    a = _contiguous(array)
    try:
        opc = _code(OPS, op, "operation")
        alg = _code(ALGORITHMS, algorithm, "algorithm")
        _code(DTYPES, a.dtype, "dtype")
        if not isinstance(root, (int, np.integer)):
            raise _Invalid(f"root must be a rank number, not {root!r}")
        mine = int(root) == comm.world_rank
        result = _result(out, a.shape, a.dtype, "reduce") if mine or comm._leaders is not None else None
    except _Invalid as exc:
        _fail_everywhere(comm, lib.shmtopo_reduce, exc, NULL, NULL, 0, -1, 0, 0, 0)
    if comm._leaders is None:
        node_reduce(comm, a, result, opc, int(root), alg)
        return result
    from .multinode import hierarchical_reduce
    return hierarchical_reduce(comm, a, result, op, opc, int(root), alg)


def bcast(comm: "Comm", array: Any, root: int = 0, *, out: Any = None) -> np.ndarray:
    """Collective: every rank gets rank `root`'s array (the other ranks' array
    only gives shape and dtype). Pass out=array to receive in place."""
    if out is array and type(root) is int:  # in place
        result = _fast_bcast(comm._fast, array, root)
        if result is not None:
            return result
    a = _contiguous(array)
    try:
        _code(DTYPES, a.dtype, "dtype")
        if not isinstance(root, (int, np.integer)):
            raise _Invalid(f"root must be a rank number, not {root!r}")
        result = _result(out, a.shape, a.dtype, "bcast")
    except _Invalid as exc:
        _fail_everywhere(comm, lib.shmtopo_bcast, exc, NULL, 0, -1, 0)
    if comm._leaders is None:
        if _in_window(comm, a):
            node_bcast(comm, result, int(root), source=a)
            return result
        if result is not a and comm.world_rank == int(root):
            result[...] = a
        node_bcast(comm, result, int(root))
        return result
    if result is not a and comm.world_rank == int(root):
        result[...] = a
    from .multinode import hierarchical_bcast
    return hierarchical_bcast(comm, result, int(root))


def allgather(comm: "Comm", array: Any, *, out: Any = None) -> np.ndarray:
    """Collective: shape (nranks, *array.shape), row r from rank r."""
    if out is not None:
        result = _fast_allgather(comm._fast, array, out, comm.world_size)
        if result is not None:
            return result
    a = _contiguous(array)
    nranks = comm.world_size
    try:
        _code(DTYPES, a.dtype, "dtype")
        result = _result(out, (nranks,) + a.shape, a.dtype, "allgather")
    except _Invalid as exc:
        _fail_everywhere(comm, lib.shmtopo_allgather, exc, NULL, NULL, 0, -1)
    if comm._leaders is None:
        found = _in_window(comm, a)
        if found:
            win, offset = found
            if lib.shmtopo_win_allgather(win._h, offset, _from_buffer(result), a.size, DTYPES[a.dtype]) < 0:
                raise last_error()
            return result
        _run(comm, lib.shmtopo_allgather, _from_buffer(a) if a.size else NULL,
             _from_buffer(result) if result.size else NULL, a.size, DTYPES[a.dtype])
        return result
    from .multinode import hierarchical_allgather
    return hierarchical_allgather(comm, a, result)


def _blocks(comm: "Comm", a: np.ndarray, what: str) -> tuple:
    nranks = comm.world_size
    if a.ndim == 0 or a.shape[0] % nranks:
        raise _Invalid(f"{what}: the first axis ({a.shape[:1]}) must split into {nranks} equal blocks")
    return (a.shape[0] // nranks,) + a.shape[1:]


def reduce_scatter(comm: "Comm", array: Any, op: str = "sum", *, out: Any = None) -> np.ndarray:
    """Collective: array's first axis splits into nranks equal blocks; rank r
    gets the reduction of everybody's block r."""
    a = _contiguous(array)
    try:
        opc = _code(OPS, op, "operation")
        _code(DTYPES, a.dtype, "dtype")
        block = _blocks(comm, a, "reduce_scatter")
        result = _result(out, block, a.dtype, "reduce_scatter")
    except _Invalid as exc:
        _fail_everywhere(comm, lib.shmtopo_reduce_scatter, exc, NULL, NULL, 0, -1, 0)
    if comm._leaders is None:
        _run(comm, lib.shmtopo_reduce_scatter, _from_buffer(a) if a.size else NULL,
             _from_buffer(result) if result.size else NULL, result.size, DTYPES[a.dtype], opc)
        return result
    total = allreduce(comm, a, op)
    result[...] = total.reshape((comm.world_size,) + block)[comm.world_rank]
    return result


def alltoall(comm: "Comm", array: Any, *, out: Any = None) -> np.ndarray:
    """Collective: block p of the result is block `rank` of rank p's array
    (first axis split into nranks equal blocks)."""
    a = _contiguous(array)
    try:
        _code(DTYPES, a.dtype, "dtype")
        block = _blocks(comm, a, "alltoall")
        result = _result(out, a.shape, a.dtype, "alltoall")
    except _Invalid as exc:
        _fail_everywhere(comm, lib.shmtopo_alltoall, exc, NULL, NULL, 0, -1)
    count = math.prod(block)
    if comm._leaders is None:
        _run(comm, lib.shmtopo_alltoall, _from_buffer(a) if a.size else NULL,
             _from_buffer(result) if result.size else NULL, count, DTYPES[a.dtype])
        return result
    comm._world.Alltoall(a, result)  # across nodes there is no shared memory to use
    return result
