"""Objects: hwloc's object types and one object of a topology.

:func:`type_number` and :func:`type_name` translate hwloc's type names
("core", "numanode", "pci", ...); :class:`TopoObject` is one object of a
topology, a read-only view with its identity, attributes (:class:`CacheAttr`,
:class:`PciAttr`, :class:`BridgeAttr`), CPU and NUMA sets, and its place in
the tree. An object is valid while its topology is open; after that every
call raises :class:`~shmtopo.errors.FreedError`.
"""
from __future__ import annotations

import errno as _errno
from typing import Any, Callable, NamedTuple, Protocol

from .._base import number_of_name
from .._native import ffi, lib
from ..bitmap import Bitmap, indices_from
from ..errors import ShmtopoValueError, check


# -- types --------------------------------------------------------------------
def type_number(name: str) -> int:
    """hwloc's number for a type name; ShmtopoValueError for an unknown one."""
    return number_of_name(lib.shmtopo_topo_type_from_name, name, "topology object type")


def type_name(number: int) -> str:
    """The short name of a type number ("core", "numanode", "pci", ...)."""
    return ffi.string(lib.shmtopo_topo_type_name(number)).decode()


def _known(name: str) -> bool:
    return bool(lib.shmtopo_topo_type_from_name(name.encode(), ffi.new("int *")) == 0)


#: The usual type names this hwloc knows ("die" needs hwloc >= 2.1).
TYPES = tuple(n for n in ("machine", "package", "die", "numanode", "group", "l3", "l2", "l1", "core", "pu")
              if _known(n))
#: Types of I/O objects, present only in topologies loaded with ``io=``.
IO_TYPES = ("bridge", "pci", "osdev")
#: Kinds of OS devices (``TopoObject.osdev_type``).
OSDEV_TYPES = ("block", "gpu", "network", "openfabrics", "dma", "coproc")
CACHE_TYPES = ("unified", "data", "instruction")


def hwloc_version() -> str:
    """libhwloc's API version in use (all ranks of a node must share it)."""
    return ffi.string(lib.shmtopo_hwloc_version()).decode()


# -- strings from the native core ---------------------------------------------------
def infos_from(fill: Callable[[Any, Any, int, Any], int]) -> dict[str, str]:
    """name -> value pairs from a native (names, values, max, countp) call;
    the first value of a repeated name wins, as in hwloc's lookups."""
    cap = 16
    while True:
        names, values = ffi.new("const char *[]", cap), ffi.new("const char *[]", cap)
        count = ffi.new("size_t *")
        rc = fill(names, values, cap, count)
        if rc < 0 and ffi.errno == _errno.ENOBUFS and count[0] > cap:
            cap = count[0]
            continue
        check(rc)
        pairs: dict[str, str] = {}
        for i in range(count[0]):
            name = ffi.string(names[i]).decode(errors="replace")
            if name not in pairs:
                pairs[name] = ffi.string(values[i]).decode(errors="replace") if values[i] else ""
        return pairs


def c_string(p: Any) -> str | None:
    """A native string, None for NULL."""
    return None if p == ffi.NULL else ffi.string(p).decode(errors="replace")


# -- attribute records -------------------------------------------------------------
class CacheAttr(NamedTuple):
    """A cache's attributes (``TopoObject.cache``)."""
    size: int            #: bytes
    depth: int           #: 1 for L1, ...
    linesize: int        #: bytes, 0 unknown
    associativity: int   #: ways; -1 fully associative, 0 unknown
    kind: str            #: "unified", "data" or "instruction"


class PciAttr(NamedTuple):
    """A PCI device's attributes (``TopoObject.pci``; for a bridge, its
    upstream side)."""
    busid: str           #: "0000:3b:00.0", as lstopo prints it
    domain: int
    bus: int
    dev: int
    func: int
    class_id: int
    vendor_id: int
    device_id: int
    subvendor_id: int
    subdevice_id: int
    revision: int
    linkspeed: float     #: GB/s, 0.0 unknown


class BridgeAttr(NamedTuple):
    """A bridge's attributes (``TopoObject.bridge``)."""
    upstream: str        #: "host" (a host bridge) or "pci"
    downstream: str      #: "pci"
    domain: int
    secondary_bus: int
    subordinate_bus: int
    depth: int


# -- objects -------------------------------------------------------------------
class TopologyLike(Protocol):
    """What an object needs of the topology it belongs to: the native handle
    (raising FreedError once the topology is closed) and whether it is."""

    @property
    def _handle(self) -> Any: ...

    @property
    def closed(self) -> bool: ...


class TopoObject:
    """One hwloc object, read-only; valid while its topology is open."""

    __slots__ = ("_topo", "_h", "_info")

    def __init__(self, topo: TopologyLike, handle: Any):
        info = ffi.new("shmtopo_obj_info_t *")
        check(lib.shmtopo_obj_info(handle, info))
        self._topo = topo
        self._h = handle
        self._info = info

    def _handle(self) -> Any:
        self._topo._handle  # raises FreedError once the topology is closed
        return self._h

    def _field(self, name: str) -> Any:
        self._handle()
        return getattr(self._info, name)

    def _wrap(self, handle: Any) -> "TopoObject | None":
        return None if handle == ffi.NULL else TopoObject(self._topo, handle)

    def _peer(self, other: Any, what: str) -> Any:
        if not isinstance(other, TopoObject) or other._topo is not self._topo:
            raise ShmtopoValueError(f"{what} needs an object of the same topology, not {other!r}")
        return other._handle()

    def _attr(self) -> Any:
        attr = ffi.new("shmtopo_obj_attr_t *")
        check(lib.shmtopo_obj_attr(self._handle(), attr))
        return attr

    # -- identity ----------------------------------------------------------
    @property
    def type(self) -> str:
        return type_name(self._field("type"))

    @property
    def depth(self) -> int:
        """Level in the tree (0: Machine); negative for NUMA nodes, I/O and
        Misc objects (hwloc's special depths)."""
        return int(self._field("depth"))

    @property
    def os_index(self) -> int | None:
        idx = self._field("os_index")
        return None if idx < 0 else idx

    @property
    def logical_index(self) -> int:
        return int(self._field("logical_index"))

    @property
    def gp_index(self) -> int:
        """hwloc's global persistent index (unique in the topology)."""
        return int(self._field("gp_index"))

    @property
    def sibling_rank(self) -> int:
        """Index among its parent's children of the same kind."""
        return int(self._field("sibling_rank"))

    @property
    def symmetric_subtree(self) -> bool:
        return bool(self._field("symmetric_subtree"))

    @property
    def name(self) -> str | None:
        """The object's name (OS devices: "eth0", "sda"; often None)."""
        return c_string(self._attr().name)

    @property
    def subtype(self) -> str | None:
        """A finer type ("HBM", "MemoryModule", "CXLMem"...; often None)."""
        return c_string(self._attr().subtype)

    # -- attributes --------------------------------------------------------
    @property
    def infos(self) -> dict[str, str]:
        """The object's info attributes: CPUModel, CPUVendor, ... on
        packages; OSName, Backend, hwlocVersion ... on the root."""
        h = self._handle()
        return infos_from(lambda names, values, cap, count: lib.shmtopo_obj_infos(h, names, values, cap, count))

    def info(self, name: str) -> str | None:
        """One info attribute (the first of that name), or None."""
        return self.infos.get(name)

    @property
    def local_memory(self) -> int:
        """Bytes of a NUMA node's own memory (0 for other objects)."""
        return int(self._field("local_memory"))

    @property
    def total_memory(self) -> int:
        """Bytes of all NUMA nodes below this object."""
        return int(self._field("total_memory"))

    @property
    def page_types(self) -> list[tuple[int, int]]:
        """A NUMA node's memory by page size: (bytes per page, pages)."""
        h = self._handle()
        cap = 8
        while True:
            sizes, counts, n = ffi.new("uint64_t[]", cap), ffi.new("uint64_t[]", cap), ffi.new("size_t *")
            rc = lib.shmtopo_obj_page_types(h, sizes, counts, cap, n)
            if rc < 0 and ffi.errno == _errno.ENOBUFS and n[0] > cap:
                cap = n[0]
                continue
            check(rc)
            return [(int(sizes[i]), int(counts[i])) for i in range(n[0])]

    @property
    def cache(self) -> CacheAttr | None:
        """Size, depth, line size, associativity and kind of a cache; None
        for other objects."""
        a = self._attr()
        if a.kind != lib.SHMTOPO_ATTR_CACHE:
            return None
        kind = CACHE_TYPES[a.cache_type] if 0 <= a.cache_type < len(CACHE_TYPES) else "unknown"
        return CacheAttr(int(a.cache_size), a.cache_depth, a.cache_linesize, a.cache_associativity, kind)

    @staticmethod
    def _pci_of(a: Any) -> PciAttr:
        busid = f"{a.pci_domain:04x}:{a.pci_bus:02x}:{a.pci_dev:02x}.{a.pci_func:01x}"
        return PciAttr(busid, a.pci_domain, a.pci_bus, a.pci_dev, a.pci_func, a.pci_class_id, a.pci_vendor_id,
                       a.pci_device_id, a.pci_subvendor_id, a.pci_subdevice_id, a.pci_revision,
                       float(a.pci_linkspeed))

    @property
    def pci(self) -> PciAttr | None:
        """Bus id and ids of a PCI device (or of a PCI-to-PCI bridge's
        upstream side); None otherwise."""
        a = self._attr()
        if a.kind == lib.SHMTOPO_ATTR_PCI or (a.kind == lib.SHMTOPO_ATTR_BRIDGE and a.bridge_upstream):
            return self._pci_of(a)
        return None

    @property
    def bridge(self) -> BridgeAttr | None:
        """A bridge's up- and downstream sides and the buses below it."""
        a = self._attr()
        if a.kind != lib.SHMTOPO_ATTR_BRIDGE:
            return None
        return BridgeAttr("pci" if a.bridge_upstream else "host", "pci" if a.bridge_downstream else "unknown",
                          a.bridge_domain, a.bridge_secondary_bus, a.bridge_subordinate_bus, a.bridge_depth)

    @property
    def osdev_type(self) -> str | None:
        """An OS device's kind: "block", "gpu", "network", "openfabrics",
        "dma" or "coproc"; None for other objects."""
        a = self._attr()
        if a.kind != lib.SHMTOPO_ATTR_OSDEV:
            return None
        return ffi.string(lib.shmtopo_osdev_type_name(a.osdev_type)).decode()

    @property
    def group_depth(self) -> int | None:
        """A Group's depth among groups (None for other objects)."""
        a = self._attr()
        return a.group_depth if a.kind == lib.SHMTOPO_ATTR_GROUP else None

    # -- sets --------------------------------------------------------------
    def _set(self, which: int) -> Bitmap:
        h = self._handle()
        return indices_from(lambda out, cap, count: lib.shmtopo_obj_set(h, which, out, cap, count))

    def _set_str(self, which: int) -> str:
        h = self._handle()
        need = check(lib.shmtopo_obj_set_str(h, which, ffi.NULL, 0))
        buf = ffi.new("char[]", need + 1)
        check(lib.shmtopo_obj_set_str(h, which, buf, need + 1))
        return ffi.string(buf).decode()

    @property
    def cpuset(self) -> Bitmap:
        """OS indices of the PUs (hardware threads) inside the object (empty
        for I/O and Misc objects)."""
        return self._set(0)

    @property
    def cpuset_str(self) -> str:
        """hwloc's string form of the cpuset, e.g. ``0x0000000f``."""
        return self._set_str(0)

    @property
    def nodeset(self) -> Bitmap:
        """OS indices of the NUMA nodes near the object."""
        return self._set(1)

    # -- tree --------------------------------------------------------------
    @property
    def parent(self) -> "TopoObject | None":
        out = ffi.new("void **")
        check(lib.shmtopo_obj_parent(self._handle(), out))
        return self._wrap(out[0])

    @property
    def children(self) -> list["TopoObject"]:
        """Normal children in logical order, then memory children (NUMA
        nodes), I/O children and Misc children, as hwloc lists them."""
        h = self._handle()
        out = ffi.new("void **")
        kids = []
        info = self._info
        for i in range(info.arity + info.memory_arity + info.io_arity + info.misc_arity):
            check(lib.shmtopo_obj_child(h, i, out))
            kids.append(TopoObject(self._topo, out[0]))
        return kids

    @property
    def ancestors(self) -> list["TopoObject"]:
        """Parent, grandparent, ... up to the root."""
        chain, obj = [], self.parent
        while obj is not None:
            chain.append(obj)
            obj = obj.parent
        return chain

    def ancestor(self, type: str) -> "TopoObject | None":
        """The closest ancestor of a type ("package", "l3", ...), or None."""
        number = type_number(type)
        out = ffi.new("void **")
        check(lib.shmtopo_obj_ancestor(self._topo._handle, self._handle(), number, out))
        return self._wrap(out[0])

    def common_ancestor(self, other: "TopoObject") -> "TopoObject":
        """The deepest object that is an ancestor of both, or one of them
        (NUMA nodes and I/O objects count from the object they hang from)."""
        theirs = self._peer(other, "common_ancestor")
        out = ffi.new("void **")
        check(lib.shmtopo_obj_common_ancestor(self._topo._handle, self._handle(), theirs, out))
        return TopoObject(self._topo, out[0])

    def is_inside(self, other: "TopoObject") -> bool:
        """Whether this object lies in other's subtree, by cpusets as hwloc
        decides (an object is inside itself; I/O objects, having no cpuset,
        are inside nothing)."""
        theirs = self._peer(other, "is_inside")
        return bool(check(lib.shmtopo_obj_is_inside(self._topo._handle, self._handle(), theirs)))

    @property
    def non_io_ancestor(self) -> "TopoObject":
        """The object itself when it has CPUs, else (I/O objects) the first
        ancestor that has: where a device is attached, its locality."""
        out = ffi.new("void **")
        check(lib.shmtopo_obj_non_io_ancestor(self._topo._handle, self._handle(), out))
        return TopoObject(self._topo, out[0])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TopoObject) and self._h == other._h

    def __hash__(self) -> int:
        return hash(int(ffi.cast("uintptr_t", self._h)))

    def __repr__(self) -> str:
        if self._topo.closed:
            return "<shmtopo.TopoObject of a closed topology>"
        name = f" {self.name!r}" if self.name else ""
        os_index = "" if self.os_index is None else f" P#{self.os_index}"
        where = f" cpuset {self.cpuset_str}" if self.type not in IO_TYPES + ("misc",) else ""
        return f"<{self.type}{name} L#{self.logical_index}{os_index}{where}>"
