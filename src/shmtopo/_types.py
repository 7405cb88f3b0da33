"""The tables and checks every collective shares, whichever entry it comes
through (the Comm methods, the persistent requests, the mpi4py drop-in): the
dtypes and ops the native core takes, the (value, index) pair types, the
call kinds, and the checks of one rank's root, result array and overlap.
They raise ShmtopoValueError; the callers run them inside
agreement.normalised, so a bad argument on one rank fails the call on all.
"""
from __future__ import annotations

import math
import operator
import sys
from typing import Any, Callable, Mapping

import numpy as np
import numpy.typing as npt

from ._base import CommLike
from ._native import ffi, lib
from .errors import ShmtopoValueError


def _c_pair(value: Any, struct: str) -> np.dtype[Any]:
    """The numpy dtype of the C struct {value; int index;}, padding and all."""
    spec: Any = {"names": ["value", "index"], "formats": [value, np.intc],
                 "offsets": [0, ffi.offsetof(struct, "index")], "itemsize": ffi.sizeof(struct)}
    pair: np.dtype[Any] = np.dtype(spec, align=True)
    return pair

# The (value, index) pair types of maxloc/minloc, by value type: MPI's
# MPI_FLOAT_INT, MPI_DOUBLE_INT, MPI_LONG_INT, MPI_2INT, MPI_SHORT_INT.
_PAIR_TYPES: list[tuple[Any, str, int]] = [
    (np.float32, "shmtopo_float_int_t", lib.SHMTOPO_FLOAT_INT),
    (np.float64, "shmtopo_double_int_t", lib.SHMTOPO_DOUBLE_INT),
    ("l", "shmtopo_long_int_t", lib.SHMTOPO_LONG_INT),  # C long
    (np.intc, "shmtopo_2int_t", lib.SHMTOPO_2INT),
    (np.short, "shmtopo_short_int_t", lib.SHMTOPO_SHORT_INT)]

PAIRS = {np.dtype(v): (_c_pair(v, struct), code) for v, struct, code in _PAIR_TYPES}


def pair_dtype(value: npt.DTypeLike) -> np.dtype[Any]:
    """The numpy dtype of maxloc/minloc's (value, index) pairs of `value`
    (float32, float64, int64 (C long), int32, int16): an aligned struct
    [('value', value), ('index', 'i4')] with C's padding, the layout of MPI's
    FLOAT_INT, DOUBLE_INT, LONG_INT, 2INT, SHORT_INT. Collectives take any
    structured dtype of exactly that layout, whatever its field names."""
    try:
        return PAIRS[np.dtype(value)][0]
    except (KeyError, TypeError):
        raise ShmtopoValueError(f"no (value, index) pair type of {value!r}: pair_dtype takes "
                                "float32, float64, int64 (C long), int32 or int16") from None

#: ml_dtypes' bfloat16 (optional), taken in once the program has imported
#: ml_dtypes (see take_in_bfloat16): importing ml_dtypes costs more CPU than
#: the rest of shmtopo's import, in every process, for a type few programs use.
BFLOAT16: np.dtype[Any] | None = None
_on_new_dtype: list[Callable[[], None]] = []

DTYPES = {np.dtype(t): code for t, code in [
    (np.int8, lib.SHMTOPO_INT8), (np.int16, lib.SHMTOPO_INT16), (np.int32, lib.SHMTOPO_INT32),
    (np.int64, lib.SHMTOPO_INT64), (np.uint8, lib.SHMTOPO_UINT8), (np.uint16, lib.SHMTOPO_UINT16),
    (np.uint32, lib.SHMTOPO_UINT32), (np.uint64, lib.SHMTOPO_UINT64),
    (np.float32, lib.SHMTOPO_FLOAT32), (np.float64, lib.SHMTOPO_FLOAT64),
    (np.bool_, lib.SHMTOPO_BOOL), (np.complex64, lib.SHMTOPO_COMPLEX64),
    (np.complex128, lib.SHMTOPO_COMPLEX128), (np.float16, lib.SHMTOPO_FLOAT16)]
    + [(pair, code) for pair, code in PAIRS.values()]}

BY_CODE = {code: dtype for dtype, code in DTYPES.items()}


def take_in_bfloat16() -> bool:
    """Add ml_dtypes' bfloat16 to the tables if the program has imported
    ml_dtypes since (an array of it cannot exist before), and tell those who
    asked (on_new_dtype). True when it was added now."""
    global BFLOAT16
    ml_dtypes = sys.modules.get("ml_dtypes")
    if BFLOAT16 is not None or ml_dtypes is None:
        return False
    BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
    DTYPES[BFLOAT16] = lib.SHMTOPO_BFLOAT16
    BY_CODE[lib.SHMTOPO_BFLOAT16] = BFLOAT16
    for tell in _on_new_dtype:
        tell()
    return True


def on_new_dtype(tell: Callable[[], None]) -> None:
    """tell() runs whenever a type joins the tables (bfloat16)."""
    _on_new_dtype.append(tell)


take_in_bfloat16()

OPS = {"sum": lib.SHMTOPO_OP_SUM, "prod": lib.SHMTOPO_OP_PROD, "min": lib.SHMTOPO_OP_MIN,
       "max": lib.SHMTOPO_OP_MAX, "band": lib.SHMTOPO_OP_BAND, "bor": lib.SHMTOPO_OP_BOR,
       "bxor": lib.SHMTOPO_OP_BXOR, "land": lib.SHMTOPO_OP_LAND, "lor": lib.SHMTOPO_OP_LOR,
       "lxor": lib.SHMTOPO_OP_LXOR, "maxloc": lib.SHMTOPO_OP_MAXLOC, "minloc": lib.SHMTOPO_OP_MINLOC}

ALGORITHMS = {None: lib.SHMTOPO_COLL_AUTO, "auto": lib.SHMTOPO_COLL_AUTO,
              "flat": lib.SHMTOPO_COLL_FLAT, "rsag": lib.SHMTOPO_COLL_RSAG}

BARRIER, BCAST, REDUCE, ALLREDUCE = (lib.SHMTOPO_KIND_BARRIER, lib.SHMTOPO_KIND_BCAST,
                                     lib.SHMTOPO_KIND_REDUCE, lib.SHMTOPO_KIND_ALLREDUCE)

ALLGATHER, REDUCE_SCATTER, ALLTOALL = (lib.SHMTOPO_KIND_ALLGATHER, lib.SHMTOPO_KIND_REDUCE_SCATTER,
                                       lib.SHMTOPO_KIND_ALLTOALL)

GATHER, SCATTER, GATHERV, SCATTERV = (lib.SHMTOPO_KIND_GATHER, lib.SHMTOPO_KIND_SCATTER,
                                      lib.SHMTOPO_KIND_GATHERV, lib.SHMTOPO_KIND_SCATTERV)

ALLGATHERV, ALLTOALLV, SCAN, EXSCAN, ALLTOALLW = (lib.SHMTOPO_KIND_ALLGATHERV, lib.SHMTOPO_KIND_ALLTOALLV,
                                                  lib.SHMTOPO_KIND_SCAN, lib.SHMTOPO_KIND_EXSCAN,
                                                  lib.SHMTOPO_KIND_ALLTOALLW)

OWN_COUNT, COUNTS = lib.SHMTOPO_SIG_OWN_COUNT, lib.SHMTOPO_SIG_COUNTS

Array = npt.NDArray[Any]

SIZES = np.uint64  # size_t on the platforms shmtopo builds for


def contiguous(array: Any) -> Array:
    a = np.asarray(array)
    return a if a.flags.c_contiguous else np.ascontiguousarray(a)


def table_code(table: dict[Any, int], key: Any, what: str) -> int:
    try:
        return int(table[key])
    except (KeyError, TypeError):
        raise ShmtopoValueError(f"unsupported {what} {key!r} (expected one of "
                                f"{', '.join(str(k) for k in table if k is not None)})") from None


def _pair_layout(dtype: np.dtype[Any]) -> tuple[Any, ...]:
    fields: Mapping[str, Any] = dtype.fields or {}
    return (dtype.itemsize,) + tuple(sorted((f[1], f[0].str) for f in fields.values()))

_PAIR_LAYOUTS = {_pair_layout(pair): code for pair, code in PAIRS.values()}


def dtype_code(a: Array) -> int:
    code = DTYPES.get(a.dtype)
    if code is None and a.dtype.fields is not None:  # a pair type under other field names
        code = _PAIR_LAYOUTS.get(_pair_layout(a.dtype))
    if code is None and take_in_bfloat16():
        return dtype_code(a)
    if code is None:
        names = ", ".join(str(k) for k in DTYPES if k.fields is None)
        raise ShmtopoValueError(f"unsupported dtype {a.dtype!r} (expected one of {names}, or a "
                                "(value, index) pair of shmtopo.pair_dtype)")
    return int(code)


def checked_root(comm: CommLike, root: Any) -> int:
    if isinstance(root, (bool, np.bool_)):
        raise ShmtopoValueError(f"root must be a rank number, not {root!r}")
    try:
        r = operator.index(root)
    except TypeError:
        raise ShmtopoValueError(f"root must be a rank number, not {root!r}") from None
    if not 0 <= r < comm.world_size:
        raise ShmtopoValueError(f"root {r} out of range [0, {comm.world_size})")
    return r


def result_array(out: Any, shape: tuple[int, ...], dtype: np.dtype[Any], what: str) -> Array:
    if out is None:
        return np.empty(shape, dtype)
    if type(out) is np.ndarray and out.dtype == dtype and out.shape == shape and out.flags.c_contiguous \
            and out.flags.writeable:
        return out  # the common case, checked cheaply
    if not isinstance(out, np.ndarray) or not out.flags.c_contiguous or not out.flags.writeable:
        raise ShmtopoValueError(f"{what}: out must be a writable C-contiguous numpy array")
    if out.dtype != dtype or out.size != math.prod(shape):
        raise ShmtopoValueError(f"{what}: out has {out.size} x {out.dtype}, needs {shape} of {dtype}")
    return out


def address_of(a: Array) -> int:
    return int(a.__array_interface__["data"][0])


def check_apart(what: str, a: Array, result: Array, in_place_at: int | None = None) -> None:
    """The input lies exactly where an in-place call keeps it (in_place_at:
    by default the result's start, with the same size), or apart from the
    result; a partial overlap would read data already overwritten."""
    if not (a.size and result.size and np.may_share_memory(a, result)):
        return
    start, at = address_of(a), address_of(result)
    if in_place_at is None:
        if start == at and a.nbytes == result.nbytes:
            return
    elif start == in_place_at:
        return
    if at < start + a.nbytes and start < at + result.nbytes:
        raise ShmtopoValueError(f"{what}: the result overlaps the input only in part "
                                "(pass the same array for in place, or separate arrays)")
