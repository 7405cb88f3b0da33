"""shmtopo: node-local shared-memory windows, fences and collectives, and a
shared hwloc topology, for MPI programs in Python."""
from .accel import AcceleratedComm, AcceleratedPrequest, AcceleratedWin, accelerate
from .bitmap import Bitmap
from ._types import pair_dtype
from .comm import Comm, Placement
from .coll.nonblocking import Request
from .errors import (BackendUnavailableError, BrokenWindowError, CallbackError, ForkedProcessError, FreedError,
                     PeerAbortedError, PeerDeadError, ShmtopoArgumentError, ShmtopoError, ShmtopoMemoryError,
                     ShmtopoOSError, ShmtopoTimeoutError, ShmtopoValueError)
from .launch import spawn
from .anycomm import share, shared_array, unshare
from .sharing import ShareInfo, share_info
from .window import BACKENDS, FENCE_ALGORITHMS, Window
from .topology import Topology, share_topology

__version__ = "0.1.0"

__all__ = [
    "Comm", "Window", "Request", "spawn", "accelerate", "AcceleratedComm", "Topology", "share_topology", "Bitmap", "Placement", "pair_dtype", "BACKENDS", "FENCE_ALGORITHMS", "__version__",
    "ShmtopoError", "ShmtopoValueError", "FreedError", "ShmtopoTimeoutError", "PeerDeadError", "PeerAbortedError",
    "BrokenWindowError", "CallbackError", "ShmtopoMemoryError", "ShmtopoOSError",
    "BackendUnavailableError", "ForkedProcessError",
    "AcceleratedPrequest", "AcceleratedWin", "ShmtopoArgumentError",
    "share", "shared_array", "unshare", "share_info", "ShareInfo",
]
