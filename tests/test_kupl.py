"""C programs written for the KUPL / KPCCL shm API build unchanged against
shmtopo's headers and libshmtopo.so and run under mpiexec."""
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import CLEAN_ENV, mpiexec_command, run_mpiexec

pytestmark = pytest.mark.serial
SOURCES = Path(__file__).resolve().parent / "c"
PROGRAMS = ["kupl_window", "kupl_fence", "kupl_peer_fence", "kpccl_window", "kupl_persistent"]


def mpicc() -> str:
    """The compiler wrapper of the MPI that SHMTOPO_MPIEXEC runs."""
    name = os.path.basename(mpiexec_command()[0])
    for suffix in (".openmpi", ".mpich"):
        if name.endswith(suffix):
            return "mpicc" + suffix
    return "mpicc"


def shmtopo_flags(*which: str) -> list:
    out = subprocess.run([sys.executable, "-m", "shmtopo", *which], check=True,
                         capture_output=True, text=True, env=CLEAN_ENV).stdout
    return shlex.split(out)


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    out = tmp_path_factory.mktemp("kupl")
    built = {}
    for name in PROGRAMS:
        exe = out / name
        # -Werror: the headers must compile without a warning in programs
        # written for the original API.
        cmd = [mpicc(), "-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror",
               "-o", str(exe), str(SOURCES / f"{name}.c")] + shmtopo_flags("--cflags", "--libs")
        proc = subprocess.run(cmd, capture_output=True, text=True, env=CLEAN_ENV)
        assert proc.returncode == 0, " ".join(cmd) + "\n" + proc.stdout + proc.stderr
        built[name] = exe
    return built


def test_flags():
    cflags, libs = shmtopo_flags("--cflags"), shmtopo_flags("--libs")
    assert shmtopo_flags("--cflags", "--libs") == cflags + libs
    include = Path(cflags[0][2:])
    assert cflags[0].startswith("-I") and (include / "kupl.h").exists() and (include / "kpccl.h").exists()
    libdir = Path(libs[0][2:])
    assert libs[0].startswith("-L") and (libdir / "libshmtopo.so").exists()
    assert "-lshmtopo" in libs and f"-Wl,-rpath,{libdir}" in libs


def run(programs, name, n, *args):
    proc = run_mpiexec(n, [programs[name], *args], timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


@pytest.mark.parametrize("n", [2, 3, 4])
def test_window(programs, n):
    proc = run(programs, "kupl_window", n)
    assert f"kupl window ok on {n} ranks" in proc.stdout
    assert proc.stdout.count("window ok") == n + 1
    # The deliberate bad calls are reported, each naming the function.
    assert "kupl_shm_win_query: rank" in proc.stderr and "out of range" in proc.stderr
    assert "kupl_shm_peer_fence:" in proc.stderr and "kupl_shm_fence: win is NULL" in proc.stderr


@pytest.mark.parametrize("shm_type, warning", [
    ("posix", None),
    ("xpmem", "KUPL_SHM_TYPE=xpmem is unavailable here"),
    ("bogus", "KUPL_SHM_TYPE=bogus is not supported"),
])
def test_shm_type_falls_back_to_posix(programs, shm_type, warning):
    proc = run(programs, "kupl_window", 2, shm_type)
    assert "kupl window ok on 2 ranks" in proc.stdout
    if shm_type == "xpmem" and os.path.exists("/dev/xpmem"):
        warning = None  # a machine with XPMEM: used, no fallback
    if warning:
        assert proc.stderr.count(warning) == 1, proc.stderr  # rank 0 only
    else:
        assert "warning" not in proc.stderr


@pytest.mark.parametrize("n", [2, 3, 4])
@pytest.mark.parametrize("algorithm", ["", "0", "1", "2", "bogus"])
def test_fence(programs, n, algorithm):
    """KUPL_SHM_FENCE_ALGORITHM as KUPL reads it: 1 linear, any other value
    (KUPL's own CI sets 0) recursive doubling."""
    proc = run(programs, "kupl_fence", n, *([algorithm] if algorithm else []))
    assert f"kupl fence ok: 60 rounds on {n} ranks" in proc.stdout


@pytest.mark.parametrize("n", [2, 3, 4])
def test_peer_fence(programs, n):
    proc = run(programs, "kupl_peer_fence", n)
    assert f"kupl peer fence ok: 20 rounds with {n - 1} peers" in proc.stdout


@pytest.mark.parametrize("n", [2, 3, 4])
def test_kpccl_prefix(programs, n):
    proc = run(programs, "kpccl_window", n)
    assert f"kpccl window ok: sum {n * (n + 1) / 4:g} on {n} ranks" in proc.stdout


def test_kpccl_shm_type(programs):
    proc = run(programs, "kpccl_window", 2, "no-such-backend")
    assert "KPCCL_SHM_TYPE=no-such-backend is not supported" in proc.stderr


@pytest.mark.parametrize("n", [2, 3, 4])
def test_persistent_collectives(programs, n):
    proc = run(programs, "kupl_persistent", n)
    assert f"kupl persistent ok: allreduce, bcast, alltoall on {n} ranks" in proc.stdout
    # The deliberate bad calls are refused on every rank alike, each naming the
    # function, the first rank that passed them and why.
    err = proc.stderr
    assert err.count(f"kupl_shm_bcast_init: rank 0: root {n} out of range") == n, err
    assert err.count("kupl_shm_alltoall_init: rank 0: recvcount and recvtype") == n, err
    assert err.count("kupl_shm_allreduce_init: rank 0: buffers must not be NULL") == n, err
    assert err.count("kupl_shm_allreduce_init: rank 0: datatype 42 is not a datatype") == n, err
    assert err.count("kupl_shm_request_start: request is NULL") == n, err
    assert err.count("kupl_shm_allreduce_init:") == 3 * n, err  # the BXOR of doubles too
