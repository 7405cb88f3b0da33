"""cffi API-mode build of shmtopo's native core (``shmtopo._native``).

The declarations come from the public headers in ``native/`` (the part between
the CDEF markers), so the C side and the binding cannot drift apart. hwloc is
found with pkg-config; without it the build stops and names the package.
"""
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from cffi import FFI

HERE = Path(__file__).resolve().parent
NATIVE = HERE / "native"
# Public headers whose CDEF blocks form the Python binding, in order.
HEADERS = ["shmtopo.h", "maps.h", "topo_shmem.h", "topology.h"]
# Callbacks implemented in Python (shmtopo/_oob.py) and handed to C.
PYTHON_CALLBACKS = """
extern "Python" int _shmtopo_py_allgather(const void *, void *, size_t, void *);
extern "Python" int _shmtopo_py_barrier(void *);
extern "Python" int _shmtopo_py_interrupted(void);
"""


def cdef_block(header: Path) -> str:
    text = header.read_text()
    match = re.search(r"/\* CDEF BEGIN \*/(.*)/\* CDEF END \*/", text, re.S)
    if not match:
        raise RuntimeError(f"{header}: no CDEF BEGIN/END block")
    return match.group(1)


def pkg_config(*args: str) -> list[str]:
    try:
        out = subprocess.run(["pkg-config", *args, "hwloc"], check=True,
                             capture_output=True, text=True).stdout
    except FileNotFoundError:
        sys.exit("shmtopo build: pkg-config not found. Install it: apt-get install pkg-config libhwloc-dev")
    except subprocess.CalledProcessError:
        sys.exit("shmtopo build: hwloc not found by pkg-config. Install it: apt-get install libhwloc-dev")
    return shlex.split(out)


def flags() -> dict:
    cflags, libs = pkg_config("--cflags"), pkg_config("--libs")
    extra_compile = ["-std=c11", "-O2", "-D_GNU_SOURCE", "-Wall", "-Wextra",
                     "-Wno-unused-parameter"]
    extra_link = []
    # SHMTOPO_SANITIZE=address,undefined builds the core with sanitizers.
    sanitize = os.environ.get("SHMTOPO_SANITIZE")
    if sanitize:
        extra_compile += [f"-fsanitize={sanitize}", "-fno-omit-frame-pointer", "-g", "-O1"]
        extra_link += [f"-fsanitize={sanitize}"]
    return {
        "include_dirs": [str(NATIVE)] + [f[2:] for f in cflags if f.startswith("-I")],
        "library_dirs": [f[2:] for f in libs if f.startswith("-L")],
        "libraries": [f[2:] for f in libs if f.startswith("-l")],
        "extra_compile_args": extra_compile + [f for f in cflags if not f.startswith("-I")],
        "extra_link_args": extra_link,
    }


ffibuilder = FFI()
ffibuilder.cdef("".join(cdef_block(NATIVE / h) for h in HEADERS) + PYTHON_CALLBACKS)
ffibuilder.set_source(
    "shmtopo._native",
    "".join(f'#include "{h}"\n' for h in HEADERS),
    sources=sorted(os.path.relpath(p, HERE) for p in NATIVE.glob("*.c")),
    **flags(),
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
