"""shmtopo.accel.comm: an mpi4py communicator whose upper-case buffer
collectives run through shmtopo's shared memory, switched on with one line.

``acomm = shmtopo.accelerate(comm)`` is an instance of a subclass of
``comm``'s own mpi4py class (AcceleratedIntracomm of an Intracomm,
AcceleratedCartcomm of a Cartcomm, ...) that holds the same MPI handle, as
``MPI.Intracomm(comm)`` would: it is an mpi4py communicator wherever mpi4py
takes one (``MPI.Win.Allocate_shared(..., comm=acomm)``, ``MPI.File.Open``,
``isinstance(acomm, MPI.Comm)``), and what it does not define is mpi4py's.
Barrier, Bcast, Reduce, Allreduce, Allgather, Alltoall and
Reduce_scatter_block run on a :class:`shmtopo.Comm` made with
``Comm.from_mpi(comm)`` (hierarchical across nodes) when their arguments
allow it, and otherwise go to MPI with the very arguments they were given,
so that their results are MPI's. Gather, Scatter, their v-variants,
Allgatherv, Alltoallv, Alltoallw, Reduce_scatter, Scan and Exscan do the same
through the core's lower-case calls. The lower-case collectives of Python objects
(bcast, allreduce, ...) run in shared memory with mpi4py's results
(accel/objects.py). The nonblocking ones (Iallreduce, ...) run as the
blocking call on a progress thread of the comm's own (accel/nonblocking.py).
The persistent ``..._init`` calls return requests whose ``Start`` makes the
blocking call. Dup, Split, Create_cart and
the other constructors return accelerated comms of their own class.

Every rank takes the same path: a rank on shmtopo's path waits in shmtopo,
a rank on MPI's waits in MPI. So each call reads its arguments on its own
rank, as mpi4py reads them, and a rank whose arguments only MPI takes
posts, in the call's own agreement, a signature that says so (the
operation, the root of rooted calls, the op of reductions). MPI requires
matching type signatures, not the same buffer forms, so where the other
ranks would run the call here, the verdict is that every rank hands it to
MPI, each with its own arguments (DelegatedToMPI, caught here and in
CommFast's C methods); ranks that disagree in the operation, root or op
raise the same ShmtopoValueError on every rank, before any data moves.
Arguments mpi4py would refuse make this rank invalid in that agreement:
every rank raises.

A comm derived from an accelerated one (Dup, Split, Create_cart, Sub...)
makes its shmtopo comm at its first call that shmtopo would run, so that
making one costs what MPI's constructor costs. Free() and shm_free() are
local, as MPI_Comm_free is in practice (Comm.release: a clean departure).
"""
from __future__ import annotations

import functools
import operator
import threading
import weakref
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from .. import agreement, progress, sharing
from .._fastpath import CallCounts, CommFast, bind_comm_fast
from .._base import holds_comm
from .._types import (OPS, ALLGATHER, ALLGATHERV, ALLREDUCE, ALLTOALL, ALLTOALLV, ALLTOALLW, BARRIER, BCAST, EXSCAN, GATHER, GATHERV,
                      REDUCE, REDUCE_SCATTER, SCAN, SCATTER, SCATTERV)
from .._native import lib
from ..comm import Comm
from ..job import on_free, release_at_finalize
from ..errors import DelegatedToMPI, FreedError, ShmtopoArgumentError, ShmtopoValueError
from . import nonblocking, objects, plans
from .buffers import Array
from .plans import Call
from .tables import SUM_DEFAULT, LeftToMPI, Tables, get_tables
from .window import STRICT_VARIABLE, accelerate_window, agreed_strictness, copies_state, mpi_new


#: Upper-case collectives that run in shared memory when their arguments allow.
ACCELERATED = ("Barrier", "Bcast", "Reduce", "Allreduce", "Allgather", "Alltoall", "Reduce_scatter_block")

#: Upper-case collectives that run in shared memory when their arguments
#: allow, through the core's lower-case call of the same name; else they go to MPI.
LOWER_CASE = ("Gather", "Gatherv", "Scatter", "Scatterv", "Allgatherv", "Alltoallv", "Alltoallw", "Reduce_scatter", "Scan",
              "Exscan")

#: Persistent collectives: a request whose Start() makes the blocking call
#: (accelerated or delegated as that call is, each start on its own).
PERSISTENT = tuple(f"{name}_init" for name in ACCELERATED + LOWER_CASE)
#: Alltoallw on a derived comm goes to MPI for this many calls before the comm
#: makes its shmtopo comm for it: making one (~0.5 ms: its segment's pages,
#: the sweep) and flattening its datatypes (~0.1 ms each) pays back only over
#: many calls, and a plan made for a few calls (a transform made, run forward
#: and back, and destroyed) would only pay it.
ALLTOALLW_WARM_UP = 8

#: Constructors whose new communicator comes back accelerated (COMM_NULL as it is).
CONSTRUCTORS = ("Dup", "Dup_with_info", "Clone", "Split", "Split_type", "Create", "Create_group")

# A delegating rank's signature: marked so (the core describes it as
# "delegated to MPI"), so that it differs from every accelerated one.
_SIG_TO_MPI = lib.SHMTOPO_SIG_DELEGATED

# The plain case in C.
#
# Most calls are plain: a buffer of a predefined datatype shmtopo moves
# (a numpy array alone, or mpi4py's [buf, count, type] of a slice, a
# bytearray, an mmap...), a predefined op, an int root, by position. The
# accelerated classes' first base, shmtopo._fastpath.CommFast, has a C
# method for each collective of FAST_CALLS, whose accel_* entry takes those
# straight to the core and counts them (in _fast_counts); anything else
# goes to the Python method of the same name below, and through the planner
# (plans.py): reading buffer specs in Python would cost more than the
# collective itself. What the entries take for plain is what the planner
# decides for those arguments, from its own tables (tables.py binds them).
FAST_CALLS = ("Barrier", "Bcast", "Reduce", "Allreduce", "Allgather", "Alltoall", "Reduce_scatter_block", "Gather",
              "Scatter", "Gatherv", "Scatterv", "Allgatherv", "Alltoallv", "Reduce_scatter", "Scan", "Exscan",
              "Alltoallw")

# The calls whose counts may differ by rank (and be 0 on some): a type
# shmtopo does not move in one rank's message says nothing of another's.
_V_CALLS = frozenset(["Gatherv", "Scatterv", "Allgatherv", "Alltoallv", "Alltoallw", "Reduce_scatter"])

# ---- the communicator ----------------------------------------------------------------

class _Stats(dict):  # type: ignore[type-arg]
    """An accelerated comm's {collective: [accelerated, went to MPI]}: a
    name's entry appears at its first count (``stats[name][i] += 1``, as
    every count is), so the stats keep the order of the first calls, and
    each later count is a plain dict's and a plain list's, in C."""

    __slots__ = ()

    def __missing__(self, name: str) -> list[int]:
        counts = self[name] = [0, 0]
        return counts


class _Side:
    """An accelerated comm's shmtopo side, which its copies (``copy.copy``,
    ``type(c)(c)``) share: the shmtopo comm once made, and whether it is
    still to be made (a derived comm makes it at its first call that shmtopo
    would run), and the progress of its nonblocking collectives once one is
    posted. Dropped (locally) by Free(), shm_free(), at exit, at
    MPI_Finalize, when MPI frees the handle, or when the last copy is gone."""

    __slots__ = ("shm", "lazy", "progress", "alltoallw_calls", "__weakref__")

    def __init__(self, shm: Comm | None = None, lazy: bool = True) -> None:
        self.shm, self.lazy = shm, lazy
        self.progress: nonblocking.Progress | None = None
        self.alltoallw_calls = 0  # made while the shmtopo comm is still to be made (ALLTOALLW_WARM_UP)

    def _release(self) -> None:
        """Local: drop the shmtopo comm, as a clean departure (Comm.release);
        the nonblocking collectives posted still run, then their thread ends."""
        shm, self.shm, self.lazy = self.shm, None, False
        progress, self.progress = self.progress, None
        if progress is not None:
            progress.close()
        if shm is not None:
            shm.release()

    def __del__(self) -> None:
        # dropped without Free(), as mpi4py programs drop communicators: the
        # release is local, so the garbage collector may do it
        if self.shm is not None or self.progress is not None:
            try:
                self._release()
            except Exception:  # noqa: BLE001 - nothing to tell from a collector
                pass


#: an accelerated comm's state; a derived comm starts with `_origin` alone,
#: the comm it came from, and takes the rest at its first read of any
#: (_lazy_state): making it then costs MPI's constructor and
#: one slot. (`_origin` last: a copy takes the state, made by then, not it.)
_STATE = ("_comm", "_shm", "_side", "_tables", "_strict", "_stats", "_fast_counts", "_options")
_OWN = _STATE + ("_origin",)


class AcceleratedComm:
    """An mpi4py intracommunicator whose upper-case buffer collectives run
    through shmtopo's shared memory where their arguments allow it.

    The base of the accelerated classes :func:`accelerate` makes, one per
    mpi4py communicator class (``AcceleratedIntracomm(AcceleratedComm,
    MPI.Intracomm)``, ``AcceleratedCartcomm``, ...): an accelerated comm is
    an instance of its mpi4py class, holding the same MPI handle as the
    communicator it was made from (:attr:`mpi_comm`), and what it does not
    define is mpi4py's (``Get_rank``, ``Send``...). :attr:`shm_comm` is the :class:`shmtopo.Comm` its
    collectives run on; :meth:`Free` frees that and then the MPI
    communicator, :meth:`shm_free` only that.
    """

    if not TYPE_CHECKING:  # (a mixin: mypy would hold it to its own, empty, slots)
        __slots__ = ()  # the concrete classes hold _OWN

    _comm: Any
    _shm: Comm | None  # what CommFast's C methods read: _side.shm, as last seen here
    _side: _Side
    _tables: Tables
    _strict: bool
    _stats: _Stats
    _fast_counts: Any  # shmtopo._fastpath.CallCounts: the calls CommFast's C methods ran
    _options: dict[str, Any]

    def _attach(self, comm: Any | None, side: _Side, tables: Tables, strict: bool, options: dict[str, Any]) -> None:
        self._options = options  # accelerate()'s, for the comms Dup() and the like make
        self._comm = comm
        self._side = side
        self._shm = side.shm
        self._tables = tables
        self._strict = strict
        self._stats = _Stats()
        self._fast_counts = CallCounts()

    if TYPE_CHECKING:  # for type checkers only: at run time these are the mpi4py base class's
        _origin: AcceleratedComm  # a derived comm's, until it takes its state

        def __getattr__(self, name: str) -> Any:
            """The mpi4py communicator's attribute (Get_rank, Send, ...)."""

    def _mpi(self) -> Any:
        """MPI's own methods on this comm's handle (the mpi4py base class's)."""
        return super(AcceleratedComm, self)

    def _plain(self) -> Any:
        """A plain mpi4py communicator on this comm's handle, for mpi4py's
        constructors (which make objects of their receiver's class)."""
        return _PLAIN[type(self)](self)

    # -- what it is -------------------------------------------------------
    @property
    def mpi_comm(self) -> Any:
        """The mpi4py communicator this comm was made from (the same MPI
        handle; for a derived comm, a plain one made when first asked)."""
        comm = self._comm
        if comm is None:
            comm = self._comm = _PLAIN[type(self)](self)
        return comm

    @property
    def shm_comm(self) -> Comm:
        """The shmtopo comm the collectives run on (made by ``Comm.from_mpi``;
        a derived comm makes it at its first call that shmtopo runs)."""
        shm = self._side.shm
        if shm is None:
            raise FreedError("the accelerated comm's shmtopo comm " + (
                "is made at its first accelerated call" if self._side.lazy else "has been freed"), 9)
        return shm

    @property
    def strict(self) -> bool:
        """True when a call that would go to MPI raises instead (SHMTOPO_ACCEL_STRICT=1)."""
        return self._strict

    def shm_stats(self) -> dict[str, tuple[int, int]]:
        """Local: {operation: (accelerated calls, delegated calls)} for each
        collective called at least once, in the order of the first calls."""
        fast, handed = self._fast_counts.count_of, self._fast_counts.delegated_of
        counts = {name: (n[0] + fast(name), n[1] + handed(name)) for name, n in self._stats.items()}
        return {name: n for name, n in counts.items() if n[0] or n[1]}

    def shm_delegated(self, name: str) -> int:
        """Local: how many ``name`` calls went to MPI (shm_stats' second count)."""
        stats = self._stats.get(name)
        return int(self._fast_counts.delegated_of(name)) + (stats[1] if stats is not None else 0)

    def __repr__(self) -> str:
        return f"<shmtopo.{type(self).__name__} of {self.mpi_comm!r}>"

    # -- lifetime ---------------------------------------------------------
    def shm_free(self) -> None:
        """Local: drop the shmtopo comm without waiting for the other ranks
        (as ``MPI_Comm_free`` does in practice); afterwards every collective
        goes to the wrapped communicator, so call it on every rank before
        the next collective on this comm. Freeing twice is a no-op."""
        self._release()

    def Free(self) -> None:
        """Local, as MPI's in practice: drop the shmtopo comm (as
        :meth:`shm_free`), then free the MPI communicator (mpi4py's
        ``Free()``: MPI refuses to free COMM_WORLD). Ranks may free in any
        order, also from ``__del__`` at whatever moment each rank's garbage
        collector runs. Like every mpi4py copy of a handle, :attr:`mpi_comm`
        then holds a freed handle."""
        progress = self._side.progress
        self._release()
        if progress is not None:
            progress.wait_opened()  # MPI may not free a comm while an Idup of it is pending
        self._mpi().Free()

    def _release(self) -> None:
        """Local: drop the shmtopo comm without an agreement, as a clean
        departure (Comm.release: a peer still finishing the call before is
        not disturbed). The calls go to the MPI communicator afterwards."""
        self._shm = None
        self._side._release()

    def _shm_now(self) -> Comm | None:
        """The shmtopo comm this call runs on, None once freed. A derived
        comm still to be set up makes it here, at its first call that
        shmtopo would run: collective, as that call is, over the same ranks."""
        side = self._side
        if side.lazy:
            _set_up(side, self.mpi_comm, self._options)
        shm = side.shm
        if shm is not self._shm:  # made here, or freed through a copy
            self._shm = shm
        return shm

    # -- taking one path on every rank ------------------------------------
    def _plan(self, shm: Comm | None, kind: int, name: str, normalise: Callable[..., Call],
              *args: Any) -> Call | str:
        """This rank's arguments, read and checked on this rank: what shmtopo
        runs, or why the call goes to MPI. Invalid arguments fail the call's
        agreement, so that every rank raises."""
        if shm is None:
            return "the shmtopo comm has been freed"

        def plan() -> Call | str:
            try:
                return normalise(shm, *args)
            except LeftToMPI as why:
                return str(why)
            except Exception as exc:  # noqa: BLE001 - every rank hears of it
                raise ShmtopoValueError(f"{name}: {exc}") from None
        return agreement.normalised(shm, kind, plan)

    def _op_word(self, op: Any) -> int:
        """The op of a delegated reduction as its signature carries it (the
        agreement compares it with the others' where both are known): 1 + the
        core's code, SHMTOPO_SIG_USER_OP for an op the program made, else 0."""
        t = self._tables
        if not isinstance(op, t.Op):
            return 0
        name = t.ops.get(t.handle(op))
        if name is not None:
            return 1 + int(OPS[name])
        return 0 if op.is_predefined else int(lib.SHMTOPO_SIG_USER_OP)

    def _agree_on_mpi(self, kind: int, name: str, reason: str, root: Any = None, op: Any = None) -> None:
        """Before a call goes to MPI: agree with every rank that it does (in
        strict mode, fail the call on every rank instead)."""
        shm = self._shm_now()
        message = f"{name} is delegated to MPI ({reason}), and {STRICT_VARIABLE}=1"
        if shm is None:
            if self._strict:
                raise ShmtopoValueError(message)
            return
        if self._strict:
            agreement.refuse(shm, kind, ShmtopoValueError(message))
        # a rooted call has been through _root_rank, so this is a rank of the comm
        r = -1 if root is None else operator.index(root)
        agreement.agree(shm, kind, root=r, extra=self._op_word(op), flags=_SIG_TO_MPI)

    def _run_plan(self, call: Callable[..., Any], plan: Call, *args: Any, **kwargs: Any) -> None:
        call(self._shm, *args, **kwargs)
        if plan.back is not None and plan.out is not None:
            plan.back[...] = plan.out.reshape(plan.back.shape)

    def _shm_or_mpi(self, kind: int, name: str, planner: Callable[..., Call], mpi_args: tuple[Any, ...],
                    run: Callable[[Call], None], root: Any = None, op: Any = None) -> None:
        """One accelerated collective: plan it on this rank, then run it in
        shared memory, or agree that it goes to MPI and hand MPI the caller's
        own arguments."""
        why = plans.mpi_only(self._tables, name, mpi_args, op, name in _V_CALLS)
        if why is not None:  # every rank knows it from its own arguments: no agreement, no set-up
            if self._strict:
                raise ShmtopoArgumentError(f"{name} is delegated to MPI ({why}), and {STRICT_VARIABLE}=1")
            getattr(self._mpi(), name)(*mpi_args)
            self._stats[name][1] += 1
            return
        shm = self._shm_now()
        try:
            plan = self._plan(shm, kind, name, planner, self._tables, *mpi_args)
            if isinstance(plan, str):
                self._agree_on_mpi(kind, name, plan, root, op)
            else:
                run(plan)
        except DelegatedToMPI:  # another rank's arguments are MPI's alone: every rank hands the call over
            plan = "another rank's arguments"
        except ShmtopoValueError as exc:  # bad or disagreeing arguments, the same on every rank
            raise ShmtopoArgumentError(str(exc), exc.errno or 22, exc.rank) from None
        if isinstance(plan, str):
            getattr(self._mpi(), name)(*mpi_args)  # MPI's exceptions as they are
            self._stats[name][1] += 1
            return
        self._stats[name][0] += 1

    def _mpi_only_call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """A collective always handed to MPI: every rank does, so
        no path needs agreeing (strictness is the same on every rank)."""
        if self._strict:
            raise ShmtopoValueError(f"{name} is not accelerated (it always goes to MPI), and "
                                    f"{STRICT_VARIABLE}=1")
        result = getattr(self._mpi(), name)(*args, **kwargs)
        self._stats[name][1] += 1
        return result

    def _nonblocking(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A nonblocking collective (`name`): its request, the blocking call
        of its name posted to this comm's progress thread (nonblocking.py);
        MPI's own call once the shmtopo comm is freed, or where no second
        thread may call MPI."""
        side, MPI = self._side, self._tables.MPI
        if (side.shm is None and not side.lazy) or not progress.threads_may_call_mpi():
            return self._mpi_only_call(name, *args, **kwargs)
        queue = side.progress
        if queue is None:
            queue = side.progress = self._progress()
        call = nonblocking.new_call(name, args, kwargs)
        request = nonblocking.new_request(MPI, queue, call)
        queue.post(call)
        return request

    def _progress(self) -> nonblocking.Progress:
        """Local (it posts a nonblocking Idup, in its place among the
        collectives): the progress of this comm's nonblocking collectives,
        on a duplicate of the comm their thread makes usable."""
        dup, opened = self._plain().Idup()
        stats = self._stats

        def count(name: str, accelerated: bool) -> None:
            stats["I" + name.lower()][0 if accelerated else 1] += 1
        private = self._wrapped(dup)
        # its thread shares a core with the program's own work: it does not spin
        private._options = {**self._options, "waits": progress.WAITS}
        private._side.alltoallw_calls = ALLTOALLW_WARM_UP  # it lives as long as this comm: no warm-up
        shm = self._side.shm  # (none yet on a derived comm: no news of a death for the Idup's wait)
        return nonblocking.Progress(private, opened, count, None if shm is None else shm.news,
                                    0.0 if shm is None else shm.timeout)

    # -- the accelerated collectives --------------------------------------
    def Barrier(self) -> None:
        """Collective: as mpi4py's ``Barrier``, in shared memory."""
        shm = self._shm_now()
        if shm is None:
            self._agree_on_mpi(BARRIER, "Barrier", "the shmtopo comm has been freed")
            self._mpi().Barrier()
            self._stats["Barrier"][1] += 1
            return
        shm.barrier()
        self._stats["Barrier"][0] += 1

    def Bcast(self, buf: Any, root: int = 0) -> None:
        """Collective: as mpi4py's ``Bcast``."""
        self._shm_or_mpi(BCAST, "Bcast", plans.bcast, (buf, root),
                         lambda p: self._run_plan(Comm.bcast, p, p.send, p.root, out=p.out), root)

    def Reduce(self, sendbuf: Any, recvbuf: Any, op: Any = SUM_DEFAULT, root: int = 0) -> None:
        """Collective: as mpi4py's ``Reduce``."""
        op = self._tables.SUM if op is SUM_DEFAULT else op
        self._shm_or_mpi(REDUCE, "Reduce", plans.reduce, (sendbuf, recvbuf, op, root),
                         lambda p: self._run_plan(Comm.reduce, p, p.send, p.op, p.root, out=p.out), root, op)

    def Allreduce(self, sendbuf: Any, recvbuf: Any, op: Any = SUM_DEFAULT) -> None:
        """Collective: as mpi4py's ``Allreduce``."""
        op = self._tables.SUM if op is SUM_DEFAULT else op
        self._shm_or_mpi(ALLREDUCE, "Allreduce", plans.allreduce, (sendbuf, recvbuf, op),
                         lambda p: self._run_plan(Comm.allreduce, p, p.send, p.op, out=p.out), op=op)

    def Allgather(self, sendbuf: Any, recvbuf: Any) -> None:
        """Collective: as mpi4py's ``Allgather``."""
        self._shm_or_mpi(ALLGATHER, "Allgather", plans.allgather, (sendbuf, recvbuf),
                         lambda p: self._run_plan(Comm.allgather, p, p.send, out=p.out))

    def Alltoall(self, sendbuf: Any, recvbuf: Any) -> None:
        """Collective: as mpi4py's ``Alltoall``."""
        self._shm_or_mpi(ALLTOALL, "Alltoall", plans.alltoall, (sendbuf, recvbuf),
                         lambda p: self._run_plan(Comm.alltoall, p, p.send, out=p.out))

    def Reduce_scatter_block(self, sendbuf: Any, recvbuf: Any, op: Any = SUM_DEFAULT) -> None:
        """Collective: as mpi4py's ``Reduce_scatter_block``."""
        op = self._tables.SUM if op is SUM_DEFAULT else op
        self._shm_or_mpi(REDUCE_SCATTER, "Reduce_scatter_block", plans.reduce_scatter_block, (sendbuf, recvbuf, op),
                         lambda p: self._run_plan(Comm.reduce_scatter, p, p.send, p.op, out=p.out), op=op)

    # -- through the lower-case calls -------------------------------------
    def Gather(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        """Collective: as mpi4py's ``Gather`` (recvbuf is read on the root only)."""
        self._shm_or_mpi(GATHER, "Gather", plans.gather, (sendbuf, recvbuf, root),
                         lambda p: self._run_plan(Comm.gather, p, p.send, p.root, out=p.out), root)

    def Scatter(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        """Collective: as mpi4py's ``Scatter`` (sendbuf is read on the root only)."""
        self._shm_or_mpi(SCATTER, "Scatter", plans.scatter, (sendbuf, recvbuf, root),
                         lambda p: self._run_plan(Comm.scatter, p, self._root_only(p), p.root, out=p.out), root)

    def Gatherv(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        """Collective: as mpi4py's ``Gatherv``."""
        self._shm_or_mpi(GATHERV, "Gatherv", plans.gatherv, (sendbuf, recvbuf, root),
                         lambda p: self._run_plan(Comm.gatherv, p, p.send, *(p.counts or (None, None)), p.root,
                                                  out=p.out), root)

    def Scatterv(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        """Collective: as mpi4py's ``Scatterv``."""
        self._shm_or_mpi(SCATTERV, "Scatterv", plans.scatterv, (sendbuf, recvbuf, root),
                         lambda p: self._run_plan(Comm.scatterv, p, self._root_only(p),
                                                  *(p.counts or (None, None)), p.root, out=p.out), root)

    def Allgatherv(self, sendbuf: Any, recvbuf: Any) -> None:
        """Collective: as mpi4py's ``Allgatherv``."""
        self._shm_or_mpi(ALLGATHERV, "Allgatherv", plans.allgatherv, (sendbuf, recvbuf),
                         lambda p: self._run_plan(Comm.allgatherv, p, p.send, *p.counts, out=p.out))

    def Alltoallv(self, sendbuf: Any, recvbuf: Any) -> None:
        """Collective: as mpi4py's ``Alltoallv``."""
        self._shm_or_mpi(ALLTOALLV, "Alltoallv", plans.alltoallv, (sendbuf, recvbuf),
                         lambda p: self._run_plan(Comm.alltoallv, p, p.send, *p.counts, out=p.out))

    def Alltoallw(self, sendbuf: Any, recvbuf: Any) -> None:
        """Collective: as mpi4py's ``Alltoallw``: each block's datatype
        flattened once (accel/datatypes.py), its bytes moved in shared memory.
        A derived comm whose shmtopo comm is still to be made hands its first
        ALLTOALLW_WARM_UP calls to MPI (every rank counts the same calls)."""
        side = self._side
        if side.lazy and not self._strict and side.alltoallw_calls < ALLTOALLW_WARM_UP:
            side.alltoallw_calls += 1
            self._mpi().Alltoallw(sendbuf, recvbuf)
            self._stats["Alltoallw"][1] += 1
            return
        # strict: nothing goes to MPI, so a datatype is flattened at its first use
        planner = plans.alltoallw if not self._strict else functools.partial(plans.alltoallw, first_use_to_mpi=False)
        self._shm_or_mpi(ALLTOALLW, "Alltoallw", planner, (sendbuf, recvbuf),
                         lambda p: self._run_plan(Comm.alltoallw, p, p.send, p.counts[0], p.out, p.counts[1]))

    def Reduce_scatter(self, sendbuf: Any, recvbuf: Any, recvcounts: Any = None, op: Any = SUM_DEFAULT) -> None:
        """Collective: as mpi4py's ``Reduce_scatter`` (recvcounts None: every
        rank's receive count, gathered first, as mpi4py does)."""
        op = self._tables.SUM if op is SUM_DEFAULT else op
        self._shm_or_mpi(REDUCE_SCATTER, "Reduce_scatter", plans.reduce_scatter,
                         (sendbuf, recvbuf, recvcounts, op),
                         lambda p: self._run_plan(Comm.reduce_scatter, p, p.send, p.op, counts=self._counts(p),
                                                  out=p.out), op=op)

    def Scan(self, sendbuf: Any, recvbuf: Any, op: Any = SUM_DEFAULT) -> None:
        """Collective: as mpi4py's ``Scan``."""
        op = self._tables.SUM if op is SUM_DEFAULT else op
        self._shm_or_mpi(SCAN, "Scan", plans.scan, (sendbuf, recvbuf, op),
                         lambda p: self._run_plan(Comm.scan, p, p.send, p.op, out=p.out), op=op)

    def Exscan(self, sendbuf: Any, recvbuf: Any, op: Any = SUM_DEFAULT) -> None:
        """Collective: as mpi4py's ``Exscan`` (rank 0's recvbuf is left as it is)."""
        op = self._tables.SUM if op is SUM_DEFAULT else op
        self._shm_or_mpi(EXSCAN, "Exscan", plans.scan, (sendbuf, recvbuf, op),
                         lambda p: self._run_plan(Comm.exscan, p, p.send, p.op, out=p.out), op=op)

    def _root_only(self, p: Call) -> Array | None:
        """A rooted call's input, which only the root has."""
        return p.send if self._shm is not None and self._shm.world_rank == p.root else None

    def _counts(self, p: Call) -> list[int]:
        """Reduce_scatter's counts; not given: every rank's own, gathered."""
        counts = p.counts[0]
        if counts is None:
            assert self._shm is not None and p.out is not None
            counts = self._shm.allgather(np.array([p.out.size], np.int64)).ravel().tolist()
        return list(counts)

    # -- the lower-case collectives of Python objects ---------------------------
    def _objects(self, name: str, run: Callable[..., Any], *args: Any) -> Any:
        """mpi4py's lower-case call `name` through shared memory
        (accel/objects.py), with mpi4py's results; once the shmtopo comm is
        freed, mpi4py's own. So is a rooted call whose root is a number but
        no rank of the comm: every rank knows it from its own arguments,
        and MPI's error (MPI.Exception, ERR_ROOT) is what mpi4py's programs
        and tests expect."""
        shm = self._shm_now()
        try:
            if shm is None:
                raise objects.NotHere
            result = run(shm, self._tables.pickle, *args)
        except objects.NotHere:
            if shm is None:
                self._agree_on_mpi(BARRIER, name, "the shmtopo comm has been freed")
            result = getattr(self._mpi(), name)(*args)
            self._stats[name][1] += 1  # (a root MPI refuses is an error, not a call handed over)
            return result
        except ShmtopoValueError as exc:  # bad or disagreeing arguments, the same on every rank
            raise ShmtopoArgumentError(str(exc), exc.errno or 22, exc.rank) from None
        self._stats[name][0] += 1
        return result

    def barrier(self) -> None:
        """Collective: mpi4py's ``barrier`` is MPI's ``Barrier``: this comm's (counted as that)."""
        self.Barrier()

    def bcast(self, obj: Any, root: int = 0) -> Any:
        """Collective: as mpi4py's ``bcast`` (a copy of the root's object on every rank)."""
        return self._objects("bcast", objects.bcast, obj, root)

    def gather(self, sendobj: Any, root: int = 0) -> list[Any] | None:
        """Collective: as mpi4py's ``gather``."""
        return self._objects("gather", objects.gather, sendobj, root)  # type: ignore[no-any-return]

    def scatter(self, sendobj: Any, root: int = 0) -> Any:
        """Collective: as mpi4py's ``scatter``."""
        return self._objects("scatter", objects.scatter, sendobj, root)

    def allgather(self, sendobj: Any) -> list[Any]:
        """Collective: as mpi4py's ``allgather``."""
        return self._objects("allgather", objects.allgather, sendobj)  # type: ignore[no-any-return]

    def alltoall(self, sendobj: Any) -> list[Any]:
        """Collective: as mpi4py's ``alltoall``."""
        return self._objects("alltoall", objects.alltoall, sendobj)  # type: ignore[no-any-return]

    def reduce(self, sendobj: Any, op: Any = SUM_DEFAULT, root: int = 0) -> Any:
        """Collective: as mpi4py's ``reduce`` (op: an MPI.Op or any callable)."""
        return self._objects("reduce", objects.reduce, sendobj, self._tables.SUM if op is SUM_DEFAULT else op,
                             root)

    def allreduce(self, sendobj: Any, op: Any = SUM_DEFAULT) -> Any:
        """Collective: as mpi4py's ``allreduce`` (op: an MPI.Op or any callable)."""
        return self._objects("allreduce", objects.allreduce, sendobj, self._tables.SUM if op is SUM_DEFAULT else op)

    def scan(self, sendobj: Any, op: Any = SUM_DEFAULT) -> Any:
        """Collective: as mpi4py's ``scan``."""
        return self._objects("scan", objects.scan, sendobj, self._tables.SUM if op is SUM_DEFAULT else op)

    def exscan(self, sendobj: Any, op: Any = SUM_DEFAULT) -> Any:
        """Collective: as mpi4py's ``exscan`` (None on rank 0)."""
        return self._objects("exscan", objects.exscan, sendobj, self._tables.SUM if op is SUM_DEFAULT else op)

    # -- persistent collectives --------------------------------------------
    def _persistent(self, name: str, args: tuple[Any, ...]) -> AcceleratedPrequest:
        return AcceleratedPrequest(self, name, args)

    def Barrier_init(self, info: Any = None) -> AcceleratedPrequest:
        """A persistent ``Barrier``: each Start() is a Barrier."""
        return self._persistent("Barrier", ())

    def Bcast_init(self, buf: Any, root: int = 0, info: Any = None) -> AcceleratedPrequest:
        """A persistent ``Bcast``: each Start() is a Bcast of the buffer's contents then."""
        return self._persistent("Bcast", (buf, root))

    def Reduce_init(self, sendbuf: Any, recvbuf: Any, op: Any = SUM_DEFAULT, root: int = 0,
                    info: Any = None) -> AcceleratedPrequest:
        """A persistent ``Reduce``."""
        return self._persistent("Reduce", (sendbuf, recvbuf, op, root))

    def Allreduce_init(self, sendbuf: Any, recvbuf: Any, op: Any = SUM_DEFAULT,
                       info: Any = None) -> AcceleratedPrequest:
        """A persistent ``Allreduce``."""
        return self._persistent("Allreduce", (sendbuf, recvbuf, op))

    def Allgather_init(self, sendbuf: Any, recvbuf: Any, info: Any = None) -> AcceleratedPrequest:
        """A persistent ``Allgather``."""
        return self._persistent("Allgather", (sendbuf, recvbuf))

    def Alltoall_init(self, sendbuf: Any, recvbuf: Any, info: Any = None) -> AcceleratedPrequest:
        """A persistent ``Alltoall``."""
        return self._persistent("Alltoall", (sendbuf, recvbuf))

    def Reduce_scatter_block_init(self, sendbuf: Any, recvbuf: Any, op: Any = SUM_DEFAULT,
                                  info: Any = None) -> AcceleratedPrequest:
        """A persistent ``Reduce_scatter_block``."""
        return self._persistent("Reduce_scatter_block", (sendbuf, recvbuf, op))

    def Gather_init(self, sendbuf: Any, recvbuf: Any, root: int = 0, info: Any = None) -> AcceleratedPrequest:
        """A persistent ``Gather``."""
        return self._persistent("Gather", (sendbuf, recvbuf, root))

    def Scatter_init(self, sendbuf: Any, recvbuf: Any, root: int = 0, info: Any = None) -> AcceleratedPrequest:
        """A persistent ``Scatter``."""
        return self._persistent("Scatter", (sendbuf, recvbuf, root))

    def Gatherv_init(self, sendbuf: Any, recvbuf: Any, root: int = 0, info: Any = None) -> AcceleratedPrequest:
        """A persistent ``Gatherv``."""
        return self._persistent("Gatherv", (sendbuf, recvbuf, root))

    def Scatterv_init(self, sendbuf: Any, recvbuf: Any, root: int = 0, info: Any = None) -> AcceleratedPrequest:
        """A persistent ``Scatterv``."""
        return self._persistent("Scatterv", (sendbuf, recvbuf, root))

    def Allgatherv_init(self, sendbuf: Any, recvbuf: Any, info: Any = None) -> AcceleratedPrequest:
        """A persistent ``Allgatherv``."""
        return self._persistent("Allgatherv", (sendbuf, recvbuf))

    def Alltoallv_init(self, sendbuf: Any, recvbuf: Any, info: Any = None) -> AcceleratedPrequest:
        """A persistent ``Alltoallv``."""
        return self._persistent("Alltoallv", (sendbuf, recvbuf))

    def Alltoallw_init(self, sendbuf: Any, recvbuf: Any, info: Any = None) -> AcceleratedPrequest:
        """A persistent ``Alltoallw``."""
        return self._persistent("Alltoallw", (sendbuf, recvbuf))

    def Reduce_scatter_init(self, sendbuf: Any, recvbuf: Any, recvcounts: Any = None, op: Any = SUM_DEFAULT,
                            info: Any = None) -> AcceleratedPrequest:
        """A persistent ``Reduce_scatter``."""
        return self._persistent("Reduce_scatter", (sendbuf, recvbuf, recvcounts, op))

    def Scan_init(self, sendbuf: Any, recvbuf: Any, op: Any = SUM_DEFAULT, info: Any = None) -> AcceleratedPrequest:
        """A persistent ``Scan``."""
        return self._persistent("Scan", (sendbuf, recvbuf, op))

    def Exscan_init(self, sendbuf: Any, recvbuf: Any, op: Any = SUM_DEFAULT, info: Any = None) -> AcceleratedPrequest:
        """A persistent ``Exscan``."""
        return self._persistent("Exscan", (sendbuf, recvbuf, op))

    # -- one copy per node (shmtopo.sharing) ------------------------------
    def share(self, obj: Any, root: int = 0, *, placement: str | None = None,
              huge_pages: bool | str = False) -> Any:
        """Collective: the root's ``obj`` (an array or any picklable object;
        the others pass None) on every rank, read-only, one copy of its
        data per node: as :meth:`shmtopo.Comm.share` on :attr:`shm_comm`
        (root is a rank of this communicator)."""
        return sharing.share(self.shm_comm, obj, root, placement=placement, huge_pages=huge_pages)

    def shared_array(self, shape: Any, dtype: Any = np.float64, *, order: str = "C",
                     placement: str | None = None, huge_pages: bool | str = False) -> Any:
        """Collective: a writable node-shared array to fill in place, then
        :meth:`share`: as :meth:`shmtopo.Comm.shared_array`."""
        return sharing.shared_array(self.shm_comm, shape, dtype, order=order, placement=placement,
                                    huge_pages=huge_pages)

    def unshare(self, obj: Any) -> None:
        """Collective: release a share's node memory now: as
        :meth:`shmtopo.Comm.unshare`."""
        sharing.unshare(self.shm_comm, obj)

    # -- new communicators come back accelerated ----------------------------
    def _wrapped(self, comm: Any) -> Any:
        """Local: the new communicator ``comm`` as an accelerated comm with
        this comm's options (COMM_NULL, where a rank is in no new comm, and
        intercommunicators as they are)."""
        lazy: Any = _LAZY.get(type(comm))  # (the plain classes already met: the common case)
        if lazy is None:
            if type(comm) in _PLAIN:  # (Dup and Clone make one of this comm's own class, to attach)
                return self._derived(comm) if comm else comm
            if not isinstance(comm, self._tables.MPI.Intracomm):
                return comm
            accelerated_class(type(comm))
            lazy = _LAZY[type(comm)]
        if not comm:  # COMM_NULL
            return comm
        new = lazy._mpi_new(lazy, comm)  # a new comm has no shmtopo state to copy: mpi4py's __new__ alone
        new._origin = self
        return new

    def _derived(self, made: Any) -> Any:
        """Local: `made`, a new comm of an accelerated class, with this comm's
        options. It takes its state at its first read of it (its class is
        the lazy one until then), and its shmtopo side at its first call
        that shmtopo runs, so that making it costs what MPI's constructor
        costs (made once per plan or per array by some libraries: each line
        here counts), and a comm never used costs no shared memory."""
        lazy = _LAZY[_PLAIN[type(made)]]
        if type(made) is not lazy:
            made.__class__ = lazy
        made._origin = self
        return made

    def Dup(self, info: Any = None) -> Any:
        """Collective: mpi4py's ``Dup``, accelerated (free it with ``Free()``)."""
        # mpi4py's Dup makes an object of this comm's own class: attached, never COMM_NULL
        plain: Any = _PLAIN[type(self)]
        return self._derived(plain.Dup(self) if info is None else plain.Dup(self, info))

    def Dup_with_info(self, info: Any) -> Any:
        """Collective: mpi4py's ``Dup_with_info``, accelerated."""
        return self._wrapped(_PLAIN[type(self)].Dup_with_info(self, info))

    def Idup(self, info: Any = None) -> Any:
        """Collective: mpi4py's ``Idup``. The new communicator is a plain
        mpi4py one (it is not usable before its request completes, and
        accelerating is collective): accelerate it after the Wait."""
        return self._plain().Idup() if info is None else self._plain().Idup(info)

    def Idup_with_info(self, info: Any) -> Any:
        """Collective: mpi4py's ``Idup_with_info`` (a plain communicator, as :meth:`Idup`)."""
        return self._plain().Idup_with_info(info)

    def Clone(self) -> Any:
        """Collective: mpi4py's ``Clone``, accelerated."""
        return self._wrapped(_PLAIN[type(self)].Clone(self))

    def Split(self, color: int = 0, key: int = 0) -> Any:
        """Collective: mpi4py's ``Split``, accelerated (COMM_NULL as it is)."""
        return self._wrapped(_PLAIN[type(self)].Split(self, color, key))

    def Split_type(self, split_type: int, key: int = 0, info: Any = None) -> Any:
        """Collective: mpi4py's ``Split_type``, accelerated."""
        args = (split_type, key) if info is None else (split_type, key, info)
        return self._wrapped(_PLAIN[type(self)].Split_type(self, *args))

    def Create(self, group: Any) -> Any:
        """Collective: mpi4py's ``Create``, accelerated."""
        return self._wrapped(_PLAIN[type(self)].Create(self, group))

    def Create_group(self, group: Any, tag: int = 0) -> Any:
        """Collective over the group: mpi4py's ``Create_group``, accelerated."""
        return self._wrapped(_PLAIN[type(self)].Create_group(self, group, tag))

    def Create_cart(self, dims: Any, periods: Any = None, reorder: bool = False) -> Any:
        """Collective: mpi4py's ``Create_cart``, an accelerated Cartcomm."""
        return self._wrapped(_PLAIN[type(self)].Create_cart(self, dims, periods, reorder))

    def Create_graph(self, index: Any, edges: Any, reorder: bool = False) -> Any:
        """Collective: mpi4py's ``Create_graph``, an accelerated Graphcomm."""
        return self._wrapped(_PLAIN[type(self)].Create_graph(self, index, edges, reorder))

    def Create_dist_graph(self, sources: Any, degrees: Any, destinations: Any, weights: Any = None,
                          info: Any = None, reorder: bool = False) -> Any:
        """Collective: mpi4py's ``Create_dist_graph``, an accelerated Distgraphcomm."""
        args = (sources, degrees, destinations, weights) + (() if info is None else (info,))
        return self._wrapped(_PLAIN[type(self)].Create_dist_graph(self, *args, reorder=reorder))

    def Create_dist_graph_adjacent(self, sources: Any, destinations: Any, sourceweights: Any = None,
                                   destweights: Any = None, info: Any = None, reorder: bool = False) -> Any:
        """Collective: mpi4py's ``Create_dist_graph_adjacent``, an accelerated Distgraphcomm."""
        args = (sources, destinations, sourceweights, destweights) + (() if info is None else (info,))
        return self._wrapped(_PLAIN[type(self)].Create_dist_graph_adjacent(self, *args, reorder=reorder))


class AcceleratedPrequest:
    """A persistent collective of an accelerated comm, as mpi4py's
    ``Prequest``: ``Start()`` makes the blocking call on the arguments given
    at init (reading the buffers then), in shared memory or through MPI as
    that call would; it is complete on return, so ``Wait()`` and ``Test()``
    have nothing left to do. ``Free()`` (local) makes it inactive for good.
    ``Startall``/``Waitall``/``Testall`` take lists of these (mpi4py's own
    take only its requests)."""

    __slots__ = ("_acomm", "_name", "_args", "_freed")

    def __init__(self, acomm: AcceleratedComm, name: str, args: tuple[Any, ...]) -> None:
        self._acomm = acomm
        self._name = name
        self._args = args
        self._freed = False

    def Start(self) -> None:
        """Collective: run the call once."""
        if self._freed:
            raise ShmtopoValueError(f"{self._name}_init: Start on a freed request")
        getattr(self._acomm, self._name)(*self._args)

    def Wait(self, status: Any = None) -> bool:
        """Local: the last Start is complete already."""
        return True

    def Test(self, status: Any = None) -> bool:
        """Local: True (the last Start is complete already)."""
        return True

    def Free(self) -> None:
        """Local: release the request (twice is a no-op)."""
        self._freed = True
        self._args = ()

    def __bool__(self) -> bool:  # like a request that is not MPI.REQUEST_NULL
        return not self._freed

    def __repr__(self) -> str:
        return f"<shmtopo.AcceleratedPrequest {self._name}_init{' (freed)' if self._freed else ''}>"

    @staticmethod
    def Startall(requests: list[Any]) -> None:
        """Start every request of the list, in order."""
        for r in requests:
            r.Start()

    @staticmethod
    def Waitall(requests: list[Any], statuses: Any = None) -> bool:
        for r in requests:
            r.Wait()
        return True

    @staticmethod
    def Testall(requests: list[Any], statuses: Any = None) -> bool:
        return all(r.Test() for r in requests)


def _nonblocking_method(name: str) -> Callable[..., Any]:
    blocking = nonblocking.blocking_name(name)

    def method(self: AcceleratedComm, *args: Any, **kwargs: Any) -> Any:
        return self._nonblocking(name, args, kwargs)
    method.__name__ = method.__qualname__ = name
    method.__doc__ = (f"Collective, nonblocking: mpi4py's ``{name}``, as ``{blocking}`` "
                      "on this comm's progress thread (in shared memory where that call would be); returns an "
                      "``MPI.Grequest``.")
    return method


for _name in nonblocking.NONBLOCKING:
    setattr(AcceleratedComm, _name, _nonblocking_method(_name))
del _name


def _cart_sub(self: AcceleratedComm, remain_dims: Any) -> Any:
    """Collective: mpi4py's ``Cartcomm.Sub``, an accelerated Cartcomm."""
    return self._wrapped(_PLAIN[type(self)].Sub(self, remain_dims))


def _lazy_state(made: type) -> dict[str, Any]:
    """The state of a derived comm of the accelerated class `made` not yet
    used: each slot a property whose first read makes the whole state, from
    the comm it came from, and makes the comm one of class `made` (whose
    slots are then read directly). A property, not a __getattr__: that would
    make an AttributeError at every first read, and slow every attribute
    lookup of the class. CommFast's C methods, finding no slot `_shm` in
    this class, take the Python method, which reads the state. Two threads
    reading it first at once: one makes it, under a lock, and the comm
    changes class only once every slot is set."""
    slots = {name: made.__dict__[name] for name in _OWN}  # the slots' member descriptors

    def take(self: Any) -> None:
        with _TAKING:
            if type(self) is made:  # another thread took it meanwhile
                return
            origin = slots["_origin"].__get__(self, made)
            freed = type(origin) is tuple  # (origin,): freed before its first use
            if freed:
                origin = origin[0]
            state = _state_from(origin)
            if freed:
                state["_side"].lazy = False
            for name, value in state.items():
                slots[name].__set__(self, value)
            self.__class__ = made
            del self._origin

    def slot(name: str) -> property:
        direct = slots[name]

        def read(self: Any) -> Any:
            take(self)
            return direct.__get__(self, made)

        def write(self: Any, value: Any) -> None:
            take(self)  # the rest of the state first
            direct.__set__(self, value)
        return property(read, write)

    def Free(self: Any) -> None:
        """Local: a derived comm freed before its first use has no shmtopo
        side to drop: MPI's Free, and its state, if ever read, says freed
        (as AcceleratedComm.Free's, whose work it spares a comm made and
        freed at once)."""
        _PLAIN[made].Free(self)  # (first: a second Free raises there, as MPI's, and marks nothing twice)
        self._origin = (self._origin,)
    return {"Free": Free, **{name: slot(name) for name in _STATE}}


#: taken while a derived comm makes its state (_lazy_state)
_TAKING = threading.RLock()  # (reentrant: the comm it came from may make its own state inside)


def _state_from(origin: AcceleratedComm) -> dict[str, Any]:
    """A derived comm's state, made at its first read: `origin`'s options,
    tables and strictness, and its own side (no shmtopo comm yet) and
    counts."""
    return {"_options": origin._options, "_comm": None, "_shm": None, "_side": _Side(),
            "_tables": origin._tables, "_strict": origin._strict, "_stats": _Stats(), "_fast_counts": CallCounts()}


def _handed_to_mpi(name: str) -> Callable[..., None]:
    """CommFast's way on after an agreement whose verdict was that every
    rank hands the call to MPI: MPI's method, with the caller's arguments."""
    def to_mpi(self: AcceleratedComm, *args: Any, **kwargs: Any) -> None:
        getattr(self._mpi(), name)(*args, **kwargs)
        self._stats[name][1] += 1
    to_mpi.__name__ = to_mpi.__qualname__ = f"{name}_to_mpi"
    return to_mpi


bind_comm_fast({name: getattr(AcceleratedComm, name) for name in FAST_CALLS}, SUM_DEFAULT,
                         {name: _handed_to_mpi(name) for name in FAST_CALLS}, DelegatedToMPI)

# The accelerated class of each mpi4py communicator class, and back.
_ACCELERATED: dict[type, type] = {}
_PLAIN: dict[type, Any] = {}  # (mpi4py classes: their methods are untyped here)
#: mpi4py's class -> the accelerated class of the derived comms not yet used (a subclass of the other)
_LAZY: dict[type, type] = {}


def accelerated_class(cls: type) -> type:
    """AcceleratedComm's subclass of the mpi4py communicator class `cls`
    (made once per class: Intracomm, Cartcomm, Graphcomm, Distgraphcomm, or
    a program's own subclass of one)."""
    made = _ACCELERATED.get(cls)
    if made is None:
        namespace: dict[str, Any] = {"__slots__": _OWN, "__module__": "shmtopo", "__doc__": AcceleratedComm.__doc__,
                                     **copies_state(_OWN)}
        if hasattr(cls, "Sub"):  # a Cartcomm's
            namespace["Sub"] = _cart_sub
        # CommFast first: its C methods take the plain calls, AcceleratedComm's the others
        made = type(f"Accelerated{cls.__name__}", (CommFast, AcceleratedComm, cls), namespace)
        mpi_new(made, cls)
        # a derived comm's class until it takes its state (at its first read)
        copy_state = namespace["_copy_state"].__func__

        def _copy_state(new: Any, source: Any) -> None:
            copy_state(new, source)  # (reading a lazy source's state makes it)
            if type(new) is lazy:  # a copy of a lazy comm: it holds the state
                new.__class__ = made
        lazy = type(made.__name__, (made,), {"__slots__": (), "__module__": "shmtopo", "__doc__": made.__doc__,
                                             "_copy_state": staticmethod(_copy_state), **_lazy_state(made)})
        _ACCELERATED[cls] = made
        _PLAIN[made] = _PLAIN[lazy] = cls
        _LAZY[cls] = lazy
    return made


def accelerate(comm: Any = None, *, node_size: int | None = None,
               timeout: float | None = None) -> Any:
    """Collective over ``comm`` (an mpi4py intracommunicator, default
    COMM_WORLD; or a window, see :func:`shmtopo.accel.window.accelerate_window`):
    an accelerated comm on its MPI handle, whose upper-case
    buffer collectives run through shmtopo's shared memory where their
    arguments allow it, and go to MPI, with the same arguments, where they
    do not. It is an instance of ``type(comm)``'s accelerated subclass.

    node_size, timeout: as in :meth:`Comm.from_mpi`. SHMTOPO_ACCEL_STRICT=1
    (which must be the same on every rank) makes every call that would go
    to MPI raise ShmtopoValueError instead. Free the result with ``Free()``
    (which also frees the MPI communicator) or ``shm_free()``; at exit each
    rank drops what is left of it on its own.
    """
    tables = get_tables()
    if isinstance(comm, tables.Win):
        return accelerate_window(comm, timeout=timeout)
    if isinstance(comm, AcceleratedComm):
        comm = comm.mpi_comm
    if comm is None:
        comm = tables.MPI.COMM_WORLD
    if not isinstance(comm, tables.MPI.Comm):
        raise TypeError(f"accelerate needs an mpi4py communicator, not {type(comm).__name__}")
    if comm.Is_inter():  # the same on every rank
        raise ShmtopoValueError("accelerate needs an intracommunicator, not an intercommunicator")
    shm = Comm.from_mpi(comm, node_size=node_size, timeout=timeout)
    try:
        strict = agreed_strictness(shm)
    except ShmtopoValueError:
        # every rank has the same verdict, and frees together: abandoning
        # instead could fail a peer still reading that verdict
        shm.free()
        raise
    except BaseException:
        shm.abandon()
        raise
    acomm = accelerated_class(type(comm))(comm)
    side = _Side(shm, False)
    acomm._attach(comm, side, tables, strict, {"node_size": node_size, "timeout": timeout})
    _hold(side, comm)
    return acomm


def _set_up(side: _Side, comm: Any, options: dict[str, Any]) -> None:
    """Collective over ``comm``: make a derived comm's shmtopo comm (a
    failure raises on every rank, and the next call tries again)."""
    waits = options.get("waits")
    side.shm = Comm.from_mpi(comm, node_size=options["node_size"], timeout=options["timeout"])
    if waits is not None:
        side.shm.set_waits(*waits)
    side.lazy = False
    _hold(side, comm)


def _hold(side: _Side, comm: Any) -> None:
    """Drop the side's shmtopo comm at exit and at MPI_Finalize, and when
    MPI frees the handle through another copy (acomm.mpi_comm.Free())."""
    holds_comm(side)
    release_at_finalize()
    held = weakref.ref(side)
    on_free(comm, lambda: _release_if_alive(held))


def _release_if_alive(held: "weakref.ref[_Side]") -> None:
    side = held()
    if side is not None:
        side._release()
