"""A released comm kept for the next comm of the same ranks (comm_pool.py,
shmtopo_comm_park): taken up only where every rank released it, in the same
order, with the same settings; a new one made otherwise, alike on every
rank; and a peer still waiting on a kept comm learns that it was freed.

Every parent here is this node's ranks (a comm across nodes is never kept),
so the same tests run on one host and across real nodes."""
import os
import threading

import numpy as np
import pytest
from mpi4py import MPI

import shmtopo
from shmtopo import comm_pool

NODE = MPI.COMM_WORLD.Split_type(MPI.COMM_TYPE_SHARED, key=MPI.COMM_WORLD.Get_rank()) \
    if MPI.Is_initialized() else None


def node_comm():
    return NODE.Dup()


def check_works(comm, tag):
    """Collectives and a window on comm, each result checked."""
    n, r = comm.size, comm.rank
    assert np.array_equal(comm.allreduce(np.full(3, r + tag, np.int64)), np.full(3, sum(range(n)) + n * tag))
    assert np.array_equal(comm.bcast(np.arange(5000) + tag if r == 0 else np.empty(5000, np.int64), root=0),
                          np.arange(5000) + tag)
    assert np.array_equal(comm.allgather(np.array([r * 10 + tag])).ravel(), np.arange(n) * 10 + tag)
    with comm.allocate(shape=(2,), dtype=np.int64) as win:
        win.local[:] = r + tag
        win.fence()
        assert [int(win.query(p)[0]) for p in range(n)] == [p + tag for p in range(n)]
        win.fence()


def released():
    """A comm of this node's ranks, made, released (kept), and its address:
    a comm that takes it up has the same one, any other comm another (the
    kept one is not freed meanwhile)."""
    comm = shmtopo.Comm.from_mpi(node_comm())
    address = comm.address
    comm.release()
    return address


def test_a_released_comm_is_taken_up_by_the_next_of_the_same_ranks():
    first = shmtopo.Comm.from_mpi(node_comm())
    check_works(first, 1)
    address = first.address
    first.release()
    kept = comm_pool.parked()
    second = shmtopo.Comm.from_mpi(node_comm())
    assert second.address == address and comm_pool.parked() == kept - 1
    check_works(second, 2)
    second.set_waits(0.0, 0.0)  # the next owner's waits are the environment's again
    second.release()
    assert comm_pool.parked() == kept
    third = shmtopo.Comm.from_mpi(node_comm(), timeout=30)
    assert third.address == address
    check_works(third, 3)
    third.free()  # a collective free keeps it too, once every rank agreed
    assert comm_pool.parked() == kept
    fourth = shmtopo.Comm.from_mpi(node_comm())
    assert fourth.address == address
    fourth.free()


@pytest.mark.parametrize("culprit", ["first", "last"])
def test_a_comm_one_rank_still_holds_is_not_taken_up(culprit):
    """One rank keeps the comm: the next comm is made anew on every rank;
    that rank, calling the old one, learns that the others freed it; the
    old comm, broken there, is never taken up again."""
    n, r = NODE.Get_size(), NODE.Get_rank()
    holder = 0 if culprit == "first" else n - 1
    old = shmtopo.Comm.from_mpi(node_comm())
    address = old.address
    if r != holder or n == 1:
        old.release()
    new = shmtopo.Comm.from_mpi(node_comm())
    assert (new.address == address) == (n == 1)
    check_works(new, 4)
    if n > 1 and r == holder:
        with pytest.raises(shmtopo.PeerAbortedError, match="freed"):
            old.barrier()
        old.release()  # broken: released for good, not kept
    again = shmtopo.Comm.from_mpi(node_comm())
    assert again.address != address or n == 1 or r == holder  # (the holder's old comm is freed: its address may recur)
    check_works(again, 5)
    again.free()
    new.free()


def test_a_comm_of_the_same_ranks_in_another_order_is_made_anew():
    n, r = NODE.Get_size(), NODE.Get_rank()
    address = released()
    comm = shmtopo.Comm.from_mpi(NODE.Split(0, key=-r))
    assert comm.rank == n - 1 - r
    assert (comm.address == address) == (n == 1)
    check_works(comm, 6)
    comm.free()


@pytest.mark.parametrize("who", ["all", "first", "last"])
def test_a_setting_changed_since_is_a_new_comm_or_the_same_error_everywhere(who):
    """SHMTOPO_SINGLE_COPY changed on every rank: a new comm, with the new
    setting; on one rank: ShmtopoValueError on every rank, naming it, as
    for any comm; changed back: the kept one is taken up."""
    n, r = NODE.Get_size(), NODE.Get_rank()
    address = released()
    changes = who == "all" or (who == "first" and r == 0) or (who == "last" and r == n - 1)
    if changes:
        os.environ["SHMTOPO_SINGLE_COPY"] = "0"
    try:
        if who == "all" or n == 1:
            comm = shmtopo.Comm.from_mpi(node_comm())
            assert comm.address != address and (comm.single_copy is None or not changes)
            check_works(comm, 7)
            comm.free()
        else:
            with pytest.raises(shmtopo.ShmtopoValueError, match="SHMTOPO_SINGLE_COPY differs"):
                shmtopo.Comm.from_mpi(node_comm())
    finally:
        os.environ.pop("SHMTOPO_SINGLE_COPY", None)
    comm = shmtopo.Comm.from_mpi(node_comm())
    assert comm.address == address
    check_works(comm, 8)
    comm.free()


def test_two_threads_making_comms_at_once_each_get_their_own():
    """Two threads make and release comms of the same ranks at once (each on
    its own parent): a kept comm is offered by one of them at a time, so
    each thread's comm is its own, on every rank."""
    parents = [node_comm(), node_comm()]
    failures = []

    def churn(parent, tag):
        try:
            for i in range(15):
                comm = shmtopo.Comm.from_mpi(parent)
                check_works(comm, tag * 100 + i)
                comm.release()
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    threads = [threading.Thread(target=churn, args=(p, t)) for t, p in enumerate(parents)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not failures and not any(t.is_alive() for t in threads), failures


def test_a_forked_child_keeps_none_of_its_parents():
    released()
    assert comm_pool.parked() >= 1
    pid = os.fork()
    if pid == 0:
        os._exit(0 if comm_pool.parked() == 0 else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_the_drop_ins_comms_made_for_a_phase_take_up_the_last_ones():
    """A program that makes a comm, calls it, frees it, again and again
    (through the drop-in): the comms' shared memory is made once."""
    acomm = shmtopo.accelerate(node_comm())
    try:
        a = np.arange(4.0) + NODE.Get_rank()
        addresses = []
        for _ in range(6):
            sub = acomm.Dup()
            out = np.zeros(4)
            sub.Allreduce(a, out)
            assert np.array_equal(out, np.arange(4.0) * NODE.Get_size() + sum(range(NODE.Get_size())))
            assert sub.shm_stats()["Allreduce"] == (1, 0)
            addresses.append(sub.shm_comm.address)
            sub.Free()
        assert len(set(addresses[1:])) == 1
    finally:
        acomm.Free()
