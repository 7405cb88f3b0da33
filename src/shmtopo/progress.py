"""shmtopo.progress: how a comm's nonblocking collectives run.

A comm's nonblocking calls go into one queue and run one at a time, in the
order posted (MPI matches collectives by their order on each rank), as the
blocking call of the same name: on a thread of the queue's own, so that they
progress while the program computes, or on a thread of the program that
waits for one of them and finds it not yet taken (no hand-over for a small
call waited at once). The own API's queue (coll/nonblocking.py) and the
drop-in's (accel/nonblocking.py) are this one engine; what runs a call, and
what tells its request, is theirs.
"""
from __future__ import annotations

import threading
from collections import deque
from typing import Any

from ._base import holds_comm
from ._fastpath import Doorbell
from .errors import ShmtopoValueError

#: How long a posted call waits for the program's own wait to run it before
#: the progress thread takes it (and the GIL): a small call waited at once
#: costs no hand-over; the progress of a large one starts this much later.
GRACE = 20e-6

#: The same where the node has no spare core for the progress threads (two
#: threads per rank would outnumber its CPUs), while the program's own wait
#: runs the calls: there a thread that runs the call beside the program's
#: computation slows that computation by more than the call costs at the
#: wait (measured: 1.59 ms against 1.17 ms for 1 MiB and 1 ms of numpy at 2
#: ranks on 2 cores), so the thread is only a backstop. Once it has had to
#: take a call (the program waits in MPI's own Waitall of a list, which
#: runs nothing of ours, or polls), it takes the next ones as soon as it sees
#: them, until the program waits with a request's own wait again.
GRACE_WITHOUT_SPARE_CORES = 1e-3

#: How the calls' waits for the other ranks spend their time (spin, yield,
#: in seconds): 20 µs spinning, then asleep. The thread shares a core with
#: the program's computation, which a longer spin would slow down; the
#: program's wait runs calls too, and a wait that slept at once made a small
#: call nearly twice as slow.
WAITS = (20e-6, 0.0)

#: How long exit and MPI_Finalize let a call already running end.
RUNNING_AT_EXIT = 5.0


def threads_may_call_mpi() -> bool:
    """Whether MPI was initialised with MPI_THREAD_MULTIPLE (mpi4py's
    default), so that a progress thread may make MPI calls."""
    global _thread_multiple
    if _thread_multiple is None:
        from mpi4py import MPI

        _thread_multiple = MPI.Query_thread() == MPI.THREAD_MULTIPLE
    return _thread_multiple


_thread_multiple: bool | None = None


def grace_for(size: int, ncpus: int) -> float:
    """The grace of a comm of ``size`` ranks on ``ncpus`` CPUs."""
    return GRACE if 2 * size <= ncpus else GRACE_WITHOUT_SPARE_CORES


class Call:
    """One posted nonblocking call: the blocking call to make, and once it
    has run, its result or its error."""

    __slots__ = ("name", "posted", "args", "kwargs", "request", "done", "result", "error", "reported")

    def __init__(self, name: str, posted: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.name = name  # the blocking call's
        self.posted = posted  # the nonblocking call's, for messages
        self.args, self.kwargs = args, kwargs  # the buffers stay referenced until it has run
        self.request: Any = None  # what the caller's request needs told (the drop-in's Grequest)
        self.done = False
        self.result: Any = None
        self.error: BaseException | None = None
        self.reported = False  # the error was raised to the program (not again by MPI's query)


class Progress:
    """One comm's queue of nonblocking calls and the thread that runs them.

    ``post`` is the program's (any thread); ``complete`` returns once a call
    has run, running it and those before it where no thread has taken them.
    ``close`` is local: the thread runs what is posted, then ends. At exit
    (and at MPI_Finalize where the owner asks) ``_release`` drops the calls
    not yet run and lets the running one end.

    A subclass runs each call (``_execute``) and may act when one is posted,
    has run, is stopped and when the thread ends (``_posting``, ``_ran``,
    ``_counted``, ``_stop``, ``_leave``).
    ``threaded=False``: no thread; the calls run only in ``complete``.
    """

    def __init__(self, grace: float = GRACE, threaded: bool = True) -> None:
        # one lock, taken as itself (a Condition's own `with` is a Python frame more, on every call)
        self._lock = lock = threading.Lock()
        self._work = threading.Condition(lock)  # the thread waits here for a call to take
        self._finished = threading.Condition(lock)  # complete() waits here for its call
        self._waiting = 0  # threads in complete()
        self._bell = Doorbell()  # rung per call posted, told of each call taken
        self._patient = grace  # the grace while the program's waits run the calls
        self._bell.set_grace(grace)  # 0 once the thread had to take a call, until a wait of the program
        self._pending: deque[Call] = deque()
        self._current: Call | None = None  # the call a thread is inside
        self._closing = False  # no more calls: the thread ends when the queue is empty
        self._gone = False  # the process is leaving (exit, MPI_Finalize): nothing runs any more
        self.threaded = threaded
        holds_comm(self)  # _release() at exit
        self._thread: threading.Thread | None = None
        if threaded:
            self._thread = threading.Thread(target=self._serve, name="shmtopo-progress", daemon=True)
            self._thread.start()

    # -- the program's side ----------------------------------------------------
    def post(self, call: Call) -> None:
        """Local: queue ``call``, to run after those posted before."""
        with self._lock:
            if self._closing:
                raise ShmtopoValueError(f"{call.posted}: the comm has been freed")
            self._posting(idle=not self._pending and self._current is None)
            self._pending.append(call)
        self._bell.ring()

    def complete(self, call: Call) -> None:
        """Return when ``call`` has run, running it (and the calls posted
        before it) here if no thread has taken them yet."""
        self._bell.set_grace(self._patient)  # the program waits itself: the thread need not hurry
        while True:
            with self._lock:
                while not call.done and (self._current is not None or not self._pending):
                    self._waiting += 1
                    self._finished.wait()
                    self._waiting -= 1
                if call.done:
                    return
                first = self._current = self._pending.popleft()
                self._bell.take()
            self._run(first)

    def run_all(self) -> bool:
        """Run every call posted so far (here where no thread has taken
        them): False when there was none."""
        with self._lock:
            last = self._pending[-1] if self._pending else self._current
        if last is None:
            return False
        self.complete(last)
        return True

    def close(self) -> None:
        """Local: no more calls; the thread runs the posted ones and ends."""
        with self._lock:
            self._closing = True
            self._work.notify()
        self._bell.close()
        if not self.threaded:
            self._leave()

    def drop(self, why: str) -> None:
        """Local: no more calls; those not yet run fail with ``why``, the
        one running is stopped (``_stop``) and ends (within RUNNING_AT_EXIT
        seconds), the thread ends."""
        with self._lock:
            self._closing = True
            while self._pending:
                dropped = self._pending.popleft()
                dropped.args, dropped.kwargs = (), {}
                dropped.error = ShmtopoValueError(f"{dropped.posted}: never ran, {why}")
                self._finish(dropped, more=bool(self._pending))
            if self._current is not None:
                self._stop()
            self._work.notify()
            self._waiting += 1
            self._finished.wait_for(lambda: self._current is None, RUNNING_AT_EXIT)
            self._waiting -= 1
        self._bell.close()

    def _release(self) -> None:
        """Local, at exit (and at MPI_Finalize where the owner asks), before
        the comms go: drop the calls not yet run, let the one running end,
        and run nothing from here on."""
        with self._lock:
            self._gone = True
        self.drop("the process was leaving")

    # -- the thread ------------------------------------------------------------
    def _serve(self) -> None:
        while True:
            self._bell.wait()  # without the GIL, until a call has gone untaken, or close()
            with self._lock:
                while self._current is not None and (self._pending or self._closing):  # another thread runs one
                    self._work.wait()
                if not self._pending:
                    if self._closing:
                        break
                    continue
                first = self._current = self._pending.popleft()
                self._bell.take()
                self._bell.set_grace(0.0)  # no wait of the program came for it: take the next ones at once
            self._run(first)
        if not self._gone:
            self._leave()

    def _run(self, call: Call) -> None:
        """Run one call (this thread alone is running one), then tell its request."""
        try:
            self._execute(call)
        except BaseException as exc:  # noqa: BLE001 - raised by the request's wait
            call.error = exc
        with self._lock:
            call.args, call.kwargs = (), {}
            self._current = None
            self._finish(call, more=bool(self._pending))
            if self._pending or self._closing:
                self._work.notify()
        self._counted(call)

    def _finish(self, call: Call, more: bool) -> None:
        """Under the lock: ``call`` is done (run, or dropped)."""
        call.done = True
        self._ran(call, more)
        if self._waiting:
            self._finished.notify_all()

    # -- what a subclass adds ----------------------------------------------------
    def _execute(self, call: Call) -> None:
        """Run the call: its result into ``call.result``, or raise its error."""
        raise NotImplementedError

    def _posting(self, idle: bool) -> None:
        """Under the lock, before a call is queued (``idle``: none is queued
        or running); may raise to refuse it."""

    def _ran(self, call: Call, more: bool) -> None:
        """Under the lock, once ``call`` is done (``more``: calls are still
        queued); ``self._gone`` says whether the process is leaving."""

    def _counted(self, call: Call) -> None:
        """After the lock, once ``call`` has run."""

    def _leave(self) -> None:
        """The thread ends after ``close`` (not when the process is leaving)."""

    def _stop(self) -> None:
        """Under the lock, from ``drop``: make the call running end soon."""

    def set_patience(self, grace: float) -> None:
        """The grace while the program's waits run the calls."""
        self._patient = grace
        self._bell.set_grace(grace)
