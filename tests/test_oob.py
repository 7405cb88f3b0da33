"""Unit tests of shmtopo._oob: every MPI exchange shmtopo makes itself
waits through _oob.wait, which gives up after the comm's timeout and hears
of a death meanwhile, keeping the request and its buffers for ever (MPI
may still write into them). One process, on MPI.COMM_SELF (and the
objects' exchange once across the ranks of a spawned mpiexec)."""
import errno
import pickle
import sys

import numpy as np
import pytest

MPI = pytest.importorskip("mpi4py.MPI")

from conftest import run_mpiexec  # noqa: E402
from shmtopo import ShmtopoTimeoutError, _oob  # noqa: E402

pytestmark = pytest.mark.serial  # one process: unit tests


def test_a_done_request_returns_at_once():
    send, recv = np.arange(3.0), np.zeros(3)
    _oob.wait(MPI.COMM_SELF.Iallgather(send, recv), 0.1, "allgather")
    np.testing.assert_array_equal(recv, send)


def test_a_request_that_never_completes_times_out_and_is_kept_with_its_buffers():
    late = np.zeros(2)
    request = MPI.COMM_SELF.Irecv(late, source=0, tag=77)
    with pytest.raises(ShmtopoTimeoutError, match="a late recv timed out after 0.05 s") as failure:
        _oob.wait(request, 0.05, "a late recv", late)
    assert failure.value.errno == errno.ETIMEDOUT
    assert _oob._abandoned[-1][0] is request and _oob._abandoned[-1][1] == (late,)
    MPI.COMM_SELF.Send(np.ones(2), dest=0, tag=77)  # the late rank arrives: MPI writes the buffer kept
    request.Wait()
    np.testing.assert_array_equal(late, 1.0)


def test_news_of_a_death_ends_the_wait_at_once():
    class Died(Exception):
        pass

    heard = []

    def news(what):
        heard.append(what)
        raise Died(what)

    late = np.zeros(1)
    request = MPI.COMM_SELF.Irecv(late, source=0, tag=78)
    with pytest.raises(Died, match="leaders' bcast"):
        _oob.wait(request, 0, "leaders' bcast", late, news=news)  # 0: no timeout, the news ends it
    assert heard == ["leaders' bcast"] and _oob._abandoned[-1][0] is request
    MPI.COMM_SELF.Send(np.ones(1), dest=0, tag=78)
    request.Wait()


def test_objects_gather_in_rank_order():
    assert _oob.allgather_objects(MPI.COMM_SELF, {"rank": 0, "data": [1, 2]}, 1.0, "objects") == \
        [{"rank": 0, "data": [1, 2]}]


@pytest.mark.parametrize("pickled", [20, _oob.OBJECT_SLOT - 8, _oob.OBJECT_SLOT - 7, 3 * _oob.OBJECT_SLOT])
def test_objects_that_fit_the_slot_or_not_come_back(pickled):
    """A slot holds the pickle's length (8 bytes), then the pickle itself
    where it fits: at the edge and past it."""
    obj = next(b"x" * k for k in range(pickled, 0, -1) if len(pickle.dumps(b"x" * k)) == pickled)
    assert _oob.allgather_objects(MPI.COMM_SELF, obj, 1.0, "objects") == [obj]


# pickles that fit the one exchange's slots, and those that do not (on one rank or on all)
ACROSS_RANKS = """
from mpi4py import MPI
from shmtopo import _oob
world = MPI.COMM_WORLD
n, r = world.Get_size(), world.Get_rank()
for long_on in ("none", "first", "last", "every rank"):
    def obj(q):
        long = long_on == "every rank" or (long_on == "first" and q == 0) or (long_on == "last" and q == n - 1)
        return {"rank": q, "data": "x" * (3 * _oob.OBJECT_SLOT if long else q + 1)}
    assert _oob.allgather_objects(world, obj(r), 30.0, "objects") == [obj(q) for q in range(n)], long_on
print("RESULT ok", flush=True)
"""


def test_objects_of_any_length_gather_in_rank_order_across_ranks():
    proc = run_mpiexec(3, [sys.executable, "-c", ACROSS_RANKS], timeout=120)
    assert proc.returncode == 0 and proc.stdout.count("RESULT ok") == 3, proc.stdout + proc.stderr


def test_the_leaders_exchange_is_c_calling_the_mpi_library():
    """mpi_transport is the core's own (native/mpi_oob.c) under both MPIs:
    the MPI library mpi4py loaded is found, and its calls work from C."""
    transport = _oob.mpi_transport(MPI.COMM_SELF, 1.0)
    assert isinstance(transport, _oob.MPITransport)
    send, recv = np.arange(5, dtype=np.uint8), np.zeros(5, np.uint8)
    transport.allgather(send, recv)
    np.testing.assert_array_equal(recv, send)
    assert transport.oob.barrier(transport.oob.group) == 0


def test_a_long_wait_of_the_c_exchange_goes_on_in_wait():
    """What the C exchange hands over after its short spin: the request's
    handle, waited for by _oob.wait under the transport's timeout."""
    transport = _oob.mpi_transport(MPI.COMM_SELF, 0.05, what="a test's")
    late = np.zeros(2)
    request = MPI.COMM_SELF.Irecv(late, source=0, tag=78)
    with pytest.raises(ShmtopoTimeoutError, match="a test's exchange timed out after 0.05 s"):
        transport.slow_wait(MPI._handleof(request))
    MPI.COMM_SELF.Send(np.ones(2), dest=0, tag=78)
