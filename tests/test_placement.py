"""NUMA placement and huge pages of windows, on 1 rank and under mpiexec.

What is checked is what the kernel says, not what shmtopo reports: the
policy of an address and the node of its page (get_mempolicy), the pages a
process has faulted in itself (Rss in /proc/self/smaps: every rank must
first-touch its own part, not the allocating rank), and /proc/meminfo and
shmem_enabled for huge pages. This machine has one NUMA node; a synthetic
topology with two (tests/scripts/placement_synthetic.py) shows the node each
rank's part is given where the binding cannot be done.
"""
import ctypes
import errno
import os
import platform
import re
import sys
from pathlib import Path

import numpy as np
import pytest

import shmtopo
from conftest import CLEAN_ENV, run_mpiexec

HERE = Path(__file__).resolve().parent
BACKENDS = ["posix", "memfd", "sysv"]
PAGE = os.sysconf("SC_PAGE_SIZE")

# the kernel's mempolicy modes and get_mempolicy flags (linux/mempolicy.h)
MPOL_DEFAULT, MPOL_PREFERRED, MPOL_INTERLEAVE = 0, 1, 3
MPOL_F_NODE, MPOL_F_ADDR = 1, 2
SYS_GET_MEMPOLICY = {"x86_64": 239, "aarch64": 236}.get(platform.machine())
_libc = ctypes.CDLL(None, use_errno=True)


def policy_at(addr: int) -> tuple[int, set[int]]:
    """The memory policy of the page at addr, and its nodes."""
    if SYS_GET_MEMPOLICY is None:
        pytest.skip(f"get_mempolicy's number on {platform.machine()} is not known here")
    mode, mask = ctypes.c_int(), (ctypes.c_ulong * 16)()
    if _libc.syscall(SYS_GET_MEMPOLICY, ctypes.byref(mode), mask, ctypes.c_ulong(16 * 64 + 1),
                     ctypes.c_void_p(addr), ctypes.c_ulong(MPOL_F_ADDR)) < 0:
        raise OSError(ctypes.get_errno(), "get_mempolicy")
    return mode.value, {w * 64 + b for w in range(16) for b in range(64) if mask[w] >> b & 1}


def node_of(addr: int) -> int:
    """The NUMA node the page at addr lies on."""
    node = ctypes.c_int()
    if _libc.syscall(SYS_GET_MEMPOLICY, ctypes.byref(node), None, ctypes.c_ulong(0),
                     ctypes.c_void_p(addr), ctypes.c_ulong(MPOL_F_NODE | MPOL_F_ADDR)) < 0:
        raise OSError(ctypes.get_errno(), "get_mempolicy")
    return node.value


def allowed_nodes() -> set[int]:
    """NUMA nodes this process may allocate on (Mems_allowed_list)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("Mems_allowed_list:"):
            return set(shmtopo.Bitmap(line.split(":", 1)[1].strip()))
    return {0}


def rss_of(addr: int, length: int) -> int:
    """Bytes of [addr, addr+length) this process has mapped in its own page
    tables (faulted in itself), from the Rss of the mappings in smaps."""
    total, start, end, lines = 0, 0, 0, Path("/proc/self/smaps").read_text().splitlines()
    for line in lines:
        head = line.split()[0]
        if "-" in head and not head.endswith(":"):
            start, end = (int(x, 16) for x in head.split("-"))
        elif line.startswith("Rss:") and start < addr + length and addr < end:
            if start < addr or end > addr + length:
                raise AssertionError("the range is not whole mappings: Rss cannot tell")
            total += int(line.split()[1]) * 1024
    return total


def addr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def mapping_of(win, rank: int) -> tuple[int, int]:
    """(start, length) of the mapping that holds rank's part."""
    start = addr(win.query(rank, dtype=np.uint8))
    for base, m in win._mappings:
        if base <= start < base + m.size:
            return base, m.size
    raise AssertionError("part outside every mapping")


def shm_leftovers() -> set[str]:
    return {f for f in os.listdir("/dev/shm") if f.startswith(f"shmtopo.{os.getpid()}.")}


# ---- every rank first-touches its own part ------------------------------------------

@pytest.mark.parametrize("contiguous", [False, True])
@pytest.mark.parametrize("backend", BACKENDS)
def test_each_rank_faults_in_its_own_part(comm, backend, contiguous):
    """Right after allocation, before anyone writes, this process has faulted
    in exactly its own part: the pages were first touched by their owner,
    so they lie on its NUMA node, even in a contiguous window that rank 0
    created. (Before: rank 0 reserved everything through the file, and no
    process had faulted in anything.)"""
    nbytes = 64 * PAGE + 8 * comm.rank
    with comm.allocate(nbytes, backend=backend, contiguous=contiguous) as win:
        me = win.query(comm.rank, dtype=np.uint8)
        if contiguous:
            base, length = mapping_of(win, comm.rank)
            start, end = addr(me) // PAGE * PAGE, -(-(addr(me) + me.nbytes) // PAGE) * PAGE
            if comm.rank == 0:
                start = base  # the control blocks are rank 0's
            # my own pages, give or take the pages I share with a neighbour's part
            assert end - start - 2 * PAGE <= rss_of(base, length) <= end - start + 2 * PAGE, \
                (rss_of(base, length), end - start)
        else:
            for r in range(comm.size):
                base, length = mapping_of(win, r)
                rss = rss_of(base, length)
                assert rss == (length if r == comm.rank else 0), (r, rss, length)
        win.fence()  # nobody looks at a part before every rank has checked
    assert shm_leftovers() == set()


# ---- placement: local (default) and interleave --------------------------------------

@pytest.mark.parametrize("contiguous", [False, True])
@pytest.mark.parametrize("backend", BACKENDS)
def test_default_is_local_first_touch(comm, backend, contiguous):
    with comm.allocate(16 * PAGE, backend=backend, contiguous=contiguous) as win:
        assert win.placement == "local"
        one = " (1 NUMA node)" if len(allowed_nodes()) == 1 else ""
        assert win.placement_report == [f"local{one}: first touch"] * comm.size, win.placement_report
        assert win.numa_nodes == [set()] * comm.size
        for r in range(comm.size):
            part = win.query(r, dtype=np.uint8)
            mode, _ = policy_at(addr(part))
            assert mode == MPOL_DEFAULT  # nothing bound: the owner's touch chose
            assert node_of(addr(part)) in allowed_nodes()
        win.local[:] = comm.rank + 1
        win.fence()
        assert all((win.query(r, dtype=np.uint8) == r + 1).all() for r in range(comm.size))


@pytest.mark.parametrize("contiguous", [False, True])
@pytest.mark.parametrize("backend", BACKENDS)
def test_interleave_spreads_over_the_allowed_nodes(comm, backend, contiguous):
    nodes = allowed_nodes()
    with comm.allocate(16 * PAGE, backend=backend, contiguous=contiguous, placement="interleave") as win:
        assert win.placement == "interleave"
        assert win.numa_nodes == [nodes] * comm.size
        one = " (1 NUMA node)" if len(nodes) == 1 else ""
        where = f"NUMA node{'s' if len(nodes) > 1 else ''} {shmtopo.Bitmap(nodes)}"
        assert win.placement_report == [f"interleave{one} on {where}: bound"] * comm.size
        for r in range(comm.size):
            part = win.query(r, dtype=np.uint8)
            # the policy is the file's own: every process sees it on every part
            assert policy_at(addr(part)) == (MPOL_INTERLEAVE, nodes)
            pages = {node_of(addr(part) + i) for i in range(0, part.nbytes, PAGE)}
            assert pages <= nodes and (len(nodes) == 1 or len(pages) > 1)
        win.local[:] = 3
        win.fence()
        assert (win.query(0, dtype=np.uint8) == 3).all()


def test_local_with_the_shared_topology_prefers_the_owner_node(comm):
    """Holding the node's topology, each rank's part is bound (preferred) to
    the NUMA node near the rank's CPUs, and lies there."""
    with shmtopo.share_topology(comm) as topo:
        mine = topo.cpuset_to_nodeset(os.sched_getaffinity(0))
        with comm.allocate(8 * PAGE) as win:
            chosen = comm.mpi.allgather(set(mine))
            assert win.numa_nodes == chosen
            for r in range(comm.size):
                part = addr(win.query(r, dtype=np.uint8))
                if len(chosen[r]) == 1:
                    assert "bound" in win.placement_report[r], win.placement_report
                    assert policy_at(part) == (MPOL_PREFERRED, chosen[r])
                    assert node_of(part) in chosen[r]
                else:  # CPUs near several nodes: the owner's touch picks
                    assert win.placement_report[r].endswith("first touch")


@pytest.mark.serial
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_two_numa_nodes_synthetic_choose_each_rank_node(n):
    """A synthetic topology of 2 NUMA nodes (one CPU each): each rank, bound
    to one CPU, gets the node of that CPU; nothing is bound (the topology is
    not this machine's) and the report says so."""
    env = {**CLEAN_ENV, "HWLOC_SYNTHETIC": "numa:2 core:1 pu:1"}
    proc = run_mpiexec(n, [sys.executable, HERE / "scripts" / "placement_synthetic.py"], env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # ranks' lines may run into each other on mpiexec's stdout
    verdicts = dict(re.findall(r"RANK (\d+) (ok|failed)", proc.stdout))
    assert verdicts == {str(r): "ok" for r in range(n)}, proc.stdout + proc.stderr


# ---- huge pages ------------------------------------------------------------------------

def meminfo(key: str) -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def shmem_thp() -> bool:
    """Whether madvise can get transparent huge pages for memfd/sysv memory."""
    try:
        text = Path("/sys/kernel/mm/transparent_hugepage/shmem_enabled").read_text()
    except OSError:
        return False
    chosen = text[text.index("[") + 1:text.index("]")] if "[" in text else "never"
    return chosen in ("always", "within_size", "advise", "force")


def expected_huge(total: int) -> str | None:
    """What huge_pages=True must give a memfd window of `total` bytes here."""
    size = meminfo("Hugepagesize") * 1024
    if size and meminfo("HugePages_Free") * size >= total:
        return "hugetlb"
    return "transparent" if shmem_thp() else None


def test_huge_pages_report_what_this_machine_offers(comm):
    nbytes = 3 * 2**20
    hp = meminfo("Hugepagesize") * 1024 or 2**21
    per_rank = -(-(nbytes + 2 * PAGE) // hp) * hp  # each segment rounded to huge pages
    expected = expected_huge(per_rank * comm.size)
    with comm.allocate(nbytes, huge_pages=True) as win:
        assert win.backend == "memfd"  # the default backend, when huge pages are asked
        assert win.huge_pages == expected, (win.huge_pages, expected)
        assert win.page_size == (hp if expected == "hugetlb" else PAGE)
        win.local[:] = comm.rank + 1
        win.fence()
        for r in range(comm.size):
            assert (win.query(r) == r + 1).all()
    with comm.allocate(4096) as plain:
        assert plain.huge_pages is None and plain.page_size == PAGE and plain.backend == "posix"
    assert shm_leftovers() == set()


@pytest.mark.parametrize("backend", BACKENDS)
def test_huge_pages_fall_back_cleanly(comm, backend):
    """Where this backend can get no huge pages, True gives normal pages and
    "required" raises ShmtopoMemoryError on every rank, leaving nothing."""
    with comm.allocate(2**20, backend=backend, huge_pages=True) as win:
        got = win.huge_pages
        win.local[:] = 1
        win.fence()
        assert int(win.query(0).sum()) == 2**20
    if got is None:
        with pytest.raises(shmtopo.ShmtopoMemoryError, match="huge pages are required"):
            comm.allocate(2**20, backend=backend, huge_pages="required")
    else:
        with comm.allocate(2**20, backend=backend, huge_pages="required") as win:
            assert win.huge_pages == got
    assert shm_leftovers() == set()
    with comm.allocate(8) as after:  # the comm is fine afterwards
        after.fence()


# ---- misuse: the same exception on every rank -----------------------------------------

@pytest.mark.parametrize("kw, bad", [
    ("placement", "interleave"), ("placement", "numa"), ("placement", 3),
    ("huge_pages", True), ("huge_pages", "required"), ("huge_pages", "yes"),
])
def test_one_rank_differs(comm, kw, bad):
    """One rank (the last) passes another or a bad value: every rank raises
    ShmtopoValueError (or, for "required" where no huge pages exist and
    every rank agreed, ShmtopoMemoryError is not what happens: it differs)."""
    culprit = comm.size - 1
    args = {kw: bad} if comm.rank == culprit else {}
    good_everywhere = comm.size == 1 and bad in ("interleave", True, "required")
    if good_everywhere:  # one rank cannot disagree with itself
        if bad == "required" and expected_huge(4 * 2**21) is None:
            with pytest.raises(shmtopo.ShmtopoMemoryError):
                comm.allocate(4096, **args)
        else:
            comm.allocate(4096, **args).free()
        return
    with pytest.raises(shmtopo.ShmtopoValueError) as info:
        comm.allocate(4096, **args)
    outcomes = comm.mpi.allgather(str(info.value))
    assert len(set(outcomes)) == 1, outcomes  # the same message on every rank
    assert shm_leftovers() == set()
    with comm.allocate(8) as after:
        after.fence()


# ---- transparent huge pages, in a /dev/shm of our own ------------------------------------

THP_CHILD = """
import os, sys, shmtopo
comm = shmtopo.Comm.from_callbacks(1, 0, allgather=lambda s, r: r.__setitem__(slice(None), s),
                                   barrier=lambda: None)
mode = sys.argv[1]
def eligible(win):
    start = win.query(0).__array_interface__["data"][0]
    head = None
    for line in open("/proc/self/smaps"):
        first = line.split()[0]
        if "-" in first and not first.endswith(":"):
            lo, hi = (int(x, 16) for x in first.split("-"))
            head = lo <= start < hi
        elif head and line.startswith("THPeligible:"):
            return int(line.split()[1])
    raise SystemExit("mapping not found in smaps")
for contiguous in (False, True):
    with comm.allocate(4 << 20, backend="posix", huge_pages=True, contiguous=contiguous) as win:
        win.local[:] = 5
        assert int(win.local[-1]) == 5
        print(mode, "contiguous" if contiguous else "separate", win.huge_pages, eligible(win), flush=True)
try:
    comm.allocate(4 << 20, backend="posix", huge_pages="required").free()
    print(mode, "required ok", flush=True)
except shmtopo.ShmtopoMemoryError as exc:
    print(mode, "required raised", exc, flush=True)
comm.free()
assert os.listdir("/dev/shm") == [], os.listdir("/dev/shm")
"""


@pytest.mark.serial
@pytest.mark.parametrize("huge", ["advise", "never"])
def test_transparent_huge_pages_where_dev_shm_allows_them(huge):
    """A private /dev/shm mounted with huge=advise: posix windows with
    huge_pages=True ask for transparent huge pages (the kernel then deems
    the mapping THP-eligible); mounted with huge=never they fall back to
    normal pages and "required" raises."""
    import shutil
    import subprocess

    if shutil.which("unshare") is None:
        pytest.skip("unshare(1) is not installed")
    if Path("/sys/kernel/mm/transparent_hugepage/shmem_enabled").read_text().find("[deny]") >= 0:
        pytest.skip("shmem_enabled=deny: no transparent huge pages for shared memory at all")
    script = (f"mount -t tmpfs -o size=64m,huge={huge} tmpfs /dev/shm && "
              f"exec {sys.executable} -c \"$0\" {huge}")
    proc = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script, THP_CHILD],
                          capture_output=True, text=True, timeout=120)
    # a mount namespace needs root (or user namespaces, which machines may forbid)
    if proc.returncode != 0 and ("mount" in proc.stderr or "unshare" in proc.stderr) and (
            "ermission" in proc.stderr or "not permitted" in proc.stderr):
        pytest.skip(f"cannot mount a private /dev/shm here: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    if huge == "advise":
        assert lines[:2] == ["advise separate transparent 1", "advise contiguous transparent 1"], proc.stdout
        assert lines[2] == "advise required ok", proc.stdout
    else:
        assert lines[:2] == ["never separate None 0", "never contiguous None 0"], proc.stdout
        assert lines[2].startswith("never required raised") and "huge pages are required" in lines[2], proc.stdout
