"""The element types and operations beyond plain integers and floats: bool,
complex64/128, float16 and bfloat16 (reduced in float32, rounded once), the
(value, index) pairs of maxloc/minloc (shmtopo.pair_dtype), and the logical
ops on integers. Every result is checked bit for bit against a numpy
reference folded in rank order, the association shmtopo promises: on real
nodes each node's ranks in node-rank order, then the nodes' partials in node
order (folds.py), 16-bit floats in float32 throughout, rounded once."""
import numpy as np
import pytest
from mpi4py import MPI

import folds
import shmtopo
from conftest import skip_simulated_nodes_across_hosts

try:
    import ml_dtypes
    BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # optional: the [test] extra installs it
    BFLOAT16 = None

WORLD = MPI.COMM_WORLD
CHUNK = 256 * 1024  # the default SHMTOPO_COLL_BUFFER
BIG = (4 << 20) + 4096  # several MiB: past the oversubscribed single-copy threshold too
INT_TYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]


def pair(value):
    return shmtopo.pair_dtype(value)


PAIRS = [np.float32, np.float64, np.int64, np.int32, np.int16]
NEW_TYPES = ([np.dtype(np.bool_), np.dtype(np.complex64), np.dtype(np.complex128), np.dtype(np.float16)]
             + ([BFLOAT16] if BFLOAT16 is not None else []))
NEW_IDS = [str(t) for t in NEW_TYPES]
ALL_NEW = NEW_IDS + [f"pair-{np.dtype(v)}" for v in PAIRS]


def dtype_of(name):
    if name.startswith("pair-"):
        return pair(np.dtype(name[5:]))
    return NEW_TYPES[NEW_IDS.index(name)]


def is_half(dtype):
    return dtype == np.float16 or (BFLOAT16 is not None and dtype == BFLOAT16)


def ops_for(dtype):
    if dtype.fields:
        return ["maxloc", "minloc"]
    if dtype == np.bool_:
        return ["land", "lor", "lxor", "band", "bor", "bxor"]
    if dtype.kind == "c":
        return ["sum", "prod"]
    return ["sum", "prod", "min", "max"]  # float16, bfloat16


def data(rank, count, dtype, salt=0, exact=False):
    """Rank's deterministic input. exact: 16-bit values k/1024, whose sums
    over a few ranks float32 holds exactly in any order (across nodes, where
    MPI picks the association), but float16 does not."""
    dtype = np.dtype(dtype)
    rng = np.random.default_rng(1000 * rank + 17 * count + salt)
    if dtype.fields:
        out = np.zeros(count, dtype)
        value = dtype["value"]
        out["value"] = rng.integers(-3, 4, count).astype(value)  # small: many ties
        if value.kind == "f":
            out["value"] += rng.integers(0, 2, count) * 0.5
        out["index"] = rng.integers(0, 5, count)
        return out
    if dtype == np.bool_:
        return rng.random(count) < 0.5
    if dtype.kind == "c":
        real = dtype.type(0).real.dtype
        parts = rng.random((2, count)).astype(real) * 2 - 1
        return (parts[0] + 1j * parts[1]).astype(dtype)
    if dtype.kind in "iu":
        lo = 0 if dtype.kind == "u" else -3
        return rng.integers(lo, 4, count).astype(dtype)
    if exact:
        return (rng.integers(-2048, 2049, count) / 1024).astype(np.float32).astype(dtype)
    return (rng.random(count) * 4 - 2).astype(np.float32).astype(dtype)


def everyone(count, dtype, salt=0, exact=False):
    return [data(r, count, dtype, salt, exact) for r in range(WORLD.size)]


def fold(op, a, b):
    """a op b, elementwise, as shmtopo defines op."""
    if op in ("maxloc", "minloc"):
        better = b["value"] > a["value"] if op == "maxloc" else b["value"] < a["value"]
        take = better | ((b["value"] == a["value"]) & (b["index"] < a["index"]))
        return np.where(take, b, a)
    if op in ("land", "lor", "lxor", "band", "bor", "bxor") and (a.dtype == np.bool_ or op[0] == "l"):
        logical = {"land": np.logical_and, "lor": np.logical_or, "lxor": np.logical_xor,
                   "band": np.logical_and, "bor": np.logical_or, "bxor": np.logical_xor}[op]
        return logical(a != 0, b != 0).astype(a.dtype)
    if op == "prod" and a.dtype.kind == "c":  # the textbook product, no fused multiply-add
        re = a.real * b.real - a.imag * b.imag
        im = a.real * b.imag + a.imag * b.real
        return (re + 1j * im).astype(a.dtype)
    if op == "min":
        return np.where(b < a, b, a)
    if op == "max":
        return np.where(b > a, b, a)
    return {"sum": np.add, "prod": np.multiply, "band": np.bitwise_and, "bor": np.bitwise_or,
            "bxor": np.bitwise_xor}[op](a, b).astype(a.dtype)


def reference(op, inputs, plan=None):
    """Folded in rank order (plan, a job of several nodes: each node's ranks,
    then the nodes' partials in node order); 16-bit floats in float32,
    rounded once."""
    dtype = inputs[0].dtype
    wide = is_half(dtype)

    def chain(xs):
        acc = xs[0].astype(np.float32) if wide else xs[0].copy()
        for x in xs[1:]:
            acc = fold(op, acc, x.astype(np.float32) if wide else x)
        return acc
    if plan is None or plan.nnodes == 1:
        acc = chain(inputs)
    else:
        acc = chain([chain([inputs[w] for w in ranks]) for ranks in folds.node_groups(plan)])
    return acc.astype(dtype) if wide else acc


def expected(comm, op, inputs):
    """What a reduction of inputs (by world rank) gives on comm's job."""
    return reference(op, inputs, folds.by_node(comm))


def bits(a):
    """The array's bits, field by field for pairs (never their padding)."""
    a = np.ascontiguousarray(a)
    if a.dtype.fields:
        return [bits(a[name]) for name in a.dtype.names]
    return a.view(np.uint8)


def assert_bits(got, want, what=""):
    g, w = bits(got), bits(want)
    if isinstance(g, list):
        for x, y in zip(g, w):
            np.testing.assert_array_equal(x, y, err_msg=what)
    else:
        np.testing.assert_array_equal(g, w, err_msg=what)


def same_everywhere(comm, got):
    """Every rank got the same bits (pairs: of their fields; MPI's maxloc
    leaves the padding as it likes)."""
    b = bits(got)
    rows = WORLD.allgather(b"".join(x.tobytes() for x in (b if isinstance(b, list) else [b])))
    assert all(r == rows[0] for r in rows), "ranks got different results"


def sizes(dtype):
    return (0, 1, 13, CHUNK // np.dtype(dtype).itemsize + 1)


# ---- naming the pair types ------------------------------------------------------

@pytest.mark.serial
def test_pair_dtype_has_the_c_layout():
    for value, size, offset in ((np.float32, 8, 4), (np.float64, 16, 8), (np.int64, 16, 8),
                                (np.int32, 8, 4), (np.int16, 8, 4)):
        d = pair(value)
        assert d.names == ("value", "index") and d.itemsize == size, d
        assert d.fields["value"][:2] == (np.dtype(value), 0)
        assert d.fields["index"][:2] == (np.dtype(np.intc), offset)
        assert d == np.dtype([("value", value), ("index", np.intc)], align=True)
        assert pair(np.dtype(value).char) == d
    for bad in (np.uint8, np.complex64, "bogus", np.float16):
        with pytest.raises(shmtopo.ShmtopoValueError, match="pair"):
            pair(bad)


def test_any_structured_dtype_of_that_layout_works(comm):
    """Other field names, the same layout: accepted; another layout: not."""
    other = np.dtype({"names": ["v", "i"], "formats": [np.float64, np.intc], "offsets": [0, 8],
                      "itemsize": 16})
    inputs = everyone(7, pair(np.float64))
    mine = inputs[comm.world_rank].view(other)
    got = comm.allreduce(mine, "maxloc")
    assert got.dtype == other
    assert_bits(got.view(pair(np.float64)), expected(comm, "maxloc", inputs))
    packed = np.dtype([("value", np.float64), ("index", np.intc)])  # no padding: not MPI's layout
    with pytest.raises(shmtopo.ShmtopoValueError, match="dtype"):
        comm.allreduce(np.zeros(3, packed), "maxloc")


# ---- reductions ------------------------------------------------------------------

@pytest.mark.parametrize("name", ALL_NEW)
@pytest.mark.parametrize("algorithm", [None, "flat", "rsag"])
def test_allreduce(comm, name, algorithm):
    dtype = dtype_of(name)
    for op in ops_for(dtype):
        for count in sizes(dtype):
            inputs = everyone(count, dtype)
            got = comm.allreduce(inputs[comm.world_rank], op, algorithm=algorithm)
            assert got.dtype == dtype
            assert_bits(got, expected(comm, op, inputs), f"{op} {count}")


@pytest.mark.parametrize("dtype", INT_TYPES)
def test_logical_ops_on_integers(comm, dtype):
    for op in ("land", "lor", "lxor"):
        for count in (1, 13, CHUNK // np.dtype(dtype).itemsize + 1):
            inputs = everyone(count, dtype)
            got = comm.allreduce(inputs[comm.world_rank], op)
            assert_bits(got, expected(comm, op, inputs), f"{op} {count}")
            if comm.world_size > 1:  # one rank's input comes back as it is, as in MPI
                assert set(np.unique(got)) <= {0, 1}


@pytest.mark.parametrize("name", ALL_NEW)
def test_reduce_every_root(comm, name):
    dtype = dtype_of(name)
    for op in ops_for(dtype):
        for count in (1, CHUNK // dtype.itemsize + 1):
            inputs = everyone(count, dtype, salt=3)
            want = expected(comm, op, inputs)
            for algorithm in (None, "flat", "rsag"):
                for root in range(comm.world_size):
                    got = comm.reduce(inputs[comm.world_rank], op, root=root, algorithm=algorithm)
                    if comm.world_rank == root:
                        assert_bits(got, want, f"{op} {count} root {root} {algorithm}")
                    else:
                        assert got is None


@pytest.mark.parametrize("name", ALL_NEW)
def test_several_mib(comm, name):
    """Past the single-copy thresholds (comm.single_copy) and many chunks."""
    dtype = dtype_of(name)
    count = BIG // dtype.itemsize + 3
    for op in ops_for(dtype)[:2]:
        inputs = everyone(count, dtype, salt=5)
        want = expected(comm, op, inputs)
        assert_bits(comm.allreduce(inputs[comm.world_rank], op), want, op)
        root = comm.world_size - 1
        got = comm.reduce(inputs[comm.world_rank], op, root=root)
        if comm.world_rank == root:
            assert_bits(got, want, f"reduce {op}")
        a = inputs[comm.world_rank].copy()
        comm.allreduce(a, op, out=a)  # in place
        assert_bits(a, want, f"in place {op}")


@pytest.mark.parametrize("name", ALL_NEW)
def test_reduce_scatter(comm, name):
    dtype = dtype_of(name)
    n = comm.world_size
    for op in ops_for(dtype):
        for block in (0, 1, 5, CHUNK // dtype.itemsize + 3):
            inputs = everyone(n * block, dtype, salt=7)
            got = comm.reduce_scatter(inputs[comm.world_rank], op)
            assert_bits(got, expected(comm, op, inputs).reshape(n, block)[comm.world_rank], f"{op} {block}")


@pytest.mark.parametrize("name", [n for n in ALL_NEW if n in ("float16", "bfloat16", "complex64", "bool",
                                                                "pair-float64")])
@pytest.mark.parametrize("algorithm", ["flat", "rsag"])
def test_window_paths(comm, name, algorithm):
    """Inputs inside a window: peers read them in place; allreduce in place
    reduces each rank's slice where it lies."""
    dtype = dtype_of(name)
    count = 3 * CHUNK // dtype.itemsize + 5
    with comm.allocate(shape=(count,), dtype=dtype) as win:
        for op in ops_for(dtype)[:2]:
            inputs = everyone(count, dtype, salt=11)
            want = expected(comm, op, inputs)
            win.local[:] = inputs[comm.world_rank]
            comm.barrier()
            assert_bits(comm.allreduce(win.local, op, algorithm=algorithm), want, f"{op}")
            for root in range(comm.world_size):
                got = comm.reduce(win.local, op, root=root, algorithm=algorithm)
                if comm.world_rank == root:
                    assert_bits(got, want, f"{op} root {root}")
            comm.allreduce(win.local, op, out=win.local, algorithm=algorithm)
            assert_bits(win.local, want, f"{op} in place")
            comm.barrier()


@pytest.mark.parametrize("name", ["float16", "pair-float64", "bool", "complex128"])
def test_persistent_allreduce(comm, name):
    dtype = dtype_of(name)
    op = ops_for(dtype)[0]
    send, recv = np.zeros(1001, dtype), np.zeros(1001, dtype)
    if comm.nnodes > 1:  # persistent requests are one node's
        with pytest.raises(shmtopo.ShmtopoValueError, match="single-node comms only"):
            comm.allreduce_init(send, recv, op)
        return
    with comm.allreduce_init(send, recv, op) as req:
        for epoch in range(3):
            inputs = everyone(1001, dtype, salt=epoch)
            send[:] = inputs[comm.world_rank]
            req.start()
            req.wait()
            assert_bits(recv, expected(comm, op, inputs), f"epoch {epoch}")


def test_sixteen_bit_rounds_once(comm):
    """The float32 accumulator shows: rounding after every rank's addition
    would give other bits (for 3 ranks or more), and the rounding is to
    nearest even, overflow to inf, NaN kept."""
    for dtype in [np.dtype(np.float16)] + ([BFLOAT16] if BFLOAT16 is not None else []):
        count = 4099
        inputs = everyone(count, dtype, salt=13)
        got = comm.allreduce(inputs[comm.world_rank], "sum")
        assert_bits(got, expected(comm, "sum", inputs))
        if comm.world_size >= 3:
            stepwise = inputs[0]
            for x in inputs[1:]:
                stepwise = (stepwise.astype(np.float32) + x.astype(np.float32)).astype(dtype)
            assert not np.array_equal(bits(stepwise), bits(got))
        big = np.full(5, 60000 if dtype == np.float16 else 3e38, np.float32).astype(dtype)
        special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0], np.float32).astype(dtype)
        got = comm.allreduce(np.concatenate([big, special]), "sum")
        with np.errstate(over="ignore", invalid="ignore"):  # inf and NaN are the point
            want = expected(comm, "sum", [np.concatenate([big, special])] * comm.world_size)
        assert_bits(got, want)


# ---- data movement: bitwise -----------------------------------------------------

@pytest.mark.parametrize("name", ALL_NEW)
def test_bcast_allgather_alltoall_move_bits(comm, name):
    dtype = dtype_of(name)
    n = comm.world_size
    for count in sizes(dtype):
        inputs = everyone(count, dtype, salt=17)
        for root in range(n):
            assert_bits(comm.bcast(inputs[comm.world_rank], root=root), inputs[root], f"bcast {count} {root}")
        got = comm.allgather(inputs[comm.world_rank])
        assert got.dtype == dtype and got.shape == (n, count)
        assert_bits(got, np.array(inputs).reshape(n, count), f"allgather {count}")
        blocks = everyone(n * count, dtype, salt=19)
        want = np.concatenate([blocks[p].reshape(n, count)[comm.world_rank] for p in range(n)])
        assert_bits(comm.alltoall(blocks[comm.world_rank]), want, f"alltoall {count}")


# ---- across (simulated) nodes ------------------------------------------------------

@pytest.mark.parametrize("node_size", [1, 2])
def test_simulated_nodes(node_size):
    """Hierarchical paths: every rank gets the bits of the fold over nodes
    (expected), for every type and op; 16-bit floats cross nodes as float32
    partials (the exact data below would round differently if leaders
    exchanged rounded ones)."""
    skip_simulated_nodes_across_hosts(node_size)
    with shmtopo.Comm.from_mpi(WORLD, node_size=node_size) as comm:
        n = WORLD.size
        for name in ALL_NEW:
            dtype = dtype_of(name)
            for op in ops_for(dtype):
                count = 1001
                inputs = everyone(count, dtype, salt=23, exact=True)
                want = expected(comm, op, inputs)
                got = comm.allreduce(inputs[WORLD.rank], op)
                same_everywhere(comm, got)
                assert_bits(got, want, f"{name} {op}")
                for root in range(n):
                    r = comm.reduce(inputs[WORLD.rank], op, root=root)
                    if WORLD.rank == root:
                        assert_bits(r, want, f"{name} {op} root {root}")
                    else:
                        assert r is None
                blocks = everyone(3 * n, dtype, salt=29, exact=True)
                rs = comm.reduce_scatter(blocks[WORLD.rank], op)
                assert_bits(rs, expected(comm, op, blocks).reshape(n, 3)[WORLD.rank], f"{name} {op} rs")
            assert_bits(comm.bcast(inputs[WORLD.rank], root=n - 1), inputs[n - 1])
            assert_bits(comm.allgather(inputs[WORLD.rank]), np.array(inputs))


@pytest.mark.parametrize("node_size", [None, 1, 2])
@pytest.mark.parametrize("name", ["int8", "uint8", "int16", "uint16"])
def test_small_integer_sums_wrap_on_one_node_and_across(node_size, name):
    """8- and 16-bit sums and products that overflow wrap, as in C and numpy,
    whatever the node layout: across nodes MPI only moves the partials
    (Open MPI's own kernels saturate these sums)."""
    skip_simulated_nodes_across_hosts(node_size)
    dtype = np.dtype(name)
    big = np.iinfo(dtype).max // 2 + 1
    with shmtopo.Comm.from_mpi(WORLD, node_size=node_size) as comm:
        for count in (1, 7, 70001):
            inputs = [np.full(count, big - r % 3, dtype) for r in range(WORLD.size)]
            for op in ("sum", "prod"):
                want = expected(comm, op, inputs)
                assert_bits(comm.allreduce(inputs[WORLD.rank], op), want, f"{name} {op} {count}")
                r = comm.reduce(inputs[WORLD.rank], op, root=WORLD.size - 1)
                if WORLD.rank == WORLD.size - 1:
                    assert_bits(r, want, f"{name} {op} {count} reduce")
                blocks = inputs[WORLD.rank][:count // WORLD.size * WORLD.size]
                if blocks.size:
                    rs = comm.reduce_scatter(blocks, op)
                    assert_bits(rs, want[:blocks.size].reshape(WORLD.size, -1)[WORLD.rank], f"{name} {op} rs")
                assert_bits(comm.scan(inputs[WORLD.rank], op), reference(op, inputs[:WORLD.rank + 1]))


# ---- misuse: the same error on every rank ------------------------------------------

INVALID = [(np.complex64, "min"), (np.complex128, "band"), (np.bool_, "sum"), (np.bool_, "max"),
           (np.float16, "band"), (np.float16, "land"), (np.float32, "lor"), (np.int32, "maxloc"),
           ("pair-float64", "sum"), ("pair-int32", "band")]


def _array(spec, count=5):
    return np.zeros(count, dtype_of(spec) if isinstance(spec, str) else spec)


@pytest.mark.parametrize("spec,op", INVALID)
def test_op_invalid_for_the_type_fails_everywhere(comm, spec, op):
    a = _array(spec)
    for call in (lambda: comm.allreduce(a, op), lambda: comm.reduce(a, op, root=0),
                 lambda: comm.reduce_scatter(np.zeros(5 * comm.world_size, a.dtype), op)):
        with pytest.raises(shmtopo.ShmtopoValueError, match=f"{op}"):
            call()
    np.testing.assert_array_equal(comm.allreduce(np.ones(3)), comm.world_size)


def _culprits(n):
    return sorted({0, n // 2, n - 1})


@pytest.mark.parametrize("node_size", [None, 2])
def test_one_rank_differs_fails_everywhere(node_size):
    """First, middle, last rank (and the leader of the second simulated
    node) passing float16 where the others pass float32, or an op its type
    lacks: every rank raises, naming that rank."""
    n = WORLD.size
    if n == 1:
        pytest.skip("one rank cannot disagree")
    skip_simulated_nodes_across_hosts(node_size)
    with shmtopo.Comm.from_mpi(WORLD, node_size=node_size) as comm:
        culprits = _culprits(n) + ([2] if node_size == 2 and n > 2 else [])
        for bad in culprits:
            me = WORLD.rank == bad
            cases = [
                (lambda: comm.allreduce(np.ones(8, np.float16 if me else np.float32)), "float16"),
                (lambda: comm.allreduce(np.ones(8, np.complex64 if me else np.float32), "min"), "min"),
                (lambda: comm.reduce(np.ones(8, np.bool_ if me else np.int8), "sum", root=0), "sum"),
                (lambda: comm.allreduce(np.ones(8) if me else _array("pair-float64", 8), "maxloc"),
                 "maxloc"),
            ]
            for call, match in cases:
                with pytest.raises(shmtopo.ShmtopoValueError, match=match) as info:
                    call()
                if match != "float16":  # a mismatch names two ranks, maybe not this one
                    assert f"rank {bad}" in str(info.value), str(info.value)
                np.testing.assert_array_equal(comm.allreduce(np.ones(3)), n)


@pytest.mark.serial
def test_rounding_matches_numpy_and_ml_dtypes():
    """shmtopo_reduce_round against numpy's float16 and ml_dtypes' bfloat16
    casts on every 1021st float32 bit pattern (NaNs, infinities, subnormals,
    halfway cases among them) and the edges: the same bits."""
    from shmtopo._native import ffi, lib

    patterns = np.arange(0, 2**32, 1021, dtype=np.uint64).astype(np.uint32)
    edges = np.array([0x477fe000, 0x477fefff, 0x477ff000, 0x477ff001, 0x38800000, 0x387fffff, 0x33000000,
                      0x33000001, 0x7f7fffff, 0x7f800000, 0x7f800001, 0x7fc00000, 0xff800001, 0x3f808000,
                      0x3f818000, 0x80000000, 0x00000001], np.uint32)
    acc = np.concatenate([patterns, edges, edges | 0x80000000]).view(np.float32)
    for dtype, code in [(np.dtype(np.float16), lib.SHMTOPO_FLOAT16)] + (
            [(BFLOAT16, lib.SHMTOPO_BFLOAT16)] if BFLOAT16 is not None else []):
        got = np.empty(acc.size, dtype)
        assert lib.shmtopo_reduce_round(ffi.from_buffer(got), ffi.from_buffer(acc), acc.size, code) == 0
        with np.errstate(over="ignore", invalid="ignore"):
            want = acc.astype(dtype)
        np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16), err_msg=str(dtype))
