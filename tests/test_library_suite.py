"""Real libraries built on mpi4py, run by their own test suites with the
world comm accelerated by one line (tests/library_suites.py says which, how
they are fetched and installed; ./dev clients runs them whole, with wall
times). Here each library's subset: the same tests must pass as without
shmtopo, and the accelerated run must have run collectives in shared memory.

- mpiarray (its whole unit suite, at 2 and 4 ranks, under Open MPI):
  Alltoallv, Allgatherv, Gatherv, Allreduce in place, persistent requests,
  lower-case calls.
- pylops-mpi (four files, at 2 ranks, under MPICH): an array's Split comm,
  Create_cart halos, a matrix product on row and column comms, its solvers.

Each library runs under one MPI: what the drop-in does differently under
each (what it hands to MPI, and how) is mpi4py's own suite's to show, which
runs under both (test_mpi4py_suite.py); ./dev clients runs every library
under both.
"""
import os
import sys

import pytest
from mpi4py import MPI

import library_suites
from conftest import CLEAN_ENV, mpiexec_command

pytestmark = pytest.mark.serial  # each test starts its own mpiexec
LIBRARY_VERSION = MPI.Get_library_version()
SPINS_WHEN_OVERSUBSCRIBED = LIBRARY_VERSION.startswith(library_suites.MPICH)
# (library, ranks, the MPI it runs under). mpiarray under Open MPI, whose
# serial pass has the sanitized build; pylops-mpi imports matplotlib, which
# aborts under the preloaded ASan runtime with no shmtopo loaded: MPICH's
# build is the optimised one
CASES = [pytest.param("mpiarray", 2, "Open MPI", id="mpiarray-2"),
         pytest.param("mpiarray", 4, "Open MPI", id="mpiarray-4"),
         pytest.param("pylops-mpi", 2, library_suites.MPICH, id="pylops-mpi-2")]


@pytest.fixture(scope="module")
def prepared():
    """{name: (tests folder, site folder)}, each library fetched once."""
    if MPI.COMM_WORLD.Get_size() > 1:
        pytest.skip("starts its own mpiexec")
    done = {}

    def get(lib):
        if lib.name not in done:
            try:
                done[lib.name] = library_suites.prepare(lib, optional=False)
            except library_suites.Unavailable as exc:
                if os.environ.get("SHMTOPO_OFFLINE") == "1":
                    pytest.skip(str(exc))
                pytest.fail(f"{exc}\n(set SHMTOPO_OFFLINE=1 to skip these tests)", pytrace=False)
        return done[lib.name]
    return get


@pytest.fixture(scope="module")
def plain_runs():
    return {}


@pytest.mark.parametrize("name, n, under", CASES)
def test_a_librarys_suite_passes_the_same_tests_accelerated(prepared, plain_runs, name, n, under):
    if not LIBRARY_VERSION.startswith(under):
        pytest.skip(f"{name} runs under {under} (each library under one MPI)")
    if SPINS_WHEN_OVERSUBSCRIBED and n > (os.cpu_count() or 1):
        pytest.skip(f"{n} ranks on {os.cpu_count()} cores: MPICH's spinning waits would take minutes")
    lib = library_suites.LIBRARIES[name]
    tests, site = prepared(lib)
    files = library_suites.files_for(lib, tests, lib.subset, LIBRARY_VERSION)
    # as it is, the same tests at any number of ranks: once per library, at 2
    if name not in plain_runs:
        plain_runs[name] = library_suites.run(lib, tests, site, 2, False, files, mpiexec_command(), CLEAN_ENV)
    plain = plain_runs[name]
    fast = library_suites.run(lib, tests, site, n, True, files, mpiexec_command(), CLEAN_ENV)
    assert (fast.passed, fast.failed) == (plain.passed, plain.failed) and plain.passed > 0, fast.output[-20000:]
    assert fast.accelerated, fast.output[-5000:]
    sys.stdout.write(f"{name} -n {n}: {fast.passed} passed; {fast.accelerated} collectives in shared memory, "
                     f"{fast.delegated} to MPI\n")
