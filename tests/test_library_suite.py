"""A real library built on mpi4py's collectives, run by its own test suite
with the world comm accelerated by one line: mpiarray (distributed numpy
arrays: Alltoallv, Allgatherv, Gatherv, Allreduce in place, persistent
requests, lower-case calls), whose tests take MPI.COMM_WORLD.

Its source distribution is fetched from the package index at test time
(the pinned version, kept under .venv/cache/; SHMTOPO_OFFLINE=1 skips when
no index is reachable); its dependencies come with shmtopo's test extra.
The suite runs as it is and with tests/scripts/accelerate_world.py loaded
as a pytest plugin (`MPI.COMM_WORLD = shmtopo.accelerate(MPI.COMM_WORLD)`
before anything is imported): both must pass the same tests, and the
accelerated run must have run collectives in shared memory.
"""
import os
import re
import sys
from pathlib import Path

import pytest
from mpi4py import MPI

from conftest import CLEAN_ENV, SANITIZED, fetch_sdist, run_mpiexec

HERE = Path(__file__).resolve().parent
VERSION = "0.2.1"
# modules that need what the library's docs extra brings (astropy, xarray), not MPI
NEEDS_DOCS_EXTRA = ["test_units.py", "test_xarray.py"]
WANTED = ["pyproject.toml", "src/mpiarray/"]
pytestmark = pytest.mark.serial  # each test starts its own mpiexec
SPINS_WHEN_OVERSUBSCRIBED = MPI.Get_library_version().startswith("MPICH")


@pytest.fixture(scope="module")
def mpiarray_sdist():
    if MPI.COMM_WORLD.Get_size() > 1:
        pytest.skip("starts its own mpiexec")
    return fetch_sdist("mpiarray", VERSION, WANTED, HERE.parent / ".venv" / "cache")


def run(sdist, n, accelerated):
    env = dict(CLEAN_ENV)
    if accelerated:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE / "scripts"), env.get("PYTHONPATH")]))
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", sdist / "pyproject.toml",
           "--rootdir", sdist, *(["-p", "accelerate_world"] if accelerated else []),
           sdist / "src" / "mpiarray" / "tests" / "unit",
           *(f"--ignore={sdist / 'src' / 'mpiarray' / 'tests' / 'unit' / name}" for name in NEEDS_DOCS_EXTRA)]
    proc = run_mpiexec(n, cmd, timeout=600, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"mpiarray's suite failed at -n {n} ({'accelerated' if accelerated else 'as it is'})" \
                                 f":\n{out[-20000:]}"
    passed = sorted(set(re.findall(r"(\d+) passed", out)))
    assert len(passed) == 1, out[-5000:]  # every rank ran the same tests
    counts = re.search(r"SHMTOPO accelerated (\d+) delegated (\d+)", out)
    return int(passed[0]), (int(counts.group(1)), int(counts.group(2))) if counts else None


@pytest.fixture(scope="module")
def plain_passes(mpiarray_sdist):
    """The tests that pass without shmtopo (the same at any number of ranks: run once, at 2)."""
    return run(mpiarray_sdist, 2, accelerated=False)[0]


@pytest.mark.parametrize("n", [2, 4])
def test_mpiarrays_suite_passes_accelerated(mpiarray_sdist, plain_passes, n):
    if SPINS_WHEN_OVERSUBSCRIBED and n > (os.cpu_count() or 1):
        pytest.skip(f"{n} ranks on {os.cpu_count()} cores: MPICH's spinning waits would take minutes")
    if SANITIZED and n > 2:
        pytest.skip("sanitized build: 2 ranks show the sanitizers the calls mpiarray makes")
    fast, counts = run(mpiarray_sdist, n, accelerated=True)
    assert fast == plain_passes > 0
    assert counts is not None and counts[0] > 0, counts
