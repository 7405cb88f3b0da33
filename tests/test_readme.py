"""The README's Python code blocks run as written, at 1, 2 and 3 ranks."""
import re
import sys
from pathlib import Path

import pytest

from conftest import run_mpiexec

pytestmark = pytest.mark.serial
README = Path(__file__).resolve().parent.parent / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", README.read_text(), re.S | re.M)


def test_readme_has_python_blocks():
    assert python_blocks(), "the README shows no Python code"


@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("index", range(len(python_blocks())))
def test_readme_block_runs(tmp_path, index, n):
    script = tmp_path / f"readme_{index}.py"
    script.write_text(python_blocks()[index])
    proc = run_mpiexec(n, [sys.executable, script], timeout=120)
    assert proc.returncode == 0, f"README block {index} at {n} ranks:\n{proc.stdout}\n{proc.stderr}"
