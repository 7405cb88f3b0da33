"""Window collectives on a Comm: barrier, bcast, reduce, allreduce,
allgather, reduce_scatter, alltoall; gather, scatter, gatherv, scatterv,
allgatherv, alltoallv, scan, exscan; alltoallw (typed blocks).

Inside a node they run in shmtopo's native core over the comm's shared
scratch buffers. When the comm spans several nodes (Comm.from_mpi on a
multi-node job), they are hierarchical: shared memory inside each node,
mpi4py between one leader per node, shared memory again. The rooted and
varying-count ones (gather ... exscan) agree first across nodes, then move
their data with MPI's own call between all ranks (as alltoall does); scans
gather every input hierarchically and fold them in job rank order. Ranks
and roots are ranks of the comm given to from_mpi (comm.world_rank).

Each function here is the general path of Comm's method of its name. The
methods are C (shmtopo._fastpath.NativeComm) and take the plain case
themselves, one C call and no Python frame; what they decline comes here
with the very arguments.

Every call is normalised on its own rank first (array, dtype, op, root,
out); anything that cannot be converted or is out of range does not raise
there: the rank takes part in the call's agreement as invalid, and every
rank raises ShmtopoValueError with that rank's reason. Ranks that pass
different (valid) arguments fail the same way, in the agreement.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from .._native import ffi, lib
from .._types import (ALLGATHER, ALLGATHERV, ALLREDUCE, ALLTOALL, ALLTOALLV, ALLTOALLW, BCAST, COUNTS, EXSCAN, GATHER,
                      GATHERV, OWN_COUNT, REDUCE, REDUCE_SCATTER, SCAN, SCATTER, SCATTERV, SIZES, Array)
from .._base import CommLike, Held
from ..errors import ShmtopoValueError
from ..agreement import agree, counts_digest, counts_verdict, failed, normalised, pairs_verdict, signature
from . import levels
from .across import (hier_allgather, hier_allreduce, hier_bcast, hier_reduce, run_across_nodes, world_allgatherv,
                     world_alltoall, world_alltoallv, world_gatherv, world_scatterv)
from .args import (allgather_args, allgatherv_args, alltoallv_args, TypedBlocks, bcast_args, blocks_args, equal_blocks, gather_args,
                   gatherv_args, reduce_args, reduce_scatter_counts_args, scan_args, scatter_args, scatterv_args)
from .node import (checked, native_barrier, node_allgather, node_bcast, node_reduce, pointer, sizes_pointer,
                   window_of)


def _on_every_rank(result: Array | None) -> Array:
    """The result of a call whose every rank has one (allreduce)."""
    assert result is not None
    return result


def barrier(comm: CommLike) -> None:
    """Collective: no rank leaves before every rank arrived."""
    with Held(comm.address):
        if comm.nnodes == 1:
            checked(native_barrier(comm.handle))  # a freed comm raises FreedError here
        elif lib.shmtopo_span_barrier(comm.handle) < 0:
            failed(comm)  # the other nodes may need to hear of a death


def allreduce(comm: CommLike, array: npt.ArrayLike, op: str = "sum", *, out: Array | None = None,
              algorithm: str | None = None) -> Array:
    """Collective: the element-wise reduction of every rank's array.

    op: sum, prod, min, max (floats, integers; float16/bfloat16 reduced in
    float32 and rounded once), band, bor, bxor, land, lor, lxor (integers,
    bool), sum, prod (complex), maxloc, minloc (pair_dtype pairs).
    algorithm: None (by size), "flat" or "rsag". Returns out (a new array
    when None)."""
    with Held(comm.address):
        a, code, opc, alg, _, result = normalised(comm, ALLREDUCE, reduce_args, comm, "allreduce",
                                                   array, op, out, algorithm, None)
        if comm.nnodes == 1:
            if levels.wanted_for(comm, a.nbytes, alg) and not window_of(comm, a):
                agree(comm, ALLREDUCE, a.size, code, opc, -1, alg, extra=levels.LEVELLED_MARK)
                if levels.allreduce(comm, a, _on_every_rank(result), opc):
                    return _on_every_rank(result)
            node_reduce(comm, a, result, opc, -1, alg)
            return _on_every_rank(result)
        done = lib.shmtopo_span_allreduce(comm.handle, pointer(a), pointer(result), a.size, code, opc, alg)
        if done < 0:
            failed(comm)
        if done:  # too large to gather whole: in parts
            agree(comm, ALLREDUCE, a.size, code, opc, -1, alg)
            run_across_nodes(comm, hier_allreduce, a, result, opc, alg)
        return _on_every_rank(result)


def reduce(comm: CommLike, array: npt.ArrayLike, op: str = "sum", root: int = 0, *, out: Array | None = None,
           algorithm: str | None = None) -> Array | None:
    """Collective: the reduction on rank `root` (returned there; None elsewhere)."""
    with Held(comm.address):
        a, code, opc, alg, r, result = normalised(comm, REDUCE, reduce_args, comm, "reduce",
                                                   array, op, out, algorithm, root)
        if comm.nnodes == 1:
            if levels.wanted_for(comm, a.nbytes, alg) and not window_of(comm, a):
                agree(comm, REDUCE, a.size, code, opc, r, alg, extra=levels.LEVELLED_MARK)
                if levels.reduce(comm, a, result, opc, r):
                    return result
            node_reduce(comm, a, result, opc, r, alg)
            return result
        done = lib.shmtopo_span_reduce(comm.handle, pointer(a), pointer(result), a.size, code, opc, r, alg)
        if done < 0:
            failed(comm)
        if done:  # too large to gather whole: in parts
            agree(comm, REDUCE, a.size, code, opc, r, alg)
            run_across_nodes(comm, hier_reduce, a, result, opc, r, alg)
        return result if comm.world_rank == r else None


def bcast(comm: CommLike, array: npt.ArrayLike, root: int = 0, *, out: Array | None = None) -> Array:
    """Collective: every rank gets rank `root`'s array (the other ranks' array
    only gives shape and dtype). Pass out=array to receive in place."""
    with Held(comm.address):
        a, code, r, result = normalised(comm, BCAST, bcast_args, comm, array, root, out)
        if comm.nnodes == 1:
            if window_of(comm, a):
                node_bcast(comm, result, r, source=a)
                return result
            if result is not a and comm.world_rank == r:
                result[...] = a
            if levels.wanted_for(comm, a.nbytes, lib.SHMTOPO_COLL_AUTO):
                agree(comm, BCAST, a.size, code, -1, r, extra=levels.LEVELLED_MARK)
                if levels.bcast(comm, result, r):
                    return result
            node_bcast(comm, result, r)
            return result
        done = lib.shmtopo_span_bcast(comm.handle, pointer(a), pointer(result), a.size, code, r)
        if done < 0:
            failed(comm)
        if done:  # too large to gather whole: in parts
            agree(comm, BCAST, a.size, code, -1, r)
            if result is not a and comm.world_rank == r:
                result[...] = a
            run_across_nodes(comm, hier_bcast, result, r)
        return result


def allgather(comm: CommLike, array: npt.ArrayLike, *, out: Array | None = None) -> Array:
    """Collective: shape (nranks, *array.shape), row r from rank r."""
    with Held(comm.address):
        a, code, result = normalised(comm, ALLGATHER, allgather_args, comm, array, out)
        if comm.nnodes > 1:
            agree(comm, ALLGATHER, a.size, code)
            run_across_nodes(comm, hier_allgather, a, result)
            return result
        node_allgather(comm, a, result)
        return result


def reduce_scatter(comm: CommLike, array: npt.ArrayLike, op: str = "sum", *, counts: Any = None,
                   out: Array | None = None) -> Array:
    """Collective: array's first axis splits into nranks equal blocks; rank r
    gets the reduction of everybody's block r.

    counts (nranks element counts, the same on every rank; array flattened,
    of sum(counts) elements): rank r gets counts[r] elements, the reduction of
    everybody's elements from sum(counts[:r]). In place: out=array, the
    result then fills its first counts[r] elements (out is returned)."""
    with Held(comm.address):
        if counts is not None:
            return _reduce_scatter_counts(comm, array, op, counts, out)
        a, code, opc, block, result = normalised(comm, REDUCE_SCATTER, blocks_args, comm, "reduce_scatter",
                                                  array, op, out)
        if comm.nnodes == 1:
            checked(lib.shmtopo_reduce_scatter(comm.handle, pointer(a), pointer(result), result.size, code, opc))
            return result
        agree(comm, REDUCE_SCATTER, result.size, code, opc)
        total = np.empty_like(a)
        run_across_nodes(comm, hier_allreduce, a, total, opc, lib.SHMTOPO_COLL_AUTO)
        result[...] = total.reshape((comm.world_size,) + block)[comm.world_rank]
        return result


def alltoall(comm: CommLike, array: npt.ArrayLike, *, out: Array | None = None) -> Array:
    """Collective: block p of the result is block `rank` of rank p's array
    (first axis split into nranks equal blocks)."""
    with Held(comm.address):
        a, code, _, block, result = normalised(comm, ALLTOALL, blocks_args, comm, "alltoall", array, None, out)
        count = math.prod(block)
        if comm.nnodes == 1:
            checked(lib.shmtopo_alltoall(comm.handle, pointer(a), pointer(result), count, code))
            return result
        agree(comm, ALLTOALL, count, code)
        run_across_nodes(comm, world_alltoall, a, result)
        return result


def _root_counts(comm: CommLike, table: Array | None, root: int) -> Array:
    """The root's counts on every rank of the job (across nodes)."""
    mine = table if table is not None else np.zeros(comm.world_size, SIZES)
    return bcast(comm, mine, root)


def _own_counts(comm: CommLike, count: int) -> Array:
    """Every rank's own count, in job rank order (across nodes)."""
    return allgather(comm, np.array([count], SIZES)).reshape(-1)


def gather(comm: CommLike, array: Any, root: int = 0, *, out: Array | None = None) -> Array | None:
    """Collective: on rank `root`, shape (nranks, *array.shape) with row r
    from rank r (out, if given); None elsewhere. Every rank passes the same
    shape and dtype. In place on the root: array None (or out[root]), its
    block then already in out."""
    with Held(comm.address):
        a, code, r, result = normalised(comm, GATHER, gather_args, comm, array, root, out)
        if comm.nnodes == 1:
            checked(lib.shmtopo_gather(comm.handle, pointer(a), pointer(result), a.size, code, r))
            return result
        agree(comm, GATHER, a.size, code, -1, r)
        counts, displs = equal_blocks(comm, a.size)
        run_across_nodes(comm, world_gatherv, a.reshape(-1),
                         None if result is None else result.reshape(-1), counts, displs, r)
        return result


def scatter(comm: CommLike, array: Any, root: int = 0, *, out: Array | None = None) -> Array:
    """Collective: rank r gets block r of the root's array (shape (nranks,
    *block)); returns it (out, or a new array). Elsewhere array may be None,
    and out (shape block) is then needed. In place on the root: out is the
    root's own block of array (array[root]), left where it is."""
    with Held(comm.address):
        a, code, r, result = normalised(comm, SCATTER, scatter_args, comm, array, root, out)
        if comm.nnodes == 1:
            checked(lib.shmtopo_scatter(comm.handle, pointer(a), pointer(result), result.size, code, r))
            return result
        agree(comm, SCATTER, result.size, code, -1, r)
        counts, displs = equal_blocks(comm, result.size)
        run_across_nodes(comm, world_scatterv, None if a is None else a.reshape(-1),
                         result.reshape(-1), counts, displs, r)
        return result


def gatherv(comm: CommLike, array: Any, counts: Any = None, displs: Any = None, root: int = 0, *,
            out: Array | None = None) -> Array | None:
    """Collective: rank r's array (flattened, of counts[r] elements) lands in
    the root's out at displs[r]; returns out on the root (a new 1-D array of
    max(displs + counts) elements when None), None elsewhere. counts and
    displs matter on the root only; displs default to the exclusive prefix
    sums of counts. A rank whose array.size is not the root's counts[rank]
    makes every rank raise ShmtopoValueError naming it. In place on the
    root: array None (or the view of out at its displacement)."""
    with Held(comm.address):
        a, code, r, result, c, d, ret = normalised(comm, GATHERV, gatherv_args, comm, array, counts, displs,
                                                    root, out)
        if comm.nnodes == 1:
            checked(lib.shmtopo_gatherv(comm.handle, pointer(a), a.size, pointer(result), sizes_pointer(c), sizes_pointer(d), code, r))
            return ret
        agree(comm, GATHERV, a.size, code, -1, r, flags=OWN_COUNT)
        table = _root_counts(comm, c, r)
        counts_verdict(signature(GATHERV, a.size, code, -1, r, flags=OWN_COUNT), _own_counts(comm, a.size), table)
        run_across_nodes(comm, world_gatherv, a, result, c, d, r)
        return ret


def scatterv(comm: CommLike, array: Any, counts: Any = None, displs: Any = None, root: int = 0, *,
             out: Array | None = None) -> Array:
    """Collective: rank r gets counts[r] elements of the root's array
    (flattened) from displs[r] into out, which it returns. array, counts and
    displs matter on the root only (displs default to the prefix sums);
    out is needed on every rank but the root (where None means a new array),
    its size that rank's count: one that is not the root's counts[rank]
    makes every rank raise ShmtopoValueError naming it. In place on the root:
    out is the view of array at its displacement."""
    with Held(comm.address):
        a, code, r, result, c, d, ret = normalised(comm, SCATTERV, scatterv_args, comm, array, counts, displs,
                                                    root, out)
        if comm.nnodes == 1:
            checked(lib.shmtopo_scatterv(comm.handle, pointer(a), sizes_pointer(c), sizes_pointer(d), pointer(result), result.size, code, r))
            return ret
        agree(comm, SCATTERV, result.size, code, -1, r, flags=OWN_COUNT)
        table = _root_counts(comm, c, r)
        counts_verdict(signature(SCATTERV, result.size, code, -1, r, flags=OWN_COUNT),
                       _own_counts(comm, result.size), table)
        run_across_nodes(comm, world_scatterv, a, result, c, d, r)
        return ret


def allgatherv(comm: CommLike, array: Any, counts: Any, displs: Any = None, *, out: Array | None = None) -> Array:
    """Collective: every rank's array (flattened, counts[r] elements on rank
    r) lands in every rank's out at displs[r]; returns out (a new 1-D array
    when None). counts must be the same on every rank (displs are each
    rank's own layout, defaulting to the prefix sums). In place: array None
    (or the view of out at this rank's displacement)."""
    with Held(comm.address):
        a, code, result, c, d, ret = normalised(comm, ALLGATHERV, allgatherv_args, comm, array, counts, displs, out)
        if comm.nnodes == 1:
            checked(lib.shmtopo_allgatherv(comm.handle, pointer(a), a.size, pointer(result), sizes_pointer(c), sizes_pointer(d), code))
            return ret
        agree(comm, ALLGATHERV, a.size, code, extra=counts_digest(c), flags=OWN_COUNT | COUNTS)
        run_across_nodes(comm, world_allgatherv, a, result, c, d)
        return ret


def alltoallv(comm: CommLike, array: Any, sendcounts: Any, sdispls: Any, recvcounts: Any, rdispls: Any, *,
              out: Array | None = None) -> Array:
    """Collective: rank r sends sendcounts[p] elements of its array
    (flattened) from sdispls[p] to rank p, which receives them into out at
    its rdispls[r]; rank r's sendcounts[p] must equal rank p's
    recvcounts[r] (else every rank raises, naming the rank at fault).
    Displacements None: the prefix sums. Returns out (a new 1-D array when
    None); the input must not overlap it."""
    with Held(comm.address):
        a, code, result, sc, sd, rc, rd, ret = normalised(comm, ALLTOALLV, alltoallv_args, comm, array, sendcounts,
                                                          sdispls, recvcounts, rdispls, out)
        if comm.nnodes == 1:
            checked(lib.shmtopo_alltoallv(comm.handle, pointer(a), sizes_pointer(sc), sizes_pointer(sd), pointer(result), sizes_pointer(rc),
                                       sizes_pointer(rd), code))
            return ret
        sent = int(sc.sum())
        agree(comm, ALLTOALLV, sent, code, flags=OWN_COUNT)
        n = comm.world_size
        rows = allgather(comm, np.concatenate([sc, rc]))
        pairs_verdict(signature(ALLTOALLV, sent, code, flags=OWN_COUNT), np.ascontiguousarray(rows[:, :n]),
                      np.ascontiguousarray(rows[:, n:]))
        run_across_nodes(comm, world_alltoallv, a, result, sc, sd, rc, rd)
        return ret


def _alltoallw_args(comm: CommLike, send: Any, sendblocks: Any, recv: Any,
                    recvblocks: Any) -> tuple[Array, TypedBlocks, Array, TypedBlocks]:
    n = comm.world_size
    sb = sendblocks if isinstance(sendblocks, TypedBlocks) else TypedBlocks(sendblocks, n, "send")
    rb = recvblocks if isinstance(recvblocks, TypedBlocks) else TypedBlocks(recvblocks, n, "recv")
    s, r = sb.bytes_of(comm, send, "send", writable=False), rb.bytes_of(comm, recv, "recv", writable=True)
    if any(sb.sizes) and any(rb.sizes) and np.may_share_memory(s, r):
        raise ShmtopoValueError("alltoallw: the receive buffer overlaps the send buffer")
    return s, sb, r, rb


def alltoallw(comm: CommLike, send: Any, sendblocks: Any, recv: Any, recvblocks: Any) -> None:
    """Collective: rank r's block sendblocks[p] of send travels into rank p's
    block recvblocks[r] of recv. Blocks: a TypedBlocks, or a block per rank,
    (displ, count, runs): `count`
    elements of the flattened type `runs` (coll.args.TypeRuns), the first
    `displ` bytes into the buffer; its bytes travel in its runs' order (as
    MPI packs a datatype), and the two blocks of a pair must hold as many
    bytes (else every rank raises, naming the rank at fault). send and recv:
    buffers, apart; every block must lie in its buffer."""
    with Held(comm.address):
        s, sb, r, rb = normalised(comm, ALLTOALLW, _alltoallw_args, comm, send, sendblocks, recv, recvblocks)
        if comm.nnodes == 1:
            checked(lib.shmtopo_alltoallw(comm.handle, pointer(s), sb.table, pointer(r), rb.table))
            return
        # across nodes: each block packed in rank order, the bytes through MPI's alltoallv, unpacked
        sc, rc = np.array(sb.sizes, SIZES), np.array(rb.sizes, SIZES)
        agree(comm, ALLTOALLW, int(sc.sum()), lib.SHMTOPO_UINT8, flags=OWN_COUNT)
        rows = allgather(comm, np.concatenate([sc, rc]))
        n = comm.world_size
        pairs_verdict(signature(ALLTOALLW, int(sc.sum()), lib.SHMTOPO_UINT8, flags=OWN_COUNT),
                      np.ascontiguousarray(rows[:, :n]), np.ascontiguousarray(rows[:, n:]))
        sd, rd = np.cumsum(sc) - sc, np.cumsum(rc) - rc
        packed, got = np.empty(int(sc.sum()), np.uint8), np.empty(int(rc.sum()), np.uint8)
        for p in range(n):
            if sc[p]:
                lib.shmtopo_typed_pack(pointer(s), sb.table + p, pointer(packed[sd[p]:]))
        run_across_nodes(comm, world_alltoallv, packed, got, sc, sd, rc, rd)
        for p in range(n):
            if rc[p]:
                lib.shmtopo_typed_unpack(pointer(got[rd[p]:]), rb.table + p, pointer(r))


def _reduce_scatter_counts(comm: CommLike, array: Any, op: Any, counts: Any, out: Any) -> Array:
    a, code, opc, c, result, ret = normalised(comm, REDUCE_SCATTER, reduce_scatter_counts_args, comm, array,
                                              op, counts, out)
    if comm.nnodes == 1:
        checked(lib.shmtopo_reduce_scatterv(comm.handle, pointer(a), pointer(result), sizes_pointer(c), code, opc))
        return ret
    agree(comm, REDUCE_SCATTER, a.size, code, opc, extra=counts_digest(c), flags=COUNTS)
    total = np.empty_like(a)
    run_across_nodes(comm, hier_allreduce, a, total, opc, lib.SHMTOPO_COLL_AUTO)
    start = int(c[:comm.world_rank].sum())
    result[...] = total[start:start + result.size]
    return ret


def _scan_general(comm: CommLike, kind: int, array: Any, op: Any, out: Any) -> Array:
    exclusive = kind == EXSCAN
    what = "exscan" if exclusive else "scan"
    a, code, opc, result = normalised(comm, kind, scan_args, comm, what, array, op, out, exclusive)
    if comm.nnodes == 1:
        checked(lib.shmtopo_scan(comm.handle, pointer(a), pointer(result), a.size, code, opc, int(exclusive)))
        return result
    agree(comm, kind, a.size, code, opc)
    # across nodes, where node ranks need not be consecutive job ranks: every
    # input everywhere, folded in job rank order by the core's own kernel
    rows = np.empty((comm.world_size,) + a.shape, a.dtype)
    run_across_nodes(comm, hier_allgather, a, rows)
    upto = comm.world_rank + (0 if exclusive else 1)
    if upto and a.size:
        acc = rows[0].copy()
        for p in range(1, upto):
            checked(lib.shmtopo_reduce_local(ffi.from_buffer(acc), ffi.from_buffer(rows[p]), a.size, code, opc))
        result[...] = acc
    return result


def scan(comm: CommLike, array: npt.ArrayLike, op: str = "sum", *, out: Array | None = None) -> Array:
    """Collective: on rank r, the reduction of ranks 0..r's arrays, folded in
    rank order (bit for bit what a loop over ranks 0..r computes). Returns
    out (a new array when None); out=array for in place."""
    with Held(comm.address):
        return _scan_general(comm, SCAN, array, op, out)


def exscan(comm: CommLike, array: npt.ArrayLike, op: str = "sum", *, out: Array | None = None) -> Array:
    """Collective: scan of ranks 0..r-1 (exclusive). Rank 0 has none: its out
    is left as it was (MPI leaves it undefined) and returned, or a new
    zero-filled array when out is None. out=array for in place."""
    with Held(comm.address):
        return _scan_general(comm, EXSCAN, array, op, out)
