"""Collectives inside one node: the native core's calls over the comm's
shared scratch buffers, or straight out of a window where the input lies in
one (the zero-copy path), and the fast entry (native/cpython/fastpath.c)
that takes plain arrays to the same native calls without cffi's per-call
costs.

Where an input lies is decided in one place, the fast entry's ``place_of``:
:func:`window_of` asks it, so both entries take the same path on every rank.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .._fastpath import bind, place
from .._base import CommLike
from .._native import ffi, lib
from .._types import BY_CODE, OPS, Array, dtype_code, on_new_dtype
from ..errors import ShmtopoValueError, last_error

#: smaller arrays take the copy path even in a window: it is as fast
WINDOW_MIN = 64 * 1024

NULL = ffi.NULL
_from_buffer = ffi.from_buffer



def _bind_fast_entry() -> None:
    bind(np.ndarray, np.empty_like, OPS, WINDOW_MIN,
                   tuple(BY_CODE.get(c) for c in range(lib.SHMTOPO_NDTYPES)), last_error, ShmtopoValueError)


_bind_fast_entry()
on_new_dtype(_bind_fast_entry)  # bfloat16, once taken in, takes the fast entry too
native_barrier = lib.shmtopo_barrier


def window_of(comm: CommLike, a: Array) -> tuple[Any, int] | None:
    """(window, byte offset) when a (C-contiguous, from WINDOW_MIN bytes)
    lies in this rank's part of one of the comm's windows: the zero-copy
    path. The size rule is the same on every rank, so ranks agree on whether
    to look. Collectives that span nodes always copy: windows are node-local."""
    if a.nbytes < WINDOW_MIN or not comm.windows or not a.flags.c_contiguous or comm.nnodes > 1:
        return None
    found: tuple[Any, int] | None = place(comm.fast_handle, comm.windows, a)
    return found


def checked(rc: int) -> None:
    """Raise the core's error for a failed call (rc < 0)."""
    if rc < 0:
        raise last_error()


def pointer(a: Array | None) -> Any:
    """The data pointer the core takes (NULL for no array or an empty one)."""
    return _from_buffer(a) if a is not None and a.size else NULL


def sizes_pointer(a: Array | None) -> Any:
    """A size_t array (counts, displacements) as the core takes it."""
    return ffi.cast("size_t *", _from_buffer(a)) if a is not None else NULL


def node_bcast(comm: CommLike, a: Array, root: int, source: Array | None = None) -> None:
    """In place: a becomes the node root's a (read straight from the root's
    window part when `source`, the array given by the caller, lies in one)."""
    found = window_of(comm, a if source is None else source)
    if found:
        win, offset = found
        checked(lib.shmtopo_win_bcast(win.handle, offset, _from_buffer(a), a.size, dtype_code(a), root))
        return
    checked(lib.shmtopo_bcast(comm.handle, pointer(a), a.size, dtype_code(a), root))


def node_scatter(comm: CommLike, a: Array | None, result: Array, root: int) -> None:
    """result = block r of the node root's a (read on the root only: as many
    blocks as ranks, each of result's size) on each rank r of the node:
    each rank reads its own block straight from the root's a where the comm
    has single copy, so all copy at once."""
    checked(lib.shmtopo_scatter(comm.handle, pointer(a), pointer(result), result.size, dtype_code(result), root))


def node_reduce(comm: CommLike, a: Array, out: Array | None, op: int, root: int, alg: int) -> None:
    """out = the reduction of every rank's a: on root, or on every rank for
    root < 0 (an allreduce)."""
    code = dtype_code(a)
    found = window_of(comm, a)
    if found:
        win, offset = found
        checked(lib.shmtopo_win_reduce(win.handle, offset, pointer(out), a.size, code, op, root, alg))
    elif root < 0:
        checked(lib.shmtopo_allreduce(comm.handle, pointer(a), pointer(out), a.size, code, op, alg))
    else:
        checked(lib.shmtopo_reduce(comm.handle, pointer(a), pointer(out), a.size, code, op, root, alg))


def node_allgather(comm: CommLike, a: Array, result: Array) -> None:
    """result[r] = rank r's a, for every rank of the node."""
    code = dtype_code(a)
    found = window_of(comm, a)
    if found:
        win, offset = found
        checked(lib.shmtopo_win_allgather(win.handle, offset, _from_buffer(result), a.size, code))
        return
    checked(lib.shmtopo_allgather(comm.handle, pointer(a), pointer(result), a.size, code))
