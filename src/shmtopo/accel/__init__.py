"""shmtopo.accel: the mpi4py drop-in, ``shmtopo.accelerate(comm)``.

By job, one way down: tables.py (mpi4py's datatypes and ops as the core's,
the fast entries bound to them), buffers.py (mpi4py's buffer arguments,
read as mpi4py reads them), plans.py (each call's arguments planned for
shmtopo's collective), window.py (accelerated MPI shared windows),
comm.py (the accelerated comm, its persistent requests and accelerate()).
"""
from .comm import AcceleratedComm, AcceleratedPrequest, accelerate
from .window import AcceleratedWin

__all__ = ["AcceleratedComm", "AcceleratedPrequest", "AcceleratedWin", "accelerate"]
