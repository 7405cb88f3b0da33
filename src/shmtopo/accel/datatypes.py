"""shmtopo.accel.datatypes: an MPI datatype as the core walks it (a
coll.args.TypeRuns: one element's bytes, in the order MPI packs them, as runs
of contiguous bytes), and the typed messages of Alltoallw.

A derived datatype is flattened from its constructor, as MPI decodes it
(MPI_Type_get_contents: contiguous, vector, indexed, struct, subarray,
resized, ...), in numpy, once per datatype (kept while the Datatype object
lives and is not freed). What no constructor rule here covers (darray, a
named type with holes, Fortran's parameterised types) MPI itself says: an
element whose every byte holds (a digit of) its own offset, sent to this
process as MPI_PACKED, arrives in the datatype's order.
"""
from __future__ import annotations

import operator
import threading
from typing import Any

import numpy as np

from .._fastpath import note_layout
from .._native import ffi
from ..coll.args import TypedBlocks, TypeRuns, type_runs
from .buffers import _byte_view, in_place
from .tables import LeftToMPI, Tables

#: the largest span of an element (its true extent) flattened by probing; a
#: larger datatype's messages go to MPI
PROBE_MAX = 64 << 20

# handle: (the Datatype object, its runs, or why it goes to MPI); a derived
# datatype's first use goes to MPI (every rank then hands the call over), so
# that a datatype made for one call is never flattened: its second, flattened
_flattened: dict[int, tuple[Any, TypeRuns | LeftToMPI]] = {}
_FIRST_USE = LeftToMPI("seen once")
_probing = threading.Lock()  # one probe at a time: their messages to self would cross


def runs_of(t: Tables, datatype: Any, first_use_to_mpi: bool = True) -> TypeRuns:
    """The runs of a committed datatype (cached); ValueError for what MPI
    would refuse, LeftToMPI for what is valid but not flattened here (and
    for a derived datatype's first use, unless first_use_to_mpi is False)."""
    if not isinstance(datatype, t.Datatype):
        raise TypeError(f"expecting an MPI.Datatype, not {type(datatype).__name__}")
    key = t.handle(datatype)
    seen = _flattened.get(key)
    if seen is None or seen[0] is not datatype:
        if key == t.null_type:
            raise ValueError("MPI.DATATYPE_NULL is no datatype to move")
        if first_use_to_mpi and not datatype.is_named:  # made for one call, flattening would cost more
            _committed(t, datatype)
            _flattened[key] = (datatype, _FIRST_USE)
            raise LeftToMPI("a derived datatype's first use")
        seen = None
    if seen is None or seen[1] is _FIRST_USE:
        try:
            found: TypeRuns | LeftToMPI = _flatten(t, datatype)
        except LeftToMPI as why:
            found = why
        if len(_flattened) >= 256:
            _flattened.clear()
        seen = _flattened[key] = (datatype, found)
    if isinstance(seen[1], LeftToMPI):
        raise seen[1]
    return seen[1]


#: the most runs a datatype is flattened into; one with more goes to MPI
RUNS_MAX = 1 << 24


class _NoRule(Exception):
    """A constructor flattened by probing."""


def _committed(t: Tables, datatype: Any) -> None:
    """ValueError where MPI refuses to move the datatype (one never committed), on this rank."""
    try:
        datatype.Pack(np.empty(0, np.uint8), np.empty(0, np.uint8), 0, t.MPI.COMM_SELF)
    except t.MPI.Exception as exc:
        raise ValueError(f"datatype: {exc}") from None


def _flatten(t: Tables, datatype: Any) -> TypeRuns:
    _committed(t, datatype)
    extent = datatype.Get_extent()[1]
    try:
        offsets, lengths = _runs(t, datatype)
    except _NoRule:
        return _probe(t, datatype)
    return type_runs(offsets, lengths, extent)


def _merged(offsets: Any, lengths: Any) -> tuple[Any, Any]:
    """Runs of 0 bytes dropped, each run that starts where the last ends joined to it."""
    keep = lengths > 0
    offsets, lengths = offsets[keep], lengths[keep]
    if offsets.size > RUNS_MAX:
        raise LeftToMPI(f"a datatype of more than {RUNS_MAX} runs")
    if offsets.size < 2:
        return offsets, lengths
    ends = offsets + lengths
    breaks = np.flatnonzero(offsets[1:] != ends[:-1]) + 1
    firsts = np.concatenate(([0], breaks))
    lasts = np.concatenate((breaks - 1, [offsets.size - 1]))
    return offsets[firsts], ends[lasts] - offsets[firsts]


def _tiled(runs: tuple[Any, Any], starts: Any) -> tuple[Any, Any]:
    """One element's runs at each of `starts` (bytes), in that order."""
    offsets, lengths = runs
    starts = np.asarray(starts, np.int64).reshape(-1)
    return _merged((starts[:, None] + offsets[None, :]).reshape(-1), np.tile(lengths, starts.size))


def _blocks(counts: Any, starts: Any, step: int) -> Any:
    """Where each of a block's elements starts: for each block, its start and
    then `step` bytes apart, blocks in order."""
    counts, starts = np.asarray(counts, np.int64), np.asarray(starts, np.int64)
    if not counts.size:
        return np.zeros(0, np.int64)
    first = np.repeat(starts, counts)
    within = np.arange(first.size) - np.repeat(np.cumsum(counts) - counts, counts)
    return first + within * step


def _runs(t: Tables, datatype: Any) -> tuple[Any, Any]:
    """(offsets, lengths) of one element, int64, in the type map's order."""
    if datatype.is_named:
        size = datatype.Get_size()
        if datatype.Get_true_extent() != (0, size):
            raise _NoRule  # a pair type with a hole (MPI.SHORT_INT)
        return np.array([0], np.int64), np.array([size], np.int64)
    base, combiner, p = datatype.decode()
    made = [base] + list(p.get("datatypes", []))
    try:
        return _combined(t, base, combiner, p)
    finally:
        for d in made:
            if d is not None and not d.is_predefined:
                d.Free()  # MPI_Type_get_contents made a new handle


def _combined(t: Tables, base: Any, combiner: str, p: dict[str, Any]) -> tuple[Any, Any]:
    if combiner == "STRUCT":
        parts = [_tiled(_runs(t, d), _blocks([n], [at], d.Get_extent()[1]))
                 for n, at, d in zip(p["blocklengths"], p["displacements"], p["datatypes"])]
        if not parts:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        return _merged(np.concatenate([o for o, _ in parts]), np.concatenate([n for _, n in parts]))
    runs = _runs(t, base)
    step = base.Get_extent()[1]
    if combiner in ("DUP", "RESIZED"):  # the same runs; the extent is the caller's to read
        return runs
    counts: Any
    starts: Any
    if combiner == "CONTIGUOUS":
        counts, starts = [p["count"]], [0]
    elif combiner in ("VECTOR", "HVECTOR"):
        counts = [p["blocklength"]] * p["count"]
        starts = np.arange(p["count"], dtype=np.int64) * (p["stride"] * (step if combiner == "VECTOR" else 1))
    elif combiner in ("INDEXED", "HINDEXED", "INDEXED_BLOCK", "HINDEXED_BLOCK"):
        starts = np.asarray(p["displacements"], np.int64) * (step if not combiner.startswith("H") else 1)
        counts = p["blocklengths"] if "blocklengths" in p else [p["blocklength"]] * starts.size
    elif combiner == "SUBARRAY":  # rows along the fastest axis
        sizes, subsizes, first = p["sizes"], p["subsizes"], p["starts"]
        if p["order"] == t.MPI.ORDER_FORTRAN:  # the first index varies fastest: C order on the reversed axes
            sizes, subsizes, first = sizes[::-1], subsizes[::-1], first[::-1]
        strides = np.cumprod([1] + list(sizes[:0:-1]))[::-1]  # elements between neighbours along each axis
        rows = np.full(1, first[-1], np.int64)
        for n, s0, stride in zip(subsizes[:-1], first[:-1], strides[:-1]):
            rows = (rows[:, None] + (s0 + np.arange(n, dtype=np.int64))[None, :] * int(stride)).reshape(-1)
        counts, starts = np.full(rows.size, subsizes[-1]), rows * step
    else:
        raise _NoRule(combiner)
    # blocks of `counts` elements `step` apart, from `starts`
    if runs[0].size == 1 and runs[0][0] == 0 and runs[1][0] == step:  # a dense element: a block is one run
        return _merged(np.asarray(starts, np.int64), np.asarray(counts, np.int64) * step)
    return _tiled(runs, _blocks(counts, starts, step))


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
    """mpi4py's per-rank argument: a sequence of n (a list, a tuple, an
    array('i'), a numpy array...); one value is no sequence, as for mpi4py."""
    if not hasattr(value, "__len__") or isinstance(value, (str, bytes)):
        raise TypeError(f"{what}: expecting a sequence of {n} {kind}, not {type(value).__name__}")
    if len(value) != n:
        raise ValueError(f"{what}: expecting {n} {kind}, not {len(value)}")
    return tuple(value)


# the layouts of Alltoallw's messages made: {(counts, displs, ids of the
# datatypes): (the datatypes, the blocks)}; the datatypes are kept, so their
# ids stay theirs, and compared, so a layout serves only the very same ones
_layouts: dict[tuple[Any, ...], tuple[tuple[Any, ...], TypedBlocks]] = {}
_EMPTY = type_runs([], [], 0)


def typed_message(t: Tables, spec: Any, what: str, *, writable: bool, blocks: int,
                  first_use_to_mpi: bool = True) -> tuple[Any, TypedBlocks]:
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
    runs, first_use = [], None
    for p in range(blocks):
        try:
            runs.append(runs_of(t, ty[p], first_use_to_mpi) if counted[p] > 0 else _EMPTY)
        except LeftToMPI as why:  # every datatype of the call seen, so that its next call flattens them all
            first_use = why
    if first_use is not None:
        raise first_use
    layout = TypedBlocks([(_integer(d[p], f"{what}: a displacement"), counted[p], runs[p]) for p in range(blocks)],
                         blocks, what)
    if len(_layouts) >= 256:
        _layouts.clear()
    _layouts[key] = (ty, layout)
    note_layout(c, d, ty, layout, int(ffi.cast("uintptr_t", layout.table)), layout.first, layout.end)
    return raw, layout


def _integer(value: Any, what: str) -> int:
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an integer, not {type(value).__name__}") from None


def alltoallw_messages(t: Tables, sendbuf: Any, recvbuf: Any, size: int,
                       first_use_to_mpi: bool = True) -> tuple[Any, TypedBlocks, Any, TypedBlocks]:
    """(send bytes, send blocks, receive bytes, receive blocks) of an
    Alltoallw. In place, each block sent is the receive block of the same
    rank, from a copy of the receive buffer taken first."""
    def message(spec: Any, what: str, writable: bool) -> tuple[Any, TypedBlocks]:
        return typed_message(t, spec, what, writable=writable, blocks=size, first_use_to_mpi=first_use_to_mpi)
    if in_place(t, sendbuf):
        recv, recvblocks = message(recvbuf, "recvbuf", True)
        return recv.copy(), recvblocks, recv, recvblocks
    try:
        recv, recvblocks = message(recvbuf, "recvbuf", True)
    except LeftToMPI:
        message(sendbuf, "sendbuf", False)  # its datatypes seen too
        raise
    send, sendblocks = message(sendbuf, "sendbuf", False)
    return send, sendblocks, recv, recvblocks
