"""share_topology against a local hwloc load, per rank: time and memory.

    mpiexec -n 4 python examples/bench_topology.py [--repeat 20]

Time: median over --repeat calls of share_topology(comm) (collective: the
leader's load is inside it), of the adopt call inside it, and of
Topology.load(). Memory: what each adds to this process while it is open and
every rank has walked all objects: malloc'd heap (glibc mallinfo2; hwloc's
objects of a local load live there) plus the pages of the shared mapping
(/proc/self/smaps: Rss, Pss, and Private = pages no other process maps).
Rank 0 prints one table; ratios are load / share.
"""
from __future__ import annotations

import argparse
import ctypes
import statistics
import time

from mpi4py import MPI

import shmtopo

_libc = ctypes.CDLL(None)


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def heap_kib() -> float:
    """Bytes malloc has handed out and not got back (glibc mallinfo2), in
    KiB: hwloc's objects live there, Python's small objects do not."""
    fn = _libc.mallinfo2
    fn.restype = _Mallinfo2
    info = fn()
    return (info.uordblks + info.hblkhd) / 1024


def mapping_kib(address: int | None) -> dict[str, int]:
    """Rss / Pss / Private KiB of the mapping starting at address (smaps)."""
    found: dict[str, int] = {"Rss": 0, "Pss": 0, "Private": 0}
    if not address:
        return found
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                inside = int(head.split("-")[0], 16) == address
            elif inside and head in ("Rss:", "Pss:", "Private_Clean:", "Private_Dirty:"):
                key = "Private" if head.startswith("Private") else head[:-1]
                found[key] += int(line.split()[1])
    return found


def walk(topo: shmtopo.Topology) -> int:
    """Read every object, as a user of the topology would."""
    total = 0
    for name in shmtopo.topology.TYPES:
        for obj in topo.objects(name):
            total += len(obj.cpuset) + obj.logical_index
    return total


def added(get, comm, mpi) -> tuple[dict[str, float], str]:
    """Memory added while the topology from get() is open and walked: heap
    (private by nature) and the shared mapping's pages (Rss, Pss, Private)."""
    mpi.Barrier()
    before = heap_kib()
    topo = get()
    walk(topo)
    mpi.Barrier()  # every rank maps the shared pages now
    heap = heap_kib() - before
    mapped = mapping_kib(topo.address)
    source = topo.source
    topo.close()
    mpi.Barrier()
    return {"heap": heap, **mapped, "private": heap + mapped["Private"]}, source


def median_time(get, repeat: int, mpi) -> tuple[float, float | None]:
    """Median seconds of get(), and of the adopt inside it (shmem only)."""
    times, adopts = [], []
    for _ in range(repeat):
        mpi.Barrier()
        t0 = time.perf_counter()
        topo = get()
        times.append(time.perf_counter() - t0)
        if topo.adopt_seconds is not None:
            adopts.append(topo.adopt_seconds)
        topo.close()
    return statistics.median(times), (statistics.median(adopts) if adopts else None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--source", default=None, help="force shmem, xml or local")
    args = parser.parse_args()

    with shmtopo.Comm.from_mpi(MPI.COMM_WORLD) as comm:
        mpi = comm.mpi
        share = lambda: shmtopo.share_topology(comm, source=args.source)  # noqa: E731
        load = shmtopo.Topology.load
        # Warm up (imports, first-call allocations), then memory in this
        # order: a load's freed heap would otherwise be reused by the
        # leader's load inside share_topology.
        share().close()
        load().close()
        mem_share, source = added(share, comm, mpi)
        mem_load, _ = added(load, comm, mpi)
        with share() as topo:
            length = topo.length
        t_share, t_adopt = median_time(share, args.repeat, mpi)
        t_load, _ = median_time(load, args.repeat, mpi)
        rows = mpi.gather((comm.rank, source, t_share, t_adopt, t_load, mem_share, mem_load), root=0)
        if comm.rank != 0:
            return
        print(f"share_topology vs Topology.load: {comm.size} rank(s) on {comm.ncpus} CPU(s), "
              f"hwloc {shmtopo.topology.hwloc_version()}, shmem file {length} bytes, median of {args.repeat}")
        print("memory: KiB added while open: heap (malloc in use) + shared mapping (Rss, Pss, Private)")
        print(f"{'rank':>4} {'source':>6} | {'share ms':>9} {'adopt us':>9} {'load ms':>9} {'load/share':>10} "
              f"{'load/adopt':>10} | {'map rss':>7} {'map pss':>7} | {'priv share':>10} {'priv load':>9} "
              f"{'load/share':>10}")
        for rank, src, ts, ta, tl, ms, ml in rows:
            adopt = f"{ta * 1e6:>9.1f}" if ta else f"{'-':>9}"
            per_adopt = f"{tl / ta:>9.0f}x" if ta else f"{'-':>10}"
            ratio = f"{ml['private'] / ms['private']:>9.1f}x" if ms["private"] > 0 else f"{'-':>10}"
            print(f"{rank:>4} {src:>6} | {ts * 1e3:>9.3f} {adopt} {tl * 1e3:>9.3f} {tl / ts:>9.2f}x "
                  f"{per_adopt} | {ms['Rss']:>7} {ms['Pss']:>7} | {ms['private']:>10.1f} {ml['private']:>9.1f} "
                  f"{ratio}")

if __name__ == "__main__":
    main()
