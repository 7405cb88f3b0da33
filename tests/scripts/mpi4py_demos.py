"""Under mpiexec (tests/test_mpi4py_suite.py): mpi4py's demo programs, each
run twice in the same processes, as it is and with its one line
``from mpi4py import MPI`` followed by
``MPI.COMM_WORLD = shmtopo.accelerate(MPI.COMM_WORLD)``: the two runs must
print the same and leave the same numpy arrays behind, on every rank.

    mpi4py_demos.py PROGRAM...

Lines that report times are left out of the comparison. Rank 0 prints each
program's differences, then one line "SUMMARY ran R differ D accelerated A
delegated X" (A, X: the accelerated comm's calls, all ranks together); the
exit status is 1 on every rank if any program differed or failed.
"""
import contextlib
import hashlib
import io
import os
import re
import sys
import traceback

import numpy as np
from mpi4py import MPI

import shmtopo

WORLD = MPI.COMM_WORLD
ONE_LINE = "MPI.COMM_WORLD = shmtopo.accelerate(MPI.COMM_WORLD)"
TIMING = re.compile(r"time|second|\bus\b|latency", re.IGNORECASE)
# programs whose arrays hold no results: compared by what they print only
NO_RESULTS = {"ex-2.35.py": "its buffers come from numpy.empty and only pass through MPI's buffer calls"}


def accelerated(source):
    """The program with the one line added after its import of MPI."""
    lines = source.splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip() == "from mpi4py import MPI")
    lines.insert(at + 1, f"import shmtopo; {ONE_LINE}")
    return "\n".join(lines) + "\n"


def run(path, source):
    """What the program printed (timings left out), the digests of the numpy
    arrays it left in its globals, and the accelerated comm's stats."""
    namespace = {"__name__": "__main__", "__file__": path}
    printed = io.StringIO()
    failure = ""
    try:
        with contextlib.redirect_stdout(printed):
            exec(compile(source, path, "exec"), namespace)  # noqa: S102 - the program under test
    except SystemExit as exc:  # the programs exit where they need more ranks
        failure = "" if exc.code in (None, 0) else f"exit {exc.code}"
    except Exception:  # noqa: BLE001 - reported
        failure = traceback.format_exc()
    finally:
        comm = MPI.COMM_WORLD
        MPI.COMM_WORLD = WORLD
    stats = {}
    if isinstance(comm, shmtopo.AcceleratedComm):
        stats = comm.shm_stats()
        comm.shm_free()
    arrays = {name: hashlib.sha1(value.tobytes()).hexdigest() for name, value in namespace.items()
              if isinstance(value, np.ndarray) and value.dtype != object}
    text = [line for line in printed.getvalue().splitlines() if not TIMING.search(line)]
    return text, arrays, failure, stats


def main():
    differ = accelerations = delegations = 0
    reports = []
    for path in sys.argv[1:]:
        with open(path) as f:
            source = f.read()
        WORLD.Barrier()
        plain = run(path, source)
        WORLD.Barrier()
        fast = run(path, accelerated(source))
        accelerations += sum(a for a, _ in fast[3].values())
        delegations += sum(d for _, d in fast[3].values())
        problems = []
        if plain[2] or fast[2]:
            problems.append(f"failed: as it is: {plain[2] or 'no'}; accelerated: {fast[2] or 'no'}")
        if plain[0] != fast[0]:
            problems.append(f"printed {plain[0]} as it is, {fast[0]} accelerated")
        if plain[1] != fast[1] and os.path.basename(path) not in NO_RESULTS:
            problems.append(f"arrays differ: {sorted(k for k in plain[1] if plain[1][k] != fast[1].get(k))}")
        everyone = WORLD.gather(problems, root=0)
        if WORLD.rank == 0:
            bad = [f"  rank {r}: {p}" for r, mine in enumerate(everyone) for p in mine]
            differ += bool(bad)
            reports.append(f"{path}: {'DIFFERS' if bad else 'same'} {fast[3]}" + "".join("\n" + b for b in bad))
    totals = WORLD.allreduce(np.array([accelerations, delegations]))
    if WORLD.rank == 0:
        print("\n".join(reports))
        print(f"SUMMARY ran {len(sys.argv) - 1} differ {differ} accelerated {totals[0]} delegated {totals[1]}",
              flush=True)
    sys.exit(WORLD.bcast(differ, root=0) != 0)


if __name__ == "__main__":
    main()
