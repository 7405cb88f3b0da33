"""The /proc/self/maps parser, range intersection and address choice
(native/maps.c through cffi): real maps, generated maps, malformed text."""
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shmtopo import _maps
from shmtopo.errors import ShmtopoMemoryError, ShmtopoValueError

PAGE = os.sysconf("SC_PAGE_SIZE")
LIMIT = 1 << 47
# One process's parsing and arithmetic: nothing here depends on the rank count.
pytestmark = [pytest.mark.serial, pytest.mark.no_mpi]
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def render(mappings, names=None):
    """maps-format text for sorted, disjoint (start, end) pairs."""
    lines = []
    for i, (start, end) in enumerate(mappings):
        name = names[i] if names else ("/usr/lib/libx.so" if i % 3 == 0 else "")
        lines.append(f"{start:08x}-{end:08x} r-xp 00000000 08:01 {1000 + i}       {name}".rstrip())
    return "\n".join(lines) + ("\n" if lines else "")


def complement(mappings, limit):
    """Free page-aligned ranges in [PAGE, limit), by brute force over pages."""
    free, cursor = [], PAGE
    for start, end in mappings:
        lo, hi = -(-cursor // PAGE) * PAGE, min(start, limit) // PAGE * PAGE
        if hi > lo:
            free.append((lo, hi))
        cursor = max(cursor, end)
    lo = -(-cursor // PAGE) * PAGE
    if lo < limit:
        free.append((lo, limit))
    return free


def check_ranges(ranges):
    assert all(s < e and s % PAGE == 0 and e % PAGE == 0 for s, e in ranges)
    assert all(a[1] <= b[0] for a, b in zip(ranges, ranges[1:]))


@st.composite
def mapping_lists(draw, max_pages=1 << 20):
    """Sorted disjoint mappings, not always page-aligned, sometimes touching."""
    n = draw(st.integers(0, 12))
    cuts = sorted(draw(st.lists(st.integers(1, max_pages * PAGE), min_size=2 * n, max_size=2 * n, unique=True)))
    return [(cuts[2 * i], cuts[2 * i + 1]) for i in range(n)]


def test_real_maps_are_parsed():
    with open("/proc/self/maps", "rb") as f:
        text = f.read()
    free = _maps.parse_free(text)
    check_ranges(free)
    assert free and free[0][0] >= PAGE
    # no free range overlaps a mapping listed in the text
    for line in text.decode().splitlines():
        start, end = (int(x, 16) for x in line.split()[0].split("-"))
        if "[vsyscall]" in line:
            continue
        assert all(e <= start or s >= end for s, e in free), line
    now = _maps.self_free()
    check_ranges(now)
    assert sum(e - s for s, e in now) > 1 << 40  # most of a 47-bit address space is free


@SETTINGS
@given(mapping_lists(), st.integers(1, 1 << 20))
def test_generated_maps_give_the_complement(mappings, limit_pages):
    limit = limit_pages * PAGE * 8
    assert _maps.parse_free(render(mappings), limit) == complement(mappings, limit)


@SETTINGS
@given(mapping_lists())
def test_stack_keeps_a_guard_gap(mappings):
    if not mappings:
        return
    names = [""] * (len(mappings) - 1) + ["[stack]"]
    free = _maps.parse_free(render(mappings, names), LIMIT)
    stack_start, stack_end = mappings[-1]
    below = mappings[-2][1] if len(mappings) > 1 else 0
    # the gap right below the stack keeps 1 MiB (the kernel's guard) free
    assert all(e <= stack_start - (1 << 20) for s, e in free if below <= s < stack_end)
    assert _maps.parse_free(render(mappings), LIMIT) != free or stack_start - below <= (1 << 20) + 2 * PAGE


@pytest.mark.parametrize("line", [
    "00400000 00452000 r-xp 00000000 08:02 173521 /usr/bin/x",      # no '-'
    "zz400000-00452000 r-xp 00000000 08:02 173521",                 # bad start
    "00452000-00400000 r-xp 00000000 08:02 173521",                 # start above end
    "00400000-00400000 r-xp 00000000 08:02 173521",                 # empty
    "00400000-00452000 rqxp 00000000 08:02 173521",                 # bad permissions
    "00400000-00452000 r-x 00000000 08:02 173521",                  # short permissions
    "00400000-00452000 r-xp 0000g000 08:02 173521",                 # bad offset
    "00400000-00452000 r-xp 00000000 0802 173521",                  # bad device
    "00400000-00452000 r-xp 00000000 08:02 x173521",                # bad inode
    "00400000-00452000 r-xp 00000000 08:02",                        # no inode
    "1ffffffffffffffffff-2ffffffffffffffffff r-xp 0 0:0 0",         # overflow
    "",                                                             # an empty line amid others
])
def test_malformed_lines_raise(line):
    good = "00001000-00002000 r--p 00000000 00:00 0\n"
    tail = "7f0000000000-7f0000001000 r--p 00000000 00:00 0\n"
    with pytest.raises(ShmtopoValueError, match="line 2"):
        _maps.parse_free(good + line + "\n" + tail)


def test_unordered_and_overlapping_raise():
    a = "00400000-00500000 r--p 00000000 00:00 0\n"
    b = "00300000-00350000 r--p 00000000 00:00 0\n"
    c = "004f0000-00600000 r--p 00000000 00:00 0\n"
    with pytest.raises(ShmtopoValueError, match="order"):
        _maps.parse_free(a + b)
    with pytest.raises(ShmtopoValueError, match="overlap"):
        _maps.parse_free(a + c)


@SETTINGS
@given(st.binary(max_size=400))
def test_arbitrary_bytes_never_crash(data):
    try:
        check_ranges(_maps.parse_free(data, LIMIT))
    except ShmtopoValueError:
        pass


@SETTINGS
@given(mapping_lists(), st.integers(0, 11), st.text(alphabet="0123456789abcdef- :rwxps\n/[]", max_size=40))
def test_corrupted_line_raises_or_parses(mappings, where, junk):
    lines = render(mappings).splitlines()
    lines.insert(min(where, len(lines)), junk)
    try:
        check_ranges(_maps.parse_free("\n".join(lines), LIMIT))
    except ShmtopoValueError as exc:
        assert "maps line" in str(exc)


def to_pages(ranges):
    return {p for s, e in ranges for p in range(s // PAGE, e // PAGE)}


@st.composite
def range_lists(draw):
    cuts = sorted(draw(st.lists(st.integers(1, 4000), max_size=16, unique=True)))
    cuts = cuts[:len(cuts) // 2 * 2]
    return [(cuts[i] * PAGE, cuts[i + 1] * PAGE) for i in range(0, len(cuts), 2)]


@SETTINGS
@given(range_lists(), range_lists())
def test_intersection_matches_sets(a, b):
    got = _maps.intersect(a, b)
    check_ranges(got)
    assert to_pages(got) == to_pages(a) & to_pages(b)


def test_intersection_rejects_unsorted():
    with pytest.raises(ShmtopoValueError):
        _maps.intersect([(3 * PAGE, 4 * PAGE), (PAGE, 2 * PAGE)], [])


@SETTINGS
@given(range_lists(), st.integers(1, 64), st.sampled_from([PAGE, 16 * PAGE, 2 << 20]), st.integers(0, 40))
def test_choose_fits_inside_and_is_aligned(ranges, pages, align, attempt):
    length = pages * PAGE
    try:
        addr = _maps.choose(ranges, length, align, attempt)
    except ShmtopoMemoryError:
        assert not any((-(-s // align) * align) + length <= e for s, e in ranges)
        return
    assert addr % align == 0
    assert any(s <= addr and addr + length <= e for s, e in ranges)
    assert _maps.choose(ranges, length, align, attempt) == addr  # deterministic


def test_choose_rejects_bad_arguments():
    ranges = [(PAGE, 1 << 30)]
    with pytest.raises(ShmtopoValueError):
        _maps.choose(ranges, 0, PAGE)
    with pytest.raises(ShmtopoValueError):
        _maps.choose(ranges, PAGE, 3 * PAGE)
    assert len({_maps.choose(ranges, PAGE, PAGE, k) for k in range(4)}) == 4
