"""shmtopo.accel.plans: each accelerated call's arguments, read and checked
on this rank, planned as a Call for shmtopo's collective, or LeftToMPI
(valid, but MPI's to do). One planner per upper-case call (scan serves
Scan and Exscan), named after it.
"""
from __future__ import annotations

import operator
from typing import Any, NamedTuple

import numpy as np

from .._fastpath import note_derived
from ..comm import Comm
from .buffers import (Array, Message, Vector, elements, in_place, int_list, message, moved_type, split_spec,
                      vector)
from .datatypes import alltoallw_messages
from .tables import KnownType, LeftToMPI, Tables, check_op, op_name, type_name


class Call(NamedTuple):
    """What an accelerated call hands to shmtopo's collective."""
    send: Array
    out: Array | None
    op: str = ""
    root: int = -1
    back: Array | None = None  # the caller's misaligned result buffer, filled from out afterwards
    counts: tuple[Any, ...] = ()  # v-variants: counts and displacements, in elements


def _root_rank(root: Any, size: int) -> int:
    try:
        r = operator.index(root)
    except TypeError:
        raise TypeError(f"root must be an integer, not {type(root).__name__}") from None
    if not 0 <= r < size:
        raise ValueError(f"root {r} out of range [0, {size})")
    return r


def _same_type(t: Tables, send: Message, recv: Message) -> None:
    """mpi4py's check on reductions: one datatype, one count."""
    if t.handle(send.datatype) != t.handle(recv.datatype):
        raise ValueError("mismatch in send and receive MPI datatypes")
    if send.entries != recv.entries:
        raise ValueError(f"mismatch in send count {send.entries} and receive count {recv.entries}")


def _aligned(a: Array) -> Array:
    """a, or an aligned copy of it: the core's kernels read whole elements."""
    return a if a.flags.aligned else a.copy()


def _out_and_back(view: Array) -> tuple[Array, Array | None]:
    """(where the core writes, the caller's buffer to copy that into, if it
    is not the same): an aligned copy of a misaligned result buffer (a copy,
    so that an in-place input is there too)."""
    return (view, None) if view.flags.aligned else (view.copy(), view)


def bcast(shm: Comm, t: Tables, buf: Any, root: Any) -> Call:
    r = _root_rank(root, shm.world_size)
    if buf is t.IN_PLACE:
        raise ValueError("buf: MPI.IN_PLACE is no buffer for Bcast")
    sending = shm.world_rank == r
    msg = message(t, buf, "buf", writable=not sending)
    moved_type(msg, "buf")
    view = elements(msg, msg.entries)
    if sending and not view.flags.writeable:
        return Call(_aligned(view), None, root=r)  # shmtopo copies a read-only root buffer
    out, back = _out_and_back(view)
    return Call(out, out, root=r, back=back)  # in place


def _reduction(t: Tables, sendbuf: Any, recvbuf: Any, op: Any, receiving: bool) -> Call:
    """Allreduce, and Reduce on the root (receiving) or another rank."""
    check_op(t, op)
    if not receiving:  # mpi4py reads no receive buffer there
        if in_place(t, sendbuf):
            raise ValueError("sendbuf: MPI.IN_PLACE is valid at the root of Reduce only (None stands for it)")
        send = message(t, sendbuf, "sendbuf", writable=False)
        opname = op_name(t, op, moved_type(send, "sendbuf"))
        return Call(_aligned(elements(send, send.entries)), None, opname)
    recv = message(t, recvbuf, "recvbuf", writable=True)
    if in_place(t, sendbuf):
        opname = op_name(t, op, moved_type(recv, "recvbuf"))
        out, back = _out_and_back(elements(recv, recv.entries))
        return Call(out, out, opname, back=back)
    send = message(t, sendbuf, "sendbuf", writable=False)
    _same_type(t, send, recv)
    opname = op_name(t, op, moved_type(recv, "recvbuf"))
    out, back = _out_and_back(elements(recv, recv.entries))
    a = elements(send, send.entries)
    if back is not None:
        a = a.copy()  # the core writes a copy of the result buffer, so also read a copy of the input
    return Call(_aligned(a), out, opname, back=back)


def reduce(shm: Comm, t: Tables, sendbuf: Any, recvbuf: Any, op: Any, root: Any) -> Call:
    r = _root_rank(root, shm.world_size)
    plan = _reduction(t, sendbuf, recvbuf, op, shm.world_rank == r)
    return plan._replace(root=r)


def allreduce(shm: Comm, t: Tables, sendbuf: Any, recvbuf: Any, op: Any) -> Call:
    return _reduction(t, sendbuf, recvbuf, op, True)


def _gathered(shm: Comm, t: Tables, sendbuf: Any, recvbuf: Any, what: str,
              send_blocks: int) -> tuple[Array, Array, Array | None, int]:
    """Allgather and Alltoall: (input, result, caller's misaligned result, entries per block)."""
    size = shm.world_size
    recv = message(t, recvbuf, "recvbuf", writable=True, blocks=size)
    known = moved_type(recv, "recvbuf")
    out, back = _out_and_back(elements(recv, size * recv.entries))
    if in_place(t, sendbuf):
        return out, out, back, recv.entries
    send = message(t, sendbuf, "sendbuf", writable=False, blocks=send_blocks)
    if moved_type(send, "sendbuf").dtype != known.dtype or send.entries != recv.entries:
        raise LeftToMPI(f"{what}: sendbuf ({send.entries} x {type_name(send.datatype)}) and recvbuf "
                        f"({recv.entries} x {type_name(recv.datatype)} per rank) differ")
    a = elements(send, max(send_blocks, 1) * send.entries)
    return (_aligned(a) if back is None else a.copy()), out, back, recv.entries


def allgather(shm: Comm, t: Tables, sendbuf: Any, recvbuf: Any) -> Call:
    a, out, back, count = _gathered(shm, t, sendbuf, recvbuf, "Allgather", 0)
    if a is out:  # in place: this rank's block of the result
        rank = shm.world_rank
        a = out[rank * count:(rank + 1) * count]
    return Call(a, out.reshape(shm.world_size, count), back=back)


def alltoall(shm: Comm, t: Tables, sendbuf: Any, recvbuf: Any) -> Call:
    a, out, back, _ = _gathered(shm, t, sendbuf, recvbuf, "Alltoall", shm.world_size)
    return Call(a, out, back=back)


def reduce_scatter_block(shm: Comm, t: Tables, sendbuf: Any, recvbuf: Any, op: Any) -> Call:
    check_op(t, op)
    size = shm.world_size
    if in_place(t, sendbuf):
        # the input is the whole receive buffer, the result its first block
        recv = message(t, recvbuf, "recvbuf", writable=True, blocks=size)
        opname = op_name(t, op, moved_type(recv, "recvbuf"))
        whole, back = _out_and_back(elements(recv, size * recv.entries))
        return Call(whole, whole[:recv.entries], opname,
                     back=None if back is None else back[:recv.entries])
    recv = message(t, recvbuf, "recvbuf", writable=True)
    send = message(t, sendbuf, "sendbuf", writable=False, blocks=size)
    _same_type(t, send, recv)
    opname = op_name(t, op, moved_type(recv, "recvbuf"))
    out, back = _out_and_back(elements(recv, recv.entries))
    a = elements(send, size * send.entries)
    return Call(_aligned(a) if back is None else a.copy(), out, opname, back=back)


def _block(t: Tables, sendbuf: Any, known: KnownType, entries: int, what: str) -> Array:
    """The send block of a rooted or v-variant call, checked against the
    type and the count the result side expects of this rank."""
    send = message(t, sendbuf, "sendbuf", writable=False)
    if moved_type(send, "sendbuf").dtype != known.dtype:
        raise LeftToMPI(f"{what}: sendbuf ({type_name(send.datatype)}) and recvbuf have different types")
    if send.entries != entries:
        raise ValueError(f"{what}: sendbuf has {send.entries} entries where recvbuf expects {entries} "
                         f"from this rank")
    return _aligned(elements(send, send.entries))


def _sender(t: Tables, sendbuf: Any, root: int) -> Call:
    """Gather and Gatherv off the root, where mpi4py reads no receive buffer."""
    send = message(t, sendbuf, "sendbuf", writable=False)
    moved_type(send, "sendbuf")
    return Call(_aligned(elements(send, send.entries)), None, root=root)


def _receiver(t: Tables, recvbuf: Any, root: int) -> Call:
    """Scatter and Scatterv off the root, where mpi4py reads no send buffer."""
    recv = message(t, recvbuf, "recvbuf", writable=True)
    moved_type(recv, "recvbuf")
    out, back = _out_and_back(elements(recv, recv.entries))
    return Call(out[:0], out, root=root, back=back)


def gather(shm: Comm, t: Tables, sendbuf: Any, recvbuf: Any, root: Any) -> Call:
    size, rank = shm.world_size, shm.world_rank
    r = _root_rank(root, size)
    if rank != r:
        return _sender(t, sendbuf, r)
    recv = message(t, recvbuf, "recvbuf", writable=True, blocks=size)
    known = moved_type(recv, "recvbuf")
    c = recv.entries
    out, back = _out_and_back(elements(recv, size * c))
    if in_place(t, sendbuf):  # the root's block is in place already: hand over a copy of it
        a = out[r * c:(r + 1) * c].copy()
    else:
        a = _block(t, sendbuf, known, c, "Gather")
    return Call(a, out.reshape(size, c), root=r, back=back)


def scatter(shm: Comm, t: Tables, sendbuf: Any, recvbuf: Any, root: Any) -> Call:
    size, rank = shm.world_size, shm.world_rank
    r = _root_rank(root, size)
    if rank != r:
        return _receiver(t, recvbuf, r)
    send = message(t, sendbuf, "sendbuf", writable=False, blocks=size)
    known = moved_type(send, "sendbuf")
    c = send.entries
    a = elements(send, size * c)
    if in_place(t, recvbuf):  # the root's block stays where it is
        return Call(_aligned(a).reshape(size, c), np.empty(c, known.dtype), root=r)
    recv = message(t, recvbuf, "recvbuf", writable=True)
    if moved_type(recv, "recvbuf").dtype != known.dtype or recv.entries != c:
        raise LeftToMPI(f"Scatter: sendbuf ({c} x {type_name(send.datatype)} per rank) and recvbuf "
                        f"({recv.entries} x {type_name(recv.datatype)}) differ")
    out, back = _out_and_back(elements(recv, c))
    return Call((_aligned(a) if back is None else a.copy()).reshape(size, c), out, root=r, back=back)


def _vgathered(t: Tables, sendbuf: Any, recvbuf: Any, size: int, rank: int,
                what: str) -> tuple[Vector, Array, Array | None, Array]:
    """A v-gather's receiving side (Gatherv's root, every rank of
    Allgatherv): recvbuf's vector, where the result goes (_out_and_back), and this
    rank's block: its part of the result under IN_PLACE, else sendbuf
    checked against it."""
    v = vector(t, recvbuf, "recvbuf", writable=True, blocks=size)
    known = moved_type(v.msg, "recvbuf")
    out, back = _out_and_back(elements(v.msg, v.msg.entries))
    if in_place(t, sendbuf):
        a = out[v.displs[rank]:v.displs[rank] + v.counts[rank]].copy()
    else:
        a = _block(t, sendbuf, known, v.counts[rank], what)
    return v, out, back, a


def gatherv(shm: Comm, t: Tables, sendbuf: Any, recvbuf: Any, root: Any) -> Call:
    size, rank = shm.world_size, shm.world_rank
    r = _root_rank(root, size)
    if rank != r:
        return _sender(t, sendbuf, r)
    v, out, back, a = _vgathered(t, sendbuf, recvbuf, size, r, "Gatherv")
    return Call(a, out, root=r, back=back, counts=(v.counts, v.displs))


def scatterv(shm: Comm, t: Tables, sendbuf: Any, recvbuf: Any, root: Any) -> Call:
    size, rank = shm.world_size, shm.world_rank
    r = _root_rank(root, size)
    if rank != r:
        return _receiver(t, recvbuf, r)
    v = vector(t, sendbuf, "sendbuf", writable=False, blocks=size)
    known = moved_type(v.msg, "sendbuf")
    a = _aligned(elements(v.msg, v.msg.entries))
    if in_place(t, recvbuf):
        out, back = np.empty(v.counts[r], known.dtype), None
    else:
        recv = message(t, recvbuf, "recvbuf", writable=True)
        if moved_type(recv, "recvbuf").dtype != known.dtype:
            raise LeftToMPI("Scatterv: sendbuf and recvbuf have different types")
        if recv.entries != v.counts[r]:
            raise ValueError(f"recvbuf has {recv.entries} entries where sendbuf sends "
                             f"{v.counts[r]} to this rank")
        out, back = _out_and_back(elements(recv, recv.entries))
        if back is not None or np.may_share_memory(a, out):
            a = a.copy()
    return Call(a, out, root=r, back=back, counts=(v.counts, v.displs))


def allgatherv(shm: Comm, t: Tables, sendbuf: Any, recvbuf: Any) -> Call:
    size, rank = shm.world_size, shm.world_rank
    v, out, back, a = _vgathered(t, sendbuf, recvbuf, size, rank, "Allgatherv")
    if not in_place(t, sendbuf) and np.may_share_memory(a, out):
        a = a.copy()
    return Call(a, out, back=back, counts=(v.counts, v.displs))


def alltoallv(shm: Comm, t: Tables, sendbuf: Any, recvbuf: Any) -> Call:
    size = shm.world_size
    rv = vector(t, recvbuf, "recvbuf", writable=True, blocks=size)
    known = moved_type(rv.msg, "recvbuf")
    out, back = _out_and_back(elements(rv.msg, rv.msg.entries))
    if in_place(t, sendbuf):  # the blocks to send are where the received ones go
        return Call(out.copy(), out, back=back, counts=(rv.counts, rv.displs, rv.counts, rv.displs))
    sv = vector(t, sendbuf, "sendbuf", writable=False, blocks=size)
    if moved_type(sv.msg, "sendbuf").dtype != known.dtype:
        raise LeftToMPI("Alltoallv: sendbuf and recvbuf have different types")
    a = elements(sv.msg, sv.msg.entries)
    a = a.copy() if back is not None or np.may_share_memory(a, out) else _aligned(a)
    return Call(a, out, back=back, counts=(sv.counts, sv.displs, rv.counts, rv.displs))


def alltoallw(shm: Comm, t: Tables, sendbuf: Any, recvbuf: Any, first_use_to_mpi: bool = True) -> Call:
    """Every block's bytes, whatever its datatype (flattened once: datatypes.py)."""
    send, sendblocks, recv, recvblocks = alltoallw_messages(t, sendbuf, recvbuf, shm.world_size, first_use_to_mpi)
    return Call(send, recv, counts=(sendblocks, recvblocks))


def reduce_scatter(shm: Comm, t: Tables, sendbuf: Any, recvbuf: Any, recvcounts: Any,
                   op: Any) -> Call:
    """Reduce_scatter: counts None (not in place) are every rank's receive
    count, which the run learns from the others, as mpi4py does."""
    check_op(t, op)
    size, rank = shm.world_size, shm.world_rank
    recv = message(t, recvbuf, "recvbuf", writable=True)
    opname = op_name(t, op, moved_type(recv, "recvbuf"))
    counts = None if recvcounts is None else int_list(recvcounts, size, "recvcounts")
    if in_place(t, sendbuf):
        if counts is None:
            raise ValueError("recvcounts: MPI.IN_PLACE needs the counts")
        if recv.entries != sum(counts):
            raise ValueError(f"mismatch in receive count {recv.entries} and sum(counts) {sum(counts)}")
        whole, back = _out_and_back(elements(recv, recv.entries))
        # the input is the whole buffer, the result its first block
        return Call(whole.copy(), whole[:counts[rank]], opname,
                     back=None if back is None else back[:counts[rank]], counts=(counts,))
    send = message(t, sendbuf, "sendbuf", writable=False)
    if t.handle(send.datatype) != t.handle(recv.datatype):
        raise ValueError("mismatch in send and receive MPI datatypes")
    if counts is not None:
        if send.entries != sum(counts):
            raise ValueError(f"mismatch in send count {send.entries} and sum(counts) {sum(counts)}")
        if recv.entries != counts[rank]:
            raise ValueError(f"mismatch in receive count {recv.entries} and counts[{rank}] {counts[rank]}")
    out, back = _out_and_back(elements(recv, recv.entries))
    a = elements(send, send.entries)
    a = a.copy() if back is not None or np.may_share_memory(a, out) else _aligned(a)
    return Call(a, out, opname, back=back, counts=(counts,))


def scan(shm: Comm, t: Tables, sendbuf: Any, recvbuf: Any, op: Any) -> Call:
    plan = _reduction(t, sendbuf, recvbuf, op, True)
    if plan.out is not None and np.may_share_memory(plan.send, plan.out):
        plan = plan._replace(send=plan.send.copy())  # in place: the scan reads a copy of the input
    return plan


# ---- what every rank hands to MPI -----------------------------------------------------
#
# MPI requires every rank of a collective to pass the same op and matching
# type signatures (for the calls below, of the same length: counts are the
# same everywhere). So a call whose op shmtopo never reduces with (one the
# program made), or whose message holds, somewhere in its type signature,
# a type shmtopo never moves (long double, its complex...), goes to MPI on
# every rank, each knowing it from its own arguments: no agreement needed,
# and such a call costs what mpi4py's does. Only the messages MPI reads on
# every rank are looked at (a Gather's receive buffer is the root's alone),
# and only in non-empty ones, so that every rank decides alike; the
# v-variants, whose counts may be 0 on some ranks, only by their op.
# CommFast's C methods decide the plain forms alike (fastpath.c, accel_mpi_only).

def read_everywhere(t: Tables, kind: str, args: tuple[Any, ...]) -> Any:
    """The message of a call that MPI reads on every rank (a buffer spec), or None."""
    if kind == "Bcast":
        return args[0]
    if kind == "Scatter":
        return args[0] if in_place(t, args[1]) else args[1]
    send = args[0]
    return args[1] if in_place(t, send) else send


def _nonempty(t: Tables, spec: Any) -> tuple[Any, bool]:
    """(the datatype of a buffer spec, whether it holds any entry); (None, False) where unknown."""
    try:
        buf, count, _, datatype = split_spec(t, spec, "buffer")
        if datatype is None:
            datatype = format_type_of(t, buf)
        elif isinstance(datatype, str):
            datatype = t.typedict[datatype]
        if count is not None:
            return datatype, operator.index(count) > 0
        return datatype, memoryview(buf).nbytes > 0
    except Exception:  # noqa: BLE001 - not a form to decide by: the planner reads it
        return None, False


def format_type_of(t: Tables, buf: Any) -> Any:
    from .tables import format_type

    return format_type(t, buf, "buffer")


# derived datatypes decoded: {handle: (the Datatype object, what unmoved_in found)};
# the object itself is kept and compared, so that a handle MPI reuses for
# another type after a Free is decoded again
_decoded: dict[int, tuple[Any, Any]] = {}


def unmoved_in(t: Tables, datatype: Any) -> Any:
    """A named type in datatype's signature that shmtopo never moves, or None
    (MPI.PACKED matches any data: it decides nothing)."""
    if not isinstance(datatype, t.Datatype):
        return None
    key = t.handle(datatype)
    if key in t.types or key in (t.null_type, t.packed):
        return None
    seen = _decoded.get(key)
    if seen is not None and seen[0] is datatype:
        found = seen[1]
    else:
        found = _unmoved_in(t, datatype)
        if len(_decoded) >= 256:
            _decoded.clear()
        _decoded[key] = (datatype, found)
    if found is None and not datatype.is_named:
        note_derived(datatype)  # the planner hands its messages to MPI: CommFast may too, agreed
    return found


def _unmoved_in(t: Tables, datatype: Any) -> Any:
    if datatype.is_named:
        key = t.handle(datatype)
        return None if key in t.types or key == t.packed else datatype
    for base in datatype.Get_contents()[3]:
        try:
            found = _unmoved_in(t, base)
            if found is not None:
                return found
        finally:
            if not base.is_predefined:
                base.Free()  # MPI_Type_get_contents made a new handle
    return None


def mpi_only(t: Tables, kind: str, args: tuple[Any, ...], op: Any, v: bool) -> str | None:
    """Why every rank hands this call to MPI by MPI's own rules (see above), or None."""
    if op is not None and isinstance(op, t.Op) and t.handle(op) not in t.ops and not op.is_predefined:
        return "a user-defined op"
    if v:
        return None
    datatype, nonempty = _nonempty(t, read_everywhere(t, kind, args))
    found = unmoved_in(t, datatype) if nonempty else None
    return None if found is None else f"{type_name(found)}, which shmtopo does not move"
