"""shmtopo.accel.buffers: mpi4py's buffer arguments, read as mpi4py reads
them: a message (a buffer, [buf, type], [buf, count, type]...) and a
v-variant's vector (counts and displacements per rank), checked against
the buffer they lie in.
"""
from __future__ import annotations

import operator
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from .tables import KnownType, LeftToMPI, Tables, format_type, type_name

Array = npt.NDArray[Any]


class Message(NamedTuple):
    """One buffer argument as mpi4py reads it."""
    raw: npt.NDArray[np.uint8]  # the buffer's bytes, from the displacement on
    entries: int                # of `datatype` (per block, for blocked arguments)
    datatype: Any
    type: KnownType | None      # None: a datatype shmtopo does not move


def split_spec(t: Tables, spec: Any, what: str) -> tuple[Any, Any, Any, Any]:
    """(buffer, count, displacement, datatype) of a buffer argument: a
    buffer, [buf, type], [buf, count], [buf, (count, displ)],
    [buf, count, type], [buf, (count, displ), type] or
    [buf, count, displ, type]; None for what it leaves out."""
    if not isinstance(spec, (list, tuple)):
        return spec, None, None, None
    count = displ = datatype = None
    if len(spec) == 2:
        buf, second = spec
        if isinstance(second, (t.Datatype, str)):
            datatype = second
        elif isinstance(second, (list, tuple)):
            count, displ = second
        else:
            count = second
    elif len(spec) == 3:
        buf, count, datatype = spec
        if isinstance(count, (list, tuple)):
            count, displ = count
    elif len(spec) == 4:
        buf, count, displ, datatype = spec
    else:
        raise ValueError(f"{what}: expecting a buffer, or a list or tuple of 2 to 4 items")
    return buf, count, displ, datatype


def in_place(t: Tables, spec: Any) -> bool:
    """mpi4py takes None for MPI.IN_PLACE where IN_PLACE may stand."""
    return spec is None or spec is t.IN_PLACE


def _byte_view(t: Tables, buf: Any, what: str, writable: bool) -> npt.NDArray[np.uint8]:
    """The bytes of a buffer-protocol object: one flat array over its memory."""
    if buf is None or buf is t.BOTTOM or buf is t.IN_PLACE:
        raise LeftToMPI(f"{what} is {buf!r}")
    try:
        raw = np.frombuffer(buf, np.uint8)  # C-contiguous buffers: the common case
    except (TypeError, ValueError, BufferError):
        try:
            view = memoryview(buf)
        except TypeError:
            if hasattr(buf, "__dlpack__") or hasattr(buf, "__cuda_array_interface__"):
                raise LeftToMPI(f"{what} is a device buffer") from None
            raise TypeError(f"{what}: expecting a buffer or a list or tuple, not {type(buf).__name__}") from None
        if not view.contiguous:
            raise BufferError(f"{what}: the buffer is not contiguous") from None
        raw = np.asarray(view).ravel(order="K").view(np.uint8)  # Fortran order: its memory order, a view
        if view.readonly:
            raw.flags.writeable = False
    if writable and not raw.flags.writeable:
        raise BufferError(f"{what}: the buffer is read-only")
    return raw


def _index(value: Any, what: str) -> int:
    try:
        n = operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an integer, not {type(value).__name__}") from None
    if n < 0:
        raise ValueError(f"{what} must not be negative ({n})")
    return n


def message(t: Tables, spec: Any, what: str, *, writable: bool, blocks: int = 0) -> Message:
    """A buffer argument read the way mpi4py reads it: the datatype from
    the buffer's format when none is given; the count given, or inferred
    from the buffer's length (per block when `blocks` > 1). Raises what
    makes it invalid (mpi4py or MPI would refuse it), LeftToMPI for what is
    valid but not shmtopo's (device buffers, MPI.BOTTOM)."""
    if spec is None or spec is t.IN_PLACE:
        raise TypeError(f"{what}: expecting a buffer or a list or tuple, not {spec!r}")
    buf, count, displ, datatype = split_spec(t, spec, what)
    raw = _byte_view(t, buf, what, writable)
    if datatype is None:
        datatype = format_type(t, buf, what)
    elif isinstance(datatype, str):
        try:
            datatype = t.typedict[datatype]
        except KeyError:
            raise ValueError(f"{what}: cannot map {datatype!r} to an MPI datatype") from None
    elif not isinstance(datatype, t.Datatype):
        raise TypeError(f"{what}: expecting an MPI datatype, not {type(datatype).__name__}")
    key = t.handle(datatype)
    if key == t.null_type:
        raise ValueError(f"{what}: the datatype is MPI.DATATYPE_NULL")
    known = t.types.get(key)
    extent = known.dtype.itemsize if known else datatype.Get_extent()[1]
    length = raw.size
    if displ is not None:
        d = _index(displ, f"{what}: the displacement")
        if d:
            if extent <= 0:
                raise ValueError(f"{what}: a displacement needs a datatype of positive extent, not {extent}")
            if d * extent > length:
                raise ValueError(f"{what}: displacement {d} beyond the buffer's {length // extent} entries")
            raw = raw[d * extent:]
            length -= d * extent
    if count is not None:
        n = _index(count, f"{what}: the count")
        entries = n * max(blocks, 1)
        if known and entries * extent > length:  # MPI would read or write past the buffer
            raise ValueError(f"{what}: {entries} entries of {extent} bytes do not fit in its {length} bytes")
    elif length == 0:
        n = 0
    else:
        if extent <= 0:
            raise ValueError(f"{what}: cannot infer the count from a datatype of extent {extent}")
        if length % extent:
            raise ValueError(f"{what}: cannot infer the count: {length} bytes are not a multiple of the "
                             f"datatype's extent {extent}")
        n = length // extent
        if blocks > 1:
            if n % blocks:
                raise ValueError(f"{what}: cannot infer the count: {n} entries do not split into {blocks} blocks")
            n //= blocks
    return Message(raw, n, datatype, known)


class Vector(NamedTuple):
    """A v-variant's buffer argument as mpi4py reads it: counts and
    displacements (in entries) per rank."""
    msg: Message
    counts: list[int]
    displs: list[int]


def int_list(value: Any, n: int, what: str) -> list[int]:
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__"):
        raise TypeError(f"{what}: expecting a sequence of {n} integers, not {type(value).__name__}")
    if len(value) != n:
        raise ValueError(f"{what}: expecting {n} items, not {len(value)}")
    return [_index(v, what) for v in value]


def vector(t: Tables, spec: Any, what: str, *, writable: bool, blocks: int) -> Vector:
    """A v-variant buffer: buf, [buf, counts], [buf, (counts, displs)],
    [buf, counts, type], [buf, (counts, displs), type] or
    [buf, counts, displs, type]; counts an integer (every rank) or one per
    rank, displs an integer (a stride) or one per rank; counts inferred as
    mpi4py does (the entries split as evenly as they go, the first ranks
    one more), displs contiguous. Every block must lie in the buffer."""
    if spec is None or spec is t.IN_PLACE:
        raise TypeError(f"{what}: expecting a buffer or a list or tuple, not {spec!r}")
    counts: Any = None
    displs: Any = None
    datatype: Any = None
    if not isinstance(spec, (list, tuple)):
        buf = spec
    elif len(spec) == 2:
        buf, counts = spec
        if isinstance(counts, (t.Datatype, str)):
            counts, datatype = None, counts
        elif isinstance(counts, tuple):
            counts, displs = counts
    elif len(spec) == 3:
        buf, counts, datatype = spec
        if isinstance(counts, tuple):
            counts, displs = counts
    elif len(spec) == 4:
        buf, counts, displs, datatype = spec
    else:
        raise ValueError(f"{what}: expecting a buffer, or a list or tuple of 2 to 4 items")
    msg = message(t, [buf, datatype] if datatype is not None else buf, what, writable=writable)
    total = msg.entries
    if counts is None:
        c = [total // blocks + (total % blocks > i) for i in range(blocks)]
    elif isinstance(counts, (int, np.integer)):
        c = [_index(counts, f"{what}: the count")] * blocks
    else:
        c = int_list(counts, blocks, f"{what}: the counts")
    if displs is None:
        d = [sum(c[:i]) for i in range(blocks)]
    elif isinstance(displs, (int, np.integer)):
        d = [_index(displs, f"{what}: the displacement") * i for i in range(blocks)]
    else:
        d = int_list(displs, blocks, f"{what}: the displacements")
    if msg.type is not None:
        for i in range(blocks):
            if c[i] and d[i] + c[i] > total:  # MPI would read or write past the buffer
                raise ValueError(f"{what}: block {i} ({c[i]} entries at {d[i]}) is beyond the buffer's "
                                 f"{total} entries")
    return Vector(msg, c, d)


def moved_type(msg: Message, what: str) -> KnownType:
    """The element type of a message shmtopo can move, else LeftToMPI."""
    if msg.type is None:
        raise LeftToMPI(f"{what} has {type_name(msg.datatype)}")
    return msg.type


def elements(msg: Message, entries: int) -> Array:
    """The message's first `entries` entries as an array of its element type."""
    assert msg.type is not None
    return msg.raw[:entries * msg.type.dtype.itemsize].view(msg.type.dtype)
