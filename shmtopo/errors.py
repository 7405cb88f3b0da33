"""Exceptions, and the one place that turns native failures into them.

Every class also subclasses the matching builtin, so ``except ValueError``
catches a bad argument and ``except TimeoutError`` a timed-out fence.
"""
from __future__ import annotations

import errno as _errno

from ._native import ffi, lib


class ShmtopoError(Exception):
    """Base class. ``errno`` is the native error number, ``rank`` the peer
    the failure is about (or None)."""

    def __init__(self, message: str, errno: int = 0, rank: int | None = None):
        super().__init__(message)
        self.errno = errno
        self.rank = rank


class ShmtopoValueError(ShmtopoError, ValueError):
    """A bad argument, or ranks that passed different ones."""


class FreedError(ShmtopoError, ValueError):
    """The window, comm or topology was freed already."""


class ShmtopoTimeoutError(ShmtopoError, TimeoutError):
    """A wait lasted longer than the timeout."""


class PeerDeadError(ShmtopoError, RuntimeError):
    """A peer process exited while this one waited for it (``rank`` names it)."""


class PeerAbortedError(ShmtopoError, RuntimeError):
    """A peer abandoned the window after an error of its own (``rank`` names it)."""


class BrokenWindowError(ShmtopoError, RuntimeError):
    """An earlier wait on this window failed; it can only be freed."""


class CallbackError(ShmtopoError, RuntimeError):
    """An out-of-band callback (allgather, barrier) failed."""


class ShmtopoMemoryError(ShmtopoError, MemoryError):
    """Not enough memory for a segment."""


class ShmtopoOSError(ShmtopoError, OSError):
    """Any other system failure (``errno`` says which)."""

    def __init__(self, message: str, errno: int = 0, rank: int | None = None):
        OSError.__init__(self, errno, message)
        self.rank = rank

    def __str__(self) -> str:
        return self.strerror or ""


class BackendUnavailableError(ShmtopoOSError):
    """The requested shared-memory backend cannot work on this machine."""


_BY_ERRNO = {
    _errno.EINVAL: ShmtopoValueError,
    _errno.EBADF: FreedError,
    _errno.ETIMEDOUT: ShmtopoTimeoutError,
    _errno.EOWNERDEAD: PeerDeadError,
    _errno.EPIPE: BrokenWindowError,
    _errno.ECONNABORTED: PeerAbortedError,
    _errno.ECOMM: CallbackError,
    _errno.ENOMEM: ShmtopoMemoryError,
    _errno.ENODEV: BackendUnavailableError,
    _errno.ENOTSUP: BackendUnavailableError,
}


def last_error(err: int | None = None) -> ShmtopoError:
    """The exception for the native call that just failed in this thread
    (err: its errno, when the call did not go through cffi)."""
    if err is None:
        err = ffi.errno
    message = ffi.string(lib.shmtopo_last_error()).decode(errors="replace")
    rank = lib.shmtopo_last_error_rank()
    cls = _BY_ERRNO.get(err, ShmtopoOSError)
    return cls(message or _errno.errorcode.get(err, "error"), err, rank if rank >= 0 else None)


def check(rc: int) -> int:
    """Return rc, or raise the matching exception when it is negative."""
    if rc < 0:
        raise last_error()
    return rc
