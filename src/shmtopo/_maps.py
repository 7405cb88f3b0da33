"""Free address ranges (from /proc/self/maps), their intersection across
ranks and the choice of a common address: thin wrappers over native/maps.c.

Ranges are lists of ``(start, end)`` integer pairs, ``end`` excluded, sorted.
"""
from __future__ import annotations

import errno as _errno
from typing import Any, Callable

from ._native import ffi, lib
from .errors import check


def _collect(fill: Callable[[Any, int, Any], int], initial: int = 256) -> list[tuple[int, int]]:
    """Call ``fill(out, max, countp)`` with a growing buffer until it fits."""
    cap = initial
    while True:
        out = ffi.new("shmtopo_range_t[]", cap)
        count = ffi.new("size_t *")
        rc = fill(out, cap, count)
        if rc < 0 and ffi.errno == _errno.ENOBUFS and count[0] > cap:
            cap = count[0] + 64  # the address space may grow meanwhile
            continue
        check(rc)
        return [(out[i].start, out[i].end) for i in range(count[0])]


def parse_free(text: bytes | str, limit: int = 0) -> list[tuple[int, int]]:
    """Free ranges described by maps-format ``text`` (ShmtopoValueError when
    malformed or unordered); ``limit`` 0 means this architecture's top."""
    data = text.encode() if isinstance(text, str) else bytes(text)
    buf = ffi.from_buffer(data)
    return _collect(lambda out, cap, count: lib.shmtopo_maps_parse_free(buf, len(data), limit, out, cap, count))


def self_free() -> list[tuple[int, int]]:
    """Free ranges of this process now."""
    return _collect(lib.shmtopo_maps_self_free)


def _as_array(ranges: list[tuple[int, int]]) -> Any:
    arr = ffi.new("shmtopo_range_t[]", max(len(ranges), 1))
    for i, (start, end) in enumerate(ranges):
        arr[i].start = start
        arr[i].end = end
    return arr


def intersect(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Ranges free in both lists."""
    ca, cb = _as_array(a), _as_array(b)
    return _collect(lambda out, cap, count: lib.shmtopo_ranges_intersect(ca, len(a), cb, len(b), out, cap, count),
                    initial=len(a) + len(b) + 1)


def choose(ranges: list[tuple[int, int]], length: int, align: int, attempt: int = 0) -> int:
    """A start address for ``length`` bytes aligned to ``align``; each attempt
    gives another candidate. ShmtopoMemoryError when nothing fits."""
    arr = _as_array(ranges)
    addr = ffi.new("uintptr_t *")
    check(lib.shmtopo_ranges_choose(arr, len(ranges), length, align, attempt, addr))
    return int(addr[0])
