"""Persistent collectives (like MPI's Allreduce_init): arguments are checked
and kept once, and each ``start()`` runs the collective on the same arrays
with no per-call argument handling. For tight loops on small arrays."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import numpy.typing as npt

from .._base import CommLike, Held
from .._fastpath import NativeRequest, claim, start, unclaim
from .._native import ffi, lib
from .._types import ALGORITHMS, ALLREDUCE, ALLTOALL, BCAST, OPS, check_apart, checked_root, dtype_code, table_code
from ..agreement import normalised
from ..errors import FreedError, ShmtopoValueError, check

if TYPE_CHECKING:
    from types import TracebackType

    from typing_extensions import Self


class Request(NativeRequest):
    """A persistent collective. ``start()`` runs it (collective; complete on
    return), ``wait()`` is there for MPI-style code, ``free()`` releases it
    (local). Also a context manager. The arrays must stay as they are: the
    request keeps them alive and writes into them."""

    def __init__(self, comm: CommLike, init: Callable[..., int], arrays: tuple[npt.NDArray[Any], ...],
                 *args: int) -> None:
        self._h, self._address = ffi.NULL, 0
        self._comm = comm
        self._arrays = arrays  # keeps the buffers alive and pinned
        self._buffers = [ffi.from_buffer(a, require_writable=i > 0 or len(arrays) == 1)
                         if a.size else ffi.NULL for i, a in enumerate(arrays)]
        out = ffi.new("shmtopo_request_t **")
        check(init(comm.handle, *self._buffers, *args, out))
        self._h = out[0]
        self._address = int(ffi.cast("uintptr_t", self._h))  # for _fastpath.start

    # start() is NativeRequest's, in C; it comes here when it cannot run
    def _start_general(self) -> None:
        # the request points into the comm, whose address is 0 once it is
        # freed; holding it first runs the nonblocking calls posted before
        address = self._comm.address
        if not address:
            raise FreedError("the request's comm has been freed", 9)
        with Held(address):
            start(address, self._address)

    def __call__(self) -> None:
        self.start()

    def wait(self) -> None:
        """Complete the last start (it is complete on return already)."""
        check(lib.shmtopo_request_wait(self._h))

    def free(self) -> None:
        """Local: release the request (freeing twice is a no-op). While
        another thread is inside a call on the comm (its start()), raises
        ShmtopoError (EBUSY) and keeps it."""
        if self._h != ffi.NULL:
            comm = self._comm.address
            claim(comm, 0)
            handle = self._h
            self._h, self._address = ffi.NULL, 0  # no other thread starts it while it goes
            lib.shmtopo_request_free(handle)
            unclaim(comm, 0)
            self._buffers = []

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.free()

    def __del__(self) -> None:
        self.free()  # local memory only: fine for the garbage collector


def _array(a: Any, what: str, writable: bool = False) -> npt.NDArray[Any]:
    if not isinstance(a, np.ndarray) or not a.flags.c_contiguous or (writable and not a.flags.writeable):
        raise ShmtopoValueError(f"{what} must be a{' writable' if writable else ''} C-contiguous numpy array")
    return a


def _single_node(comm: CommLike, what: str) -> None:
    if comm.nnodes > 1:
        raise ShmtopoValueError(f"{what} works on single-node comms only")


def _allreduce_args(comm: CommLike, send: Any, recv: Any, op: Any, algorithm: Any
                    ) -> tuple[npt.NDArray[Any], npt.NDArray[Any], tuple[int, int, int, int]]:
    _single_node(comm, "allreduce_init")
    s, r = _array(send, "send"), _array(recv, "recv", writable=True)
    if s.dtype != r.dtype or s.size != r.size:
        raise ShmtopoValueError("send and recv must have the same dtype and size")
    check_apart("allreduce_init", s, r)
    return s, r, (s.size, dtype_code(s), table_code(OPS, op, "operation"), table_code(ALGORITHMS, algorithm, "algorithm"))


def allreduce_init(comm: CommLike, send: Any, recv: Any, op: str = "sum",
                   algorithm: str | None = None) -> Request:
    s, r, codes = normalised(comm, ALLREDUCE, _allreduce_args, comm, send, recv, op, algorithm)
    return Request(comm, lib.shmtopo_allreduce_init, (s, r), *codes)


def _bcast_args(comm: CommLike, buf: Any, root: Any) -> tuple[npt.NDArray[Any], int, int]:
    _single_node(comm, "bcast_init")
    b = _array(buf, "buf", writable=True)
    return b, dtype_code(b), checked_root(comm, root)


def bcast_init(comm: CommLike, buf: Any, root: int = 0) -> Request:
    b, code, r = normalised(comm, BCAST, _bcast_args, comm, buf, root)
    return Request(comm, lib.shmtopo_bcast_init, (b,), b.size, code, r)


def _alltoall_args(comm: CommLike, send: Any, recv: Any) -> tuple[npt.NDArray[Any], npt.NDArray[Any], int]:
    _single_node(comm, "alltoall_init")
    s, r = _array(send, "send"), _array(recv, "recv", writable=True)
    if s.dtype != r.dtype or s.size != r.size or s.size % comm.size:
        raise ShmtopoValueError("send and recv must have the same dtype and a size that splits into comm.size blocks")
    check_apart("alltoall_init", s, r)
    return s, r, dtype_code(s)


def alltoall_init(comm: CommLike, send: Any, recv: Any) -> Request:
    s, r, code = normalised(comm, ALLTOALL, _alltoall_args, comm, send, recv)
    return Request(comm, lib.shmtopo_alltoall_init, (s, r), s.size // comm.size, code)
