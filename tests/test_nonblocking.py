"""The own API's nonblocking collectives (comm.iallreduce, ... coll/nonblocking.py):
each equal to its blocking call bit for bit; run in the order posted among the
comm's blocking calls (collectives, a window's allocation, a persistent start,
the shared topology, the free); progress while the program does not wait;
requests in lists with mpi4py's point-to-point ones; misuse on one rank
(first, middle, last, another node's leader) raising the same error on every
rank, never a hang. On one node and on simulated nodes of 2 ranks."""
import os
import re
import sys
import threading
import time

import numpy as np
import pytest
from mpi4py import MPI

import shmtopo
from shmtopo import progress
from shmtopo.coll.args import type_runs
from shmtopo.coll.nonblocking import NONBLOCKING
from shmtopo.errors import BrokenWindowError, ForkedProcessError, FreedError, ShmtopoValueError
from conftest import run_mpiexec, skip_simulated_nodes_across_hosts, survivors_of_a_kill_flags
from values import culprits, same_bits

WORLD = MPI.COMM_WORLD


@pytest.fixture(params=[None, 2], ids=["node", "nodes-of-2"])
def node_size(request):
    """This node, and simulated nodes of 2 ranks."""
    skip_simulated_nodes_across_hosts(request.param)
    return request.param


@pytest.fixture
def scomm(node_size):
    """The job's shmtopo comm."""
    c = shmtopo.Comm.from_mpi(WORLD, node_size=node_size, timeout=60)
    yield c
    c.free()


def cases(rank, n):
    """name: a function giving fresh (args, kwargs) of that collective."""
    x = np.arange(6.0) + 10 * rank
    counts = [r + 1 for r in range(n)]
    mine = np.full(rank + 1, rank + 0.5)
    whole = type_runs([0], [8], 8)
    return {
        "barrier": lambda: ((), {}),
        "bcast": lambda: ((x.copy(), n - 1), {}),
        "reduce": lambda: ((x, "sum", 0), {}),
        "allreduce": lambda: ((x, "max"), {}),
        "allgather": lambda: ((x,), {}),
        "alltoall": lambda: ((np.arange(2.0 * n) + rank,), {}),
        "gather": lambda: ((x, n - 1), {}),
        "scatter": lambda: ((np.arange(2.0 * n).reshape(n, 2) if rank == 0 else None, 0), {"out": np.zeros(2)}),
        "reduce_scatter": lambda: ((np.arange(2.0 * n) * (rank + 1), "sum"), {}),
        "gatherv": lambda: ((mine, counts, None, 0), {}),
        "scatterv": lambda: ((np.arange(float(sum(counts))) if rank == 0 else None, counts, None, 0),
                             {"out": np.zeros(rank + 1)}),
        "allgatherv": lambda: ((mine, counts), {}),
        "alltoallv": lambda: ((np.arange(float(n)) + rank, [1] * n, list(range(n)), [1] * n, list(range(n))), {}),
        "alltoallw": lambda: ((np.arange(float(n)) + rank, [(8 * p, 1, whole) for p in range(n)],
                               out := np.zeros(n), [(8 * p, 1, whole) for p in range(n)]), {"_out": out}),
        "scan": lambda: ((x, "sum"), {}),
        "exscan": lambda: ((x, "sum"), {}),
    }


def run(comm, name, make, nonblocking):
    args, kwargs = make()
    out = kwargs.pop("_out", None)
    result = (getattr(comm, "i" + name)(*args, **kwargs).wait() if nonblocking
              else getattr(comm, name)(*args, **kwargs))
    return result if out is None else out


def test_each_equals_its_blocking_call(scomm):
    rank, n = WORLD.rank, WORLD.size
    made = cases(rank, n)
    assert sorted(made) == sorted(NONBLOCKING) and all(callable(getattr(scomm, "i" + name)) for name in made)
    for name, make in made.items():
        got, want = run(scomm, name, make, True), run(scomm, name, make, False)
        if name == "exscan" and rank == 0:
            continue  # rank 0's is undefined
        if want is None:
            assert got is None, name
        else:
            same_bits(got, want, name)
    assert scomm.fast_handle == (scomm.address if scomm.nnodes == 1 else 0)  # the fast entries are back


def test_posted_calls_run_before_the_blocking_calls_after_them(scomm, monkeypatch):
    """MPI's order: a call posted before a blocking collective runs before it,
    whatever the blocking call (a fast entry, a window's allocation, a
    persistent start, the shared topology), waited before or after. The
    queue's thread keeps away (a grace of 1 s): each blocking call must run
    the calls before it itself."""
    monkeypatch.setattr(progress, "GRACE", 1.0)
    monkeypatch.setattr(progress, "GRACE_WITHOUT_SPARE_CORES", 1.0)
    rank, n = WORLD.rank, WORLD.size
    b = np.arange(4.0) if rank == n - 1 else np.zeros(4)
    first = scomm.ibcast(b, root=n - 1, out=b)
    same_bits(scomm.allreduce(np.ones(1), out=np.zeros(1)), np.full(1, float(n)))  # a fast entry's call
    assert first.done  # the bcast ran before it, on every rank
    same_bits(b, np.arange(4.0))
    requests = [scomm.iallreduce(np.full(3, float(i + rank))) for i in range(5)]
    with scomm.allocate(shape=(2,), dtype=np.float64) as win:
        assert all(r.done for r in requests)
        win.fence()
    for i, r in enumerate(requests):
        same_bits(r.wait(), np.full(3, float(i * n + n * (n - 1) // 2)))
    if scomm.nnodes == 1:
        send, recv = np.ones(2), np.zeros(2)
        with scomm.allreduce_init(send, recv, "sum") as persistent:
            late = scomm.iallreduce(np.full(2, 2.0))
            persistent.start()
            assert late.done
            same_bits(recv, np.full(2, float(n)))
    ahead = scomm.ibarrier()
    with shmtopo.share_topology(scomm) as topo:
        assert ahead.done and topo.depth > 0
    last = [scomm.iallgather(np.array([rank])) for _ in range(3)]
    same_bits(scomm.bcast(np.array([rank]), root=0), np.array([0]))
    same_bits(shmtopo.Request.waitall(last)[2].ravel(), np.arange(n))


def test_calls_progress_while_the_program_does_not_wait(scomm):
    """Nothing of the program's runs the calls: its thread does."""
    requests = [scomm.iallreduce(np.ones(1 << 14)) for _ in range(3)]
    deadline = time.monotonic() + 30
    while not all(r.done for r in requests) and time.monotonic() < deadline:
        time.sleep(1e-3)  # neither wait nor test
    assert all(r.done for r in requests)
    flag, result = requests[0].test()
    assert flag and result[0] == WORLD.size


def test_a_program_that_sends_between_its_posts(scomm):
    """Posting never waits for the other ranks: rank 0 posts, then sends to 1,
    which receives before it posts (a post that blocked would deadlock)."""
    rank, n = WORLD.rank, WORLD.size
    if n == 1:
        pytest.skip("needs two ranks")
    b = np.arange(3.0) if rank == 0 else np.zeros(3)
    if rank == 1:
        WORLD.Recv(np.zeros(1), 0, tag=5)
    request = scomm.ibcast(b, root=0)
    if rank == 0:
        WORLD.Send(np.ones(1), 1, tag=5)
    barrier = scomm.ibarrier()
    while not barrier.test()[0]:
        time.sleep(1e-4)
    same_bits(request.wait(), np.arange(3.0))


def test_requests_mix_with_point_to_point(scomm):
    """waitall and testall take mpi4py's requests beside these."""
    rank, n = WORLD.rank, WORLD.size
    right, left = (rank + 1) % n, (rank - 1) % n
    for how in ("waitall", "testall"):
        got = np.zeros(1)
        requests = [scomm.iallreduce(np.full(3, rank + 1.0)), WORLD.Isend(np.full(1, float(rank)), right, tag=7),
                    WORLD.Irecv(got, left, tag=7), WORLD.isend({"from": rank}, right, tag=8),
                    WORLD.irecv(source=left, tag=8)]
        if how == "waitall":
            results = shmtopo.Request.waitall(requests)
        else:
            while True:
                done, results = shmtopo.Request.testall(requests)
                if done:
                    break
                time.sleep(1e-4)
        same_bits(results[0], np.full(3, n * (n + 1) / 2))
        assert got[0] == left and results[4] == {"from": left}


@pytest.mark.parametrize("what", ["count", "root", "call", "argument"])
def test_one_rank_disagreeing_raises_the_same_error_on_every_rank(scomm, node_size, what):
    rank, n = WORLD.rank, WORLD.size
    if n == 1 and what != "argument":
        pytest.skip("one rank has no other to disagree with")
    for culprit in culprits(n, node_size):
        odd = rank == culprit
        post = {
            "count": lambda: scomm.iallreduce(np.ones(3 + odd)),
            "root": lambda: scomm.ibcast(np.zeros(4), root=int(odd) % n),
            "call": lambda: scomm.ibcast(np.zeros(4)) if odd else scomm.iallreduce(np.zeros(4)),
            "argument": lambda: scomm.iallreduce(np.ones(2), op="no such op" if odd else "sum"),
        }[what]
        after = scomm.iallreduce(np.ones(1))  # a call after the failed one still runs
        failing = post()
        later = scomm.iallreduce(np.ones(1))
        with pytest.raises(ShmtopoValueError) as info:
            failing.wait()
        messages = WORLD.allgather(str(info.value))
        assert len(set(messages)) == 1 and f"rank {culprit}" in messages[0], messages
        assert after.wait()[0] == n and later.wait()[0] == n


def test_requests_never_waited_run_before_the_free(node_size):
    """A program that posts, never waits, and frees the comm: the free runs
    them first (MPI completes a freed comm's pending calls), then the
    comm's thread ends."""
    n = WORLD.size
    comm = shmtopo.Comm.from_mpi(WORLD, node_size=node_size)
    before = set(threading.enumerate())
    requests = [comm.iallreduce(np.ones(2)) for _ in range(4)]
    threads = [t for t in threading.enumerate() if t not in before and t.name == "shmtopo-progress"]
    comm.free()
    assert all(r.done for r in requests) and requests[-1].wait()[0] == n
    for thread in threads:
        thread.join(30)
        assert not thread.is_alive()
    with pytest.raises(FreedError):
        comm.iallreduce(np.ones(2))


def test_an_abandoned_comm_stops_its_calls():
    """Abandon (a ``with`` block left by an exception) stops the call running
    (its wait raises at once, not at the timeout) and runs none of those
    queued behind it; the peers' calls that it never joined raise the
    abandonment. On each node's own comm: across nodes, a rank alone on its
    node that abandons is heard only at the timeout (docs/failures.md)."""
    node = WORLD.Split_type(MPI.COMM_TYPE_SHARED)
    rank, n = node.rank, node.size
    if n == 1:
        node.Free()
        pytest.skip("one rank's calls complete at once")
    comm = shmtopo.Comm.from_mpi(node, timeout=60)
    last = rank == n - 1
    if last:
        running, queued = comm.iallreduce(np.ones(2)), comm.iallreduce(np.ones(2))
        time.sleep(0.05)  # the first one's thread waits for the others, which post nothing yet
    node.Barrier()
    start = time.monotonic()
    if last:
        with pytest.raises(KeyError):
            with comm:
                raise KeyError("the program's own failure")
        with pytest.raises(shmtopo.PeerAbortedError, match="left"):
            running.wait()
        with pytest.raises(ShmtopoValueError, match="never ran, the comm was abandoned"):
            queued.wait()
    node.Barrier()
    if not last:
        first, second = comm.iallreduce(np.ones(2)), comm.iallreduce(np.ones(2))
        try:
            assert first.wait()[0] == n  # the last rank had posted its part of it
        except shmtopo.PeerAbortedError:
            with pytest.raises(BrokenWindowError):  # the failure above left the comm only to free
                second.wait()
        else:
            with pytest.raises(shmtopo.PeerAbortedError, match=f"rank {n - 1}"):
                second.wait()
        comm.abandon()
    node.Free()
    assert time.monotonic() - start < 3


def test_two_threads_post_and_wait(scomm):
    """Requests waited on another thread than the one that posted them."""
    requests = [scomm.iallreduce(np.ones(1)) for _ in range(20)]
    results = {}
    waiter = threading.Thread(target=lambda: results.update((i, requests[i].wait()) for i in range(0, 20, 2)))
    waiter.start()
    for i in range(1, 20, 2):
        results[i] = requests[i].wait()
    waiter.join()
    assert all(results[i][0] == WORLD.size for i in range(20))


def test_a_blocking_call_while_the_thread_runs_a_posted_one(scomm):
    """The thread has taken the call and waits for rank 0, which posts late:
    the blocking call after it waits for it, then runs."""
    rank, n = WORLD.rank, WORLD.size
    if rank == 0:
        time.sleep(0.05)
    request = scomm.iallreduce(np.ones(1))
    if rank != 0:
        time.sleep(0.02)  # past the grace: the thread runs it
    total = scomm.allreduce(np.full(1, 2.0))
    assert request.done and total[0] == 2 * n and request.wait()[0] == n


def test_a_blocking_call_of_another_thread_while_calls_run(scomm):
    """The blocking call claims the comm: it runs the queue first, as on the
    thread that posted."""
    requests = [scomm.iallreduce(np.full(1, 2.0)) for _ in range(5)]
    got = {}
    other = threading.Thread(target=lambda: got.update(sum=scomm.allreduce(np.ones(1))))
    other.start()
    other.join(60)
    assert all(r.done for r in requests) and got["sum"][0] == WORLD.size


def test_a_forked_child_cannot_post():
    comm = shmtopo.Comm.from_mpi(MPI.COMM_SELF)
    comm.iallreduce(np.ones(1)).wait()  # the parent's queue and thread exist
    pid = os.fork()
    if pid == 0:
        try:
            comm.iallreduce(np.ones(1))
            os._exit(1)
        except ForkedProcessError:
            os._exit(0)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    comm.free()
    assert os.waitstatus_to_exitcode(status) == 0


def test_the_queue_holds_the_comm_in_the_core():
    """The core's side (shmtopo_comm_queue_*): while the queue holds the comm
    a claim fails with EINPROGRESS; the thread that takes it over holds it
    as its own claim (nested claims work) until it hands it back, to the
    queue or to nobody."""
    import errno

    from shmtopo._native import ffi, lib

    comm = shmtopo.Comm.from_mpi(MPI.COMM_SELF)
    h = comm.handle
    try:
        assert lib.shmtopo_comm_queue_hold(h) == 0 and lib.shmtopo_comm_queue_hold(h) == 0
        assert lib.shmtopo_comm_claim(h) == -1 and ffi.errno == errno.EINPROGRESS
        assert lib.shmtopo_comm_queue_take(h, 1000, 0) == 0
        assert lib.shmtopo_comm_claim(h) == 0  # nested in the taken one
        lib.shmtopo_comm_unclaim(h)
        assert lib.shmtopo_comm_queue_take(h, -1, -1) == -1 and ffi.errno == errno.EBUSY
        lib.shmtopo_comm_queue_give(h, 1)  # more queued: the queue holds it again
        assert lib.shmtopo_comm_claim(h) == -1 and ffi.errno == errno.EINPROGRESS
        seen, taken, finish = [], threading.Event(), threading.Event()

        def taker():
            seen.extend([lib.shmtopo_comm_queue_take(h, -1, -1), lib.shmtopo_comm_claim(h)])
            taken.set()
            finish.wait()
            lib.shmtopo_comm_unclaim(h)
            lib.shmtopo_comm_queue_give(h, 0)
        other = threading.Thread(target=taker)
        other.start()
        taken.wait()
        assert seen == [0, 0]  # another thread runs a queued call: this one's comes after it
        assert lib.shmtopo_comm_claim(h) == -1 and ffi.errno == errno.EINPROGRESS
        lib.shmtopo_comm_queue_give(h, 0)  # not this thread's: nothing changes
        assert lib.shmtopo_comm_claim(h) == -1 and ffi.errno == errno.EINPROGRESS
        finish.set()
        other.join()
        assert lib.shmtopo_comm_claim(h) == 0  # nobody holds it
        assert lib.shmtopo_comm_queue_hold(h) == -1 and ffi.errno == errno.EBUSY  # this thread is inside
        lib.shmtopo_comm_unclaim(h)
        same_bits(comm.allreduce(np.ones(2)), np.ones(2))
    finally:
        comm.free()


# ---- programs that leave: run under their own mpiexec, from the serial pass ----------------

def run_script(tmp_path, body, n=3, flags=()):
    if WORLD.size > 1:
        pytest.skip("starts its own mpiexec")
    script = tmp_path / "own.py"
    script.write_text("from mpi4py import MPI\nimport numpy as np, shmtopo\n"
                      "comm = shmtopo.Comm.from_mpi(MPI.COMM_WORLD, timeout=60)\n" + body)
    return run_mpiexec(n, [sys.executable, script], timeout=120, flags=flags)


@pytest.mark.parametrize("victim", [0, 2])
def test_a_rank_that_dies_is_named_by_every_survivors_wait(tmp_path, victim):
    """A rank killed with a call posted (first or last rank): the others'
    wait raises the death at once, not at the timeout."""
    proc = run_script(tmp_path, f"""
import os, signal, re, time
from shmtopo.errors import PeerDeadError, PeerAbortedError
request = comm.iallreduce(np.ones(2))
if comm.rank == {victim}:
    os.kill(os.getpid(), signal.SIGKILL)
start = time.monotonic()
try:
    request.wait()
    comm.iallreduce(np.ones(2)).wait()  # the victim may have joined the first
    print('no error', flush=True)
except (PeerDeadError, PeerAbortedError) as exc:
    print(f'raised {{type(exc).__name__}} rank {{exc.rank}} {{time.monotonic() - start:.1f}}', flush=True)
time.sleep(max(0.0, start + 3 - time.monotonic()))  # a survivor that left first would be named instead
os._exit(0)  # MPI_Finalize would wait for the dead rank
""", flags=survivors_of_a_kill_flags())
    reports = re.findall(r"raised (\w+) rank (\d+) ([\d.]+)|no error", proc.stdout)
    assert len(reports) == 2, proc.stdout + proc.stderr
    assert all(r[0] == "PeerDeadError" and r[1] == str(victim) and float(r[2]) < 30 for r in reports), \
        proc.stdout + proc.stderr


def test_a_program_that_exits_with_calls_never_waited(tmp_path):
    """Calls posted and never waited, the comm never freed: every rank exits
    cleanly, nothing left behind."""
    proc = run_script(tmp_path, "posted = [comm.iallreduce(np.ones(2)) for _ in range(4)]\n"
                                "comm.ibarrier()\nprint('leaving', flush=True)\n", n=2)
    assert proc.returncode == 0 and proc.stdout.count("leaving") == 2, proc.stdout + proc.stderr
