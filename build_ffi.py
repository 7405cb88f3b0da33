"""cffi API-mode build of shmtopo's Python binding (``shmtopo._native``), and
the one place that says how anything here is compiled and linked.

The native core (``native/*.c``) is compiled once, by setup.py, into
``src/shmtopo/lib/libshmtopo.so``; ``shmtopo._native``, ``shmtopo._fastpath`` and
C programs written against the KUPL / KPCCL headers all link that library.
So a process holds one copy of the core: one set of globals, and one
thread-local last-error buffer, whichever entry made the failing call and
whichever reads the message. The extensions find the library through an
rpath of ``$ORIGIN/lib`` (it lies in ``lib/`` beside them, in the source tree
for editable installs and in the wheel otherwise).

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
HEADERS = ["shmtopo.h", "maps.h", "topo_shmem.h", "topology.h", "floor.h"]
# Callbacks implemented in Python (src/shmtopo/_oob.py) and handed to C.
PYTHON_CALLBACKS = """
extern "Python" int _shmtopo_py_allgather(const void *, void *, size_t, void *);
extern "Python" int _shmtopo_py_barrier(void *);
extern "Python" int _shmtopo_py_interrupted(void);
"""
# The core as a shared library: its sources, its name (-lshmtopo) and where
# the extensions look for it at run time, relative to themselves.
CORE_SOURCES = sorted(os.path.relpath(p, HERE) for p in NATIVE.glob("*.c"))
LIBRARY = "shmtopo"
SONAME = f"lib{LIBRARY}.so"
RPATH = "$ORIGIN/lib"


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
    """Compile and link flags of the core (libshmtopo.so): hwloc from
    pkg-config, and the sanitizers when SHMTOPO_SANITIZE is set. Everything
    that links the core starts from these (see linked_flags), so the library
    and both extensions are always built alike."""
    cflags, libs = pkg_config("--cflags"), pkg_config("--libs")
    extra_compile = ["-std=c11", "-O2", "-D_GNU_SOURCE", "-Wall", "-Wextra",
                     "-Wno-unused-parameter"]
    extra_link = []
    # SHMTOPO_SANITIZE=address,undefined builds the library and both
    # extensions with sanitizers.
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


def linked_flags() -> dict:
    """Flags of an extension that uses the core: the core's compile flags
    (and its headers), linked to libshmtopo.so instead of compiling the core
    again, with an rpath (a RUNPATH) of $ORIGIN/lib. hwloc is the library's
    own dependency and not linked here. The directory libshmtopo.so is built
    in depends on the build (source tree or build_lib), so setup.py adds it to
    library_dirs once it has built the library."""
    core = flags()
    return {
        "include_dirs": core["include_dirs"],
        "library_dirs": [],
        "libraries": [LIBRARY],
        "extra_compile_args": core["extra_compile_args"],
        "extra_link_args": core["extra_link_args"] + [f"-Wl,-rpath,{RPATH}", "-Wl,--enable-new-dtags"],
    }


ffibuilder = FFI()
ffibuilder.cdef("".join(cdef_block(NATIVE / h) for h in HEADERS) + PYTHON_CALLBACKS)
# No core sources: only the generated wrapper, linked to libshmtopo.so.
ffibuilder.set_source(
    "shmtopo._native",
    "".join(f'#include "{h}"\n' for h in HEADERS),
    **linked_flags(),
)

if __name__ == "__main__":
    # shmtopo._native links libshmtopo.so, which setup.py builds first.
    sys.exit(subprocess.call([sys.executable, str(HERE / "setup.py"), "build_ext", "--inplace"],
                             cwd=HERE))
