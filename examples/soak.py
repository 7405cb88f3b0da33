"""Soak test: many fences and collectives with random small delays, every
result checked. Run with

    mpiexec -n 4 python examples/soak.py --fences 1000000 --collectives 100000

Fences: each rank owns one counter slot per bank of a contiguous window and
increments it every epoch; epochs alternate between two banks, so after the
fence of epoch e every slot of bank e % 2 must hold e // 2 + 1 (a slot below
is a lost update, above a duplicated one), and nobody writes that bank again
before the next fence, which follows everybody's check. Collectives: allreduce
(small and large), bcast from a rotating root and barrier, each checked
against the value it must give. Rank 0 prints the totals over all ranks; the
exit status is 1 when any check failed.
"""
import argparse
import random
import time

import numpy as np
from mpi4py import MPI

import shmtopo


def fences(comm, count, rng, delay_prob):
    """Returns (epochs, lost, duplicated)."""
    lost = duplicated = 0
    with comm.allocate(shape=(2,), dtype=np.int64, contiguous=True) as win:
        banks = (win.all[:, 0], win.all[:, 1])  # bank b, slot r: rank r's part
        mine = win.local
        fence = win.fence
        delays = rng.random(count) < delay_prob
        for epoch in range(count):
            if delays[epoch]:
                time.sleep(rng.random() * 2e-4)
            b = epoch & 1
            mine[b] += 1
            fence()
            expected = (epoch >> 1) + 1
            bank = banks[b]
            if bank.min() != expected or bank.max() != expected:
                for v in bank.tolist():
                    lost += max(0, expected - v)
                    duplicated += max(0, v - expected)
        win.fence()
    return count, lost, duplicated


def collectives(comm, count, rng, delay_prob):
    """Returns (collectives run, results that were wrong)."""
    size, rank = comm.size, comm.rank
    bad = 0
    small = np.empty(3, np.int64)
    big = np.full(20000, rank + 1, np.float64)  # 160 kB: the large-message path
    big_sum = size * (size + 1) / 2
    ranks_sum = size * (size - 1) // 2
    buf = np.empty(4, np.int64)
    delays = rng.random(count) < delay_prob
    for i in range(count):
        if delays[i]:
            time.sleep(rng.random() * 2e-4)
        kind = i % 10
        if kind < 6:
            small[:] = (rank, 1, i)
            got = comm.allreduce(small)
            bad += int(got[0] != ranks_sum or got[1] != size or got[2] != size * i)
        elif kind < 8:
            root = i % size
            buf[:] = (i, root, -i, 7) if rank == root else 0
            comm.bcast(buf, root=root, out=buf)
            bad += int(buf[0] != i or buf[1] != root or buf[2] != -i or buf[3] != 7)
        elif kind == 8:
            got = comm.allreduce(big, op="sum")
            bad += int(got.min() != big_sum or got.max() != big_sum)
        else:
            comm.barrier()
    return count, bad


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fences", type=int, default=100000)
    parser.add_argument("--collectives", type=int, default=10000)
    parser.add_argument("--delay-prob", type=float, default=0.001,
                        help="chance per operation that a rank sleeps up to 0.2 ms first")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()

    with shmtopo.Comm.from_mpi(MPI.COMM_WORLD) as comm:
        mpi = comm.mpi
        seed = args.seed if args.seed is not None else int(time.time())
        seed = mpi.bcast(seed, root=0)
        rng = np.random.default_rng([seed, comm.rank])  # delays differ per rank
        random.seed(seed)

        mpi.Barrier()
        t0 = time.perf_counter()
        epochs, lost, duplicated = fences(comm, args.fences, rng, args.delay_prob)
        t1 = time.perf_counter()
        ncoll, bad = collectives(comm, args.collectives, rng, args.delay_prob)
        t2 = time.perf_counter()

        lost, duplicated, bad = (mpi.allreduce(v) for v in (lost, duplicated, bad))
        fence_time, coll_time = mpi.allreduce(t1 - t0, op=MPI.MAX), mpi.allreduce(t2 - t1, op=MPI.MAX)
        if comm.rank == 0:
            print(f"soak: ranks={comm.size} seed={seed} epochs={epochs} lost={lost} duplicated={duplicated} "
                  f"collectives={ncoll} bad collectives={bad} "
                  f"time={fence_time + coll_time:.2f}s (fences {fence_time:.2f}s, "
                  f"{fence_time / max(epochs, 1) * 1e6:.1f} us/epoch; collectives {coll_time:.2f}s, "
                  f"{coll_time / max(ncoll, 1) * 1e6:.1f} us each)", flush=True)
        failed = lost or duplicated or bad
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
