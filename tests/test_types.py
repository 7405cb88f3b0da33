"""Unit tests of shmtopo._types: the element types the core has, the
(value, index) pairs of maxloc/minloc, and the checks every call makes of
its root, its result array and their overlap. One process."""
import numpy as np
import pytest

from shmtopo import ShmtopoValueError
from shmtopo import _types as T
from shmtopo._native import ffi

from values import Place

pytestmark = pytest.mark.serial  # one process: unit tests


@pytest.mark.parametrize("value, struct", [(np.float32, "shmtopo_float_int_t"), (np.float64, "shmtopo_double_int_t"),
                                           ("l", "shmtopo_long_int_t"), (np.intc, "shmtopo_2int_t"),
                                           (np.short, "shmtopo_short_int_t")])
def test_pairs_have_the_c_structs_layout(value, struct):
    pair = T.pair_dtype(value)
    assert pair.itemsize == ffi.sizeof(struct) and pair.fields["index"][1] == ffi.offsetof(struct, "index")
    # any structured dtype of that layout is the same type to the core, whatever its field names
    renamed = np.dtype({"names": ["v", "i"], "formats": [pair.fields["value"][0], np.intc],
                        "offsets": [0, pair.fields["index"][1]], "itemsize": pair.itemsize})
    assert T.dtype_code(np.empty(2, renamed)) == T.dtype_code(np.empty(2, pair))


@pytest.mark.parametrize("value", [np.uint8, np.complex64, "not a type"])
def test_types_without_a_pair_are_named(value):
    with pytest.raises(ShmtopoValueError, match="no \\(value, index\\) pair type"):
        T.pair_dtype(value)


def test_every_core_type_maps_both_ways_and_others_are_refused():
    for dtype, code in T.DTYPES.items():
        assert T.BY_CODE[code] == dtype and T.dtype_code(np.empty(1, dtype)) == code
    for other in (np.longdouble, object, "U3"):
        with pytest.raises(ShmtopoValueError):
            T.dtype_code(np.empty(1, other))


@pytest.mark.parametrize("root, ok", [(0, True), (3, True), (np.int64(2), True), (4, False), (-1, False),
                                      (True, False), (np.bool_(True), False), (1.0, False), ("1", False),
                                      (None, False)])
def test_a_root_is_an_integer_rank_of_the_job(root, ok):
    if ok:
        assert T.checked_root(Place(4), root) == int(root)
    else:
        with pytest.raises(ShmtopoValueError, match="root"):
            T.checked_root(Place(4), root)


def test_a_result_array_is_made_or_taken_as_it_fits():
    made = T.result_array(None, (2, 3), np.dtype(np.int32), "allreduce")
    assert made.shape == (2, 3) and made.dtype == np.int32
    flat = np.empty(6, np.int32)
    assert T.result_array(flat, (2, 3), np.dtype(np.int32), "allreduce") is flat  # the same elements, reshaped
    for bad in (np.empty(6, np.int64), np.empty(5, np.int32), np.empty(12, np.int32)[::2], [0] * 6):
        with pytest.raises(ShmtopoValueError, match="out"):
            T.result_array(bad, (2, 3), np.dtype(np.int32), "allreduce")


def test_input_and_result_are_the_same_or_apart_never_half_over_each_other():
    a = np.arange(10.0)
    T.check_apart("allreduce", a, a)                 # in place
    T.check_apart("allreduce", a[:5], a[5:])          # apart
    T.check_apart("allreduce", a[:0], a)              # nothing to overlap
    with pytest.raises(ShmtopoValueError, match="overlaps the input only in part"):
        T.check_apart("allreduce", a[:6], a[4:])
    # an allgather in place: this rank's block lies where its row of the result is
    T.check_apart("allgather", a[4:6], a, in_place_at=T.address_of(a[4:6]))
    with pytest.raises(ShmtopoValueError):
        T.check_apart("allgather", a[3:5], a, in_place_at=T.address_of(a[4:6]))
