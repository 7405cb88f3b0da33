"""Unit tests of shmtopo.coll.across's rules: how the node leaders split a
reduction's partials into blocks, when they exchange whole partials, and
that partials fold in node order with shmtopo's own kernels (the same bits
on every leader, and C's wrapping integer arithmetic, not an MPI library's
saturating one). One process (the collectives across nodes, simulated and
real: test_collectives, test_vcoll, test_levels, the real-node pass)."""
from typing import NamedTuple

import numpy as np
import pytest

from shmtopo._native import lib
from shmtopo._types import DTYPES
from shmtopo.coll import across

pytestmark = pytest.mark.serial  # one process: unit tests


class Nodes(NamedTuple):
    """What across._whole reads of a NodePlan."""
    nnodes: int


@pytest.mark.parametrize("n, parts", [(10, 3), (9, 3), (2, 5), (0, 4), (1 << 20, 7)])
def test_blocks_cover_the_elements_once_the_first_ones_longer(n, parts):
    sizes, offsets = across._blocks(n, parts, 8)
    assert sum(sizes) == 8 * n and offsets == [sum(sizes[:k]) for k in range(parts)]
    assert max(sizes) - min(sizes) <= 8 and sizes == sorted(sizes, reverse=True)


def test_two_nodes_or_small_partials_go_whole():
    assert across._whole(Nodes(2), 1 << 30)
    assert across._whole(Nodes(5), across.WHOLE_PARTIALS)
    assert not across._whole(Nodes(5), across.WHOLE_PARTIALS + 1)


def test_partials_fold_in_node_order_bit_for_bit():
    rng = np.random.default_rng(7)
    rows = (rng.standard_normal((5, 64)) * 10.0 ** rng.integers(-8, 8, (5, 64))).astype(np.float32)
    want = rows[0].copy()
    for k in range(1, 5):  # a left fold: ((r0 + r1) + r2) + ...
        want = want + rows[k]
    got = across._fold_rows(rows.copy(), lib.SHMTOPO_OP_SUM, DTYPES[np.dtype(np.float32)])
    assert got.tobytes() == want.tobytes()


def test_integer_sums_wrap_as_c_does():
    rows = np.array([[120, -120], [100, -100]], np.int8)
    got = across._fold_rows(rows.copy(), lib.SHMTOPO_OP_SUM, DTYPES[np.dtype(np.int8)])
    assert got.tolist() == [-36, 36]  # 220 and -220 wrapped, where a saturating kernel gives 127, -128
