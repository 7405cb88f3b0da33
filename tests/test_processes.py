"""Failure paths with real processes joined by Comm.from_callbacks (see
ranks.py): dead peers, timeouts, abandoned windows, failing callbacks,
disagreeing arguments, and SIGKILL under a real mpiexec."""
import os
import signal
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import ranks
from conftest import run_mpiexec

pytestmark = pytest.mark.serial
HERE = Path(__file__).resolve().parent


def fence_counts(comm, epochs):
    from test_fence import fence_epochs

    with comm.allocate(shape=(comm.size,), dtype=np.int64) as win:
        return fence_epochs(comm, win, win.fence)


@pytest.mark.no_mpi
def test_from_callbacks_fences_across_processes():
    out = ranks.run(3, fence_counts, 5)
    assert out == {r: ("ok", 0) for r in range(3)}


def last_rank_dies_mid_fences(comm, rounds):
    win = comm.allocate(4096)
    try:
        for i in range(rounds):
            if comm.rank == comm.size - 1 and i == rounds // 2:
                os.kill(os.getpid(), signal.SIGKILL)
            win.fence()
    except Exception as exc:
        return type(exc).__name__, getattr(exc, "rank", None), str(exc).split(" while ")[0]
    return "no error", None, ""


@pytest.mark.no_mpi
@pytest.mark.parametrize("attempt", range(3))
def test_every_survivor_names_the_dead_rank(attempt):
    """The first survivor to notice leaves naming the dead rank; the other
    must not report that leave (PeerAbortedError) but the same death."""
    before = ranks.shm_files()
    out = ranks.run(3, last_rank_dies_mid_fences, 400)
    assert sorted(out) == [0, 1], out
    reports = {value for _, value in out.values()}
    assert len(reports) == 1 and reports.pop()[:2] == ("PeerDeadError", 2), out
    assert ranks.shm_files() - before == set()


def kill_self_after_alloc(comm, backend):
    win = comm.allocate(4096, backend=backend)
    win.fence()
    if comm.rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    start = time.monotonic()
    try:
        win.fence()
    except Exception as exc:
        return type(exc).__name__, getattr(exc, "rank", None), time.monotonic() - start
    return "no error", None, 0.0


@pytest.mark.no_mpi
@pytest.mark.parametrize("backend", ["posix", "memfd", "sysv"])
def test_dead_peer_is_reported_and_nothing_is_left(backend):
    before = ranks.shm_files()
    out = ranks.run(2, kill_self_after_alloc, backend)
    assert 1 not in out  # killed
    status, (name, rank, waited) = out[0]
    assert (status, name, rank) == ("ok", "PeerDeadError", 1)
    assert waited < 2.0
    assert ranks.shm_files() - before == set()


def wait_with_timeout(comm):
    win = comm.allocate(64, timeout=0.3 if comm.rank == 0 else 0)
    if comm.rank == 1:
        time.sleep(1.5)  # rank 0 gives up meanwhile and abandons the window
    start = time.monotonic()
    try:
        # rank 0 had posted its arrival at the first fence before giving up,
        # so rank 1 passes that one and fails at the next
        win.fence()
        win.fence()
    except Exception as exc:
        win.abandon()
        return type(exc).__name__, time.monotonic() - start
    return "no error", 0.0


@pytest.mark.no_mpi
def test_timeout_then_abandon_reaches_the_peer():
    out = ranks.run(2, wait_with_timeout)
    name0, waited0 = out[0][1]
    assert name0 == "ShmtopoTimeoutError" and 0.25 < waited0 < 1.5
    name1, waited1 = out[1][1]
    assert name1 == "PeerAbortedError" and waited1 < 1.0


def error_inside_with_block(comm):
    try:
        with comm.allocate(64) as win:
            if comm.rank == 2:
                raise KeyError("boom")
            win.fence()
    except KeyError:
        return "raised KeyError"
    except Exception as exc:
        return type(exc).__name__, exc.rank


@pytest.mark.no_mpi
def test_error_in_with_block_fails_peers_instead_of_hanging():
    out = ranks.run(3, error_inside_with_block)
    assert out[2] == ("ok", "raised KeyError")
    assert out[0] == ("ok", ("PeerAbortedError", 2))
    assert out[1] == ("ok", ("PeerAbortedError", 2))


def bad_argument_on_one_rank(comm, what):
    kwargs = {"fence": {"fence": "linear" if comm.rank == 0 else "rd"},
              "backend": {"backend": "bogus" if comm.rank == 1 else None},
              "size": {"nbytes": -1 if comm.rank == 1 else 8}}[what]
    kwargs.setdefault("nbytes", 8)
    try:
        comm.allocate(**kwargs)
    except ValueError as exc:
        return type(exc).__name__, str(exc)
    return "allocated", ""


@pytest.mark.no_mpi
@pytest.mark.parametrize("what", ["fence", "backend", "size"])
def test_bad_argument_on_one_rank_fails_every_rank(what):
    out = ranks.run(3, bad_argument_on_one_rank, what)
    for r in range(3):
        status, (name, message) = out[r]
        assert status == "ok" and name == "ShmtopoValueError", out[r]
    if what == "fence":
        assert "disagree" in out[2][1][1]
    else:
        assert out[0][1][1].startswith("rank 1:")


class FlakyAllgather(Exception):
    pass


@pytest.mark.no_mpi
def test_failing_callback_fails_every_rank():
    out = ranks.run(3, _flaky_comm_create)
    assert out[1][0] == "ok" and out[1][1][0] == "CallbackError" and "FlakyAllgather" in out[1][1][1]
    for r in (0, 2):
        assert out[r] == ("ok", ("CallbackError", "out-of-band allgather callback failed on rank 1", 1))


def _flaky_comm_create(comm):
    """Builds a second comm whose allgather fails on rank 1 after exchanging."""
    import shmtopo

    def allgather(send, recv):
        comm_transport_allgather(send, recv)
        if comm.rank == 1:
            raise FlakyAllgather("simulated transport failure")

    comm_transport_allgather = ranks.CALLBACKS.allgather
    try:
        shmtopo.Comm.from_callbacks(comm.size, comm.rank, allgather=allgather,
                                    barrier=ranks.CALLBACKS.barrier)
    except shmtopo.CallbackError as exc:
        return "CallbackError", str(exc), exc.rank
    return "created", "", None


def test_sigkill_under_mpiexec_leaves_nothing(tmp_path):
    marker = tmp_path / "marker"
    before = ranks.shm_files()
    everything_before = set(os.listdir("/dev/shm"))
    script = HERE / "scripts" / "kill_rank.py"
    proc = run_mpiexec(3, [sys.executable, script, marker], timeout=120)
    # the MPI's own segments of the aborted job (Open MPI's, MPICH's) are not
    # ours to judge, but the suite should not leave them either
    for name in set(os.listdir("/dev/shm")) - everything_before:
        if name.startswith(("vader_segment.", "mpich_shm_")):
            os.unlink(os.path.join("/dev/shm", name))
    assert ranks.shm_files() - before == set(), proc.stdout + proc.stderr
    assert marker.exists() and marker.read_text() == "windows ready", proc.stdout + proc.stderr


def oversized_on_one_rank(comm):
    try:
        comm.allocate(2**64 if comm.rank == 1 else 8)
    except ValueError as exc:
        return type(exc).__name__
    return "allocated"


@pytest.mark.no_mpi
def test_unconvertible_size_on_one_rank_fails_every_rank():
    out = ranks.run(3, oversized_on_one_rank, timeout=30)
    assert out == {r: ("ok", "ShmtopoValueError") for r in range(3)}


def create_and_vanish(comm, note):
    """Leave a posix name behind, as a rank killed inside allocation would:
    a second comm's creation ends the process inside its out-of-band
    exchange, once its channel's segment has a name and before the name
    goes (the name written to `note` first)."""
    import shmtopo

    prefix = f"shmtopo.{os.getpid()}."

    def allgather(send, recv):
        recv[:] = send
        names = [n for n in os.listdir("/dev/shm") if n.startswith(prefix)]
        if names:
            with open(note, "w") as f:
                f.write(names[0])
            os._exit(0)

    shmtopo.Comm.from_callbacks(1, 0, allgather=allgather, barrier=lambda: None)


@pytest.mark.no_mpi
def test_stale_names_of_dead_creators_are_swept(tmp_path):
    note = tmp_path / "name"
    ranks.run(1, create_and_vanish, str(note))
    assert note.exists(), "the helper process should have left a name"
    stale = note.read_text()
    # (any other comm made on the machine meanwhile may have swept it already)
    import shmtopo

    with shmtopo.Comm.from_callbacks(1, 0, allgather=lambda s, r: r.__setitem__(slice(None), s),
                                     barrier=lambda: None):
        pass  # creating a comm sweeps names of creators that are gone
    assert stale not in ranks.shm_files()


def lock_then_die(comm):
    """Rank 2 takes rank 0's exclusive lock (the C call accelerated windows
    lock with) and dies holding it; the others then wait for that lock."""
    import shmtopo
    from shmtopo._native import lib
    from shmtopo.errors import check
    ctrl = comm.allocate(int(lib.SHMTOPO_RMA_CTRL_BYTES))
    if comm.rank == 2:
        check(lib.shmtopo_rma_lock(ctrl.handle, 0, 1))
    ctrl.fence()
    if comm.rank == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        check(lib.shmtopo_rma_lock(ctrl.handle, 0, 1))
    except shmtopo.PeerDeadError as exc:
        return f"PeerDeadError: {exc}"
    return "locked"


@pytest.mark.no_mpi
def test_a_rank_dying_with_a_window_lock_fails_the_waiters():
    """The waiters raise PeerDeadError naming the dead holder, instead of
    waiting for a lock nobody will give back."""
    out = ranks.run(3, lock_then_die, timeout=60)
    for r in (0, 1):
        status, text = out[r]
        assert status == "ok" and text.startswith("PeerDeadError") and "rank 2" in text, out
