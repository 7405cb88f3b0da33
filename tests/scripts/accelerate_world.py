"""A pytest plugin for another project's test suite run under mpiexec
(``python -m pytest -p accelerate_world``, with this folder on PYTHONPATH):
the one line that puts a program on shmtopo, made before the suite imports
anything. At the end rank 0 prints one line, "SHMTOPO accelerated A
delegated D": the accelerated world comm's collectives, all ranks together
(tests/test_mpi4py_suite.py reads it)."""
from typing import Any

import numpy as np
from mpi4py import MPI

import shmtopo

MPI.COMM_WORLD = shmtopo.accelerate(MPI.COMM_WORLD)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    comm = MPI.COMM_WORLD
    counts = np.array([sum(n[i] for n in comm.shm_stats().values()) for i in (0, 1)], dtype=np.int64)
    total = np.zeros_like(counts)
    comm.mpi_comm.Allreduce(counts, total)
    if comm.Get_rank() == 0:
        terminalreporter.write_line(f"SHMTOPO accelerated {total[0]} delegated {total[1]}")
