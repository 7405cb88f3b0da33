"""Unit tests of shmtopo.coll.node: the rule that sends a large array lying
in one of the comm's windows down the zero-copy path, and the helpers every
node collective uses. One process, a comm of one rank (the node
collectives on every rank: test_collectives, test_window)."""
import numpy as np
import pytest

MPI = pytest.importorskip("mpi4py.MPI")

import shmtopo  # noqa: E402
from shmtopo._native import ffi, lib  # noqa: E402
from shmtopo.coll import node  # noqa: E402

pytestmark = pytest.mark.serial  # one process: unit tests


@pytest.fixture
def one():
    with shmtopo.Comm.from_mpi(MPI.COMM_SELF) as comm:
        yield comm


def test_only_a_large_contiguous_array_in_a_window_takes_the_window(one):
    n = node.WINDOW_MIN // 8
    with one.allocate(shape=(4 * n,), dtype=np.float64) as win:
        part = win.local
        found = node.window_of(one, part[n:3 * n])
        assert found is not None and found[0] is win and found[1] == n * 8
        assert node.window_of(one, part[:n - 1]) is None           # under WINDOW_MIN: a copy is as fast
        assert node.window_of(one, part[:2 * n:2]) is None         # not contiguous
        assert node.window_of(one, np.zeros(2 * n)) is None        # private memory
    assert node.window_of(one, np.zeros(2 * n)) is None            # no window at all


def test_pointers_are_null_for_nothing_and_checked_raises_the_cores_error(one):
    assert node.pointer(None) == ffi.NULL and node.pointer(np.zeros(0)) == ffi.NULL
    assert node.pointer(np.zeros(1)) != ffi.NULL and node.sizes_pointer(None) == ffi.NULL
    node.checked(0)
    a = np.zeros(4)
    with pytest.raises(shmtopo.ShmtopoValueError, match="root"):
        node.checked(lib.shmtopo_bcast(one.handle, node.pointer(a), a.size, lib.SHMTOPO_FLOAT64, 5))  # of 1 rank


def test_one_ranks_node_collectives_are_the_identity(one):
    a = np.arange(5.0)
    out = np.zeros(5)
    node.node_reduce(one, a, out, lib.SHMTOPO_OP_SUM, -1, lib.SHMTOPO_COLL_AUTO)
    np.testing.assert_array_equal(out, a)
    rows = np.zeros((1, 5))
    node.node_allgather(one, a, rows)
    np.testing.assert_array_equal(rows[0], a)
    b = a.copy()
    node.node_bcast(one, b, 0)
    np.testing.assert_array_equal(b, a)
