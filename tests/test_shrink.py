"""comm.shrink(): after a rank dies (or at any time) the ranks still running
make a comm of themselves. Deaths are real SIGKILLs at random moments, of
processes joined by Comm.from_callbacks, and under Open MPI of a real
mpiexec's ranks joined by Comm.from_mpi; the survivors then run windows,
fences and every collective on the new comm, checked, and nothing is left
in /dev/shm."""
import multiprocessing as mp
import os
import random
import re
import subprocess
import sys
import time
import traceback
from pathlib import Path

import numpy as np
import pytest

import ranks
import shmtopo
from conftest import CLEAN_ENV, WORLD, mpiexec_command

HERE = Path(__file__).resolve().parent
#: rounds of the kill-and-shrink loops (SHMTOPO_SHRINK_ROUNDS to run more)
ROUNDS = int(os.environ.get("SHMTOPO_SHRINK_ROUNDS", "50"))
SEED = int(os.environ.get("SHMTOPO_SHRINK_SEED", str(int(time.time()))))


# ---- what survivors check on the comm they made ------------------------------

def exercise(comm, tag):
    """Windows, fences and every collective on comm, each result checked."""
    n, r = comm.size, comm.rank
    comm.barrier()
    x = np.arange(4, dtype=np.float64) + r
    assert np.array_equal(comm.allreduce(x), sum(np.arange(4.0) + q for q in range(n)))
    total = comm.reduce(x, "max", root=n - 1)
    assert r != n - 1 or np.array_equal(total, np.arange(4.0) + n - 1)
    assert np.array_equal(comm.bcast(np.full(3000, r + tag, np.int32), root=n - 1), np.full(3000, n - 1 + tag))
    assert np.array_equal(comm.allgather(np.array([r, tag])), [[q, tag] for q in range(n)])
    assert np.array_equal(comm.reduce_scatter(np.full(2 * n, r + 1.0)), np.full(2, n * (n + 1) / 2))
    assert np.array_equal(comm.alltoall(np.arange(n) * 10 + r), r * 10 + np.arange(n))
    gathered = comm.gather(np.array([r * 7]), root=0)
    assert r != 0 or np.array_equal(gathered.ravel(), np.arange(n) * 7)
    block = comm.scatter(np.arange(2 * n).reshape(n, 2) if r == 0 else None, root=0, out=np.empty(2, np.int64))
    assert np.array_equal(block, [2 * r, 2 * r + 1])
    counts = np.arange(1, n + 1)
    spread = np.repeat(np.arange(n), counts)
    gv = comm.gatherv(np.full(r + 1, r), counts, root=0)
    assert r != 0 or np.array_equal(gv, spread)
    sv = comm.scatterv(spread if r == 0 else None, counts, root=0, out=np.empty(r + 1, spread.dtype))
    assert np.array_equal(sv, np.full(r + 1, r))
    assert np.array_equal(comm.allgatherv(np.full(r + 1, r), counts), spread)
    ones = np.ones(n, np.int64)
    assert np.array_equal(comm.alltoallv(np.arange(n) + 100 * r, ones, None, ones, None), np.arange(n) * 100 + r)
    assert comm.scan(np.array([r + 1]))[0] == (r + 1) * (r + 2) // 2
    ex = comm.exscan(np.array([r + 1]))
    assert r == 0 or ex[0] == r * (r + 1) // 2
    with comm.allocate(shape=(4,), dtype=np.int64) as win:
        win.local[:] = r * 100 + tag
        win.fence()
        assert [int(win.query(p)[0]) for p in range(n)] == [p * 100 + tag for p in range(n)]
        for p in range(n):
            if p != r:
                win.peer_fence(p)
        win.fence()


def churn(comm, win, seed):
    """The same random mix of calls on every rank, until one fails."""
    rng = random.Random(seed)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        op = rng.randrange(6)
        if op == 0:
            win.fence()
        elif op == 1:
            comm.allreduce(np.ones(rng.choice((8, 40000))))
        elif op == 2:
            comm.bcast(np.zeros(rng.choice((16, 300000)), np.uint8), root=rng.randrange(comm.size))
        elif op == 3:
            comm.allocate(rng.choice((64, 1 << 20))).free()
        elif op == 4:
            comm.allgather(np.arange(rng.choice((4, 20000))))
        else:
            comm.barrier()
    return None


# ---- rounds of forked processes, driven from a spawned process --------------

def _survivor(rank, size, transport, ready, entering, results, seed, rounds_of_death):
    """One rank: churn until the victim dies, then shrink and exercise the
    new comm; again if another rank dies meanwhile."""
    try:
        comm = shmtopo.Comm.from_callbacks(size, rank, allgather=lambda s, r: transport.allgather(rank, s, r),
                                           barrier=lambda: transport.wait(rank), timeout=20)
        win = comm.allocate(shape=(size,), dtype=np.int64)
        ready[rank] = 1
        try:
            churn(comm, win, seed)
            first = None
        except shmtopo.ShmtopoError as exc:
            first = (type(exc).__name__, exc.rank)
        if entering is not None:
            entering[rank] = 1
        comms, shrinks = [comm], []
        for attempt in range(rounds_of_death + 1):
            try:
                new = comms[-1].shrink()
            except shmtopo.ShmtopoError as exc:
                shrinks.append(("raised", type(exc).__name__, exc.rank))
                break
            comms.append(new)
            try:
                exercise(new, seed % 1000)
                shrinks.append(("ok", new.rank, new.size, [new.pid(q) for q in range(new.size)]))
                break
            except shmtopo.PeerDeadError as exc:  # another rank died after the shrink made the comm
                shrinks.append(("died after", exc.rank))
        for c in reversed(comms):
            c.free()
        results.put((rank, "ok", (first, shrinks)))
    except BaseException as exc:  # noqa: BLE001 - the driver reports it
        results.put((rank, "error", (repr(exc), traceback.format_exc())))


def _await(flags, members, timeout=30):
    """Until every member has raised its flag (or the timeout: the judge then
    finds who hung)."""
    deadline = time.monotonic() + timeout
    while not all(flags[r] for r in members) and time.monotonic() < deadline:
        time.sleep(0.0002)


def _play(size, seed, second):
    """One round: `size` forked ranks, a victim SIGKILLed at a random moment
    (and with `second`, another when the survivors start to shrink).
    Returns (what was chosen, {rank: report}, pids)."""
    rng = random.Random(seed)
    fork = mp.get_context("fork")
    transport = ranks.Transport(size, fork)
    # Flags, not multiprocessing's Barrier: a rank SIGKILLed just after a Barrier let it go may still
    # hold the Barrier's lock, and then another rank never leaves its wait (the harness hangs, not shmtopo).
    # ready: every rank has its window; entering: every survivor is about to shrink.
    ready, entering = fork.RawArray("b", size), fork.RawArray("b", size) if second else None
    results = fork.SimpleQueue()
    victim = rng.randrange(size)
    others = [r for r in range(size) if r != victim]
    victim2 = rng.choice(others) if second else None
    procs = [fork.Process(target=_survivor, args=(r, size, transport, ready, entering, results, seed,
                                                  1 if second else 0)) for r in range(size)]
    for p in procs:
        p.start()
    _await(ready, range(size))
    time.sleep(rng.uniform(0, 0.03))
    ranks.kill_outside(procs[victim].pid, transport, victim)
    if second:
        _await(entering, others)  # every survivor is about to shrink: the second dies in it
        time.sleep(rng.uniform(0, 0.01))
        ranks.kill_outside(procs[victim2].pid, transport, victim2)
    deadline = time.monotonic() + 60
    for p in procs:
        p.join(max(0.1, deadline - time.monotonic()))
    hung = [r for r, p in enumerate(procs) if p.is_alive()]
    for r in hung:
        procs[r].kill()
        procs[r].join()
    out = {}
    while not results.empty():
        rank, status, value = results.get()
        out[rank] = (status, value)
    return {"seed": seed, "size": size, "victim": victim, "victim2": victim2, "hung": hung}, out, \
        [p.pid for p in procs]


def _judge(chosen, out, pids):
    """What is wrong with a round, or None."""
    victim, victim2, size = chosen["victim"], chosen["victim2"], chosen["size"]
    if chosen["hung"]:
        return f"ranks {chosen['hung']} hung"
    errors = {r: v for r, (s, v) in out.items() if s != "ok"}
    if errors:
        return f"errors: {errors}"
    alive = [r for r in range(size) if r not in (victim, victim2)]
    if victim2 is None and sorted(out) != alive:
        return f"reports from {sorted(out)}, expected {alive}"
    if any(r not in out for r in alive):
        return f"a survivor did not report: {sorted(out)}"
    firsts = {out[r][1][0] for r in alive}
    if firsts != {("PeerDeadError", victim)}:
        return f"survivors raised {firsts}, not PeerDeadError for rank {victim}"
    for r in alive:
        end = out[r][1][1][-1]
        if end[0] != "ok":
            return f"rank {r}: shrink ended with {end}"
        if end[1:3] != (alive.index(r), len(alive)) or end[3] != [pids[m] for m in alive]:
            return f"rank {r}: new comm {end}, expected the members {alive}"
    return None


def _drive(rounds, seed, second, queue):
    bad = []
    rng = random.Random(seed)
    for _ in range(rounds):
        chosen, out, pids = _play(rng.choice((3, 4)), rng.randrange(1 << 30), second)
        why = _judge(chosen, out, pids)
        if why:
            bad.append((chosen, why))
    queue.put(bad)


def run_rounds(rounds, second):
    """The rounds, forked from one spawned process (MPI is live in this one)."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    driver = ctx.Process(target=_drive, args=(rounds, SEED, second, queue))
    before = ranks.shm_files()
    driver.start()
    bad = queue.get(timeout=60 * rounds)
    driver.join(30)
    assert bad == [], f"seed {SEED}: {len(bad)} of {rounds} rounds went wrong: {bad[:3]}"
    assert ranks.shm_files() - before == set()


@pytest.mark.serial
@pytest.mark.no_mpi
def test_kill_anywhere_then_shrink():
    """A random rank of 3-4 (the first, a middle one, the last) is killed at a
    random moment of a random mix of calls: every survivor raises
    PeerDeadError naming it, shrinks, and runs every collective and window
    call correctly on the comm of the survivors."""
    run_rounds(ROUNDS, second=False)


@pytest.mark.serial
@pytest.mark.no_mpi
def test_second_death_during_the_shrink():
    """Another rank dies while the survivors shrink: they still end with one
    comm of the ranks left, never a hang."""
    run_rounds(max(1, ROUNDS // 5), second=True)


# ---- one round at a time, through ranks.run -----------------------------------

def shrink_twice_and_use_the_old(comm):
    win = comm.allocate(64)
    new = comm.shrink()
    raised = []
    for call in (win.fence, comm.barrier, comm.shrink, lambda: comm.allocate(8)):
        try:
            call()
            raised.append(None)
        except shmtopo.ShmtopoError as exc:
            raised.append(type(exc).__name__)
    exercise(new, 1)
    size = new.size
    new.free()
    comm.free()  # local now: the old comm is the survivors' no more
    return size, raised


@pytest.mark.serial
@pytest.mark.no_mpi
def test_shrink_at_any_time_leaves_the_old_comm_only_to_free():
    out = ranks.run(3, shrink_twice_and_use_the_old)
    assert out == {r: ("ok", (3, ["BrokenWindowError"] * 4)) for r in range(3)}, out


def one_rank_abandons_instead(comm):
    if comm.rank == 1:
        comm.abandon()  # (a collective free would wait for the others, who shrink)
        return None
    new = comm.shrink()
    exercise(new, 2)
    result = new.size, new.rank
    new.free()
    comm.free()
    return result


@pytest.mark.serial
@pytest.mark.no_mpi
def test_a_rank_that_dropped_the_comm_is_left_out():
    out = ranks.run(3, one_rank_abandons_instead)
    assert out == {0: ("ok", (2, 0)), 1: ("ok", None), 2: ("ok", (2, 1))}, out


def one_rank_never_shrinks(comm):
    if comm.rank == 2:
        time.sleep(1.5)
        comm.abandon()
        return None
    try:
        comm.shrink()  # gives up after 0.3 s, long before rank 2 drops the comm
    except shmtopo.ShmtopoError as exc:
        comm.free()
        return type(exc).__name__, exc.rank
    return "no error", None


@pytest.mark.serial
@pytest.mark.no_mpi
def test_a_rank_that_never_shrinks_times_the_others_out():
    os.environ["SHMTOPO_TIMEOUT"] = "0.3"
    try:
        out = ranks.run(3, one_rank_never_shrinks)
    finally:
        del os.environ["SHMTOPO_TIMEOUT"]
    assert out == {0: ("ok", ("ShmtopoTimeoutError", 2)), 1: ("ok", ("ShmtopoTimeoutError", 2)),
                   2: ("ok", None)}, out


# ---- Comm.from_mpi ----------------------------------------------------------------

def test_shrink_from_mpi_without_a_death(comm):
    """Under every mpiexec pass: all ranks shrink; the new comm has them all."""
    new = comm.shrink()
    try:
        assert (new.rank, new.size, new.mpi) == (comm.rank, comm.size, None)
        exercise(new, 3)
    finally:
        new.free()


@pytest.mark.skipif(WORLD.Get_size() < 2, reason="needs two simulated nodes")
def test_shrink_across_nodes_raises_on_every_rank():
    comm = shmtopo.Comm.from_mpi(node_size=1)
    try:
        with pytest.raises(shmtopo.BackendUnavailableError, match="MPI_Comm_shrink"):
            comm.shrink()
        comm.barrier()  # still whole: nothing was left
    finally:
        comm.free()


@pytest.mark.serial
@pytest.mark.skipif("openmpi" not in CLEAN_ENV.get("SHMTOPO_MPIEXEC", ""),
                    reason="MPICH's mpiexec ends the whole job when a rank is killed")
def test_kill_anywhere_then_shrink_under_mpiexec():
    """Comm.from_mpi under Open MPI's mpiexec told to keep going when a rank
    dies: the survivors shrink and run everything (script: scripts/shrink_kill.py)."""
    rng = random.Random(SEED)
    rounds = max(1, ROUNDS // 16)  # a job per round: 2-3 s each
    env = dict(CLEAN_ENV, OMPI_MCA_orte_abort_on_non_zero_status="0")
    before = ranks.shm_files()
    for _ in range(rounds):
        n, seed = rng.choice((3, 4)), rng.randrange(1 << 30)
        proc = subprocess.run(
            mpiexec_command() + ["-n", str(n), sys.executable, str(HERE / "scripts" / "shrink_kill.py"), str(seed)],
            capture_output=True, text=True, timeout=120, env=env)
        lines = sorted(re.findall(r"survivor \d+: .*? ok", proc.stdout))  # lines may run together
        victim = random.Random(seed).randrange(n)
        expected = sorted(f"survivor {r}: PeerDeadError {victim} -> {r - (r > victim)} of {n - 1} ok"
                          for r in range(n) if r != victim)
        assert lines == expected, (seed, proc.stdout[-2000:], proc.stderr[-3000:])
    assert ranks.shm_files() - before == set()
