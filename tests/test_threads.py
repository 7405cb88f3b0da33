"""One thread at a time (_base.Held, shmtopo_comm_claim): a comm and its
windows take one call at a time. A second thread's call, or a free while
another thread waits inside a call, raises ShmtopoError (EBUSY) at once
and touches nothing; the call already inside completes. Real processes
over Comm.from_callbacks (ranks.py)."""
import errno
import threading
import time

import numpy as np
import pytest

import ranks

pytestmark = [pytest.mark.serial, pytest.mark.no_mpi]

ROUNDS = 5


def _inside(call):
    """Start call() in a thread; return (thread, its outcome list) once the
    thread is inside its wait (the peer holds it there)."""
    outcome, started = [], threading.Event()

    def run():
        started.set()
        try:
            outcome.append(("ok", call()))
        except Exception as exc:  # noqa: BLE001 - the test reports it
            outcome.append(("error", repr(exc)))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    started.wait()
    time.sleep(0.2)  # the call is waiting on the peer by now
    return thread, outcome


def _busy(call):
    """What call() raised: 'EBUSY' when it was refused for another thread."""
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - the test reports it
        return "EBUSY" if getattr(exc, "errno", None) == errno.EBUSY else repr(exc)
    return "no error"


def race(comm, what):
    """Rank 0 starts `what` in a thread; its main thread then frees (or calls
    again) while the thread waits for rank 1, which joins only after."""
    seen = []
    for _ in range(ROUNDS):
        win = comm.allocate(4096)
        if what == "fence":
            first, second = win.fence, win.free
        elif what == "peer_fence":
            first, second = (lambda: win.peer_fence(1 - comm.rank)), win.abandon
        elif what == "allreduce":
            first, second = (lambda: comm.allreduce(np.ones(4))), comm.free
        elif what == "general allreduce":
            first, second = (lambda: comm.allreduce(np.ones(4), algorithm="flat")), comm.free
        elif what == "persistent":
            request = comm.allreduce_init(np.ones(4), np.zeros(4))
            first, second = request.start, request.free
        else:  # two threads in collectives at once
            first, second = (lambda: comm.allreduce(np.ones(4))), (lambda: comm.bcast(np.ones(4)))
        if comm.rank == 0:
            thread, outcome = _inside(first)
            seen.append(_busy(second))
            ranks.CALLBACKS.barrier()  # now rank 1 joins the call
            thread.join(30)
            seen.append(outcome[0][0] if outcome else "still inside")
        else:
            ranks.CALLBACKS.barrier()
            first()
        win.fence()  # the window and the comm still work on every rank
        assert float(comm.allreduce(np.ones(1))[0]) == comm.size
        if what == "persistent":
            request.start()  # and so does the request
            request.free()
        win.free()
    return seen


@pytest.mark.parametrize("what", ["fence", "peer_fence", "allreduce", "general allreduce", "two calls",
                                  "persistent"])
def test_a_second_thread_is_refused_and_the_first_completes(what):
    before = ranks.shm_files()
    out = ranks.run(2, race, what)
    assert out[0] == ("ok", ["EBUSY", "ok"] * ROUNDS), out
    assert out[1] == ("ok", []), out
    assert ranks.shm_files() - before == set()

