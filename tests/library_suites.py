"""Real libraries built on mpi4py, each run by its own test suite, unchanged,
as it is and with the one line that puts a program on shmtopo
(tests/scripts/accelerate_world.py, loaded as a pytest plugin before the
suite imports anything): both runs must pass the same tests.

Nothing of theirs is committed here. Each library's tests come from its
source distribution, fetched from the package index at run time
(fetch_sdist, kept under .venv/cache/); the packages it needs besides numpy
and mpi4py, pinned below, are installed at run time with pip --target into
.venv/cache/clients/ (no dependency resolution: numpy and mpi4py stay the
environment's own, built against its MPI).

    python tests/library_suites.py [-n RANKS...] [--repeat K] [--only NAME...]

runs every suite plain and accelerated at each size (./dev clients), K
times each way, interleaved, and prints a row per suite and size: the tests
passed each way, the collectives the accelerated world comm ran in shared
memory and handed to MPI (those of comms derived from it are not counted),
the median wall time each way (min-max) and their ratio. It exits non-zero if a suite passes fewer tests accelerated.
tests/test_library_suite.py runs each library's `subset` in the suite.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
CACHE = HERE.parent / ".venv" / "cache"
PLUGIN_DIR = HERE / "scripts"
COUNTS = re.compile(r"SHMTOPO accelerated (\d+) delegated (\d+)")
# MPICH's blocking calls spin where Open MPI's yield: with more ranks than
# cores a plain run takes minutes, and says nothing of shmtopo.
MPICH = "MPICH"


class Unavailable(Exception):
    """What a suite needs cannot be had from the package index."""


@dataclass(frozen=True)
class Library:
    name: str  # its name on the package index
    version: str
    tests: str  # its tests' folder in the source distribution
    what: str  # what it does with MPI
    # what it needs besides numpy, mpi4py and pytest, pinned (installed without dependencies)
    packages: tuple[str, ...] = ()
    # (packages, the Debian package that builds them): installed where they build
    optional: tuple[tuple[str, ...], str] | None = None
    pytest_args: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()  # test files left out everywhere, and why in a comment
    subset: tuple[str, ...] = ()  # the files the suite's CI subset runs (tests/test_library_suite.py); (): all
    ignore_under: dict[str, tuple[str, ...]] = field(default_factory=dict)  # MPI library version prefix: files
    config: tuple[str, ...] = ()  # the sdist's files that configure its pytest

    def wanted(self) -> list[str]:
        return [f"{self.tests}/", *self.config]


MATPLOTLIB = ("matplotlib==3.11.2", "contourpy==1.3.3", "cycler==0.12.1", "fonttools==4.68.0", "kiwisolver==1.5.1",
              "pillow==13.0.0", "pyparsing==3.3.3", "python-dateutil==2.9.0.post0", "six==1.17.0")
MPI4PY_FFT = "mpi4py-fft==2.0.6"

LIBRARIES = {lib.name: lib for lib in [
    Library(
        "mpiarray", "0.2.1", "src/mpiarray/tests/unit",
        "distributed numpy arrays: Alltoallv, Allgatherv, Gatherv, Allreduce in place, persistent requests, "
        "lower-case calls",
        # installed with shmtopo's test extra; test_units and test_xarray need its docs extra (astropy, xarray)
        ignore=("test_units.py", "test_xarray.py"), config=("pyproject.toml",)),
    Library(
        "pylops-mpi", "0.8.0", "tests",
        "distributed linear operators and solvers: a Split comm per array, Create_cart, Allreduce, "
        "Allgather(v), Sendrecv; its FFTs on mpi4py-fft's pencils (Alltoallw of subarray types)",
        packages=("pylops-mpi==0.8.0", "pylops==2.8.0", "pyproximal==0.13.0", "scipy==1.17.1") + MATPLOTLIB,
        optional=((MPI4PY_FFT,), "libfftw3-dev"),
        # its conftest renames test ids through a pytest internal that pytest 8 removed; its setup.cfg
        # asks for --verbose
        pytest_args=("--noconftest", "-o", "addopts="),
        subset=("test_distributedarray.py", "test_matrixmult.py", "test_halo.py", "test_solver.py")),
    Library(
        "mpi4py-fft", "2.0.6", "tests",
        "parallel FFTs: Create_cart and Sub comms, Alltoallw of subarray types, comms freed by destroy()",
        packages=(MPI4PY_FFT, "scipy==1.17.1"),
        # test_speed times, test_io needs h5py and netCDF4
        ignore=("test_speed.py", "test_io.py"),
        # Open MPI 4.1's MPI_Alltoallw aborts in test_mpifft at 2 ranks with no shmtopo loaded
        ignore_under={"Open MPI v4.": ("test_mpifft.py",)}),
]}


def fetch_sdist(project: str, version: str, wanted: list[str], cache: Path = CACHE) -> Path:
    """The files `wanted` (paths from its top folder; a path ending in / is a
    folder, whole) of a project's source distribution, from the package index
    (pip download), kept in cache/<project>-<version>/ for later runs: that
    folder. Unavailable when the index cannot be reached (or SHMTOPO_OFFLINE=1)."""
    top = cache / f"{project}-{version}"

    def there() -> bool:
        return all((top / name).is_dir() if name.endswith("/") else (top / name).exists() for name in wanted)
    if there():
        return top
    if os.environ.get("SHMTOPO_OFFLINE") == "1":
        raise Unavailable(f"SHMTOPO_OFFLINE=1 and {project} {version}'s files are not in {cache}")
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-binary", project, "--no-deps",
                               f"{project}=={version}", "-d", tmp],
                              capture_output=True, text=True, timeout=600)
        sdists = list(Path(tmp).glob(f"{project.replace('-', '_')}-{version}.tar.gz")) + list(
            Path(tmp).glob(f"{project}-{version}.tar.gz"))
        if proc.returncode != 0 or not sdists:
            raise Unavailable(f"cannot fetch {project} {version}'s source distribution from the package index "
                              f"(pip download failed):\n{proc.stdout}{proc.stderr}")
        staged = Path(tmp) / "x"
        with tarfile.open(sdists[0]) as tar:
            prefix = tar.getnames()[0].split("/")[0]
            members = [m for m in tar.getmembers() if m.isfile() and any(
                m.name.startswith(f"{prefix}/{name}") if name.endswith("/") else m.name == f"{prefix}/{name}"
                for name in wanted)]
            # the data filter where this Python has it (3.11.4+, Debian's 3.11.2 lacks it);
            # the members are plain files of known names either way
            safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
            tar.extractall(staged, members=members, **safe)  # type: ignore[arg-type]
        # several runs may fetch at once: the first rename of each file wins (a cache of
        # fewer files, from an earlier version of a suite, gets the missing ones)
        for member in members:
            name = member.name.split("/", 1)[1]
            (top / name).parent.mkdir(parents=True, exist_ok=True)
            try:
                (staged / prefix / name).rename(top / name)
            except OSError:
                pass
    if not there():
        raise RuntimeError(f"{project} {version}'s source distribution lacks some of {wanted}")
    return top


def site_dir() -> Path:
    """Where this environment's client packages go: one folder per Python
    environment (its numpy's ABI is the one they are built for)."""
    return CACHE / "clients" / hashlib.sha1(sys.prefix.encode()).hexdigest()[:12]


def install(packages: tuple[str, ...]) -> Path:
    """packages (pinned) in site_dir(), each once; that folder."""
    site = site_dir()
    site.mkdir(parents=True, exist_ok=True)
    done_file = site / ".installed"
    done = set(done_file.read_text().split()) if done_file.exists() else set()
    missing = [p for p in packages if p not in done]
    if missing:
        if os.environ.get("SHMTOPO_OFFLINE") == "1":
            raise Unavailable(f"SHMTOPO_OFFLINE=1 and {' '.join(missing)} are not installed in {site}")
        proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--upgrade", "--target",
                               str(site), *missing], capture_output=True, text=True, timeout=900)
        if proc.returncode != 0:
            raise Unavailable(f"pip install {' '.join(missing)} failed:\n{proc.stdout}{proc.stderr}")
        with done_file.open("a") as f:
            f.write("".join(f"{p}\n" for p in missing))
    return site


def prepare(lib: Library, optional: bool = True) -> tuple[Path, Path]:
    """(its tests' folder, the site folder its packages are in); its
    optional packages too where asked and where they build."""
    tests = fetch_sdist(lib.name, lib.version, lib.wanted()) / lib.tests
    site = install(lib.packages)
    if optional and lib.optional is not None:
        packages, needs = lib.optional
        try:
            install(packages)
        except Unavailable as exc:
            print(f"# {lib.name}: {' '.join(packages)} not installed (it builds with {needs}): {exc}",
                  file=sys.stderr)
    return tests, site


@dataclass
class Run:
    passed: int
    failed: int
    seconds: float
    accelerated: int | None
    delegated: int | None
    output: str


def files_for(lib: Library, tests: Path, files: tuple[str, ...], library_version: str) -> list[str]:
    """The test files a run takes: `files`, or every test_*.py of the folder, less those left out here."""
    left_out = set(lib.ignore)
    for prefix, names in lib.ignore_under.items():
        if library_version.startswith(prefix):
            left_out |= set(names)
    chosen = files or tuple(sorted(p.name for p in tests.glob("test_*.py")))
    return [name for name in chosen if name not in left_out]


def run(lib: Library, tests: Path, site: Path, n: int, accelerated: bool, files: list[str],
        mpiexec: list[str], env: dict[str, str] | None = None, timeout: float = 900) -> Run:
    """One run of the suite's files under mpiexec -n n, from its tests'
    folder (its own modules first on sys.path, not a source copy of the package)."""
    env = dict(os.environ if env is None else env)
    path = [str(site)] + ([str(PLUGIN_DIR)] if accelerated else [])
    env["PYTHONPATH"] = os.pathsep.join(path + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    cmd = [*mpiexec, "-n", str(n), sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
           *lib.pytest_args, *(["-p", "accelerate_world"] if accelerated else []), *files]
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=tests, env=env, capture_output=True, text=True, timeout=timeout)
    seconds = time.monotonic() - start
    out = proc.stdout + proc.stderr
    plain = re.sub(r"\x1b\[[0-9;]*m", "", out)
    summaries = re.findall(r"^=*\s*(?:(\d+) failed, )?(\d+) passed.* in [0-9.]+s", plain, flags=re.MULTILINE)
    if proc.returncode not in (0, 1) or not summaries:
        raise RuntimeError(f"{lib.name}'s suite did not finish at -n {n} "
                           f"({'accelerated' if accelerated else 'as it is'}, exit {proc.returncode}):\n"
                           f"{out[-20000:]}")
    if len(set(summaries)) != 1:  # every rank runs every test
        raise RuntimeError(f"{lib.name}'s ranks ran different tests at -n {n}: {sorted(set(summaries))}")
    failed, passed = summaries[0]
    counts = COUNTS.search(plain)
    return Run(int(passed), int(failed or 0), seconds, int(counts.group(1)) if counts else None,
               int(counts.group(2)) if counts else None, out)


def main() -> int:
    from mpi4py import MPI

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-n", type=int, nargs="+", default=[2, 4])
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--only", nargs="+", default=list(LIBRARIES))
    args = p.parse_args()
    version = MPI.Get_library_version()
    mpiexec = os.environ.get("SHMTOPO_MPIEXEC", "mpiexec").split()
    load = os.getloadavg()[0]
    print(f"# {version.splitlines()[0].strip()}; load average {load:.2f}; {os.cpu_count()} cores; "
          f"wall times: median (min-max) of {args.repeat}")
    print(f"{'suite':<12} {'n':>2} {'passed plain':>13} {'passed accel':>13} {'world shm':>9} {'to MPI':>7} "
          f"{'plain s':>18} {'accelerated s':>18} {'ratio':>6}")
    status = 0
    for name in args.only:
        lib = LIBRARIES[name]
        tests, site = prepare(lib)
        files = files_for(lib, tests, (), version)
        print(f"# {name} {lib.version}: {lib.what}")
        for n in args.n:
            if version.startswith(MPICH) and n > (os.cpu_count() or 1):
                print(f"{name:<12} {n:>2} skipped: MPICH's spinning waits with more ranks than cores")
                continue
            runs: dict[bool, list[Run]] = {False: [], True: []}
            for _ in range(args.repeat):
                for accelerated in (False, True):
                    runs[accelerated].append(run(lib, tests, site, n, accelerated, files, mpiexec))
            plain, fast = runs[False][-1], runs[True][-1]
            times = {a: [r.seconds for r in rs] for a, rs in runs.items()}
            med = {a: statistics.median(t) for a, t in times.items()}
            print(f"{name:<12} {n:>2} {plain.passed:>6} ({plain.failed} f) {fast.passed:>6} ({fast.failed} f) "
                  f"{fast.accelerated or 0:>9} {fast.delegated or 0:>7} "
                  f"{med[False]:>6.1f} ({min(times[False]):.1f}-{max(times[False]):.1f}) "
                  f"{med[True]:>6.1f} ({min(times[True]):.1f}-{max(times[True]):.1f}) "
                  f"{med[True] / med[False]:>6.2f}", flush=True)
            if fast.passed != plain.passed or fast.failed != plain.failed:
                print(f"FAILED: {name} at -n {n} passes {fast.passed} tests accelerated, {plain.passed} plain\n"
                      f"{fast.output[-5000:]}", file=sys.stderr)
                status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
