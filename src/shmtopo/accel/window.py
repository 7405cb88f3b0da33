"""shmtopo.accel.window: MPI-3 shared-memory windows whose synchronisation
and one-sided calls run on the node's shared memory directly.

``awin = shmtopo.accelerate(win)`` (collective over the window's group)
takes a window made by ``MPI.Win.Allocate_shared`` and returns an instance
of :class:`AcceleratedWin`, a subclass of ``MPI.Win`` on the same handle;
the memory stays MPI's. Its Fence is a shmtopo fence; Lock/Unlock and
Lock_all/Unlock_all take a real reader-writer lock per target rank that
lives in shared memory beside the window; Put/Get are copies between the
origin buffer and the target's segment; Accumulate, Get_accumulate,
Fetch_and_op and Compare_and_swap update each element with one CPU atomic
where its type and address allow (else under the target's guard), which is
MPI's element-wise atomicity; Flush*, Sync are memory barriers, every call
being complete on return (MPI-4's unified model); Rput/Rget/Raccumulate/
Rget_accumulate return completed requests.

What it does not run goes to the MPI window, counted in :meth:`shm_stats`
and refused under SHMTOPO_ACCEL_STRICT=1: windows of other flavours
(Create, Allocate, Create_dynamic: every call), PSCW (Start, Complete, Post,
Wait, Test; the one-sided calls of a Start epoch), derived datatypes,
buffers shmtopo does not read (device memory, MPI.BOTTOM), and ops or types
the core does not reduce (a user op, long double). A delegated one-sided
call outside a Start epoch runs inside an MPI lock of its target, since
MPI's window sees none of shmtopo's epochs.

Misuse raises MPI's error class, as an ``MPI.Exception``: a target rank out
of range (MPI_ERR_RANK), memory past the target's segment (ERR_RMA_RANGE,
and nothing is written), types that do not match (ERR_TYPE), a one-sided
call outside any epoch, an Unlock without its Lock, a second Lock of one
target (ERR_RMA_SYNC), an unknown lock type or assertion (ERR_LOCKTYPE,
ERR_ASSERT). A Fence that one rank cannot enter (a bad assertion, a lock
still held) raises there and leaves the window, so that the others' Fence
raises PeerAbortedError naming that rank instead of waiting.
"""
from __future__ import annotations

import operator
import os
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from .. import _types, agreement
from .._fastpath import RmaState, WinFast, bind_window, copied_new
from .._base import hold_all, release_all
from .._native import ffi, lib
from ..comm import Comm
from ..job import dup_within, local_timeout
from ..errors import ShmtopoValueError, check
from .buffers import Message, message
from .tables import LeftToMPI, Tables, format_type, get_tables, op_name

STRICT_VARIABLE = "SHMTOPO_ACCEL_STRICT"

#: The calls that run in shared memory on a window made by Allocate_shared.
ACCELERATED = ("Fence", "Lock", "Unlock", "Lock_all", "Unlock_all", "Flush", "Flush_all", "Flush_local",
               "Flush_local_all", "Sync", "Put", "Get", "Accumulate", "Get_accumulate", "Fetch_and_op",
               "Compare_and_swap", "Rput", "Rget", "Raccumulate", "Rget_accumulate")
#: Always MPI's.
MPI_ONLY = ("Start", "Complete", "Post", "Wait", "Test")


_error_classes: dict[type, type] = {}


def _mpi_error(t: Tables, error_class: int, text: str) -> Exception:
    """MPI's exception of that class (an ``MPI.Exception``), saying what shmtopo saw."""
    cls = _error_classes.get(t.MPI.Exception)
    if cls is None:
        def __str__(self: Any) -> str:
            return f"{self.Get_error_string()}: {self.text}"
        cls = _error_classes[t.MPI.Exception] = type("WindowError", (t.MPI.Exception,), {
            "__str__": __str__, "__module__": "shmtopo",
            "__doc__": "An MPI.Exception of MPI's error class, raised by an accelerated window."})
    exc = cls(error_class)
    exc.text = text
    assert isinstance(exc, Exception)
    return exc


class AcceleratedWin:
    """An mpi4py window (a subclass of ``MPI.Win``, on the same handle)
    whose synchronisation and one-sided calls on a shared-memory window run
    through shmtopo. Make one with ``shmtopo.accelerate(win)``, or with this
    class's ``Allocate_shared`` (and ``Create``, ``Allocate``,
    ``Create_dynamic``, which give windows whose every call is MPI's)."""

    if not TYPE_CHECKING:
        __slots__ = ()

    _t: Tables
    _shared: bool
    _shm: Comm | None
    _ctrl: Any
    _ctrl_h: Any
    _comm: Any
    _bases: list[Any]
    _sizes: list[int]
    _units: list[int]
    _me: int
    _n: int
    _strict: bool
    _stats: dict[str, list[int]]
    _rs: Any  # the epochs (shmtopo._fastpath.RmaState), shared with the C methods of the plain calls
    _mpi_access: bool

    if TYPE_CHECKING:
        def __getattr__(self, name: str) -> Any:
            """mpi4py's own (Get_attr, Shared_query, tomemory, ...)."""

    # -- what it is -------------------------------------------------------
    def shm_stats(self) -> dict[str, tuple[int, int]]:
        """Local: {call: (in shared memory, delegated to MPI)} for each call made at least once."""
        counts = {name: (n[0] + self._c_count(name), n[1]) for name, n in self._stats.items()}
        return {name: n for name, n in counts.items() if n[0] or n[1]}

    @property
    def accelerated(self) -> bool:
        """True where the calls run in shared memory (a window of flavour
        shared, not yet freed), False where they all go to MPI."""
        return self._shared and self._shm is not None

    def _mpi(self) -> Any:
        return super(AcceleratedWin, self)

    def _c_count(self, name: str) -> int:
        """The calls of that name WinFast's C methods ran (they count there)."""
        return self._rs.count_of(name) if name in _WIN_FAST else 0

    def _count(self, name: str, accelerated: bool) -> None:
        self._stats[name][0 if accelerated else 1] += 1

    def _why_mpi(self) -> str:
        """Why every one-sided call goes to MPI now (not self.accelerated or self._mpi_access)."""
        if not self._shared:
            return "not a shared-memory window"
        return "shmtopo's part has been freed" if self._shm is None else "inside a Start epoch"

    def _refuse_in_strict(self, name: str, why: str) -> None:
        if self._strict:
            raise ShmtopoValueError(f"Win.{name} is delegated to MPI ({why}), and {STRICT_VARIABLE}=1")

    def _delegate(self, name: str, why: str, *args: Any, **kwargs: Any) -> Any:
        self._refuse_in_strict(name, why)
        result = getattr(self._mpi(), name)(*args, **kwargs)
        self._count(name, False)
        return result

    def _to_mpi(self, name: str, why: str, *args: Any) -> None:
        self._delegate(name, why, *args)

    def _one_sided_to_mpi(self, name: str, why: str, rank: int, *args: Any) -> None:
        self._delegate_one_sided(name, why, rank, *args)

    def _delegate_one_sided(self, name: str, why: str, rank: int, *args: Any) -> Any:
        """A one-sided call MPI makes (args: mpi4py's, less the target
        rank): inside a Start epoch, or on a window MPI runs, as it is;
        else in an MPI lock of its target, since MPI sees none of shmtopo's
        epochs."""
        self._refuse_in_strict(name, why)
        mpi = self._mpi()
        wrap = self._shared and not self._mpi_access and rank != self._t.MPI.PROC_NULL
        if wrap:
            # NOCHECK: no lock message, which MPICH's target would answer only from
            # inside MPI, while it may be waiting in a shmtopo Fence or lock (any
            # conflicting access is held off by shmtopo's own lock, or the epoch)
            mpi.Lock(rank, self._t.MPI.LOCK_SHARED, self._t.MPI.MODE_NOCHECK)
        try:
            result = _call_with_rank(getattr(mpi, name), name, rank, args)
        finally:
            if wrap:
                mpi.Unlock(rank)
        self._count(name, False)
        return result

    # -- epochs -----------------------------------------------------------
    def _rank(self, rank: Any, what: str) -> int:
        r = operator.index(rank)
        if not 0 <= r < self._n:
            raise _mpi_error(self._t, self._t.MPI.ERR_RANK, f"{what}: target rank {r} is not in [0, {self._n})")
        return r

    def _in_epoch(self, rank: int, what: str) -> None:
        rs = self._rs
        if not (rs.fence_open or rs.lock_all or rs.lock_of(rank) is not None):
            raise _mpi_error(self._t, self._t.MPI.ERR_RMA_SYNC,
                             f"{what} to rank {rank} outside any epoch (no Fence, Lock or Lock_all)")

    def _in_passive(self, rank: int | None, what: str) -> None:
        rs = self._rs
        if not (rs.lock_all or (rs.nlocks if rank is None else rs.lock_of(rank) is not None)):
            target = "any rank" if rank is None else f"rank {rank}"
            raise _mpi_error(self._t, self._t.MPI.ERR_RMA_SYNC, f"{what}: no lock of {target} is held")

    def _leave(self, exc: Exception) -> Exception:
        """Raise exc after leaving the window's fences: the others' Fence
        then raises instead of waiting for this rank."""
        if self._ctrl is not None:
            self._ctrl.abandon()
        return exc

    def Fence(self, assertion: int = 0) -> None:
        """Collective: as mpi4py's ``Fence``: every store and one-sided call
        made before it, by any rank, is complete and visible after it.
        (The plain call is WinFast's, in C; this reads the others.)"""
        if not self.accelerated:
            return self._to_mpi("Fence", "not a shared-memory window", assertion)
        t = self._t.MPI
        valid = t.MODE_NOSTORE | t.MODE_NOPUT | t.MODE_NOPRECEDE | t.MODE_NOSUCCEED
        a = operator.index(assertion)
        if a & ~valid:
            raise self._leave(_mpi_error(self._t, t.ERR_ASSERT, f"Fence: assertion {a:#x} is not one of "
                                         "MODE_NOSTORE, MODE_NOPUT, MODE_NOPRECEDE, MODE_NOSUCCEED"))
        if self._rs.nlocks or self._rs.lock_all:
            raise self._leave(_mpi_error(self._t, t.ERR_RMA_SYNC, "Fence inside a Lock or Lock_all epoch"))
        self._ctrl.fence()
        self._rs.fence_open = not a & t.MODE_NOSUCCEED
        self._count("Fence", True)

    def Lock(self, rank: int, lock_type: int | None = None, assertion: int = 0) -> None:
        """Local: as mpi4py's ``Lock`` (default LOCK_EXCLUSIVE): a real lock
        of rank's memory, shared or exclusive; MODE_NOCHECK takes none."""
        t = self._t.MPI
        lock_type = t.LOCK_EXCLUSIVE if lock_type is None else lock_type
        if not self.accelerated:
            return self._to_mpi("Lock", "not a shared-memory window", rank, lock_type, assertion)
        if rank == t.PROC_NULL:
            return None
        r = self._rank(rank, "Lock")
        if lock_type not in (t.LOCK_EXCLUSIVE, t.LOCK_SHARED):
            raise _mpi_error(self._t, t.ERR_LOCKTYPE, f"Lock: lock type {lock_type!r}")
        a = operator.index(assertion)
        if a & ~t.MODE_NOCHECK:
            raise _mpi_error(self._t, t.ERR_ASSERT, f"Lock: assertion {a:#x} (only MODE_NOCHECK)")
        locked = self._rs.lock_of(r) is not None
        if locked or self._rs.lock_all:
            raise _mpi_error(self._t, t.ERR_RMA_SYNC, f"Lock: rank {r} is locked already"
                             if locked else "Lock inside a Lock_all epoch")
        exclusive = lock_type == t.LOCK_EXCLUSIVE
        taken = not a & t.MODE_NOCHECK
        if taken:
            check(lib.shmtopo_rma_lock(self._ctrl_h, r, int(exclusive)))
        self._rs.set_lock(r, exclusive, taken)
        self._count("Lock", True)
        return None

    def Unlock(self, rank: int) -> None:
        """Local: as mpi4py's ``Unlock``: the epoch's calls are complete and visible."""
        if not self.accelerated:
            return self._to_mpi("Unlock", "not a shared-memory window", rank)
        if rank == self._t.MPI.PROC_NULL:
            return None
        r = self._rank(rank, "Unlock")
        held = self._rs.pop_lock(r)
        if held is None:
            raise _mpi_error(self._t, self._t.MPI.ERR_RMA_SYNC, f"Unlock: rank {r} is not locked")
        return self._release(r, held)

    def _release(self, rank: int, held: tuple[bool, bool]) -> None:
        """Unlock's work once rank's lock (exclusive, taken) is off the books."""
        lib.shmtopo_rma_sync()
        if held[1]:
            check(lib.shmtopo_rma_unlock(self._ctrl_h, rank, int(held[0])))
        self._stats["Unlock"][0] += 1

    def Lock_all(self, assertion: int = 0) -> None:
        """Local: as mpi4py's ``Lock_all``: a shared lock of every rank."""
        if not self.accelerated:
            return self._to_mpi("Lock_all", "not a shared-memory window", assertion)
        t = self._t.MPI
        a = operator.index(assertion)
        if a & ~t.MODE_NOCHECK:
            raise _mpi_error(self._t, t.ERR_ASSERT, f"Lock_all: assertion {a:#x} (only MODE_NOCHECK)")
        if self._rs.nlocks or self._rs.lock_all:
            raise _mpi_error(self._t, t.ERR_RMA_SYNC, "Lock_all inside a Lock or Lock_all epoch")
        if not a & t.MODE_NOCHECK:
            check(lib.shmtopo_rma_lock_all(self._ctrl_h))
        self._rs.lock_all = True
        self._rs.all_taken = not a & t.MODE_NOCHECK
        self._count("Lock_all", True)
        return None

    def Unlock_all(self) -> None:
        """Local: as mpi4py's ``Unlock_all``."""
        if not self.accelerated:
            return self._to_mpi("Unlock_all", "not a shared-memory window")
        if not self._rs.lock_all:
            raise _mpi_error(self._t, self._t.MPI.ERR_RMA_SYNC, "Unlock_all without Lock_all")
        self._rs.lock_all = False
        if self._rs.all_taken:
            check(lib.shmtopo_rma_unlock_all(self._ctrl_h))
        else:
            lib.shmtopo_rma_sync()
        self._count("Unlock_all", True)
        return None

    def _flush(self, name: str, rank: int | None) -> None:
        if not self.accelerated:
            return self._to_mpi(name, "not a shared-memory window", *(() if rank is None else (rank,)))
        if rank is not None:
            if rank == self._t.MPI.PROC_NULL:
                return None
            rank = self._rank(rank, name)
        self._in_passive(rank, name)
        lib.shmtopo_rma_sync()
        self._count(name, True)
        return None

    def Flush(self, rank: int) -> None:
        """Local: the calls to rank are complete at both ends (they are, on return)."""
        return self._flush("Flush", rank)

    def Flush_all(self) -> None:
        return self._flush("Flush_all", None)

    def Flush_local(self, rank: int) -> None:
        return self._flush("Flush_local", rank)

    def Flush_local_all(self) -> None:
        return self._flush("Flush_local_all", None)

    def Sync(self) -> None:
        """Local: a full memory barrier (the public and private copies are one: unified model)."""
        if not self.accelerated:
            return self._to_mpi("Sync", "not a shared-memory window")
        lib.shmtopo_rma_sync()
        self._count("Sync", True)
        return None

    # -- PSCW: MPI's --------------------------------------------------------
    def Start(self, group: Any, assertion: int = 0) -> None:
        """MPI's ``Start``; the one-sided calls of its epoch go to MPI too."""
        self._delegate("Start", "PSCW is MPI's", group, assertion)
        self._mpi_access = True
        self._rs.fast = False

    def Complete(self) -> None:
        self._delegate("Complete", "PSCW is MPI's")
        self._mpi_access = False
        self._rs.fast = self.accelerated

    def Post(self, group: Any, assertion: int = 0) -> None:
        self._delegate("Post", "PSCW is MPI's", group, assertion)

    def Wait(self) -> None:
        self._delegate("Wait", "PSCW is MPI's")

    def Test(self) -> bool:
        return bool(self._delegate("Test", "PSCW is MPI's"))

    # -- one-sided calls ----------------------------------------------------
    def _target(self, rank: int, target: Any, origin_count: int, origin_type: Any) -> tuple[int, int, Any]:
        """(byte offset in rank's segment, entries, datatype) of a target
        argument as mpi4py reads it (None, a displacement, or (disp[, count[, datatype]]))."""
        disp, count, datatype = 0, origin_count, origin_type
        if target is None:
            pass
        elif isinstance(target, (list, tuple)):
            if len(target) > 3:
                raise ValueError("target: expecting 3 items at most")
            if len(target) >= 1:
                disp = operator.index(target[0])
            if len(target) >= 2:
                count = operator.index(target[1])
            if len(target) >= 3:
                datatype = target[2]
        else:
            try:
                disp = operator.index(target)
            except TypeError:
                raise ValueError("target: expecting integral or list/tuple") from None
        return disp * self._units[rank], count, datatype

    def _span(self, rank: int, offset: int, nbytes: int, what: str) -> int:
        """The address of nbytes at offset in rank's segment, which they must lie in."""
        if offset < 0 or nbytes < 0 or offset + nbytes > self._sizes[rank]:
            raise _mpi_error(self._t, self._t.MPI.ERR_RMA_RANGE,
                             f"{what}: {nbytes} bytes at byte {offset} of rank {rank}'s "
                             f"{self._sizes[rank]}-byte segment")
        return int(self._bases[rank]) + offset

    def _moved(self, msg: Message, what: str) -> int:
        """Bytes per entry of a message whose entries shmtopo copies: a
        predefined datatype without gaps (else MPI moves it)."""
        if msg.type is not None:
            return int(msg.type.dtype.itemsize)
        datatype = msg.datatype
        if not datatype.is_predefined or datatype.Get_extent() != (0, datatype.Get_size()):
            raise LeftToMPI(f"{what} has a derived datatype")
        size = int(datatype.Get_size())
        if msg.entries * size > msg.raw.size:
            raise ValueError(f"{what}: {msg.entries} entries of {size} bytes do not fit in its "
                             f"{msg.raw.size} bytes")
        return size

    def _typed(self, datatype: Any, size: int, count: int, what: str) -> int:
        """Bytes of count entries of a target datatype (a predefined one of
        `size` bytes, else MPI moves it)."""
        if not isinstance(datatype, self._t.Datatype):
            raise TypeError(f"{what}: expecting an MPI datatype, not {type(datatype).__name__}")
        if not datatype.is_predefined:
            raise LeftToMPI(f"{what} has a derived datatype")
        if datatype.Get_size() != size:
            raise _mpi_error(self._t, self._t.MPI.ERR_TYPE, f"{what}: {datatype.Get_name()} against the "
                             f"origin's {size}-byte entries")
        return count * size

    def _copy(self, name: str, origin: Any, rank: int, target: Any, put: bool) -> None:
        if not self.accelerated or self._mpi_access:
            return self._one_sided_to_mpi(name, self._why_mpi(), rank, origin, target)
        if rank == self._t.MPI.PROC_NULL:
            self._count(name, True)
            return None
        r = self._rank(rank, name)
        self._in_epoch(r, name)
        try:
            msg = message(self._t, origin, "origin", writable=not put)
            size = self._moved(msg, "origin")
            offset, count, datatype = self._target(r, target, msg.entries, msg.datatype)
            nbytes = self._typed(datatype, size, count, "target")
        except LeftToMPI as why:
            return self._one_sided_to_mpi(name, str(why), r, origin, target)
        if nbytes != msg.entries * size:
            raise _mpi_error(self._t, self._t.MPI.ERR_TYPE, f"{name}: the origin has {msg.entries * size} "
                             f"bytes, the target {nbytes}")
        address = self._span(r, offset, nbytes, name)
        if nbytes:
            here = ffi.from_buffer(msg.raw)
            there = ffi.cast("char *", address)
            if put:
                ffi.memmove(there, here, nbytes)
            else:
                ffi.memmove(here, there, nbytes)
        self._count(name, True)
        return None

    # The plain calls (numpy arrays of a type shmtopo has, Python ints for the
    # rank and displacement, in an epoch, within the segment) are WinFast's, in
    # C; the methods here read the others in full.
    def Put(self, origin: Any, target_rank: int, target: Any = None) -> None:
        """Local: as mpi4py's ``Put``: a copy into target_rank's segment."""
        return self._copy("Put", origin, target_rank, target, True)

    def Get(self, origin: Any, target_rank: int, target: Any = None) -> None:
        """Local: as mpi4py's ``Get``: a copy from target_rank's segment."""
        return self._copy("Get", origin, target_rank, target, False)

    def _op(self, op: Any, known: Any) -> int:
        t = self._t.MPI
        if op == t.REPLACE:
            return int(lib.SHMTOPO_RMA_REPLACE)
        if op == t.NO_OP:
            return int(lib.SHMTOPO_RMA_NO_OP)
        return int(_types.OPS[op_name(self._t, op, known)])  # LeftToMPI where the core lacks it

    def _accumulate(self, name: str, origin: Any, result: Any, rank: int, target: Any, op: Any,
                    delegated_args: tuple[Any, ...]) -> None:
        if not self.accelerated or self._mpi_access:
            return self._one_sided_to_mpi(name, self._why_mpi(), rank, *delegated_args)
        if rank == self._t.MPI.PROC_NULL:
            self._count(name, True)
            return None
        r = self._rank(rank, name)
        self._in_epoch(r, name)
        handle = self._t.handle
        try:
            if not isinstance(op, self._t.Op):
                raise TypeError(f"op must be an MPI.Op, not {type(op).__name__}")
            no_op = op == self._t.MPI.NO_OP
            msg = message(self._t, origin, "origin", writable=False)
            out = message(self._t, result, "result", writable=True) if result is not None else None
            offset, count, datatype = self._target(r, target, msg.entries, msg.datatype)
            if not isinstance(datatype, self._t.Datatype):
                raise TypeError(f"target: expecting an MPI datatype, not {type(datatype).__name__}")
            if not datatype.is_predefined:
                raise LeftToMPI("target has a derived datatype")
            known = self._t.types.get(handle(datatype))
            if known is None:
                raise LeftToMPI(f"target has {datatype.Get_name()}")
            # the op is checked where there is an element to apply it to
            code = self._op(op, known) if count else 0
        except LeftToMPI as why:
            return self._one_sided_to_mpi(name, str(why), r, *delegated_args)
        for what, given in (("origin", None if no_op else msg), ("result", out)):
            if given is not None and (handle(given.datatype) != handle(datatype) or given.entries != count):
                raise _mpi_error(self._t, self._t.MPI.ERR_TYPE, f"{name}: the {what} has {given.entries} "
                                 f"{given.datatype.Get_name()}, the target {count} {datatype.Get_name()}")
        address = self._span(r, offset, count * known.dtype.itemsize, name)
        if count:
            check(lib.shmtopo_rma_accumulate(self._ctrl_h, r, ffi.cast("void *", address),
                                             ffi.from_buffer(msg.raw) if msg.raw.size else ffi.NULL,
                                             ffi.from_buffer(out.raw) if out is not None else ffi.NULL,
                                             count, _types.DTYPES[known.dtype], code))
        self._count(name, True)
        return None

    def Accumulate(self, origin: Any, target_rank: int, target: Any = None, op: Any = None) -> None:
        """Local: as mpi4py's ``Accumulate`` (default MPI.SUM), atomic per element."""
        op = self._t.SUM if op is None else op
        return self._accumulate("Accumulate", origin, None, target_rank, target, op, (origin, target, op))

    def Get_accumulate(self, origin: Any, result: Any, target_rank: int, target: Any = None,
                       op: Any = None) -> None:
        """Local: as mpi4py's ``Get_accumulate``: result gets the target's
        entries before the op, atomic per element."""
        op = self._t.SUM if op is None else op
        return self._accumulate("Get_accumulate", origin, result, target_rank, target, op,
                                (origin, result, target, op))

    def Fetch_and_op(self, origin: Any, result: Any, target_rank: int, target_disp: int = 0,
                     op: Any = None) -> None:
        """Local: as mpi4py's ``Fetch_and_op``: one element, with one CPU atomic where it can."""
        op = self._t.SUM if op is None else op
        if target_rank != self._t.MPI.PROC_NULL:
            self._single("origin", origin, result)
        return self._accumulate("Fetch_and_op", origin, result, target_rank, (target_disp,), op,
                                (origin, result, target_disp, op))

    def _single(self, what: str, given: Any, result: Any, compare: Any = None) -> None:
        """mpi4py's own checks of Fetch_and_op and Compare_and_swap (ValueError)."""
        try:
            o = message(self._t, given, "origin", writable=False)
            r = message(self._t, result, "result", writable=True)
            c = message(self._t, compare, "compare", writable=False) if compare is not None else None
        except LeftToMPI:
            return
        if o.entries != 1:
            raise ValueError(f"origin: expecting a single element, got {o.entries}")
        if c is not None and c.entries != 1:
            raise ValueError(f"compare: expecting a single element, got {c.entries}")
        if r.entries != 1:
            raise ValueError(f"result: expecting a single element, got {r.entries}")
        h = self._t.handle
        if h(o.datatype) != h(r.datatype) or (c is not None and h(c.datatype) != h(o.datatype)):
            raise ValueError("mismatch in origin and result MPI datatypes" if c is None
                             else "mismatch in origin and compare MPI datatypes")

    def Compare_and_swap(self, origin: Any, compare: Any, result: Any, target_rank: int,
                         target_disp: int = 0) -> None:
        """Local: as mpi4py's ``Compare_and_swap``, with one CPU atomic where it can."""
        name = "Compare_and_swap"
        args = (origin, compare, result, target_disp)
        if not self.accelerated or self._mpi_access:
            return self._one_sided_to_mpi(name, self._why_mpi(), target_rank, *args)
        if target_rank == self._t.MPI.PROC_NULL:
            self._count(name, True)
            return None
        self._single("origin", origin, result, compare)
        r = self._rank(target_rank, name)
        self._in_epoch(r, name)
        try:
            o = message(self._t, origin, "origin", writable=False)
            c = message(self._t, compare, "compare", writable=False)
            out = message(self._t, result, "result", writable=True)
            size = self._moved(o, "origin")
        except LeftToMPI as why:
            return self._one_sided_to_mpi(name, str(why), r, *args)
        if o.type is None or o.type.dtype.kind not in "iub":
            # MPI-4.0 11.3.4: integer, logical and byte types only
            raise _mpi_error(self._t, self._t.MPI.ERR_TYPE, f"{name}: {o.datatype.Get_name()} is not permitted "
                             "(integer, logical or byte types only)")
        address = self._span(r, operator.index(target_disp) * self._units[r], size, name)
        check(lib.shmtopo_rma_compare_and_swap(self._ctrl_h, r, ffi.cast("void *", address),
                                               ffi.from_buffer(o.raw), ffi.from_buffer(c.raw),
                                               ffi.from_buffer(out.raw), size))
        self._count(name, True)
        return None

    # -- request-based: complete on return ------------------------------------
    def Rput(self, origin: Any, target_rank: int, target: Any = None) -> Any:
        """Local: ``Put``, and a request that is complete already."""
        return self._r("Rput", "Put", target_rank, (origin, target_rank, target))

    def Rget(self, origin: Any, target_rank: int, target: Any = None) -> Any:
        return self._r("Rget", "Get", target_rank, (origin, target_rank, target))

    def Raccumulate(self, origin: Any, target_rank: int, target: Any = None, op: Any = None) -> Any:
        op = self._t.SUM if op is None else op
        return self._r("Raccumulate", "Accumulate", target_rank, (origin, target_rank, target, op))

    def Rget_accumulate(self, origin: Any, result: Any, target_rank: int, target: Any = None,
                        op: Any = None) -> Any:
        op = self._t.SUM if op is None else op
        return self._r("Rget_accumulate", "Get_accumulate", target_rank, (origin, result, target_rank, target, op))

    def _r(self, name: str, blocking: str, rank: int, args: tuple[Any, ...]) -> Any:
        if not self.accelerated or self._mpi_access:
            return self._delegate(name, self._why_mpi(), *args)
        if rank != self._t.MPI.PROC_NULL:
            self._in_passive(self._rank(rank, name), name)
        counts = self._stats[blocking][1], self._c_count(blocking)
        getattr(self, blocking)(*args)
        if self._stats[blocking][1] != counts[0]:  # went to MPI, complete after its Unlock
            self._stats[blocking][1] -= 1
            self._count(name, False)
        else:  # counted as itself: by the C method, or by the Python one
            if self._c_count(blocking) != counts[1]:
                self._rs.uncount(blocking)
            else:
                self._stats[blocking][0] -= 1
            self._count(name, True)
        return self._t.MPI.Request()

    # -- lifetime -----------------------------------------------------------
    def Free(self) -> None:
        """Collective, as MPI's: drop shmtopo's part (locally, as
        :meth:`shm_free`), then free the MPI window (``MPI_Win_free``)."""
        self.shm_free()
        self._mpi().Free()

    def shm_free(self) -> None:
        """Local: drop shmtopo's part without waiting for the other ranks
        (later calls all go to MPI; call it on every rank before the next
        synchronisation). Twice is a no-op."""
        shm, ctrl, comm = self._shm, self._ctrl, self._comm
        held = [ctrl.address] if ctrl is not None and not ctrl.freed else []
        if shm is not None:
            hold_all(shm.address, held)  # another thread inside: EBUSY here, before anything changes
        self._shm = self._ctrl = self._comm = None
        self._rs.release()
        self._ctrl_h = ffi.NULL
        try:
            if shm is not None:
                shm.release()  # its windows (the control window) with it; the holds go with what they held
        except BaseException:
            if shm is not None and shm.address:
                release_all(shm.address, [ctrl.address] if held and ctrl.address else [])
            raise
        finally:
            if comm is not None:
                comm.Free()

    def __repr__(self) -> str:
        state = "in shared memory" if self.accelerated else "delegated to MPI"
        return f"<shmtopo.AcceleratedWin ({state})>"

    # -- constructors: MPI's, accelerated --------------------------------------
    @classmethod
    def _made(cls, constructor: str, args: tuple[Any, ...], info: Any, comm: Any) -> Any:
        """Collective: mpi4py's constructor of that name (info and comm
        last, defaulting as mpi4py's do), its window accelerated."""
        t = get_tables().MPI
        comm = t.COMM_SELF if comm is None else comm
        win = getattr(_mpi_win(cls), constructor)(*args, t.INFO_NULL if info is None else info, comm)
        return accelerate_window(win, comm)

    @classmethod
    def Allocate_shared(cls, size: int, disp_unit: int = 1, info: Any = None, comm: Any = None) -> Any:
        """Collective: ``MPI.Win.Allocate_shared``, accelerated."""
        return cls._made("Allocate_shared", (size, disp_unit), info, comm)

    @classmethod
    def Allocate(cls, size: int, disp_unit: int = 1, info: Any = None, comm: Any = None) -> Any:
        """Collective: ``MPI.Win.Allocate`` (its calls are MPI's)."""
        return cls._made("Allocate", (size, disp_unit), info, comm)

    @classmethod
    def Create(cls, memory: Any, disp_unit: int = 1, info: Any = None, comm: Any = None) -> Any:
        """Collective: ``MPI.Win.Create`` (its calls are MPI's)."""
        return cls._made("Create", (memory, disp_unit), info, comm)

    @classmethod
    def Create_dynamic(cls, info: Any = None, comm: Any = None) -> Any:
        """Collective: ``MPI.Win.Create_dynamic`` (its calls are MPI's)."""
        return cls._made("Create_dynamic", (), info, comm)


def _mpi_win(cls: type) -> Any:
    """mpi4py's own window class under an accelerated one (whose
    constructors would make objects of the accelerated class, unset)."""
    found = next((c for c in cls.__mro__ if not issubclass(c, (AcceleratedWin, WinFast)) and c is not object),
                 None)
    return get_tables().Win if found is None else found


def _call_with_rank(method: Callable[..., Any], name: str, rank: int, args: tuple[Any, ...]) -> Any:
    """mpi4py's one-sided call with the target rank where its signature has it."""
    if name in ("Get_accumulate", "Fetch_and_op"):
        return method(args[0], args[1], rank, *args[2:])
    if name == "Compare_and_swap":
        return method(args[0], args[1], args[2], rank, *args[3:])
    return method(args[0], rank, *args[1:])


#: The calls WinFast runs in C when they are plain (else these methods).
_WIN_FAST = ("Fence", "Lock", "Unlock", "Lock_all", "Unlock_all", "Flush", "Put", "Get", "Accumulate",
             "Fetch_and_op", "Compare_and_swap")
_RMA_CAS = 1 << 30  # in a mask: Compare_and_swap takes the type (MPI-4.0 11.3.4: integer, logical, byte)
_bound = False


def _bind_window_entries(t: Tables) -> None:
    """Hand WinFast's C methods what this module decides by: its own
    methods for the calls that are not plain, the op objects (matched by
    identity) with the core's codes, and per core type, for the arrays
    mpi4py types as a datatype shmtopo has, the ops MPI defines on it."""
    global _bound
    if _bound:
        return
    MPI = t.MPI
    ops = [(getattr(MPI, name.upper()), int(code)) for name, code in _types.OPS.items()]
    ops += [(MPI.REPLACE, int(lib.SHMTOPO_RMA_REPLACE)), (MPI.NO_OP, int(lib.SHMTOPO_RMA_NO_OP))]
    masks = [0] * lib.SHMTOPO_NDTYPES
    for dtype, code in _types.DTYPES.items():
        try:
            known = t.types.get(t.handle(format_type(t, np.empty(1, dtype), "probe")))
        except (LeftToMPI, ValueError, BufferError, TypeError):
            continue
        if known is None or known.dtype != dtype:
            continue
        masks[code] = (1 << 31) | sum(1 << int(_types.OPS[name]) for name in known.ops) | (
            _RMA_CAS if np.dtype(dtype).kind in "iub" else 0)
    general = {name: AcceleratedWin.__dict__[name] for name in _WIN_FAST}
    bind_window(general, tuple(ops), tuple(masks), MPI.SUM, MPI.LOCK_EXCLUSIVE, MPI.LOCK_SHARED)
    _bound = True


_CLASSES: dict[type, type] = {}
_OWN = ("_t", "_shared", "_shm", "_ctrl", "_ctrl_h", "_comm", "_bases", "_sizes", "_units", "_me", "_n",
        "_strict", "_stats", "_rs", "_mpi_access")


def copies_state(own: tuple[str, ...]) -> dict[str, Any]:
    """The methods by which a copy of an accelerated object (``copy.copy``,
    ``copy.deepcopy``, ``type(obj)(obj)``, as mpi4py copies a handle) is the
    same accelerated object: the same MPI handle, and the same shmtopo state
    (slots `own`), as mpi4py's copies share the handle's. ``__new__`` is
    C's (_fastpath.copied_new: mpi4py's __new__, then _copy_state where
    the source is of a class whose __new__ is this one)."""

    def _copy_state(new: Any, source: Any) -> None:  # source: of a class with this __new__
        for name in own:
            if hasattr(source, name):
                setattr(new, name, getattr(source, name))

    def __copy__(self: Any) -> Any:
        return type(self)(self)

    def __deepcopy__(self: Any, memo: dict[int, Any]) -> Any:
        return type(self)(self)

    return {"__new__": staticmethod(copied_new), "_copy_state": staticmethod(_copy_state), "__copy__": __copy__,
            "__deepcopy__": __deepcopy__}


def mpi_new(made: Any, cls: type) -> None:
    """Give `made`, the accelerated class of mpi4py's class `cls`, the
    __new__ of mpi4py's under its own (copied_new calls it: made once
    per object, often, as derived comms are made)."""
    made._mpi_new = cls.__new__


def accelerated_win_class(cls: type) -> type:
    made = _CLASSES.get(cls)
    if made is None:
        # WinFast first: its C methods take the plain calls, AcceleratedWin's the others
        made = type("AcceleratedWin", (WinFast, AcceleratedWin, cls),
                    {"__slots__": _OWN, "__module__": "shmtopo", "__doc__": AcceleratedWin.__doc__,
                     **copies_state(_OWN)})
        mpi_new(made, cls)
        _CLASSES[cls] = made
    return made


def strict_setting() -> bool:
    """This rank's SHMTOPO_ACCEL_STRICT: 0 or unset, or 1 (anything else
    is a ShmtopoValueError)."""
    value = os.environ.get(STRICT_VARIABLE, "")
    if value in ("", "0"):
        return False
    if value == "1":
        return True
    raise ShmtopoValueError(f"{STRICT_VARIABLE}={value!r}: expected 0 or 1 (or unset)")


def agreed_strictness(shm: Comm) -> bool:
    """Collective over shm: strict_setting, which must be valid and the
    same on every rank (else every rank raises ShmtopoValueError)."""
    kind = lib.SHMTOPO_KIND_COMM_CREATE
    strict = agreement.normalised(shm, kind, strict_setting)
    try:
        agreement.agree(shm, kind, extra=int(strict))
    except ShmtopoValueError as exc:
        raise ShmtopoValueError(f"{STRICT_VARIABLE} must be the same on every rank: {exc}",
                                exc.errno or 22, exc.rank) from None
    return strict


def accelerate_window(win: Any, comm: Any = None, *, timeout: float | None = None) -> Any:
    """Collective over the window's group: ``win`` (an mpi4py window) as an
    AcceleratedWin on the same handle. A window made by Allocate_shared runs
    its synchronisation and one-sided calls in shared memory; any other
    runs them all through MPI. ``comm``: the communicator the window was
    made on, if at hand (else one is made from the window's group)."""
    t = get_tables()
    MPI = t.MPI
    if isinstance(win, AcceleratedWin):
        return win
    if not isinstance(win, t.Win) or win == MPI.WIN_NULL:
        raise TypeError(f"accelerate needs an mpi4py window, not {win!r}")
    awin = accelerated_win_class(type(win))(win)
    awin._t = t
    awin._strict = False  # read below: agreed where the window has ranks to agree with
    awin._stats = {name: [0, 0] for name in ACCELERATED + MPI_ONLY}
    _bind_window_entries(t)
    awin._rs = RmaState(None, [], [], [])
    awin._mpi_access = False
    awin._shm = awin._ctrl = awin._comm = None
    awin._ctrl_h = ffi.NULL
    awin._shared = win.Get_attr(MPI.WIN_CREATE_FLAVOR) == MPI.WIN_FLAVOR_SHARED
    group = win.Get_group()
    try:
        awin._me, awin._n = group.Get_rank(), group.Get_size()
        if not awin._shared:
            awin._strict = strict_setting()
            return awin
        # a communicator of its own over the window's group (the caller's may
        # be freed first), made under the timeout where MPI can: Create_group
        # has no nonblocking form, so a window of part of the world without
        # its comm waits in MPI for its ranks
        seconds = local_timeout(timeout)
        if comm is not None:
            own = dup_within(MPI.Intracomm(comm), seconds, "accelerate(win)'s copy of the comm")
        elif MPI.Group.Compare(group, MPI.COMM_WORLD.Get_group()) == MPI.IDENT:
            own = dup_within(MPI.COMM_WORLD, seconds, "accelerate(win)'s copy of the world")
        else:
            own = MPI.COMM_WORLD.Create_group(group)
    finally:
        group.Free()
    try:
        shm = Comm.from_mpi(own, timeout=timeout)
        try:
            if shm.size != awin._n or shm.nnodes != 1:
                raise ShmtopoValueError("accelerate: the window's ranks are not all on one node")
            awin._strict = agreed_strictness(shm)
            ctrl = shm.allocate(int(lib.SHMTOPO_RMA_CTRL_BYTES))
        except BaseException:
            shm.free()
            raise
    except BaseException:
        own.Free()
        raise
    awin._shm, awin._ctrl, awin._comm, awin._ctrl_h = shm, ctrl, own, ctrl.handle
    bases, sizes, units = [], [], []
    for r in range(awin._n):
        buf, unit = win.Shared_query(r)
        bases.append(int(buf.address))
        sizes.append(len(buf))
        units.append(int(unit))
    awin._bases, awin._sizes, awin._units = bases, sizes, units
    awin._rs = RmaState(ctrl, bases, sizes, units)
    awin._rs.fast = True
    return awin
