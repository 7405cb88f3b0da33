"""Bad input raises a clear exception that also subclasses the builtin, on
every rank alike, and loses nothing: the comm stays usable afterwards."""
import os

import numpy as np
import pytest

import shmtopo


@pytest.mark.parametrize("kwargs, words", [
    ({"nbytes": -1}, "non-negative"),
    ({"nbytes": 7, "dtype": np.float64}, "multiple"),
    ({"nbytes": 8, "shape": (2,), "dtype": np.float64}, "does not match"),
    ({}, "nbytes or shape"),
    ({"nbytes": 8, "fence": "bogus"}, "unknown fence algorithm"),
    ({"nbytes": 8, "backend": "nfs"}, "unknown shared-memory backend"),
    ({"nbytes": 8, "timeout": -1}, "timeout"),
])
def test_bad_allocate_arguments(comm, kwargs, words):
    with pytest.raises(shmtopo.ShmtopoValueError, match=words) as info:
        comm.allocate(**kwargs)
    assert isinstance(info.value, ValueError)
    with comm.allocate(8) as win:  # nothing lost: the comm still works
        win.fence()


@pytest.mark.parametrize("variable, value, expected", [
    ("SHMTOPO_FENCE_ALGORITHM", "fastest", "expected auto, linear, rd, dissemination, 1 or 2"),
    ("SHMTOPO_SHM_TYPE", "tmpfile", "expected posix, memfd, sysv or xpmem"),
    ("SHMTOPO_TIMEOUT", "soon", "expected a finite number of seconds"),
    ("SHMTOPO_TIMEOUT", "nan", "expected a finite number of seconds"),
    ("SHMTOPO_TIMEOUT", "1e400", "expected a finite number of seconds"),
    ("SHMTOPO_TIMEOUT", "-1", "expected a finite number of seconds"),
    ("SHMTOPO_SPIN_NS", "-1", "expected nanoseconds"),
    ("SHMTOPO_YIELD_NS", "banana", "expected nanoseconds"),
    ("SHMTOPO_COLL_BUFFER", "12", "expected a number of bytes"),
    ("SHMTOPO_COLL_ALGORITHM", "fast", "expected auto, flat or rsag"),
    ("SHMTOPO_NODE_SIZE", "abc", "expected a positive number"),
    ("SHMTOPO_NODE_SIZE", "0", "expected a positive number"),
    ("SHMTOPO_TOPO_SOURCE", "disk", "expected auto, shmem, xml or local"),
])
def test_bad_environment(monkeypatch, variable, value, expected):
    """Read when a comm is made: the message names the variable, the value
    and what it accepts, once, on every rank."""
    monkeypatch.setenv(variable, value)
    with pytest.raises(shmtopo.ShmtopoValueError) as info:
        shmtopo.Comm.from_mpi()
    message = str(info.value)
    assert f"{variable}={value}: " in message and expected in message, message
    assert message.count(f"{variable}=") == 1, message


@pytest.mark.skipif(os.path.exists("/dev/xpmem"), reason="this machine has XPMEM")
def test_xpmem_missing_is_named(comm):
    with pytest.raises(shmtopo.BackendUnavailableError, match="/dev/xpmem") as info:
        comm.allocate(8, backend="xpmem")
    assert isinstance(info.value, OSError)


def test_bad_ranks(comm):
    with comm.allocate(8) as win:
        for bad in (-1, comm.size, 10**6):
            with pytest.raises(shmtopo.ShmtopoValueError, match="out of range"):
                win.query(bad)
            with pytest.raises(ValueError, match="out of range"):
                win.peer_fence(bad)
        with pytest.raises(ValueError, match="itself"):
            win.peer_fence(comm.rank)
        win.fence()  # still usable: argument errors do not break the window
    with pytest.raises(ValueError, match="out of range"):
        comm.pid(comm.size)


def test_freed_window_raises_and_never_crashes(comm):
    win = comm.allocate(shape=(4,), dtype=np.int32)
    win.free()
    win.free()  # twice: no-op
    for call in (win.fence, lambda: win.peer_fence(0), lambda: win.query(0), lambda: win.fence_loop(3),
                 lambda: win.set_timeout(1.0), lambda: win.all, lambda: win.fence_algorithm):
        with pytest.raises(shmtopo.FreedError):
            call()
    assert win.local.tolist() == [0, 0, 0, 0]


def test_freed_comm_raises(comm):
    other = shmtopo.Comm.from_mpi()
    other.free()
    with pytest.raises(shmtopo.FreedError):
        other.allocate(8)
    with pytest.raises(shmtopo.FreedError):
        other.rank
    assert "freed" in repr(other)


@pytest.mark.serial
def test_window_constructor_is_not_public():
    with pytest.raises(TypeError):
        shmtopo.Window()


@pytest.mark.parametrize("kwargs", [{"nbytes": 2**64}, {"shape": (2**62 + 1, 4)}, {"shape": (2**32, 2**32)}])
def test_sizes_too_large_fail_cleanly(comm, kwargs):
    with pytest.raises(shmtopo.ShmtopoValueError, match="too large"):
        comm.allocate(**kwargs)
    assert comm.windows == []
