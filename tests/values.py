"""What the suite's tests feed, compare and blame, in one place:
deterministic small inputs, a bitwise comparison, and the ranks a misuse
test makes the culprit, and a comm's place in the job for unit tests."""
from typing import NamedTuple

import numpy as np


def small_ints(rank, count, dtype, salt=0):
    """Rank's deterministic input: small integers of any type (products of 4
    ranks stay exact, in every type)."""
    rng = np.random.default_rng(7919 * rank + 31 * count + salt)
    dtype = np.dtype(dtype)
    return rng.integers(0 if dtype.kind == "u" else -3, 4, count).astype(dtype)


def same_bits(got, want, what=""):
    """The same type, shape and bytes; pairs field by field (MPI leaves
    their padding as it likes)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, what
    if got.dtype.fields:
        for name in got.dtype.names:
            same_bits(np.ascontiguousarray(got[name]), np.ascontiguousarray(want[name]), f"{what} .{name}")
        return
    assert got.tobytes() == want.tobytes(), f"{what}: {got} != {want}"


def culprits(n, node_size=None):
    """The ranks a misuse test blames in turn: first, middle and last, and
    the leader of another node where nodes of node_size ranks split the job."""
    found = {0, (n - 1) // 2, n - 1}
    if node_size and node_size < n:
        found.add(node_size)
    return sorted(found)


class Place(NamedTuple):
    """A comm's place in the job, what the argument rules read of it (the
    CommLike protocol's world_size, world_rank, nnodes): unit tests of those
    rules need no comm."""
    world_size: int
    world_rank: int = 0
    nnodes: int = 1
