"""shmtopo.accel.nonblocking: the nonblocking collectives of an accelerated
comm (``Iallreduce``, ``Ibcast``, ... ``Ialltoallw``).

Each one is the blocking call of the same name without its ``I``, run on a
duplicate of the comm that only this module uses, in the order the program
posted them — in shared memory where that blocking call would run there,
through MPI where it would go to MPI — on a thread of the comm's own, so
that it progresses while the program computes. Its own comm keeps it apart
from the blocking collectives the program calls meanwhile, as MPI keeps a
nonblocking collective apart from the calls after it; posting in the same
order on every rank (what MPI requires) matches the calls, and the blocking
call's agreement gives a mismatch (another operation, root, op or size on
one rank) the same error on every rank, raised by ``Wait``.

The request is an mpi4py generalized request (``MPI.Grequest``), completed
by whichever thread ran the call: ``Wait``, ``Test``, ``Waitall``,
``Testall``, ``Waitany``..., also in one list with MPI's point-to-point
requests. Its own ``Wait`` and ``Test`` raise the call's error as itself;
MPI's ``Waitall`` of a list raises MPI's ``ERR_IN_STATUS`` for it (mpi4py
prints the error). A ``Wait`` on a call the thread has not taken yet runs
the calls up to it on the waiting thread instead of waking the other.

The thread makes MPI calls (the duplicate's ``Idup`` request, delegated
calls, ``Grequest.Complete``): this needs ``MPI_THREAD_MULTIPLE``, mpi4py's
default. Under a lower thread level the nonblocking collectives are MPI's.
"""
from __future__ import annotations

import threading
from collections import deque
from typing import Any, Callable

from .. import _oob
from .._base import holds_comm
from .._fastpath import Doorbell
from ..errors import ShmtopoValueError
from ..job import release_at_finalize

#: How long a posted call waits for the program's own Wait to run it before
#: the progress thread takes it (and the GIL): a small call waited at once
#: costs no hand-over; the progress of a large one starts this much later.
GRACE = 20e-6

#: The same where the node has no spare core for the progress threads (two
#: threads per rank would outnumber its CPUs), while the program's own Wait
#: runs the calls: there a thread that runs the call beside the program's
#: computation slows that computation by more than the call costs at the
#: Wait (measured: 1.59 ms against 1.17 ms for 1 MiB and 1 ms of numpy at 2
#: ranks on 2 cores), so the thread is only a backstop. Once it has had to
#: take a call (the program waits in MPI's own Waitall of a list, which
#: runs nothing of ours, or polls), it takes the next ones as soon as it sees
#: them, until the program calls a request's own Wait again.
GRACE_WITHOUT_SPARE_CORES = 1e-3

#: How the duplicate's waits for the other ranks spend their time
#: (Comm.set_waits: spin, yield, in seconds): 20 µs spinning, then asleep.
#: Its thread shares a core with the program's computation, which a longer
#: spin would slow down; the program's Wait runs calls there too, and a
#: wait that slept at once made a small call nearly twice as slow.
WAITS = (20e-6, 0.0)

#: How long exit and MPI_Finalize let a call already running end.
RUNNING_AT_EXIT = 5.0

#: The nonblocking collectives, each run as the blocking call named without its "I".
NONBLOCKING = ("Ibarrier", "Ibcast", "Igather", "Igatherv", "Iscatter", "Iscatterv", "Iallgather", "Iallgatherv",
               "Ialltoall", "Ialltoallv", "Ialltoallw", "Ireduce", "Iallreduce", "Ireduce_scatter_block",
               "Ireduce_scatter", "Iscan", "Iexscan")


def blocking_name(name: str) -> str:
    """The blocking call a nonblocking one runs: ``Iallreduce`` -> ``Allreduce``."""
    return name[1].upper() + name[2:]


class Call:
    """One posted nonblocking collective: the blocking call to make, and
    once it has run, whether it failed (``error``)."""

    __slots__ = ("name", "args", "kwargs", "request", "done", "error", "reported")

    def __init__(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.name = name  # the blocking call's
        self.args, self.kwargs = args, kwargs  # the buffers stay referenced until it has run
        self.request: Any = None  # the Grequest, until completed
        self.done = False
        self.error: BaseException | None = None
        self.reported = False  # the error was raised to the program (not again by MPI's query)


class Progress:
    """One accelerated comm's nonblocking collectives: a queue, the
    duplicate comm they run on, and the thread that runs them in order.

    ``post`` is the program's (any thread); the calls run one at a time, in
    the order posted, on the progress thread or on a thread waiting for one
    of them (``complete``). ``close`` is local: the thread runs what is
    posted, then frees the duplicate and ends. At exit and at MPI_Finalize
    (``_release``, as every holder of a comm) the calls not yet run are
    dropped and the thread makes no MPI call any more.
    """

    def __init__(self, private: Any, opened: Any, count: Callable[[str, bool], None],
                 news: Callable[[str], None] | None, timeout: float) -> None:
        self._private = private  # an accelerated comm on an Idup of the program's comm
        self._opened = opened  # that Idup's request, completed before the first call runs
        self._news, self._timeout = news, timeout  # for that wait: a rank that died or never comes
        self._broken: BaseException | None = None  # why the Idup never completed
        self._open = threading.Event()  # set once it has completed
        self._count = count  # count(name, accelerated) into the program's comm's shm_stats
        # one lock, taken as itself (a Condition's own `with` is a Python frame more, on every call)
        self._lock = lock = threading.Lock()
        self._work = threading.Condition(lock)  # the thread waits here for a call to take
        self._finished = threading.Condition(lock)  # complete() waits here for its call
        self._waiting = 0  # threads in complete()
        self._bell = Doorbell()  # rung per call posted, told of each call taken
        self._bell.set_grace(GRACE)  # 0 once the thread had to take a call, until a Wait of the program
        self._patient = GRACE  # the grace while the program's Waits run the calls (set once the
        self._graced = False  # duplicate's shmtopo comm says how many cores there are)
        self._pending: deque[Call] = deque()
        self._running = False  # a thread is inside one of the calls
        self._closing = False  # no more calls: the thread ends when the queue is empty
        self._mpi_gone = False  # the process is leaving (exit, MPI_Finalize): no MPI call from here
        holds_comm(self)  # _release() at exit and at MPI_Finalize
        release_at_finalize()
        self._thread = threading.Thread(target=self._serve, name="shmtopo-progress", daemon=True)
        self._thread.start()

    def post(self, call: Call) -> None:
        """Local: queue ``call`` (its request made), to run after those posted before."""
        with self._lock:
            if self._closing:
                raise ShmtopoValueError(f"I{call.name.lower()}: the comm has been freed")
            self._pending.append(call)
        self._bell.ring()

    def complete(self, call: Call) -> None:
        """Return when ``call`` has run, running it (and the calls posted
        before it) here if no thread has taken them yet."""
        self._bell.set_grace(self._patient)  # the program waits with its own Wait: the thread need not hurry
        while True:
            with self._lock:
                while not call.done and (self._running or not self._pending):
                    self._waiting += 1
                    self._finished.wait()
                    self._waiting -= 1
                if call.done:
                    return
                first = self._pending.popleft()
                self._running = True
                self._bell.take()
            self._run(first)

    def close(self) -> None:
        """Local: no more calls; the thread runs the posted ones and ends."""
        with self._lock:
            self._closing = True
            self._work.notify()
        self._bell.close()

    def wait_opened(self) -> None:
        """Return once the duplicate's Idup has completed (every rank has
        posted its first call): MPI may not free the comm while it is pending."""
        self._open.wait()

    def _release(self) -> None:
        """Local, at exit and at MPI_Finalize (before the comms go): drop the
        calls not yet run (no one waits for them any more), let the one
        running end (RUNNING_AT_EXIT seconds at most), and make no MPI call
        from here on."""
        with self._lock:
            self._mpi_gone = self._closing = True
            while self._pending:
                dropped = self._pending.popleft()
                dropped.done, dropped.args, dropped.kwargs = True, (), {}
                dropped.error = ShmtopoValueError(f"I{dropped.name.lower()}: never ran, the process was leaving")
            self._finished.notify_all()
            self._work.notify()
            self._waiting += 1
            self._finished.wait_for(lambda: not self._running, RUNNING_AT_EXIT)
            self._waiting -= 1
        self._bell.close()
        self._open.set()

    def _serve(self) -> None:
        while True:
            self._bell.wait()  # without the GIL, until a call has gone untaken, or close()
            with self._lock:
                while self._running and (self._pending or self._closing):  # another thread runs one
                    self._work.wait()
                if not self._pending:
                    if self._closing:
                        self._leave()
                        return
                    continue
                first = self._pending.popleft()
                self._running = True
                self._bell.take()
                self._bell.set_grace(0.0)  # no Wait of the program came for it: take the next ones at once
            self._run(first)

    def _leave(self) -> None:
        if self._mpi_gone:  # release_holders drops the duplicate's shmtopo side itself
            return
        private, self._private = self._private, None
        try:
            private.Free()  # local
        except Exception:  # noqa: BLE001 - a thread has no one to tell; the comm is unusable anyway
            pass

    def _run(self, call: Call) -> None:
        """Run one call (this thread alone is running one), then complete its request."""
        handed = None
        try:
            if self._broken is not None:
                raise self._broken
            if self._opened is not None:
                try:
                    _oob.wait(self._opened, self._timeout, "the Idup of the comm's nonblocking collectives",
                              news=self._news)
                except BaseException as exc:
                    self._broken = exc
                    raise
                finally:
                    self._opened = None
                    self._open.set()
            private = self._private
            before = private.shm_delegated(call.name)
            getattr(private, call.name)(*call.args, **call.kwargs)
            handed = private.shm_delegated(call.name) > before
            if not self._graced and not handed:
                self._graced = True
                shm = private.shm_comm
                self._patient = GRACE if 2 * shm.size <= shm.ncpus else GRACE_WITHOUT_SPARE_CORES
                self._bell.set_grace(self._patient)
        except BaseException as exc:  # noqa: BLE001 - raised by the request's Wait
            call.error = exc
        with self._lock:
            call.done = True
            call.args, call.kwargs = (), {}
            request, call.request = call.request, None
            self._running = False
            if not self._mpi_gone:  # under the lock: MPI_Finalize does not come in between
                request.Complete()
            if self._waiting:
                self._finished.notify_all()
            if self._pending or self._closing:
                self._work.notify()
        if handed is not None:
            self._count(call.name, not handed)


def threads_may_call_mpi(MPI: Any) -> bool:
    """Whether MPI was initialised with MPI_THREAD_MULTIPLE (mpi4py's default)."""
    global _thread_multiple
    if _thread_multiple is None:
        _thread_multiple = MPI.Query_thread() == MPI.THREAD_MULTIPLE
    return _thread_multiple


_thread_multiple: bool | None = None


# ---- the request ------------------------------------------------------------------------

_request_classes: dict[Any, type] = {}


def request_class(MPI: Any) -> type:
    """The request class of the nonblocking collectives: an ``MPI.Grequest``
    (made once, as mpi4py is imported lazily)."""
    made = _request_classes.get(MPI)
    if made is None:
        made = _request_classes[MPI] = _make_request_class(MPI)
    return made


def _query(status: Any, call: Call) -> None:
    # MPI's Wait/Test of a list asks here; the request's own Wait raised it already
    if call.error is not None and not call.reported:
        call.reported = True
        raise call.error


def _make_request_class(MPI: Any) -> type:
    class CollectiveRequest(MPI.Grequest):  # type: ignore[misc]
        """The request of an accelerated comm's nonblocking collective (an
        ``MPI.Grequest``): ``Wait``/``Test`` raise the call's error on every
        rank; ``Free`` and ``Cancel`` of one still running are erroneous in
        MPI and raise ShmtopoValueError, leaving it running."""

        _call: Call | None
        _progress: Progress | None

        def Wait(self, status: Any = None) -> bool:
            call = self._call
            if call is not None:
                self._progress.complete(call)  # type: ignore[union-attr]
                self._forget(call)
            if status is None and call is not None:
                super().Free()  # complete: MPI's Wait would only add the query's callback to freeing it
            else:
                super().Wait(status)
            if call is not None and call.error is not None:
                raise call.error
            return True

        def Test(self, status: Any = None) -> bool:
            call = self._call
            if call is not None and not call.done:
                return False
            return self.Wait(status)

        def Free(self) -> None:
            call = self._call
            if call is not None and not call.done:
                raise ShmtopoValueError(f"I{call.name.lower()}: freeing the request of a nonblocking collective "
                                        "that has not completed is erroneous in MPI; Wait for it")
            if call is not None:
                self._forget(call)
            super().Free()

        def Cancel(self) -> None:
            name = self._call.name.lower() if self._call is not None else "collective"
            raise ShmtopoValueError(f"I{name}: a nonblocking collective cannot be cancelled (erroneous in MPI)")

        def _forget(self, call: Call) -> None:
            call.reported = True
            self._call = self._progress = None

    CollectiveRequest.__module__ = "shmtopo"
    CollectiveRequest.__qualname__ = "CollectiveRequest"
    return CollectiveRequest


def new_request(MPI: Any, progress: Progress, call: Call) -> Any:
    """An active request that ``call`` completes once it has run."""
    request = request_class(MPI)(MPI.Grequest.Start(_query, None, None, args=(call,)))
    request._call, request._progress = call, progress
    call.request = request
    return request
