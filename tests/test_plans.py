"""The drop-in decides each call once, in two languages: CommFast's C methods
(native/cpython/buffers.h, plans.h) take the plain calls, the Python planner
(shmtopo.accel.buffers, plans) reads every call in full. They must decide
alike: a call C runs in shared memory must be one the planner would run
there too, with the same message, root and op, so the result must be the
same bits; a call the planner refuses C must refuse too.

The property, fed random calls (hypothesis, on one rank): the same call made
through the accelerated class (C first, the planner where C declines) and
through AcceleratedComm's Python method alone (the planner) ends alike: both
in shared memory or both handed to MPI, the same exception or the same
result bytes. A one-line change to either reader (a count, a displacement,
a root rule) makes it fail.
"""
import array
import mmap
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mpi4py import MPI

import shmtopo
from shmtopo.accel import datatypes
from shmtopo.accel.comm import AcceleratedComm
from shmtopo.accel.tables import LeftToMPI, get_tables

WORLD = MPI.COMM_WORLD
pytestmark = pytest.mark.serial  # one rank: each draw is one rank's arguments

DTYPES = {"i": MPI.INT, "d": MPI.DOUBLE, "b": MPI.SIGNED_CHAR, "q": MPI.LONG_LONG, "f": MPI.FLOAT,
          "D": MPI.C_DOUBLE_COMPLEX, "g": MPI.LONG_DOUBLE, "?": MPI.C_BOOL,
          "x": MPI.DOUBLE.Create_contiguous(1).Commit()}  # derived: MPI's alone, agreed
OPS = [MPI.SUM, MPI.MAX, MPI.PROD, MPI.BAND, MPI.LAND, MPI.MAXLOC, MPI.REPLACE]
ROOTS = [0, 1, -1, True, False, np.int64(0), np.int32(0), 0.0, None, "0"]
# the calls of the drop-in that CommFast takes in C
KINDS = ["ndarray", "bytearray", "memoryview", "array", "mmap", "strided", "readonly", "misaligned", "fortran2d"]
CALLS = ["Bcast", "Reduce", "Allreduce", "Allgather", "Alltoall", "Gather", "Scatter", "Scan", "Exscan",
         "Reduce_scatter_block"]


@pytest.fixture(scope="module")
def acomm():
    if WORLD.Get_size() > 1:
        pytest.skip("one rank's draws")
    a = shmtopo.accelerate(WORLD, timeout=60)
    yield a
    a.shm_free()


@st.composite
def messages(draw, writable):
    """A description of one buffer argument, in one of mpi4py's forms over
    one of the buffer kinds programs pass; built afresh by `build`."""
    code = draw(st.sampled_from(sorted(set(DTYPES) - {"x"})))  # (a derived type is only named)
    n = draw(st.integers(0, 6))
    return {
        "code": code, "n": n,
        "kind": draw(st.sampled_from(KINDS)),
        "form": draw(st.sampled_from(["bare", "type", "count-type", "count-displ-type", "tuple-type",
                                      "count", "typechar", "bad-count", "big-count"])),
        "count": draw(st.integers(0, 7)), "displ": draw(st.integers(0, 3)),
        "other_type": draw(st.sampled_from([None, "i", "d", "g", "x"])),
        "writable": writable,
    }


@st.composite
def pairs(draw):
    """An input and an output of one element type (MPI requires matching type
    signatures, and MPICH aborts the process on some calls whose types
    differ): mostly of one shape and form, the calls programs make, which C
    takes; else with their own sizes, counts and displacements. Where the form
    names no datatype the buffer's kind decides it (bytes for a bytearray,
    mmap or memoryview), so both are of one kind there."""
    send = draw(messages(False))
    kinds = KINDS if send["form"] not in ("bare", "count") else [send["kind"]]
    recv = dict(send, writable=True, kind=draw(st.sampled_from(kinds)))
    if not draw(st.integers(0, 3)):
        recv.update(n=draw(st.integers(0, 6)), count=draw(st.integers(0, 7)), displ=draw(st.integers(0, 3)))
    if "g" in (send["code"], send["other_type"], recv["code"], recv["other_type"]):
        # long double goes to MPI, which reads and writes as far as the counts say: only
        # calls MPI can run without running past a buffer (both arrays of it, alike)
        for m in (send, recv):
            m.update(code="g", other_type=None, kind="ndarray", form=m["form"] if m["form"] in ("bare", "type")
                     else "bare", n=send["n"])
    elif "x" in (send["other_type"], recv["other_type"]):
        # a derived type: MPI reads as far as its counts say, so they stay within the buffers
        n = send["n"]
        for m in (send, recv):
            form = m["form"] if m["form"] in ("type", "count-type", "count-displ-type", "tuple-type",
                                              "bad-count") else "count-type"
            m.update(code="d", other_type="x", form=form, n=n, count=min(m["count"], n),
                     displ=min(m["displ"], n - min(m["count"], n)))
    return send, recv


def build(m):
    """The argument that description stands for, with fresh contents."""
    code, n = m["code"], m["n"]
    dtype = np.dtype(code)
    # each entry its own value, an output's apart from an input's: a shifted read or write shows
    values = ((np.arange(n) % 7 + (20 if m["writable"] else 1))).astype(dtype)
    kind = m["kind"]
    if kind == "ndarray":
        buf = values.copy()
    elif kind == "bytearray":
        buf = bytearray(values.tobytes())
    elif kind == "memoryview":
        buf = memoryview(bytearray(values.tobytes())).cast("B")
    elif kind == "array":  # array.array of the same type where it has one, else of bytes
        typecode = code if code in "idbqf" else "b"
        buf = array.array(typecode, values.tobytes() if typecode == "b" and code not in "b" else values.tolist())
    elif kind == "mmap":
        size = max(values.nbytes, 1)
        buf = mmap.mmap(-1, size)
        buf[:values.nbytes] = values.tobytes()
    elif kind == "strided":
        buf = np.repeat(values, 2)[::2]
    elif kind == "readonly":
        buf = values.copy()
        buf.flags.writeable = False
    elif kind == "misaligned":  # one byte past an aligned start
        raw = np.zeros(values.nbytes + 1, np.uint8)
        buf = np.frombuffer(raw, dtype, count=n, offset=1)
        buf[...] = values
    else:  # fortran2d
        buf = np.asfortranarray(np.resize(values, (2, n)))
    datatype = DTYPES[m["other_type"] or code]
    form = m["form"]
    if form == "bare":
        return buf
    if form == "type":
        return [buf, datatype]
    if form == "count-type":
        return [buf, m["count"], datatype]
    if form == "count-displ-type":
        return [buf, m["count"], m["displ"], datatype]
    if form == "tuple-type":
        return [buf, (m["count"], m["displ"]), datatype]
    if form == "count":
        return [buf, m["count"]]
    if form == "typechar":
        return [buf, m["other_type"] or code]
    if form == "bad-count":
        return [buf, -1, datatype]
    return [buf, 10**6, datatype]


def snapshot(arg):
    """The bytes a buffer argument holds now."""
    buf = arg[0] if isinstance(arg, list) else arg
    if isinstance(buf, np.ndarray):
        return bytes(np.ascontiguousarray(buf).view(np.uint8).ravel()) if buf.size else b""
    return bytes(buf)


def arguments(name, send, recv, root, op):
    """The positional arguments of `name`, each buffer built afresh."""
    if name == "Bcast":
        return (build(send), root)
    if name in ("Reduce",):
        return (build(send), build(recv), op, root)
    if name in ("Allreduce", "Scan", "Exscan", "Reduce_scatter_block"):
        return (build(send), build(recv), op)
    if name in ("Gather", "Scatter"):
        return (build(send), build(recv), root)
    return (build(send), build(recv))


def outcome(method, acomm, args):
    """How the call ended: (exception type, its text) or the path it took and
    every buffer's bytes afterwards."""
    before = {k: tuple(v) for k, v in acomm.shm_stats().items()}
    try:
        method(acomm, *args)
    except Exception as exc:  # noqa: BLE001 - compared below
        # MPICH's messages name the buffers' addresses, which differ between the two calls
        return ("raised", type(exc).__name__, re.sub(r"0x[0-9a-f]+", "0x?", str(exc)))
    after = acomm.shm_stats()
    moved = {k: (v[0] - before.get(k, (0, 0))[0], v[1] - before.get(k, (0, 0))[1]) for k, v in after.items()}
    moved = {k: v for k, v in moved.items() if v != (0, 0)}
    return ("done", moved, [snapshot(a) for a in args if isinstance(a, (list, np.ndarray, bytearray, memoryview,
                                                                        array.array, mmap.mmap))])


@settings(max_examples=600, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(name=st.sampled_from(CALLS), pair=pairs(), root=st.sampled_from(ROOTS), op=st.sampled_from(OPS))
def test_c_and_the_planner_decide_alike(acomm, name, pair, root, op):
    send, recv = pair
    fast = getattr(type(acomm), name)         # CommFast's C method, the planner where it declines
    planner = getattr(AcceleratedComm, name)  # the planner alone
    with np.errstate(all="ignore"):
        via_c = outcome(fast, acomm, arguments(name, send, recv, root, op))
        via_planner = outcome(planner, acomm, arguments(name, send, recv, root, op))
    assert via_c == via_planner, f"{name} root={root!r} op={op}\n send={send}\n recv={recv}"


# ---- Alltoallw: C takes the calls of a layout the planner made ------------------------

STRIDED = MPI.DOUBLE.Create_vector(2, 1, 2).Commit()
W_TYPES = [MPI.DOUBLE, MPI.INT, STRIDED]
W_BUFFERS = ["ndarray", "bytearray", "readonly", "strided", "short", "same"]


@st.composite
def alltoallw_calls(draw):
    """One rank's Alltoallw: a buffer kind for each side, the counts,
    displacements and datatypes in one of mpi4py's sequence forms."""
    return {side: {"kind": draw(st.sampled_from(W_BUFFERS)), "count": draw(st.integers(0, 3)),
                   "displ": draw(st.sampled_from([0, 8, 64, -8])), "type": draw(st.sampled_from(W_TYPES)),
                   "seq": draw(st.sampled_from(["list", "tuple", "array"])),
                   "form": draw(st.sampled_from([3, 4]))} for side in ("send", "recv")}


def alltoallw_message(side, shared):
    kind = side["kind"]
    buf = {"ndarray": lambda: np.arange(16.0), "bytearray": lambda: bytearray(np.arange(16.0).tobytes()),
           "readonly": lambda: np.frombuffer(np.arange(16.0).tobytes()), "strided": lambda: np.arange(32.0)[::2],
           "short": lambda: np.arange(2.0), "same": lambda: shared}[kind]()
    make = {"list": list, "tuple": tuple, "array": lambda v: array.array("l", v)}[side["seq"]]
    counts, displs, types = make([side["count"]]), make([side["displ"]]), [side["type"]]
    return [buf, (counts, displs), types] if side["form"] == 3 else [buf, counts, displs, types]


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(call=alltoallw_calls())
def test_c_and_the_planner_decide_alike_on_alltoallw(acomm, call):
    """Each call made three times through the accelerated class (the
    planner, then C with the layout the planner noted), against the planner
    alone: the same outcome each time."""
    fast, planner = type(acomm).Alltoallw, AcceleratedComm.Alltoallw
    for datatype in W_TYPES:  # past their first use, which goes to MPI whichever path comes first
        for _ in range(2):
            try:
                datatypes.runs_of(get_tables(), datatype)
            except LeftToMPI:
                pass
    for _ in range(3):
        results = []
        for method in (fast, planner):
            shared = np.arange(16.0)
            args = (alltoallw_message(call["send"], shared), alltoallw_message(call["recv"], shared))
            results.append(outcome(method, acomm, args))
        assert results[0] == results[1], call
