"""Windows: views, sizes, layouts and backends, on 1 rank and under mpiexec."""
import numpy as np
import shmtopo
import pytest

USABLE_BACKENDS = ["posix", "memfd", "sysv"]


@pytest.mark.parametrize("backend", USABLE_BACKENDS)
def test_every_rank_sees_every_part(comm, backend):
    with comm.allocate(shape=(16,), dtype=np.int64, backend=backend) as win:
        assert win.backend == backend
        assert win.local.shape == (16,) and not win.local.any()  # zero-filled
        win.local[:] = np.arange(16) + 1000 * comm.rank
        win.fence()
        for r in range(comm.size):
            np.testing.assert_array_equal(win.query(r), np.arange(16) + 1000 * r)


@pytest.mark.parametrize("backend", USABLE_BACKENDS)
def test_writes_into_rank0_part_visible_to_all(comm, backend):
    with comm.allocate(shape=(comm.size, 8), dtype=np.float64, backend=backend) as win:
        win.query(0)[comm.rank, :] = comm.rank + 0.5
        win.fence()
        expected = np.repeat(np.arange(comm.size) + 0.5, 8).reshape(comm.size, 8)
        np.testing.assert_array_equal(win.query(0), expected)


def test_unequal_sizes_and_zero(comm):
    nbytes = 0 if comm.rank == 1 else 8 * (comm.rank + 1) * 1000 + 24
    with comm.allocate(nbytes) as win:
        assert win.local.nbytes == nbytes
        win.local[:] = comm.rank + 1
        win.fence()
        for r in range(comm.size):
            size = 0 if r == 1 else 8 * (r + 1) * 1000 + 24
            part = win.query(r)
            assert part.nbytes == size
            assert (part == r + 1).all()


def test_zero_size_everywhere(comm):
    with comm.allocate(0) as win:
        assert win.local.nbytes == 0
        win.fence()
        assert all(win.query(r).nbytes == 0 for r in range(comm.size))


@pytest.mark.parametrize("backend", USABLE_BACKENDS)
def test_contiguous_window_is_one_array(comm, backend):
    with comm.allocate(shape=(3, 5), dtype=np.int32, contiguous=True, backend=backend) as win:
        whole = win.all
        assert whole.shape == (comm.size, 3, 5)
        win.local[...] = comm.rank
        win.fence()
        for r in range(comm.size):
            assert (whole[r] == r).all()
            assert (win.query(r) == r).all()
        # parts sit back to back: rank r's part starts where rank r-1's ends
        addrs = [win.query(r).__array_interface__["data"][0] for r in range(comm.size)]
        assert all(b - a == 3 * 5 * 4 for a, b in zip(addrs, addrs[1:]))


def test_contiguous_unequal_sizes_is_flat(comm):
    with comm.allocate(8 * (comm.rank + 1), dtype=np.int64, contiguous=True) as win:
        win.local[:] = comm.rank
        win.fence()
        flat = win.all.ravel()  # 2-D on one rank, where all parts are equal
        assert flat.shape == (comm.size * (comm.size + 1) // 2,)
        assert list(flat) == [r for r in range(comm.size) for _ in range(r + 1)]


def test_large_window_is_reserved_and_page_rounded(comm):
    with comm.allocate(3 * 2**20 + 7) as win:
        win.local[-1] = 7
        win.fence()
        assert win.query((comm.rank + 1) % comm.size)[-1] == 7


def test_allocation_forms(comm):
    with comm.allocate(64) as a, comm.allocate(64, dtype=np.float64) as b, \
            comm.allocate(shape=(2, 4), dtype="f8") as c:
        assert a.local.dtype == np.uint8 and a.local.shape == (64,)
        assert b.local.shape == (8,)
        assert c.local.shape == (2, 4) and c.query(0).shape == (2, 4)
        assert b.query(0, dtype=np.uint8).shape == (64,)


def test_views_outlive_the_window(comm):
    win = comm.allocate(shape=(4,), dtype=np.int64)
    win.local[:] = 5
    view = win.local
    win.free()
    assert win.freed
    view[:] += 1  # still mapped, never a segfault
    assert list(view) == [6, 6, 6, 6]


@pytest.mark.parametrize("variable, value, expected", [
    ("SHMTOPO_FENCE_ALGORITHM", "linear", "linear"),
    ("KUPL_SHM_FENCE_ALGORITHM", "2", "rd"),
    ("KUPL_SHM_FENCE_ALGORITHM", "1", "linear"),
    ("KUPL_SHM_FENCE_ALGORITHM", "0", "rd"),  # KUPL: any value but 1 is recursive doubling
])
def test_fence_algorithm_from_env(monkeypatch, variable, value, expected):
    monkeypatch.setenv(variable, value)  # a comm reads the environment when it is made
    with shmtopo.Comm.from_env() as comm, comm.allocate(8) as win:
        assert win.fence_algorithm == expected


def test_backend_from_env(monkeypatch):
    monkeypatch.setenv("SHMTOPO_SHM_TYPE", "memfd")
    with shmtopo.Comm.from_env() as comm, comm.allocate(8) as win:
        assert win.backend == "memfd"


def test_comm_free_frees_open_windows(comm):
    win = comm.allocate(8)
    comm.free()
    assert win.freed and comm.freed
    comm.free()  # twice is fine


@pytest.mark.parametrize("contiguous", [False, True])
@pytest.mark.parametrize("backend", USABLE_BACKENDS)
def test_symmetric_window_same_address_everywhere(comm, backend, contiguous):
    with comm.allocate(shape=(512,), dtype=np.uint64, symmetric=True, contiguous=contiguous,
                       backend=backend) as win:
        addrs = [win.query(r).__array_interface__["data"][0] for r in range(comm.size)]
        # each part at one address in all ranks of the node (the window's; the
        # allgather spans the job: rows of the same length, the node's compared)
        row = np.zeros(comm.world_size, np.uint64)
        row[:comm.size] = addrs
        every = comm.allgather(row)
        node = [w for w in comm.plan.world_order if comm.plan.node_of[w] == comm.plan.node_index]
        assert (every[node][:, :comm.size] == addrs).all()
        # a pointer stored by one rank is valid in every rank
        win.local[0] = addrs[comm.rank] + 8
        win.local[1] = 1000 + comm.rank
        win.fence()
        import ctypes

        for r in range(comm.size):
            ptr = int(win.query(r)[0])
            assert ctypes.c_uint64.from_address(ptr).value == 1000 + r
