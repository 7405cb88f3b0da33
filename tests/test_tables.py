"""Unit tests of shmtopo.accel.tables: the datatypes and ops the drop-in
moves, and what it leaves to MPI. One rank, mpi4py's own datatypes and ops."""
import array
import sys

import numpy as np
import pytest

MPI = pytest.importorskip("mpi4py.MPI")

from shmtopo.accel import buffers  # noqa: E402
from shmtopo.accel.tables import LeftToMPI, check_op, format_type, op_name, type_name  # noqa: E402

pytestmark = pytest.mark.serial  # one process: unit tests


def test_formats_map_to_mpi4py_datatypes_in_native_order_only(tables):
    assert format_type(tables, array.array("i", [1]), "Bcast") == MPI.INT
    assert format_type(tables, np.zeros(2, np.float32), "Bcast") == MPI.FLOAT
    swapped = np.zeros(2, np.dtype(np.float64).newbyteorder("S"))
    with pytest.raises(BufferError, match="non-native byte order"):
        format_type(tables, swapped, "Bcast")


def test_a_type_shmtopo_does_not_move_is_left_to_mpi(tables):
    msg = buffers.message(tables, np.zeros(4, np.longdouble), "Bcast", writable=False)
    with pytest.raises(LeftToMPI, match="LONG_DOUBLE"):
        buffers.moved_type(msg, "Bcast")
    derived = MPI.DOUBLE.Create_contiguous(2).Commit()
    try:
        assert type_name(derived) == "a derived datatype"
        msg = buffers.message(tables, [np.zeros(4), 2, derived], "Bcast", writable=False)
        assert msg.type is None and msg.entries == 2
    finally:
        derived.Free()


def test_ops_are_named_where_shmtopo_reduces_with_them(tables):
    doubles = buffers.moved_type(buffers.message(tables, np.zeros(2), "Allreduce", writable=False), "Allreduce")
    ints = buffers.moved_type(buffers.message(tables, np.zeros(2, np.int64), "Allreduce", writable=False), "Allreduce")
    assert op_name(tables, MPI.SUM, doubles) == "sum" and op_name(tables, MPI.BXOR, ints) == "bxor"
    with pytest.raises(LeftToMPI, match="bxor on float64"):
        op_name(tables, MPI.BXOR, doubles)
    user = MPI.Op.Create(lambda a, b, d: None, commute=True)
    try:
        with pytest.raises(LeftToMPI, match="user-defined"):
            op_name(tables, user, doubles)
    finally:
        user.Free()
    with pytest.raises(TypeError, match="must be an MPI.Op"):
        check_op(tables, "sum")


@pytest.mark.skipif(sys.byteorder != "little", reason="the swapped order here is big-endian")
def test_an_explicit_little_endian_format_is_native(tables):
    assert format_type(tables, memoryview(np.zeros(2, "<f8")), "Bcast") == MPI.DOUBLE
