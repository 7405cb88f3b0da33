"""Fence benchmark: shmtopo against mpi4py in the same run, as ratios.

Run under mpiexec: ``mpiexec -n 2 python -m shmtopo bench``. Every figure is
the best of three timed runs of the slowest rank's mean time per operation.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

if TYPE_CHECKING:
    from .comm import Comm

# (operation, bytes, mpi4py µs, shmtopo µs)
CollectiveRow = tuple[str, int, float, float]


def _time_per_op(mpi: Any, body: Callable[[int], None], seconds: float) -> float:
    """Seconds per operation of body(n), which performs n operations."""
    from mpi4py import MPI

    n = 16
    while True:  # calibrate so that one run takes about `seconds`
        mpi.Barrier()
        t0 = time.perf_counter()
        body(n)
        elapsed = mpi.allreduce(time.perf_counter() - t0, op=MPI.MAX)
        if elapsed > seconds / 8:
            break
        n *= 4
    n = max(1, int(n * seconds / elapsed))
    best = float("inf")
    for _ in range(3):
        mpi.Barrier()
        t0 = time.perf_counter()
        body(n)
        best = min(best, mpi.allreduce(time.perf_counter() - t0, op=MPI.MAX) / n)
    return best


def _loop(fn: Callable[[], object]) -> Callable[[int], None]:
    def body(n: int) -> None:
        for _ in range(n):
            fn()
    return body


def run_fence_bench(seconds: float = 0.3) -> list[tuple[str, float, str]]:
    """Print (on rank 0) and return rows of (operation, µs per op, baseline)."""
    from mpi4py import MPI

    import shmtopo

    world = MPI.COMM_WORLD
    comm = shmtopo.Comm.from_mpi(world)
    mpi = comm.mpi
    rank, size = comm.rank, comm.size
    partner = rank ^ 1 if (rank ^ 1) < size else None
    rows: list[tuple[str, float, str]] = []

    def measure(name: str, body: Callable[[int], None], baseline: str = "") -> None:
        rows.append((name, _time_per_op(mpi, body, seconds) * 1e6, baseline))

    measure("mpi4py Barrier()", _loop(mpi.Barrier))
    mpiwin = MPI.Win.Allocate_shared(8, 1, comm=mpi)
    mpiwin.Fence()
    measure("mpi4py Win.Fence() (Allocate_shared)", _loop(mpiwin.Fence))
    mpiwin.Fence()
    mpiwin.Free()
    empty = np.empty(0, np.uint8)
    pairs = size > 1  # with an odd size the last rank has no partner and idles
    idle = lambda n: None  # noqa: E731 - every rank must take part in each measurement
    if pairs:
        measure("mpi4py Sendrecv(0 B) with partner",
                _loop(lambda: mpi.Sendrecv(empty, partner, 0, empty, partner, 0)) if partner is not None else idle)

    for alg in ("linear", "rd", "dissemination"):
        with comm.allocate(64, fence=alg) as win:
            measure(f"shmtopo fence {alg}", _loop(win.fence), "mpi4py Win.Fence() (Allocate_shared)")
            measure(f"shmtopo fence {alg}, loop in C", win.fence_loop,
                    "mpi4py Win.Fence() (Allocate_shared)")
    with comm.allocate(64) as win:
        auto = win.fence_algorithm
        measure(f"shmtopo fence auto (= {auto})", _loop(win.fence), "mpi4py Win.Fence() (Allocate_shared)")
        if pairs:
            measure("shmtopo peer_fence with partner",
                    _loop(lambda: win.peer_fence(partner)) if partner is not None else idle,
                    "mpi4py Sendrecv(0 B) with partner")
            measure("shmtopo peer_fence, loop in C",
                    (lambda n: win.peer_fence_loop(partner, n)) if partner is not None else idle,
                    "mpi4py Sendrecv(0 B) with partner")

    if rank == 0:
        _print_table(rows, comm)
    comm.free()
    return rows


def _print_table(rows: list[tuple[str, float, str]], comm: Comm) -> None:
    from mpi4py import MPI

    import shmtopo

    times = {name: t for name, t, _ in rows}
    lib = MPI.Get_library_version().strip().splitlines()[0]
    print(f"\nshmtopo {shmtopo.__version__} fence benchmark: {comm.size} ranks on {comm.ncpus} CPUs"
          f"{' (oversubscribed)' if comm.oversubscribed else ''}; {lib}")
    print(f"{'operation':46} {'us/op':>9}  {'ratio':>6}  baseline")
    for name, t, baseline in rows:
        ratio = f"{t / times[baseline]:6.3g}" if baseline in times else ""
        print(f"{name:46} {t:9.3f}  {ratio:>6}  {baseline}")
    print("ratio < 1: shmtopo is faster. Python rows include the Python call, as mpi4py's do.",
          flush=True)


# 8 B ... 32 MiB in steps of 4 (cut at max_bytes), plus 1 MiB, a size the targets name
COLLECTIVE_SIZES = sorted({8 * 4**k for k in range(12)} | {1 << 20})
_ROW_ORDER = ["allreduce", "allreduce persistent", "allreduce in window", "bcast", "bcast in window",
              "reduce", "allgather", "allgather in window"]


def run_collective_bench(seconds: float = 0.1, max_bytes: int = 16 << 20,
                         plot: str | None = None) -> list[CollectiveRow]:
    """shmtopo's window collectives against mpi4py's in one run (float64
    data, preallocated outputs on both sides). Prints a table on rank 0 and,
    with `plot`, writes a PNG of latency against size."""
    from mpi4py import MPI

    import shmtopo

    world = MPI.COMM_WORLD
    comm = shmtopo.Comm.from_mpi(world)
    mpi = comm.mpi
    rows: list[CollectiveRow] = []
    sizes = [n for n in COLLECTIVE_SIZES if n <= max_bytes]
    is_root = comm.rank == 0
    # The in-window rows: every rank's array is its part of a window of the
    # comm; allreduce and bcast put the result there too (against mpi4py with
    # MPI.IN_PLACE on a private array), allgather into a private array.
    win = comm.allocate(shape=(max(sizes) // 8,), dtype=np.float64)
    for nbytes in sizes:
        count = max(1, nbytes // 8)
        a = np.full(count, comm.rank + 1.0)
        out = np.empty_like(a)
        gathered = np.empty((comm.size, count))
        private, shared = np.zeros(count), win.local[:count]
        shared[:] = 0.0  # sums in place stay 0: no overflow over many repetitions
        cases = {
            "allreduce": (lambda: mpi.Allreduce(a, out), lambda: comm.allreduce(a, out=out)),
            "bcast": (lambda: mpi.Bcast(out, root=0), lambda: comm.bcast(out, root=0, out=out)),
            "reduce": (lambda: mpi.Reduce(a, out, root=0),
                       lambda: comm.reduce(a, root=0, out=out if is_root else None)),
            "allgather": (lambda: mpi.Allgather(a, gathered), lambda: comm.allgather(a, out=gathered)),
            "allreduce in window": (lambda: mpi.Allreduce(MPI.IN_PLACE, private),
                                    lambda: comm.allreduce(shared, out=shared)),
            "bcast in window": (lambda: mpi.Bcast(private, root=0),
                                lambda: comm.bcast(shared, root=0, out=shared)),
            "allgather in window": (lambda: mpi.Allgather(a, gathered),
                                    lambda: comm.allgather(shared, out=gathered)),
        }
        for name, (mpi_fn, shm_fn) in cases.items():
            t_mpi = _time_per_op(mpi, _loop(mpi_fn), seconds) * 1e6
            t_shm = _time_per_op(mpi, _loop(shm_fn), seconds) * 1e6
            rows.append((name, nbytes, t_mpi, t_shm))
        with comm.allreduce_init(a, out) as req:
            t_mpi = next(t for op, n, t, _ in rows if op == "allreduce" and n == nbytes)
            rows.append(("allreduce persistent", nbytes, t_mpi,
                         _time_per_op(mpi, _loop(req.start), seconds) * 1e6))
    win.free()
    if comm.rank == 0:
        lib = MPI.Get_library_version().strip().splitlines()[0]
        print(f"\nshmtopo {shmtopo.__version__} collectives: {comm.size} ranks on {comm.ncpus} CPUs"
              f"{' (oversubscribed)' if comm.oversubscribed else ''}; {lib}")
        print(f"{'operation':22} {'bytes':>9} {'mpi4py us':>11} {'shmtopo us':>11} {'ratio':>7} {'GB/s (shm)':>10}")
        for name, nbytes, t_mpi, t_shm in sorted(rows, key=lambda r: (r[1], _ROW_ORDER.index(r[0]))):
            print(f"{name:22} {nbytes:9d} {t_mpi:11.2f} {t_shm:11.2f} {t_shm / t_mpi:7.2f} "
                  f"{nbytes / t_shm / 1e3:10.2f}")
        _print_targets(rows)
        print("ratio = shmtopo time / mpi4py time (< 1: shmtopo faster); persistent = allreduce_init + start();\n"
              "in window = the input is this rank's part of a shmtopo window (zero-copy path); allreduce and\n"
              "bcast there also receive in place, against mpi4py with MPI.IN_PLACE on a private array", flush=True)
        if plot:
            _plot(rows, plot, f"{comm.size} ranks, " + " ".join(lib.split(",")[0].split()))
    comm.free()
    return rows


# The design targets on 2 ranks: (operation, bytes, best ratio of times).
TARGETS = [("allreduce", 8, 0.5), ("allreduce", 1 << 20, 0.3), ("bcast", 8 << 20, 1 / 1.5)]


def _print_targets(rows: list[CollectiveRow]) -> None:
    """One line per target: the ratio of the plain call and of its variants."""
    times = {(op, n): (tm, ts) for op, n, tm, ts in rows}
    for op, nbytes, goal in TARGETS:
        found = [(variant, times[variant, nbytes]) for variant in _ROW_ORDER
                 if variant.startswith(op) and (variant, nbytes) in times]
        if not found:
            continue
        shown = ", ".join(f"{variant} {ts / tm:.2f}" + (f" ({tm / ts:.2f}x throughput)" if op == "bcast" else "")
                          for variant, (tm, ts) in found)
        print(f"target {op} {nbytes} B: ratio <= {goal:.2f}; measured: {shown}")


def _plot(rows: list[CollectiveRow], path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = ["allreduce", "bcast", "reduce", "allgather"]
    fig, axes = plt.subplots(1, 4, figsize=(16, 4), sharey=False)
    for ax, name in zip(axes, names):
        data = [(n, tm, ts) for op, n, tm, ts in rows if op == name]
        sizes = [d[0] for d in data]
        ax.loglog(sizes, [d[1] for d in data], "o-", label="mpi4py")
        ax.loglog(sizes, [d[2] for d in data], "s-", label="shmtopo")
        if name == "allreduce":
            pers = [ts for op, n, tm, ts in rows if op == "allreduce persistent"]
            ax.loglog(sizes, pers, "^--", label="shmtopo persistent")
        window = [(n, tm, ts) for op, n, tm, ts in rows if op == f"{name} in window"]
        if window and name != "allgather":  # allgather's baseline is the plain call above
            ax.loglog([w[0] for w in window], [w[1] for w in window], "o:", color="C0", alpha=0.5,
                      label="mpi4py IN_PLACE")
        if window:
            ax.loglog([w[0] for w in window], [w[2] for w in window], "D--", label="shmtopo in window")
        ax.legend(fontsize=7)
        ax.set_title(name)
        ax.set_xlabel("bytes")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("latency (us)")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
