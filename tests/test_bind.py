"""Binding: this process and its threads (Topology.set_cpubind, set_membind)
and a whole comm (Comm.bind), checked with hwloc-bind, which reads a
process's or thread's binding from the outside, and hwloc-distrib.

Binding for real changes where the test processes run (on this 2-core
machine, other people's too): every test that binds restores every thread's
CPU affinity and the memory policy at its end (the restore_binding fixture).
"""
import os
import threading

import pytest

import shmtopo
from shmtopo import Bitmap
from shmtopo.errors import ShmtopoError, ShmtopoOSError, ShmtopoValueError

import hwloc_tools as H

pytestmark = H.needs_tools


def threads():
    return [int(t) for t in os.listdir("/proc/self/task")]


@pytest.fixture
def restore_binding():
    """Every thread's CPU affinity and this thread's memory policy, put back
    after the test."""
    saved = {}
    for tid in threads():
        try:
            saved[tid] = os.sched_getaffinity(tid)
        except OSError:  # gone meanwhile
            pass
    with shmtopo.Topology.load() as topo:
        nodes, policy = topo.get_membind(thread=True)
    yield saved[threading.get_native_id()]
    for tid, cpus in saved.items():
        try:
            os.sched_setaffinity(tid, cpus)
        except OSError:
            pass
    with shmtopo.Topology.load() as topo:
        if policy in ("default", "firsttouch"):  # Linux's default policy reads as firsttouch
            topo.set_membind([], "default", thread=True)
        else:
            topo.set_membind(nodes, policy, thread=True)
    assert os.sched_getaffinity(0) == saved[threading.get_native_id()]


def tool_binding(*args):
    return H.run("hwloc-bind", "--get", *args).strip()


@pytest.fixture(params=[pytest.param("local", marks=pytest.mark.serial), "shared"])
def topo(request, comm):
    """A topology of this machine: private (one process's: serial), or the
    node's adopted copy (binding through it must work and leave it untouched)."""
    t = shmtopo.Topology.load() if request.param == "local" else shmtopo.share_topology(comm)
    yield t
    t.close()


# -- this process and its threads ------------------------------------------------------------------
def test_set_cpubind_of_the_process(topo, restore_binding):
    allowed = restore_binding
    for cpu in sorted(allowed):
        topo.set_cpubind([cpu])
        mask = Bitmap([cpu]).mask
        assert topo.get_cpubind() == {cpu} and topo.get_cpubind(thread=True) == {cpu}
        assert tool_binding("--pid", str(os.getpid())) == mask
        for tid in threads():  # every thread of the process, MPI's too
            assert tool_binding("--tid", str(tid)) == mask
        # an object stands for its cpuset, a string is hwloc's list syntax
        pu = topo.object_by_os_index("pu", cpu)
        topo.set_cpubind(pu.parent)
        assert topo.get_cpubind() == pu.parent.cpuset
        topo.set_cpubind(str(Bitmap(allowed)))
        assert topo.get_cpubind() == allowed
    assert topo.source in ("local", "shmem") and topo.nbobjs("pu") >= 1  # still readable


def test_set_cpubind_of_a_thread(topo, restore_binding):
    allowed = restore_binding
    cpu = max(allowed)
    seen, ready, done = {}, threading.Event(), threading.Event()

    def worker():
        topo.set_cpubind([cpu], thread=True)
        seen["tid"] = threading.get_native_id()
        seen["mine"] = topo.get_cpubind(thread=True)
        seen["last"] = topo.get_last_cpu_location()
        ready.set()
        done.wait(30)

    t = threading.Thread(target=worker)
    t.start()
    try:
        assert ready.wait(30)
        assert seen["mine"] == {cpu} and seen["last"] == {cpu}
        assert tool_binding("--tid", str(seen["tid"])) == Bitmap([cpu]).mask
        # the calling thread only: this one keeps its binding
        assert topo.get_cpubind(thread=True) == allowed
        assert tool_binding("--tid", str(threading.get_native_id())) == Bitmap(allowed).mask
    finally:
        done.set()
        t.join()


def test_last_cpu_location(topo, restore_binding):
    allowed = restore_binding
    for cpu in sorted(allowed):
        topo.set_cpubind([cpu])
        assert topo.get_last_cpu_location() == {cpu}  # the calling thread runs there now
        me = threading.get_native_id()
        assert H.run("hwloc-bind", "--get-last-cpu-location", "--tid", str(me)).strip() == Bitmap([cpu]).mask
        assert topo.get_last_cpu_location(thread=False) <= allowed


def test_memory_binding(topo, restore_binding):
    nodes = topo.root.nodeset
    node = min(nodes)
    for policy in ("bind", "interleave", "firsttouch"):
        for thread in (True, False):
            topo.set_membind([node], policy, thread=thread)
            got_nodes, got_policy = topo.get_membind(thread=True)
            assert got_policy == policy and (policy == "firsttouch" or got_nodes == {node})
            # a child inherits the calling thread's policy: hwloc-bind reads it there
            if policy != "firsttouch":
                assert tool_binding("--membind", "--nodeset") == f"{Bitmap([node]).mask} ({policy})"
    topo.set_membind(topo.object("numanode", 0), "bind", migrate=True, strict=True)
    assert topo.get_membind() == (topo.object("numanode", 0).nodeset, "bind")
    topo.set_membind([], "default", thread=True)
    assert topo.get_membind(thread=True)[1] in ("default", "firsttouch")


def test_binding_errors(topo, restore_binding):
    for bad in ([], [10**6], "0-", None, [-1], "4294967297"):  # (hwloc would wrap that to CPU 1)
        with pytest.raises(ShmtopoValueError):
            topo.set_cpubind(bad)
    for bad in ({"thread": "yes"}, {"strict": 2}):
        with pytest.raises(ShmtopoValueError):
            topo.set_cpubind([0], **bad)
    with pytest.raises(ShmtopoValueError):
        topo.get_cpubind(thread=None)
    for args in (([0], "scatter"), ([], "bind"), ([10**5], "bind"), ([0], None)):
        with pytest.raises(ShmtopoValueError):
            topo.set_membind(*args)
    assert os.sched_getaffinity(0) == restore_binding


@pytest.mark.serial
def test_no_binding_through_a_foreign_topology(restore_binding):
    # hwloc would "bind" through another machine's topology with hooks that
    # do nothing: shmtopo refuses
    with shmtopo.Topology.load() as here:
        xml = here.xml()
    with shmtopo.Topology.from_xml(xml) as foreign, shmtopo.Topology.from_synthetic("pack:1 core:2 pu:1") as fake:
        for topo in (foreign, fake):
            for call in (lambda: topo.set_cpubind([0]), topo.get_cpubind, topo.get_last_cpu_location,
                         topo.get_membind, lambda: topo.set_membind([0], "bind")):
                with pytest.raises(ShmtopoOSError, match="does not describe this machine"):
                    call()
    with shmtopo.Topology.from_xml(xml, this_system=True) as mine:
        assert mine.get_cpubind() == restore_binding


# -- a whole comm: Comm.bind -----------------------------------------------------------------------
def outcome(call):
    """(result, None) or (None, (exception type, message)) without raising."""
    try:
        return call(), None
    except ShmtopoError as exc:
        return None, (type(exc).__name__, str(exc))


@pytest.mark.parametrize("policy", ["compact", "spread"])
@pytest.mark.parametrize("to", ["core", "pu", "package", "numa", "l3"])
def test_comm_bind(comm, restore_binding, to, policy):
    with shmtopo.Topology.load() as here:
        here.set_cpubind(here.root)  # unbound, even where mpiexec bound ranks (Open MPI up to 2 ranks here)
        count = len([o for o in here.objects(to) if o.cpuset])
        overloads = to in ("core", "pu") and comm.size > count
        expected = None if overloads else here.placement(to, comm.size, policy)
        expected = expected and [(o.logical_index, o.cpuset) for o in expected]
    report, failure = outcome(lambda: comm.bind(to, policy))
    rows = comm.mpi.allgather((report, failure))
    if expected is None:
        # more ranks than cores or PUs: every rank raises, the same way, bound as before
        assert failure is not None and failure[0] == "ShmtopoValueError"
        assert f"{comm.size} ranks but only {count} " in failure[1]
        assert all(r == (None, failure) for r in rows), rows
        with shmtopo.Topology.load() as here:
            assert os.sched_getaffinity(0) == set(here.root.cpuset)  # as before the call
        return
    assert failure is None and all(r == rows[0] for r in rows), rows
    assert [(p.rank, p.pid, p.type) for p in report] == [(r, comm.pid(r), here_type(to)) for r in range(comm.size)]
    assert [(p.logical_index, p.cpuset) for p in report] == expected
    mine = report[comm.rank]
    assert os.sched_getaffinity(0) == set(mine.cpuset)
    with shmtopo.Topology.load() as here:
        assert here.get_cpubind() == mine.cpuset
        assert mine.nodeset == here.object(to, mine.logical_index).nodeset
    # every rank's binding, read from outside by hwloc-bind before anyone restores
    seen = [tool_binding("--pid", str(p.pid)) for p in report] if comm.rank == 0 else None
    comm.mpi.Barrier()
    if comm.rank == 0:
        assert seen == [p.cpuset.mask for p in report]
    assert str(mine).startswith(f"rank {comm.rank} (pid {os.getpid()}): {here_type(to)} L#{mine.logical_index}")


def here_type(to):
    return {"numa": "numanode"}.get(to, to)


def test_comm_bind_more_ranks_than_objects(comm, restore_binding):
    # more ranks than packages share them, as under mpirun --bind-to socket;
    # more ranks than cores is an overload: refused unless asked for
    with shmtopo.Topology.load() as here:
        packages, cores = here.nbobjs("package"), here.nbobjs("core")
    for to, count, overload in (("package", packages, False), ("machine", 1, False), ("core", cores, False),
                                ("core", cores, True)):
        before = os.sched_getaffinity(0)  # a successful bind in this loop changes it
        report, failure = outcome(lambda: comm.bind(to, "spread", overload=overload))
        rows = comm.mpi.allgather(failure)
        if comm.size > count and to == "core" and not overload:
            assert len(set(rows)) == 1 and rows[0][0] == "ShmtopoValueError", rows
            assert f"{comm.size} ranks but only {count} {to} object" in rows[0][1] and "overload" in rows[0][1]
            assert report is None and os.sched_getaffinity(0) == before
        else:
            assert set(rows) == {None} and len(report) == comm.size
            assert [p.logical_index for p in report] == [r % count for r in range(comm.size)], report
    if comm.size > 1:  # ranks that ask differently about overload: all raise
        _, failure = outcome(lambda: comm.bind("core", overload=comm.rank == 0))
        rows = comm.mpi.allgather(failure)
        assert len(set(rows)) == 1 and "ranks disagree" in rows[0][1], rows


def test_comm_bind_bad_arguments_raise_everywhere(comm, restore_binding):
    for args in (("bogus",), ("core", "scatter"), (3,), ("core", None), ("osdev",), ("group",)):
        _, failure = outcome(lambda: comm.bind(*args))
        rows = comm.mpi.allgather(failure)
        assert failure is not None and failure[0] == "ShmtopoValueError" and len(set(rows)) == 1, (args, rows)
    if comm.size > 1:
        # ranks that ask for different bindings: all raise, naming both calls
        _, failure = outcome(lambda: comm.bind("core" if comm.rank else "pu", "compact" if comm.rank else "spread"))
        rows = comm.mpi.allgather(failure)
        assert len(set(rows)) == 1 and "ranks disagree" in rows[0][1], rows
        assert "bind(to pu, spread)" in rows[0][1] and "bind(to core, compact)" in rows[0][1]
    assert os.sched_getaffinity(0) == restore_binding


def test_comm_bind_refused_on_one_rank(comm, restore_binding, monkeypatch):
    # the OS refuses one rank's binding: every rank raises and the ranks that
    # had bound go back to what they had
    if comm.size > 2:
        pytest.skip("needs no more ranks than cores")
    with shmtopo.Topology.load() as here:
        here.set_cpubind(here.root)  # unbound, even where mpiexec bound ranks: bind() must change that
        start = here.get_cpubind()
    victim = comm.size - 1
    if comm.rank == victim:
        real = shmtopo.Topology.set_cpubind
        calls = []

        def refuse_first(self, cpus, **kw):
            calls.append(cpus)
            if len(calls) == 1:
                raise ShmtopoOSError("binding refused (test)", 1)
            return real(self, cpus, **kw)

        monkeypatch.setattr(shmtopo.Topology, "set_cpubind", refuse_first)
    _, failure = outcome(lambda: comm.bind("core"))
    rows = comm.mpi.allgather(failure)
    assert len(set(rows)) == 1 and f"rank {victim}: binding refused (test)" in rows[0][1], rows
    assert os.sched_getaffinity(0) == set(start)


def test_comm_bind_per_node(restore_binding):
    # across (simulated) nodes each node binds its own ranks: one per node here
    with shmtopo.Comm.from_mpi(node_size=1) as comm:
        report = comm.bind("core", "spread")
        assert comm.nnodes == comm.world_size and len(report) == 1
        assert report[0].rank == 0 and report[0].pid == os.getpid()
        with shmtopo.Topology.load() as here:
            assert report[0].cpuset == here.object("core", 0).cpuset == here.get_cpubind()
