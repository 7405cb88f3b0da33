"""Runs the same tests on 1 rank (plain pytest), under mpiexec -n N, and
(the files that use no MPI) under python -m shmtopo run -n N.

Every rank runs every test in the same order. A failure on any rank prints
its report and aborts the whole job, so one rank's failed assertion fails the
run instead of leaving the others waiting in a fence.
"""
import gc
import os
import socket
import sys
import time
from pathlib import Path

import subprocess

import pytest

# Taken before MPI starts: the singleton MPI_Init of this process adds
# variables that would make a nested mpiexec think it runs inside this job.
CLEAN_ENV = dict(os.environ)

import library_suites  # noqa: E402
import shmtopo  # noqa: E402
from shmtopo import rendezvous  # noqa: E402


class WorldWithoutMPI:
    """What these hooks and the modules' decorators need of MPI.COMM_WORLD
    in a process that uses no MPI: a rank of python -m shmtopo run, or a
    process of ranks.run (which imports its test module without MPI_Init,
    a world of one). Abort ends this process; the launcher then ends the
    other ranks."""

    def __init__(self, size, rank):
        self.size, self.rank = size, rank

    def Get_size(self):
        return self.size

    def Get_rank(self):
        return self.rank

    def Abort(self, code):
        os._exit(code)


if rendezvous.in_environment():
    WORLD = WorldWithoutMPI(int(os.environ[rendezvous.SIZE_VARIABLE]), int(os.environ[rendezvous.RANK_VARIABLE]))
else:
    from mpi4py import MPI

    WORLD = MPI.COMM_WORLD if MPI.Is_initialized() else WorldWithoutMPI(1, 0)

# The run that repeats ./dev test's first one (Open MPI's, on the sanitized
# build): MPICH's, under which shmtopo's own code (the agreement, the
# levels) runs as under Open MPI. Matrices of that code keep there the
# smallest layouts that take each path; the first run takes them all.
REPEATED_RUN = not rendezvous.in_environment() and MPI.Get_library_version().startswith("MPICH")


class PythonCalls(list):
    """The names of the Python functions called inside a ``with`` block
    (sys.setprofile), its own ``__exit__`` left out: a C entry that runs no
    Python leaves it empty."""

    def __enter__(self) -> "PythonCalls":
        # what the collector runs (the __del__ of an earlier test's garbage)
        # is not the block's: held off during it
        gc.disable()
        sys.setprofile(self._profile)
        return self

    def __exit__(self, *exc) -> None:
        sys.setprofile(None)
        gc.enable()

    def _profile(self, frame, event, arg) -> None:
        if event == "call" and frame.f_code is not PythonCalls.__exit__.__code__:
            self.append(frame.f_code.co_name)


def pytest_collection_modifyitems(config, items):
    if WORLD.Get_size() > 1:
        skip = pytest.mark.skip(reason="serial test: runs in the 1-process pass only")
        for item in items:
            if "serial" in item.keywords:
                item.add_marker(skip)


#: What a fixture made outside the test's own process and must undo even when
#: a failure aborts the job before the fixture's teardown runs (a callable each)
BEFORE_ABORT = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed and WORLD.Get_size() > 1:
        sys.stderr.write(f"\n[rank {WORLD.Get_rank()}] {item.nodeid} FAILED ({report.when}):\n"
                         f"{report.longreprtext}\n[rank {WORLD.Get_rank()}] aborting the MPI job\n")
        sys.stderr.flush()
        for undo in BEFORE_ABORT:
            undo()
        # MPICH's launcher across hosts ends the job on the abort before it has
        # forwarded what the ranks wrote (one CI run: the whole output lost)
        time.sleep(0.5)
        WORLD.Abort(1)


_one_host = None


def skip_simulated_nodes_across_hosts(node_size):
    """Simulated nodes (node_size=: groups of consecutive ranks) are one
    machine's stand-in for nodes: on a job that spans real hosts (./dev
    test's real-node pass) the real nodes are tested instead, and groups of
    ranks, or those of comms derived from them, would span hosts. Collective
    over the world the first time (every rank runs the same tests, in order)."""
    global _one_host
    if node_size is None:
        return
    if _one_host is None:
        _one_host = WORLD.Get_size() == 1 or len(set(WORLD.allgather(socket.gethostname()))) == 1
    if not _one_host:
        pytest.skip("simulated nodes: the job spans real hosts, whose nodes are tested instead")


@pytest.fixture
def comm():
    """This node's shmtopo comm over all ranks of the job (under mpiexec
    from_mpi(COMM_WORLD), under the launcher its ranks)."""
    c = shmtopo.Comm.from_env()
    yield c
    c.free()


@pytest.fixture(scope="session")
def tables():
    """The drop-in's tables of mpi4py's datatypes and ops (shmtopo.accel.tables)."""
    from shmtopo.accel.tables import get_tables
    return get_tables()


@pytest.fixture(params=[None, 2], ids=["node", "nodes-of-2"])
def acomm(request):
    """The world, accelerated (shmtopo.accelerate): on this node, and on
    simulated nodes of 2 ranks (hierarchical paths from 3 ranks on)."""
    from mpi4py import MPI

    skip_simulated_nodes_across_hosts(request.param)
    a = shmtopo.accelerate(MPI.COMM_WORLD, node_size=request.param, timeout=60)
    yield a
    a.shm_free()


def environment_without_a_job(env=None):
    """An environment (default CLEAN_ENV) with no trace of the job this
    process belongs to: no MPI launcher's variables, no shmtopo launcher's;
    a program started with it runs as if started alone."""
    launchers = ("OMPI_", "PMIX_", "PMI_", "HYDRA_", "MPI_", rendezvous.RANK_VARIABLE, rendezvous.SIZE_VARIABLE,
                 rendezvous.SOCKET_VARIABLE)
    return {k: v for k, v in (CLEAN_ENV if env is None else env).items() if not k.startswith(launchers)}


def mpiexec_command():
    """The mpiexec matching the mpi4py in use (./dev sets SHMTOPO_MPIEXEC)."""
    return CLEAN_ENV.get("SHMTOPO_MPIEXEC", "mpiexec").split()


def run_mpiexec(n, args, timeout=300, env=None, flags=()):
    """Run a program under its own mpiexec (with flags) with n ranks
    (environment: env, default CLEAN_ENV); returns the CompletedProcess with
    text stdout/stderr."""
    return subprocess.run(mpiexec_command() + list(flags) + ["-n", str(n)] + [str(a) for a in args],
                          capture_output=True, text=True, timeout=timeout,
                          env=CLEAN_ENV if env is None else env)


def keep_going_flags():
    """mpiexec's options that keep the survivors of a death alive: the case
    where nothing but shmtopo can tell them."""
    from mpi4py import MPI

    if MPI.Get_library_version().startswith("Open MPI"):
        return ["--mca", "orte_abort_on_non_zero_status", "0"]
    return ["-disable-auto-cleanup"]


def survivors_of_a_kill_flags():
    """keep_going_flags for a job in which a rank is SIGKILLed. Seen here:
    MPICH's mpiexec ends such a job on one host, -disable-auto-cleanup or
    not, and across hosts did not reliably end it either; Open MPI's keeps
    the survivors, so these deaths are Open MPI's (test_realnodes too)."""
    from mpi4py import MPI

    if not MPI.Get_library_version().startswith("Open MPI"):
        pytest.skip("MPICH's mpiexec on one host does not keep the survivors of a SIGKILL running")
    return keep_going_flags()


def run_accelerated_script(tmp_path, body, *python_flags, n=2, timeout=120, flags=()):
    """n ranks of a script that accelerates COMM_WORLD (acomm) and reduces
    ones into out, then runs body (a test of the serial pass: under a
    multi-rank pass it skips)."""
    from mpi4py import MPI

    if MPI.COMM_WORLD.size > 1:
        pytest.skip("starts its own mpiexec")
    script = tmp_path / "accelerated.py"
    script.write_text("from mpi4py import MPI\nimport numpy as np, shmtopo\n"
                      "acomm = shmtopo.accelerate(MPI.COMM_WORLD)\n"
                      "out = np.zeros(2)\nacomm.Allreduce(np.ones(2), out)\n" + body)
    return run_mpiexec(n, [sys.executable, *python_flags, script], timeout=timeout, flags=flags)


def fetch_sdist(project, version, wanted, cache):
    """library_suites.fetch_sdist for a test: without the package index it
    fails, saying so, unless SHMTOPO_OFFLINE=1 makes it skip."""
    try:
        return library_suites.fetch_sdist(project, version, wanted, cache)
    except library_suites.Unavailable as exc:
        if os.environ.get("SHMTOPO_OFFLINE") == "1":
            pytest.skip(str(exc))
        pytest.fail(f"{exc}\n(set SHMTOPO_OFFLINE=1 to skip these tests)", pytrace=False)
