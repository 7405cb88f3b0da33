"""The shared hwloc topology, on 1 rank and under mpiexec -n 2/3/4.

Every rank runs the same tests in the same order; each cross-rank check goes
through an allgather so that a rank that disagrees fails the run.
"""
import functools
import glob
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import pytest

import shmtopo
from shmtopo import topology as T
from shmtopo.errors import FreedError, ShmtopoError, ShmtopoValueError
from conftest import BEFORE_ABORT


@pytest.fixture(autouse=True)
def _plain_env(monkeypatch):
    # The forcing variables must not leak in from outside or between tests.
    for name in ("SHMTOPO_TOPO_SOURCE", "SHMTOPO_TOPO_DIR", "SHMTOPO_TOPO_CONFLICT_RANK"):
        monkeypatch.delenv(name, raising=False)
    yield
    assert T._shared is None, "a test left the shared topology open"


@pytest.fixture
def local():
    topo = shmtopo.Topology.load()
    yield topo
    topo.close()


@pytest.fixture
def shared_dir(comm):
    """A fresh directory under /dev/shm, the same on every rank."""
    path = tempfile.mkdtemp(prefix="shmtopo-test-", dir="/dev/shm") if comm.rank == 0 else None
    path = comm.mpi.bcast(path, root=0)
    remove = functools.partial(shutil.rmtree, path, ignore_errors=True)
    if comm.rank == 0:  # a failed assertion aborts the job before the teardown below
        BEFORE_ABORT.append(remove)
    yield path
    comm.mpi.Barrier()
    if comm.rank == 0:
        BEFORE_ABORT.remove(remove)
        shutil.rmtree(path)


def leftovers(comm):
    """shmtopo topology files of this job's leader still in /dev/shm."""
    return glob.glob(f"/dev/shm/shmtopo-topo.{comm.pid(0)}.*")


def content(xml):
    """XML without the <support> lines: what the topology says, not what this
    copy's loader could discover (an XML load lacks discovery.* flags)."""
    return "\n".join(line for line in xml.splitlines() if "<support " not in line)


def allgather(comm, value):
    return comm.mpi.allgather(value)


# -- local queries ----------------------------------------------------------------
@pytest.mark.serial
def test_type_names(local):
    counts = local.counts()
    assert counts["machine"] == 1
    assert counts["pu"] >= counts["core"] >= 1
    assert counts["pu"] == len(local.root.cpuset)
    assert local.nbobjs("numa") == local.nbobjs("numanode") == local.nbobjs("NUMANode") >= 1
    assert local.nbobjs("L2Cache") == local.nbobjs("l2")
    for bad in ("bogus", "", "pa", "cores"):
        with pytest.raises(ShmtopoValueError):
            local.nbobjs(bad)
    with pytest.raises(ShmtopoValueError):
        local.nbobjs(3)


@pytest.mark.serial
def test_object_tree(local):
    pus = local.objects("pu")
    assert [p.logical_index for p in pus] == list(range(len(pus)))
    assert all(p.type == "pu" and len(p.cpuset) == 1 for p in pus)
    assert set().union(*(p.cpuset for p in pus)) == local.root.cpuset
    assert {p.os_index for p in pus} == local.root.cpuset
    for core in local.objects("core"):
        assert core.children and core.cpuset == set().union(*(c.cpuset for c in core.children))
        for child in core.children:
            assert child.parent == core
            assert child.cpuset <= core.cpuset
    root = local.root
    assert root.type == "machine" and root.parent is None and root.depth == 0
    # the string form is hwloc's hex mask of the same set
    for obj in local.objects("core") + [root]:
        mask = int(obj.cpuset_str.replace(",", ""), 16)
        assert {i for i in range(mask.bit_length()) if mask >> i & 1} == obj.cpuset
    numa = local.objects("numa")
    assert all(n.local_memory > 0 and n.depth < 0 for n in numa)
    assert sum(n.local_memory for n in numa) == root.total_memory
    assert set().union(*(n.nodeset for n in numa)) == root.nodeset
    # memory children are listed after the normal ones, under some ancestor
    holders = [o for t in T.TYPES for o in local.objects(t) if any(c.type == "numanode" for c in o.children)]
    assert sorted(c.logical_index for h in holders for c in h.children if c.type == "numanode") == \
        list(range(len(numa)))
    assert local.depth >= 2


@pytest.mark.serial
def test_binding(local):
    bound = local.get_cpubind()
    assert bound and bound <= local.root.cpuset
    assert os.sched_getaffinity(0) <= bound
    where = local.get_last_cpu_location()
    assert len(where) == 1 and where <= local.root.cpuset


@pytest.mark.serial
def test_readonly_and_closed():
    topo = shmtopo.Topology.load()
    core = topo.objects("core")[0]
    with pytest.raises(AttributeError):
        topo.source = "shmem"
    with pytest.raises(AttributeError):
        core.os_index = 7
    # binding (set_cpubind) changes the process, not the topology: allowed
    assert not any(hasattr(topo, name) for name in ("insert", "restrict", "write"))
    topo.close()
    topo.close()  # a no-op
    assert topo.closed and "closed" in repr(topo)
    for call in (lambda: topo.depth, lambda: topo.nbobjs("pu"), lambda: topo.objects("pu"),
                 lambda: topo.root, lambda: topo.get_cpubind(), lambda: topo.get_last_cpu_location(),
                 lambda: topo.xml(), lambda: core.cpuset, lambda: core.parent, lambda: core.children,
                 lambda: core.type, lambda: core.os_index):
        with pytest.raises(FreedError):
            call()


@pytest.mark.serial
def test_xml_round_trip(local):
    with shmtopo.Topology.from_xml(local.xml(), this_system=True) as copy:
        assert copy.source == "xml"
        assert copy.counts() == local.counts()
        assert content(copy.xml()) == content(local.xml())
        assert copy.get_cpubind() == local.get_cpubind()
    with shmtopo.Topology.from_xml(local.xml()) as foreign:
        assert foreign.counts() == local.counts()
    with pytest.raises(ShmtopoValueError):
        shmtopo.Topology.from_xml("<not a topology/>")


# -- sharing ----------------------------------------------------------------------------
def test_shared_equals_local(comm, local):
    with shmtopo.share_topology(comm) as topo:
        rows = allgather(comm, (topo.source, topo.address, topo.length, topo.attempts,
                                topo.counts(), topo.xml()))
        assert all(r[0] == "shmem" and r[3] == 1 for r in rows), rows
        assert len({(r[1], r[2]) for r in rows}) == 1  # one address for all
        assert topo.address % (2 << 20) == 0  # 2 MiB-aligned
        assert all(r[4] == local.counts() and r[5] == local.xml() for r in rows)
        assert [c.cpuset for c in topo.objects("core")] == [c.cpuset for c in local.objects("core")]
        assert topo.get_cpubind() == local.get_cpubind()
    assert topo.closed
    assert leftovers(comm) == []


@pytest.mark.parametrize("source", ["shmem", "xml", "local"])
def test_each_source(comm, local, source):
    with shmtopo.share_topology(comm, source=source) as topo:
        xml = topo.xml() if source != "xml" else content(topo.xml())
        rows = allgather(comm, (topo.source, topo.counts(), xml, topo.address is None))
        assert all(r[0] == source for r in rows), rows
        expected = local.xml() if source != "xml" else content(local.xml())
        assert all(r[1] == local.counts() and r[2] == expected for r in rows)
        assert all(r[3] == (source != "shmem") for r in rows)
    assert leftovers(comm) == []


def test_source_from_environment(monkeypatch):
    monkeypatch.setenv("SHMTOPO_TOPO_SOURCE", "xml")  # read when a comm is made
    with shmtopo.Comm.from_mpi() as comm:
        with shmtopo.share_topology(comm) as topo:
            assert set(allgather(comm, topo.source)) == {"xml"}
        with shmtopo.share_topology(comm, source="local") as topo:  # the keyword wins
            assert set(allgather(comm, topo.source)) == {"local"}
    monkeypatch.setenv("SHMTOPO_TOPO_SOURCE", "carrier-pigeon")
    with pytest.raises(ShmtopoValueError, match="SHMTOPO_TOPO_SOURCE=carrier-pigeon"):
        shmtopo.Comm.from_mpi()


@pytest.mark.parametrize("who", ["last", "leader"])
def test_conflict_on_one_rank_retries_everywhere(comm, local, who):
    victim = comm.size - 1 if who == "last" else 0
    with shmtopo.share_topology(comm, _conflict_rank=victim) as topo:
        rows = allgather(comm, (topo.source, topo.attempts, topo.address, topo.counts()))
    assert all(r[0] == "shmem" and r[1] == 2 for r in rows), rows
    assert len({r[2] for r in rows}) == 1
    assert all(r[3] == local.counts() for r in rows)
    assert leftovers(comm) == []


def test_conflict_from_environment(monkeypatch):
    from mpi4py import MPI

    monkeypatch.setenv("SHMTOPO_TOPO_CONFLICT_RANK", str(MPI.COMM_WORLD.size // 2))
    with shmtopo.Comm.from_mpi() as comm, shmtopo.share_topology(comm) as topo:
        assert set(allgather(comm, (topo.source, topo.attempts))) == {("shmem", 2)}


def test_conflict_without_retries_falls_back_to_xml(comm, local):
    with shmtopo.share_topology(comm, attempts=1, _conflict_rank=comm.size - 1) as topo:
        assert set(allgather(comm, topo.source)) == {"xml"}
        assert topo.counts() == local.counts()
    assert leftovers(comm) == []


def test_forced_shmem_failure_raises_on_every_rank(comm):
    outcome = None
    try:
        shmtopo.share_topology(comm, source="shmem", attempts=1, _conflict_rank=comm.size - 1)
    except ShmtopoError as exc:
        outcome = (type(exc).__name__, exc.rank)
    assert set(allgather(comm, outcome)) == {("ShmtopoOSError", comm.size - 1)}
    assert leftovers(comm) == []


def test_no_file_left_in_the_directory(shared_dir, monkeypatch):
    monkeypatch.setenv("SHMTOPO_TOPO_DIR", shared_dir)
    with shmtopo.Comm.from_mpi() as comm:
        _no_file_left(comm, shared_dir)


def _no_file_left(comm, shared_dir):
    with shmtopo.share_topology(comm) as topo:
        assert topo.source == "shmem"
        comm.mpi.Barrier()  # the leader unlinks once it is past the last exchange
        assert os.listdir(shared_dir) == []
    with shmtopo.share_topology(comm, _conflict_rank=0) as topo:
        assert topo.attempts == 2
    comm.mpi.Barrier()
    assert os.listdir(shared_dir) == []


def test_unwritable_directory_falls_back(shared_dir, monkeypatch, local):
    # The leader cannot create the file: every rank must notice and take XML.
    monkeypatch.setenv("SHMTOPO_TOPO_DIR", os.path.join(shared_dir, "missing"))
    with shmtopo.Comm.from_mpi() as comm:
        _falls_back(comm, shared_dir, local)


def _falls_back(comm, shared_dir, local):
    with shmtopo.share_topology(comm) as topo:
        rows = allgather(comm, (topo.source, topo.attempts))
        assert set(rows) == {("xml", T.ATTEMPTS)}
        assert content(topo.xml()) == content(local.xml())
        assert topo.get_cpubind() == local.get_cpubind()
    comm.mpi.Barrier()
    assert os.listdir(shared_dir) == []


def test_stale_files_of_dead_leaders_are_removed(comm, shared_dir, monkeypatch):
    """A leader killed between writing its file and unlinking it leaves the
    file; the next comm made on the node removes it (the name carries the
    creator's pid and origin: its boot and PID namespace, here this one's),
    and leaves files of live processes alone."""
    monkeypatch.setenv("SHMTOPO_TOPO_DIR", shared_dir)
    if comm.rank == 0:
        dead = subprocess.Popen(["true"])
        dead.wait()
        pids = (dead.pid, os.getppid())
    dead_pid, live_pid = comm.mpi.bcast(pids if comm.rank == 0 else None, root=0)
    from shmtopo._native import lib
    origin = f"{lib.shmtopo_origin():016x}"
    stale = os.path.join(shared_dir, f"shmtopo-topo.{dead_pid}.{origin}.00000000deadbeef.hwloc-0.0.0")
    alive = os.path.join(shared_dir, f"shmtopo-topo.{live_pid}.{origin}.00000000deadbeef.hwloc-0.0.0")
    if comm.rank == 0:
        for path in (stale, alive):
            open(path, "w").close()
    comm.mpi.Barrier()
    with shmtopo.Comm.from_mpi() as fresh:  # creation sweeps
        fresh.barrier()
    comm.mpi.Barrier()
    assert sorted(os.listdir(shared_dir)) == [os.path.basename(alive)]
    comm.mpi.Barrier()
    if comm.rank == 0:
        os.unlink(alive)


def test_one_per_process_reference_counted(comm):
    first = shmtopo.share_topology(comm)
    second = shmtopo.share_topology(comm)
    assert second is first and first._refs == 2
    first.close()
    assert not first.closed and first.nbobjs("pu") >= 1
    second.close()
    assert first.closed and T._shared is None
    with pytest.raises(FreedError):
        first.nbobjs("pu")
    first.close()  # no-op, and does not touch a later topology
    with shmtopo.share_topology(comm) as third:
        assert third is not first and not third.closed
        first.close()
        assert not third.closed


def test_held_on_some_ranks_only(comm, local):
    # Rank 0 keeps its topology while the others do not: a second call still
    # works everywhere (rank 0 loads afresh to write: writing from an adopted
    # copy would segfault in hwloc).
    keep = shmtopo.share_topology(comm)
    if comm.rank != 0:
        keep.close()
    again = shmtopo.share_topology(comm)
    try:
        rows = allgather(comm, (again.source, again.counts(), again is keep))
        assert all(r[0] == "shmem" and r[1] == local.counts() for r in rows)
        assert rows[0][2] is True
    finally:
        again.close()
        if comm.rank == 0:
            keep.close()


def test_callbacks_comm_uses_the_native_allgather(comm, local):
    mpi = comm.mpi
    bare = shmtopo.Comm.from_callbacks(
        comm.size, comm.rank,
        allgather=lambda send, recv: mpi.Allgather([send, "B"], [recv, "B"]),
        barrier=mpi.Barrier)
    try:
        assert bare.mpi is None
        for source in ("shmem", "xml"):
            with shmtopo.share_topology(bare, source=source) as topo:
                assert set(allgather(comm, (topo.source, content(topo.xml()) == content(local.xml())))) == \
                    {(source, True)}
    finally:
        bare.free()


def test_atexit_hook_destroys(comm):
    topo = shmtopo.share_topology(comm)
    other = shmtopo.Topology.load()
    T._destroy_all()
    assert topo.closed and other.closed and T._shared is None


# -- splitting a comm ------------------------------------------------------------------------
@pytest.mark.parametrize("by", ["package", "numa", "l3", "core", "pu", "group"])
def test_split(comm, local, by):
    # The color of an unbound rank depends on where it runs at that moment,
    # so take the one the split used.
    sub, color = comm._split_colored(by)
    try:
        assert sub.mpi is not None
        assert 0 <= color <= max(local.nbobjs(by), 1)
        rows = allgather(comm, (color, sub.size, sub.rank))
        mine = [r for r in rows if r[0] == color]
        assert sub.size == len(mine)
        assert sorted(r[2] for r in mine) == list(range(sub.size))
        assert set(sub.mpi.allgather(color)) == {color}
        if local.nbobjs(by) <= 1:
            assert sub.size == comm.size
        # windows and fences work on the sub-comm
        with sub.allocate(shape=(4,), dtype=np.int64) as win:
            win.local[:] = sub.rank + 1
            win.fence()
            for r in range(sub.size):
                assert (win.query(r) == r + 1).all()
            win.fence()
    finally:
        sub.free()


def test_comm_split_method(comm, local):
    with comm.split("package") as sub:
        assert isinstance(sub, shmtopo.Comm)
        if local.nbobjs("package") == 1:
            assert sub.size == comm.size
        with sub.allocate(8) as win:
            win.local[:] = sub.rank
            win.fence()
            assert [int(win.query(r)[0]) for r in range(sub.size)] == list(range(sub.size))


def test_split_color_follows_binding(comm, local):
    with shmtopo.share_topology(comm) as topo:
        bound = topo.get_cpubind()
        for by in ("core", "pu", "package"):
            color = T.split_color(topo, by)
            objs = topo.objects(by)
            holders = [i for i, o in enumerate(objs) if bound <= o.cpuset]
            if holders:  # bound inside one object: that one, every time
                assert color == holders[0]
            else:  # unbound: an object holding a CPU of the binding
                assert objs[color].cpuset & bound


def test_split_rejects_unknown_type(comm):
    with pytest.raises(ShmtopoValueError):
        comm.split("bogus")


def test_topo_report_prints(comm, capsys):
    from shmtopo.__main__ import topo_report

    topo_report(comm)
    out = capsys.readouterr().out
    if comm.rank == 0:
        assert "pu " in out and "share ms" in out
        assert out.count("shmem") == comm.size
    else:
        assert out == ""


@pytest.mark.serial
def test_bench_example_runs():
    from conftest import run_mpiexec

    script = os.path.join(os.path.dirname(__file__), "..", "examples", "bench_topology.py")
    proc = run_mpiexec(2, [sys.executable, script, "--repeat", "2"], timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "share ms" in proc.stdout and proc.stdout.count(" shmem |") == 2, proc.stdout


def test_split_by_different_types_fails_everywhere(comm):
    if comm.size == 1:
        pytest.skip("one rank cannot disagree")
    by = "core" if comm.rank == comm.size - 1 else "package"
    with pytest.raises(ShmtopoValueError, match=r"split\(by (core|package)\)") as info:
        comm.split(by)
    assert set(allgather(comm, str(info.value))) == {str(info.value)}
