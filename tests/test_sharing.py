"""Unit tests of shmtopo.sharing's layout rules: how a share's data lies in
memory (payload, alignment, description), how its header names a dtype,
and how a node's segment splits into the ranks' parts. One process, no
shared memory (share itself, on every rank and node: test_share)."""
import pickle

import numpy as np
import pytest

from shmtopo import ShmtopoArgumentError
from shmtopo import sharing as S

pytestmark = pytest.mark.serial  # one process: unit tests


def laid_out(payload):
    data = np.zeros(payload.nbytes, np.uint8)
    payload.write(data)
    data.flags.writeable = False
    return data


@pytest.mark.parametrize("a", [np.arange(12, dtype=np.int32).reshape(3, 4),
                               np.asfortranarray(np.arange(12.0).reshape(3, 4)),
                               np.arange(24, dtype=np.int16).reshape(4, 6)[::2, ::3],  # strided: copied in C order
                               np.zeros((0, 3)),
                               np.array([(1, 2.5)], dtype=[("a", "i1"), ("b", "f8")])])
def test_an_array_comes_back_the_same_from_its_described_layout(a):
    payload = S._array_payload(a, described=True)
    back = S._rebuilt(laid_out(payload), payload.nbytes, len(payload.descr))
    assert back.dtype == a.dtype and back.shape == a.shape and not back.flags.writeable
    np.testing.assert_array_equal(back, a)
    if S._order(a) == "F":
        assert back.flags.f_contiguous


def test_an_objects_buffers_lie_aligned_and_come_back_zero_copy():
    obj = {"x": np.arange(5, dtype=np.int8), "y": np.arange(3.0), "n": 7, "s": "seven"}
    payload = S._object_payload(obj)
    assert all(offset % S.ALIGN == 0 for offset in payload.offsets)
    data = laid_out(payload)
    back = S._rebuilt(data, payload.nbytes, len(payload.descr))
    assert back["n"] == 7 and back["s"] == "seven"
    for key in ("x", "y"):
        np.testing.assert_array_equal(back[key], obj[key])
        assert not back[key].flags.writeable and np.shares_memory(back[key], data)


def test_an_object_that_cannot_be_pickled_says_why():
    with pytest.raises(ShmtopoArgumentError, match="cannot be pickled: .*lambda"):
        S._object_payload({"f": lambda: None})
    with pytest.raises(TypeError):  # an argument error is a TypeError too
        S._object_payload(lambda: None)


@pytest.mark.parametrize("dtype", ["<i4", ">f8", "u1", "?", "<c16", "S5", "<M8[s]"])
def test_a_simple_dtype_travels_as_one_word_of_its_name(dtype):
    dt = np.dtype(dtype)
    word = S._dtype_word(dt)
    assert word and S._dtype_of(word) == dt


@pytest.mark.parametrize("dtype", [[("a", "i4")], "(2,3)f8", "U20", np.dtype("V12")])
def test_other_dtypes_need_a_description(dtype):
    dt = np.dtype(dtype)
    word = S._dtype_word(dt)
    assert word == 0 or S._dtype_of(word) == dt  # never a word that names another dtype


@pytest.mark.parametrize("nbytes, size", [(0, 1), (10, 1), (10, 3), (1 << 30, 4), (7, 8)])
def test_a_segment_splits_into_equal_parts_the_last_with_the_remainder(nbytes, size):
    parts = [S._slice(nbytes, r, size) for r in range(size)]
    assert sum(parts) == nbytes and len(set(parts[:-1])) <= 1
    assert parts[-1] - parts[0] < size if size > 1 else True


def test_a_small_arrays_header_holds_it_whole():
    a = np.arange(6, dtype=">c8").reshape(2, 3)  # (not a type of the core, which the C entry names at once)
    assert S._small_array_header(a) is None  # a dtype not named before: the general way names it first
    S._dtype_word(a.dtype)
    header = S._small_array_header(a)
    tier, nbytes, descr_len, number, code, word, dims, scattered = S._FIELDS.unpack_from(header)
    assert (tier, nbytes, descr_len, dims) == (S._INLINE, a.nbytes, 0, 2) and S._dtype_of(word) == a.dtype
    inline = header[S._FIXED:].view(np.uint8)[:nbytes].view(a.dtype).reshape(2, 3)
    np.testing.assert_array_equal(inline, a)
    assert header.nbytes == S.HEADER_WORDS * 8
    # what it does not hold goes the general way
    for other in (np.zeros(S.INLINE + 1, np.uint8), np.arange(6.0)[::2], [1, 2], np.zeros((1,) * 9)):
        assert S._small_array_header(other) is None


def test_the_description_is_a_pickle_of_the_layout():
    payload = S._array_payload(np.arange(4), described=True)
    descr, table = pickle.loads(payload.descr)
    assert descr[0] == "array" and table == [(0, 32)]
