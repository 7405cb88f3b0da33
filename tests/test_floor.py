"""The hardware floor: the model's arithmetic on made-up figures, the C
probes' argument checks and failure paths, and measure() on the job's ranks
(1 rank in the serial pass, 2/3/4 under mpiexec). Nothing here is timed:
the figures are checked for being there and sane, never for speed."""
import math
import os
import subprocess
import threading

import numpy as np
import pytest

from shmtopo import floor as F
from shmtopo._native import ffi, lib
from shmtopo.errors import PeerDeadError, ShmtopoError, ShmtopoTimeoutError, ShmtopoValueError, check

from conftest import WORLD

US = 1e-6


def _stat(t):
    return F.Stat(t, t, t)


# Made-up figures: copies across cores cost 0.1 us + n at 10 GB/s (one way)
# or 5 GB/s (both ways at once), local copies n at 50 GB/s, the float64
# kernel 20 GB/s of one input, a round trip 0.3 us.
SIZES = [8, 64, 4096, 1 << 20]


def x1(n):
    return 0.1 * US + n / 10e9


def x2(n):
    return 0.1 * US + n / 5e9


def c(n):
    return n / 50e9


def r(n):
    return n / 20e9


def made_up(ranks=2):
    fl = F.Floor(ranks=ranks, ncpus=ranks, oversubscribed=False)
    fl.round_trip = _stat(0.3 * US)
    fl.across_one = {n: _stat(x1(n)) for n in SIZES}
    fl.across_both = {n: _stat(x2(n)) for n in SIZES}
    fl.local = {n: _stat(c(n)) for n in SIZES}
    fl.reduce = {"float64": _stat(r(fl.reduce_bytes)), "int8": _stat(r(fl.reduce_bytes) / 2)}
    return fl


@pytest.mark.serial
def test_stat_is_median_and_range():
    s = F.Stat.of([5.0, 1.0, 3.0, 2.0, 100.0])
    assert (s.median, s.lo, s.hi) == (3.0, 1.0, 100.0)


@pytest.mark.serial
def test_interpolate_exact_between_below_above():
    table = {n: _stat(x1(n)) for n in SIZES}
    for n in SIZES:
        assert F._interpolate(table, n) == pytest.approx(x1(n))
    assert F._interpolate(table, 1) == pytest.approx(x1(8))          # latency bound below
    assert F._interpolate(table, 0) == 0
    big = 8 << 20                                                      # bandwidth above
    assert F._interpolate(table, big) == pytest.approx(x1(1 << 20) * 8)
    # between two sizes: a straight line in log-log (the geometric mean at
    # the geometric midpoint)
    mid = math.sqrt(64 * 4096)
    assert F._interpolate(table, mid) == pytest.approx(math.sqrt(x1(64) * x1(4096)))
    assert x1(64) < F._interpolate(table, 1000) < x1(4096)
    with pytest.raises(ValueError):
        F._interpolate({}, 8)


@pytest.mark.serial
@pytest.mark.parametrize("p, rounds", [(2, 1), (3, 2), (4, 2), (5, 3), (8, 3)])
def test_fence_floor_is_a_line_one_way_per_round(p, rounds):
    m = F.Model(made_up(), ranks=p)
    assert m.L() == pytest.approx(0.15 * US)
    assert m.time("fence") == pytest.approx(rounds * 0.15 * US)
    assert m.time("peer_fence") == pytest.approx(0.15 * US)


@pytest.mark.serial
def test_two_rank_model_at_measured_sizes():
    m = F.Model(made_up())
    n = 1 << 20
    h = n // 2  # interpolated: check against the interpolation itself
    X2h, X1h = F._interpolate(m.floor.across_both, h), F._interpolate(m.floor.across_one, h)
    # allreduce: both algorithms move N bytes across; with a kernel faster
    # than the copies, one exchange of the whole input wins (one latency)
    assert m.time("allreduce", n) == pytest.approx(min(max(x2(n), r(n)), max(X2h, r(h)) + X2h))
    assert m.time("allreduce", n) == pytest.approx(max(x2(n), r(n)))
    assert m.time("allreduce", 8) == pytest.approx(m.L())  # below L, the wait for word of the data counts
    assert m.time("reduce", n) == pytest.approx(min(max(x1(n), r(n)), max(X2h, r(h)) + X1h))
    assert m.time("bcast", n) == pytest.approx(min(x1(n), X2h))
    assert m.time("allgather", n) == pytest.approx(x2(n) + c(n))
    # in place changes nothing with a peer: the data must still cross
    assert m.time("allreduce", n, in_place=True) == m.time("allreduce", n)


@pytest.mark.serial
@pytest.mark.parametrize("p", [2, 3, 4, 8])
def test_no_call_ends_before_word_of_its_data_crossed(p):
    # made-up copies of 8 B take 0.1 us, a line one way 0.15: an 8-byte
    # allreduce contains a fence and cannot be cheaper than one
    m = F.Model(made_up(), ranks=p)
    assert x2(8) < m.L()
    for op in ("allreduce", "allgather", "alltoall"):
        assert m.time(op, 8) == pytest.approx(m.time("fence")), op
    for op in ("bcast", "reduce", "gather", "scatter"):
        assert m.time(op, 8) == pytest.approx(max(m.L(), m._data_time(op, 8, False))), op
        assert m.time(op, 8) >= m.L(), op
    # large calls are left to their data terms
    n = 1 << 20
    assert m.time("allgather", n) == pytest.approx(m._data_time("allgather", n, False))


@pytest.mark.serial
def test_reduction_term_wins_when_the_kernel_is_slow():
    fl = made_up()
    fl.reduce["float64"] = _stat(fl.reduce_bytes / 1e9)  # 1 GB/s: slower than any copy
    m = F.Model(fl)
    n = 1 << 20
    X2h = F._interpolate(fl.across_both, n // 2)
    assert m.R(n) == pytest.approx(n / 1e9)
    # reduce-scatter + allgather halves the kernel's share, and wins
    assert m.time("allreduce", n) == pytest.approx(n / 2 / 1e9 + X2h)
    # another element type uses its own kernel's figure
    assert F.Model(fl, dtype="int8").R(n) == pytest.approx(r(n) / 2)


@pytest.mark.serial
@pytest.mark.parametrize("p", [3, 4])
def test_p_rank_model(p):
    m = F.Model(made_up(), ranks=p)
    n, q = 4096, p - 1
    X1, X2 = (lambda k: F._interpolate(m.floor.across_one, k)), (lambda k: F._interpolate(m.floor.across_both, k))
    share = q * n / p
    assert m.time("allreduce", n) == pytest.approx(
        min(max(X2(q * n), q * r(n)), max(X2(share), q * r(n / p)) + X2(share)))
    assert m.time("reduce", n) == pytest.approx(
        min(max(X1(q * n), q * r(n)), max(X2(share), q * r(n / p)) + X1(share)))
    assert m.time("bcast", n) == pytest.approx(min(X1(n), X2(share)))
    assert m.time("allgather", n) == pytest.approx(X2(q * n) + c(n))
    # gather, scatter, alltoall: n is one rank's block
    assert m.time("gather", n) == pytest.approx(max(X1(n), c(n)))
    assert m.time("gather", n, in_place=True) == pytest.approx(X1(n))
    assert m.time("scatter", n) == pytest.approx(X1(n))
    assert m.time("alltoall", n) == pytest.approx(X2(q * n) + c(n))
    # more ranks never make the floor smaller for allgather (more to read)
    assert m.time("allgather", n) > F.Model(made_up(), ranks=2).time("allgather", n)


@pytest.mark.serial
def test_one_rank_model_is_local():
    fl = F.Floor(ranks=1, ncpus=1, oversubscribed=False)
    fl.local = {n: _stat(c(n)) for n in SIZES}
    fl.reduce = {"float64": _stat(1e-6)}
    m = F.Model(fl)
    assert m.time("fence") == 0 and m.time("peer_fence") == 0
    for op in ("allreduce", "reduce", "allgather", "gather", "scatter", "alltoall"):
        assert m.time(op, 4096) == pytest.approx(c(4096))  # the result into a separate output
        assert m.time(op, 4096, in_place=True) == 0
    assert m.time("bcast", 4096) == 0
    # a 2-rank model needs what a 1-rank comm cannot measure
    with pytest.raises(ValueError, match="round trip"):
        F.Model(fl, ranks=2).time("fence")


@pytest.mark.serial
def test_model_refuses_unknown_operations():
    with pytest.raises(ValueError, match="unknown operation"):
        F.Model(made_up()).time("alltoallv", 8)
    with pytest.raises(ValueError):
        F.Model(made_up(), ranks=0)


# -- the C probes ----------------------------------------------------------------

def _seconds(fn, *args):
    out = ffi.new("double *")
    check(fn(*args, out))
    return out[0]


@pytest.mark.serial
def test_floor_moved_names_a_round_trip_that_changed():
    """The two placements this project's VMs flip between differ 4-fold: a
    run's figures against a floor taken on the other one are flagged; the
    jitter of one placement is not."""
    before, slow, jitter, alone = made_up(), made_up(), made_up(), made_up(ranks=1)
    before.round_trip, slow.round_trip, jitter.round_trip = _stat(0.09 * US), _stat(0.36 * US), _stat(0.12 * US)
    alone.round_trip = None
    assert F.moved(before, slow) == "the cache line's round trip went from 0.09 us to 0.36 us"
    assert F.moved(slow, before) == "the cache line's round trip went from 0.36 us to 0.09 us"
    assert F.moved(before, jitter) is None and F.moved(before, before) is None
    assert F.moved(alone, alone) is None and F.moved(before, alone) is None


@pytest.mark.serial
def test_local_probes_return_times():
    for dram in (0, 1):
        t = _seconds(lib.shmtopo_floor_copy_local, 4096, dram, 5)
        assert 0 <= t < 1
    for dtype in range(10):
        assert 0 <= _seconds(lib.shmtopo_floor_reduce, dtype, lib.SHMTOPO_OP_SUM, 4096, 5) < 1
    assert 0 <= lib.shmtopo_floor_clock_cost() < 1e-3
    assert lib.shmtopo_floor_cpu() >= 0
    assert lib.shmtopo_floor_region(1) >= 4096 + 1 and lib.shmtopo_floor_region(8 << 20) >= 8 << 20


@pytest.mark.serial
def test_probes_refuse_bad_arguments():
    a, b = np.zeros(8192, np.uint8), np.zeros(8192, np.uint8)
    pa, pb = ffi.cast("void *", a.ctypes.data), ffi.cast("void *", b.ctypes.data)
    bad = [
        (lib.shmtopo_floor_reduce, 99, 0, 4096, 5),                  # unknown dtype
        (lib.shmtopo_floor_reduce, lib.SHMTOPO_FLOAT64, lib.SHMTOPO_OP_BAND, 4096, 5),
        (lib.shmtopo_floor_reduce, lib.SHMTOPO_FLOAT64, 0, 4, 5),     # no whole element
        (lib.shmtopo_floor_copy_local, 0, 0, 5),
        (lib.shmtopo_floor_copy_local, 64, 0, 0),
        (lib.shmtopo_floor_pingpong, pa, pa, 0, 5, 0, 1.0),           # one region twice
        (lib.shmtopo_floor_pingpong, pa, pb, 2, 5, 0, 1.0),           # no such side
        (lib.shmtopo_floor_copy, pa, pb, 7, 64, 5, 0, 1.0),           # no such role
        (lib.shmtopo_floor_copy, pa, pb, lib.SHMTOPO_FLOOR_BOTH, 0, 5, 0, 1.0),
    ]
    for fn, *args in bad:
        with pytest.raises(ShmtopoValueError):
            _seconds(fn, *args)


def _aligned(nbytes):
    raw = np.zeros(nbytes + 256, np.uint8)
    off = (-raw.ctypes.data) % 128
    return raw, ffi.cast("void *", raw.ctypes.data + off)


@pytest.mark.serial
def test_probe_gives_up_on_a_silent_peer():
    """A peer that never answers: ETIMEDOUT after the timeout, not a hang."""
    keep = [_aligned(8192), _aligned(8192)]
    (_, mine), (_, peer) = keep
    with pytest.raises(ShmtopoTimeoutError, match="did not answer"):
        _seconds(lib.shmtopo_floor_pingpong, mine, peer, 0, 10, 0, 0.1)
    with pytest.raises(ShmtopoTimeoutError):
        _seconds(lib.shmtopo_floor_copy, mine, peer, lib.SHMTOPO_FLOOR_READER, 64, 3, 0, 0.1)


@pytest.mark.serial
def test_probe_notices_a_dead_peer():
    proc = subprocess.Popen(["true"])
    proc.wait()
    keep = [_aligned(8192), _aligned(8192)]
    (_, mine), (_, peer) = keep
    with pytest.raises(PeerDeadError, match=str(proc.pid)):
        _seconds(lib.shmtopo_floor_pingpong, mine, peer, 1, 10, proc.pid, 30.0)


def _cma_pair(nbytes, reader_peer_pid):
    """The single-copy probe in one process: a writer thread and a reader
    thread over two regions, the reader copying by process_vm_readv out of
    the process `reader_peer_pid`. Returns (reader's result, writer's)."""
    keep = [_aligned(lib.shmtopo_floor_region(nbytes)) for _ in range(2)]
    (_, a), (_, b) = keep
    me = os.getpid()
    results = {}

    def run(name, *args):
        try:
            results[name] = _seconds(lib.shmtopo_floor_copy, *args)
        except Exception as exc:  # noqa: BLE001 - handed to the test
            results[name] = exc

    threads = [threading.Thread(target=run, args=("writer", a, b, lib.SHMTOPO_FLOOR_WRITER, nbytes, 20, me, 10.0)),
               threading.Thread(target=run, args=("reader", b, a, lib.SHMTOPO_FLOOR_READER_CMA, nbytes, 20,
                                                  reader_peer_pid, 10.0))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads), "the probe hung"
    return results["reader"], results["writer"]


@pytest.mark.serial
def test_single_copy_probe_reads_the_writers_memory():
    reader, writer = _cma_pair(65536, os.getpid())
    assert 0 < reader < 1 and 0 < writer < 1


@pytest.mark.serial
def test_single_copy_probe_that_cannot_read_fails_after_its_rounds():
    """The reader's process_vm_readv fails (the address is not mapped in
    that process): its error is raised once the rounds end, which the
    writer still completes, so neither side hangs."""
    other = subprocess.Popen(["sleep", "30"])
    try:
        reader, writer = _cma_pair(4096, other.pid)
    finally:
        other.kill()
        other.wait()
    assert isinstance(reader, ShmtopoError) and "process_vm_readv" in str(reader), reader
    assert 0 <= writer < 1


# -- measure() on the job's ranks ---------------------------------------------------

def test_measure_on_the_job(comm):
    sizes = [8, 4096]
    fl = F.measure(comm, seconds=0.001, sizes=sizes)
    everyone = WORLD.allgather(repr(fl))
    assert len(set(everyone)) == 1, "every rank gets the same Floor"
    assert fl.ranks == comm.size
    assert sorted(fl.local) == sizes and sorted(fl.reduce) == sorted(F.DTYPES)
    for stats in (fl.local, fl.reduce, fl.across_one, fl.across_both, fl.dram, fl.rewrite, fl.across_cma):
        for s in stats.values():
            assert 0 <= s.lo <= s.median <= s.hi < 1
    if comm.size == 1:
        assert fl.round_trip is None and not (fl.across_one or fl.across_both or fl.rewrite or fl.across_cma)
        assert len(fl.placement) == 1
    else:
        assert 0 < fl.round_trip.median < 1
        assert sorted(fl.across_one) == sizes and sorted(fl.across_both) == sizes
        # the writer's refills are timed: 4 KiB takes more than no time at all
        assert sorted(fl.rewrite) == sizes and fl.rewrite[4096].median > 0
        # single copy's own rate, where the comm has it
        assert sorted(fl.across_cma) == (sizes if comm.single_copy == "cma" else [])
        assert [p.split()[:2] for p in fl.placement] == [["rank", "0"], ["rank", "1"]]
        m = F.Model(fl)
        for op in ("allreduce", "bcast", "reduce", "allgather"):
            assert m.time(op, 4096) > 0
    # measured again on the same comm (a new window for the probes)
    again = F.measure(comm, seconds=0.001, sizes=[64], copies=False)
    assert not again.local and (again.round_trip is None) == (comm.size == 1)
