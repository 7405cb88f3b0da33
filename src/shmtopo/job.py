"""The job around the node: how Comm.from_mpi agrees on its options and
splits a job into nodes, and the node plan the collectives use across nodes.
Used when from_mpi finds more than one node, or simulates several with
node_size= / SHMTOPO_NODE_SIZE.

Before a node's comm exists there is no shared memory to agree through, so
from_mpi's own options are agreed over MPI: every rank's settings (all
environment variables, as native/config.c reads them) in one exchange before
the split, every node's outcome in one after. Past that, collectives agree
through the comm (shmtopo_agree_call), whose node leaders fold their node's
verdict into one exchange before any data crosses nodes.
"""
from __future__ import annotations

import errno as _errno
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

from . import _oob, agreement
from ._base import release_holders
from ._native import ffi, lib
from .errors import PeerAbortedError, PeerDeadError, ShmtopoValueError, from_errno, last_error


# -- MPI communicators' lifetime ---------------------------------------------------

def free_mpi_comm(mpi_comm: Any) -> None:
    """Free a communicator shmtopo made, unless MPI is already finalized (a
    program may call MPI.Finalize() itself; freeing after it aborts the job)."""
    from mpi4py import MPI

    if mpi_comm != MPI.COMM_NULL and not MPI.Is_finalized():
        mpi_comm.Free()


_on_free_keyval: Any = None
_finalize_hooked = False


def on_free(mpi_comm: Any, callback: Callable[[], None]) -> None:
    """Run ``callback()`` when MPI frees ``mpi_comm``, whoever calls its
    Free(); MPI_Finalize frees COMM_SELF first, while MPI still works. The
    callbacks hang on the communicator as an attribute (MPI's own way for a
    library to learn of it), so the calls in between pay nothing."""
    from mpi4py import MPI

    global _on_free_keyval
    if _on_free_keyval is None:
        _on_free_keyval = MPI.Comm.Create_keyval(delete_fn=_run_on_free)
    callbacks = mpi_comm.Get_attr(_on_free_keyval)
    if callbacks is None:
        callbacks = []
        mpi_comm.Set_attr(_on_free_keyval, callbacks)
    callbacks.append(callback)


def release_at_finalize() -> None:
    """Once per process: objects built on comms (accelerated comms) drop them,
    and the splits cached below are freed, when MPI_Finalize runs, so that
    none calls into MPI after it."""
    from mpi4py import MPI

    global _finalize_hooked
    if not _finalize_hooked:
        on_free(MPI.COMM_SELF, release_holders)
        on_free(MPI.COMM_SELF, _free_splits)
        _finalize_hooked = True


# -- splits made once per communicator ----------------------------------------------

# (communicator handle, what) -> the split; COMM_NULL where this rank has no part
_splits: dict[tuple[int, Any], Any] = {}
# communicator handle -> what was split of it once (not kept)
_split_once: dict[int, set[Any]] = {}


def split_once(parent: Any, what: Any, split: Callable[[], Any], timeout: float) -> Any:
    """Collective over ``parent``: a new communicator equal to ``split()``
    (COMM_NULL where that gives none). The first call per communicator and
    ``what`` returns ``split()`` itself (most communicators are made into
    one shmtopo comm); the second keeps a split, and it and later calls
    duplicate that with a polled Idup. MPICH spins in blocking calls, and
    with more ranks than cores a Split_type takes 85 ms at 4 ranks on 2
    cores, which every Comm.from_mpi of the same communicator paid."""
    from mpi4py import MPI

    handle = parent.handle
    seen = _split_once.get(handle)
    if seen is None:
        release_at_finalize()
        on_free(parent, lambda: _free_splits(handle))
        seen = _split_once[handle] = set()
    cached = _splits.get((handle, what))
    if cached is None:
        if what not in seen:
            seen.add(what)
            return split()
        cached = _splits[(handle, what)] = split()
    if cached == MPI.COMM_NULL:
        return MPI.COMM_NULL
    return dup_within(cached, timeout, "Comm.from_mpi's copy of a split")


def local_timeout(timeout: Any) -> float:
    """The timeout a rank's own setting gives (`timeout`, else
    SHMTOPO_TIMEOUT), for the waits before the ranks have compared theirs:
    a bad value counts as 0 here, and raises on every rank once compared."""
    try:
        if timeout is not None:
            return agreement.as_timeout(timeout)
    except ShmtopoValueError:
        return 0.0
    cfg = ffi.new("shmtopo_config_t *")
    return float(cfg.timeout) if lib.shmtopo_config_read(cfg) == 0 else 0.0


def dup_within(parent: Any, timeout: float, what: str) -> Any:
    """Collective over ``parent``: a duplicate of it, made with a polled
    Idup, so that a rank that never comes is a ShmtopoTimeoutError after
    `timeout` seconds (0: never) rather than a wait in MPI for ever."""
    dup, request = parent.Idup()
    _oob.wait(request, timeout, what)
    return dup


def _free_splits(handle: int | None = None) -> None:
    """Free the splits cached for one communicator (all of them: None)."""
    for key in [k for k in _splits if handle is None or k[0] == handle]:
        free_mpi_comm(_splits.pop(key))
    if handle is None:
        _split_once.clear()
    else:
        _split_once.pop(handle, None)


def _run_on_free(mpi_comm: Any, keyval: Any, callbacks: list[Callable[[], None]]) -> None:
    for callback in callbacks:
        try:
            callback()
        except Exception as exc:  # noqa: BLE001 - MPI's Free or Finalize must go on
            warnings.warn(f"shmtopo: releasing what was built on a freed communicator failed: {exc}",
                          RuntimeWarning, stacklevel=2)


@dataclass
class NodePlan:
    """Where this rank sits in the job: its rank among all ranks, the nodes,
    and the MPI communicators the across-nodes half uses."""

    world_rank: int
    world_size: int
    nnodes: int = 1
    node_index: int = 0
    node_of: list[int] = field(default_factory=list)     # [world rank] -> node
    local_of: list[int] = field(default_factory=list)    # [world rank] -> rank in its node
    node_sizes: list[int] = field(default_factory=list)  # [node] -> ranks
    world_order: list[int] = field(default_factory=list)  # world ranks, node by node
    world: Any = None      # our own duplicate of the job's comm (never matches user messages)
    leaders: Any = None    # one rank per node (node rank 0 only)
    exchange: Any = None   # the leaders' allgather and barrier (node rank 0 only; _oob.mpi_transport)
    timeout: float = 0.0
    node: Any = None       # this node's native comm, while it listens for news (listen)
    dead: int | None = None  # the job rank whose death this rank heard of or found
    left: int | None = None  # the job rank this rank heard left the comm after an error
    _notice: Any = None    # the receive posted for news of a death, and its buffer
    _checked: float = 0.0  # when the node's processes were last looked at

    @classmethod
    def single(cls, rank: int, size: int) -> "NodePlan":
        return cls(rank, size, 1, 0, [0] * size, list(range(size)), [size], list(range(size)))

    # -- news of a death, across nodes ----------------------------------------
    # A death is seen in shared memory by the dead rank's node only. The
    # ranks of other nodes may be waiting in MPI (for that node's leader),
    # where no liveness check reaches: whoever finds a death sends its rank
    # to every other rank, and every wait in MPI polls for that message (and
    # looks at its own node's processes now and then), so that each survivor
    # raises PeerDeadError naming the dead rank. A rank that leaves the comm
    # after an error (abandon) is news the same way: PeerAbortedError.

    def listen(self, node: Any) -> None:
        """Local: start hearing news of deaths (`node`: this node's native comm)."""
        from mpi4py import MPI

        self.node = node
        buf = bytearray(8)
        self._notice = (self.world.Irecv([buf, MPI.BYTE], source=MPI.ANY_SOURCE, tag=NEWS_TAG), buf)

    def announce(self, rank: int, left: bool = False) -> None:
        """Local: tell every other rank that job rank `rank` died, or (`left`)
        left the comm after an error (the first news only)."""
        from mpi4py import MPI

        if self.dead is not None or self.left is not None or self.world is None or MPI.Is_finalized():
            return
        if left:
            self.left = rank
        else:
            self.dead = rank
        message = (rank | (LEFT_NEWS if left else 0)).to_bytes(8, "little")
        sent = [self.world.Isend([message, MPI.BYTE], dest=other, tag=NEWS_TAG)
                for other in range(self.world_size) if other not in (self.world_rank, rank)]
        MPI.Request.Testall(sent)  # a message this small leaves at the first progress
        _in_flight.append((sent, message))

    def news(self, what: str, node: Any = None) -> None:
        """Raise PeerAbortedError if a rank of the job was heard to have left
        the comm after an error (this rank then leaves its node's comm naming
        it), PeerDeadError if one died: heard of, or found
        on this node (every LIVENESS_PERIOD; `node`: this node's native comm
        where the plan does not listen, as a single node's does not); this
        rank then leaves its node's comm naming the dead rank, so that its
        node-mates name it too."""
        dead, left = self.dead, self.left
        if dead is None and left is None and self._notice is not None and self._notice[0].Test():
            word = int.from_bytes(self._notice[1], "little")
            if word & LEFT_NEWS:
                left = self.left = word & ~LEFT_NEWS
            else:
                dead = self.dead = word
        node = self.node if self.node is not None else node
        if left is not None:
            if node is not None:
                lib.shmtopo_comm_leave_aborted(node, left)
            raise PeerAbortedError(f"rank {left} left the comm after an error while rank {self.world_rank} "
                                   f"waited in {what}", _errno.ECONNABORTED, left)
        if dead is None and node is not None:
            now = time.monotonic()
            if now - self._checked < LIVENESS_PERIOD:
                return
            self._checked = now
            found = lib.shmtopo_comm_dead_peer(node)
            if found < 0:
                return
            self.announce(found)
            dead = found
        if dead is None:
            return
        if node is not None:
            lib.shmtopo_comm_leave_dead(node, dead)
        raise PeerDeadError(f"rank {dead} exited while rank {self.world_rank} waited in {what}",
                            _errno.EOWNERDEAD, dead)

    def free(self) -> None:
        if self._notice is not None:
            from mpi4py import MPI

            request = self._notice[0]
            if not MPI.Is_finalized() and not request.Test():
                request.Cancel()
                request.Wait()
        self._notice = self.node = None
        if self.world is not None and (self.dead is not None or self.left is not None):
            # news sent here or to here by several finders may still be unread
            # on it, or on its way: freed, its context would go to a later
            # communicator, which would meet the messages (Open MPI crashed)
            _kept_for_news.append(self.world)
            self.world = None
        for c in (self.leaders, self.world):
            if c is not None:  # never COMM_NULL: job_verdict keeps None instead
                free_mpi_comm(c)
        self.leaders = self.world = self.exchange = None


#: the plans' own communicators that carried news: kept until MPI_Finalize
_kept_for_news: list[Any] = []


NEWS_TAG = 0x5E7     # news of a death on the plan's own duplicate of the job's comm
LEFT_NEWS = 1 << 62  # in the news: the rank left the comm after an error (else it died)
LIVENESS_PERIOD = 0.02  # seconds between looks at the node's processes, as native waits do
# news sent: MPI may still read the buffers
_in_flight: list[tuple[list[Any], bytes]] = []


@dataclass
class Settings:
    node_size: int   # 0: real nodes
    timeout: float
    offers: list[Any] = field(default_factory=list)  # every rank's offer, as job_bootstrap was given it


def _raise_everywhere(records: list[Any], what: str) -> None:
    """Raise the first rank's problem (the same text on every rank)."""
    for rank, problem in enumerate(records):
        if problem is not None:
            raise ShmtopoValueError(f"{what}: rank {rank}: {problem}", 22, rank)


def job_bootstrap(parent: Any, node_size: Any, timeout: Any, offer: Any = None) -> Settings:
    """Every rank's settings and options, checked on its own rank, then
    compared: a bad or differing one raises ShmtopoValueError on every rank.
    `offer` (any picklable value) travels with them: Settings.offers."""
    cfg = ffi.new("shmtopo_config_t *")
    problem = None
    if lib.shmtopo_config_read(cfg) < 0:
        problem = str(last_error())
    seconds = float(cfg.timeout)
    try:
        if node_size is not None:
            if isinstance(node_size, bool) or int(node_size) != node_size or int(node_size) < 1:
                raise ValueError
            # the keyword stands in for the variable, and is compared as it
            cfg.node_size = int(node_size)
            cfg.text[lib.SHMTOPO_VAR_NODE_SIZE] = f"node_size={int(node_size)}".encode()[:47]
    except (TypeError, ValueError, OverflowError):
        problem = problem or f"node_size must be a positive number of ranks, not {node_size!r}"
    try:
        if timeout is not None:
            seconds = agreement.as_timeout(timeout)
    except ShmtopoValueError as exc:
        problem = problem or str(exc)
    # The exchange itself can only wait as long as this rank's own setting.
    records = _oob.allgather_objects(parent, (problem, bytes(ffi.buffer(cfg)), offer), seconds,
                                     "Comm.from_mpi's exchange of settings")
    _raise_everywhere([r[0] for r in records], "Comm.from_mpi")
    cfgs = ffi.new("shmtopo_config_t[]", len(records))
    for i, r in enumerate(records):
        ffi.memmove(ffi.addressof(cfgs, i), r[1], ffi.sizeof("shmtopo_config_t"))
    if lib.shmtopo_config_compare(cfgs, len(records), ffi.NULL) < 0:
        raise last_error()
    return Settings(int(cfg.node_size), seconds, [r[2] for r in records])


def one_node(parent: Any, node: Any) -> bool:
    """Whether this node's split of ``parent`` is all of it: one node, ranked
    as the parent (the splits' key is the parent's rank)."""
    return bool(node.Get_size() == parent.Get_size())


def job_verdict(parent: Any, node: Any, failure: BaseException | None, timeout: float) -> NodePlan:
    """After each node made its comm: every rank learns whether all nodes
    did (else every rank raises the first failure), and the job's layout."""
    from mpi4py import MPI

    record = None
    if failure is not None:
        record = (getattr(failure, "errno", None) or 5, str(failure) or type(failure).__name__)
    if one_node(parent, node):
        leader_world = 0  # its first rank leads
    else:
        leader = bytearray(8)
        mine = parent.Get_rank().to_bytes(8, "little")
        _oob.wait(node.Ibcast([mine if node.Get_rank() == 0 else leader, MPI.BYTE], root=0), timeout,
                  "Comm.from_mpi", mine, leader)
        leader_world = parent.Get_rank() if node.Get_rank() == 0 else int.from_bytes(leader, "little")
    records = _oob.allgather_objects(parent, (record, leader_world, node.Get_rank()), timeout,
                                     "Comm.from_mpi's exchange of outcomes")
    for rank, (rec, _, _) in enumerate(records):
        if rec is not None:
            if failure is not None and not isinstance(failure, Exception):
                raise failure  # KeyboardInterrupt, SystemExit: unchanged here
            err, message = rec
            raise from_errno(err, f"Comm.from_mpi failed on rank {rank}: {message}", rank)
    leaders = sorted({r[1] for r in records})
    world_rank, world_size = parent.Get_rank(), parent.Get_size()
    node_of = [leaders.index(r[1]) for r in records]
    local_of = [r[2] for r in records]
    plan = NodePlan(world_rank, world_size, len(leaders), node_of[world_rank], node_of, local_of,
                    [node_of.count(n) for n in range(len(leaders))],
                    sorted(range(world_size), key=lambda w: (node_of[w], local_of[w])), timeout=timeout)
    if plan.nnodes > 1:
        plan.world = split_once(parent, "world", parent.Dup, timeout)
        leaders = split_once(parent, ("leaders", tuple(node_of)), lambda: parent.Split(
            0 if node.Get_rank() == 0 else MPI.UNDEFINED, key=world_rank), timeout)
        if leaders != MPI.COMM_NULL:
            plan.leaders = leaders
            plan.exchange = _oob.mpi_transport(leaders, timeout, plan.news, "the node leaders'")
    return plan
