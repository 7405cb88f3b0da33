"""shmtopo.share and shared_array (issue 43): one copy per node of an array
or any picklable object, read-only on every rank; built in place; errors on
every rank before anything is mapped; lifetime by the views alone.

Runs on 1 rank and under mpiexec -n 2/3/4 (the comm fixture: the job's
comm); the simulated-node tests split the job into nodes of 1 and 2 ranks;
the serial tests start jobs of their own (kill -9, the launcher, spawn, a
share beyond 2 GiB)."""
import gc
import hashlib
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import shmtopo
from shmtopo import rendezvous, sharing

from conftest import (CLEAN_ENV, PythonCalls, environment_without_a_job, mpiexec_command, run_mpiexec,
                      skip_simulated_nodes_across_hosts)

HERE = Path(__file__).resolve().parent


def needs_mpi():
    if rendezvous.in_environment():
        pytest.skip("simulated nodes are nodes of an MPI job: this one was started without MPI")


def reference(shape, dtype, salt=0):
    """Deterministic contents every rank can compute."""
    n = int(np.prod(shape))
    raw = (np.arange(n * np.dtype(dtype).itemsize, dtype=np.uint64) * 2654435761 + salt) % 251
    return raw.astype(np.uint8).view(dtype)[:n].reshape(shape) if n else np.zeros(shape, dtype)


def maps_of_shares():
    """This process's mappings of shmtopo segments (the segments' names stay
    in /proc/self/maps, marked deleted, once unlinked)."""
    gc.collect()
    return [line for line in Path("/proc/self/maps").read_text().splitlines() if "/dev/shm/shmtopo" in line
            or "memfd:shmtopo" in line]


def open_fds():
    return len(os.listdir("/proc/self/fd"))


STRUCT = np.dtype([("id", "<i4"), ("pos", "<f8", (3,)), ("name", "S5")])
SIZES = [("inline", 40), ("bcast", 20000), ("segment", 300000)]


def test_a_small_arrays_share_is_one_c_call_on_every_rank(comm):
    """The most common share, a small C-contiguous array of a type the core
    has, runs no Python below share() on any rank of a node (its header is
    made, bcast and read in C); the arrays come back right, read-only for good."""
    root = comm.world_size - 1
    sent = [np.arange(128.0), np.arange(12, dtype=np.int32).reshape(3, 4), np.array(7, np.int16),
            np.zeros((0, 5), np.uint8), np.arange(8, dtype=np.complex64)[::2].copy()]
    given = sent if comm.world_rank == root else [None] * len(sent)
    comm.share(given[0], root=root)  # (the first share names the types)
    with PythonCalls() as python_calls:
        got = [comm.share(a, root=root) for a in given]
    if comm.nnodes == 1:
        assert python_calls == ["<listcomp>"] + ["share"] * len(sent), python_calls
    for a, b in zip(sent, got):
        assert b.dtype == a.dtype and b.shape == a.shape and b.tobytes() == a.tobytes()
        assert not b.flags.writeable
        with pytest.raises(ValueError):
            b.setflags(write=True)


@pytest.mark.parametrize("dtype", [np.float64, np.int8, np.bool_, np.complex128, ">i4", "M8[ns]", "U3", STRUCT])
@pytest.mark.parametrize("tier, nbytes", SIZES)
def test_arrays_of_every_kind_come_back_equal_and_read_only(comm, dtype, tier, nbytes):
    dt = np.dtype(dtype)
    n = max(1, nbytes // dt.itemsize)
    for root in range(comm.world_size):
        want = reference((n,), dt, salt=root)
        got = comm.share(want if comm.world_rank == root else None, root=root)
        assert got.dtype == dt and got.shape == want.shape
        assert got.tobytes() == want.tobytes()
        assert not got.flags.writeable
        with pytest.raises(ValueError, match="read-only"):
            got[...] = want
        with pytest.raises(ValueError):
            got.setflags(write=True)  # and it stays so
        in_segment = shmtopo.share_info(got) is not None
        assert in_segment == (want.nbytes > sharing.SMALL), (tier, want.nbytes)


@pytest.mark.parametrize("shape, order", [((), "C"), ((0,), "C"), ((3, 0, 2), "C"), ((7, 5), "F"),
                                          ((40, 30, 20), "F"), ((1, 2, 3, 1, 2, 1, 2, 1, 2), "C"),
                                          ((300, 200), "C")])
def test_shapes_and_orders(comm, shape, order):
    want = np.asarray(reference(shape, np.float32), order=order)
    got = comm.share(want if comm.world_rank == 0 else None)
    assert got.shape == shape and got.dtype == np.float32
    np.testing.assert_array_equal(got, want)
    if want.ndim > 1 and order == "F" and want.size:
        assert got.flags.f_contiguous and not got.flags.c_contiguous
    assert not got.flags.writeable


def test_non_contiguous_arrays_and_memmaps(comm, tmp_path_factory):
    base = reference((400, 300), np.int32)
    for view in (base[::3, 1::2], base.T[::2], base[:, 5]):
        got = comm.share(view if comm.world_rank == 0 else None)
        np.testing.assert_array_equal(got, view)
    # a file mapped read-only on the root is copied once into the node's memory
    path = Path(CLEAN_ENV.get("TMPDIR", "/tmp")) / f"share_memmap_{os.getppid()}_{comm.world_size}.npy"
    if comm.world_rank == 0:
        np.save(path, base)
    comm.barrier()
    mm = np.load(path, mmap_mode="r") if comm.world_rank == 0 else None
    got = comm.share(mm)
    np.testing.assert_array_equal(got, base)
    assert shmtopo.share_info(got) is not None
    del mm
    comm.barrier()
    if comm.world_rank == 0:
        path.unlink()


def test_every_rank_of_a_node_maps_the_same_one_copy(comm):
    """The data lies once on the node: every rank's view is the same
    segment (the same file), with no private copy on any rank."""
    want = reference((1 << 18,), np.float64)
    got = comm.share(want if comm.world_rank == comm.world_size - 1 else None, root=comm.world_size - 1)
    np.testing.assert_array_equal(got, want)
    address = got.__array_interface__["data"][0]
    line = next(m for m in Path("/proc/self/maps").read_text().splitlines()
                if int(m.split("-")[0], 16) <= address < int(m.split()[0].split("-")[1], 16))
    fields = line.split()
    assert fields[1] == "r--s", line  # read-only and shared: the mapping itself refuses writes
    inode = int(fields[4])
    assert inode != 0, line  # a file (the segment), not anonymous private memory
    # one file per node: the same inode on every rank of a host (real nodes: one per host)
    host = int.from_bytes(hashlib.sha1(socket.gethostname().encode()).digest()[:7], "little")
    files = {}
    for h, i in comm.allgather(np.array([host, inode], np.int64)).tolist():
        files.setdefault(h, set()).add(i)
    assert all(len(inodes) == 1 for inodes in files.values()) and len(files) == comm.nnodes, files
    info = shmtopo.share_info(got)
    assert info is not None and info.nbytes == want.nbytes and info.nnodes == comm.nnodes
    assert len(info.placement_report) == comm.size and info.backend == "posix"
    assert "bytes in node shared memory" in str(info)


@dataclass
class Particles:
    pos: np.ndarray
    ids: np.ndarray
    label: str


def test_objects_with_out_of_band_buffers_are_zero_copy(comm):
    root = comm.world_size // 2
    obj = {"grid": reference((300, 400), np.float64), "ids": reference((50000,), np.int64),
           "tiny": np.arange(3), "nested": [Particles(reference((1000, 3), np.float32), np.arange(1000), "p"),
                                            ("text", 1, 2.5, None)],
           "bytes": b"x" * 100000, "fortran": np.asfortranarray(reference((70, 90), np.int16))}
    got = comm.share(obj if comm.world_rank == root else None, root=root)
    assert sorted(got) == sorted(obj)
    for key in ("grid", "ids", "tiny", "fortran"):
        np.testing.assert_array_equal(got[key], obj[key])
        assert not got[key].flags.writeable
    assert got["fortran"].flags.f_contiguous
    p = got["nested"][0]
    assert isinstance(p, Particles) and p.label == "p"
    np.testing.assert_array_equal(p.pos, obj["nested"][0].pos)
    assert got["nested"][1] == ("text", 1, 2.5, None) and got["bytes"] == obj["bytes"]
    # the large arrays inside view the node's segment: not unpickled copies
    info = shmtopo.share_info(got["grid"])
    assert info is not None and shmtopo.share_info(got["ids"]) == info
    assert shmtopo.share_info(p.pos) == info


def test_small_objects_and_scalars(comm):
    for obj in (0, "a string", [1, 2, 3], {"k": (1.5, None)}, np.float32(2.5), b""):
        got = comm.share(obj if comm.world_rank == 0 else None)
        assert got == obj and type(got) is type(obj)


def test_pandas_and_sparse_where_installed(comm):
    try:
        import scipy.sparse as sp
    except ImportError:
        sp = None
    try:
        import pandas as pd
    except ImportError:
        pd = None
    if sp is None and pd is None:
        pytest.skip("neither scipy nor pandas is installed")
    if sp is not None:
        m = sp.random(2000, 2000, density=0.01, format="csr", random_state=1)
        got = comm.share(m if comm.world_rank == 0 else None)
        assert (got != m).nnz == 0 and not got.data.flags.writeable
    if pd is not None:
        df = pd.DataFrame({"a": np.arange(100000), "b": np.arange(100000) * 0.5})
        got = comm.share(df if comm.world_rank == 0 else None)
        assert got.equals(df)


def test_a_write_through_the_mapping_is_refused_by_the_kernel(comm):
    """writeable=False stops numpy; the mapping itself is read-only, so a
    write by other means faults instead of changing the peers' data (here in
    a forked child, which dies of SIGSEGV)."""
    if comm.world_size > 1:
        pytest.skip("forks a child: once, in the 1-rank run")
    import ctypes
    got = comm.share(reference((100000,), np.uint8))
    pid = os.fork()
    if pid == 0:
        import faulthandler
        import signal
        faulthandler.disable()
        signal.signal(signal.SIGSEGV, signal.SIG_DFL)  # not MPI's handler, nor pytest's
        ctypes.memset(got.__array_interface__["data"][0], 7, 1)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == 11, status
    assert got[0] == reference((1,), np.uint8)[0]
    with pytest.raises(ValueError):
        got.setflags(write=True)


def test_memory_goes_with_the_last_view(comm):
    before = len(maps_of_shares())
    got = comm.share(reference((1 << 17,), np.float64) if comm.world_rank == 0 else None)
    view = got[10:20]
    del got
    gc.collect()
    assert len(maps_of_shares()) == before + 1  # the slice holds the mapping
    assert view[0] == reference((1 << 17,), np.float64)[10]
    del view
    gc.collect()
    assert len(maps_of_shares()) == before
    comm.barrier()
    mine = f"shmtopo.{os.getpid()}."
    assert not [f for f in os.listdir("/dev/shm") if f.startswith(mine)], "no names are ever left"


def test_ten_thousand_live_shares(comm):
    """No cap on live shares; small ones cost no descriptor and no mapping."""
    fds, maps = open_fds(), len(maps_of_shares())
    kept = [comm.share(np.full(16, i, np.int64) if comm.world_rank == 0 else None) for i in range(10000)]
    assert [int(k[0]) for k in kept[::997]] == list(range(0, 10000, 997))
    assert all(int(k[-1]) == i for i, k in enumerate(kept))
    assert open_fds() <= fds + 2 and len(maps_of_shares()) == maps
    objs = [comm.share({"i": i} if comm.world_rank == 0 else None) for i in range(2000)]
    assert all(o["i"] == i for i, o in enumerate(objs))


def test_many_live_segment_shares(comm):
    """Shares in node memory: one mapping each, no descriptor kept."""
    fds, maps = open_fds(), len(maps_of_shares())
    count = 300
    kept = [comm.share(np.full(sharing.SMALL // 8 + 1, i, np.int64) if comm.world_rank == 0 else None)
            for i in range(count)]
    assert all(int(k[0]) == i and int(k[-1]) == i for i, k in enumerate(kept))
    assert len(maps_of_shares()) == maps + count and open_fds() <= fds + 2
    del kept
    gc.collect()
    assert len(maps_of_shares()) == maps


def test_unshare_releases_the_node_memory_at_once(comm):
    got = comm.share(reference((1 << 17,), np.float64) if comm.world_rank == 0 else None)
    kept = {"inside": got[5:]}
    address = got.__array_interface__["data"][0]
    maps = len(maps_of_shares())
    comm.unshare(kept["inside"])  # any view of it
    assert len(maps_of_shares()) == maps - 1  # the segment is gone from this process
    line = next(m for m in Path("/proc/self/maps").read_text().splitlines()
                if int(m.split("-")[0], 16) <= address < int(m.split()[0].split("-")[1], 16))
    assert line.split()[1] == "---p", line  # its range kept, inaccessible, until the views go
    assert shmtopo.share_info(got) is None
    del got, kept
    small = comm.share(np.arange(4) if comm.world_rank == 0 else None)
    comm.unshare(small)  # private: left to the garbage collector
    assert small.tolist() == [0, 1, 2, 3]


def test_unshare_of_different_shares_raises_everywhere(comm):
    if comm.world_size == 1:
        pytest.skip("needs a second rank")
    a = comm.share(np.ones(1 << 15) if comm.world_rank == 0 else None)
    b = comm.share(np.zeros(1 << 15) if comm.world_rank == 0 else None)
    maps = len(maps_of_shares())
    with pytest.raises(shmtopo.ShmtopoValueError):
        comm.unshare(b if comm.world_rank == comm.world_size - 1 else a)
    assert len(maps_of_shares()) == maps and a.sum() == a.size and b.sum() == 0


# ---- building in place -------------------------------------------------------

@pytest.mark.parametrize("columns", [5000, 2])  # (small enough to travel inside a share's header)
def test_shared_array_filled_by_every_rank_then_shared(comm, columns):
    rows = 3 * comm.world_size + 1  # (the same shape on every node: the call is collective over the job)
    a = comm.shared_array((rows, columns), np.float64)
    assert a.flags.writeable and a.shape == (rows, columns) and not a.any()
    comm.barrier()  # every rank has looked before any writes
    a[comm.rank::comm.size] = np.arange(comm.rank, rows, comm.size)[:, None]
    frozen = comm.share(a, root=0)
    assert not frozen.flags.writeable
    np.testing.assert_array_equal(frozen[:, 0], np.arange(rows))
    np.testing.assert_array_equal(frozen[:, -1], np.arange(rows))
    assert frozen.__array_interface__["data"][0] == a.__array_interface__["data"][0]  # where it lay
    del a


def test_shared_array_filled_by_one_rank_structured_and_fortran(comm):
    a = comm.shared_array((60, 70), STRUCT, order="F")
    if comm.rank == comm.size - 1:
        a[...] = reference((60, 70), STRUCT)
    last = comm.world_size - 1
    frozen = comm.share(a if comm.world_rank == last else None, root=last)
    assert frozen.dtype == STRUCT and frozen.flags.f_contiguous
    assert frozen.tobytes("A") == np.asfortranarray(reference((60, 70), STRUCT)).tobytes("A")
    assert shmtopo.share_info(frozen) is not None


@pytest.mark.parametrize("culprit", ["first", "middle", "last"])
def test_shared_array_with_a_bad_or_different_shape_raises_everywhere(comm, culprit):
    bad = {"first": 0, "middle": comm.world_size // 2, "last": comm.world_size - 1}[culprit]
    maps = len(maps_of_shares())
    shape = (10, 10)
    if comm.world_rank == bad:
        shape = (10, 11) if comm.world_size > 1 else (-1, 3)
    with pytest.raises(shmtopo.ShmtopoValueError):
        comm.shared_array(shape, "f4")
    assert len(maps_of_shares()) == maps
    assert comm.share(np.ones(3) if comm.world_rank == 0 else None).sum() == 3


# ---- errors, on every rank -------------------------------------------------------

def each_culprit():
    return pytest.mark.parametrize("culprit", ["first", "middle", "last"])


def rank_of(comm, culprit):
    return {"first": 0, "middle": comm.world_size // 2, "last": comm.world_size - 1}[culprit]


def raises_everywhere(comm, exc_type, match, call):
    maps = len(maps_of_shares())
    with pytest.raises(exc_type, match=match) as info:
        call()
    assert len(maps_of_shares()) == maps  # nothing mapped
    comm.barrier()
    got = comm.share(np.arange(5.0) if comm.world_rank == 0 else None)  # and the comm goes on
    assert got.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    return info.value


@each_culprit()
def test_nothing_given_on_the_root(comm, culprit):
    root = rank_of(comm, culprit)
    exc = raises_everywhere(comm, shmtopo.ShmtopoValueError, "passed None: nothing to share",
                            lambda: comm.share(None, root=root))
    assert exc.rank == root


@each_culprit()
def test_an_object_that_cannot_be_pickled(comm, culprit):
    root = rank_of(comm, culprit)
    exc = raises_everywhere(comm, TypeError, r"cannot be pickled: TypeError: cannot pickle '_thread.lock' object",
                            lambda: comm.share({"lock": threading.Lock()} if comm.world_rank == root else None,
                                               root=root))
    assert isinstance(exc, shmtopo.ShmtopoError)


@each_culprit()
def test_a_root_that_differs_between_ranks(comm, culprit):
    if comm.world_size == 1:
        pytest.skip("one rank has nobody to differ from")
    bad = rank_of(comm, culprit)

    def call():
        root = (1 if bad == 0 else bad) if comm.world_rank == bad else 0
        return comm.share(np.ones(4) if comm.world_rank == root else None, root=root)
    raises_everywhere(comm, shmtopo.ShmtopoValueError, "root", call)


@each_culprit()
def test_a_root_outside_the_job(comm, culprit):
    bad = rank_of(comm, culprit)
    raises_everywhere(comm, shmtopo.ShmtopoValueError, "root",
                      lambda: comm.share(np.ones(4) if comm.world_rank == 0 else None,
                                         root=comm.world_size + 3 if comm.world_rank == bad else 0))


@each_culprit()
def test_too_large_for_dev_shm_is_refused_before_anything_is_written(comm, culprit):
    """Checked against free memory and /dev/shm's free space before any rank
    writes (a zero-stride array of that size takes no memory on the root)."""
    root = rank_of(comm, culprit)
    free = os.statvfs("/dev/shm")
    huge = np.broadcast_to(np.uint8(1), (free.f_bavail * free.f_frsize + (8 << 30),))
    # the limit met first names it: memory (ENOMEM) or /dev/shm's free space (ENOSPC, a node
    # whose /dev/shm is smaller than its memory)
    raises_everywhere(comm, (shmtopo.ShmtopoMemoryError, shmtopo.ShmtopoOSError), "memory|space",
                      lambda: comm.share(huge if comm.world_rank == root else None, root=root))


def test_a_share_facing_another_call_fails_both(comm):
    if comm.world_size == 1:
        pytest.skip("needs a second rank")
    header = np.zeros(sharing.HEADER_WORDS, np.uint64)
    with pytest.raises(shmtopo.ShmtopoValueError):
        if comm.world_rank == comm.world_size - 1:
            comm.allreduce(np.ones(3))
        else:
            comm.share(np.ones(3) if comm.world_rank == 0 else None)
    comm.barrier()
    del header


# ---- any communicator -------------------------------------------------------------

def test_any_communicator(comm):
    needs_mpi()
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    want = reference((5000, 20), np.int32)
    a = shmtopo.share(want if world.rank == 0 else None)  # None: the job
    b = shmtopo.share(want if world.rank == 0 else None, world)
    acc = shmtopo.accelerate(world)
    try:
        c = acc.share(want if world.rank == 0 else None)
        d = shmtopo.share(want if world.rank == 0 else None, acc)
    finally:
        acc.shm_free()
    e = shmtopo.share(want if world.rank == 0 else None, comm)
    for got in (a, b, c, d, e):
        np.testing.assert_array_equal(got, want)
        assert shmtopo.share_info(got) is not None and not got.flags.writeable
    sub = world.Split(world.rank % 2, world.rank)
    try:
        f = shmtopo.share("half" if sub.rank == 0 else None, sub)
        assert f == "half"
        t = shmtopo.shared_array(4, np.int64, sub)
        if sub.rank == 0:
            t[:] = 7
        assert shmtopo.share(t, sub).tolist() == [7] * 4
    finally:
        sub.Free()  # its shmtopo comm goes with it
    with pytest.raises(TypeError, match="communicator"):
        shmtopo.share(1, comm="world")


@pytest.mark.parametrize("node_size", [1, 2])
def test_across_simulated_nodes(node_size, monkeypatch):
    """One copy per node; the leaders move the data in chunks (a small chunk
    here, so that several go), straight into each node's segment."""
    needs_mpi()
    skip_simulated_nodes_across_hosts(node_size)
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    monkeypatch.setattr(sharing, "CHUNK", 4096 * 3 + 8)
    with shmtopo.Comm.from_mpi(world, node_size=node_size) as comm:
        for root in range(world.size):
            want = reference((30011,), np.float64, salt=root)
            got = comm.share(want if world.rank == root else None, root=root)
            np.testing.assert_array_equal(got, want)
            info = shmtopo.share_info(got)
            assert info.nnodes == comm.nnodes and len(info.placement_report) == comm.size
            obj = comm.share({"x": want, "s": "y" * 100000} if world.rank == root else None, root=root)
            np.testing.assert_array_equal(obj["x"], want)
            small = comm.share(want[:10] if world.rank == root else None, root=root)
            np.testing.assert_array_equal(small, want[:10])
        # one copy per node: the ranks of a node share one segment, the nodes do not
        got = comm.share(reference((1 << 16,), np.int64) if world.rank == 0 else None)
        address = got.__array_interface__["data"][0]
        line = next(m for m in Path("/proc/self/maps").read_text().splitlines()
                    if int(m.split("-")[0], 16) <= address < int(m.split()[0].split("-")[1], 16))
        inodes = comm.allgather(np.array([int(line.split()[4])], np.int64))[:, 0]
        for r in range(world.size):
            same_node = comm.plan.node_of[r] == comm.plan.node_of[world.rank]
            assert (inodes[r] == inodes[world.rank]) == same_node
        # built in place on the root's node, copied to the others
        last = world.size - 1
        t = comm.shared_array((777, 13), np.int32)
        if comm.plan.node_of[world.rank] == comm.plan.node_of[last]:
            t[comm.rank::comm.size] = 5
        frozen = comm.share(t if world.rank == last else None, root=last)
        assert (frozen == 5).all()
        with pytest.raises(shmtopo.ShmtopoValueError, match="passed None"):
            comm.share(None, root=last)
        with pytest.raises(TypeError, match="cannot be pickled"):
            comm.share(threading.Lock() if world.rank == last else None, root=last)
        assert comm.share("ok" if world.rank == 0 else None) == "ok"


# ---- jobs of their own -----------------------------------------------------------------

def spawned(n):
    """A rank of shmtopo.spawn: the default comm is the launcher's job."""
    with shmtopo.Comm.from_env() as comm:
        rank = comm.rank
    got = shmtopo.share(reference((n,), np.float64) if rank == 0 else None)
    obj = shmtopo.share({"a": got} if rank == 0 else None)
    info = shmtopo.share_info(obj["a"])
    return float(got.sum()), float(obj["a"].sum()), info is not None


@pytest.mark.serial
@pytest.mark.no_mpi
def test_under_spawn():
    want = float(reference((100000,), np.float64).sum())
    out = shmtopo.spawn(spawned, 3, 100000)
    assert out == [(want, want, True)] * 3


@pytest.mark.serial
@pytest.mark.no_mpi
def test_under_the_launcher(tmp_path):
    script = tmp_path / "launched.py"
    script.write_text(
        "import numpy as np, shmtopo\n"
        "with shmtopo.Comm.from_env() as comm:\n"
        "    rank, size = comm.rank, comm.size\n"
        "got = shmtopo.share(np.arange(300000.0) if rank == size - 1 else None, root=size - 1)\n"
        "assert got.sum() == np.arange(300000.0).sum() and not got.flags.writeable\n"
        "assert shmtopo.share_info(got) is not None\n"
        "print('share ok', rank)\n")
    proc = subprocess.run([sys.executable, "-m", "shmtopo", "run", "-n", "3", str(script)],
                          env=environment_without_a_job(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("share ok") == 3


KILL_POINTS = [("root", "write"), ("root", "scatter"), ("reader", "start"), ("reader", "keep"), ("root", "keep")]


@pytest.mark.serial
@pytest.mark.parametrize("nodes", [1, 2])
@pytest.mark.parametrize("victim, point", KILL_POINTS)
def test_kill_9_mid_share(tmp_path, victim, point, nodes):
    """A rank killed at a point of a share: every survivor raises
    PeerDeadError naming it, across simulated nodes too, and /dev/shm keeps
    nothing of the job's."""
    n = 3 if nodes == 1 else 4
    env = dict(CLEAN_ENV, SHMTOPO_NODE_SIZE=str(n if nodes == 1 else 2))
    from conftest import survivors_of_a_kill_flags  # survivors stay: only shmtopo can tell them

    proc = subprocess.run(mpiexec_command() + survivors_of_a_kill_flags() + ["-n", str(n), sys.executable,
                          str(HERE / "scripts" / "share_kill.py"), str(tmp_path), victim, point],
                          capture_output=True, text=True, timeout=240, env=env)
    dead = 0 if victim == "root" else n - 1
    reports = {int(p.stem[4:]): p.read_text() for p in tmp_path.glob("rank*.txt")}
    assert sorted(reports) == [r for r in range(n) if r != dead], (proc.stdout, proc.stderr, reports)
    for rank, text in reports.items():
        assert text.startswith(f"PeerDeadError {dead} "), (rank, text, proc.stderr)
    pids = {p.read_text() for p in tmp_path.glob("pid*.txt")}
    assert len(pids) == n
    time.sleep(0.5)
    left = [f for f in os.listdir("/dev/shm") if f.startswith("shmtopo.") and f.split(".")[1] in pids]
    assert not left, left


@pytest.mark.serial
def test_beyond_2_gib_across_simulated_nodes():
    """A 2.1 GiB array built in place on one node and shared with another:
    the leaders move it in chunks under MPI's int counts. Opt-in
    (SHMTOPO_TEST_LARGE=1): it needs about 4.5 GiB of /dev/shm and memory."""
    if os.environ.get("SHMTOPO_TEST_LARGE") != "1":
        pytest.skip("set SHMTOPO_TEST_LARGE=1 (needs ~4.5 GiB of memory)")
    env = dict(CLEAN_ENV, SHMTOPO_NODE_SIZE="1")
    start = time.monotonic()
    proc = run_mpiexec(2, [sys.executable, HERE / "scripts" / "share_large.py"], timeout=300,
                       env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("large ok") == 2, proc.stdout
    print(f"2.1 GiB across two nodes: {time.monotonic() - start:.1f} s")
