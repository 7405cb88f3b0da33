"""What the drop-in costs where it does not help: making derived comms, and
calls handed to MPI, against plain mpi4py's same calls in the same run.

    mpiexec -n 2 python benchmarks/dropin_costs.py [--rounds K] [--calls N]

Each figure is timed K times each way, interleaved (plain, accelerated,
plain, ...); a row gives the median time per operation of each (min-max)
and their ratio. The load average is printed first: figures from a busy
machine are not the library's. Rows:

  Dup / Split / Create_cart   making a derived comm (kept; all freed after the round)
  Dup + Free                  making and freeing one
  Dup + Allreduce + Free      the same with one call (the drop-in makes the
                              comm's shared memory at it): a program that
                              makes a comm for a phase and frees it
  <call> (delegated)          a collective shmtopo hands to MPI: long double,
                              long double complex, a user-defined op, a
                              derived datatype on every rank
  floor: Barrier              one meeting of the ranks (the drop-in's is in
                              shared memory): what an agreement costs; an
                              agreed derived Bcast's floor is MPI's Bcast
                              and this meeting (printed after the table)
"""
import argparse
import os
import statistics
import time

import numpy as np
from mpi4py import MPI

import shmtopo

world = MPI.COMM_WORLD
rank, n = world.Get_rank(), world.Get_size()


def timed(run, count):
    """Seconds per operation of run(count) (every rank starts together; the slowest rank's time)."""
    world.Barrier()
    t0 = time.perf_counter()
    run(count)
    elapsed = time.perf_counter() - t0
    return world.allreduce(elapsed, op=MPI.MAX) / count


def making(comm, make):
    def run(count):
        kept = [make(comm) for _ in range(count)]
        run.kept = kept
    return run


def dup_free(comm):
    def run(count):
        for _ in range(count):
            comm.Dup().Free()
    return run


def dup_call_free(comm):
    a, b = np.ones(4), np.zeros(4)

    def run(count):
        for _ in range(count):
            c = comm.Dup()
            c.Allreduce(a, b)
            c.Free()
    return run


def calling(comm, call):
    def run(count):
        for _ in range(count):
            call(comm)
    return run


def rows(args, acomm):
    user_sum = MPI.Op.Create(lambda a, b, t: None, commute=True)
    pair = MPI.DOUBLE.Create_contiguous(2).Commit()
    ld = np.ones(4, np.longdouble)
    ldc = np.ones(1, np.clongdouble)
    ld_out = np.zeros(4, np.longdouble)
    d4, d4_out, dn_out = np.ones(4), np.zeros(4), np.zeros(4 * n)
    made = [
        ("Dup", lambda c: c.Dup()),
        ("Split", lambda c: c.Split(0, rank)),
        ("Create_cart", lambda c: c.Create_cart([n])),
    ]
    for name, make in made:
        yield name, args.comms, lambda c, make=make: making(c, make), True
    yield "Dup + Free", args.comms, dup_free, False
    yield "Dup + Allreduce + Free", args.comms, dup_call_free, False
    calls = [
        ("Bcast long double complex", lambda c: c.Bcast(ldc, 0)),
        ("Bcast [long double, LONG_DOUBLE]", lambda c: c.Bcast([ld, MPI.LONG_DOUBLE], 0)),
        ("Allreduce user op", lambda c: c.Allreduce(d4, d4_out, user_sum)),
        ("Bcast [buf, 2, derived]", lambda c: c.Bcast([d4, 2, pair], 0)),
        ("Allgather [buf, 2, derived]", lambda c: c.Allgather([d4, 2, pair], [dn_out, 2, pair])),
    ]
    for name, call in calls:
        yield f"{name} (delegated)", args.calls, lambda c, call=call: calling(c, call), False
    # one meeting of the ranks, as an agreement is: MPI's Barrier beside the drop-in's (shared memory)
    yield "floor: Barrier", args.calls, lambda c: calling(c, lambda c: c.Barrier()), False


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--comms", type=int, default=200, help="comms made per round")
    parser.add_argument("--calls", type=int, default=2000, help="calls per round")
    args = parser.parse_args()
    acomm = shmtopo.accelerate(world)
    plain = world.Dup()
    if rank == 0:
        print(f"load average {os.getloadavg()[0]:.2f}, {n} ranks, {MPI.Get_library_version().splitlines()[0]}")
        print(f"{'operation':44s} {'mpi4py (us)':>22s} {'drop-in (us)':>22s} {'ratio':>6s}")
    medians = {}
    for name, count, make_run, kept in rows(args, acomm):
        figures = {"plain": [], "accel": []}
        for _ in range(args.rounds):
            for way, comm in (("plain", plain), ("accel", acomm)):
                run = make_run(comm)
                calling(comm, lambda c: None)(0)
                figures[way].append(timed(run, count) * 1e6)
                if kept:
                    for c in run.kept:
                        c.Free()
        if rank == 0:
            def cell(v):
                return f"{statistics.median(v):7.2f} ({min(v):.2f}-{max(v):.2f})"
            ratio = statistics.median(figures["accel"]) / statistics.median(figures["plain"])
            medians[name] = (statistics.median(figures["plain"]), statistics.median(figures["accel"]))
            print(f"{name:44s} {cell(figures['plain']):>22s} {cell(figures['accel']):>22s} {ratio:6.2f}",
                  flush=True)
    stats = acomm.shm_stats()
    if rank == 0:
        bcast, meeting = medians["Bcast [buf, 2, derived] (delegated)"], medians["floor: Barrier"][1]
        print(f"an agreed derived Bcast's floor, MPI's Bcast and one meeting of the ranks (the drop-in's "
              f"Barrier): {bcast[0]:.2f} + {meeting:.2f} = {bcast[0] + meeting:.2f} us ({(bcast[0] + meeting) / bcast[0]:.2f}x "
              f"MPI's); measured {bcast[1]:.2f} us ({bcast[1] / bcast[0]:.2f}x)")
        print("drop-in's shm_stats:", stats)
    plain.Free()
    acomm.shm_free()


if __name__ == "__main__":
    main()
