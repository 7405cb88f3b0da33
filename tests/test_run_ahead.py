"""Running ahead (SHMTOPO_RUN_AHEAD=1): small bcasts and reduces wait only
for the ranks whose data they need, so a root may post several calls before
its receivers read the first.

What must still hold, with real processes (ranks.py): results equal those of
the meeting protocol, including when small calls that ran ahead are followed
by calls that reuse the scratch buffers; a failure some rank ran past is
raised with the same exception on every rank, at the failed call or at most
LAG calls later, and leaves the comm broken on every rank (then freed without
leftovers); a rank that dies while its peers run ahead is reported by every
survivor. The misuse matrix (test_agreement.py, layout ahead-3) runs
every case of one rank's bad or disagreeing argument under mpiexec too.
"""
import os
import time

import numpy as np
import pytest

import ranks
from shmtopo._native import lib

pytestmark = [pytest.mark.serial, pytest.mark.no_mpi]

LAG = lib.SHMTOPO_RUN_AHEAD_LAG  # how many steps a rank may post past the slowest


@pytest.fixture(autouse=True)
def run_ahead(monkeypatch):
    # read at comm creation, in the spawned ranks
    monkeypatch.setenv("SHMTOPO_RUN_AHEAD", "1")
    monkeypatch.setenv("SHMTOPO_TIMEOUT", "10")


def _mixed(comm):
    """Small bcasts and reduces from rotating roots, with an occasional
    large allreduce and bcast (through the scratch buffers, which a rank
    that ran ahead may reuse only once everyone is past) and a random pause."""
    assert comm.runs_ahead
    rng = np.random.default_rng(comm.rank)
    P = comm.size
    wrong = []
    for i in range(400):
        root = i % P
        a = np.array([i, root], np.int64) if comm.rank == root else np.zeros(2, np.int64)
        comm.bcast(a, root=root, out=a)
        if a.tolist() != [i, root]:
            wrong.append(("bcast", i, a.tolist()))
        out = np.zeros(3) if comm.rank == (root + 1) % P else None
        got = comm.reduce(np.array([comm.rank, i, 1.0]), root=(root + 1) % P, out=out)
        if comm.rank == (root + 1) % P and got.tolist() != [P * (P - 1) / 2, P * i, P]:
            wrong.append(("reduce", i, got.tolist()))
        if i % 11 == 0:  # 4 KiB, the most a call carries running ahead (SHMTOPO_AHEAD_MAX)
            m = np.full(512, float(i)) if comm.rank == root else np.zeros(512)
            comm.bcast(m, root=root, out=m)
            total = comm.reduce(m + comm.rank, root=root, out=np.zeros(512) if comm.rank == root else None)
            if m[0] != i or m[-1] != i or (comm.rank == root and total[-1] != P * i + P * (P - 1) / 2):
                wrong.append(("4 KiB", i))
        if i % 7 == 0:  # 600 B: beside the step line, still running ahead
            m = np.full(75, float(i)) if comm.rank == root else np.zeros(75)
            comm.bcast(m, root=root, out=m)
            total = comm.reduce(m + comm.rank, root=root, out=np.zeros(75) if comm.rank == root else None)
            if m[-1] != i or (comm.rank == root and total[-1] != P * i + P * (P - 1) / 2):
                wrong.append(("600 B", i))
        if rng.random() < 0.03:
            time.sleep(0.002)
        if i % 41 == 0:
            big = np.full(70000, comm.rank + 1.0)
            if comm.allreduce(big)[-1] != P * (P + 1) / 2:
                wrong.append(("allreduce", i))
            b = np.arange(40000.0) + i if comm.rank == root else np.zeros(40000)
            comm.bcast(b, root=root, out=b)
            if b[-1] != 39999 + i:
                wrong.append(("large bcast", i))
    comm.barrier()
    return wrong


@pytest.mark.parametrize("n", [2, 3, 4])
def test_results_equal_those_of_meeting_calls(n):
    out = ranks.run(n, _mixed, timeout=120)
    assert out == {r: ("ok", []) for r in range(n)}


def _late_failure(comm, kind, culprit, at):
    """LAG + 2 calls of `kind` past call `at`, where the culprit passes another root
    (bcast) or count (reduce). Returns (raised at call, class, message), and
    what the next call and free do."""
    raised = None
    for i in range(at + LAG + 2):
        bad = comm.rank == culprit and i == at
        try:
            if kind == "bcast":
                a = np.zeros(1)
                comm.bcast(a, root=(1 if bad else 0), out=a)
            else:
                a = np.zeros(2 if bad else 1)
                comm.reduce(a, root=0, out=np.zeros_like(a) if comm.rank == 0 else None)
        except Exception as exc:
            raised = (i, type(exc).__name__, str(exc))
            break
    try:
        comm.barrier()
        after = "usable"
    except Exception as exc:
        after = type(exc).__name__ + ": " + str(exc)
    comm.free()
    return raised, after


@pytest.mark.parametrize("kind", ["bcast", "reduce"])
@pytest.mark.parametrize("culprit", [0, 1, 3])
def test_a_failure_ranks_ran_past_is_raised_on_every_rank(kind, culprit):
    before = ranks.shm_files()
    at = 5
    out = ranks.run(4, _late_failure, kind, culprit, at, timeout=60)
    assert sorted(out) == [0, 1, 2, 3] and all(status == "ok" for status, _ in out.values()), out
    raised = {r: value[0] for r, (_, value) in out.items()}
    assert all(raised[r] is not None for r in raised), out
    # the same exception everywhere, naming the culprit
    assert len({(cls, msg) for _, cls, msg in raised.values()}) == 1, out
    _, cls, msg = raised[0]
    assert cls == "ShmtopoValueError" and "ranks disagree" in msg and f"rank {culprit}" in msg, msg
    # at the failed call, or at most LAG calls later
    assert all(at <= i <= at + LAG for i, _, _ in raised.values()), raised
    # then broken on every rank, and freed without leftovers
    for _, (_, (_, after)) in out.items():
        assert after.startswith("ShmtopoError") or "unusable" in after, out
    assert ranks.shm_files() - before == set()


def _one_bad_argument(comm, culprit):
    """A root out of range on one rank only (a local check: that rank's
    step carries the failure)."""
    try:
        for i in range(12):
            a = np.zeros(1)
            comm.bcast(a, root=(99 if comm.rank == culprit and i == 3 else 0), out=a)
        comm.barrier()
    except Exception as exc:
        comm.free()
        return type(exc).__name__, str(exc)
    comm.free()
    return "no error", ""


@pytest.mark.parametrize("culprit", [0, 2])
def test_an_invalid_argument_on_one_rank_is_raised_on_every_rank(culprit):
    out = ranks.run(3, _one_bad_argument, culprit, timeout=60)
    values = {value for _, value in out.values()}
    assert len(out) == 3 and len(values) == 1, out
    cls, msg = values.pop()
    assert cls == "ShmtopoValueError" and f"rank {culprit}" in msg and "root 99" in msg, msg


def _die_while_others_run_ahead(comm):
    """Rank 2 exits at its 6th bcast; rank 0 (the root) runs ahead."""
    try:
        for i in range(200):
            if comm.rank == 2 and i == 5:
                os._exit(0)
            a = np.zeros(1)
            comm.bcast(a, root=0, out=a)
        comm.barrier()
    except Exception as exc:
        return type(exc).__name__, getattr(exc, "rank", None)
    return "no error", None


def test_a_rank_dying_under_ranks_running_ahead_is_reported_by_every_survivor():
    before = ranks.shm_files()
    start = time.monotonic()
    out = ranks.run(4, _die_while_others_run_ahead, timeout=60)
    assert sorted(out) == [0, 1, 3], out
    # found dead, or left by a peer that found it (as with meeting calls): rank 2 named
    assert all(cls in ("PeerDeadError", "PeerAbortedError") and blamed == 2
               for _, (cls, blamed) in out.values()), out
    assert time.monotonic() - start < 30
    assert ranks.shm_files() - before == set()


def _root_runs_ahead_of_late_receivers(comm):
    """The root makes LAG bcasts of 4 KiB (SHMTOPO_AHEAD_MAX, the most that
    runs ahead) before any receiver calls one (they wait for its flag in a
    window, 10 s at most): it waits for none of them, and they all receive
    every bcast."""
    n = 4096 // 8
    win = comm.allocate(shape=(1,), dtype=np.int64)
    got = []
    if comm.rank == 0:
        for i in range(LAG):
            comm.bcast(np.full(n, float(i)), root=0)
        win.local[0] = 1
    else:
        deadline = time.monotonic() + 10
        while win.query(0)[0] != 1:
            if time.monotonic() > deadline:
                return "the root never got past its bcasts"
            time.sleep(0.001)
        for i in range(LAG):
            b = np.zeros(n)
            comm.bcast(b, root=0, out=b)
            got.append(bool((b == i).all()))
    win.fence()
    win.free()
    return got


def test_a_bcast_of_4_kib_runs_ahead_of_late_receivers():
    out = ranks.run(3, _root_runs_ahead_of_late_receivers, timeout=60)
    assert out == {0: ("ok", []), 1: ("ok", [True] * LAG), 2: ("ok", [True] * LAG)}, out


def _reports(comm):
    return comm.runs_ahead


def test_runs_ahead_is_off_by_default(monkeypatch):
    assert ranks.run(2, _reports) == {0: ("ok", True), 1: ("ok", True)}
    monkeypatch.delenv("SHMTOPO_RUN_AHEAD")
    assert ranks.run(2, _reports) == {0: ("ok", False), 1: ("ok", False)}


def _late_failure_then_large_call(comm):
    """The culprit (rank 1) passes another root at the 2nd of three bcasts;
    then every rank calls an allreduce through the scratch buffers, whose
    reuse first judges the steps a rank ran past."""
    try:
        for i in range(3):
            a = np.zeros(1)
            comm.bcast(a, root=(1 if comm.rank == 1 and i == 1 else 0), out=a)
        comm.allreduce(np.ones(70000))
    except Exception as exc:
        comm.free()
        return type(exc).__name__, str(exc)
    comm.free()
    return "no error", ""


def test_a_failure_ranks_ran_past_is_raised_by_the_next_large_call(monkeypatch):
    monkeypatch.setenv("SHMTOPO_SINGLE_COPY", "0")  # the scratch buffers, not single copy
    before = ranks.shm_files()
    out = ranks.run(4, _late_failure_then_large_call, timeout=60)
    values = {value for _, value in out.values()}
    assert len(out) == 4 and len(values) == 1, out
    cls, msg = values.pop()
    assert cls == "ShmtopoValueError" and "ranks disagree: rank 1 called bcast" in msg, msg
    assert ranks.shm_files() - before == set()


def _last_bcast_disagrees_then_free(comm):
    """Rank 2's last small bcast before free() has another root: the ranks
    that ran past it learn of it in free(). Whatever free() did to the
    comm, a second free() and abandon() must be safe (no double free)."""
    a = np.zeros(1)
    step, raised = "bcast", None
    try:
        comm.bcast(a, root=0, out=a)
        comm.bcast(a, root=1 if comm.rank == 2 else 0, out=a)
        step = "free"
        comm.free()
    except Exception as exc:  # noqa: BLE001 - compared across ranks below
        raised = type(exc).__name__
    comm.free()
    comm.abandon()
    return step, raised, comm.freed


def test_free_after_a_mismatch_ranks_ran_past_frees_once():
    before = ranks.shm_files()
    out = ranks.run(3, _last_bcast_disagrees_then_free, timeout=60)
    assert sorted(out) == [0, 1, 2] and all(status == "ok" for status, _ in out.values()), out
    assert {value for _, value in out.values()} <= {("free", "ShmtopoValueError", True),
                                                    ("bcast", "ShmtopoValueError", True)}, out
    assert out[0][1][0] == "free", out  # the root ran past the bcast that failed
    assert ranks.shm_files() - before == set()
