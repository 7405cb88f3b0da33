"""One copy of the native core per process: shmtopo._native, shmtopo._fastpath
and C programs all use the package's libshmtopo.so, so the core's globals and
its thread-local last-error message are the same whichever entry is used."""
import ctypes
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import shmtopo
from shmtopo import _fastpath, _native, capi
from shmtopo._native import ffi, lib

EXTENSIONS = {"_native": Path(_native.__file__), "_fastpath": Path(_fastpath.__file__)}


def mapped(name_prefix: str) -> set:
    """Paths of the mapped files of this process whose name starts so."""
    paths = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and Path(fields[5].strip()).name.startswith(name_prefix):
                paths.add(fields[5].strip())
    return paths


def the_c_library() -> ctypes.CDLL:
    """libshmtopo.so as a C program sees it (dlopen of the already loaded
    library hands back that one)."""
    c = ctypes.CDLL(str(capi.LIBRARY))
    c.shmtopo_last_error.restype = ctypes.c_char_p
    return c


def binutils(tool: str) -> str:
    path = shutil.which(tool)
    if not path:
        pytest.skip(f"{tool} (binutils) is not installed")
    return path


def defined_symbols(path: Path, *options: str) -> set:
    out = subprocess.run([binutils("nm"), *options, "--defined-only", str(path)],
                         capture_output=True, text=True).stdout  # stripped: no symbols
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


@pytest.mark.serial
def test_one_core_is_mapped():
    the_c_library()
    assert mapped("libshmtopo") == {str(capi.LIBRARY.resolve())}
    assert all(str(ext.resolve()) in mapped(ext.name) for ext in EXTENSIONS.values())


@pytest.mark.serial
@pytest.mark.parametrize("name", EXTENSIONS)
def test_extensions_link_the_core(name):
    ext = EXTENSIONS[name]
    dynamic = subprocess.run([binutils("readelf"), "-d", str(ext)], check=True,
                             capture_output=True, text=True).stdout
    assert "Shared library: [libshmtopo.so]" in dynamic
    assert "Library runpath: [$ORIGIN/lib]" in dynamic
    # no core function compiled in: neither exported nor in the symbol table
    core = sorted(s for s in defined_symbols(ext, "-D") | defined_symbols(ext) if s.startswith("shmtopo_"))
    assert core == []
    assert "shmtopo_win_alloc" in defined_symbols(capi.LIBRARY, "-D")


@pytest.mark.serial
def test_one_error_state():
    c = the_c_library()
    # a failure through cffi, read through the C library
    assert lib.shmtopo_backend_from_name(b"no-such-backend", ffi.new("int *")) == -1
    assert b"no-such-backend" in c.shmtopo_last_error()
    # and the other way round
    assert c.shmtopo_fence_alg_from_name(b"no-such-fence", ctypes.byref(ctypes.c_int())) == -1
    assert b"no-such-fence" in ffi.string(lib.shmtopo_last_error())


def test_fast_entry_shares_the_error_state(comm):
    """A failure inside _fastpath's call is the one cffi and C read."""
    # the same on every rank, all fail together: the core refuses a bitwise op on floats
    with pytest.raises(shmtopo.ShmtopoValueError, match="band on float64") as failure:
        _fastpath.allreduce(comm.fast_handle, comm.windows, np.zeros(4), None, "band")
    assert str(failure.value) == the_c_library().shmtopo_last_error().decode()
    comm.barrier()
