"""Comm: the processes of one node that share memory with each other, and
the job they belong to (its node plan, for collectives that span nodes)."""
from __future__ import annotations

import math
import os
import sys
from typing import Any, Callable, NamedTuple

import numpy as np

from . import _oob, agreement, comm_pool, rendezvous, sharing
from ._fastpath import NativeComm, bind_comm
from ._base import Attributes, Collective, Held, hold_all, holding_comm, opened, release_all
from ._native import ffi, lib
from .coll import api, nonblocking, persistent
from .errors import FreedError, ShmtopoValueError, check, last_error
from .job import NodePlan, free_mpi_comm, job_bootstrap, job_verdict, one_node, split_once
from .topology import PLACEMENT_POLICIES, held_topology, placement_policy_number, share_topology, type_name, type_number
from .window import Window, backend_number, fence_number

MAX_BYTES = 2**62  # per rank; the native core refuses more


class Placement(NamedTuple):
    """Where :meth:`Comm.bind` bound one rank of the node."""
    rank: int                #: rank in the comm (on this node)
    pid: int
    type: str                #: the object type ranks were bound to
    logical_index: int       #: the object, L#n
    os_index: int | None     #: P#n
    cpuset: Any              #: Bitmap: the PUs the rank is bound to
    nodeset: Any             #: Bitmap: the NUMA nodes near them

    def __str__(self) -> str:
        where = f"{self.type} L#{self.logical_index}" + ("" if self.os_index is None else f" P#{self.os_index}")
        return f"rank {self.rank} (pid {self.pid}): {where}, cpus {self.cpuset}, numa {self.nodeset}"


# Set in the processes of mpiexec / mpirun / srun by Open MPI, MPICH's Hydra,
# PMIx and Slurm's PMI.
_MPI_LAUNCHER_VARIABLES = ("OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "MPI_LOCALNRANKS")


def _under_mpi() -> bool:
    """True in a process of an MPI job: started by an MPI launcher, or with
    mpi4py's MPI initialised already."""
    if any(v in os.environ for v in _MPI_LAUNCHER_VARIABLES):
        return True
    mpi = sys.modules.get("mpi4py.MPI")
    return mpi is not None and bool(mpi.Is_initialized())


def _packed(name: str) -> int:
    """Up to 8 bytes of a name as a signature word (describe() prints it)."""
    return int.from_bytes(name.encode()[:8].ljust(8, b"\0"), "little")


def _posting(name: str) -> Callable[..., nonblocking.Request]:
    """Comm's nonblocking form of the collective ``name`` (``iallreduce``)."""
    def post(self: "Comm", *args: Any, **kwargs: Any) -> nonblocking.Request:
        return self._post(name, args, kwargs)
    post.__name__ = post.__qualname__ = "i" + name
    post.__doc__ = (f"Collective, nonblocking: ``{name}`` with the same arguments, posted to run in its order "
                    f"among the comm's collectives while the program goes on; returns a Request whose "
                    f"``wait()`` returns what ``{name}`` returns (coll/nonblocking.py).")
    return post


class Comm(NativeComm, Collective):
    """A node-local shared-memory communicator.

    Build one with :meth:`from_mpi` or :meth:`from_callbacks`. Creating and
    freeing are collective over the comm's ranks. Free it explicitly with
    :meth:`free` or a ``with`` block; the garbage collector never does, since
    freeing needs every rank.
    """

    def __init__(self, create: Callable[[Any], int], transport: _oob.AnyTransport | None = None,
                 mpi_comm: Any = None):
        # Use from_mpi, from_callbacks or shrink: they agree on the options
        # first. create(out) makes the native comm into out[0].
        if not callable(create):  # Comm(MPI.COMM_WORLD), as mpi4py's classes are made
            raise TypeError(f"shmtopo.Comm({type(create).__name__} object): make a comm with "
                            "shmtopo.Comm.from_mpi(mpi_comm) or shmtopo.Comm.from_callbacks(...)")
        self._transport = transport
        self._mpi = mpi_comm
        #: the open windows, in creation order (read-only for the layers below)
        self.windows: list[Window] = []
        #: what higher layers attached (the levels of coll/levels.py)
        self.attributes = Attributes()
        #: the handle as a number for the fast entries (0 when they must not
        #: be taken: freed, or collectives span nodes)
        self.fast_handle = 0
        #: the handle as a number where collectives span nodes (0 otherwise):
        #: the fast entries of small allreduces, reduces, bcasts and barriers take it
        self.span_handle = 0
        #: the handle as a number, to hold the comm for one thread's call
        #: (_base.Held); 0 once freed
        self.address = 0
        #: the windows the fast entries may find large arrays in: None until
        #: the levels say they take no large calls (allow_fast_windows)
        self.fast_windows: list[Window] | None = None
        #: names the native comm while it may be kept for a later comm of the same ranks
        #: (comm_pool): from_mpi sets it on a comm of one node; None where it may not
        self._pool_token: int | None = None
        #: the nonblocking calls posted (coll/nonblocking.py): made at the first
        self._queue: nonblocking.Queue | None = None
        handle = ffi.new("shmtopo_comm_t **")
        check(create(handle))
        self.plan = NodePlan.single(lib.shmtopo_comm_rank(handle[0]), lib.shmtopo_comm_size(handle[0]))
        self._h = ffi.NULL
        self._set_handle(handle[0])
        opened(self)

    @staticmethod
    def _created_by(transport: _oob.AnyTransport, size: int, rank: int) -> Callable[[Any], int]:
        return lambda handle: lib.shmtopo_comm_create(size, rank, transport.oob, handle)

    @staticmethod
    def _taken_up(native: Any) -> Callable[[Any], int]:
        def create(handle: Any) -> int:
            handle[0] = native
            return 0
        return create

    def _set_handle(self, handle: Any) -> None:
        """The native comm (NULL: gone), and the numbers standing for it."""
        self._h = handle
        self.address = int(ffi.cast("uintptr_t", handle))
        self.fast_handle = self.address if self.plan.nnodes == 1 else 0
        self.span_handle = self.address if self.plan.nnodes > 1 else 0

    # -- construction -----------------------------------------------------
    @classmethod
    def from_mpi(cls, mpi_comm: Any = None, *, node_size: int | None = None,
                 timeout: float | None = None) -> "Comm":
        """Collective over ``mpi_comm`` (default COMM_WORLD): split it into
        nodes with ``Split_type(COMM_TYPE_SHARED)`` and return this node's comm.
        Windows are node-local; collectives span all of ``mpi_comm``, and
        their ranks and roots are ranks of ``mpi_comm``.

        node_size (or SHMTOPO_NODE_SIZE): split into groups of that many
        consecutive ranks instead, to try multi-node code paths on one machine.
        timeout (or SHMTOPO_TIMEOUT): seconds any wait may last, 0 forever.
        Every rank must ask for the same node_size; bad or differing options
        raise ShmtopoValueError on every rank.
        """
        try:
            from mpi4py import MPI
        except ImportError:
            raise ImportError("Comm.from_mpi needs mpi4py: pip install 'shmtopo[mpi]' "
                              "(or use Comm.from_callbacks with a transport of your own)") from None

        parent = MPI.COMM_WORLD if mpi_comm is None else mpi_comm
        offer = comm_pool.offer(parent.Get_rank(), parent.Get_size())
        try:
            settings = job_bootstrap(parent, node_size, timeout, offer)
            if settings.node_size:
                node = split_once(parent, ("node", settings.node_size), lambda: parent.Split(
                    parent.Get_rank() // settings.node_size, key=parent.Get_rank()), settings.timeout)
            else:
                node = split_once(parent, ("node", 0), lambda: parent.Split_type(
                    MPI.COMM_TYPE_SHARED, key=parent.Get_rank()), settings.timeout)
        except BaseException:
            comm_pool.withdraw(offer)
            raise
        comm, failure = None, None
        try:
            token, kept = None, ffi.NULL
            if one_node(parent, node):  # (a comm across nodes is never kept)
                token, kept = comm_pool.settle(settings.offers, offer)
            else:
                comm_pool.withdraw(offer)
            transport = _oob.mpi_transport(node, settings.timeout)
            create = cls._created_by(transport, node.Get_size(), node.Get_rank()) if kept == ffi.NULL \
                else cls._taken_up(kept)  # job_verdict's exchange below comes before its first call
            comm = cls(create, transport, node)
            comm._pool_token = token
            check(lib.shmtopo_comm_set_timeout(comm._h, settings.timeout))
        except BaseException as exc:  # noqa: BLE001 - every rank learns of it below
            failure = exc
        try:
            comm_plan = job_verdict(parent, node, failure, settings.timeout)
        except BaseException:
            if comm is not None:
                comm.abandon()
            if comm is None:
                node.Free()
            raise
        assert comm is not None  # job_verdict raised this rank's failure otherwise
        comm._join_job(comm_plan)
        return comm

    def _join_job(self, plan: NodePlan) -> None:
        """Make the comm one node of the job the plan describes."""
        self.plan = plan
        if plan.nnodes == 1:
            return
        self._set_handle(self._h)  # collectives span nodes: the fast entries stand aside
        plan.listen(self._h)
        world_ranks = ffi.new("int[]", [w for w in plan.world_order if plan.node_of[w] == plan.node_index])
        leaders = plan.exchange.oob if plan.exchange is not None else ffi.NULL
        check(lib.shmtopo_comm_set_span(self._h, plan.world_size, world_ranks, plan.nnodes,
                                        plan.node_index, leaders))

    @classmethod
    def from_callbacks(
        cls,
        size: int,
        rank: int,
        *,
        allgather: Callable[[memoryview, memoryview], None],
        barrier: Callable[[], None],
        timeout: float | None = None,
    ) -> "Comm":
        """Collective: a comm over any transport. ``allgather(send, recv)``
        must fill ``recv`` (size * len(send) bytes) with every rank's ``send``
        in rank order; ``barrier()`` must not return before all ranks called it.
        The callbacks are used while the comm is made only. timeout: as in
        :meth:`from_mpi`. Exceptions the callbacks raise come out of this call
        (KeyboardInterrupt and SystemExit unchanged, others as CallbackError).
        """
        if not callable(allgather) or not callable(barrier):
            raise ShmtopoValueError("allgather and barrier must be callables")
        transport = _oob.Transport(int(size), allgather, barrier)
        comm = cls(cls._created_by(transport, int(size), int(rank)), transport)
        # The options are agreed like any call: a bad one on one rank fails all.
        try:
            seconds = agreement.normalised(comm, lib.SHMTOPO_KIND_COMM_CREATE,
                                           lambda: None if timeout is None else agreement.as_timeout(timeout))
            agreement.agree(comm, lib.SHMTOPO_KIND_COMM_CREATE)
        except BaseException:
            comm.abandon()
            raise
        if seconds is not None:
            check(lib.shmtopo_comm_set_timeout(comm._h, seconds))
        return comm

    @classmethod
    def from_env(cls, *, timeout: float | None = None) -> "Comm":
        """Collective: this process's comm in the job that started it, so that
        one script runs under every launcher. Under ``python -m shmtopo run``
        or :func:`shmtopo.spawn`, the launcher's ranks (no MPI needed); under
        mpiexec (or once mpi4py's MPI is initialised), ``from_mpi(COMM_WORLD)``;
        in a process started alone, a comm of one rank. timeout: as in
        :meth:`from_mpi`."""
        if rendezvous.in_environment():
            client = rendezvous.joined()
            return cls.from_callbacks(
                client.size, client.rank, timeout=timeout,
                allgather=lambda send, recv: client.allgather(send, recv, timeout),
                barrier=lambda: client.barrier(timeout))
        if _under_mpi():
            return cls.from_mpi(timeout=timeout)
        return cls.from_callbacks(1, 0, timeout=timeout, allgather=lambda send, recv: recv.__setitem__(
            slice(None), send), barrier=lambda: None)

    # -- plumbing ---------------------------------------------------------
    @property
    def handle(self) -> Any:
        """The native comm (cffi pointer) for the core's C API."""
        if self._h == ffi.NULL:
            raise FreedError("the comm has been freed", 9)
        return self._h

    # -- queries ----------------------------------------------------------
    @property
    def rank(self) -> int:
        """This process's rank among the node's ranks (0 .. size-1)."""
        return check(lib.shmtopo_comm_rank(self.handle))

    @property
    def size(self) -> int:
        """Number of ranks on this node."""
        return check(lib.shmtopo_comm_size(self.handle))

    @property
    def world_rank(self) -> int:
        """This process's rank in the comm given to from_mpi (collectives' ranks)."""
        return self.plan.world_rank

    @property
    def world_size(self) -> int:
        """Ranks in the comm given to from_mpi, over every node."""
        return self.plan.world_size

    @property
    def nnodes(self) -> int:
        """Nodes the job spans (1 unless from_mpi found or simulated several)."""
        return self.plan.nnodes

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
    def single_copy(self) -> str | None:
        """How collectives copy large private arrays straight between ranks
        ("cma": process_vm_readv/writev), or None when they go through the
        scratch buffers; probed and agreed at creation (SHMTOPO_SINGLE_COPY)."""
        mechanism = check(lib.shmtopo_comm_single_copy(self.handle))
        return ffi.string(lib.shmtopo_single_copy_name(mechanism)).decode() if mechanism else None

    @property
    def runs_ahead(self) -> bool:
        """True when small bcasts and reduces wait only for the ranks whose
        data they need (SHMTOPO_RUN_AHEAD=1, agreed at creation; one node):
        a failure some rank ran past is then raised there at a later call,
        and leaves the comm broken (README, "Running ahead")."""
        return bool(check(lib.shmtopo_comm_runs_ahead(self.handle)))

    @property
    def timeout(self) -> float:
        """Seconds any wait may last (0: forever)."""
        return float(lib.shmtopo_comm_timeout(self.handle))

    def news(self, what: str) -> None:
        """Local, for a wait outside the comm (in MPI) on behalf of its ranks:
        PeerDeadError if a rank of the job died — heard of from another
        node, or found on this one (this rank then leaves the comm naming
        it). ``what`` names the wait in the message."""
        if self._h != ffi.NULL:
            self.plan.news(what, self._h)

    def set_waits(self, spin: float | None = None, yielding: float | None = None) -> None:
        """Local: how this rank's waits in the comm's calls spend their time
        before they sleep on what they wait for: ``spin`` seconds spinning,
        then ``yielding`` seconds yielding the CPU (None keeps one as it is:
        SHMTOPO_SPIN_NS / SHMTOPO_YIELD_NS, else chosen by oversubscription).
        A thread sharing its core with the program's own work should not spin."""
        def ns(seconds: float | None) -> int:
            return -1 if seconds is None else round(float(seconds) * 1e9)
        check(lib.shmtopo_comm_set_waits(self.handle, ns(spin), ns(yielding)))

    @property
    def mpi(self) -> Any:
        """The node-local mpi4py communicator (None for from_callbacks)."""
        return self._mpi

    @property
    def freed(self) -> bool:
        """True once the comm has been freed."""
        return bool(self._h == ffi.NULL)

    # -- windows ----------------------------------------------------------
    @holding_comm
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
        placement: str | None = None,
        huge_pages: bool | str = False,
    ) -> Window:
        """Collective: allocate a window; this rank's part holds ``nbytes``
        bytes, or ``shape`` items of ``dtype`` (sizes may differ per rank, 0
        is allowed). Memory is zero-filled and reserved now. A bad argument
        on any rank raises ShmtopoValueError on every rank.

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
            default the comm's.
        placement: where each rank's pages go. "local" (default): near
            the rank that owns them; every rank first-touches its own part
            (contiguous windows too), and when this process holds the
            node's shared topology (:func:`share_topology`) and its CPUs are
            near one NUMA node, that node is preferred for its part (mbind).
            "interleave": pages spread over the node's NUMA nodes (those of
            the held topology, else those the kernel lets the rank use).
            Binding never fails the allocation: ``win.placement_report``
            says per rank what was done ("not supported", "modelled" on a
            topology of another machine, ...).
        huge_pages: False (default); True: the best available, reported in
            ``win.huge_pages`` -- hugetlb pages (memfd, MFD_HUGETLB) when the
            pool holds the node's whole window, else transparent huge pages
            where shmem_enabled (or /dev/shm's huge= option for "posix")
            allows madvise to ask, else normal pages; "required": raise
            ShmtopoMemoryError on every rank when neither kind is available.
            With huge pages and no backend given (nor SHMTOPO_SHM_TYPE), the
            backend is "memfd": /dev/shm files cannot hold hugetlb pages.
        """
        def normalise() -> tuple[np.dtype[Any], tuple[int, ...], int, Any]:
            dt, dims, size = _allocation_layout(nbytes, dtype, shape)
            attr = ffi.new("shmtopo_win_attr_t *")
            attr.backend = backend_number(backend)
            attr.fence_alg = fence_number(fence)
            attr.contiguous = _as_flag(contiguous, "contiguous")
            attr.symmetric = _as_flag(symmetric, "symmetric")
            if timeout is not None:
                attr.timeout = agreement.as_timeout(timeout)
            attr.placement = PLACEMENTS.index(_as_choice(placement, PLACEMENTS, "placement")) + 1
            attr.huge_pages = _huge_pages_number(huge_pages)
            nodes, attr.bind_nodes = _chosen_nodes(attr.placement)
            for node in nodes:
                attr.nodes[node // 64] |= 1 << (node % 64)
            return dt, dims, size, attr

        dt, dims, size, attr = agreement.normalised(self, lib.SHMTOPO_KIND_WIN_ALLOC, normalise)
        win = Window._allocate(self, size, attr, dt, dims, self._forget)
        self.windows.append(win)
        return win

    def _forget(self, win: Window) -> None:
        if win in self.windows:
            self.windows.remove(win)

    def allow_fast_windows(self, allowed: bool) -> None:
        """For the levels: whether the fast entries may take large arrays
        (and find them in the comm's windows), or leave them to the general
        path, which knows the levels."""
        self.fast_windows = self.windows if allowed else None

    # -- collectives ------------------------------------------------------
    # Every lower-case collective is a C method of NativeComm (its table in
    # native/cpython/comm.h), whose general path is coll/api.py's function
    # of the same name (bound below).

    # alltoallw of typed blocks (a flattened MPI datatype's shape): Python only
    alltoallw = api.alltoallw

    # -- one copy per node (sharing.py) ------------------------------------
    # share(obj, root=0): the root's array or object on every rank, read-only,
    # one copy of its data per node; shared_array(shape, dtype): a writable
    # node-shared array to fill in place, then share; unshare(a): release a
    # share's node memory now (collective), instead of with its last view.
    share = sharing.share
    shared_array = sharing.shared_array
    unshare = sharing.unshare

    @holding_comm
    def allreduce_init(self, send: Any, recv: Any, op: str = "sum", *,
                       algorithm: str | None = None) -> persistent.Request:
        """Collective: a persistent allreduce of ``send`` into ``recv``
        (node-local comms): each ``req.start()`` runs it with no per-call
        argument handling."""
        return persistent.allreduce_init(self, send, recv, op, algorithm)

    @holding_comm
    def bcast_init(self, buf: Any, root: int = 0) -> persistent.Request:
        """Collective: a persistent in-place bcast of ``buf`` from ``root``
        (node-local comms)."""
        return persistent.bcast_init(self, buf, root)

    @holding_comm
    def alltoall_init(self, send: Any, recv: Any) -> persistent.Request:
        """Collective: a persistent alltoall (node-local comms)."""
        return persistent.alltoall_init(self, send, recv)

    # -- nonblocking collectives ------------------------------------------
    def _post(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> nonblocking.Request:
        """Local: post the collective ``name`` (coll/nonblocking.py)."""
        if self._h == ffi.NULL:
            raise FreedError(f"i{name}: the comm has been freed", 9)
        queue = self._queue
        if queue is None:
            queue = self._queue = nonblocking.Queue(self)
        return queue.post_call(name, args, kwargs)

    ibarrier = _posting("barrier")
    ibcast = _posting("bcast")
    ireduce = _posting("reduce")
    iallreduce = _posting("allreduce")
    iallgather = _posting("allgather")
    ialltoall = _posting("alltoall")
    igather = _posting("gather")
    iscatter = _posting("scatter")
    ireduce_scatter = _posting("reduce_scatter")
    igatherv = _posting("gatherv")
    iscatterv = _posting("scatterv")
    iallgatherv = _posting("allgatherv")
    ialltoallv = _posting("alltoallv")
    ialltoallw = _posting("alltoallw")
    iscan = _posting("scan")
    iexscan = _posting("exscan")

    def _end_queue(self) -> None:
        queue, self._queue = self._queue, None
        if queue is not None:
            queue.close()

    # -- lifetime ---------------------------------------------------------
    def free(self) -> None:
        """Collective: free the windows still open (in creation order), then
        the comm (one made by from_mpi on one node keeps its shared memory
        for a later comm of the same ranks: comm_pool). Freeing twice is a
        no-op. If a rank calls something else meanwhile, every rank raises
        and the comm stays. A call of another thread still inside makes it
        raise ShmtopoError (EBUSY) at once."""
        if self._h == ffi.NULL:
            return
        hold_all(self.address, [win.address for win in self.windows])
        try:
            for win in list(self.windows):
                win.free()
            self.attributes.free_all()
        except BaseException:
            release_all(self.address, [win.address for win in self.windows])
            raise
        handle = ffi.new("shmtopo_comm_t **", self._h)
        token, rank, size = self._pool_token, self.rank, self.size
        kept = ffi.new("int *")
        self._set_handle(ffi.NULL)  # no other thread reaches the comm while it goes
        if (lib.shmtopo_comm_destroy_keeping(handle, kept) if token is not None
                else lib.shmtopo_comm_destroy(handle)) < 0:
            exc = last_error()
            if handle[0] != ffi.NULL:  # a mismatch: the comm stays
                self._set_handle(handle[0])
                release_all(self.address, [])
                raise exc
            self._end_queue()
            self.plan.free()
            self._free_mpi()
            raise exc
        if kept[0] and token is not None:
            comm_pool.keep(handle[0], token, rank, size)  # for a later comm of the same ranks
        self._end_queue()
        self.plan.free()
        self._free_mpi()

    def abandon(self, _origin: int | None = None) -> None:
        """Local: after an error on this rank, abandon the open windows and
        drop the comm without the collective agreement; peers waiting on it
        raise PeerAbortedError. No-op once freed. Nonblocking calls not yet
        run fail (their wait raises)."""
        if self._queue is not None:
            self._queue.drop("the comm was abandoned")
        self._drop(lambda win: win.abandon(_origin), self.attributes.abandon_all, lib.shmtopo_comm_abandon)

    def release(self) -> None:
        """Local: drop this rank's side of the comm and its open windows
        without waiting for the others, as MPI_Comm_free does in practice
        (the drop-in's ``Free()`` is this). A clean departure, not an error:
        peers still finishing an earlier call are not disturbed (the shared
        memory stays mapped in their processes, and goes when the last rank
        has left), and a peer that waits for this rank in a later call raises
        PeerAbortedError saying that it freed the comm. No-op once freed; a
        comm broken by an earlier failure is abandoned instead."""
        native = lib.shmtopo_comm_release
        if self._pool_token is not None and self._h != ffi.NULL:
            token, rank, size = self._pool_token, self.rank, self.size
            native = lambda handle: comm_pool.park(handle, token, rank, size)  # noqa: E731
        self._drop(Window.release, self.attributes.release_all, native)

    def _drop(self, drop_window: Callable[[Window], None], drop_attributes: Callable[[], None],
              native: Callable[[Any], int]) -> None:
        """Leave the comm on this rank alone: each open window, what higher
        layers attached, then the comm itself (the core's abandon or release)."""
        if self._h == ffi.NULL:
            return
        hold_all(self.address, [win.address for win in self.windows])  # not while another thread is inside
        try:
            for win in list(self.windows):
                drop_window(win)
            drop_attributes()
        except BaseException:
            release_all(self.address, [win.address for win in self.windows])
            raise
        self._end_queue()
        handle = self._h
        self._set_handle(ffi.NULL)
        check(native(handle))
        self.plan.free()
        self._free_mpi()

    def depart(self) -> None:
        """Local, for a process about to exit with the comm open: leave its
        windows and the comm, so that peers waiting on any of them raise
        PeerAbortedError instead of waiting for this process to be gone
        (which MPI_Finalize may put off for ever). The memory stays mapped."""
        if self._h == ffi.NULL:
            return
        for win in self.windows:
            if win.handle != ffi.NULL:
                lib.shmtopo_win_depart(win.handle)
        lib.shmtopo_comm_leave(self._h)

    def shrink(self) -> "Comm":
        """Collective over the ranks still running, as ULFM's
        ``MPI_Comm_shrink`` is for MPI: after a PeerDeadError (or at any
        time) every survivor calls it and gets a new comm of the survivors,
        ranked in their old order, with this comm's timeout and no MPI
        communicator (``mpi`` is None: MPI cannot shrink one without ULFM).
        The dead ranks' files are swept. Every rank still running must call
        it, exit, or free the comm: the others wait for it, under the
        timeout. A rank dying during the shrink is left out on every
        survivor. This comm is left only to free (its windows too; freeing
        is local then); calls on it raise BrokenWindowError.

        One node only: across nodes every rank raises BackendUnavailableError
        (ENOTSUP); with an MPI that can shrink (ULFM), shrink the MPI
        communicator instead and make a comm of it:
        ``Comm.from_mpi(mpi_comm.Shrink())``."""
        with Held(self.address):
            return Comm(lambda handle: lib.shmtopo_comm_shrink(self.handle, handle))

    def _free_mpi(self) -> None:
        if self._mpi is not None:
            free_mpi_comm(self._mpi)
            self._mpi = None

    def __repr__(self) -> str:
        if self.freed:
            return "<shmtopo.Comm freed>"
        return f"<shmtopo.Comm rank {self.rank} of {self.size}>"

    @holding_comm
    def bind(self, to: str = "core", policy: str = "compact", *, overload: bool = False) -> list[Placement]:
        """Collective: bind every rank of this node (the whole process, all
        its threads) to one object of type ``to`` ("core", "numa",
        "package", "l3", "pu", any type with CPUs) of the node's shared
        topology, and return where each rank went, in rank order (the same
        list on every rank of the node).

        policy: "compact" puts rank r on object r in logical order (ranks
        fill one package, then the next); "spread" shares ranks out over the
        tree from the top, in proportion to the objects below each branch,
        as hwloc-distrib does (2 ranks on 2 packages: one on each).

        More ranks than objects share them, as mpirun's ``--bind-to`` does
        (compact fills one object, then the next; spread deals ranks out
        round-robin); more ranks than cores or PUs only with
        ``overload=True``. Otherwise, or for a bad argument or different
        arguments on any rank, or a binding the OS refuses on any rank:
        every rank raises ShmtopoValueError (or the failure) and keeps its
        binding."""
        def normalise() -> tuple[str, str, bool]:
            name, how = type_name(type_number(to)), PLACEMENT_POLICIES[placement_policy_number(policy)]
            return name, how, _as_flag(overload, "overload")

        kind = lib.SHMTOPO_KIND_BIND
        to_name, how, overloads = agreement.normalised(self, kind, normalise)
        words = {"count": _packed(how), "extra": _packed(to_name), "flags": int(overloads)}
        agreement.agree(self, kind, **words)
        with share_topology(self) as topo:
            before = topo.get_cpubind()

            def place() -> list[Any]:
                objs = topo.placement(to_name, self.size, how, overload=overloads)
                try:
                    topo.set_cpubind(objs[self.rank])
                except BaseException:
                    topo.set_cpubind(before)
                    raise
                return objs

            objs = agreement.normalised(self, kind, place)
            try:
                agreement.agree(self, kind, **words)
            except BaseException:
                topo.set_cpubind(before)  # another rank failed: all keep what they had
                raise
            return [Placement(r, self.pid(r), o.type, o.logical_index, o.os_index, o.cpuset, o.nodeset)
                    for r, o in enumerate(objs)]

    def split(self, by: str) -> "Comm":
        """Collective: a sub-comm of the ranks bound inside the same object of
        type ``by`` ("package", "numa", "l3", any topology type name); an
        unbound rank goes by the CPU it runs on now. Needs a single-node comm
        made with :meth:`from_mpi`; free the result (windows and fences work
        on it)."""
        return self._split_colored(by)[0]

    @holding_comm
    def _split_colored(self, by: str) -> "tuple[Comm, int]":
        """:meth:`split`, also returning this rank's color (for unbound ranks
        it is only known at the moment of the split)."""
        def normalise() -> str:
            name = type_name(type_number(by))
            if self._mpi is None:
                raise ShmtopoValueError("split needs a comm made with Comm.from_mpi")
            if self.nnodes > 1:
                raise ShmtopoValueError("split works on single-node comms")
            return name

        name = agreement.normalised(self, lib.SHMTOPO_KIND_SPLIT, normalise)
        agreement.agree(self, lib.SHMTOPO_KIND_SPLIT, extra=_packed(name))  # ranks split by one type
        with share_topology(self) as topo:
            color = topo.color_of_this_process(by)
        sub = self.split_by_color(color)
        assert sub is not None
        return sub, color

    @holding_comm
    def split_by_color(self, color: int | None) -> "Comm | None":
        """Collective over the comm (made with from_mpi): the comm of the
        ranks that pass the same color, from a split of its MPI communicator;
        None where color is None (the rank takes part in none)."""
        from mpi4py import MPI  # from_mpi imported it: no cost here

        sub = self._mpi.Split(MPI.UNDEFINED if color is None else color, key=self.rank)
        if color is None:
            return None
        try:
            transport = _oob.mpi_transport(sub, self.timeout)
            return Comm(Comm._created_by(transport, sub.Get_size(), sub.Get_rank()), transport, sub)
        except BaseException:
            sub.Free()
            raise


bind_comm(api, agreement.heard_of, nonblocking.run_queued)


def _as_flag(value: Any, what: str) -> bool:
    if isinstance(value, (bool, np.bool_)) or value in (0, 1):
        return bool(value)
    raise ShmtopoValueError(f"{what} must be True or False, not {value!r}")


#: allocate's placements, in the order of enum shmtopo_placement after the default
PLACEMENTS = ("local", "interleave")
#: allocate's huge_pages values, in the order of enum shmtopo_huge_pages
HUGE_PAGES = (False, True, "required")


def _as_choice(value: Any, choices: tuple[str, ...], what: str) -> str:
    if value is None:
        return choices[0]
    if not isinstance(value, str) or value not in choices:
        raise ShmtopoValueError(f"{what} must be one of {', '.join(map(repr, choices))}, not {value!r}")
    return value


def _huge_pages_number(value: Any) -> int:
    for number, choice in enumerate(HUGE_PAGES):
        if value is choice or (isinstance(value, (bool, np.bool_)) and bool(value) is choice) or (
                isinstance(value, str) and value == choice):
            return number
    raise ShmtopoValueError(f"huge_pages must be False, True or 'required', not {value!r}")


def _chosen_nodes(placement: int) -> tuple[list[int], bool]:
    """The NUMA nodes (os indices) for this rank's part, chosen on the
    node's shared topology when this process holds one, and whether to bind
    them (only a topology of this machine can say where its pages may go).
    None held: ([], False), the kernel places the pages."""
    topo = held_topology()
    if topo is None:
        return [], False
    if placement == lib.SHMTOPO_PLACEMENT_INTERLEAVE:
        numa = topo.objects("numanode")
        with_memory = [n for n in numa if n.local_memory > 0] or numa
        nodes = sorted(n.os_index for n in with_memory if n.os_index is not None)
    else:

        nodes = sorted(topo.cpuset_to_nodeset(os.sched_getaffinity(0)))
    if any(n >= 1024 for n in nodes):
        raise ShmtopoValueError(f"NUMA node {max(nodes)} is beyond the 1024 a window can be placed on")
    return nodes, topo.this_system


def _allocation_layout(nbytes: Any, dtype: Any, shape: Any) -> tuple[np.dtype[Any], tuple[int, ...], int]:
    """dtype, shape and byte count from allocate's nbytes/dtype/shape."""
    try:
        dt = np.dtype(np.uint8 if dtype is None else dtype)
    except TypeError as exc:
        raise ShmtopoValueError(f"dtype {dtype!r} is not a numpy dtype: {exc}") from None
    if dt.hasobject:
        raise ShmtopoValueError(f"dtype {dt} holds Python objects, which cannot live in shared memory")
    if dt.itemsize == 0:
        raise ShmtopoValueError(f"dtype {dt} has no size (give the length, e.g. 'S8')")
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
    except (TypeError, ValueError, OverflowError):
        raise ShmtopoValueError(f"{what} must be an integer, not {value!r}") from None
    if isinstance(value, (bool, np.bool_)) or n != value or n < 0:
        raise ShmtopoValueError(f"{what} must be a non-negative integer, not {value!r}")
    if n > MAX_BYTES:
        raise ShmtopoValueError(f"{what}={n} is too large (at most {MAX_BYTES})")
    return n

