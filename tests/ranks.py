"""Run a function as N real processes joined by Comm.from_callbacks, with a
transport of our own (shared memory + a multiprocessing barrier) instead of
MPI: this is how tests kill a rank, break a callback or time a wait without
mpiexec tearing the job down first."""
from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import queue
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
    def __init__(self, size: int, ctx=None):
        ctx = ctx or mp.get_context("spawn")
        self.size = size
        self.barrier = ctx.Barrier(size, timeout=TIMEOUT)
        self.buffer = ctx.RawArray("B", CAPACITY)

    def allgather(self, rank: int, send: memoryview, recv: memoryview) -> None:
        n = len(send)
        if n * self.size > CAPACITY:
            raise ValueError("allgather message too large for the test transport")
        view = memoryview(self.buffer).cast("B")
        view[rank * n:(rank + 1) * n] = send
        self.barrier.wait()
        recv[:] = view[:n * self.size]
        self.barrier.wait()


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
    CALLBACKS = Callbacks(lambda s, r: transport.allgather(rank, s, r), transport.barrier.wait)
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
    return {f for f in os.listdir("/dev/shm") if f.startswith("shmtopo")}
