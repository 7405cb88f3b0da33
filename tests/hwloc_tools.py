"""hwloc's own tools as the oracle for the topology API.

Every accessor of shmtopo.Topology is checked against what hwloc-info,
hwloc-calc, lstopo, hwloc-bind and hwloc-distrib (from the hwloc package,
/usr/bin) print for the same topology: this machine, or an XML file. This
module runs the tools and parses their output, and builds the test
topologies: big synthetic nodes shaped like real ones, annotated with the
tools (hwloc-annotate: infos, a subtype, a Misc object, distances, memory
attributes, CPU kinds) and given I/O devices (a NIC per package, a GPU per
pair of NUMA domains, a disk).

The dumps below put both sides in the same form: one dict per object with
hwloc-info's keys and value formats, so that a comparison names the object
and the field that differ.
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile

import pytest

#: A two-socket node with four NUMA domains per socket (SNC4/NPS4-like),
#: an L3 per 8 cores and two hardware threads per core, numbered as Linux
#: does on such machines: the second thread of core c is CPU c + 256.
BIG = "pack:2 numa:4 l3:4 core:8 pu:2(indexes=%s)" % ",".join(f"{c + 256 * t}" for c in range(256) for t in (0, 1))

TOOLS = ("hwloc-info", "hwloc-calc", "lstopo-no-graphics", "hwloc-bind", "hwloc-distrib", "hwloc-annotate")

# hwloc's type strings (what hwloc-info prints as "type") and shmtopo's names
HWLOC_TYPES = {
    "Machine": "machine", "Package": "package", "Die": "die", "NUMANode": "numanode", "Group": "group",
    "L1Cache": "l1", "L2Cache": "l2", "L3Cache": "l3", "L4Cache": "l4", "L5Cache": "l5",
    "L1iCache": "l1i", "L2iCache": "l2i", "L3iCache": "l3i", "Core": "core", "PU": "pu",
    "MemCache": "memcache", "Bridge": "bridge", "PCIDev": "pci", "OSDev": "osdev", "Misc": "misc",
}
SHMTOPO_TYPES = {v: k for k, v in HWLOC_TYPES.items()}
OSDEV_NAMES = {"block": "Block", "gpu": "GPU", "network": "Network", "openfabrics": "OpenFabrics",
               "dma": "DMA", "coproc": "Co-Processor"}
IO_KINDS = ("bridge", "pci", "osdev")
MEMORY_KINDS = ("numanode", "memcache")


def available() -> bool:
    return all(shutil.which(t) for t in TOOLS)


needs_tools = pytest.mark.skipif(not available(), reason="hwloc's tools (Debian package hwloc) are not installed")


def _env() -> dict:
    """The tools' environment: never the variables that make hwloc load
    something else than what the tool is told to."""
    return {k: v for k, v in os.environ.items()
            if k not in ("HWLOC_XMLFILE", "HWLOC_SYNTHETIC", "HWLOC_THISSYSTEM", "HWLOC_FSROOT")}


def run(*args: str, input: str | None = None) -> str:
    """stdout of an hwloc tool; -i input goes right after the tool's name.
    The same question about the same file is asked once (the tests ask
    hwloc-calc the same few things in loops)."""
    if input and os.path.isfile(input):  # a file: its answers cannot change while it does not
        st = os.stat(input)
        return _run_on_file(args, input, (st.st_mtime_ns, st.st_size, st.st_ino), tuple(_env().items()))
    return _run(args, input)


@functools.lru_cache(maxsize=None)
def _run_on_file(args: tuple[str, ...], input: str, stamp: tuple, env: tuple) -> str:
    return _run(args, input)


def _run(args: tuple[str, ...], input: str | None) -> str:
    cmd = [args[0]] + (["-i", input] if input else []) + list(args[1:])
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=120)
    if proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr}")
    return proc.stdout


def io_args(io) -> list[str]:
    """The tools' options for what shmtopo's io= keeps: hwloc's library
    defaults (no instruction caches, no Misc objects, no I/O) unless "all"
    (every I/O and Misc object); the tools keep more by default."""
    filters = ["--no-icaches"] + ([] if io == "all" else ["--filter", "misc:none"])
    return filters + (["--whole-io"] if io == "all" else ([] if io else ["--no-io"]))


# -- building test topologies ---------------------------------------------------------
def _nic(p: int, gp) -> str:
    bus = 0x10 + p * 0x40
    return f'''<object type="Bridge" gp_index="{gp()}" bridge_type="0-1" depth="0" bridge_pci="0000:[{bus:02x}-{bus + 1:02x}]">
 <object type="Bridge" gp_index="{gp()}" bridge_type="1-1" depth="1" bridge_pci="0000:[{bus + 1:02x}-{bus + 1:02x}]" pci_busid="0000:{bus:02x}:01.0" pci_type="0604 [8086:2030] [8086:0000] 04" pci_link_speed="7.876923">
  <object type="PCIDev" gp_index="{gp()}" pci_busid="0000:{bus + 1:02x}:00.0" pci_type="0207 [15b3:101b] [15b3:0007] 00" pci_link_speed="31.507692">
   <object type="OSDev" gp_index="{gp()}" name="ib{p}" osdev_type="2"><info name="Address" value="80:00:00:0{p}"/><info name="Port" value="1"/></object>
   <object type="OSDev" gp_index="{gp()}" name="mlx5_{p}" osdev_type="3" subtype="OpenFabrics"><info name="NodeGUID" value="0000:0000:0000:000{p}"/></object>
  </object>
 </object>
</object>'''


def _gpu(n: int, gp) -> str:
    bus = 0x80 + n * 4
    return f'''<object type="Bridge" gp_index="{gp()}" bridge_type="0-1" depth="0" bridge_pci="0000:[{bus:02x}-{bus:02x}]">
 <object type="PCIDev" gp_index="{gp()}" pci_busid="0000:{bus:02x}:00.0" pci_type="0302 [10de:2330] [10de:16c1] a1" pci_link_speed="31.507692">
  <object type="OSDev" gp_index="{gp()}" name="cuda{n}" osdev_type="5" subtype="CUDA"><info name="Backend" value="CUDA"/><info name="GPUModel" value="Fake H100"/></object>
  <object type="OSDev" gp_index="{gp()}" name="nvml{n}" osdev_type="1"><info name="Backend" value="NVML"/></object>
 </object>
</object>'''


def _disk(gp) -> str:
    return f'''<object type="Bridge" gp_index="{gp()}" bridge_type="0-1" depth="0" bridge_pci="0000:[00-00]">
 <object type="PCIDev" gp_index="{gp()}" pci_busid="0000:00:17.0" pci_type="0106 [8086:a182] [15d9:0981] 10" pci_link_speed="0.000000">
  <object type="OSDev" gp_index="{gp()}" name="sda" osdev_type="0"><info name="Size" value="1000000"/></object>
 </object>
</object>'''


def with_io(xml: str) -> str:
    """A synthetic topology's XML (from lstopo) with I/O devices added: a
    NIC (an InfiniBand HCA behind a PCI bridge) under each package, a GPU
    under every other NUMA group, a disk under the machine. lstopo's XML
    of a synthetic topology has no info lines on packages and groups, so
    devices go right after their opening tags (hwloc-annotate re-exports
    the file in hwloc's order afterwards)."""
    counter = [10**6]

    def gp():
        counter[0] += 1
        return counter[0]

    out, packages, groups, disk_done = [], 0, 0, False
    for line in xml.split("\n"):
        if '<object type="Package"' in line and not disk_done:
            out.append(_disk(gp))  # the machine's first child object, after its infos
            disk_done = True
        out.append(line)
        if '<object type="Package"' in line:
            out.append(_nic(packages, gp))
            packages += 1
        elif '<object type="Group"' in line:
            if groups % 2 == 0:
                out.append(_gpu(groups // 2, gp))
            groups += 1
    return "\n".join(out)


def annotate(path: str, *args: str) -> None:
    run("hwloc-annotate", path, path, *args)


def build_big_node(directory: str, description: str = BIG) -> str:
    """XML of a big synthetic node, annotated with hwloc's tools. Returns its path."""
    path = os.path.join(directory, "big.xml")
    plain = run("lstopo-no-graphics", "--of", "xml", "-", input=description)
    with open(path, "w") as f:
        f.write(with_io(plain))
    pus = int(run("hwloc-calc", "--number-of", "pu", "all", input=path).strip())
    numas = int(run("hwloc-calc", "--number-of", "numa", "all", input=path).strip())
    packages = int(run("hwloc-calc", "--number-of", "package", "all", input=path).strip())
    annotate(path, "--", "package:all", "--", "info", "CPUModel", "Fake CPU 9000 @ 2.0GHz")
    annotate(path, "--", "package:all", "--", "info", "CPUVendor", "FakeVendor")
    annotate(path, "--", f"numa:{numas - 1}", "--", "subtype", "HBM")
    annotate(path, "--", "root", "--", "misc", "BMC")
    # NUMA latencies as a firmware reports them: 10 local, 12-14 in the
    # package, 32 across
    rows = []
    for i in range(numas):
        for j in range(numas):
            same = i * packages // numas == j * packages // numas
            rows.append(10 if i == j else (12 + (i + j) % 3 if same else 32))
    dist = os.path.join(directory, "numa-latency.txt")
    with open(dist, "w") as f:
        f.write("name=NUMALatency\n5\n%d\n" % numas)
        f.write("".join(f"numa:{i}\n" for i in range(numas)))
        f.write("".join(f"{v}\n" for v in rows))
    annotate(path, "--", "none", "--", "distances", dist)
    bw = os.path.join(directory, "package-bandwidth.txt")
    with open(bw, "w") as f:
        f.write("name=PackageBandwidth\n10\n%d\n" % packages)
        f.write("".join(f"package:{i}\n" for i in range(packages)))
        f.write("".join(f"{1000 if i == j else 200 + i + j}\n" for i in range(packages) for j in range(packages)))
    annotate(path, "--", "none", "--", "distances", bw)
    # bandwidth and latency of each NUMA node from its package's CPUs and
    # from the other package's; a user attribute without initiators
    for n in range(numas):
        own = n * packages // numas
        for p in range(packages):
            cpus = run("hwloc-calc", f"package:{p}", input=path).strip()
            annotate(path, "--", f"numa:{n}", "--", "memattr", "Bandwidth", cpus,
                     str(20000 + 100 * n if p == own else 5000 + n))
            annotate(path, "--", f"numa:{n}", "--", "memattr", "Latency", cpus,
                     str(80 + n if p == own else 140 + n))
    annotate(path, "--", "none", "--", "memattr", "Endurance", "1")
    for n in range(0, numas, 3):
        annotate(path, "--", f"numa:{n}", "--", "memattr", "Endurance", "root", str(1000 + n))
    # two kinds of cores: the first half efficient, the second fast
    half = run("hwloc-calc", f"pu:0-{pus // 2 - 1}", input=path).strip()
    rest = run("hwloc-calc", f"pu:{pus // 2}-{pus - 1}", input=path).strip()
    annotate(path, "root", "cpukind", half, "0", "0", "CoreType", "Efficient")
    annotate(path, "root", "cpukind", rest, "1", "0", "CoreType", "Performance")
    return path


# -- hwloc-info ----------------------------------------------------------------------------
def info_blocks(text: str) -> list[dict]:
    """hwloc-info's per-object blocks: a header line, then " key = value"."""
    blocks, cur = [], None
    for line in text.splitlines():
        if not line.strip():
            continue
        if not line.startswith(" "):
            cur = {"_header": line.strip()}
            blocks.append(cur)
        elif cur is not None and " = " in line:
            key, value = line.strip().split(" = ", 1)
            # hwloc-info 2.10+ prints "attr PCI secondary bus bus" and
            # "attr cache line ways" for what 2.9 named as shmtopo does
            key = key.replace(" bus bus", " bus").replace("cache line ways", "cache ways")
            cur.setdefault(key, value)  # the first of repeated infos, as hwloc's lookups
    return blocks


def levels(input: str | None = None, io=False) -> list[tuple[int, int, str]]:
    """(depth, count, hwloc type) of every level, from hwloc-info's summary."""
    out = []
    for line in run("hwloc-info", *io_args(io), input=input).splitlines():
        m = re.match(r"\s*(?:Special )?depth (-?\d+):\s+(\d+) (\S+) \(type #(\d+)\)", line)
        if m:
            out.append((int(m.group(1)), int(m.group(2)), m.group(3)))
    return out


IGNORED_KEYS = {"_header", "full type", "complete cpuset", "allowed cpuset", "complete nodeset",
                "allowed nodeset"}


@functools.lru_cache(maxsize=None)
def tool_objects(input: str | None = None, io=False) -> dict[tuple[str, int], dict]:
    """Every object hwloc-info knows, keyed by (hwloc type, logical index)."""
    locations = []
    for depth, _count, name in levels(input, io):
        # a level is named by its type, Groups by their depth's name
        locations.append(f"{name}:all")
    text = run("hwloc-info", *io_args(io), *locations, input=input)
    objs = {}
    for block in info_blocks(text):
        key = (block["type"], int(block["logical index"]))
        objs[key] = {k: v for k, v in block.items() if k not in IGNORED_KEYS}
        for field in ("cpuset", "nodeset"):
            # hwloc-info prints sets into 128 bytes: ask hwloc-calc for long ones
            if len(objs[key].get(field, "")) >= 127:
                header = block["_header"].split()
                objs[key][field] = run("hwloc-calc", *(["--nodeset-output"] if field == "nodeset" else []),
                                       f"{header[0]}:{key[1]}", input=input).strip()
    return objs


# -- the same from shmtopo ---------------------------------------------------------------------
def _kind_of(obj) -> str:
    if obj.type in MEMORY_KINDS:
        return "memory"
    if obj.type in IO_KINDS:
        return "io"
    if obj.type == "misc":
        return "misc"
    return "normal"


def our_object(topo, obj, kinds=None) -> dict:
    """One object in hwloc-info's form."""
    d = {"type": SHMTOPO_TYPES[obj.type], "logical index": str(obj.logical_index)}
    if obj.subtype is not None:
        d["subtype"] = obj.subtype
    if obj.os_index is not None:
        d["os index"] = str(obj.os_index)
    d["gp index"] = str(obj.gp_index)
    if obj.name is not None:
        d["name"] = obj.name
    d["depth"] = str(obj.depth)
    d["sibling rank"] = str(obj.sibling_rank)
    counts = {"normal": 0, "memory": 0, "io": 0, "misc": 0}
    for child in obj.children:
        counts[_kind_of(child)] += 1
    d["children"] = str(counts["normal"])
    d["memory children"] = str(counts["memory"])
    d["i/o children"] = str(counts["io"])
    d["misc children"] = str(counts["misc"])
    if obj.local_memory:
        d["local memory"] = str(obj.local_memory)
    if obj.total_memory:
        d["total memory"] = str(obj.total_memory)
    has_sets = obj.type not in IO_KINDS and obj.type != "misc"
    if has_sets:
        d["cpuset"] = obj.cpuset_str
        d["nodeset"] = obj.nodeset.mask
    cache = obj.cache
    if cache is not None:
        d["attr cache depth"] = str(cache.depth)
        d["attr cache type"] = cache.kind.capitalize()
        d["attr cache size"] = str(cache.size)
        if cache.linesize:
            d["attr cache line size"] = str(cache.linesize)
        if cache.associativity:
            d["attr cache ways"] = str(cache.associativity)
    if obj.group_depth is not None:
        d["attr group depth"] = str(obj.group_depth)
    pci, bridge = obj.pci, obj.bridge
    if pci is not None:
        d["attr PCI bus id"] = pci.busid
        d["attr PCI class"] = f"{pci.class_id:04x}"
        d["attr PCI id"] = f"{pci.vendor_id:04x}:{pci.device_id:04x}"
        if pci.linkspeed:
            d["attr PCI linkspeed"] = f"{pci.linkspeed:f} GB/s"
    if bridge is not None:
        d["attr bridge upstream type"] = "Host" if bridge.upstream == "host" else "PCI"
        d["attr bridge downstream type"] = "PCI"
        d["attr PCI secondary bus"] = f"{bridge.secondary_bus:02x}"
        d["attr PCI subordinate bus"] = f"{bridge.subordinate_bus:02x}"
    if obj.osdev_type is not None:
        d["attr osdev type"] = OSDEV_NAMES[obj.osdev_type]
    d["symmetric subtree"] = "1" if obj.symmetric_subtree else "0"
    for name, value in obj.infos.items():
        d.setdefault(f"info {name}", value)
    if obj.type == "numanode":
        for attr in topo.memory_attributes():
            for v in attr.values:
                if v.target != obj:
                    continue
                if v.initiator is None:
                    d[f"memory attribute {attr.name}"] = str(v.value)
                else:
                    d[f"memory attribute {attr.name} from initiator {v.initiator.mask}"] = str(v.value)
    if has_sets and obj.cpuset and kinds and obj.depth >= 0:
        # hwloc-info names the kind holding the object, or else the first
        # it overlaps, "(partially)"
        try:
            k, part = topo.cpu_kind_of(obj.cpuset), ""
        except ValueError:
            k, part = next(i for i, kind in enumerate(kinds) if kind.cpuset & obj.cpuset), " (partially)"
        if k is not None:
            d["cpukind"] = str(k) + part
            if kinds[k].efficiency is not None:
                d["cpukind efficiency"] = str(kinds[k].efficiency)
            for name, value in kinds[k].infos.items():
                d[f"cpukind info {name}"] = value
    return d


def our_objects(topo) -> dict[tuple[str, int], dict]:
    kinds = topo.cpu_kinds()
    objs = {}
    for name in HWLOC_TYPES.values():
        try:
            found = topo.objects(name)
        except ValueError:  # a type this hwloc lacks
            continue
        for obj in found:
            objs[(SHMTOPO_TYPES[obj.type], obj.logical_index)] = our_object(topo, obj, kinds)
    return objs


def compare_objects(ours: dict, theirs: dict, ignore=()) -> list[str]:
    """Differences, one line each (empty: equal); ignore: fields that
    differ between two discoveries ("info ProcessName": the loading
    program's name)."""
    diffs = []
    for key in sorted(set(ours) | set(theirs)):
        a, b = ours.get(key), theirs.get(key)
        if a is None or b is None:
            diffs.append(f"{key}: only in {'hwloc-info' if a is None else 'shmtopo'}")
            continue
        for field in sorted((set(a) | set(b)) - set(ignore)):
            x, y = a.get(field), b.get(field)
            if x != y:
                diffs.append(f"{key} {field}: shmtopo {a.get(field)!r}, hwloc-info {b.get(field)!r}")
    return diffs


# -- lstopo's attribute listings ----------------------------------------------------------------
def tool_distances(input: str | None = None) -> list[dict]:
    """lstopo --distances: name, kind, objects (type, logical index), values."""
    out, cur = [], None
    for line in run("lstopo-no-graphics", "--distances", "--of", "console", input=input).splitlines():
        m = re.match(r".* matrix \((?:name (\S+) )?kind (\d+)\) between (\d+) (\S+?)s? \(depth (-?\d+)\) "
                     r"by logical indexes:", line)
        if m:
            cur = {"name": m.group(1), "kind": int(m.group(2)), "n": int(m.group(3)), "type": m.group(4),
                   "index": [], "values": []}
            out.append(cur)
            continue
        if cur is None:
            continue
        cells = line.split()
        if cells and cells[0] == "index":
            cur["index"] = [int(c) for c in cells[1:]]
        elif cells and all(re.fullmatch(r"\d+", c) for c in cells) and len(cells) == cur["n"] + 1:
            cur["values"].append([int(c) for c in cells[1:]])
    return out


def tool_memattrs(input: str | None = None) -> dict[int, dict]:
    """lstopo --memattrs -v: id -> name, flags, values [(target, initiator mask or None, value)]."""
    attrs, cur = {}, None
    for line in run("lstopo-no-graphics", "--memattrs", "-v", "--of", "console", input=input).splitlines():
        m = re.match(r"Memory attribute #(\d+) name `(.*)' flags (\d+)", line)
        if m:
            cur = attrs[int(m.group(1))] = {"name": m.group(2), "flags": int(m.group(3)), "values": []}
            continue
        m = re.match(r"\s+(\S+) L#(\d+) = (\d+)(?: from cpuset (\S+))?", line)
        if m and cur is not None:
            cur["values"].append(((m.group(1), int(m.group(2))), m.group(4), int(m.group(3))))
    return attrs


def tool_cpukinds(input: str | None = None) -> list[dict]:
    """lstopo --cpukinds: efficiency, cpuset mask, infos."""
    kinds = []
    for line in run("lstopo-no-graphics", "--cpukinds", "--of", "console", input=input).splitlines():
        m = re.match(r"CPU kind #(\d+) efficiency (-?\d+) cpuset (\S+)", line)
        if m:
            kinds.append({"efficiency": int(m.group(2)), "cpuset": m.group(3), "infos": {}})
        elif kinds and " = " in line:
            name, value = line.strip().split(" = ", 1)
            kinds[-1]["infos"].setdefault(name, value)
    return kinds


def tool_pci_types(input: str | None = None, io="all") -> dict[str, tuple[int, int, int]]:
    """busid -> (subvendor, subdevice, revision) from lstopo --of xml's pci_type."""
    xml = run("lstopo-no-graphics", *io_args(io), "--of", "xml", "-", input=input)
    found = {}
    for m in re.finditer(r'pci_busid="([^"]+)" pci_type="[0-9a-f]{4} \[[0-9a-f]{4}:[0-9a-f]{4}\] '
                         r'\[([0-9a-f]{4}):([0-9a-f]{4})\] ([0-9a-f]{2})"', xml):
        found[m.group(1)] = (int(m.group(2), 16), int(m.group(3), 16), int(m.group(4), 16))
    return found


def calc(*args: str, input: str | None = None) -> str:
    return run("hwloc-calc", *args, input=input).strip()


def mask_set(mask: str) -> set[int]:
    """An hwloc mask string ("0xffffffff,,0x3") as a set of indices, parsed
    here independently of shmtopo."""
    mask = mask.strip()
    if mask in ("0x0", ""):
        return set()
    words = mask.split(",")
    bits = set()
    for k, word in enumerate(reversed(words)):
        value = int(word, 16) if word else 0
        bits |= {32 * k + i for i in range(32) if value >> i & 1}
    return bits


def from_rank0(fn, *args):
    """fn(*args) computed by rank 0 of the job and handed to every rank. The
    others wait in a sleeping poll, not in a collective: MPICH's spinning
    waits would take the cores the tools run on."""
    import time

    from mpi4py import MPI

    world = MPI.COMM_WORLD
    value = fn(*args) if world.rank == 0 else None
    if world.size > 1:
        done = world.Ibarrier()
        while not done.Test():
            time.sleep(0.005)
    return world.bcast(value, root=0)


@pytest.fixture(scope="session")
def big_node():
    """Path of the big node's XML, built once by rank 0 of the job (the
    tools take a few seconds) and removed at the end."""
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    directory = tempfile.mkdtemp(prefix="shmtopo-big-node-") if world.rank == 0 else None
    path = from_rank0(build_big_node, directory)
    yield path
    world.Barrier()
    if world.rank == 0:
        shutil.rmtree(directory, ignore_errors=True)
