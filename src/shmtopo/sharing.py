"""One copy per node: data given on one rank comes back on every rank of the
job, read-only, from memory the ranks of each node share.

:func:`share` takes a numpy array (any dtype, shape, order, size) or any
picklable object (pickle protocol 5: its out-of-band buffers, the arrays
inside, are placed in the shared memory, the rest is unpickled on each
rank). :func:`shared_array` makes a writable node-shared array that the
ranks fill in place; :func:`share` of it (on the root) then makes it
read-only and copies it to the other nodes, with no private copy anywhere.

Where the data lives. Every share starts with one bcast of a fixed header
(a few KiB): the root's verdict on its object (or why it cannot be shared),
the size, and the data itself when it is small (up to ``INLINE`` bytes).
Up to ``SMALL`` bytes the data follows by a second bcast into each rank's
private memory: small shares cost no segment, no file descriptor and no
mapping, so any number of them can live. Above, the data lives in one
segment per node: a contiguous window of the comm (window.py: the same
allocation, admission against free memory, placement and huge pages, the
same names unlinked once every rank mapped them) whose parts lie back to
back and together hold the data: each rank faults its slice of the pages
in at the allocation, in parallel. The root copies its data into the
segment once; across nodes the leaders move it through MPI in chunks, each
receiving straight into its node's segment. The window is then freed at once: its mappings belong to
numpy (Window's disowned mappings), so the memory lives as long as any
rank of the node holds a view of it, and goes with the last one; nothing
is left to free collectively. Each rank makes its mapping read-only
(mprotect) before it returns: a write raises in numpy and faults, instead
of changing the data under the other ranks, in anything else.

Errors are decided before any rank maps anything: the header says on every
rank what the root found (nothing given, an object that cannot be pickled),
the header's bcast agrees on the root, the window's allocation on the room
left in memory and /dev/shm; a death raises PeerDeadError on every survivor.
"""
from __future__ import annotations

import ctypes
import math
import mmap
import pickle
import struct
import weakref
import zlib
from typing import Any, Callable, NamedTuple

import numpy as np
import numpy.typing as npt

from . import _oob
from ._fastpath import bind_share, claim, share_small, unclaim
from ._base import CommLike, Held
from ._types import BCAST
from ._native import lib
from .agreement import agree, heard_of, leave, normalised
from .coll.across import run_across_nodes
from .coll.node import checked, native_barrier, node_bcast, node_scatter
from .errors import PeerDeadError, ShmtopoArgumentError, ShmtopoOSError, ShmtopoValueError

#: the header every share starts with: uint64 words (a count no other call
#: of the library bcasts, so that a share facing a plain bcast on another
#: rank fails their agreement)
HEADER_WORDS = 263
#: the header's fields: tier, data bytes, description bytes (0: an array the
#: header describes itself), shared_array number, error code, dtype (its
#: numpy name, up to 8 bytes), ndim | F order << 8, unused; then up to
#: _MAX_DIMS extents; then the inline data
_FIELDS = struct.Struct("<8Q")
#: their names, in order (the C entry of small shares finds the ones it reads by name)
_FIELD_NAMES = ("tier", "nbytes", "described", "number", "error", "word", "dims", "scattered")
_MAX_DIMS = 8
_FIXED = 8 + _MAX_DIMS  # words before the inline data
#: the extents of an array of n dimensions, and the fields followed by them
_SHAPES = [struct.Struct(f"<{n}Q") for n in range(_MAX_DIMS + 1)]
_FIELDS_AND_SHAPES = [struct.Struct(f"<{8 + n}Q") for n in range(_MAX_DIMS + 1)]
_HEADER_BYTES = HEADER_WORDS * 8
#: data up to this many bytes travels inside the header
INLINE = (HEADER_WORDS - _FIXED) * 8
#: data up to this many bytes is sent by a bcast into private memory; above,
#: it lives in node-shared memory
SMALL = 64 * 1024
#: bytes per MPI call between node leaders (MPI counts are C ints)
CHUNK = 1 << 30
#: alignment of every buffer inside the data (numpy needs at most 16)
ALIGN = 64

# tiers
_ERROR, _INLINE, _BCAST, _SEGMENT, _IN_PLACE = 1, 2, 3, 4, 5
# error codes in an _ERROR header
_VALUE, _ARGUMENT = 1, 2


class ShareInfo(NamedTuple):
    """Where a share's data lives (:func:`share_info`)."""
    nbytes: int                   #: bytes of the share's data on this node
    nnodes: int                   #: nodes of the job: one copy on each
    backend: str                  #: "posix", "memfd", ...
    placement: str                #: "local" or "interleave"
    placement_report: list[str]   #: per rank of the node, how its slice of the pages was placed
    huge_pages: str | None        #: None, "hugetlb" or "transparent"
    page_size: int                #: bytes per page of the segment

    def __str__(self) -> str:
        return (f"{self.nbytes} bytes in node shared memory (one copy on each of {self.nnodes} node"
                f"{'s' if self.nnodes > 1 else ''}), a {self.backend} segment faulted in by the node's "
                f"{len(self.placement_report)} rank{'s' if len(self.placement_report) > 1 else ''} "
                f"({self.placement_report[0]}), pages of {self.page_size} bytes"
                + (f" ({self.huge_pages} huge pages)" if self.huge_pages else ""))


# ---- the mappings this process holds for shares --------------------------------

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_libc.mprotect.restype = ctypes.c_int
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.mmap.restype = ctypes.c_void_p
_libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_libc.madvise.restype = ctypes.c_int
_MADV_POPULATE_WRITE = 23  # Linux 5.14

# start address of a mapping -> (the mapping, the share's info); the entry
# goes with the mapping (a weak reference's callback)
_segments: dict[int, tuple[weakref.ref[Any], ShareInfo, int]] = {}


def _address(a: npt.NDArray[Any]) -> int:
    return int(a.__array_interface__["data"][0])


def _mapping_of(part: npt.NDArray[Any]) -> npt.NDArray[np.uint8]:
    """The whole mapping a window's part is a slice of (numpy keeps the
    array that owns the mapping as the base of every view of it)."""
    base = part
    while isinstance(base.base, np.ndarray):
        base = base.base
    return base


def _protect(mapping: npt.NDArray[np.uint8], prot: int) -> None:
    if _libc.mprotect(_address(mapping), mapping.size, prot) != 0:
        err = ctypes.get_errno()
        raise ShmtopoOSError(f"mprotect of a share's mapping failed", err)


def _remember(mapping: npt.NDArray[np.uint8], info: ShareInfo, serial: int) -> None:
    start = _address(mapping)
    _segments[start] = (weakref.ref(mapping, lambda _: _segments.pop(start, None)), info, serial)


def _entry(obj: Any) -> tuple[int, npt.NDArray[np.uint8], ShareInfo, int] | None:
    """The mapping an array's data lies in: (start, mapping, info, serial)."""
    if not isinstance(obj, np.ndarray) or obj.size == 0:
        return None
    where = _address(obj)
    for start, (ref, info, serial) in list(_segments.items()):
        mapping = ref()
        if mapping is not None and start <= where < start + mapping.size:
            return start, mapping, info, serial
    return None


def share_info(obj: Any) -> ShareInfo | None:
    """Local: where the data of an array returned by :func:`share` (or of an
    array inside an object it returned) lives: a :class:`ShareInfo` for
    data in node shared memory, None for data that is not (small shares
    come as private copies)."""
    entry = _entry(obj)
    return None if entry is None else entry[2]


# ---- what the root sends -----------------------------------------------------------

def _round(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


class _Payload:
    """The data of one share, laid out as it will lie in memory: its buffers
    (each at an ALIGN-aligned offset), then the description that says how
    to rebuild the object from them (none for an array the header
    describes: its bytes alone)."""

    def __init__(self, descr: Any, sources: list[Callable[[npt.NDArray[np.uint8]], None]], lengths: list[int]):
        self.offsets: list[int] = []
        end = 0
        for n in lengths:
            self.offsets.append(end)
            end = _round(end + n)
        if descr is None:
            self.descr, self.nbytes = b"", sum(lengths)
        else:
            self.descr = pickle.dumps((descr, list(zip(self.offsets, lengths))), protocol=5)
            self.nbytes = end + len(self.descr)
        self.lengths, self.sources = lengths, sources
        self.contiguous: npt.NDArray[np.uint8] | None = None  # its bytes, where one run of the root's memory

    def write(self, dest: npt.NDArray[np.uint8]) -> None:
        """Copy the data into dest (nbytes, uint8): one copy of each buffer."""
        for source, offset, n in zip(self.sources, self.offsets, self.lengths):
            source(dest[offset:offset + n])
        if self.descr:
            dest[self.nbytes - len(self.descr):self.nbytes] = np.frombuffer(self.descr, np.uint8)


def _plain_array(obj: Any) -> bool:
    return type(obj) in (np.ndarray, np.memmap) and not obj.dtype.hasobject


# dtype <-> the header's dtype word, for dtypes numpy names in 8 bytes or less
_WORD_OF: dict[np.dtype[Any], int] = {}
_DTYPE_OF: dict[int, np.dtype[Any]] = {}


def _dtype_word(dt: np.dtype[Any]) -> int:
    """The header's word for dt, or 0 when a description must say it."""
    word = _WORD_OF.get(dt)
    if word is None:
        name = dt.str.encode()
        simple = dt.fields is None and dt.subdtype is None and len(name) <= 8 and np.dtype(dt.str) == dt
        word = _WORD_OF[dt] = int.from_bytes(name.ljust(8, b"\0"), "little") if simple else 0
        if word:
            _DTYPE_OF[word] = dt
    return word


def _dtype_of(word: int) -> np.dtype[Any]:
    dt = _DTYPE_OF.get(word)
    if dt is None:
        dt = _DTYPE_OF[word] = np.dtype(word.to_bytes(8, "little").rstrip(b"\0").decode())
    return dt


bind_share(HEADER_WORDS, _FIXED, _FIELD_NAMES, _INLINE, _dtype_word, np.frombuffer)


def _order(a: npt.NDArray[Any]) -> str:
    """How an array's bytes are laid out in a share: as it is when
    F-contiguous only, else in C order."""
    return "F" if a.flags.f_contiguous and not a.flags.c_contiguous else "C"


def _array_payload(a: npt.NDArray[Any], described: bool) -> _Payload:
    dtype, shape, order = a.dtype, a.shape, _order(a)

    def write(dest: npt.NDArray[np.uint8]) -> None:
        np.copyto(_typed(dest, dtype, shape, order), a, casting="no")
    payload = _Payload(("array", dtype, shape, order) if described else None, [write], [a.nbytes])
    if not described and (a.flags.c_contiguous or a.flags.f_contiguous) and a.nbytes:
        payload.contiguous = a.reshape(-1, order="A").view(np.uint8)  # its memory, in the share's order
    return payload


def _object_payload(obj: Any) -> _Payload:
    buffers: list[pickle.PickleBuffer] = []
    try:
        stream = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
        raws = [b.raw() for b in buffers]
    except Exception as exc:  # noqa: BLE001 - every rank hears of it
        raise ShmtopoArgumentError(f"share: the root's object cannot be pickled: {type(exc).__name__}: {exc}",
                                   22) from None

    def copier(raw: memoryview) -> Callable[[npt.NDArray[np.uint8]], None]:
        def write(dest: npt.NDArray[np.uint8]) -> None:
            dest[...] = np.frombuffer(raw, np.uint8)
        return write
    raws.insert(0, memoryview(stream))
    return _Payload(("object",), [copier(r) for r in raws], [r.nbytes for r in raws])


def _typed(data: npt.NDArray[np.uint8], dtype: np.dtype[Any], shape: tuple[int, ...],
           order: str) -> npt.NDArray[Any]:
    if dtype.itemsize == 0 or 0 in shape:
        return np.empty(shape, dtype, order="F" if order == "F" else "C")
    return data.view(dtype).reshape(shape, order="F" if order == "F" else "C")


def _rebuilt(data: npt.NDArray[np.uint8], nbytes: int, descr_len: int) -> Any:
    """The object of a share from its data (read-only, nbytes long) and its
    description: an array viewing it, or the unpickled object whose buffers
    view it."""
    descr, table = pickle.loads(memoryview(data[nbytes - descr_len:nbytes]))  # type: ignore[arg-type]
    if descr[0] == "array":
        _, dtype, shape, order = descr
        (offset, n), = table
        out = _typed(data[offset:offset + n], dtype, shape, order)
        out.flags.writeable = False
        return out
    views = [memoryview(data[offset:offset + n]) for offset, n in table]  # type: ignore[arg-type]
    return pickle.loads(views[0], buffers=views[1:])


# ---- the comm's shares ----------------------------------------------------------

class _Writable(NamedTuple):
    """A shared_array not yet shared: its window (on this node) and dtype."""
    win: Any
    dtype: np.dtype[Any]
    shape: tuple[int, ...]
    order: str


#: shared_arrays made and not yet shared, on any comm: while there are some,
#: a root's small array may be one of them, to share where it lies, so the
#: small-array path (which copies it into the header) waits
_writable_pending = 0


class _State:
    """What a comm keeps for shares (attached to it): the writable arrays of
    shared_array, by the number every rank gave the same one."""

    def __init__(self) -> None:
        self.next_id = 1
        self.writable: dict[int, _Writable] = {}
        self.serial = 0  # segment shares made so far

    def find(self, a: Any) -> int:
        """The number of the writable array a is (all of it), or 0."""
        if not isinstance(a, np.ndarray) or not (a.flags.c_contiguous or a.flags.f_contiguous):
            return 0
        for number, w in self.writable.items():
            part = _region(w.win)
            if a.nbytes and _address(part) == _address(a) and part.size == a.nbytes:
                return number
        return 0


_KEY = object()


def _state(comm: CommLike) -> _State:
    state = comm.attributes.get(_KEY)
    if state is None:
        state = _State()
        comm.attributes.set(_KEY, state, free=_forget_writable, abandon=_forget_writable)
    return state  # type: ignore[no-any-return]


def _forget_writable(state: _State) -> None:
    global _writable_pending
    _writable_pending -= len(state.writable)
    state.writable.clear()  # the comm frees its windows itself


# ---- share -------------------------------------------------------------------------

def share(comm: CommLike, obj: Any, root: int = 0, *, placement: str | None = None,
          huge_pages: bool | str = False) -> Any:
    """Collective over the comm's job: every rank gets the root's ``obj``
    (the others pass None), read-only, with one copy of its data per node.

    A numpy array comes back as a read-only array of the same dtype, shape
    and order viewing the node's shared memory; any other object is pickled
    (protocol 5) on the root and unpickled on every rank, the arrays inside
    viewing the node's shared memory, read-only. An array made by
    :func:`shared_array` is made read-only where it lies and copied to the
    other nodes only. placement, huge_pages: as for ``Comm.allocate``, for
    the node's segment (data over SMALL bytes). Nothing to free: the memory
    goes when the last view of it on the node does.

    Raises on every rank, before any rank maps anything: ShmtopoValueError
    when the root passed None, when ranks name different roots, or a root
    outside the job; ShmtopoArgumentError (a TypeError too) when the root's
    object cannot be pickled, with pickle's message; ShmtopoMemoryError when
    the data does not fit in the node's memory or /dev/shm. PeerDeadError
    on every survivor when a rank dies meanwhile.
    """
    address = comm.address
    claim(address, 0)  # as Held, without its two Python calls: small shares are common
    try:
        # a small array, in one C call (which bcasts the header on every rank but where it declines at once)
        done = share_small(comm.fast_handle, obj if not _writable_pending else None, root)
        if done is None:
            return _share(comm, obj, root, placement, huge_pages)
        if type(done) is tuple:  # (a copy that owns its memory: what views it can never be made writeable)
            return _share(comm, obj, root, placement, huge_pages, header=done[0].copy())
        return done
    except PeerDeadError as exc:
        heard_of(comm, exc)  # the other nodes may wait in MPI, where only news reaches
        raise
    finally:
        unclaim(address, 0)


def _share(comm: CommLike, obj: Any, root: int, placement: str | None, huge_pages: bool | str,
           header: Any = None) -> Any:
    """share's steps (this thread holds the comm), from the header's bcast
    or, given the header, from what follows it."""
    payload = None
    if header is None:
        header = _small_array_header(obj) if comm.world_rank == root and not _writable_pending else None
        if header is None:
            header = np.empty(HEADER_WORDS, np.uint64)  # (numpy arrays are buffers; its stubs do not say so)
            if comm.world_rank == root:
                payload = _root_header(comm, obj, root, header)
        comm.bcast(header, root=root, out=header)  # type: ignore[attr-defined]
    tier, nbytes, descr_len, number, code, word, dims, scattered = _FIELDS.unpack_from(header)
    if tier == _INLINE and not descr_len and not dims >> 8:  # a small C-ordered array: the common case
        dt = _dtype_of(word)
        # on a read-only memoryview (np.ndarray(buffer=) would see through it to the header): nobody can
        # make it writeable again
        out = np.frombuffer(memoryview(header).toreadonly(), dt, nbytes // dt.itemsize, _FIXED * 8)
        return out if dims == 1 else out.reshape(_SHAPES[dims].unpack_from(header, 64))
    if tier == _ERROR:
        message = header[_FIXED:].view(np.uint8)[:nbytes].tobytes().decode(errors="replace")
        raise (ShmtopoArgumentError if code == _ARGUMENT else ShmtopoValueError)(message, 22, root)
    if tier == _IN_PLACE:
        return _publish(comm, root, number, nbytes)
    if tier == _INLINE:
        header.flags.writeable = False
        data = header[_FIXED:].view(np.uint8)[:nbytes]
    elif tier == _BCAST:
        data = np.empty(nbytes, np.uint8)
        if payload is not None:
            payload.write(data)
        comm.bcast(data, root=root, out=data)  # type: ignore[attr-defined]
    else:
        data = _segment(comm, root, nbytes, payload, placement, huge_pages, bool(scattered))
    data.flags.writeable = False
    if descr_len:
        return _rebuilt(data, nbytes, descr_len)
    shape = _SHAPES[dims & 0xFF].unpack_from(header, 64)
    out = _typed(data, _dtype_of(word), shape, "F" if dims >> 8 else "C")
    out.flags.writeable = False
    return out


def _small_array_header(obj: Any) -> Any:
    """On the root: the header of a small C-contiguous array of a plain
    dtype, its data inside (_root_header does it all, this faster); None
    for anything else."""
    if type(obj) is not np.ndarray or obj.nbytes > INLINE or obj.ndim > _MAX_DIMS:
        return None
    word = _WORD_OF.get(obj.dtype)
    if not word or not obj.flags.c_contiguous:
        return None
    buf = bytearray(_HEADER_BYTES)
    _FIELDS_AND_SHAPES[obj.ndim].pack_into(buf, 0, _INLINE, obj.nbytes, 0, 0, 0, word, obj.ndim, 0, *obj.shape)
    buf[_FIXED * 8:_FIXED * 8 + obj.nbytes] = obj.tobytes()
    return np.frombuffer(buf, np.uint64)


def _root_header(comm: CommLike, obj: Any, root: int, header: Any) -> _Payload | None:
    """On the root: the header of its object (its data too when small), or
    of why it cannot be shared; what is still to send."""
    word = dims = number = 0
    try:
        if obj is None:
            raise ShmtopoValueError(f"share: the root (rank {root}) passed None: nothing to share")
        if _plain_array(obj):
            state = comm.attributes.get(_KEY)
            number = state.find(obj) if state is not None else 0
            word = _dtype_word(obj.dtype) if obj.ndim <= _MAX_DIMS else 0
            payload = _array_payload(obj, not word)
            if word:
                dims = obj.ndim | (_order(obj) == "F") << 8
                _SHAPES[obj.ndim].pack_into(header, 64, *obj.shape)
        else:
            payload = _object_payload(obj)
    except Exception as exc:  # noqa: BLE001 - sent to every rank, raised there
        if not isinstance(exc, ShmtopoValueError):
            exc = ShmtopoValueError(f"share: the root failed: {type(exc).__name__}: {exc}")
        message = str(exc).encode()[:INLINE]
        code = _ARGUMENT if isinstance(exc, ShmtopoArgumentError) else _VALUE
        _FIELDS.pack_into(header, 0, _ERROR, len(message), 0, 0, code, 0, 0, 0)
        header[_FIXED:].view(np.uint8)[:len(message)] = np.frombuffer(message, np.uint8)
        return None
    except BaseException:
        leave(comm)  # Ctrl-C: the peers must not wait for this rank's header
        raise
    if number:
        tier = _IN_PLACE
    elif payload.nbytes <= INLINE:
        tier = _INLINE
        payload.write(header[_FIXED:].view(np.uint8))
    else:
        tier = _BCAST if payload.nbytes <= SMALL else _SEGMENT
    scattered = tier == _SEGMENT and payload.contiguous is not None
    _FIELDS.pack_into(header, 0, tier, payload.nbytes, len(payload.descr), number, 0, word, dims, scattered)
    return None if tier in (_INLINE, _IN_PLACE) else payload


def _slice(nbytes: int, rank: int, size: int) -> int:
    """This rank's part of the node's segment: each rank faults its part of
    the pages in, in parallel (and near itself), at the allocation. Equal
    parts (the last one with the remainder), so that a scatter can fill
    them (_scatter_in)."""
    part = nbytes // size
    return part if rank < size - 1 else nbytes - part * (size - 1)


def _map_in(part: npt.NDArray[np.uint8]) -> None:
    """Map the pages the other ranks faulted in into this rank's page
    tables at once (MADV_POPULATE_WRITE), before writing them all: one
    call instead of a fault per page. Best effort: older kernels refuse."""
    page = mmap.PAGESIZE
    start = _address(part) // page * page
    end = -(-(_address(part) + part.size) // page) * page
    _libc.madvise(start, end - start, _MADV_POPULATE_WRITE)


def _region(win: Any) -> npt.NDArray[np.uint8]:
    """The data of a contiguous window whose parts lie back to back: all of it."""
    return win.all.reshape(-1)  # type: ignore[no-any-return]


def _segment(comm: CommLike, root: int, nbytes: int, payload: _Payload | None, placement: str | None,
             huge_pages: bool | str, scattered: bool) -> npt.NDArray[np.uint8]:
    """The data in a segment of this node (on the root's node the root
    writes it, or every rank copies its own part of the root's bytes
    where they are one run of its memory; the leaders carry it across
    nodes): this rank's read-only view of it."""
    allocate: Any = comm.allocate
    win = allocate(_slice(nbytes, comm.rank, comm.size), contiguous=True, placement=placement,
                   huge_pages=huge_pages)
    try:
        part = _region(win)
        plan = comm.plan
        here = plan.node_of[root] == plan.node_index
        writer = plan.local_of[root] if here else 0
        if here and scattered:
            _scatter_in(comm, part, payload, writer)
        elif payload is not None:
            _map_in(part)
            payload.write(part)
        if comm.nnodes > 1:
            _node_sync(comm, writer)  # the root's data there for its node's leader
            run_across_nodes(comm, _leaders_bcast, part, root)
            writer = 0
        _node_sync(comm, writer)  # the data there for every rank
        return _keep(comm, win, part)
    except BaseException:
        win.abandon()
        raise


def _scatter_in(comm: CommLike, data: npt.NDArray[np.uint8], payload: _Payload | None, writer: int) -> None:
    """Every rank of the root's node copies its own part of the root's
    bytes (payload.contiguous, on the root) into the node's segment `data`:
    with single copy, straight from the root's memory, all at once, each
    into the pages it faulted in itself. The root writes the remainder; a
    barrier then waits for every part."""
    size = comm.size
    part = _slice(data.size, 0, size)  # every rank's but the last one's, which holds the remainder too
    source = None if payload is None else payload.contiguous
    node_scatter(comm, source, data[comm.rank * part:(comm.rank + 1) * part], writer)
    if source is not None:
        data[part * size:] = source[part * size:]
    checked(native_barrier(comm.handle))


def _node_sync(comm: CommLike, writer: int) -> None:
    """Node-local: every rank of the node waits until `writer` (a rank of
    the node) has come, and then sees its stores. A wait of the comm, not of
    the window: news of a death on another node reaches it (NodePlan.news
    leaves the comm naming the dead rank)."""
    node_bcast(comm, np.zeros(1, np.uint8), writer)


def _keep(comm: CommLike, win: Any, part: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint8]:
    """Free the window (its memory stays, owned by the views), make this
    rank's mapping read-only, and return the part as a view of it that no
    one can make writeable again (its base is a read-only buffer)."""
    info = ShareInfo(part.size, comm.nnodes, win.backend, win.placement, win.placement_report, win.huge_pages,
                     win.page_size)
    win.free()
    mapping = _mapping_of(part)
    _protect(mapping, mmap.PROT_READ)
    frozen = np.frombuffer(memoryview(mapping.base).toreadonly(), np.uint8)  # type: ignore[arg-type]
    state = _state(comm)
    state.serial += 1  # every rank of the job counts its segment shares alike
    _remember(frozen, info, state.serial)
    offset = _address(part) - _address(mapping)
    return frozen[offset:offset + part.size]


def _leaders_bcast(comm: CommLike, part: npt.NDArray[np.uint8], root: int) -> None:
    """The root node's leader sends the data from the root's part, every
    other leader receives it straight into its node's part, in chunks
    (MPI counts are C ints)."""
    plan = comm.plan
    if plan.leaders is None or not part.size:
        return
    root_node = plan.node_of[root]
    for start in range(0, part.size, CHUNK):
        chunk = part[start:start + CHUNK]
        _oob.wait(plan.leaders.Ibcast(chunk, root=root_node), plan.timeout, "share between nodes", chunk,
                  news=plan.news)


# ---- building in place ------------------------------------------------------------

def shared_array(comm: CommLike, shape: Any, dtype: Any = np.float64, *, order: str = "C",
                 placement: str | None = None, huge_pages: bool | str = False) -> npt.NDArray[Any]:
    """Collective over the comm's job: a writable, zero-filled array of
    ``shape`` and ``dtype`` in memory the ranks of each node share (one
    copy per node, held in node rank 0's part): every rank of a node sees
    the others' stores once they have synchronised (a barrier). Fill it
    (one rank reading a file into it, each rank a slice), then
    ``share(a, root)`` on every rank (a is needed on the root only) makes
    it read-only where it lies and copies the root's node's data to the
    other nodes; use what that returns. Until then the comm keeps it (its
    free releases it). order: "C" or "F"; placement, huge_pages: as for
    ``Comm.allocate``."""
    def normalise() -> tuple[np.dtype[Any], tuple[int, ...], int]:
        dt = np.dtype(dtype)
        if dt.hasobject:
            raise ShmtopoValueError(f"dtype {dt} holds Python objects, which cannot live in shared memory")
        dims = tuple(int(s) for s in np.atleast_1d(np.asarray(shape, dtype=object)).tolist()) \
            if np.ndim(shape) else (int(shape),)
        if any(s < 0 for s in dims):
            raise ShmtopoValueError(f"shape {shape} has a negative extent")
        if order not in ("C", "F"):
            raise ShmtopoValueError(f"order must be 'C' or 'F', not {order!r}")
        return dt, dims, math.prod(dims) * dt.itemsize

    with Held(comm.address):
        dt, dims, nbytes = normalised(comm, lib.SHMTOPO_KIND_WIN_ALLOC, normalise)
        # every rank views the same layout (allocate agrees on the rest)
        layout = zlib.crc32(pickle.dumps((dt.descr if dt.fields else dt.str, dims, order)))
        agree(comm, BCAST, nbytes, extra=layout)
        allocate: Any = comm.allocate
        win = allocate(_slice(nbytes, comm.rank, comm.size), contiguous=True, placement=placement,
                       huge_pages=huge_pages)
        state = _state(comm)
        number, state.next_id = state.next_id, state.next_id + 1
        state.writable[number] = _Writable(win, dt, dims, order)
        global _writable_pending
        _writable_pending += 1
        return _typed(_region(win), dt, dims, order)


def _publish(comm: CommLike, root: int, number: int, nbytes: int) -> npt.NDArray[np.uint8]:
    """share of a shared_array: the root's node's data to the other nodes'
    copies, then read-only on every rank."""
    state = _state(comm)

    def mine() -> _Writable:
        w = state.writable.get(number)
        if w is None:
            raise ShmtopoValueError(f"share: shared array #{number} is not this rank's (freed, or made on "
                                    "another comm)")
        return w
    w = normalised(comm, BCAST, mine)
    agree(comm, BCAST, nbytes, root=root, extra=number)  # every rank still holds it
    del state.writable[number]
    global _writable_pending
    _writable_pending -= 1
    win = w.win
    try:
        part = _region(win)
        win.fence()  # every rank's stores done
        if comm.nnodes > 1:
            run_across_nodes(comm, _leaders_bcast, part, root)
            _node_sync(comm, 0)
        data = _keep(comm, win, part)
    except BaseException:
        win.abandon()
        raise
    data.flags.writeable = False
    return _typed(data, w.dtype, w.shape, w.order)


# ---- eager release ----------------------------------------------------------------

def unshare(comm: CommLike, obj: Any) -> None:
    """Collective over the comm's job: release a share's node memory now,
    rather than when the last view goes. Every rank passes an array of the
    same share (the one share returned, or any view of it, or an array
    inside the object it returned). Each rank's mapping is replaced by an
    inaccessible one: the node's memory is returned at once, and any view
    still held must not be used again (a touch is a segmentation fault, as
    using memory after MPI_Win_free is undefined). Ranks that pass arrays of
    different shares raise ShmtopoValueError, all of them, and nothing is
    released. A share that lies in private memory (small) is left to the
    garbage collector."""
    with Held(comm.address):
        entry = normalised(comm, BCAST, _entry, obj)
        agree(comm, BCAST, 0, root=0, extra=(1 << 62) | (entry[3] if entry else 0))
        if entry is None:
            return
        start, mapping, _, _ = entry
        _segments.pop(start, None)
        flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _MAP_FIXED | getattr(mmap, "MAP_NORESERVE", 0x4000)
        if _libc.mmap(start, mapping.size, 0, flags, -1, 0) != start:  # PROT_NONE
            raise ShmtopoOSError("unshare could not unmap a share", ctypes.get_errno())


_MAP_FIXED = 0x10  # Linux
