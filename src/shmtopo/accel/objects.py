"""shmtopo.accel.objects: mpi4py's lower-case collectives of Python objects
(``comm.allreduce(x)``, ``comm.bcast(obj)``, ``comm.gather(obj)``...) on an
accelerated comm's shared memory, with mpi4py's results.

Each object travels as mpi4py's own pickler makes it (``MPI.pickle``:
protocol 5 unless the program changed it, or cloudpickle if it set that),
a Python float or int (within int64) as its 8 bytes, and each rank gets
its own copy, as under mpi4py. Reductions
apply the program's op (an ``MPI.Op`` or any callable) in the association
of mpi4py's binomial tree (``op(op(x0, x1), op(x2, x3))``; the scans its
recursive doubling), so that a float sum has mpi4py's bits at any size.

A call first moves one fixed-size record per rank: a header (the length
of the object's bytes, which call, its root, how the object is encoded)
and those bytes when they fit (numbers, small arrays and small
containers). Only when some pickle does not fit does a second call move
the long ones, with counts every rank has learnt from the records,
through room the comm keeps for the next call.

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

# the length of the object's bytes, which call (of _CALLS), its root (-1:
# none), and how the object is encoded (below), with scatter's and
# alltoall's mark that some record of the call is too short for its pickle
_HEADER = struct.Struct("<qqqq")
_INLINE = RECORD - _HEADER.size

# the most bytes of long pickles a comm keeps room for between calls
_KEPT = 64 << 20

# the calls that share the allgather of records, told apart in the header
_CALLS = ("allgather", "allreduce", "gather", "reduce", "scan", "exscan")

Pickle = Any  # mpi4py's MPI.Pickle: dumps(obj) -> bytes, loads(buffer) -> obj


def _long(length: int) -> int:
    """What a pickle of this length sends in the second call."""
    return length if length > _INLINE else 0


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

    __slots__ = ("mine", "mine_array", "mine_view", "rows", "flat", "heads", "outgoing", "outgoing_array", "rank",
                 "size", "_payload")

    def __init__(self, comm: Comm) -> None:
        self.rank, self.size = comm.world_rank, comm.world_size
        self.mine = bytearray(RECORD)
        self.mine_array = np.frombuffer(self.mine, np.uint8)
        self.mine_view = memoryview(self.mine)
        self.rows = np.empty((self.size, RECORD), np.uint8)
        self.flat = self.rows.data.cast("B")
        self.heads = self.rows.view("<i8")[:, :4]
        self.outgoing = bytearray(self.size * RECORD)  # a scatter's or alltoall's records, one per rank
        self.outgoing_array = np.frombuffer(self.outgoing, np.uint8).reshape(self.size, RECORD)
        self._payload = np.empty(0, np.uint8)

    def payload(self, size: int) -> Any:
        """Room for the long pickles of a call, kept for the next up to
        _KEPT bytes (a fresh buffer of megabytes each call costs its page
        faults each call, which here made a 1 MiB allreduce 5x mpi4py's)."""
        if size > _KEPT:
            return np.empty(size, np.uint8)
        if self._payload.size < size:
            self._payload = np.empty(size, np.uint8)
        return self._payload[:size]


def _records(comm: Comm) -> _Records:
    records: _Records | None = comm.attributes.get(_Records)
    if records is None:
        records = _Records(comm)
        comm.attributes.set(_Records, records)
    return records


def _exchange(comm: Comm, pickle: Pickle, call: int, obj: Any, root: int = -1) -> list[Any] | None:
    """Every rank's object, unpickled, on every rank (root -1) or on root only
    (None elsewhere)."""
    records = _records(comm)
    data = _encode(comm, ALLGATHER, records.mine, pickle, obj, call, root)
    comm.allgather(records.mine_array, out=records.rows)
    heads = records.heads.tolist()
    longest = 0
    for length, c, r, _ in heads:
        if c != call or r != root:
            _disagree(heads)
        if length > longest:
            longest = length
    if longest > _INLINE:
        return _exchange_long(comm, pickle, data, heads, root)
    if root >= 0 and records.rank != root:
        return None
    flat, at, items = records.flat, _HEADER.size, []
    for length, _, _, encoding in heads:  # _decode's work, inline: this is the common case
        if encoding == _FLOAT:
            items.append(_FLOAT_BITS.unpack_from(flat, at)[0])
        elif encoding == _INT:
            items.append(_INT_BITS.unpack_from(flat, at)[0])
        else:
            items.append(pickle.loads(flat[at:at + length]))
        at += RECORD
    return items


def _exchange_long(comm: Comm, pickle: Pickle, data: bytes, heads: list[list[int]], root: int) -> list[Any] | None:
    """_exchange's second call: the pickles too long for a record."""
    records = _records(comm)
    longs = [_long(h[0]) for h in heads]
    send = _bytes(data if longs[records.rank] else b"")
    here = root < 0 or records.rank == root
    out = records.payload(sum(longs)) if here else None
    if root < 0:
        comm.allgatherv(send, longs, out=out)
    else:
        comm.gatherv(send, longs, root=root, out=out)
    del send, data
    if out is None:  # not the root
        return None
    flat, parts = records.flat, _split(out, longs)
    return [pickle.loads(parts[i]) if longs[i] else _decode(pickle, flat, i * RECORD, head)
            for i, head in enumerate(heads)]


# How a record holds its object (the header's last field, in _exchange's
# records): pickled, or a Python float or int (within int64) as its 8 bytes,
# which unpickling would give back bit for bit, at a third of the cost.
_PICKLED, _FLOAT, _INT = 0, 1, 2
_FLOAT_BITS, _INT_BITS = struct.Struct("<d"), struct.Struct("<q")
# in scatter's and alltoall's records, a flag beside the encoding: a second call follows
_LONG_ANY = 8


def _encode(comm: Comm, kind: int, record: bytearray, pickle: Pickle, obj: Any, call: int, root: int,
            at: int = 0) -> bytes:
    """obj into the record at `at` (the pickle if it does not fit); returns
    the pickle (b"" for a number). An object that cannot be pickled fails
    the call of `kind` on every rank."""
    number = type(obj)
    if number is float:
        _HEADER.pack_into(record, at, 8, call, root, _FLOAT)
        _FLOAT_BITS.pack_into(record, at + _HEADER.size, obj)
        return b""
    if number is int and -(1 << 63) <= obj < (1 << 63):
        _HEADER.pack_into(record, at, 8, call, root, _INT)
        _INT_BITS.pack_into(record, at + _HEADER.size, obj)
        return b""
    try:
        data: bytes = pickle.dumps(obj)
    except Exception as exc:  # noqa: BLE001 - every rank hears of it
        agreement.refuse(comm, kind, exc)
        raise  # not reached
    length = len(data)
    _HEADER.pack_into(record, at, length, call, root, _PICKLED)
    if length <= _INLINE:
        record[at + _HEADER.size:at + _HEADER.size + length] = data
    return data


def _mark_long(records: bytearray, n: int) -> None:
    """Every one of n records says: some record of this call has a pickle
    too long for it (the receivers' sign that a second call follows)."""
    for i in range(n):
        at = i * RECORD + _HEADER.size - _INT_BITS.size  # the header's last field, an int64
        _INT_BITS.pack_into(records, at, _INT_BITS.unpack_from(records, at)[0] | _LONG_ANY)


def _decode(pickle: Pickle, flat: memoryview, at: int, head: Any) -> Any:
    """The object of the record at `at`, whose header is `head`."""
    at += _HEADER.size
    encoding = head[3] & ~_LONG_ANY
    if encoding == _FLOAT:
        return _FLOAT_BITS.unpack_from(flat, at)[0]
    if encoding == _INT:
        return _INT_BITS.unpack_from(flat, at)[0]
    return pickle.loads(flat[at:at + head[0]])


# -- mpi4py's orders of reduction ---------------------------------------------------

def tree_reduce(items: list[Any], op: Callable[[Any, Any], Any]) -> Any:
    """mpi4py's reduction order: a binomial tree towards rank 0, each step
    op(lower ranks' partial, higher ranks' partial)."""
    if len(items) == 2:
        return op(items[0], items[1])
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
    return _exchange(comm, pickle, 2, obj, _root(comm, ALLGATHER, root, _records(comm).size))


def reduce(comm: Comm, pickle: Pickle, obj: Any, op: Callable[[Any, Any], Any], root: int) -> Any:
    items = _exchange(comm, pickle, 3, obj, _root(comm, ALLGATHER, root, _records(comm).size))
    return None if items is None else tree_reduce(items, op)


def scan(comm: Comm, pickle: Pickle, obj: Any, op: Callable[[Any, Any], Any]) -> Any:
    items = _exchange(comm, pickle, 4, obj)
    assert items is not None
    return doubling_scan(items, op, comm.world_rank, False)


def exscan(comm: Comm, pickle: Pickle, obj: Any, op: Callable[[Any, Any], Any]) -> Any:
    items = _exchange(comm, pickle, 5, obj)
    assert items is not None
    return doubling_scan(items, op, comm.world_rank, True)


class NotHere(Exception):
    """Raised before anything moves: the call is MPI's (a root that is a
    number but no rank of the comm: MPI raises ERR_ROOT for it, as mpi4py's
    programs and tests expect; every rank knows it from its own arguments)."""


def _root(comm: Comm, kind: int, root: Any, size: int) -> int:
    """A rank of the comm, as mpi4py takes it (an int, a bool or a numpy
    integer); a number that is no rank is MPI's to refuse (NotHere);
    anything else fails the call on every rank."""
    try:
        r = operator.index(root)
    except TypeError:
        agreement.refuse(comm, kind, TypeError(f"root must be an integer, not {type(root).__name__}"))
        raise  # not reached
    if not 0 <= r < size:
        raise NotHere
    return r


def bcast(comm: Comm, pickle: Pickle, obj: Any, root: Any) -> Any:
    records = _records(comm)
    if type(root) is not int or not 0 <= root < records.size:
        root = _root(comm, BCAST, root, records.size)
    record, data = records.mine, b""
    if records.rank == root:
        data = _encode(comm, BCAST, record, pickle, obj, 0, root)
    comm.bcast(records.mine_array, root, out=records.mine_array)
    head = _HEADER.unpack_from(record, 0)
    length = head[0]
    if length <= _INLINE:
        return _decode(pickle, records.mine_view, 0, head)
    if comm.world_rank == root:
        comm.bcast(_bytes(data), root)
        return pickle.loads(data)
    payload = np.empty(length, np.uint8)
    comm.bcast(payload, root, out=payload)
    return pickle.loads(payload)


def _sequence(comm: Comm, kind: int, seq: Any, n: int) -> list[Any]:
    """A scatter's or alltoall's sequence of one object per rank, as mpi4py
    reads it (None: None to every rank); else the call fails on every rank."""
    try:
        items = [None] * n if seq is None else list(seq)
        if len(items) != n:
            raise ValueError(f"expecting {n} items, got {len(items)}")
        return items
    except Exception as exc:  # noqa: BLE001 - every rank hears of it
        agreement.refuse(comm, kind, exc)
        raise  # not reached


def _outgoing(comm: Comm, kind: int, records: _Records, pickle: Pickle, seq: Any, root: int) -> list[bytes]:
    """One record per rank from a sequence, in records.outgoing; returns the
    pickles (b"" for numbers), the records marked if any is too long."""
    n = records.size
    datas = [_encode(comm, kind, records.outgoing, pickle, x, 0, root, i * RECORD)
             for i, x in enumerate(_sequence(comm, kind, seq, n))]
    if any(len(d) > _INLINE for d in datas):
        _mark_long(records.outgoing, n)
    return datas


def _joined_long(datas: list[bytes]) -> tuple[Any, list[int]]:
    """The pickles too long for their records, one after the other, and each one's count (0: none)."""
    counts = [_long(len(d)) for d in datas]
    return _bytes(b"".join(d for d, c in zip(datas, counts) if c)), counts


def scatter(comm: Comm, pickle: Pickle, seq: Any, root: Any) -> Any:
    records = _records(comm)
    if type(root) is not int or not 0 <= root < records.size:
        root = _root(comm, SCATTER, root, records.size)
    here = records.rank == root
    datas = _outgoing(comm, SCATTER, records, pickle, seq, root) if here else []
    comm.scatter(records.outgoing_array if here else None, root, out=records.mine_array)
    head = _HEADER.unpack_from(records.mine, 0)
    if not head[3] & _LONG_ANY:
        return _decode(pickle, records.mine_view, 0, head)
    mine = np.empty(_long(head[0]), np.uint8)
    if here:
        payload, counts = _joined_long(datas)
        comm.scatterv(payload, counts, root=root, out=mine)
    else:
        comm.scatterv(None, root=root, out=mine)
    return pickle.loads(mine) if mine.size else _decode(pickle, records.mine_view, 0, head)


def alltoall(comm: Comm, pickle: Pickle, seq: Any) -> list[Any]:
    records = _records(comm)
    datas = _outgoing(comm, ALLTOALL, records, pickle, seq, -1)
    comm.alltoall(records.outgoing_array, out=records.rows)
    heads = records.heads.tolist()
    flat = records.flat
    if not any(h[3] & _LONG_ANY for h in heads):  # each rank has every sender's mark: the same answer everywhere
        return [_decode(pickle, flat, i * RECORD, head) for i, head in enumerate(heads)]
    payload, sent = _joined_long(datas)
    got = [_long(h[0]) for h in heads]
    parts = _split(comm.alltoallv(payload, sent, None, got, None), got)
    return [pickle.loads(parts[i]) if got[i] else _decode(pickle, flat, i * RECORD, head)
            for i, head in enumerate(heads)]
