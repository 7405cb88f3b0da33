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
import pickle
import struct
import time
from typing import Any, Callable

from ._native import ffi, lib
from .errors import ShmtopoTimeoutError, keep

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


def mpi_transport(mpi_comm: Any, timeout: float, news: Callable[[str], None] | None = None,
                  what: str = "out-of-band") -> Transport:
    """Allgather and barrier over an mpi4py communicator, under a timeout
    (and listening for news while they wait: see wait); `what` names them
    in messages."""
    from mpi4py import MPI

    def allgather(send: memoryview, recv: memoryview) -> None:
        wait(mpi_comm.Iallgather([send, MPI.BYTE], [recv, MPI.BYTE]), timeout,
             f"{what} allgather", send, recv, news=news)

    def barrier() -> None:
        wait(mpi_comm.Ibarrier(), timeout, f"{what} barrier", news=news)

    return Transport(mpi_comm.Get_size(), allgather, barrier)


def allgather_objects(mpi_comm: Any, obj: Any, timeout: float, what: str) -> list[Any]:
    """Every rank's picklable obj, in rank order, under the timeout (lengths
    first, then the pickles)."""
    from mpi4py import MPI

    data = pickle.dumps(obj)
    size = mpi_comm.Get_size()
    lengths = bytearray(8 * size)
    mine = struct.pack("<q", len(data))
    wait(mpi_comm.Iallgather([mine, MPI.BYTE], [lengths, MPI.BYTE]), timeout, what, mine, lengths)
    counts = list(struct.unpack(f"<{size}q", lengths))
    blob = bytearray(sum(counts))
    displs = [sum(counts[:r]) for r in range(size)]
    wait(mpi_comm.Iallgatherv([data, MPI.BYTE], [blob, (counts, displs), MPI.BYTE]), timeout, what,
         data, blob)
    return [pickle.loads(bytes(blob[d:d + c])) for d, c in zip(displs, counts)]
