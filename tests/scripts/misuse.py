"""Misuse matrix of issue 10 ("one agreement"), run under mpiexec by
tests/test_agreement.py.

Two modes:

  misuse.py cases NODE_SIZE CASE@CULPRIT ...
      Runs each case in turn on a fresh ``Comm.from_mpi(COMM_WORLD,
      node_size=NODE_SIZE)`` (``-`` for one node). In each case one rank, the
      culprit (a world rank; ``*`` when every rank misbehaves), passes a bad
      or disagreeing argument.

  misuse.py env CASE
      Per-rank environments (mpiexec's MPMD form sets them): create a comm,
      allocate a window, run collectives; reports the first exception and the
      step it came from.

Every rank writes one line ``MISUSE {json}`` with ``"ev": "start"`` before a
case and ``"ev": "end"`` after it, at once (unbuffered), to stdout or, with
MISUSE_OUT=DIR, to DIR/rank<N>.jsonl. A watchdog thread prints
``"ev": "hang"`` for a rank that is still inside a case after MISUSE_DEADLINE
seconds, then ends the process (and so the job): the test then knows which
case hung, and on which ranks, and starts a new job for the remaining cases.
The library is never patched here: what the lines show is what today's code
does.
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time

T_START = time.monotonic()

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

import shmtopo  # noqa: E402

WORLD = MPI.COMM_WORLD
ME = WORLD.Get_rank()
WS = WORLD.Get_size()
DEADLINE = float(os.environ.get("MISUSE_DEADLINE", "4"))
# SHMTOPO_RUN_AHEAD=1: a rank that ran past a failed small bcast or reduce
# raises it at its next call, the usable check: that is its outcome then
RUNS_AHEAD = os.environ.get("SHMTOPO_RUN_AHEAD") == "1"

_print_lock = threading.Lock()
# MISUSE_OUT: a directory; each rank appends its lines to rank<N>.jsonl there
# (mpiexec may split and mix long lines of several ranks on stdout).
_OUT = os.open(os.path.join(os.environ["MISUSE_OUT"], f"rank{ME}.jsonl"),
               os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644) if os.environ.get("MISUSE_OUT") else 1


def emit(**fields) -> None:
    fields.setdefault("rank", ME)
    line = "MISUSE " + json.dumps(fields, default=repr) + "\n"
    with _print_lock:
        os.write(_OUT, line.encode())


# ---- watchdog ----------------------------------------------------------------

class Watchdog(threading.Thread):
    """Ends the process when one phase lasts too long; reports a case that hung."""

    def __init__(self):
        super().__init__(daemon=True)
        self.phase = None  # (case id or None, started, seconds allowed, report as hang)
        self.lock = threading.Lock()

    def set(self, case, seconds, report):
        with self.lock:
            self.phase = (case, time.monotonic(), seconds, report)

    def run(self):
        while True:
            time.sleep(0.05)
            with self.lock:
                phase = self.phase
            if phase is None:
                continue
            case, started, seconds, report = phase
            waited = time.monotonic() - started
            if waited > seconds:
                if report:
                    emit(ev="hang", case=case, phase=report, elapsed=round(waited, 3))
                # let the peers' watchdogs report too before the job goes down
                time.sleep(0.3)
                os._exit(17)


WATCHDOG = Watchdog()


def settle(request) -> None:
    """Complete the driver's own MPI request by polling between short
    sleeps. A blocking MPI call spins (MPICH's does), and with more ranks
    than cores the spinning ranks take the CPU from those with work to do."""
    while not request.Test():
        time.sleep(0.0005)


def world_barrier() -> None:
    settle(WORLD.Ibarrier())


def world_sum(values: np.ndarray, op=MPI.SUM) -> np.ndarray:
    out = np.empty_like(values)
    settle(WORLD.Iallreduce(values, out, op=op))
    return out


# ---- outcome of one call ---------------------------------------------------------

def describe(value):
    """A short, comparable summary of what a call returned."""
    if value is None:
        return None
    if isinstance(value, np.ndarray):
        flat = value.ravel()
        out = {"shape": list(value.shape), "dtype": str(value.dtype),
               "head": flat[:6].tolist(), "sum": float(flat.sum()) if flat.size and
               value.dtype.kind in "iuf" else None}
        if flat.size and value.dtype.kind == "f" and flat[0] % 1000 == 0 and 1 <= flat[0] // 1000 <= WS:
            out["data_of_rank"] = int(flat[0] // 1000) - 1  # data(n) of that rank, as a bcast leaves it
        return out
    if isinstance(value, shmtopo.Window):
        return {"window": value.nbytes}
    return repr(value)[:200]


def class_name(exc: BaseException) -> str:
    """shmtopo's and builtin exceptions by name, others with their module
    (mpi4py's is mpi4py.MPI.Exception)."""
    cls = type(exc)
    if cls.__module__ in ("builtins", "shmtopo.errors"):
        return cls.__name__
    return f"{cls.__module__}.{cls.__qualname__}"


def exception_fields(exc: BaseException) -> dict:
    return {"cls": class_name(exc),
            "shmtopo": isinstance(exc, shmtopo.ShmtopoError),
            "value_error": isinstance(exc, ValueError),
            "msg": str(exc)[:1500],
            "exc_rank": getattr(exc, "rank", None)}


class Ctx:
    """What a case needs to know: who the culprit is, and the comms it made."""

    def __init__(self, culprit):
        self.culprit = culprit
        self.me = ME
        self.ws = WS
        self.bad = culprit == "*" or culprit == ME
        self.extra = []        # further comms a case created (abandoned after it)
        self.reference = None  # what mpi4py computes from the same inputs, if anything


# ---- the cases ---------------------------------------------------------------------
# Each takes (comm, cx) and returns what the shmtopo call returned. Inputs depend
# on the world rank, so a result tells whose data it holds.

def data(n, dtype=np.float64):
    return np.arange(n, dtype=dtype) + (ME + 1) * 1000


def reference_allreduce(a, op=MPI.SUM):
    return world_sum(a, op)


CASES = {}


def case(name, kind="culprit", expect="value_error", usable=True, mentions=()):
    def register(fn):
        CASES[name] = dict(fn=fn, kind=kind, expect=expect, usable=usable, mentions=mentions)
        return fn
    return register


# 1. an unknown operation on one rank
@case("allreduce_op_bogus")
def _(comm, cx):
    return comm.allreduce(data(4), op="bogus" if cx.bad else "sum")


@case("reduce_op_bogus")
def _(comm, cx):
    return comm.reduce(data(4), op="bogus" if cx.bad else "sum", root=0)


def _call(comm, kind, a):
    """The collective `kind` on array a, with its default arguments."""
    if kind == "allreduce":
        return comm.allreduce(a)
    if kind == "reduce":
        return comm.reduce(a, root=0)
    if kind == "bcast":
        return comm.bcast(a, root=0)
    return comm.allgather(a)


# 2. different counts on one rank (5, or 100000 to cross the chunk size);
# 3. a different dtype
def _count_and_dtype_cases():
    for kind in ("allreduce", "reduce", "bcast", "allgather"):
        for big in (5, 100000):
            case(f"{kind}_count_{big}")(lambda comm, cx, kind=kind, big=big: _call(comm, kind, data(big if cx.bad else 4)))
        case(f"{kind}_dtype_f32")(
            lambda comm, cx, kind=kind: _call(comm, kind, data(4, np.float32 if cx.bad else np.float64)))


_count_and_dtype_cases()


# 3. a different operation


@case("allreduce_op_max")
def _(comm, cx):
    return comm.allreduce(data(4), op="max" if cx.bad else "sum")


@case("reduce_op_max")
def _(comm, cx):
    return comm.reduce(data(4), op="max" if cx.bad else "sum", root=0)


# 4. roots: out of range on every rank, out of range on one, another valid one
@case("bcast_root_m1_all", kind="all")
def _(comm, cx):
    return comm.bcast(data(4), root=-1)


@case("reduce_root_m1_all", kind="all")
def _(comm, cx):
    return comm.reduce(data(4), root=-1)


@case("bcast_root_ws3_all", kind="all")
def _(comm, cx):
    return comm.bcast(data(4), root=cx.ws + 3)


@case("reduce_root_ws3_all", kind="all")
def _(comm, cx):
    return comm.reduce(data(4), root=cx.ws + 3)


@case("bcast_root_m1")
def _(comm, cx):
    return comm.bcast(data(4), root=-1 if cx.bad else 0)


@case("reduce_root_m1")
def _(comm, cx):
    return comm.reduce(data(4), root=-1 if cx.bad else 0)


@case("bcast_root_other")
def _(comm, cx):
    return comm.bcast(data(4), root=1 if cx.bad else 0)


@case("reduce_root_other")
def _(comm, cx):
    return comm.reduce(data(4), root=1 if cx.bad else 0)


# 5. roots that do not fit a C int
@case("bcast_root_2p32_all", kind="all")
def _(comm, cx):
    return comm.bcast(data(4), root=2**32)


@case("bcast_root_2p64")
def _(comm, cx):
    return comm.bcast(data(4), root=2**64 if cx.bad else 0)


@case("reduce_root_2p32_all", kind="all")
def _(comm, cx):
    return comm.reduce(data(4), root=2**32)


# ... in place (out= the array: the small-collective entry point takes the root)
@case("bcast_inplace_root_2p32_all", kind="all")
def _(comm, cx):
    a = data(4)
    return comm.bcast(a, root=2**32, out=a)


@case("bcast_inplace_root_2p64")
def _(comm, cx):
    a = data(4)
    return comm.bcast(a, root=2**64 if cx.bad else 0, out=a)


# 6. a forced algorithm on one rank, the other one elsewhere (an error, or the right sum)
def _alg_cases():
    def mk(nbytes):
        def fn(comm, cx):
            a = data(nbytes // 8)
            cx.reference = reference_allreduce(a)
            return comm.allreduce(a, algorithm="flat" if cx.bad else "rsag")
        return fn
    case("allreduce_alg_8k", expect="value_error_or_correct")(mk(8 << 10))
    case("allreduce_alg_1m", expect="value_error_or_correct")(mk(1 << 20))


_alg_cases()


# 7. allocation arguments that are bad on one rank
@case("allocate_dtype_object")
def _(comm, cx):
    return comm.allocate(8, dtype=object) if cx.bad else comm.allocate(8)


@case("allocate_dtype_S0")
def _(comm, cx):
    return comm.allocate(shape=(4,), dtype="S0" if cx.bad else np.float64)


@case("allocate_negative")
def _(comm, cx):
    return comm.allocate(-1 if cx.bad else 8)


@case("allocate_backend_bogus")
def _(comm, cx):
    return comm.allocate(4096, backend="bogus" if cx.bad else None)


@case("allocate_placement_differs")
def _(comm, cx):
    return comm.allocate(4096, placement="interleave" if cx.bad else "local")


@case("allocate_placement_bogus")
def _(comm, cx):
    return comm.allocate(4096, placement="numa" if cx.bad else None)


@case("allocate_huge_pages_differs")
def _(comm, cx):
    return comm.allocate(4096, backend="memfd", huge_pages=True if cx.bad else False)


@case("allocate_huge_pages_bogus")
def _(comm, cx):
    return comm.allocate(4096, huge_pages="yes" if cx.bad else False)


# 8. a result that partly overlaps the input (on one rank)
@case("allreduce_partial_overlap")
def _(comm, cx):
    if cx.bad:
        y = np.arange(10.0)
        send, out = y[1:], y[:-1]
    else:
        send, out = np.arange(1.0, 10.0), np.empty(9)
    cx.reference = reference_allreduce(np.arange(1.0, 10.0))
    return comm.allreduce(send, out=out)


# 9. different operations
@case("mismatch_allreduce_bcast", mentions=("allreduce", "bcast"))
def _(comm, cx):
    a = data(4)
    return comm.allreduce(a) if cx.bad else comm.bcast(a, root=0)


# 13. the rooted and varying-count collectives (issue 11): a count, a counts
# array, a dtype, an op or a root of one rank that differs or is bad. Counts
# are 3 or 4 per rank; the root of a rooted call is the last rank, so that
# rank 0 is a sender too.
def _counts():
    return [3 + r % 2 for r in range(WS)]


def _vcall(comm, kind, a, counts, root, out=False):
    """out: the receiving ranks pass an out (the calls then take the fast
    entries where their arguments let them)."""
    me = ME
    full = np.empty(sum(counts), a.dtype) if out else None
    if kind == "gatherv":
        return comm.gatherv(a, counts if me == root else None, root=root, out=full if me == root else None)
    if kind == "scatterv":
        return comm.scatterv(np.ones(sum(counts)) if me == root else None, counts if me == root else None,
                             root=root, out=a)
    return comm.allgatherv(a, counts, out=full)


def _rooted(comm, kind, n=4, dtype=np.float64, root=None):
    """gather of n elements, or scatter of blocks of n, rooted at the last rank."""
    root = WS - 1 if root is None else root
    if kind == "gather":
        return comm.gather(data(n, dtype), root=root)
    return comm.scatter(np.ones((WS, n), dtype) if ME == root else None, root=root, out=np.empty(n, dtype))


def _vcoll_cases():
    for kind in ("gather", "scatter"):
        for big in (5, 100000):
            case(f"{kind}_count_{big}")(lambda comm, cx, kind=kind, big=big: _rooted(comm, kind, big if cx.bad else 4))
        case(f"{kind}_dtype_f32")(lambda comm, cx, kind=kind: _rooted(
            comm, kind, dtype=np.float32 if cx.bad else np.float64))
        case(f"{kind}_root_other")(lambda comm, cx, kind=kind: _rooted(comm, kind, root=0 if cx.bad else WS - 1))
        case(f"{kind}_root_ws3_all", kind="all")(lambda comm, cx, kind=kind: _rooted(comm, kind, root=WS + 3))
    for kind in ("gatherv", "scatterv", "allgatherv"):
        # one more element than the counts (the root's, or everybody's) give it
        case(f"{kind}_count")(lambda comm, cx, kind=kind: _vcall(
            comm, kind, np.ones(_counts()[ME] + (1 if cx.bad else 0)), _counts(), WS - 1))
        case(f"{kind}_dtype_f32")(lambda comm, cx, kind=kind: _vcall(
            comm, kind, np.ones(_counts()[ME], np.float32 if cx.bad else np.float64), _counts(), WS - 1))
    for kind in ("gatherv", "allgatherv"):
        case(f"{kind}_out_count")(lambda comm, cx, kind=kind: _vcall(
            comm, kind, np.ones(_counts()[ME] + (1 if cx.bad else 0)), _counts(), WS - 1, out=True))
        case(f"{kind}_out_dtype_f32")(lambda comm, cx, kind=kind: _vcall(
            comm, kind, np.ones(_counts()[ME], np.float32 if cx.bad else np.float64), _counts(), WS - 1, out=True))

    # the root's counts disagree with what the culprit sends (the root's table is wrong about it)
    def root_table(comm, cx, kind):
        counts = _counts()
        counts[cx.culprit] += 1
        return _vcall(comm, kind, np.ones(_counts()[ME]), counts, WS - 1)
    for kind in ("gatherv", "scatterv"):
        case(f"{kind}_root_counts_wrong")(lambda comm, cx, kind=kind: root_table(comm, cx, kind))
        case(f"{kind}_root_m1_all", kind="all")(lambda comm, cx, kind=kind: _vcall(
            comm, kind, np.ones(_counts()[ME]), _counts(), -1))
        case(f"{kind}_root_other")(lambda comm, cx, kind=kind: _vcall(
            comm, kind, np.ones(_counts()[ME]), _counts(), 0 if cx.bad else WS - 1))

    @case("allgatherv_counts_array")
    def _(comm, cx):
        counts = _counts()
        if cx.bad:
            counts[ME] += 1  # consistent on the culprit itself, not with the others' counts
        return comm.allgatherv(np.ones(counts[ME]), counts)

    @case("alltoallv_sendcounts")
    def _(comm, cx):
        sc = [3 if cx.bad else 2] * WS
        return comm.alltoallv(np.ones(sum(sc)), sc, None, [2] * WS, None)

    @case("alltoallv_out_sendcounts")
    def _(comm, cx):
        sc = [3 if cx.bad else 2] * WS
        return comm.alltoallv(np.ones(sum(sc)), sc, None, [2] * WS, None, out=np.empty(2 * WS))

    @case("alltoallv_counts_negative")
    def _(comm, cx):
        return comm.alltoallv(np.ones(2 * WS), [-1 if cx.bad else 2] * WS, None, [2] * WS, None)

    @case("reduce_scatter_counts")
    def _(comm, cx):
        counts = [2] * WS
        if cx.bad:
            counts[-1] = 3
        return comm.reduce_scatter(np.ones(sum(counts)), counts=counts)

    @case("reduce_scatter_counts_out")
    def _(comm, cx):
        counts = [2] * WS
        if cx.bad:
            counts[-1] = 3
        return comm.reduce_scatter(np.ones(sum(counts)), counts=counts, out=np.empty(counts[ME]))

    @case("reduce_scatter_counts_size")
    def _(comm, cx):
        return comm.reduce_scatter(np.ones(2 * WS + (1 if cx.bad else 0)), counts=[2] * WS)

    for kind in ("scan", "exscan"):
        case(f"{kind}_op_max")(lambda comm, cx, kind=kind: getattr(comm, kind)(data(4), "max" if cx.bad else "sum"))
        case(f"{kind}_count_100000")(lambda comm, cx, kind=kind: getattr(comm, kind)(data(100000 if cx.bad else 4)))
        case(f"{kind}_op_bogus")(lambda comm, cx, kind=kind: getattr(comm, kind)(data(4), "bogus" if cx.bad else "sum"))

    # out given: the others take the fast entries (C), the culprit too where its arguments let it
    @case("scan_out_op_bogus")
    def _(comm, cx):
        return comm.scan(data(4), "bogus" if cx.bad else "sum", out=np.empty(4))

    @case("exscan_out_count")
    def _(comm, cx):
        n = 5 if cx.bad else 4
        return comm.exscan(data(n), out=np.empty(n))

    @case("reduce_scatter_out_op_max")
    def _(comm, cx):
        return comm.reduce_scatter(np.ones(2 * WS), "max" if cx.bad else "sum", out=np.empty(2))

    @case("reduce_scatter_out_short")
    def _(comm, cx):
        return comm.reduce_scatter(np.ones(2 * WS), out=np.empty(1 if cx.bad else 2))


_vcoll_cases()


# 12. orders that can never match: every rank fails by timeout or abort, none hangs
@case("crossed_barriers", expect="abort", usable=False)
def _(comm, cx):
    c1 = shmtopo.Comm.from_mpi(WORLD, node_size=NODE_SIZE)
    cx.extra.append(c1)
    c2 = shmtopo.Comm.from_mpi(WORLD, node_size=NODE_SIZE)
    cx.extra.append(c2)
    first, second = (c1, c2) if cx.bad else (c2, c1)
    first.barrier()
    second.barrier()


@case("topology_vs_barrier", expect="abort", usable=False)
def _(comm, cx):
    if cx.bad:
        topo = shmtopo.share_topology(comm)
        topo.close()
        return "shared"
    comm.barrier()


# ---- running the cases -----------------------------------------------------------------

NODE_SIZE = None


def shm_leftovers(pids) -> list:
    """Our job's names in /dev/shm (posix windows, topology files)."""
    pids = {str(p) for p in pids}
    out = []
    for name in os.listdir("/dev/shm"):
        if name.startswith("shmtopo."):
            parts = name.split(".")
            if len(parts) > 1 and parts[1] in pids:
                out.append(name)
        elif name.startswith("shmtopo-topo-"):
            parts = name.rsplit("-", 2)
            if len(parts) == 3 and parts[1] in pids:
                out.append(name)
    return sorted(out)


def run_case(case_id: str, pids) -> None:
    name, culprit = case_id.split("@")
    culprit = "*" if culprit == "*" else int(culprit)
    spec = CASES[name]
    WATCHDOG.set(case_id, DEADLINE + 5, "setup")  # the comm itself must come up
    world_barrier()
    comm = shmtopo.Comm.from_mpi(WORLD, node_size=NODE_SIZE)
    world_barrier()
    emit(ev="start", case=case_id)
    cx = Ctx(culprit)
    WATCHDOG.set(case_id, DEADLINE, "case")
    rec = {"ev": "end", "case": case_id}
    t0 = time.monotonic()
    try:
        value = spec["fn"](comm, cx)
        rec.update(outcome="returned", value=describe(value))
        if cx.reference is not None and isinstance(value, np.ndarray):
            rec["correct"] = bool(value.shape == cx.reference.shape and np.array_equal(value, cx.reference))
    except BaseException as exc:  # noqa: BLE001 - KeyboardInterrupt would be a finding too
        rec.update(outcome="raised", **exception_fields(exc))
    rec["elapsed"] = round(time.monotonic() - t0, 3)
    if spec["usable"]:
        try:
            got = comm.allreduce(np.ones(3))
            rec["usable"] = bool(np.array_equal(got, np.full(3, float(WS))))
            if not rec["usable"]:
                rec["usable_detail"] = got.tolist()
        except BaseException as exc:  # noqa: BLE001
            rec["usable"] = False
            rec["usable_detail"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            if RUNS_AHEAD and rec["outcome"] == "returned":
                rec.update(outcome="raised", later=True, **exception_fields(exc))
        rec["elapsed_with_check"] = round(time.monotonic() - t0, 3)
    emit(**rec)
    # Clean up: free collectively when every rank is fine, else abandon
    # locally (a collective free could wait on a rank whose comm is broken).
    WATCHDOG.set(case_id, DEADLINE + 2, False)
    fine = rec["outcome"] == "returned" and rec.get("usable", True) and not cx.extra
    everyone = int(world_sum(np.array([1 if fine else 0]))[0]) == WS
    for c in [comm] + cx.extra:
        if everyone:
            c.free()
        else:
            c.abandon()  # also frees its MPI communicators
    world_barrier()
    if ME == 0:
        left = shm_leftovers(pids)
        if left:
            emit(ev="leftover", case=case_id, names=left)
            for n in left:  # do not blame the next case for these
                try:
                    os.unlink(os.path.join("/dev/shm", n))
                except OSError:
                    pass
    WATCHDOG.set(None, DEADLINE + 5, False)


# ---- env mode: one environment per rank, set by mpiexec -------------------------------

ENV_VARS = ("SHMTOPO_COLL_ALGORITHM", "SHMTOPO_COLL_BUFFER", "SHMTOPO_SHM_TYPE", "SHMTOPO_NODE_SIZE",
            "SHMTOPO_TIMEOUT", "SHMTOPO_SPIN_NS", "SHMTOPO_YIELD_NS", "SHMTOPO_RUN_AHEAD")


def run_env(case_id: str) -> None:
    """Steps: create the comm, allocate and fence a window, a small and a
    large allreduce (the large one takes rsag unless forced), a bcast of
    256 KiB; the first exception ends it."""
    env = {v: os.environ.get(v) for v in ENV_VARS}
    WATCHDOG.set(case_id, DEADLINE, "case")
    emit(ev="start", case=case_id, env=env)
    rec = {"ev": "end", "case": case_id, "env": env}
    t0 = time.monotonic()
    step = "from_mpi"
    comm = win = None
    try:
        comm = shmtopo.Comm.from_mpi(WORLD)
        step = "allocate"
        win = comm.allocate(4096)
        step = "fence"
        win.fence()
        step = "allreduce_small"
        ok = np.array_equal(comm.allreduce(np.ones(3)), np.full(3, float(WS)))
        step = "allreduce_large"
        big = data(1 << 17)
        ok &= np.array_equal(comm.allreduce(big), reference_allreduce(big))
        step = "bcast_large"
        b = data(1 << 15)
        ok &= np.array_equal(comm.bcast(b, root=WS - 1), np.arange(1 << 15, dtype=np.float64) + WS * 1000)
        step = "free"
        win.free()
        comm.free()
        rec.update(outcome="returned", correct=bool(ok))
    except BaseException as exc:  # noqa: BLE001
        rec.update(outcome="raised", step=step, **exception_fields(exc))
        if comm is not None:
            comm.abandon()
    rec["elapsed"] = round(time.monotonic() - t0, 3)
    emit(**rec)
    WATCHDOG.set(None, 5, False)


def main(argv) -> None:
    global NODE_SIZE
    WATCHDOG.start()
    mode = argv[1]
    emit(ev="hello", pid=os.getpid(), mode=mode, startup=round(time.monotonic() - T_START, 3))
    if mode == "list":
        if ME == 0:
            for name, spec in CASES.items():
                print(name, spec["kind"], spec["expect"])
        return
    if mode == "env":
        run_env(argv[2])
    else:
        NODE_SIZE = None if argv[2] == "-" else int(argv[2])
        pids = np.empty(WS, dtype=np.int64)
        settle(WORLD.Iallgather(np.array([os.getpid()], dtype=np.int64), pids))
        pids = pids.tolist()
        for case_id in argv[3:]:
            run_case(case_id, pids)
    WATCHDOG.set(None, 10, False)  # MPI_Finalize must not hang either
    emit(ev="done")


if __name__ == "__main__":
    main(sys.argv)
