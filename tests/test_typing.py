"""The package and the Python examples of the README and of docs/*.md pass
``mypy --strict``, and the annotations are precise enough to catch a misspelt method."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from test_readme import blocks

pytestmark = [pytest.mark.serial, pytest.mark.no_mpi, pytest.mark.unsanitized]
ROOT = Path(__file__).resolve().parent.parent
mypy_api = pytest.importorskip("mypy.api", reason="mypy is in the [test] extra")


def strict(*targets: str | Path) -> subprocess.CompletedProcess:
    # mypy does not follow editable installs' import hooks: point it at src/
    env = dict(os.environ, MYPYPATH=str(ROOT / "src"))
    return subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental",
                           "--cache-dir", os.devnull, *map(str, targets)],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)


def test_package_is_strictly_typed():
    proc = strict(ROOT / "src" / "shmtopo")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_readme_examples_are_strictly_typed(tmp_path):
    files = []
    for block in blocks("python"):
        files.append(tmp_path / f"{block.stem}.py")
        files[-1].write_text(block.text)
    proc = strict(*files)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_misspelt_methods_fail_the_type_check(tmp_path):
    script = tmp_path / "typo.py"
    script.write_text(
        "import shmtopo\n"
        "with shmtopo.Comm.from_mpi() as comm:\n"
        "    reveal_type(comm)\n"
        "    with comm.allocate(shape=4, dtype='f8') as win:\n"
        "        reveal_type(win.local)\n"
        "        win.fenc()\n"
        "    with shmtopo.share_topology(comm) as topo:\n"
        "        topo.nbobj('core')\n")
    proc = strict(script)
    out = proc.stdout
    assert proc.returncode == 1, out
    assert 'Revealed type is "shmtopo.comm.Comm"' in out, out
    assert 'Revealed type is "numpy.ndarray' in out, out
    assert '"Window" has no attribute "fenc"' in out, out
    assert '"Topology" has no attribute "nbobj"' in out, out
