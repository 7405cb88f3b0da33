"""shmtopo.accelerate's fast entry (shmtopo._fastpath's accel_* functions):
the plain calls (a buffer of a predefined type: a numpy array alone, or
mpi4py's [buf, count, type] forms over slices, mmaps and bytearrays; a
predefined op; an int root) run in C without the planner, and every other call takes the planner
exactly as before. Results are checked against the wrapped mpi4py
communicator on the same inputs, bitwise (small integers), on one node and
on simulated nodes of 2 ranks (where collectives span nodes, the fast entry
never runs)."""

import numpy as np
import pytest
from mpi4py import MPI

import shmtopo
from conftest import PythonCalls
from values import same_bits, small_ints
from shmtopo import _types
from shmtopo.accel import plans, tables

WORLD = MPI.COMM_WORLD
OPS = ["SUM", "PROD", "MIN", "MAX", "BAND", "BOR", "BXOR"]
PLANNERS = ["bcast", "reduce", "allreduce", "allgather", "alltoall", "gather", "scatter", "alltoallv", "allgatherv",
            "gatherv", "scatterv", "scan", "reduce_scatter_block", "reduce_scatter"]


def _has_mpi_type(dtype):
    """A plain array's type is mpi4py's datatype for its format, and the
    drop-in moves it only where it maps that datatype to the array's type:
    not float16 (MPICH has a datatype for it, Open MPI none; the drop-in
    leaves it to MPI, whose rounding differs), bfloat16 or the pair structs."""
    t = tables.get_tables()
    try:
        datatype = MPI.Datatype.fromcode(dtype.char if dtype.fields is None else "")
    except (KeyError, ValueError):
        return False
    known = t.types.get(t.handle(datatype))
    return known is not None and known.dtype == dtype


PLAIN_DTYPES = sorted((d for d in _types.DTYPES if _has_mpi_type(d)), key=str)
ORDERED_DTYPES = [d for d in PLAIN_DTYPES if d.kind in "iuf"]  # MPI defines SUM and MAX on them


@pytest.fixture
def planned(monkeypatch):
    """{planner name: calls}: every call that went through the planner."""
    calls = {name: 0 for name in PLANNERS}
    for name in PLANNERS:
        original = getattr(plans, name)

        def counting(*args, _name=name, _original=original):
            calls[_name] += 1
            return _original(*args)
        monkeypatch.setattr(plans, name, counting)
    return calls


def fast(acomm):
    """Whether the fast entry can run on this comm (one node: its collectives
    do not span nodes)."""
    return acomm.shm_comm.nnodes == 1


def plain_calls(acomm, comm, dtype, count, root):
    """Each plain call on `comm` (the accelerated one or the wrapped one):
    its result buffer."""
    rank, n = WORLD.rank, WORLD.size
    x = small_ints(rank, count, dtype)
    out = {}
    b = np.zeros(count, dtype)
    comm.Allreduce(x, b, op=MPI.SUM)
    out["Allreduce"] = b
    b = np.zeros(count, dtype)
    comm.Allreduce(x, b)  # the default op
    out["Allreduce default op"] = b
    b = np.zeros(count, dtype)
    comm.Reduce(x, b, MPI.MAX, root=root)
    out["Reduce"] = b if rank == root else None
    b = small_ints(rank, count, dtype, 1)
    comm.Bcast(b, root=root)
    out["Bcast"] = b
    b = np.zeros(count * n, dtype)
    comm.Allgather(x, b)
    out["Allgather"] = b
    comm.Barrier()
    return out


def test_plain_calls_run_no_python(acomm):
    """The accelerated class's buffer collectives are C methods (its first
    base, _fastpath.CommFast): a plain call, by position or with mpi4py's
    keywords, runs no Python at all, and still counts in shm_stats; a call
    the C method cannot take (a keyword mpi4py does not have) goes to the
    Python method, which says what is wrong as mpi4py would."""
    rank, n = WORLD.rank, WORLD.size
    x, b, rows, root = small_ints(rank, 5, np.float64), np.zeros(5), np.zeros(5 * n), n - 1

    def calls():
        acomm.Allreduce(x, b, op=MPI.SUM)
        acomm.Reduce(sendbuf=x, recvbuf=b, op=MPI.MAX, root=root)
        acomm.Bcast(b, root)
        acomm.Allgather([x, MPI.DOUBLE], rows)
        acomm.Barrier()
    calls()  # a first call of each puts it in shm_stats' order, in Python
    with PythonCalls() as python_calls:
        calls()
    if fast(acomm):
        assert python_calls == ["calls"], python_calls  # the test's own function, nothing under it
        assert acomm.shm_stats() == {"Allreduce": (2, 0), "Reduce": (2, 0), "Bcast": (2, 0), "Allgather": (2, 0),
                                     "Barrier": (2, 0)}
    np.testing.assert_array_equal(rows.reshape(n, 5), [small_ints(r, 5, np.float64) for r in range(n)])
    with pytest.raises(TypeError):
        acomm.Allreduce(x, b, no_such_keyword=1)


def test_a_derived_comm_is_one_object_until_its_first_use(acomm):
    """Making a derived comm costs MPI's constructor and one object: no
    Python runs below the constructor's own method (its shmtopo state is
    made at its first read, from the comm it came from; freed before any
    use, it makes none). Used, each one is accelerated as any comm; freed
    unused, it reads as freed."""
    n = WORLD.size
    first = acomm.Create_cart([n])  # (the first comm of a class makes the class)
    first.Sub([True]).Free()
    first.Free()
    with PythonCalls() as python_calls:
        made = [acomm.Dup(), acomm.Split(0, WORLD.rank), acomm.Create_cart([n])]
        line = made[2].Sub([True])
        kept = acomm.Dup()
        kept.Free()
    assert python_calls == ["Dup", "_derived", "Split", "_wrapped", "Create_cart", "_wrapped", "_cart_sub",
                            "_wrapped", "Dup", "_derived", "Free"], python_calls
    assert kept == MPI.COMM_NULL
    with pytest.raises(shmtopo.FreedError):
        kept.shm_comm
    twice = acomm.Dup()
    twice.Free()
    with pytest.raises(MPI.Exception):
        twice.Free()  # as MPI's second free of a handle
    with pytest.raises(shmtopo.FreedError):
        twice.shm_comm
    for c in [line, made[0].Dup()] + made:  # (the first two make the state of the unused comm they came from)
        out = np.zeros(2)
        c.Allreduce(np.ones(2), out)
        np.testing.assert_array_equal(out, np.full(2, float(n)))
        assert c.shm_stats() == {"Allreduce": (1, 0)} and isinstance(c.shm_comm, shmtopo.Comm)
        assert c._options is acomm._options and c._strict == acomm._strict
        c.Free()


def test_threads_reading_an_unused_comms_state_at_once_see_one_state(acomm):
    """Four threads making a derived comm's state at the same moment: one
    makes it, the others read that one (no error, one side)."""
    import threading

    for _ in range(20):
        fresh = acomm.Split(0, WORLD.rank)
        seen, errors = [], []

        def read():
            try:
                seen.append((fresh._side, fresh._stats, fresh._tables))
            except Exception as exc:  # noqa: BLE001 - asserted below
                errors.append(exc)
        threads = [threading.Thread(target=read) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors and len({tuple(map(id, s)) for s in seen}) == 1, (errors, seen)
        fresh.Free()


@pytest.mark.parametrize("dtype", ORDERED_DTYPES, ids=str)
def test_plain_calls_run_without_the_planner(acomm, planned, dtype):
    n = WORLD.size
    roots = sorted({0, n - 1})
    for root in roots:
        got = plain_calls(acomm, acomm, dtype, 5, root)
        want = plain_calls(acomm, WORLD, dtype, 5, root)
        for name in got:
            if want[name] is not None:
                same_bits(got[name], want[name], f"{name} {dtype} root {root}")
    if fast(acomm):
        assert planned == dict.fromkeys(PLANNERS, 0), planned
    else:  # across nodes: the small bcasts, reduces and allreduces whole in C (span.c), the others planned
        assert planned["bcast"] == planned["reduce"] == planned["allreduce"] == 0 and planned["allgather"], planned
    stats = acomm.shm_stats()
    r = len(roots)
    assert stats == {"Allreduce": (2 * r, 0), "Reduce": (r, 0), "Bcast": (r, 0), "Allgather": (r, 0),
                     "Barrier": (r, 0)}, stats
    assert list(stats) == ["Allreduce", "Reduce", "Bcast", "Allgather", "Barrier"], stats  # first calls' order


def message_calls(comm, size):
    """mpi4py's message forms, as real programs pass them (OSU's
    [buf, size, MPI.BYTE] slices of one preallocated mmap, bytearrays,
    array.array, numpy slices with a displacement, MPI.Alloc_mem, IN_PLACE):
    each call's result bytes."""
    import array
    import mmap
    rank, n = WORLD.rank, WORLD.size
    root = n - 1
    big = 1 << 16
    send = mmap.mmap(-1, n * big)
    send[:] = bytes((7 * rank + i) % 251 for i in range(256)) * (n * big // 256)
    recv = mmap.mmap(-1, n * big)
    out = {}
    comm.Bcast([recv, size, MPI.BYTE] if rank != root else [send, size, MPI.BYTE], root=root)
    out["Bcast mmap"] = bytes(recv[:size]) if rank != root else b""
    ba = bytearray(send[:size])
    comm.Bcast(ba, root=0)
    out["Bcast bytearray"] = bytes(ba)
    comm.Allgather([send, size, MPI.BYTE], [recv, size, MPI.BYTE])
    out["Allgather"] = bytes(recv[:n * size])
    recv[rank * size:(rank + 1) * size] = send[:size]
    comm.Allgather(MPI.IN_PLACE, [recv, size, MPI.BYTE])
    out["Allgather IN_PLACE"] = bytes(recv[:n * size])
    comm.Alltoall([send, size, MPI.BYTE], [recv, size, MPI.BYTE])
    out["Alltoall"] = bytes(recv[:n * size])
    comm.Gather([send, size, MPI.BYTE], [recv, size, MPI.BYTE] if rank == root else None, root=root)
    out["Gather"] = bytes(recv[:n * size]) if rank == root else b""
    if rank == root:
        recv[root * size:(root + 1) * size] = send[:size]
    comm.Gather(MPI.IN_PLACE if rank == root else [send, size, MPI.BYTE], [recv, size, MPI.BYTE], root=root)
    out["Gather IN_PLACE"] = bytes(recv[:n * size]) if rank == root else b""
    comm.Scatter([send, size, MPI.BYTE], [recv, size, MPI.BYTE], root=0)
    out["Scatter"] = bytes(recv[:size])
    comm.Scatter([send, size, MPI.BYTE] if rank == 0 else None, MPI.IN_PLACE if rank == 0 else [recv, size, MPI.BYTE],
                 root=0)
    out["Scatter IN_PLACE"] = bytes(recv[:size]) if rank else b""
    counts = array.array("i", [size] * n)
    displs = array.array("i", [size * p for p in range(n)])
    comm.Alltoallv([send, (counts, displs), MPI.BYTE], [recv, (counts, displs), MPI.BYTE])
    out["Alltoallv int arrays"] = bytes(recv[:n * size])
    comm.Alltoallv([send, [size] * n, list(displs), MPI.BYTE], [recv, [size] * n, list(displs), MPI.BYTE])
    out["Alltoallv lists"] = bytes(recv[:n * size])
    comm.Allgatherv([send, size, MPI.BYTE], [recv, [size] * n])
    out["Allgatherv [buf, counts]"] = bytes(recv[:n * size])
    comm.Gatherv([send, size, MPI.BYTE], [recv, (np.full(n, size, np.intc), None)] if rank == root else None,
                 root=root)
    out["Gatherv [buf, (int32 counts, None)]"] = bytes(recv[:n * size]) if rank == root else b""
    backwards = [size * (n - 1 - p) for p in range(n)]  # the blocks in reverse order
    comm.Scatterv([send, [size] * n, backwards, MPI.BYTE] if rank == root else None, [recv, size, MPI.BYTE],
                  root=root)
    out["Scatterv [buf, counts, displs, T]"] = bytes(recv[:size])
    ints = np.frombuffer(send, np.int32)
    k = size // 8
    result = np.zeros(k + 3, np.int32)
    comm.Allreduce([ints, (k, 5), MPI.INT], [result, (k, 3), MPI.INT], MPI.MAX)
    out["Allreduce (count, displ)"] = result.tobytes()
    words = np.frombuffer(recv, np.int64, count=size // 8 * n)
    words[:] = np.arange(words.size) + rank
    comm.Allreduce(MPI.IN_PLACE, [recv, size // 8, MPI.INT64_T], MPI.MAX)
    out["Allreduce IN_PLACE"] = bytes(recv[:size // 8 * 8])
    words[:] = np.arange(words.size) + rank
    comm.Reduce(MPI.IN_PLACE if rank == root else [recv, size // 8, MPI.INT64_T],
                [recv, size // 8, MPI.INT64_T] if rank == root else None, MPI.SUM, root=root)
    out["Reduce IN_PLACE"] = bytes(recv[:size // 8 * 8]) if rank == root else b""
    scanned = np.zeros(size // 8, np.int64)
    comm.Scan([send, size // 8, MPI.INT64_T], [scanned, MPI.INT64_T], MPI.BXOR)
    out["Scan"] = scanned.tobytes()
    comm.Exscan([send, size // 8, MPI.INT64_T], [scanned, MPI.INT64_T], MPI.BXOR)
    out["Exscan"] = scanned.tobytes() if rank else b""  # rank 0's is undefined
    words[:] = np.arange(words.size) + rank
    comm.Scan(MPI.IN_PLACE, [recv, size // 8, MPI.INT64_T], MPI.SUM)
    out["Scan IN_PLACE"] = bytes(recv[:size // 8 * 8])
    block = np.zeros(size // 8, np.int64)
    comm.Reduce_scatter_block([send, size // 8, MPI.INT64_T], [block, MPI.INT64_T], MPI.SUM)
    out["Reduce_scatter_block"] = block.tobytes()
    shares = [size // 8 // n + (p < size // 8 % n) for p in range(n)]  # uneven
    mine = np.zeros(shares[rank], np.int64)
    comm.Reduce_scatter([send, sum(shares), MPI.INT64_T], [mine, MPI.INT64_T], shares, MPI.SUM)
    out["Reduce_scatter counts"] = mine.tobytes()
    alloc = MPI.Alloc_mem(max(size, 8))
    try:
        np.frombuffer(alloc, np.uint8)[:] = rank + 1
        comm.Reduce([alloc, size // 8, MPI.DOUBLE], [recv, size // 8, MPI.DOUBLE], MPI.SUM, root=0)
        out["Reduce Alloc_mem"] = bytes(recv[:size // 8 * 8]) if rank == 0 else b""
    finally:
        MPI.Free_mem(alloc)
    doubles = array.array("d", [rank + 0.5] * (size // 8 + 1))  # empty, its buffer is misaligned
    got = array.array("d", doubles)
    comm.Allreduce(doubles, got, MPI.SUM)
    out["Allreduce array.array"] = got.tobytes()
    return out


@pytest.mark.parametrize("size", [0, 8, 1 << 16])
def test_message_forms_run_without_the_planner(acomm, planned, size):
    """(Twice: the first large call may find out about levels.)"""
    for _ in range(2):
        planned.update(dict.fromkeys(PLANNERS, 0))
        got = message_calls(acomm, size)
        want = message_calls(WORLD, size)
        for name in want:
            assert got[name] == want[name], f"{name}, {size} bytes"
    if fast(acomm):
        assert planned == dict.fromkeys(PLANNERS, 0), planned
    assert all(d == 0 for _, d in acomm.shm_stats().values()), acomm.shm_stats()


def test_large_plain_arrays_take_the_fast_entry(acomm, planned):
    """From 64 KiB on too (private arrays: the fast entry finds no window
    holding them), with MPI's bits; a second call, once the comm knows it has
    no levels, takes it as the first may not."""
    from shmtopo.coll.node import WINDOW_MIN
    roots = sorted({0, WORLD.size - 1})
    first = None
    for _ in range(2):
        for root in roots:
            got = plain_calls(acomm, acomm, np.int64, WINDOW_MIN // 8 + 3, root)
            want = plain_calls(acomm, WORLD, np.int64, WINDOW_MIN // 8 + 3, root)
            for name in got:
                if want[name] is not None:
                    same_bits(got[name], want[name], f"{name} root {root}")
        if first is None:  # the first round's calls may have found out about levels
            first = dict(planned)
            planned.update(dict.fromkeys(PLANNERS, 0))
    if fast(acomm):
        assert planned == dict.fromkeys(PLANNERS, 0), (first, planned)


@pytest.mark.parametrize("dtype", PLAIN_DTYPES, ids=str)
def test_every_op_on_plain_arrays(acomm, dtype):
    """Ops MPI defines on the type run in shared memory (the bit ops on
    integers too); the others (bit ops on floats) go to MPI, which refuses
    them as it does without shmtopo."""
    rank = WORLD.rank
    x = small_ints(rank, 6, dtype)
    accepted = 0  # calls MPI completes
    for name in OPS:
        op = getattr(MPI, name)
        got, want = np.zeros(6, dtype), np.zeros(6, dtype)
        try:
            WORLD.Allreduce(x, want, op)
        except MPI.Exception as exc:
            with pytest.raises(MPI.Exception) as info:
                acomm.Allreduce(x, got, op)
            assert info.value.Get_error_class() == exc.Get_error_class()
            continue
        acomm.Allreduce(x, got, op)
        same_bits(got, want, f"{name} {dtype}")
        accepted += 1
    # a call MPI refused is no completed call
    assert acomm.shm_stats().get("Allreduce", (0, 0)) == (accepted, 0), acomm.shm_stats()
    assert accepted == {"f": 4, "c": 2, "b": 0}.get(np.dtype(dtype).kind, 7), accepted


def misaligned(count, dtype, rank, salt=0):
    """An ndarray of `count` elements one byte off its type's alignment."""
    dtype = np.dtype(dtype)
    raw = np.zeros(count * dtype.itemsize + 1, np.uint8)
    a = raw[1:].view(dtype)
    assert not a.flags.aligned
    a[...] = small_ints(rank, count, dtype, salt)
    return a


def test_what_is_not_plain_takes_the_planner(acomm, planned):
    """Each case is valid and accelerated, but not the fast entry's: the
    planner reads it, and the results are MPI's."""
    rank, n = WORLD.rank, WORLD.size
    root = n - 1
    x = small_ints(rank, 7, np.float64)
    cases = {
        "misaligned input and result": lambda c, b: c.Allreduce([misaligned(7, np.float64, rank), MPI.DOUBLE],
                                                                [b[1:].view(np.float64), MPI.DOUBLE]),
        "long long": lambda c, b: c.Allreduce(x.astype(np.longlong), b),
        "a numpy integer root": lambda c, b: c.Bcast(b, root=np.int64(root)),
        "a read-only root buffer": lambda c, b: c.Bcast(readonly_at_root(b, root), root=root),
        "a type by name": lambda c, b: c.Allreduce([x, "d"], [b, "d"]),
        "a numpy integer count": lambda c, b: c.Allreduce([x, np.int64(7), MPI.DOUBLE], [b, 7, MPI.DOUBLE]),
        "in place, misaligned": lambda c, b: c.Allreduce(MPI.IN_PLACE, [b[1:].view(np.float64), MPI.DOUBLE]),
        "above the fast entry's size": lambda c, b: c.Allreduce(small_ints(rank, 9000, np.float64), b),
    }
    for name, call in cases.items():
        before = sum(planned.values())
        got, want = result_buffer(name, rank), result_buffer(name, rank)
        call(acomm, got)
        call(WORLD, want)
        same_bits(got, want, name)
        # a read-only buffer is not plain at the root only (on one node and across nodes alike)
        here = name != "a read-only root buffer" or rank == root
        assert sum(planned.values()) == before + here, (name, planned)
    assert all(d == 0 for _, d in acomm.shm_stats().values()), acomm.shm_stats()


def test_misaligned_plain_arrays_are_the_planners(acomm, planned):
    """numpy gives a misaligned array the format '=d', which mpi4py does not
    map to a datatype: the fast entry (whose kernels would load misaligned
    elements) leaves it to the planner, which refuses it on every rank."""
    rank = WORLD.rank
    with pytest.raises(shmtopo.ShmtopoValueError, match="cannot map format"):
        acomm.Allreduce(misaligned(7, np.float64, rank), misaligned(7, np.float64, rank, 1))
    with pytest.raises(shmtopo.ShmtopoValueError, match="cannot map format"):
        acomm.Bcast(misaligned(7, np.float64, rank), root=0)
    assert planned["allreduce"] == planned["bcast"] == 1, planned


def result_buffer(name, rank):
    if name in ("misaligned input and result", "in place, misaligned"):
        return misaligned(7, np.float64, rank, 3).base  # the bytes; the call views them from offset 1
    if name == "long long":
        return np.zeros(7, np.longlong)
    if name == "above the fast entry's size":
        return np.zeros(9000)
    return small_ints(rank, 7, np.float64, 5)


def readonly_at_root(b, root):
    if WORLD.rank == root:
        b = b.copy()
        b.flags.writeable = False
    return b


def test_reduce_reads_no_result_buffer_off_the_root(acomm, planned):
    rank, n = WORLD.rank, WORLD.size
    root = n - 1
    x = small_ints(rank, 4, np.int32)
    got, want = np.zeros(4, np.int32), np.zeros(4, np.int32)
    acomm.Reduce(x, got if rank == root else None, MPI.SUM, root)
    WORLD.Reduce(x, want if rank == root else None, MPI.SUM, root)
    same_bits(got, want)
    if fast(acomm):
        assert planned["reduce"] == 0, planned


def test_a_derived_bcast_is_agreed_and_handed_to_mpi_from_c(acomm, planned):
    """A derived datatype on every rank: once the planner has read it (its
    first call), agreed and handed to MPI by the C method, on one node and
    across nodes alike."""
    n = WORLD.size
    pair = MPI.DOUBLE.Create_contiguous(2).Commit()
    try:
        for call in range(3):
            b = small_ints(WORLD.rank, 6, np.float64)
            acomm.Bcast([b, 3, pair], root=n - 1)
            same_bits(b, small_ints(n - 1, 6, np.float64))
    finally:
        pair.Free()
    assert planned["bcast"] == 1, planned
    assert acomm.shm_stats()["Bcast"] == (0, 3), acomm.shm_stats()


def test_an_agreed_derived_call_runs_mpis_own_function_from_c(acomm, monkeypatch):
    """Once agreed, a derived-datatype Bcast or Allgather (IN_PLACE too) is
    MPI's own function called from the C method, with MPI's result: the
    mpi4py methods the C method would otherwise call are never called."""
    t = tables.get_tables()
    called = []

    class Counting(MPI.Intracomm):
        def Bcast(self, *args, **kwargs):
            called.append("Bcast")
            return MPI.Intracomm.Bcast(self, *args, **kwargs)

        def Allgather(self, *args, **kwargs):
            called.append("Allgather")
            return MPI.Intracomm.Allgather(self, *args, **kwargs)

    monkeypatch.setattr(t, "methods", Counting)
    tables._bind_fast_entries(t)
    n, rank = WORLD.size, WORLD.rank
    pair = MPI.DOUBLE.Create_contiguous(2).Commit()
    everyone = np.concatenate([small_ints(r, 4, np.float64) for r in range(n)])
    try:
        for call in range(3):  # the first of each through the planner
            b = small_ints(rank, 6, np.float64)
            acomm.Bcast([b, 3, pair], root=n - 1)
            same_bits(b, small_ints(n - 1, 6, np.float64))
            out = np.zeros(4 * n)
            acomm.Allgather([small_ints(rank, 4, np.float64), 2, pair], [out, 2, pair])
            same_bits(out, everyone)
            out = np.zeros(4 * n)
            out[4 * rank:4 * rank + 4] = small_ints(rank, 4, np.float64)
            acomm.Allgather(MPI.IN_PLACE, [out, 2, pair])
            same_bits(out, everyone)
    finally:
        pair.Free()
        monkeypatch.undo()
        tables._bind_fast_entries(t)
    assert called == [], called
    assert acomm.shm_stats()["Bcast"] == (0, 3) and acomm.shm_stats()["Allgather"] == (0, 6), acomm.shm_stats()


def test_an_error_of_mpis_own_function_is_mpi4pys_exception(acomm):
    """MPI's error from the function the C method calls (a datatype never
    committed) is the MPI.Exception mpi4py's own call raises, with its error
    class, on every rank, at every call; the comm goes on."""
    n = WORLD.size
    loose = MPI.DOUBLE.Create_contiguous(2)  # not committed: MPI refuses it
    plain = MPI.COMM_WORLD.Dup()
    try:
        with pytest.raises(MPI.Exception) as theirs:
            plain.Bcast([np.zeros(4), 2, loose], root=0)
        for call in range(3):  # the first through the planner, then from C
            with pytest.raises(MPI.Exception) as ours:
                acomm.Bcast([np.zeros(4), 2, loose], root=n - 1)
            assert ours.value.Get_error_class() == theirs.value.Get_error_class(), (call, ours.value)
    finally:
        loose.Free()
        plain.Free()
    b = small_ints(WORLD.rank, 4, np.float64)
    acomm.Bcast(b, root=0)
    same_bits(b, small_ints(0, 4, np.float64))


def test_a_fast_rank_and_a_delegating_one_both_hand_the_call_to_mpi(acomm):
    """Ranks on the fast entry and a rank whose derived datatype (of the same
    type signature) goes to MPI: legal MPI, so every rank hands the call to
    MPI, with its own arguments, and gets MPI's result; the comm goes on."""
    n = WORLD.size
    if n == 1:
        pytest.skip("one rank takes one path")
    pair = MPI.DOUBLE.Create_contiguous(2).Commit()
    try:
        for culprit in sorted({0, n // 2, n - 1}):
            odd = WORLD.rank == culprit

            def buf(a, blocks=1):
                return [a, 2 // blocks if blocks > 1 else a.size // 2, pair] if odd else a  # 4 doubles either way

            before = acomm.shm_stats()
            x = np.arange(4.0) + 10 * WORLD.rank
            got = x.copy()
            acomm.Bcast(buf(got), root=n - 1)
            same_bits(got, np.arange(4.0) + 10 * (n - 1))
            every = np.zeros(4 * n)
            acomm.Allgather(buf(x), [every, 2, pair] if odd else every)
            same_bits(every, np.concatenate([np.arange(4.0) + 10 * r for r in range(n)]))
            after = acomm.shm_stats()
            for name in ("Bcast", "Allgather"):
                assert after[name][1] == before.get(name, (0, 0))[1] + 1, (name, before, after)
            out = np.zeros(2)
            acomm.Allreduce(np.ones(2), out)
            same_bits(out, np.full(2, float(n)))
    finally:
        pair.Free()


def test_after_shm_free_the_plain_calls_go_to_mpi():
    acomm = shmtopo.accelerate(WORLD)
    acomm.shm_free()
    got = np.zeros(3)
    acomm.Allreduce(np.ones(3), got)
    acomm.Barrier()
    same_bits(got, np.full(3, float(WORLD.size)))
    assert acomm.shm_stats() == {"Allreduce": (0, 1), "Barrier": (0, 1)}


class _MyComm(MPI.Intracomm):
    """A user's communicator class with a method of its own."""

    def twice_the_rank(self):
        return 2 * self.Get_rank()


def test_the_wrapped_comms_attributes_without_a_getattr_hook():
    """The wrapper reads the wrapped communicator's attributes through
    properties made per mpi4py class (no __getattr__, which would slow every
    lookup of the wrapper's own collectives too): topology comms' and user
    subclasses' attributes included."""
    assert "__getattr__" not in vars(shmtopo.AcceleratedComm)
    n = WORLD.size
    cart = WORLD.Create_cart([n], periods=[True])
    mine = _MyComm(WORLD.Dup())
    try:
        acart = shmtopo.accelerate(cart)
        assert acart.Get_topo() == cart.Get_topo() and acart.Shift(0, 1) == cart.Shift(0, 1)
        acart.shm_free()
        amine = shmtopo.accelerate(mine)
        assert amine.twice_the_rank() == 2 * WORLD.rank and amine.rank == WORLD.rank
        with pytest.raises(AttributeError):
            amine.no_such_attribute
        amine.shm_free()
    finally:
        cart.Free()
        mine.Free()
