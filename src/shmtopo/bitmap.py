"""Bitmap: a set of CPU (PU) or NUMA node indices, in hwloc's syntaxes.

A :class:`Bitmap` is a frozenset of non-negative ints, so it compares,
hashes and combines like one (``a <= b``, ``a | b``: set operators give
Bitmaps back). It adds hwloc's string forms, parsed and written by hwloc
itself so that they match hwloc's tools exactly:

- list: ``"0-3,8"`` (``str(bitmap)``; hwloc-calc's ``--cof list``),
- mask: ``"0x0000010f"``, 32-bit words separated by commas (what hwloc-calc
  and lstopo print by default),
- taskset: ``"0x10f"``.

Infinite sets ("0-") are not Bitmaps: parsing one raises ShmtopoValueError.
"""
from __future__ import annotations

import errno as _errno
import re
from typing import Any, Callable, Iterable

from ._native import ffi, lib
from .errors import ShmtopoValueError, check

SYNTAXES = {"list": lib.SHMTOPO_BITMAP_LIST, "mask": lib.SHMTOPO_BITMAP_MASK,
            "taskset": lib.SHMTOPO_BITMAP_TASKSET}
# hwloc's parsers accept more than they print (for instance "3-1-2"): the
# shapes of its written forms are checked first, so that a typo raises.
_SHAPES = {
    "list": re.compile(r"(?:\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*)?"),
    "mask": re.compile(r"0x[0-9a-fA-F]{1,8}(?:,(?:(?:0x)?[0-9a-fA-F]{1,8})?)*"),
    "taskset": re.compile(r"0x[0-9a-fA-F]+"),
}
#: hwloc indices are C ints.
MAX_INDEX = 2**31 - 1


def grow(fill: Callable[[Any, int, Any], int], ctype: str = "unsigned[]") -> tuple[Any, int]:
    """Call ``fill(out, max, countp)`` with a growing ``ctype`` buffer until
    the result fits; returns (buffer, count)."""
    cap = 64
    while True:
        out = ffi.new(ctype, cap)
        count = ffi.new("size_t *")
        rc = fill(out, cap, count)
        if rc < 0 and ffi.errno == _errno.ENOBUFS and count[0] > cap:
            cap = count[0]
            continue
        check(rc)
        return out, count[0]


def indices_from(fill: Callable[[Any, int, Any], int]) -> "Bitmap":
    """A Bitmap filled by a native call of the (out, max, countp) kind."""
    out, n = grow(fill)
    return Bitmap._trusted(out[0:n])


def _syntax(name: Any) -> int:
    if name not in SYNTAXES:
        raise ShmtopoValueError(f"bitmap syntax must be one of {', '.join(SYNTAXES)}, not {name!r}")
    return int(SYNTAXES[name])


class Bitmap(frozenset[int]):
    """An immutable set of indices with hwloc's list syntax as its ``str``.

    ``Bitmap([0, 1, 2, 3, 8])``, ``Bitmap("0-3,8")`` (list syntax, or a mask
    starting with ``0x``), ``Bitmap.parse(text, "taskset")``.
    """

    __slots__ = ()

    def __new__(cls, items: Iterable[int] | str = ()) -> "Bitmap":
        if isinstance(items, str):
            return cls.parse(items)
        if isinstance(items, Bitmap):
            return items if type(items) is cls else frozenset.__new__(cls, items)
        try:
            values = list(items)
        except TypeError:
            raise ShmtopoValueError(f"a Bitmap is made of indices, not {items!r}") from None
        for v in values:
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_INDEX:
                raise ShmtopoValueError(f"bitmap index must be an integer in [0, {MAX_INDEX}], not {v!r}")
        return frozenset.__new__(cls, values)

    @classmethod
    def _trusted(cls, values: Iterable[int]) -> "Bitmap":
        return frozenset.__new__(cls, values)

    @classmethod
    def parse(cls, text: str, syntax: str | None = None) -> "Bitmap":
        """Parse hwloc's list ("0-3,8"), mask ("0x0000000f,0x00000001") or
        taskset ("0x10000000f") syntax; without ``syntax``, text starting
        with ``0x`` is a mask, anything else a list."""
        if not isinstance(text, str):
            raise ShmtopoValueError(f"a bitmap string must be a str, not {text!r}")
        stripped = text.strip()
        if syntax is None:
            syntax = "mask" if stripped.lower().startswith("0x") else "list"
        number = _syntax(syntax)
        if not _SHAPES[syntax].fullmatch(stripped):
            raise ShmtopoValueError(f"bitmap: {text!r} is not in hwloc's {syntax} syntax"
                                    + (" (an infinite set?)" if stripped.endswith("-") else ""))
        if syntax == "list":
            # hwloc reads each number as an unsigned long and wraps it into an int
            for part in filter(None, stripped.split(",")):
                low, _, high = part.partition("-")
                if max(int(low), int(high or low)) > MAX_INDEX:
                    raise ShmtopoValueError(f"bitmap: {part!r} in {text!r} goes beyond index {MAX_INDEX} "
                                            "(hwloc indices are C ints)")
                if high and int(high) < int(low):
                    raise ShmtopoValueError(f"bitmap: range {part!r} in {text!r} ends before it starts")
        raw = stripped.encode()
        return indices_from(lambda out, cap, count: lib.shmtopo_bitmap_parse(raw, number, out, cap, count))

    def format(self, syntax: str = "list") -> str:
        """This set in hwloc's "list", "mask" or "taskset" syntax."""
        number = _syntax(syntax)
        idx = ffi.new("unsigned[]", sorted(self)) if self else ffi.NULL
        need = check(lib.shmtopo_bitmap_format(idx, len(self), number, ffi.NULL, 0))
        buf = ffi.new("char[]", need + 1)
        check(lib.shmtopo_bitmap_format(idx, len(self), number, buf, need + 1))
        return ffi.string(buf).decode()

    @property
    def mask(self) -> str:
        """hwloc's mask syntax, e.g. ``0x0000000f``."""
        return self.format("mask")

    @property
    def first(self) -> int | None:
        """The lowest index (None when empty)."""
        return min(self) if self else None

    @property
    def weight(self) -> int:
        """How many indices (hwloc's word for len)."""
        return len(self)

    def __str__(self) -> str:
        return self.format("list")

    def __repr__(self) -> str:
        return f"Bitmap({self.format('list')!r})"

    # set operators keep the type
    def __or__(self, other: Iterable[int]) -> Bitmap:  # type: ignore[override]
        return Bitmap._trusted(frozenset.__or__(self, frozenset(other)))

    def __and__(self, other: Iterable[int]) -> Bitmap:  # type: ignore[override]
        return Bitmap._trusted(frozenset.__and__(self, frozenset(other)))

    def __sub__(self, other: Iterable[int]) -> Bitmap:  # type: ignore[override]
        return Bitmap._trusted(frozenset.__sub__(self, frozenset(other)))

    def __xor__(self, other: Iterable[int]) -> Bitmap:  # type: ignore[override]
        return Bitmap._trusted(frozenset.__xor__(self, frozenset(other)))

    __ror__ = __or__
    __rand__ = __and__
    __rxor__ = __xor__

    def union(self, *others: Iterable[int]) -> Bitmap:  # type: ignore[override]  # only ints make a Bitmap
        return Bitmap._trusted(frozenset.union(self, *others))

    def intersection(self, *others: Iterable[Any]) -> Bitmap:
        return Bitmap._trusted(frozenset.intersection(self, *others))

    def difference(self, *others: Iterable[Any]) -> Bitmap:
        return Bitmap._trusted(frozenset.difference(self, *others))


def as_indices(value: Any, what: str = "set") -> Bitmap:
    """A Bitmap from what a caller may pass for a set: a Bitmap, an iterable
    of ints, a string in hwloc syntax; ShmtopoValueError otherwise."""
    if isinstance(value, Bitmap):
        return value
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        if isinstance(value, str):
            return Bitmap.parse(value)
        raise ShmtopoValueError(f"{what} must be a Bitmap, indices or an hwloc list string, not {value!r}")
    return Bitmap(value)


def c_indices(bitmap: Bitmap) -> tuple[Any, int]:
    """(unsigned[], n) for a native call taking a set."""
    return (ffi.new("unsigned[]", sorted(bitmap)) if bitmap else ffi.NULL), len(bitmap)
