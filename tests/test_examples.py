"""Every example runs, under its own mpiexec, and so does the CLI."""
import subprocess
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


def _hwloc_library_version() -> str:
    out = subprocess.run(["hwloc-info", "--version"], capture_output=True, text=True)
    return out.stdout.split()[-1] if out.returncode == 0 else ""


@pytest.mark.parametrize("n", [1, 3])
def test_cli_info(n):
    """The running hwloc library's version (not its API level), each line
    once under mpiexec (the ranks see the same machine)."""
    proc = run_mpiexec(n, [sys.executable, "-m", "shmtopo", "info"], timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for word in ("shmtopo", "hwloc", "MPI", "backend posix   usable", "cpus", "oversubscribed"):
        assert word in proc.stdout, proc.stdout
    lines = proc.stdout.splitlines()
    assert sum(line.startswith("hwloc ") for line in lines) == 1, proc.stdout
    assert not any("rank 1:" in line for line in lines if not line.startswith(("cpus", "node"))), proc.stdout
    version = _hwloc_library_version()
    if version:
        assert f"hwloc           {version} (API " in proc.stdout, (version, proc.stdout)


def test_cli_help_names_every_command():
    out = subprocess.run([sys.executable, "-m", "shmtopo", "--help"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    for word in ("info", "bench", "topo", "--cflags", "--libs", "shmtopo[mpi]"):
        assert word in out.stdout, out.stdout
    assert "``" not in out.stdout, out.stdout  # no reStructuredText markup


def test_cli_bench_plot_checks_matplotlib_first():
    """Without matplotlib, bench --plot says which extra to install before it
    runs anything (not a crash at the end of the benchmark)."""
    try:
        import matplotlib  # noqa: F401
        pytest.skip("matplotlib is installed")
    except ImportError:
        pass
    out = subprocess.run([sys.executable, "-m", "shmtopo", "bench", "--collectives", "--plot", "x.png"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "pip install 'shmtopo[plot]'" in out.stderr, out.stdout + out.stderr
    assert "allreduce" not in out.stdout, out.stdout


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
    exe = tmp_path / "cross_core_copy"
    subprocess.run(["cc", "-O2", "-Wall", "-Werror", "-o", exe, EXAMPLES / "cross_core_copy.c"], check=True)
    proc = subprocess.run([exe, "4096", "65536"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("GB/s") == 2, proc.stdout
