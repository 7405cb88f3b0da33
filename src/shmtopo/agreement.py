"""The agreement, from Python: every collective call on a comm goes through
it (native/agree.c), so that a bad or disagreeing argument on any rank
raises the same exception on every rank.

Arguments are normalised on their own rank first; whatever cannot be
converted does not raise there (:func:`normalised`): the rank takes part in
the call's agreement as invalid (:func:`refuse`), and every rank raises that
rank's reason. Calls whose data crosses nodes agree first (:func:`agree`);
node-local calls agree in their first step inside the core. An exception
that leaves a call half done on this rank (Ctrl-C) makes it leave the comm
(:func:`leave`), so that peers fail instead of waiting for it.
"""
from __future__ import annotations

import math
from typing import Any, Callable, NoReturn, TypeVar

from ._base import CommLike
from ._native import ffi, lib
from .errors import PeerAbortedError, PeerDeadError, ShmtopoValueError, last_error

T = TypeVar("T")


def refuse(comm: CommLike, kind: int, exc: BaseException) -> None:
    """This rank's arguments to a call of `kind` could not be used: fail the
    call on every rank through its agreement. Always raises."""
    reason = str(exc) or type(exc).__name__
    lib.shmtopo_reject(comm.handle, kind, reason.encode(errors="replace"))
    raise last_error() from None


def normalised(comm: CommLike, kind: int, normalise: Callable[..., T], *args: Any) -> T:
    """normalise(*args) on this rank; if it fails, refuse the call."""
    try:
        return normalise(*args)
    except Exception as exc:  # noqa: BLE001 - whatever it was, every rank hears of it
        refuse(comm, kind, exc)
        raise  # not reached: refuse raises
    except BaseException:
        leave(comm)  # Ctrl-C between the checks: peers must not wait for us
        raise


def signature(kind: int, count: int = 0, dtype: int = -1, op: int = -1, root: int = -1, alg: int = -1,
              extra: int = 0, flags: int = 0) -> Any:
    """A call's signature (shmtopo_sig_t), as the core builds it."""
    return ffi.new("shmtopo_sig_t *", {"kind": kind, "count": count, "dtype": dtype, "op": op, "root": root,
                                       "alg": alg, "extra": extra, "flags": flags})


def agree(comm: CommLike, kind: int, count: int = 0, dtype: int = -1, op: int = -1, root: int = -1,
          alg: int = -1, extra: int = 0, flags: int = 0) -> None:
    """Agreement on a call over the whole job, before its data moves by
    other means (across nodes). Raises the job's verdict."""
    if lib.shmtopo_agree_fields(comm.handle, kind, count, dtype, op, root, alg, extra, flags) < 0:
        failed(comm)


def failed(comm: CommLike) -> NoReturn:
    """Raise the failure of a call agreed over the job (heard_of it first)."""
    exc = last_error()
    heard_of(comm, exc)
    raise exc


def heard_of(comm: CommLike, exc: BaseException) -> None:
    """A death, or a rank that left after an error, that this rank found (in
    shared memory) is news for the ranks of the other nodes, which may be
    waiting in MPI for it: tell them."""
    if isinstance(exc, (PeerDeadError, PeerAbortedError)) and exc.rank is not None and comm.nnodes > 1:
        comm.plan.announce(exc.rank, left=isinstance(exc, PeerAbortedError))


def _sizes(a: Any) -> Any:
    return ffi.cast("size_t *", ffi.from_buffer(a))


def counts_verdict(sig: Any, posted: Any, table: Any) -> None:
    """The verdict on a v-variant's counts that every rank of the job has
    gathered (each rank's own count, the root's counts: numpy uint64, one per
    job rank), reached alike on every rank (native/agree.c). Raises it."""
    if lib.shmtopo_counts_verdict(sig, _sizes(posted), _sizes(table), len(table)) < 0:
        raise last_error()


def pairs_verdict(sig: Any, send: Any, recv: Any) -> None:
    """counts_verdict for alltoallv: every rank's send and receive counts
    (rows of the n x n uint64 arrays) must pair up."""
    if lib.shmtopo_pairs_verdict(sig, _sizes(send), _sizes(recv), len(send)) < 0:
        raise last_error()


def counts_digest(counts: Any) -> int:
    """The digest of a counts array that a signature carries (uint64 array)."""
    return int(lib.shmtopo_counts_digest(_sizes(counts), len(counts)))


def leave(comm: CommLike) -> None:
    """Stop taking part in the comm after an exception left a call half
    done here: peers waiting on this rank fail instead of hanging."""
    if not comm.freed:
        lib.shmtopo_comm_leave(comm.handle)


def as_timeout(value: Any) -> float:
    """A timeout in seconds: finite, >= 0 (0: forever)."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise ShmtopoValueError(f"timeout must be a number of seconds, not {value!r}") from None
    if not math.isfinite(seconds) or seconds < 0 or seconds > 1e9:
        raise ShmtopoValueError(f"timeout must be a finite number of seconds >= 0 (0: forever), not {value!r}")
    return seconds
