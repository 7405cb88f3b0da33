"""shmtopo.accel.tables: what the drop-in needs to know of mpi4py, looked up
once: the predefined datatypes shmtopo moves (as the core's element types)
and the ops it reduces them with, mpi4py's table of buffer formats, and the
fast entries (shmtopo._fastpath's accel_*) bound to those tables.
"""
from __future__ import annotations

import operator
import sys
from typing import Any, Callable, NamedTuple

import numpy as np

from .. import _oob, _types
from .._fastpath import bind_accelerate, bind_mpi_direct, bind_mpi_only
from .._native import lib
from ..errors import DelegatedToMPI, ShmtopoArgumentError, ShmtopoValueError, last_error

# The ops MPI defines on each kind of type (MPI-4.0, 6.9.2), by the core's
# names; a type keeps those the core has (_types.OPS).
_INTEGER_OPS = frozenset(["sum", "prod", "min", "max", "band", "bor", "bxor", "land", "lor", "lxor"])
_FLOAT_OPS = frozenset(["sum", "prod", "min", "max"])
_COMPLEX_OPS = frozenset(["sum", "prod"])
_LOGICAL_OPS = frozenset(["land", "lor", "lxor"])
_FORTRAN_INTEGER_OPS = _INTEGER_OPS - _LOGICAL_OPS  # MPI's logical ops take C integers, not Fortran's
_PAIR_OPS = frozenset(["maxloc", "minloc"])
_NO_OPS: frozenset[str] = frozenset()
_ALL_OPS = _INTEGER_OPS | _PAIR_OPS


class _SumDefault:
    """The default op (mpi4py's is MPI.SUM, which cannot be imported here)."""

    def __repr__(self) -> str:
        return "MPI.SUM"


SUM_DEFAULT = _SumDefault()


class LeftToMPI(Exception):
    """The call is valid, but not one shmtopo runs: MPI does it (the message
    says why, for strict mode)."""


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
        self.pickle = MPI.pickle  # the lower-case calls' pickler (a program may change how it pickles)
        self.BOTTOM = MPI.BOTTOM
        self.SUM = MPI.SUM
        self.Datatype, self.Op = MPI.Datatype, MPI.Op
        self.Win = MPI.Win  # mpi4py's, whatever a program later binds to MPI.Win
        self.methods: type = MPI.Intracomm  # whose collectives are mpi4py's own (CommFast's methods call them)
        self.handle: Callable[[Any], int] = (operator.attrgetter("handle") if hasattr(MPI.Datatype, "handle")
                                             else operator.methodcaller("py2f"))
        # the table mpi4py itself types a buffer by, from its format
        self.typedict: dict[str, Any] = dict(getattr(MPI, "_typedict", {}))
        self.types: dict[int, KnownType] = {}
        #: the predefined Datatype objects behind `types` (the fast entries match them by identity)
        self.datatypes: list[Any] = []
        signed = ["SIGNED_CHAR", "SHORT", "INT", "LONG", "LONG_LONG", "INT8_T", "INT16_T", "INT32_T", "INT64_T"]
        unsigned = ["UNSIGNED_CHAR", "UNSIGNED_SHORT", "UNSIGNED", "UNSIGNED_LONG", "UNSIGNED_LONG_LONG",
                    "UINT8_T", "UINT16_T", "UINT32_T", "UINT64_T"]
        core_ops = frozenset(_types.OPS)

        def add(name: str, dtype: Any, ops: frozenset[str]) -> None:
            """MPI.<name> as the core's dtype, where both exist and agree in extent."""
            datatype = getattr(MPI, name, MPI.DATATYPE_NULL)
            if datatype == MPI.DATATYPE_NULL:
                return
            dtype = np.dtype(dtype)
            if dtype in _types.DTYPES and datatype.Get_extent() == (0, dtype.itemsize):
                self.types[self.handle(datatype)] = KnownType(dtype, ops & core_ops)
                self.datatypes.append(datatype)

        for names, kind, ops in ((signed, "i", _INTEGER_OPS), (unsigned, "u", _INTEGER_OPS),
                                 (["FLOAT", "DOUBLE"], "f", _FLOAT_OPS),
                                 (["C_FLOAT_COMPLEX", "C_DOUBLE_COMPLEX"], "c", _COMPLEX_OPS),
                                 (["C_BOOL"], "b", _LOGICAL_OPS),
                                 # Fortran's, where they are laid out as the C type of their size
                                 (["INTEGER", "INTEGER1", "INTEGER2", "INTEGER4", "INTEGER8"], "i",
                                  _FORTRAN_INTEGER_OPS),
                                 (["REAL", "REAL4", "REAL8", "DOUBLE_PRECISION"], "f", _FLOAT_OPS),
                                 (["COMPLEX", "COMPLEX8", "COMPLEX16", "DOUBLE_COMPLEX"], "c", _COMPLEX_OPS),
                                 # bytes to move only: reducing them means different things in different
                                 # MPIs (a LOGICAL's .true. is the Fortran compiler's: 1, or -1)
                                 (["BYTE", "CHAR", "CHARACTER", "LOGICAL"], "u", _NO_OPS)):
            for name in names:
                datatype = getattr(MPI, name, MPI.DATATYPE_NULL)
                if datatype != MPI.DATATYPE_NULL and datatype.Get_size() in (1, 2, 4, 8, 16):
                    add(name, f"{kind}{datatype.Get_size()}", ops)
        # MAXLOC/MINLOC's (value, index) pairs, laid out as C lays out the structs
        for name, value in (("FLOAT_INT", np.float32), ("DOUBLE_INT", np.float64), ("LONG_INT", np.dtype("l")),
                            ("INT_INT", np.intc), ("SHORT_INT", np.short)):  # INT_INT: MPI_2INT
            add(name, _types.PAIRS[np.dtype(value)][0], _PAIR_OPS)
        self.ops = {self.handle(getattr(MPI, name.upper())): name for name in _ALL_OPS & core_ops}
        self.op_names = {self.handle(op): f"MPI.{name}" for name in
                         ("LAND", "LOR", "LXOR", "MAXLOC", "MINLOC", "REPLACE", "NO_OP", "OP_NULL")
                         if (op := getattr(MPI, name, None)) is not None}
        self.null_type = self.handle(MPI.DATATYPE_NULL)
        self.packed = self.handle(MPI.PACKED)


_tables: Tables | None = None


def get_tables() -> Tables:
    """The tables, made at the first call (which imports mpi4py), with the
    fast entries bound to them."""
    global _tables
    if _tables is None:
        _tables = Tables()
        _bind_fast_entries(_tables)
    return _tables


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


def type_name(datatype: Any) -> str:
    return datatype.Get_name() or "a derived datatype"


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


# ---- the fast entries, bound to the tables ------------------------------------------

_MOVES = 1 << 31  # in a mask: the type is one shmtopo moves


def _bind_fast_entries(t: Tables) -> None:
    """Hand the fast entries what the planner decides by: the op objects
    (matched by identity), the predefined datatypes shmtopo moves with each
    one's core type and the ops MPI defines on it, and the datatype mpi4py
    gives a buffer passed without one: by format, and for a numpy array by
    its core type (buffers.message reads a message the same way)."""
    ops = [(SUM_DEFAULT, _types.OPS["sum"])]
    ops += [(getattr(t.MPI, name.upper()), code) for name, code in _types.OPS.items()]
    types = []
    for datatype in t.datatypes:
        known = t.types[t.handle(datatype)]
        mask = _MOVES | sum(1 << _types.OPS[name] for name in known.ops)
        types.append((datatype, _types.DTYPES[known.dtype], mask))
    index = {id(entry[0]): i for i, entry in enumerate(types)}

    def type_index(datatype: Any) -> int:
        return index.get(id(datatype), -1)

    native = "<" if sys.byteorder == "little" else ">"
    formats = {prefix + fmt: i for fmt, datatype in t.typedict.items() if (i := type_index(datatype)) >= 0
               for prefix in ("", "@", native)}
    by_code = [-1] * lib.SHMTOPO_NDTYPES  # a type the core has but numpy lacks (bfloat16) stays -1
    for dtype, code in _types.DTYPES.items():
        try:
            i = type_index(format_type(t, np.empty(1, dtype), "probe"))
        except (LeftToMPI, ValueError, BufferError):
            continue
        if i >= 0 and types[i][1] == code:
            by_code[code] = i
    bind_accelerate(tuple(ops), tuple(types), tuple(by_code), formats, t.IN_PLACE, t.BOTTOM,
                               _fast_failure)
    # what every rank hands to MPI by MPI's own rules (plans.mpi_only): the
    # named datatypes shmtopo never moves, and the formats mpi4py types as one
    unmoved = {}
    for name in dir(t.MPI):
        datatype = getattr(t.MPI, name)
        if not isinstance(datatype, t.Datatype) or t.handle(datatype) in t.types or t.handle(datatype) in (
                t.null_type, t.packed):
            continue
        try:
            if datatype.is_named:
                unmoved[t.handle(datatype)] = datatype
        except t.MPI.Exception:  # one this MPI does not have
            continue
    unmoved_formats = {prefix + fmt: True for fmt, datatype in t.typedict.items()
                       if t.handle(datatype) in unmoved for prefix in ("", "@", native)}
    bind_mpi_only(tuple(unmoved.values()), unmoved_formats, t.Op, t.methods)
    # MPI's own functions, for the derived-datatype calls every rank agreed to hand over
    functions, handle_size = _oob.mpi_functions("bcast", "allgather"), _oob.mpi_handle_size()
    capi = getattr(t.MPI, "__pyx_capi__", None)
    if functions is not None and handle_size is not None and isinstance(capi, dict):
        bind_mpi_direct(functions["bcast"], functions["allgather"], handle_size, capi, int(t.IN_PLACE),
                        t.MPI.Exception)


def _fast_failure(err: int) -> BaseException:
    """The exception of a collective that failed in a fast entry, worded as
    the planner's path words it."""
    exc = last_error(err)
    if isinstance(exc, DelegatedToMPI):  # every rank hands the call to MPI: CommFast does
        return exc
    if isinstance(exc, ShmtopoValueError):  # bad or disagreeing arguments, as the planner's path raises them
        return ShmtopoArgumentError(str(exc), exc.errno or 22, exc.rank)
    return exc
