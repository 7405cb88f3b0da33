"""Unit tests of shmtopo.coll.args: one rank's arguments normalised, and
the errors it raises on its own rank (the collectives then fail them on
every rank: test_collectives, test_agreement). One process, no MPI: the
functions read only a comm's place in the job."""
import numpy as np
import pytest

from shmtopo import ShmtopoValueError
from shmtopo._types import SIZES
from shmtopo.coll import args

from values import Place

pytestmark = pytest.mark.serial  # one process: unit tests


FOUR = Place(4, 1)


@pytest.mark.parametrize("counts", [[1, 2, 0, 3], (1, 2, 0, 3), np.array([1, 2, 0, 3]),
                                    np.array([1, 2, 0, 3], np.int32), np.array([1, 2, 0, 3], SIZES)])
def test_counts_in_every_integer_form_become_sizes(counts):
    got = args.counts_array(FOUR, counts, "gatherv", "counts")
    assert got.dtype == SIZES and got.tolist() == [1, 2, 0, 3]


@pytest.mark.parametrize("counts, says", [
    (None, "counts is needed here"),
    ([1, 2, 3], "has 3 entries, needs one per rank (4)"),
    ([1, 2, -1, 3], "must be >= 0"),
    ([1, 2, 2**62, 3], "must be >= 0"),
    ([1, 2.0, 0, 3], "must be a sequence of integers"),
    ([True, 2, 0, 3], "must be a sequence of integers"),
    ([1, 2, np.bool_(False), 3], "must be a sequence of integers"),
    ("1203", "must be a sequence of integers"),
])
def test_bad_counts_are_refused_with_the_reason(counts, says):
    with pytest.raises(ShmtopoValueError, match=says.replace("(", r"\(").replace(")", r"\)")):
        args.counts_array(FOUR, counts, "gatherv", "counts")


def test_displacements_default_to_the_blocks_back_to_back():
    counts, displs = args.counts_layout(FOUR, "gatherv", [1, 2, 0, 3], None)
    assert displs.dtype == SIZES and displs.tolist() == [0, 1, 3, 3]
    assert args.layout_end(counts, displs) == 6
    counts, displs = args.counts_layout(FOUR, "gatherv", [1, 0, 0, 0], [5, 99, 0, 0])
    assert args.layout_end(counts, displs) == 6  # an empty block reaches nothing


@pytest.mark.parametrize("root", [True, np.bool_(False), 0.0, "0", None, -1, 4])
def test_a_root_is_a_rank_number_in_range(root):
    with pytest.raises(ShmtopoValueError, match="root"):
        args.bcast_args(FOUR, np.ones(3), root, None)
    if root is not None:  # None is the reductions' "no root" (allreduce)
        with pytest.raises(ShmtopoValueError, match="root"):
            args.reduce_args(FOUR, "reduce", np.ones(3), "sum", None, None, root)


def test_the_result_is_made_on_the_root_only_on_one_node():
    a = np.arange(3.0)
    *_, result = args.reduce_args(FOUR, "reduce", a, "sum", None, None, 0)
    assert result is None
    *_, result = args.reduce_args(FOUR, "reduce", a, "max", None, None, 1)
    assert result.shape == a.shape and result.dtype == a.dtype
    *_, result = args.reduce_args(Place(4, 1, nnodes=2), "reduce", a, "sum", None, None, 0)
    assert result is not None  # across nodes every rank takes part in the node's reduction


@pytest.mark.parametrize("op, algorithm, says", [("avg", None, "operation"), ("sum", "ring", "algorithm")])
def test_unknown_ops_and_algorithms_are_named(op, algorithm, says):
    with pytest.raises(ShmtopoValueError, match=says):
        args.reduce_args(FOUR, "allreduce", np.ones(3), op, None, algorithm, None)


def test_a_result_overlapping_its_input_is_refused_in_place_is_not():
    a = np.arange(8.0)
    with pytest.raises(ShmtopoValueError):
        args.bcast_args(FOUR, a[:4], 0, a[2:6])
    assert args.bcast_args(FOUR, a, 0, a)[3] is a


def test_blocks_split_the_first_axis_into_one_per_rank():
    assert args.block_shape(FOUR, np.empty((8, 3)), "alltoall") == (2, 3)
    for bad in (np.empty((6, 3)), np.empty(())):
        with pytest.raises(ShmtopoValueError, match="must split into 4 equal blocks"):
            args.block_shape(FOUR, bad, "alltoall")


@pytest.mark.parametrize("out, says", [
    (np.empty(8)[::2], "writable C-contiguous"),
    (np.empty(4, np.float32), "out holds float32"),
    (np.empty(3), "out has 3 elements, needs 4"),
    ([0.0] * 4, "writable C-contiguous"),
])
def test_an_out_that_cannot_take_the_result_is_refused(out, says):
    with pytest.raises(ShmtopoValueError, match=says):
        args.flat_out(out, "gatherv", np.dtype(np.float64), 4)


def test_a_read_only_out_is_refused_and_a_larger_one_taken_unless_exact():
    ro = np.empty(4)
    ro.flags.writeable = False
    with pytest.raises(ShmtopoValueError, match="writable"):
        args.flat_out(ro, "gatherv", None, 4)
    big = np.empty((2, 3))
    assert args.flat_out(big, "gatherv", None, 4).shape == (6,)
    with pytest.raises(ShmtopoValueError, match="out has 6 elements, needs 4"):
        args.flat_out(big, "gatherv", None, 4, exact=True)
