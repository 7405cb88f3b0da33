"""Single copy (native/single_copy.c): collectives on large private arrays
copy straight between ranks' arrays with process_vm_readv/writev instead of
through the scratch buffers. The results must be those of mpi4py with it on
and off; whether it is on is probed and agreed at comm creation
(SHMTOPO_SINGLE_COPY); a copy that fails, or a peer that dies while others
copy its memory, must end in an error on every rank."""
import ctypes
import errno
import mmap
import os
import signal
import threading
import time

import numpy as np
import pytest
from mpi4py import MPI

import ranks
import shmtopo
from shmtopo.coll.args import type_runs

SC_MIN = 16 * 1024          # native/coll.c SC_MIN: single copy from this many bytes on,
SC_MIN_OVERSUBSCRIBED = 4 << 20  # and from this many with more ranks than CPUs
SC_MIN_REDUCE = 128 << 10        # SC_MIN_REDUCE: reduce from this many
SC_MIN_ALLREDUCE = 64 << 10      # SC_MIN_ALLREDUCE: allreduce from this many
SC_MIN_BCAST = 32 << 10          # SC_MIN_BCAST: bcast from this many
SC_ROUND = 32 << 20         # native/coll.c SC_ROUND: bytes per round of copying
WORLD = MPI.COMM_WORLD
PATH_KINDS = ("bcast", "allgather", "allreduce", "reduce")  # collectives with a single-copy path


def comm_with(monkeypatch, setting):
    """A comm over the job with SHMTOPO_SINGLE_COPY=setting, or a skip on
    every rank where single copy is required and this machine forbids it
    (creation then fails alike on every rank)."""
    monkeypatch.setenv("SHMTOPO_SINGLE_COPY", setting)
    try:
        return shmtopo.Comm.from_mpi(WORLD)
    except shmtopo.BackendUnavailableError as exc:
        pytest.skip(f"single copy unavailable here: {exc}")


def roots():
    return sorted({0, WORLD.size // 2, WORLD.size - 1})


def payload(root, nbytes, dtype):
    rng = np.random.default_rng(nbytes * 7 + root)
    count = nbytes // np.dtype(dtype).itemsize
    return rng.integers(0, 250, count).astype(dtype)


# ---- results, with single copy on and off ------------------------------------

@pytest.mark.parametrize("setting", ["0", "1"])
def test_bcast_matches_mpi4py(monkeypatch, setting):
    """Sizes around the threshold, odd sizes, several parts per rank; roots
    first, middle and last; in place and into out=."""
    with comm_with(monkeypatch, setting) as comm:
        assert comm.single_copy == (None if setting == "0" else "cma")
        cases = [(SC_MIN - 1, np.uint8), (SC_MIN, np.uint8), (SC_MIN + 1, np.uint8),
                 (SC_MIN - 8, np.float64), (SC_MIN + 8, np.float64), (4 * SC_MIN + 4095, np.uint8),
                 (SC_MIN_BCAST - 1, np.uint8), (SC_MIN_BCAST, np.uint8), (SC_MIN_BCAST + 8, np.float64),
                 ((3 << 20) + 5, np.uint8), (1 << 20, np.int32),
                 (SC_MIN_OVERSUBSCRIBED - 1, np.uint8), (SC_MIN_OVERSUBSCRIBED + 4097, np.uint8)]
        for nbytes, dtype in cases:
            for root in roots():
                expected = payload(root, nbytes, dtype) if WORLD.rank == root else \
                    np.zeros(nbytes // np.dtype(dtype).itemsize, dtype)
                WORLD.Bcast(expected, root=root)
                mine = payload(root, nbytes, dtype) if comm.rank == root else np.full_like(expected, 7)
                got = comm.bcast(mine, root=root, out=mine)
                assert got is mine
                np.testing.assert_array_equal(mine, expected, err_msg=f"{nbytes} B {dtype} root {root}")
                out = np.empty_like(expected)
                comm.bcast(payload(root, nbytes, dtype), root=root, out=out)
                np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("setting", ["0", "1"])
def test_bcast_over_several_rounds(monkeypatch, setting):
    """More than one round of copying (a step between rounds), last root."""
    with comm_with(monkeypatch, setting) as comm:
        nbytes, root = SC_ROUND + 3 * 4096 + 3, comm.size - 1
        expected = payload(root, nbytes, np.uint8)
        mine = expected.copy() if comm.rank == root else np.zeros_like(expected)
        comm.bcast(mine, root=root, out=mine)
        np.testing.assert_array_equal(mine, expected)


def sizes_around_thresholds(itemsize):
    """Element counts just below, at and above both thresholds, and odd ones."""
    counts = set()
    for threshold in (SC_MIN, SC_MIN_REDUCE, SC_MIN_ALLREDUCE, SC_MIN_OVERSUBSCRIBED):
        at = threshold // itemsize
        counts |= {at - 1, at, at + 1}
    return sorted(counts | {3 * SC_MIN // itemsize + 7, (1 << 20) // itemsize + 3})


@pytest.mark.parametrize("setting", ["0", "1"])
def test_allgather_matches_mpi4py(monkeypatch, setting):
    with comm_with(monkeypatch, setting) as comm:
        for dtype in (np.uint8, np.float64):
            for count in sizes_around_thresholds(np.dtype(dtype).itemsize):
                mine = payload(comm.rank, count * np.dtype(dtype).itemsize, dtype)
                expected = np.empty((comm.size, count), dtype)
                WORLD.Allgather(mine, expected)
                np.testing.assert_array_equal(comm.allgather(mine), expected, err_msg=f"{count} {dtype}")
                inplace = np.zeros((comm.size, count), dtype)
                inplace[comm.rank] = mine
                comm.allgather(inplace[comm.rank], out=inplace)
                np.testing.assert_array_equal(inplace, expected)


MPI_OPS = {"sum": MPI.SUM, "prod": MPI.PROD, "min": MPI.MIN, "max": MPI.MAX, "bxor": MPI.BXOR}


def reduce_input(rank, count, dtype):
    rng = np.random.default_rng(31 * rank + count)
    if np.dtype(dtype).kind == "f":
        return (rng.random(count) * 4 - 2).astype(dtype)
    return rng.integers(0, 4, count).astype(dtype)


def folded(op, inputs):
    """The reduction in rank order, as shmtopo folds it (bit for bit)."""
    ufunc = {"sum": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum,
             "bxor": np.bitwise_xor}[op]
    out = inputs[0].copy()
    for x in inputs[1:]:
        out = ufunc(out, x).astype(out.dtype)
    return out


@pytest.mark.parametrize("setting", ["0", "1"])
def test_allreduce_and_reduce_match(monkeypatch, setting):
    """Against the rank-order fold (bit for bit, floats too) and mpi4py's
    result (integers exactly, floats to rounding); roots first, middle and
    last; in place; an algorithm asked for by name keeps the scratch path."""
    with comm_with(monkeypatch, setting) as comm:
        for dtype, ops in ((np.float64, ("sum", "max")), (np.int32, ("sum", "bxor")), (np.float32, ("prod",))):
            for count in sizes_around_thresholds(np.dtype(dtype).itemsize):
                inputs = [reduce_input(r, count, dtype) for r in range(comm.size)]
                mine = inputs[comm.rank]
                for op in ops:
                    expected = folded(op, inputs)
                    from_mpi = np.empty_like(mine)
                    WORLD.Allreduce(mine, from_mpi, op=MPI_OPS[op])
                    got = comm.allreduce(mine, op)
                    np.testing.assert_array_equal(got, expected, err_msg=f"{op} {count} {dtype}")
                    if np.dtype(dtype).kind == "f":
                        np.testing.assert_allclose(got, from_mpi, rtol=1e-5)
                    else:
                        np.testing.assert_array_equal(got, from_mpi)
                    inplace = mine.copy()
                    comm.allreduce(inplace, op, out=inplace)
                    np.testing.assert_array_equal(inplace, expected)
                    np.testing.assert_array_equal(comm.allreduce(mine, op, algorithm="rsag"), expected)
                    for root in roots():
                        got = comm.reduce(mine, op, root=root)
                        if comm.rank == root:
                            np.testing.assert_array_equal(got, expected, err_msg=f"reduce {op} root {root}")
                        else:
                            assert got is None
                        inplace = mine.copy()
                        comm.reduce(inplace, op, root=root, out=inplace if comm.rank == root else None)
                        if comm.rank == root:
                            np.testing.assert_array_equal(inplace, expected)


@pytest.mark.parametrize("setting", ["0", "1"])
def test_reductions_over_several_rounds(monkeypatch, setting):
    with comm_with(monkeypatch, setting) as comm:
        count = SC_ROUND // 8 + 4096 + 3
        inputs = [reduce_input(r, count, np.float64) for r in range(comm.size)]
        expected = folded("sum", inputs)
        np.testing.assert_array_equal(comm.allreduce(inputs[comm.rank]), expected)
        got = comm.reduce(inputs[comm.rank], root=comm.size - 1)
        if comm.rank == comm.size - 1:
            np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("setting", ["0", "1"])
def test_allgather_over_several_rounds(monkeypatch, setting):
    with comm_with(monkeypatch, setting) as comm:
        count = SC_ROUND + 4096 + 3
        mine = np.full(count, comm.rank + 1, np.uint8)
        mine[::4097] = 200 - comm.rank
        got = comm.allgather(mine)
        for r in range(comm.size):
            assert (got[r][::4097] == 200 - r).all() and np.count_nonzero(got[r] == r + 1) == count - len(mine[::4097])


@pytest.mark.parametrize("setting", ["0", "1"])
def test_gather_over_several_rounds_and_in_place(monkeypatch, setting):
    """A gather's ranks write their blocks into the root's output (single
    copy) round by round; the root's own block stays where it is in place."""
    with comm_with(monkeypatch, setting) as comm:
        count, root = SC_ROUND + 4096 + 3, comm.size - 1
        mine = np.full(count, comm.rank + 1, np.uint8)
        mine[::4097] = 200 - comm.rank
        out = np.zeros((comm.size, count), np.uint8) if comm.rank == root else None
        for in_place in (False, True):
            if in_place and comm.rank == root:
                out[:] = 0
                out[root] = mine
            got = comm.gather(None if in_place and comm.rank == root else mine, root, out=out)
            if comm.rank != root:
                assert got is None
                continue
            assert got is out
            for r in range(comm.size):
                assert (out[r][::4097] == 200 - r).all() and np.count_nonzero(out[r] == r + 1) == count - len(mine[::4097])


def test_single_copy_is_the_same_on_every_rank(monkeypatch):
    with comm_with(monkeypatch, "auto") as comm:
        everyone = WORLD.allgather(comm.single_copy)
        assert len(set(everyone)) == 1, everyone


# ---- the setting and the capability are agreed --------------------------------

def _inner_comm(comm, setting):
    """A second comm over the same transport, made with this rank's setting
    (the first one, made by ranks.py, had none)."""
    if setting is None:
        os.environ.pop("SHMTOPO_SINGLE_COPY", None)
    else:
        os.environ["SHMTOPO_SINGLE_COPY"] = setting
    return shmtopo.Comm.from_callbacks(comm.size, comm.rank, allgather=ranks.CALLBACKS.allgather,
                                       barrier=ranks.CALLBACKS.barrier)


def setting_on_one_rank(comm, odd_rank, odd, others):
    try:
        inner = _inner_comm(comm, odd if comm.rank == odd_rank else others)
    except shmtopo.ShmtopoError as exc:
        return type(exc).__name__, str(exc), exc.rank
    inner.free()
    return "created", "", None


@pytest.mark.no_mpi
@pytest.mark.serial
@pytest.mark.parametrize("odd_rank", [0, 1, 2])
def test_setting_that_differs_fails_every_rank(odd_rank):
    out = ranks.run(3, setting_on_one_rank, odd_rank, "0", None)
    assert len(out) == 3, out
    results = {value for status, value in out.values()}
    assert len(results) == 1, out  # the same error, word for word, on every rank
    name, message, rank = results.pop()
    assert name == "ShmtopoValueError", out
    assert "SHMTOPO_SINGLE_COPY differs between ranks" in message and rank == odd_rank, message


@pytest.mark.no_mpi
@pytest.mark.serial
@pytest.mark.parametrize("value", ["yes", "2", "", " 1", "AUTO"])
def test_setting_is_parsed_strictly(value):
    out = ranks.run(2, setting_on_one_rank, 1, value, "auto")
    results = {value for status, value in out.values()}
    assert len(results) == 1, out
    name, message, rank = results.pop()
    if value in ("", "AUTO"):  # unset, and auto in any case, are auto
        assert name == "created", out
    else:
        assert name == "ShmtopoValueError" and rank == 1, out
        assert f"SHMTOPO_SINGLE_COPY={value}: expected auto" in message, message


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def cannot_reach_peers():
    """Make this process unable to read its peers' memory, and them unable to
    read its own: drop CAP_SYS_PTRACE (as root, a reader needs every
    capability its target has) and turn off dumpable (other users of the same
    uid then need CAP_SYS_PTRACE to read it)."""
    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                    ("inheritable", ctypes.c_uint32)]

    libc = _libc()
    header, data = Header(0x20080522, 0), (Data * 2)()
    if libc.syscall(125, ctypes.byref(header), data) == 0:  # capget
        bit = 1 << 19  # CAP_SYS_PTRACE, in the first of the two words
        data[0].effective &= ~bit
        data[0].permitted &= ~bit
        data[0].inheritable &= ~bit
        libc.syscall(126, ctypes.byref(header), data)  # capset
    libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0


def one_rank_cannot_copy(comm, odd_rank, setting):
    if comm.rank == odd_rank:
        cannot_reach_peers()
    try:
        inner = _inner_comm(comm, setting)
    except shmtopo.ShmtopoError as exc:
        return type(exc).__name__, str(exc), exc.rank
    with inner:
        expected = np.arange(1 << 18, dtype=np.float64)
        mine = expected.copy() if inner.rank == 0 else np.zeros_like(expected)
        inner.bcast(mine, root=0, out=mine)
        return "created", inner.single_copy, bool(np.array_equal(mine, expected))


@pytest.mark.no_mpi
@pytest.mark.serial
@pytest.mark.parametrize("odd_rank", [0, 2])
def test_a_rank_that_cannot_copy_turns_it_off_everywhere(odd_rank):
    out = ranks.run(3, one_rank_cannot_copy, odd_rank, "auto")
    assert out == {r: ("ok", ("created", None, True)) for r in range(3)}, out


@pytest.mark.no_mpi
@pytest.mark.serial
@pytest.mark.parametrize("odd_rank", [0, 2])
def test_required_single_copy_fails_every_rank_where_a_rank_cannot(odd_rank):
    out = ranks.run(3, one_rank_cannot_copy, odd_rank, "1")
    results = {value for status, value in out.values()}
    assert len(out) == 3 and len(results) == 1, out
    name, message, rank = results.pop()
    assert name == "BackendUnavailableError", out
    # As root the odd rank, without CAP_SYS_PTRACE, cannot read its peers; as
    # another user its peers cannot read it (it is not dumpable): either way
    # the message names it, and who found it out.
    reporter = int(message.split(":")[0].split()[1])
    assert message.startswith(f"rank {reporter}: SHMTOPO_SINGLE_COPY=1, but") and rank == reporter, message
    assert reporter == odd_rank or f"of rank {odd_rank} (pid" in message, message
    assert "Operation not permitted" in message, message


def path_straddles(comm, what):
    """Rank 0 passes a count that takes single copy, rank 1 one that does
    not: the path is part of the signature, so both raise the mismatch,
    naming it, instead of running different protocols."""
    try:
        inner = _inner_comm(comm, "1")
    except shmtopo.BackendUnavailableError:
        return "unavailable", ""
    with inner:
        a = np.ones((5 << 20) if inner.rank == 0 else 1000, np.uint8)
        try:
            if what == "bcast":
                inner.bcast(a, root=0, out=a)
            elif what == "allgather":
                inner.allgather(a)
            elif what == "allreduce":
                inner.allreduce(a)
            else:
                inner.reduce(a, root=1)
        except shmtopo.ShmtopoValueError as exc:
            return "ShmtopoValueError", str(exc)
    return "returned", ""


@pytest.mark.no_mpi
@pytest.mark.serial
@pytest.mark.parametrize("what", PATH_KINDS)
def test_the_path_is_agreed(what):
    out = ranks.run(2, path_straddles, what)
    results = {value for status, value in out.values()}
    assert len(out) == 2 and len(results) == 1, out
    name, message = results.pop()
    if name == "unavailable":
        pytest.skip("single copy unavailable here")
    assert name == "ShmtopoValueError" and f"rank 1 called {what}(count 1000, uint8" in message, message
    assert f"but rank 0 called {what}(count {5 << 20}, uint8" in message and "single copy)" in message, message


# ---- failures in the middle of copying -----------------------------------------

def _call(comm, what, a):
    if what == "bcast":
        comm.bcast(a, root=0, out=a)
    elif what == "allreduce":
        return comm.allreduce(a)
    elif what == "alltoallw":  # a's blocks, one run each, read straight from it by each peer
        block = a.nbytes // comm.size
        whole = type_runs([0], [block], block)
        out = np.empty_like(a)
        comm.alltoallw(a, [(p * block, 1, whole) for p in range(comm.size)], out,
                       [(p * block, 1, whole) for p in range(comm.size)])
        return out
    else:
        return comm.reduce(a, root=comm.size - 1)


def tail_unreadable(comm, nbytes, what):
    """Rank 0's array ends in pages nobody may read (PROT_NONE), in a part
    only its peers copy (bcast: the root's array; allreduce, reduce: the
    slices other ranks reduce): those copies fail (EFAULT), and must fail the
    call on every rank, not leave a wrong result; the comm stays usable."""
    good = np.arange(nbytes // 8, dtype=np.float64)
    try:
        inner = _inner_comm(comm, "1")
    except shmtopo.BackendUnavailableError:
        return "unavailable", "", None
    with inner:
        if inner.rank == 0:
            region = mmap.mmap(-1, nbytes)
            a = np.frombuffer(region, dtype=np.float64)
            a[:] = good
            address = ctypes.addressof(ctypes.c_char.from_buffer(region))
            assert _libc().mprotect(ctypes.c_void_p(address + nbytes // 2), nbytes // 2, 0) == 0
        else:
            a = good.copy() if what != "bcast" else np.zeros_like(good)
        try:
            _call(inner, what, a)
            result = "returned", "", None
        except shmtopo.ShmtopoError as exc:
            result = type(exc).__name__, f"{exc} [errno {exc.errno}]", exc.rank
        again = good.copy() if inner.rank == 0 or what != "bcast" else np.zeros_like(good)
        got = _call(inner, what, again)
        expected = good if what == "bcast" else good * inner.size
        ok = np.array_equal(again if what == "bcast" else got, expected) \
            if what != "reduce" or inner.rank == inner.size - 1 else got is None
        if what == "alltoallw":  # every rank's block for this one: the same bytes of `good`
            block = good.nbytes // inner.size
            mine = good.view(np.uint8)[inner.rank * block:(inner.rank + 1) * block]
            ok = got.view(np.uint8)[:inner.size * block].tobytes() == mine.tobytes() * inner.size
        return result + (bool(ok),)


@pytest.mark.no_mpi
@pytest.mark.serial
@pytest.mark.parametrize("what", ["bcast", "allreduce", "reduce", "alltoallw"])
@pytest.mark.parametrize("size", [2, 3])
def test_failed_copy_fails_every_rank(size, what):
    out = ranks.run(size, tail_unreadable, 2 * SC_MIN_OVERSUBSCRIBED, what)
    assert len(out) == size, out
    if out[0][1][0] == "unavailable":
        pytest.skip("single copy unavailable here")
    results = {value for status, value in out.values()}
    assert len(results) == 1, out
    name, message, rank, usable_after = results.pop()
    assert name == "ShmtopoOSError" and f"[errno {errno.EFAULT}]" in message, out
    assert "Bad address" in message and usable_after, out


def bcast_until_killed(comm, victim, nbytes, what="bcast"):
    """Large bcasts (or allreduces) in a loop (most of each call is copying)
    until the victim kills itself from a thread, at a moment its main thread
    is inside one; the survivors report what they raised and how long after
    their last completed call."""
    try:
        inner = _inner_comm(comm, "1")
    except shmtopo.BackendUnavailableError:
        return "unavailable", None, 0.0
    a = np.full(nbytes // 8, inner.rank, np.float64)
    if inner.rank == victim:
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGKILL)).start()
    last = time.monotonic()
    try:
        for _ in range(100000):
            _call(inner, what, a)
            last = time.monotonic()
    except shmtopo.ShmtopoError as exc:
        return type(exc).__name__, exc.rank, time.monotonic() - last
    return "no error", None, 0.0


@pytest.mark.no_mpi
@pytest.mark.serial
@pytest.mark.parametrize("what", ["bcast", "allreduce", "alltoallw"])
@pytest.mark.parametrize("victim", [0, 1, 2])  # bcast: the root, whose memory is read; receivers
def test_peer_killed_mid_copy_fails_every_survivor(victim, what):
    """Every survivor names the death, also one whose copy from a fellow
    survivor failed because that one had raised and exited first."""
    before = ranks.shm_files()
    out = ranks.run(3, bcast_until_killed, victim, 48 << 20, what, timeout=60)
    if any(value[0] == "unavailable" for status, value in out.values()):
        pytest.skip("single copy unavailable here")
    assert victim not in out and len(out) == 2, out
    for rank, (status, (name, blamed, waited)) in out.items():
        assert (name, blamed) == ("PeerDeadError", victim), out
        assert waited < 2.0, out
    assert ranks.shm_files() - before == set()


@pytest.mark.parametrize("setting", ["0", "1"])
def test_alltoallv_with_one_block_over_a_round(monkeypatch, setting):
    """One block longer than a round of copying, every other one short:
    every rank takes the same rounds (each ends in a step), so the call
    and the next one both complete, with every block where it belongs."""
    with comm_with(monkeypatch, setting) as comm:
        n, me = comm.size, comm.rank
        big = SC_ROUND + 4096 + 3
        # rank 0 sends `big` bytes to the last rank; every other block is 5 bytes
        send_counts = [big if me == 0 and p == n - 1 and n > 1 else 5 for p in range(n)]
        recv_counts = [big if p == 0 and me == n - 1 and n > 1 else 5 for p in range(n)]
        send = np.concatenate([np.full(c, 10 * me + p, np.uint8) for p, c in enumerate(send_counts)])
        out = np.zeros(sum(recv_counts), np.uint8)
        comm.alltoallv(send, send_counts, None, recv_counts, None, out=out)
        comm.barrier()
        at = 0
        for p, c in enumerate(recv_counts):
            assert (out[at:at + c] == 10 * p + me).all(), (p, c)
            at += c


def _runs(length, count, gap):
    """`count` runs of `length` bytes, `gap` bytes between them (coll.args.TypeRuns)."""
    return type_runs(np.arange(count) * (length + gap), np.full(count, length), count * (length + gap))


def _gathered(buf, at, runs):
    return np.concatenate([buf[at + int(o):at + int(o) + int(n)] for o, n in zip(runs.offsets, runs.lengths)])


# (send runs, receive runs): equal bytes, run boundaries that never meet, more
# runs than one process_vm_readv takes (256) on one side and then the other,
# every run of 8 KiB or more (single copy's threshold) where single copy may run
ALLTOALLW_LAYOUTS = [((8200, 300, 40), (12300, 200, 8)), ((24600, 100, 16), (8200, 300, 24)),
                     ((24, 700, 16), (56, 300, 8))]


@pytest.mark.parametrize("setting", ["0", "1"])
@pytest.mark.parametrize("layout", ALLTOALLW_LAYOUTS, ids=["sent-runs-first", "received-runs-first", "short-runs"])
def test_alltoallw_of_many_runs_matches_numpy(monkeypatch, setting, layout):
    """Comm.alltoallw with blocks of many runs, sent and received in runs
    of other lengths: every byte where its pair's runs say, single copy on
    (read straight from the sender's runs) and off (the scratch buffers)."""
    with comm_with(monkeypatch, setting) as comm:
        n, me = comm.world_size, comm.world_rank
        sent, got = _runs(*layout[0]), _runs(*layout[1])
        assert sent.size == got.size
        span_s, span_r = sent.extent, got.extent

        def send_of(rank):
            return np.random.default_rng(rank).integers(0, 256, n * span_s, dtype=np.uint8)
        out = np.zeros(n * span_r, np.uint8)
        comm.alltoallw(send_of(me), [(p * span_s, 1, sent) for p in range(n)], out,
                       [(p * span_r, 1, got) for p in range(n)])
        comm.barrier()
        for p in range(n):
            assert (_gathered(out, p * span_r, got) == _gathered(send_of(p), me * span_s, sent)).all(), p
