"""Run a function as N real processes joined by Comm.from_callbacks, with a
transport of our own (shared memory + a multiprocessing barrier) instead of
MPI: this is how tests kill a rank, break a callback or time a wait without
mpiexec tearing the job down first."""
from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import queue
import signal
import time
import traceback

TIMEOUT = 30.0
CAPACITY = 1 << 20


class Callbacks:
    """The out-of-band callbacks a child's comm was made with. The comm calls
    through these attributes, so a test running in the child may wrap them
    or make another comm over the same transport (CALLBACKS)."""

    def __init__(self, allgather, barrier):
        self.allgather, self.barrier = allgather, barrier


#: this child's Callbacks (None in the parent)
CALLBACKS = None


class Transport:
    """The out-of-band allgather and barrier of a test's ranks. `inside[rank]`
    is 1 while that rank is in one of them: a rank SIGKILLed there may die
    holding the lock of multiprocessing's Barrier, which the others then wait
    for with no timeout (see kill_outside)."""

    def __init__(self, size: int, ctx=None):
        ctx = ctx or mp.get_context("spawn")
        self.size = size
        self.barrier = ctx.Barrier(size, timeout=TIMEOUT)
        self.buffer = ctx.RawArray("B", CAPACITY)
        self.inside = ctx.RawArray("b", size)

    def allgather(self, rank: int, send: memoryview, recv: memoryview) -> None:
        n = len(send)
        if n * self.size > CAPACITY:
            raise ValueError("allgather message too large for the test transport")
        self.inside[rank] = 1
        try:
            view = memoryview(self.buffer).cast("B")
            view[rank * n:(rank + 1) * n] = send
            self.barrier.wait()
            recv[:] = view[:n * self.size]
            self.barrier.wait()
        finally:
            self.inside[rank] = 0

    def wait(self, rank: int) -> None:
        self.inside[rank] = 1
        try:
            self.barrier.wait()
        finally:
            self.inside[rank] = 0


def kill_outside(pid: int, transport: Transport, rank: int) -> None:
    """SIGKILL a rank at a moment of shmtopo's, never inside the test's own
    transport (a death there would hang the others in the test's harness, not
    in shmtopo): stopped first, killed where it is not inside, else let go
    on for a moment and tried again."""
    while True:
        os.kill(pid, signal.SIGSTOP)
        while _state(pid) not in ("T", "t", "Z", "X", ""):
            time.sleep(0.0001)
        if not transport.inside[rank]:
            os.kill(pid, signal.SIGKILL)
            return
        os.kill(pid, signal.SIGCONT)
        time.sleep(0.0005)


def _state(pid: int) -> str:
    """A process's state letter (/proc/PID/stat), "" once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


@contextlib.contextmanager
def children_without_mpi():
    """Processes spawned inside import their function's test module, and so
    mpi4py, without MPI_Init: a singleton's start-up is most of a child's,
    and no child uses MPI (conftest gives them a world of one)."""
    previous = os.environ.get("MPI4PY_RC_INITIALIZE")
    os.environ["MPI4PY_RC_INITIALIZE"] = "0"
    try:
        yield
    finally:
        if previous is None:
            del os.environ["MPI4PY_RC_INITIALIZE"]
        else:
            os.environ["MPI4PY_RC_INITIALIZE"] = previous


def _child(fn, rank, transport, results, args):
    import shmtopo

    global CALLBACKS
    CALLBACKS = Callbacks(lambda s, r: transport.allgather(rank, s, r), lambda: transport.wait(rank))
    try:
        comm = shmtopo.Comm.from_callbacks(
            transport.size, rank,
            allgather=lambda s, r: CALLBACKS.allgather(s, r),
            barrier=lambda: CALLBACKS.barrier())
        out = fn(comm, *args)
        results.put((rank, "ok", out))
    except BaseException as exc:  # reported to the parent, which asserts on it
        results.put((rank, "error", (type(exc).__name__, str(exc), getattr(exc, "rank", None),
                                      traceback.format_exc())))


def run(size: int, fn, *args, timeout: float = 60.0) -> dict:
    """Run fn(comm, *args) on `size` processes; returns {rank: (status, value)}
    for every rank that reported (a killed rank does not). fn must be a
    module-level function (processes are spawned, not forked: MPI is live in
    the parent)."""
    ctx = mp.get_context("spawn")
    transport = Transport(size)
    results = ctx.Queue()
    procs = [ctx.Process(target=_child, args=(fn, r, transport, results, args)) for r in range(size)]
    with children_without_mpi():
        for p in procs:
            p.start()
    out = {}
    try:
        for p in procs:
            p.join(timeout)
        # a rank that ended by itself reported before it ended; a killed one may have
        expected = sum(p.exitcode == 0 for p in procs)
        while True:
            try:
                rank, status, value = results.get(timeout=0.5 if len(out) < expected else 0.01)
            except queue.Empty:
                break
            out[rank] = (status, value)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
    return out


def shm_files() -> set[str]:
    """shmtopo's files in /dev/shm that this user owns (another user's
    jobs, such as a suite run beside this one, make and drop their own)."""
    names = set()
    for name in os.listdir("/dev/shm"):
        try:
            if name.startswith("shmtopo") and os.stat(f"/dev/shm/{name}").st_uid == os.geteuid():
                names.add(name)
        except FileNotFoundError:  # dropped since the listing
            pass
    return names
