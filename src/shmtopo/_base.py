"""What every layer above may rely on: the lifetime rules of collective
objects, what a comm offers to the modules below comm.py (:class:`CommLike`),
and how a higher layer hangs its own data on a comm (:class:`Attributes`).

Collective objects (Comm, Window) are freed explicitly on every rank, or
abandoned locally when a ``with`` block ends by an exception (the other
ranks may never reach their free), never by the garbage collector, which
only warns.

A process that exits with comms still open (an uncaught exception on one
rank, say) leaves them and their windows first, so that peers waiting on it
(in a collective, a fence, a peer fence, an accelerated window's lock) raise
PeerAbortedError at once instead of waiting for the process to be gone,
which MPI_Finalize may delay forever while the peers wait. Before that,
the objects built on a comm (an accelerated comm) drop theirs.
"""
from __future__ import annotations

import atexit
import functools
import warnings
import weakref
from types import TracebackType
from typing import TYPE_CHECKING, Any, Callable, Optional, Protocol, TypeVar, cast

from ._fastpath import claim, unclaim
from ._native import ffi, lib
from .errors import ShmtopoValueError, check

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


def release_holders() -> None:
    """Local: every object built on a comm drops it (``_release()``): at
    exit, and when MPI_Finalize comes first (the program's own call), while
    the communicators those objects wrap still work."""
    for holder in list(_holders.values()):
        holder._release()


def _at_exit() -> None:
    release_holders()
    for comm in list(_open_comms):
        comm.depart()


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


# -- one thread at a time --------------------------------------------------------
#
# A comm takes one collective call at a time, and each window one fence
# (MPI_THREAD_SERIALIZED per object): each call holds the native object
# (shmtopo_comm_claim, shmtopo_win_claim, taken with the GIL), so that a
# second thread's call raises ShmtopoError (EBUSY) instead of running beside
# it, and a free never releases memory a wait still reads. The fast entries
# hold them themselves; the general paths hold them here, by address (0:
# nothing to hold).

class Held:
    """``with Held(comm.address, win.address):`` this thread holds the comm
    and the window (either may be 0) for the block."""

    __slots__ = ("comm", "win")

    def __init__(self, comm: int, win: int = 0):
        self.comm, self.win = comm, win

    def __enter__(self) -> None:
        claim(self.comm, self.win)

    def __exit__(self, *exc: object) -> None:
        unclaim(self.comm, self.win)


def hold_all(comm: int, windows: list[int]) -> None:
    """Hold a comm and all its windows (to free or abandon them), or none:
    ShmtopoError (EBUSY) when another thread holds any."""
    claim(comm, 0)
    taken: list[int] = []
    try:
        for win in windows:
            claim(0, win)
            taken.append(win)
    except BaseException:
        release_all(comm, taken)
        raise


def release_all(comm: int, windows: list[int]) -> None:
    for win in windows:
        unclaim(0, win)
    unclaim(comm, 0)


Call = TypeVar("Call", bound=Callable[..., Any])


def holding_comm(call: Call) -> Call:
    """A collective whose first argument is a comm holds it while it runs."""
    @functools.wraps(call)
    def held(comm: Any, *args: Any, **kwargs: Any) -> Any:
        with Held(comm.address):
            return call(comm, *args, **kwargs)
    return cast(Call, held)


def number_of_name(parse: Callable[[bytes, Any], int], name: Any, what: str, expected: str = "a name") -> int:
    """The native enum number of a name, through the core's parser for it
    (``lib.shmtopo_*_from_name``): ShmtopoValueError for an unknown name or
    for anything that is not a str."""
    if not isinstance(name, str):
        raise ShmtopoValueError(f"{what} must be {expected}, not {name!r}")
    out = ffi.new("int *")
    check(parse(name.encode(), out))
    return int(out[0])


_Callback = Optional[Callable[[Any], None]]


class Attributes:
    """Data a higher layer hangs on a comm, by key, with what to do with it
    when the comm is freed (collective) or abandoned (local): MPI's attribute
    caching. The comm runs those callbacks; the layer that attached a value
    is the only one that reads it."""

    def __init__(self) -> None:
        self._values: dict[object, tuple[Any, _Callback, _Callback, _Callback]] = {}

    def set(self, key: object, value: Any, *, free: Callable[[Any], None] | None = None,
            abandon: Callable[[Any], None] | None = None, release: Callable[[Any], None] | None = None) -> None:
        """Attach value under key (replacing what was there, without its
        callbacks). release: for the comm's local clean release; abandon
        stands in where it is not given."""
        self._values[key] = (value, free, abandon, release or abandon)

    def get(self, key: object, default: Any = None) -> Any:
        entry = self._values.get(key)
        return default if entry is None else entry[0]

    def free_all(self) -> None:
        """Collective, from the comm's free: each value's free callback, the
        last attached first."""
        self._run(1)

    def abandon_all(self) -> None:
        """Local, from the comm's abandon: each value's abandon callback."""
        self._run(2)

    def release_all(self) -> None:
        """Local, from the comm's release: each value's release callback."""
        self._run(3)

    def _run(self, which: int) -> None:
        held, self._values = self._values, {}
        for entry in reversed(list(held.values())):
            callback = entry[which]
            if callback is not None:
                callback(entry[0])


class CommLike(Protocol):
    """What a comm offers the layers below comm.py (agreement, windows, the
    topology, the collectives): comm.py's Comm is the one implementation."""

    plan: Any                 #: job.NodePlan: where this rank sits in the job
    attributes: Attributes    #: what higher layers attached to the comm
    fast_handle: int          #: the native comm as a number for the fast entries (0: not to be taken)
    span_handle: int          #: the same where collectives span nodes, for the entries that do (else 0)
    address: int              #: the native comm as a number, to hold it (Held); 0 once freed
    fast_windows: Any         #: the windows list the fast entries search, None while levels may take large calls
    windows: list[Any]        #: the comm's open windows, in creation order (the comm keeps it)

    @property
    def handle(self) -> Any: ...
    @property
    def rank(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def world_rank(self) -> int: ...
    @property
    def world_size(self) -> int: ...
    @property
    def nnodes(self) -> int: ...
    @property
    def timeout(self) -> float: ...
    @property
    def mpi(self) -> Any: ...
    @property
    def freed(self) -> bool: ...

    def allocate(self, nbytes: int | None = None) -> Any: ...
    def split_by_color(self, color: int | None) -> "CommLike | None": ...
    def allow_fast_windows(self, allowed: bool) -> None: ...
    def free(self) -> None: ...
    def abandon(self, _origin: int | None = None) -> None: ...
    def release(self) -> None: ...
