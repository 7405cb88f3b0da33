"""Persistent collectives (like MPI's Allreduce_init): arguments are checked
and kept once, and each ``start()`` runs the collective on the same arrays
with no per-call argument handling. For tight loops on small arrays."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ._native import ffi, lib
from .errors import FreedError, check, last_error

if TYPE_CHECKING:
    from .comm import Comm

_start = lib.shmtopo_request_start


class Request:
    """A persistent collective. ``start()`` runs it (collective; complete on
    return), ``wait()`` is there for MPI-style code, ``free()`` releases it
    (local). Also a context manager. The arrays must stay as they are: the
    request keeps them alive and writes into them."""

    def __init__(self, comm: "Comm", init, arrays: tuple[np.ndarray, ...], *args):
        self._h = ffi.NULL
        self._comm = comm
        self._arrays = arrays  # keeps the buffers alive and pinned
        self._buffers = [ffi.from_buffer(a, require_writable=i > 0 or len(arrays) == 1)
                         if a.size else ffi.NULL for i, a in enumerate(arrays)]
        out = ffi.new("shmtopo_request_t **")
        check(init(comm.handle, *self._buffers, *args, out))
        self._h = out[0]

    def start(self) -> None:
        if self._comm._h == ffi.NULL:  # the request points into the comm
            raise FreedError("the request's comm has been freed", 9)
        if _start(self._h) < 0:
            raise last_error()

    __call__ = start

    def wait(self) -> None:
        check(lib.shmtopo_request_wait(self._h))

    def free(self) -> None:
        if self._h != ffi.NULL:
            lib.shmtopo_request_free(self._h)
            self._h = ffi.NULL
            self._buffers = []

    def __enter__(self) -> "Request":
        return self

    def __exit__(self, *exc) -> None:
        self.free()

    def __del__(self):
        self.free()  # local memory only: fine for the garbage collector


def _array(a: Any, what: str, writable: bool = False) -> np.ndarray:
    from .errors import ShmtopoValueError

    if not isinstance(a, np.ndarray) or not a.flags.c_contiguous or (writable and not a.flags.writeable):
        raise ShmtopoValueError(f"{what} must be a{' writable' if writable else ''} C-contiguous numpy array")
    return a


def allreduce_init(comm: "Comm", send: Any, recv: Any, op: str = "sum",
                   algorithm: str | None = None) -> Request:
    from .collectives import ALGORITHMS, DTYPES, OPS, _code, _Invalid
    from .errors import ShmtopoValueError

    s, r = _array(send, "send"), _array(recv, "recv", writable=True)
    if s.dtype != r.dtype or s.size != r.size:
        raise ShmtopoValueError("send and recv must have the same dtype and size")
    try:
        codes = (s.size, _code(DTYPES, s.dtype, "dtype"), _code(OPS, op, "operation"),
                 _code(ALGORITHMS, algorithm, "algorithm"))
    except _Invalid as exc:
        raise ShmtopoValueError(str(exc)) from None
    return Request(comm, lib.shmtopo_allreduce_init, (s, r), *codes)


def bcast_init(comm: "Comm", buf: Any, root: int = 0) -> Request:
    from .collectives import DTYPES, _code, _Invalid
    from .errors import ShmtopoValueError

    b = _array(buf, "buf", writable=True)
    try:
        code = _code(DTYPES, b.dtype, "dtype")
    except _Invalid as exc:
        raise ShmtopoValueError(str(exc)) from None
    return Request(comm, lib.shmtopo_bcast_init, (b,), b.size, code, int(root))


def alltoall_init(comm: "Comm", send: Any, recv: Any) -> Request:
    from .collectives import DTYPES, _code, _Invalid
    from .errors import ShmtopoValueError

    s, r = _array(send, "send"), _array(recv, "recv", writable=True)
    if s.dtype != r.dtype or s.size != r.size or s.size % comm.size:
        raise ShmtopoValueError("send and recv must have the same dtype and a size that splits into comm.size blocks")
    try:
        code = _code(DTYPES, s.dtype, "dtype")
    except _Invalid as exc:
        raise ShmtopoValueError(str(exc)) from None
    return Request(comm, lib.shmtopo_alltoall_init, (s, r), s.size // comm.size, code)
