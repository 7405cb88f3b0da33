"""shmtopo.accel.nonblocking: the nonblocking collectives of an accelerated
comm, checked against the same calls on the plain mpi4py comm (bitwise, on
small integers), counted as run in shared memory; their requests in MPI's
own Waitall/Testall beside point-to-point ones; progress without a Wait
(a program that polls, a program that sends between its posts); misuse
on one rank (first, middle, last, another node's leader) raising on every
rank, never a hang. Each test runs on one node and on simulated nodes of 2
ranks."""
import re
import threading
import time

import numpy as np
import pytest
from mpi4py import MPI

from shmtopo import progress
from shmtopo.accel import nonblocking
from shmtopo.errors import ShmtopoArgumentError, ShmtopoValueError
from conftest import run_accelerated_script, survivors_of_a_kill_flags
from values import culprits, same_bits

WORLD = MPI.COMM_WORLD


def cases(rank, n):
    """name: (the call, and a function giving its arguments and the array it
    writes, fresh for each comm)."""
    x = np.arange(6.0) + 10 * rank
    counts = [r + 1 for r in range(n)]
    v = (counts, [sum(counts[:r]) for r in range(n)])
    mine = np.full(rank + 1, rank + 0.5)

    def full(shape, on=True):
        return np.full(shape, -1.0) if on else None

    def out(o, *args):
        return args, o

    def bcast():
        b = x.copy() if rank == n - 1 else full(6)
        return out(b, b, n - 1)

    def allgatherv():
        o = full(sum(counts))
        return out(o, mine, [o, v, MPI.DOUBLE])

    def gatherv():
        o = full(sum(counts), rank == 0)
        return out(o, mine, [o, v, MPI.DOUBLE] if rank == 0 else None, 0)

    def scatterv():
        o = full(rank + 1)
        return out(o, [np.arange(float(sum(counts))), v, MPI.DOUBLE] if rank == 0 else None, o, 0)

    def alltoallw():
        o = full(n)
        spec = [[1] * n, [8 * r for r in range(n)], [MPI.DOUBLE] * n]
        return out(o, [np.arange(float(n)) + rank, *spec], [o, *spec])

    return {
        "Iallreduce": lambda: out(o := full(6), x, o),
        "Iallreduce MAX": lambda: out(o := full(6), x, o, MPI.MAX),
        "Ibcast": bcast,
        "Ireduce": lambda: out(o := full(6, rank == 0), x, o, MPI.SUM, 0),
        "Iallgather": lambda: out(o := full((n, 6)), x, o),
        "Ialltoall": lambda: out(o := full((n, 2)), np.arange(2.0 * n) + rank, o),
        "Igather": lambda: out(o := full((n, 6), rank == n - 1), x, o, n - 1),
        "Iscatter": lambda: out(o := full(2), np.arange(2.0 * n) if rank == 0 else None, o, 0),
        "Igatherv": gatherv,
        "Iscatterv": scatterv,
        "Iallgatherv": allgatherv,
        "Ialltoallv": lambda: out(o := full(n), np.arange(float(n)) + rank, o),
        "Ireduce_scatter_block": lambda: out(o := full(2), np.arange(2.0 * n) * (rank + 1), o),
        "Ireduce_scatter": lambda: out(o := full(rank + 1), np.arange(float(sum(counts))), o, counts),
        "Iscan": lambda: out(o := full(6), x, o),
        "Iexscan": lambda: out(o := full(6), x, o),
        "Ibarrier": lambda: out(None),
        "Ialltoallw": alltoallw,
    }


def results(comm, name, make):
    args, out = make()
    getattr(comm, name.split()[0])(*args).Wait()
    return out


def test_results_are_mpis(acomm):
    """Each runs as its blocking call, on the comm's thread, in shared memory."""
    rank, n = WORLD.rank, WORLD.size
    for name, make in cases(rank, n).items():
        got, want = results(acomm, name, make), results(WORLD, name, make)
        if name == "Iexscan" and rank == 0:
            continue  # undefined on rank 0
        if want is not None:
            same_bits(got, want, name)
    counted = acomm.shm_stats()
    assert all(delegated == 0 for _, delegated in counted.values()), counted
    assert counted["Iallreduce"] == (2, 0), counted
    assert len(counted) == len(nonblocking.NONBLOCKING), counted


def test_requests_mix_with_point_to_point(acomm):
    """MPI's own Waitall, Testall and Waitany take them beside Isend/Irecv."""
    rank, n = WORLD.rank, WORLD.size
    right, left = (rank + 1) % n, (rank - 1) % n
    for wait in ("Waitall", "Testall", "Waitany"):
        total, got = np.zeros(3), np.zeros(1)
        requests = [acomm.Iallreduce(np.full(3, rank + 1.0), total),
                    WORLD.Isend(np.full(1, float(rank)), right, tag=7), WORLD.Irecv(got, left, tag=7)]
        if wait == "Waitall":
            MPI.Request.Waitall(requests)
        elif wait == "Testall":
            while not MPI.Request.Testall(requests):
                time.sleep(1e-4)
        else:
            for _ in requests:
                MPI.Request.Waitany(requests)
        same_bits(total, np.full(3, n * (n + 1) / 2))
        assert got[0] == left
        assert all(r == MPI.REQUEST_NULL for r in requests)


def test_posted_in_order_waited_in_any_order(acomm):
    rank, n = WORLD.rank, WORLD.size
    a, b, c = np.zeros(2), np.arange(4.0) if rank == 1 % n else np.zeros(4), np.zeros(2)
    requests = [acomm.Iallreduce(np.ones(2), a), acomm.Ibcast(b, root=1 % n), acomm.Iallreduce(np.full(2, 2.0), c)]
    acomm.Allreduce(np.ones(1), np.zeros(1))  # a blocking call between: its own order, apart
    for r in reversed(requests):
        r.Wait()
    same_bits(a, np.full(2, float(n)))
    same_bits(b, np.arange(4.0))
    same_bits(c, np.full(2, 2.0 * n))


def test_progress_while_the_program_polls(acomm):
    """Nonblocking means it completes while the program does other work: a
    program that only polls with Test and sends between its posts, which a
    call that blocked at its post would deadlock."""
    rank, n = WORLD.rank, WORLD.size
    if n > 1:  # rank 0 posts, then sends to 1; rank 1 receives from 0 before it posts
        b = np.arange(3.0) if rank == 0 else np.zeros(3)
        got = np.zeros(1)
        if rank == 0:
            request = acomm.Ibcast(b, root=0)
            WORLD.Send(np.ones(1), 1, tag=3)
        elif rank == 1:
            WORLD.Recv(got, 0, tag=3)
            request = acomm.Ibcast(b, root=0)
        else:
            request = acomm.Ibcast(b, root=0)
        request.Wait()
        same_bits(b, np.arange(3.0))
    barrier = acomm.Ibarrier()
    polls = 0
    while not barrier.Test():
        polls += 1
        time.sleep(1e-4)
    assert barrier == MPI.REQUEST_NULL


def test_a_mismatch_raises_the_same_error_on_every_rank(acomm, request):
    """Another root, count or call on one rank: every rank's Wait raises the
    same error (the others do not wait for ever), and the comm goes on."""
    rank, n = WORLD.rank, WORLD.size
    if n == 1:
        pytest.skip("one rank has no other to disagree with")
    for culprit in culprits(n, request.node.callspec.params["acomm"]):
        odd = rank == culprit
        b = np.zeros(4)
        posts = {
            "root": lambda: acomm.Ibcast(b, root=int(odd) % n),
            "count": lambda: acomm.Iallreduce(np.ones(3 + odd), np.zeros(3 + odd)),
            "call": lambda: acomm.Ibcast(b, root=0) if odd else acomm.Iallreduce(b, np.zeros(4)),
        }
        for what, post in posts.items():
            req = post()
            with pytest.raises(ShmtopoArgumentError) as info:
                req.Wait()
            assert "disagree" in str(info.value) or f"rank {culprit}" in str(info.value), (what, info.value)
        out = np.zeros(1)
        acomm.Iallreduce(np.ones(1), out).Wait()
        assert out[0] == n


def test_mpis_waitall_raises_the_error_as_mpi_does(acomm):
    rank, n = WORLD.rank, WORLD.size
    req = acomm.Iallreduce(np.ones(2 + (rank == n - 1)), np.zeros(2 + (rank == n - 1)))
    if n == 1:
        req.Wait()
        return
    with pytest.raises(MPI.Exception) as info:
        MPI.Request.Waitall([req])
    assert info.value.Get_error_class() in (MPI.ERR_IN_STATUS, MPI.ERR_OTHER)


def test_freeing_or_cancelling_a_running_request_raises_on_that_rank(acomm, request):
    """Erroneous in MPI: the rank at fault hears of it; the call still
    completes on every rank."""
    rank, n = WORLD.rank, WORLD.size
    for culprit in culprits(n, request.node.callspec.params["acomm"]):
        out = np.zeros(2)
        req = None
        if rank == culprit:
            req = acomm.Iallreduce(np.ones(2), out)
            if n > 1:  # the others post after the barrier: it cannot have completed
                with pytest.raises(ShmtopoValueError, match="erroneous"):
                    req.Free()
                with pytest.raises(ShmtopoValueError, match="cancel"):
                    req.Cancel()
        WORLD.Barrier()
        if rank != culprit:
            req = acomm.Iallreduce(np.ones(2), out)
        req.Wait()
        same_bits(out, np.full(2, float(n)))


def test_requests_never_waited_and_a_comm_freed_meanwhile(acomm):
    """A program that posts, never waits, and frees the comm: Free is local,
    the calls still complete, and the comm's thread ends."""
    dup = acomm.Dup()
    before = set(threading.enumerate())
    outs = [np.zeros(2) for _ in range(3)]
    for out in outs:
        dup.Iallreduce(np.ones(2), out)
    (thread,) = [t for t in threading.enumerate() if t not in before and t.name == "shmtopo-progress"]
    dup.Free()
    thread.join(30)
    assert not thread.is_alive()
    for out in outs:
        same_bits(out, np.full(2, float(WORLD.size)))
    WORLD.Barrier()


def test_two_threads_post_and_wait(acomm):
    """Requests waited on another thread than the one that posted them."""
    outs = [np.zeros(1) for _ in range(20)]
    requests = [acomm.Iallreduce(np.ones(1), out) for out in outs]
    waiter = threading.Thread(target=lambda: [r.Wait() for r in requests[::2]])
    waiter.start()
    for r in requests[1::2]:
        r.Wait()
    waiter.join()
    for out in outs:
        assert out[0] == WORLD.size


def test_below_thread_multiple_the_calls_are_mpis(acomm, monkeypatch):
    """Where a second thread may not call MPI, the nonblocking calls are
    MPI's own (the same decision on every rank: the job's thread level)."""
    monkeypatch.setattr(progress, "_thread_multiple", False)
    out = np.zeros(2)
    req = acomm.Iallreduce(np.ones(2), out)
    assert type(req) is MPI.Request
    req.Wait()
    same_bits(out, np.full(2, float(WORLD.size)))
    assert acomm.shm_stats()["Iallreduce"] == (0, 1)


# ---- programs that leave: run under their own mpiexec, from the serial pass ----------------

def test_a_program_that_finalizes_mpi_itself_with_calls_posted(tmp_path):
    """Calls waited, calls never waited, then the program's own MPI.Finalize():
    the threads make no MPI call after it, every rank exits cleanly."""
    proc = run_accelerated_script(tmp_path, "acomm.Iallreduce(np.ones(2), out).Wait()\n"
                                  "later = [acomm.Ibcast(np.zeros(3), root=0) for _ in range(3)]\n"
                                  "MPI.Finalize()\nprint('finalized', out[0], flush=True)\n")
    assert proc.returncode == 0 and proc.stdout.count("finalized") == proc.stdout.count("2.0") == 2, \
        proc.stdout + proc.stderr
    assert "MPI_FINALIZE" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr


def test_a_program_that_exits_with_calls_never_waited(tmp_path):
    proc = run_accelerated_script(tmp_path, "dup = acomm.Dup()\n"
                                  "posted = [dup.Iallreduce(np.ones(2), np.zeros(2)) for _ in range(4)]\n"
                                  "print('leaving', flush=True)\n", "-W", "always::ResourceWarning")
    assert proc.returncode == 0 and proc.stdout.count("leaving") == 2, proc.stdout + proc.stderr


@pytest.mark.parametrize("victim", [0, 2])
def test_a_rank_that_dies_is_named_by_every_survivors_wait(tmp_path, victim):
    """A rank killed before it posts: the others' Wait raises the death (the
    comm's timeout is far away), it does not wait for ever."""
    proc = run_accelerated_script(tmp_path, f"""
import os, signal, time
from shmtopo.errors import PeerDeadError, PeerAbortedError
if acomm.Get_rank() == {victim}:
    os.kill(os.getpid(), signal.SIGKILL)
request = acomm.Iallreduce(np.ones(2), out)
start = time.monotonic()
try:
    request.Wait()
    print('no error', flush=True)
except (PeerDeadError, PeerAbortedError) as exc:
    print('raised', type(exc).__name__, 'rank', exc.rank, round(time.monotonic() - start, 1), flush=True)
time.sleep(max(0.0, start + 3 - time.monotonic()))  # a survivor that left first would be named instead
os._exit(0)  # MPI_Finalize would wait for the dead rank
""", n=3, timeout=120, flags=survivors_of_a_kill_flags())
    # mpiexec may forward two ranks' lines unseparated: count the reports, not lines
    reports = re.findall(r"raised \w+ rank \d+|no error", proc.stdout)
    assert len(reports) == 2 and all(f"rank {victim}" in r for r in reports), proc.stdout + proc.stderr
