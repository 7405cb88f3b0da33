"""shmtopo.accelerate: the wrapped communicator's upper-case collectives,
checked against the wrapped mpi4py communicator itself on the same inputs
(bitwise: the inputs are small integers, also in floating-point types, so
every order of reduction gives the same bits). Each test runs on one node
and on simulated nodes of 2 ranks (hierarchical paths from 3 ranks on)."""
import array
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from mpi4py import MPI

import shmtopo
from shmtopo.accel.comm import LOWER_CASE
from conftest import PythonCalls, run_accelerated_script, run_mpiexec
from values import culprits, same_bits, small_ints

WORLD = MPI.COMM_WORLD
HERE = Path(__file__).resolve().parent

SIGNED = ["SIGNED_CHAR", "SHORT", "INT", "LONG", "LONG_LONG", "INT8_T", "INT16_T", "INT32_T", "INT64_T"]
UNSIGNED = ["UNSIGNED_CHAR", "UNSIGNED_SHORT", "UNSIGNED", "UNSIGNED_LONG", "UNSIGNED_LONG_LONG",
            "UINT8_T", "UINT16_T", "UINT32_T", "UINT64_T"]
FLOATS = ["FLOAT", "DOUBLE"]
BYTES = ["BYTE", "CHAR"]  # moved, never reduced
REDUCIBLE = SIGNED + UNSIGNED + FLOATS
INT_OPS = ["SUM", "PROD", "MIN", "MAX", "BAND", "BOR", "BXOR"]
FLOAT_OPS = ["SUM", "PROD", "MIN", "MAX"]


def np_dtype(name):
    size = getattr(MPI, name).Get_size()
    kind = "f" if name in FLOATS else "u" if name.startswith("U") or name in BYTES else "i"
    return np.dtype(f"{kind}{size}")


def ops_for(name):
    return FLOAT_OPS if name in FLOATS else INT_OPS


def roots(n):
    return sorted({0, n // 2, n - 1})  # first, middle, last


def accelerated_only(acomm):
    """Every call so far ran in shared memory."""
    for name, (_, delegated) in acomm.shm_stats().items():
        assert delegated == 0, (name, acomm.shm_stats())


# ---- every accelerated type and op ------------------------------------------------

def test_allreduce_every_type_and_op(acomm):
    rank, n = WORLD.rank, WORLD.size
    calls = 0
    for name in REDUCIBLE:
        T, dt = getattr(MPI, name), np_dtype(name)
        for opname in ops_for(name):
            op = getattr(MPI, opname)
            x = small_ints(rank, 13, dt, salt=len(opname))
            got, want = np.full(13, 99, dt), np.full(13, 99, dt)
            acomm.Allreduce([x, T], [got, T], op=op)
            WORLD.Allreduce([x.copy(), T], [want, T], op=op)
            same_bits(got, want, f"{name} {opname}")
            calls += 1
    assert acomm.shm_stats() == {"Allreduce": (calls, 0)}


# Fortran's types, laid out as the C type of their size: reduced in shared
# memory (MPI's ops for each: no logical ops on Fortran integers); LOGICAL
# and CHARACTER moved only
FORTRAN = {"INTEGER": INT_OPS, "INTEGER1": INT_OPS, "INTEGER2": INT_OPS, "INTEGER4": INT_OPS, "INTEGER8": INT_OPS,
           "REAL": FLOAT_OPS, "REAL4": FLOAT_OPS, "REAL8": FLOAT_OPS, "DOUBLE_PRECISION": FLOAT_OPS,
           "COMPLEX": ["SUM", "PROD"], "COMPLEX8": ["SUM", "PROD"], "COMPLEX16": ["SUM", "PROD"],
           "DOUBLE_COMPLEX": ["SUM", "PROD"], "LOGICAL": [], "CHARACTER": []}


def test_fortran_types_in_shared_memory(acomm):
    rank, reductions, moves = WORLD.rank, 0, 0
    for name, ops in FORTRAN.items():
        T = getattr(MPI, name, MPI.DATATYPE_NULL)
        if T == MPI.DATATYPE_NULL:
            continue
        kind = "c" if "COMPLEX" in name else "f" if name.startswith(("REAL", "DOUBLE")) else \
            "u" if name in ("LOGICAL", "CHARACTER") else "i"
        dt = np.dtype(f"{kind}{T.Get_size()}")
        x = small_ints(rank, 13, np.int8, salt=T.Get_size()).astype(dt)
        if kind == "c":
            x = x + 1j * small_ints(rank, 13, np.int8, salt=1).astype(dt)
        for opname in ops:
            got, want = np.zeros(13, dt), np.zeros(13, dt)
            acomm.Allreduce([x, T], [got, T], op=getattr(MPI, opname))
            WORLD.Allreduce([x, T], [want, T], op=getattr(MPI, opname))
            same_bits(got, want, f"{name} {opname}")
            reductions += 1
        got = x.copy() if rank == 0 else np.zeros(13, dt)
        acomm.Bcast([got, T], root=0)
        want = x.copy() if rank == 0 else np.zeros(13, dt)
        WORLD.Bcast([want, T], root=0)
        same_bits(got, want, f"{name} Bcast")
        moves += 1
    assert acomm.shm_stats() == {"Allreduce": (reductions, 0), "Bcast": (moves, 0)}


def test_reduce_every_type_op_and_root(acomm):
    rank, n = WORLD.rank, WORLD.size
    for name in REDUCIBLE:
        T, dt = getattr(MPI, name), np_dtype(name)
        for opname in ops_for(name):
            op = getattr(MPI, opname)
            for root in roots(n):
                x = small_ints(rank, 9, dt, salt=root)
                got, want = np.full(9, 7, dt), np.full(9, 7, dt)
                acomm.Reduce([x, T], [got, T] if rank == root else None, op, root)
                WORLD.Reduce([x.copy(), T], [want, T] if rank == root else None, op, root)
                same_bits(got, want, f"{name} {opname} root {root}")  # untouched off the root
    accelerated_only(acomm)


def test_reduce_scatter_block_every_type_and_op(acomm):
    rank, n = WORLD.rank, WORLD.size
    for name in REDUCIBLE:
        T, dt = getattr(MPI, name), np_dtype(name)
        for opname in ops_for(name):
            op = getattr(MPI, opname)
            x = small_ints(rank, 5 * n, dt)
            got, want = np.empty(5, dt), np.empty(5, dt)
            acomm.Reduce_scatter_block([x, T], [got, T], op)
            WORLD.Reduce_scatter_block([x.copy(), T], [want, T], op)
            same_bits(got, want, f"{name} {opname}")
    accelerated_only(acomm)


def test_data_movement_every_type_and_root(acomm):
    rank, n = WORLD.rank, WORLD.size
    for name in REDUCIBLE + BYTES:
        T, dt = getattr(MPI, name), np_dtype(name)
        for root in roots(n):
            got = small_ints(rank, 11, dt, salt=root)
            want = got.copy()
            acomm.Bcast([got, T], root=root)
            WORLD.Bcast([want, T], root=root)
            same_bits(got, want, f"Bcast {name} root {root}")
        x = small_ints(rank, 6, dt)
        got, want = np.empty(6 * n, dt), np.empty(6 * n, dt)
        acomm.Allgather([x, T], [got, T])
        WORLD.Allgather([x.copy(), T], [want, T])
        same_bits(got, want, f"Allgather {name}")
        x = small_ints(rank, 3 * n, dt)
        got, want = np.empty(3 * n, dt), np.empty(3 * n, dt)
        acomm.Alltoall([x, T], [got, T])
        WORLD.Alltoall([x.copy(), T], [want, T])
        same_bits(got, want, f"Alltoall {name}")
    accelerated_only(acomm)


def test_barrier_is_accelerated(acomm):
    for _ in range(3):
        acomm.Barrier()
    assert acomm.shm_stats() == {"Barrier": (3, 0)}


# ---- every buffer form --------------------------------------------------------------

ARRAY_CODES = {np.dtype(c): c for c in "bBhHiIlLqQfd"}


# Each form: (buffer argument, a view of the elements it describes) for the
# values of a; counts are per block (of `blocks`), as MPI counts them.

def form_ndarray(a, T, blocks):
    return a, a


def form_memoryview(a, T, blocks):
    return memoryview(a), a


def form_typed(a, T, blocks):
    return [a, T], a


def form_counted(a, T, blocks):
    return [a, a.size // blocks, T], a


def form_tuple(a, T, blocks):
    return (a, a.size // blocks, T), a


def form_count_only(a, T, blocks):
    return [a, a.size // blocks], a


def form_type_char(a, T, blocks):
    return [a, a.dtype.char], a


def form_displaced(a, T, blocks):
    whole = np.zeros(a.size + 3, a.dtype)
    view = whole[3:]
    view[...] = a
    return [whole, (a.size // blocks, 3), T], view


def form_four_items(a, T, blocks):
    whole = np.zeros(a.size + 2, a.dtype)
    view = whole[2:]
    view[...] = a
    return [whole, a.size // blocks, 2, T], view


def form_array_array(a, T, blocks):
    arr = array.array(ARRAY_CODES[a.dtype], a.tolist())
    return arr, np.frombuffer(arr, a.dtype)


def form_bytearray(a, T, blocks):
    raw = bytearray(a.tobytes())
    return [raw, T], np.frombuffer(raw, a.dtype)


def form_fortran(a, T, blocks):
    grid = np.asfortranarray(a.reshape(2, -1, order="F"))  # sizes here are even
    return grid, grid.ravel(order="K")


def form_misaligned(a, T, blocks):
    raw = bytearray(a.nbytes + 1)
    view = np.frombuffer(memoryview(raw)[1:], a.dtype)  # one byte off: unaligned elements
    view[...] = a
    return [memoryview(raw)[1:], T], view


FORMS = [form_ndarray, form_memoryview, form_typed, form_counted, form_tuple, form_count_only, form_type_char,
         form_displaced, form_four_items, form_array_array, form_bytearray, form_fortran, form_misaligned]
FORM_TYPES = [("DOUBLE", np.float64), ("INT", np.int32), ("LONG", np.int64), ("UNSIGNED_CHAR", np.uint8)]


def spec(form, a, T, blocks=1):
    return form(a.copy(), T, blocks)


@pytest.mark.parametrize("form", FORMS, ids=lambda f: f.__name__[5:])
def test_buffer_forms(acomm, form):
    rank, n = WORLD.rank, WORLD.size
    for name, dt in FORM_TYPES:
        T = getattr(MPI, name)
        dt = np.dtype(dt)
        if form is form_bytearray and dt != np.uint8:
            continue
        # Allreduce
        s, _ = spec(form, small_ints(rank, 12, dt), T)
        r, got = spec(form, np.zeros(12, dt), T)
        acomm.Allreduce(s, r, MPI.MAX)
        want = np.zeros(12, dt)
        WORLD.Allreduce(small_ints(rank, 12, dt), want, MPI.MAX)
        same_bits(got, want, f"Allreduce {form.__name__} {name}")
        # Reduce, every root
        for root in roots(n):
            s, _ = spec(form, small_ints(rank, 12, dt, root), T)
            r, got = spec(form, np.zeros(12, dt), T)
            acomm.Reduce(s, r if rank == root else None, MPI.SUM, root)
            want = np.zeros(12, dt)
            WORLD.Reduce(small_ints(rank, 12, dt, root), want, MPI.SUM, root)
            same_bits(got, want, f"Reduce {form.__name__} {name} root {root}")
        # Bcast, every root
        for root in roots(n):
            b, got = spec(form, small_ints(rank, 12, dt, 5 + root), T)
            acomm.Bcast(b, root)
            same_bits(got, small_ints(root, 12, dt, 5 + root), f"Bcast {form.__name__} {name} root {root}")
        # Allgather, Alltoall, Reduce_scatter_block
        s, _ = spec(form, small_ints(rank, 4, dt), T)
        r, got = spec(form, np.zeros(4 * n, dt), T, n)
        acomm.Allgather(s, r)
        same_bits(got, np.concatenate([small_ints(p, 4, dt) for p in range(n)]), f"Allgather {form.__name__} {name}")
        s, _ = spec(form, small_ints(rank, 2 * n, dt), T, n)
        r, got = spec(form, np.zeros(2 * n, dt), T, n)
        acomm.Alltoall(s, r)
        want = np.zeros(2 * n, dt)
        WORLD.Alltoall(small_ints(rank, 2 * n, dt), want)
        same_bits(got, want, f"Alltoall {form.__name__} {name}")
        s, _ = spec(form, small_ints(rank, 2 * n, dt), T, n)
        r, got = spec(form, np.zeros(2, dt), T)
        acomm.Reduce_scatter_block(s, r, MPI.BOR if dt.kind != "f" else MPI.SUM)
        want = np.zeros(2, dt)
        WORLD.Reduce_scatter_block(small_ints(rank, 2 * n, dt), want, MPI.BOR if dt.kind != "f" else MPI.SUM)
        same_bits(got, want, f"Reduce_scatter_block {form.__name__} {name}")
    accelerated_only(acomm)


def test_counts_shorter_than_the_buffer(acomm):
    """[buf, count, T]: only the first count entries; the rest is left as it is."""
    rank, n = WORLD.rank, WORLD.size
    x = small_ints(rank, 10, np.int64)
    got, want = np.full(10, -5, np.int64), np.full(10, -5, np.int64)
    acomm.Allreduce([x, 6, MPI.LONG], [got, 6, MPI.LONG])
    WORLD.Allreduce([x, 6, MPI.LONG], [want, 6, MPI.LONG])
    same_bits(got, want)
    got, want = np.full(3 * n + 2, -5, np.int64), np.full(3 * n + 2, -5, np.int64)
    acomm.Allgather([x, 3, MPI.LONG], [got, 3, MPI.LONG])
    WORLD.Allgather([x, 3, MPI.LONG], [want, 3, MPI.LONG])
    same_bits(got, want)
    b = x.copy()
    acomm.Bcast([b, 4, MPI.LONG], root=n - 1)
    same_bits(b[:4], small_ints(n - 1, 10, np.int64)[:4])
    same_bits(b[4:], x[4:])
    accelerated_only(acomm)


# ---- IN_PLACE and other aliasing ---------------------------------------------------------

def test_in_place(acomm):
    rank, n = WORLD.rank, WORLD.size
    for name in ("DOUBLE", "INT", "UNSIGNED_SHORT"):
        T, dt = getattr(MPI, name), np_dtype(name)
        got, want = small_ints(rank, 10, dt), small_ints(rank, 10, dt)
        acomm.Allreduce(MPI.IN_PLACE, [got, T], MPI.PROD)
        WORLD.Allreduce(MPI.IN_PLACE, [want, T], MPI.PROD)
        same_bits(got, want, f"Allreduce {name}")
        for root in roots(n):
            got, want = small_ints(rank, 10, dt, root), small_ints(rank, 10, dt, root)
            if rank == root:
                acomm.Reduce(MPI.IN_PLACE, [got, T], MPI.MIN, root)
                WORLD.Reduce(MPI.IN_PLACE, [want, T], MPI.MIN, root)
            else:
                acomm.Reduce([got, T], None, MPI.MIN, root)
                WORLD.Reduce([want, T], None, MPI.MIN, root)
            same_bits(got, want, f"Reduce {name} root {root}")
        got = np.zeros(3 * n, dt)
        got[3 * rank:3 * rank + 3] = small_ints(rank, 3, dt)
        want = got.copy()
        acomm.Allgather(MPI.IN_PLACE, [got, T])
        WORLD.Allgather(MPI.IN_PLACE, [want, T])
        same_bits(got, want, f"Allgather {name}")
        got, want = small_ints(rank, 2 * n, dt), small_ints(rank, 2 * n, dt)
        acomm.Alltoall(MPI.IN_PLACE, [got, T])
        WORLD.Alltoall([want.copy(), T], [want, T])  # the blocks of a call with a separate send buffer
        same_bits(got, want, f"Alltoall {name}")
        got, want = small_ints(rank, 4 * n, dt), small_ints(rank, 4 * n, dt)
        acomm.Reduce_scatter_block(MPI.IN_PLACE, [got, T], MPI.SUM)
        WORLD.Reduce_scatter_block(MPI.IN_PLACE, [want, T], MPI.SUM)
        same_bits(got[:4], want[:4], f"Reduce_scatter_block {name}")
    accelerated_only(acomm)


def test_the_same_buffer_twice_is_in_place(acomm):
    """The same buffer as input and result is taken as MPI_IN_PLACE (as newer
    mpi4py versions do; MPI itself refuses aliased buffers)."""
    rank, n = WORLD.rank, WORLD.size
    got, want = small_ints(rank, 8, np.int32), small_ints(rank, 8, np.int32)
    acomm.Allreduce(got, got)
    WORLD.Allreduce(MPI.IN_PLACE, want)
    same_bits(got, want)
    got, want = small_ints(rank, 8, np.int32), small_ints(rank, 8, np.int32)
    acomm.Reduce(got, got, MPI.MAX, root=n - 1)
    WORLD.Reduce(MPI.IN_PLACE if rank == n - 1 else want, want, MPI.MAX, root=n - 1)
    same_bits(got, want)
    got, want = small_ints(rank, 2 * n, np.float64), small_ints(rank, 2 * n, np.float64)
    acomm.Reduce_scatter_block(got, [got, 2, MPI.DOUBLE])
    WORLD.Reduce_scatter_block(MPI.IN_PLACE, [want, 2, MPI.DOUBLE])
    same_bits(got[:2], want[:2])
    got, want = small_ints(rank, 3 * n, np.int16), small_ints(rank, 3 * n, np.int16)
    acomm.Alltoall(got, got)
    WORLD.Alltoall(want.copy(), want)
    same_bits(got, want)
    accelerated_only(acomm)


def test_partial_overlap_raises_everywhere(acomm):
    x = np.arange(9.0)
    with pytest.raises(shmtopo.ShmtopoValueError, match="overlaps"):
        acomm.Allreduce(x[1:], x[:-1])  # 8 elements each, one apart
    out = np.zeros(3)
    acomm.Allreduce(np.ones(3), out)
    same_bits(out, np.full(3, float(WORLD.size)))


# ---- sizes and real floating-point data ---------------------------------------------------

@pytest.mark.parametrize("count", [0, 1, 7, 256 * 1024 // 8 + 1, 3 * 2**20 // 8 + 5])
def test_sizes(acomm, count):
    rank, n = WORLD.rank, WORLD.size
    x = small_ints(rank, count, np.float64)
    got, want = np.empty(count), np.empty(count)
    acomm.Allreduce(x, got)
    WORLD.Allreduce(x, want)
    same_bits(got, want)
    b = small_ints(rank, count, np.int32)
    acomm.Bcast(b, root=n - 1)
    same_bits(b, small_ints(n - 1, count, np.int32))
    got = np.empty(count * n, np.uint8)
    acomm.Allgather(small_ints(rank, count, np.uint8), got)
    same_bits(got, np.concatenate([small_ints(p, count, np.uint8) for p in range(n)]))
    accelerated_only(acomm)


def test_float_results_are_the_same_on_every_rank(acomm):
    """Random floats: MPI may sum in another order (so: close), while
    shmtopo gives every rank the same bits."""
    rank = WORLD.rank
    x = np.random.default_rng(rank).random(1001) * 2 - 1
    got, want = np.empty(1001), np.empty(1001)
    acomm.Allreduce(x, got)
    WORLD.Allreduce(x, want)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    everyone = WORLD.allgather(got.tobytes())
    assert len(set(everyone)) == 1


# ---- delegation ----------------------------------------------------------------------------

def test_derived_datatype_is_delegated(acomm):
    rank, n = WORLD.rank, WORLD.size
    pair = MPI.DOUBLE.Create_contiguous(2).Commit()
    try:
        b = small_ints(rank, 6, np.float64)
        acomm.Bcast([b, 3, pair], root=n - 1)
        same_bits(b, small_ints(n - 1, 6, np.float64))
        got, want = np.zeros(4 * n), np.zeros(4 * n)
        acomm.Allgather([small_ints(rank, 4, np.float64), 2, pair], [got, 2, pair])
        WORLD.Allgather([small_ints(rank, 4, np.float64), 2, pair], [want, 2, pair])
        same_bits(got, want)
        x = small_ints(rank, 8, np.float64)
        got, want = np.zeros(8), np.zeros(8)
        try:
            WORLD.Allreduce([x, 4, pair], [want, 4, pair], MPI.SUM)
        except MPI.Exception as exc:  # Open MPI: no predefined op on a derived type; then neither here
            with pytest.raises(MPI.Exception) as info:
                acomm.Allreduce([x, 4, pair], [got, 4, pair], MPI.SUM)
            assert info.value.Get_error_class() == exc.Get_error_class()
            reduced = 0
        else:
            acomm.Allreduce([x, 4, pair], [got, 4, pair], MPI.SUM)
            same_bits(got, want)
            reduced = 1
        stats = {"Bcast": (0, 1), "Allgather": (0, 1)}
        assert acomm.shm_stats() == (dict(stats, Allreduce=(0, 1)) if reduced else stats)
    finally:
        pair.Free()


def test_derived_datatype_with_a_user_op_is_delegated(acomm):
    def add_pairs(inbuf, inoutbuf, datatype):
        a, b = np.frombuffer(inbuf, np.float64), np.frombuffer(inoutbuf, np.float64)
        b += a

    pair = MPI.DOUBLE.Create_contiguous(2).Commit()
    op = MPI.Op.Create(add_pairs, commute=True)
    try:
        x = small_ints(WORLD.rank, 8, np.float64)
        got, want = np.zeros(8), np.zeros(8)
        acomm.Allreduce([x, 4, pair], [got, 4, pair], op)
        WORLD.Allreduce([x, 4, pair], [want, 4, pair], op)
        same_bits(got, want)
        assert acomm.shm_stats() == {"Allreduce": (0, 1)}
    finally:
        op.Free()
        pair.Free()


def test_user_op_is_delegated(acomm):
    def absmax(inbuf, inoutbuf, datatype):
        a, b = np.frombuffer(inbuf, np.float64), np.frombuffer(inoutbuf, np.float64)
        np.maximum(np.abs(a), np.abs(b), out=b)

    op = MPI.Op.Create(absmax, commute=True)
    try:
        rank = WORLD.rank
        x = small_ints(rank, 5, np.float64) - 2
        got, want = np.zeros(5), np.zeros(5)
        acomm.Allreduce(x, got, op)
        WORLD.Allreduce(x, want, op)
        same_bits(got, want)
        got, want = np.zeros(5), np.zeros(5)
        acomm.Reduce(x, got, op, root=0)
        WORLD.Reduce(x, want, op, root=0)
        same_bits(got, want)
        assert acomm.shm_stats() == {"Allreduce": (0, 1), "Reduce": (0, 1)}
    finally:
        op.Free()


def test_a_user_ops_later_calls_go_to_mpi_at_once(acomm, monkeypatch):
    """An op the program made sends its calls to MPI at once; once seen (C
    then skips reading the buffers), a call of it runs nothing of shmtopo's
    in Python, its results are MPI's and so are its errors (a read-only
    receive buffer: mpi4py's BufferError); strict mode refuses it on every rank."""
    def absmax(inbuf, inoutbuf, datatype):
        a, b = np.frombuffer(inbuf, np.float64), np.frombuffer(inoutbuf, np.float64)
        np.maximum(np.abs(a), np.abs(b), out=b)

    op = MPI.Op.Create(absmax, commute=True)
    try:
        x = small_ints(WORLD.rank, 5, np.float64) - 2
        got, want = np.zeros(5), np.zeros(5)
        acomm.Allreduce(x, got, op)
        with PythonCalls() as python_calls:
            acomm.Allreduce(x, got, op)
        assert set(python_calls) <= {"absmax"}, python_calls
        WORLD.Allreduce(x, want, op)
        same_bits(got, want)
        with pytest.raises(BufferError):
            acomm.Allreduce(x, np.frombuffer(bytes(40)), op)
        assert acomm.shm_stats() == {"Allreduce": (0, 2)}
        monkeypatch.setenv("SHMTOPO_ACCEL_STRICT", "1")
        strict = shmtopo.accelerate(WORLD, timeout=60)
        try:
            with pytest.raises(shmtopo.ShmtopoValueError, match="user-defined op"):
                strict.Allreduce(x, got, op)
        finally:
            strict.shm_free()
    finally:
        op.Free()


def test_types_and_ops_not_accelerated_are_delegated(acomm):
    rank, n = WORLD.rank, WORLD.size
    refused = 0
    # (not LOR on floats: MPICH aborts the process on it)
    cases = [(np.ones(4, np.longdouble), MPI.SUM), (small_ints(rank, 4, np.float64), MPI.BAND),
             (np.ones(4, bool), MPI.SUM),
             ([small_ints(rank, 4, np.uint8), MPI.BYTE], MPI.BOR), ([small_ints(rank, 4, np.int8), MPI.CHAR], MPI.MAX)]
    for x, op in cases:
        a = x[0] if isinstance(x, list) else x
        got, want = np.zeros_like(a), np.zeros_like(a)
        spec_got = [got, x[1]] if isinstance(x, list) else got
        spec_want = [want, x[1]] if isinstance(x, list) else want
        try:
            WORLD.Allreduce(x, spec_want, op)
        except MPI.Exception:  # MPI refuses (float BAND): so must the accelerated comm
            with pytest.raises(MPI.Exception):
                acomm.Allreduce(x, spec_got, op)
            refused += 1
            continue
        acomm.Allreduce(x, spec_got, op)
        same_bits(got, want, f"{a.dtype} {op}")
    # a call MPI refused is no completed call
    assert acomm.shm_stats()["Allreduce"] == (0, len(cases) - refused)


def accelerates(acomm, T, opname):
    """Does this build reduce MPI type T with op opname in shared memory?"""
    t = acomm._tables
    known = t.types.get(t.handle(T))
    return known is not None and opname.lower() in known.ops


def test_bool_complex_logical_and_pair_types(acomm):
    """C_BOOL, the complex types, logical ops on integers and MAXLOC/MINLOC
    on the pair types: MPI's results, in shared memory where the core has them."""
    rank, n = WORLD.rank, WORLD.size
    rng = np.random.default_rng(rank)
    cases = [(rng.integers(0, 2, 9).astype(bool), MPI.C_BOOL, ["LAND", "LOR", "LXOR"]),
             (small_ints(rank, 9, np.int32), MPI.INT, ["LAND", "LOR", "LXOR"]),
             (small_ints(rank, 9, np.uint16), MPI.UNSIGNED_SHORT, ["LAND", "LXOR"]),
             # no zeros: a product in another order could give the other signed zero
             ((np.abs(small_ints(rank, 9, np.int16)) + 1).astype(np.complex64) * (1 + 1j), MPI.C_FLOAT_COMPLEX,
              ["SUM", "PROD"]),
             ((np.abs(small_ints(rank, 9, np.int16)) + 1).astype(np.complex128) * (1 - 2j), MPI.C_DOUBLE_COMPLEX,
              ["SUM", "PROD"])]
    pairs = [("DOUBLE_INT", np.float64), ("FLOAT_INT", np.float32), ("LONG_INT", np.dtype("l")),
             ("INT_INT", np.intc), ("SHORT_INT", np.short)]  # INT_INT: MPI_2INT
    for name, value in pairs:
        T = getattr(MPI, name)
        layout = np.dtype([("v", value), ("i", np.intc)], align=True)  # C's struct {value; int index;}
        assert layout.itemsize == T.Get_extent()[1], name
        x = np.zeros(9, layout)
        x["v"] = small_ints(rank, 9, value)  # ties: the lower index wins, in MPI as in shmtopo
        x["i"] = rank * 10 + np.arange(9)
        cases.append((x, T, ["MAXLOC", "MINLOC"]))
    expected = [0, 0]
    for x, T, opnames in cases:
        for opname in opnames:
            op = getattr(MPI, opname)
            got, want = np.zeros_like(x), np.zeros_like(x)
            acomm.Allreduce([x, T], [got, T], op)
            WORLD.Allreduce([x, T], [want, T], op)
            same_bits(got, want, f"{T.Get_name()} {opname}")
            expected[0 if accelerates(acomm, T, opname) else 1] += 1
            for root in (0, n - 1):
                got, want = np.zeros_like(x), np.zeros_like(x)
                acomm.Reduce([x, T], [got, T], op, root)
                WORLD.Reduce([x, T], [want, T], op, root)
                same_bits(got, want, f"Reduce {T.Get_name()} {opname}")
        b = x.copy()
        acomm.Bcast([b, T], root=n - 1)
        WORLD.Bcast([x, T], root=n - 1)
        same_bits(b, x)
    assert acomm.shm_stats()["Allreduce"] == tuple(expected)
    if "land" in shmtopo._types.OPS:  # this build has the types: none of them went to MPI
        assert expected[1] == 0, expected


# ---- every rank takes the same path ----------------------------------------------------------


def mixed_calls(acomm, odd, pair):
    """Collectives with the culprit (odd) describing its buffer with a
    derived datatype (2 doubles) where the others pass doubles: the same
    type signature, so legal MPI (the reductions are left out: MPI promises
    predefined ops on predefined datatypes only). Each returns its result."""
    n = WORLD.size
    x = np.arange(4.0) + 10 * WORLD.rank

    def buf(a, blocks=1):  # 4 doubles per block either way
        return [a, 2, pair] if odd else [a, MPI.DOUBLE]

    def call(run, out):
        run(out)
        return out

    return {
        "Bcast": lambda: call(lambda o: acomm.Bcast(buf(o), root=n - 1), x.copy()),
        "Allgather": lambda: call(lambda o: acomm.Allgather(buf(x), buf(o)), np.zeros(4 * n)),
        "Alltoall": lambda: call(lambda o: acomm.Alltoall(buf(np.tile(x, n)), buf(o)), np.zeros(4 * n)),
        "Gather": lambda: call(lambda o: acomm.Gather(buf(x), buf(o), root=0), np.zeros(4 * n)),
    }


def test_one_rank_delegating_hands_the_call_to_mpi_on_every_rank(acomm):
    """Legal MPI is never refused: where one rank's arguments go to MPI and
    the others' would run in shared memory, every rank hands the call to
    MPI, and gets MPI's result (the plain ranks' calls count as delegated)."""
    n = WORLD.size
    if n == 1:
        pytest.skip("one rank takes one path")
    pair = MPI.DOUBLE.Create_contiguous(2).Commit()
    want = {name: run() for name, run in mixed_calls(WORLD, False, pair).items()}
    try:
        for culprit in culprits(n):
            before = acomm.shm_stats()
            for name, run in mixed_calls(acomm, WORLD.rank == culprit, pair).items():
                if name == "Gather" and WORLD.rank != 0:
                    run()
                else:
                    same_bits(run(), want[name], name)
            after = acomm.shm_stats()
            for name in want:
                assert after[name][1] == before.get(name, (0, 0))[1] + 1, (name, before, after)
            # and the comm goes on in shared memory
            out = np.zeros(2)
            acomm.Allreduce(np.ones(2), out)
            same_bits(out, np.full(2, float(n)))
    finally:
        pair.Free()


def test_different_ops_raise_on_every_rank(acomm):
    """Ranks that pass different ops (MPI calls it erroneous) raise on every
    rank, where the ops are known: also where another rank's derived
    datatype makes it hand the call to MPI. (A rank with an op the program
    made hands the call to MPI without asking the others, as every rank of a
    correct program does: MPI requires the same op everywhere.)"""
    n = WORLD.size
    if n == 1:
        pytest.skip("one rank takes one path")
    last = WORLD.rank == n - 1
    with pytest.raises(shmtopo.ShmtopoValueError, match="disagree"):
        acomm.Allreduce(np.ones(4), np.zeros(4), MPI.MAX if last else MPI.SUM)
    pair = MPI.DOUBLE.Create_contiguous(2).Commit()
    try:
        for call in (acomm.Allreduce, acomm.Scan):
            with pytest.raises(shmtopo.ShmtopoValueError, match="disagree.*delegated to MPI"):
                if last:
                    call([np.ones(4), 2, pair], [np.zeros(4), 2, pair], MPI.MAX)
                else:
                    call(np.ones(4), np.zeros(4), MPI.SUM)
    finally:
        pair.Free()
    out = np.zeros(2)
    acomm.Allreduce(np.ones(2), out)
    same_bits(out, np.full(2, float(n)))


# ---- bad arguments raise on every rank ----------------------------------------------------

def bad_calls(acomm, culprit):
    n = WORLD.size
    x, out, ints = np.ones(4), np.zeros(4), np.ones(4, np.int64)
    readonly = np.zeros(4)
    readonly.flags.writeable = False
    return [
        ("root", lambda: acomm.Bcast(x.copy(), root=n if culprit else 0)),
        ("root", lambda: acomm.Reduce(x, out, MPI.SUM, root=-1 if culprit else 0)),
        ("integer", lambda: acomm.Bcast(x.copy(), root="0" if culprit else 0)),
        ("read-only", lambda: acomm.Allreduce(x, readonly if culprit else out)),
        ("contiguous", lambda: acomm.Allreduce(np.ones(8)[::2] if culprit else x, out)),
        ("cannot map", lambda: acomm.Allreduce(np.ones(4, [("f", "f8")]) if culprit else x, out)),  # 'T{d:f:}'
        ("byte order", lambda: acomm.Allreduce(np.ones(4, ">f8") if culprit else x, out)),
        ("MPI.Op", lambda: acomm.Allreduce(x, out, "sum" if culprit else MPI.SUM)),
        ("mismatch", lambda: acomm.Allreduce(np.ones(3) if culprit else x, out)),
        ("mismatch", lambda: acomm.Allreduce([ints, MPI.INT64_T if culprit else MPI.LONG], [ints * 0, MPI.LONG])),
        ("do not fit", lambda: acomm.Allreduce([x, 9, MPI.DOUBLE] if culprit else x, [out, 9 if culprit else 4,
                                                                                      MPI.DOUBLE])),
        ("IN_PLACE", lambda: acomm.Bcast(MPI.IN_PLACE if culprit else x.copy())),
        # the forms the fast entry reads, past their buffer on one rank
        ("do not fit", lambda: acomm.Bcast([bytearray(32), 33 if culprit else 32, MPI.BYTE])),
        ("do not fit", lambda: acomm.Gather([bytearray(32), (8, 5 if culprit else 0), MPI.INT],
                                        [bytearray(32 * n), 8, MPI.INT], root=n - 1)),
        ("beyond", lambda: acomm.Alltoallv([bytearray(8 * n), ([8] * n, [0] * (n - 1) + [8 * n - 7 if culprit else 0]),
                                            MPI.BYTE], [bytearray(8 * n), [8] * n, [8 * p for p in range(n)],
                                                        MPI.BYTE])),
        ("blocks", lambda: acomm.Alltoall(np.ones(4 * n + 1) if culprit and n > 1 else np.ones(4 * n),
                                          np.zeros(4 * n + 1) if culprit and n > 1 else np.zeros(4 * n))),
        ("expecting", lambda: acomm.Allgather(x, [np.zeros(4 * n), 1, 2, 3, 4] if culprit else np.zeros(4 * n))),
    ]


def test_bad_arguments_raise_on_every_rank(acomm):
    n = WORLD.size
    for culprit in culprits(n):
        for i, (match, _) in enumerate(bad_calls(acomm, False)):
            call = bad_calls(acomm, WORLD.rank == culprit)[i][1]
            if match == "blocks" and n == 1:
                continue
            with pytest.raises(shmtopo.ShmtopoValueError, match=match) as info:
                call()
            assert info.value.rank == culprit, str(info.value)
            assert f"rank {culprit}" in str(info.value)
            out = np.zeros(2)
            acomm.Allreduce(np.ones(2), out)
            same_bits(out, np.full(2, float(n)))


def test_bad_arguments_raise_what_mpi4py_raises(acomm):
    """Every rank passing the same bad arguments: mpi4py (or MPI) raises on
    each; the accelerated comm's ShmtopoArgumentError is also of that class
    (RuntimeError, the base of MPI.Exception, for MPI's own)."""
    n = WORLD.size
    x, out = np.ones(4), np.zeros(4)
    readonly = np.zeros(4)
    readonly.flags.writeable = False
    calls = {
        "root type": lambda c: c.Bcast(x.copy(), root="0"),
        "root range": lambda c: c.Bcast(x.copy(), root=n),
        "read-only": lambda c: c.Allreduce(x, readonly),
        "not contiguous": lambda c: c.Allreduce(np.ones(8)[::2], out),
        "byte order": lambda c: c.Allreduce(np.ones(4, ">f8"), out),
        "op type": lambda c: c.Allreduce(x, out, "sum"),
        "counts": lambda c: c.Allreduce(np.ones(3), out),
        "items": lambda c: c.Allgather(x, [np.zeros(4 * n), 1, 2, 3, 4]),
        "not a buffer": lambda c: c.Allreduce(x, 42),
    }
    for what, call in calls.items():
        with pytest.raises(Exception) as mpi4py_raised:
            call(WORLD)
        cls = RuntimeError if isinstance(mpi4py_raised.value, MPI.Exception) else type(mpi4py_raised.value)
        with pytest.raises(cls) as info:
            call(acomm)
        assert isinstance(info.value, shmtopo.ShmtopoArgumentError), what
    out = np.zeros(2)
    acomm.Allreduce(np.ones(2), out)
    same_bits(out, np.full(2, float(n)))


def test_in_place_off_the_root_of_reduce_raises(acomm):
    n = WORLD.size
    if n == 1:
        pytest.skip("one rank is the root")
    with pytest.raises(shmtopo.ShmtopoValueError, match="IN_PLACE is valid at the root"):
        if WORLD.rank == n - 1:
            acomm.Reduce(np.ones(2), np.zeros(2), MPI.SUM, n - 1)
        else:
            acomm.Reduce(MPI.IN_PLACE, None, MPI.SUM, n - 1)


# ---- strict mode ---------------------------------------------------------------------------

def test_strict_mode(monkeypatch):
    monkeypatch.setenv("SHMTOPO_ACCEL_STRICT", "1")
    a = shmtopo.accelerate(WORLD, timeout=60)
    try:
        assert a.strict
        out = np.zeros(3)
        a.Allreduce(np.ones(3), out)
        pair = MPI.DOUBLE.Create_contiguous(2).Commit()
        try:
            with pytest.raises(shmtopo.ShmtopoValueError, match="SHMTOPO_ACCEL_STRICT=1") as info:
                a.Allreduce([np.ones(4), 2, pair], [np.zeros(4), 2, pair])
            assert "derived datatype" in str(info.value)
        finally:
            pair.Free()
        n = WORLD.size
        spec = [[1] * n, [8 * r for r in range(n)], [MPI.DOUBLE] * n]
        with pytest.raises(shmtopo.ShmtopoValueError, match="SHMTOPO_ACCEL_STRICT=1"):
            a.Alltoallw([MPI.BOTTOM, *spec], [np.zeros(n), *spec])  # MPI.BOTTOM: MPI's
        if WORLD.size > 1:  # one rank would delegate, in strict mode: its reason, everywhere
            with pytest.raises(shmtopo.ShmtopoValueError, match=f"rank {WORLD.size - 1}: .*land on float64"):
                a.Allreduce(np.ones(2), np.zeros(2), MPI.LAND if WORLD.rank == WORLD.size - 1 else MPI.SUM)
        a.Allreduce(np.ones(3), out)
        same_bits(out, np.full(3, float(WORLD.size)))
        assert a.shm_stats() == {"Allreduce": (2, 0)}
    finally:
        a.shm_free()


def test_strict_values(monkeypatch):
    monkeypatch.setenv("SHMTOPO_ACCEL_STRICT", "yes")
    with pytest.raises(shmtopo.ShmtopoValueError, match="expected 0 or 1"):
        shmtopo.accelerate(WORLD)
    monkeypatch.setenv("SHMTOPO_ACCEL_STRICT", "0")
    a = shmtopo.accelerate(WORLD)
    assert not a.strict
    a.shm_free()
    if WORLD.size > 1:
        monkeypatch.setenv("SHMTOPO_ACCEL_STRICT", "1" if WORLD.rank == 0 else "0")
        with pytest.raises(shmtopo.ShmtopoValueError, match="same on every rank"):
            shmtopo.accelerate(WORLD)


# ---- an mpi4py communicator of its own class ---------------------------------------------

def test_an_accelerated_comm_is_an_mpi4py_communicator(acomm):
    """Of the comm's own mpi4py class, on the same handle: mpi4py's functions
    take it, and what the drop-in does not define is mpi4py's."""
    rank, n = WORLD.rank, WORLD.size
    assert isinstance(acomm, MPI.Intracomm) and isinstance(acomm, shmtopo.AcceleratedComm)
    assert type(acomm).__name__ == "AcceleratedIntracomm" and acomm.handle == WORLD.handle
    assert acomm.Get_rank() == rank and acomm.Get_size() == n and acomm.rank == rank
    assert acomm == WORLD and not (acomm != WORLD) and acomm.mpi_comm is WORLD and bool(acomm)
    assert MPI.Comm.Compare(acomm, WORLD) == MPI.IDENT
    assert isinstance(acomm.shm_comm, shmtopo.Comm) and acomm.shm_comm.world_size == n
    assert acomm.bcast({"from": rank}, root=n - 1) == {"from": n - 1}  # lower case: objects, in shared memory
    assert acomm.allreduce(rank) == n * (n - 1) // 2
    if n > 1:
        token = np.zeros(1, np.int64)
        acomm.Sendrecv(np.array([rank]), dest=(rank + 1) % n, recvbuf=token, source=(rank - 1) % n)
        assert token[0] == (rank - 1) % n
    # mpi4py's own functions take it where they take a communicator
    node = acomm.Split_type(MPI.COMM_TYPE_SHARED)
    win = MPI.Win.Allocate_shared(8, 1, comm=node)
    assert win.Get_group().Get_size() == node.Get_size()
    win.Free()
    assert "Allreduce" in dir(acomm) and "Send" in dir(acomm)
    with pytest.raises(AttributeError):
        acomm.no_such_method
    assert not hasattr(acomm, "Sub")  # a Cartcomm's only
    node.Free()
    assert acomm.shm_stats() == {"bcast": (1, 0), "allreduce": (1, 0)}  # the only collectives here


def test_constructors_return_accelerated_comms_of_their_class(acomm):
    rank, n = WORLD.rank, WORLD.size
    sub = acomm.Split(rank % 2, rank)
    assert isinstance(sub, shmtopo.AcceleratedComm) and isinstance(sub, MPI.Intracomm)
    assert not isinstance(sub, MPI.Topocomm)
    assert sub.Get_size() == (n + 1 - rank % 2) // 2
    sub.Free()
    assert sub == MPI.COMM_NULL
    cart = acomm.Create_cart([n], periods=[True])
    assert isinstance(cart, MPI.Cartcomm) and isinstance(cart, shmtopo.AcceleratedComm)
    assert cart.Get_topo() == ([n], [1], [rank]) and cart.Shift(0, 1) == ((rank - 1) % n, (rank + 1) % n)
    line = cart.Sub([True])
    dup = cart.Dup()
    for c in (line, dup):
        assert isinstance(c, MPI.Cartcomm) and isinstance(c, shmtopo.AcceleratedComm)
        out = np.zeros(2)
        c.Allreduce(np.ones(2), out)
        same_bits(out, np.full(2, float(n)))
        assert c.shm_stats() == {"Allreduce": (1, 0)}
        c.Free()
    graph = acomm.Create_dist_graph_adjacent([(rank - 1) % n], [(rank + 1) % n])
    assert isinstance(graph, MPI.Distgraphcomm) and isinstance(graph, shmtopo.AcceleratedComm)
    graph.Free()
    plain, request = acomm.Idup()  # usable only after the request: a plain comm, to accelerate then
    request.Wait()
    assert type(plain) is MPI.Intracomm
    plain.Free()
    cart.Free()


def test_free_frees_both():
    """Free() frees the shmtopo comm and the MPI handle: the accelerated
    comm is COMM_NULL after it, as an mpi4py comm is."""
    dup = WORLD.Dup()
    a = shmtopo.accelerate(dup)
    shm = a.shm_comm
    a.Free()
    assert shm.freed and a == MPI.COMM_NULL
    with pytest.raises(shmtopo.FreedError):
        a.shm_comm


def test_after_shm_free_everything_goes_to_mpi():
    a = shmtopo.accelerate(WORLD)
    a.shm_free()
    a.shm_free()  # twice: nothing
    out = np.zeros(2)
    a.Allreduce(np.ones(2), out)
    a.Barrier()
    same_bits(out, np.full(2, float(WORLD.size)))
    assert a.shm_stats() == {"Allreduce": (0, 1), "Barrier": (0, 1)}


def test_an_accelerated_comm_can_be_accelerated_again():
    a = shmtopo.accelerate(WORLD)
    b = shmtopo.accelerate(a)
    assert b.mpi_comm is WORLD and b.shm_comm is not a.shm_comm
    b.shm_free()
    a.shm_free()


def test_exit_without_free(tmp_path):
    """A script that never frees its accelerated comm exits cleanly: each rank
    drops it at exit, with no warning."""
    proc = run_accelerated_script(tmp_path, "assert acomm.shm_stats() == {'Allreduce': (1, 0)}\n"
                                  "print('done', out[0])\n", "-W", "always::ResourceWarning")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("done") == 2 and proc.stdout.count("2.0") == 2, proc.stdout
    assert "never freed" not in proc.stderr, proc.stderr


def test_program_that_finalizes_mpi_itself_exits_cleanly(tmp_path):
    """The program calls MPI.Finalize() with accelerated comms still alive
    (COMM_WORLD's and a Dup): they drop their shmtopo comms as MPI_Finalize
    starts, and nothing calls into MPI after it (Open MPI aborts the job
    when a communicator is freed after MPI_Finalize)."""
    proc = run_accelerated_script(tmp_path, "dup = acomm.Dup()\ndup.Allreduce(np.ones(2), out)\n"
                                  "MPI.Finalize()\nprint('finalized', out[0], flush=True)\n")
    # (after MPI_Finalize mpiexec may interleave the two ranks' lines)
    assert proc.returncode == 0 and proc.stdout.count("finalized") == proc.stdout.count("2.0") == 2, \
        proc.stdout + proc.stderr
    assert "MPI_FINALIZE" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr


def test_comm_freed_behind_its_back_drops_its_shmtopo_comm():
    """acomm.mpi_comm.Free() frees the handle the accelerated comm shares:
    MPI tells the accelerated comm (through an attribute on the
    communicator), which drops its shmtopo comm, so that nothing is left
    in shared memory. (Calling the accelerated comm afterwards is using a
    freed handle, as with any copy of an mpi4py communicator.)"""
    acomm = shmtopo.accelerate(WORLD.Dup())
    x, out = np.ones(3), np.zeros(3)
    acomm.Allreduce(x, out)
    acomm.mpi_comm.Free()
    assert acomm.shm_stats()["Allreduce"] == (1, 0)
    with pytest.raises(shmtopo.FreedError):
        acomm.shm_comm
    acomm.shm_free()  # a no-op now


def test_accelerate_refuses_what_is_not_an_intracomm():
    with pytest.raises(TypeError):
        shmtopo.accelerate("COMM_WORLD")


# ---- the calls that run through the lower-case API -------------------------------------

def lowered(name):
    """True where the drop-in runs the call through the core's lower-case one (else it goes to MPI)."""
    return name in LOWER_CASE


def expected_stats(names):
    return {name: (0, 1) if not lowered(name) else (1, 0) for name in names}


V_TYPES = [("DOUBLE", np.float64), ("INT", np.int32), ("UNSIGNED_CHAR", np.uint8), ("LONG", np.int64)]


@pytest.mark.parametrize("count", [0, 1, 5, 256 * 1024 // 8 + 1])
def test_rooted_and_v_calls_match_mpi4py(acomm, count):
    rank, n = WORLD.rank, WORLD.size
    for name, dt in V_TYPES:
        T = getattr(MPI, name)
        for root in roots(n):
            # Gather, Scatter
            x = small_ints(rank, count, dt, root)
            got, want = np.full(n * count, 9, dt), np.full(n * count, 9, dt)
            acomm.Gather([x, T], [got, T] if rank == root else None, root)
            WORLD.Gather([x, T], [want, T] if rank == root else None, root)
            same_bits(got, want, f"Gather {name} root {root}")
            whole = small_ints(root, n * count, dt, 1) if rank == root else None
            got, want = np.full(count, 9, dt), np.full(count, 9, dt)
            acomm.Scatter([whole, T] if whole is not None else None, [got, T], root)
            WORLD.Scatter([whole, T] if whole is not None else None, [want, T], root)
            same_bits(got, want, f"Scatter {name} root {root}")
            # Gatherv, Scatterv: rank r has count + r elements, laid out backwards with gaps
            counts = [count + r for r in range(n)]
            displs = [sum(c + 1 for c in counts[r + 1:]) for r in range(n)]
            total = sum(c + 1 for c in counts)
            x = small_ints(rank, counts[rank], dt, root)
            got, want = np.full(total, 9, dt), np.full(total, 9, dt)
            acomm.Gatherv([x, T], [got, (counts, displs), T] if rank == root else None, root)
            WORLD.Gatherv([x, T], [want, (counts, displs), T] if rank == root else None, root)
            same_bits(got, want, f"Gatherv {name} root {root}")
            whole = small_ints(root, total, dt, 2)
            got, want = np.full(counts[rank], 9, dt), np.full(counts[rank], 9, dt)
            acomm.Scatterv([whole, (counts, displs), T] if rank == root else None, [got, T], root)
            WORLD.Scatterv([whole, (counts, displs), T] if rank == root else None, [want, T], root)
            same_bits(got, want, f"Scatterv {name} root {root}")
        # Allgatherv, Alltoallv
        counts = [count + r for r in range(n)]
        displs = [sum(counts[:r]) + r for r in range(n)]
        total = sum(counts) + n
        x = small_ints(rank, counts[rank], dt)
        got, want = np.full(total, 9, dt), np.full(total, 9, dt)
        acomm.Allgatherv([x, T], [got, (counts, displs), T])
        WORLD.Allgatherv([x, T], [want, (counts, displs), T])
        same_bits(got, want, f"Allgatherv {name}")
        scounts = [count + (rank + p) % 3 for p in range(n)]    # rank p gets count + (rank + p) % 3
        rcounts = [count + (p + rank) % 3 for p in range(n)]
        sdispls = [sum(scounts[:p]) for p in range(n)]
        rdispls = [sum(rcounts[p + 1:]) for p in range(n)]      # backwards
        x = small_ints(rank, sum(scounts), dt)
        got, want = np.full(sum(rcounts), 9, dt), np.full(sum(rcounts), 9, dt)
        acomm.Alltoallv([x, (scounts, sdispls), T], [got, (rcounts, rdispls), T])
        WORLD.Alltoallv([x, (scounts, sdispls), T], [want, (rcounts, rdispls), T])
        same_bits(got, want, f"Alltoallv {name}")
        # Reduce_scatter (given counts and gathered ones), Scan, Exscan
        for opname in ("SUM", "MAX", "BOR") if dt != np.float64 else ("SUM", "MIN"):
            op = getattr(MPI, opname)
            x = small_ints(rank, sum(counts), dt)
            got, want = np.full(counts[rank], 9, dt), np.full(counts[rank], 9, dt)
            acomm.Reduce_scatter([x, T], [got, T], counts, op)
            WORLD.Reduce_scatter([x, T], [want, T], counts, op)
            same_bits(got, want, f"Reduce_scatter {name} {opname}")
            got = np.full(counts[rank], 9, dt)
            acomm.Reduce_scatter([x, T], [got, T], None, op)
            same_bits(got, want, f"Reduce_scatter {name} {opname} (counts gathered)")
            x = small_ints(rank, count, dt)
            got, want = np.full(count, 9, dt), np.full(count, 9, dt)
            acomm.Scan([x, T], [got, T], op)
            WORLD.Scan([x, T], [want, T], op)
            same_bits(got, want, f"Scan {name} {opname}")
            got, want = np.full(count, 9, dt), np.full(count, 9, dt)
            acomm.Exscan([x, T], [got, T], op)
            WORLD.Exscan([x, T], [want, T], op)
            if rank > 0:  # rank 0's result is undefined in MPI (shmtopo leaves it as it is)
                same_bits(got, want, f"Exscan {name} {opname}")
    names = ["Gather", "Scatter", "Gatherv", "Scatterv", "Allgatherv", "Alltoallv", "Reduce_scatter", "Scan",
             "Exscan"]
    assert set(acomm.shm_stats()) == set(names)
    for name, (accelerated, delegated) in acomm.shm_stats().items():
        assert (delegated if not lowered(name) else accelerated) > 0 and not (
            accelerated if not lowered(name) else delegated), (name, acomm.shm_stats())


def test_rooted_and_v_calls_in_place(acomm):
    rank, n = WORLD.rank, WORLD.size
    dt, T = np.int64, MPI.LONG
    for root in roots(n):
        got, want = small_ints(rank, 3 * n, dt, root), small_ints(rank, 3 * n, dt, root)
        if rank == root:
            acomm.Gather(MPI.IN_PLACE, got, root)
            WORLD.Gather(MPI.IN_PLACE, want, root)
            acomm.Scatter(got, None, root)  # None: IN_PLACE at the root
            WORLD.Scatter(want, MPI.IN_PLACE, root)
        else:
            acomm.Gather(got[:3], None, root)
            WORLD.Gather(want[:3], None, root)
            acomm.Scatter(None, got[:3], root)
            WORLD.Scatter(None, want[:3], root)
        same_bits(got, want, f"Gather/Scatter in place, root {root}")
    counts = [2 + r for r in range(n)]
    got, want = small_ints(rank, sum(counts), dt), small_ints(rank, sum(counts), dt)
    acomm.Allgatherv(None, [got, counts])
    WORLD.Allgatherv(MPI.IN_PLACE, [want, counts])
    same_bits(got, want, "Allgatherv in place")
    got, want = small_ints(rank, 2 * n, dt), small_ints(rank, 2 * n, dt)
    acomm.Alltoallv(MPI.IN_PLACE, [got, 2])
    WORLD.Alltoallv(MPI.IN_PLACE, [want, 2])
    same_bits(got, want, "Alltoallv in place")
    got, want = small_ints(rank, sum(counts), dt), small_ints(rank, sum(counts), dt)
    acomm.Reduce_scatter(MPI.IN_PLACE, got, counts, MPI.SUM)
    WORLD.Reduce_scatter(MPI.IN_PLACE, want, counts, MPI.SUM)
    same_bits(got[:counts[rank]], want[:counts[rank]], "Reduce_scatter in place")
    got, want = small_ints(rank, 7, dt), small_ints(rank, 7, dt)
    acomm.Scan(MPI.IN_PLACE, got, MPI.PROD)
    WORLD.Scan(MPI.IN_PLACE, want, MPI.PROD)
    same_bits(got, want, "Scan in place")
    got, want = small_ints(rank, 7, dt), small_ints(rank, 7, dt)
    acomm.Exscan(None, got, MPI.MAX)
    WORLD.Exscan(MPI.IN_PLACE, want, MPI.MAX)
    if rank > 0:
        same_bits(got, want, "Exscan in place")


def v_bad_calls(acomm, culprit):
    n = WORLD.size
    x = np.ones(4)
    counts = [4] * n
    return [
        ("root", lambda: acomm.Gather(x, np.zeros(4 * n), root=n if culprit else 0)),
        ("read-only", lambda: acomm.Scatter(np.ones(4 * n), np.ones(4)[::1].copy() if not culprit else
                                            np.frombuffer(bytes(32)), root=0)),
        ("expecting", lambda: acomm.Allgatherv(x, [np.zeros(4 * n), counts[:-1] + [4, 4] if culprit else counts])),
        ("beyond", lambda: acomm.Allgatherv(x, [np.zeros(4 * n), (counts, [4 * n] * n if culprit else
                                                                  [4 * r for r in range(n)])])),
        ("MPI.Op", lambda: acomm.Scan(x, np.zeros(4), "max" if culprit else MPI.MAX)),
        ("sum", lambda: acomm.Reduce_scatter(np.ones(4 * n + (1 if culprit else 0)), np.zeros(4), counts)),
        # plain forms, which the fast entries take on every rank
        ("sends|counts give", lambda: acomm.Scatterv([np.ones(4 * n), counts, None, MPI.DOUBLE] if WORLD.rank == 0 else None,
                                               np.zeros(5 if culprit else 4), root=0)),
        ("disagree", lambda: acomm.Reduce_scatter(np.ones(5 * n if culprit else 4 * n), np.zeros(5 if culprit else 4),
                                                  [5] * n if culprit else counts, MPI.SUM)),
    ]


@pytest.mark.parametrize("i", range(8))
def test_v_bad_arguments_raise_on_every_rank(acomm, i):
    n = WORLD.size
    name = {0: "Gather", 1: "Scatter", 2: "Allgatherv", 3: "Allgatherv", 4: "Scan", 5: "Reduce_scatter",
            6: "Scatterv", 7: "Reduce_scatter"}[i]
    if not lowered(name):
        pytest.skip(f"{name} goes to MPI in this build")
    match = v_bad_calls(acomm, False)[i][0]
    if match == "disagree" and n == 1:
        pytest.skip("one rank has no one to disagree with")
    for culprit in culprits(n):
        with pytest.raises(shmtopo.ShmtopoArgumentError, match=match) as info:
            v_bad_calls(acomm, WORLD.rank == culprit)[i][1]()
        # two ranks that disagree have no majority: either may be named (the same on both)
        named = WORLD.allgather(info.value.rank)
        assert len(set(named)) == 1, named
        assert info.value.rank == culprit or (n == 2 and match == "disagree"), str(info.value)
        out = np.zeros(2)
        acomm.Allreduce(np.ones(2), out)
        same_bits(out, np.full(2, float(n)))


# ---- persistent requests, new comms ---------------------------------------------------------

def test_persistent_requests(acomm):
    rank, n = WORLD.rank, WORLD.size
    send, recv = np.zeros(3), np.zeros(3)
    b = np.zeros(2, np.int32)
    reqs = [acomm.Allreduce_init(send, recv, MPI.SUM), acomm.Bcast_init(b, root=n - 1),
            acomm.Barrier_init(), acomm.Gather_init(np.array([rank], np.int32),
                                                    np.zeros(n, np.int32) if rank == 0 else None)]
    assert all(reqs) and isinstance(reqs[0], shmtopo.AcceleratedPrequest)
    for step in range(3):  # each start reads the buffers as they are then
        send[...] = rank + step
        b[...] = step if rank == n - 1 else -1
        shmtopo.AcceleratedPrequest.Startall(reqs)
        assert shmtopo.AcceleratedPrequest.Waitall(reqs)
        same_bits(recv, np.full(3, float(sum(range(n)) + n * step)))
        same_bits(b, np.full(2, step, np.int32))
    for r in reqs:
        r.Free()
        r.Free()
        assert not r
    with pytest.raises(shmtopo.ShmtopoValueError, match="freed"):
        reqs[0].Start()
    stats = acomm.shm_stats()  # a start counts as a call of the blocking operation
    assert stats["Allreduce"] == (3, 0) and stats["Bcast"] == (3, 0) and stats["Barrier"] == (3, 0)
    assert stats["Gather"] == ((3, 0) if lowered("Gather") else (0, 3))


def test_new_comms_are_accelerated(acomm):
    rank, n = WORLD.rank, WORLD.size
    # Split_type by shared memory gives this host's ranks: the job's on one machine
    shared = WORLD.Split_type(MPI.COMM_TYPE_SHARED)
    host = shared.allgather(rank)
    shared.Free()
    for shared_only, make in ((False, lambda: acomm.Dup()), (False, lambda: acomm.Clone()),
                              (False, lambda: acomm.Split(0, -rank)),
                              (True, lambda: acomm.Split_type(MPI.COMM_TYPE_SHARED)),
                              (False, lambda: acomm.Create(acomm.Get_group()))):
        members = host if shared_only else list(range(n))
        sub = make()
        try:
            assert isinstance(sub, shmtopo.AcceleratedComm) and sub.Get_size() == len(members)
            out = np.zeros(2)
            sub.Allreduce(np.full(2, float(rank)), out)
            same_bits(out, np.full(2, float(sum(members))))
            assert sub.shm_stats() == {"Allreduce": (1, 0)}
        finally:
            sub.Free()
    none = acomm.Split(MPI.UNDEFINED if rank == 0 else 1, 0)
    if rank == 0:
        assert none == MPI.COMM_NULL
    else:
        assert isinstance(none, shmtopo.AcceleratedComm) and none.Get_size() == n - 1
        none.Free()


def test_copies_are_the_same_accelerated_comm(acomm):
    """copy.copy, copy.deepcopy and type(c)(c) make what mpi4py makes of a
    communicator, a new object on the same handle: here also the same
    accelerated comm, whose calls run in shared memory and count together."""
    import copy

    for made in (copy.copy(acomm), copy.deepcopy(acomm), type(acomm)(acomm)):
        assert type(made) is type(acomm) and made == acomm and made.Get_rank() == acomm.Get_rank()
        assert repr(made) == repr(acomm) and made.shm_comm is acomm.shm_comm
        x = np.ones(3)
        made.Allreduce(MPI.IN_PLACE, x)
        assert x.tolist() == [WORLD.size] * 3
    assert acomm.shm_stats() == {"Allreduce": (3, 0)}
