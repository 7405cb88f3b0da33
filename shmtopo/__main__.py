"""``python -m shmtopo``: info, bench (under mpiexec), topo (under mpiexec)."""
from __future__ import annotations

import argparse
import os
import sys


def _mpi_library() -> str | None:
    try:
        from mpi4py import MPI
    except ImportError:
        return None
    return MPI.Get_library_version().strip().splitlines()[0]


def info(args: argparse.Namespace) -> None:
    """Versions, usable backends, fence default, CPUs and oversubscription."""
    import shmtopo
    from shmtopo._native import ffi, lib
    from shmtopo.errors import ShmtopoError, check

    print(f"shmtopo     {shmtopo.__version__}")
    print(f"hwloc       {ffi.string(lib.shmtopo_hwloc_version()).decode()}")
    print(f"MPI         {_mpi_library() or 'mpi4py not importable'}")
    for name in shmtopo.BACKENDS:
        number = ffi.new("int *")
        check(lib.shmtopo_backend_from_name(name.encode(), number))
        ok = lib.shmtopo_backend_probe(number[0]) == 0
        why = "" if ok else " (" + ffi.string(lib.shmtopo_last_error()).decode() + ")"
        print(f"backend     {name:6} {'usable' if ok else 'unusable'}{why}")
    cfg = ffi.new("shmtopo_config_t *")
    try:
        check(lib.shmtopo_config_read(cfg))
        print(f"default     backend {ffi.string(lib.shmtopo_backend_name(cfg.backend)).decode()}, "
              f"fence {ffi.string(lib.shmtopo_fence_alg_name(cfg.fence_alg)).decode()}")
    except ShmtopoError as exc:
        print(f"default     invalid environment: {exc}")
    print(f"cpus        {len(os.sched_getaffinity(0))} in this process's affinity mask")
    try:
        from mpi4py import MPI

        comm = shmtopo.Comm.from_mpi(MPI.COMM_WORLD)
    except ImportError:
        print("node        oversubscription unknown (no mpi4py)")
        return
    with comm:
        if comm.rank == 0:
            print(f"node        {comm.size} rank(s) on {comm.ncpus} CPU(s): "
                  f"{'oversubscribed' if comm.oversubscribed else 'not oversubscribed'}")


def bench(args: argparse.Namespace) -> None:
    from shmtopo.bench import run_collective_bench, run_fence_bench

    if args.collectives:
        run_collective_bench(seconds=args.seconds, max_bytes=args.max_bytes, plot=args.plot)
    else:
        run_fence_bench(seconds=args.seconds)


def topo(args: argparse.Namespace) -> None:
    from mpi4py import MPI

    import shmtopo

    with shmtopo.Comm.from_mpi(MPI.COMM_WORLD) as comm:
        topo_report(comm)


def topo_report(comm) -> None:
    """Collective over ``comm`` (one node): rank 0 prints the object counts,
    each rank's source and the time of share_topology against a local load."""
    import socket
    import time

    import shmtopo
    from shmtopo.topology import hwloc_version

    t0 = time.perf_counter()
    with shmtopo.share_topology(comm) as topo:
        t_share = time.perf_counter() - t0
        counts = topo.counts()
        row = (comm.rank, os.getpid(), topo.source, topo.address, t_share)
    t0 = time.perf_counter()
    shmtopo.Topology.load().close()
    rows = comm.mpi.allgather(row + (time.perf_counter() - t0,))
    if comm.rank != 0:
        return
    print(f"node {socket.gethostname()}: {comm.size} rank(s), hwloc {hwloc_version()}")
    print("  " + "  ".join(f"{name} {n}" for name, n in counts.items()))
    print(f"  {'rank':>4} {'pid':>8} {'source':>6} {'address':>16} {'share ms':>9} {'load ms':>9} {'ratio':>7}")
    for rank, pid, source, address, ts, tl in rows:
        where = f"{address:#x}" if address else "-"
        print(f"  {rank:>4} {pid:>8} {source:>6} {where:>16} {ts * 1e3:>9.3f} {tl * 1e3:>9.3f} {tl / ts:>6.1f}x")


def main(argv: list[str] | None = None) -> None:
    flags = sys.argv[1:] if argv is None else argv
    if flags and set(flags) <= {"--cflags", "--libs"}:  # for C programs: see shmtopo/capi.py
        from shmtopo.capi import compile_flags

        try:
            print(compile_flags(cflags="--cflags" in flags, libs="--libs" in flags))
        except FileNotFoundError as exc:
            sys.exit(f"python -m shmtopo: {exc}")
        return
    parser = argparse.ArgumentParser(prog="python -m shmtopo", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="versions, backends, defaults, CPUs").set_defaults(fn=info)
    p = sub.add_parser("bench", help="fence latency against mpi4py (run under mpiexec)")
    p.add_argument("--seconds", type=float, default=0.3, help="time per measurement (default 0.3)")
    p.add_argument("--collectives", action="store_true",
                   help="allreduce, bcast, reduce, allgather from 8 B up, instead of fences")
    p.add_argument("--max-bytes", type=int, default=16 << 20, help="largest message (default 16 MiB)")
    p.add_argument("--plot", metavar="PNG", help="with --collectives: write a latency plot (needs matplotlib)")
    p.set_defaults(fn=bench)
    sub.add_parser("topo", help="share the hwloc topology (run under mpiexec)").set_defaults(fn=topo)
    args = parser.parse_args(argv)
    args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
