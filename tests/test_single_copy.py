"""Single copy (native/single_copy.c): whether ranks can copy straight
between each other's arrays with process_vm_readv/writev is probed and
agreed at comm creation (SHMTOPO_SINGLE_COPY), the same on every rank."""
import ctypes
import os

import numpy as np
import pytest
from mpi4py import MPI

import ranks
import shmtopo

WORLD = MPI.COMM_WORLD


def comm_with(monkeypatch, setting):
    """A comm over the job with SHMTOPO_SINGLE_COPY=setting, or a skip on
    every rank where single copy is required and this machine forbids it
    (creation then fails alike on every rank)."""
    monkeypatch.setenv("SHMTOPO_SINGLE_COPY", setting)
    try:
        return shmtopo.Comm.from_mpi(WORLD)
    except shmtopo.BackendUnavailableError as exc:
        pytest.skip(f"single copy unavailable here: {exc}")


# ---- single copy, the same on every rank ------------------------------------

def test_single_copy_is_the_same_on_every_rank(monkeypatch):
    with comm_with(monkeypatch, "auto") as comm:
        everyone = WORLD.allgather(comm.single_copy)
        assert len(set(everyone)) == 1, everyone


# ---- the setting and the capability are agreed --------------------------------

def _inner_comm(comm, setting):
    """A second comm over the same transport, made with this rank's setting
    (the first one, made by ranks.py, had none)."""
    if setting is None:
        os.environ.pop("SHMTOPO_SINGLE_COPY", None)
    else:
        os.environ["SHMTOPO_SINGLE_COPY"] = setting
    return shmtopo.Comm.from_callbacks(comm.size, comm.rank, allgather=comm._transport.allgather,
                                       barrier=comm._transport.barrier)


def setting_on_one_rank(comm, odd_rank, odd, others):
    try:
        inner = _inner_comm(comm, odd if comm.rank == odd_rank else others)
    except shmtopo.ShmtopoError as exc:
        return type(exc).__name__, str(exc), exc.rank
    inner.free()
    return "created", "", None


@pytest.mark.serial
@pytest.mark.parametrize("odd_rank", [0, 1, 2])
def test_setting_that_differs_fails_every_rank(odd_rank):
    out = ranks.run(3, setting_on_one_rank, odd_rank, "0", None)
    assert len(out) == 3, out
    results = {value for status, value in out.values()}
    assert len(results) == 1, out  # the same error, word for word, on every rank
    name, message, rank = results.pop()
    assert name == "ShmtopoValueError", out
    assert "SHMTOPO_SINGLE_COPY differs between ranks" in message and rank == odd_rank, message


@pytest.mark.serial
@pytest.mark.parametrize("value", ["yes", "2", "", " 1", "AUTO"])
def test_setting_is_parsed_strictly(value):
    out = ranks.run(2, setting_on_one_rank, 1, value, "auto")
    results = {value for status, value in out.values()}
    assert len(results) == 1, out
    name, message, rank = results.pop()
    if value in ("", "AUTO"):  # unset, and auto in any case, are auto
        assert name == "created", out
    else:
        assert name == "ShmtopoValueError" and rank == 1, out
        assert f"SHMTOPO_SINGLE_COPY={value}: expected auto" in message, message


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def cannot_reach_peers():
    """Make this process unable to read its peers' memory, and them unable to
    read its own: drop CAP_SYS_PTRACE (as root, a reader needs every
    capability its target has) and turn off dumpable (other users of the same
    uid then need CAP_SYS_PTRACE to read it)."""
    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                    ("inheritable", ctypes.c_uint32)]

    libc = _libc()
    header, data = Header(0x20080522, 0), (Data * 2)()
    if libc.syscall(125, ctypes.byref(header), data) == 0:  # capget
        bit = 1 << 19  # CAP_SYS_PTRACE, in the first of the two words
        data[0].effective &= ~bit
        data[0].permitted &= ~bit
        data[0].inheritable &= ~bit
        libc.syscall(126, ctypes.byref(header), data)  # capset
    libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0


def one_rank_cannot_copy(comm, odd_rank, setting):
    if comm.rank == odd_rank:
        cannot_reach_peers()
    try:
        inner = _inner_comm(comm, setting)
    except shmtopo.ShmtopoError as exc:
        return type(exc).__name__, str(exc), exc.rank
    with inner:
        expected = np.arange(1 << 18, dtype=np.float64)
        mine = expected.copy() if inner.rank == 0 else np.zeros_like(expected)
        inner.bcast(mine, root=0, out=mine)
        return "created", inner.single_copy, bool(np.array_equal(mine, expected))


@pytest.mark.serial
@pytest.mark.parametrize("odd_rank", [0, 2])
def test_a_rank_that_cannot_copy_turns_it_off_everywhere(odd_rank):
    out = ranks.run(3, one_rank_cannot_copy, odd_rank, "auto")
    assert out == {r: ("ok", ("created", None, True)) for r in range(3)}, out


@pytest.mark.serial
@pytest.mark.parametrize("odd_rank", [0, 2])
def test_required_single_copy_fails_every_rank_where_a_rank_cannot(odd_rank):
    out = ranks.run(3, one_rank_cannot_copy, odd_rank, "1")
    results = {value for status, value in out.values()}
    assert len(out) == 3 and len(results) == 1, out
    name, message, rank = results.pop()
    assert name == "BackendUnavailableError", out
    assert message.startswith(f"rank {odd_rank}: SHMTOPO_SINGLE_COPY=1, but") and rank == odd_rank, message
    assert "Operation not permitted" in message, message

