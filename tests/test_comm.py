"""Unit tests of shmtopo.comm's argument rules: what allocate reads of its
nbytes, dtype, shape, placement and huge_pages, and the flags of the comm's
options, each refused on its own rank with the reason (the calls then fail
them on every rank: test_window, test_agreement). One process."""
import numpy as np
import pytest

from shmtopo import ShmtopoValueError
from shmtopo import comm as C

pytestmark = pytest.mark.serial  # one process: unit tests


@pytest.mark.parametrize("nbytes, dtype, shape, want", [
    (16, None, None, (np.uint8, (16,), 16)),
    (16, np.float64, None, (np.float64, (2,), 16)),
    (None, np.int32, (2, 3), (np.int32, (2, 3), 24)),
    (24, "i4", [2, np.int64(3)], (np.int32, (2, 3), 24)),
    (None, "S8", 4, ("S8", (4,), 32)),
    (0, np.float64, None, (np.float64, (0,), 0)),
])
def test_an_allocation_is_read_from_nbytes_dtype_or_shape(nbytes, dtype, shape, want):
    dt, got_shape, size = C._allocation_layout(nbytes, dtype, shape)
    assert (dt, got_shape, size) == (np.dtype(want[0]), want[1], want[2])


@pytest.mark.parametrize("nbytes, dtype, shape, says", [
    (None, None, None, "needs nbytes or shape"),
    (12, np.float64, None, "not a multiple of float64's itemsize 8"),
    (16, np.int32, (2, 3), "does not match shape"),
    (None, object, (2,), "holds Python objects"),
    (None, "S", (2,), "has no size"),
    (None, "no such dtype", (2,), "is not a numpy dtype"),
    (-8, None, None, "non-negative integer"),
    (8.5, None, None, "non-negative integer"),
    (True, None, None, "non-negative integer"),
    ("8", None, None, "non-negative integer"),
    (None, np.float64, (2**40, 2**40), "too large"),
    (2**70, None, None, "too large"),
])
def test_an_allocation_it_cannot_make_is_refused_with_the_reason(nbytes, dtype, shape, says):
    with pytest.raises(ShmtopoValueError, match=says):
        C._allocation_layout(nbytes, dtype, shape)


@pytest.mark.parametrize("value, number", [(False, 0), (np.bool_(False), 0), (True, 1), (np.bool_(True), 1),
                                           ("required", 2)])
def test_huge_pages_take_false_true_or_required(value, number):
    assert C._huge_pages_number(value) == number


@pytest.mark.parametrize("value", [None, "yes", 2, "REQUIRED"])
def test_other_huge_pages_values_are_refused(value):
    with pytest.raises(ShmtopoValueError, match="huge_pages must be False, True or 'required'"):
        C._huge_pages_number(value)


def test_choices_default_to_the_first_and_flags_are_booleans():
    assert C._as_choice(None, C.PLACEMENTS, "placement") == "local"
    assert C._as_choice("interleave", C.PLACEMENTS, "placement") == "interleave"
    for bad in ("Local", 1, ["local"]):
        with pytest.raises(ShmtopoValueError, match="placement must be one of 'local', 'interleave'"):
            C._as_choice(bad, C.PLACEMENTS, "placement")
    assert C._as_flag(1, "overload") is True and C._as_flag(np.bool_(False), "overload") is False
    for bad in (2, "yes", None):
        with pytest.raises(ShmtopoValueError, match="overload must be True or False"):
            C._as_flag(bad, "overload")


def test_a_comm_made_as_mpi4pys_are_says_how_to_make_one():
    """shmtopo.Comm(MPI.COMM_WORLD), the way mpi4py's classes are made: a
    TypeError that names the constructors, not one from inside __init__."""
    from mpi4py import MPI

    with pytest.raises(TypeError, match=r"shmtopo\.Comm\(Intracomm object\): .*shmtopo\.Comm\.from_mpi\(mpi_comm\)"):
        C.Comm(MPI.COMM_WORLD)
