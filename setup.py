# cffi_modules has no pyproject.toml spelling yet; everything else lives there.
#
# The native core (native/*.c) is compiled once, into src/shmtopo/lib/libshmtopo.so,
# and everything else links that one library: the cffi binding
# shmtopo._native, the small-collective entry shmtopo._fastpath, and C
# programs written against the KUPL / KPCCL shm API (headers in
# src/shmtopo/include/, flags from `python -m shmtopo --cflags --libs`). One core
# per process means one error state (the thread-local last-error message is
# the same whichever entry made the call) and one set of declarations (the
# headers in native/). How each artifact is compiled and linked, sanitizers
# included, is said once, in build_ffi.py.
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # build_ffi, for its flags (build_meta does not add it)
import build_ffi  # noqa: E402


def without_rpaths(command: list) -> list:
    return [arg for arg in command
            if not arg.startswith(("-Wl,-rpath,", "-Wl,-rpath=", "-Wl,-R", "-R"))]


class build_ext_with_c_library(build_ext):
    """libshmtopo.so first, then the extensions, linked to it."""

    def run(self):
        # Decided here: setuptools' run() clears inplace while it builds.
        self.c_library = self.c_library_path()
        super().run()

    def c_library_path(self) -> Path:
        # Where the extensions go, in lib/ (their rpath is $ORIGIN/lib): the
        # source tree for editable installs (inplace), build_lib for wheels.
        return Path(self.get_ext_fullpath("shmtopo._native")).parent / "lib" / build_ffi.SONAME

    def build_extensions(self):
        # self.compiler exists from here on.
        self.build_c_library(self.c_library)
        library_dir = str(self.c_library.parent)
        for ext in self.extensions:
            if build_ffi.LIBRARY in ext.libraries and library_dir not in ext.library_dirs:
                ext.library_dirs.insert(0, library_dir)
                # Rebuilt with the library, always: setuptools would keep an
                # extension in build/ that is newer than its sources, though
                # built with other flags (a SHMTOPO_SANITIZE build after a
                # plain one), and the three must be built alike.
                ext.depends.append(str(self.c_library))
        # The extensions' one rpath is $ORIGIN/lib. An interpreter built with
        # an rpath in LDSHARED (pyenv, conda) would put its own in front,
        # where a stray libshmtopo.so could shadow the package's; extensions
        # need nothing from it (they do not link libpython). The library
        # keeps it: its hwloc may live there.
        self.compiler.set_executable("linker_so", without_rpaths(self.compiler.linker_so))
        super().build_extensions()

    def build_c_library(self, target: Path):
        build_ffi.require_hwloc()
        core = build_ffi.flags()
        objects = self.compiler.compile(
            build_ffi.CORE_SOURCES, output_dir=str(Path(self.build_temp) / "libshmtopo"),
            include_dirs=core["include_dirs"], extra_postargs=core["extra_compile_args"] + ["-fPIC"],
            depends=[str(p.relative_to(HERE)) for p in build_ffi.NATIVE.glob("*.h")])
        target.parent.mkdir(parents=True, exist_ok=True)
        self.compiler.link_shared_object(
            objects, str(target), libraries=core["libraries"], library_dirs=core["library_dirs"],
            extra_postargs=core["extra_link_args"] + build_ffi.library_link_args()
            + [f"-Wl,-soname,{build_ffi.SONAME}"])

    def get_outputs(self):
        return super().get_outputs() + [str(self.c_library_path())]


# The C entry of the calls from Python: their plain cases through the buffer
# protocol (native/cpython/fastpath.c, which includes the other files there,
# one per concern). It includes shmtopo.h and calls the core in libshmtopo.so
# directly, like shmtopo._native does.
fastpath = Extension("shmtopo._fastpath", ["native/cpython/fastpath.c"],
                     depends=["native/shmtopo.h"] + sorted(str(p.relative_to(HERE))
                                                           for p in (HERE / "native" / "cpython").glob("*.h")),
                     **build_ffi.linked_flags())

# Run-time dependencies. The hwloc wheel is one only when the build used it
# (build_ffi.hwloc), pinned: every rank of a node must run the same libhwloc.
hwloc_wheel = build_ffi.hwloc().requirement
setup(cffi_modules=["build_ffi.py:ffibuilder"], ext_modules=[fastpath],
      install_requires=["cffi>=1.16", "numpy>=1.22"] + ([hwloc_wheel] if hwloc_wheel else []),
      cmdclass={"build_ext": build_ext_with_c_library})
