"""shmtopo.accel.nonblocking: the nonblocking collectives of an accelerated
comm (``Iallreduce``, ``Ibcast``, ... ``Ialltoallw``).

Each one is the blocking call of the same name without its ``I``, run on a
duplicate of the comm that only this module uses, in the order the program
posted them — in shared memory where that blocking call would run there,
through MPI where it would go to MPI — on a thread of the comm's own, so
that it progresses while the program computes (shmtopo.progress, the
engine the own API's nonblocking calls run on too). Its own comm keeps it apart
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
from typing import Any, Callable

from .. import _oob, progress
from ..errors import ShmtopoValueError
from ..job import release_at_finalize
from ..progress import Call

#: The nonblocking collectives, each run as the blocking call named without its "I".
NONBLOCKING = ("Ibarrier", "Ibcast", "Igather", "Igatherv", "Iscatter", "Iscatterv", "Iallgather", "Iallgatherv",
               "Ialltoall", "Ialltoallv", "Ialltoallw", "Ireduce", "Iallreduce", "Ireduce_scatter_block",
               "Ireduce_scatter", "Iscan", "Iexscan")


def blocking_name(name: str) -> str:
    """The blocking call a nonblocking one runs: ``Iallreduce`` -> ``Allreduce``."""
    return name[1].upper() + name[2:]


def new_call(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Call:
    """A posted ``name`` (``Iallreduce``): the blocking call to run."""
    return Call(blocking_name(name), name, args, kwargs)


class Progress(progress.Progress):
    """One accelerated comm's nonblocking collectives (shmtopo.progress):
    they run on a duplicate of the comm (an accelerated comm on an Idup of
    it), which the first call waits for; each completes its Grequest.
    ``close`` frees the duplicate once the posted calls have run; at exit
    and at MPI_Finalize (``_release``) no MPI call is made any more."""

    def __init__(self, private: Any, opened: Any, count: Callable[[str, bool], None],
                 news: Callable[[str], None] | None, timeout: float) -> None:
        self._private = private  # an accelerated comm on an Idup of the program's comm
        self._opened = opened  # that Idup's request, completed before the first call runs
        self._news, self._timeout = news, timeout  # for that wait: a rank that died or never comes
        self._broken: BaseException | None = None  # why the Idup never completed
        self._open = threading.Event()  # set once it has completed
        self._count = count  # count(name, accelerated) into the program's comm's shm_stats
        self._graced = False  # the grace is set once the duplicate's shmtopo comm says how many cores there are
        release_at_finalize()
        super().__init__()

    def wait_opened(self) -> None:
        """Return once the duplicate's Idup has completed (every rank has
        posted its first call): MPI may not free the comm while it is pending."""
        self._open.wait()

    def _release(self) -> None:
        super()._release()
        self._open.set()

    def _leave(self) -> None:
        private, self._private = self._private, None
        try:
            private.Free()  # local
        except Exception:  # noqa: BLE001 - a thread has no one to tell; the comm is unusable anyway
            pass

    def _execute(self, call: Call) -> None:
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
        call.result = handed = private.shm_delegated(call.name) > before  # counted once the lock is left
        if not self._graced and not handed:
            self._graced = True
            shm = private.shm_comm
            self.set_patience(progress.grace_for(shm.size, shm.ncpus))

    def _ran(self, call: Call, more: bool) -> None:
        request, call.request = call.request, None
        if not self._gone and request is not None:  # under the lock: MPI_Finalize does not come in between
            request.Complete()

    def _counted(self, call: Call) -> None:
        if call.error is None:
            self._count(call.name, not call.result)


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
                raise ShmtopoValueError(f"{call.posted}: freeing the request of a nonblocking collective "
                                        "that has not completed is erroneous in MPI; Wait for it")
            if call is not None:
                self._forget(call)
            super().Free()

        def Cancel(self) -> None:
            name = self._call.posted if self._call is not None else "Icollective"
            raise ShmtopoValueError(f"{name}: a nonblocking collective cannot be cancelled (erroneous in MPI)")

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
