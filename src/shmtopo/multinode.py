"""The job around the node: how Comm.from_mpi agrees on its options and
splits a job into nodes, the node plan collectives use, and the across-nodes
half of hierarchical collectives (shared memory inside each node, mpi4py
between one leader per node, node rank 0). Used when from_mpi finds more than
one node, or simulates several with node_size= / SHMTOPO_NODE_SIZE.

Before a node's comm exists there is no shared memory to agree through, so
from_mpi's own options are agreed over MPI: every rank's settings (all
environment variables, as native/config.c reads them) in one exchange before
the split, every node's outcome in one after. Past that, collectives agree
through the comm (shmtopo_agree_call), whose node leaders fold their node's
verdict into one exchange before any data crosses nodes.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, TypeVar

import numpy as np

from . import _oob, agreement
from ._native import ffi, lib
from .errors import ShmtopoValueError, from_errno, last_error

T = TypeVar("T")

if TYPE_CHECKING:
    from .comm import Comm


# ---- the node plan ----------------------------------------------------------------

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
    timeout: float = 0.0

    @classmethod
    def single(cls, rank: int, size: int) -> "NodePlan":
        return cls(rank, size, 1, 0, [0] * size, list(range(size)), [size], list(range(size)))

    def free(self) -> None:
        for c in (self.leaders, self.world):
            if c is not None:  # never COMM_NULL: job_verdict keeps None instead
                c.Free()
        self.leaders = self.world = None


# ---- agreeing on from_mpi's options ---------------------------------------------------

@dataclass
class Settings:
    node_size: int   # 0: real nodes
    timeout: float


def _raise_everywhere(records: list[Any], what: str) -> None:
    """Raise the first rank's problem (the same text on every rank)."""
    for rank, problem in enumerate(records):
        if problem is not None:
            raise ShmtopoValueError(f"{what}: rank {rank}: {problem}", 22, rank)


def job_bootstrap(parent: Any, node_size: Any, timeout: Any) -> Settings:
    """Every rank's settings and options, checked on its own rank, then
    compared: a bad or differing one raises ShmtopoValueError on every rank."""
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
    records = _oob.allgather_objects(parent, (problem, bytes(ffi.buffer(cfg))), seconds,
                                     "Comm.from_mpi's exchange of settings")
    _raise_everywhere([r[0] for r in records], "Comm.from_mpi")
    cfgs = ffi.new("shmtopo_config_t[]", len(records))
    for i, r in enumerate(records):
        ffi.memmove(ffi.addressof(cfgs, i), r[1], ffi.sizeof("shmtopo_config_t"))
    if lib.shmtopo_config_compare(cfgs, len(records), ffi.NULL) < 0:
        raise last_error()
    return Settings(int(cfg.node_size), seconds)


def job_verdict(parent: Any, node: Any, failure: BaseException | None, timeout: float) -> NodePlan:
    """After each node made its comm: every rank learns whether all nodes
    did (else every rank raises the first failure), and the job's layout."""
    from mpi4py import MPI

    record = None
    if failure is not None:
        record = (getattr(failure, "errno", None) or 5, str(failure) or type(failure).__name__)
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
        plan.world = parent.Dup()
        leaders = plan.world.Split(0 if node.Get_rank() == 0 else MPI.UNDEFINED, key=world_rank)
        plan.leaders = None if leaders == MPI.COMM_NULL else leaders
    return plan


# ---- the across-nodes half --------------------------------------------------------------

_MPI_OPS = ("SUM", "PROD", "MIN", "MAX", "BAND", "BOR", "BXOR", "LAND", "LOR", "LXOR", "MAXLOC", "MINLOC")
# mpi4py cannot type a structured array from its buffer: the pair types by name
_MPI_PAIRS = {lib.SHMTOPO_FLOAT_INT: "FLOAT_INT", lib.SHMTOPO_DOUBLE_INT: "DOUBLE_INT",
              lib.SHMTOPO_LONG_INT: "LONG_INT", lib.SHMTOPO_2INT: "INT_INT", lib.SHMTOPO_SHORT_INT: "SHORT_INT"}


def _mpi_op(opc: int, code: int) -> Any:
    from mpi4py import MPI

    name = _MPI_OPS[opc]
    if code == lib.SHMTOPO_BOOL and name in ("BAND", "BOR", "BXOR"):
        name = "L" + name[1:]  # MPI's bitwise ops take no C_BOOL; on 0/1 they are the logical ones
    return getattr(MPI, name)


def _typed(a: np.ndarray, code: int) -> Any:
    """a as an MPI buffer of its element type (code: its shmtopo dtype)."""
    from mpi4py import MPI

    if code in _MPI_PAIRS:
        return [a.reshape(-1).view(np.uint8), getattr(MPI, _MPI_PAIRS[code])]
    return a


def _bytes(a: np.ndarray) -> Any:
    """a as bytes, for calls that only move data (any element type)."""
    return a.reshape(-1).view(np.uint8)


def _wait(plan: NodePlan, request: Any, what: str, *buffers: Any) -> None:
    _oob.wait(request, plan.timeout, what, *buffers)


def across(comm: Comm, fn: Callable[..., T], *args: Any) -> T:
    """Run the across-nodes half of a call; an exception in it leaves the
    comm (peers fail instead of waiting) and propagates."""
    try:
        return fn(comm, *args)
    except BaseException:
        agreement.leave(comm)
        raise


def node_root(plan: NodePlan, root: int) -> tuple[int, int]:
    return plan.node_of[root], plan.local_of[root]


def leaders_barrier(comm: "Comm") -> None:
    plan = comm.plan
    if plan.leaders is not None:
        _wait(plan, plan.leaders.Ibarrier(), "barrier between nodes")


def leaders_allreduce(comm: "Comm", result: np.ndarray, opc: int, code: int) -> None:
    """The node leaders' partials (of shmtopo dtype `code`) reduced in place."""
    from mpi4py import MPI

    plan = comm.plan
    if plan.leaders is not None and result.size:
        _wait(plan, plan.leaders.Iallreduce(MPI.IN_PLACE, _typed(result, code), op=_mpi_op(opc, code)),
              "allreduce between nodes", result)


def leaders_reduce(comm: "Comm", result: np.ndarray, opc: int, root_node: int, code: int) -> None:
    plan = comm.plan
    if plan.leaders is not None and result.size:
        # No MPI_IN_PLACE: MPICH 4.0.2's Reduce crashes with it at a root
        # other than 0 (and wants a receive buffer on every rank).
        mine = result.copy()
        out = result if plan.leaders.Get_rank() == root_node else np.empty_like(mine)
        _wait(plan, plan.leaders.Ireduce(_typed(mine, code), _typed(out, code), op=_mpi_op(opc, code),
                                         root=root_node), "reduce between nodes", mine, out)


def leaders_bcast(comm: "Comm", result: np.ndarray, root_node: int) -> None:
    plan = comm.plan
    if plan.leaders is not None and result.size:
        _wait(plan, plan.leaders.Ibcast(_bytes(result), root=root_node), "bcast between nodes", result)


def leaders_allgather(comm: "Comm", node_rows: np.ndarray, result: np.ndarray, count: int) -> None:
    """Leaders gather whole nodes in node order; rows then go to world ranks."""
    plan = comm.plan
    if plan.leaders is not None and result.size:
        counts = [n * count * result.itemsize for n in plan.node_sizes]  # bytes
        gathered = np.empty_like(result)
        _wait(plan, plan.leaders.Iallgatherv(_bytes(node_rows), [_bytes(gathered), counts]),
              "allgather between nodes", node_rows, gathered)
        result[plan.world_order] = gathered


def world_alltoall(comm: "Comm", a: np.ndarray, result: np.ndarray) -> None:
    """Across nodes there is no shared memory to use: MPI's own alltoall."""
    plan = comm.plan
    _wait(plan, plan.world.Ialltoall(_bytes(a), _bytes(result)), "alltoall", a, result)



# The rooted and varying-count calls go to MPI's own across nodes, as
# alltoall does, once the job agreed on them (and on their counts):
# collectives.py gathers what the counts check needs first. MPI wants no
# aliased buffers, so an input that lies inside the result travels as a copy.

def _apart(a: np.ndarray, result: np.ndarray | None) -> np.ndarray:
    return a.copy() if result is not None and np.may_share_memory(a, result) else a


def _layout(array: np.ndarray, counts: Any, displs: Any) -> Any:
    return [array, (counts.tolist(), displs.tolist())]


def world_gatherv(comm: "Comm", a: np.ndarray, result: np.ndarray | None, counts: Any, displs: Any,
                  root: int) -> None:
    plan = comm.plan
    recv = _layout(result, counts, displs) if result is not None else None
    mine = _apart(a, result)
    _wait(plan, plan.world.Igatherv(mine, recv, root=root), "gatherv", mine, result)


def world_scatterv(comm: "Comm", a: np.ndarray | None, result: np.ndarray, counts: Any, displs: Any,
                   root: int) -> None:
    plan = comm.plan
    send = _layout(_apart(a, result), counts, displs) if a is not None else None
    _wait(plan, plan.world.Iscatterv(send, result, root=root), "scatterv", send, result)


def world_allgatherv(comm: "Comm", a: np.ndarray, result: np.ndarray, counts: Any, displs: Any) -> None:
    plan = comm.plan
    mine = _apart(a, result)
    _wait(plan, plan.world.Iallgatherv(mine, _layout(result, counts, displs)), "allgatherv", mine, result)


def world_alltoallv(comm: "Comm", a: np.ndarray, result: np.ndarray, sendcounts: Any, sdispls: Any,
                    recvcounts: Any, rdispls: Any) -> None:
    plan = comm.plan
    _wait(plan, plan.world.Ialltoallv(_layout(a, sendcounts, sdispls), _layout(result, recvcounts, rdispls)),
          "alltoallv", a, result)
