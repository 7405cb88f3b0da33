"""Where the C side of the package lives: headers for KUPL / KPCCL programs
(``kupl.h``, ``kpccl.h``) and ``libshmtopo.so``, and the compiler flags that
find them (``python -m shmtopo --cflags --libs``)."""
from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
INCLUDE_DIR = PACKAGE_DIR / "include"
LIBRARY_DIR = PACKAGE_DIR / "lib"
LIBRARY = LIBRARY_DIR / "libshmtopo.so"


def compile_flags(cflags: bool = True, libs: bool = True) -> str:
    """Flags for ``cc prog.c $(python -m shmtopo --cflags --libs)``. The rpath
    lets the program find libshmtopo.so without LD_LIBRARY_PATH. Raises
    FileNotFoundError when the library was not built."""
    if libs and not LIBRARY.exists():
        raise FileNotFoundError(f"{LIBRARY} is missing: reinstall shmtopo (pip install .) to build it")
    flags = []
    if cflags:
        flags.append(f"-I{INCLUDE_DIR}")
    if libs:
        flags += [f"-L{LIBRARY_DIR}", "-lshmtopo", f"-Wl,-rpath,{LIBRARY_DIR}"]
    return " ".join(flags)
