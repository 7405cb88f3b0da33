"""Unit tests of shmtopo.anycomm: which shmtopo comm a call on "any
communicator" runs on, kept per communicator and dropped when MPI frees
it. One process (share across ranks and nodes: test_share)."""
import pytest

MPI = pytest.importorskip("mpi4py.MPI")

import shmtopo  # noqa: E402
from shmtopo import anycomm  # noqa: E402

pytestmark = pytest.mark.serial  # one process: unit tests


def test_a_shmtopo_comm_is_its_own_and_an_mpi_comm_gets_one_kept():
    with shmtopo.Comm.from_mpi(MPI.COMM_SELF) as own:
        assert anycomm.comm_of(own) is own
    mpi = MPI.COMM_SELF.Dup()
    made = anycomm.comm_of(mpi)
    assert anycomm.comm_of(mpi) is made and made.size == 1  # made once, at the first call
    mpi.Free()  # MPI frees the communicator: the kept comm goes with it
    assert made.freed and int(mpi.handle) not in anycomm._by_handle


def test_an_accelerated_comm_runs_on_its_own_shmtopo_comm():
    acomm = shmtopo.accelerate(MPI.COMM_SELF.Dup())
    try:
        assert anycomm.comm_of(acomm) is acomm.shm_comm
    finally:
        acomm.Free()


@pytest.mark.parametrize("bad", [0, "world", [MPI.COMM_SELF]])
def test_anything_else_is_a_type_error(bad):
    with pytest.raises(TypeError, match="comm must be None, an mpi4py communicator or a shmtopo.Comm"):
        anycomm.comm_of(bad)
