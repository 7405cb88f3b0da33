"""Persistent collectives: set up once, started many times."""
import numpy as np
import pytest

import shmtopo
from conftest import PythonCalls
from test_collectives import everyone


def test_allreduce_init_runs_repeatedly(comm):
    send, recv = np.zeros(5), np.empty(5)
    with comm.allreduce_init(send, recv, "sum") as req:
        for i in range(20):
            send[:] = comm.rank + i
            req.start()
            req.wait()
            np.testing.assert_array_equal(recv, np.full(5, sum(range(comm.size)) + comm.size * i))


def test_start_runs_no_python(comm):
    """start() is a C method (NativeRequest's): no Python frame per start."""
    send, recv = np.full(3, comm.rank + 1.0), np.empty(3)
    with comm.allreduce_init(send, recv, "sum") as req:
        with PythonCalls() as python_calls:
            req.start()
            req()
        assert python_calls == ["__call__"], python_calls
        np.testing.assert_array_equal(recv, np.full(3, comm.size * (comm.size + 1) / 2))


@pytest.mark.parametrize("count", [1, 100000])
def test_bcast_and_alltoall_init(comm, count):
    buf = np.full(count, comm.rank, np.int32)
    with comm.bcast_init(buf, root=comm.size - 1) as req:
        req()
        assert (buf == comm.size - 1).all()
    inputs = everyone(comm, comm.size * 3, np.int64)
    out = np.empty_like(inputs[0])
    with comm.alltoall_init(inputs[comm.rank], out) as req:
        req.start()
    want = np.concatenate([inputs[p].reshape(comm.size, 3)[comm.rank] for p in range(comm.size)])
    np.testing.assert_array_equal(out, want)


def test_request_argument_errors(comm):
    with pytest.raises(ValueError, match="same dtype"):
        comm.allreduce_init(np.ones(3), np.ones(4))
    with pytest.raises(ValueError, match="bitwise"):
        comm.allreduce_init(np.ones(3), np.ones(3), "bxor")
    with pytest.raises(ValueError, match="writable"):
        ro = np.ones(3)
        ro.flags.writeable = False
        comm.allreduce_init(np.ones(3), ro)
    with pytest.raises(ValueError, match="out of range"):
        comm.bcast_init(np.ones(3), root=comm.size)


def test_core_checks_a_persistent_allreduce_at_its_init(comm):
    """Through the C API, a persistent allreduce's buffers are checked once,
    at the init, on every rank: the last rank's result overlapping its input
    in part fails the init on every rank, naming it, and the comm goes on."""
    from shmtopo._native import ffi, lib
    from shmtopo.errors import ShmtopoValueError, check

    last = comm.size - 1
    buf = np.zeros(8)
    send, recv = (buf[:4], buf[2:6]) if comm.rank == last else (buf[:4], buf[4:])
    req = ffi.new("shmtopo_request_t **")
    with pytest.raises(ShmtopoValueError, match="overlaps the input only in part") as caught:
        check(lib.shmtopo_allreduce_init(comm.handle, ffi.from_buffer(send), ffi.from_buffer(recv), 4,
                                         lib.SHMTOPO_FLOAT64, lib.SHMTOPO_OP_SUM, lib.SHMTOPO_COLL_AUTO, req))
    assert caught.value.rank == last
    comm.barrier()


def test_request_after_comm_free_raises():
    comm = shmtopo.Comm.from_mpi()
    req = comm.allreduce_init(np.ones(2), np.empty(2))
    req.start()
    comm.free()
    with pytest.raises(shmtopo.FreedError):
        req.start()
    req.free()
