"""The drop-in under what real mpi4py programs do (issue 39): free comms in
any order and from __del__, describe one rank's buffer with a derived
datatype where the others pass arrays, and make comms by the thousand.
Each program runs under its own mpiexec, so that a hang fails the test
instead of the run."""
import sys
from pathlib import Path

import pytest
from mpi4py import MPI

import ranks
from conftest import run_mpiexec

HERE = Path(__file__).resolve().parent
SCRIPTS = HERE / "scripts"


def run_script(n, name, *args, timeout=150):
    if MPI.COMM_WORLD.Get_size() > 1:
        pytest.skip("starts its own mpiexec")
    before = ranks.shm_files()
    proc = run_mpiexec(n, [sys.executable, SCRIPTS / name, *args], timeout=timeout)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert ranks.shm_files() - before == set(), output
    return proc


@pytest.mark.parametrize("n", [2, 3])
def test_free_is_local(n):
    """Free() and shm_free() never wait for the other ranks: comms freed in
    opposite orders, and from __del__ while the other ranks are in an MPI
    call, neither hang nor raise; nothing is left in /dev/shm."""
    proc = run_script(n, "dropin_free.py")
    assert sorted(proc.stdout.split("\n")) == sorted([f"rank {r} done" for r in range(n)] + [""]), proc.stdout
    assert "Exception ignored" not in proc.stderr and "Error" not in proc.stderr, proc.stderr
