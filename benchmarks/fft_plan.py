"""A real library's transforms, unchanged: mpi4py-fft's PFFT of a 3-D complex
array, made once and run forward and back many times (as a simulation does),
as it is and with the one line that accelerates the world comm, side by side.
Its transposes are Alltoallw of subarray datatypes on its own Cartesian comms.

    python benchmarks/fft_plan.py [-n RANKS] [--size N...] [--loops L] [--repeat K]

mpi4py-fft is installed as tests/library_suites.py installs it (it builds
with FFTW's headers: ./dev clients installs libfftw3-dev). Each size runs K
times each way, interleaved; a row gives the median seconds per forward and
backward transform (min-max) and their ratio, and how many Alltoallw calls
ran in shared memory.
"""
import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ONE_LINE = "import shmtopo; MPI.COMM_WORLD = shmtopo.accelerate(MPI.COMM_WORLD)"

PROGRAM = """
import sys, time
import numpy as np
from mpi4py import MPI
{accelerate}
from mpi4py_fft import PFFT, newDistArray
n, loops = int(sys.argv[1]), int(sys.argv[2])
fft = PFFT(MPI.COMM_WORLD, (n, n, n), dtype=np.complex128)
u = newDistArray(fft, False)
u[:] = np.random.default_rng(MPI.COMM_WORLD.rank).random(u.shape)
uh = newDistArray(fft, True)
for _ in range(10):  # past the drop-in's set-up (a derived comm's first 8 Alltoallw are MPI's)
    fft.forward(u, uh); fft.backward(uh, u)
MPI.COMM_WORLD.Barrier()
start = time.perf_counter()
for _ in range(loops):
    fft.forward(u, uh); fft.backward(uh, u)
seconds = MPI.COMM_WORLD.allreduce((time.perf_counter() - start) / loops, op=MPI.MAX)
counts = [0, 0]
for sub in fft.subcomm:
    for i, k in enumerate(getattr(sub, "shm_stats", dict)().get("Alltoallw", (0, 0))):
        counts[i] += k
if MPI.COMM_WORLD.rank == 0:
    print("RESULT", seconds, *counts)
"""


def run(n: int, size: int, loops: int, accelerated: bool, site: Path) -> tuple[float, int, int]:
    code = PROGRAM.format(accelerate=ONE_LINE if accelerated else "")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site)] + ([os.environ["PYTHONPATH"]]
                                                                     if os.environ.get("PYTHONPATH") else [])))
    mpiexec = os.environ.get("SHMTOPO_MPIEXEC", "mpiexec").split()
    proc = subprocess.run([*mpiexec, "-n", str(n), sys.executable, "-c", code, str(size), str(loops)],
                          capture_output=True, text=True, timeout=900, env=env)
    line = [w for w in proc.stdout.splitlines() if w.startswith("RESULT")]
    if proc.returncode != 0 or not line:
        sys.exit(f"the transform failed at -n {n}, size {size}:\n{proc.stdout}\n{proc.stderr[-5000:]}")
    words = line[0].split()
    return float(words[1]), int(words[2]), int(words[3])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", type=int, default=2)
    p.add_argument("--size", type=int, nargs="+", default=[16, 32, 64, 128])
    p.add_argument("--loops", type=int, default=50)
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    sys.path.insert(0, str(HERE.parent / "tests"))
    from library_suites import LIBRARIES, prepare

    _, site = prepare(LIBRARIES["mpi4py-fft"])
    print(f"# load average {os.getloadavg()[0]:.2f}; {args.n} ranks; seconds per forward+backward, "
          f"median (min-max) of {args.repeat}")
    print(f"{'N^3':>6} {'plain ms':>22} {'accelerated ms':>22} {'ratio':>6} {'Alltoallw shm/MPI':>18}")
    for size in args.size:
        times: dict[bool, list[float]] = {False: [], True: []}
        counts = (0, 0)
        for _ in range(args.repeat):
            for accelerated in (False, True):
                seconds, shm, mpi = run(args.n, size, args.loops, accelerated, site)
                times[accelerated].append(seconds)
                if accelerated:
                    counts = (shm, mpi)
        med = {a: statistics.median(t) for a, t in times.items()}
        cells = [f"{med[a] * 1e3:.3f} ({min(times[a]) * 1e3:.3f}-{max(times[a]) * 1e3:.3f})" for a in (False, True)]
        print(f"{size:>6} {cells[0]:>22} {cells[1]:>22} {med[True] / med[False]:>6.2f} "
              f"{counts[0]:>9}/{counts[1]}", flush=True)


if __name__ == "__main__":
    main()
