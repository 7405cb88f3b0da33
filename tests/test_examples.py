"""Every example runs, under its own mpiexec."""
import sys
from pathlib import Path

import pytest

from conftest import run_mpiexec

pytestmark = pytest.mark.serial
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.mark.parametrize("n", [1, 3, 4])
def test_demo(n):
    proc = run_mpiexec(n, [sys.executable, EXAMPLES / "demo.py"], timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "demo ok" in proc.stdout
    assert f"from {n} ranks" in proc.stdout
    assert proc.stdout.count("after a peer fence") == n - n % 2


def test_cli_info():
    proc = run_mpiexec(1, [sys.executable, "-m", "shmtopo", "info"], timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for word in ("shmtopo", "hwloc", "MPI", "backend     posix  usable", "cpus", "oversubscribed"):
        assert word in proc.stdout, proc.stdout


@pytest.mark.parametrize("n", [2, 3])
def test_cli_bench_runs(n):
    proc = run_mpiexec(n, [sys.executable, "-m", "shmtopo", "bench", "--seconds", "0.02"], timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "shmtopo fence rd" in proc.stdout and "mpi4py Win.Fence()" in proc.stdout


def test_cli_topo():
    proc = run_mpiexec(3, [sys.executable, "-m", "shmtopo", "topo"], timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count(" shmem ") == 3, proc.stdout
    assert "core" in proc.stdout and "pu" in proc.stdout


def test_cli_bench_collectives_runs():
    proc = run_mpiexec(2, [sys.executable, "-m", "shmtopo", "bench", "--collectives", "--seconds", "0.005",
                           "--max-bytes", "2048"], timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "allreduce persistent" in proc.stdout and "allgather" in proc.stdout


def test_cross_core_copy_probe(tmp_path):
    """The C probe behind the README's copy-bandwidth figures builds and runs."""
    import subprocess

    exe = tmp_path / "cross_core_copy"
    subprocess.run(["cc", "-O2", "-Wall", "-Werror", "-o", exe, EXAMPLES / "cross_core_copy.c"], check=True)
    proc = subprocess.run([exe, "4096", "65536"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("GB/s") == 2, proc.stdout
