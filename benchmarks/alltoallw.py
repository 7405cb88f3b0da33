"""Alltoallw of derived datatypes through the drop-in (shmtopo.accelerate),
next to the same call on the plain mpi4py comm, interleaved: the transpose a
distributed FFT makes (mpi4py-fft's pencils), an N x N complex array split by
rows turned into one split by columns with subarray datatypes, and the same
array exchanged by rows (one run per block). Next to the floor of moving a
rank's bytes at all: one numpy copy of its array, timed in the same run.

    mpiexec -n 2 python benchmarks/alltoallw.py [--calls 2000] [--repeats 7]

Prints the load before the run, then per call the median over the
repetitions of the slowest rank's time per call (min-max), accelerated
then plain, the ratio to plain and to the floor.
"""

import time

import numpy as np
from mpi4py import MPI

import shmtopo
from shmtopo.bench import Stat, mpi_library, time_against_mpi4py, timing_args

W = MPI.COMM_WORLD
SIZES = (16, 64, 256, 1024)


def subarrays(shape, axis, n):
    """mpi4py-fft's datatypes: `axis` of a C array of `shape` cut in n parts."""
    types = []
    for p in range(n):
        sub, starts = list(shape), [0] * len(shape)
        sub[axis] = (p + 1) * shape[axis] // n - p * shape[axis] // n
        starts[axis] = p * shape[axis] // n
        types.append(MPI.C_DOUBLE_COMPLEX.Create_subarray(shape, sub, starts).Commit())
    return types


def calls(n):
    """name: (call on a comm, calls per timing relative to --calls), the
    datatypes to free, and per name the bytes of a rank's array."""
    table, made, nbytes = {}, [], {}
    counts = ([1] * n, [0] * n)
    for size in SIZES:
        rows = size // n
        a = np.random.default_rng(W.rank).random((rows, size)) + 0j
        for name, here, there, out in (
                (f"transpose {size}x{size}", subarrays(a.shape, 1, n), subarrays((size, rows), 0, n),
                 np.zeros((size, rows), complex)),
                (f"by rows {size}x{size}", subarrays(a.shape, 0, n), subarrays(a.shape, 0, n), np.zeros_like(a))):
            made += here + there

            def call(c, a=a, out=out, here=here, there=there):
                c.Alltoallw([a, counts, here], [out, counts, there])
            table[name] = (call, min(1.0, 4096 / size ** 2 * 16))
            nbytes[name] = a.nbytes
    return table, made, nbytes


def copy_floor(nbytes, repeats):
    """Seconds of one numpy copy of nbytes into memory already touched: median, min, max."""
    a, b = np.ones(nbytes, np.uint8), np.zeros(nbytes, np.uint8)
    reps = max(10, (64 << 20) // max(nbytes, 1))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(reps):
            np.copyto(b, a)
        times.append((time.perf_counter() - start) / reps)
    return Stat.of(times)


def main():
    args = timing_args(__doc__, W.rank, calls=2000)
    acomm = shmtopo.accelerate(W)
    table, made, nbytes = calls(W.size)
    for call, _ in table.values():  # each datatype's first use goes to MPI; the timing is of the later ones
        call(acomm)
    times = time_against_mpi4py(table, acomm, W, args.calls, args.repeats)
    floors = {name: copy_floor(nbytes[name], args.repeats) for name in table}
    stats = acomm.shm_stats()
    acomm.shm_free()
    for t in made:
        t.Free()
    if W.rank:
        return
    print(f"{W.size} ranks, {mpi_library()}; per call, median (min-max) of {args.repeats}; "
          f"floor: one numpy copy of a rank's array; Alltoallw in shared memory / to MPI: {stats['Alltoallw']}")
    print(f"{'call':20} {'bytes':>9} {'accelerated us':>26} {'mpi4py us':>26} {'x mpi4py':>9} {'floor us':>9} "
          f"{'x floor':>8}")
    for name, (mine, theirs) in times.items():
        a, b, f = Stat.of(mine), Stat.of(theirs), floors[name]
        cell = [f"{s.median * 1e6:.2f} ({s.lo * 1e6:.2f}-{s.hi * 1e6:.2f})" for s in (a, b)]
        print(f"{name:20} {nbytes[name]:>9} {cell[0]:>26} {cell[1]:>26} {a.median / b.median:>9.2f} "
              f"{f.median * 1e6:>9.2f} {a.median / f.median:>8.1f}")


if __name__ == "__main__":
    main()
