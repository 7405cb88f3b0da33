"""Out-of-band transports: the Python functions the native core calls to
exchange set-up data (allgather) and to synchronise (barrier).

A Python exception inside a callback cannot cross C; it is kept on the
transport and re-raised, chained, once the native call has failed.
"""
from __future__ import annotations

from typing import Callable

from ._native import ffi, lib

AllgatherFn = Callable[[memoryview, memoryview], None]
BarrierFn = Callable[[], None]


class Transport:
    def __init__(self, size: int, allgather: AllgatherFn, barrier: BarrierFn):
        self.size = size
        self.allgather = allgather
        self.barrier = barrier
        self.pending: BaseException | None = None
        self.handle = ffi.new_handle(self)  # kept alive as long as the transport
        self.oob = ffi.new("shmtopo_oob_t *")
        self.oob.allgather = lib._shmtopo_py_allgather
        self.oob.barrier = lib._shmtopo_py_barrier
        self.oob.group = self.handle

    def take_pending(self) -> BaseException | None:
        exc, self.pending = self.pending, None
        return exc


@ffi.def_extern()
def _shmtopo_py_allgather(sendbuf, recvbuf, nbytes, group):
    transport = ffi.from_handle(group)
    try:
        send = memoryview(ffi.buffer(sendbuf, nbytes))
        recv = memoryview(ffi.buffer(recvbuf, nbytes * transport.size))
        transport.allgather(send, recv)
        return 0
    except BaseException as exc:  # noqa: BLE001 - re-raised after the C call
        transport.pending = exc
        return -1


@ffi.def_extern()
def _shmtopo_py_barrier(group):
    transport = ffi.from_handle(group)
    try:
        transport.barrier()
        return 0
    except BaseException as exc:  # noqa: BLE001 - re-raised after the C call
        transport.pending = exc
        return -1


def mpi_transport(mpi_comm) -> Transport:
    """Allgather and barrier over an mpi4py communicator."""
    from mpi4py import MPI

    def allgather(send: memoryview, recv: memoryview) -> None:
        mpi_comm.Allgather([send, MPI.BYTE], [recv, MPI.BYTE])

    return Transport(mpi_comm.Get_size(), allgather, mpi_comm.Barrier)
