# cffi_modules has no pyproject.toml spelling yet; everything else lives there.
#
# Besides the cffi extension, the build makes libshmtopo.so: the same native
# core as a plain shared library, for C programs written against the KUPL /
# KPCCL shm API (headers in shmtopo/include/, flags from
# `python -m shmtopo --cflags --libs`).
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent


class build_ext_with_c_library(build_ext):
    """The normal build, then libshmtopo.so next to the cffi extension
    (shmtopo/lib/), compiled with the same compiler and flags."""

    def run(self):
        super().run()
        self.build_c_library()

    def c_library_path(self) -> Path:
        # Beside shmtopo._native wherever that goes: the source tree for
        # editable installs (inplace), build_lib for wheels.
        return Path(self.get_ext_fullpath("shmtopo._native")).parent / "lib" / "libshmtopo.so"

    def build_c_library(self):
        ext = next(e for e in self.extensions if e.name == "shmtopo._native")
        sources = sorted(str(p.relative_to(HERE)) for p in (HERE / "native").glob("*.c"))
        objects = self.compiler.compile(
            sources, output_dir=str(Path(self.build_temp) / "libshmtopo"),
            include_dirs=ext.include_dirs, extra_postargs=ext.extra_compile_args + ["-fPIC"],
            depends=ext.depends)
        target = self.c_library_path()
        target.parent.mkdir(parents=True, exist_ok=True)
        self.compiler.link_shared_object(
            objects, str(target), libraries=ext.libraries, library_dirs=ext.library_dirs,
            extra_postargs=ext.extra_link_args + ["-Wl,-soname,libshmtopo.so"])

    def get_outputs(self):
        return super().get_outputs() + [str(self.c_library_path())]


# The small-collective entry point: numpy arrays through the buffer protocol
# (native/cpython/fastpath.c); it calls the core inside shmtopo._native.
fastpath = Extension("shmtopo._fastpath", ["native/cpython/fastpath.c"],
                     extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"])

setup(cffi_modules=["build_ffi.py:ffibuilder"], ext_modules=[fastpath],
      cmdclass={"build_ext": build_ext_with_c_library})
