"""shmtopo.share and shmtopo.shared_array on any communicator: None (the job
this process belongs to, as ``Comm.from_env()`` finds it), an mpi4py
communicator, an accelerated one, or a :class:`shmtopo.Comm`.

The shmtopo comm behind None and behind each mpi4py communicator is made at
the first call (collectively: every rank makes that call) and kept for the
later ones. It goes, on each rank on its own, when MPI frees the
communicator (MPI_Finalize frees them all) or when the process exits; the
shares made on it live on, as long as their views do.
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np
import numpy.typing as npt

from . import sharing
from ._base import holds_comm
from .accel import AcceleratedComm
from .comm import Comm
from .job import on_free, release_at_finalize


class _Kept:
    """A comm this module made, dropped locally at exit or when MPI frees
    the communicator it stands for (``_release``: _base's holders)."""

    def __init__(self, comm: Comm) -> None:
        self.comm: Comm | None = comm
        self.pid = os.getpid()  # a fork child makes its own (its parent's is not its own)

    def usable(self) -> bool:
        return self.comm is not None and self.pid == os.getpid()

    def _release(self) -> None:
        comm, self.comm = self.comm, None
        if comm is not None and self.pid == os.getpid():
            comm.abandon()


_default: _Kept | None = None
_by_handle: dict[int, _Kept] = {}


def comm_of(comm: Any = None) -> Comm:
    """Collective at the first call for a communicator: the shmtopo comm a
    call on ``comm`` runs on."""
    global _default
    if isinstance(comm, Comm):
        return comm
    if isinstance(comm, AcceleratedComm):
        return comm.shm_comm
    if comm is None:
        if _default is None or not _default.usable():
            _default = _Kept(Comm.from_env())
            holds_comm(_default)
            if _default.comm is not None and _default.comm.mpi is not None:
                release_at_finalize()  # dropped when MPI_Finalize runs, if the program calls it
        assert _default.comm is not None
        return _default.comm
    try:
        from mpi4py import MPI
    except ImportError:
        raise TypeError(f"shmtopo: comm must be None or a shmtopo.Comm, not {type(comm).__name__}") from None
    if not isinstance(comm, MPI.Comm):
        raise TypeError(f"shmtopo: comm must be None, an mpi4py communicator or a shmtopo.Comm, "
                        f"not {type(comm).__name__}")
    handle = int(comm.handle)
    kept = _by_handle.get(handle)
    if kept is None or not kept.usable():
        kept = _by_handle[handle] = _Kept(Comm.from_mpi(comm))
        holds_comm(kept)
        release_at_finalize()
        on_free(comm, lambda: _forget(handle))
    assert kept.comm is not None
    return kept.comm


def _forget(handle: int) -> None:
    kept = _by_handle.pop(handle, None)
    if kept is not None:
        kept._release()


def share(obj: Any, comm: Any = None, root: int = 0, *, placement: str | None = None,
          huge_pages: bool | str = False) -> Any:
    """Collective over ``comm`` (None: this process's job; an mpi4py
    communicator, accelerated or not; a :class:`shmtopo.Comm`): every rank
    gets the root's ``obj`` (the others pass None), read-only, with one copy
    of its data per node. See :meth:`shmtopo.Comm.share`."""
    return sharing.share(comm_of(comm), obj, root, placement=placement, huge_pages=huge_pages)


def shared_array(shape: Any, dtype: Any = np.float64, comm: Any = None, *, order: str = "C",
                 placement: str | None = None, huge_pages: bool | str = False) -> npt.NDArray[Any]:
    """Collective over ``comm`` (as for :func:`share`): a writable,
    zero-filled array in memory the ranks of each node share, to fill in
    place and then :func:`share`. See :meth:`shmtopo.Comm.shared_array`."""
    return sharing.shared_array(comm_of(comm), shape, dtype, order=order, placement=placement,
                                huge_pages=huge_pages)


def unshare(obj: Any, comm: Any = None) -> None:
    """Collective over ``comm`` (as for :func:`share`): release the node
    memory of the share ``obj`` views now. See :meth:`shmtopo.Comm.unshare`."""
    sharing.unshare(comm_of(comm), obj)
