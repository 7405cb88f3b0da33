"""One copy per node of a large read-only table, used by every rank.

Rank 0 builds a lookup table (a 64 MiB array by default, SIZE_MIB to
change) and a dict of metadata; shmtopo.share gives every rank the same
table, mapped read-only from the node's shared memory: the node holds it
once, however many ranks it runs. Each rank then looks up its own keys.
A second table is built in place: every rank fills a slice of a
node-shared array and share makes it read-only, with no private copy.

    mpiexec -n 4 python examples/share_table.py
    python -m shmtopo run -n 4 examples/share_table.py     (no MPI)
"""
import os

import numpy as np

import shmtopo

SIZE_MIB = int(os.environ.get("SIZE_MIB", "64"))

with shmtopo.Comm.from_env() as comm:
    rank, size = comm.world_rank, comm.world_size

    # 1. Built on the root, shared: the others pass None.
    table = None
    if rank == 0:
        keys = np.arange(SIZE_MIB * 2**20 // 8, dtype=np.int64)
        table = {"values": np.sqrt(keys.astype(np.float64)), "unit": "sqrt", "version": 3}
    table = comm.share(table, root=0)
    values = table["values"]
    assert not values.flags.writeable  # read-only on every rank
    info = shmtopo.share_info(values)
    assert info is not None  # in the node's shared memory, not a private copy

    rng = np.random.default_rng(rank)
    mine = rng.integers(0, values.size, 1000)
    np.testing.assert_allclose(values[mine], np.sqrt(mine.astype(np.float64)))

    # 2. Built in place: each rank of the node fills its slice.
    squares = comm.shared_array(values.size, np.float64)
    lo, hi = comm.rank * squares.size // comm.size, (comm.rank + 1) * squares.size // comm.size
    squares[lo:hi] = np.arange(lo, hi, dtype=np.float64) ** 2
    squares = comm.share(squares, root=0)  # read-only now, and on every node
    assert squares[mine].tolist() == (mine.astype(np.float64) ** 2).tolist()

    totals = comm.allreduce(np.array([float(values[mine].sum())]))
    if rank == 0:
        print(f"rank 0: a {values.nbytes >> 20} MiB table ({table['unit']}, version {table['version']}) "
              f"on {size} ranks, one copy per node: {info}")
        print(f"sum of every rank's lookups: {totals[0]:.1f}")
        print("share_table ok")
