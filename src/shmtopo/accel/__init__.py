"""shmtopo.accel: the mpi4py drop-in, ``shmtopo.accelerate(comm)``.

comm.py holds what the drop-in is made of: the accelerated communicator,
its persistent requests and accelerate().
"""
from .comm import AcceleratedComm, AcceleratedPrequest, accelerate

__all__ = ["AcceleratedComm", "AcceleratedPrequest", "accelerate"]
