"""shmtopo.share against its alternatives, side by side in one run: node
memory and time of sharing one large array, and the cost of a small share.

    mpiexec -n 4 python benchmarks/share.py [--gib 1] [--repeat 5] [--only memory,time,small]

memory: the node's memory after every rank holds the root's array, less
    before (the root's own array already made): /proc/meminfo's Shmem plus
    the anonymous memory (smaps_rollup's Anonymous) of every rank, for
    shmtopo.share, mpi4py's Win.Allocate_shared recipe, pshmem's MPIShared
    (where installed), MPI.COMM_WORLD.bcast (mpi4py's pickled bcast) and
    Bcast into a buffer of each rank's own, and for shmtopo.share of a dict
    of three arrays of the same size together and small values; with the
    most any one rank's private memory grew; one run each.
time: seconds for the same ways (but the pickled bcast), a numpy copy of
    the array into new memory on one rank (a memcpy, the floor) and the
    node's shared pages alone (each rank faulting its part in), each
    from nothing to every rank holding the data (the Allocate_shared recipe
    and pshmem include their communicator splits); the median of --repeat
    runs and the range.
small: microseconds per call of a 1 KiB share, of comm.barrier(), of
    comm.bcast of a share's header (the one step of a small share), of the
    least any share of 1 KiB does (a bcast of the 1 KiB in place; numpy
    making one read-only array over 1 KiB, on each rank alone) and of
    mpi4py's bcast of the same 1 KiB array (medians over 7 runs of many
    calls each).

Ratios, not absolute times: this machine is shared, and its speed swings.
"""
import argparse
import gc
import os
import statistics
import time

import numpy as np
from mpi4py import MPI

import shmtopo

world = MPI.COMM_WORLD
GIB = 1 << 30


def meminfo(field: str) -> int:
    for line in open("/proc/meminfo"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def private() -> int:
    """This rank's anonymous (private) memory: smaps_rollup's Anonymous.
    Not Private_*: a page of a shared segment that only one rank has
    touched yet counts as private there, and is already in Shmem."""
    for line in open("/proc/self/smaps_rollup"):
        if line.startswith("Anonymous:"):
            return int(line.split()[1]) * 1024
    raise KeyError("Anonymous")


def node_memory() -> tuple[int, np.ndarray]:
    """Shmem plus every rank's private memory, as seen by all ranks at once,
    and each rank's private memory."""
    world.Barrier()
    mine = np.array([private()], np.int64)
    every = np.empty(world.size, np.int64)
    world.Allgather(mine, every)
    return meminfo("Shmem") + int(every.sum()), every


def _allocate_shared(source, nbytes: int):
    """mpi4py's recipe: a shared window on the node's communicator, rank 0's
    part the whole array, every rank viewing it (one node: no leaders'
    Bcast here), a barrier; the window freed collectively at the end."""
    node = world.Split_type(MPI.COMM_TYPE_SHARED)
    win = MPI.Win.Allocate_shared(nbytes if node.rank == 0 else 0, 8, comm=node)
    buf, _ = win.Shared_query(0)
    table = np.ndarray(buffer=buf, dtype=np.float64, shape=(nbytes // 8,))
    if world.rank == 0:
        table[:] = source
    node.Barrier()

    def free():
        win.Free()
        node.Free()
    return table, free


def _pshmem(source, nbytes: int):
    from pshmem import MPIShared

    shm = MPIShared((nbytes // 8,), np.float64, world)
    shm.set(source if world.rank == 0 else None, fromrank=0)
    return shm.data, shm.close


def _bcast_own(source, nbytes: int):
    buf = source if world.rank == 0 else np.empty(nbytes // 8)
    world.Bcast(buf)
    return buf, None


WAYS = {
    "shmtopo.share": lambda source, nbytes: (shmtopo.share(source), None),
    "Win.Allocate_shared": _allocate_shared,
    "pshmem MPIShared": _pshmem,
    "COMM_WORLD.bcast": lambda source, nbytes: (world.bcast(source), None),
    "Bcast (own buffers)": _bcast_own,
}


def available(name: str) -> bool:
    if name.startswith("pshmem"):
        try:
            import pshmem  # noqa: F401
        except ImportError:
            return False
    return True


def _objects(nbytes: int):
    """The root's dict of three arrays (nbytes together) and small Python
    values, as a program's model or table, shared whole."""
    third = nbytes // 24
    return {"weights": np.ones(third), "bias": np.full(third, 2.0), "index": np.arange(third, dtype=np.int64),
            "name": "model", "shape": (3, third), "scale": 0.5}


def measure_memory(nbytes: int) -> None:
    source = np.ones(nbytes // 8) if world.rank == 0 else None
    objects = _objects(nbytes) if world.rank == 0 else None
    ways = dict(WAYS)
    ways["shmtopo.share of a dict"] = lambda source, nbytes: (shmtopo.share(objects)["weights"], None)
    rows = []
    for name, way in ways.items():
        if not available(name):
            continue
        gc.collect()
        before, private_before = node_memory()
        got, free = way(source, nbytes)
        after, private_after = node_memory()
        assert got[-1] == 1.0
        del got
        if free is not None:
            free()
        gc.collect()
        world.Barrier()
        rows.append((name, (after - before) / GIB, int((private_after - private_before).max()) / (1 << 20)))
    if world.rank == 0:
        print(f"\nnode memory for {nbytes / GIB:g} GiB held by each of {world.size} ranks "
              f"(the root's own data excluded), and the most one rank's private memory grew:")
        for name, gib, mib in rows:
            print(f"  {name:24s} +{gib:6.2f} GiB  +{mib:8.1f} MiB private")


def idle_barrier() -> None:
    """A barrier whose waiting ranks sleep instead of polling: they take no
    CPU from a rank still working (here, with more ranks than cores)."""
    request = world.Ibarrier()
    while not request.Test():
        time.sleep(0.0005)


def timed(fn, repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        gc.collect()
        world.Barrier()
        start = time.perf_counter()
        out = fn()
        idle_barrier()
        times.append(time.perf_counter() - start)
        if isinstance(out, tuple) and out[1] is not None:
            out[1]()
        del out
    return times


def _pages_alone(nbytes: int):
    """The node's shared pages for the data, each rank faulting its part in
    (as a share does, and every window): what sharing through node shared
    memory cannot go below, whatever it copies."""
    comm = shmtopo.anycomm.comm_of(None)
    win = comm.allocate(nbytes // world.size, contiguous=True)
    return win, win.free


def measure_time(nbytes: int, repeat: int) -> None:
    source = np.ones(nbytes // 8) if world.rank == 0 else None
    rows = {"numpy copy (memcpy)": timed(lambda: source.copy() if world.rank == 0 else None, repeat),
            "shared pages alone": timed(lambda: _pages_alone(nbytes), repeat)}
    for name, way in WAYS.items():
        if name != "COMM_WORLD.bcast" and available(name):
            rows[name] = timed(lambda: way(source, nbytes), repeat)
    if world.rank == 0:
        print(f"\ntime to give {world.size} ranks {nbytes / GIB:g} GiB (median of {repeat}, range):")
        base = statistics.median(rows["numpy copy (memcpy)"])
        bcast = statistics.median(rows["Bcast (own buffers)"])
        for name, t in rows.items():
            m = statistics.median(t)
            print(f"  {name:22s} {m:7.3f} s ({min(t):.3f}-{max(t):.3f})  {m / base:5.2f}x the memcpy, "
                  f"{m / bcast:5.2f}x Bcast")


def measure_small(calls: int) -> None:
    comm = shmtopo.anycomm.comm_of(None)
    x = np.arange(128, dtype=np.float64)  # 1 KiB

    def per_call(fn) -> float:
        world.Barrier()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        return (time.perf_counter() - start) / calls * 1e6
    header = np.zeros(shmtopo.sharing.HEADER_WORDS, np.uint64)
    data = x.copy()
    readonly = memoryview(data).toreadonly()
    rows = {"shmtopo.share of 1 KiB": [], "comm.barrier()": [], "comm.bcast of a header": [],
            "comm.bcast of 1 KiB": [], "a read-only array": [], "COMM_WORLD.bcast of 1 KiB": []}
    for _ in range(7):
        rows["shmtopo.share of 1 KiB"].append(per_call(lambda: comm.share(x if world.rank == 0 else None)))
        rows["comm.barrier()"].append(per_call(comm.barrier))
        rows["comm.bcast of a header"].append(per_call(lambda: comm.bcast(header, 0, out=header)))
        rows["comm.bcast of 1 KiB"].append(per_call(lambda: comm.bcast(data, 0, out=data)))
        rows["a read-only array"].append(per_call(lambda: np.frombuffer(readonly, np.float64)))
        rows["COMM_WORLD.bcast of 1 KiB"].append(per_call(lambda: world.bcast(x if world.rank == 0 else None)))
    if world.rank == 0:
        print(f"\nsmall calls at {world.size} ranks, us per call (median of 7 runs of {calls}, range):")
        base = statistics.median(rows["comm.barrier()"])
        for name, t in rows.items():
            m = statistics.median(t)
            print(f"  {name:26s} {m:8.2f} ({min(t):.2f}-{max(t):.2f})  {m / base:6.2f}x the barrier")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--only", default="memory,time,small")
    args = parser.parse_args()
    nbytes = int(args.gib * GIB) // 8 * 8
    if world.rank == 0:
        print(f"{world.size} ranks, load average {os.getloadavg()[0]:.2f}, shmtopo {shmtopo.__version__}")
    parts = args.only.split(",")
    if "memory" in parts:
        measure_memory(nbytes)
    if "time" in parts:
        measure_time(nbytes, args.repeat)
    if "small" in parts:
        measure_small(args.calls)


if __name__ == "__main__":
    main()
