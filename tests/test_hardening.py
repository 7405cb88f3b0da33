"""Hardening (issue 5): a full /dev/shm, SIGKILL at random moments, hostile
arguments, threads, and a short soak under mpiexec. All serial: each test
starts its own processes (or a private mount namespace, or mpiexec)."""
from __future__ import annotations

import multiprocessing as mp
import os
import queue
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import ranks
import shmtopo
from conftest import run_mpiexec

pytestmark = pytest.mark.serial
HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parent / "examples"
BACKENDS = ("posix", "memfd", "sysv")
OOB_TIMEOUT = 1.0  # the test transport's barrier timeout, once the comm exists
DEAD_LIMIT = 2.0   # a dead peer must be reported within this many seconds


# ---- helpers: what a set of processes left behind -----------------------

def shm_names_of(pids) -> set[str]:
    """shmtopo names in /dev/shm created by one of `pids` (names carry the
    creator's pid: /shmtopo.PID.WIN.RANDOM); other runs on the machine are
    left out."""
    pids = {str(p) for p in pids}
    return {f for f in os.listdir("/dev/shm")
            if f.startswith("shmtopo") and len(f.split(".")) > 1 and f.split(".")[1] in pids}


def sysv_segments_of(pids) -> set[str]:
    """System V segments still present whose creator is one of `pids`."""
    try:
        lines = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    except OSError:
        return set()
    pids = {int(p) for p in pids}
    out = set()
    for line in lines:
        fields = line.split()
        if len(fields) > 4 and int(fields[4]) in pids:  # key shmid perms size cpid ...
            out.add(f"sysv shmid {fields[1]} ({fields[3]} B, cpid {fields[4]})")
    return out


def one_rank_comm() -> shmtopo.Comm:
    return shmtopo.Comm.from_callbacks(1, 0, allgather=lambda s, r: r.__setitem__(slice(None), s),
                                       barrier=lambda: None)


# ---- 1a. a /dev/shm too small for the window ------------------------------

SMALL_SHM_CHILD = textwrap.dedent("""
    import errno, os, shmtopo
    comm = shmtopo.Comm.from_callbacks(1, 0, allgather=lambda s, r: r.__setitem__(slice(None), s),
                                       barrier=lambda: None)
    for contiguous in (False, True):
        try:
            comm.allocate(4 << 20, backend="posix", contiguous=contiguous)
        except OSError as exc:
            assert isinstance(exc, shmtopo.ShmtopoError), type(exc)
            assert exc.errno == errno.ENOSPC, (exc.errno, str(exc))
            print("ENOSPC:", exc)
        else:
            raise SystemExit("allocating 4 MiB in a 1 MiB /dev/shm did not fail")
        left = os.listdir("/dev/shm")
        assert left == [], left
    with comm.allocate(64 << 10, backend="posix") as win:
        win.local[:] = 7
        win.fence()
        assert int(win.query(0).sum()) == 7 * (64 << 10)
    comm.free()
    assert os.listdir("/dev/shm") == []
    print("small window ok")
""")


@pytest.mark.no_mpi
def test_full_dev_shm_fails_cleanly_at_allocation():
    if shutil.which("unshare") is None:
        pytest.skip("unshare(1) is not installed")
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                            "mount -t tmpfs -o size=1m tmpfs /dev/shm"],
                           capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a private /dev/shm here (needs root and unshare): {probe.stderr.strip()}")
    script = f"mount -t tmpfs -o size=1m tmpfs /dev/shm && exec {sys.executable} -c \"$0\""
    proc = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script,
                           SMALL_SHM_CHILD], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("ENOSPC:") == 2 and "small window ok" in proc.stdout, proc.stdout


# ---- processes joined by callbacks, which the parent can kill --------------

class Transport:
    """Like ranks.py's transport, but safe against a SIGKILL: no lock is ever
    shared (a multiprocessing.Barrier deadlocks the others when a rank dies
    holding its lock). Each rank only bumps its own arrival counter and polls
    the others', with a per-process timeout, so a rank killed inside an
    out-of-band exchange fails the others' exchange (CallbackError) after
    `timeout` seconds."""

    def __init__(self, ctx, size: int, capacity: int = 1 << 16):
        self.size = size
        self.timeout = 20.0
        self.arrived = ctx.RawArray("q", size)  # one writer per slot
        self.buffer = ctx.RawArray("B", capacity)
        self.rank = None

    def wait(self):
        mine = self.arrived[self.rank] + 1
        self.arrived[self.rank] = mine
        deadline = time.monotonic() + self.timeout
        spins = 0
        while min(self.arrived) < mine:
            spins += 1
            if spins > 200:
                time.sleep(1e-4)
                if time.monotonic() > deadline:
                    raise TimeoutError(f"rank {self.rank}: out-of-band barrier timed out")

    def allgather(self, rank, send, recv):
        n = len(send)
        view = memoryview(self.buffer).cast("B")
        view[rank * n:(rank + 1) * n] = send
        self.wait()
        recv[:] = view[:n * self.size]
        self.wait()


def _context():
    # forkserver: children start in milliseconds (shmtopo and numpy preloaded)
    # and never inherit the parent's live MPI, unlike fork.
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["numpy", "shmtopo"])
    return ctx


#: this child's ranks.Callbacks (None in the parent)
CALLBACKS = None


def _child(fn, rank, transport, ready, results, args):
    global CALLBACKS
    comm = None
    transport.rank = rank
    CALLBACKS = ranks.Callbacks(lambda s, r: transport.allgather(rank, s, r), transport.wait)
    try:
        comm = shmtopo.Comm.from_callbacks(transport.size, rank,
                                           allgather=lambda s, r: CALLBACKS.allgather(s, r),
                                           barrier=lambda: CALLBACKS.barrier())
        transport.timeout = OOB_TIMEOUT
        out = fn(comm, ready, *args)
        results.put((rank, "ok", out, time.monotonic()))
    except BaseException as exc:
        results.put((rank, type(exc).__name__, str(exc), time.monotonic()))
    finally:
        if comm is not None:
            comm.abandon()


class Ranks:
    """`size` processes running fn(comm, ready, *args); fn releases `ready`
    once when it reaches the point after which the parent may kill it."""

    def __init__(self, size, fn, *args):
        ctx = _context()
        self.transport = Transport(ctx, size)
        self.ready = ctx.Semaphore(0)
        self.results = ctx.Queue()
        self.procs = [ctx.Process(target=_child, args=(fn, r, self.transport, self.ready, self.results, args))
                      for r in range(size)]
        for p in self.procs:
            p.start()
        self.pids = [p.pid for p in self.procs]

    def wait_ready(self, timeout=20.0):
        for _ in self.procs:
            assert self.ready.acquire(timeout=timeout), "ranks never got ready"

    def finish(self, timeout) -> dict:
        """{rank: (status, value, monotonic time)} of the ranks that reported."""
        out = {}
        deadline = time.monotonic() + timeout
        try:
            for p in self.procs:
                p.join(max(0.0, deadline - time.monotonic()))
            hung = [r for r, p in enumerate(self.procs) if p.is_alive()]
            while True:
                try:
                    rank, status, value, when = self.results.get(timeout=0.2)
                except queue.Empty:
                    break
                out[rank] = (status, value, when)
        finally:
            for p in self.procs:
                if p.is_alive():
                    p.kill()
                p.join()
        assert not hung, f"ranks {hung} hung (results: {out})"
        return out


# ---- 1b. SIGKILL at random moments ------------------------------------------

def _work_after_allocation(comm, ready, backend, seed, seconds):
    """Windows first, then (until a peer dies) fences, peer fences and
    collectives in an order every rank draws from the same seed."""
    rng = random.Random(seed)
    wins = [comm.allocate(4096, backend=backend),
            comm.allocate(shape=(comm.size,), dtype=np.int64, backend=backend, contiguous=True)]
    ready.release()
    deadline = time.monotonic() + seconds
    ops = 0
    while time.monotonic() < deadline:
        step = rng.randrange(5)
        if step == 0:
            wins[0].local[:8] = ops & 0xff
            wins[0].fence()
        elif step == 1:
            partner = comm.rank ^ 1
            if partner < comm.size:
                wins[1].peer_fence(partner)
        elif step == 2:
            got = comm.allreduce(np.full(rng.choice((1, 100, 20000)), comm.rank, np.int64))
            assert int(got[0]) == comm.size * (comm.size - 1) // 2
        elif step == 3:
            comm.bcast(np.zeros(16), root=rng.randrange(comm.size))
        else:
            comm.barrier()
        ops += 1
    return ops


def _work_with_allocations(comm, ready, backend, seed, seconds):
    """Allocate and free windows in a loop, with fences and collectives in
    between: a kill may land inside an allocation."""
    rng = random.Random(seed)
    ready.release()
    deadline = time.monotonic() + seconds
    ops = 0
    while time.monotonic() < deadline:
        win = comm.allocate(rng.choice((0, 64, 5000)), backend=backend,
                            contiguous=rng.random() < 0.3)
        win.fence()
        comm.allreduce(np.ones(4))
        win.free()
        ops += 1
    return ops


def _kill_at_random(fn, backend, seed):
    """One run of 3 ranks: a random rank is SIGKILLed at a random moment.
    Returns (survivor results, victim, leftovers in /dev/shm and SysV)."""
    rng = random.Random(seed)
    ranks = Ranks(3, fn, backend, seed, 4.0)
    try:
        ranks.wait_ready()
        victim = rng.randrange(3)
        time.sleep(rng.uniform(0.0, 0.25))
        os.kill(ranks.pids[victim], signal.SIGKILL)
        killed_at = time.monotonic()
    finally:
        out = ranks.finish(timeout=6.0)
    assert victim not in out, out
    for rank, (status, value, when) in out.items():
        # survivors report, within 2 s of the kill, that a peer is gone
        assert status in ("PeerDeadError", "PeerAbortedError"), (seed, rank, status, value)
        assert when - killed_at < DEAD_LIMIT, (seed, victim, rank, status, when - killed_at)
    left = shm_names_of(ranks.pids) | sysv_segments_of(ranks.pids)
    return out, victim, ranks.pids, left


@pytest.mark.no_mpi
@pytest.mark.parametrize("backend", BACKENDS)
def test_sigkill_after_allocation_is_reported_and_leaves_nothing(backend):
    """Twice per backend: a rank is killed while the ranks fence, peer-fence
    and run collectives; the survivors raise within 2 s and nothing is left."""
    for run in range(2):
        out, victim, pids, left = _kill_at_random(_work_after_allocation, backend,
                                                  seed=hash((backend, run)) & 0xffff)
        for status, value, _ in out.values():
            assert status in ("PeerDeadError", "PeerAbortedError"), (status, value)
        assert left == set()


@pytest.mark.no_mpi
@pytest.mark.parametrize("backend", BACKENDS)
def test_sigkill_during_allocation_loops(backend):
    """A rank killed while windows are being allocated and freed. Allocations
    agree through the comm's shared memory, so every survivor learns of the
    death by its liveness check (PeerDeadError) or from a peer that left
    (PeerAbortedError), within 2 s, and nothing is left: a posix name the
    victim held (between shm_open and the unlink after everyone mapped it) is
    removed by the survivor that finds it dead."""
    for run in range(2):
        out, victim, pids, left = _kill_at_random(_work_with_allocations, backend,
                                                  seed=hash((backend, run, "alloc")) & 0xffff)
        for status, value, _ in out.values():
            assert status in ("PeerDeadError", "PeerAbortedError"), (status, value)
        assert left == set(), (victim, pids, left)


def _allocate_forever(comm, ready, backend, seconds):
    ready.release()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        comm.allocate(1 << 20, backend=backend).free()
    return "done"


def sysv_unremoved_of(pids) -> set[str]:
    """The System V segments of `pids` not yet marked for removal (SHM_DEST
    is 0o1000 in the perms column): what a creator killed then leaves."""
    try:
        lines = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    except OSError:
        return set()
    pids = {int(p) for p in pids}
    return {f"sysv shmid {f[1]}" for f in map(str.split, lines)
            if len(f) > 4 and int(f[4]) in pids and not int(f[2], 8) & 0o1000}


#: what a victim holds while its segment can still be found by others only
HELD = {"posix": shm_names_of, "sysv": sysv_unremoved_of}


@pytest.mark.no_mpi
@pytest.mark.parametrize("backend", HELD)
def test_kill_while_a_segment_is_held_leaves_nothing(backend):
    """The victim is stopped inside an allocation while its segment can leak
    (posix: /dev/shm holds its name, before everyone mapped it; sysv: created,
    not yet marked for removal), then killed: the survivors raise
    PeerDeadError within 2 s and remove it (the sweep of dead creators'
    leftovers on a dead peer)."""
    held = HELD[backend]
    for attempt in range(20):
        ranks = Ranks(3, _allocate_forever, backend, 10.0)
        victim, caught = 1, None
        try:
            ranks.wait_ready()
            deadline = time.monotonic() + 5.0
            while caught is None and time.monotonic() < deadline:
                if held([ranks.pids[victim]]):
                    os.kill(ranks.pids[victim], signal.SIGSTOP)
                    caught = held([ranks.pids[victim]]) or None
                    if caught is None:
                        os.kill(ranks.pids[victim], signal.SIGCONT)
            os.kill(ranks.pids[victim], signal.SIGKILL)
            killed_at = time.monotonic()
        finally:
            out = ranks.finish(timeout=8.0)
        if caught is None:
            continue  # never caught it holding one: try again
        for rank in (0, 2):
            status, value, when = out[rank]
            assert status in ("PeerDeadError", "PeerAbortedError"), out[rank]
            assert when - killed_at < DEAD_LIMIT, out[rank]
        left = shm_names_of(ranks.pids) | sysv_segments_of(ranks.pids)
        assert left == set(), (caught, left)
        return
    pytest.fail(f"the victim was never caught holding its {backend} segment in 20 attempts")


# ---- 1c. hostile arguments ------------------------------------------------

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

ALLOWED = (shmtopo.ShmtopoError, TypeError, OverflowError)
SETTINGS = dict(deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

hostile_ints = st.sampled_from([-1, -2**63, 0, 1, 7, 8, 4095, 4096, 65536, 2**62, 2**63, 2**64, 2**70])
hostile = st.one_of(hostile_ints, st.integers(-10, 70000),
                    st.sampled_from([1.5, 2.0, float("nan"), float("inf"), -0.0, "12", "x", b"8",
                                     None, [3], (2, 2), object(), True, np.int64(16), np.float32(4)]))
dtypes = st.sampled_from([None, "uint8", "int16", "float64", "complex128", "V3", "U4", "O", "bogus",
                          np.dtype([("a", "i4"), ("b", "f8")]), 5, object])
shapes = st.one_of(st.none(), hostile, st.lists(st.one_of(st.integers(-2, 9), hostile_ints), max_size=3))
names = st.sampled_from([None, "posix", "memfd", "sysv", "xpmem", "POSIX", "", "bogus", 3, "rd"])
fences = st.sampled_from([None, "auto", "linear", "rd", "dissemination", "1", "2", "9", "", 7])
timeouts = st.sampled_from([None, 0, 0.5, -1, float("nan"), float("inf"), "1", 1e300])


def _no_new_names():
    return shm_names_of([os.getpid()])


@settings(max_examples=80, **SETTINGS)
@given(nbytes=hostile, dtype=dtypes, shape=shapes, backend=names, fence=fences, timeout=timeouts,
       contiguous=st.sampled_from([False, True, 0, 1, "yes", None]))
@pytest.mark.no_mpi
def test_fuzz_allocate(nbytes, dtype, shape, backend, fence, timeout, contiguous):
    before = _no_new_names()
    comm = one_rank_comm()
    try:
        try:
            win = comm.allocate(nbytes, dtype=dtype, shape=shape, backend=backend, fence=fence,
                                timeout=timeout, contiguous=contiguous)
        except ALLOWED:
            return
        assert win.local.nbytes == win.nbytes
        win.local.view(np.uint8)[:] = 1
        win.fence()
        win.free()
    finally:
        comm.free()
        assert _no_new_names() - before == set()


CALL = st.one_of(
    st.tuples(st.just("alloc"), st.sampled_from([0, 1, 8, 4096, 70000]), names.filter(lambda b: b != "xpmem"),
              st.booleans()),
    st.tuples(st.just("free"), st.integers(0, 3)),
    st.tuples(st.just("fence"), st.integers(0, 3)),
    st.tuples(st.just("peer_fence"), st.integers(0, 3), st.sampled_from([0, 1, -1, 2**31, 2**64, "0", 0.5])),
    st.tuples(st.just("query"), st.integers(0, 3), st.sampled_from([0, 1, -1, 2**31, 2**64, "0", 0.5, None]),
              dtypes),
    st.tuples(st.just("set_timeout"), st.integers(0, 3), timeouts),
    st.tuples(st.just("abandon"), st.integers(0, 3)),
    st.tuples(st.just("all"), st.integers(0, 3)),
    st.tuples(st.just("fence_loop"), st.integers(0, 3), st.sampled_from([0, 3, -1, 2**63, "2"])),
    st.tuples(st.just("coll"),
              st.sampled_from(["allreduce", "reduce", "bcast", "allgather", "reduce_scatter", "alltoall",
                               "barrier"]),
              st.sampled_from(["int8", "uint16", "int32", "int64", "float32", "float64", "bool", "complex64",
                               "float16", "U3", "O", "V8", ">i4", ">f8"]),
              st.sampled_from([(), (0,), (1,), (5,), (3, 2), (70000,)]),
              st.sampled_from(["sum", "prod", "min", "max", "band", "bor", "bxor", "SUM", "avg", None, 3]),
              st.sampled_from([None, "auto", "flat", "rsag", "ring", 1]),
              st.sampled_from([0, 1, -1, "0", 0.0, None, 2**64]),
              st.sampled_from(["none", "same", "wrong_dtype", "wrong_size", "readonly", "strided", "list",
                               "window"]),
              st.booleans()),
    st.tuples(st.just("comm_free")),
)


def _collective(comm, wins, name, dtype, shape, op, alg, root, out_kind, strided):
    a = np.arange(int(np.prod(shape)) or 0).astype(dtype).reshape(shape) if dtype != "V8" \
        else np.zeros(shape, dtype)
    if strided and a.ndim:
        a = np.repeat(a, 2, axis=0)[::2]
    out = {"none": None, "same": a, "wrong_dtype": np.zeros(a.shape, np.int8),
           "wrong_size": np.zeros(a.size + 1, a.dtype), "list": [0] * a.size,
           "strided": np.zeros(a.size * 2, a.dtype)[::2]}.get(out_kind)
    if out_kind == "readonly":
        out = np.zeros_like(a)
        out.flags.writeable = False
    if out_kind == "window" and wins and a.dtype == np.int64 and a.size and not wins[0].freed \
            and wins[0].nbytes >= a.nbytes:
        a = wins[0].local.view(np.int64)[:a.size]
    if name == "barrier":
        comm.barrier()
    elif name == "allreduce":
        comm.allreduce(a, op, out=out, algorithm=alg)
    elif name == "reduce":
        comm.reduce(a, op, root, out=out, algorithm=alg)
    elif name == "bcast":
        comm.bcast(a, root, out=out)
    elif name == "allgather":
        comm.allgather(a, out=out)
    elif name == "reduce_scatter":
        comm.reduce_scatter(a, op, out=out)
    else:
        comm.alltoall(a, out=out)


def _apply(comm, wins, call):
    kind, *args = call
    win = wins[args[0] % len(wins)] if wins and kind not in ("alloc", "coll", "comm_free") else None
    if kind == "alloc":
        wins.append(comm.allocate(args[0], backend=args[1], contiguous=args[2]))
    elif win is None and kind not in ("coll", "comm_free"):
        return
    elif kind == "free":
        win.free()
    elif kind == "fence":
        win.fence()
    elif kind == "peer_fence":
        win.peer_fence(args[1])
    elif kind == "query":
        win.query(args[1], args[2])
    elif kind == "set_timeout":
        win.set_timeout(args[1])
    elif kind == "abandon":
        win.abandon()
    elif kind == "all":
        win.all
    elif kind == "fence_loop":
        win.fence_loop(args[1])
    elif kind == "coll":
        _collective(comm, wins, *args)
    else:
        comm.free()


@pytest.mark.no_mpi
@settings(max_examples=120, **SETTINGS)
@given(calls=st.lists(CALL, max_size=12))
def test_fuzz_call_sequences(calls):
    """Free twice, use after free, fence on a freed window, queries out of
    range, collectives with odd dtypes, operations and out arrays: only
    shmtopo's exceptions (or TypeError/OverflowError from argument
    conversion), never a crash, and no file left."""
    before = _no_new_names()
    comm = one_rank_comm()
    wins = []
    try:
        for call in calls:
            try:
                _apply(comm, wins, call)
            except ALLOWED:
                pass
    finally:
        comm.free()  # frees the windows still open; no-op when freed already
        for win in wins:
            win.free()
        assert _no_new_names() - before == set()


# ---- 1d. two threads per process, each fencing its own window ---------------

EPOCHS_PER_THREAD = 1500


def _threads_fencing(comm, ready, epochs):
    wins = [comm.allocate(shape=(1,), dtype=np.int64, contiguous=True, timeout=10) for _ in range(2)]
    ready.release()
    errors, released = [], [0, 0]

    def body(i):
        win, slots = wins[i], wins[i].all[:, 0]  # slot r: rank r's part
        try:
            for epoch in range(1, epochs + 1):
                slots[comm.rank] = epoch
                win.fence()
                if not (slots == epoch).all():
                    errors.append((i, epoch, slots.tolist()))
                win.fence()
                released[i] += 1
        except BaseException as exc:
            errors.append((i, repr(exc)))

    threads = [threading.Thread(target=body, args=(i,)) for i in range(2)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - start
    for win in wins:
        win.free()
    return errors, released, elapsed


@pytest.mark.no_mpi
def test_two_threads_fence_two_windows_concurrently():
    """Each of 2 processes runs 2 threads, thread i fencing window i. A fence
    holding the GIL while it waits would deadlock this (process A's thread 0
    waiting for process B's thread 0, which cannot run while B's thread 1
    holds B's GIL waiting for A's thread 1); the windows' 10 s timeout turns
    that into an error instead of a hang."""
    ranks = Ranks(2, _threads_fencing, EPOCHS_PER_THREAD)
    out = ranks.finish(timeout=60.0)
    for rank in range(2):
        status, value, _ = out[rank]
        assert status == "ok", out[rank]
        errors, released, elapsed = value
        assert errors == [] and released == [EPOCHS_PER_THREAD] * 2, (rank, errors[:3], released)
    assert shm_names_of(ranks.pids) == set()


# ---- 2. the soak example, short --------------------------------------------

def test_soak_short():
    proc = run_mpiexec(4, [sys.executable, EXAMPLES / "soak.py", "--fences", "3000", "--collectives", "600",
                           "--seed", "5"], timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "lost=0 duplicated=0" in proc.stdout and "bad collectives=0" in proc.stdout, proc.stdout
    assert "epochs=3000" in proc.stdout, proc.stdout
