/* Rooted and varying-count collectives: gather, scatter, gatherv, scatterv,
 * allgatherv, alltoallv, reduce_scatter with counts, scan and exscan.
 *
 * Data goes through the comm's scratch buffers as in coll.c (the same
 * rotation of three buffers, so any size works), and every call's first
 * step is its agreement. In a v-variant each rank passes a count of its own
 * (SHMTOPO_SIG_OWN_COUNT: left out of the signature's comparison), and the
 * first step also carries what checks it: every rank's own count in its
 * step line, and the counts the call holds (the root's; each rank's send and
 * receive counts for alltoallv) at the start of the holder's scratch buffer.
 * After the step every rank reads the same posts and reaches the same
 * verdict (shmtopo_counts_verdict / shmtopo_pairs_verdict, agree.c) before
 * any data is used. Counts that every rank passes (allgatherv,
 * reduce_scatter) are compared through their digest in the signature.
 *
 * Two layouts of the data in a chunk:
 * - per sender (gather, allgatherv): step k carries bytes [kB, (k+1)B) of
 *   every sender's block, each in its own buffer;
 * - a stream (scatter, alltoallv): a sender's blocks for every receiver back
 *   to back, cut into buffer-sized chunks, so uneven counts fill the chunks.
 * Where the first step's buffer is free, it carries the first chunk. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "internal.h"
#include "state.h"

#define TABLE_ALIGN 64 /* the stream after a table starts on a cache line */

static char *buffer(const shmtopo_comm_t *comm, int rank, int which)
{
    return shmtopo_chan_buffer(comm, rank, which);
}

/* memcpy that takes a NULL buffer of 0 bytes (an empty array) */
static void copy(void *dst, const void *src, size_t n)
{
    if (n)
        memcpy(dst, src, n);
}

static size_t max_size(size_t a, size_t b)
{
    return a > b ? a : b;
}

/* Stream bytes [lo, hi) lie in a chunk; a block covers stream bytes
 * [at, at + n). Copy the part of the block the chunk holds, either way. */
static void put_piece(char *chunk, size_t lo, size_t hi, const char *block, size_t at, size_t n)
{
    const size_t a = max_size(lo, at), b = shmtopo_min_size(hi, at + n);
    if (a < b)
        memcpy(chunk + (a - lo), block + (a - at), b - a);
}

static void get_piece(char *block, size_t at, size_t n, const char *chunk, size_t lo, size_t hi)
{
    const size_t a = max_size(lo, at), b = shmtopo_min_size(hi, at + n);
    if (a < b)
        memcpy(block + (a - at), chunk + (a - lo), b - a);
}

/* One past the last element a layout of counts and displacements reaches. */
static size_t extent(const size_t *counts, const size_t *displs, int n)
{
    size_t end = 0;
    for (int r = 0; r < n; r++)
        if (counts[r])
            end = max_size(end, displs[r] + counts[r]);
    return end;
}

/* The root's (or a rank's own) layout: present, and the one block `own`
 * that may coincide with `mine` exactly (in place); any other overlap of
 * `mine` and the layout's array is refused. */
static int check_layout(const char *what, const shmtopo_comm_t *comm, const size_t *counts,
                        const size_t *displs, const void *array, size_t esz, const void *mine, size_t mine_n,
                        int own)
{
    if (!counts || !displs)
        return shmtopo_fail(EINVAL, -1, "%s: NULL counts or displacements", what);
    const size_t end = extent(counts, displs, comm->size);
    if (shmtopo_coll_check_buffers(what, end, array, array) < 0)
        return -1;
    const char *at = end ? (const char *)array + displs[own] * esz : NULL;
    return shmtopo_coll_check_overlap(what, mine, mine_n, array, end * esz,
                                      mine == at && mine_n == counts[own] * esz);
}

/* The step's table must fit a scratch buffer; the same on every rank. */
static int check_table(const char *what, const shmtopo_comm_t *comm, size_t bytes)
{
    if (bytes > comm->chan.buffer)
        return shmtopo_fail(EINVAL, -1, "%s: SHMTOPO_COLL_BUFFER too small for %d ranks", what, comm->size);
    return 0;
}

/* After the first step of a gatherv or scatterv: every rank's own count
 * (its step line) against the root's counts (its buffer `which`). */
static int counts_check(shmtopo_comm_t *comm, const shmtopo_sig_t *sig, int root, int which)
{
    size_t *posted = (size_t *)comm->chan.tmp; /* the table fits a buffer, so this too */
    for (int r = 0; r < comm->size; r++) {
        uint64_t c;
        memcpy(&c, shmtopo_step_data(comm, r), sizeof(c));
        posted[r] = (size_t)c;
    }
    return shmtopo_counts_verdict(sig, posted, (const size_t *)buffer(comm, root, which), (size_t)comm->size);
}

/* ---- single copy: gather and scatter ------------------------------------------ */

/* Single-copy scatter: each peer reads its block straight from the root's
 * input, a round at a time; the root keeps its input until the step that
 * ends the round. The first step is the agreement, carrying the root's
 * input address. */
static int sc_scatter(shmtopo_comm_t *comm, const shmtopo_sig_t *sig, const char *send, char *recv, size_t n, int root)
{
    const uint64_t mine = (uint64_t)(uintptr_t)send;
    if (shmtopo_coll_step(comm, sig, &mine, sizeof(mine)) < 0)
        return -1;
    const int me = comm->rank;
    const uint64_t from = shmtopo_coll_posted_address(comm, root) + (uint64_t)me * n;
    int err = 0;
    for (size_t off = 0; off < n; off += SHMTOPO_SC_ROUND) {
        const size_t m = shmtopo_min_size(SHMTOPO_SC_ROUND, n - off);
        if (me != root && !err && shmtopo_sc_read(comm, root, recv + off, from + off, m, "scatter") < 0) {
            if (shmtopo_sc_gone(comm, root))
                return -1;
            err = errno;
        }
        if (me == root && recv != send + (size_t)me * n)
            memmove(recv + off, send + (size_t)me * n + off, m);
        if (shmtopo_step(comm, sig, err, NULL, 0) < 0)
            return -1;
    }
    return 0;
}

/* Single-copy alltoallv, after its first step: this rank writes its block
 * for each peer (sendcounts[r] elements from sdispls[r]) straight into that
 * peer's result, at the address the peer posted for it (to[r]), as the
 * other single-copy gathers do, a round at a time. Every rank takes the
 * same rounds, as many as the longest block of all (`longest`, bytes): each
 * ends in a step, and the results are whole after the last. */
static int sc_alltoallv(shmtopo_comm_t *comm, const shmtopo_sig_t *sig, const char *send, const size_t *sendcounts,
                        const size_t *sdispls, size_t esz, const size_t *to, size_t longest)
{
    const int P = comm->size, me = comm->rank;
    int err = 0;
    for (size_t off = 0; off < longest; off += SHMTOPO_SC_ROUND) {
        for (int i = 1; i < P && !err; i++) {
            const int r = (me + i) % P;
            const size_t len = sendcounts[r] * esz;
            if (len <= off)
                continue;
            const size_t m = shmtopo_min_size(SHMTOPO_SC_ROUND, len - off);
            if (shmtopo_sc_write(comm, r, (uint64_t)to[r] + off, send + sdispls[r] * esz + off, m, "alltoallv") < 0) {
                if (shmtopo_sc_gone(comm, r))
                    return -1;
                err = errno;
            }
        }
        if (shmtopo_step(comm, sig, err, NULL, 0) < 0)
            return -1;
    }
    return 0;
}

/* ---- gather, gatherv ---------------------------------------------------------- */

static int gather_common(shmtopo_comm_t *comm, int kind, const void *send, size_t count, void *recv,
                         const size_t *counts, const size_t *displs, int dtype, int root)
{
    const char *what = shmtopo_kind_name(kind);
    if (shmtopo_comm_usable(comm, what) < 0)
        return -1;
    const int v = kind == SHMTOPO_KIND_GATHERV, P = comm->size, me = comm->rank;
    shmtopo_sig_t sig = shmtopo_coll_sig(kind, count, dtype, -1, root, -1);
    const size_t esz = shmtopo_dtype_size(dtype), n = count * esz, B = comm->chan.buffer;
    if (v)
        sig.flags = SHMTOPO_SIG_OWN_COUNT;
    else if (comm->single_copy && P > 1 && n >= shmtopo_coll_sc_min(comm, kind))
        sig.flags = SHMTOPO_SIG_SINGLE_COPY;
    const int is_root = me == root;
    errno = 0;
    if (shmtopo_coll_check_root(comm, root) < 0 || shmtopo_coll_check_dtype(dtype) < 0 ||
        shmtopo_coll_check_buffers(what, count, send, send) < 0 ||
        (v && check_table(what, comm, (size_t)P * sizeof(size_t)) < 0))
        return shmtopo_coll_refuse(comm, &sig);
    if (is_root && v && check_layout(what, comm, counts, displs, recv, esz, send, n, me) < 0)
        return shmtopo_coll_refuse(comm, &sig);
    if (is_root && !v) {
        const size_t total = (size_t)P * n;
        if (shmtopo_coll_check_buffers(what, total, recv, recv) < 0 ||
            shmtopo_coll_check_overlap(what, send, n, recv, total, (const char *)send == (char *)recv + (size_t)me * n) < 0)
            return shmtopo_coll_refuse(comm, &sig);
    }
    if (sig.flags & SHMTOPO_SIG_SINGLE_COPY)
        return shmtopo_coll_sc_gather(comm, &sig, send, recv, n, root, "gather");
    /* the root posts its counts, the others the first chunk of their block */
    int which = shmtopo_chan_next_buffer(comm);
    if (is_root && v)
        memcpy(buffer(comm, me, which), counts, (size_t)P * sizeof(size_t));
    else if (!is_root)
        copy(buffer(comm, me, which), send, shmtopo_min_size(B, n));
    const uint64_t mine = count;
    if (shmtopo_coll_step(comm, &sig, &mine, sizeof(mine)) < 0)
        return -1;
    if (v && counts_check(comm, &sig, root, which) < 0)
        return -1;
    /* every rank's block is checked now: the posted counts are the root's */
    size_t longest = 0;
    for (int r = 0; r < P; r++) {
        uint64_t c;
        memcpy(&c, shmtopo_step_data(comm, r), sizeof(c));
        if (r != root)
            longest = max_size(longest, (size_t)c * esz);
    }
    char *out = recv;
    if (is_root && n) {
        char *own = out + (v ? displs[me] : (size_t)me * count) * esz;
        if (own != (const char *)send)
            memmove(own, send, n);
    }
    for (size_t off = 0;;) {
        if (is_root)
            for (int r = 0; r < P; r++) {
                const size_t nr = (v ? counts[r] : count) * esz;
                if (r != root && nr > off)
                    memcpy(out + (v ? displs[r] : (size_t)r * count) * esz + off, buffer(comm, r, which),
                           shmtopo_min_size(B, nr - off));
            }
        off += B;
        if (off >= longest)
            return 0;
        which = shmtopo_chan_next_buffer(comm);
        if (!is_root && n > off)
            memcpy(buffer(comm, me, which), (const char *)send + off, shmtopo_min_size(B, n - off));
        if (shmtopo_coll_step(comm, &sig, NULL, 0) < 0)
            return -1;
    }
}

int shmtopo_gather(shmtopo_comm_t *comm, const void *send, void *recv, size_t count, int dtype, int root)
{
    return gather_common(comm, SHMTOPO_KIND_GATHER, send, count, recv, NULL, NULL, dtype, root);
}

int shmtopo_gatherv(shmtopo_comm_t *comm, const void *send, size_t count, void *recv, const size_t *counts,
                    const size_t *displs, int dtype, int root)
{
    return gather_common(comm, SHMTOPO_KIND_GATHERV, send, count, recv, counts, displs, dtype, root);
}

/* ---- scatter, scatterv ---------------------------------------------------------- */

static int scatter_common(shmtopo_comm_t *comm, int kind, const void *send, const size_t *counts,
                          const size_t *displs, void *recv, size_t count, int dtype, int root)
{
    const char *what = shmtopo_kind_name(kind);
    if (shmtopo_comm_usable(comm, what) < 0)
        return -1;
    const int v = kind == SHMTOPO_KIND_SCATTERV, P = comm->size, me = comm->rank;
    shmtopo_sig_t sig = shmtopo_coll_sig(kind, count, dtype, -1, root, -1);
    const size_t esz = shmtopo_dtype_size(dtype), n = count * esz, B = comm->chan.buffer;
    if (v)
        sig.flags = SHMTOPO_SIG_OWN_COUNT;
    else if (comm->single_copy && P > 1 && n >= shmtopo_coll_sc_min(comm, kind))
        sig.flags = SHMTOPO_SIG_SINGLE_COPY;
    /* the first chunk follows the root's counts in its buffer */
    const size_t head = v ? shmtopo_round_up((size_t)P * sizeof(size_t), TABLE_ALIGN) : 0;
    const int is_root = me == root;
    errno = 0;
    if (shmtopo_coll_check_root(comm, root) < 0 || shmtopo_coll_check_dtype(dtype) < 0 ||
        shmtopo_coll_check_buffers(what, count, recv, recv) < 0 || check_table(what, comm, head) < 0)
        return shmtopo_coll_refuse(comm, &sig);
    if (is_root && v && check_layout(what, comm, counts, displs, send, esz, recv, n, me) < 0)
        return shmtopo_coll_refuse(comm, &sig);
    if (is_root && !v) {
        const size_t total = (size_t)P * n;
        if (shmtopo_coll_check_buffers(what, total, send, send) < 0 ||
            shmtopo_coll_check_overlap(what, recv, n, send, total, (char *)recv == (const char *)send + (size_t)me * n) < 0)
            return shmtopo_coll_refuse(comm, &sig);
    }
    if (sig.flags & SHMTOPO_SIG_SINGLE_COPY)
        return sc_scatter(comm, &sig, send, recv, n, root);
    const char *in = send;
    int which = shmtopo_chan_next_buffer(comm);
    /* stream bytes [lo, hi) in this step's chunk */
    size_t lo = 0, hi = B - head;
    if (is_root) {
        char *mine = buffer(comm, me, which);
        if (v)
            memcpy(mine, counts, (size_t)P * sizeof(size_t));
        size_t at = 0;
        for (int r = 0; r < P; r++) {
            const size_t nr = (v ? counts[r] : count) * esz;
            if (r != root)
                put_piece(mine + head, lo, hi, in + (v ? displs[r] : (size_t)r * count) * esz, at, nr);
            at += r != root ? nr : 0;
        }
    }
    const uint64_t own_count = count;
    if (shmtopo_coll_step(comm, &sig, &own_count, sizeof(own_count)) < 0)
        return -1;
    if (v && counts_check(comm, &sig, root, which) < 0)
        return -1;
    /* where this rank's block lies in the stream, and where the stream ends */
    size_t start = 0, total = 0;
    for (int r = 0; r < P; r++) {
        uint64_t c;
        memcpy(&c, shmtopo_step_data(comm, r), sizeof(c));
        if (r == me)
            start = total;
        total += r != root ? (size_t)c * esz : 0;
    }
    if (is_root) {
        const char *own = in + (v ? displs[me] : (size_t)me * count) * esz;
        if (n && own != (char *)recv)
            memmove(recv, own, n);
    }
    for (const char *chunk = buffer(comm, root, which) + head;;) {
        if (!is_root)
            get_piece(recv, start, n, chunk, lo, hi);
        if (hi >= total)
            return 0;
        lo = hi;
        hi = lo + B;
        which = shmtopo_chan_next_buffer(comm);
        if (is_root) {
            size_t at = 0;
            for (int r = 0; r < P; r++) {
                const size_t nr = (v ? counts[r] : count) * esz;
                if (r != root)
                    put_piece(buffer(comm, me, which), lo, hi, in + (v ? displs[r] : (size_t)r * count) * esz, at, nr);
                at += r != root ? nr : 0;
            }
        }
        if (shmtopo_coll_step(comm, &sig, NULL, 0) < 0)
            return -1;
        chunk = buffer(comm, root, which);
    }
}

int shmtopo_scatter(shmtopo_comm_t *comm, const void *send, void *recv, size_t count, int dtype, int root)
{
    return scatter_common(comm, SHMTOPO_KIND_SCATTER, send, NULL, NULL, recv, count, dtype, root);
}

int shmtopo_scatterv(shmtopo_comm_t *comm, const void *send, const size_t *counts, const size_t *displs,
                     void *recv, size_t count, int dtype, int root)
{
    return scatter_common(comm, SHMTOPO_KIND_SCATTERV, send, counts, displs, recv, count, dtype, root);
}

/* ---- allgatherv ------------------------------------------------------------------ */

int shmtopo_allgatherv(shmtopo_comm_t *comm, const void *send, size_t count, void *recv, const size_t *counts,
                       const size_t *displs, int dtype)
{
    const char *what = "allgatherv";
    if (shmtopo_comm_usable(comm, what) < 0)
        return -1;
    const int P = comm->size, me = comm->rank;
    shmtopo_sig_t sig = shmtopo_coll_sig(SHMTOPO_KIND_ALLGATHERV, count, dtype, -1, -1, -1);
    sig.flags = SHMTOPO_SIG_OWN_COUNT | SHMTOPO_SIG_COUNTS;
    sig.extra = counts ? shmtopo_counts_digest(counts, (size_t)P) : 0;
    const size_t esz = shmtopo_dtype_size(dtype), n = count * esz, B = comm->chan.buffer;
    errno = 0;
    if (shmtopo_coll_check_dtype(dtype) < 0 || shmtopo_coll_check_buffers(what, count, send, send) < 0 ||
        check_layout(what, comm, counts, displs, recv, esz, send, n, me) < 0)
        return shmtopo_coll_refuse(comm, &sig);
    /* the counts are every rank's, compared by digest: only this rank's own
     * count against them is left to check, here */
    if (counts[me] != count) {
        shmtopo_fail(EINVAL, -1, "allgatherv: this rank passes %zu elements, but counts[%d] is %zu", count,
                     shmtopo_world(comm, me), counts[me]);
        return shmtopo_coll_refuse(comm, &sig);
    }
    size_t longest = 0;
    for (int r = 0; r < P; r++)
        longest = max_size(longest, counts[r] * esz);
    char *out = recv;
    for (size_t off = 0;; off += B) {
        const int which = shmtopo_chan_next_buffer(comm);
        if (n > off)
            memcpy(buffer(comm, me, which), (const char *)send + off, shmtopo_min_size(B, n - off));
        if (shmtopo_coll_step(comm, &sig, NULL, 0) < 0)
            return -1;
        for (int i = 1; i < P; i++) { /* ranks start on different peers */
            const int r = (me + i) % P;
            const size_t nr = counts[r] * esz;
            if (nr > off)
                memcpy(out + displs[r] * esz + off, buffer(comm, r, which), shmtopo_min_size(B, nr - off));
        }
        if (off + B >= longest)
            break;
    }
    char *own = out + displs[me] * esz;
    if (n && own != (const char *)send) /* last: send may be read by the copies above until now */
        memmove(own, send, n);
    return 0;
}

/* ---- alltoallv --------------------------------------------------------------------- */

int shmtopo_alltoallv(shmtopo_comm_t *comm, const void *send, const size_t *sendcounts, const size_t *sdispls,
                      void *recv, const size_t *recvcounts, const size_t *rdispls, int dtype)
{
    const char *what = "alltoallv";
    if (shmtopo_comm_usable(comm, what) < 0)
        return -1;
    const int P = comm->size, me = comm->rank;
    const size_t esz = shmtopo_dtype_size(dtype), row = (size_t)P * sizeof(size_t);
    size_t sent = 0;
    for (int p = 0; sendcounts && p < P; p++)
        sent += sendcounts[p];
    shmtopo_sig_t sig = shmtopo_coll_sig(SHMTOPO_KIND_ALLTOALLV, sent, dtype, -1, -1, -1);
    sig.flags = SHMTOPO_SIG_OWN_COUNT;
    /* the counts matrices, per peer where its block for me lies in its stream
     * and how long it is, and per peer the address of its block for me; for
     * the stream, each block as a typed one of one run (its bytes, its
     * length as a run), and the stream's cursors */
    size_t *S = malloc(((size_t)P * P * 2 + 6 * (size_t)P) * sizeof(size_t) +
                       2 * (size_t)P * (sizeof(shmtopo_typed_block_t) + SHMTOPO_COLL_CURSOR));
    errno = 0;
    if (!S)
        shmtopo_fail(ENOMEM, -1, "alltoallv: out of memory for the counts of %d ranks", P);
    if (!S || shmtopo_coll_check_dtype(dtype) < 0 || check_table(what, comm, 3 * row) < 0 ||
        check_layout(what, comm, sendcounts, sdispls, send, esz, NULL, 0, me) < 0 ||
        check_layout(what, comm, recvcounts, rdispls, recv, esz, NULL, 0, me) < 0)
        goto out_refused;
    const size_t send_end = extent(sendcounts, sdispls, P) * esz, recv_end = extent(recvcounts, rdispls, P) * esz;
    if (send_end && recv_end && (const char *)send < (char *)recv + recv_end &&
        (char *)recv < (const char *)send + send_end) {
        shmtopo_fail(EINVAL, -1, "alltoallv: the result overlaps the input");
        goto out_refused;
    }
    size_t *R = S + (size_t)P * P, *from = R + (size_t)P * P, *len = from + P, *at_peer = len + P;
    int which = shmtopo_chan_next_buffer(comm);
    memcpy(buffer(comm, me, which), sendcounts, row);
    memcpy(buffer(comm, me, which) + row, recvcounts, row);
    for (int p = 0; p < P; p++) /* for single copy: where p's block for me goes */
        ((size_t *)(buffer(comm, me, which) + 2 * row))[p] = (size_t)(uintptr_t)recv + rdispls[p] * esz;
    if (shmtopo_coll_step(comm, &sig, NULL, 0) < 0)
        goto out_failed;
    for (int r = 0; r < P; r++)
        at_peer[r] = ((const size_t *)(buffer(comm, r, which) + 2 * row))[me];
    size_t longest, mine;
    if (shmtopo_coll_streams(comm, &sig, which, esz, S, R, from, len, &longest, &mine) < 0)
        goto out_failed;
    const char *in = send;
    char *out = recv;
    if (recvcounts[me])
        memcpy(out + rdispls[me] * esz, in + sdispls[me] * esz, recvcounts[me] * esz);
    /* every rank knows every stream now, so all take the same path */
    if (comm->single_copy && P > 1 && longest >= shmtopo_coll_sc_min(comm, SHMTOPO_KIND_ALLTOALLV)) {
        size_t block = 0; /* the longest block between two ranks: the rounds every rank takes */
        for (int r = 0; r < P; r++)
            for (int p = 0; p < P; p++)
                block = p != r ? max_size(block, S[(size_t)r * P + p] * esz) : block;
        const int rc = sc_alltoallv(comm, &sig, send, sendcounts, sdispls, esz, at_peer, block);
        free(S);
        return rc;
    }
    static const int64_t at_start = 0; /* a block's one run starts with it */
    size_t *sbytes = at_peer + P;
    uint64_t *runs = (uint64_t *)(sbytes + P);
    shmtopo_typed_block_t *blocks = (shmtopo_typed_block_t *)(runs + 2 * (size_t)P);
    for (int p = 0; p < P; p++) {
        sbytes[p] = sendcounts[p] * esz;
        runs[p] = sbytes[p], runs[P + p] = recvcounts[p] * esz;
        blocks[p] = (shmtopo_typed_block_t){(int64_t)(sdispls[p] * esz), 1, 0, 1, &at_start, &runs[p]};
        blocks[P + p] = (shmtopo_typed_block_t){(int64_t)(rdispls[p] * esz), 1, 0, 1, &at_start, &runs[P + p]};
    }
    const int rc = shmtopo_coll_stream(comm, &sig, send, blocks, sbytes, recv, blocks + P, from, len, longest, mine,
                                       blocks + 2 * P);
    free(S);
    return rc;
out_refused:
    free(S);
    return shmtopo_coll_refuse(comm, &sig);
out_failed:
    free(S);
    return -1;
}

/* ---- reduce_scatter with counts ------------------------------------------------------ */

int shmtopo_reduce_scatterv(shmtopo_comm_t *comm, const void *send, void *recv, const size_t *counts,
                            int dtype, int op)
{
    const char *what = "reduce_scatter";
    if (shmtopo_comm_usable(comm, what) < 0)
        return -1;
    const int P = comm->size, me = comm->rank;
    size_t total = 0, start = 0;
    for (int r = 0; counts && r < P; r++) {
        if (r == me)
            start = total;
        total += counts[r];
    }
    shmtopo_sig_t sig = shmtopo_coll_sig(SHMTOPO_KIND_REDUCE_SCATTER, total, dtype, op, -1, -1);
    sig.flags = SHMTOPO_SIG_COUNTS;
    sig.extra = counts ? shmtopo_counts_digest(counts, (size_t)P) : 0;
    const size_t esz = shmtopo_dtype_size(dtype);
    errno = 0;
    if (!counts)
        shmtopo_fail(EINVAL, -1, "reduce_scatter: NULL counts");
    if (!counts || shmtopo_coll_check_dtype(dtype) < 0 || shmtopo_reduce_check(dtype, op) < 0 ||
        shmtopo_coll_check_buffers(what, total, send, send) < 0 ||
        shmtopo_coll_check_buffers(what, counts[me], recv, recv) < 0 ||
        shmtopo_coll_check_overlap(what, send, total * esz, recv, counts[me] * esz, recv == send) < 0)
        return shmtopo_coll_refuse(comm, &sig);
    const size_t per = comm->chan.buffer / esz, end = start + counts[me];
    char *out = recv;
    for (size_t off = 0;; off += per) {
        const size_t m = shmtopo_min_size(per, total - off);
        shmtopo_chunk_at_t at = {shmtopo_chan_next_buffer(comm), 0, NULL};
        if (m)
            memcpy(buffer(comm, me, at.which), (const char *)send + off * esz, m * esz);
        if (shmtopo_coll_step(comm, &sig, NULL, 0) < 0)
            return -1;
        /* my elements in this chunk: their inputs were copied in by now, so
         * a result written over the input (in place) lands where no later
         * chunk reads */
        const size_t a = max_size(off, start), b = shmtopo_min_size(off + m, end);
        if (a < b) {
            at.offset = (a - off) * esz;
            shmtopo_coll_fold(comm, out + (a - start) * esz, shmtopo_coll_from_buffer, &at, P, b - a, dtype, op);
        }
        if (off + per >= total)
            return 0;
    }
}

/* ---- scan, exscan ------------------------------------------------------------------ */

static const char *from_line(const shmtopo_comm_t *comm, int rank, const void *arg)
{
    (void)arg;
    return shmtopo_step_data(comm, rank);
}

int shmtopo_scan(shmtopo_comm_t *comm, const void *send, void *recv, size_t count, int dtype, int op,
                 int exclusive)
{
    const int kind = exclusive ? SHMTOPO_KIND_EXSCAN : SHMTOPO_KIND_SCAN;
    const char *what = shmtopo_kind_name(kind);
    if (shmtopo_comm_usable(comm, what) < 0)
        return -1;
    shmtopo_sig_t sig = shmtopo_coll_sig(kind, count, dtype, op, -1, -1);
    const size_t esz = shmtopo_dtype_size(dtype), n = count * esz;
    /* ranks 0..me reduced, or 0..me-1 (rank 0 of an exscan keeps its recv) */
    const int nranks = comm->rank + (exclusive ? 0 : 1);
    errno = 0;
    if (shmtopo_coll_check_dtype(dtype) < 0 || shmtopo_reduce_check(dtype, op) < 0 ||
        shmtopo_coll_check_buffers(what, count, send, recv) < 0 ||
        shmtopo_coll_check_overlap(what, send, n, recv, n, recv == send) < 0)
        return shmtopo_coll_refuse(comm, &sig);
    if (n <= SHMTOPO_INLINE) {
        if (shmtopo_coll_step(comm, &sig, send, n) < 0)
            return -1;
        if (n && nranks)
            shmtopo_coll_fold(comm, recv, from_line, NULL, nranks, count, dtype, op);
        return 0;
    }
    const size_t per = comm->chan.buffer / esz;
    for (size_t off = 0; off < count; off += per) {
        const size_t m = shmtopo_min_size(per, count - off);
        shmtopo_chunk_at_t at = {shmtopo_chan_next_buffer(comm), 0, NULL};
        memcpy(buffer(comm, comm->rank, at.which), (const char *)send + off * esz, m * esz);
        if (shmtopo_coll_step(comm, &sig, NULL, 0) < 0)
            return -1;
        /* inputs are read from the scratch copies, so recv may be send */
        if (nranks)
            shmtopo_coll_fold(comm, (char *)recv + off * esz, shmtopo_coll_from_buffer, &at, nranks, m, dtype, op);
    }
    return 0;
}
