"""Every example runs, under its own mpiexec, and so does the CLI."""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import CLEAN_ENV, REPEATED_RUN, run_mpiexec

pytestmark = [pytest.mark.serial, pytest.mark.unsanitized]
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def at_one_size_when_repeated(n, size):
    """Under the MPI of a repeated run (conftest.REPEATED_RUN) an example
    runs at one size: the same program, the same calls; the first run
    takes the others."""
    if REPEATED_RUN and n != size:
        pytest.skip(f"a repeated run: this example at {size} ranks only")


@pytest.mark.parametrize("n", [1, 3, 4])
def test_demo(n):
    at_one_size_when_repeated(n, 4)
    # unbuffered, as a person's terminal session often is: each line must
    # still come out whole, never two ranks' lines run together
    proc = run_mpiexec(n, [sys.executable, EXAMPLES / "demo.py"], timeout=120,
                       env=dict(CLEAN_ENV, PYTHONUNBUFFERED="1"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # the ranks' lines come in any order, but each whole
    lines = sorted(proc.stdout.splitlines())
    sees = [line for line in lines if line.startswith("rank 0 sees ")]
    assert "demo ok" in lines and len(sees) == 1 and f"from {n} ranks" in sees[0], proc.stdout
    pairs = [f"rank {r} got {[r ^ 1, (r ^ 1) ** 2]} from rank {r ^ 1} after a peer fence" for r in range(n - n % 2)]
    assert sorted(set(lines) - {"demo ok", sees[0]}) == sorted(pairs) and len(lines) == len(pairs) + 2, proc.stdout


@pytest.mark.parametrize("n", [2, 3])
def test_cg_poisson(n):
    """The mpi4py CG solver switched by one line: it converges to the exact
    solution, its Allreduce ran in shared memory only, and its solution is
    mpi4py's (bitwise with 2 ranks; the example itself asserts all of it)."""
    at_one_size_when_repeated(n, 2)
    proc = run_mpiexec(n, [sys.executable, EXAMPLES / "cg_poisson.py"], timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "cg_poisson ok" in out and "speedup" in out, out
    stats = next(line for line in out.splitlines() if line.startswith("shm_stats: "))
    accelerated, delegated = ast.literal_eval(stats[len("shm_stats: "):])["Allreduce"]
    assert accelerated > 0 and delegated == 0, stats
    assert "the same dot products on every rank: True" in out, out
    if n == 2:
        assert "bitwise identical to mpi4py's: True" in out, out


def _hwloc_library_version() -> str:
    out = subprocess.run(["hwloc-info", "--version"], capture_output=True, text=True)
    return out.stdout.split()[-1] if out.returncode == 0 else ""


@pytest.mark.parametrize("n", [1, 3])
def test_cli_info(n):
    """The running hwloc library's version (not its API level), each line
    once under mpiexec (the ranks see the same machine)."""
    at_one_size_when_repeated(n, 3)
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


def _assert_floor_checked(out, n):
    """The round trip is measured again after the rows and printed beside
    the first (there is none at 1 rank)."""
    again = [line for line in out.splitlines() if line.startswith("floor again after the rows")]
    assert len(again) == (1 if n > 1 else 0), out
    for line in again:
        numbers = [float(w) for w in line.replace("(", " ").split() if w[0].isdigit()]
        assert len(numbers) == 2 and all(x > 0 for x in numbers), line


@pytest.mark.parametrize("n", [2, 3])
def test_cli_bench_runs(n):
    at_one_size_when_repeated(n, 2)
    proc = run_mpiexec(n, [sys.executable, "-m", "shmtopo", "bench", "--seconds", "0.02"], timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "shmtopo fence rd" in proc.stdout and "mpi4py Win.Fence()" in proc.stdout
    _assert_honest(proc.stdout)
    assert "x floor" in proc.stdout and "cache line to the other core and back" in proc.stdout
    _assert_floor_checked(proc.stdout, n)
    # every fence row has a figure over the floor (2+ ranks: the floor is > 0)
    rows = [line for line in proc.stdout.splitlines() if line.startswith(("shmtopo fence", "mpi4py Win.Fence"))]
    assert len(rows) == 8 and all(_x_floor(line) > 0 for line in rows), proc.stdout


def test_small_calls_benchmark_runs():
    """benchmarks/small_calls.py prints every call with mpi4py's beside it
    and the floor (a short run: what it prints, not how fast)."""
    script = Path(__file__).resolve().parent.parent / "benchmarks" / "small_calls.py"
    proc = run_mpiexec(2, [sys.executable, script, "--calls", "20", "--repeats", "5"], timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("load average (1 min) before the run: "), proc.stdout
    names = ["scan", "exscan", "reduce_scatter", "gatherv", "scatterv", "allgatherv", "alltoallv"]
    rows = [line.split() for line in proc.stdout.splitlines() if line.split()[:1] and line.split()[0] in names]
    assert [r[0] for r in rows] == names, proc.stdout
    assert all(float(r[-1]) > 0 and float(r[-2]) > 0 for r in rows), proc.stdout
    _assert_floor_checked(proc.stdout, 2)


def test_objects_benchmark_runs():
    """benchmarks/objects.py prints every lower-case call of objects, the
    drop-in's beside mpi4py's, with the floor (a short run)."""
    script = Path(__file__).resolve().parent.parent / "benchmarks" / "objects.py"
    proc = run_mpiexec(2, [sys.executable, script, "--calls", "20", "--repeats", "3"], timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line for line in proc.stdout.splitlines()
            if line.startswith(("allreduce(", "bcast(", "allgather(", "gather(", "scatter(", "alltoall(", "scan(",
                                "barrier("))]
    assert len(rows) == 12, proc.stdout
    assert all(float(r.split()[-1]) > 0 and float(r.split()[-2]) > 0 for r in rows), proc.stdout
    _assert_floor_checked(proc.stdout, 2)


def test_nonblocking_benchmark_runs():
    """benchmarks/nonblocking.py prints every row, the drop-in's and the own
    API's beside mpi4py's, all in shared memory (a short run)."""
    script = Path(__file__).resolve().parent.parent / "benchmarks" / "nonblocking.py"
    proc = run_mpiexec(2, [sys.executable, script, "--calls", "20", "--repeats", "2", "--compute", "0.0002"],
                       timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line for line in proc.stdout.splitlines() if line.startswith(("Iallreduce", "Ibcast", "Ibarrier",
                                                                          "Allreduce", "sleep", "compute", "own"))]
    assert len(rows) == 12, proc.stdout
    assert all(float(r.split()[-2]) > 0 for r in rows), proc.stdout


def test_c_against_mpi_benchmark_runs(tmp_path):
    """benchmarks/c_against_mpi.c builds warning-free with the MPI's own
    compiler wrapper and prints every row, shmtopo's C API beside the MPI
    library's calls (a short run: sizes to 16 KiB, one block)."""
    from test_kupl import build, mpicc

    exe = build(tmp_path, "c_against_mpi", [mpicc(), "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror"],
                Path(__file__).resolve().parent.parent / "benchmarks" / "c_against_mpi.c")
    proc = run_mpiexec(2, [exe, "16384", "1"], timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines() if line.startswith(("fence", "allreduce", "bcast"))]
    assert [r[0] for r in rows] == ["fence"] + ["allreduce", "bcast"] * 5, proc.stdout
    assert all(float(r[-1]) > 0 for r in rows), proc.stdout


def test_small_call_layers_run():
    """benchmarks/small_calls.py --layers prints every layer of an 8-byte
    allreduce with its time and ratio to the floor (a short run)."""
    script = Path(__file__).resolve().parent.parent / "benchmarks" / "small_calls.py"
    proc = run_mpiexec(2, [sys.executable, script, "--layers", "--calls", "20", "--repeats", "3"], timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line for line in proc.stdout.splitlines()
            if line.startswith(("the loop", "a C call", "fence", "barrier", "allreduce", "Allreduce"))]
    assert len(rows) == 7, proc.stdout
    assert all(float(r.split()[-1]) >= 0 and "(" in r for r in rows), proc.stdout
    _assert_floor_checked(proc.stdout, 2)


def _assert_honest(out: str) -> None:
    """What every benchmark prints: the load before the run, and figures
    that are medians of 5 interleaved repetitions with their range."""
    assert out.splitlines()[0].startswith("load average (1 min) before the run: "), out
    load = float(out.splitlines()[0].split()[-1])
    assert ("WARNING: load average" in out) == (load >= 0.3), out
    assert "median (min-max) of 5 interleaved repetitions" in out, out


def _x_floor(line: str) -> float:
    """The 'x floor' figure of a fence table row: after the 46-character
    name, the time, its (min-max) and then x floor."""
    return float(line[46:].split()[2])


def test_cli_topo():
    proc = run_mpiexec(3, [sys.executable, "-m", "shmtopo", "topo"], timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count(" shmem ") == 3, proc.stdout
    assert "core" in proc.stdout and "pu" in proc.stdout


@pytest.mark.parametrize("n", [1, 2])
def test_cli_bench_collectives_runs(n):
    """Every shmtopo and mpi4py row with its floor, both as x floor (at 1
    rank an in-place row's floor is 0 and shows as '-')."""
    at_one_size_when_repeated(n, 2)
    proc = run_mpiexec(n, [sys.executable, "-m", "shmtopo", "bench", "--collectives", "--seconds", "0.005",
                           "--max-bytes", "2048"], timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "allreduce persistent" in proc.stdout and "allgather" in proc.stdout
    _assert_honest(proc.stdout)
    assert "floor, measured here" in proc.stdout and "reduction kernel" in proc.stdout
    _assert_floor_checked(proc.stdout, n)
    header = next(line for line in proc.stdout.splitlines() if line.startswith("operation"))
    assert header.split()[2:] == ["floor", "us", "mpi4py", "us", "(min-max)", "x", "floor", "shmtopo", "us",
                                  "(min-max)", "x", "floor", "ratio", "GB/s", "(shm)"], header
    rows = [line.split() for line in proc.stdout.splitlines()
            if line.split()[:1] and line.split()[0] in ("allreduce", "bcast", "reduce", "allgather", "gather",
                                                       "scatter", "alltoall")
            and len(line.split()) > 8 and line.split()[1:3] != ["(run", "ahead)"]]
    assert len(rows) == 11 * 5, proc.stdout  # 11 rows x 8, 32, 128, 512, 2048 B
    # small bcast and reduce on a comm that runs ahead, up to 4 KiB (SHMTOPO_AHEAD_MAX), where there are peers
    ahead = [line.split() for line in proc.stdout.splitlines() if line.split()[1:3] == ["(run", "ahead)"]]
    assert sorted((r[0], int(r[3])) for r in ahead) == (
        sorted((name, size) for name in ("bcast", "reduce") for size in (8, 32, 128, 512, 2048)) if n > 1 else []
    ), proc.stdout
    # the drop-in's upper-case calls, each size, with both figures and the ratio
    dropin = [line.split() for line in proc.stdout.splitlines() if "(drop-in)" in line.split()[1:2]]
    assert sorted((r[0], int(r[2])) for r in dropin) == sorted(
        (name, size) for name in ("Allgather", "Allreduce", "Alltoall", "Bcast", "Gather", "Reduce", "Scatter")
        for size in (8, 32, 128, 512, 2048)
    ), proc.stdout
    for row in dropin:
        words = [w for w in row if not w.startswith("(") or w == "(drop-in)"]
        assert float(words[4]) > 0 and float(words[6]) > 0 and float(words[8]) >= 0, row  # mpi4py, shmtopo, ratio
    line = next(line for line in proc.stdout.splitlines() if line.startswith("drop-in over shmtopo's own API"))
    for name in ("Allreduce", "Bcast", "Reduce", "Allgather", "Gather", "Scatter", "Alltoall"):
        assert f"{name} " in line, line
    floors = [float(words[len(words) - 7]) for words in ([w for w in row if not w.startswith("(")] for row in rows)]
    if n == 2:  # data crosses cores: the larger copies show a floor
        assert max(floors) > 0, proc.stdout
    for row in rows:
        words = [w for w in row if not w.startswith("(")]
        name_len = len(words) - 8
        fl, t_mpi, x_mpi, t_shm, x_shm = words[name_len + 1:name_len + 6]
        if n == 1 and " ".join(words[:name_len]) in ("bcast", "bcast in window", "allreduce in window"):
            assert fl == "0", row  # in place on one rank: nothing to move
        if float(fl) == 0:  # a copy of a few lines may be below the clock's resolution (SMT siblings)
            assert x_mpi == x_shm == "-", row
        else:
            assert float(x_mpi) > 0 and float(x_shm) > 0, row
            assert float(x_shm) == pytest.approx(float(t_shm) / float(fl), rel=0.02, abs=0.01), row


@pytest.mark.parametrize("n", [1, 2])
def test_cli_bench_floor(n):
    """bench --floor measures on the ranks the job placed and prints the
    pieces and the floor per operation and size."""
    at_one_size_when_repeated(n, 2)
    proc = run_mpiexec(n, [sys.executable, "-m", "shmtopo", "bench", "--floor", "--seconds", "0.002",
                           "--max-bytes", "65536"], timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    _assert_honest(out)
    assert "floor, measured here" in out and "rank 0 on CPU" in out, out
    assert "reduction kernel" in out and "float64" in out and "uint8" in out, out
    assert "floor per operation (model" in out, out
    if n == 1:
        assert "need 2 ranks" in out and "rank 1 on CPU" not in out, out
    else:
        assert "cache line to the other core and back" in out and "rank 1 on CPU" in out, out
        assert "fence " in out and "peer fence" in out, out
    table = out[out.index("floor per operation"):].splitlines()
    rows = [line.split() for line in table if line.split()[:1] and line.split()[0].isdigit()]
    assert [int(r[0]) for r in rows] == [8, 32, 128, 512, 2048, 8192, 32768], out
    assert all(len(r) == 5 for r in rows), out


def test_cli_bench_needs_five_repetitions():
    out = subprocess.run([sys.executable, "-m", "shmtopo", "bench", "--floor", "--repeats", "3"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "at least 5 repetitions" in out.stderr, out.stdout + out.stderr


def test_bench_plot_draws_the_floor(tmp_path):
    pytest.importorskip("matplotlib")
    from shmtopo.bench import _ROW_ORDER, _plot
    from shmtopo.floor import Stat

    rows = [(name, n, Stat(2e-6 * n, 1e-6 * n, 3e-6 * n), Stat(1e-6 * n, 1e-6 * n, 1e-6 * n), 5e-7 * n)
            for name in _ROW_ORDER for n in (8, 64, 512)]
    labels = _plot(rows, str(tmp_path / "p.png"), "test")
    assert (tmp_path / "p.png").stat().st_size > 0
    assert all("floor (measured here)" in panel for panel in labels), labels


@pytest.mark.parametrize("n", [1, 3])
def test_share_table(n):
    """One copy per node of a large table, used by every rank (built on the
    root, then in place), under mpiexec and across simulated nodes."""
    at_one_size_when_repeated(n, 3)
    proc = run_mpiexec(n, [sys.executable, EXAMPLES / "share_table.py"], timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "share_table ok" in proc.stdout and f"on {n} ranks, one copy per node" in proc.stdout, proc.stdout
    if n == 3:
        from conftest import CLEAN_ENV

        proc = run_mpiexec(n, [sys.executable, EXAMPLES / "share_table.py"], timeout=300,
                           env=dict(CLEAN_ENV, SHMTOPO_NODE_SIZE="2"))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "one copy on each of 2 nodes" in proc.stdout, proc.stdout
