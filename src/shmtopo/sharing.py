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
same names unlinked once every rank mapped them) whose only non-empty part
is the holder's, the root on its node and the leader (node rank 0)
elsewhere. The root copies its data into its part once; across nodes the
leaders move it through MPI in chunks, each receiving straight into its
node's part. The window is then freed at once: its mappings belong to
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
import weakref
import zlib
from typing import Any, Callable, NamedTuple

import numpy as np
import numpy.typing as npt

from . import _oob
from ._base import CommLike, Held
from ._types import BCAST
from ._native import lib
from .agreement import agree, leave, normalised
from .coll.across import run_across_nodes
from .errors import ShmtopoArgumentError, ShmtopoOSError, ShmtopoValueError

#: the header every share starts with: uint64 words (a count no other call
#: of the library bcasts, so that a share facing a plain bcast on another
#: rank fails their agreement)
HEADER_WORDS = 263
_FIXED = 8  # words of fields before the inline data
#: data up to this many bytes travels inside the header
INLINE = (HEADER_WORDS - _FIXED) * 8
#: data up to this many bytes is sent by a bcast into private memory; above,
#: it lives in node-shared memory
SMALL = 64 * 1024
#: bytes per MPI call between node leaders (MPI counts are C ints)
CHUNK = 1 << 30
#: alignment of every buffer inside the data (numpy needs at most 16)
ALIGN = 64

# header fields
_TIER, _NBYTES, _DESCR, _ID, _CODE = range(5)
# tiers
_ERROR, _INLINE, _BCAST, _SEGMENT, _IN_PLACE = 1, 2, 3, 4, 5
# error codes in an _ERROR header
_VALUE, _ARGUMENT = 1, 2


class ShareInfo(NamedTuple):
    """Where a share's data lives (:func:`share_info`)."""
    nbytes: int                   #: bytes of the share's data on this node
    nnodes: int                   #: nodes of the job: one copy on each
    holder: int                   #: the node's rank whose part holds the data
    backend: str                  #: "posix", "memfd", ...
    placement: str                #: "local" or "interleave"
    placement_report: str         #: how the holder's pages were placed
    huge_pages: str | None        #: None, "hugetlb" or "transparent"
    page_size: int                #: bytes per page of the segment

    def __str__(self) -> str:
        return (f"{self.nbytes} bytes in node shared memory (one copy on each of {self.nnodes} node"
                f"{'s' if self.nnodes > 1 else ''}), {self.backend} segment of rank {self.holder}, "
                f"{self.placement_report}, pages of {self.page_size} bytes"
                + (f" ({self.huge_pages} huge pages)" if self.huge_pages else ""))


# ---- the mappings this process holds for shares --------------------------------

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_libc.mprotect.restype = ctypes.c_int
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.mmap.restype = ctypes.c_void_p

# start address of a mapping -> (the mapping, the share's info); the entry
# goes with the mapping (a weak reference's callback)
_segments: dict[int, tuple[weakref.ref[Any], ShareInfo]] = {}


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


def _remember(mapping: npt.NDArray[np.uint8], info: ShareInfo) -> None:
    start = _address(mapping)
    _segments[start] = (weakref.ref(mapping, lambda _: _segments.pop(start, None)), info)


def share_info(obj: Any) -> ShareInfo | None:
    """Local: where the data of an array returned by :func:`share` (or of an
    array inside an object it returned) lives: a :class:`ShareInfo` for
    data in node shared memory, None for data that is not (small shares
    come as private copies)."""
    if not isinstance(obj, np.ndarray) or obj.size == 0:
        return None
    where = _address(obj)
    for start, (ref, info) in list(_segments.items()):
        mapping = ref()
        if mapping is not None and start <= where < start + mapping.size:
            return info
    return None


# ---- what the root sends -----------------------------------------------------------

def _round(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


class _Payload:
    """The data of one share, laid out as it will lie in memory: its buffers
    (each at an ALIGN-aligned offset), then the description that says how
    to rebuild the object from them."""

    def __init__(self, descr: Any, sources: list[Callable[[npt.NDArray[np.uint8]], None]], lengths: list[int]):
        self.offsets: list[int] = []
        end = 0
        for n in lengths:
            self.offsets.append(end)
            end = _round(end + n)
        self.descr = pickle.dumps((descr, list(zip(self.offsets, lengths))), protocol=5)
        self.nbytes = end + len(self.descr)
        self.lengths, self.sources = lengths, sources

    def write(self, dest: npt.NDArray[np.uint8]) -> None:
        """Copy the data into dest (nbytes, uint8): one copy of each buffer."""
        for source, offset, n in zip(self.sources, self.offsets, self.lengths):
            source(dest[offset:offset + n])
        dest[self.nbytes - len(self.descr):self.nbytes] = np.frombuffer(self.descr, np.uint8)


def _plain_array(obj: Any) -> bool:
    return type(obj) in (np.ndarray, np.memmap) and not obj.dtype.hasobject


def _array_payload(a: npt.NDArray[Any]) -> _Payload:
    order = "F" if a.flags.f_contiguous and not a.flags.c_contiguous else "C"
    dtype, shape = a.dtype, a.shape

    def write(dest: npt.NDArray[np.uint8]) -> None:
        np.copyto(_typed(dest, dtype, shape, order), a, casting="no")
    return _Payload(("array", dtype, shape, order), [write], [a.nbytes])


def _object_payload(obj: Any) -> _Payload:
    buffers: list[pickle.PickleBuffer] = []
    stream = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    raws = [b.raw() for b in buffers]

    def copier(raw: memoryview) -> Callable[[npt.NDArray[np.uint8]], None]:
        def write(dest: npt.NDArray[np.uint8]) -> None:
            dest[...] = np.frombuffer(raw, np.uint8)
        return write
    raws.insert(0, memoryview(stream))
    return _Payload(("object",), [copier(r) for r in raws], [r.nbytes for r in raws])


def _payload(obj: Any, root: int) -> _Payload:
    """The root's object laid out for sharing; ShmtopoValueError (nothing
    given) or ShmtopoArgumentError (it cannot be pickled) otherwise."""
    if obj is None:
        raise ShmtopoValueError(f"share: the root (rank {root}) passed None: nothing to share")
    if _plain_array(obj):
        return _array_payload(obj)
    try:
        return _object_payload(obj)
    except Exception as exc:  # noqa: BLE001 - every rank hears of it
        raise ShmtopoArgumentError(f"share: the root's object cannot be pickled: {type(exc).__name__}: {exc}",
                                   22) from None


def _typed(data: npt.NDArray[np.uint8], dtype: np.dtype[Any], shape: tuple[int, ...],
           order: str) -> npt.NDArray[Any]:
    if dtype.itemsize == 0 or math.prod(shape) == 0:
        return np.empty(shape, dtype, order="F" if order == "F" else "C")[...]
    return data.view(dtype).reshape(shape, order="F" if order == "F" else "C")


def _rebuilt(data: npt.NDArray[np.uint8], nbytes: int, descr_len: int) -> Any:
    """The object of a share from its data (read-only, nbytes long): an
    array viewing it, or the unpickled object whose buffers view it."""
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


class _State:
    """What a comm keeps for shares (attached to it): the writable arrays of
    shared_array, by the number every rank gave the same one."""

    def __init__(self) -> None:
        self.next_id = 1
        self.writable: dict[int, _Writable] = {}

    def find(self, a: Any) -> int:
        """The number of the writable array a is (all of it), or 0."""
        if not isinstance(a, np.ndarray) or not (a.flags.c_contiguous or a.flags.f_contiguous):
            return 0
        for number, w in self.writable.items():
            part = w.win.query(0, np.uint8)  # node rank 0's part holds it
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
    with Held(comm.address):
        header = np.zeros(HEADER_WORDS, np.uint64)
        payload = None
        if comm.world_rank == root:
            payload = _root_header(comm, obj, root, header)
        comm.bcast(header, root=root, out=header)  # type: ignore[attr-defined]
        tier = int(header[_TIER])
        if tier == _ERROR:
            n = int(header[_NBYTES])
            message = header[_FIXED:].view(np.uint8)[:n].tobytes().decode(errors="replace")
            cls = ShmtopoArgumentError if header[_CODE] == _ARGUMENT else ShmtopoValueError
            raise cls(message, 22, root)
        nbytes, descr_len = int(header[_NBYTES]), int(header[_DESCR])
        if tier == _IN_PLACE:
            return _publish(comm, root, int(header[_ID]), nbytes)
        if tier == _INLINE:
            data = header[_FIXED:].view(np.uint8)[:nbytes]
        elif tier == _BCAST:
            data = np.empty(nbytes, np.uint8)
            if payload is not None:
                payload.write(data)
            comm.bcast(data, root=root, out=data)  # type: ignore[attr-defined]
        else:
            data = _segment(comm, root, nbytes, payload, placement, huge_pages)
        data.flags.writeable = False
        return _rebuilt(data, nbytes, descr_len)


def _root_header(comm: CommLike, obj: Any, root: int, header: npt.NDArray[np.uint64]) -> _Payload | None:
    """On the root: the header of its object (its data too when small),
    or of why it cannot be shared; the payload still to send."""
    number = 0
    try:
        state = comm.attributes.get(_KEY)
        number = state.find(obj) if state is not None else 0
        if not number:
            payload = _payload(obj, root)
    except Exception as exc:  # noqa: BLE001 - sent to every rank, raised there
        if not isinstance(exc, ShmtopoValueError):
            exc = ShmtopoValueError(f"share: the root failed: {type(exc).__name__}: {exc}")
        message = str(exc).encode()[:INLINE]
        header[_TIER], header[_NBYTES] = _ERROR, len(message)
        header[_CODE] = _ARGUMENT if isinstance(exc, ShmtopoArgumentError) else _VALUE
        header[_FIXED:].view(np.uint8)[:len(message)] = np.frombuffer(message, np.uint8)
        return None
    except BaseException:
        leave(comm)  # Ctrl-C: the peers must not wait for this rank's header
        raise
    if number:
        header[_TIER], header[_ID], header[_NBYTES] = _IN_PLACE, number, obj.nbytes
        return None
    header[_NBYTES], header[_DESCR] = payload.nbytes, len(payload.descr)
    if payload.nbytes <= INLINE:
        header[_TIER] = _INLINE
        payload.write(header[_FIXED:].view(np.uint8))
        return None
    header[_TIER] = _BCAST if payload.nbytes <= SMALL else _SEGMENT
    return payload


def _holder(comm: CommLike, root: int) -> int:
    """The rank of this node whose part holds the data: the root on its
    node, the leader (node rank 0) on the others."""
    plan = comm.plan
    return int(plan.local_of[root]) if plan.node_of[root] == plan.node_index else 0


def _segment(comm: CommLike, root: int, nbytes: int, payload: _Payload | None, placement: str | None,
             huge_pages: bool | str) -> npt.NDArray[np.uint8]:
    """The data in a segment of this node (the root writes it, the leaders
    carry it across nodes): this rank's read-only view of it."""
    holder = _holder(comm, root)
    allocate: Any = comm.allocate
    win = allocate(nbytes if comm.rank == holder else 0, contiguous=True, placement=placement,
                   huge_pages=huge_pages)
    try:
        part = win.query(holder, np.uint8)
        if payload is not None:
            payload.write(part)
        if comm.nnodes > 1:
            win.fence()  # the root's data there for its node's leader
            run_across_nodes(comm, _leaders_bcast, part, root)
        win.fence()
        return _keep(comm, win, holder, part)
    except BaseException as exc:
        win.abandon(getattr(exc, "rank", None))
        raise


def _keep(comm: CommLike, win: Any, holder: int, part: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint8]:
    """Free the window (its memory stays, owned by the views), make this
    rank's mapping read-only and note where the share lives."""
    info = ShareInfo(part.size, comm.nnodes, holder, win.backend, win.placement, win.placement_report[holder],
                     win.huge_pages, win.page_size)
    win.free()
    mapping = _mapping_of(part)
    _protect(mapping, mmap.PROT_READ)
    _remember(mapping, info)
    return part


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
        win = allocate(nbytes if comm.rank == 0 else 0, contiguous=True, placement=placement,
                       huge_pages=huge_pages)
        state = _state(comm)
        number, state.next_id = state.next_id, state.next_id + 1
        state.writable[number] = _Writable(win, dt, dims, order)
        return _typed(win.query(0, np.uint8), dt, dims, order)


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
    win = w.win
    try:
        part = win.query(0, np.uint8)
        win.fence()  # every rank's stores done
        if comm.nnodes > 1:
            run_across_nodes(comm, _leaders_bcast, part, root)
            win.fence()
        data = _keep(comm, win, 0, part)
    except BaseException as exc:
        win.abandon(getattr(exc, "rank", None))
        raise
    data.flags.writeable = False
    return _typed(data, w.dtype, w.shape, w.order)
