"""Alltoallw through the drop-in: derived datatypes flattened once
(shmtopo.accel.datatypes) and their bytes moved in shared memory, byte for
byte what MPI moves, for random type maps of every constructor; misuse on
one rank raising on every rank; the forms MPI takes that go to it. Each
test runs on one node and on simulated nodes of 2 ranks."""
import array
import threading

import numpy as np
import pytest
from mpi4py import MPI

import shmtopo

from shmtopo.accel import datatypes
from shmtopo.accel.comm import ALLTOALLW_WARM_UP
from shmtopo.coll.args import TypeRuns
from shmtopo.errors import FreedError, ShmtopoArgumentError
from conftest import PythonCalls
from values import culprits

WORLD = MPI.COMM_WORLD
BASES = [MPI.DOUBLE, MPI.INT, MPI.BYTE, MPI.C_DOUBLE_COMPLEX, MPI.SHORT]


def _split(rng, k, parts):
    """k as `parts` positive integers (k >= parts)."""
    cuts = np.sort(rng.choice(np.arange(1, k), parts - 1, replace=False)) if parts > 1 else []
    return list(np.diff(np.concatenate(([0], cuts, [k]))).astype(int))


def random_type(rng, base, k):
    """A committed datatype of exactly k elements of base (k >= 1), by one
    of MPI's constructors, its blocks in a random order where the
    constructor allows; a fresh handle (free it)."""
    ext = base.Get_extent()[1]
    kinds = ["contiguous", "vector", "hvector", "indexed", "hindexed", "indexed_block", "struct", "subarray",
             "resized", "dup"]
    kind = kinds[rng.integers(len(kinds))]
    divisors = [d for d in range(1, k + 1) if k % d == 0]
    if kind == "contiguous":
        t = base.Create_contiguous(k)
    elif kind in ("vector", "hvector"):
        blocklength = int(rng.choice(divisors))
        stride = blocklength + int(rng.integers(0, 3))
        t = (base.Create_vector(k // blocklength, blocklength, stride) if kind == "vector" else
             base.Create_hvector(k // blocklength, blocklength, stride * ext))
    elif kind in ("indexed", "hindexed", "struct"):
        lengths = _split(rng, k, int(rng.integers(1, min(k, 4) + 1)))
        starts = np.cumsum([0] + [n + int(rng.integers(0, 3)) for n in lengths[:-1]])
        order = rng.permutation(len(lengths))  # blocks listed out of address order
        lengths, starts = [lengths[i] for i in order], [int(starts[i]) for i in order]
        if kind == "indexed":
            t = base.Create_indexed(lengths, starts)
        elif kind == "hindexed":
            t = base.Create_hindexed(lengths, [s * ext for s in starts])
        else:
            t = MPI.Datatype.Create_struct(lengths, [s * ext for s in starts], [base] * len(lengths))
    elif kind == "indexed_block":
        blocklength = int(rng.choice(divisors))
        starts = rng.permutation(k // blocklength) * (blocklength + 1)
        t = base.Create_indexed_block(blocklength, [int(s) for s in starts])
    elif kind == "subarray":
        rows = int(rng.choice(divisors))
        sizes = [rows + int(rng.integers(0, 3)), k // rows + int(rng.integers(0, 3))]
        subsizes = [rows, k // rows]
        starts = [int(rng.integers(0, s - ss + 1)) for s, ss in zip(sizes, subsizes)]
        order = MPI.ORDER_C if rng.integers(2) else MPI.ORDER_FORTRAN
        t = base.Create_subarray(sizes, subsizes, starts, order=order)
    elif kind == "resized":  # a lower bound below the data, and room after it
        inner = base.Create_vector(k, 1, 2)
        t = inner.Create_resized(-ext, inner.Get_extent()[1] + 3 * ext)
        inner.Free()
    else:
        inner = random_type(rng, base, k)
        t = inner.Dup()
        inner.Free()
    return t.Commit()


def pair_rng(sender, receiver, seed, side):
    return np.random.default_rng([seed, sender, receiver, side])


def layout(seed, rank, n, side):
    """One side of this rank's Alltoallw: (bytes, counts, displacements,
    types) with a random type per peer; the pair (sender, receiver) agrees on
    the base type and how many of it travel, each side picks its own map."""
    counts, displs, types, at = [], [], [], 0
    for peer in range(n):
        sender, receiver = (rank, peer) if side == 0 else (peer, rank)
        agreed = pair_rng(sender, receiver, seed, 2)
        base = BASES[agreed.integers(len(BASES))]
        k = int(agreed.integers(0, 13))
        count = int(agreed.choice([d for d in (1, 2, 3) if k % d == 0])) if k else 0
        t = random_type(pair_rng(sender, receiver, seed, side), base, max(k // max(count, 1), 1))
        lb, extent = t.Get_extent()
        tlb, span = t.Get_true_extent()
        first = min(tlb, tlb + (count - 1) * extent) if count else 0
        displ = max(at - first, 0)  # this block's bytes start at `at`, or later
        displs.append(displ)
        at = displ + (max(tlb + span, tlb + span + (count - 1) * extent) if count else 0) + 8
        counts.append(count)
        types.append(t)
    return at, counts, displs, types


def alltoallw_by_pairs(sendspec, recvspec, n):
    """MPI's own answer, pair by pair (point to point)."""
    sbuf, (sc, sd), st = sendspec
    rbuf, (rc, rd), rt = recvspec
    requests = []
    for p in range(n):
        requests.append(WORLD.Irecv([MPI.memory.frombuffer(rbuf)[rd[p]:], rc[p], rt[p]], p, 77))
    for p in range(n):
        requests.append(WORLD.Isend([MPI.memory.frombuffer(sbuf)[sd[p]:], sc[p], st[p]], p, 77))
    MPI.Request.Waitall(requests)


@pytest.mark.parametrize("seed", range(12))
def test_random_type_maps_move_byte_for_byte_as_mpi_does(acomm, seed):
    rank, n = WORLD.rank, WORLD.size
    sn, sc, sd, st = layout(seed, rank, n, 0)
    rn, rc, rd, rt = layout(seed, rank, n, 1)
    try:
        send = np.random.default_rng([seed, rank]).integers(0, 256, sn, dtype=np.uint8)
        want = np.full(rn, 0xEE, np.uint8)
        alltoallw_by_pairs([send, (sc, sd), st], [want, (rc, rd), rt], n)
        for _ in range(2):  # the datatypes' first use (MPI's), then their second (shmtopo's)
            got = np.full(rn, 0xEE, np.uint8)
            acomm.Alltoallw([send, (sc, sd), st], [got, (rc, rd), rt])
            assert got.tobytes() == want.tobytes(), (seed, [t.decode()[1] for t in st],
                                                     [t.decode()[1] for t in rt])
    finally:
        for t in st + rt:
            t.Free()
    accelerated, delegated = acomm.shm_stats()["Alltoallw"]
    assert accelerated >= 1 and accelerated + delegated == 2


def transpose_types(shape, axis, n):
    """mpi4py-fft's subarray types: `axis` of a C array of `shape` cut in n parts."""
    types = []
    for p in range(n):
        sub, starts = list(shape), [0] * len(shape)
        sub[axis] = (p + 1) * shape[axis] // n - p * shape[axis] // n
        starts[axis] = p * shape[axis] // n
        types.append(MPI.C_DOUBLE_COMPLEX.Create_subarray(shape, sub, starts).Commit())
    return types


@pytest.mark.parametrize("size", [12, 60, 300, 1200])
def test_a_transpose_of_subarrays_is_mpis_and_its_layout_is_made_once(acomm, size):
    """The distributed-FFT transpose: rows to columns, called again and again
    with the same datatypes (their layout is made at their second use). At
    1200 on 2 ranks a block is 600 runs of 9600 bytes: single copy, in more
    than one process_vm_readv."""
    rank, n = WORLD.rank, WORLD.size
    rows = size // n
    a = (np.arange(rows * size) + 1000.0 * rank + 1j).reshape(rows, size)
    ta, tb = transpose_types(a.shape, 1, n), transpose_types((size, rows), 0, n)
    cd = ([1] * n, [0] * n)
    try:
        want = np.zeros((size, rows), complex)
        alltoallw_by_pairs([a, cd, ta], [want, cd, tb], n)
        for _ in range(4):
            got = np.zeros_like(want)
            acomm.Alltoallw([a, cd, ta], [got, cd, tb])
            assert got.tobytes() == want.tobytes()
        layouts = [key for key, (types, _) in datatypes._layouts.items() if types == tuple(ta)]
        assert len(layouts) == 1
    finally:
        for t in ta + tb:
            t.Free()
    assert acomm.shm_stats() == {"Alltoallw": (3, 1)}  # the datatypes' first use goes to MPI


def test_a_plans_later_calls_are_one_c_call(acomm):
    """Once the planner has made a message's layout (the datatypes' second
    use), the same call with the same counts, displacements and datatypes
    runs no Python below Alltoallw on a comm of one node; other buffers, the
    same results."""
    rank, n = WORLD.rank, WORLD.size
    a = np.arange(6.0 * n * n).reshape(n * 2, 3 * n) + 100 * rank
    ta, tb = transpose_types(a.shape, 1, n), transpose_types((3 * n, n * 2), 0, n)
    cd = ([1] * n, [0] * n)
    try:
        for _ in range(2):  # MPI's (the datatypes' first use), then the planner's
            acomm.Alltoallw([a.astype(complex), cd, ta], [np.zeros((3 * n, 2 * n), complex), cd, tb])
        x = (a + 1j).astype(complex)
        got = [np.zeros((3 * n, 2 * n), complex) for _ in range(3)]
        with PythonCalls() as python_calls:
            for out in got:
                acomm.Alltoallw([x, cd, ta], [out, cd, tb])
        if acomm.shm_comm.nnodes == 1:
            assert python_calls == [], python_calls
        want = np.zeros((3 * n, 2 * n), complex)
        alltoallw_by_pairs([x, cd, ta], [want, cd, tb], n)
        for out in got:
            assert out.tobytes() == want.tobytes()
    finally:
        for t in ta + tb:
            t.Free()
    assert acomm.shm_stats() == {"Alltoallw": (4, 1)}


def test_two_threads_on_their_own_comms_while_layouts_come_and_go(acomm):
    """Two threads, each with a comm of its own, call Alltoallw with new
    datatypes again and again: layouts are made and noted (the C path keeps
    the latest 32) while the other thread's calls run on theirs."""
    n, rank = WORLD.size, WORLD.rank
    if MPI.Query_thread() < MPI.THREAD_MULTIPLE:
        pytest.skip("MPI without MPI_THREAD_MULTIPLE")
    comms = [acomm.Dup(), acomm.Dup()]
    for c in comms:  # past each comm's warm-up, on this thread, so that both make their shmtopo comm here
        for _ in range(ALLTOALLW_WARM_UP):
            c.Alltoallw([np.zeros(n), ([1] * n, [8 * p for p in range(n)]), [MPI.DOUBLE] * n],
                        [np.zeros(n), ([1] * n, [8 * p for p in range(n)]), [MPI.DOUBLE] * n])
    failures = []

    def work(c, salt):
        try:
            for i in range(40):
                t = MPI.DOUBLE.Create_vector(2, 1, 2 + (i + salt) % 5).Commit()
                try:
                    send = np.arange(8.0 * n) + 1000 * rank + salt
                    spec = ([1] * n, [64 * p for p in range(n)]), [t] * n
                    rspec = ([2] * n, [16 * p for p in range(n)]), [MPI.DOUBLE] * n
                    # from rank p: its elements 8 * rank and a stride after
                    want = np.array([8 * rank + k * (2 + (i + salt) % 5) + 1000 * p + salt
                                     for p in range(n) for k in range(2)], float)
                    for _ in range(3):  # first use: MPI's; then the planner's; then C's
                        got = np.zeros(2 * n)
                        c.Alltoallw([send, *spec], [got, *rspec])
                        assert got.tolist() == want.tolist(), (salt, i, got, want)
                finally:
                    t.Free()
        except BaseException as exc:  # noqa: BLE001 - reported below, on this rank
            failures.append(exc)
    threads = [threading.Thread(target=work, args=(c, salt)) for salt, c in enumerate(comms)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for c in comms:
        c.Free()
    assert not failures, failures


def test_a_freed_datatypes_handle_made_again_is_flattened_again(acomm):
    """MPI may give a new datatype the handle of one freed: the layout of
    the old one must not serve it."""
    n = WORLD.size
    for stride in (2, 3, 1):
        t = MPI.DOUBLE.Create_vector(2, 1, stride).Commit()
        try:
            send = np.arange(6.0 * n) + 100 * WORLD.rank
            spec = ([1] * n, [6 * 8 * p for p in range(n)]), [t] * n
            rspec = ([2] * n, [16 * p for p in range(n)]), [MPI.DOUBLE] * n
            want = np.zeros(2 * n)
            WORLD.Alltoallw([send, *spec], [want, *rspec])
            for _ in range(2):
                got = np.zeros(2 * n)
                acomm.Alltoallw([send, *spec], [got, *rspec])
                assert got.tobytes() == want.tobytes(), stride
        finally:
            t.Free()
    assert acomm.shm_stats() == {"Alltoallw": (3, 3)}


def test_long_double_padding_moves_as_mpi_moves_it(acomm):
    """MPICH moves 10 of a long double's 16 bytes (all 16 in a contiguous
    run of them); shmtopo moves all 16: the value's bytes are MPI's."""
    n, rank = WORLD.size, WORLD.rank
    strided = MPI.LONG_DOUBLE.Create_vector(2, 1, 2).Commit()
    try:
        send = np.random.default_rng(rank).integers(0, 256, 64 * n, dtype=np.uint8)
        sspec = ([1] * n, [64 * p for p in range(n)]), [strided] * n
        rspec = ([2] * n, [32 * p for p in range(n)]), [MPI.LONG_DOUBLE] * n
        want = np.full(32 * n, 0xEE, np.uint8)
        alltoallw_by_pairs([send, *sspec], [want, *rspec], n)
        for _ in range(2):
            got = np.full(32 * n, 0xEE, np.uint8)
            acomm.Alltoallw([send, *sspec], [got, *rspec])
            # a long double's 10 bytes (MPICH's own calls differ in its padding)
            assert got.reshape(-1, 16)[:, :10].tobytes() == want.reshape(-1, 16)[:, :10].tobytes()
    finally:
        strided.Free()
    assert acomm.shm_stats() == {"Alltoallw": (1, 1)}


def test_a_derived_comm_hands_its_first_calls_to_mpi_without_making_its_shmtopo_comm(acomm):
    """A plan made for a few calls would only pay the set-up: a derived
    comm's first ALLTOALLW_WARM_UP Alltoallw go to MPI, and the comm makes its
    shmtopo comm at the next."""
    n, rank = WORLD.size, WORLD.rank
    spec = ([1] * n, [8 * p for p in range(n)]), [MPI.DOUBLE] * n
    dup = acomm.Dup()
    try:
        for call in range(ALLTOALLW_WARM_UP + 2):
            got = np.zeros(n)
            dup.Alltoallw([np.arange(float(n)) + rank, *spec], [got, *spec])
            assert got.tolist() == [float(rank + r) for r in range(n)]
            if call < ALLTOALLW_WARM_UP:
                with pytest.raises(FreedError, match="made at its first accelerated call"):
                    dup.shm_comm
        assert dup.shm_stats() == {"Alltoallw": (2, ALLTOALLW_WARM_UP)}
    finally:
        dup.Free()


def test_strict_mode_flattens_at_the_first_use_and_skips_the_warm_up(monkeypatch):
    """SHMTOPO_ACCEL_STRICT=1 hands nothing to MPI: a derived datatype's
    first use and a derived comm's first Alltoallw run in shared memory."""
    monkeypatch.setenv("SHMTOPO_ACCEL_STRICT", "1")
    n, rank = WORLD.size, WORLD.rank
    a = shmtopo.accelerate(WORLD, timeout=60)
    t = MPI.DOUBLE.Create_vector(2, 1, 2).Commit()
    try:
        dup = a.Dup()
        send = np.arange(4.0 * n) + 10 * rank
        got, want = np.zeros(2 * n), np.zeros(2 * n)
        spec = ([1] * n, [32 * p for p in range(n)]), [t] * n
        rspec = ([2] * n, [16 * p for p in range(n)]), [MPI.DOUBLE] * n
        dup.Alltoallw([send, *spec], [got, *rspec])
        WORLD.Alltoallw([send, *spec], [want, *rspec])
        assert got.tobytes() == want.tobytes()
        assert dup.shm_stats() == {"Alltoallw": (1, 0)}
        dup.Free()
    finally:
        t.Free()
        a.shm_free()


def test_counts_and_displacements_in_every_form_mpi4py_takes(acomm):
    """Lists, tuples, array('i'), numpy arrays; the two forms of the
    message: MPI's results, in shared memory. One int or one Datatype for
    every rank is no sequence (mpi4py refuses it too): every rank raises."""
    n, rank = WORLD.size, WORLD.rank
    send = np.arange(2.0 * n) + 100 * rank
    want = np.array([100 * p + 2 * rank + k for p in range(n) for k in range(2)], float)
    displs = [16 * p for p in range(n)]
    forms = [([2] * n, displs, [MPI.DOUBLE] * n), (tuple([2] * n), tuple(displs), tuple([MPI.DOUBLE] * n)),
             (array.array("i", [2] * n), array.array("l", displs), [MPI.DOUBLE] * n),
             (np.full(n, 2), np.array(displs), [MPI.DOUBLE] * n)]
    for counts, d, types in forms:
        for spec in ([counts, d, types], [(counts, d), types]):
            got = np.zeros(2 * n)
            acomm.Alltoallw([send, *spec], [got, *spec])
            assert got.tolist() == want.tolist(), (counts, d, types)
    assert acomm.shm_stats() == {"Alltoallw": (2 * len(forms), 0)}
    for counts, d, types in ((2, displs, [MPI.DOUBLE] * n), ([2] * n, displs, MPI.DOUBLE)):
        with pytest.raises(ShmtopoArgumentError, match="expecting a sequence"):
            acomm.Alltoallw([send, counts, d, types], [np.zeros(2 * n), [2] * n, displs, [MPI.DOUBLE] * n])


def test_in_place_sends_each_receive_block_and_replaces_it(acomm):
    """MPI.IN_PLACE: the data sent to rank p is this rank's receive block for
    p, replaced by what p sends; with a strided datatype too (MPI's own
    result, in shared memory from the datatype's second use)."""
    n, rank = WORLD.size, WORLD.rank
    spec = ([1] * n, [8 * p for p in range(n)]), [MPI.DOUBLE] * n
    buf, want = np.arange(float(n)) + 10 * rank, np.zeros(n)
    WORLD.Alltoall(buf, want)
    acomm.Alltoallw(MPI.IN_PLACE, [buf, *spec])
    assert buf.tobytes() == want.tobytes()
    strided = MPI.DOUBLE.Create_vector(2, 1, 3).Commit()
    try:
        sspec = ([1] * n, [48 * p for p in range(n)]), [strided] * n
        start = np.arange(6.0 * n) + 100 * rank
        want = start.copy()
        WORLD.Alltoallw(MPI.IN_PLACE, [want, *sspec])
        for _ in range(2):
            got = start.copy()
            acomm.Alltoallw(MPI.IN_PLACE, [got, *sspec])
            assert got.tobytes() == want.tobytes()
    finally:
        strided.Free()
    assert acomm.shm_stats() == {"Alltoallw": (2, 1)}  # the strided type's first use: MPI's


def bad_alltoallw(acomm, culprit):
    """(what the message says, the call) for misuse by the culprit alone."""
    n = WORLD.size
    send, recv = np.arange(float(n)), np.zeros(n)
    spec = ([1] * n, [8 * p for p in range(n)]), [MPI.DOUBLE] * n
    more = ([2] * n, [0] * n), [MPI.DOUBLE] * n
    pair = MPI.DOUBLE.Create_contiguous(2)  # never committed
    return [
        ("sends 16 bytes", lambda: acomm.Alltoallw([np.arange(2.0 * n), *more] if culprit else [send, *spec],
                                                  [recv, *spec])),
        ("reach bytes", lambda: acomm.Alltoallw([send, ([1] * n, [8 * n] * n), [MPI.DOUBLE] * n] if culprit
                                                else [send, *spec], [recv, *spec])),
        ("integer", lambda: acomm.Alltoallw([send, (["1"] * n if culprit else [1] * n, spec[0][1]), spec[1]],
                                            [recv, *spec])),
        ("DATATYPE_NULL", lambda: acomm.Alltoallw([send, spec[0], [MPI.DATATYPE_NULL] * n] if culprit
                                                  else [send, *spec], [recv, *spec])),
        ("datatype", lambda: acomm.Alltoallw([np.arange(2.0 * n), ([1] * n, [16 * p for p in range(n)]), [pair] * n]
                                             if culprit else [send, *spec], [recv, *spec])),
        ("read-only", lambda: acomm.Alltoallw([send, *spec], [np.frombuffer(bytes(8 * n)) if culprit else recv,
                                                              *spec])),
    ], pair


def test_misuse_on_one_rank_raises_on_every_rank(acomm, request):
    """Each culprit rank in turn (first, middle, last, another node's leader)
    passes a bad argument: every rank raises the same ShmtopoArgumentError,
    naming it, and the comm goes on."""
    n = WORLD.size
    node_size = request.node.callspec.params["acomm"]
    for culprit in culprits(n, node_size):
        calls, pair = bad_alltoallw(acomm, WORLD.rank == culprit)
        try:
            for what, call in calls:
                if what == "sends 16 bytes" and n == 1:
                    continue  # one rank: its own pair is checked alike, named the same
                with pytest.raises(ShmtopoArgumentError, match=what) as info:
                    call()
                assert f"rank {culprit}" in str(info.value), (what, str(info.value))
        finally:
            pair.Free()
    send, recv = np.arange(float(n)) + WORLD.rank, np.zeros(n)
    spec = ([1] * n, [8 * p for p in range(n)]), [MPI.DOUBLE] * n
    acomm.Alltoallw([send, *spec], [recv, *spec])
    assert recv.tolist() == [float(WORLD.rank + r) for r in range(n)]


def test_persistent_and_nonblocking_alltoallw_run_in_shared_memory(acomm):
    n, rank = WORLD.size, WORLD.rank
    t = MPI.DOUBLE.Create_vector(2, 1, 3).Commit()
    try:
        send = np.arange(6.0 * n) + 100 * rank
        spec = ([1] * n, [6 * 8 * p for p in range(n)]), [t] * n
        rspec = ([2] * n, [16 * p for p in range(n)]), [MPI.DOUBLE] * n
        want = np.zeros(2 * n)
        WORLD.Alltoallw([send, *spec], [want, *rspec])
        got = np.zeros(2 * n)
        request = acomm.Alltoallw_init([send, *spec], [got, *rspec])
        for _ in range(2):  # the datatype's first use goes to MPI, the second runs in shared memory
            got[:] = 0
            request.Start()
            request.Wait()
            assert got.tobytes() == want.tobytes()
        request.Free()
        got[:] = 0
        acomm.Ialltoallw([send, *spec], [got, *rspec]).Wait()
        assert got.tobytes() == want.tobytes()
    finally:
        t.Free()
    counted = acomm.shm_stats()
    assert counted["Alltoallw"] == (1, 1) and counted["Ialltoallw"] == (1, 0), counted


def test_the_own_api_takes_runs_without_mpi_datatypes(acomm):
    """Comm.alltoallw: blocks of TypeRuns, no MPI datatype: every second byte
    of this rank's block for each peer, into that peer's contiguous block."""
    shm, n, rank = acomm.shm_comm, WORLD.size, WORLD.rank
    every_other = TypeRuns(np.array([0, 2, 4, 6], np.int64), np.ones(4, np.uint64), 8, 4, 0, 7)
    whole = TypeRuns(np.array([0], np.int64), np.array([4], np.uint64), 4, 4, 0, 4)
    send = (np.arange(8 * n) + 16 * rank).astype(np.uint8)
    recv = np.zeros(4 * n, np.uint8)
    shm.alltoallw(send, [(8 * p, 1, every_other) for p in range(n)], recv, [(4 * p, 1, whole) for p in range(n)])
    assert recv.tolist() == [16 * p + 8 * rank + 2 * i for p in range(n) for i in range(4)]
