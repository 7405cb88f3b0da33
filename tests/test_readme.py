"""Every code block of the README and of docs/*.md runs as written.

Python blocks run under mpiexec: the README's at 1, 2 and 3 ranks (and
those that use no MPI under python -m shmtopo run at 1 to 4), the docs'
at 1 and 2 (a docs block about more ranks says so on the line before it:
``<!-- ranks: 1 2 3 4 -->``). C blocks are built against the installed
headers and library: a program (one with ``main``) runs at the same rank
counts, declarations alone are compiled against ``kupl.h``, so the page's
signatures are the header's."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import environment_without_a_job, run_mpiexec
from test_kupl import build, mpicc

pytestmark = [pytest.mark.serial, pytest.mark.unsanitized]
ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^(?:<!-- ranks: ([\d ]+) -->\n)?```(\w+)\n(.*?)^```", re.S | re.M)


class Block:
    def __init__(self, page: Path, index: int, language: str, text: str, ranks: list[int]):
        self.page, self.index, self.language, self.text, self.ranks = page, index, language, text, ranks

    @property
    def name(self) -> str:
        """README.md-0, docs/windows.md-1: the page and the block's place among its kind."""
        return f"{self.page.relative_to(ROOT)}-{self.index}"

    @property
    def stem(self) -> str:
        """A file name for the block (a valid module name for mypy)."""
        return re.sub(r"\W", "_", f"{self.page.stem}_{self.language}_{self.index}").lower()


def blocks(language: str) -> list[Block]:
    found = []
    for page in PAGES:
        default = [1, 2, 3] if page == README else [1, 2]
        matches = [m for m in BLOCK.finditer(page.read_text()) if m.group(2) == language]
        for i, m in enumerate(matches):
            ranks = [int(n) for n in m.group(1).split()] if m.group(1) else default
            found.append(Block(page, i, language, m.group(3), ranks))
    return found


def runs(language: str) -> list:
    return [pytest.param(b, n, id=f"{b.name}-n{n}") for b in blocks(language) for n in b.ranks]


def test_readme_has_python_blocks():
    assert [b for b in blocks("python") if b.page == README], "the README shows no Python code"


def test_every_page_is_linked_from_the_readme():
    text = README.read_text()
    missing = [p.name for p in PAGES[1:] if f"(docs/{p.name})" not in text]
    assert not missing, f"docs pages the README does not link: {missing}"


@pytest.mark.parametrize("block, n", runs("python"))
def test_python_block_runs(tmp_path, block, n):
    script = tmp_path / f"{block.stem}.py"
    script.write_text(block.text)
    proc = run_mpiexec(n, [sys.executable, script], timeout=120)
    assert proc.returncode == 0, f"{block.name} at {n} ranks:\n{proc.stdout}\n{proc.stderr}"


def without_mpi() -> list:
    """The README's blocks that use no MPI, at 1 to 4 ranks of the launcher."""
    return [pytest.param(b, n, id=f"{b.name}-n{n}") for b in blocks("python")
            if b.page == README and "mpi4py" not in b.text for n in (1, 2, 3, 4)]


@pytest.mark.no_mpi
@pytest.mark.parametrize("block, n", without_mpi())
def test_python_block_runs_under_the_launcher(tmp_path, block, n):
    script = tmp_path / f"{block.stem}.py"
    script.write_text(block.text)
    proc = subprocess.run([sys.executable, "-m", "shmtopo", "run", "-n", str(n), str(script)],
                          env=environment_without_a_job(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{block.name} at {n} ranks:\n{proc.stdout}\n{proc.stderr}"
    assert "mpi4py" not in proc.stderr


def test_the_readme_shows_a_program_without_mpi():
    assert len(without_mpi()) >= 4 * 3, "most tour blocks should run without MPI"


def is_program(block: Block) -> bool:
    return "main(" in block.text


@pytest.fixture(scope="module")
def c_out(tmp_path_factory):
    return tmp_path_factory.mktemp("docs_c")


def compiled(block: Block, out: Path) -> Path:
    """Build a program once (into out), or compile declarations against kupl.h."""
    exe = out / block.stem
    if not exe.exists():
        source = out / f"{block.stem}.c"
        flags = ["-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror"]
        if is_program(block):
            source.write_text(block.text)
        else:
            source.write_text('#include "kupl.h"\n' + block.text)
            flags.append("-c")
        build(out, block.stem, [mpicc()], source, flags)
    return exe


@pytest.mark.parametrize("block", [pytest.param(b, id=b.name) for b in blocks("c")])
def test_c_block_builds(c_out, block):
    assert compiled(block, c_out).exists()


@pytest.mark.parametrize("block, n", [p for p in runs("c") if is_program(p.values[0])])
def test_c_block_runs(c_out, block, n):
    proc = run_mpiexec(n, [compiled(block, c_out)], timeout=120)
    assert proc.returncode == 0, f"{block.name} at {n} ranks:\n{proc.stdout}\n{proc.stderr}"
