"""Levelled collectives against a numpy fold over ranks 0..p-1 and against
the flat algorithms, run under mpiexec by tests/test_levels.py (with
HWLOC_SYNTHETIC and SHMTOPO_COLL_LEVELS set by the test).

    levels_check.py STRUCTURE levels|flat [quick]
    levels_check.py disagree CULPRIT

STRUCTURE: how the levels every rank finds must be described (its start);
levels|flat: whether the collectives must take them. disagree: rank
CULPRIT sets another SHMTOPO_COLL_LEVELS before Comm.from_mpi: every rank
must raise the same ShmtopoValueError naming the variable. Every rank checks every result bit for bit; any failure, on any
rank, prints it and aborts the job (so the test fails instead of hanging).
Rank 0 prints ``LEVELS OK <levelled calls>`` at the end.
"""
from __future__ import annotations

import sys
import traceback

import numpy as np
from mpi4py import MPI

import shmtopo
from shmtopo.coll import levels

WORLD = MPI.COMM_WORLD
OPS = {"sum": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum, "bxor": np.bitwise_xor}


def inputs(case: int, rank: int, n: int, dtype: np.dtype) -> np.ndarray:
    """Rank's input of a case; every rank can make every rank's."""
    rng = np.random.default_rng([case, rank])
    if dtype.kind == "f":  # random floats near 1, so prod neither vanishes nor overflows
        return (1 + rng.standard_normal(n) * 0.01).astype(dtype) * (1 + rank % 3)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)


def fold(case: int, p: int, n: int, dtype: np.dtype, op: str) -> np.ndarray:
    """((x0 op x1) op x2) ... in rank order, as shmtopo's flat reductions."""
    acc = inputs(case, 0, n, dtype).copy()
    for r in range(1, p):
        OPS[op](acc, inputs(case, r, n, dtype), out=acc)
    return acc


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def check(cond: bool, what: str) -> None:
    if not cond:
        raise AssertionError(f"rank {WORLD.Get_rank()}: {what}")


def disagree(culprit: int) -> str:
    import os

    if WORLD.Get_rank() == culprit:
        os.environ["SHMTOPO_COLL_LEVELS"] = "core" if os.environ.get("SHMTOPO_COLL_LEVELS") != "core" else "l3"
    try:
        shmtopo.Comm.from_mpi(WORLD).free()
        message = "created"
    except shmtopo.ShmtopoValueError as exc:
        message = str(exc)
    everyone = WORLD.allgather(message)
    check(len(set(everyone)) == 1 and "SHMTOPO_COLL_LEVELS differs between ranks" in message
          and f"rank {culprit} has" in message, f"disagreeing setting: {everyone}")
    return 0


def run(expected: str, levelled: bool, quick: bool) -> int:
    comm = shmtopo.Comm.from_mpi(WORLD)
    p, me = comm.size, comm.rank
    found = levels.describe(comm)
    check(found.startswith(expected), f"levels {found!r}, expected {expected!r}")
    chunk = levels.CHUNK
    case = 0
    dtypes = [np.float64, np.float32, np.int32, np.int8]
    for dt in map(np.dtype, dtypes):
        esz = dt.itemsize
        sizes = [0, 1, 7, levels.MIN_BYTES // esz, levels.MIN_BYTES // esz + 1, chunk // esz + 1]
        if not quick:
            sizes.append((3 << 20) // esz + 5)  # MiBs: several chunks of the chain
        ops = ["sum", "prod", "min"] if dt.kind == "f" else ["sum", "max", "bxor"]
        for n in sizes:
            for op in ops:
                case += 1
                mine = inputs(case, me, n, dt)
                want = fold(case, p, n, dt, op)
                got = comm.allreduce(mine, op)
                check(same_bits(got, want), f"allreduce {n} x {dt} {op}: not the rank-order fold")
                for alg in ("flat", "rsag"):
                    flat = comm.allreduce(mine, op, algorithm=alg)
                    check(same_bits(got, flat), f"allreduce {n} x {dt} {op}: differs from {alg}")
                inplace = mine.copy()
                comm.allreduce(inplace, op, out=inplace)
                check(same_bits(inplace, want), f"allreduce in place {n} x {dt} {op}")
                roots = range(p) if n in sizes[3:5] or p <= 4 else [0, p - 1]
                for root in roots:
                    red = comm.reduce(mine, op, root=root)
                    if me == root:
                        assert red is not None
                        check(same_bits(red, want), f"reduce {n} x {dt} {op} root {root}")
                    else:
                        check(red is None, f"reduce gave a result off the root {root}")
            for root in (range(p) if n in sizes[3:5] or p <= 4 else [0, p // 2, p - 1]):
                case += 1
                src = inputs(case, root, n, dt)
                buf = inputs(case, me, n, dt) if me == root else np.zeros(n, dt)
                got = comm.bcast(buf, root=root, out=buf)
                check(same_bits(got, src), f"bcast {n} x {dt} root {root}")
                fresh = comm.bcast(src if me == root else np.zeros(n, dt), root=root)
                check(same_bits(fresh, src), f"bcast into a new array {n} x {dt} root {root}")
    # misuse inside a levelled call: one rank at a time passes a bad root or
    # another count; every rank raises the same ShmtopoValueError
    big = levels.MIN_BYTES // 8 * 2
    for culprit in sorted({0, p // 2, p - 1}):
        for what in ("root", "count", "op"):
            a = np.ones(big + (1 if what == "count" and me == culprit else 0))
            try:
                if what == "root":
                    comm.reduce(a, root=p + 3 if me == culprit else 0)
                elif what == "count":
                    comm.allreduce(a)
                else:
                    comm.allreduce(a, op="max" if me == culprit else "sum")
                message = "no error"
            except shmtopo.ShmtopoValueError as exc:
                message = str(exc)
            everyone = WORLD.allgather(message)
            check(len(set(everyone)) == 1 and everyone[0] != "no error",
                  f"misuse {what} by rank {culprit}: {everyone}")
            # the comm still works afterwards
            check(same_bits(comm.allreduce(np.ones(big)), np.full(big, float(p))), "after misuse")
    calls = levels.levelled_calls(comm)
    check((calls > 0) == levelled, f"levelled calls: {calls}")
    comm.free()
    return calls


def main() -> None:
    try:
        if sys.argv[1] == "disagree":
            calls = disagree(int(sys.argv[2]))
        else:
            calls = run(sys.argv[1], sys.argv[2] == "levels", "quick" in sys.argv[3:])
    except BaseException:  # noqa: BLE001 - one rank's failure must end the job
        sys.stdout.write(traceback.format_exc())
        sys.stdout.flush()
        WORLD.Abort(1)
    WORLD.Barrier()
    if WORLD.Get_rank() == 0:
        print(f"LEVELS OK {calls}", flush=True)


if __name__ == "__main__":
    main()
