"""Topology: the node's hwloc topology, read-only, shared by all ranks.

:func:`share_topology` has one rank (the leader, rank 0 of the comm) load
the topology and write it into a file with hwloc's shmem API; every rank then
maps that file at one virtual address, chosen inside the intersection of all
ranks' free address ranges. Adopting costs microseconds and no private
memory. When that fails on any rank (the address got taken meanwhile), all
ranks agree, retry at another address, then fall back to an XML broadcast,
then to a local load; ``topo.source`` says which path ("shmem", "xml",
"local") this rank's copy came from.

Costs seen with hwloc 2.8/2.9: an adopt takes 20-90 us, but hwloc
initialises its components (dlopen of its plugins, about 3 ms) whenever a
process holds no other topology, in adopt as in load. The leader never writes
from an adopted copy: hwloc's write updates its source, a segfault there.

A :class:`Topology` has no method that modifies it: an adopted topology lives
in read-only shared memory, where hwloc would segfault on a write. Objects
returned by :meth:`Topology.objects` are views that stay valid until the
topology is closed; after that every call raises :class:`FreedError`.
"""
from __future__ import annotations

import atexit
import errno as _errno
import weakref
from typing import TYPE_CHECKING, Any, Callable

from ._native import ffi, lib
from .errors import FreedError, ShmtopoValueError, check

if TYPE_CHECKING:
    from .comm import Comm

SOURCES = ("shmem", "xml", "local")  # in the order of enum shmtopo_topo_source, after auto
#: Addresses tried before falling back to XML.
ATTEMPTS = 3


# -- types --------------------------------------------------------------------
def type_number(name: str) -> int:
    """hwloc's number for a type name; ShmtopoValueError for an unknown one."""
    if not isinstance(name, str):
        raise ShmtopoValueError(f"topology object type must be a name, not {name!r}")
    out = ffi.new("int *")
    check(lib.shmtopo_topo_type_from_name(name.encode(), out))
    return out[0]


def _type_name(number: int) -> str:
    return ffi.string(lib.shmtopo_topo_type_name(number)).decode()


def _known(name: str) -> bool:
    return lib.shmtopo_topo_type_from_name(name.encode(), ffi.new("int *")) == 0


#: The usual type names this hwloc knows ("die" needs hwloc >= 2.1).
TYPES = tuple(n for n in ("machine", "package", "die", "numanode", "group", "l3", "l2", "l1", "core", "pu")
              if _known(n))


def hwloc_version() -> str:
    """libhwloc's API version in use (all ranks of a node must share it)."""
    return ffi.string(lib.shmtopo_hwloc_version()).decode()


def _index_set(fill: Callable[[Any, int, Any], int]) -> set[int]:
    """Call ``fill(out, max, countp)`` with a growing buffer until it fits."""
    cap = 64
    while True:
        out = ffi.new("unsigned[]", cap)
        count = ffi.new("size_t *")
        rc = fill(out, cap, count)
        if rc < 0 and ffi.errno == _errno.ENOBUFS and count[0] > cap:
            cap = count[0]
            continue
        check(rc)
        return set(out[0:count[0]])


# -- objects -------------------------------------------------------------------
class TopoObject:
    """One hwloc object, read-only; valid while its topology is open."""

    __slots__ = ("_topo", "_h", "_info")

    def __init__(self, topo: "Topology", handle: Any):
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

    @property
    def type(self) -> str:
        return _type_name(self._field("type"))

    @property
    def depth(self) -> int:
        """Level in the tree (0: Machine); negative for NUMA nodes."""
        return self._field("depth")

    @property
    def os_index(self) -> int | None:
        idx = self._field("os_index")
        return None if idx < 0 else idx

    @property
    def logical_index(self) -> int:
        return self._field("logical_index")

    @property
    def local_memory(self) -> int:
        """Bytes of a NUMA node's own memory (0 for other objects)."""
        return self._field("local_memory")

    @property
    def total_memory(self) -> int:
        """Bytes of all NUMA nodes below this object."""
        return self._field("total_memory")

    def _set(self, which: int) -> set[int]:
        h = self._handle()
        return _index_set(lambda out, cap, count: lib.shmtopo_obj_set(h, which, out, cap, count))

    def _set_str(self, which: int) -> str:
        h = self._handle()
        need = check(lib.shmtopo_obj_set_str(h, which, ffi.NULL, 0))
        buf = ffi.new("char[]", need + 1)
        check(lib.shmtopo_obj_set_str(h, which, buf, need + 1))
        return ffi.string(buf).decode()

    @property
    def cpuset(self) -> set[int]:
        """OS indices of the PUs (hardware threads) inside the object."""
        return self._set(0)

    @property
    def cpuset_str(self) -> str:
        """hwloc's string form of the cpuset, e.g. ``0x0000000f``."""
        return self._set_str(0)

    @property
    def nodeset(self) -> set[int]:
        """OS indices of the NUMA nodes near the object."""
        return self._set(1)

    @property
    def parent(self) -> "TopoObject | None":
        out = ffi.new("void **")
        check(lib.shmtopo_obj_parent(self._handle(), out))
        return None if out[0] == ffi.NULL else TopoObject(self._topo, out[0])

    @property
    def children(self) -> list["TopoObject"]:
        """Normal children in logical order, then memory children (NUMA nodes)."""
        h = self._handle()
        out = ffi.new("void **")
        kids = []
        for i in range(self._info.arity + self._info.memory_arity):
            check(lib.shmtopo_obj_child(h, i, out))
            kids.append(TopoObject(self._topo, out[0]))
        return kids

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TopoObject) and self._h == other._h

    def __hash__(self) -> int:
        return hash(int(ffi.cast("uintptr_t", self._h)))

    def __repr__(self) -> str:
        if self._topo.closed:
            return "<shmtopo.TopoObject of a closed topology>"
        return f"<{self.type} L#{self.logical_index} P#{self.os_index} cpuset {self.cpuset_str}>"


# -- topology ------------------------------------------------------------------
_open_topologies: "weakref.WeakSet[Topology]" = weakref.WeakSet()
_shared: "Topology | None" = None  # the one shared topology of this process


class Topology:
    """A read-only hwloc topology.

    Get the node's shared one with :func:`share_topology` (collective), or a
    private one with :meth:`load`. There is no mutating API. ``close()`` is
    local; a shared topology is reference counted (each ``share_topology``
    call adds one, each ``close()`` drops one) and destroyed at zero.
    """

    __slots__ = ("_h", "_source", "_refs", "_address", "_length", "_attempts", "_adopt_seconds", "__weakref__")

    def __init__(self, handle: Any, source: str, *, address: int | None = None,
                 length: int | None = None, attempts: int = 0, adopt_seconds: float | None = None):
        self._h = handle
        self._source = source
        self._refs = 1
        self._address = address
        self._length = length
        self._attempts = attempts
        self._adopt_seconds = adopt_seconds
        _open_topologies.add(self)

    @classmethod
    def load(cls) -> "Topology":
        """Local: discover this machine's topology into private memory."""
        return cls(_load_local(), "local")

    @classmethod
    def from_xml(cls, xml: str | bytes, *, this_system: bool = False) -> "Topology":
        """Local: a private topology from hwloc XML text. this_system: the XML
        describes this machine, so binding queries work on it."""
        data = xml.encode() if isinstance(xml, str) else bytes(xml)
        return cls(_load_xml(data, here=this_system), "xml")

    @property
    def _handle(self) -> Any:
        if self._h == ffi.NULL:
            raise FreedError("the topology has been closed", _errno.EBADF)
        return self._h

    # -- provenance --------------------------------------------------------
    @property
    def source(self) -> str:
        """How this rank got it: "shmem" (adopted), "xml" or "local"."""
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
        return self._h == ffi.NULL

    # -- queries -----------------------------------------------------------
    @property
    def depth(self) -> int:
        """Levels of normal objects, Machine down to PU."""
        return check(lib.shmtopo_topo_depth(self._handle))

    def nbobjs(self, type: str) -> int:
        """Objects of a type ("machine", "package", "numanode"/"numa", "l3",
        "l2", "l1", "core", "pu", "group", "die", or an hwloc type string).
        An unknown name raises ShmtopoValueError."""
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

    @property
    def root(self) -> TopoObject:
        out = ffi.new("void **")
        check(lib.shmtopo_topo_root(self._handle, out))
        return TopoObject(self, out[0])

    def counts(self) -> dict[str, int]:
        """nbobjs for every name in TYPES."""
        return {name: self.nbobjs(name) for name in TYPES}

    def get_cpubind(self) -> set[int]:
        """PU os indices the calling process is bound to (all PUs if unbound)."""
        h = self._handle
        return _index_set(lambda out, cap, count: lib.shmtopo_topo_cpubind(h, 0, out, cap, count))

    def get_last_cpu_location(self) -> set[int]:
        """The PU the calling thread last ran on (may change at any time)."""
        h = self._handle
        return _index_set(lambda out, cap, count: lib.shmtopo_topo_cpubind(h, 1, out, cap, count))

    def color_of_this_process(self, by: str) -> int:
        """Index of the object of type ``by`` this process runs in (see
        :func:`split_color`), for splitting a comm by topology."""
        return split_color(self, by)

    def xml(self) -> str:
        """hwloc XML export."""
        xmlp, lenp = ffi.new("char **"), ffi.new("size_t *")
        check(lib.shmtopo_topo_export_xml(self._handle, xmlp, lenp))
        try:
            return ffi.unpack(xmlp[0], lenp[0]).decode()
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

    def _destroy(self) -> None:
        global _shared
        handle, self._h = self._h, ffi.NULL
        self._refs = 0
        _open_topologies.discard(self)
        if _shared is self:
            _shared = None
        lib.shmtopo_topo_destroy(handle)

    def __enter__(self) -> "Topology":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
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
def _load_local() -> Any:
    out = ffi.new("void **")
    check(lib.shmtopo_topo_load_local(out))
    return out[0]


def _load_xml(xml: bytes, here: bool = False) -> Any:
    """here: XML from this machine (a rank of the node), binding then works."""
    out = ffi.new("void **")
    load = lib.shmtopo_topo_load_xml_here if here else lib.shmtopo_topo_load_xml
    check(load(xml, len(xml), out))
    return out[0]


# -- share_topology ------------------------------------------------------------
def _source_number(name: Any) -> int:
    if not isinstance(name, str):
        raise ShmtopoValueError(f"topology source must be a name, not {name!r}")
    out = ffi.new("int *")
    check(lib.shmtopo_topo_source_from_name(name.encode(), out))
    return out[0]


def _share_opts(source: Any, attempts: Any, have: bool, conflict_rank: Any):
    opts = ffi.new("shmtopo_topo_share_opts_t *")
    opts.source = -1 if source is None else _source_number(source)
    if isinstance(attempts, bool) or not isinstance(attempts, int) or not 1 <= attempts <= 64:
        raise ShmtopoValueError(f"attempts must be an integer in [1, 64], not {attempts!r}")
    opts.attempts = attempts
    opts.have = have
    opts.conflict_rank = -1 if conflict_rank is None else int(conflict_rank)
    return opts


def share_topology(comm: "Comm", *, source: str | None = None, attempts: int = ATTEMPTS,
                   _conflict_rank: int | None = None) -> Topology:
    """Collective over ``comm``: this node's topology, read-only.

    The leader (rank 0) loads it and writes it to a shared file under
    ``/dev/shm`` (or ``$SHMTOPO_TOPO_DIR``), named after its pid and the
    hwloc version; every rank maps it at one common address and the leader
    removes the name at once. On failure on any rank, all ranks retry at
    another address (``attempts`` in all), then share XML, then load
    locally. The protocol runs in the native core, each step an agreement of
    the comm: a bad argument or a failure on any rank is every rank's.

    source: "auto" (default, or ``$SHMTOPO_TOPO_SOURCE``) runs that chain;
        "shmem", "xml" or "local" takes only that path and raises if it fails.
    _conflict_rank: for tests (also ``$SHMTOPO_TOPO_CONFLICT_RANK``): that rank
        maps a page at the first chosen address, so the first attempt fails.

    A process holds at most one shared topology: while one is open, further
    calls return it with one more reference; ``close()`` each.
    """
    global _shared
    held = _shared if _shared is not None and not _shared.closed else None
    from .agreement import normalised

    opts = normalised(comm, lib.SHMTOPO_KIND_TOPO_SHARE, _share_opts, source, attempts, held is not None,
                      _conflict_rank)
    out = ffi.new("void **")
    info = ffi.new("shmtopo_topo_share_info_t *")
    check(lib.shmtopo_topo_share(comm.handle, opts, out, info))
    if held is not None:
        held._refs += 1
        return held
    how = SOURCES[info.source - 1]
    shmem = how == "shmem"
    topo = Topology(out[0], how, address=int(info.address) if shmem else None,
                    length=int(info.length) if shmem else None, attempts=info.attempts,
                    adopt_seconds=info.adopt_seconds if shmem else None)
    _shared = topo
    return topo


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
