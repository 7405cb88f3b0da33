"""C programs written for the KUPL / KPCCL shm API build unchanged against
shmtopo's headers and libshmtopo.so and run under mpiexec."""
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import ranks
from conftest import CLEAN_ENV, mpiexec_command, run_mpiexec

pytestmark = pytest.mark.serial
SOURCES = Path(__file__).resolve().parent / "c"
PROGRAMS = ["kupl_window", "kupl_fence", "kupl_peer_fence", "kpccl_window", "kupl_persistent",
            "kupl_contig", "kupl_destroy", "kupl_attach", "kupl_fuzz"]
# The kit manual's own examples (shared/seeds), built as the manual's readers
# build them: without -Werror (they cast MPI_Comm to a pointer and back, which
# MPICH, whose MPI_Comm is an int, warns about).
MANUAL = ["manual_kpccl_win_alloc", "manual_kupl_fence", "manual_kpccl_peer_fence"]
FENCE_ALGORITHMS = [None, "0", "1", "2"]  # KUPL_SHM_FENCE_ALGORITHM: unset, KUPL's CI's 0, linear, rd


def mpicc(language: str = "c") -> str:
    """The compiler wrapper (C or C++) of the MPI that SHMTOPO_MPIEXEC runs."""
    name = os.path.basename(mpiexec_command()[0])
    wrapper = "mpicxx" if language == "c++" else "mpicc"
    for suffix in (".openmpi", ".mpich"):
        if name.endswith(suffix):
            return wrapper + suffix
    return wrapper


def shmtopo_flags(*which: str) -> list:
    out = subprocess.run([sys.executable, "-m", "shmtopo", *which], check=True,
                         capture_output=True, text=True, env=CLEAN_ENV).stdout
    return shlex.split(out)


def build(out, name, cmd_head, source, flags=()):
    exe = out / name
    cmd = cmd_head + [*flags, "-o", str(exe), str(source)] + shmtopo_flags("--cflags", "--libs")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=CLEAN_ENV)
    assert proc.returncode == 0, " ".join(cmd) + "\n" + proc.stdout + proc.stderr
    return exe


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    out = tmp_path_factory.mktemp("kupl")
    # -Werror: the headers must compile without a warning in programs
    # written for the original API, from C and from C++.
    strict = ["-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror"]
    built = {name: build(out, name, [mpicc(), "-std=c11"], SOURCES / f"{name}.c", strict)
             for name in PROGRAMS}
    # MPI's own C++ bindings warn under -Wextra: skip them, as KUPL's C++ users may
    built["kupl_suite"] = build(out, "kupl_suite", [mpicc("c++"), "-std=c++11"], SOURCES / "kupl_suite.cpp",
                                strict + ["-DOMPI_SKIP_MPICXX", "-DMPICH_SKIP_MPICXX"])
    for name in MANUAL:
        built[name] = build(out, name, [mpicc()], SOURCES / f"{name}.c")
    return built


def test_flags():
    cflags, libs = shmtopo_flags("--cflags"), shmtopo_flags("--libs")
    assert shmtopo_flags("--cflags", "--libs") == cflags + libs
    include = Path(cflags[0][2:])
    assert cflags[0].startswith("-I") and (include / "kupl.h").exists() and (include / "kpccl.h").exists()
    libdir = Path(libs[0][2:])
    assert libs[0].startswith("-L") and (libdir / "libshmtopo.so").exists()
    assert "-lshmtopo" in libs and f"-Wl,-rpath,{libdir}" in libs


def run(programs, name, n, *args, env=None, timeout=120):
    if env is None:
        proc = run_mpiexec(n, [programs[name], *args], timeout=timeout)
    else:
        proc = subprocess.run(mpiexec_command() + ["-n", str(n), str(programs[name]), *map(str, args)],
                              capture_output=True, text=True, timeout=timeout, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def fence_env(algorithm):
    env = {k: v for k, v in CLEAN_ENV.items() if k != "KUPL_SHM_FENCE_ALGORITHM"}
    if algorithm is not None:
        env["KUPL_SHM_FENCE_ALGORITHM"] = algorithm
    return env


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


@pytest.mark.parametrize("n", [1, 2, 3, 4])
@pytest.mark.parametrize("name", MANUAL)
def test_manual_examples(programs, name, n):
    """The manual's examples, as printed (typos fixed), build and run; the
    window one checks its result and says so."""
    proc = run(programs, name, n)
    if name == "manual_kpccl_win_alloc":
        assert proc.stdout.count("check success") == 1, proc.stdout + proc.stderr
    assert "check failed" not in proc.stdout and "ERROR" not in proc.stderr, proc.stdout + proc.stderr


@pytest.mark.parametrize("n", [1, 2, 3, 4])
@pytest.mark.parametrize("algorithm", FENCE_ALGORITHMS)
def test_cxx_suite(programs, n, algorithm):
    """The API from C++ with KUPL's spelling, over what KUPL's shm functional
    tests exercise, under every fence algorithm KUPL's CI sets."""
    proc = run(programs, "kupl_suite", n, env=fence_env(algorithm), timeout=240)
    assert f"kupl suite ok on {n} ranks" in proc.stdout
    err = proc.stderr
    # refused arguments are refused on every rank, each saying why
    assert err.count("kupl_shm_win_alloc: rank 0: window size 18446744073709551615 is too large") == 2 * n, err
    assert err.count("kupl_shm_info_set: KUPL_SHM_INFO_IS_CONTIG takes 0 or 1, not 2") == 2 * n, err
    # kupl_error / kpccl_error: the kit's logging call, one line each
    for r in range(n):
        assert err.count(f"KUPL ERROR: suite: a message through kupl_error, rank {r}\n") == 1, err
    assert err.count("KPCCL ERROR: suite: and through kpccl_error\n") == n, err


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_contiguous_windows(programs, n):
    proc = run(programs, "kupl_contig", n)
    assert f"kupl contig ok on {n} ranks" in proc.stdout
    err = proc.stderr
    assert err.count("kupl_shm_info_set: info_flag 1 is not a setting") == n, err
    assert err.count("KUPL_SHM_INFO_IS_CONTIG takes 0 or 1, not 4294967295") == n, err
    if n > 1:  # the disagreement fails the allocation on every rank
        assert err.count("kupl_shm_win_alloc: ranks disagree") == n, err


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_comm_destroy_frees_windows_and_requests(programs, n):
    proc = run(programs, "kupl_destroy", n)
    assert f"kupl destroy ok on {n} ranks" in proc.stdout


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_attach(programs, n):
    proc = run(programs, "kupl_attach", n)
    assert f"kupl attach ok on {n} ranks" in proc.stdout
    err = proc.stderr
    if not os.path.exists("/dev/xpmem"):
        assert err.count("lies in no window of a comm of this process, and XPMEM cannot attach it "
                         "(/dev/xpmem: No such file or directory)") == 2 * n, err
    assert err.count("kupl_shm_attach: dst_pid") == n and err.count("was not returned by attach") == 2 * n, err


@settings(max_examples=int(os.environ.get("SHMTOPO_FUZZ_EXAMPLES", "12")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(1, 4), seed=st.integers(0, 2**64 - 1), operations=st.integers(1, 120),
       algorithm=st.sampled_from(FENCE_ALGORITHMS))
def test_fuzz(programs, n, seed, operations, algorithm):
    """Random sizes, counts, types, ops, roots, ranks, bad arguments on a
    random rank, NULL handles, attaches, comms destroyed with windows and
    requests left: every call does what it should on every rank, nothing
    crashes, nothing hangs (each wait is bounded, and so is the run), and
    nothing is left in /dev/shm."""
    before = ranks.shm_files()
    env = dict(fence_env(algorithm), SHMTOPO_TIMEOUT="30")
    proc = run(programs, "kupl_fuzz", n, seed, operations, env=env, timeout=120)
    assert f"kupl fuzz ok: {operations} operations on {n} ranks" in proc.stdout, proc.stdout + proc.stderr
    assert ranks.shm_files() - before == set()
