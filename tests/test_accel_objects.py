"""shmtopo.accel.objects: mpi4py's lower-case collectives of Python objects
on an accelerated comm, checked against mpi4py's own on the same objects
(the pickles of the results equal, floats to the bit), counted as run in
shared memory; misuse on one rank raises the same exception on every rank.
Each test runs on one node and on simulated nodes of 2 ranks."""
import pickle
import threading

import numpy as np
import pytest
from mpi4py import MPI

import shmtopo
from shmtopo.accel import objects
from shmtopo.errors import ShmtopoArgumentError
from values import culprits

WORLD = MPI.COMM_WORLD
LONG = objects.RECORD  # a pickle of more than this takes the second call


def values(rank):
    """What programs pass: numbers (floats whose sums depend on the order),
    numpy arrays and scalars, containers, and pickles too long for a record
    on some ranks only."""
    rng = np.random.default_rng(rank)
    return [
        rng.random(), 2**70 + rank, rank, True, 1.5 - 2j * rank, None, "s" * rank,
        np.float32(rng.random()), rng.random(3), rng.random(40 + 20 * rank),
        {"rank": rank, "grid": np.arange(rank + 2.0)}, [rank, (rank, "x" * (LONG * (rank % 2)))],
        [1.5 * rank, 2**70 + rank, "x" * LONG, rank][rank % 4],  # a different kind on each rank
    ]


def same(got, want, what):
    assert pickle.dumps(got) == pickle.dumps(want), f"{what}: {got!r} != {want!r}"


def concat(a, b):
    """An op that records its association: mpi4py's order, kept."""
    return f"({a}+{b})"


def test_results_are_mpi4pys(acomm):
    rank, n = WORLD.rank, WORLD.size
    for i, x in enumerate(values(rank)):
        same(acomm.bcast(x, root=n - 1), WORLD.bcast(x, root=n - 1), f"bcast {i}")
        same(acomm.allgather(x), WORLD.allgather(x), f"allgather {i}")
        for root in sorted({0, n - 1}):
            same(acomm.gather(x, root=root), WORLD.gather(x, root=root), f"gather {i} to {root}")
            seq = [(x, r) for r in range(n)] if rank == root else None
            same(acomm.scatter(seq, root=root), WORLD.scatter(seq, root=root), f"scatter {i} from {root}")
        mine = [(x, rank, r) for r in range(n)]
        same(acomm.alltoall(mine), WORLD.alltoall(mine), f"alltoall {i}")
    counted = acomm.shm_stats()
    assert all(delegated == 0 for _, delegated in counted.values()), counted
    assert counted["bcast"][0] == len(values(rank)), counted


@pytest.mark.parametrize("op", [MPI.SUM, MPI.PROD, MPI.MAX, MPI.MIN, concat], ids=["sum", "prod", "max", "min",
                                                                                  "concat"])
def test_reductions_in_mpi4pys_order(acomm, op):
    """Floats whose sum depends on the association, and an op that spells
    it out: the same bits as mpi4py's binomial tree and recursive doubling."""
    rank, n = WORLD.rank, WORLD.size
    rng = np.random.default_rng(rank)
    inputs = [rng.random() * 10 ** rank, rank - 1]  # ordered: every op has them
    if op in (MPI.SUM, MPI.PROD):
        inputs += [rng.random(5), 1 + 1j * rank]
    for x in ([f"x{rank}"] if op is concat else inputs):
        same(acomm.allreduce(x, op), WORLD.allreduce(x, op), "allreduce")
        for root in sorted({0, n - 1}):
            same(acomm.reduce(x, op, root=root), WORLD.reduce(x, op, root=root), f"reduce to {root}")
        same(acomm.scan(x, op), WORLD.scan(x, op), "scan")
        same(acomm.exscan(x, op), WORLD.exscan(x, op), "exscan")
    assert set(acomm.shm_stats()) == {"allreduce", "reduce", "scan", "exscan"}


def test_orders_spelled_out():
    """The orders themselves, at sizes no run has: the tree pairs lower
    ranks first; a scan's result folds from the left."""
    items = [str(i) for i in range(6)]
    assert objects.tree_reduce(items, concat) == "(((0+1)+(2+3))+(4+5))"
    assert objects.doubling_scan(items, concat, 5, False) == "(((0+1)+(2+3))+(4+5))"
    assert objects.doubling_scan(items, concat, 2, False) == "((0+1)+2)"
    assert objects.doubling_scan(items, concat, 3, True) == "((0+1)+2)"
    assert objects.doubling_scan(items, concat, 0, True) is None


def test_barrier_and_free(acomm):
    acomm.barrier()
    acomm.shm_free()
    assert acomm.allreduce(1) == WORLD.size  # mpi4py's own, once freed
    assert acomm.shm_stats() == {"Barrier": (1, 0), "allreduce": (0, 1)}  # barrier() is Barrier()


def test_bad_root_is_mpis_error(acomm):
    """A root no rank is: MPI's ERR_ROOT, as mpi4py raises it (its own tests check it)."""
    for root in (-WORLD.size, WORLD.size):
        with pytest.raises(MPI.Exception) as info:
            acomm.reduce(None, op=MPI.NO_OP, root=root)
        assert info.value.Get_error_class() == MPI.ERR_ROOT


def raises_everywhere(call, *words):
    with pytest.raises(ShmtopoArgumentError) as info:
        call()
    for word in words:
        assert word in str(info.value), info.value
    return info.value


@pytest.mark.parametrize("name", ["allreduce", "gather", "bcast", "scatter", "alltoall"])
def test_what_cannot_be_pickled_fails_every_rank(acomm, name, request):
    rank, n = WORLD.rank, WORLD.size
    for culprit in culprits(n, request.node.callspec.params["acomm"]):
        bad = threading.Lock() if rank == culprit else 1
        call = {"allreduce": lambda: acomm.allreduce(bad),
                "gather": lambda: acomm.gather(bad, root=n - 1 - culprit),
                "bcast": lambda: acomm.bcast(bad, root=culprit),
                "scatter": lambda: acomm.scatter([bad] * n if rank == culprit else None, root=culprit),
                "alltoall": lambda: acomm.alltoall([bad] * n)}[name]
        raises_everywhere(call, f"rank {culprit}", "pickle")
        assert acomm.allreduce(1) == n  # nothing is left half done


def test_wrong_lengths_and_disagreements_fail_every_rank(acomm):
    rank, n = WORLD.rank, WORLD.size
    for culprit in culprits(n):
        raises_everywhere(lambda: acomm.scatter(list(range(n + 1)) if rank == culprit else None, root=culprit),
                          f"rank {culprit}", f"expecting {n} items")
        raises_everywhere(lambda: acomm.alltoall([0] * (n + (rank == culprit))), f"rank {culprit}")
        if n > 1:
            raises_everywhere(lambda: acomm.gather(1, root=int(rank == culprit)), "ranks disagree")
            raises_everywhere(lambda: acomm.gather(1) if rank == culprit else acomm.allgather(1), "ranks disagree")
        raises_everywhere(lambda: acomm.bcast(1, root="0" if rank == culprit else 0), f"rank {culprit}", "root")
    assert acomm.allgather(rank) == list(range(n))


def test_results_are_not_views_of_the_buffers_a_comm_keeps(acomm):
    """The records and the room for long pickles are kept between calls:
    what a call returned must not change with the next call."""
    rank, n = WORLD.rank, WORLD.size
    first = acomm.allgather(np.full(1000, rank, float))  # pickles too long for a record
    gathered = acomm.gather(np.full(500, rank, float), root=0)
    scattered = acomm.scatter([np.full(300, r, float) for r in range(n)] if rank == 0 else None)
    exchanged = acomm.alltoall([np.full(300, 10 * rank + r, float) for r in range(n)])
    numbers = acomm.allgather(rank + 0.5)
    acomm.allgather(np.zeros(1000)), acomm.gather(np.zeros(500)), acomm.allgather(-1.0)
    acomm.scatter([np.zeros(300)] * n if rank == 0 else None), acomm.alltoall([np.zeros(300)] * n)
    assert all((x == r).all() for r, x in enumerate(first))
    assert rank != 0 or all((x == r).all() for r, x in enumerate(gathered))
    assert (scattered == rank).all()
    assert all((x == 10 * r + rank).all() for r, x in enumerate(exchanged))
    assert numbers == [r + 0.5 for r in range(n)]
