"""shmtopo.accel.comm: an mpi4py communicator whose upper-case buffer
collectives run through shmtopo's shared memory, switched on with one line.

``acomm = shmtopo.accelerate(comm)`` wraps an mpi4py intracommunicator.
What it does not define is the wrapped communicator's own (attribute lookup
falls through to it). Barrier, Bcast, Reduce, Allreduce, Allgather,
Alltoall and Reduce_scatter_block run on a :class:`shmtopo.Comm` made with
``Comm.from_mpi(comm)`` (hierarchical across nodes) when their arguments
allow it, and otherwise go to the wrapped communicator with the very
arguments they were given, so that their results are MPI's. Gather,
Scatter, their v-variants, Allgatherv, Alltoallv, Reduce_scatter, Scan and
Exscan do the same where the core has the lower-case call (otherwise they
go to MPI). The persistent ``..._init`` calls return requests whose
``Start`` makes the blocking call. Dup, Split and the other constructors
return accelerated comms.

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

import operator
import os
import sys
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

import numpy as np
import numpy.typing as npt

from .. import _fastpath, agreement, collectives
from .._lifetime import holds_comm
from .._native import lib
from ..comm import Comm
from ..errors import FreedError, ShmtopoArgumentError, ShmtopoValueError, last_error

Array = npt.NDArray[Any]

STRICT_VARIABLE = "SHMTOPO_ACCEL_STRICT"

#: Upper-case collectives that run in shared memory when their arguments allow.
ACCELERATED = ("Barrier", "Bcast", "Reduce", "Allreduce", "Allgather", "Alltoall", "Reduce_scatter_block")

#: Upper-case collectives that run in shared memory when their arguments
#: allow, through the core's lower-case call of the same name; else they go to MPI.
LOWER_CASE = ("Gather", "Gatherv", "Scatter", "Scatterv", "Allgatherv", "Alltoallv", "Reduce_scatter", "Scan",
              "Exscan")

#: Persistent collectives: a request whose Start() makes the blocking call
#: (accelerated or delegated as that call is, each start on its own).
PERSISTENT = tuple(f"{name}_init" for name in ACCELERATED + tuple(LOWER_CASE))

#: Upper-case collectives that go to the wrapped communicator in this version.
MPI_ONLY = (
    "Alltoallw",
    "Ibarrier", "Ibcast", "Igather", "Igatherv", "Iscatter", "Iscatterv", "Iallgather", "Iallgatherv",
    "Ialltoall", "Ialltoallv", "Ialltoallw", "Ireduce", "Iallreduce", "Ireduce_scatter_block",
    "Ireduce_scatter", "Iscan", "Iexscan", "Alltoallw_init",
)

#: Constructors whose new communicator comes back accelerated (COMM_NULL as it is).
CONSTRUCTORS = ("Dup", "Dup_with_info", "Clone", "Split", "Split_type", "Create", "Create_group")

# A delegating rank's signature: marked so (the core describes it as
# "delegated to MPI"), so that it differs from every accelerated one.
_SIG_TO_MPI = lib.SHMTOPO_SIG_DELEGATED

_BARRIER, _BCAST, _REDUCE, _ALLREDUCE = (lib.SHMTOPO_KIND_BARRIER, lib.SHMTOPO_KIND_BCAST,
                                         lib.SHMTOPO_KIND_REDUCE, lib.SHMTOPO_KIND_ALLREDUCE)
_ALLGATHER, _ALLTOALL, _REDUCE_SCATTER = (lib.SHMTOPO_KIND_ALLGATHER, lib.SHMTOPO_KIND_ALLTOALL,
                                          lib.SHMTOPO_KIND_REDUCE_SCATTER)
_GATHER, _GATHERV, _SCATTER, _SCATTERV = (lib.SHMTOPO_KIND_GATHER, lib.SHMTOPO_KIND_GATHERV,
                                          lib.SHMTOPO_KIND_SCATTER, lib.SHMTOPO_KIND_SCATTERV)
_ALLGATHERV, _ALLTOALLV, _SCAN, _EXSCAN = (lib.SHMTOPO_KIND_ALLGATHERV, lib.SHMTOPO_KIND_ALLTOALLV,
                                           lib.SHMTOPO_KIND_SCAN, lib.SHMTOPO_KIND_EXSCAN)

# The ops MPI defines on each kind of type (MPI-4.0, 6.9.2), by the core's
# names; a type keeps those the core has (collectives.OPS).
_INTEGER_OPS = frozenset(["sum", "prod", "min", "max", "band", "bor", "bxor", "land", "lor", "lxor"])
_FLOAT_OPS = frozenset(["sum", "prod", "min", "max"])
_COMPLEX_OPS = frozenset(["sum", "prod"])
_LOGICAL_OPS = frozenset(["land", "lor", "lxor"])
_PAIR_OPS = frozenset(["maxloc", "minloc"])
_NO_OPS: frozenset[str] = frozenset()
_ALL_OPS = _INTEGER_OPS | _PAIR_OPS


class _SumDefault:
    """The default op (mpi4py's is MPI.SUM, which cannot be imported here)."""

    def __repr__(self) -> str:
        return "MPI.SUM"


SUM_DEFAULT = _SumDefault()


class KnownType(NamedTuple):
    """A predefined MPI datatype shmtopo moves: its element type in the
    core, and the ops MPI defines on it that the core has."""
    dtype: np.dtype[Any]
    ops: frozenset[str]


class Tables:
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
        self.types: dict[int, KnownType] = {}
        signed = ["SIGNED_CHAR", "SHORT", "INT", "LONG", "LONG_LONG", "INT8_T", "INT16_T", "INT32_T", "INT64_T"]
        unsigned = ["UNSIGNED_CHAR", "UNSIGNED_SHORT", "UNSIGNED", "UNSIGNED_LONG", "UNSIGNED_LONG_LONG",
                    "UINT8_T", "UINT16_T", "UINT32_T", "UINT64_T"]
        core_ops = frozenset(collectives.OPS)

        def add(name: str, dtype: Any, ops: frozenset[str]) -> None:
            """MPI.<name> as the core's dtype, where both exist and agree in extent."""
            datatype = getattr(MPI, name, MPI.DATATYPE_NULL)
            if datatype == MPI.DATATYPE_NULL:
                return
            dtype = np.dtype(dtype)
            if dtype in collectives.DTYPES and datatype.Get_extent() == (0, dtype.itemsize):
                self.types[self.handle(datatype)] = KnownType(dtype, ops & core_ops)

        for names, kind, ops in ((signed, "i", _INTEGER_OPS), (unsigned, "u", _INTEGER_OPS),
                                 (["FLOAT", "DOUBLE"], "f", _FLOAT_OPS),
                                 (["C_FLOAT_COMPLEX", "C_DOUBLE_COMPLEX"], "c", _COMPLEX_OPS),
                                 (["C_BOOL"], "b", _LOGICAL_OPS),
                                 # bytes to move only: reducing them means different things in different MPIs
                                 (["BYTE", "CHAR"], "u", _NO_OPS)):
            for name in names:
                datatype = getattr(MPI, name, MPI.DATATYPE_NULL)
                if datatype != MPI.DATATYPE_NULL:
                    add(name, f"{kind}{datatype.Get_size()}", ops)
        # MAXLOC/MINLOC's (value, index) pairs, laid out as C lays out the structs
        for name, value in (("FLOAT_INT", np.float32), ("DOUBLE_INT", np.float64), ("LONG_INT", np.dtype("l")),
                            ("INT_INT", np.intc), ("SHORT_INT", np.short)):  # INT_INT: MPI_2INT
            add(name, collectives.PAIRS[np.dtype(value)][0], _PAIR_OPS)
        self.ops = {self.handle(getattr(MPI, name.upper())): name for name in _ALL_OPS & core_ops}
        self.op_names = {self.handle(op): f"MPI.{name}" for name in
                         ("LAND", "LOR", "LXOR", "MAXLOC", "MINLOC", "REPLACE", "NO_OP", "OP_NULL")
                         if (op := getattr(MPI, name, None)) is not None}
        self.null_type = self.handle(MPI.DATATYPE_NULL)


_tables: Tables | None = None


def get_tables() -> Tables:
    global _tables
    if _tables is None:
        _tables = Tables()
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


def _bind_fast_entries(t: Tables) -> None:
    """Hand the fast entries the op objects (by identity) and, per element
    type of the core, the ops the planner reduces an array of that type with
    when no datatype is given (mpi4py's datatype for its format)."""
    ops = [(SUM_DEFAULT, collectives.OPS["sum"])]
    ops += [(getattr(t.MPI, name.upper()), code) for name, code in collectives.OPS.items()]
    masks = [0] * lib.SHMTOPO_NDTYPES  # by code; a type the core has but numpy lacks (bfloat16) stays 0
    for dtype, code in collectives.DTYPES.items():
        probe = np.empty(1, dtype)
        try:
            known = t.types.get(t.handle(format_type(t, probe, "probe")))
        except (LeftToMPI, ValueError, BufferError):
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
    if isinstance(exc, ShmtopoValueError):  # bad or disagreeing arguments, as _shm_or_mpi raises them
        return ShmtopoArgumentError(str(exc), exc.errno or 22, exc.rank)
    return exc


class LeftToMPI(Exception):
    """The call is valid, but not one shmtopo runs: MPI does it (the message
    says why, for strict mode)."""


# ---- reading buffer arguments as mpi4py does ----------------------------------------

class Message(NamedTuple):
    """One buffer argument as mpi4py reads it."""
    raw: npt.NDArray[np.uint8]  # the buffer's bytes, from the displacement on
    entries: int                # of `datatype` (per block, for blocked arguments)
    datatype: Any
    type: KnownType | None      # None: a datatype shmtopo does not move


def _split(t: Tables, spec: Any, what: str) -> tuple[Any, Any, Any, Any]:
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


def format_type(t: Tables, buf: Any, what: str) -> Any:
    """The datatype mpi4py gives a buffer passed without one, from its format."""
    fmt = memoryview(buf).format
    if fmt[:1] == "@":
        fmt = fmt[1:]
    elif fmt[:1] in ("<", ">"):
        if (fmt[0] == "<") != (sys.byteorder == "little"):
            raise BufferError(f"{what}: format {fmt!r} has a non-native byte order")
        fmt = fmt[1:]
    if not t.typedict:
        raise LeftToMPI(f"{what}: this mpi4py has no table of formats")
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


def message(t: Tables, spec: Any, what: str, *, writable: bool, blocks: int = 0) -> Message:
    """A buffer argument read the way mpi4py reads it: the datatype from
    the buffer's format when none is given; the count given, or inferred
    from the buffer's length (per block when `blocks` > 1). Raises what
    makes it invalid (mpi4py or MPI would refuse it), LeftToMPI for what is
    valid but not shmtopo's (device buffers, MPI.BOTTOM)."""
    if spec is None or spec is t.IN_PLACE:
        raise TypeError(f"{what}: expecting a buffer or a list or tuple, not {spec!r}")
    buf, count, displ, datatype = _split(t, spec, what)
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


def type_name(datatype: Any) -> str:
    return datatype.Get_name() or "a derived datatype"


def moved_type(msg: Message, what: str) -> KnownType:
    """The element type of a message shmtopo can move, else LeftToMPI."""
    if msg.type is None:
        raise LeftToMPI(f"{what} has {type_name(msg.datatype)}")
    return msg.type


def elements(msg: Message, entries: int) -> Array:
    """The message's first `entries` entries as an array of its element type."""
    assert msg.type is not None
    return msg.raw[:entries * msg.type.dtype.itemsize].view(msg.type.dtype)


def check_op(t: Tables, op: Any) -> None:
    if not isinstance(op, t.Op):
        raise TypeError(f"op must be an MPI.Op, not {type(op).__name__}")


def op_name(t: Tables, op: Any, known: KnownType) -> str:
    """The core's name for a predefined op MPI defines on the type, else LeftToMPI."""
    key = t.handle(op)
    name = t.ops.get(key)
    if name is None:
        raise LeftToMPI(f"op {t.op_names.get(key, 'a predefined op')}, which shmtopo does not reduce with"
                        if op.is_predefined else "a user-defined op")
    if name not in known.ops:
        raise LeftToMPI(f"op {name} on {known.dtype} (shmtopo reduces that type with "
                        f"{', '.join(sorted(known.ops)) or 'no op'})")
    return name


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


class Call(NamedTuple):
    """What an accelerated call hands to shmtopo's collective."""
    send: Array
    out: Array | None
    op: str = ""
    root: int = -1
    back: Array | None = None  # the caller's misaligned result buffer, filled from out afterwards
    counts: tuple[Any, ...] = ()  # v-variants: counts and displacements, in elements


def _out_and_back(view: Array) -> tuple[Array, Array | None]:
    """(where the core writes, the caller's buffer to copy that into, if it
    is not the same): an aligned copy of a misaligned result buffer (a copy,
    so that an in-place input is there too)."""
    return (view, None) if view.flags.aligned else (view.copy(), view)


# ---- the communicator ----------------------------------------------------------------

class _Unseen:
    """A collective's entry in an accelerated comm's stats until its first
    count, which (``stats[name][i] += 1``, as every count is) puts the
    name's [accelerated, went to MPI] list in its place, at the end: so the
    stats keep the order of the first calls, and each later count is a
    plain dict's and a plain list's, in C."""

    __slots__ = ("_stats", "_name")

    def __init__(self, stats: dict[str, "list[int] | _Unseen"], name: str) -> None:
        self._stats, self._name = stats, name

    def __getitem__(self, i: int) -> int:
        return 0

    def __setitem__(self, i: int, value: int) -> None:
        del self._stats[self._name]
        counts = self._stats[self._name] = [0, 0]
        counts[i] = value


_OWN = ("_comm", "_shm", "_tables", "_strict", "_stats", "_options")


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

    def __init__(self, comm: Any, shm: Comm, tables: Tables, strict: bool,
                 options: dict[str, Any] | None = None) -> None:
        self._options = options or {}  # accelerate()'s, for the comms Dup() and the like make
        self._comm = comm
        self._shm: Comm | None = shm
        self._tables = tables
        self._strict = strict
        self._stats: dict[str, list[int] | _Unseen] = {}
        self._stats.update((name, _Unseen(self._stats, name)) for name in ACCELERATED + LOWER_CASE + MPI_ONLY)

    if TYPE_CHECKING:  # for type checkers only: at run time _forward's properties do this, at no lookup cost
        def __getattr__(self, name: str) -> Any:
            """The wrapped communicator's attribute (Get_rank, Send, ...)."""

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
        return {name: (n[0], n[1]) for name, n in self._stats.items() if isinstance(n, list)}

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
    def _plan(self, kind: int, name: str, normalise: Callable[..., Call], *args: Any) -> Call | str:
        """This rank's arguments, read and checked on this rank: what shmtopo
        runs, or why the call goes to MPI. Invalid arguments fail the call's
        agreement, so that every rank raises."""
        shm = self._shm
        if shm is None:
            return "the shmtopo comm has been freed"

        def plan() -> Call | str:
            try:
                return normalise(shm, *args)
            except LeftToMPI as why:
                return str(why)
            except Exception as exc:  # noqa: BLE001 - every rank hears of it
                raise ShmtopoValueError(f"{name}: {exc}") from None
        return agreement.normalised(shm, kind, plan)

    def _agree_on_mpi(self, kind: int, name: str, reason: str, root: Any = None) -> None:
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
        # a rooted call has been through _root_rank, so this is a rank of the comm
        r = -1 if root is None else operator.index(root)
        agreement.agree(shm, kind, root=r, flags=_SIG_TO_MPI)

    def _run_plan(self, call: Callable[..., Any], plan: Call, *args: Any, **kwargs: Any) -> None:
        call(self._shm, *args, **kwargs)
        if plan.back is not None and plan.out is not None:
            plan.back[...] = plan.out.reshape(plan.back.shape)

    def _shm_or_mpi(self, kind: int, name: str, planner: Callable[..., Call], mpi_args: tuple[Any, ...],
                    run: Callable[[Call], None], root: Any = None) -> None:
        """One accelerated collective: plan it on this rank, then run it in
        shared memory, or agree that it goes to MPI and hand MPI the caller's
        own arguments."""
        try:
            plan = self._plan(kind, name, planner, self._tables, *mpi_args)
            if isinstance(plan, str):
                self._agree_on_mpi(kind, name, plan, root)
            else:
                run(plan)
        except ShmtopoValueError as exc:  # bad or disagreeing arguments, the same on every rank
            raise ShmtopoArgumentError(str(exc), exc.errno or 22, exc.rank) from None
        if isinstance(plan, str):
            getattr(self._comm, name)(*mpi_args)  # MPI's exceptions as they are
            self._stats[name][1] += 1
            return
        self._stats[name][0] += 1

    def _mpi_only_call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """A collective this version always hands to MPI: every rank does, so
        no path needs agreeing (strictness is the same on every rank)."""
        if self._strict:
            raise ShmtopoValueError(f"{name} is not accelerated (it always goes to MPI), and "
                                    f"{STRICT_VARIABLE}=1")
        result = getattr(self._comm, name)(*args, **kwargs)
        self._stats[name][1] += 1
        return result

    # -- the accelerated collectives --------------------------------------
    def Barrier(self) -> None:
        """Collective: as mpi4py's ``Barrier``, in shared memory."""
        shm = self._shm
        # the plain case runs in C (see _bind_fast_entries), the rest below
        if shm is not None and _accel_barrier(shm._fast):
            self._stats["Barrier"][0] += 1
            return
        if shm is None:
            self._agree_on_mpi(_BARRIER, "Barrier", "the shmtopo comm has been freed")
            self._comm.Barrier()
            self._stats["Barrier"][1] += 1
            return
        shm.barrier()
        self._stats["Barrier"][0] += 1

    def Bcast(self, buf: Any, root: int = 0) -> None:
        """Collective: as mpi4py's ``Bcast``."""
        shm = self._shm
        if shm is not None and _accel_bcast(shm._fast, collectives._fast_windows(shm), buf, root):
            self._stats["Bcast"][0] += 1
            return
        self._shm_or_mpi(_BCAST, "Bcast", _bcast_plan, (buf, root),
                         lambda p: self._run_plan(collectives.bcast, p, p.send, p.root, out=p.out), root)

    def Reduce(self, sendbuf: Any, recvbuf: Any, op: Any = SUM_DEFAULT, root: int = 0) -> None:
        """Collective: as mpi4py's ``Reduce``."""
        shm = self._shm
        if shm is not None and _accel_reduce(shm._fast, collectives._fast_windows(shm), sendbuf, recvbuf, op, root):
            self._stats["Reduce"][0] += 1
            return
        op = self._tables.SUM if op is SUM_DEFAULT else op
        self._shm_or_mpi(_REDUCE, "Reduce", _reduce_plan, (sendbuf, recvbuf, op, root),
                         lambda p: self._run_plan(collectives.reduce, p, p.send, p.op, p.root, out=p.out), root)

    def Allreduce(self, sendbuf: Any, recvbuf: Any, op: Any = SUM_DEFAULT) -> None:
        """Collective: as mpi4py's ``Allreduce``."""
        shm = self._shm
        if shm is not None and _accel_allreduce(shm._fast, collectives._fast_windows(shm), sendbuf, recvbuf, op):
            self._stats["Allreduce"][0] += 1
            return
        op = self._tables.SUM if op is SUM_DEFAULT else op
        self._shm_or_mpi(_ALLREDUCE, "Allreduce", _allreduce_plan, (sendbuf, recvbuf, op),
                         lambda p: self._run_plan(collectives.allreduce, p, p.send, p.op, out=p.out))

    def Allgather(self, sendbuf: Any, recvbuf: Any) -> None:
        """Collective: as mpi4py's ``Allgather``."""
        shm = self._shm
        if shm is not None and _accel_allgather(shm._fast, shm._windows, sendbuf, recvbuf):
            self._stats["Allgather"][0] += 1
            return
        self._shm_or_mpi(_ALLGATHER, "Allgather", _allgather_plan, (sendbuf, recvbuf),
                         lambda p: self._run_plan(collectives.allgather, p, p.send, out=p.out))

    def Alltoall(self, sendbuf: Any, recvbuf: Any) -> None:
        """Collective: as mpi4py's ``Alltoall``."""
        self._shm_or_mpi(_ALLTOALL, "Alltoall", _alltoall_plan, (sendbuf, recvbuf),
                         lambda p: self._run_plan(collectives.alltoall, p, p.send, out=p.out))

    def Reduce_scatter_block(self, sendbuf: Any, recvbuf: Any, op: Any = SUM_DEFAULT) -> None:
        """Collective: as mpi4py's ``Reduce_scatter_block``."""
        op = self._tables.SUM if op is SUM_DEFAULT else op
        self._shm_or_mpi(_REDUCE_SCATTER, "Reduce_scatter_block", _reduce_scatter_plan, (sendbuf, recvbuf, op),
                         lambda p: self._run_plan(collectives.reduce_scatter, p, p.send, p.op, out=p.out))

    # -- through the lower-case calls -------------------------------------
    def Gather(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        """Collective: as mpi4py's ``Gather`` (recvbuf is read on the root only)."""
        self._shm_or_mpi(_GATHER, "Gather", _gather_plan, (sendbuf, recvbuf, root),
                         lambda p: self._run_plan(collectives.gather, p, p.send, p.root, out=p.out), root)

    def Scatter(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        """Collective: as mpi4py's ``Scatter`` (sendbuf is read on the root only)."""
        self._shm_or_mpi(_SCATTER, "Scatter", _scatter_plan, (sendbuf, recvbuf, root),
                         lambda p: self._run_plan(collectives.scatter, p, self._root_only(p), p.root, out=p.out), root)

    def Gatherv(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        """Collective: as mpi4py's ``Gatherv``."""
        self._shm_or_mpi(_GATHERV, "Gatherv", _gatherv_plan, (sendbuf, recvbuf, root),
                         lambda p: self._run_plan(collectives.gatherv, p, p.send, *(p.counts or (None, None)), p.root,
                                                  out=p.out), root)

    def Scatterv(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        """Collective: as mpi4py's ``Scatterv``."""
        self._shm_or_mpi(_SCATTERV, "Scatterv", _scatterv_plan, (sendbuf, recvbuf, root),
                         lambda p: self._run_plan(collectives.scatterv, p, self._root_only(p),
                                                  *(p.counts or (None, None)), p.root, out=p.out), root)

    def Allgatherv(self, sendbuf: Any, recvbuf: Any) -> None:
        """Collective: as mpi4py's ``Allgatherv``."""
        self._shm_or_mpi(_ALLGATHERV, "Allgatherv", _allgatherv_plan, (sendbuf, recvbuf),
                         lambda p: self._run_plan(collectives.allgatherv, p, p.send, *p.counts, out=p.out))

    def Alltoallv(self, sendbuf: Any, recvbuf: Any) -> None:
        """Collective: as mpi4py's ``Alltoallv``."""
        self._shm_or_mpi(_ALLTOALLV, "Alltoallv", _alltoallv_plan, (sendbuf, recvbuf),
                         lambda p: self._run_plan(collectives.alltoallv, p, p.send, *p.counts, out=p.out))

    def Reduce_scatter(self, sendbuf: Any, recvbuf: Any, recvcounts: Any = None, op: Any = SUM_DEFAULT) -> None:
        """Collective: as mpi4py's ``Reduce_scatter`` (recvcounts None: every
        rank's receive count, gathered first, as mpi4py does)."""
        op = self._tables.SUM if op is SUM_DEFAULT else op
        self._shm_or_mpi(_REDUCE_SCATTER, "Reduce_scatter", _reduce_scatter_v_plan,
                         (sendbuf, recvbuf, recvcounts, op),
                         lambda p: self._run_plan(collectives.reduce_scatter, p, p.send, p.op, counts=self._counts(p),
                                                  out=p.out))

    def Scan(self, sendbuf: Any, recvbuf: Any, op: Any = SUM_DEFAULT) -> None:
        """Collective: as mpi4py's ``Scan``."""
        op = self._tables.SUM if op is SUM_DEFAULT else op
        self._shm_or_mpi(_SCAN, "Scan", _scan_plan, (sendbuf, recvbuf, op),
                         lambda p: self._run_plan(collectives.scan, p, p.send, p.op, out=p.out))

    def Exscan(self, sendbuf: Any, recvbuf: Any, op: Any = SUM_DEFAULT) -> None:
        """Collective: as mpi4py's ``Exscan`` (rank 0's recvbuf is left as it is)."""
        op = self._tables.SUM if op is SUM_DEFAULT else op
        self._shm_or_mpi(_EXSCAN, "Exscan", _scan_plan, (sendbuf, recvbuf, op),
                         lambda p: self._run_plan(collectives.exscan, p, p.send, p.op, out=p.out))

    def _root_only(self, p: Call) -> Array | None:
        """A rooted call's input, which only the root has."""
        return p.send if self._shm is not None and self._shm.world_rank == p.root else None

    def _counts(self, p: Call) -> list[int]:
        """Reduce_scatter's counts; not given: every rank's own, gathered."""
        counts = p.counts[0]
        if counts is None:
            assert self._shm is not None and p.out is not None
            counts = collectives.allgather(self._shm, np.array([p.out.size], np.int64)).ravel().tolist()
        return list(counts)

    # -- persistent collectives --------------------------------------------
    def _persistent(self, name: str, args: tuple[Any, ...]) -> AcceleratedPrequest:
        return AcceleratedPrequest(self, name, args)

    def Barrier_init(self, info: Any = None) -> AcceleratedPrequest:
        """A persistent ``Barrier``: each Start() is a Barrier."""
        return self._persistent("Barrier", ())

    def Bcast_init(self, buf: Any, root: int = 0, info: Any = None) -> AcceleratedPrequest:
        """A persistent ``Bcast``: each Start() is a Bcast of the buffer's contents then."""
        return self._persistent("Bcast", (buf, root))

    def Reduce_init(self, sendbuf: Any, recvbuf: Any, op: Any = SUM_DEFAULT, root: int = 0,
                    info: Any = None) -> AcceleratedPrequest:
        """A persistent ``Reduce``."""
        return self._persistent("Reduce", (sendbuf, recvbuf, op, root))

    def Allreduce_init(self, sendbuf: Any, recvbuf: Any, op: Any = SUM_DEFAULT,
                       info: Any = None) -> AcceleratedPrequest:
        """A persistent ``Allreduce``."""
        return self._persistent("Allreduce", (sendbuf, recvbuf, op))

    def Allgather_init(self, sendbuf: Any, recvbuf: Any, info: Any = None) -> AcceleratedPrequest:
        """A persistent ``Allgather``."""
        return self._persistent("Allgather", (sendbuf, recvbuf))

    def Alltoall_init(self, sendbuf: Any, recvbuf: Any, info: Any = None) -> AcceleratedPrequest:
        """A persistent ``Alltoall``."""
        return self._persistent("Alltoall", (sendbuf, recvbuf))

    def Reduce_scatter_block_init(self, sendbuf: Any, recvbuf: Any, op: Any = SUM_DEFAULT,
                                  info: Any = None) -> AcceleratedPrequest:
        """A persistent ``Reduce_scatter_block``."""
        return self._persistent("Reduce_scatter_block", (sendbuf, recvbuf, op))

    def Gather_init(self, sendbuf: Any, recvbuf: Any, root: int = 0, info: Any = None) -> AcceleratedPrequest:
        """A persistent ``Gather``."""
        return self._persistent("Gather", (sendbuf, recvbuf, root))

    def Scatter_init(self, sendbuf: Any, recvbuf: Any, root: int = 0, info: Any = None) -> AcceleratedPrequest:
        """A persistent ``Scatter``."""
        return self._persistent("Scatter", (sendbuf, recvbuf, root))

    def Gatherv_init(self, sendbuf: Any, recvbuf: Any, root: int = 0, info: Any = None) -> AcceleratedPrequest:
        """A persistent ``Gatherv``."""
        return self._persistent("Gatherv", (sendbuf, recvbuf, root))

    def Scatterv_init(self, sendbuf: Any, recvbuf: Any, root: int = 0, info: Any = None) -> AcceleratedPrequest:
        """A persistent ``Scatterv``."""
        return self._persistent("Scatterv", (sendbuf, recvbuf, root))

    def Allgatherv_init(self, sendbuf: Any, recvbuf: Any, info: Any = None) -> AcceleratedPrequest:
        """A persistent ``Allgatherv``."""
        return self._persistent("Allgatherv", (sendbuf, recvbuf))

    def Alltoallv_init(self, sendbuf: Any, recvbuf: Any, info: Any = None) -> AcceleratedPrequest:
        """A persistent ``Alltoallv``."""
        return self._persistent("Alltoallv", (sendbuf, recvbuf))

    def Reduce_scatter_init(self, sendbuf: Any, recvbuf: Any, recvcounts: Any = None, op: Any = SUM_DEFAULT,
                            info: Any = None) -> AcceleratedPrequest:
        """A persistent ``Reduce_scatter``."""
        return self._persistent("Reduce_scatter", (sendbuf, recvbuf, recvcounts, op))

    def Scan_init(self, sendbuf: Any, recvbuf: Any, op: Any = SUM_DEFAULT, info: Any = None) -> AcceleratedPrequest:
        """A persistent ``Scan``."""
        return self._persistent("Scan", (sendbuf, recvbuf, op))

    def Exscan_init(self, sendbuf: Any, recvbuf: Any, op: Any = SUM_DEFAULT, info: Any = None) -> AcceleratedPrequest:
        """A persistent ``Exscan``."""
        return self._persistent("Exscan", (sendbuf, recvbuf, op))

    # -- new communicators come back accelerated ----------------------------
    def _wrapped(self, comm: Any) -> Any:
        """Collective over comm: it accelerated with this comm's options
        (COMM_NULL, where a rank is in no new comm, as it is)."""
        if comm == self._tables.MPI.COMM_NULL or not isinstance(comm, self._tables.MPI.Intracomm):
            return comm
        try:
            return accelerate(comm, **self._options)
        except BaseException:
            comm.Free()  # raised on every rank: nobody keeps it
            raise

    def Dup(self, info: Any = None) -> Any:
        """Collective: the wrapped communicator's ``Dup``, accelerated (free it with ``Free()``)."""
        return self._wrapped(self._comm.Dup() if info is None else self._comm.Dup(info))

    def Dup_with_info(self, info: Any) -> Any:
        """Collective: the wrapped communicator's ``Dup_with_info``, accelerated."""
        return self._wrapped(self._comm.Dup_with_info(info))

    def Clone(self) -> Any:
        """Collective: the wrapped communicator's ``Clone``, accelerated."""
        return self._wrapped(self._comm.Clone())

    def Split(self, color: int = 0, key: int = 0) -> Any:
        """Collective: the wrapped communicator's ``Split``, accelerated (COMM_NULL as it is)."""
        return self._wrapped(self._comm.Split(color, key))

    def Split_type(self, split_type: int, key: int = 0, info: Any = None) -> Any:
        """Collective: the wrapped communicator's ``Split_type``, accelerated."""
        args = (split_type, key) if info is None else (split_type, key, info)
        return self._wrapped(self._comm.Split_type(*args))

    def Create(self, group: Any) -> Any:
        """Collective: the wrapped communicator's ``Create``, accelerated."""
        return self._wrapped(self._comm.Create(group))

    def Create_group(self, group: Any, tag: int = 0) -> Any:
        """Collective over the group: the wrapped communicator's ``Create_group``, accelerated."""
        return self._wrapped(self._comm.Create_group(group, tag))


class AcceleratedPrequest:
    """A persistent collective of an accelerated comm, as mpi4py's
    ``Prequest``: ``Start()`` makes the blocking call on the arguments given
    at init (reading the buffers then), in shared memory or through MPI as
    that call would; it is complete on return, so ``Wait()`` and ``Test()``
    have nothing left to do. ``Free()`` (local) makes it inactive for good.
    ``Startall``/``Waitall``/``Testall`` take lists of these (mpi4py's own
    take only its requests)."""

    __slots__ = ("_acomm", "_name", "_args", "_freed")

    def __init__(self, acomm: AcceleratedComm, name: str, args: tuple[Any, ...]) -> None:
        self._acomm = acomm
        self._name = name
        self._args = args
        self._freed = False

    def Start(self) -> None:
        """Collective: run the call once."""
        if self._freed:
            raise ShmtopoValueError(f"{self._name}_init: Start on a freed request")
        getattr(self._acomm, self._name)(*self._args)

    def Wait(self, status: Any = None) -> bool:
        """Local: the last Start is complete already."""
        return True

    def Test(self, status: Any = None) -> bool:
        """Local: True (the last Start is complete already)."""
        return True

    def Free(self) -> None:
        """Local: release the request (twice is a no-op)."""
        self._freed = True
        self._args = ()

    def __bool__(self) -> bool:  # like a request that is not MPI.REQUEST_NULL
        return not self._freed

    def __repr__(self) -> str:
        return f"<shmtopo.AcceleratedPrequest {self._name}_init{' (freed)' if self._freed else ''}>"

    @staticmethod
    def Startall(requests: list[Any]) -> None:
        """Start every request of the list, in order."""
        for r in requests:
            r.Start()

    @staticmethod
    def Waitall(requests: list[Any], statuses: Any = None) -> bool:
        for r in requests:
            r.Wait()
        return True

    @staticmethod
    def Testall(requests: list[Any], statuses: Any = None) -> bool:
        return all(r.Test() for r in requests)


# ---- each call's arguments, read on this rank ------------------------------------------

def _bcast_plan(shm: Comm, t: Tables, buf: Any, root: Any) -> Call:
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


def _reduce_plan(shm: Comm, t: Tables, sendbuf: Any, recvbuf: Any, op: Any, root: Any) -> Call:
    r = _root_rank(root, shm.world_size)
    plan = _reduction(t, sendbuf, recvbuf, op, shm.world_rank == r)
    return plan._replace(root=r)


def _allreduce_plan(shm: Comm, t: Tables, sendbuf: Any, recvbuf: Any, op: Any) -> Call:
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


def _allgather_plan(shm: Comm, t: Tables, sendbuf: Any, recvbuf: Any) -> Call:
    a, out, back, count = _gathered(shm, t, sendbuf, recvbuf, "Allgather", 0)
    if a is out:  # in place: this rank's block of the result
        rank = shm.world_rank
        a = out[rank * count:(rank + 1) * count]
    return Call(a, out.reshape(shm.world_size, count), back=back)


def _alltoall_plan(shm: Comm, t: Tables, sendbuf: Any, recvbuf: Any) -> Call:
    a, out, back, _ = _gathered(shm, t, sendbuf, recvbuf, "Alltoall", shm.world_size)
    if shm.nnodes > 1 and np.may_share_memory(a, out):
        a = a.copy()  # in place, across nodes: MPI moves the blocks, and MPI takes no aliased buffers
    return Call(a, out, back=back)


def _reduce_scatter_plan(shm: Comm, t: Tables, sendbuf: Any, recvbuf: Any, op: Any) -> Call:
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


def _gather_plan(shm: Comm, t: Tables, sendbuf: Any, recvbuf: Any, root: Any) -> Call:
    size, rank = shm.world_size, shm.world_rank
    r = _root_rank(root, size)
    if rank != r:  # mpi4py reads no receive buffer there
        send = message(t, sendbuf, "sendbuf", writable=False)
        moved_type(send, "sendbuf")
        return Call(_aligned(elements(send, send.entries)), None, root=r)
    recv = message(t, recvbuf, "recvbuf", writable=True, blocks=size)
    known = moved_type(recv, "recvbuf")
    c = recv.entries
    out, back = _out_and_back(elements(recv, size * c))
    if in_place(t, sendbuf):  # the root's block is in place already: hand over a copy of it
        a = out[r * c:(r + 1) * c].copy()
    else:
        a = _block(t, sendbuf, known, c, "Gather")
    return Call(a, out.reshape(size, c), root=r, back=back)


def _scatter_plan(shm: Comm, t: Tables, sendbuf: Any, recvbuf: Any, root: Any) -> Call:
    size, rank = shm.world_size, shm.world_rank
    r = _root_rank(root, size)
    if rank != r:  # mpi4py reads no send buffer there
        recv = message(t, recvbuf, "recvbuf", writable=True)
        moved_type(recv, "recvbuf")
        out, back = _out_and_back(elements(recv, recv.entries))
        return Call(out[:0], out, root=r, back=back)
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


def _gatherv_plan(shm: Comm, t: Tables, sendbuf: Any, recvbuf: Any, root: Any) -> Call:
    size, rank = shm.world_size, shm.world_rank
    r = _root_rank(root, size)
    if rank != r:
        send = message(t, sendbuf, "sendbuf", writable=False)
        moved_type(send, "sendbuf")
        return Call(_aligned(elements(send, send.entries)), None, root=r)
    v, out, back, a = _vgathered(t, sendbuf, recvbuf, size, r, "Gatherv")
    return Call(a, out, root=r, back=back, counts=(v.counts, v.displs))


def _scatterv_plan(shm: Comm, t: Tables, sendbuf: Any, recvbuf: Any, root: Any) -> Call:
    size, rank = shm.world_size, shm.world_rank
    r = _root_rank(root, size)
    if rank != r:
        recv = message(t, recvbuf, "recvbuf", writable=True)
        moved_type(recv, "recvbuf")
        out, back = _out_and_back(elements(recv, recv.entries))
        return Call(out[:0], out, root=r, back=back)
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
            raise ValueError(f"Scatterv: recvbuf has {recv.entries} entries where sendbuf sends "
                             f"{v.counts[r]} to this rank")
        out, back = _out_and_back(elements(recv, recv.entries))
        if back is not None or np.may_share_memory(a, out):
            a = a.copy()
    return Call(a, out, root=r, back=back, counts=(v.counts, v.displs))


def _allgatherv_plan(shm: Comm, t: Tables, sendbuf: Any, recvbuf: Any) -> Call:
    size, rank = shm.world_size, shm.world_rank
    v, out, back, a = _vgathered(t, sendbuf, recvbuf, size, rank, "Allgatherv")
    if not in_place(t, sendbuf) and np.may_share_memory(a, out):
        a = a.copy()
    return Call(a, out, back=back, counts=(v.counts, v.displs))


def _alltoallv_plan(shm: Comm, t: Tables, sendbuf: Any, recvbuf: Any) -> Call:
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


def _reduce_scatter_v_plan(shm: Comm, t: Tables, sendbuf: Any, recvbuf: Any, recvcounts: Any,
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


def _scan_plan(shm: Comm, t: Tables, sendbuf: Any, recvbuf: Any, op: Any) -> Call:
    plan = _reduction(t, sendbuf, recvbuf, op, True)
    if plan.out is not None and np.may_share_memory(plan.send, plan.out):
        plan = plan._replace(send=plan.send.copy())  # in place: the scan reads a copy of the input
    return plan


def _mpi_only_method(name: str) -> Callable[..., Any]:
    def method(self: AcceleratedComm, *args: Any, **kwargs: Any) -> Any:
        return self._mpi_only_call(name, *args, **kwargs)
    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"Collective: the wrapped communicator's ``{name}`` (not accelerated in this version)."
    return method


for _name in MPI_ONLY:
    setattr(AcceleratedComm, _name, _mpi_only_method(_name))
del _name


def _strict_setting() -> bool:
    value = os.environ.get(STRICT_VARIABLE, "")
    if value in ("", "0"):
        return False
    if value == "1":
        return True
    raise ShmtopoValueError(f"{STRICT_VARIABLE}={value!r}: expected 0 or 1 (or unset)")


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
    tables = get_tables()
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
    acomm = AcceleratedComm(comm, shm, tables, strict, {"node_size": node_size, "timeout": timeout})
    holds_comm(acomm)
    return acomm
