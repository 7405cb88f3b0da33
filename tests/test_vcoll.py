"""gather, scatter, gatherv, scatterv, allgatherv, alltoallv, reduce_scatter
with counts, scan and exscan against numpy references built from every
rank's input (each rank can generate every other rank's), on one node and on
simulated nodes (node_size=1, 2: the across-nodes half), with every root,
uneven counts (zeros among them), sizes across the chunk size, and the
in-place forms; then one rank passing a wrong count, counts array, root or
dtype: every rank raises the same ShmtopoValueError naming it."""
import numpy as np
import pytest
from mpi4py import MPI

import shmtopo
from conftest import skip_simulated_nodes_across_hosts
from values import culprits
from test_collectives import CHUNK, UFUNCS, data, ops_for, reference

WORLD = MPI.COMM_WORLD
BIG = 3 * 2**20 // 8 + 3  # several MiB of float64, not a multiple of anything


@pytest.fixture(params=[None, 1, 2], ids=["onenode", "nodes1", "nodes2"])
def vcomm(request):
    """The job's comm, as one node or as simulated nodes of 1 and 2 ranks
    (on real nodes: the job's nodes, or simulated ones inside them)."""
    skip_simulated_nodes_across_hosts(request.param)
    c = shmtopo.Comm.from_mpi(WORLD, node_size=request.param)
    yield c
    c.free()


def uneven(n, base, salt=0):
    """Per-rank counts around `base`, some of them 0 (when n > 1)."""
    counts = [(base * (r + 1 + salt)) // n + (r + salt) % 3 for r in range(n)]
    if n > 1:
        counts[(1 + salt) % n] = 0
    return counts


def scattered(counts, gap=3):
    """Displacements in reverse rank order, with gaps: not the prefix sums."""
    displs, at = [0] * len(counts), 0
    for r in reversed(range(len(counts))):
        displs[r] = at
        at += counts[r] + gap
    return displs


def layout_reference(counts, displs, blocks, dtype, fill):
    end = max([d + c for c, d in zip(counts, displs) if c] or [0])
    out = np.full(end, fill, dtype)
    for c, d, b in zip(counts, displs, blocks):
        out[d:d + c] = b
    return out


# ---- gather, scatter ---------------------------------------------------------------------

@pytest.mark.parametrize("count", [0, 1, 13, CHUNK // 8 + 1, BIG])
def test_gather_every_root(vcomm, count):
    n, me = vcomm.world_size, vcomm.world_rank
    for root in range(n):
        got = vcomm.gather(data(me, count, np.float64, root), root=root)
        if me == root:
            want = np.array([data(r, count, np.float64, root) for r in range(n)]).reshape(n, count)
            np.testing.assert_array_equal(got, want)
        else:
            assert got is None


def test_gather_shapes_out_and_in_place(vcomm):
    n, me = vcomm.world_size, vcomm.world_rank
    want = np.array([data(r, 12, np.int16) for r in range(n)]).reshape(n, 3, 4)
    for root in range(n):
        out = np.full((n, 3, 4), -1, np.int16) if me == root else None
        got = vcomm.gather(data(me, 12, np.int16).reshape(3, 4), root=root, out=out)
        if me == root:
            assert got is out
            np.testing.assert_array_equal(out, want)
            # in place, both forms: array None, or the view of out at the root's row
            for form in ("none", "view"):
                out = np.full((n, 3, 4), -1, np.int16)
                out[me] = want[me]
                got = vcomm.gather(None if form == "none" else out[me], root=root, out=out)
                assert got is out
                np.testing.assert_array_equal(out, want)
        else:
            assert got is None
            for _ in ("none", "view"):
                assert vcomm.gather(data(me, 12, np.int16).reshape(3, 4), root=root) is None


@pytest.mark.parametrize("block", [0, 1, 7, CHUNK // 8 + 1, BIG])
def test_scatter_every_root(vcomm, block):
    n, me = vcomm.world_size, vcomm.world_rank
    for root in range(n):
        full = np.concatenate([data(r, block, np.float64, root) for r in range(n)]).reshape(n, block)
        if me == root:
            got = vcomm.scatter(full, root=root)
        else:
            got = vcomm.scatter(None, root=root, out=np.empty(block))
        np.testing.assert_array_equal(got, full[me])


def test_scatter_in_place_and_shapes(vcomm):
    n, me = vcomm.world_size, vcomm.world_rank
    full = np.arange(n * 6, dtype=np.uint32).reshape(n, 2, 3)
    for root in range(n):
        if me == root:
            mine = full.copy()
            got = vcomm.scatter(mine, root=root, out=mine[me])  # in place: the root's block stays
            assert np.shares_memory(got, mine[me])
            np.testing.assert_array_equal(mine, full)
        else:
            out = np.zeros((2, 3), np.uint32)
            assert vcomm.scatter(None, root=root, out=out) is out
            np.testing.assert_array_equal(out, full[me])


# ---- gatherv, scatterv ------------------------------------------------------------------

@pytest.mark.parametrize("base", [0, 1, 9, CHUNK // 8 + 1, BIG])
def test_gatherv_every_root(vcomm, base):
    n, me = vcomm.world_size, vcomm.world_rank
    for root in range(n):
        counts = uneven(n, base, salt=root)
        blocks = [data(r, counts[r], np.float64, root) for r in range(n)]
        for displs in (None, scattered(counts)):
            d = displs if displs is not None else list(np.cumsum([0] + counts[:-1]))
            if me == root:
                got = vcomm.gatherv(blocks[me], counts, displs, root=root)  # a new array: gaps undefined
                assert got.size == max([d[r] + counts[r] for r in range(n) if counts[r]] or [0])
                for r in range(n):
                    np.testing.assert_array_equal(got[d[r]:d[r] + counts[r]], blocks[r])
                want = layout_reference(counts, d, blocks, np.float64, -7.0)
                out = np.full(want.size + 5, -7.0)
                assert vcomm.gatherv(blocks[me], counts, displs, root=root, out=out) is out
                np.testing.assert_array_equal(out[:want.size], want)
            else:
                assert vcomm.gatherv(blocks[me], root=root) is None
                assert vcomm.gatherv(blocks[me], root=root) is None


def test_gatherv_in_place_and_dtypes(vcomm):
    n, me = vcomm.world_size, vcomm.world_rank
    for dtype in (np.int8, np.uint64, np.float32):
        for root in range(n):
            counts = uneven(n, 11, salt=root + 1)
            d = scattered(counts, gap=1)
            blocks = [data(r, counts[r], dtype, root) for r in range(n)]
            want = layout_reference(counts, d, blocks, dtype, 5)
            for form in ("none", "view"):
                if me == root:
                    out = np.full(want.size, 5, dtype)
                    out[d[me]:d[me] + counts[me]] = blocks[me]
                    send = None if form == "none" else out[d[me]:d[me] + counts[me]]
                    assert vcomm.gatherv(send, counts, d, root=root, out=out) is out
                    np.testing.assert_array_equal(out, want)
                else:
                    assert vcomm.gatherv(blocks[me], root=root) is None


@pytest.mark.parametrize("base", [0, 1, 9, CHUNK // 8 + 1, BIG])
def test_scatterv_every_root(vcomm, base):
    n, me = vcomm.world_size, vcomm.world_rank
    for root in range(n):
        counts = uneven(n, base, salt=root)
        for displs in (None, scattered(counts)):
            d = displs if displs is not None else list(np.cumsum([0] + counts[:-1]))
            end = max([d[r] + counts[r] for r in range(n) if counts[r]] or [0])
            full = data(root, end, np.float64, 3)
            out = np.full(counts[me], -1.0)
            if me == root:
                got = vcomm.scatterv(full, counts, displs, root=root, out=out)
            else:
                got = vcomm.scatterv(None, root=root, out=out)
            assert got is out
            np.testing.assert_array_equal(out, full[d[me]:d[me] + counts[me]])


def test_scatterv_in_place_on_root(vcomm):
    n, me = vcomm.world_size, vcomm.world_rank
    for root in range(n):
        counts = uneven(n, 20, salt=root)
        d = scattered(counts)
        full = data(root, sum(counts) + 3 * n, np.int32)
        if me == root:
            mine = full.copy()
            view = mine[d[me]:d[me] + counts[me]]
            assert vcomm.scatterv(mine, counts, d, root=root, out=view) is view
            np.testing.assert_array_equal(mine, full)
            got = vcomm.scatterv(mine, counts, d, root=root)  # out None on the root: a new array
            np.testing.assert_array_equal(got, full[d[me]:d[me] + counts[me]])
        else:
            for _ in range(2):
                out = np.empty(counts[me], np.int32)
                vcomm.scatterv(None, root=root, out=out)
                np.testing.assert_array_equal(out, full[d[me]:d[me] + counts[me]])


# ---- allgatherv, alltoallv ----------------------------------------------------------------

@pytest.mark.parametrize("base", [0, 1, 9, CHUNK // 8 + 1, BIG])
def test_allgatherv(vcomm, base):
    n, me = vcomm.world_size, vcomm.world_rank
    counts = uneven(n, base)
    blocks = [data(r, counts[r], np.float64) for r in range(n)]
    want = layout_reference(counts, list(np.cumsum([0] + counts[:-1])), blocks, np.float64, 0)
    got = vcomm.allgatherv(blocks[me], counts)
    np.testing.assert_array_equal(got, want)
    # each rank its own layout of out; in place, both forms
    d = scattered(counts, gap=me + 1)
    want = layout_reference(counts, d, blocks, np.float64, 2.5)
    for form in ("copy", "none", "view"):
        out = np.full(want.size, 2.5)
        out[d[me]:d[me] + counts[me]] = blocks[me]
        send = {"copy": blocks[me], "none": None, "view": out[d[me]:d[me] + counts[me]]}[form]
        assert vcomm.allgatherv(send, counts, d, out=out) is out
        np.testing.assert_array_equal(out, want)


def pair_counts(n, base, salt=0):
    """counts[r][p]: what rank r sends to rank p (some 0)."""
    return [[(base * ((r + 2 * p + salt) % 5)) // 3 + (r * p + salt) % 2 for p in range(n)] for r in range(n)]


@pytest.mark.parametrize("base", [0, 1, 7, CHUNK // 8 + 1, BIG // 2])
def test_alltoallv(vcomm, base):
    n, me = vcomm.world_size, vcomm.world_rank
    m = pair_counts(n, base)
    sendcounts = m[me]
    recvcounts = [m[r][me] for r in range(n)]
    sd = scattered(sendcounts, gap=2)
    send_end = max([sd[p] + sendcounts[p] for p in range(n)] + [0])
    mine = data(me, send_end, np.float64)

    def sent_by(r):
        c = m[r]
        dd = scattered(c, gap=2)
        end = max([dd[p] + c[p] for p in range(n)] + [0])
        return data(r, end, np.float64)[dd[me]:dd[me] + c[me]]

    blocks = [sent_by(r) for r in range(n)]
    got = vcomm.alltoallv(mine, sendcounts, sd, recvcounts, None)
    np.testing.assert_array_equal(got, np.concatenate(blocks) if blocks else got)
    rd = scattered(recvcounts, gap=1)
    want = layout_reference(recvcounts, rd, blocks, np.float64, -3.0)
    out = np.full(want.size, -3.0)
    assert vcomm.alltoallv(mine, sendcounts, sd, recvcounts, rd, out=out) is out
    np.testing.assert_array_equal(out, want)


# ---- reduce_scatter with counts, scan, exscan ------------------------------------------------

@pytest.mark.parametrize("base", [0, 1, 9, CHUNK // 8 + 1, BIG])
def test_reduce_scatter_counts(vcomm, base):
    n, me = vcomm.world_size, vcomm.world_rank
    counts = uneven(n, base)
    total = sum(counts)
    start = sum(counts[:me])
    for dtype, op in ((np.float64, "sum"), (np.uint16, "bor"), (np.int8, "min")):
        inputs = [data(r, total, dtype) for r in range(n)]
        want = reference(op, inputs)[start:start + counts[me]]
        # across nodes float sums meet in MPI's order between the leaders (as
        # allreduce's do): equal up to rounding there, bit for bit on a node
        same = np.testing.assert_allclose if vcomm.nnodes > 1 and want.dtype.kind == "f" \
            else np.testing.assert_array_equal
        same(vcomm.reduce_scatter(inputs[me], op, counts=counts), want)
        a = inputs[me].copy()
        assert vcomm.reduce_scatter(a, op, counts=counts, out=a) is a  # in place: the result at its start
        same(a[:counts[me]], want)


def test_reduce_scatter_counts_equal_blocks_match(vcomm):
    n, me = vcomm.world_size, vcomm.world_rank
    inputs = [data(r, 5 * n, np.float32) for r in range(n)]
    np.testing.assert_array_equal(vcomm.reduce_scatter(inputs[me], counts=[5] * n),
                                  vcomm.reduce_scatter(inputs[me]))


def scan_reference(op, inputs, upto):
    return reference(op, inputs[:upto]) if upto else None


@pytest.mark.parametrize("count", [0, 1, 5, 12, 13, CHUNK // 8 + 1, BIG])
def test_scan_exscan(vcomm, count):
    n, me = vcomm.world_size, vcomm.world_rank
    for dtype, op in ((np.float64, "sum"), (np.float32, "prod"), (np.int32, "bxor"), (np.uint8, "max")):
        inputs = [data(r, count, dtype) for r in range(n)]
        np.testing.assert_array_equal(vcomm.scan(inputs[me], op), scan_reference(op, inputs, me + 1))
        got = vcomm.exscan(inputs[me], op)
        if me == 0:
            np.testing.assert_array_equal(got, np.zeros(count, dtype))
        else:
            np.testing.assert_array_equal(got, scan_reference(op, inputs, me))
        # in place, and rank 0's out of an exscan left as it was
        a = inputs[me].copy()
        assert vcomm.scan(a, op, out=a) is a
        np.testing.assert_array_equal(a, scan_reference(op, inputs, me + 1))
        a = inputs[me].copy()
        assert vcomm.exscan(a, op, out=a) is a
        np.testing.assert_array_equal(a, inputs[0] if me == 0 else scan_reference(op, inputs, me))


@pytest.mark.parametrize("dtype", [np.int8, np.int64, np.uint32, np.float32, np.float64])
def test_scan_every_op_bit_identical(vcomm, dtype):
    """Rank order, bit for bit: floats with values whose sums round."""
    n, me = vcomm.world_size, vcomm.world_rank
    for op in ops_for(dtype):
        inputs = [data(r, 333, dtype, salt=7) * (dtype(3) if np.dtype(dtype).kind == "f" else 1)
                  for r in range(n)]
        want = inputs[0].copy()
        for r in range(1, me + 1):
            want = UFUNCS[op](want, inputs[r]).astype(dtype)
        got = vcomm.scan(inputs[me], op)
        assert got.tobytes() == want.tobytes()


# ---- one rank with a bad argument: the same error on every rank --------------------------------


def raises_everywhere(call, culprit, *words):
    """call() raises ShmtopoValueError on this rank; every rank's message is
    the same, names the culprit, and the error's rank is the culprit."""
    with pytest.raises(shmtopo.ShmtopoValueError) as info:
        call()
    msg = str(info.value)
    msgs = WORLD.allgather(msg)
    assert len(set(msgs)) == 1, msgs
    if culprit is not None:
        assert f"rank {culprit}" in msg, msg
        assert info.value.rank == culprit, (info.value.rank, msg)
    for w in words:
        assert w in msg, msg


MISUSE = ["gather_count", "gather_dtype", "gather_root", "scatter_count", "gatherv_count", "gatherv_dtype",
          "scatterv_count", "allgatherv_counts", "allgatherv_count", "alltoallv_counts", "reduce_scatter_counts",
          "scan_op", "exscan_count", "gatherv_root_out_of_range"]


def misuse_call(comm, name, bad):
    """The call of case `name`, with the bad argument where `bad`."""
    n, me = comm.world_size, comm.world_rank
    counts = [3 + r % 2 for r in range(n)]
    mine = np.ones(counts[me] + (1 if bad else 0))
    if name == "gather_count":
        return comm.gather(np.ones(5 if bad else 4), root=n - 1)
    if name == "gather_dtype":
        return comm.gather(np.ones(4, np.float32 if bad else np.float64), root=0)
    if name == "gather_root":
        return comm.gather(np.ones(4), root=(1 if bad else 0) % n)
    if name == "scatter_count":
        return comm.scatter(np.ones((n, 4)) if me == 0 else None, root=0, out=np.empty(5 if bad else 4))
    if name == "gatherv_count":
        return comm.gatherv(mine, counts if me == 0 else None, root=0)
    if name == "gatherv_dtype":
        return comm.gatherv(np.ones(counts[me], np.int32 if bad else np.float64), counts, root=n - 1)
    if name == "scatterv_count":
        return comm.scatterv(np.ones(sum(counts)), counts, root=0, out=np.empty(counts[me] + (1 if bad else 0)))
    if name == "allgatherv_counts":
        c = list(counts)
        if bad:
            c[0] += 1
        return comm.allgatherv(np.ones(counts[me]) if not bad or me != 0 else np.ones(c[0]), c)
    if name == "allgatherv_count":
        return comm.allgatherv(mine, counts)
    if name == "alltoallv_counts":
        sc = [2 + (1 if bad else 0)] * n
        return comm.alltoallv(np.ones(sum(sc)), sc, None, [2] * n, None)
    if name == "reduce_scatter_counts":
        c = [2] * n
        if bad:
            c[-1] = 3
        return comm.reduce_scatter(np.ones(sum(c)), counts=c)
    if name == "scan_op":
        return comm.scan(np.ones(4), "max" if bad else "sum")
    if name == "exscan_count":
        return comm.exscan(np.ones(200000 if bad else 4))
    if name == "gatherv_root_out_of_range":
        return comm.gatherv(np.ones(3), [3] * n, root=n + 2 if bad else 0)
    raise AssertionError(name)


# cases where the bad rank passes valid arguments that differ from the others'
MISMATCHES = {"gather_count", "gather_dtype", "gather_root", "scan_op", "exscan_count", "gatherv_dtype",
              "allgatherv_counts", "reduce_scatter_counts", "scatter_count"}


@pytest.mark.parametrize("name", MISUSE)
def test_one_bad_rank_raises_everywhere(vcomm, name):
    n = vcomm.world_size
    node_size = vcomm.plan.node_sizes[0] if vcomm.nnodes > 1 else None  # the second node's leader
    if n == 1 and name in MISMATCHES - {"scatter_count"}:
        pytest.skip("one rank cannot differ from the others")
    for culprit in culprits(n, node_size):
        bad = vcomm.world_rank == culprit
        # two ranks with different valid arguments: either may be the odd one
        who = None if n == 2 and name in MISMATCHES else culprit
        raises_everywhere(lambda: misuse_call(vcomm, name, bad), who)
        # the comm goes on working
        np.testing.assert_array_equal(vcomm.allreduce(np.ones(2)), np.full(2, float(n)))


def test_counts_messages_name_the_call(vcomm):
    n, me = vcomm.world_size, vcomm.world_rank
    bad = me == n - 1
    raises_everywhere(lambda: vcomm.gatherv(np.ones(5 if bad else 2), [2] * n, root=0), n - 1,
                      "gatherv(count 5, float64, root 0)", "root 0's counts")
