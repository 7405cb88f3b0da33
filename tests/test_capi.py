"""Unit tests of shmtopo.capi: the flags that build a C program against
the package's headers and libshmtopo.so (``python -m shmtopo --cflags
--libs``); the programs themselves: test_kupl, test_c."""
import subprocess
import sys

import pytest

from shmtopo import capi

pytestmark = pytest.mark.serial  # one process: unit tests


def test_the_flags_name_the_headers_and_the_library_with_its_rpath():
    assert (capi.INCLUDE_DIR / "kupl.h").exists() and capi.LIBRARY.exists()
    flags = capi.compile_flags().split()
    assert flags == [f"-I{capi.INCLUDE_DIR}", f"-L{capi.LIBRARY_DIR}", "-lshmtopo", f"-Wl,-rpath,{capi.LIBRARY_DIR}"]
    assert capi.compile_flags(libs=False) == f"-I{capi.INCLUDE_DIR}"
    assert capi.compile_flags(cflags=False).split() == flags[1:]


def test_the_command_line_prints_the_same_flags():
    out = subprocess.run([sys.executable, "-m", "shmtopo", "--cflags", "--libs"], capture_output=True, text=True,
                         check=True).stdout
    assert out.split() == capi.compile_flags().split()


def test_a_missing_library_is_named(monkeypatch, tmp_path):
    monkeypatch.setattr(capi, "LIBRARY", tmp_path / "libshmtopo.so")
    with pytest.raises(FileNotFoundError, match="libshmtopo.so is missing"):
        capi.compile_flags()
    assert capi.compile_flags(libs=False).startswith("-I")
