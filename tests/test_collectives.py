"""Window collectives against numpy references computed from every rank's
input (each rank can generate every other rank's input).

On one node or across nodes (./dev test's real-node pass runs this file on
every rank of 2 to 3 real nodes): ranks and roots of collectives are world
ranks, windows and their parts are the node's (node ranks); a reduction's
bits are those of folds.fold, the flat rank-order fold on one node, each
node's fold then the nodes' in node order across nodes. The fast entries
(C methods that run no Python) and the window path (peers' parts read in
place) are one node's: across nodes the fast entries hand every call to the
general path, and an array in a window is taken like a private one."""
import numpy as np
import pytest

import shmtopo
from shmtopo import rendezvous

import folds
from conftest import PythonCalls, skip_simulated_nodes_across_hosts

INT_TYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
FLOAT_TYPES = [np.float32, np.float64]
ALL_TYPES = INT_TYPES + FLOAT_TYPES
UFUNCS = {"sum": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum,
          "band": np.bitwise_and, "bor": np.bitwise_or, "bxor": np.bitwise_xor}
CHUNK = 256 * 1024  # the default SHMTOPO_COLL_BUFFER


def data(rank, count, dtype, salt=0):
    """Rank's deterministic input: small values so products stay meaningful."""
    rng = np.random.default_rng(1000 * rank + 17 * count + salt)
    if np.dtype(dtype).kind == "f":
        return (rng.random(count) * 4 - 2).astype(dtype)
    lo = 0 if np.dtype(dtype).kind == "u" else -3
    return rng.integers(lo, 4, count).astype(dtype)


def reference(op, inputs):
    """The flat rank-order fold (what one node gives)."""
    return folds.flat(op, inputs)


def expected(comm, op, inputs):
    """What a reduction of inputs (by world rank) gives on comm's job."""
    return folds.fold(op, inputs, folds.by_node(comm))


def ops_for(dtype):
    return list(UFUNCS) if np.dtype(dtype).kind in "iu" else ["sum", "prod", "min", "max"]


def everyone(comm, count, dtype, salt=0):
    return [data(r, count, dtype, salt) for r in range(comm.world_size)]


@pytest.mark.parametrize("dtype", ALL_TYPES)
def test_allreduce_every_dtype_and_op(comm, dtype):
    for op in ops_for(dtype):
        for count in (1, 13, 200):
            inputs = everyone(comm, count, dtype)
            got = comm.allreduce(inputs[comm.world_rank], op)
            np.testing.assert_array_equal(got, expected(comm, op, inputs), err_msg=f"{op} {count}")


@pytest.mark.parametrize("algorithm", ["flat", "rsag", None])
@pytest.mark.parametrize("count", [0, 1, 7, 1001, CHUNK // 8 + 1, 3 * 2**20 // 8 + 3])
def test_allreduce_sizes_and_algorithms(comm, algorithm, count):
    for dtype, op in ((np.float64, "sum"), (np.int32, "bxor")):
        inputs = everyone(comm, count, dtype)
        got = comm.allreduce(inputs[comm.world_rank], op, algorithm=algorithm)
        np.testing.assert_array_equal(got, expected(comm, op, inputs))


def test_allreduce_in_place_and_out(comm):
    inputs = everyone(comm, 5000, np.float64)
    a = inputs[comm.world_rank].copy()
    assert comm.allreduce(a, out=a) is a
    np.testing.assert_array_equal(a, expected(comm, "sum", inputs))
    out = np.empty((50, 100))
    comm.allreduce(inputs[comm.world_rank].reshape(50, 100), "max", out=out)
    np.testing.assert_array_equal(out.ravel(), expected(comm, "max", inputs))


@pytest.mark.parametrize("algorithm", ["flat", "rsag"])
@pytest.mark.parametrize("count", [0, 3, 40000])
def test_reduce_every_root(comm, algorithm, count):
    inputs = everyone(comm, count, np.int64)
    for root in range(comm.world_size):
        got = comm.reduce(inputs[comm.world_rank], "sum", root=root, algorithm=algorithm)
        if comm.world_rank == root:
            np.testing.assert_array_equal(got, expected(comm, "sum", inputs))
        else:
            assert got is None


@pytest.mark.parametrize("count", [0, 1, 12, 97, CHUNK + 5, 3 * 2**20])
def test_bcast_every_root(comm, count):
    for root in range(comm.world_size):
        mine = data(comm.world_rank, count, np.uint8, salt=root)
        got = comm.bcast(mine, root=root)
        np.testing.assert_array_equal(got, data(root, count, np.uint8, salt=root))
        buf = mine.copy()
        comm.bcast(buf, root=root, out=buf)  # in place
        np.testing.assert_array_equal(buf, got)


@pytest.mark.parametrize("count", [0, 1, 11, CHUNK // 4 + 1])
def test_allgather(comm, count):
    inputs = everyone(comm, count, np.float32)
    got = comm.allgather(inputs[comm.world_rank])
    assert got.shape == (comm.world_size, count)
    np.testing.assert_array_equal(got, np.array(inputs).reshape(comm.world_size, count))
    # in place: the input is this rank's row of out
    out = np.full((comm.world_size, count), -1, np.float32)
    out[comm.world_rank] = inputs[comm.world_rank]
    assert comm.allgather(out[comm.world_rank], out=out) is out
    np.testing.assert_array_equal(out, np.array(inputs).reshape(comm.world_size, count))


@pytest.mark.parametrize("block", [0, 1, 5, CHUNK // 8 + 3])
def test_reduce_scatter(comm, block):
    n = comm.world_size
    for dtype, op in ((np.float64, "sum"), (np.uint16, "bor"), (np.int8, "min")):
        inputs = everyone(comm, n * block, dtype)
        got = comm.reduce_scatter(inputs[comm.world_rank], op)
        want = expected(comm, op, inputs).reshape(n, block)[comm.world_rank]
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("block", [0, 1, 6, CHUNK // 8 + 3])
def test_alltoall(comm, block):
    n = comm.world_size
    inputs = everyone(comm, n * block, np.int64)
    got = comm.alltoall(inputs[comm.world_rank])
    want = np.concatenate([inputs[p].reshape(n, block)[comm.world_rank] for p in range(n)])
    np.testing.assert_array_equal(got, want)
    a = inputs[comm.world_rank].copy()
    comm.alltoall(a, out=a)  # in place
    np.testing.assert_array_equal(a, want)


def test_barrier_synchronises(comm):
    """A rank that passed the barrier early would read a stale slot."""
    import time

    from test_fence import EPOCHS

    with comm.allocate(shape=(comm.size,), dtype=np.int64) as win:
        slots = win.query(0)
        for epoch in range(1, EPOCHS + 1):
            time.sleep(((epoch + comm.rank) % comm.size) * 0.001)
            slots[comm.rank] = epoch
            comm.barrier()
            assert (slots[:comm.size] == epoch).all()
            comm.barrier()


def test_many_small_chunks(monkeypatch):
    """A 4 KiB scratch buffer: everything goes through many pipelined chunks."""
    monkeypatch.setenv("SHMTOPO_COLL_BUFFER", "4096")
    with shmtopo.Comm.from_env() as comm:
        for count in (511, 512, 513, 5000):
            inputs = everyone(comm, count, np.float64)
            for alg in ("flat", "rsag"):
                got = comm.allreduce(inputs[comm.world_rank], algorithm=alg)
                np.testing.assert_array_equal(got, expected(comm, "sum", inputs))
            last = comm.world_size - 1
            np.testing.assert_array_equal(comm.bcast(inputs[comm.world_rank], root=last), inputs[last])
            np.testing.assert_array_equal(comm.allgather(inputs[comm.world_rank]), np.array(inputs))


class _Sub(np.ndarray):
    pass


TAGGED = np.dtype(np.float64, metadata={"unit": "m"})  # equal to float64, not the same object


def test_fast_entry_takes_only_the_plain_case(comm):
    """shmtopo._fastpath runs a collective on plain ndarrays and hands
    everything else back (None, no collective made) to the general path.
    Across nodes the comm has no fast handle (0): everything is handed back."""
    from shmtopo import _fastpath
    from shmtopo.coll.node import WINDOW_MIN

    h, wins, n = comm.fast_handle, comm.windows, comm.world_size
    x = data(comm.world_rank, 24, np.float64)
    want = expected(comm, "sum", everyone(comm, 24, np.float64))
    readonly = np.empty(24)
    readonly.flags.writeable = False
    if comm.nnodes > 1:
        assert h == 0
        large = np.full(WINDOW_MIN // 8 + 3, comm.world_rank + 1.0)
        for args in [(h, wins, x, None, "sum"), (h, wins, x.reshape(4, 6), np.empty((4, 6)), "sum"),
                     (h, wins, large, None, "sum")]:
            assert _fastpath.allreduce(*args) is None, args
        assert _fastpath.bcast(h, wins, x.copy(), 0) is None
        assert _fastpath.reduce(h, wins, x, None, "sum", 0) is NotImplemented
        assert _fastpath.allgather(h, wins, x, np.empty((n, 24))) is None
    else:
        _plain_fast_entries(comm, x, want, readonly)
    # the same calls through the public API: the general path does them or explains
    np.testing.assert_array_equal(comm.allreduce(x), want)
    np.testing.assert_array_equal(comm.allreduce(x[::2]), want[::2])
    np.testing.assert_array_equal(comm.allreduce(x.view(_Sub)), want)
    np.testing.assert_array_equal(comm.allreduce(x.astype(TAGGED)), want)
    with pytest.raises(ValueError, match="out must be a writable"):
        comm.allreduce(x, out=readonly)
    comm.barrier()


def _plain_fast_entries(comm, x, want, readonly):
    """One node: what the fast entries take and what they hand back."""
    from shmtopo import _fastpath
    from shmtopo.coll.node import WINDOW_MIN

    h, wins, n = comm.fast_handle, comm.windows, comm.world_size
    np.testing.assert_array_equal(_fastpath.allreduce(h, wins, x, None, "sum"), want)
    grid = np.empty((4, 6))
    assert _fastpath.allreduce(h, wins, x.reshape(4, 6), grid, "sum") is grid
    np.testing.assert_array_equal(grid.ravel(), want)
    ints = data(comm.world_rank, 9, np.int64)
    np.testing.assert_array_equal(_fastpath.allreduce(h, wins, ints, None, "bxor"),
                                  reference("bxor", everyone(comm, 9, np.int64)))
    large = np.full(WINDOW_MIN // 8 + 3, comm.world_rank + 1.0)  # private: taken at any size
    np.testing.assert_array_equal(_fastpath.allreduce(h, wins, large, None, "sum"),
                                  np.full(large.size, n * (n + 1) / 2))
    for args in [(0, wins, x, None, "sum"),                        # freed or multi-node comm
                 (h, wins, list(x), None, "sum"),                  # not an array
                 (h, wins, x[::2], None, "sum"),                   # not contiguous
                 (h, wins, x.astype(">f8"), None, "sum"),           # foreign byte order
                 (h, wins, x.view(_Sub), None, "sum"),             # subclass
                 (h, wins, x.astype(np.longdouble), None, "sum"),  # not a collective type
                 (h, wins, x.astype(TAGGED), None, "sum"),         # not numpy's own float64 dtype
                 (h, wins, x, None, "mean"),                       # unknown op
                 (h, wins, x, [0.0] * 24, "sum"),                  # out not an array
                 (h, wins, x, readonly, "sum"),                    # read-only out
                 (h, wins, x, np.empty(24, np.float32), "sum"),    # out of another type
                 (h, wins, x, np.empty(25), "sum"),                # out of another size
                 (h, None, large, None, "sum")]:                   # large, and no list of windows
        assert _fastpath.allreduce(*args) is None, args
    assert _fastpath.bcast(h, wins, readonly, 0) is None
    assert _fastpath.reduce(h, wins, x[::2], None, "sum", 0) is NotImplemented
    assert _fastpath.allgather(h, wins, x, np.empty((n, 23))) is None


def test_plain_calls_of_comms_methods_run_no_python(comm):
    """Comm's barrier, allreduce, reduce, bcast, allgather, alltoall, gather
    and scatter are C methods: their plain calls (C-contiguous arrays, out
    given, int roots, arguments by position or by name) run no Python at
    all on one node; the rest goes to the general path, which does it or
    explains. Across nodes every call takes the general path: the same results."""
    from shmtopo import _fastpath

    n, me, h = comm.world_size, comm.world_rank, comm.fast_handle
    x = data(me, 6, np.int32)
    table = np.arange(n * 6, dtype=np.int32).reshape(n, 6) + 100 * me
    gathered, block, swapped = np.empty((n, 6), np.int32), np.empty(6, np.int32), np.empty((n, 6), np.int32)
    summed, reduced, rows, sent = np.empty(6, np.int32), np.empty(6, np.int32), np.empty((n, 6), np.int32), x.copy()
    root = n - 1
    with PythonCalls() as python_calls:
        comm.barrier()
        got_sum = comm.allreduce(x, out=summed)
        got_max = comm.allreduce(array=x, op="max", out=np.empty(6, np.int32), algorithm=None)
        got_reduced = comm.reduce(x, "sum", root, out=reduced)
        got_sent = comm.bcast(sent, root=root, out=sent)
        got_rows = comm.allgather(x, out=rows)
        got = comm.gather(x, root, out=gathered)
        scattered = comm.scatter(table, root, out=block)
        exchanged = comm.alltoall(table, out=swapped)
    if comm.nnodes == 1:
        assert python_calls == [], python_calls
    else:  # the small barrier, allreduces, reduce and bcast whole in C (span.c), with no Python; the
        # others through the general path and the hierarchy in Python
        assert python_calls.count("run_across_nodes") == 4 and "reduce" not in python_calls, python_calls
        assert "_shmtopo_py_allgather" not in python_calls  # the leaders' exchange is C's (mpi_oob.c)
    everyone_x = np.array(everyone(comm, 6, np.int32))
    assert got_sum is summed and got_rows is rows and got_sent is sent
    np.testing.assert_array_equal(summed, everyone_x.sum(axis=0))
    np.testing.assert_array_equal(got_max, everyone_x.max(axis=0))
    np.testing.assert_array_equal(rows, everyone_x)
    np.testing.assert_array_equal(sent, everyone_x[root])
    if me == root:
        assert got_reduced is reduced
        np.testing.assert_array_equal(reduced, everyone_x.sum(axis=0))
    else:
        assert got_reduced is None
    # what the general path takes: a name the signature lacks, an argument
    # given twice (Python's TypeError), a numpy integer root (done there)
    with pytest.raises(TypeError):
        comm.allreduce(x, out=summed, bogus=1)
    with pytest.raises(TypeError):
        comm.allreduce(x, "sum", out=summed, op="max")
    with PythonCalls() as python_calls:
        comm.bcast(sent, root=np.int64(root), out=sent)
    assert python_calls[:1] == ["bcast"], python_calls
    np.testing.assert_array_equal(sent, everyone_x[root])
    everyone_x = everyone(comm, 6, np.int32)
    if me == root:
        assert got is gathered
        np.testing.assert_array_equal(gathered, np.array(everyone_x))
    else:
        assert got is None
    assert scattered is block
    np.testing.assert_array_equal(block, np.arange(me * 6, me * 6 + 6) + 100 * root)
    assert exchanged is swapped
    np.testing.assert_array_equal(swapped, [np.arange(me * 6, me * 6 + 6) + 100 * p for p in range(n)])
    # what the C entries hand back (None: no collective made)
    assert _fastpath.gather(h, x, gathered, n) is None                      # root out of range
    assert _fastpath.gather(h, x, gathered, "0") is None                     # not an int
    assert _fastpath.scatter(h, table, block, -1) is None
    assert _fastpath.alltoall(h, table, swapped[:, :5]) is None               # not contiguous
    assert _fastpath.alltoall(h, table, table) is None                      # in place: the general path
    assert _fastpath.alltoall(0, table, swapped) is None                    # no comm
    # the same through the API: in place and other shapes go the general way
    if me == root:
        assert _fastpath.gather(h, x, np.empty((n, 5), np.int32), root) is None
        assert _fastpath.scatter(h, table.reshape(-1), block, root) is None
    np.testing.assert_array_equal(comm.alltoall(table.copy(), out=None), swapped)
    comm.barrier()


def test_scans_and_reduce_scatter_enter_c_once(comm):
    """scan and exscan (out given, or a new array for scan), in place too,
    and reduce_scatter of equal blocks with out given run no Python on one
    node (Comm's C methods); the rest takes the general path, which does it
    or explains. Across nodes every call takes the general path: the same
    results, scans folded as the job's reductions are."""
    from shmtopo import _fastpath

    n, me, h = comm.world_size, comm.world_rank, comm.fast_handle
    x = data(me, 5, np.float64)
    blocks = np.arange(n * 3, dtype=np.int64) * (me + 1)
    scanned, excl, block = np.empty(5), np.full(5, -1.0), np.empty(3, np.int64)
    inplace = x.copy()
    with PythonCalls() as python_calls:
        got_scan = comm.scan(x, out=scanned)
        got_new = comm.scan(x, "max")
        got_excl = comm.exscan(x, out=excl)
        got_inplace = comm.scan(inplace, out=inplace)
        got_block = comm.reduce_scatter(blocks, out=block)
    # numpy's empty_like makes scan's new array
    if comm.nnodes == 1:
        assert python_calls == ["empty_like"], python_calls
    else:
        assert python_calls[:1] == ["scan"] and "reduce_scatter" in python_calls, python_calls
    rows = list(np.array(everyone(comm, 5, np.float64)))
    # prefix[r]: ranks 0..r folded as a reduction over them is, bit for bit
    prefix = [expected(comm, "sum", rows[:r + 1] + [np.zeros(5)] * (n - r - 1)) for r in range(n)]
    if comm.nnodes == 1:
        prefix = [reference("sum", rows[:r + 1]) for r in range(n)]
    folded = prefix[me]
    assert got_scan is scanned and got_inplace is inplace and got_excl is excl and got_block is block
    np.testing.assert_array_equal(scanned, folded)
    np.testing.assert_array_equal(inplace, folded)
    np.testing.assert_array_equal(got_new, np.array(rows[:me + 1]).max(axis=0))
    np.testing.assert_array_equal(excl, np.full(5, -1.0) if me == 0 else prefix[me - 1])  # rank 0's left as it was
    np.testing.assert_array_equal(block, np.arange(me * 3, me * 3 + 3) * sum(range(1, n + 1)))
    # what the C entries hand back (None: no collective made)
    assert _fastpath.scan(h, x, None, "sum", True) is None                  # exscan's new array: zeroed
    assert _fastpath.scan(h, x, scanned[:4], "sum", False) is None          # another length
    assert _fastpath.scan(h, x, x[1:].copy(), "sum", False) is None
    assert _fastpath.scan(h, x, scanned, "bogus", False) is None            # no such op
    assert _fastpath.scan(0, x, scanned, "sum", False) is None              # no comm
    assert _fastpath.reduce_scatter(h, blocks, block[:2], "sum", None) is None     # a block is 3
    assert _fastpath.reduce_scatter(h, blocks, blocks[:3], "sum", None) is None    # over the input
    assert _fastpath.reduce_scatter(h, blocks, block, "sum", [3] * (n - 1)) is None  # n - 1 counts
    assert _fastpath.reduce_scatter(h, blocks, block, "sum", [2**62] * n) is None   # past the input
    # with counts: rank r gets r + 1 elements of everybody's (1 + 2 + ... + n) summed
    counts = list(range(1, n + 1))
    values = np.arange(sum(counts), dtype=np.int64) * (me + 1)
    mine = np.empty(me + 1, np.int64)
    with PythonCalls() as python_calls:
        got = comm.reduce_scatter(values, counts=counts, out=mine)
    assert got is mine and (python_calls == [] if comm.nnodes == 1 else python_calls[:1] == ["reduce_scatter"]), \
        python_calls
    start = sum(counts[:me])
    np.testing.assert_array_equal(mine, np.arange(start, start + me + 1) * sum(range(1, n + 1)))
    # through the API: the general path does the rest, on every rank alike
    np.testing.assert_array_equal(comm.exscan(x), np.zeros(5) if me == 0 else prefix[me - 1])
    np.testing.assert_array_equal(comm.reduce_scatter(blocks), block)
    comm.barrier()


def test_v_variants_enter_c_once(comm):
    """gatherv, scatterv, allgatherv and alltoallv with out given (counts as a
    list, a tuple, numpy int64 or int32; displs given or packed) run no
    Python on one node (Comm's C methods) (across nodes: the general
    path) and land every block where its layout says; in place, a new result
    and odd counts go the general way."""
    from shmtopo import _fastpath

    n, me, h = comm.world_size, comm.world_rank, comm.fast_handle
    root = n - 1
    counts = [1 + r % 3 for r in range(n)]                     # 1, 2, 3, 1, ...
    displs = [2 * sum(counts[:r]) + 1 for r in range(n)]       # gaps between the blocks
    end = displs[-1] + counts[-1]
    mine = np.arange(counts[me], dtype=np.float64) + 10 * me
    gathered, allgathered = np.full(end, -1.0), np.full(end, -1.0)
    table = np.arange(sum(counts), dtype=np.float64) + 100 * root
    scattered = np.empty(counts[me])
    # alltoallv: rank p gets (me + p) % 2 + 1 elements from me, packed
    sendc = [(me + p) % 2 + 1 for p in range(n)]
    recvc = [(p + me) % 2 + 1 for p in range(n)]
    send = np.arange(sum(sendc), dtype=np.int32) + 1000 * me
    received = np.empty(sum(recvc), np.int32)
    forms = [list, tuple, lambda c: np.array(c, np.int64), lambda c: np.array(c, np.int32)]
    for form in forms:
        c, d, sc, rc = form(counts), form(displs), form(sendc), form(recvc)
        with PythonCalls() as python_calls:
            got_g = comm.gatherv(mine, c, d, root, out=gathered)
            got_s = comm.scatterv(table, c, None, root, out=scattered)
            got_a = comm.allgatherv(mine, c, d, out=allgathered)
            got_t = comm.alltoallv(send, sc, None, rc, None, out=received)
        if comm.nnodes == 1:
            assert python_calls == [], (form, python_calls)
        else:
            assert python_calls[:1] == ["gatherv"], (form, python_calls)
            assert {"scatterv", "allgatherv", "alltoallv"} <= set(python_calls), (form, python_calls)
        assert (got_g is gathered) if me == root else got_g is None
        assert got_s is scattered and got_a is allgathered and got_t is received
    expect = np.full(end, -1.0)
    for r in range(n):
        expect[displs[r]:displs[r] + counts[r]] = np.arange(counts[r]) + 10 * r
    if me == root:
        np.testing.assert_array_equal(gathered, expect)
    np.testing.assert_array_equal(allgathered, expect)
    np.testing.assert_array_equal(scattered, table[sum(counts[:me]):sum(counts[:me + 1])])
    sdispls = np.cumsum([0] + recvc)
    for p in range(n):  # rank p's block for me starts after its blocks for ranks < me
        theirs = [(p + q) % 2 + 1 for q in range(n)]
        start = sum(theirs[:me])
        np.testing.assert_array_equal(received[sdispls[p]:sdispls[p + 1]],
                                      np.arange(start, start + recvc[p]) + 1000 * p)
    # what the C entries hand back (None: no collective made)
    assert _fastpath.allgatherv(h, mine, counts[:-1], None, allgathered) is None     # n - 1 counts
    assert _fastpath.allgatherv(h, mine, [-1] * n, None, allgathered) is None       # negative
    assert _fastpath.allgatherv(h, mine, counts, displs, allgathered[:end - 1]) is None  # out too short
    assert _fastpath.allgatherv(h, mine, [c + 1 for c in counts], None, allgathered) is None  # own count
    assert _fastpath.alltoallv(h, send, sendc, None, recvc, None, send) is None     # over the input
    assert _fastpath.gatherv(h, mine, counts, displs, n, gathered) is None          # root out of range
    if me == root:
        assert _fastpath.gatherv(h, mine, counts, displs, root, None) is None       # a new result
        assert _fastpath.scatterv(h, table, counts, None, root, table[:counts[me]]) is None  # in place
    # through the API: the general path does those, on every rank alike
    np.testing.assert_array_equal(comm.allgatherv(mine, counts, displs)[displs[0]:], expect[displs[0]:])
    comm.barrier()


@pytest.mark.parametrize("op", ["allreduce", "reduce", "bcast", "allgather"])
def test_fast_entry_finds_the_window(comm, op):
    """A large array in a window takes the window path from the fast entry
    too: when only rank 0 is told of the window, the ranks disagree on the
    path and every rank raises (so the window list decides, not the size).
    Across nodes the fast entry hands the call back, and the general path
    takes the window's array like a private one."""
    from shmtopo import _fastpath
    from shmtopo.coll.node import WINDOW_MIN

    if comm.world_size == 1:
        pytest.skip("one rank cannot disagree")
    h, n, count = comm.fast_handle, comm.world_size, WINDOW_MIN // 8 + 5
    with comm.allocate(shape=(count + 8,), dtype=np.float64) as win:
        view = win.local[8:]  # at an offset inside the part
        view[:] = comm.world_rank + 1
        comm.barrier()
        calls = {"allreduce": lambda wins: _fastpath.allreduce(h, wins, view, None, "sum"),
                 "reduce": lambda wins: _fastpath.reduce(h, wins, view, None, "sum", 0),
                 "bcast": lambda wins: _fastpath.bcast(h, wins, view, 0),
                 "allgather": lambda wins: _fastpath.allgather(h, wins, view, np.empty((n, count)))}
        want = {"allreduce": np.full(count, n * (n + 1) / 2), "reduce": np.full(count, n * (n + 1) / 2),
                "bcast": np.full(count, 1.0), "allgather": np.repeat(np.arange(1.0, n + 1), count).reshape(n, count)}
        if comm.nnodes > 1:
            assert h == 0
            assert calls[op](comm.windows) in (None, NotImplemented)  # handed back, no collective made
            public = {"allreduce": lambda: comm.allreduce(view), "reduce": lambda: comm.reduce(view, root=0),
                      "bcast": lambda: comm.bcast(view, root=0), "allgather": lambda: comm.allgather(view)}
            got = public[op]()
        else:
            with pytest.raises(shmtopo.ShmtopoValueError, match="ranks disagree"):
                calls[op](comm.windows if comm.rank == 0 else [])
            got = calls[op](comm.windows)  # every rank on the window path
        if op != "reduce" or comm.world_rank == 0:
            np.testing.assert_array_equal(got, want[op])
        comm.barrier()


def test_mismatched_arguments_fail_everywhere(comm):
    if comm.world_size == 1:
        pytest.skip("one rank cannot disagree")
    odd = comm.world_rank == comm.world_size - 1
    x = np.ones(20)
    cases = [
        lambda: comm.allreduce(np.ones(21 if odd else 20)),                  # count
        lambda: comm.allreduce(x.astype(np.float32) if odd else x),          # dtype
        lambda: comm.allreduce(x, "max" if odd else "sum"),                  # op
        lambda: comm.bcast(x, root=1 if odd else 0),                         # root
        lambda: comm.allreduce(x, "bogus" if odd else "sum"),                # invalid op, one rank
        lambda: comm.allreduce(x.astype(np.longdouble) if odd else x),      # invalid dtype, one rank
        lambda: comm.reduce(x, root=99 if odd else 0),                       # invalid root, one rank
    ]
    for case in cases:
        with pytest.raises(shmtopo.ShmtopoValueError):
            case()
        # nothing lost: the next collective works
        np.testing.assert_array_equal(comm.allreduce(np.ones(3)), np.full(3, comm.world_size))


def test_mismatch_in_every_slot_names_both_calls(comm):
    """A rank's ring of step lines keeps, beside each line, the signature last
    posted there, rewritten only when it changes. Once every slot holds one
    call, mismatches falling in slot after slot must still name what each
    rank called."""
    from shmtopo._native import lib

    if comm.world_size == 1:
        pytest.skip("one rank cannot disagree")
    ring = 2 * lib.SHMTOPO_RUN_AHEAD_LAG
    odd = comm.world_rank == comm.world_size - 1
    for _ in range(ring):
        comm.allreduce(np.ones(4))
    for i in range(ring + 1):
        with pytest.raises(shmtopo.ShmtopoValueError) as info:
            comm.allreduce(np.ones(5 if odd else 4))
        assert "allreduce(count 5" in str(info.value) and "allreduce(count 4" in str(info.value), str(info.value)
        for _ in range(1 + i % 2):  # the next mismatch in the next slot but one, or two
            comm.allreduce(np.ones(4))


def test_bad_arguments(comm):
    with pytest.raises(ValueError, match="bitwise"):
        comm.allreduce(np.ones(3), "band")
    with pytest.raises(ValueError, match="unsupported operation"):
        comm.allreduce(np.ones(3), "mean")
    with pytest.raises(ValueError, match="out"):
        comm.allreduce(np.ones(3), out=np.empty(4))
    with pytest.raises(ValueError, match="equal blocks"):
        comm.alltoall(np.ones(()) if comm.world_size == 1 else np.ones(comm.world_size * 2 + 1))
    comm.barrier()


@pytest.mark.parametrize("node_size", [1, 2])
def test_simulated_nodes_match_mpi4py(node_size):
    """Several "nodes" of node_size ranks on this machine: hierarchical paths,
    checked against plain mpi4py collectives."""
    if rendezvous.in_environment():
        pytest.skip("simulated nodes are nodes of an MPI job: this one was started without MPI")
    skip_simulated_nodes_across_hosts(node_size)
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    with shmtopo.Comm.from_mpi(world, node_size=node_size) as comm:
        assert comm.nnodes == -(-world.size // node_size)
        assert comm.world_rank == world.rank and comm.world_size == world.size
        x = data(world.rank, 1000, np.float64)
        want = np.empty_like(x)
        world.Allreduce(x, want)
        np.testing.assert_allclose(comm.allreduce(x), want, rtol=1e-12)
        ints = data(world.rank, 333, np.int64)
        want = np.empty_like(ints)
        world.Allreduce(ints, want, op=MPI.MAX)
        np.testing.assert_array_equal(comm.allreduce(ints, "max"), want)
        for root in range(world.size):
            got = comm.reduce(ints, root=root)
            want = np.empty_like(ints) if world.rank == root else None
            world.Reduce(ints, want, root=root)
            if world.rank == root:
                np.testing.assert_array_equal(got, want)
            else:
                assert got is None
            b = comm.bcast(data(world.rank, 70000, np.uint8, salt=root), root=root)
            np.testing.assert_array_equal(b, data(root, 70000, np.uint8, salt=root))
        gathered = np.empty((world.size, 333), np.int64)
        world.Allgather(ints, gathered)
        np.testing.assert_array_equal(comm.allgather(ints), gathered)
        blocks = data(world.rank, 4 * world.size, np.int32)
        want = np.empty_like(blocks)
        world.Alltoall(blocks, want)
        np.testing.assert_array_equal(comm.alltoall(blocks), want)
        want = np.empty(4, np.int32)
        world.Reduce_scatter_block(blocks, want)
        np.testing.assert_array_equal(comm.reduce_scatter(blocks), want)
        comm.barrier()
        with comm.allocate(8) as win:  # windows stay node-local
            win.fence()
            assert comm.size == min(node_size, world.size - (world.rank // node_size) * node_size)


@pytest.mark.parametrize("algorithm", ["flat", "rsag", None])
def test_window_path_zero_copy(comm, algorithm):
    """Arrays inside a window of the comm are read in place by the peers on
    one node (across nodes they are taken like private arrays: the same
    results)."""
    count = 3 * CHUNK // 8 + 5
    inputs = everyone(comm, count, np.float64)
    with comm.allocate(shape=(count + 16,), dtype=np.float64) as win:
        view = win.local[16:]  # at an offset inside the part
        view[:] = inputs[comm.world_rank]
        got = comm.allreduce(view, algorithm=algorithm)
        np.testing.assert_array_equal(got, expected(comm, "sum", inputs))
        for root in range(comm.world_size):
            r = comm.reduce(view, "max", root=root, algorithm=algorithm)
            if comm.world_rank == root:
                np.testing.assert_array_equal(r, expected(comm, "max", inputs))
        for root in range(comm.world_size):
            b = comm.bcast(view, root=root)
            np.testing.assert_array_equal(b, inputs[root])
        np.testing.assert_array_equal(comm.allgather(view), np.array(inputs))
        comm.bcast(view, root=0, out=view)  # in place: every part becomes rank 0's
        np.testing.assert_array_equal(view, inputs[0])
        np.testing.assert_array_equal(win.local[:16], 0)


def test_window_and_copy_paths_must_not_mix(comm):
    """On one node an array in a window and a private one take different
    paths: mixed, the ranks disagree and every rank raises. Across nodes
    there is one path: mixed is fine."""
    if comm.world_size == 1:
        pytest.skip("one rank cannot disagree")
    count = CHUNK // 8
    with comm.allocate(shape=(count,), dtype=np.float64) as win:
        a = win.local if comm.world_rank == 0 else np.zeros(count)
        if comm.nnodes > 1:
            np.testing.assert_array_equal(comm.allreduce(a), np.zeros(count))
            np.testing.assert_array_equal(comm.allgather(a), np.zeros((comm.world_size, count)))
        else:
            with pytest.raises(shmtopo.ShmtopoValueError, match="ranks disagree"):
                comm.allreduce(a)
            with pytest.raises(shmtopo.ShmtopoValueError, match="ranks disagree"):
                comm.allgather(a)
        np.testing.assert_array_equal(comm.allreduce(win.local), np.zeros(count))


@pytest.mark.parametrize("algorithm", ["flat", "rsag"])
@pytest.mark.parametrize("dtype,count", [(np.float64, 8193), (np.int32, 3 * CHUNK // 4 + 5)])
def test_window_in_place(comm, dtype, count, algorithm):
    """allreduce, reduce and bcast with the result replacing the input in the
    window: peers read the parts while they are rewritten, so a wrong order
    of reads and writes shows up as wrong elements (new data every epoch)."""
    with comm.allocate(shape=(count,), dtype=dtype) as win:
        view = win.local
        me = comm.world_rank
        for epoch in range(3):
            inputs = everyone(comm, count, dtype, salt=epoch)
            view[:] = inputs[me]
            assert comm.allreduce(view, out=view, algorithm=algorithm) is view
            np.testing.assert_array_equal(view, expected(comm, "sum", inputs), err_msg=f"epoch {epoch}")
            for root in range(comm.world_size):
                view[:] = inputs[me]
                comm.barrier()  # no rank may still read a part being refilled
                out = view if me == root else None
                got = comm.reduce(view, "max", root=root, out=out, algorithm=algorithm)
                want = expected(comm, "max", inputs) if me == root else inputs[me]
                np.testing.assert_array_equal(view, want, err_msg=f"reduce root {root}")
                assert got is out
            for root in range(comm.world_size):
                view[:] = inputs[me]
                comm.barrier()
                assert comm.bcast(view, root=root, out=view) is view  # the ranks share the copying
                np.testing.assert_array_equal(view, inputs[root], err_msg=f"bcast root {root}")


def test_window_result_must_not_overlap_a_peers_input(comm):
    """On one node peers read each other's parts in place: a result over a
    peer's input is refused on every rank. Across nodes inputs are taken
    like private arrays, so such a result is written, and right. The writer
    is the first rank of the first node with a peer."""
    if comm.world_size == 1:
        pytest.skip("needs a peer")
    count = CHUNK // 8
    sizes = comm.plan.node_sizes
    with comm.allocate(shape=(count,), dtype=np.float64) as win:
        win.local[:] = comm.world_rank
        comm.barrier()
        peer = (comm.rank + 1) % comm.size  # a node rank: the window's
        on_writers_node = max(sizes) > 1 and comm.plan.node_index == [z > 1 for z in sizes].index(True)
        out = win.query(peer)[:count] if on_writers_node and comm.rank == 0 else None
        total = sum(range(comm.world_size))
        if comm.nnodes > 1:
            comm.allreduce(win.local, out=out)
            comm.barrier()
            if on_writers_node:  # its node sees the sum in the peer's part
                np.testing.assert_array_equal(win.query(1)[:count], total)
            comm.barrier()
            win.local[:] = comm.world_rank
            comm.barrier()
        else:  # the writer errs; all fail
            with pytest.raises(shmtopo.ShmtopoValueError):
                comm.allreduce(win.local, out=out)
            np.testing.assert_array_equal(win.query(peer)[:count], peer)  # nothing written
        np.testing.assert_array_equal(comm.allreduce(win.local)[:3], total)


def test_small_collectives_wait_without_the_gil(comm):
    """While a rank waits in a small collective for a late peer, its other
    threads keep running: the fast entry releases the GIL like cffi does.
    The fast entries are one node's (across nodes calls take the general
    path, whose waits poll MPI)."""
    if comm.world_size == 1:
        pytest.skip("needs a late peer")
    if comm.nnodes > 1:
        pytest.skip("no fast entry across nodes")
    import threading
    import time

    ticks, stop = [0], threading.Event()

    def count():
        while not stop.is_set():
            ticks[0] += 1

    x, out, grid = np.ones(8), np.empty(8), np.empty((comm.world_size, 8))
    calls = [lambda: comm.allreduce(x, out=out), lambda: comm.reduce(x, root=0, out=out),
             lambda: comm.bcast(out, root=0, out=out), lambda: comm.allgather(x, out=grid)]
    counter = threading.Thread(target=count, daemon=True)
    counter.start()
    try:
        start, t0 = ticks[0], time.perf_counter()
        time.sleep(0.05)  # the counter runs alone: its rate
        rate = (ticks[0] - start) / (time.perf_counter() - t0)
        for call in calls:
            comm.barrier()
            late = comm.world_rank == comm.world_size - 1
            if late:
                time.sleep(0.2)  # the others wait inside the call meanwhile
            before = ticks[0]
            call()
            # Holding the GIL, the wait would leave the counter at most one
            # switch interval (5 ms) of counting; released, about 0.2 s.
            if not late:
                assert ticks[0] - before > rate * 0.04, "the counting thread stood still during the wait"
    finally:
        stop.set()
        counter.join()


ROOTED = ["gather", "scatter", "gatherv", "scatterv", "bcast", "reduce"]


def rooted_call(comm, name, root):
    """comm.<name> on private arrays with `root`, each call's usual arguments."""
    ws = comm.world_size
    x = np.arange(4.0)
    calls = {
        "gather": lambda: comm.gather(x, root=root, out=np.empty((ws, 4))),
        "scatter": lambda: comm.scatter(np.zeros((ws, 4)), root=root, out=np.empty(4)),
        "gatherv": lambda: comm.gatherv(x, [4] * ws, root=root, out=np.empty(4 * ws)),
        "scatterv": lambda: comm.scatterv(np.zeros(4 * ws), [4] * ws, root=root, out=np.empty(4)),
        "bcast": lambda: comm.bcast(x, root=root, out=x),
        "reduce": lambda: comm.reduce(x, root=root, out=np.empty(4)),
    }
    return calls[name]()


@pytest.mark.parametrize("name", ROOTED)
@pytest.mark.parametrize("root", [True, np.bool_(False), 0.0, np.float64(0.0)], ids=["True", "np.bool_", "0.0",
                                                                                       "np.float64"])
def test_a_root_that_is_no_rank_number_raises_on_every_rank(comm, name, root):
    """A bool or a float is not a rank number, whatever path the arrays take
    (the C entry's and the general one's rule are the same): every rank
    raises, and the comm goes on."""
    with pytest.raises(shmtopo.ShmtopoValueError, match="root must be a rank number"):
        rooted_call(comm, name, root)
    rooted_call(comm, name, np.int64(0))  # a numpy integer is one
    assert float(comm.allreduce(np.ones(1))[0]) == comm.world_size
