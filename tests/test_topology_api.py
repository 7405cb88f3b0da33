"""The topology API against hwloc's own tools, on this machine and on a big
synthetic node (tests/hwloc_tools.py), locally and through share_topology.

Every rank runs every test (serial and under mpiexec -n 2/3/4); checks
across ranks go through an allgather.
"""
import re
import time

import numpy as np
import pytest

import shmtopo
from shmtopo import Bitmap
from shmtopo import topology as T
from shmtopo.errors import FreedError, ShmtopoError, ShmtopoValueError

import hwloc_tools as H
from hwloc_tools import big_node, calc, mask_set, needs_tools  # noqa: F401 (big_node: a fixture)

pytestmark = needs_tools


@pytest.fixture(autouse=True)
def _no_shared_left():
    yield
    assert T._shared is None, "a test left the shared topology open"


#: What two discoveries of the same machine may differ in.
DISCOVERED = ("info ProcessName",)


def load_xml(path, io=False):
    with open(path) as f:
        return shmtopo.Topology.from_xml(f.read(), io=io)


@pytest.fixture(params=[False, True, "all"], ids=["no-io", "io", "all-io"])
def big(request, big_node):
    with load_xml(big_node, request.param) as topo:
        yield topo, big_node, request.param


def shared_from(monkeypatch, comm, xml_path, **kw):
    """share_topology of the node whose topology is that XML: hwloc's load
    (the leader's) reads HWLOC_XMLFILE."""
    monkeypatch.setenv("HWLOC_XMLFILE", xml_path)
    return shmtopo.share_topology(comm, **kw)


# -- objects and their attributes: hwloc-info ----------------------------------------------
@pytest.mark.serial
def test_objects_of_this_machine_match_hwloc_info():
    # every object, every attribute hwloc-info prints (but the process name)
    for io in (False, True, "all"):
        with shmtopo.Topology.load(io=io) as topo:
            ours = H.our_objects(topo)
        assert H.compare_objects(ours, H.tool_objects(None, io), ignore=DISCOVERED) == [], io


@pytest.mark.serial
def test_objects_of_a_big_node_match_hwloc_info(big):
    topo, path, io = big
    ours = H.our_objects(topo)
    assert len(ours) > 800 and ("PU", 511) in ours
    assert H.compare_objects(ours, H.tool_objects(path, io)) == []


def test_shared_big_node_matches_hwloc_info(comm, monkeypatch, big_node):
    # the leader loads the big node (HWLOC_XMLFILE), every rank adopts it:
    # the adopted copy answers like hwloc-info on the file, on every rank
    for io in ("all", True):
        with shared_from(monkeypatch, comm, big_node, io=io) as topo:
            assert topo.source == "shmem" and topo.io == io
            diffs = H.compare_objects(H.our_objects(topo), H.from_rank0(H.tool_objects, big_node, io))
            rows = comm.mpi.allgather((len(diffs), diffs[:5]))
        assert all(r == (0, []) for r in rows), rows


@pytest.mark.parametrize("source", ["xml", "local"])
def test_io_survives_every_share_path(comm, monkeypatch, big_node, source):
    with shared_from(monkeypatch, comm, big_node, io=True, source=source) as topo:
        rows = comm.mpi.allgather((topo.source, topo.io, [d.name for d in topo.osdevs()]))
    names = sorted(b["name"] for b in H.info_blocks(H.from_rank0(
        lambda: H.run("hwloc-info", *H.io_args(True), "os:all", input=big_node))))
    assert all(r[0] == source and r[1] is True and sorted(r[2]) == names for r in rows), rows


@pytest.mark.serial
def test_pci_subsystem_ids_match_lstopo_xml(big_node):
    # hwloc-info leaves out subvendor, subdevice and revision: lstopo's XML has them
    with load_xml(big_node, "all") as topo:
        ours = {o.pci.busid: (o.pci.subvendor_id, o.pci.subdevice_id, o.pci.revision)
                for o in topo.objects("pci") + topo.objects("bridge") if o.pci is not None}
    assert ours == H.tool_pci_types(big_node) and len(ours) == 9


@pytest.mark.serial
def test_levels_match_hwloc_info(big_node):
    with load_xml(big_node, "all") as topo:
        for depth, count, name in H.levels(big_node, "all"):
            kind = "group" if name.startswith("Group") else H.HWLOC_TYPES[name]
            assert topo.nbobjs(kind) == count, name
            assert {o.depth for o in topo.objects(kind)} == {depth}
        assert topo.depth == sum(1 for d, _, _ in H.levels(big_node) if d >= 0)


@pytest.mark.serial
def test_synthetic_matches_hwloc_info():
    with shmtopo.Topology.from_synthetic(H.BIG) as topo:
        assert topo.source == "synthetic" and topo.io is False
        assert H.compare_objects(H.our_objects(topo), H.tool_objects(H.BIG), ignore=DISCOVERED) == []
        with pytest.raises(ShmtopoError):  # not this machine: no binding
            topo.set_cpubind([0])
    for bad in ("pack:0", "bogus:2", "", 3):
        with pytest.raises(ShmtopoValueError):
            shmtopo.Topology.from_synthetic(bad)


@pytest.mark.serial
@pytest.mark.no_mpi
def test_synthetic_size_is_bounded():
    """hwloc would take minutes over these: refused at once, the count said."""
    limit = shmtopo.topology.topology.MAX_SYNTHETIC_PUS
    for big in ("pack:100 pu:1000", "pack:2(memory=1GB) core:4096 pu:4", "core:99999999999999999999"):
        started = time.monotonic()
        with pytest.raises(ShmtopoValueError, match=f"PUs; at most {limit}"):
            shmtopo.Topology.from_synthetic(big)
        assert time.monotonic() - started < 1
    with shmtopo.Topology.from_synthetic("pack:2 [numa] core:1024 pu:4") as topo:  # at the limit
        assert topo.nbobjs("pu") == limit


# -- lookups: hwloc-info -p / -l, --ancestors ------------------------------------------------
LOOKUPS = ["pu:0", "pu:257", "pu:511", "core:131", "numa:6", "l3:17", "package:1", "group:5"]


@pytest.mark.serial
def test_lookup_by_logical_and_os_index(big_node):
    with load_xml(big_node) as topo:
        for loc in LOOKUPS:
            kind, index = loc.split(":")
            index = int(index)
            kind = "numanode" if kind == "numa" else kind
            by_logical = H.info_blocks(H.run("hwloc-info", "-l", loc, input=big_node))[0]
            obj = topo.object(kind, index)
            assert (obj.logical_index, obj.gp_index) == (index, int(by_logical["gp index"]))
            physical = H.info_blocks(H.run("hwloc-info", "-p", loc, input=big_node))
            found = topo.object_by_os_index(kind, index)
            assert (found is None) == (physical == []), loc  # groups, synthetic caches: no os index
            if found is not None:
                assert found.gp_index == int(physical[0]["gp index"]) and found.os_index == index
        assert topo.object("core", 256) is None and topo.object_by_os_index("pu", 512) is None
        assert H.run("hwloc-info", "-s", "-p", "pu:512", input=big_node) == ""  # nothing there either
        # the second thread of core 3 is CPU 259 (logical PU 7)
        assert topo.object_by_os_index("pu", 259) == topo.object("pu", 7)
        for bad in (-1, "3", 2.0, True):
            with pytest.raises(ShmtopoValueError):
                topo.object("pu", bad)
            with pytest.raises(ShmtopoValueError):
                topo.object_by_os_index("pu", bad)


def short(obj):
    """hwloc-info -s's name of a CPU-side object: "Core:5", "Group0:2"."""
    kind = "Group0" if obj.type == "group" else H.SHMTOPO_TYPES[obj.type]
    return f"{kind}:{obj.logical_index}"


#: hwloc-info -s's names of objects that are not I/O objects (those it
#: names by their full type: GPU, PCI, HostBridge, ...)
CPU_SIDE = {"Machine", "Package", "Group0", "NUMANode", "L3Cache", "L2Cache", "L1Cache", "Core", "PU"}
NORMAL = CPU_SIDE - {"NUMANode"}


def cpu_side(names, kinds=CPU_SIDE):
    return [n for n in names if n.split(":")[0] in kinds]


def tool_ancestors(path, loc, io=True):
    lines = H.run("hwloc-info", *H.io_args(io), "-s", "--ancestors", loc, input=path).split()
    return lines[1:]  # the first line is the object itself


def tool_key(name):
    """("Group", 2) for "Group0:2": the key of tool_objects."""
    kind, index = name.split(":")
    return ("Group" if kind.startswith("Group") else kind, int(index))


@pytest.mark.serial
def test_ancestors_match_hwloc_info(big_node):
    locations = LOOKUPS + ["os:3", "pci:4", "bridge:2"]
    with load_xml(big_node, True) as topo:
        for loc in locations:
            kind, index = loc.split(":")
            obj = topo.object({"numa": "numanode", "os": "osdev"}.get(kind, kind), int(index))
            theirs = tool_ancestors(big_node, loc)
            mine = obj.ancestors
            # hwloc-info names I/O objects by their full type (GPU, PCI, HostBridge)
            assert [short(a) for a in mine if a.type not in H.IO_KINDS] == cpu_side(theirs)
            assert [a.type in H.IO_KINDS for a in mine] == [t.split(":")[0] not in CPU_SIDE for t in theirs]
            for kind_name in ("package", "l3", "group", "machine", "core"):
                line = H.run("hwloc-info", *H.io_args(True), "-s", "--ancestor", kind_name, loc, input=big_node)
                parent = obj.ancestor(kind_name)
                if obj.type == kind_name:  # hwloc-info counts the object itself, hwloc's C API does not
                    assert line.strip() == short(obj) and (parent is None or parent.type == kind_name)
                else:
                    assert (short(parent) if parent else "") == line.strip(), (loc, kind_name)
        assert topo.root.ancestors == [] and topo.root.ancestor("package") is None


@pytest.mark.serial
def test_common_ancestor_and_is_inside(big_node):
    # from hwloc-info's ancestor chains and masks, independently of shmtopo
    with load_xml(big_node, True) as topo:
        objects = [topo.object("pu", 0), topo.object("pu", 15), topo.object("pu", 16), topo.object("core", 200),
                   topo.object("numanode", 1), topo.object("numanode", 0), topo.object("l3", 3),
                   topo.object("osdev", 3), topo.object("package", 1), topo.root]
        chains = {}
        for obj in objects:
            loc = {"numanode": "numa", "osdev": "os"}.get(obj.type, obj.type) + f":{obj.logical_index}"
            # memory and I/O objects count from the normal object they hang from
            chains[obj] = cpu_side([short(obj) if obj.type != "osdev" else "-"] + tool_ancestors(big_node, loc),
                                   NORMAL)
        for a in objects:
            for b in objects:
                common = a.common_ancestor(b)
                if a == b:
                    assert common == a
                    continue
                expected = next(c for c in chains[a] if c in chains[b])
                assert short(common) == expected, (a, b)
                inside = b.type not in H.IO_KINDS and a.type not in H.IO_KINDS and a.cpuset <= b.cpuset
                assert a.is_inside(b) is inside, (a, b)
        with shmtopo.Topology.load() as other:
            with pytest.raises(ShmtopoValueError):
                objects[0].common_ancestor(other.root)
            with pytest.raises(ShmtopoValueError):
                objects[0].is_inside("root")


@pytest.mark.serial
def test_non_io_ancestor_matches_hwloc_calc_locality(big_node):
    # hwloc-calc os=NAME prints the cpuset a device is local to
    with load_xml(big_node, True) as topo:
        for dev in topo.objects("osdev"):
            home = dev.non_io_ancestor
            assert home.type not in H.IO_KINDS and dev.cpuset == Bitmap()
            assert mask_set(calc(f"os={dev.name}", input=big_node)) == set(home.cpuset), dev
        core = topo.object("core", 3)
        assert core.non_io_ancestor == core


# -- lookups by set: hwloc-calc ------------------------------------------------------------------
SETS = ["pu:0-40", "pu:3", "core:16-31", "numa:1", "pu:100-300", "package:1", "pu:0 pu:511", "l3:5.core:2-5"]


def tool_set(path, loc):
    return mask_set(calc(*loc.split(), input=path))


@pytest.mark.serial
def test_covering_and_inside_match_hwloc_calc(big_node):
    objs = H.tool_objects(big_node, False)
    normal = [(k, d) for k, d in objs.items() if int(d["depth"]) >= 0]
    with load_xml(big_node) as topo:
        for loc in SETS:
            cpus = tool_set(big_node, loc)
            # covering: the deepest normal object holding them all (hwloc-info's masks)
            holders = [(int(d["depth"]), k) for k, d in normal if cpus <= mask_set(d["cpuset"])]
            depth, (kind, index) = max(holders)
            obj = topo.covering(cpus)
            assert (H.SHMTOPO_TYPES[obj.type], obj.logical_index) == (kind, index), loc
            # inside with a type: hwloc-calc --intersect, kept when wholly inside
            for kind_name in ("core", "l3", "numanode", "pu"):
                hit = calc("--intersect", "numa" if kind_name == "numanode" else kind_name, *loc.split(),
                           input=big_node)
                expected = [int(i) for i in hit.split(",") if i]
                expected = [i for i in expected
                            if mask_set(objs[(H.SHMTOPO_TYPES[kind_name], i)]["cpuset"]) <= cpus]
                assert [o.logical_index for o in topo.inside(cpus, kind_name)] == expected, (loc, kind_name)
            # inside without a type: hwloc-calc --largest
            largest = calc("--largest", *loc.split(), input=big_node).split()
            assert [short(o) for o in topo.inside(cpus)] == largest, loc
        assert topo.covering([]) is None and topo.covering([512]) is None
        assert topo.inside([]) == [] and topo.inside([10**6], "core") == []
        with pytest.raises(ShmtopoValueError):
            topo.inside([0], "osdev")
        # an object stands for its cpuset
        l3 = topo.object("l3", 2)
        assert topo.covering(l3) == l3 and topo.inside(l3) == [l3]


@pytest.mark.serial
def test_set_conversions_match_hwloc_calc(big_node):
    with load_xml(big_node) as topo:
        for loc in SETS:
            cpus = tool_set(big_node, loc)
            nodes = mask_set(calc("--nodeset-output", *loc.split(), input=big_node))
            assert topo.cpuset_to_nodeset(cpus) == nodes, loc
            back = mask_set(calc("--nodeset-input", Bitmap(nodes).mask, input=big_node))
            assert topo.nodeset_to_cpuset(nodes) == back, loc
        assert topo.cpuset_to_nodeset([]) == Bitmap() and topo.nodeset_to_cpuset(topo.object("numanode", 2)) == \
            topo.object("numanode", 2).cpuset


@pytest.mark.serial
def test_numa_page_types_match_lstopo_xml(big_node):
    for path in (big_node, None):
        xml = H.run("lstopo-no-graphics", "--of", "xml", "-", input=path)
        theirs = re.findall(r'<object type="NUMANode"[^>]*>((?:\s*<page_type [^>]*/>)*)', xml)
        theirs = [[(int(a), int(b)) for a, b in re.findall(r'size="(\d+)" count="(\d+)"', block)] for block in theirs]
        with (load_xml(big_node) if path else shmtopo.Topology.load()) as topo:
            assert [n.page_types for n in topo.objects("numanode")] == theirs
            assert topo.object("package", 0).page_types == []


@pytest.mark.serial
def test_info_lookup(big_node):
    with load_xml(big_node) as topo:
        package = topo.object("package", 1)
        assert package.info("CPUModel") == "Fake CPU 9000 @ 2.0GHz" and package.info("Nope") is None
        assert topo.root.info("Backend") == "Synthetic"
        assert topo.object("numanode", 7).subtype == "HBM" and topo.object("numanode", 6).subtype is None


@pytest.mark.serial
def test_sets_are_bitmaps(big_node):
    with load_xml(big_node) as topo:
        core = topo.object("core", 1)
        assert isinstance(core.cpuset, Bitmap) and str(core.cpuset) == "1,257"
        assert core.cpuset.mask == calc("core:1", input=big_node)
        assert isinstance(core.nodeset, Bitmap) and core.nodeset == {0}


# -- distances, memory attributes, CPU kinds: lstopo and hwloc-calc -----------------------------------
def our_distances(topo):
    out = []
    for d in topo.distances():
        order = sorted(range(len(d.objects)), key=lambda i: d.objects[i].logical_index)
        kind = sum(bit for bit, name in T.DISTANCE_KINDS.items() if name in d.kind)
        out.append({"name": d.name, "kind": kind, "n": len(d.objects), "type": H.SHMTOPO_TYPES[d.objects[0].type],
                    "index": [d.objects[i].logical_index for i in order],
                    "values": [[int(d.values[i, j]) for j in order] for i in order]})
    return out


def our_memattrs(topo):
    out = {}
    for a in topo.memory_attributes():
        flags = sum(bit for bit, name in T.MEMATTR_FLAGS.items() if name in a.flags)
        values = [((H.SHMTOPO_TYPES[v.target.type], v.target.logical_index),
                   None if v.initiator is None else v.initiator.mask, v.value) for v in a.values]
        out[a.id] = {"name": a.name, "flags": flags, "values": sorted(values, key=repr)}
    return out


def tool_memattrs(path):
    attrs = H.tool_memattrs(path)
    for a in attrs.values():
        a["values"] = sorted(a["values"], key=repr)
    return attrs


def our_cpukinds(topo):
    return [{"efficiency": -1 if k.efficiency is None else k.efficiency, "cpuset": k.cpuset.mask, "infos": k.infos}
            for k in topo.cpu_kinds()]


def check_attributes(topo, path):
    assert our_distances(topo) == H.tool_distances(path)
    assert our_memattrs(topo) == tool_memattrs(path)
    assert our_cpukinds(topo) == H.tool_cpukinds(path)


@pytest.mark.serial
def test_attributes_of_this_machine_match_lstopo(tmp_path):
    path = str(tmp_path / "here.xml")
    with open(path, "w") as f:
        f.write(H.run("lstopo-no-graphics", "--of", "xml", "-"))
    with load_xml(path) as topo:
        check_attributes(topo, path)
    with shmtopo.Topology.load() as topo:
        check_attributes(topo, None)


@pytest.mark.serial
def test_attributes_of_a_big_node_match_lstopo(big):
    topo, path, _ = big
    check_attributes(topo, path)
    d = {x.name: x for x in topo.distances()}
    assert d["NUMALatency"].kind == {"from_os", "latency"} and d["PackageBandwidth"].kind == {"from_user", "bandwidth"}
    lat = d["NUMALatency"]
    assert lat.value(topo.object("numanode", 0), topo.object("numanode", 5)) == 32
    assert isinstance(lat.values, np.ndarray) and lat.values.dtype == np.uint64 and lat.values.shape == (8, 8)
    with pytest.raises(ShmtopoValueError):
        lat.value(topo.object("numanode", 0), topo.root)


def test_shared_attributes_match_lstopo(comm, monkeypatch, big_node):
    # distances, memory attributes and CPU kinds read from the adopted copy
    # (memory attributes there used to crash hwloc: see topo_shmem.c)
    with shared_from(monkeypatch, comm, big_node) as topo:
        assert topo.source == "shmem"
        rows = comm.mpi.allgather((our_distances(topo), our_memattrs(topo), our_cpukinds(topo)))
    expected = H.from_rank0(lambda: (H.tool_distances(big_node), tool_memattrs(big_node), H.tool_cpukinds(big_node)))
    assert all(r == expected for r in rows)


MEMATTR_PLACES = ("pu:0-3", "pu:300", "package:1", "numa:5", "core:0 core:255")
MEMATTR_ATTRS = ("Bandwidth", "Latency", "Capacity", "Locality")
LOCAL_MEMORY_FLAGS = (("0", {}), ("1", {"larger": True}), ("2", {"smaller": True}),
                      ("3", {"larger": True, "smaller": True}), ("4", {"all": True}))


def tool_memory_answers(path):
    """What hwloc-calc answers for each place: its cpus, the best target of
    each attribute, and the local memory under each flag."""
    return {loc: (tool_set(path, loc),
                  {attr: calc("--local-memory-flags", "3", "--best-memattr", attr, *loc.split(), input=path)
                   for attr in MEMATTR_ATTRS},
                  {flags: calc("--local-memory-flags", flags, "--local-memory", *loc.split(), input=path)
                   for flags, _ in LOCAL_MEMORY_FLAGS})
            for loc in MEMATTR_PLACES}


def test_memattr_queries_match_hwloc_calc(comm, monkeypatch, big_node):
    answers = H.from_rank0(tool_memory_answers, big_node)
    with load_xml(big_node) as local, shared_from(monkeypatch, comm, big_node) as shared:
        for topo in (local, shared):
            for loc in MEMATTR_PLACES:
                cpus, best_of, local_memory = answers[loc]
                for attr in MEMATTR_ATTRS:
                    best = topo.best_target(attr, cpus)
                    # hwloc-calc --best-memattr picks among the local nodes
                    local_best = best_of[attr]
                    if attr in ("Bandwidth", "Latency") and "," not in local_best:
                        candidates = topo.local_numa_nodes(cpus, larger=True, smaller=True)
                        values = {n.logical_index: topo.memattr_value(attr, n, cpus) for n in candidates}
                        values = {k: v for k, v in values.items() if v is not None}
                        if values:
                            pick = (max if attr == "Bandwidth" else min)(values, key=values.get)
                            assert str(pick) == local_best, (loc, attr)
                    if best is not None:
                        node, value = best
                        assert topo.memattr_value(attr, node, cpus) == value
                for flags, kw in LOCAL_MEMORY_FLAGS:
                    expected = local_memory[flags]
                    assert ",".join(str(n.logical_index) for n in topo.local_numa_nodes(cpus, **kw)) == expected
            n5 = topo.object("numanode", 5)
            assert topo.memattr_value("Bandwidth", n5, topo.object("package", 1)) == 20500
            assert topo.memattr_value("Latency", n5, topo.object("package", 0)) == 145
            assert topo.memattr_value("Endurance", n5) is None
            assert topo.memattr_value("Endurance", topo.object("numanode", 6)) == 1006
            assert topo.memattr_value("Capacity", n5) == n5.local_memory
            assert topo.best_target("Bandwidth", topo.object("package", 0)) == (topo.object("numanode", 3), 20300)
            assert topo.best_target("Bandwidth", [0, 128]) is None  # no initiator spans both packages
            for bad in ("Speed", 99, None):
                with pytest.raises(ShmtopoValueError):
                    topo.memattr_value(bad, n5)
            with pytest.raises(ShmtopoValueError):
                topo.local_numa_nodes([])


@pytest.mark.serial
def test_cpu_kind_of(big_node):
    with load_xml(big_node) as topo:
        assert topo.cpu_kind_of([0]) == 0 and topo.cpu_kind_of(topo.object("pu", 511)) == 1
        assert topo.cpu_kind_of(topo.object("package", 1)) == 1
        with pytest.raises(ShmtopoValueError):
            topo.cpu_kind_of(topo.root)  # both kinds
        assert topo.cpu_kind_of([4000]) is None
    with shmtopo.Topology.from_synthetic("pack:1 core:2 pu:1") as plain:
        assert plain.cpu_kinds() == [] and plain.cpu_kind_of([0]) is None


# -- I/O devices ---------------------------------------------------------------------------------
@pytest.mark.serial
def test_io_filters_match_the_tools(big_node):
    for io in (False, True, "all"):
        with load_xml(big_node, io) as topo:
            assert topo.io == io
            for kind in H.IO_KINDS + ("misc",):
                expected = sum(c for _, c, n in H.levels(big_node, io) if H.HWLOC_TYPES.get(n) == kind)
                assert topo.nbobjs(kind) == expected, (io, kind)
    with shmtopo.Topology.load(io=True) as here:
        assert here.io is True
        assert len(here.osdevs()) == sum(c for _, c, n in H.levels(None, True) if n == "OSDev")
    with shmtopo.Topology.load() as plain:
        assert plain.io is False and plain.nbobjs("pci") == 0
        with pytest.raises(ShmtopoValueError, match="io=True"):
            plain.osdevs()
    for bad in ("some", 3, 1.0, "ALL"):
        with pytest.raises(ShmtopoValueError):
            shmtopo.Topology.load(io=bad)


def tool_covering(path, cpus):
    """The deepest normal object holding cpus, from hwloc-info's masks."""
    objs = H.tool_objects(path, True)
    depth, (kind, index) = max((int(d["depth"]), k) for k, d in objs.items()
                               if int(d["depth"]) >= 0 and cpus <= mask_set(d["cpuset"]))
    return f"{'Group0' if kind == 'Group' else kind}:{index}"


def expected_nearest(path, cpus, devices):
    """The order nearest_osdevs promises, from hwloc's tools alone: the
    deepest common ancestor of the CPUs and the device (hwloc-info
    --ancestors), then devices attached where the CPUs are, then the
    smallest locality (hwloc-calc os=NAME), then the device's index."""
    objs = H.tool_objects(path, True)
    here = tool_covering(path, cpus)
    mine = [here] + tool_ancestors(path, here)

    def key(dev):
        home = mask_set(calc(f"os={dev.name}", input=path))
        theirs = cpu_side(tool_ancestors(path, f"os:{dev.logical_index}"), NORMAL)
        common = next(c for c in mine if c in theirs)
        return (-int(objs[tool_key(common)]["depth"]), not (home & cpus), len(home), dev.logical_index)

    return [d.name for d in sorted(devices, key=key)]


@pytest.mark.serial
def test_nearest_osdevs_match_the_tools(big_node):
    with load_xml(big_node, True) as topo:
        for kind in ("network", "openfabrics", "coproc", "gpu", None):
            devices = topo.osdevs(kind)
            assert devices and all(kind is None or d.osdev_type == kind for d in devices)
            for loc in ("pu:0", "core:70", "numa:6", "package:1", "pu:3 pu:400", "l3:9"):
                cpus = tool_set(big_node, loc)
                got = [d.name for d in topo.nearest_osdevs(cpus, kind)]
                assert got == expected_nearest(big_node, cpus, devices), (kind, loc)
        # a rank in package 1 gets package 1's NIC, one in NUMA domain 2 the GPU there
        assert topo.nearest_osdevs(topo.object("core", 200), "network")[0].name == "ib1"
        assert topo.nearest_osdevs(topo.object("numanode", 2), "coproc")[0].name == "cuda1"
        with pytest.raises(ShmtopoValueError):
            topo.nearest_osdevs([4000])
        with pytest.raises(ShmtopoValueError):
            topo.osdevs("printer")


def test_share_with_io_follows_the_held_topology(comm):
    # one shared topology per process: a call that needs more I/O objects
    # than the held one has raises on every rank; one that needs fewer gets it
    with shmtopo.share_topology(comm) as plain:
        outcome = None
        try:
            shmtopo.share_topology(comm, io=True)
        except ShmtopoValueError as exc:
            outcome = str(exc)
        assert len(set(comm.mpi.allgather(outcome))) == 1 and "io=True" in outcome
        assert not plain.closed
    with shmtopo.share_topology(comm, io="all") as full:
        with shmtopo.share_topology(comm, io=True) as again, shmtopo.share_topology(comm) as third:
            assert again is full and third is full and full.io == "all"
    outcome = None
    try:
        shmtopo.share_topology(comm, io="sometimes")
    except ShmtopoValueError as exc:
        outcome = type(exc).__name__
    assert set(comm.mpi.allgather(outcome)) == {"ShmtopoValueError"}


def test_share_io_must_agree(comm):
    if comm.size == 1:
        pytest.skip("needs two ranks")
    outcome = None
    try:
        shmtopo.share_topology(comm, io=comm.rank == 0)
    except ShmtopoValueError as exc:
        outcome = str(exc)
    rows = comm.mpi.allgather(outcome)
    assert len(set(rows)) == 1 and "ranks disagree" in rows[0] and "io important" in rows[0], rows


# -- placements: hwloc-distrib ---------------------------------------------------------------------
SHAPES = ["pack:2 core:4 pu:2", "pack:2 numa:2 l3:2 core:4 pu:1", "pack:4 l3:2 core:3 pu:2", H.BIG]


@pytest.mark.serial
@pytest.mark.parametrize("shape", SHAPES, ids=["2x4x2", "2x2x2x4", "4x2x3x2", "big"])
def test_spread_placement_matches_hwloc_distrib(shape):
    with shmtopo.Topology.from_synthetic(shape) as topo:
        for to in ("core", "pu", "l3", "package"):
            count = topo.nbobjs(to)
            if not count:
                continue
            for n in sorted(n for n in {1, 2, 3, count // 2 + 1, count - 1, count} if 1 <= n <= count):
                placed = topo.placement(to, n, "spread")
                lines = H.run("hwloc-distrib", "--single", "--to", to, str(n), input=shape).split()
                assert len(lines) == n
                for obj, mask in zip(placed, lines):
                    assert obj.type == to and mask_set(mask) <= obj.cpuset, (to, n, obj, mask)
                assert len(set(placed)) == n
                compact = topo.placement(to, n, "compact")
                assert [o.logical_index for o in compact] == list(range(n))
            if to in ("core", "pu"):  # sharing one is an overload, asked for
                with pytest.raises(ShmtopoValueError, match=f"{count + 1} ranks but only {count} {to}"):
                    topo.placement(to, count + 1, "spread")
            # more ranks than objects: compact in blocks, spread round-robin (mpirun --bind-to's way)
            n, alone = 2 * count + 1, [o.logical_index for o in topo.placement(to, count, "spread")]
            assert [o.logical_index for o in topo.placement(to, n, "spread", overload=True)] == \
                [alone[r % count] for r in range(n)]
            assert [o.logical_index for o in topo.placement(to, n, "compact", overload=True)] == \
                [r * count // n for r in range(n)]


@pytest.mark.serial
def test_placement_numa_and_errors(big_node):
    with load_xml(big_node) as topo:
        # two ranks on two packages: one NUMA domain in each
        assert [o.logical_index for o in topo.placement("numa", 2, "spread")] == [0, 4]
        assert [o.logical_index for o in topo.placement("numa", 4, "spread")] == [0, 2, 4, 6]
        assert [o.logical_index for o in topo.placement("numa", 3, "compact")] == [0, 1, 2]
        assert topo.placement("core", 0) == []
        with pytest.raises(ShmtopoValueError, match="overload must be True or False"):
            topo.placement("core", 2, overload=1)
        for args in (("core", -1), ("core", 2, "scatter"), ("bogus", 2), ("pci", 1), ("core", True)):
            with pytest.raises(ShmtopoValueError):
                topo.placement(*args)
    with shmtopo.Topology.from_synthetic("pack:2 group:2 group:2 core:2 pu:1") as nested:
        with pytest.raises(ShmtopoValueError, match="several depths"):
            nested.placement("group", 2)


# -- read-only, lifetime ---------------------------------------------------------------------------------
@pytest.mark.serial
def test_new_accessors_after_close(big_node):
    topo = load_xml(big_node, True)
    core, dev = topo.object("core", 2), topo.osdevs()[0]
    topo.close()
    calls = [lambda: topo.object("core", 0), lambda: topo.object_by_os_index("pu", 0), lambda: topo.covering([0]),
             lambda: topo.inside([0]), lambda: topo.cpuset_to_nodeset([0]), lambda: topo.distances(),
             lambda: topo.memory_attributes(), lambda: topo.cpu_kinds(), lambda: topo.io,
             lambda: topo.osdevs(), lambda: topo.placement("core", 1), lambda: topo.get_membind(),
             lambda: core.infos, lambda: core.cache, lambda: core.ancestors, lambda: core.ancestor("package"),
             lambda: dev.pci, lambda: dev.osdev_type, lambda: dev.non_io_ancestor, lambda: core.name]
    for call in calls:
        with pytest.raises(FreedError):
            call()


@pytest.mark.serial
def test_no_modifying_api():
    with shmtopo.Topology.load() as topo:
        forbidden = ("insert_misc", "restrict", "write", "add_distances", "set_memattr_value", "register_memattr",
                     "register_cpukind", "add_info", "set_info", "dup")
        assert not [name for name in forbidden if hasattr(topo, name) or hasattr(topo.root, name)]
        with pytest.raises(AttributeError):
            topo.io = True
        with pytest.raises(AttributeError):
            topo.root.name = "x"
