"""Fences must synchronise: ranks arrive at uneven times, and a rank that got
past a fence before everyone arrived would read a stale slot. Each test body
also runs with the fence left out, to show that it would catch that.

Windows and their fences are a node's, but calls on the comm (allocate, the
collectives) span the job: on real nodes of different sizes a test is
skipped, or a body left out, on every rank alike (racing() says whether any
node has two ranks to race)."""
import time

import numpy as np
import pytest

from shmtopo import FENCE_ALGORITHMS

EPOCHS = 12


def delay(epoch, rank, size):
    """Uneven arrival: a different rank is the slowest in each epoch."""
    return ((epoch + rank) % size) * 0.0015


def racing(comm):
    """Whether some node of the job has two ranks or more (the same on every rank)."""
    return max(comm.plan.node_sizes) > 1


def fence_epochs(comm, win, sync):
    """Each epoch every rank sleeps unevenly, bumps its slot in rank 0's part
    to the epoch number, syncs, and reads all slots. Returns the number of
    stale slots seen (0 when `sync` really synchronises)."""
    slots = win.query(0)
    stale = 0
    for epoch in range(1, EPOCHS + 1):
        time.sleep(delay(epoch, comm.rank, comm.size))
        slots[comm.rank] = epoch
        sync()
        stale += int(np.count_nonzero(slots[:comm.size] != epoch))
        sync()  # nobody writes epoch+1 before everyone has checked epoch
    return stale


@pytest.mark.parametrize("algorithm", FENCE_ALGORITHMS)
def test_fence_synchronises(comm, algorithm):
    with comm.allocate(shape=(comm.size,), dtype=np.int64, fence=algorithm) as win:
        assert fence_epochs(comm, win, win.fence) == 0


def test_missing_fence_is_caught(comm):
    """The same body without the fence must see stale slots (needs 2+ ranks
    on a node; on a job of nodes: on one of them at least)."""
    if not racing(comm):
        pytest.skip("one rank cannot race")
    with comm.allocate(shape=(comm.size,), dtype=np.int64) as win:
        stale = fence_epochs(comm, win, lambda: None)
        win.fence()
        assert comm.allreduce(np.array([stale]))[0] > 0


def round_robin(size):
    """Rounds of disjoint pairs covering every pair once (circle method)."""
    n = size + size % 2
    ranks = list(range(n))
    for _ in range(n - 1):
        yield [(ranks[i], ranks[n - 1 - i]) for i in range(n // 2)]
        ranks.insert(1, ranks.pop())


def peer_epochs(comm, win, peer_sync):
    """Every pair of ranks in turn: each writes its epoch into the other's
    part, peer-syncs, and reads what the other wrote for it."""
    stale = 0
    epoch = 0
    for pairs in round_robin(comm.size):
        epoch += 1
        for a, b in pairs:
            if comm.rank not in (a, b) or max(a, b) >= comm.size:
                continue
            other = b if comm.rank == a else a
            time.sleep(0.002 if comm.rank == a else 0)
            win.query(other)[comm.rank] = epoch
            peer_sync(other)
            stale += int(win.local[other] != epoch)
            peer_sync(other)
    return stale


def test_peer_fence_synchronises(comm):
    if not racing(comm):
        pytest.skip("peer fence needs two ranks")
    with comm.allocate(shape=(comm.size,), dtype=np.int64) as win:
        assert peer_epochs(comm, win, win.peer_fence) == 0


def test_missing_peer_fence_is_caught(comm):
    if not racing(comm):
        pytest.skip("one rank cannot race")
    with comm.allocate(shape=(comm.size,), dtype=np.int64) as win:
        stale = peer_epochs(comm, win, lambda other: None)
        win.fence()
        assert comm.allreduce(np.array([stale]))[0] > 0


@pytest.mark.parametrize("algorithm", ["linear", "rd"])
def test_peer_fences_mix_with_fences(comm, algorithm):
    with comm.allocate(shape=(comm.size,), dtype=np.int64, fence=algorithm) as win:
        for _ in range(3):
            assert fence_epochs(comm, win, win.fence) == 0
            if comm.size > 1:
                assert peer_epochs(comm, win, win.peer_fence) == 0


LOOPS = 4


def loop_epochs(comm, win, loop, peer_loop):
    """fence_epochs with the native loops as the syncs: each epoch every rank
    arrives unevenly, writes its slot, runs `loop` (many fences in C), and
    reads every slot; then pairs of ranks do the same through `peer_loop`
    (the slower one writes late). A loop that let a rank out before everyone
    was in shows as stale slots (returned: their number); one that ran fewer
    fences on one rank than on another shifts every later fence, and a wait
    then times out (the window's timeout) or a slot is stale."""
    slots = win.query(0)[:comm.size]
    stale = 0
    partner = comm.rank ^ 1
    for epoch in range(1, LOOPS + 1):
        time.sleep(delay(epoch, comm.rank, comm.size))
        slots[comm.rank] = epoch
        loop(250)
        stale += int(np.count_nonzero(slots != epoch))
        loop(1)  # nobody writes epoch+1 before everyone has checked epoch
        if partner < comm.size:
            time.sleep(0.002 if comm.rank == max(comm.rank, partner) else 0)
            win.query(partner)[comm.size + comm.rank] = epoch
            peer_loop(partner, 125)
            stale += int(win.local[comm.size + partner] != epoch)
            peer_loop(partner, 1)
    return stale


def test_fence_loops_in_native_code(comm):
    """The loops synchronise like the fences they repeat, and leave the
    window's fences in step; without them the same body sees stale slots."""
    with comm.allocate(shape=(2 * comm.size,), dtype=np.int64, timeout=30) as win:  # a loop out of step fails
        assert loop_epochs(comm, win, win.fence_loop, win.peer_fence_loop) == 0
        assert fence_epochs(comm, win, win.fence) == 0
        if racing(comm):
            stale = loop_epochs(comm, win, lambda count: None, lambda rank, count: None)
            win.fence()
            assert comm.allreduce(np.array([stale]))[0] > 0


def test_peer_fence_takes_any_integer_rank_and_refuses_the_rest(comm):
    """numpy's integers are ranks as Python's are; bools, floats, strings and
    ranks out of C int's range raise ShmtopoValueError (locally: a peer fence
    involves only the two ranks, and nothing has been posted)."""
    import shmtopo

    with comm.allocate(8) as win:
        if comm.size > 1:
            partner = comm.rank ^ 1
            if partner < comm.size:
                win.peer_fence(np.int64(partner))
                win.peer_fence(np.int32(partner))
        for bad in (True, 1.0, "1", None, 2**31, -2**40, 2**64):
            with pytest.raises(shmtopo.ShmtopoValueError):
                win.peer_fence(bad)
        with pytest.raises(shmtopo.ShmtopoValueError, match="out of range"):
            win.peer_fence(comm.size)
        win.fence()
    with pytest.raises(shmtopo.FreedError):
        win.fence()
    with pytest.raises(shmtopo.FreedError):
        win.peer_fence(0)
