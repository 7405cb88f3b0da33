"""Sharing: the node's one topology, loaded once and mapped by every rank.

:func:`share_topology` has one rank (the leader, rank 0 of the comm) load
the topology and write it into a file with hwloc's shmem API; every rank then
maps that file at one virtual address, chosen inside the intersection of all
ranks' free address ranges. Adopting costs microseconds and no private
memory. When that fails on any rank (the address got taken meanwhile), all
ranks agree, retry at another address, then fall back to an XML broadcast,
then to a local load; ``topo.source`` says which path ("shmem", "xml",
"local") this rank's copy came from.

Costs seen with hwloc 2.8/2.9: an adopt takes 20-90 us, but hwloc
initialises its components (dlopen of its plugins, about 3 ms) whenever a
process holds no other topology, in adopt as in load. The leader never writes
from an adopted copy: hwloc's write updates its source, a segfault there.
"""
from __future__ import annotations

from typing import Any

from .._base import CommLike, Held, number_of_name
from .._native import ffi, lib
from ..agreement import normalised
from ..errors import ShmtopoValueError, check
from .topology import Topology, io_level

SOURCES = ("shmem", "xml", "local")  # in the order of enum shmtopo_topo_source, after auto
#: Addresses tried before falling back to XML.
ATTEMPTS = 3

_shared: Topology | None = None  # the one shared topology of this process


def _forget(topo: Topology) -> None:
    """Called as the shared topology is destroyed: the next share_topology
    shares afresh."""
    global _shared
    if _shared is topo:
        _shared = None


# -- share_topology ------------------------------------------------------------
def held_topology() -> Topology | None:
    """The shared topology this process holds open (share_topology), if any:
    for callers that use one when it is there and never pay to share one."""
    return _shared if _shared is not None and not _shared.closed else None


def _source_number(name: Any) -> int:
    return number_of_name(lib.shmtopo_topo_source_from_name, name, "topology source")


def _share_opts(source: Any, attempts: Any, held: Topology | None, conflict_rank: Any, io: Any) -> Any:
    opts = ffi.new("shmtopo_topo_share_opts_t *")
    opts.source = -1 if source is None else _source_number(source)
    if isinstance(attempts, bool) or not isinstance(attempts, int) or not 1 <= attempts <= 64:
        raise ShmtopoValueError(f"attempts must be an integer in [1, 64], not {attempts!r}")
    opts.attempts = attempts
    opts.have = held is not None
    opts.conflict_rank = -1 if conflict_rank is None else int(conflict_rank)
    opts.io = io_level(io)
    # the one shared topology of the process serves every later call, so it
    # must hold at least the I/O objects asked for
    if held is not None and io_level(held.io) < opts.io:
        raise ShmtopoValueError(f"this process holds the shared topology with io={held.io!r}: close it "
                                f"before sharing one with io={io!r}")
    return opts


def share_topology(comm: CommLike, *, source: str | None = None, attempts: int = ATTEMPTS,
                   io: bool | str = False, _conflict_rank: int | None = None) -> Topology:
    """Collective over ``comm``: this node's topology, read-only.

    The leader (rank 0) loads it and writes it to a shared file under
    ``/dev/shm`` (or ``$SHMTOPO_TOPO_DIR``), under a fresh name no one can
    take in advance (docs/security.md); every rank maps it at one common address and the leader
    removes the name at once. On failure on any rank, all ranks retry at
    another address (``attempts`` in all), then share XML, then load
    locally. The protocol runs in the native core, each step an agreement of
    the comm: a bad argument or a failure on any rank is every rank's.

    source: "auto" (default, or ``$SHMTOPO_TOPO_SOURCE``) runs that chain;
        "shmem", "xml" or "local" takes only that path and raises if it fails.
    io: the leader loads I/O objects too (True: those hwloc deems important,
        PCI devices, GPUs, NICs and their bridges; "all": every one) and all
        ranks get them; every rank must pass the same.
    _conflict_rank: for tests (also ``$SHMTOPO_TOPO_CONFLICT_RANK``): that rank
        maps a page at the first chosen address, so the first attempt fails.

    A process holds at most one shared topology: while one is open, further
    calls return it with one more reference (a call asking for more I/O
    objects than it holds raises on every rank); ``close()`` each.
    """
    global _shared
    held = held_topology()
    out = ffi.new("void **")
    info = ffi.new("shmtopo_topo_share_info_t *")
    with Held(comm.address):  # a collective of the comm: after the nonblocking calls posted before
        opts = normalised(comm, lib.SHMTOPO_KIND_TOPO_SHARE, _share_opts, source, attempts, held,
                          _conflict_rank, io)
        check(lib.shmtopo_topo_share(comm.handle, opts, out, info))
    if held is not None:
        held._add_reference()
        return held
    how = SOURCES[info.source - 1]
    shmem = how == "shmem"
    topo = Topology(out[0], how, address=int(info.address) if shmem else None,
                    length=int(info.length) if shmem else None, attempts=info.attempts,
                    adopt_seconds=info.adopt_seconds if shmem else None, on_destroy=_forget)
    _shared = topo
    return topo
