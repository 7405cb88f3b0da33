"""shmtopo.comm_pool: the native comms this process released, kept for a
later comm of the same ranks.

Making a comm's shared memory costs about half a millisecond a rank (its
segments made, populated and mapped by every rank); programs that make a
comm over the same ranks for a few calls and free it, again and again (a
parallel FFT's plans, a solver's phases), paid that each time. A comm made
by ``Comm.from_mpi`` on one node is therefore *parked* when released or
freed (``shmtopo_comm_park``: a clean departure for its peers, its memory
kept mapped; a collective free parks it once every rank agreed), and a later ``from_mpi`` whose ranks, in the same order, all
parked the same one takes it up again instead (``shmtopo_comm_unpark``).

The decision is the same on every rank: each rank offers, in from_mpi's
exchange of settings, the comms it has parked that fit its place in the new
one (same rank, same size, settings as made), with the steps each has
taken, and a fresh token naming the new comm; the first comm of rank 0's
offer that every rank offers with the same steps is taken up, else a new
one is made and named by rank 0's token. Only a comm that every member
released can be offered by all of them, so nobody still uses it. An offer
reserves its comms until the decision, so that two threads making comms at
once never take up the same one.
"""
from __future__ import annotations

import os
import random
import threading
from collections import OrderedDict
from typing import Any, Sequence

from ._fastpath import unclaim
from ._native import ffi, lib
from .errors import last_error

#: Parked comms a process keeps (each holds its share of the comm's shared
#: memory, about 0.9 MiB a rank): the least recently parked goes first.
KEPT = 4

#: A rank's offer: (the token naming a new comm, ((token, steps), ...) of
#: its parked comms that fit, most recently parked first).
Offer = tuple[int, tuple[tuple[int, int], ...]]


class _Parked:
    __slots__ = ("handle", "rank", "size", "reserved")

    def __init__(self, handle: Any, rank: int, size: int) -> None:
        self.handle, self.rank, self.size = handle, rank, size
        self.reserved = False


_lock = threading.Lock()
_parked: "OrderedDict[int, _Parked]" = OrderedDict()  # token -> parked comm, oldest first
_pid = os.getpid()
_tokens = random.Random()


def _this_process() -> None:
    """A fork child has its parent's list, whose comms are not its own."""
    global _pid
    if os.getpid() != _pid:
        _parked.clear()
        _pid = os.getpid()
        _tokens.seed()


def offer(rank: int, size: int) -> Offer:
    """This rank's offer for a new comm where it will be `rank` of `size`
    (its comms offered are reserved until :func:`settle`)."""
    steps = ffi.new("uint64_t *")
    fitting = []
    with _lock:
        _this_process()
        for token in reversed(_parked):
            kept = _parked[token]
            if kept.reserved or kept.rank != rank or kept.size != size:
                continue
            if lib.shmtopo_comm_parked_step(kept.handle, steps) == 0:
                kept.reserved = True
                fitting.append((token, int(steps[0])))
        return _tokens.getrandbits(63) or 1, tuple(fitting)


def settle(offers: Sequence[Offer], mine: Offer) -> tuple[int, Any]:
    """From every rank's offer (the same list on every rank): the new comm's
    token and the native comm to take up, taken back here (NULL: make a new
    one). The rest of this rank's offer stays parked."""
    chosen = next((kept for kept in offers[0][1] if all(kept in o[1] for o in offers[1:])), None)
    handle = ffi.NULL
    with _lock:
        for token, _ in mine[1]:
            kept = _parked.get(token)
            if kept is None:
                continue
            kept.reserved = False
            if chosen is not None and token == chosen[0]:
                del _parked[token]
                handle = kept.handle
    if handle != ffi.NULL and lib.shmtopo_comm_unpark(handle) < 0:
        exc = last_error()  # the settings changed since it was offered (another thread set them)
        lib.shmtopo_comm_release(handle)
        raise exc
    return (chosen[0] if chosen is not None else offers[0][0]), handle


def withdraw(mine: Offer) -> None:
    """The comm was not made (the exchange failed): free this rank's offer."""
    with _lock:
        for token, _ in mine[1]:
            kept = _parked.get(token)
            if kept is not None:
                kept.reserved = False


def park(handle: Any, token: int, rank: int, size: int) -> int:
    """Release the native comm held by this thread (comm.py's release),
    keeping it for a later comm (0), or, where it cannot be kept, releasing
    it for good: shmtopo_comm_release's result."""
    if lib.shmtopo_comm_park(handle) < 0:
        return int(lib.shmtopo_comm_release(handle))
    keep(handle, token, rank, size)
    return 0


def keep(handle: Any, token: int, rank: int, size: int) -> None:
    """Keep a parked native comm held by this thread (park, or comm.py's
    free through shmtopo_comm_destroy_keeping)."""
    unclaim(int(ffi.cast("uintptr_t", handle)), 0)  # whoever takes it up holds it anew
    evicted = []
    with _lock:
        _this_process()
        _parked[token] = _Parked(handle, rank, size)
        for old in list(_parked):
            if len(_parked) <= KEPT:
                break
            if not _parked[old].reserved:
                evicted.append(_parked.pop(old).handle)
    for old_handle in evicted:
        lib.shmtopo_comm_release(old_handle)


def parked() -> int:
    """How many comms this process keeps parked."""
    with _lock:
        _this_process()
        return len(_parked)
