"""The standalone C tests of tests/c (test_*.c): each is built with the
native files it tests, straight from the checkout, and run; it prints its
failures and exits 1. The other C programs there (kupl_*, kpccl_*,
manual_*) run under mpiexec in test_kupl.py."""
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.serial, pytest.mark.no_mpi]
ROOT = Path(__file__).resolve().parent.parent
SOURCES = ROOT / "tests" / "c"
NATIVE = ROOT / "native"

# test -> (the native files it is linked with, needs hwloc)
PROGRAMS = {
    "test_maps": (["maps.c", "error.c"], False),
    "test_topo_shmem": (["topo_shmem.c", "maps.c", "error.c"], True),
}


def pkg_config_hwloc() -> list:
    proc = subprocess.run(["pkg-config", "--cflags", "--libs", "hwloc"], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip("pkg-config finds no hwloc")
    return shlex.split(proc.stdout)


@pytest.mark.parametrize("name", PROGRAMS)
def test_c_program(tmp_path, name):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    native, hwloc = PROGRAMS[name]
    exe = tmp_path / name
    cmd = [cc, "-std=gnu11", "-Wall", f"-I{NATIVE}", str(SOURCES / f"{name}.c"), *(str(NATIVE / f) for f in native),
           "-o", str(exe), *(pkg_config_hwloc() if hwloc else [])]
    built = subprocess.run(cmd, capture_output=True, text=True)
    assert built.returncode == 0, " ".join(cmd) + "\n" + built.stdout + built.stderr
    proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0 and f"{name}: ok" in proc.stdout, proc.stdout + proc.stderr
