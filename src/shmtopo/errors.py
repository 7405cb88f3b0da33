"""Exceptions, and the one place that turns native failures into them.

Every class also subclasses the matching builtin, so ``except ValueError``
catches a bad argument and ``except TimeoutError`` a timed-out fence.

A Python exception raised inside a callback the native core calls (an
out-of-band allgather, the interrupt check of a wait) cannot cross C: it is
kept here, per thread, and becomes the native call's exception. Exceptions
that are not ``Exception``s (KeyboardInterrupt, SystemExit) come out
unchanged.
"""
from __future__ import annotations

import errno as _errno
import threading

from ._native import ffi, lib


class ShmtopoError(Exception):
    """Base class. ``errno`` is the native error number, ``rank`` the peer
    the failure is about (or None)."""

    errno: int | None  # as OSError's, which ShmtopoOSError also is
    rank: int | None

    def __init__(self, message: str, errno: int = 0, rank: int | None = None):
        super().__init__(message)
        self.errno = errno
        self.rank = rank


class ShmtopoValueError(ShmtopoError, ValueError):
    """A bad argument, or ranks that passed different ones."""


class ShmtopoArgumentError(ShmtopoValueError, TypeError, BufferError, RuntimeError):
    """Bad or disagreeing arguments to a collective of shmtopo.accelerate's
    comm, raised on every rank: a ShmtopoValueError, and also each class
    mpi4py raises for bad arguments on the rank at fault (TypeError,
    BufferError, and RuntimeError, the base of MPI.Exception), so that an
    ``except`` written for mpi4py catches it."""


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


class ForkedProcessError(ShmtopoError, RuntimeError):
    """A fork child of a rank's process used the rank's comm or window: only
    the process that made them can act as the rank."""


class DelegatedToMPI(ShmtopoValueError):
    """The verdict of a call's agreement when a rank hands the call to MPI
    (the drop-in, for arguments only MPI takes) and the others would have
    run it in shared memory: every rank hands it to MPI. The drop-in catches
    it; it reaches a program only where one rank called the shmtopo comm's
    own method and another the drop-in's with such arguments."""


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
    _errno.ESRCH: ForkedProcessError,
    _errno.ECANCELED: DelegatedToMPI,  # SHMTOPO_EDELEGATED
}

_kept = threading.local()


def keep(exc: BaseException) -> None:
    """Keep an exception raised inside a native callback of this thread, for
    the native call that called it to raise."""
    _kept.exc = exc


def take_kept() -> BaseException | None:
    exc = getattr(_kept, "exc", None)
    _kept.exc = None
    return exc


def from_errno(err: int, message: str, rank: int | None = None) -> ShmtopoError:
    """The exception class for an errno, with a message (and rank)."""
    cls = _BY_ERRNO.get(err, ShmtopoOSError)
    return cls(message or _errno.errorcode.get(err, "error"), err, rank)


def last_error(err: int | None = None) -> BaseException:
    """The exception for the native call that just failed in this thread
    (err: its errno, when the call did not go through cffi). Raise it with
    ``raise last_error() from ...`` where it chains a kept callback error."""
    if err is None:
        err = ffi.errno
    message = ffi.string(lib.shmtopo_last_error()).decode(errors="replace")
    rank = lib.shmtopo_last_error_rank()
    kept = take_kept()
    if kept is not None and (not isinstance(kept, Exception) or isinstance(kept, (PeerDeadError, PeerAbortedError))):
        # KeyboardInterrupt, SystemExit; and a death, or a rank that left
        # after an error, that a callback heard of (across nodes), which
        # names that rank itself: unchanged
        return kept
    if err == _errno.EINTR:
        return KeyboardInterrupt(message)
    exc = from_errno(err, message, rank if rank >= 0 else None)
    if kept is not None:
        if err == _errno.ECOMM:
            exc = CallbackError(f"{message}: {kept!r}", err, exc.rank)
        exc.__cause__ = kept
    return exc


def check(rc: int) -> int:
    """Return rc, or raise the matching exception when it is negative."""
    if rc < 0:
        raise last_error()
    return rc
