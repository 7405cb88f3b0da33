"""python -m shmtopo: what this machine offers shmtopo, benchmarks, the floor
model at scale on paper, the shared
topology, the compiler flags of C programs written for the KUPL API, and a
launcher for jobs without MPI (run -n N script.py).

Run info, bench and topo under mpiexec to see a whole node (mpi4py needed:
pip install 'shmtopo[mpi]'; as root, Open MPI also wants
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1, and --oversubscribe
for more ranks than cores).
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Callable


def _need(module: str, extra: str, what: str) -> Any:
    """Import an optional dependency, or exit saying which extra installs it."""
    try:
        return __import__(module, fromlist=["_"])
    except ImportError:
        sys.exit(f"python -m shmtopo {what} needs {module.split('.')[0]}: pip install 'shmtopo[{extra}]'")


def _hwloc_file() -> str:
    """The libhwloc file this process has mapped."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split(maxsplit=5)[5:]
            if path and "/libhwloc.so" in path[0]:
                return os.path.realpath(path[0].strip())
    return "file unknown"


def _info_lines(comm: Any) -> list[tuple[str, str]]:
    """(field, value) rows describing this rank's view of the machine."""
    import shmtopo
    from shmtopo._native import ffi, lib
    from shmtopo.errors import ShmtopoError, check

    run, built = ffi.new("char[32]"), ffi.new("char[32]")
    check(lib.shmtopo_hwloc_api_versions(run, built, 32))
    rows = [("shmtopo", shmtopo.__version__),
            ("hwloc", f"{ffi.string(lib.shmtopo_hwloc_version()).decode()} "
                      f"(API {ffi.string(run).decode()}, built against API {ffi.string(built).decode()})"),
            ("libhwloc", f"{ffi.string(lib.shmtopo_hwloc_origin()).decode()}: {_hwloc_file()}")]
    try:
        from .bench import mpi_library

        rows.append(("MPI", mpi_library()))
    except ImportError:
        rows.append(("MPI", "mpi4py not installed (pip install 'shmtopo[mpi]')"))
    for name in shmtopo.BACKENDS:
        number = ffi.new("int *")
        check(lib.shmtopo_backend_from_name(name.encode(), number))
        ok = lib.shmtopo_backend_probe(number[0]) == 0
        why = "" if ok else " (" + ffi.string(lib.shmtopo_last_error()).decode() + ")"
        rows.append((f"backend {name}", "usable" if ok else "unusable" + why))
    cfg = ffi.new("shmtopo_config_t *")
    try:
        check(lib.shmtopo_config_read(cfg))
        rows.append(("default", f"backend {ffi.string(lib.shmtopo_backend_name(cfg.backend)).decode()}, "
                                f"fence {ffi.string(lib.shmtopo_fence_alg_name(cfg.fence_alg)).decode()}"))
    except ShmtopoError as exc:
        rows.append(("default", f"invalid environment: {exc}"))
    rows.append(("cpus", f"{len(os.sched_getaffinity(0))} in this process's affinity mask"))
    if comm is not None:
        rows.append(("node", f"{comm.size} rank(s) on {comm.ncpus} CPU(s): "
                             f"{'oversubscribed' if comm.oversubscribed else 'not oversubscribed'}"))
        rows.append(("single copy", comm.single_copy or "off: large arrays go through the scratch buffers"))
        rows.append(("run ahead", "on: small bcast and reduce wait only for the ranks they need"
                     if comm.runs_ahead else "off: every call meets every rank (SHMTOPO_RUN_AHEAD=1 to turn on)"))
        from .coll.levels import describe

        rows.append(("levels", describe(comm)))  # collective: every rank builds the same
    return rows


def info(args: argparse.Namespace) -> None:
    """Versions, usable backends, defaults, CPUs. Under mpiexec rank 0
    prints each line once, and a line per rank only where ranks differ."""
    try:
        from mpi4py import MPI
    except ImportError:
        for field, value in _info_lines(None):
            print(f"{field:<16}{value}")
        return
    import shmtopo

    with shmtopo.Comm.from_mpi(MPI.COMM_WORLD) as comm:
        everyone = MPI.COMM_WORLD.gather(_info_lines(comm), root=0)
    if everyone is None:  # ranks other than 0
        return
    for i, (field, value) in enumerate(everyone[0]):
        values = [r[i][1] if i < len(r) else "" for r in everyone]
        if len(set(values)) == 1:
            print(f"{field:<16}{value}")
        else:
            for rank, v in enumerate(values):
                print(f"{field:<16}rank {rank}: {v}")


def bench(args: argparse.Namespace) -> None:
    _need("mpi4py.MPI", "mpi", "bench")
    if args.plot and not args.collectives:
        sys.exit("python -m shmtopo bench: --plot needs --collectives")
    if args.seconds is None:
        args.seconds = 0.1 if args.collectives or args.windows else 0.02 if args.floor else 0.3
    if args.plot:
        _need("matplotlib", "plot", "bench --plot")  # before the run, not after it
    from shmtopo.bench import run_collective_bench, run_fence_bench, run_floor_bench, run_window_bench

    if args.windows:
        run_window_bench(seconds=args.seconds, repeats=args.repeats)
    elif args.collectives:
        run_collective_bench(seconds=args.seconds, max_bytes=args.max_bytes, plot=args.plot,
                             repeats=args.repeats)
    elif args.floor:
        run_floor_bench(seconds=args.seconds, repeats=args.repeats, max_bytes=args.max_bytes)
    else:
        run_fence_bench(seconds=args.seconds, repeats=args.repeats)


def scaling(args: argparse.Namespace) -> None:
    if args.plot:
        _need("matplotlib", "plot", "scaling --plot")
    from shmtopo import scale_model

    predictions = scale_model.predict(chunk=args.chunk)
    print(scale_model.report(predictions))
    if args.plot:
        smaller = scale_model.WHAT_IF_CHUNK
        what_if = (f"levels, chain in {smaller >> 10} KiB chunks", scale_model.predict(chunk=smaller))
        scale_model.plot(predictions, args.plot, what_if=None if args.chunk == smaller else what_if)
        print(f"plot: {args.plot}")


def _repeats(text: str) -> int:
    n = int(text)
    if n < 5:
        raise argparse.ArgumentTypeError(f"at least 5 repetitions (a median of fewer proves little), not {n}")
    return n


def topo(args: argparse.Namespace) -> None:
    MPI = _need("mpi4py.MPI", "mpi", "topo")
    import shmtopo

    with shmtopo.Comm.from_mpi(MPI.COMM_WORLD) as comm:
        topo_report(comm)


def topo_report(comm: Any) -> None:
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


def c_flags(args: argparse.Namespace) -> None:
    from shmtopo.capi import compile_flags

    try:
        print(compile_flags(cflags=args.cflags, libs=args.libs))
    except FileNotFoundError as exc:
        sys.exit(f"python -m shmtopo: {exc}")


RUN_OPTIONS_WITH_VALUES = ("-n", "--np", "--bind")


def split_run_arguments(argv: list[str]) -> tuple[list[str], list[str]]:
    """``run``'s own options, and the program with its arguments: from the
    first word that is not an option of run (the script), or from -m
    (python's own spelling), everything is the program's."""
    i = 0
    while i < len(argv):
        word = argv[i]
        if word == "-m" or not word.startswith("-"):
            break
        i += 2 if word in RUN_OPTIONS_WITH_VALUES else 1
    return argv[:i], argv[i:]


def run(args: argparse.Namespace, p: argparse.ArgumentParser) -> None:
    """python -m shmtopo run: the launcher (shmtopo.launch)."""
    from shmtopo.errors import ShmtopoValueError
    from shmtopo.launch import run as run_job

    command = args.program
    if not command or command == ["-m"]:
        p.error("name a Python script (or -m module) to run")
    if command[0] != "-m" and not os.path.isfile(command[0]):
        p.error(f"no such script: {command[0]}")
    try:
        sys.exit(run_job(args.n, command, bind=args.bind, tag_output=args.tag_output,
                         keep_going=args.keep_going))
    except ShmtopoValueError as exc:
        p.error(str(exc))


def _whole(what: str) -> Callable[[str], int]:
    """An argparse type: a whole number >= 1, else "`what` must be ..."."""
    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            n = 0
        if n < 1:
            raise argparse.ArgumentTypeError(f"{what} must be a whole number >= 1, not {text!r}")
        return n
    return parse


def parser() -> argparse.ArgumentParser:
    from shmtopo.launch import BIND_CHOICES

    p = argparse.ArgumentParser(prog="python -m shmtopo", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cflags", action="store_true",
                   help="print the compiler flags of C programs using kupl.h / kpccl.h")
    p.add_argument("--libs", action="store_true", help="print the linker flags for libshmtopo.so")
    sub = p.add_subparsers(dest="command")
    sub.add_parser("info", help="versions, backends, defaults, CPUs (under mpiexec: the whole node)"
                   ).set_defaults(fn=info)
    b = sub.add_parser("bench", help="fences (or --collectives, --floor) against mpi4py and the hardware "
                       "floor; run under mpiexec")
    b.add_argument("--seconds", type=float, default=None,
                   help="time of one repetition of one row (default 0.3 for fences, 0.1 for --collectives, "
                        "0.02 for --floor; floor probes take at most 0.02)")
    b.add_argument("--repeats", type=_repeats, default=5,
                   help="repetitions per figure, interleaved; the median and min-max are printed (default 5)")
    mode = b.add_mutually_exclusive_group()
    mode.add_argument("--collectives", action="store_true",
                      help="allreduce, bcast, reduce, allgather from 8 B up (after the floor), instead of fences")
    mode.add_argument("--windows", action="store_true",
                      help="MPI shared windows: shmtopo.accelerate(win)'s Fence, locks, atomics, Put and Get "
                           "against MPI's own window")
    mode.add_argument("--floor", action="store_true",
                      help="only the hardware floor: cache-line round trip, copies across cores and local, the "
                           "reduction kernel, and the floor per operation and size")
    b.add_argument("--max-bytes", type=int, default=16 << 20,
                   help="largest message (default 16 MiB; the floor's copies stop at 8 MiB)")
    b.add_argument("--plot", metavar="PNG",
                   help="with --collectives: write a latency plot (needs matplotlib: pip install 'shmtopo[plot]')")
    b.set_defaults(fn=bench)
    from shmtopo.coll.levels import CHUNK

    sc = sub.add_parser("scaling", help="the floor model at 8-128 ranks on the topologies of big nodes (2-socket "
                        "EPYC, Kunpeng 920, KNL), levels against flat, on paper: no MPI, nothing measured")
    sc.add_argument("--plot", metavar="PNG", help="write the predictions at 1 MiB per rank as a plot (needs "
                    "matplotlib: pip install 'shmtopo[plot]')")
    sc.add_argument("--chunk", type=_whole("a size in bytes"), default=CHUNK,
                    help=f"price the levelled reduce chain with chunks of this many bytes (the code's: {CHUNK})")
    sc.set_defaults(fn=scaling)
    sub.add_parser("topo", help="share the hwloc topology and time it against a load; run under mpiexec"
                   ).set_defaults(fn=topo)
    r = sub.add_parser("run", help="run a Python program as N ranks of one job on this node, without MPI "
                       "(inside, shmtopo.Comm.from_env() joins it)")
    r.add_argument("-n", "--np", dest="n", type=_whole("the number of ranks"), required=True, help="number of ranks")
    r.add_argument("--bind", choices=BIND_CHOICES, default="none",
                   help="bind each rank to a core, or to the NUMA nodes in turn (default: none)")
    r.add_argument("--tag-output", action="store_true", help="prefix every line a rank prints with [rank]")
    r.add_argument("--keep-going", action="store_true",
                   help="a rank that fails does not end the others, which may carry on with comm.shrink() "
                        "(the job's status is still the first failure's)")
    r.add_argument("program", nargs="*", metavar="script.py [args ...] | -m module [args ...]",
                   help="the program and its arguments, as python takes them")
    r.set_defaults(fn=lambda args: run(args, r))
    return p


def main(argv: list[str] | None = None) -> None:
    p = parser()
    argv = sys.argv[1:] if argv is None else argv
    program: list[str] | None = None
    if argv[:1] == ["run"]:  # the program's own options are not run's
        options, program = split_run_arguments(argv[1:])
        argv = ["run", *options]
    args = p.parse_args(argv)
    if program is not None:
        args.program = program
    if args.cflags or args.libs:
        if args.command:
            p.error("--cflags/--libs take no command")
        c_flags(args)
    elif not args.command:
        p.print_help()
        sys.exit(2)
    else:
        args.fn(args)


if __name__ == "__main__":
    main()
