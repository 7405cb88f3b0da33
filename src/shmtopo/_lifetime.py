"""Lifetime rules shared by collective objects (Comm, Window): freed
explicitly on every rank, or abandoned locally when a ``with`` block ends by
an exception (the other ranks may never reach their free), never by the
garbage collector, which only warns.

A process that exits with comms still open (an uncaught exception on one
rank, say) leaves them first, so that peers waiting on it raise
PeerAbortedError at once instead of waiting for the process to be gone,
which MPI_Finalize may delay forever while the peers wait. Before that,
the objects built on a comm (an accelerated comm) drop theirs.
"""
from __future__ import annotations

import atexit
import warnings
import weakref
from types import TracebackType
from typing import TYPE_CHECKING, Any

from ._native import ffi, lib

if TYPE_CHECKING:
    from typing_extensions import Self

_open_comms: "weakref.WeakSet[Any]" = weakref.WeakSet()
# by id: an accelerated comm is unhashable, like the mpi4py communicator it wraps
_holders: "weakref.WeakValueDictionary[int, Any]" = weakref.WeakValueDictionary()
_hooked = False


def opened(comm: Any) -> None:
    """Note a comm this process made. The exit hook is registered at the
    first one, after mpi4py's (which from_mpi imports first): atexit runs
    the last registered first, so it runs before MPI_Finalize."""
    _open_comms.add(comm)
    _hook()


def holds_comm(holder: Any) -> None:
    """Note an object built on a comm this process made: at exit, its
    ``_release()`` (local) drops that comm, before the comms still open
    are left."""
    _holders[id(holder)] = holder
    _hook()


def _hook() -> None:
    global _hooked
    if not _hooked:
        atexit.register(_at_exit)
        _hooked = True


def _at_exit() -> None:
    for holder in list(_holders.values()):
        holder._release()
    for comm in list(_open_comms):
        if comm._h != ffi.NULL:
            lib.shmtopo_comm_leave(comm._h)


class Collective:
    _h: Any = ffi.NULL

    def free(self) -> None:
        raise NotImplementedError

    def abandon(self, _origin: int | None = None) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None:
            self.free()
        else:
            # a peer's death or error that caused ours stays the one named
            self.abandon(_origin=getattr(exc, "rank", None))

    def __del__(self) -> None:
        if self._h != ffi.NULL:
            warnings.warn(f"shmtopo.{type(self).__name__} was never freed (free() is collective; "
                          "call it on every rank)", ResourceWarning, stacklevel=2)
