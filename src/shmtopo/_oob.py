"""Out-of-band transports: the Python functions the native core calls to
exchange set-up data (allgather, barrier) while a comm is being made, and
between node leaders; and the interrupt check of native waits.

A Python exception inside a callback cannot cross C: errors.keep() holds it
and the native call raises it (KeyboardInterrupt and SystemExit unchanged).
cffi's ``onerror`` catches even an exception raised on the callback's first
instruction, where a pending Ctrl-C lands.

Every MPI exchange shmtopo makes itself waits through :func:`wait`: it polls,
so that Ctrl-C works, and gives up after the comm's timeout.
"""
from __future__ import annotations

import errno as _errno
import functools
import pickle
import struct
import time
from typing import Any, Callable, Union

from ._native import ffi, lib
from .errors import CallbackError, ShmtopoTimeoutError, keep, take_kept

AllgatherFn = Callable[[memoryview, memoryview], None]
BarrierFn = Callable[[], None]


def _failed(exc_type: type[BaseException], exc: BaseException, tb: Any) -> int:
    keep(exc)
    return _errno.ETIMEDOUT if isinstance(exc, TimeoutError) else -1


def _interrupted(exc_type: type[BaseException], exc: BaseException, tb: Any) -> int:
    keep(exc)
    return 1


class Transport:
    def __init__(self, size: int, allgather: AllgatherFn, barrier: BarrierFn):
        self.size = size
        self.allgather = allgather
        self.barrier = barrier
        self.handle = ffi.new_handle(self)  # kept alive as long as the transport
        self.oob = ffi.new("shmtopo_oob_t *")
        self.oob.allgather = lib._shmtopo_py_allgather
        self.oob.barrier = lib._shmtopo_py_barrier
        self.oob.group = self.handle


@ffi.def_extern(onerror=_failed)  # type: ignore[untyped-decorator]
def _shmtopo_py_allgather(sendbuf: Any, recvbuf: Any, nbytes: int, group: Any) -> int:
    transport = ffi.from_handle(group)
    transport.allgather(memoryview(ffi.buffer(sendbuf, nbytes)),
                        memoryview(ffi.buffer(recvbuf, nbytes * transport.size)))
    return 0


@ffi.def_extern(onerror=_failed)  # type: ignore[untyped-decorator]
def _shmtopo_py_barrier(group: Any) -> int:
    ffi.from_handle(group).barrier()
    return 0


@ffi.def_extern(onerror=_interrupted)  # type: ignore[untyped-decorator]
def _shmtopo_py_interrupted() -> int:
    # Python runs a pending signal handler as this function starts; what it
    # raises (KeyboardInterrupt for Ctrl-C) goes to _interrupted.
    return 0


lib.shmtopo_set_interrupt_hook(lib._shmtopo_py_interrupted)


# ---- MPI, under a timeout ------------------------------------------------------

# Requests given up on after a timeout, with their buffers: MPI may still
# write into those when the late ranks arrive, so they must never be freed.
_abandoned: list[tuple[Any, tuple[Any, ...]]] = []

SHORT_WAIT = 0.05   # seconds of waiting that poll every SHORT_POLL at most
SHORT_POLL = 1e-4   # Comm.from_mpi under MPICH at 4 ranks on 2 cores: 47 ms with 1 ms polls, 12 ms with these
LONG_POLL = 1e-3


def wait(request: Any, timeout: float, what: str, *keep_alive: Any,
         news: Callable[[str], None] | None = None) -> None:
    """Complete an mpi4py request: spin briefly, then poll with growing
    sleeps, up to SHORT_POLL for SHORT_WAIT, then LONG_POLL (Ctrl-C is
    handled between polls). ShmtopoTimeoutError after
    `timeout` seconds (0: never); the request is then abandoned with its
    buffers, as it is when ``news(what)``, called at every poll, raises (a
    rank of the job died: the request may never complete)."""
    if request.Test():
        return
    start = time.monotonic()
    spins, delay = 0, 1e-5
    while not request.Test():
        if spins < 200:
            spins += 1
            continue
        now = time.monotonic()
        try:
            if news is not None:
                news(what)
            if timeout and now - start >= timeout:
                raise ShmtopoTimeoutError(f"{what} timed out after {timeout:g} s (a rank did not take part)",
                                          _errno.ETIMEDOUT)
        except BaseException:
            _abandoned.append((request, keep_alive))
            raise
        time.sleep(delay)
        # Sleeps stay short while the wait is (the peers' own progress may
        # need this rank to poll: MPICH's, with more ranks than cores, waits
        # for every rank's Test), and grow once it lasts.
        delay = min(delay * 2, SHORT_POLL if now - start < SHORT_WAIT else LONG_POLL)


class MPITransport:
    """The core's own transport over an mpi4py communicator (native/mpi_oob.c):
    the exchange is C calling the MPI library, found at run time; a wait that
    lasts goes on in :func:`wait` (news, timeout, Ctrl-C)."""

    def __init__(self, mpi_comm: Any, calls: dict[str, Any], timeout: float,
                 news: Callable[[str], None] | None, what: str):
        self.timeout, self.news, self.what = timeout, news, what
        self.handle = ffi.new_handle(self)
        self.calls = ffi.new("shmtopo_mpi_calls_t *", dict(
            calls, comm=_handle_of(mpi_comm), size=mpi_comm.Get_size(),
            slow_wait=lib._shmtopo_py_slow_wait, group=self.handle))
        oob = ffi.new("shmtopo_oob_t *")
        if lib.shmtopo_mpi_oob(self.calls, oob) < 0:
            raise OSError(ffi.string(lib.shmtopo_last_error()).decode())
        self.oob = ffi.gc(oob, lib.shmtopo_mpi_oob_free)
        self._owner = oob

    def slow_wait(self, request: int) -> None:
        from mpi4py import MPI

        wait(MPI.Request.fromhandle(request), self.timeout, f"{self.what} exchange", news=self.news)

    def allgather(self, send: Any, recv: Any) -> None:
        """recv = every rank's send, in rank order (contiguous buffers);
        raises what the wait raised."""
        mine = ffi.from_buffer(send)
        rc = self.oob.allgather(mine, ffi.from_buffer(recv, require_writable=True), len(mine), self.oob.group)
        if rc:
            kept = take_kept()  # the wait's own exception: a timeout, a death, Ctrl-C
            raise kept if kept is not None else CallbackError(f"{self.what} exchange failed (MPI error {rc})",
                                                              _errno.ECOMM)


@ffi.def_extern(onerror=_failed)  # type: ignore[untyped-decorator]
def _shmtopo_py_slow_wait(request: int, group: Any) -> int:
    ffi.from_handle(group).slow_wait(request)
    return 0


def _handle_of(obj: Any) -> int:
    """An MPI handle's value, as the C ABI passes it (an unsigned word)."""
    from mpi4py import MPI

    return MPI._handleof(obj) & 0xFFFFFFFFFFFFFFFF


@functools.cache
def mpi_functions(*names: str) -> dict[str, int] | None:
    """The addresses of MPI_<Name> for each lower-case name, in the MPI
    library mpi4py loaded; None where one cannot be found."""
    import ctypes
    import os

    from mpi4py import MPI

    try:
        library = ctypes.CDLL(MPI.__file__, mode=os.RTLD_NOLOAD | os.RTLD_NOW)
        return {name: ctypes.cast(getattr(library, f"MPI_{name.capitalize()}"), ctypes.c_void_p).value or 0
                for name in names}
    except (OSError, AttributeError, TypeError):
        return None


def mpi_handle_size() -> int | None:
    """The width in bytes of the MPI library's handles (comm, datatype and
    request alike), or None where they differ."""
    from mpi4py import MPI

    sizes = {MPI._sizeof(MPI.Comm), MPI._sizeof(MPI.Datatype), MPI._sizeof(MPI.Request)}
    return sizes.pop() if len(sizes) == 1 else None


@functools.cache
def _mpi_calls() -> dict[str, Any] | None:
    """What native/mpi_oob.c needs of the MPI library mpi4py loaded, or None
    where it cannot be found (the exchanges then stay in Python)."""
    from mpi4py import MPI

    functions, handle_size = mpi_functions("iallgather", "ibarrier", "test"), mpi_handle_size()
    if functions is None or handle_size is None or not all(functions.values()):
        return None
    return dict({name: ffi.cast("void *", address) for name, address in functions.items()},
                byte=_handle_of(MPI.BYTE), handle_size=handle_size, status_size=MPI._sizeof(MPI.Status))


#: either transport: what the core is given is its ``oob``
AnyTransport = Union[Transport, MPITransport]


def mpi_transport(mpi_comm: Any, timeout: float, news: Callable[[str], None] | None = None,
                  what: str = "out-of-band") -> AnyTransport:
    """Allgather and barrier over an mpi4py communicator, under a timeout
    (and listening for news while they wait: see wait); `what` names them
    in messages. In C where the MPI library can be reached."""
    from mpi4py import MPI

    calls = _mpi_calls()
    if calls is not None:
        try:
            return MPITransport(mpi_comm, calls, timeout, news, what)
        except OSError:
            pass

    def allgather(send: memoryview, recv: memoryview) -> None:
        wait(mpi_comm.Iallgather([send, MPI.BYTE], [recv, MPI.BYTE]), timeout,
             f"{what} allgather", send, recv, news=news)

    def barrier() -> None:
        wait(mpi_comm.Ibarrier(), timeout, f"{what} barrier", news=news)

    return Transport(mpi_comm.Get_size(), allgather, barrier)


#: Bytes a rank's pickle may have for allgather_objects to take one exchange
#: (from_mpi's settings, about 1.2 KiB, fit); a longer one costs a second.
OBJECT_SLOT = 2048


def allgather_objects(mpi_comm: Any, obj: Any, timeout: float, what: str) -> list[Any]:
    """Every rank's picklable obj, in rank order, under the timeout: one
    allgather of fixed slots (each its pickle's length, and the pickle where
    it fits), then, where one did not fit, the pickles."""
    from mpi4py import MPI

    data = pickle.dumps(obj)
    size = mpi_comm.Get_size()
    slots = bytearray(OBJECT_SLOT * size)
    mine = bytearray(OBJECT_SLOT)
    struct.pack_into("<q", mine, 0, len(data))
    if len(data) <= OBJECT_SLOT - 8:
        mine[8:8 + len(data)] = data
    wait(mpi_comm.Iallgather([mine, MPI.BYTE], [slots, MPI.BYTE]), timeout, what, mine, slots)
    counts = [struct.unpack_from("<q", slots, r * OBJECT_SLOT)[0] for r in range(size)]
    if max(counts) <= OBJECT_SLOT - 8:
        return [pickle.loads(bytes(slots[r * OBJECT_SLOT + 8:r * OBJECT_SLOT + 8 + c])) for r, c in enumerate(counts)]
    blob = bytearray(sum(counts))
    displs = [sum(counts[:r]) for r in range(size)]
    wait(mpi_comm.Iallgatherv([data, MPI.BYTE], [blob, (counts, displs), MPI.BYTE]), timeout, what,
         data, blob)
    return [pickle.loads(bytes(blob[d:d + c])) for d, c in zip(displs, counts)]
