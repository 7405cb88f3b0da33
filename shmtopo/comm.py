"""Comm: the processes of one node that share memory with each other."""
from __future__ import annotations

import math
import os
from typing import Any, Callable

import numpy as np

from . import _oob, collectives, request
from ._lifetime import Collective
from ._native import ffi, lib
from .errors import CallbackError, FreedError, ShmtopoError, ShmtopoValueError, check, last_error
from .window import Window, _backend_number, _fence_number


class Comm(Collective):
    """A node-local shared-memory communicator.

    Build one with :meth:`from_mpi` or :meth:`from_callbacks`. Creating and
    freeing are collective over the comm's ranks. Free it explicitly with
    :meth:`free` or a ``with`` block; the garbage collector never does, since
    freeing needs every rank.
    """

    def __init__(self, transport: _oob.Transport, size: int, rank: int, mpi_comm: Any = None):
        self._transport = transport
        self._mpi = mpi_comm
        self._windows: list[Window] = []
        # Collectives span the comm given to from_mpi; with one node that is
        # this comm itself (see _span_nodes for several).
        self.world_rank, self.world_size, self.nnodes = rank, size, 1
        self._leaders = None
        handle = ffi.new("shmtopo_comm_t **")
        self._call(lib.shmtopo_comm_create, size, rank, transport.oob, handle)
        self._h = handle[0]
        # The handle as a number for the small-collective entry point (0 when
        # that path must not be taken: freed, or collectives span nodes).
        self._fast = int(ffi.cast("uintptr_t", self._h))

    # -- construction -----------------------------------------------------
    @classmethod
    def from_mpi(cls, mpi_comm: Any = None, *, node_size: int | None = None) -> "Comm":
        """Collective over ``mpi_comm`` (default COMM_WORLD): split it into
        nodes with ``Split_type(COMM_TYPE_SHARED)`` and return this node's comm.
        Windows are node-local; collectives span all of ``mpi_comm``.

        node_size (or SHMTOPO_NODE_SIZE): split into groups of that many
        consecutive ranks instead, to try multi-node code paths on one machine.
        """
        from mpi4py import MPI

        parent = MPI.COMM_WORLD if mpi_comm is None else mpi_comm
        if node_size is None and os.environ.get("SHMTOPO_NODE_SIZE"):
            node_size = int(os.environ["SHMTOPO_NODE_SIZE"])
        if node_size is not None:
            if int(node_size) < 1:
                raise ShmtopoValueError(f"node_size must be >= 1, not {node_size}")
            node = parent.Split(parent.Get_rank() // int(node_size), key=parent.Get_rank())
        else:
            node = parent.Split_type(MPI.COMM_TYPE_SHARED, key=parent.Get_rank())
        try:
            comm = cls(_oob.mpi_transport(node), node.Get_size(), node.Get_rank(), node)
        except BaseException:
            node.Free()
            raise
        comm._span_nodes(parent)
        return comm

    def _span_nodes(self, parent: Any) -> None:
        """Set up the leaders' communicator when the job spans several nodes."""
        from mpi4py import MPI

        self.world_rank, self.world_size = parent.Get_rank(), parent.Get_size()
        self.nnodes = parent.allreduce(1 if self.rank == 0 else 0)
        if self.nnodes == 1:
            return
        self._fast = 0
        self._world = parent.Dup()  # our own context: never matches user messages
        self._leaders = self._world.Split(0 if self.rank == 0 else MPI.UNDEFINED, key=self.world_rank)
        node_index = self._mpi.bcast(self._leaders.Get_rank() if self.rank == 0 else None, root=0)
        self._node_index = node_index
        places = self._world.allgather((node_index, self.rank))
        self._node_of = [n for n, _ in places]
        self._local_of = [r for _, r in places]
        self._node_sizes = [self._node_of.count(n) for n in range(self.nnodes)]
        self._world_order = sorted(range(self.world_size), key=lambda w: places[w])

    @classmethod
    def from_callbacks(
        cls,
        size: int,
        rank: int,
        *,
        allgather: Callable[[memoryview, memoryview], None],
        barrier: Callable[[], None],
    ) -> "Comm":
        """Collective: a comm over any transport. ``allgather(send, recv)``
        must fill ``recv`` (size * len(send) bytes) with every rank's ``send``
        in rank order; ``barrier()`` must not return before all ranks called it.
        """
        if not callable(allgather) or not callable(barrier):
            raise ShmtopoValueError("allgather and barrier must be callables")
        return cls(_oob.Transport(int(size), allgather, barrier), int(size), int(rank))

    # -- plumbing ---------------------------------------------------------
    def _call(self, fn, *args) -> int:
        rc = fn(*args)
        if rc < 0:
            exc = last_error()
            cause = self._transport.take_pending()
            if cause is not None:
                raise CallbackError(f"{exc}: {cause!r}", exc.errno) from cause
            raise exc
        return rc

    @property
    def handle(self):
        if self._h == ffi.NULL:
            raise FreedError("the comm has been freed", 9)
        return self._h

    # -- queries ----------------------------------------------------------
    @property
    def rank(self) -> int:
        return check(lib.shmtopo_comm_rank(self.handle))

    @property
    def size(self) -> int:
        return check(lib.shmtopo_comm_size(self.handle))

    def pid(self, rank: int) -> int:
        """Process id of ``rank``."""
        return check(lib.shmtopo_comm_pid(self.handle, int(rank)))

    @property
    def ncpus(self) -> int:
        """CPUs in the union of all ranks' affinity masks."""
        return check(lib.shmtopo_comm_ncpus(self.handle))

    @property
    def oversubscribed(self) -> bool:
        """True when ranks outnumber those CPUs (waits then back off sooner)."""
        return bool(check(lib.shmtopo_comm_oversubscribed(self.handle)))

    @property
    def mpi(self) -> Any:
        """The node-local mpi4py communicator (None for from_callbacks)."""
        return self._mpi

    @property
    def freed(self) -> bool:
        return self._h == ffi.NULL

    # -- windows ----------------------------------------------------------
    def allocate(
        self,
        nbytes: int | None = None,
        *,
        dtype: Any = None,
        shape: Any = None,
        contiguous: bool = False,
        symmetric: bool = False,
        backend: str | None = None,
        fence: str | None = None,
        timeout: float | None = None,
    ) -> Window:
        """Collective: allocate a window; this rank's part holds ``nbytes``
        bytes, or ``shape`` items of ``dtype`` (sizes may differ per rank, 0
        is allowed). Memory is zero-filled and reserved now.

        contiguous: all ranks' parts back to back in one segment
            (``win.all`` is then one array over all of them).
        symmetric: map the window at the same virtual address in every rank
            (chosen from all ranks' free ranges), so pointers stored in it
            are valid in every process.
        backend: "posix" (default), "memfd", "sysv" or "xpmem";
            default from SHMTOPO_SHM_TYPE.
        fence: "auto", "linear", "rd" or "dissemination";
            default from SHMTOPO_FENCE_ALGORITHM (or KUPL_SHM_FENCE_ALGORITHM).
        timeout: seconds any wait may last before raising TimeoutError;
            default from SHMTOPO_TIMEOUT, else forever.
        """
        attr = ffi.new("shmtopo_win_attr_t *")
        try:
            dt, shape, nbytes = _layout(nbytes, dtype, shape)
            attr.backend = _backend_number(backend)
            attr.fence_alg = _fence_number(fence)
            attr.contiguous = bool(contiguous)
            attr.symmetric = bool(symmetric)
            if timeout is not None:
                if not timeout >= 0:
                    raise ShmtopoValueError(f"timeout must be >= 0 seconds, not {timeout!r}")
                attr.timeout = float(timeout)
        except (ShmtopoError, TypeError, ValueError) as exc:
            # Fail on every rank, not only here: the others are already on
            # their way into the collective allocation.
            reason = ffi.new("char[]", str(exc).encode())
            attr.invalid = reason
            dt, shape, nbytes = np.dtype(np.uint8), (0,), 0
        win = Window._allocate(self, nbytes, attr, dt, shape)
        self._windows.append(win)
        return win

    def _forget(self, win: Window) -> None:
        if win in self._windows:
            self._windows.remove(win)

    # -- collectives (see collectives.py; bound directly, no extra call) --
    barrier = collectives.barrier
    bcast = collectives.bcast
    reduce = collectives.reduce
    allreduce = collectives.allreduce
    allgather = collectives.allgather
    reduce_scatter = collectives.reduce_scatter
    alltoall = collectives.alltoall

    def allreduce_init(self, send: Any, recv: Any, op: str = "sum", *,
                       algorithm: str | None = None) -> "request.Request":
        """Persistent allreduce of ``send`` into ``recv`` (node-local comms):
        each ``req.start()`` runs it with no per-call argument handling."""
        self._single_node("allreduce_init")
        return request.allreduce_init(self, send, recv, op, algorithm)

    def bcast_init(self, buf: Any, root: int = 0) -> "request.Request":
        """Persistent in-place bcast of ``buf`` from ``root`` (node-local comms)."""
        self._single_node("bcast_init")
        return request.bcast_init(self, buf, root)

    def alltoall_init(self, send: Any, recv: Any) -> "request.Request":
        """Persistent alltoall (node-local comms)."""
        self._single_node("alltoall_init")
        return request.alltoall_init(self, send, recv)

    def _single_node(self, what: str) -> None:
        if self._leaders is not None:
            raise ShmtopoValueError(f"{what} works on single-node comms only")

    # -- lifetime ---------------------------------------------------------
    def free(self) -> None:
        """Collective: free the windows still open (in creation order), then
        the comm. Freeing twice is a no-op."""
        if self._h == ffi.NULL:
            return
        try:
            for win in list(self._windows):
                win.free()
        finally:
            handle, self._h, self._fast = self._h, ffi.NULL, 0
            try:
                self._call(lib.shmtopo_comm_destroy, handle)
            finally:
                for mpi_comm in (self._mpi, self._leaders, getattr(self, "_world", None)):
                    if mpi_comm is not None and mpi_comm != _null_comm():
                        mpi_comm.Free()
                self._mpi = self._leaders = self._world = None

    def abandon(self, _origin: int | None = None) -> None:
        """Local: after an error on this rank, abandon the open windows and
        drop the comm without the collective barrier. No-op once freed."""
        if self._h == ffi.NULL:
            return
        for win in list(self._windows):
            win.abandon(_origin)
        handle, self._h, self._fast = self._h, ffi.NULL, 0
        check(lib.shmtopo_comm_abandon(handle))

    def __repr__(self) -> str:
        if self.freed:
            return "<shmtopo.Comm freed>"
        return f"<shmtopo.Comm rank {self.rank} of {self.size}>"

    def split(self, by: str) -> "Comm":
        """Collective: a sub-comm of the ranks bound inside the same object of
        type ``by`` ("package", "numa", "l3", any topology type name); an
        unbound rank goes by the CPU it runs on now. Needs a comm made with
        :meth:`from_mpi`; free the result (windows and fences work on it)."""
        from .topology import split_comm

        return split_comm(self, by)


MAX_BYTES = 2**62  # per rank; the native core refuses more


def _null_comm():
    from mpi4py import MPI

    return MPI.COMM_NULL


def _layout(nbytes: Any, dtype: Any, shape: Any) -> tuple[np.dtype, tuple, int]:
    """dtype, shape and byte count from allocate's nbytes/dtype/shape."""
    dt = np.dtype(np.uint8 if dtype is None else dtype)
    if shape is None:
        if nbytes is None:
            raise ShmtopoValueError("allocate needs nbytes or shape")
        nbytes = _as_size(nbytes, "nbytes")
        if nbytes % dt.itemsize:
            raise ShmtopoValueError(
                f"nbytes={nbytes} is not a multiple of {dt}'s itemsize {dt.itemsize}")
        return dt, (nbytes // dt.itemsize,), nbytes
    shape = tuple(_as_size(s, "shape") for s in np.atleast_1d(np.asarray(shape, dtype=object)))
    size = math.prod(shape) * dt.itemsize  # Python ints: no silent wrap-around
    if size > MAX_BYTES:
        raise ShmtopoValueError(f"shape {shape} of {dt} is too large ({size} bytes)")
    if nbytes is not None and _as_size(nbytes, "nbytes") != size:
        raise ShmtopoValueError(f"nbytes={nbytes} does not match shape {shape} of {dt}")
    return dt, shape, size


def _as_size(value: Any, what: str) -> int:
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise ShmtopoValueError(f"{what} must be an integer, not {value!r}") from None
    if n != value or n < 0:
        raise ShmtopoValueError(f"{what} must be a non-negative integer, not {value!r}")
    if n > MAX_BYTES:
        raise ShmtopoValueError(f"{what}={n} is too large (at most {MAX_BYTES})")
    return n
