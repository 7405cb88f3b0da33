"""Unit tests of shmtopo.accel.buffers: mpi4py's buffer arguments read as
mpi4py reads them. One rank, mpi4py's own datatypes (that C and Python
decide alike, on every rank, is test_plans')."""
import numpy as np
import pytest

MPI = pytest.importorskip("mpi4py.MPI")

from shmtopo.accel import buffers  # noqa: E402

pytestmark = pytest.mark.serial  # one process: unit tests


@pytest.mark.parametrize("spec, parts", [
    ("buf", ("buf", None, None, None)),
    (["buf", MPI.DOUBLE], ("buf", None, None, MPI.DOUBLE)),
    (["buf", "d"], ("buf", None, None, "d")),
    (["buf", 3], ("buf", 3, None, None)),
    (["buf", (3, 1)], ("buf", 3, 1, None)),
    (["buf", 3, MPI.INT], ("buf", 3, None, MPI.INT)),
    (["buf", (3, 1), MPI.INT], ("buf", 3, 1, MPI.INT)),
    (["buf", 3, 1, MPI.INT], ("buf", 3, 1, MPI.INT)),
])
def test_every_form_of_a_buffer_argument_splits_as_mpi4py_reads_it(tables, spec, parts):
    assert buffers.split_spec(tables, spec, "Bcast") == parts


def test_a_message_takes_its_type_from_the_format_and_its_count_from_the_length(tables):
    a = np.arange(6, dtype=np.int32)
    msg = buffers.message(tables, a, "Bcast", writable=True)
    assert msg.datatype == MPI.INT and msg.entries == 6 and msg.type is not None
    assert buffers.message(tables, a, "Allgather", writable=False, blocks=3).entries == 2
    np.testing.assert_array_equal(buffers.elements(msg, 6), a)


def test_a_displacement_starts_the_message_further_on(tables):
    a = np.arange(6, dtype=np.float64)
    msg = buffers.message(tables, [a, (2, 3), MPI.DOUBLE], "Bcast", writable=False)
    assert msg.entries == 2
    np.testing.assert_array_equal(buffers.elements(msg, 2), [3.0, 4.0])


@pytest.mark.parametrize("make, error, says", [
    (lambda a: [a, 7, MPI.DOUBLE], ValueError, "7 entries of 8 bytes do not fit in its 48 bytes"),
    (lambda a: [a, (1, 7), MPI.DOUBLE], ValueError, "displacement 7 beyond the buffer's 6 entries"),
    (lambda a: [a, -1, MPI.DOUBLE], ValueError, "count"),
    (lambda a: [a, MPI.DATATYPE_NULL], ValueError, "DATATYPE_NULL"),
    (lambda a: [a, "no such type"], ValueError, "cannot map"),
    (lambda a: [a, 3.0], TypeError, "float"),
    (lambda a: None, TypeError, "expecting a buffer"),
])
def test_a_message_mpi_would_refuse_raises_before_anything_moves(tables, make, error, says):
    with pytest.raises(error, match=says):
        buffers.message(tables, make(np.zeros(6)), "Bcast", writable=False)


def test_a_buffer_written_to_must_be_writable(tables):
    ro = np.zeros(4)
    ro.flags.writeable = False
    buffers.message(tables, ro, "Bcast", writable=False)
    with pytest.raises(Exception):
        buffers.message(tables, ro, "Bcast", writable=True)


def test_a_count_that_does_not_split_into_blocks_is_refused(tables):
    with pytest.raises(ValueError, match="do not split into 4 blocks"):
        buffers.message(tables, np.zeros(6), "Alltoall", writable=False, blocks=4)


def test_a_vector_infers_counts_as_mpi4py_does_and_checks_each_block(tables):
    buf = np.zeros(7)
    v = buffers.vector(tables, buf, "Scatterv", writable=False, blocks=3)
    assert v.counts == [3, 2, 2] and v.displs == [0, 3, 5]  # the first ranks one more
    v = buffers.vector(tables, [buf, 2], "Scatterv", writable=False, blocks=3)
    assert v.counts == [2, 2, 2] and v.displs == [0, 2, 4]
    v = buffers.vector(tables, [buf, ([1, 2, 1], 2), MPI.DOUBLE], "Scatterv", writable=False, blocks=3)
    assert v.counts == [1, 2, 1] and v.displs == [0, 2, 4]  # an integer displacement is a stride
    with pytest.raises(ValueError, match="block 2 .* beyond the buffer's 7 entries"):
        buffers.vector(tables, [buf, [1, 1, 2], [0, 1, 6], MPI.DOUBLE], "Scatterv", writable=False, blocks=3)
    with pytest.raises(ValueError, match="expecting 3 items"):
        buffers.vector(tables, [buf, [1, 1]], "Scatterv", writable=False, blocks=3)
