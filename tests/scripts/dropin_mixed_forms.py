"""Under mpiexec (tests/test_dropin_programs.py): legal MPI where ranks
describe matching type signatures differently, as a distributed-tensor
package does: one rank (the first, the last; for rooted calls also the root
alone, whose type the others cannot know) passes ``[buf, count, derived]``
(a contiguous or a vector datatype of doubles), the others plain arrays.
Every call must give MPI's result (the same calls on a plain duplicate of
the world, with plain arrays), on every rank. Ranks that disagree where it
can be known (different roots) still raise on every rank. Rank 0 prints
"checked N", or the first difference. argv[1]: simulated node size (0: the
real node)."""
import sys

import numpy as np
from mpi4py import MPI

import shmtopo

world = MPI.COMM_WORLD
rank, n = world.Get_rank(), world.Get_size()
acomm = shmtopo.accelerate(world, node_size=int(sys.argv[1]) or None, timeout=30)
plain = world.Dup()
types = {"contiguous": MPI.DOUBLE.Create_contiguous(2).Commit(),
         "vector": MPI.DOUBLE.Create_vector(2, 1, 1).Commit()}
K = 4  # doubles per block: 2 of the derived types


def data(salt, count):
    return (np.arange(count, dtype=np.float64) + 10 * rank + salt) % 7


def spec(a, derived, blocks=1):
    """a (doubles) as a plain array, or as [a, count, derived type] (2
    doubles each; the count per rank where a holds a block per rank)."""
    return [a, a.size // 2 // blocks, derived] if derived is not None else a


def calls(comm, derived, root):
    """{name: run}: run() makes the call and returns what it wrote."""
    def bcast():
        buf = data(1, K) if rank == root else np.zeros(K)
        comm.Bcast(spec(buf, derived), root=root)
        return buf

    def scatter():
        send = data(2, K * n) if rank == root else None
        recv = np.zeros(K)
        comm.Scatter(spec(send, derived, n) if send is not None else None, spec(recv, derived), root=root)
        return recv

    def gather():
        recv = np.zeros(K * n) if rank == root else None
        comm.Gather(spec(data(3, K), derived), spec(recv, derived, n) if recv is not None else None, root=root)
        return recv

    def allreduce():
        recv = np.zeros(K)
        comm.Allreduce(spec(data(4, K), derived), spec(recv, derived), op=MPI.MAX)
        return recv

    def alltoall():
        recv = np.zeros(K * n)
        comm.Alltoall(spec(data(5, K * n), derived, n), spec(recv, derived, n))
        return recv

    def allgather():
        recv = np.zeros(K * n)
        comm.Allgather(spec(data(6, K), derived), spec(recv, derived, n))
        return recv

    def reduce():
        recv = np.zeros(K)
        comm.Reduce(spec(data(7, K), derived), spec(recv, derived), op=MPI.MIN, root=root)
        return recv if rank == root else None

    def gatherv():
        recv = np.zeros(K * n) if rank == root else None
        whole = [recv, ([K // 2] * n, [K // 2 * r for r in range(n)]), derived] if derived is not None else recv
        comm.Gatherv(spec(data(8, K), derived), whole if recv is not None else None, root=root)
        return recv

    def alltoallv():
        recv = np.zeros(K * n)
        counts, displs = [K // 2] * n, [K // 2 * r for r in range(n)]
        if derived is None:
            comm.Alltoallv(data(9, K * n), recv)
        else:
            comm.Alltoallv([data(9, K * n), (counts, displs), derived], [recv, (counts, displs), derived])
        return recv

    return {"Bcast": bcast, "Scatter": scatter, "Gather": gather, "Allreduce": allreduce, "Alltoall": alltoall,
            "Allgather": allgather, "Reduce": reduce, "Gatherv": gatherv, "Alltoallv": alltoallv}


ROOTED = ("Bcast", "Scatter", "Gather", "Reduce", "Gatherv")
problems, checked = [], 0


def reduces_derived(derived):
    """Whether this MPI reduces a derived type with a predefined op (MPI only
    promises it for predefined types: Open MPI refuses, MPICH takes
    contiguous ones); asked with the type on every rank, so that all raise."""
    try:
        plain.Allreduce([np.ones(K), K // 2, derived], [np.zeros(K), K // 2, derived], op=MPI.MAX)
        return True
    except MPI.Exception:
        return False

reduces = {kind: reduces_derived(derived) for kind, derived in types.items()}
for kind, derived in types.items():
    for root in sorted({0, n - 1}):
        # who describes its buffers with the derived type: one rank, or the root alone
        for culprits in ({0}, {n - 1}, {root}, set(range(n)) - {0}):
            mine = derived if rank in culprits else None
            for name, run in calls(acomm, mine, root).items():
                if name not in ROOTED and culprits == {root} and root != 0:
                    continue
                if name in ("Allreduce", "Reduce") and not reduces[kind]:
                    continue
                want = calls(plain, None, root)[name]()
                try:
                    got = run()
                except Exception as exc:  # noqa: BLE001 - reported below
                    problems.append(f"{kind} root {root} culprits {sorted(culprits)} {name}: "
                                    f"{type(exc).__name__}: {exc}")
                    continue
                checked += 1
                if want is not None and not np.array_equal(got, want):
                    problems.append(f"{kind} root {root} culprits {sorted(culprits)} {name}: {got} != {want}")

# where ranks disagree in what can be known, every rank still raises
if n > 1:
    buf = np.zeros(K)
    try:
        acomm.Bcast(spec(buf, types["vector"] if rank == n - 1 else None), root=n - 1 if rank == n - 1 else 0)
        problems.append("Bcast with different roots returned")
    except shmtopo.ShmtopoArgumentError as exc:
        if "disagree" not in str(exc):
            problems.append(f"Bcast with different roots: {exc}")
    # and the comm still works, in shared memory
    out = np.zeros(2)
    acomm.Allreduce(np.ones(2), out)
    if out[0] != n:
        problems.append(f"Allreduce after: {out}")

stats = acomm.shm_stats()
everyone = world.gather((problems, checked, stats), root=0)
if rank == 0:
    bad = [f"rank {r}: {p}" for r, (mine, _, _) in enumerate(everyone) for p in mine]
    print("\n".join(bad[:20]) if bad else f"checked {sum(c for _, c, _ in everyone)}", flush=True)
    print("stats", everyone[0][2], "reduces derived types:", reduces, flush=True)
for t in types.values():
    t.Free()
plain.Free()
acomm.shm_free()
