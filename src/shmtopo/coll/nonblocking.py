"""shmtopo.coll.nonblocking: a comm's nonblocking collectives
(``comm.iallreduce``, ``comm.ibcast``, ... ``comm.ialltoallw``).

Each posts the blocking call of its name without the ``i`` and returns a
:class:`Request`; ``req.wait()`` returns what that call returns (or raises
its error, the same on every rank: its agreement runs as it would). The
calls run on the comm itself, one at a time, in the order posted
(shmtopo.progress): on a thread of the comm's queue while the program
computes, or in the program's own ``wait`` where no thread took them yet.

MPI orders every collective of a comm, blocking or not, by the order each
rank calls them, so a blocking call runs after the calls posted before
it. While calls are queued or running the queue holds the comm's claim
(``shmtopo_comm_queue_hold``): a blocking call (a fast entry, a free, a
window's allocation, a split) claims the comm, finds it queued
(EINPROGRESS), runs the queue (:func:`run_queued`, which
``shmtopo._fastpath`` calls) and claims again. The calls run through the
comm's own methods, fast entries included. No second comm and no memory of
its own: posting costs a lock and a doorbell.
"""
from __future__ import annotations

import os
from typing import Any, Iterable

from .. import progress
from .._native import lib
from ..errors import ForkedProcessError, check
from ..progress import Call

#: The collectives that have a nonblocking form (``i`` + the name).
NONBLOCKING = ("barrier", "bcast", "reduce", "allreduce", "allgather", "alltoall", "gather", "scatter",
               "reduce_scatter", "gatherv", "scatterv", "allgatherv", "alltoallv", "alltoallw", "scan", "exscan")

_SPIN_NS, _YIELD_NS = (round(seconds * 1e9) for seconds in progress.WAITS)

# comm address -> its queue, for run_queued (the claim knows only the address)
_queues: dict[int, "Queue"] = {}


def run_queued(address: int) -> bool:
    """Run the nonblocking calls queued on the comm at ``address`` (the
    claim of a blocking call found them): True where the comm has a queue
    (the claim is then tried again)."""
    queue = _queues.get(address)
    if queue is None:
        return False
    queue.run_all()
    return True


class Queue(progress.Progress):
    """A comm's nonblocking calls, run on the comm (see the module). Across
    nodes the calls make MPI calls: the thread runs them only under
    ``MPI_THREAD_MULTIPLE``; below it they run in the program's waits."""

    def __init__(self, comm: Any) -> None:
        self._comm = comm
        self._address = comm.address
        self._pid = os.getpid()
        threaded = comm.nnodes == 1 or progress.threads_may_call_mpi()
        super().__init__(progress.grace_for(comm.size, comm.ncpus), threaded)
        _queues[self._address] = self

    def post_call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> "Request":
        """Local: post the blocking call ``name``; its request."""
        if os.getpid() != self._pid:  # a fork child: its parent's thread and locks are not its own
            raise ForkedProcessError(f"i{name}: this process (pid {os.getpid()}) is a fork of the rank's "
                                     f"process (pid {self._pid}): a forked child cannot act as the rank", 3)
        call = Call(name, "i" + name, args, kwargs)
        self.post(call)
        return Request(self, call)

    def forget(self) -> None:
        """The comm is going: no run_queued for its address any more."""
        if _queues.get(self._address) is self:
            del _queues[self._address]

    def close(self) -> None:
        super().close()
        self.forget()

    def drop(self, why: str) -> None:
        super().drop(why)
        self.forget()

    def _posting(self, idle: bool) -> None:
        if idle:
            check(lib.shmtopo_comm_queue_hold(self._comm.handle))  # EBUSY: another thread is inside a call

    def _execute(self, call: Call) -> None:
        check(lib.shmtopo_comm_queue_take(self._comm.handle, _SPIN_NS, _YIELD_NS))
        call.result = getattr(self._comm, call.name)(*call.args, **call.kwargs)

    def _stop(self) -> None:
        # this rank leaves the comm: the running call's waits, which look at
        # every rank's departure (this one's too), fail within ~20 ms, and
        # the peers hear of it as of an abandonment
        lib.shmtopo_comm_leave(self._comm.handle)

    def _ran(self, call: Call, more: bool) -> None:
        if self._current is None:  # not a call dropped while another runs: that one gives it back
            lib.shmtopo_comm_queue_give(self._comm.handle, more)


class Request:
    """The request of a nonblocking collective (``comm.iallreduce(...)``), as
    mpi4py's lower-case requests: ``wait()`` returns the blocking call's
    result (None where it has none) or raises its error, the same on every
    rank; ``test()`` returns ``(done, result)``; ``done`` says whether it
    has run. :meth:`waitall` and :meth:`testall` take lists that may also
    hold mpi4py's requests (point-to-point ones, say). Dropping a request
    unwaited is fine: the call runs all the same (before the comm's next
    blocking call, and at the latest when the comm is freed)."""

    __slots__ = ("_queue", "_call")

    def __init__(self, queue: Queue, call: Call) -> None:
        self._queue, self._call = queue, call

    @property
    def done(self) -> bool:
        """True once the call has run (or failed)."""
        return self._call.done

    def wait(self) -> Any:
        """Return once the call has run (running it, and the calls posted
        before it, here where no thread has taken them): its result."""
        call = self._call
        self._queue.complete(call)  # also when done: the program waits itself, the thread need not hurry
        if call.error is not None:
            raise call.error
        return call.result

    def test(self) -> tuple[bool, Any]:
        """``(True, result)`` once the call has run, else ``(False, None)``
        (where the comm's calls have no thread of their own, this runs them)."""
        if not self._call.done and self._queue.threaded:
            return False, None
        return True, self.wait()

    def __repr__(self) -> str:
        state = "done" if self._call.done else "posted"
        return f"<shmtopo.Request {self._call.posted} {state}>"

    @staticmethod
    def waitall(requests: Iterable[Any]) -> list[Any]:
        """Wait for every request (these and mpi4py's, by their ``wait()``),
        in order: their results. Where calls failed, every request is still
        waited, then the first error is raised."""
        results: list[Any] = []
        error: BaseException | None = None
        for request in requests:
            try:
                results.append(request.wait())
            except BaseException as exc:  # noqa: BLE001 - raised once every request is complete
                results.append(None)
                error = error or exc
        if error is not None:
            raise error
        return results

    @staticmethod
    def testall(requests: Iterable[Any]) -> tuple[bool, list[Any] | None]:
        """``(True, results)`` where every request has completed (then
        waited, as :meth:`waitall`), else ``(False, None)`` and none is
        consumed (mpi4py's by their ``Get_status()``)."""
        requests = list(requests)
        for request in requests:
            if isinstance(request, Request):
                if not request.done and not request._queue.threaded:
                    request.wait()  # no thread runs them: this does
                if not request.done:
                    return False, None
            elif not request.Get_status():
                return False, None
        return True, Request.waitall(requests)
