"""shmtopo.accelerate: an mpi4py communicator whose upper-case buffer
collectives run through shmtopo's shared memory, switched on with one line.

``acomm = shmtopo.accelerate(comm)`` wraps an mpi4py intracommunicator.
What it does not define is the wrapped communicator's own (attribute lookup
falls through to it). Barrier, Bcast, Reduce, Allreduce, Allgather,
Alltoall and Reduce_scatter_block run on a :class:`shmtopo.Comm` made with
``Comm.from_mpi(comm)`` (hierarchical across nodes) when their arguments
allow it, and otherwise go to the wrapped communicator with the very
arguments they were given, so that their results are MPI's. The other
upper-case collectives always go to MPI in this version.

Every rank must take the same path: a rank on shmtopo's path waits in
shmtopo, a rank on MPI's waits in MPI. So each call reads its arguments on
its own rank, as mpi4py reads them, and a rank that hands the call to MPI
first takes part in the call's agreement with a signature that says so (no
element type, count 0, the root of rooted calls). Where every rank
delegates, they agree and all call MPI; where ranks chose differently, the
signatures differ and every rank raises the same ShmtopoValueError, naming
a rank that chose otherwise, before any data moves. Arguments mpi4py would
refuse make this rank invalid in that agreement: every rank raises.
"""
from __future__ import annotations

import atexit
import operator
import os
import sys
import weakref
from typing import Any, Callable, NamedTuple

import numpy as np
import numpy.typing as npt

from . import _fastpath, agreement, collectives
from ._native import lib
from .comm import Comm
from .errors import FreedError, ShmtopoValueError, last_error

Array = npt.NDArray[Any]

STRICT_VARIABLE = "SHMTOPO_ACCEL_STRICT"

#: Upper-case collectives that run in shared memory when their arguments allow.
ACCELERATED = ("Barrier", "Bcast", "Reduce", "Allreduce", "Allgather", "Alltoall", "Reduce_scatter_block")

#: Upper-case collectives that go to the wrapped communicator in this version.
DELEGATED = (
    "Gather", "Gatherv", "Scatter", "Scatterv", "Allgatherv", "Alltoallv", "Alltoallw", "Reduce_scatter",
    "Scan", "Exscan",
    "Ibarrier", "Ibcast", "Igather", "Igatherv", "Iscatter", "Iscatterv", "Iallgather", "Iallgatherv",
    "Ialltoall", "Ialltoallv", "Ialltoallw", "Ireduce", "Iallreduce", "Ireduce_scatter_block",
    "Ireduce_scatter", "Iscan", "Iexscan",
    "Barrier_init", "Bcast_init", "Gather_init", "Gatherv_init", "Scatter_init", "Scatterv_init",
    "Allgather_init", "Allgatherv_init", "Alltoall_init", "Alltoallv_init", "Alltoallw_init", "Reduce_init",
    "Allreduce_init", "Reduce_scatter_block_init", "Reduce_scatter_init", "Scan_init", "Exscan_init",
)

# A delegating rank's signature: no element type (every accelerated call
# has one) and this word, which the core compares but does not print ...
_DELEGATED_MARK = int.from_bytes(b"mpi4py", "little")
# ... so that the core's mismatch message shows it as this.
_DELEGATED_TEXT = "count 0, an unknown type"

_BARRIER, _BCAST, _REDUCE, _ALLREDUCE = (lib.SHMTOPO_KIND_BARRIER, lib.SHMTOPO_KIND_BCAST,
                                         lib.SHMTOPO_KIND_REDUCE, lib.SHMTOPO_KIND_ALLREDUCE)
_ALLGATHER, _ALLTOALL, _REDUCE_SCATTER = (lib.SHMTOPO_KIND_ALLGATHER, lib.SHMTOPO_KIND_ALLTOALL,
                                          lib.SHMTOPO_KIND_REDUCE_SCATTER)

# The ops MPI defines on integers and on floating-point types that the core has.
_INTEGER_OPS = frozenset(["sum", "prod", "min", "max", "band", "bor", "bxor"])
_FLOAT_OPS = frozenset(["sum", "prod", "min", "max"])
_NO_OPS: frozenset[str] = frozenset()


class _SumDefault:
    """The default op (mpi4py's is MPI.SUM, which cannot be imported here)."""

    def __repr__(self) -> str:
        return "MPI.SUM"


_SUM = _SumDefault()


class _Type(NamedTuple):
    """A predefined MPI datatype shmtopo moves: its element type in the
    core, and the ops MPI defines on it that the core has."""
    dtype: np.dtype[Any]
    ops: frozenset[str]


class _Tables:
    """What the wrapper needs from mpi4py, looked up once (mpi4py is
    imported only when a comm is accelerated)."""

    def __init__(self) -> None:
        from mpi4py import MPI

        self.MPI = MPI
        self.IN_PLACE = MPI.IN_PLACE
        self.BOTTOM = MPI.BOTTOM
        self.SUM = MPI.SUM
        self.Datatype, self.Op = MPI.Datatype, MPI.Op
        self.handle: Callable[[Any], int] = (operator.attrgetter("handle") if hasattr(MPI.Datatype, "handle")
                                             else operator.methodcaller("py2f"))
        # the table mpi4py itself types a buffer by, from its format
        self.typedict: dict[str, Any] = dict(getattr(MPI, "_typedict", {}))
        self.types: dict[int, _Type] = {}
        signed = ["SIGNED_CHAR", "SHORT", "INT", "LONG", "LONG_LONG", "INT8_T", "INT16_T", "INT32_T", "INT64_T"]
        unsigned = ["UNSIGNED_CHAR", "UNSIGNED_SHORT", "UNSIGNED", "UNSIGNED_LONG", "UNSIGNED_LONG_LONG",
                    "UINT8_T", "UINT16_T", "UINT32_T", "UINT64_T"]
        for names, kind, ops in ((signed, "i", _INTEGER_OPS), (unsigned, "u", _INTEGER_OPS),
                                 (["FLOAT", "DOUBLE"], "f", _FLOAT_OPS),
                                 # bytes to move only: reducing them means different things in different MPIs
                                 (["BYTE", "CHAR"], "u", _NO_OPS)):
            for name in names:
                datatype = getattr(MPI, name, MPI.DATATYPE_NULL)
                if datatype == MPI.DATATYPE_NULL:
                    continue
                size = datatype.Get_size()
                if size in ((4, 8) if kind == "f" else (1, 2, 4, 8)):
                    dtype = np.dtype(f"{kind}{size}")
                    if dtype in collectives.DTYPES:
                        self.types[self.handle(datatype)] = _Type(dtype, ops)
        self.ops = {self.handle(getattr(MPI, name.upper())): name for name in _INTEGER_OPS}
        self.op_names = {self.handle(op): f"MPI.{name}" for name in
                         ("LAND", "LOR", "LXOR", "MAXLOC", "MINLOC", "REPLACE", "NO_OP", "OP_NULL")
                         if (op := getattr(MPI, name, None)) is not None}
        self.null_type = self.handle(MPI.DATATYPE_NULL)


_tables: _Tables | None = None


def _get_tables() -> _Tables:
    global _tables
    if _tables is None:
        _tables = _Tables()
        _bind_fast_entries(_tables)
        for cls in (_tables.MPI.Intracomm, _tables.MPI.Cartcomm, _tables.MPI.Graphcomm,
                    _tables.MPI.Distgraphcomm):
            _forward(cls)
    return _tables


# ---- the fast entry: the plain case in C ----------------------------------------------
#
# Most calls are plain: numpy arrays without a datatype, a predefined op, an
# int root. shmtopo._fastpath's accel_* entries take those straight to the
# core, and return None for anything else, which then goes through the
# planner below; reading buffer specs in Python would cost more than the
# collective itself. What the entries take for plain is what the planner
# decides for those arguments, from its own tables.
_accel_allreduce, _accel_reduce = _fastpath.accel_allreduce, _fastpath.accel_reduce
_accel_bcast, _accel_allgather = _fastpath.accel_bcast, _fastpath.accel_allgather
_accel_barrier = _fastpath.accel_barrier
_MOVES = 1 << 31  # in a mask: the type is one shmtopo moves


def _bind_fast_entries(t: _Tables) -> None:
    """Hand the fast entries the op objects (by identity) and, per element
    type of the core, the ops the planner reduces an array of that type with
    when no datatype is given (mpi4py's datatype for its format)."""
    ops = [(_SUM, collectives.OPS["sum"])]
    ops += [(getattr(t.MPI, name.upper()), code) for name, code in collectives.OPS.items()]
    masks = [0] * len(collectives.DTYPES)
    for dtype, code in collectives.DTYPES.items():
        probe = np.empty(1, dtype)
        try:
            known = t.types.get(t.handle(_format_type(t, probe, "probe")))
        except (_Delegate, ValueError, BufferError):
            continue
        if known is not None and known.dtype == dtype:
            masks[code] = _MOVES | sum(1 << collectives.OPS[name] for name in known.ops)
    _fastpath.bind_accelerate(tuple(ops), tuple(masks), _fast_failure)


_forwarded: set[type] = set()


def _forward(cls: type) -> None:
    """Make each public attribute of the mpi4py communicator class `cls` that
    AcceleratedComm does not define read the wrapped communicator's. (A
    __getattr__ would do that too, but a class with one pays for it on every
    attribute lookup, its own collectives' included: 0.1-0.2 us a call.)"""
    if cls in _forwarded:
        return
    for name in dir(cls):
        if not name.startswith("__") and not hasattr(AcceleratedComm, name):
            setattr(AcceleratedComm, name, property(operator.attrgetter(f"_comm.{name}"),
                                                    doc=f"The wrapped communicator's ``{name}``."))
    _forwarded.add(cls)


def _fast_failure(err: int) -> BaseException:
    """The exception of a collective that failed in a fast entry, worded as
    the planner's path words it."""
    exc = last_error(err)
    return _explained(exc) if isinstance(exc, ShmtopoValueError) else exc


class _Delegate(Exception):
    """The call is valid, but not one shmtopo runs: MPI does it (the message
    says why, for strict mode)."""


# ---- reading buffer arguments as mpi4py does ----------------------------------------

class _Message(NamedTuple):
    """One buffer argument as mpi4py reads it."""
    raw: npt.NDArray[np.uint8]  # the buffer's bytes, from the displacement on
    entries: int                # of `datatype` (per block, for blocked arguments)
    datatype: Any
    type: _Type | None          # None: a datatype shmtopo does not move


def _split(t: _Tables, spec: Any, what: str) -> tuple[Any, Any, Any, Any]:
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


def _bytes(t: _Tables, buf: Any, what: str, writable: bool) -> npt.NDArray[np.uint8]:
    """The bytes of a buffer-protocol object: one flat array over its memory."""
    if buf is None or buf is t.BOTTOM or buf is t.IN_PLACE:
        raise _Delegate(f"{what} is {buf!r}")
    try:
        raw = np.frombuffer(buf, np.uint8)  # C-contiguous buffers: the common case
    except (TypeError, ValueError, BufferError):
        try:
            view = memoryview(buf)
        except TypeError:
            if hasattr(buf, "__dlpack__") or hasattr(buf, "__cuda_array_interface__"):
                raise _Delegate(f"{what} is a device buffer") from None
            raise TypeError(f"{what}: expecting a buffer or a list or tuple, not {type(buf).__name__}") from None
        if not view.contiguous:
            raise BufferError(f"{what}: the buffer is not contiguous") from None
        raw = np.asarray(view).ravel(order="K").view(np.uint8)  # Fortran order: its memory order, a view
        if view.readonly:
            raw.flags.writeable = False
    if writable and not raw.flags.writeable:
        raise BufferError(f"{what}: the buffer is read-only")
    return raw


def _format_type(t: _Tables, buf: Any, what: str) -> Any:
    """The datatype mpi4py gives a buffer passed without one, from its format."""
    fmt = memoryview(buf).format
    if fmt[:1] == "@":
        fmt = fmt[1:]
    elif fmt[:1] in ("<", ">"):
        if (fmt[0] == "<") != (sys.byteorder == "little"):
            raise BufferError(f"{what}: format {fmt!r} has a non-native byte order")
        fmt = fmt[1:]
    if not t.typedict:
        raise _Delegate(f"{what}: this mpi4py has no table of formats")
    try:
        return t.typedict[fmt]
    except KeyError:
        raise ValueError(f"{what}: cannot map format {fmt!r} to an MPI datatype") from None


def _index(value: Any, what: str) -> int:
    try:
        n = operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an integer, not {type(value).__name__}") from None
    if n < 0:
        raise ValueError(f"{what} must not be negative ({n})")
    return n


def _message(t: _Tables, spec: Any, what: str, *, writable: bool, blocks: int = 0) -> _Message:
    """A buffer argument read the way mpi4py reads it: the datatype from
    the buffer's format when none is given; the count given, or inferred
    from the buffer's length (per block when `blocks` > 1). Raises what
    makes it invalid (mpi4py or MPI would refuse it), _Delegate for what is
    valid but not shmtopo's (device buffers, MPI.BOTTOM)."""
    buf, count, displ, datatype = _split(t, spec, what)
    raw = _bytes(t, buf, what, writable)
    if datatype is None:
        datatype = _format_type(t, buf, what)
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
    return _Message(raw, n, datatype, known)


def _type_name(datatype: Any) -> str:
    return datatype.Get_name() or "a derived datatype"


def _moved(msg: _Message, what: str) -> _Type:
    """The element type of a message shmtopo can move, else _Delegate."""
    if msg.type is None:
        raise _Delegate(f"{what} has {_type_name(msg.datatype)}")
    return msg.type


def _elements(msg: _Message, entries: int) -> Array:
    """The message's first `entries` entries as an array of its element type."""
    assert msg.type is not None
    return msg.raw[:entries * msg.type.dtype.itemsize].view(msg.type.dtype)


def _check_op(t: _Tables, op: Any) -> None:
    if not isinstance(op, t.Op):
        raise TypeError(f"op must be an MPI.Op, not {type(op).__name__}")


def _op(t: _Tables, op: Any, known: _Type) -> str:
    """The core's name for a predefined op MPI defines on the type, else _Delegate."""
    key = t.handle(op)
    name = t.ops.get(key)
    if name is None:
        raise _Delegate(f"op {t.op_names.get(key, 'a predefined op')}, which shmtopo does not reduce with"
                        if op.is_predefined else "a user-defined op")
    if name not in known.ops:
        raise _Delegate(f"op {name} on {known.dtype} (shmtopo reduces that type with "
                        f"{', '.join(sorted(known.ops)) or 'no op'})")
    return name


def _root(root: Any, size: int) -> int:
    try:
        r = operator.index(root)
    except TypeError:
        raise TypeError(f"root must be an integer, not {type(root).__name__}") from None
    if not 0 <= r < size:
        raise ValueError(f"root {r} out of range [0, {size})")
    return r


def _same_type(t: _Tables, send: _Message, recv: _Message) -> None:
    """mpi4py's check on reductions: one datatype, one count."""
    if t.handle(send.datatype) != t.handle(recv.datatype):
        raise ValueError("mismatch in send and receive MPI datatypes")
    if send.entries != recv.entries:
        raise ValueError(f"mismatch in send count {send.entries} and receive count {recv.entries}")


def _aligned(a: Array) -> Array:
    """a, or an aligned copy of it: the core's kernels read whole elements."""
    return a if a.flags.aligned else a.copy()


class _Call(NamedTuple):
    """What an accelerated call hands to shmtopo's collective."""
    send: Array
    out: Array | None
    op: str = ""
    root: int = -1
    back: Array | None = None  # the caller's misaligned result buffer, filled from out afterwards


def _result(view: Array) -> tuple[Array, Array | None]:
    """(where the core writes, the caller's buffer to copy that into, if it
    is not the same): an aligned copy of a misaligned result buffer (a copy,
    so that an in-place input is there too)."""
    return (view, None) if view.flags.aligned else (view.copy(), view)


# ---- the communicator ----------------------------------------------------------------

_OWN = ("_comm", "_shm", "_t", "_strict", "_stats")
# by id: accelerated comms are unhashable, like the communicators they wrap
_live: "weakref.WeakValueDictionary[int, AcceleratedComm]" = weakref.WeakValueDictionary()
_hooked = False


class AcceleratedComm:
    """An mpi4py intracommunicator whose upper-case buffer collectives run
    through shmtopo's shared memory where their arguments allow it.

    Make one with :func:`accelerate`. Attributes and methods it does not
    define are the wrapped communicator's (``Get_rank``, ``Send``, ``Split``,
    the lower-case ``bcast`` of objects...). :attr:`shm_comm` is the
    :class:`shmtopo.Comm` its collectives run on; :meth:`Free` frees that
    and then the wrapped communicator, :meth:`shm_free` only that.
    """

    __slots__ = _OWN + ("__weakref__",)

    def __init__(self, comm: Any, shm: Comm, tables: _Tables, strict: bool) -> None:
        self._comm = comm
        self._shm: Comm | None = shm
        self._t = tables
        self._strict = strict
        self._stats: dict[str, list[int]] = {}

    # -- what it is -------------------------------------------------------
    @property
    def mpi_comm(self) -> Any:
        """The wrapped mpi4py communicator."""
        return self._comm

    @property
    def shm_comm(self) -> Comm:
        """The shmtopo comm the collectives run on (made by ``Comm.from_mpi``)."""
        if self._shm is None:
            raise FreedError("the accelerated comm's shmtopo comm has been freed", 9)
        return self._shm

    @property
    def strict(self) -> bool:
        """True when a call that would go to MPI raises instead (SHMTOPO_ACCEL_STRICT=1)."""
        return self._strict

    def shm_stats(self) -> dict[str, tuple[int, int]]:
        """Local: {operation: (accelerated calls, delegated calls)} for each
        collective called at least once, in the order of the first calls."""
        return {name: (n[0], n[1]) for name, n in self._stats.items()}

    def __dir__(self) -> list[str]:
        return sorted(set(dir(type(self))) | set(dir(self._comm)))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, AcceleratedComm):
            other = other._comm
        return bool(self._comm == other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None  # type: ignore[assignment]  # like mpi4py's communicators

    def __bool__(self) -> bool:
        return bool(self._comm)

    def __repr__(self) -> str:
        return f"<shmtopo.AcceleratedComm of {self._comm!r}>"

    # -- lifetime ---------------------------------------------------------
    def shm_free(self) -> None:
        """Collective: free the shmtopo comm; afterwards every collective goes
        to the wrapped communicator. Freeing twice is a no-op."""
        shm = self._shm
        if shm is None:
            return
        try:
            shm.free()
        finally:
            if shm.freed:  # a mismatch leaves the comm (as Comm.free)
                self._shm = None
                _live.pop(id(self), None)

    def Free(self) -> None:
        """Collective: free the shmtopo comm, then the wrapped communicator
        (its ``Free()``: MPI refuses to free COMM_WORLD; :meth:`shm_free`
        releases only shmtopo's part)."""
        self.shm_free()
        self._comm.Free()

    def _release(self) -> None:
        """Local, at exit: drop the shmtopo comm without an agreement."""
        shm, self._shm = self._shm, None
        if shm is not None:
            shm.abandon()

    # -- taking one path on every rank ------------------------------------
    def _count(self, name: str, delegated: int) -> None:
        n = self._stats.get(name)
        if n is None:
            n = self._stats[name] = [0, 0]
        n[delegated] += 1

    def _plan(self, kind: int, name: str, normalise: Callable[..., _Call], *args: Any) -> _Call | str:
        """This rank's arguments, read and checked on this rank: what shmtopo
        runs, or why the call goes to MPI. Invalid arguments fail the call's
        agreement, so that every rank raises."""
        shm = self._shm
        if shm is None:
            return "the shmtopo comm has been freed"

        def plan() -> _Call | str:
            try:
                return normalise(shm, *args)
            except _Delegate as why:
                return str(why)
            except Exception as exc:  # noqa: BLE001 - every rank hears of it
                raise ShmtopoValueError(f"{name}: {exc}") from None
        return agreement.normalised(shm, kind, plan)

    def _delegate(self, kind: int, name: str, reason: str, root: Any = None) -> None:
        """Before a call goes to MPI: agree with every rank that it does (in
        strict mode, fail the call on every rank instead)."""
        shm = self._shm
        message = f"{name} is delegated to MPI ({reason}), and {STRICT_VARIABLE}=1"
        if shm is None:
            if self._strict:
                raise ShmtopoValueError(message)
            return
        if self._strict:
            agreement.refuse(shm, kind, ShmtopoValueError(message))
        # a rooted call has been through _root, so this is a rank of the comm
        r = -1 if root is None else operator.index(root)
        try:
            agreement.agree(shm, kind, 0, -1, -1, r, -1, _DELEGATED_MARK)
        except ShmtopoValueError as exc:
            raise _explained(exc) from None

    def _run(self, call: Callable[..., Any], plan: _Call, *args: Any, **kwargs: Any) -> None:
        try:
            call(self._shm, *args, **kwargs)
        except ShmtopoValueError as exc:
            raise _explained(exc) from None
        if plan.back is not None and plan.out is not None:
            plan.back[...] = plan.out.reshape(plan.back.shape)

    def _either(self, kind: int, name: str, planner: Callable[..., _Call], mpi_args: tuple[Any, ...],
                run: Callable[[_Call], None], root: Any = None) -> None:
        """One accelerated collective: plan it on this rank, then run it in
        shared memory, or agree that it goes to MPI and hand MPI the caller's
        own arguments."""
        plan = self._plan(kind, name, planner, self._t, *mpi_args)
        if isinstance(plan, str):
            self._delegate(kind, name, plan, root)
            getattr(self._comm, name)(*mpi_args)
            self._count(name, 1)
            return
        run(plan)
        self._count(name, 0)

    def _delegated(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """A collective this version always hands to MPI: every rank does, so
        no path needs agreeing (strictness is the same on every rank)."""
        if self._strict:
            raise ShmtopoValueError(f"{name} is not accelerated (it always goes to MPI), and "
                                    f"{STRICT_VARIABLE}=1")
        result = getattr(self._comm, name)(*args, **kwargs)
        self._count(name, 1)
        return result

    # -- the accelerated collectives --------------------------------------
    def Barrier(self) -> None:
        """Collective: as mpi4py's ``Barrier``, in shared memory."""
        shm = self._shm
        # the plain case runs in C (see _bind_fast_entries), the rest below
        if shm is not None and _accel_barrier(shm._fast):
            try:
                self._stats["Barrier"][0] += 1
            except KeyError:
                self._count("Barrier", 0)
            return
        if shm is None:
            self._delegate(_BARRIER, "Barrier", "the shmtopo comm has been freed")
            self._comm.Barrier()
            self._count("Barrier", 1)
            return
        shm.barrier()
        self._count("Barrier", 0)

    def Bcast(self, buf: Any, root: int = 0) -> None:
        """Collective: as mpi4py's ``Bcast``."""
        shm = self._shm
        if shm is not None and _accel_bcast(shm._fast, buf, root):
            try:
                self._stats["Bcast"][0] += 1
            except KeyError:
                self._count("Bcast", 0)
            return
        self._either(_BCAST, "Bcast", _bcast_plan, (buf, root),
                     lambda p: self._run(collectives.bcast, p, p.send, p.root, out=p.out), root)

    def Reduce(self, sendbuf: Any, recvbuf: Any, op: Any = _SUM, root: int = 0) -> None:
        """Collective: as mpi4py's ``Reduce``."""
        shm = self._shm
        if shm is not None and _accel_reduce(shm._fast, sendbuf, recvbuf, op, root):
            try:
                self._stats["Reduce"][0] += 1
            except KeyError:
                self._count("Reduce", 0)
            return
        op = self._t.SUM if op is _SUM else op
        self._either(_REDUCE, "Reduce", _reduce_plan, (sendbuf, recvbuf, op, root),
                     lambda p: self._run(collectives.reduce, p, p.send, p.op, p.root, out=p.out), root)

    def Allreduce(self, sendbuf: Any, recvbuf: Any, op: Any = _SUM) -> None:
        """Collective: as mpi4py's ``Allreduce``."""
        shm = self._shm
        if shm is not None and _accel_allreduce(shm._fast, sendbuf, recvbuf, op):
            try:
                self._stats["Allreduce"][0] += 1
            except KeyError:
                self._count("Allreduce", 0)
            return
        op = self._t.SUM if op is _SUM else op
        self._either(_ALLREDUCE, "Allreduce", _allreduce_plan, (sendbuf, recvbuf, op),
                     lambda p: self._run(collectives.allreduce, p, p.send, p.op, out=p.out))

    def Allgather(self, sendbuf: Any, recvbuf: Any) -> None:
        """Collective: as mpi4py's ``Allgather``."""
        shm = self._shm
        if shm is not None and _accel_allgather(shm._fast, sendbuf, recvbuf):
            try:
                self._stats["Allgather"][0] += 1
            except KeyError:
                self._count("Allgather", 0)
            return
        self._either(_ALLGATHER, "Allgather", _allgather_plan, (sendbuf, recvbuf),
                     lambda p: self._run(collectives.allgather, p, p.send, out=p.out))

    def Alltoall(self, sendbuf: Any, recvbuf: Any) -> None:
        """Collective: as mpi4py's ``Alltoall``."""
        self._either(_ALLTOALL, "Alltoall", _alltoall_plan, (sendbuf, recvbuf),
                     lambda p: self._run(collectives.alltoall, p, p.send, out=p.out))

    def Reduce_scatter_block(self, sendbuf: Any, recvbuf: Any, op: Any = _SUM) -> None:
        """Collective: as mpi4py's ``Reduce_scatter_block``."""
        op = self._t.SUM if op is _SUM else op
        self._either(_REDUCE_SCATTER, "Reduce_scatter_block", _reduce_scatter_plan, (sendbuf, recvbuf, op),
                     lambda p: self._run(collectives.reduce_scatter, p, p.send, p.op, out=p.out))


# ---- each call's arguments, read on this rank ------------------------------------------

def _bcast_plan(shm: Comm, t: _Tables, buf: Any, root: Any) -> _Call:
    r = _root(root, shm.world_size)
    if buf is t.IN_PLACE:
        raise ValueError("buf: MPI.IN_PLACE is no buffer for Bcast")
    sending = shm.world_rank == r
    msg = _message(t, buf, "buf", writable=not sending)
    _moved(msg, "buf")
    view = _elements(msg, msg.entries)
    if sending and not view.flags.writeable:
        return _Call(_aligned(view), None, root=r)  # shmtopo copies a read-only root buffer
    out, back = _result(view)
    return _Call(out, out, root=r, back=back)  # in place


def _reduction(t: _Tables, sendbuf: Any, recvbuf: Any, op: Any, receiving: bool) -> _Call:
    """Allreduce, and Reduce on the root (receiving) or another rank."""
    _check_op(t, op)
    if not receiving:  # mpi4py reads no receive buffer there
        if sendbuf is t.IN_PLACE:
            raise ValueError("sendbuf: MPI.IN_PLACE is valid at the root of Reduce only")
        send = _message(t, sendbuf, "sendbuf", writable=False)
        opname = _op(t, op, _moved(send, "sendbuf"))
        return _Call(_aligned(_elements(send, send.entries)), None, opname)
    recv = _message(t, recvbuf, "recvbuf", writable=True)
    if sendbuf is t.IN_PLACE:
        opname = _op(t, op, _moved(recv, "recvbuf"))
        out, back = _result(_elements(recv, recv.entries))
        return _Call(out, out, opname, back=back)
    send = _message(t, sendbuf, "sendbuf", writable=False)
    _same_type(t, send, recv)
    opname = _op(t, op, _moved(recv, "recvbuf"))
    out, back = _result(_elements(recv, recv.entries))
    a = _elements(send, send.entries)
    if back is not None:
        a = a.copy()  # the core writes a copy of the result buffer, so also read a copy of the input
    return _Call(_aligned(a), out, opname, back=back)


def _reduce_plan(shm: Comm, t: _Tables, sendbuf: Any, recvbuf: Any, op: Any, root: Any) -> _Call:
    r = _root(root, shm.world_size)
    plan = _reduction(t, sendbuf, recvbuf, op, shm.world_rank == r)
    return plan._replace(root=r)


def _allreduce_plan(shm: Comm, t: _Tables, sendbuf: Any, recvbuf: Any, op: Any) -> _Call:
    return _reduction(t, sendbuf, recvbuf, op, True)


def _gathered(shm: Comm, t: _Tables, sendbuf: Any, recvbuf: Any, what: str,
              send_blocks: int) -> tuple[Array, Array, Array | None, int]:
    """Allgather and Alltoall: (input, result, caller's misaligned result, entries per block)."""
    size = shm.world_size
    recv = _message(t, recvbuf, "recvbuf", writable=True, blocks=size)
    known = _moved(recv, "recvbuf")
    out, back = _result(_elements(recv, size * recv.entries))
    if sendbuf is t.IN_PLACE:
        return out, out, back, recv.entries
    send = _message(t, sendbuf, "sendbuf", writable=False, blocks=send_blocks)
    if _moved(send, "sendbuf").dtype != known.dtype or send.entries != recv.entries:
        raise _Delegate(f"{what}: sendbuf ({send.entries} x {_type_name(send.datatype)}) and recvbuf "
                        f"({recv.entries} x {_type_name(recv.datatype)} per rank) differ")
    a = _elements(send, max(send_blocks, 1) * send.entries)
    return (_aligned(a) if back is None else a.copy()), out, back, recv.entries


def _allgather_plan(shm: Comm, t: _Tables, sendbuf: Any, recvbuf: Any) -> _Call:
    a, out, back, count = _gathered(shm, t, sendbuf, recvbuf, "Allgather", 0)
    if a is out:  # in place: this rank's block of the result
        rank = shm.world_rank
        a = out[rank * count:(rank + 1) * count]
    return _Call(a, out.reshape(shm.world_size, count), back=back)


def _alltoall_plan(shm: Comm, t: _Tables, sendbuf: Any, recvbuf: Any) -> _Call:
    a, out, back, _ = _gathered(shm, t, sendbuf, recvbuf, "Alltoall", shm.world_size)
    if shm.nnodes > 1 and np.may_share_memory(a, out):
        a = a.copy()  # in place, across nodes: MPI moves the blocks, and MPI takes no aliased buffers
    return _Call(a, out, back=back)


def _reduce_scatter_plan(shm: Comm, t: _Tables, sendbuf: Any, recvbuf: Any, op: Any) -> _Call:
    _check_op(t, op)
    size = shm.world_size
    if sendbuf is t.IN_PLACE:
        # the input is the whole receive buffer, the result its first block
        recv = _message(t, recvbuf, "recvbuf", writable=True, blocks=size)
        opname = _op(t, op, _moved(recv, "recvbuf"))
        whole, back = _result(_elements(recv, size * recv.entries))
        return _Call(whole, whole[:recv.entries], opname,
                     back=None if back is None else back[:recv.entries])
    recv = _message(t, recvbuf, "recvbuf", writable=True)
    send = _message(t, sendbuf, "sendbuf", writable=False, blocks=size)
    _same_type(t, send, recv)
    opname = _op(t, op, _moved(recv, "recvbuf"))
    out, back = _result(_elements(recv, recv.entries))
    a = _elements(send, size * send.entries)
    return _Call(_aligned(a) if back is None else a.copy(), out, opname, back=back)


def _explained(exc: ShmtopoValueError) -> ShmtopoValueError:
    """A disagreement between ranks on shmtopo's path and ranks on MPI's,
    told as such (the same text on every rank)."""
    text = str(exc)
    if not text.startswith("ranks disagree") or _DELEGATED_TEXT not in text:
        return exc
    text = text.replace(_DELEGATED_TEXT, "delegated to MPI") + (
        " (shmtopo.accelerate: every rank must take the same path: describe the buffers alike on every "
        "rank, with the same kind of datatype and op, and MPI.IN_PLACE on every rank or none)")
    return ShmtopoValueError(text, exc.errno or 22, exc.rank)


def _delegated_method(name: str) -> Callable[..., Any]:
    def method(self: AcceleratedComm, *args: Any, **kwargs: Any) -> Any:
        return self._delegated(name, *args, **kwargs)
    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"Collective: the wrapped communicator's ``{name}`` (not accelerated in this version)."
    return method


for _name in DELEGATED:
    setattr(AcceleratedComm, _name, _delegated_method(_name))
del _name


def _strict_setting() -> bool:
    value = os.environ.get(STRICT_VARIABLE, "")
    if value in ("", "0"):
        return False
    if value == "1":
        return True
    raise ShmtopoValueError(f"{STRICT_VARIABLE}={value!r}: expected 0 or 1 (or unset)")


def _release_at_exit() -> None:
    for acomm in list(_live.values()):
        acomm._release()


def accelerate(comm: Any = None, *, node_size: int | None = None,
               timeout: float | None = None) -> AcceleratedComm:
    """Collective over ``comm`` (an mpi4py intracommunicator, default
    COMM_WORLD): wrap it so that its upper-case buffer collectives run
    through shmtopo's shared memory where their arguments allow it, and go
    to ``comm`` itself, with the same arguments, where they do not.

    node_size, timeout: as in :meth:`Comm.from_mpi`. SHMTOPO_ACCEL_STRICT=1
    (which must be the same on every rank) makes every call that would go
    to MPI raise ShmtopoValueError instead. Free the result with ``Free()``
    (which also frees ``comm``) or ``shm_free()``; at exit each rank drops
    what is left of it on its own.
    """
    tables = _get_tables()
    if isinstance(comm, AcceleratedComm):
        comm = comm.mpi_comm
    if comm is None:
        comm = tables.MPI.COMM_WORLD
    if not isinstance(comm, tables.MPI.Comm):
        raise TypeError(f"accelerate needs an mpi4py communicator, not {type(comm).__name__}")
    _forward(type(comm))
    if comm.Is_inter():  # the same on every rank
        raise ShmtopoValueError("accelerate needs an intracommunicator, not an intercommunicator")
    shm = Comm.from_mpi(comm, node_size=node_size, timeout=timeout)
    kind = lib.SHMTOPO_KIND_COMM_CREATE
    try:
        strict = agreement.normalised(shm, kind, _strict_setting)
        try:
            agreement.agree(shm, kind, extra=int(strict))
        except ShmtopoValueError as exc:
            raise ShmtopoValueError(f"{STRICT_VARIABLE} must be the same on every rank: {exc}",
                                    exc.errno or 22, exc.rank) from None
    except ShmtopoValueError:
        # every rank has the same verdict, and frees together: abandoning
        # instead could fail a peer still reading that verdict
        shm.free()
        raise
    except BaseException:
        shm.abandon()
        raise
    acomm = AcceleratedComm(comm, shm, tables, strict)
    global _hooked
    _live[id(acomm)] = acomm
    if not _hooked:  # registered after the comm's own exit hook, so it runs before that
        atexit.register(_release_at_exit)
        _hooked = True
    return acomm
