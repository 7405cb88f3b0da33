"""An mpi4py program switched to shmtopo by one line: conjugate gradient on
the 1-D Poisson matrix (tridiag(-1, 2, -1)), distributed by blocks of rows.

    mpiexec -n 4 python examples/cg_poisson.py [rows per rank]

`solve` is plain mpi4py: a halo exchange with Sendrecv and two dot products
per iteration with Allreduce, the collective that bounds small solvers. It
runs twice on the same data, alternately (5 times each, medians): on
MPI.COMM_WORLD, and on

    comm = shmtopo.accelerate(MPI.COMM_WORLD)

which is the one line that changes. Its Allreduce then runs in shared
memory; Sendrecv and everything else stay the wrapped communicator's.

What holds for the results: shmtopo sums in rank order, so every rank has
the same bits. With 2 ranks a sum is one addition, whatever its order, so
the solution is bitwise mpi4py's; with more ranks MPI may add in another
order, which changes the last bits of the dot products, and the solutions
agree to rounding only (the example prints the largest relative difference).
"""
import sys
import time

import numpy as np
from mpi4py import MPI

import shmtopo


def solve(comm, n_local, tolerance=1e-10):
    """CG on A x = 1 from x = 0 until |r| <= tolerance |b|; returns (x, |r|,
    iterations). (With b = 1, symmetric, CG reaches the solution of this
    matrix in about half as many steps as it has rows.)"""
    rank, size = comm.Get_rank(), comm.Get_size()
    left = rank - 1 if rank > 0 else MPI.PROC_NULL
    right = rank + 1 if rank < size - 1 else MPI.PROC_NULL
    mine, total = np.empty(1), np.empty(1)
    halo_left, halo_right = np.zeros(1), np.zeros(1)

    def dot(u, v):
        mine[0] = u @ v
        comm.Allreduce(mine, total, op=MPI.SUM)
        return total[0]

    def matvec(p, out):
        comm.Sendrecv(p[-1:], dest=right, recvbuf=halo_left, source=left)
        comm.Sendrecv(p[:1], dest=left, recvbuf=halo_right, source=right)
        out[:] = 2.0 * p
        out[1:] -= p[:-1]
        out[:-1] -= p[1:]
        out[0] -= halo_left[0] if left != MPI.PROC_NULL else 0.0
        out[-1] -= halo_right[0] if right != MPI.PROC_NULL else 0.0

    x = np.zeros(n_local)
    r = np.ones(n_local)  # b - A x with x = 0
    p = r.copy()
    ap = np.empty(n_local)
    rr = dot(r, r)
    stop = tolerance**2 * rr
    iterations = 0
    while rr > stop:
        matvec(p, ap)
        alpha = rr / dot(p, ap)
        x += alpha * p
        r -= alpha * ap
        rr_next = dot(r, r)
        p *= rr_next / rr
        p += r
        rr = rr_next
        iterations += 1
    return x, float(np.sqrt(rr)), iterations


def main():
    n_local = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    n = size * n_local
    comm = shmtopo.accelerate(MPI.COMM_WORLD)  # <- the one line

    times = {"mpi4py": [], "shmtopo": []}
    for _ in range(5):  # alternately, so that a burst of load hits both
        for name, c in (("mpi4py", world), ("shmtopo", comm)):
            world.Barrier()
            t0 = time.perf_counter()
            result = solve(c, n_local)
            times[name].append(world.allreduce(time.perf_counter() - t0, op=MPI.MAX))
            if name == "mpi4py":
                x_mpi, res_mpi, it_mpi = result
            else:
                x_shm, res_shm, it_shm = result
    stats = comm.shm_stats()

    # the accelerated run's dot products have the same bits on every rank
    # (its last residual and its number of steps tell); against mpi4py's:
    everyone_same = len(set(world.allgather((res_shm, it_shm)))) == 1
    identical = world.allreduce(bool(np.array_equal(x_shm, x_mpi)), op=MPI.LAND)
    scale = world.allreduce(float(np.abs(x_mpi).max()), op=MPI.MAX)
    difference = world.allreduce(float(np.abs(x_shm - x_mpi).max()), op=MPI.MAX) / scale
    t_mpi, t_shm = (float(np.median(times[k])) * 1e6 for k in ("mpi4py", "shmtopo"))
    if rank == 0:
        print(f"cg_poisson: {size} ranks, {n} unknowns: mpi4py {it_mpi} iterations, residual norm "
              f"{res_mpi:.6e}; shmtopo.accelerate {it_shm} iterations, residual norm {res_shm:.6e}")
        print(f"solve: mpi4py {t_mpi:.0f} us, shmtopo.accelerate {t_shm:.0f} us: speedup {t_mpi / t_shm:.2f}x "
              "(medians of 5 alternate solves on the same data)")
        print(f"solution: bitwise identical to mpi4py's: {identical}; largest relative difference "
              f"{difference:.2e}; the same dot products on every rank: {everyone_same}")
        print(f"shm_stats: {stats}")
    accelerated, delegated = stats["Allreduce"]
    assert delegated == 0 and accelerated == 5 * (2 * it_shm + 1), stats  # the dot products, in shared memory
    # the exact solution of -u'' = 1 on this grid: u_i = i (n + 1 - i) / 2
    i = np.arange(rank * n_local + 1, (rank + 1) * n_local + 1, dtype=np.float64)
    error = world.allreduce(float(np.abs(x_shm - i * (n + 1 - i) / 2).max()), op=MPI.MAX) / scale
    if rank == 0:
        print(f"largest relative error against the exact solution: {error:.2e}")
    assert everyone_same and error < 1e-8, error
    if size <= 2:
        assert identical and it_shm == it_mpi, "with 2 ranks the sums are the same additions"
    assert difference < 1e-8, difference
    comm.shm_free()
    if rank == 0:
        print("cg_poisson ok")


if __name__ == "__main__":
    main()
