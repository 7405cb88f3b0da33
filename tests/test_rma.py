"""shmtopo.accelerate(win): MPI shared windows whose synchronisation and
one-sided calls run in shared memory, checked against the plain MPI window
on the same data (bit for bit), for misuse, and for a real lock.

Runs on every rank of the job (1 to 4 ranks); the windows span COMM_WORLD,
whose ranks share one node here.
"""
import numpy as np
import pytest
from mpi4py import MPI

import shmtopo
from conftest import PythonCalls

WORLD = MPI.COMM_WORLD


def shared_window(nbytes, disp_unit=1, comm=WORLD):
    return MPI.Win.Allocate_shared(nbytes, disp_unit, comm=comm)


def memory(win):
    return np.frombuffer(win.tomemory(), np.uint8)


@pytest.fixture
def awin():
    """An accelerated window of 64 int64 per rank, zeroed."""
    w = shmtopo.accelerate(shared_window(64 * 8, 8))
    memory(w)[:] = 0
    WORLD.Barrier()
    yield w
    w.Free()


# ---- what it is -----------------------------------------------------------------------------

def test_an_accelerated_window_is_an_mpi4py_window(awin):
    n = WORLD.size
    assert isinstance(awin, MPI.Win) and isinstance(awin, shmtopo.AcceleratedWin) and awin.accelerated
    assert awin.Get_attr(MPI.WIN_CREATE_FLAVOR) == MPI.WIN_FLAVOR_SHARED and awin.Get_group().Get_size() == n
    buf, unit = awin.Shared_query(n - 1)
    assert unit == 8 and len(buf) == 64 * 8
    assert shmtopo.accelerate(awin) is awin
    awin.Fence()
    assert awin.shm_stats() == {"Fence": (1, 0)}


def test_plain_calls_run_no_python(awin):
    """The plain calls (numpy arrays, int ranks and displacements, in an
    epoch) are the window's C methods: not one Python function runs for
    them, and their counts are in the stats as the Python path's are."""
    n, rank = WORLD.size, WORLD.rank
    peer = (rank + 1) % n
    one, got, old = np.ones(1, np.int64), np.zeros(1, np.int64), np.zeros(1, np.int64)
    with PythonCalls() as python_calls:
        awin.Fence()
        awin.Put(one, peer, 3)
        awin.Get(got, peer, 4)
        awin.Accumulate(one, peer, 5, MPI.SUM)
        awin.Fence()
        awin.Lock_all()
        awin.Fetch_and_op(one, old, peer, 6, MPI.SUM)
        awin.Compare_and_swap(one, got, old, peer, 7)
        awin.Flush(peer)
        awin.Unlock_all()
        awin.Lock(peer, MPI.LOCK_SHARED)
        awin.Get(got, peer, 3)
        awin.Unlock(peer)
        awin.Fence()
    assert python_calls == [], python_calls
    assert awin.shm_stats() == {"Fence": (3, 0), "Lock": (1, 0), "Unlock": (1, 0), "Lock_all": (1, 0),
                                "Unlock_all": (1, 0), "Flush": (1, 0), "Put": (1, 0), "Get": (2, 0),
                                "Accumulate": (1, 0), "Fetch_and_op": (1, 0), "Compare_and_swap": (1, 0)}
    mine = memory(awin).view(np.int64)
    assert list(mine[3:8]) == [1, 0, 1, 1, 1] and got[0] == 1


def test_accelerated_constructors_and_free():
    """AcceleratedWin.Allocate_shared makes an accelerated window on an
    accelerated comm; Free frees shmtopo's part and MPI's window."""
    acomm = shmtopo.accelerate(WORLD)
    win = shmtopo.AcceleratedWin.Allocate_shared(16, 1, comm=acomm)
    assert win.accelerated
    win.Fence()
    win.Free()
    assert win == MPI.WIN_NULL and not win.accelerated
    acomm.shm_free()


def test_a_window_that_is_not_shared_goes_to_mpi():
    win = shmtopo.accelerate(MPI.Win.Allocate(8 * 4, 8, comm=WORLD))
    assert not win.accelerated
    win.Fence()
    win.Put(np.array([7], np.int64), (WORLD.rank + 1) % WORLD.size, 1)
    win.Fence()
    assert np.frombuffer(win.tomemory(), np.int64)[1] == 7
    assert win.shm_stats() == {"Fence": (0, 2), "Put": (0, 1)}
    win.Free()


def test_strict_refuses_what_would_go_to_mpi(monkeypatch):
    monkeypatch.setenv("SHMTOPO_ACCEL_STRICT", "1")
    win = shmtopo.accelerate(shared_window(64, 8))
    win.Fence()
    with pytest.raises(shmtopo.ShmtopoValueError, match="delegated to MPI"):
        win.Accumulate(np.zeros(1, np.longdouble), 0, 0)  # long double: the core does not reduce it
    with pytest.raises(shmtopo.ShmtopoValueError, match="delegated to MPI"):
        win.Post(MPI.GROUP_EMPTY)
    win.Fence()
    win.Free()


# ---- the same bits as MPI's window -------------------------------------------------------------

TYPES = [np.int64, np.int32, np.uint8, np.float64, np.float32, np.int16]
# element-wise results that do not depend on the order ranks come in
COMMUTATIVE = [("SUM", np.int64), ("BXOR", np.int32), ("MAX", np.int16), ("BOR", np.uint8)]
STRIPE = 256         # bytes each origin rank owns in each target, per half
SPAN = 48            # the most bytes one call moves
COMMON = 64          # bytes every rank accumulates into (commutative ops)


def segment_bytes(rank):
    """Not a multiple of 8: the later segments start misaligned (the guard's path)."""
    return COMMON + 2 * STRIPE * WORLD.size + 3 * rank + 5


def random_epoch(rng, n, half):
    """One epoch's calls for every rank: [(origin rank, call)], each call a
    tuple the runner reads. A rank writes only its own stripe's `half` of
    each target, each call its own bytes of it (MPI leaves the order of a
    Put and another call to the same bytes open), and reads only the other
    half (written in earlier epochs); or it accumulates a commutative op
    into the common area (accumulates to the same bytes are ordered)."""
    calls = []
    for origin in range(n):
        cursor = {}  # per target: the first byte of this rank's half no call has taken
        for _ in range(int(rng.integers(1, 7))):
            target = int(rng.integers(0, n))
            kind = str(rng.choice(["Put", "Get", "Accumulate", "Get_accumulate", "Fetch_and_op",
                                   "Compare_and_swap", "Common"]))
            if kind == "Common":  # each (op, type) has its quarter of the common area
                which = int(rng.integers(0, len(COMMUTATIVE)))
                opname, dtype = COMMUTATIVE[which]
                size, area = np.dtype(dtype).itemsize, COMMON // len(COMMUTATIVE)
                count = int(rng.integers(1, area // size + 1))
                disp = which * area + int(rng.integers(0, area // size - count + 1)) * size
                values = rng.integers(0, 50, count).astype(dtype)
                calls.append((origin, ("Accumulate", target, disp, values, opname)))
                continue
            dtype = TYPES[int(rng.integers(0, len(TYPES)))]
            if kind == "Compare_and_swap" and np.dtype(dtype).kind == "f":
                dtype = np.int32  # MPI permits integer, logical and byte types only
            size = np.dtype(dtype).itemsize
            count = 1 if kind in ("Fetch_and_op", "Compare_and_swap") else int(rng.integers(0, SPAN // size))
            side = half if kind != "Get" else 1 - half
            base = COMMON + (2 * origin + side) * STRIPE
            if kind == "Get":
                disp = base + int(rng.integers(0, STRIPE // size - count + 1)) * size
            else:
                first = cursor.get(target, base)
                disp = first + (-(first - base)) % size + int(rng.integers(0, 2)) * size
                if disp + count * size > base + STRIPE:
                    continue
                cursor[target] = disp + count * size
            values = (rng.integers(-20, 20, count) if np.dtype(dtype).kind != "u"
                      else rng.integers(0, 40, count)).astype(dtype)
            opname = str(rng.choice(["SUM", "MAX", "MIN", "REPLACE", "NO_OP"] if kind != "Accumulate"
                                    else ["SUM", "MAX", "MIN", "REPLACE"]))
            if size <= 2 and opname == "SUM":
                # Open MPI 4.1's AVX op component saturates 8- and 16-bit sums of 32
                # elements or more (255 + 24 gives 255; MPI's C types wrap, as shmtopo does)
                opname = "BXOR"
            if np.dtype(dtype).kind == "f" and opname not in ("REPLACE", "NO_OP"):
                # bytes written as integers read as NaN where MPIs order NaN differently
                # (mpi4py's test_rma covers float ops on floats)
                opname = "REPLACE"
            compare = values.copy()
            calls.append((origin, (kind, target, disp, values, opname, compare)))
    return calls


def run_epoch(win, calls, sync, rank):
    """This rank's calls of the epoch on win, under the sync mode; returns
    what it read (Get, fetched values) in order."""
    got = []
    if sync == "fence":
        win.Fence()
    elif sync == "lock_all":
        win.Lock_all()
    mine = [c for origin, c in calls if origin == rank]
    for call in mine:
        kind, target, disp = call[:3]
        if sync == "lock":
            win.Lock(target, MPI.LOCK_SHARED)
        values, op = call[3], getattr(MPI, call[4])
        if kind == "Put":
            win.Put(values, target, disp)
        elif kind == "Get":
            out = np.full_like(values, 99)
            win.Get(out, target, disp)
            got.append(out)
        elif kind == "Accumulate":
            win.Accumulate(values, target, disp, op)
        elif kind == "Get_accumulate":
            out = np.full_like(values, 99)
            win.Get_accumulate(values, out, target, disp, op)
            got.append(out)
        elif kind == "Fetch_and_op":
            out = np.full_like(values, 99)
            win.Fetch_and_op(values, out, target, disp, op)
            got.append(out)
        elif kind == "Compare_and_swap":
            out = np.full_like(values, 99)
            win.Compare_and_swap(values + 1, call[5], out, target, disp)
            got.append(out)
        if sync == "lock":
            win.Unlock(target)
        elif sync == "lock_all" and len(got) % 2:
            win.Flush(target)
    if sync == "fence":
        win.Fence()
    elif sync == "lock_all":
        win.Unlock_all()
    WORLD.Barrier()
    return got


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_epochs_match_mpi_bit_for_bit(seed):
    """Random calls (types, ops, targets, displacements, counts; misaligned
    segments) in fence, lock_all and lock epochs: the accelerated window
    ends each epoch with the same bytes as MPI's own window given the same
    calls, and every read returns the same bits."""
    rank, n = WORLD.rank, WORLD.size
    plain = shared_window(segment_bytes(rank))
    fast = shmtopo.accelerate(shared_window(segment_bytes(rank)))
    rng_data = np.random.default_rng(100 + seed * 7 + rank)
    start = rng_data.integers(0, 256, segment_bytes(rank)).astype(np.uint8)
    memory(plain)[:] = start
    memory(fast)[:] = start
    WORLD.Barrier()
    rng = np.random.default_rng(seed)  # the same program on every rank
    for epoch in range(12):
        calls = random_epoch(rng, n, epoch % 2)
        sync = ["fence", "lock_all", "lock"][epoch % 3]
        want = run_epoch(plain, calls, sync, rank)
        got = run_epoch(fast, calls, sync, rank)
        assert len(got) == len(want)
        for i, (g, w) in enumerate(zip(got, want)):
            assert g.tobytes() == w.tobytes(), f"epoch {epoch} ({sync}) read {i}: {g} != {w}"
        differ = np.nonzero(memory(fast) != memory(plain))[0]
        assert differ.size == 0, (f"epoch {epoch} ({sync}): memory differs at bytes {differ[:8]}: "
                                  f"{memory(fast)[differ[:8]]} != {memory(plain)[differ[:8]]}")
        WORLD.Barrier()  # a lock epoch starts without a collective: nobody writes while others compare
    stats = fast.shm_stats()
    assert all(d == 0 for _, d in stats.values()), stats
    fast.Free()
    plain.Free()


# ---- a real lock -------------------------------------------------------------------------------

def test_exclusive_lock_excludes(awin):
    """Every rank adds 1 to rank 0's counter by a Get, then a Put, under an
    exclusive lock, many times: no increment is lost."""
    n, rounds = WORLD.size, 300
    one = np.zeros(1, np.int64)
    for _ in range(rounds):
        awin.Lock(0, MPI.LOCK_EXCLUSIVE)
        awin.Get(one, 0, 3)
        awin.Flush(0)
        one += 1
        awin.Put(one, 0, 3)
        awin.Unlock(0)
    WORLD.Barrier()
    awin.Lock(0, MPI.LOCK_SHARED)
    awin.Get(one, 0, 3)
    awin.Unlock(0)
    assert one[0] == n * rounds


def test_shared_holders_never_see_a_writer_half_way(awin):
    """Even ranks write two words of rank 0 under exclusive locks (a Put of
    one, then of the other), odd ranks read both under shared locks and
    Lock_all: a reader never sees them differ, and no write is lost."""
    n, rounds = WORLD.size, 1000
    pair, seen = np.zeros(1, np.int64), np.zeros(2, np.int64)
    torn = 0
    for i in range(rounds):
        if WORLD.rank % 2 == 0:
            awin.Lock(0, MPI.LOCK_EXCLUSIVE)
            awin.Get(pair, 0, 10)
            pair += 1
            awin.Put(pair, 0, 10)
            for _ in range(5):  # a wider window for a reader that should not be there
                awin.Flush(0)
            awin.Put(pair, 0, 11)
            awin.Unlock(0)
        elif i % 2:
            awin.Lock(0, MPI.LOCK_SHARED)
            awin.Get(seen, 0, 10)
            awin.Unlock(0)
            torn += seen[0] != seen[1]
        else:
            awin.Lock_all()
            awin.Get(seen, 0, 10)
            awin.Unlock_all()
            torn += seen[0] != seen[1]
    WORLD.Barrier()
    awin.Lock(0, MPI.LOCK_SHARED)
    awin.Get(seen, 0, 10)
    awin.Unlock(0)
    assert torn == 0
    assert list(seen) == [rounds * ((n + 1) // 2)] * 2


def test_fetch_and_op_counts_every_increment(awin):
    """The shared-window counter of nxtval: every fetched value is seen once."""
    n, rounds = WORLD.size, 200
    seen = []
    got = np.zeros(1, np.int64)
    awin.Lock_all()
    for _ in range(rounds):
        awin.Fetch_and_op(np.ones(1, np.int64), got, n - 1, 5)
        awin.Flush(n - 1)
        seen.append(int(got[0]))
    awin.Unlock_all()
    everyone = sorted(v for mine in WORLD.allgather(seen) for v in mine)
    assert everyone == list(range(n * rounds))


# ---- misuse: MPI's error class on the rank that misuses, nothing written ---------------------------

def raises_mpi(error_class, call):
    with pytest.raises(MPI.Exception) as info:
        call()
    assert info.value.Get_error_class() == error_class, str(info.value)
    return info.value


def test_misuse_raises_mpis_error_and_writes_nothing(awin):
    rank, n = WORLD.rank, WORLD.size
    before = memory(awin).tobytes()
    x = np.ones(2, np.int64)
    raises_mpi(MPI.ERR_RMA_SYNC, lambda: awin.Put(x, 0, 0))  # no epoch
    raises_mpi(MPI.ERR_RMA_SYNC, lambda: awin.Unlock(0))
    raises_mpi(MPI.ERR_RMA_SYNC, lambda: awin.Flush(0))
    raises_mpi(MPI.ERR_RMA_SYNC, awin.Unlock_all)
    awin.Lock(n - 1)
    raises_mpi(MPI.ERR_RMA_SYNC, lambda: awin.Lock(n - 1))
    raises_mpi(MPI.ERR_RMA_SYNC, lambda: awin.Lock_all())
    raises_mpi(MPI.ERR_RANK, lambda: awin.Put(x, n))
    raises_mpi(MPI.ERR_RANK, lambda: awin.Get(x, -5))
    raises_mpi(MPI.ERR_RMA_RANGE, lambda: awin.Put(x, n - 1, 63))    # 2 int64 from the last one on
    raises_mpi(MPI.ERR_RMA_RANGE, lambda: awin.Get(x, n - 1, -1))
    raises_mpi(MPI.ERR_RMA_RANGE, lambda: awin.Accumulate(x, n - 1, 10**9))
    raises_mpi(MPI.ERR_TYPE, lambda: awin.Accumulate(x, n - 1, (0, 2, MPI.INT)))
    raises_mpi(MPI.ERR_TYPE, lambda: awin.Put(x, n - 1, (0, 3, MPI.INT64_T)))
    with pytest.raises(ValueError, match="single element"):
        awin.Fetch_and_op(x, np.zeros(2, np.int64), n - 1)
    with pytest.raises(ValueError, match="mismatch"):
        awin.Compare_and_swap(x[:1], np.zeros(1, np.int32), np.zeros(1, np.int64), n - 1)
    f = np.ones(1)
    raises_mpi(MPI.ERR_TYPE, lambda: awin.Compare_and_swap(f, f, np.zeros(1), n - 1))  # not an integer type
    raises_mpi(MPI.ERR_LOCKTYPE, lambda: awin.Lock(0, 12345))
    awin.Unlock(n - 1)
    raises_mpi(MPI.ERR_RMA_SYNC, lambda: awin.Rput(x, 0))  # request-based: passive epochs only
    WORLD.Barrier()
    assert memory(awin).tobytes() == before
    awin.Fence()  # the window still works
    awin.Put(np.array([rank], np.int64), (rank + 1) % n, 0)
    awin.Fence()
    assert np.frombuffer(awin.tomemory(), np.int64)[0] == (rank - 1) % n


def test_misuse_with_slices_of_a_large_buffer(awin):
    """Buffers as real programs pass them: [buf, count, type] slices of one
    large preallocated buffer; a count past the buffer is refused there."""
    n = WORLD.size
    big = bytearray(1 << 20)
    view = memoryview(big)
    awin.Lock_all()
    awin.Put([view[4096:4096 + 16], 2, MPI.INT64_T], n - 1, 2)
    awin.Get([view[8192:], 2, MPI.INT64_T], n - 1, 2)
    with pytest.raises(ValueError):
        awin.Get([view[-8:], 2, MPI.INT64_T], n - 1, 2)
    awin.Unlock_all()
    assert bytes(view[8192:8208]) == bytes(view[4096:4112])


def test_a_bad_fence_raises_on_every_rank():
    """One rank (the middle one) passes an assertion that is not MPI's: it
    raises MPI_ERR_ASSERT, and every other rank's Fence raises instead of
    waiting for it."""
    rank, n = WORLD.rank, WORLD.size
    win = shmtopo.accelerate(shared_window(64))
    culprit = n // 2
    if rank == culprit:
        raises_mpi(MPI.ERR_ASSERT, lambda: win.Fence(1 << 30))
    elif n > 1:
        with pytest.raises(shmtopo.ShmtopoError, match=f"rank {culprit}"):
            win.Fence()
    win.Free()


def test_a_second_threads_free_is_refused_and_changes_nothing(awin):
    """While a thread of rank 0 waits in Fence, its other thread's shm_free()
    raises EBUSY and leaves the window accelerated: the waiting Fence, the
    next Fence and a lock all still run in shared memory on every rank."""
    import errno
    import threading

    if WORLD.size < 2:
        pytest.skip("needs a peer to wait for")
    refused = None
    if WORLD.rank == 0:
        inside = threading.Thread(target=awin.Fence)
        inside.start()
        while not inside.is_alive():
            pass
        import time
        time.sleep(0.2)  # the Fence waits for rank 1 by now
        try:
            awin.shm_free()
        except shmtopo.ShmtopoError as exc:
            refused = exc.errno
        WORLD.send(None, dest=1)  # now rank 1 joins the Fence
        inside.join(30)
        assert not inside.is_alive()
    elif WORLD.rank == 1:
        WORLD.recv(source=0)
        awin.Fence()
    else:
        awin.Fence()
    assert WORLD.bcast(refused, root=0) == errno.EBUSY
    assert awin.accelerated
    awin.Fence()
    awin.Lock(0)
    awin.Unlock(0)
    awin.Fence()
    assert awin.shm_stats()["Fence"] == (3, 0) and awin.shm_stats()["Lock"] == (1, 0)


@pytest.mark.serial
@pytest.mark.parametrize("how", ["keyword", "variable"])
def test_accelerating_a_window_keeps_the_timeout(how):
    """A rank that never comes: accelerate(win) raises ShmtopoTimeoutError
    after the timeout instead of waiting in MPI for the comm it makes."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    from conftest import CLEAN_ENV, mpiexec_command
    from conftest import keep_going_flags

    script = Path(__file__).resolve().parent / "scripts" / "accelerate_win_alone.py"
    proc = subprocess.run(mpiexec_command() + keep_going_flags() + ["-n", "2", sys.executable, str(script), how],
                          capture_output=True, text=True, timeout=120, env=CLEAN_ENV)
    assert re.findall(r"RESULT (\S+)", proc.stdout) == ["ShmtopoTimeoutError"], proc.stdout + proc.stderr


def test_copies_are_the_same_accelerated_window(awin):
    import copy

    awin.Lock(0)
    for made in (copy.copy(awin), copy.deepcopy(awin), type(awin)(awin)):
        assert type(made) is type(awin) and made.accelerated and repr(made) == repr(awin)
    copy.copy(awin).Unlock(0)  # the lock taken through the window is the copy's to release too
    for made in (copy.copy(awin), copy.deepcopy(awin), type(awin)(awin)):
        made.Fence()
    assert awin.shm_stats()["Fence"] == (3, 0) and awin.shm_stats()["Unlock"] == (1, 0)


def test_strict_values_of_a_window_are_read_and_agreed_as_a_comms(monkeypatch):
    """SHMTOPO_ACCEL_STRICT is read by one rule for comms and windows: a value
    other than 0 or 1 raises, and one that differs between ranks raises on
    every rank (the window is then MPI's as it was)."""
    monkeypatch.setenv("SHMTOPO_ACCEL_STRICT", "yes")
    win = shared_window(64)
    with pytest.raises(shmtopo.ShmtopoValueError, match="expected 0 or 1"):
        shmtopo.accelerate(win)
    if WORLD.size > 1:
        monkeypatch.setenv("SHMTOPO_ACCEL_STRICT", "1" if WORLD.rank == 0 else "0")
        with pytest.raises(shmtopo.ShmtopoValueError, match="same on every rank"):
            shmtopo.accelerate(win)
    monkeypatch.setenv("SHMTOPO_ACCEL_STRICT", "1")
    awin = shmtopo.accelerate(win)
    assert awin.accelerated
    with pytest.raises(shmtopo.ShmtopoValueError, match="delegated to MPI"):
        awin.Post(MPI.GROUP_EMPTY)  # strict: what would go to MPI raises
    awin.Free()
