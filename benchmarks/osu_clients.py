"""mpi4py's OSU micro-benchmarks (demo/osu_*.py of its source distribution)
as they are and with the one line that accelerates the world comm, side by
side: ./dev clients runs this after the demos' results test has fetched them.

    python benchmarks/osu_clients.py [DEMODIR] [-n RANKS...] [--repeat K] [--only NAME...]

DEMODIR defaults to where the suite keeps the installed mpi4py's demo/
folder (.venv/cache/mpi4py-VERSION/demo).

Each benchmark runs K times each way, interleaved; a row gives the median
latency of each (min-max) and their ratio. The load average is printed
first: figures from a busy machine are not the library's.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ONE_LINE = "import shmtopo; MPI.COMM_WORLD = shmtopo.accelerate(MPI.COMM_WORLD)"
BENCHMARKS = ["barrier", "bcast", "allgather", "gather", "scatter", "alltoall", "alltoallv", "latency", "bw"]


def accelerated_copy(source: Path, folder: Path) -> Path:
    text = source.read_text()
    edited = re.sub(r"^from mpi4py import MPI$", lambda m: f"{m.group(0)}; {ONE_LINE}", text, count=1,
                    flags=re.MULTILINE)
    assert edited != text, f"{source} does not import MPI on a line of its own"
    target = folder / source.name
    target.write_text(edited)
    return target


def run(program: Path, n: int) -> dict[int, float]:
    """{size: figure} of one run (latency in us, or bandwidth in MB/s)."""
    mpiexec = os.environ.get("SHMTOPO_MPIEXEC", "mpiexec")
    proc = subprocess.run([mpiexec, "-n", str(n), sys.executable, str(program)], capture_output=True, text=True,
                          timeout=600)
    if proc.returncode != 0:
        sys.exit(f"{program} failed at -n {n}:\n{proc.stdout}\n{proc.stderr}")
    rows = {}
    for line in proc.stdout.splitlines():
        words = line.split()
        if len(words) == 2 and not line.startswith("#"):
            rows[int(words[0])] = float(words[1])
        elif len(words) == 1 and not line.startswith("#"):  # osu_barrier: one latency
            rows[0] = float(words[0])
    return rows


def main() -> None:
    p = argparse.ArgumentParser()
    import mpi4py
    default = Path(__file__).resolve().parent.parent / ".venv" / "cache" / f"mpi4py-{mpi4py.__version__}" / "demo"
    p.add_argument("demodir", type=Path, nargs="?", default=default)
    p.add_argument("-n", type=int, nargs="+", default=[2, 4])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--only", nargs="+", default=BENCHMARKS)
    args = p.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; median of {args.repeat} runs each way, "
          f"min-max", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only:
            plain = args.demodir / f"osu_{name}.py"
            fast = accelerated_copy(plain, Path(tmp))
            bandwidth = name in ("bw", "bibw")
            for n in args.n:
                if name in ("latency", "bw") and n != 2:
                    continue  # point to point: two ranks
                runs: dict[str, list[dict[int, float]]] = {"mpi4py": [], "shmtopo": []}
                for _ in range(args.repeat):
                    runs["mpi4py"].append(run(plain, n))
                    runs["shmtopo"].append(run(fast, n))
                unit = "MB/s" if bandwidth else "us"
                print(f"\nosu_{name} -n {n} ({unit}; ratio: accelerated/plain "
                      f"{'bandwidth' if bandwidth else 'time'})")
                print(f"{'size':>9} {'mpi4py':>24} {'accelerated':>24} {'ratio':>6}")
                for size in sorted(runs["mpi4py"][0]):
                    cells = []
                    for who in ("mpi4py", "shmtopo"):
                        values = [r[size] for r in runs[who]]
                        cells.append((statistics.median(values), min(values), max(values)))
                    ratio = cells[1][0] / cells[0][0] if cells[0][0] else float("nan")
                    print(f"{size:>9} " + " ".join(f"{m:>10.2f} ({lo:.2f}-{hi:.2f})".rjust(24) for m, lo, hi in cells)
                          + f" {ratio:>6.2f}", flush=True)


if __name__ == "__main__":
    main()
