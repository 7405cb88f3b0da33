/* Window collectives over the comm's channel (chan.c): every call's first
 * step is its agreement (the signature of its arguments and whether they
 * were valid), and tiny messages travel in that same step's cache line, so
 * an 8-byte allreduce is one step.
 *
 * Larger data goes through three buffers per rank, the one of a chunk
 * chosen by the step number its first step has, mod 3. A chunk's readers
 * are done by the time they post the step after its last one, and a buffer
 * is written again only by a chunk starting three steps later, after seeing
 * everyone past that point: so no chunk overwrites data still being read.
 *
 * Large private arrays skip the scratch buffers where the comm has single
 * copy (single_copy.c): the first step carries every rank's buffer address,
 * ranks then copy straight between each other's arrays, and a step ends
 * each round of copying, so nobody's array is left (or reused) while a peer
 * still copies it, and a failed copy fails that step on every rank. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coll.h"
#include "internal.h"
#include "state.h"

#define FLAT_MAX (64 * 1024) /* auto: above this, reduce-scatter + allgather */
/* Single copy from this many bytes on (bcast in place of a private array
 * from Python, this set to 0, the median of 7 interleaved runs of a comm
 * with SHMTOPO_SINGLE_COPY=0 against one with it on, on a 2-vCPU machine
 * at load ~1, Open MPI 4.1.4 and MPICH 4.0.2 alike). 2 ranks: even at
 * 12 KiB, single copy 0.87x the time at 16 KiB and 0.6x at 32 KiB; below,
 * its second step and system calls cost more than the two memcpys of one
 * chunk. Oversubscribed (3 and 4 ranks on 2 CPUs), where each step waits
 * for a rank to be scheduled and copies queue for the CPUs: 1.1-1.5x slower
 * up to 256 KiB, mixed (0.7-1.2x) from 384 KiB to 3 MiB, 0.8-0.94x from
 * 4 MiB on. allgather, alike: 0.5-0.83x from 16 KiB to 8 MiB on 2 ranks,
 * 0.85-0.94x from 4 MiB on oversubscribed. The calls that move blocks
 * (gather, scatter, alltoall and their v-variants) take SC_MIN even
 * oversubscribed: their scratch path streams every block through the
 * root's or each rank's buffers, a step per chunk, each meeting every rank
 * (4 ranks on 2 CPUs, Open MPI, against mpi4py: scatter 2 MiB 2.8x, alltoall
 * 2 MiB 2.65x, gather 2 MiB 2.1x; with single copy from 16 KiB on, two runs
 * at 4 ranks and one at 3: scatter and gather 0.38-0.97x from 16 KiB to
 * 4 MiB, alltoall 0.78-0.99x up to 512 KiB and 1.01-1.10x at 2-4 MiB). */
#define SC_MIN ((size_t)16 << 10)
#define SC_MIN_OVERSUBSCRIBED ((size_t)4 << 20)
/* reduce, measured alike on 2 ranks: 1.16x the time at 16 KiB, 0.7-1.0x at
 * 24-48 KiB, 1.05x at 64 KiB (flat reduce needs one step, single copy two),
 * 0.56-0.76x from 128 KiB on; oversubscribed 0.6-0.76x from 4 MiB on. */
#define SC_MIN_REDUCE ((size_t)128 << 10)
/* allreduce and bcast from C (benchmarks/c_against_mpi.c, KUPL's persistent
 * calls, 2 ranks, Open MPI 4.1.4, median of 9 blocks, single copy on against
 * SHMTOPO_SINGLE_COPY=0): allreduce 1.63x the time at 16 KiB, 1.13x at 32 KiB,
 * 0.83x at 64 KiB, 0.83x at 128 KiB; bcast 1.21x at 16 KiB, 0.79x at 32 KiB,
 * 0.56x at 64 KiB. (At 16 KiB single copy made allreduce 1.28x Open MPI's
 * MPI_Allreduce and 1.42x MPICH's.) */
#define SC_MIN_ALLREDUCE ((size_t)64 << 10)
#define SC_MIN_BCAST ((size_t)32 << 10)

static char *buffer(const shmtopo_comm_t *comm, int rank, int which)
{
    return shmtopo_chan_buffer(comm, rank, which);
}

/* [a, a + na) and [b, b + nb) share a byte. */
static int overlap(const void *a, size_t na, const void *b, size_t nb)
{
    const char *x = a, *y = b;
    return na && nb && x < y + nb && y < x + na;
}

/* The local checks of a call, in the order every entry applies them; the
 * first failure is recorded (errno, message) and returned as -1. */
int shmtopo_coll_check_dtype(int dtype)
{
    return shmtopo_dtype_size(dtype) ? 0 : shmtopo_fail(EINVAL, -1, "unknown element type %d", dtype);
}

int shmtopo_coll_check_root(const shmtopo_comm_t *comm, int root)
{
    if (root < 0 || root >= comm->size)
        return shmtopo_fail(EINVAL, -1, "root %d out of range [0, %d)", root, comm->size);
    return 0;
}

int shmtopo_coll_check_alg(int alg)
{
    if (alg != SHMTOPO_COLL_AUTO && alg != SHMTOPO_COLL_FLAT && alg != SHMTOPO_COLL_RSAG)
        return shmtopo_fail(EINVAL, -1, "unknown algorithm %d (auto, flat or rsag)", alg);
    return 0;
}

int shmtopo_coll_check_buffers(const char *what, size_t count, const void *a, const void *b)
{
    if (count && (!a || !b))
        return shmtopo_fail(EINVAL, -1, "%s: NULL buffer for %zu elements", what, count);
    return 0;
}

/* The result may replace its input exactly (in place), or lie apart from
 * it; a partial overlap would read elements already overwritten. */
int shmtopo_coll_check_overlap(const char *what, const void *send, size_t ns, const void *recv, size_t nr,
                               int in_place)
{
    if (overlap(send, ns, recv, nr) && !in_place)
        return shmtopo_fail(EINVAL, -1, "%s: the result overlaps the input only in part "
                            "(pass the same array for in place, or separate arrays)", what);
    return 0;
}

/* The algorithm every rank resolves alike: the same count, type, comm size
 * and comm-wide default (SHMTOPO_COLL_ALGORITHM, agreed at creation). */
static int resolve_alg(const shmtopo_comm_t *comm, int alg, size_t nbytes)
{
    if (alg == SHMTOPO_COLL_AUTO)
        alg = comm->config.coll_alg;
    if (alg == SHMTOPO_COLL_AUTO)
        alg = nbytes <= FLAT_MAX || comm->size == 1 ? SHMTOPO_COLL_FLAT : SHMTOPO_COLL_RSAG;
    return alg;
}

/* ---- single copy: shared pieces ------------------------------------------------ */

/* Where single copy starts for a kind of call: the same on every rank
 * (oversubscription is decided from every rank's affinity mask at creation). */
size_t shmtopo_coll_sc_min(const shmtopo_comm_t *comm, int kind)
{
    const int moves_blocks = kind == SHMTOPO_KIND_GATHER || kind == SHMTOPO_KIND_SCATTER ||
                             kind == SHMTOPO_KIND_ALLTOALL || kind == SHMTOPO_KIND_GATHERV ||
                             kind == SHMTOPO_KIND_SCATTERV || kind == SHMTOPO_KIND_ALLTOALLV;
    if (comm->oversubscribed)
        return moves_blocks ? SC_MIN : SC_MIN_OVERSUBSCRIBED;
    switch (kind) {
    case SHMTOPO_KIND_REDUCE: return SC_MIN_REDUCE;
    case SHMTOPO_KIND_ALLREDUCE: return SC_MIN_ALLREDUCE;
    case SHMTOPO_KIND_BCAST: return SC_MIN_BCAST;
    default: return SC_MIN;
    }
}

/* [part(n, i, P), part(n, i + 1, P)): the i-th of P near-equal parts of n
 * bytes, cut on page multiples (so two copiers rarely share a page). */
static size_t part(size_t n, size_t i, size_t P)
{
    if (i >= P)
        return n;
    const size_t at = i * (n / P) + i * (n % P) / P;
    return at / 4096 * 4096;
}

uint64_t shmtopo_coll_posted_address(const shmtopo_comm_t *comm, int rank)
{
    uint64_t a;
    memcpy(&a, shmtopo_step_data(comm, rank), sizeof(a));
    return a;
}

/* ---- reductions ------------------------------------------------------------ */

/* dst = in[0] op in[1] op ... op in[nranks - 1] in rank order, the same on
 * every rank so that floating-point results agree bit for bit: every path of
 * every reduction and scan folds its ranks' inputs here (single copy: in
 * sc_reduce, alike). dst may be in[0] or in[1] (the pair kernel allows
 * that); when it is a later input, which the first writes would clobber, or
 * the type accumulates wider (16-bit floats: in float32, rounded once after
 * the last rank), the accumulator is the private slice instead. */
void shmtopo_coll_fold(const shmtopo_comm_t *comm, char *dst, shmtopo_coll_src_fn src, const void *arg,
                       int nranks, size_t count, int dtype, int op)
{
    const size_t esz = shmtopo_dtype_size(dtype), asz = shmtopo_acc_size(dtype);
    if (nranks == 1) {
        memmove(dst, src(comm, 0, arg), count * esz);
        return;
    }
    int apart = asz != esz;
    for (int p = 2; p < nranks; p++)
        apart |= src(comm, p, arg) == dst;
    if (!apart) { /* in dst itself, in one pass */
        shmtopo_acc_pair(dst, src(comm, 0, arg), src(comm, 1, arg), count, dtype, op);
        for (int p = 2; p < nranks; p++)
            shmtopo_acc_into(dst, src(comm, p, arg), count, dtype, op);
        return;
    }
    const size_t per = comm->chan.buffer / asz; /* the private accumulator, a slice at a time */
    for (size_t off = 0; off < count; off += per) {
        const size_t m = shmtopo_min_size(per, count - off);
        char *acc = comm->chan.tmp;
        shmtopo_acc_pair(acc, src(comm, 0, arg) + off * esz, src(comm, 1, arg) + off * esz, m, dtype, op);
        for (int p = 2; p < nranks; p++)
            shmtopo_acc_into(acc, src(comm, p, arg) + off * esz, m, dtype, op);
        shmtopo_acc_round(dst + off * esz, acc, m, dtype);
    }
}

/* The reduction of every rank's input. */
static void reduce_ranks(const shmtopo_comm_t *comm, char *dst, shmtopo_coll_src_fn src, const void *arg,
                         size_t count, int dtype, int op)
{
    shmtopo_coll_fold(comm, dst, src, arg, comm->size, count, dtype, op);
}

/* Where each rank's input lies: copied into its scratch buffers chunk by
 * chunk (any array), or in place at `offset` of its part of a window of the
 * comm (zero-copy: peers read it there). */
typedef struct source {
    const char *send;          /* this rank's input, copy path */
    const shmtopo_win_t *win;  /* window path */
    size_t offset;
} source_t;

static const char *from_window(const shmtopo_comm_t *comm, int rank, const void *arg)
{
    (void)comm;
    const source_t *src = arg;
    return src->win->base[rank] + src->offset;
}

static const char *from_step(const shmtopo_comm_t *comm, int rank, const void *arg)
{
    return shmtopo_step_payload(comm, rank, *(const size_t *)arg);
}

const char *shmtopo_coll_from_buffer(const shmtopo_comm_t *comm, int rank, const void *arg)
{
    const shmtopo_chunk_at_t *at = arg;
    return rank == comm->rank && at->own ? at->own : buffer(comm, rank, at->which) + at->offset;
}

/* Every rank publishes, one step, and the readers reduce all inputs. */
static int flat_reduce(shmtopo_comm_t *comm, const shmtopo_sig_t *sig, const source_t *src, char *recv,
                       size_t count, int dtype, int op, int root)
{
    const size_t esz = shmtopo_dtype_size(dtype), n = count * esz;
    const int reads = root < 0 || root == comm->rank;
    if (src->win) {
        /* in place: one step to start reading, one so nobody changes its
         * part while a peer still reads it */
        if (shmtopo_coll_step(comm, sig, NULL, 0) < 0)
            return -1;
        if (reads)
            reduce_ranks(comm, recv, from_window, src, count, dtype, op);
        return shmtopo_coll_step(comm, sig, NULL, 0);
    }
    if (n <= SHMTOPO_INLINE || sig->flags & SHMTOPO_SIG_RUN_AHEAD) {
        /* running ahead (a reduce): the root waits for every rank, the
         * others for nobody */
        if ((sig->flags & SHMTOPO_SIG_RUN_AHEAD ? shmtopo_step_ahead(comm, sig, src->send, n, reads ? comm->size : -1)
                                               : shmtopo_coll_step(comm, sig, src->send, n)) < 0)
            return -1;
        if (reads && n)
            reduce_ranks(comm, recv, from_step, &n, count, dtype, op);
        return 0;
    }
    const size_t per = comm->chan.buffer / esz;
    for (size_t off = 0; off < count; off += per) {
        const size_t m = shmtopo_min_size(per, count - off);
        shmtopo_chunk_at_t at = {shmtopo_chan_next_buffer(comm), 0, NULL};
        memcpy(buffer(comm, comm->rank, at.which), src->send + off * esz, m * esz);
        if (shmtopo_coll_step(comm, sig, NULL, 0) < 0)
            return -1;
        if (reads)
            reduce_ranks(comm, recv + off * esz, shmtopo_coll_from_buffer, &at, m, dtype, op);
    }
    return 0;
}

/* Per chunk: each rank reduces its own slice of everybody's chunk (in
 * parallel, so the memory traffic is shared), publishes it, then the readers
 * copy the others' slices: the memory-bandwidth-bound shape. Only the slices
 * peers reduce are copied in: a rank reads its own slice from its input. */
static int rsag_reduce(shmtopo_comm_t *comm, const shmtopo_sig_t *sig, const source_t *src, char *recv,
                       size_t count, int dtype, int op, int root)
{
    const size_t esz = shmtopo_dtype_size(dtype), per = comm->chan.buffer / esz;
    const int reads = root < 0 || root == comm->rank;
    const size_t P = (size_t)comm->size, me = (size_t)comm->rank;
    for (size_t off = 0; off < count; off += per) {
        const size_t m = shmtopo_min_size(per, count - off);
        const int which = shmtopo_chan_next_buffer(comm);
        char *mine = buffer(comm, comm->rank, which);
        const size_t lo = m * me / P, hi = m * (me + 1) / P;
        if (!src->win) {
            memcpy(mine, src->send + off * esz, lo * esz);
            memcpy(mine + hi * esz, src->send + (off + hi) * esz, (m - hi) * esz);
        }
        if (shmtopo_coll_step(comm, sig, NULL, 0) < 0)
            return -1;
        /* a rank without a result reduces straight into its scratch, where
         * the readers copy it from; a reader publishes a copy unless it is
         * the only reader (the root of a reduce) */
        char *dst = reads ? recv + (off + lo) * esz : mine + lo * esz;
        if (src->win) {
            source_t at = {NULL, src->win, src->offset + (off + lo) * esz};
            reduce_ranks(comm, dst, from_window, &at, hi - lo, dtype, op);
        } else {
            shmtopo_chunk_at_t at = {which, lo * esz, src->send + (off + lo) * esz};
            reduce_ranks(comm, dst, shmtopo_coll_from_buffer, &at, hi - lo, dtype, op);
        }
        if (reads && root < 0)
            memcpy(mine + lo * esz, dst, (hi - lo) * esz);
        if (shmtopo_coll_step(comm, sig, NULL, 0) < 0)
            return -1;
        if (!reads)
            continue;
        for (size_t p = 0; p < P; p++) {
            const size_t plo = m * p / P, phi = m * (p + 1) / P;
            if (p != me)
                memcpy(recv + (off + plo) * esz, buffer(comm, (int)p, which) + plo * esz, (phi - plo) * esz);
        }
    }
    return 0;
}

/* A window path needs a window of this comm and the data inside every
 * rank's part. The result may replace this rank's own input (in place) but
 * must not overlap any other input, which peers read while it is written. */
static int check_window(const shmtopo_comm_t *comm, const source_t *src, const char *recv,
                        size_t nbytes, size_t recv_bytes)
{
    if (!src->win)
        return 0;
    if (src->win->comm != comm)
        return shmtopo_fail(EINVAL, -1, "the window belongs to another comm");
    for (int p = 0; p < comm->size; p++) {
        if (src->offset + nbytes > src->win->sizes[p])
            return shmtopo_fail(EINVAL, -1, "bytes [%zu, %zu) lie outside rank %d's part of the window (%zu bytes)",
                                src->offset, src->offset + nbytes, shmtopo_world(comm, p), src->win->sizes[p]);
        const char *input = src->win->base[p] + src->offset;
        if (recv && overlap(recv, recv_bytes, input, nbytes) &&
            !(p == comm->rank && recv == input && recv_bytes == nbytes))
            return shmtopo_fail(EINVAL, -1, "the result buffer overlaps rank %d's input in the window "
                                "(only exactly in place, on this rank's own input, is allowed)",
                                shmtopo_world(comm, p));
    }
    return 0;
}

/* Allreduce in place in a window: rank r reduces slice r of every part,
 * chunk by chunk, into its own part and writes each result chunk straight
 * into slice r of every peer's part. Only rank r reads or writes slice r of
 * any part, and it writes a chunk only after reading that chunk of every
 * input, so nobody reads a slice while it changes. Each byte crosses cores
 * once each way (read, then written back into the lines just read) instead
 * of being read across a second time; one step to start, and one so that no
 * rank returns (or rewrites its part) while a peer still writes into it.
 * Slices are cut on cache lines from the data's start (parts start on
 * pages), so no two ranks write the same line. */
#define INPLACE_CHUNK ((size_t)64 << 10) /* a result chunk, still in cache when copied out */
static int inplace_allreduce(shmtopo_comm_t *comm, const shmtopo_sig_t *sig, const source_t *src,
                             char *recv, size_t count, int dtype, int op)
{
    const size_t esz = shmtopo_dtype_size(dtype), P = (size_t)comm->size, me = (size_t)comm->rank;
    if (shmtopo_coll_step(comm, sig, NULL, 0) < 0)
        return -1;
    const size_t n = count * esz, line = SHMTOPO_LINE;
    const size_t lo = n * me / P / line * line, hi = me + 1 == P ? n : n * (me + 1) / P / line * line;
    for (size_t at = lo; at < hi; at += INPLACE_CHUNK) {
        const size_t bytes = shmtopo_min_size(INPLACE_CHUNK, hi - at);
        source_t chunk = {NULL, src->win, src->offset + at};
        reduce_ranks(comm, recv + at, from_window, &chunk, bytes / esz, dtype, op);
        for (size_t i = 1; i < P; i++) /* peers in a rotated order: no part gets every writer at once */
            memcpy(src->win->base[(me + i) % P] + src->offset + at, recv + at, bytes);
    }
    /* nobody leaves while a peer still writes into its part */
    return shmtopo_coll_step(comm, sig, NULL, 0);
}

/* Private chunks for single-copy reductions, kept with the comm's channel. */
static char *sc_scratch(shmtopo_comm_t *comm, size_t n)
{
    shmtopo_chan_t *chan = &comm->chan;
    if (chan->sc_tmp_size < n) {
        free(chan->sc_tmp);
        chan->sc_tmp = malloc(n);
        chan->sc_tmp_size = chan->sc_tmp ? n : 0;
        if (!chan->sc_tmp)
            shmtopo_fail(ENOMEM, -1, "out of memory for %zu bytes of single-copy scratch", n);
    }
    return chan->sc_tmp;
}

/* Single-copy reduce and allreduce: rank r reduces slice r of every input,
 * chunk by chunk, reading each peer's part into a private chunk in rank
 * order (the order, and so the bits, of the scratch path), then writes the
 * result chunk straight into the result of every rank that gets one (the
 * root, or all). Only rank r ever reads slice r of an input, and it writes
 * a chunk of a result only after reading that chunk of every input, so a
 * result may replace its input (in place). Every rank reads and writes
 * (P-1)/P of the data once, where the scratch path also copies each input
 * in and each result out. */
static int sc_reduce(shmtopo_comm_t *comm, const shmtopo_sig_t *sig, const char *send, char *recv,
                     size_t count, int dtype, int op, int root)
{
    const size_t esz = shmtopo_dtype_size(dtype), P = (size_t)comm->size, me = (size_t)comm->rank;
    const int reads = root < 0 || root == comm->rank;
    const uint64_t mine[2] = {(uint64_t)(uintptr_t)send, reads ? (uint64_t)(uintptr_t)recv : 0};
    if (shmtopo_coll_step(comm, sig, mine, sizeof(mine)) < 0) /* the agreement, and every rank's addresses */
        return -1;
    const size_t C = comm->chan.buffer / esz, round = SHMTOPO_SC_ROUND / esz, asz = shmtopo_acc_size(dtype);
    uint64_t *in = malloc(2 * P * sizeof(*in)), *out = in ? in + P : NULL;
    /* two chunks of inputs, then the accumulator (wider for 16-bit floats) */
    char *slot = sc_scratch(comm, 2 * C * esz + C * asz);
    int err = in && slot ? 0 : (shmtopo_fail(ENOMEM, -1, "out of memory"), ENOMEM);
    for (size_t p = 0; in && p < P; p++) {
        uint64_t a[2];
        memcpy(a, shmtopo_step_data(comm, (int)p), sizeof(a));
        in[p] = a[0];
        out[p] = a[1];
    }
    /* my result chunk is built in place, unless my input is my result and
     * still needed after the first two inputs are folded, or the type
     * accumulates wider (then rounded into my result, or into slot 0) */
    const int wide = asz != esz, direct = reads && !wide && !(recv == send && me >= 2);
    for (size_t off = 0; off < count; off += round) {
        const size_t m = shmtopo_min_size(round, count - off), lo = m * me / P, hi = m * (me + 1) / P;
        for (size_t c = lo; c < hi && !err; c += C) {
            const size_t k = shmtopo_min_size(C, hi - c), at = (off + c) * esz, bytes = k * esz;
            char *acc = direct ? recv + at : slot + 2 * C * esz;
            const char *x[2];
            for (size_t p = 0; p < 2; p++) {
                x[p] = p == me ? send + at : slot + p * C * esz;
                if (p != me && !err &&
                    shmtopo_sc_read(comm, (int)p, slot + p * C * esz, in[p] + at, bytes, shmtopo_kind_name(sig->kind)) < 0) {
                    if (shmtopo_sc_gone(comm, (int)p))
                        goto out_failed;
                    err = errno;
                }
            }
            if (err)
                break;
            shmtopo_acc_pair(acc, x[0], x[1], k, dtype, op);
            for (size_t p = 2; p < P && !err; p++) {
                if (p == me) {
                    shmtopo_acc_into(acc, send + at, k, dtype, op);
                } else if (shmtopo_sc_read(comm, (int)p, slot + C * esz, in[p] + at, bytes, shmtopo_kind_name(sig->kind)) < 0) {
                    if (shmtopo_sc_gone(comm, (int)p))
                        goto out_failed;
                    err = errno;
                } else {
                    shmtopo_acc_into(acc, slot + C * esz, k, dtype, op);
                }
            }
            char *res = acc; /* the result chunk, as every reader gets it */
            if (wide && !err) {
                res = reads ? recv + at : slot;
                shmtopo_acc_round(res, acc, k, dtype);
            }
            for (size_t i = 1; i < P && !err; i++) {
                const size_t q = (me + i) % P;
                if ((root < 0 || q == (size_t)root) &&
                    shmtopo_sc_write(comm, (int)q, out[q] + at, res, bytes, shmtopo_kind_name(sig->kind)) < 0) {
                    if (shmtopo_sc_gone(comm, (int)q))
                        goto out_failed;
                    err = errno;
                }
            }
            if (!err && reads && res != recv + at)
                memcpy(recv + at, res, bytes);
        }
        /* inputs and results stay until every rank is done with them */
        if (shmtopo_step(comm, sig, err, NULL, 0) < 0)
            goto out_failed;
    }
    free(in);
    return 0;
out_failed:
    free(in);
    return -1;
}

/* A reduction's signature (set either way, for the agreement) and the
 * checks of its arguments on this rank: 0, or -1 with the failure recorded.
 * root: -1 for an allreduce. */
static int reduce_prepare(const shmtopo_comm_t *comm, int kind, const source_t *src, void *recv, size_t count,
                          int dtype, int op, int root, int alg, shmtopo_sig_t *sig)
{
    const int reads = root < 0 || root == comm->rank;
    const size_t n = count * shmtopo_dtype_size(dtype);
    /* the signature also tells the copy path from the window path, and an
     * allreduce in place in the window from one that is not */
    const int in_place = src->win && root < 0 && count && (const char *)recv == src->win->base[comm->rank] + src->offset;
    *sig = shmtopo_coll_sig(kind, count, dtype, op, root, resolve_alg(comm, alg, n));
    if (src->win) {
        sig->flags = SHMTOPO_SIG_WINDOW | (in_place ? SHMTOPO_SIG_IN_PLACE : 0);
        sig->extra = src->offset;
    } else if (comm->single_copy && comm->size > 1 && n >= shmtopo_coll_sc_min(comm, kind) && alg == SHMTOPO_COLL_AUTO &&
               comm->config.coll_alg == SHMTOPO_COLL_AUTO) {
        /* single copy where the algorithm is left to us; flat and rsag
         * asked for by name keep the scratch buffers */
        sig->flags = SHMTOPO_SIG_SINGLE_COPY;
        sig->alg = -1;
    }
    errno = 0;
    if ((kind == SHMTOPO_KIND_REDUCE && shmtopo_coll_check_root(comm, root) < 0) || shmtopo_reduce_check(dtype, op) < 0 ||
        shmtopo_coll_check_alg(alg) < 0 || shmtopo_coll_check_buffers(shmtopo_kind_name(kind), count, src->win ? (void *)1 : src->send,
                                             reads ? recv : (void *)1) < 0 ||
        check_window(comm, src, reads ? recv : NULL, n, n) < 0 ||
        (!src->win && reads && shmtopo_coll_check_overlap(shmtopo_kind_name(kind), src->send, n, recv, n, recv == (void *)src->send) < 0))
        return -1;
    if (kind == SHMTOPO_KIND_REDUCE && count && !src->win && n <= SHMTOPO_AHEAD_MAX && sig->alg == SHMTOPO_COLL_FLAT &&
        shmtopo_runs_ahead(comm))
        sig->flags |= SHMTOPO_SIG_RUN_AHEAD;
    return 0;
}

/* The reduction, its arguments checked and its signature made by reduce_prepare. */
static int reduce_run(shmtopo_comm_t *comm, const shmtopo_sig_t *sig, const source_t *src, void *recv, size_t count,
                      int dtype, int op, int root)
{
    if (count == 0) /* still a step: arguments are checked and everyone meets */
        return shmtopo_coll_step(comm, sig, NULL, 0);
    if (sig->flags & SHMTOPO_SIG_IN_PLACE) /* flat would overwrite inputs peers still read */
        return inplace_allreduce(comm, sig, src, recv, count, dtype, op);
    if (sig->flags & SHMTOPO_SIG_SINGLE_COPY)
        return sc_reduce(comm, sig, src->send, recv, count, dtype, op, root);
    if (sig->alg == SHMTOPO_COLL_FLAT)
        return flat_reduce(comm, sig, src, recv, count, dtype, op, root);
    return rsag_reduce(comm, sig, src, recv, count, dtype, op, root);
}

static int reduce_common(shmtopo_comm_t *comm, int kind, const source_t *src, void *recv, size_t count,
                         int dtype, int op, int root, int alg)
{
    if (shmtopo_comm_usable(comm, shmtopo_kind_name(kind)) < 0)
        return -1;
    if (kind == SHMTOPO_KIND_ALLREDUCE)
        root = -1;
    shmtopo_sig_t sig;
    if (reduce_prepare(comm, kind, src, recv, count, dtype, op, root, alg, &sig) < 0)
        return shmtopo_coll_refuse(comm, &sig);
    return reduce_run(comm, &sig, src, recv, count, dtype, op, root);
}

int shmtopo_win_reduce(shmtopo_win_t *win, size_t offset, void *recv, size_t count, int dtype,
                       int op, int root, int alg)
{
    if (!win)
        return shmtopo_fail(EBADF, -1, "window is NULL or freed");
    source_t src = {NULL, win, offset};
    return reduce_common(win->comm, root < 0 ? SHMTOPO_KIND_ALLREDUCE : SHMTOPO_KIND_REDUCE, &src, recv,
                         count, dtype, op, root, alg);
}

int shmtopo_reduce(shmtopo_comm_t *comm, const void *send, void *recv, size_t count, int dtype,
                   int op, int root, int alg)
{
    source_t src = {send, NULL, 0};
    return reduce_common(comm, SHMTOPO_KIND_REDUCE, &src, recv, count, dtype, op, root, alg);
}

int shmtopo_allreduce(shmtopo_comm_t *comm, const void *send, void *recv, size_t count, int dtype,
                      int op, int alg)
{
    source_t src = {send, NULL, 0};
    return reduce_common(comm, SHMTOPO_KIND_ALLREDUCE, &src, recv, count, dtype, op, -1, alg);
}

int shmtopo_coll_allreduce_prepare(const shmtopo_comm_t *comm, const void *send, void *recv, size_t count,
                                   int dtype, int op, int alg, shmtopo_sig_t *sig)
{
    source_t src = {send, NULL, 0};
    return reduce_prepare(comm, SHMTOPO_KIND_ALLREDUCE, &src, recv, count, dtype, op, -1, alg, sig);
}

int shmtopo_coll_allreduce_run(shmtopo_comm_t *comm, const shmtopo_sig_t *sig, const void *send, void *recv,
                               size_t count, int dtype, int op)
{
    if (shmtopo_comm_usable(comm, "allreduce") < 0)
        return -1;
    source_t src = {send, NULL, 0};
    return reduce_run(comm, sig, &src, recv, count, dtype, op, -1);
}

/* ---- data movement ------------------------------------------------------------- */

int shmtopo_barrier(shmtopo_comm_t *comm)
{
    if (shmtopo_comm_usable(comm, "barrier") < 0)
        return -1;
    static const shmtopo_sig_t sig = SHMTOPO_SIG_OF(SHMTOPO_KIND_BARRIER);
    return shmtopo_coll_step(comm, &sig, NULL, 0);
}

/* Single-copy bcast. Only the root and a receiver can copy into the
 * receiver's array, so both do, at once: the bytes are cut into P parts, and
 * the root writes part i into the i-th receiver after it (process_vm_writev)
 * while each receiver reads the other parts from the root
 * (process_vm_readv), starting after its own part, so receivers read
 * different parts at a time. Every rank moves (P-1)/P of the bytes: with 2
 * ranks, two cores copy half each instead of one copying all. */
static int sc_bcast(shmtopo_comm_t *comm, const shmtopo_sig_t *sig, char *buf, size_t n, int root)
{
    const uint64_t mine = (uint64_t)(uintptr_t)buf;
    if (shmtopo_coll_step(comm, sig, &mine, sizeof(mine)) < 0) /* the agreement, and every rank's address */
        return -1;
    const size_t P = (size_t)comm->size, me = ((size_t)comm->rank + P - (size_t)root) % P;
    const int is_root = comm->rank == root;
    uint64_t *to = is_root ? malloc(P * sizeof(*to)) : NULL;
    int err = is_root && !to ? (shmtopo_fail(ENOMEM, -1, "out of memory"), ENOMEM) : 0;
    const uint64_t from = shmtopo_coll_posted_address(comm, root);
    for (size_t i = 1; to && i < P; i++)
        to[i] = shmtopo_coll_posted_address(comm, (int)((root + i) % P));
    for (size_t off = 0; off < n; off += SHMTOPO_SC_ROUND) {
        const size_t m = shmtopo_min_size(SHMTOPO_SC_ROUND, n - off);
        for (size_t k = 1; k < P && !err; k++) {
            if (is_root) { /* part k into the k-th receiver */
                const size_t lo = part(m, k, P), hi = part(m, k + 1, P);
                const int d = (int)((root + k) % P);
                if (hi > lo && shmtopo_sc_write(comm, d, to[k] + off + lo, buf + off + lo, hi - lo, "bcast") < 0) {
                    if (shmtopo_sc_gone(comm, d))
                        goto out_failed;
                    err = errno;
                }
            } else { /* a receiver: every part but its own, from the next one on */
                const size_t i = (me + k) % P, lo = part(m, i, P), hi = part(m, i + 1, P);
                if (hi > lo && shmtopo_sc_read(comm, root, buf + off + lo, from + off + lo, hi - lo, "bcast") < 0) {
                    if (shmtopo_sc_gone(comm, root))
                        goto out_failed;
                    err = errno;
                }
            }
        }
        /* the root's array, and the receivers', stay until every copy is
         * done; a failed copy fails this step on every rank */
        if (shmtopo_step(comm, sig, err, NULL, 0) < 0)
            goto out_failed;
    }
    free(to);
    return 0;
out_failed:
    free(to);
    return -1;
}

int shmtopo_bcast(shmtopo_comm_t *comm, void *buf, size_t count, int dtype, int root)
{
    if (shmtopo_comm_usable(comm, "bcast") < 0)
        return -1;
    shmtopo_sig_t sig = shmtopo_coll_sig(SHMTOPO_KIND_BCAST, count, dtype, -1, root, -1);
    const size_t n = count * shmtopo_dtype_size(dtype);
    /* the path follows from what the ranks agree on (the count and type, the
     * comm's single copy); the flag makes the agreement check that too */
    if (comm->single_copy && comm->size > 1 && n >= shmtopo_coll_sc_min(comm, SHMTOPO_KIND_BCAST))
        sig.flags = SHMTOPO_SIG_SINGLE_COPY;
    errno = 0;
    if (shmtopo_coll_check_root(comm, root) < 0 || shmtopo_coll_check_dtype(dtype) < 0 || shmtopo_coll_check_buffers("bcast", count, buf, buf) < 0)
        return shmtopo_coll_refuse(comm, &sig);
    if (sig.flags & SHMTOPO_SIG_SINGLE_COPY)
        return sc_bcast(comm, &sig, buf, n, root);
    char *data = buf;
    const int rank = comm->rank;
    if (n && n <= SHMTOPO_AHEAD_MAX && shmtopo_runs_ahead(comm)) {
        /* running ahead, the root waits for nobody and a receiver for the root */
        sig.flags |= SHMTOPO_SIG_RUN_AHEAD;
        if (shmtopo_step_ahead(comm, &sig, rank == root ? buf : NULL, rank == root ? n : 0, root) < 0)
            return -1;
        if (rank != root)
            memcpy(buf, shmtopo_step_payload(comm, root, n), n);
        return 0;
    }
    if (n <= SHMTOPO_INLINE) {
        if (shmtopo_coll_step(comm, &sig, rank == root ? buf : NULL, rank == root ? n : 0) < 0)
            return -1;
        if (rank != root && n)
            memcpy(buf, shmtopo_step_data(comm, root), n);
        return 0;
    }
    const size_t B = comm->chan.buffer;
    for (size_t off = 0; off < n; off += B) {
        const size_t m = shmtopo_min_size(B, n - off);
        const int which = shmtopo_chan_next_buffer(comm);
        if (rank == root)
            memcpy(buffer(comm, root, which), data + off, m);
        if (shmtopo_coll_step(comm, &sig, NULL, 0) < 0)
            return -1;
        if (rank != root)
            memcpy(data + off, buffer(comm, root, which), m);
    }
    return 0;
}

int shmtopo_win_bcast(shmtopo_win_t *win, size_t offset, void *buf, size_t count, int dtype, int root)
{
    if (!win)
        return shmtopo_fail(EBADF, -1, "window is NULL or freed");
    shmtopo_comm_t *comm = win->comm;
    if (shmtopo_comm_usable(comm, "bcast") < 0)
        return -1;
    const size_t n = count * shmtopo_dtype_size(dtype);
    source_t src = {NULL, win, offset};
    /* In place (every rank's buffer is its own part of the window, at the
     * same offset): all ranks share the copying, each filling its segment of
     * every destination, instead of each reader copying everything itself. */
    const int in_place = n && (char *)buf == win->base[comm->rank] + offset;
    shmtopo_sig_t sig = shmtopo_coll_sig(SHMTOPO_KIND_BCAST, count, dtype, -1, root, -1);
    sig.flags = SHMTOPO_SIG_WINDOW | (in_place ? SHMTOPO_SIG_IN_PLACE : 0);
    sig.extra = offset;
    errno = 0;
    if (shmtopo_coll_check_root(comm, root) < 0 || shmtopo_coll_check_dtype(dtype) < 0 || shmtopo_coll_check_buffers("bcast", count, buf, buf) < 0 ||
        check_window(comm, &src, NULL, n, 0) < 0)
        return shmtopo_coll_refuse(comm, &sig);
    if (shmtopo_coll_step(comm, &sig, NULL, 0) < 0)
        return -1;
    const char *from = win->base[root] + offset;
    if (in_place) {
        /* segment bounds are whole cache lines from the start of the data:
         * when the data starts on a line in every part (separate parts start
         * on pages), no two ranks write the same line */
        const size_t P = (size_t)comm->size, me = (size_t)comm->rank;
        const size_t lo = n * me / P / SHMTOPO_LINE * SHMTOPO_LINE;
        const size_t hi = me + 1 == P ? n : n * (me + 1) / P / SHMTOPO_LINE * SHMTOPO_LINE;
        for (int i = 1; i < comm->size && hi > lo; i++) {
            const int p = (root + i) % comm->size;
            memcpy(win->base[p] + offset + lo, from + lo, hi - lo);
        }
    } else if (n && (char *)buf != from) {
        memmove(buf, from, n);
    }
    /* the root keeps its data unchanged until every copy is done */
    return shmtopo_coll_step(comm, &sig, NULL, 0);
}

int shmtopo_coll_sc_gather(shmtopo_comm_t *comm, const shmtopo_sig_t *sig, const char *send, char *out, size_t n,
                           int root, const char *what)
{
    const int P = comm->size, me = comm->rank;
    /* the ranks that receive (all, or the root) post their outputs */
    const uint64_t mine = (uint64_t)(uintptr_t)(root < 0 || me == root ? out : NULL);
    if (shmtopo_coll_step(comm, sig, &mine, sizeof(mine)) < 0) /* the agreement, and the addresses */
        return -1;
    /* the outputs, read before later steps replace the posts */
    uint64_t *to = malloc((size_t)P * sizeof(*to));
    int err = to ? 0 : (shmtopo_fail(ENOMEM, -1, "out of memory"), ENOMEM);
    for (int p = 0; to && p < P; p++)
        to[p] = shmtopo_coll_posted_address(comm, p);
    char *own = root < 0 || me == root ? out + (size_t)me * n : NULL;
    for (size_t off = 0; off < n; off += SHMTOPO_SC_ROUND) {
        const size_t m = shmtopo_min_size(SHMTOPO_SC_ROUND, n - off);
        /* this rank's block into every receiver's output, each rank starting
         * at a different one, while its own lands in its own output */
        for (int i = 1; i < P && !err; i++) {
            const int p = (me + i) % P;
            if (root >= 0 && p != root)
                continue;
            if (shmtopo_sc_write(comm, p, to[p] + (uint64_t)me * n + off, send + off, m, what) < 0) {
                if (shmtopo_sc_gone(comm, p))
                    goto out_failed;
                err = errno;
            }
        }
        if (own && !err && own != send)
            memmove(own + off, send + off, m);
        /* the outputs are whole, and every input may change, after the step */
        if (shmtopo_step(comm, sig, err, NULL, 0) < 0)
            goto out_failed;
    }
    free(to);
    return 0;
out_failed:
    free(to);
    return -1;
}

int shmtopo_allgather(shmtopo_comm_t *comm, const void *send, void *recv, size_t count, int dtype)
{
    if (shmtopo_comm_usable(comm, "allgather") < 0)
        return -1;
    shmtopo_sig_t sig = shmtopo_coll_sig(SHMTOPO_KIND_ALLGATHER, count, dtype, -1, -1, -1);
    const size_t n = count * shmtopo_dtype_size(dtype);
    char *out = recv;
    if (comm->single_copy && comm->size > 1 && n >= shmtopo_coll_sc_min(comm, SHMTOPO_KIND_ALLGATHER))
        sig.flags = SHMTOPO_SIG_SINGLE_COPY;
    errno = 0;
    /* send may be this rank's own block of recv (in place) */
    if (shmtopo_coll_check_dtype(dtype) < 0 || shmtopo_coll_check_buffers("allgather", count, send, recv) < 0 ||
        shmtopo_coll_check_overlap("allgather", send, n, recv, n * (size_t)comm->size,
                      out && send == out + (size_t)comm->rank * n) < 0)
        return shmtopo_coll_refuse(comm, &sig);
    if (sig.flags & SHMTOPO_SIG_SINGLE_COPY)
        return shmtopo_coll_sc_gather(comm, &sig, send, out, n, -1, "allgather");
    if (n <= SHMTOPO_INLINE) {
        if (shmtopo_coll_step(comm, &sig, send, n) < 0)
            return -1;
        for (int p = 0; p < comm->size && n; p++)
            memcpy(out + (size_t)p * n, shmtopo_step_data(comm, p), n);
        return 0;
    }
    const size_t B = comm->chan.buffer;
    for (size_t off = 0; off < n; off += B) {
        const size_t m = shmtopo_min_size(B, n - off);
        const int which = shmtopo_chan_next_buffer(comm);
        memcpy(buffer(comm, comm->rank, which), (const char *)send + off, m);
        if (shmtopo_coll_step(comm, &sig, NULL, 0) < 0)
            return -1;
        /* peers first, each rank starting at a different one so no buffer
         * has every reader at once; this rank's own block from its input */
        for (int i = 1; i < comm->size; i++) {
            const int p = (comm->rank + i) % comm->size;
            memcpy(out + (size_t)p * n + off, buffer(comm, p, which), m);
        }
        memmove(out + (size_t)comm->rank * n + off, (const char *)send + off, m);
    }
    return 0;
}

int shmtopo_win_allgather(shmtopo_win_t *win, size_t offset, void *recv, size_t count, int dtype)
{
    if (!win)
        return shmtopo_fail(EBADF, -1, "window is NULL or freed");
    shmtopo_comm_t *comm = win->comm;
    if (shmtopo_comm_usable(comm, "allgather") < 0)
        return -1;
    const size_t n = count * shmtopo_dtype_size(dtype);
    source_t src = {NULL, win, offset};
    shmtopo_sig_t sig = shmtopo_coll_sig(SHMTOPO_KIND_ALLGATHER, count, dtype, -1, -1, -1);
    sig.flags = SHMTOPO_SIG_WINDOW;
    sig.extra = offset;
    errno = 0;
    if (shmtopo_coll_check_dtype(dtype) < 0 || shmtopo_coll_check_buffers("allgather", count, recv, recv) < 0 ||
        check_window(comm, &src, recv, n, n * (size_t)comm->size) < 0)
        return shmtopo_coll_refuse(comm, &sig);
    if (shmtopo_coll_step(comm, &sig, NULL, 0) < 0)
        return -1;
    for (int i = 0; i < comm->size && n; i++) {
        const int p = (comm->rank + i) % comm->size; /* ranks start on different parts */
        memcpy((char *)recv + (size_t)p * n, win->base[p] + offset, n);
    }
    /* the parts stay unchanged until every rank has copied them */
    return shmtopo_coll_step(comm, &sig, NULL, 0);
}

/* reduce_scatter and alltoall: chunk k holds elements [off, off+m) of every
 * block, block b at b*m in the buffer, so every rank has work in every chunk. */
/* Single-copy alltoall: every rank writes its block for each peer straight
 * into that peer's result (peers in a different order on each rank), and
 * its own block into its own result, a round at a time. Writing out of a
 * rank's own cache runs faster than reading the peer's (process_vm_writev
 * against process_vm_readv of 1 MiB, 2 ranks, both ways at once: 76 against
 * 105 us; one way 49 against 86). A rank in place copies its input first:
 * its result is overwritten by its peers while it still sends from it. */
static int sc_alltoall(shmtopo_comm_t *comm, const shmtopo_sig_t *sig, const char *send, char *out, size_t n)
{
    const int P = comm->size, me = comm->rank;
    char *copy = send == out ? malloc((size_t)P * n) : NULL;
    uint64_t *to = malloc((size_t)P * sizeof(*to));
    int err = 0;
    if (!to || (send == out && !copy))
        err = (shmtopo_fail(ENOMEM, -1, "out of memory"), ENOMEM);
    else if (copy)
        send = memcpy(copy, send, (size_t)P * n);
    const uint64_t mine = (uint64_t)(uintptr_t)out;
    if (shmtopo_step(comm, sig, err, &mine, sizeof(mine)) < 0) /* the agreement, and every rank's result */
        goto out_failed;
    for (int p = 0; p < P; p++) /* read before later steps replace the posts */
        to[p] = shmtopo_coll_posted_address(comm, p);
    for (size_t off = 0; off < n; off += SHMTOPO_SC_ROUND) {
        const size_t m = shmtopo_min_size(SHMTOPO_SC_ROUND, n - off);
        for (int i = 1; i < P && !err; i++) {
            const int p = (me + i) % P;
            if (shmtopo_sc_write(comm, p, to[p] + (uint64_t)me * n + off, send + (size_t)p * n + off, m,
                                 "alltoall") < 0) {
                if (shmtopo_sc_gone(comm, p))
                    goto out_failed;
                err = errno;
            }
        }
        if (!err)
            memmove(out + (size_t)me * n + off, send + (size_t)me * n + off, m);
        /* every result is whole, and every input may change, after the step */
        if (shmtopo_step(comm, sig, err, NULL, 0) < 0)
            goto out_failed;
    }
    free(to);
    free(copy);
    return 0;
out_failed:
    free(to);
    free(copy);
    return -1;
}

static int blocks_common(shmtopo_comm_t *comm, int kind, const void *send, void *recv, size_t count,
                         int dtype, int op)
{
    if (shmtopo_comm_usable(comm, shmtopo_kind_name(kind)) < 0)
        return -1;
    shmtopo_sig_t sig = shmtopo_coll_sig(kind, count, dtype, kind == SHMTOPO_KIND_REDUCE_SCATTER ? op : -1, -1, -1);
    const size_t esz = shmtopo_dtype_size(dtype), P = (size_t)comm->size;
    const size_t out_n = kind == SHMTOPO_KIND_ALLTOALL ? P * count * esz : count * esz;
    if (kind == SHMTOPO_KIND_ALLTOALL && comm->single_copy && P > 1 && count * esz >= shmtopo_coll_sc_min(comm, kind))
        sig.flags = SHMTOPO_SIG_SINGLE_COPY;
    errno = 0;
    if (shmtopo_coll_check_dtype(dtype) < 0 || (kind == SHMTOPO_KIND_REDUCE_SCATTER && shmtopo_reduce_check(dtype, op) < 0) ||
        shmtopo_coll_check_buffers(shmtopo_kind_name(kind), count, send, recv) < 0 ||
        shmtopo_coll_check_overlap(shmtopo_kind_name(kind), send, P * count * esz, recv, out_n, recv == send) < 0)
        return shmtopo_coll_refuse(comm, &sig);
    if (comm->chan.buffer < P * esz) {
        shmtopo_fail(EINVAL, -1, "%s: SHMTOPO_COLL_BUFFER too small for %d ranks", shmtopo_kind_name(kind), comm->size);
        return shmtopo_coll_refuse(comm, &sig);
    }
    if (sig.flags & SHMTOPO_SIG_SINGLE_COPY)
        return sc_alltoall(comm, &sig, send, recv, count * esz);
    if (count == 0)
        return shmtopo_coll_step(comm, &sig, NULL, 0);
    const char *in = send;
    char *out = recv;
    const size_t per = comm->chan.buffer / (esz * P);
    for (size_t off = 0; off < count; off += per) {
        const size_t m = shmtopo_min_size(per, count - off);
        shmtopo_chunk_at_t at = {shmtopo_chan_next_buffer(comm), (size_t)comm->rank * m * esz, NULL};
        char *mine = buffer(comm, comm->rank, at.which);
        for (size_t b = 0; b < P; b++)
            memcpy(mine + b * m * esz, in + (b * count + off) * esz, m * esz);
        if (shmtopo_coll_step(comm, &sig, NULL, 0) < 0)
            return -1;
        if (kind == SHMTOPO_KIND_REDUCE_SCATTER) {
            reduce_ranks(comm, out + off * esz, shmtopo_coll_from_buffer, &at, m, dtype, op);
            continue;
        }
        for (size_t p = 0; p < P; p++)
            memcpy(out + (p * count + off) * esz, shmtopo_coll_from_buffer(comm, (int)p, &at), m * esz);
    }
    return 0;
}

int shmtopo_reduce_scatter(shmtopo_comm_t *comm, const void *send, void *recv, size_t count,
                           int dtype, int op)
{
    return blocks_common(comm, SHMTOPO_KIND_REDUCE_SCATTER, send, recv, count, dtype, op);
}

int shmtopo_alltoall(shmtopo_comm_t *comm, const void *send, void *recv, size_t count, int dtype)
{
    return blocks_common(comm, SHMTOPO_KIND_ALLTOALL, send, recv, count, dtype, 0);
}
