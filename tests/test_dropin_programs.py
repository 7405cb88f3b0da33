"""The drop-in under what real mpi4py programs do (issue 39): free comms in
any order and from __del__, describe one rank's buffer with a derived
datatype where the others pass arrays, and make comms by the thousand.
Each program runs under its own mpiexec, so that a hang fails the test
instead of the run."""
import sys
import time
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
    left = ranks.shm_files() - before
    if left:  # another program's, on its way (its names go once its ranks have mapped them)?
        time.sleep(2)
        left &= ranks.shm_files()
    assert left == set(), output
    return proc


@pytest.mark.parametrize("n", [2, 3])
def test_free_is_local(n):
    """Free() and shm_free() never wait for the other ranks: comms freed in
    opposite orders, and from __del__ while the other ranks are in an MPI
    call, neither hang nor raise; nothing is left in /dev/shm."""
    proc = run_script(n, "dropin_free.py")
    assert all(proc.stdout.count(f"rank {r} done") == 1 for r in range(n)), proc.stdout
    assert "Exception ignored" not in proc.stderr and "Error" not in proc.stderr, proc.stderr


def test_derived_comms_cost_no_shared_memory_until_used():
    """10,000 derived comms kept (Dup, Split, Create_cart, Sub), a few of
    them used: they add at most 64 MiB of shared memory to the node (a
    derived comm makes its shmtopo side at its first accelerated call)."""
    proc = run_script(2, "dropin_many_comms.py", 10000, 64, timeout=400)
    line = next(line for line in proc.stdout.splitlines() if line.startswith("comms "))
    made, added, asked = int(line.split()[1]), int(line.split()[3]), int(line.split()[5])
    assert made >= asked and added <= 64 << 20, proc.stdout  # asked: 10,000, or as many as the MPI allows


@pytest.mark.parametrize("n, node_size", [(2, 0), (3, 0), (4, 2)])
def test_matching_signatures_in_different_forms(n, node_size):
    """One rank (or the root alone) passes [buf, count, derived type], the
    others plain arrays, in Bcast, Scatter, Gather, Allreduce, Alltoall and
    more: legal MPI, which gives MPI's result on every rank; ranks that
    disagree in what can be known (roots) still raise on every rank."""
    proc = run_script(n, "dropin_mixed_forms.py", node_size)
    assert proc.stdout.startswith("checked "), proc.stdout + proc.stderr
