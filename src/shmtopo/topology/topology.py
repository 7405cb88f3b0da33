"""Topology: a read-only hwloc topology, its queries and binding.

A :class:`Topology` has no method that modifies it: an adopted topology lives
in read-only shared memory, where hwloc would segfault on a write. What it
offers are queries (objects, their attributes, lookups by index or cpuset,
distances, memory attributes, CPU kinds, I/O devices) and binding of the
calling process or thread, which changes the process, not the topology.
Objects returned by a topology are views that stay valid until it is closed;
after that every call raises :class:`FreedError`. Sets of CPUs or NUMA nodes
are :class:`~shmtopo.bitmap.Bitmap` s (frozensets with hwloc's syntaxes);
arguments that take a set accept a Bitmap, any iterable of indices, an hwloc
list string ("0-3,8") or an object (its cpuset, or nodeset for memory calls).
Binding a whole comm by topology is :meth:`shmtopo.Comm.bind`; the node's
shared topology comes from :func:`~shmtopo.topology.share_topology`.
"""
from __future__ import annotations

import atexit
import errno as _errno
import re
import weakref
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

import numpy as np
import numpy.typing as npt

from .._base import number_of_name
from .._native import ffi, lib
from ..bitmap import Bitmap, as_indices, c_indices, grow, indices_from
from ..errors import FreedError, ShmtopoValueError, check, last_error
from .objects import OSDEV_TYPES, TYPES, TopoObject, c_string, infos_from, type_number

if TYPE_CHECKING:
    from types import TracebackType

    from typing_extensions import Self


# -- tables and arguments ---------------------------------------------------------
#: Memory binding policies (``Topology.set_membind``).
MEMBIND_POLICIES = ("default", "firsttouch", "bind", "interleave", "nexttouch")
#: The most PUs a synthetic description may make. hwloc's load grows faster
#: than the object count (8,192 PUs: 0.35 s; 16,384: 1.4-25 s; 100,000: minutes).
MAX_SYNTHETIC_PUS = 8192
#: How Comm.bind and Topology.placement share ranks out over objects.
PLACEMENT_POLICIES = ("compact", "spread")
DISTANCE_KINDS = {1: "from_os", 2: "from_user", 4: "latency", 8: "bandwidth", 16: "heterogeneous_types"}
MEMATTR_FLAGS = {1: "higher_first", 2: "lower_first", 4: "need_initiator"}


def io_level(io: Any) -> int:
    """io=False (none), True (the important I/O objects) or "all"."""
    if io is None or io is False or (type(io) is int and io == 0):
        return 0
    if io is True or (type(io) is int and io == 1):
        return 1
    if io == "all" or (type(io) is int and io == 2):
        return 2
    raise ShmtopoValueError(f"io must be False, True or 'all', not {io!r}")


_IO_VALUES = (False, True, "all")


def _flag(value: Any, what: str) -> bool:
    if isinstance(value, (bool, np.bool_)) or value in (0, 1):
        return bool(value)
    raise ShmtopoValueError(f"{what} must be True or False, not {value!r}")


def _named_bits(bits: int, names: dict[int, str]) -> frozenset[str]:
    return frozenset(name for bit, name in names.items() if bits & bit)


# -- query records ---------------------------------------------------------------
class MemAttrValue(NamedTuple):
    """One value of a memory attribute: for ``target`` (a NUMA node) as seen
    from ``initiator`` (a Bitmap of CPUs, an object, or None when the
    attribute has no initiators)."""
    target: "TopoObject"
    initiator: "Bitmap | TopoObject | None"
    value: int


class MemAttr(NamedTuple):
    """A memory attribute (``Topology.memory_attributes``)."""
    id: int
    name: str            #: "Capacity", "Locality", "Bandwidth", "Latency", ...
    flags: frozenset[str]  #: of "higher_first", "lower_first", "need_initiator"
    values: tuple[MemAttrValue, ...]  #: target by target


class CpuKind(NamedTuple):
    """A kind of CPU (``Topology.cpu_kinds``), ranked by efficiency."""
    index: int  # type: ignore[assignment]  # hwloc's kind index; shadows tuple.index
    efficiency: int | None   #: hwloc's abstract ranking, None unknown
    cpuset: Bitmap
    infos: dict[str, str]    #: CoreType, FrequencyMaxMHz, ...


class Distances:
    """A distance matrix between objects (``Topology.distances``):
    ``values[i, j]`` from ``objects[i]`` to ``objects[j]`` (numpy uint64)."""

    __slots__ = ("name", "kind", "objects", "values")

    def __init__(self, name: str | None, kind: frozenset[str], objects: list[TopoObject],
                 values: npt.NDArray[np.uint64]):
        self.name = name
        self.kind = kind
        self.objects = objects
        self.values = values

    def value(self, a: "TopoObject", b: "TopoObject") -> int:
        """The distance from a to b; ShmtopoValueError if either is not in
        the matrix."""
        try:
            i, j = self.objects.index(a), self.objects.index(b)
        except ValueError:
            raise ShmtopoValueError("object not in this distance matrix") from None
        return int(self.values[i, j])

    def __repr__(self) -> str:
        types = sorted({o.type for o in self.objects})
        return (f"<shmtopo.Distances {self.name or '(unnamed)'} {'/'.join(sorted(self.kind))} "
                f"between {len(self.objects)} {'/'.join(types)}>")



# -- topology ------------------------------------------------------------------
_open_topologies: "weakref.WeakSet[Topology]" = weakref.WeakSet()


def placement_policy_number(name: Any) -> int:
    return number_of_name(lib.shmtopo_place_policy_from_name, name, "placement policy", "'compact' or 'spread'")


def _membind_policy(name: Any) -> int:
    return number_of_name(lib.shmtopo_membind_policy_from_name, name, "memory binding policy")


class Topology:
    """A read-only hwloc topology.

    Get the node's shared one with :func:`share_topology` (collective), or a
    private one with :meth:`load`, :meth:`from_xml` or :meth:`from_synthetic`.
    There is no mutating API. ``close()`` is local; a shared topology is
    reference counted (each ``share_topology`` call adds one, each
    ``close()`` drops one) and destroyed at zero.
    """

    __slots__ = ("_h", "_source", "_refs", "_address", "_length", "_attempts", "_adopt_seconds", "_on_destroy",
                 "__weakref__")

    def __init__(self, handle: Any, source: str, *, address: int | None = None,
                 length: int | None = None, attempts: int = 0, adopt_seconds: float | None = None,
                 on_destroy: Callable[[Topology], None] | None = None):
        self._h = handle
        self._source = source
        self._refs = 1
        self._address = address
        self._length = length
        self._attempts = attempts
        self._adopt_seconds = adopt_seconds
        self._on_destroy = on_destroy  # whoever handed it out forgets it (share_topology)
        _open_topologies.add(self)

    @classmethod
    def load(cls, *, io: bool | str = False) -> "Topology":
        """Local: discover this machine's topology into private memory.
        io: True adds the I/O objects hwloc deems important (bridges, PCI
        devices such as NICs and GPUs, and their OS devices); "all" every one."""
        out = ffi.new("void **")
        check(lib.shmtopo_topo_load_local_io(io_level(io), out))
        return cls(out[0], "local")

    @classmethod
    def from_xml(cls, xml: str | bytes, *, this_system: bool = False, io: bool | str = False) -> "Topology":
        """Local: a private topology from hwloc XML text. this_system: the XML
        describes this machine, so binding queries work on it. io: keep the
        XML's I/O objects (True: the important ones, "all": all)."""
        data = xml.encode() if isinstance(xml, str) else bytes(xml)
        return cls(_load_xml(data, here=this_system, io=io_level(io)), "xml")

    @classmethod
    def from_synthetic(cls, description: str) -> "Topology":
        """Local: a synthetic topology from hwloc's description, e.g.
        ``"pack:2 numa:4 l3:4 core:8 pu:2"`` (what lstopo -i takes), of at
        most MAX_SYNTHETIC_PUS (8,192) PUs. Not this machine: binding calls
        on it raise."""
        if not isinstance(description, str):
            raise ShmtopoValueError(f"a synthetic description must be a str, not {description!r}")
        pus = _synthetic_pus(description)
        if pus > MAX_SYNTHETIC_PUS:
            raise ShmtopoValueError(f"synthetic topology {description!r} has {pus} PUs; at most "
                                    f"{MAX_SYNTHETIC_PUS} (hwloc's time to build one grows faster than its size)")
        out = ffi.new("void **")
        check(lib.shmtopo_topo_load_synthetic(description.encode(), out))
        return cls(out[0], "synthetic")

    @property
    def _handle(self) -> Any:
        if self._h == ffi.NULL:
            raise FreedError("the topology has been closed", _errno.EBADF)
        return self._h

    # -- provenance --------------------------------------------------------
    @property
    def source(self) -> str:
        """How this rank got it: "shmem" (adopted), "xml", "local" or
        "synthetic"."""
        return self._source

    @property
    def address(self) -> int | None:
        """Start of the shared mapping (source "shmem"), else None."""
        return self._address

    @property
    def length(self) -> int | None:
        """Bytes of the shared mapping (source "shmem"), else None."""
        return self._length

    @property
    def attempts(self) -> int:
        """Addresses share_topology tried (0 when shmem was not tried)."""
        return self._attempts

    @property
    def adopt_seconds(self) -> float | None:
        """Time this rank spent in the native adopt call (source "shmem"),
        the part that replaces a load; the rest of share_topology is the
        leader's load and the exchanges."""
        return self._adopt_seconds

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has run."""
        return bool(self._h == ffi.NULL)

    @property
    def io(self) -> bool | str:
        """The I/O objects it was loaded with: False, True (the important
        ones) or "all"."""
        return _IO_VALUES[check(lib.shmtopo_topo_io(self._handle))]

    @property
    def this_system(self) -> bool:
        """True when it describes this machine, so binding through it works
        (False for a synthetic topology, or XML of another machine)."""
        return bool(check(lib.shmtopo_topo_is_this_system(self._handle)))

    # -- objects -----------------------------------------------------------
    @property
    def depth(self) -> int:
        """Levels of normal objects, Machine down to PU."""
        return check(lib.shmtopo_topo_depth(self._handle))

    def nbobjs(self, type: str) -> int:
        """Objects of a type ("machine", "package", "numanode"/"numa", "l3",
        "l2", "l1", "core", "pu", "group", "die", "pci", "osdev", "bridge",
        "misc", or an hwloc type string). An unknown name raises
        ShmtopoValueError."""
        h = self._handle
        return check(lib.shmtopo_topo_nbobjs(h, type_number(type)))

    def objects(self, type: str) -> list[TopoObject]:
        """The objects of a type in logical order (Groups: depth by depth)."""
        h = self._handle
        number = type_number(type)
        out = ffi.new("void **")
        objs = []
        for i in range(check(lib.shmtopo_topo_nbobjs(h, number))):
            check(lib.shmtopo_topo_obj(h, number, i, out))
            objs.append(TopoObject(self, out[0]))
        return objs

    def object(self, type: str, index: int) -> TopoObject | None:
        """The object of a type with that logical index (what hwloc-calc and
        lstopo call ``core:3``, L#3), or None if there is none."""
        h = self._handle
        number = type_number(type)
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise ShmtopoValueError(f"a logical index must be a non-negative integer, not {index!r}")
        if index >= check(lib.shmtopo_topo_nbobjs(h, number)):
            return None
        out = ffi.new("void **")
        check(lib.shmtopo_topo_obj(h, number, index, out))
        return TopoObject(self, out[0])

    def object_by_os_index(self, type: str, os_index: int) -> TopoObject | None:
        """The object of a type with that OS (physical) index, P#n (PU n is
        CPU n of the OS, NUMA node n is Linux's node n), or None."""
        h = self._handle
        number = type_number(type)
        if isinstance(os_index, bool) or not isinstance(os_index, int) or not 0 <= os_index < 2**32 - 1:
            raise ShmtopoValueError(f"an OS index must be a non-negative integer, not {os_index!r}")
        out = ffi.new("void **")
        check(lib.shmtopo_topo_obj_by_os_index(h, number, os_index, out))
        return None if out[0] == ffi.NULL else TopoObject(self, out[0])

    @property
    def root(self) -> TopoObject:
        """The Machine object at the top of the tree."""
        out = ffi.new("void **")
        check(lib.shmtopo_topo_root(self._handle, out))
        return TopoObject(self, out[0])

    def counts(self) -> dict[str, int]:
        """nbobjs for every name in TYPES."""
        return {name: self.nbobjs(name) for name in TYPES}

    # -- lookups by set ------------------------------------------------------
    @staticmethod
    def _cpus(value: Any, what: str = "cpus") -> Bitmap:
        if isinstance(value, TopoObject):
            return value.cpuset
        return as_indices(value, what)

    @staticmethod
    def _nodes(value: Any, what: str = "nodes") -> Bitmap:
        if isinstance(value, TopoObject):
            return value.nodeset
        return as_indices(value, what)

    def covering(self, cpus: Any) -> TopoObject | None:
        """The smallest (deepest) normal object whose cpuset holds all of
        cpus; None for an empty set or CPUs the topology lacks."""
        h = self._handle
        idx, n = c_indices(self._cpus(cpus))
        out = ffi.new("void **")
        check(lib.shmtopo_topo_covering(h, idx, n, out))
        return None if out[0] == ffi.NULL else TopoObject(self, out[0])

    def inside(self, cpus: Any, type: str | None = None) -> list[TopoObject]:
        """Objects inside a cpuset: those of ``type`` whose (non-empty)
        cpuset lies inside it, in logical order; without a type, the largest
        objects that together cover it exactly (hwloc-calc --largest)."""
        h = self._handle
        number = -1 if type is None else type_number(type)
        idx, n = c_indices(self._cpus(cpus))
        out, count = grow(lambda objs, cap, cnt: lib.shmtopo_topo_inside(h, idx, n, number, objs, cap, cnt),
                          "void *[]")
        return [TopoObject(self, out[i]) for i in range(count)]

    def cpuset_to_nodeset(self, cpus: Any) -> Bitmap:
        """The NUMA nodes (os indices) near those CPUs."""
        h = self._handle
        idx, n = c_indices(self._cpus(cpus))
        return indices_from(lambda out, cap, count: lib.shmtopo_topo_convert_set(h, 1, idx, n, out, cap, count))

    def nodeset_to_cpuset(self, nodes: Any) -> Bitmap:
        """The CPUs (PU os indices) near those NUMA nodes."""
        h = self._handle
        idx, n = c_indices(self._nodes(nodes))
        return indices_from(lambda out, cap, count: lib.shmtopo_topo_convert_set(h, 0, idx, n, out, cap, count))

    # -- binding the calling process or thread -----------------------------
    def get_cpubind(self, *, thread: bool = False) -> Bitmap:
        """PU os indices the calling process (all its threads) is bound to,
        or the calling thread with thread=True; all PUs if unbound."""
        h = self._handle
        flags = lib.SHMTOPO_BIND_THREAD if _flag(thread, "thread") else 0
        return indices_from(lambda out, cap, count: lib.shmtopo_topo_get_cpubind(h, flags, out, cap, count))

    def set_cpubind(self, cpus: Any, *, thread: bool = False, strict: bool = False) -> None:
        """Bind the calling process (every thread of it) or, thread=True,
        the calling thread to cpus (a set, an hwloc list string or an object,
        whose cpuset is taken). Local. This changes the process, not the
        topology; an adopted topology allows it."""
        h = self._handle
        flags = (lib.SHMTOPO_BIND_THREAD if _flag(thread, "thread") else 0) | \
                (lib.SHMTOPO_BIND_STRICT if _flag(strict, "strict") else 0)
        idx, n = c_indices(self._cpus(cpus))
        check(lib.shmtopo_topo_set_cpubind(h, idx, n, flags))

    def get_last_cpu_location(self, *, thread: bool = True) -> Bitmap:
        """The PU the calling thread last ran on (thread=False: those of all
        the process's threads); it may change at any time."""
        h = self._handle
        flags = lib.SHMTOPO_BIND_THREAD if _flag(thread, "thread") else 0
        return indices_from(lambda out, cap, count: lib.shmtopo_topo_get_last_cpu(h, flags, out, cap, count))

    def get_membind(self, *, thread: bool = False) -> tuple[Bitmap, str]:
        """(NUMA os indices, policy) of the calling process's memory binding
        (thread=True: the calling thread's); the policy is one of
        MEMBIND_POLICIES or "mixed"."""
        h = self._handle
        flags = lib.SHMTOPO_BIND_THREAD if _flag(thread, "thread") else 0
        policy = ffi.new("int *")
        nodes = indices_from(lambda out, cap, count:
                             lib.shmtopo_topo_get_membind(h, flags, policy, out, cap, count))
        return nodes, ffi.string(lib.shmtopo_membind_policy_name(policy[0])).decode()

    def set_membind(self, nodes: Any, policy: str = "bind", *, thread: bool = False, strict: bool = False,
                    migrate: bool = False) -> None:
        """Bind the calling process's (or thread's) future allocations to
        NUMA nodes (os indices, or an object: its nodeset) with a policy
        ("bind", "interleave", "firsttouch", "nexttouch"; "default" resets,
        nodes may then be empty). migrate: move pages already allocated."""
        h = self._handle
        number = _membind_policy(policy)
        flags = (lib.SHMTOPO_BIND_THREAD if _flag(thread, "thread") else 0) | \
                (lib.SHMTOPO_BIND_STRICT if _flag(strict, "strict") else 0) | \
                (lib.SHMTOPO_BIND_MIGRATE if _flag(migrate, "migrate") else 0)
        idx, n = c_indices(self._nodes(nodes))
        check(lib.shmtopo_topo_set_membind(h, idx, n, number, flags))

    def placement(self, to: str, n: int, policy: str = "compact", *, overload: bool = False) -> list[TopoObject]:
        """Where n ranks would go, one object of type ``to`` each (objects
        without CPUs do not count): "compact" puts rank r on object r in
        logical order; "spread" shares ranks out over the tree from the top,
        in proportion to the objects below each branch (hwloc-distrib's
        way). More ranks than objects share them as mpirun's ``--bind-to``
        does: compact fills one object, then the next; spread deals ranks
        out round-robin. For cores and PUs that is an overload:
        ShmtopoValueError unless ``overload=True``.
        :meth:`shmtopo.Comm.bind` binds a comm's ranks this way."""
        h = self._handle
        number = type_number(to)
        pol = placement_policy_number(policy)
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n < 2**31:
            raise ShmtopoValueError(f"the number of ranks must be a non-negative integer, not {n!r}")
        if not isinstance(overload, bool):
            raise ShmtopoValueError(f"overload must be True or False, not {overload!r}")
        out = ffi.new("unsigned[]", max(n, 1))
        check(lib.shmtopo_topo_place(h, number, pol, int(overload), n, out))
        obj = ffi.new("void **")
        placed = []
        for r in range(n):
            check(lib.shmtopo_topo_obj(h, number, out[r], obj))
            placed.append(TopoObject(self, obj[0]))
        return placed

    def color_of_this_process(self, by: str) -> int:
        """Index of the object of type ``by`` this process runs in (see
        :func:`split_color`), for splitting a comm by topology."""
        return split_color(self, by)

    # -- distances, memory attributes, CPU kinds ---------------------------
    def distances(self) -> list[Distances]:
        """The topology's distance matrices (NUMA latencies from the OS,
        user-given ones, GPU interconnect bandwidths, ...)."""
        h = self._handle
        found = []
        info = ffi.new("shmtopo_distances_info_t *")
        for i in range(check(lib.shmtopo_topo_ndistances(h))):
            cap = 0
            while True:
                objs = ffi.new("void *[]", max(cap, 1))
                values = ffi.new("uint64_t[]", max(cap * cap, 1))
                rc = lib.shmtopo_topo_distances(h, i, info, objs, values, cap)
                if rc < 0 and ffi.errno == _errno.ENOBUFS and info.nbobjs > cap:
                    cap = info.nbobjs
                    continue
                check(rc)
                break
            n = info.nbobjs
            matrix = np.frombuffer(ffi.buffer(values, 8 * n * n), dtype=np.uint64).reshape(n, n).copy()
            found.append(Distances(c_string(info.name), _named_bits(info.kind, DISTANCE_KINDS),
                                   [TopoObject(self, objs[k]) for k in range(n)], matrix))
        return found

    def _memattr_id(self, name: Any) -> int:
        if isinstance(name, bool) or not isinstance(name, (str, int)):
            raise ShmtopoValueError(f"a memory attribute is a name or an id, not {name!r}")
        if isinstance(name, int):
            return name
        out = ffi.new("unsigned *")
        check(lib.shmtopo_topo_memattr_by_name(self._handle, name.encode(), out))
        return int(out[0])

    def _location(self, kind: int, loc: Any) -> "Bitmap | TopoObject":
        if kind == 1:
            return indices_from(lambda out, cap, count: lib.shmtopo_bitmap_indices(loc, out, cap, count))
        return TopoObject(self, loc)

    def memory_attributes(self) -> list[MemAttr]:
        """Every memory attribute with every value it has: Capacity and
        Locality of each NUMA node, and (when the OS or the user gave them)
        Bandwidth, Latency, ... of each node from each initiator."""
        h = self._handle
        attrs = []
        info = ffi.new("shmtopo_memattr_info_t *")
        for i in range(check(lib.shmtopo_topo_nmemattrs(h))):
            check(lib.shmtopo_topo_memattr_info(h, i, info))
            flags = _named_bits(info.flags, MEMATTR_FLAGS)
            targets, values = self._memattr_targets(i)
            rows: list[MemAttrValue] = []
            for target, value in zip(targets, values):
                if "need_initiator" in flags:
                    rows.extend(MemAttrValue(target, where, v) for where, v in self._memattr_initiators(i, target))
                else:
                    rows.append(MemAttrValue(target, None, value))
            attrs.append(MemAttr(i, ffi.string(info.name).decode(), flags, tuple(rows)))
        return attrs

    def _memattr_targets(self, i: int) -> tuple[list[TopoObject], list[int]]:
        h = self._handle
        cap = 16
        while True:
            objs, values, n = ffi.new("void *[]", cap), ffi.new("uint64_t[]", cap), ffi.new("size_t *")
            rc = lib.shmtopo_topo_memattr_targets(h, i, objs, values, cap, n)
            if rc < 0 and ffi.errno == _errno.ENOBUFS and n[0] > cap:
                cap = n[0]
                continue
            check(rc)
            return [TopoObject(self, objs[k]) for k in range(n[0])], [int(values[k]) for k in range(n[0])]

    def _memattr_initiators(self, i: int, target: TopoObject) -> list[tuple[Any, int]]:
        h, t = self._handle, target._handle()
        cap = 16
        while True:
            kinds, locs = ffi.new("int[]", cap), ffi.new("void *[]", cap)
            values, n = ffi.new("uint64_t[]", cap), ffi.new("size_t *")
            rc = lib.shmtopo_topo_memattr_initiators(h, i, t, kinds, locs, values, cap, n)
            if rc < 0 and ffi.errno == _errno.ENOBUFS and n[0] > cap:
                cap = n[0]
                continue
            check(rc)
            return [(self._location(kinds[k], locs[k]), int(values[k])) for k in range(n[0])]

    def memattr_value(self, name: str | int, target: TopoObject, initiator: Any = None) -> int | None:
        """The value of a memory attribute for a NUMA node, as seen from
        initiator CPUs (for attributes that need one), or None if it has none."""
        h = self._handle
        number = self._memattr_id(name)
        if not isinstance(target, TopoObject) or target._topo is not self:
            raise ShmtopoValueError(f"target must be a NUMA node of this topology, not {target!r}")
        idx, n = c_indices(self._cpus(initiator, "initiator")) if initiator is not None else (ffi.NULL, 0)
        out = ffi.new("uint64_t *")
        if lib.shmtopo_topo_memattr_value(h, number, target._handle(), idx, n, out) < 0:
            if ffi.errno == _errno.ENOENT:
                return None
            raise last_error()
        return int(out[0])

    def best_target(self, name: str | int, initiator: Any = None) -> tuple[TopoObject, int] | None:
        """(NUMA node, value) best for a memory attribute (highest Bandwidth,
        lowest Latency, ...) from initiator CPUs; None when no node has a
        value for them."""
        h = self._handle
        number = self._memattr_id(name)
        idx, n = c_indices(self._cpus(initiator, "initiator")) if initiator is not None else (ffi.NULL, 0)
        obj, value = ffi.new("void **"), ffi.new("uint64_t *")
        if lib.shmtopo_topo_memattr_best_target(h, number, idx, n, obj, value) < 0:
            if ffi.errno == _errno.ENOENT:
                return None
            raise last_error()
        return TopoObject(self, obj[0]), int(value[0])

    def local_numa_nodes(self, cpus: Any = None, *, larger: bool = False, smaller: bool = False,
                         all: bool = False) -> list[TopoObject]:
        """The NUMA nodes local to cpus (default: this process's binding):
        those whose locality equals theirs, plus with larger=True those
        with larger localities (e.g. a machine-wide node), with smaller=True
        smaller ones; all=True every node (hwloc-calc --local-memory)."""
        h = self._handle
        flags = (1 if _flag(larger, "larger") else 0) | (2 if _flag(smaller, "smaller") else 0) | \
                (4 if _flag(all, "all") else 0)
        where = self.get_cpubind() if cpus is None and not all else (Bitmap() if cpus is None else self._cpus(cpus))
        idx, n = c_indices(where)
        out, count = grow(lambda objs, cap, cnt: lib.shmtopo_topo_local_numanodes(h, idx, n, flags, objs, cap, cnt),
                          "void *[]")
        return [TopoObject(self, out[i]) for i in range(count)]

    def cpu_kinds(self) -> list[CpuKind]:
        """The kinds of CPUs (e.g. performance and efficiency cores), least
        efficient first; one kind, or none, on uniform machines."""
        h = self._handle
        kinds = []
        eff = ffi.new("int *")
        for i in range(check(lib.shmtopo_topo_ncpukinds(h))):
            cpus = indices_from(lambda out, cap, count: lib.shmtopo_topo_cpukind(h, i, eff, out, cap, count))
            infos = infos_from(lambda names, values, cap, count:
                             lib.shmtopo_topo_cpukind_infos(h, i, names, values, cap, count))
            kinds.append(CpuKind(i, None if eff[0] < 0 else eff[0], cpus, infos))
        return kinds

    def cpu_kind_of(self, cpus: Any) -> int | None:
        """Index (in cpu_kinds()) of the kind all of cpus belong to; None if
        no kind holds them; ShmtopoValueError if they span several kinds."""
        h = self._handle
        idx, n = c_indices(self._cpus(cpus))
        rc = lib.shmtopo_topo_cpukind_of(h, idx, n)
        if rc < 0:
            if ffi.errno == _errno.ENOENT:
                return None
            if ffi.errno == _errno.EXDEV:
                raise ShmtopoValueError(ffi.string(lib.shmtopo_last_error()).decode(), _errno.EXDEV)
            raise last_error()
        return int(rc)

    # -- I/O devices ---------------------------------------------------------
    def osdevs(self, kind: str | None = None) -> list[TopoObject]:
        """OS devices (GPUs, NICs, InfiniBand HCAs, disks, ...), of one kind
        ("gpu", "network", "openfabrics", "block", "dma", "coproc") or all.
        Needs a topology loaded or shared with io=True."""
        if kind is not None and kind not in OSDEV_TYPES:
            raise ShmtopoValueError(f"OS device kind must be one of {', '.join(OSDEV_TYPES)}, not {kind!r}")
        if not self.io:
            raise ShmtopoValueError("this topology has no I/O objects: load or share it with io=True")
        return [d for d in self.objects("osdev") if kind is None or d.osdev_type == kind]

    def nearest_osdevs(self, cpus: Any = None, kind: str | None = None) -> list[TopoObject]:
        """OS devices ordered from the nearest to cpus (default: this
        process's binding) to the farthest: first by how deep the common
        ancestor of cpus and the device's attachment point is, then devices
        attached where cpus are before the others, then the most local
        attachment. For each rank, ``nearest_osdevs(kind="network")[0]`` is
        its NIC."""
        devices = self.osdevs(kind)
        where = self.get_cpubind() if cpus is None else self._cpus(cpus)
        here = self.covering(where)
        if here is None:
            raise ShmtopoValueError(f"CPUs {where} are not all in this topology")

        def distance(dev: TopoObject) -> tuple[int, bool, int, int]:
            home = dev.non_io_ancestor
            cpuset = home.cpuset
            return (-here.common_ancestor(home).depth, not (cpuset & where), len(cpuset), dev.logical_index)

        return sorted(devices, key=distance)

    def xml(self) -> str:
        """hwloc XML export."""
        xmlp, lenp = ffi.new("char **"), ffi.new("size_t *")
        check(lib.shmtopo_topo_export_xml(self._handle, xmlp, lenp))
        try:
            text: bytes = ffi.unpack(xmlp[0], lenp[0])
            return text.decode()
        finally:
            lib.shmtopo_topo_free_xml(xmlp[0])

    # -- lifetime ----------------------------------------------------------
    def close(self) -> None:
        """Local: drop one reference; at zero destroy (an adopted copy is just
        unmapped). Closing a closed topology is a no-op."""
        if self._h == ffi.NULL:
            return
        self._refs -= 1
        if self._refs <= 0:
            self._destroy()

    def _add_reference(self) -> None:
        """One more holder: close() must run once more before it is destroyed."""
        self._refs += 1

    def _destroy(self) -> None:
        handle, self._h = self._h, ffi.NULL
        self._refs = 0
        _open_topologies.discard(self)
        if self._on_destroy is not None:
            self._on_destroy(self)
        lib.shmtopo_topo_destroy(handle)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __setattr__(self, name: str, value: Any) -> None:
        if not name.startswith("_"):
            raise AttributeError(f"Topology is read-only (cannot set {name!r})")
        object.__setattr__(self, name, value)

    def __repr__(self) -> str:
        if self.closed:
            return "<shmtopo.Topology closed>"
        return f"<shmtopo.Topology from {self._source}, depth {self.depth}, {self.nbobjs('pu')} PUs>"


@atexit.register
def _destroy_all() -> None:
    """Destroy every topology still open before the interpreter goes away."""
    for topo in list(_open_topologies):
        topo._destroy()


# -- native loads ------------------------------------------------------------
def _load_xml(xml: bytes, here: bool = False, io: int = 0) -> Any:
    """here: XML from this machine (a rank of the node), binding then works."""
    out = ffi.new("void **")
    check(lib.shmtopo_topo_load_xml_io(xml, len(xml), 1 if here else 0, io, out))
    return out[0]


# -- splitting a comm by topology -------------------------------------------------
def split_color(topo: Topology, by: str) -> int:
    """Which object of type ``by`` this process belongs to: the one holding
    its whole binding; if the binding spans several (an unbound process),
    the one holding the CPU it last ran on. 0 for every rank when the type
    has no objects here; ``nbobjs`` when no object holds the CPU."""
    objs = topo.objects(by)
    if not objs:
        return 0
    bound = topo.get_cpubind()
    for i, obj in enumerate(objs):
        if bound and bound <= obj.cpuset:
            return i
    where = topo.get_last_cpu_location()
    for i, obj in enumerate(objs):
        if where and where <= obj.cpuset:
            return i
    return len(objs)


_LEVEL = re.compile(r"(?:[A-Za-z]\w*:)?(\d+)")


def _synthetic_pus(description: str) -> int:
    """The PUs a synthetic description makes: the product of its levels'
    counts (attributes in parentheses and memory children in brackets
    aside). hwloc judges what this does not read as a level."""
    pus = 1
    for token in re.sub(r"\([^)]*\)|\[[^\]]*\]", " ", description).split():
        level = _LEVEL.fullmatch(token)
        if level:
            pus *= int(level.group(1))
    return pus
