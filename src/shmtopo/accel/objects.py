"""shmtopo.accel.objects: mpi4py's lower-case collectives of Python objects
(``comm.allreduce(x)``, ``comm.bcast(obj)``, ``comm.gather(obj)``...) on an
accelerated comm's shared memory, with mpi4py's results.

Each object travels as mpi4py's own pickler makes it (``MPI.pickle``:
protocol 5 unless the program changed it, or cloudpickle if it set that),
and each rank gets its own unpickled copy, as under mpi4py. Reductions
apply the program's op (an ``MPI.Op`` or any callable) in the association
of mpi4py's binomial tree (``op(op(x0, x1), op(x2, x3))``; the scans its
recursive doubling), so that a float sum has mpi4py's bits at any size.

A call first moves one fixed-size record per rank: a header (the pickle's
length, which call, its root, whether a pickle is too long for a record)
and the pickle itself when it fits (most numbers, small arrays and small
containers). Only when some pickle does not fit does a second call move
the long ones, with counts every rank has learnt from the records.

A rank whose object cannot be pickled, or whose root passes a sequence of
the wrong length (scatter, alltoall), fails the first call's agreement, so
that every rank raises the same exception; so do ranks that disagree on
the call or its root.
"""
from __future__ import annotations

import operator
import struct
from typing import Any, Callable

import numpy as np

from .. import agreement
from .._types import ALLGATHER, ALLTOALL, BCAST, SCATTER
from ..comm import Comm
from ..errors import ShmtopoValueError

#: bytes of the record each rank moves first (its header, then its pickle when that fits)
RECORD = 256

# length of the pickle, which call, its root (-1: none), and whether the
# sender has a pickle too long for its record
_HEADER = struct.Struct("<qqqq")
_INLINE = RECORD - _HEADER.size

# the calls that share the allgather of records, told apart in the header
_CALLS = ("allgather", "allreduce", "gather", "reduce", "scan", "exscan")

Pickle = Any  # mpi4py's MPI.Pickle: dumps(obj) -> bytes, loads(buffer) -> obj


def _dumps(comm: Comm, kind: int, pickle: Pickle, obj: Any) -> bytes:
    """obj pickled; if it cannot be, the call fails on every rank."""
    try:
        return pickle.dumps(obj)  # type: ignore[no-any-return]
    except Exception as exc:  # noqa: BLE001 - every rank hears of it
        agreement.refuse(comm, kind, exc)
        raise  # not reached: refuse raises


def _items(comm: Comm, kind: int, pickle: Pickle, seq: Any) -> list[bytes]:
    """A scatter's or alltoall's sequence, one pickle per rank, as mpi4py
    reads it (None: None to every rank)."""
    n = comm.world_size
    try:
        items = [None] * n if seq is None else list(seq)
        if len(items) != n:
            raise ValueError(f"expecting {n} items, got {len(items)}")
        return [pickle.dumps(x) for x in items]
    except Exception as exc:  # noqa: BLE001 - every rank hears of it
        agreement.refuse(comm, kind, exc)
        raise  # not reached


def _fill(record: Any, offset: int, data: bytes, call: int, root: int, long_any: bool) -> None:
    n = len(data)
    _HEADER.pack_into(record, offset, n, call, root, long_any)
    if n <= _INLINE:
        record[offset + _HEADER.size:offset + _HEADER.size + n] = data


def _long(length: int) -> int:
    """What a pickle of this length sends in the second call."""
    return length if length > _INLINE else 0


def _inline(flat: memoryview, row: int, length: int) -> memoryview:
    start = row * RECORD + _HEADER.size
    return flat[start:start + length]


def _bytes(data: bytes | bytearray) -> Any:
    return np.frombuffer(data, np.uint8)


def _split(payload: Any, lengths: list[int]) -> list[memoryview]:
    """The second call's payload cut into the pickles of the given lengths (0: none)."""
    flat, parts, at = memoryview(payload).cast("B"), [], 0
    for n in lengths:
        parts.append(flat[at:at + n])
        at += n
    return parts


def _call_name(call: int, root: int) -> str:
    name = _CALLS[call] if 0 <= call < len(_CALLS) else "another collective"
    return f"{name}(root={root})" if root >= 0 else name


def _disagree(heads: list[tuple[int, int, int, int]]) -> None:
    """The same verdict on every rank (each has every header): the first
    rank whose call or root is not rank 0's."""
    first = heads[0]
    for rank, (_, c, r, _) in enumerate(heads):
        if (c, r) != (first[1], first[2]):
            raise ShmtopoValueError(f"ranks disagree: rank {rank} called {_call_name(c, r)}, but rank 0 called "
                                    f"{_call_name(first[1], first[2])}", 22, rank)


class _Records:
    """A comm's records, kept for its next call (attached to it): this
    rank's, and every rank's as an allgather brings them, with the headers
    read as numbers in place."""

    __slots__ = ("mine", "mine_array", "rows", "flat", "heads", "rank", "size")

    def __init__(self, comm: Comm) -> None:
        self.rank, self.size = comm.world_rank, comm.world_size
        self.mine = bytearray(RECORD)
        self.mine_array = np.frombuffer(self.mine, np.uint8)
        self.rows = np.empty((self.size, RECORD), np.uint8)
        self.flat = self.rows.data.cast("B")
        self.heads = self.rows.view("<i8")[:, :4]


def _records(comm: Comm) -> _Records:
    records: _Records | None = comm.attributes.get(_Records)
    if records is None:
        records = _Records(comm)
        comm.attributes.set(_Records, records)
    return records


def _exchange(comm: Comm, pickle: Pickle, call: int, obj: Any, root: int = -1) -> list[Any] | None:
    """Every rank's object, unpickled, on every rank (root -1) or on root only
    (None elsewhere)."""
    try:
        data = pickle.dumps(obj)
    except Exception as exc:  # noqa: BLE001 - every rank hears of it
        agreement.refuse(comm, ALLGATHER, exc)
        raise  # not reached
    records = _records(comm)
    length, mine = len(data), records.mine
    _HEADER.pack_into(mine, 0, length, call, root, False)
    if length <= _INLINE:
        mine[_HEADER.size:_HEADER.size + length] = data
    comm.allgather(records.mine_array, out=records.rows)
    heads = records.heads.tolist()
    lengths = []
    for length, c, r, _ in heads:
        if c != call or r != root:
            _disagree(heads)
        lengths.append(length)
    here = root < 0 or records.rank == root
    if max(lengths) > _INLINE:
        return _exchange_long(comm, pickle, data, lengths, root)
    if not here:
        return None
    loads, flat, at = pickle.loads, records.flat, _HEADER.size
    items = []
    for length in lengths:
        items.append(loads(flat[at:at + length]))
        at += RECORD
    return items


def _exchange_long(comm: Comm, pickle: Pickle, data: bytes, lengths: list[int], root: int) -> list[Any] | None:
    """_exchange's second call: the pickles too long for a record."""
    flat = _records(comm).flat
    longs = [_long(x) for x in lengths]
    send = _bytes(data if longs[comm.world_rank] else b"")
    payload = comm.allgatherv(send, longs) if root < 0 else comm.gatherv(send, longs, root=root)
    if payload is None:  # not the root
        return None
    parts = _split(payload, longs)
    loads = pickle.loads
    return [loads(parts[i] if longs[i] else _inline(flat, i, lengths[i])) for i in range(len(lengths))]


# -- mpi4py's orders of reduction ---------------------------------------------------

def tree_reduce(items: list[Any], op: Callable[[Any, Any], Any]) -> Any:
    """mpi4py's reduction order: a binomial tree towards rank 0, each step
    op(lower ranks' partial, higher ranks' partial)."""
    items = list(items)
    n, step = len(items), 1
    while step < n:
        for r in range(0, n - step, 2 * step):
            items[r] = op(items[r], items[r + step])
        step *= 2
    return items[0]


def doubling_scan(items: list[Any], op: Callable[[Any, Any], Any], rank: int, exclusive: bool) -> Any:
    """mpi4py's (ex)scan order on `rank`: recursive doubling, in which each
    pair of ranks ``lo < hi`` makes ``op(partial[lo], partial[hi])`` its new
    partial, and the higher folds the lower's partial into its result from
    the left (an exscan starts from the first one it receives)."""
    n = len(items)
    partial = list(items)
    result, have = (None, False) if exclusive else (items[rank], True)
    mask = 1
    while mask < n:
        partner = rank ^ mask
        if partner < rank:
            result, have = (op(partial[partner], result) if have else partial[partner]), True
        if 2 * mask < n:  # the partials feed only the later steps
            new = list(partial)
            for lo in range(n):
                hi = lo ^ mask
                if lo < hi < n:
                    new[lo] = new[hi] = op(partial[lo], partial[hi])
            partial = new
        mask <<= 1
    return result


# -- the collectives ----------------------------------------------------------------

def allgather(comm: Comm, pickle: Pickle, obj: Any) -> list[Any]:
    items = _exchange(comm, pickle, 0, obj)
    assert items is not None
    return items


def allreduce(comm: Comm, pickle: Pickle, obj: Any, op: Callable[[Any, Any], Any]) -> Any:
    items = _exchange(comm, pickle, 1, obj)
    assert items is not None
    return tree_reduce(items, op)


def gather(comm: Comm, pickle: Pickle, obj: Any, root: int) -> list[Any] | None:
    return _exchange(comm, pickle, 2, obj, _root(comm, ALLGATHER, root))


def reduce(comm: Comm, pickle: Pickle, obj: Any, op: Callable[[Any, Any], Any], root: int) -> Any:
    items = _exchange(comm, pickle, 3, obj, _root(comm, ALLGATHER, root))
    return None if items is None else tree_reduce(items, op)


def scan(comm: Comm, pickle: Pickle, obj: Any, op: Callable[[Any, Any], Any]) -> Any:
    items = _exchange(comm, pickle, 4, obj)
    assert items is not None
    return doubling_scan(items, op, comm.world_rank, False)


def exscan(comm: Comm, pickle: Pickle, obj: Any, op: Callable[[Any, Any], Any]) -> Any:
    items = _exchange(comm, pickle, 5, obj)
    assert items is not None
    return doubling_scan(items, op, comm.world_rank, True)


def names_no_rank(root: Any, size: int) -> bool:
    """True for an integer root that is no rank of a comm of `size` (MPI
    raises ERR_ROOT for it; mpi4py checks it on each rank). None (no root),
    a rank, or what is not an integer at all (the call then fails on every
    rank) is False."""
    try:
        return root is not None and not 0 <= operator.index(root) < size
    except TypeError:
        return False


def _root(comm: Comm, kind: int, root: Any) -> int:
    """A rank of the comm, as mpi4py takes it (an int, a bool or a numpy
    integer); anything else fails the call on every rank."""
    try:
        return operator.index(root)
    except TypeError:
        agreement.refuse(comm, kind, TypeError(f"root must be an integer, not {type(root).__name__}"))
        raise  # not reached


def bcast(comm: Comm, pickle: Pickle, obj: Any, root: Any) -> Any:
    root = _root(comm, BCAST, root)
    records = _records(comm)
    record, data = records.mine, b""
    if comm.world_rank == root:
        data = _dumps(comm, BCAST, pickle, obj)
        _fill(record, 0, data, 0, root, False)
    comm.bcast(records.mine_array, root, out=records.mine_array)
    length = _HEADER.unpack_from(record, 0)[0]
    if not _long(length):
        return pickle.loads(memoryview(record)[_HEADER.size:_HEADER.size + length])
    if comm.world_rank == root:
        comm.bcast(_bytes(data), root)
        return pickle.loads(data)
    payload = np.empty(length, np.uint8)
    comm.bcast(payload, root, out=payload)
    return pickle.loads(payload)


def scatter(comm: Comm, pickle: Pickle, seq: Any, root: Any) -> Any:
    root = _root(comm, SCATTER, root)
    n, here = comm.world_size, comm.world_rank == root
    send = None
    datas: list[bytes] = []
    if here:
        datas = _items(comm, SCATTER, pickle, seq)
        long_any = any(_long(len(d)) for d in datas)
        records = bytearray(n * RECORD)
        for i, d in enumerate(datas):
            _fill(records, i * RECORD, d, 0, root, long_any)
        send = np.frombuffer(records, np.uint8).reshape(n, RECORD)
    record = bytearray(RECORD)
    comm.scatter(send, root, out=_bytes(record))
    length, _, _, long_any = _HEADER.unpack_from(record, 0)
    if not long_any:
        return pickle.loads(memoryview(record)[_HEADER.size:_HEADER.size + length])
    mine = np.empty(_long(length), np.uint8)
    if here:
        counts = [_long(len(d)) for d in datas]
        comm.scatterv(_bytes(b"".join(d for d in datas if _long(len(d)))), counts, root=root, out=mine)
    else:
        comm.scatterv(None, root=root, out=mine)
    return pickle.loads(mine if _long(length) else memoryview(record)[_HEADER.size:_HEADER.size + length])


def alltoall(comm: Comm, pickle: Pickle, seq: Any) -> list[Any]:
    n = comm.world_size
    datas = _items(comm, ALLTOALL, pickle, seq)
    long_any = any(_long(len(d)) for d in datas)
    records = bytearray(n * RECORD)
    for i, d in enumerate(datas):
        _fill(records, i * RECORD, d, 0, -1, long_any)
    rows = comm.alltoall(np.frombuffer(records, np.uint8).reshape(n, RECORD),
                         out=np.empty((n, RECORD), np.uint8))
    flat = rows.data.cast("B")
    heads = [_HEADER.unpack_from(flat, i * RECORD) for i in range(n)]
    lengths = [h[0] for h in heads]
    parts: list[Any] = [None] * n
    if any(h[3] for h in heads):  # each rank has every sender's flag: the same answer everywhere
        sent = [_long(len(d)) for d in datas]
        got = [_long(x) for x in lengths]
        payload = comm.alltoallv(_bytes(b"".join(d for d in datas if _long(len(d)))), sent, None, got, None)
        parts = _split(payload, got)
    loads = pickle.loads
    return [loads(parts[i] if _long(lengths[i]) else _inline(flat, i, lengths[i])) for i in range(n)]
