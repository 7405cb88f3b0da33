"""shmtopo.accel.datatypes: an MPI datatype as the core walks it (a
coll.args.TypeRuns: one element's bytes, in the order MPI packs them, as runs
of contiguous bytes), and the typed messages of Alltoallw.

MPI itself says where a datatype's bytes lie: an element whose every byte
holds (a digit of) its own offset is sent to this process as MPI_PACKED,
which receives the bytes in the datatype's order, so every constructor
(subarray, darray, struct, resized, a send type that repeats bytes...)
flattens the way MPI reads it. Once per datatype, kept while the Datatype
object lives and is not freed.
"""
from __future__ import annotations

import operator
import threading
from typing import Any

import numpy as np

from ..coll.args import TypedBlocks, TypeRuns, type_runs
from .buffers import _byte_view, in_place
from .tables import LeftToMPI, Tables

#: the largest span of an element (its true extent) flattened by probing; a
#: larger datatype's messages go to MPI
PROBE_MAX = 64 << 20

_flattened: dict[int, tuple[Any, TypeRuns | LeftToMPI]] = {}  # handle: (the Datatype object, its runs)
_probing = threading.Lock()  # one probe at a time: their messages to self would cross


def runs_of(t: Tables, datatype: Any) -> TypeRuns:
    """The runs of a committed datatype (cached); ValueError for what MPI
    would refuse, LeftToMPI for what is valid but not flattened here."""
    if not isinstance(datatype, t.Datatype):
        raise TypeError(f"expecting an MPI.Datatype, not {type(datatype).__name__}")
    key = t.handle(datatype)
    seen = _flattened.get(key)
    if seen is None or seen[0] is not datatype:
        if key == t.null_type:
            raise ValueError("MPI.DATATYPE_NULL is no datatype to move")
        try:
            found: TypeRuns | LeftToMPI = _probe(t, datatype)
        except LeftToMPI as why:
            found = why
        if len(_flattened) >= 256:
            _flattened.clear()
        seen = _flattened[key] = (datatype, found)
    if isinstance(seen[1], LeftToMPI):
        raise seen[1]
    return seen[1]


def _probe(t: Tables, datatype: Any) -> TypeRuns:
    MPI = t.MPI
    try:
        size = datatype.Get_size()
        extent = datatype.Get_extent()[1]
        lo, span = datatype.Get_true_extent()
    except MPI.Exception as exc:
        raise ValueError(f"datatype: {exc}") from None
    if size == 0:
        return type_runs([], [], extent)
    if span > PROBE_MAX:
        raise LeftToMPI(f"a datatype spanning {span} bytes")
    origin = max(0, -lo)  # where the element starts in `element`; its bytes at [origin + lo, origin + lo + span)
    element = np.zeros(max(origin, origin + lo + span) + 1, np.uint8)
    data = element[origin + lo:origin + lo + span]
    packed = np.empty(size, np.uint8)

    def pack(fill: int) -> Any:
        packed.fill(fill)
        try:
            MPI.COMM_SELF.Sendrecv([element[origin:origin], 1, datatype], 0, 0, [packed, size, MPI.PACKED], 0, 0)
        except MPI.Exception as exc:  # e.g. not committed: MPI's own refusal, on this rank
            raise ValueError(f"datatype: {exc}") from None
        return packed.copy()
    with _probing:
        # the packed bytes MPI writes: where it leaves some out (MPICH moves 10
        # of a long double's 16 bytes, except in a contiguous run of them),
        # what it moves depends on both sides' maps: such a type is MPI's
        data.fill(0)
        zeros = pack(0xFF)
        data.fill(0xFF)
        written = (zeros == 0) & (pack(0) == 0xFF)
        offset = np.arange(span, dtype=np.int64)
        where = np.zeros(size, np.int64)  # each packed byte's offset from the element's first byte
        for digit in range(max(1, (int(span - 1).bit_length() + 7) // 8)):
            data[:] = (offset >> (8 * digit)) & 0xFF
            where |= pack(0).astype(np.int64) << (8 * digit)
    if not written.all():
        raise LeftToMPI("a datatype whose padding MPI does not move (long double, under MPICH)")
    firsts = np.concatenate(([0], np.flatnonzero(np.diff(where) != 1) + 1))
    return type_runs(where[firsts] + lo, np.diff(np.concatenate((firsts, [where.size]))), extent)


def _sequence(value: Any, n: int, what: str, kind: str) -> tuple[Any, ...]:
    """mpi4py's per-rank argument: a sequence of n, or one value for every rank."""
    if isinstance(value, (list, tuple, np.ndarray)):
        if len(value) != n:
            raise ValueError(f"{what}: expecting {n} {kind}, not {len(value)}")
        return tuple(value)
    return (value,) * n


# the layouts of Alltoallw's messages made: {(counts, displs, ids of the
# datatypes): (the datatypes, the blocks)}; the datatypes are kept, so their
# ids stay theirs, and compared, so a layout serves only the very same ones
_layouts: dict[tuple[Any, ...], tuple[tuple[Any, ...], TypedBlocks]] = {}
_EMPTY = type_runs([], [], 0)


def typed_message(t: Tables, spec: Any, what: str, *, writable: bool, blocks: int) -> tuple[Any, TypedBlocks]:
    """An Alltoallw buffer argument, [buf, (counts, displs), types] or
    [buf, counts, displs, types] (displacements in bytes): its bytes, and
    its blocks, one per rank."""
    if not isinstance(spec, (list, tuple)) or len(spec) not in (3, 4):
        raise ValueError(f"{what}: expecting [buf, (counts, displs), types] or [buf, counts, displs, types]")
    if len(spec) == 3:
        buf, cd, types = spec
        if not isinstance(cd, (list, tuple)) or len(cd) != 2:
            raise ValueError(f"{what}: expecting (counts, displs) as the second item")
        counts, displs = cd
    else:
        buf, counts, displs, types = spec
    raw = _byte_view(t, buf, what, writable)
    c = _sequence(counts, blocks, what, "counts")
    d = _sequence(displs, blocks, what, "displacements")
    ty = _sequence(types, blocks, what, "datatypes")
    key = (c, d, tuple(map(id, ty)))
    made = _layouts.get(key)
    if made is not None and all(a is b for a, b in zip(made[0], ty)):
        return raw, made[1]
    counted = [_integer(x, f"{what}: a count") for x in c]
    layout = TypedBlocks([(_integer(d[p], f"{what}: a displacement"), counted[p],
                           runs_of(t, ty[p]) if counted[p] > 0 else _EMPTY) for p in range(blocks)], blocks, what)
    if len(_layouts) >= 256:
        _layouts.clear()
    _layouts[key] = (ty, layout)
    return raw, layout


def _integer(value: Any, what: str) -> int:
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an integer, not {type(value).__name__}") from None


def alltoallw_messages(t: Tables, sendbuf: Any, recvbuf: Any,
                       size: int) -> tuple[Any, TypedBlocks, Any, TypedBlocks]:
    """(send bytes, send blocks, receive bytes, receive blocks) of an Alltoallw."""
    if in_place(t, sendbuf):
        raise LeftToMPI("Alltoallw in place")
    recv, recvblocks = typed_message(t, recvbuf, "recvbuf", writable=True, blocks=size)
    send, sendblocks = typed_message(t, sendbuf, "sendbuf", writable=False, blocks=size)
    return send, sendblocks, recv, recvblocks
