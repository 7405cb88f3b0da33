/* alltoallw: alltoallv whose blocks are typed (shmtopo_typed_block_t), the
 * shape of MPI's derived datatypes once flattened: each block is `count`
 * elements, `extent` bytes apart, whose bytes lie in the same runs.
 *
 * A block's bytes travel in its runs' order, as MPI_Pack lays them out, in
 * the stream of coll_v.c's alltoallv (a sender's blocks for every receiver
 * back to back, cut into scratch-buffer chunks): the sender gathers its runs
 * straight into a chunk and the receiver scatters them straight out of it,
 * so every byte is copied twice, as an MPI shared-memory transport copies a
 * derived datatype's (packed into its fragments, unpacked out of them), and
 * no rank packs a block anywhere else first. Blocks walk with a cursor each:
 * the chunks take a block's bytes in order.
 *
 * Where the comm has single copy and a block between two ranks reaches
 * single copy's threshold, each rank instead reads its blocks straight from
 * the senders' runs into its own (process_vm_readv takes both lists of
 * pieces): every byte copied once. A sender's block for it travels as a
 * description (where its runs lie in the sender's memory) that the receiver
 * reads, with the runs, before it copies.
 *
 * The first step carries every rank's byte counts (its send row, then its
 * receive row) and its blocks' descriptions, and agrees on the call; a pair
 * whose sizes differ fails on every rank before any data moves
 * (shmtopo_pairs_verdict). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "coll.h"
#include "internal.h"
#include "state.h"

/* Where a walk through a block stands: which element, which run of it, and
 * how many bytes of that run are behind. */
typedef struct cursor {
    uint64_t element, run, done;
} cursor_t;

_Static_assert(sizeof(cursor_t) == SHMTOPO_COLL_CURSOR, "coll.h's room for a cursor");

/* The bytes of a block: the sum of an element's runs, `count` times;
 * SIZE_MAX where that overflows. */
size_t shmtopo_typed_size(const shmtopo_typed_block_t *b)
{
    size_t element = 0;
    for (uint64_t i = 0; i < b->runs; i++) {
        if (b->lengths[i] > SIZE_MAX - element)
            return SIZE_MAX;
        element += (size_t)b->lengths[i];
    }
    if (b->count && element > SIZE_MAX / b->count)
        return SIZE_MAX;
    return element * (size_t)b->count;
}

/* The current run's next byte in `base`, and how many of the run are left. */
static char *here(const shmtopo_typed_block_t *b, const char *base, const cursor_t *c, size_t *left)
{
    *left = (size_t)(b->lengths[c->run] - c->done);
    return (char *)base + b->displ + (int64_t)c->element * b->extent + b->offsets[c->run] + (int64_t)c->done;
}

static void advance(const shmtopo_typed_block_t *b, cursor_t *c, size_t n)
{
    c->done += n;
    while (c->element < b->count && c->done == b->lengths[c->run]) { /* runs of 0 bytes are passed too */
        c->done = 0;
        if (++c->run == b->runs) {
            c->run = 0;
            c->element++;
        }
    }
}

/* Past the block's next n bytes, whatever runs they span. */
static void skip(const shmtopo_typed_block_t *b, cursor_t *c, size_t n)
{
    while (n && c->element < b->count) {
        const size_t m = shmtopo_min_size(n, (size_t)(b->lengths[c->run] - c->done));
        advance(b, c, m);
        n -= m;
    }
}

/* Copy the block's next n bytes into flat (gather) or out of it into the block. */
static void walk(const shmtopo_typed_block_t *b, const char *base, cursor_t *c, char *flat, size_t n, int gather)
{
    while (n) {
        size_t left;
        char *p = here(b, base, c, &left);
        const size_t m = shmtopo_min_size(n, left);
        if (gather)
            memcpy(flat, p, m);
        else
            memcpy(p, flat, m);
        flat += m;
        n -= m;
        advance(b, c, m);
    }
}

static cursor_t cursor_at_start(const shmtopo_typed_block_t *b)
{
    cursor_t c = {0, 0, 0};
    advance(b, &c, 0); /* past leading runs of 0 bytes */
    return c;
}

void shmtopo_typed_pack(const void *buf, const shmtopo_typed_block_t *b, void *out)
{
    cursor_t c = cursor_at_start(b);
    walk(b, buf, &c, out, shmtopo_typed_size(b), 1);
}

void shmtopo_typed_unpack(const void *in, const shmtopo_typed_block_t *b, void *buf)
{
    cursor_t c = cursor_at_start(b);
    walk(b, buf, &c, (char *)in, shmtopo_typed_size(b), 0);
}

/* n bytes from one block to another, run against run (a rank's own block). */
static void block_to_block(const shmtopo_typed_block_t *from, const char *send, const shmtopo_typed_block_t *to,
                           char *recv, size_t n)
{
    cursor_t s = cursor_at_start(from), r = cursor_at_start(to);
    while (n) {
        size_t ls, lr;
        const char *ps = here(from, send, &s, &ls);
        char *pr = here(to, recv, &r, &lr);
        const size_t m = shmtopo_min_size(n, shmtopo_min_size(ls, lr));
        memcpy(pr, ps, m);
        n -= m;
        advance(from, &s, m);
        advance(to, &r, m);
    }
}

/* A block the core can walk: its runs present, its size countable. */
static int check_block(const char *what, const shmtopo_typed_block_t *b, const void *buf, int peer, size_t *size)
{
    if (b->runs && (!b->offsets || !b->lengths))
        return shmtopo_fail(EINVAL, -1, "%s: block for rank %d has %llu runs and NULL offsets or lengths", what,
                            peer, (unsigned long long)b->runs);
    *size = b->count ? shmtopo_typed_size(b) : 0;
    if (*size == SIZE_MAX)
        return shmtopo_fail(EOVERFLOW, -1, "%s: block for rank %d holds more bytes than a size_t", what, peer);
    if (*size && !buf)
        return shmtopo_fail(EINVAL, -1, "%s: NULL buffer for a block of %zu bytes for rank %d", what, *size, peer);
    return 0;
}

/* ---- the stream through the scratch buffers ------------------------------------- */

int shmtopo_coll_streams(shmtopo_comm_t *comm, const shmtopo_sig_t *sig, int which, size_t esz, size_t *S,
                         size_t *R, size_t *from, size_t *len, size_t *longest, size_t *mine)
{
    const int P = comm->size, me = comm->rank;
    const size_t row = (size_t)P * sizeof(size_t);
    for (int r = 0; r < P; r++) {
        memcpy(S + (size_t)r * P, shmtopo_chan_buffer(comm, r, which), row);
        memcpy(R + (size_t)r * P, shmtopo_chan_buffer(comm, r, which) + row, row);
    }
    if (shmtopo_pairs_verdict(sig, S, R, (size_t)P) < 0)
        return -1;
    *longest = *mine = 0;
    for (int r = 0; r < P; r++) { /* rank r's stream: its blocks for every other rank, in rank order */
        size_t at = 0;
        for (int p = 0; p < P; p++) {
            if (p == me)
                from[r] = at, len[r] = S[(size_t)r * P + p] * esz;
            at += p != r ? S[(size_t)r * P + p] * esz : 0;
        }
        *longest = (*longest > at ? *longest : at);
        if (r == me)
            *mine = at;
    }
    return 0;
}


int shmtopo_coll_stream(shmtopo_comm_t *comm, const shmtopo_sig_t *sig, const void *send,
                        const shmtopo_typed_block_t *sendblocks, const size_t *sent, void *recv,
                        const shmtopo_typed_block_t *recvblocks, const size_t *from, const size_t *len,
                        size_t longest, size_t mine, void *cursors)
{
    const int P = comm->size, me = comm->rank;
    const size_t B = comm->chan.buffer;
    cursor_t *out_at = cursors, *in_at = out_at + P;
    for (int p = 0; p < P; p++) {
        out_at[p] = cursor_at_start(&sendblocks[p]);
        in_at[p] = cursor_at_start(&recvblocks[p]);
    }
    for (size_t lo = 0; lo < longest; lo += B) {
        const size_t hi = lo + B;
        const int which = shmtopo_chan_next_buffer(comm);
        if (lo < mine) {
            size_t at = 0;
            for (int p = 0; p < P; p++) {
                if (p == me)
                    continue;
                const size_t a = lo > at ? lo : at, b = shmtopo_min_size(hi, at + sent[p]);
                if (a < b)
                    walk(&sendblocks[p], send, &out_at[p], shmtopo_chan_buffer(comm, me, which) + (a - lo), b - a, 1);
                at += sent[p];
            }
        }
        if (shmtopo_coll_step(comm, sig, NULL, 0) < 0)
            return -1;
        for (int i = 1; i < P; i++) {
            const int r = (me + i) % P;
            const size_t a = lo > from[r] ? lo : from[r], b = shmtopo_min_size(hi, from[r] + len[r]);
            if (a < b)
                walk(&recvblocks[r], recv, &in_at[r], shmtopo_chan_buffer(comm, r, which) + (a - lo), b - a, 0);
        }
    }
    return 0;
}

/* ---- single copy ------------------------------------------------------------ */

/* A block as its sender describes it to the receiver: where its first
 * element lies in the sender's memory, and where the runs' arrays lie. */
typedef struct posted_block {
    uint64_t at, count, runs, offsets, lengths;
    int64_t extent;
} posted_block_t;

#define PIECES 256 /* iovecs a side per process_vm_readv (the kernel takes up to 1024) */
/* Single copy where the longest block between two ranks has this many
 * bytes and the senders' pieces (runs) average SC_PIECE: each remote piece
 * costs the kernel a lookup of its pages. 2 ranks on 2 cores, a complex
 * array transposed with subarray types, against the scratch path (2
 * copies): pieces of 8 KiB, 4 MiB a block: 0.73x its time; pieces of 4
 * KiB, 1 MiB: 1.12x; of 2 KiB, 256 KiB: 1.16x; whole blocks of 512 KiB:
 * 0.60x, of 32 KiB: 1.10x. */
#define SC_MIN_TYPED ((size_t)64 << 10)
#define SC_PIECE ((size_t)8 << 10)

/* Pieces of a block from its cursor, up to `most` bytes (bytes in *n),
 * the cursor left after them. `base` is where the block's buffer lies;
 * `remote`: in the peer's memory, so addresses are only computed. */
static size_t pieces(const shmtopo_typed_block_t *b, uintptr_t base, cursor_t *c, size_t most, struct iovec *v,
                     size_t *n)
{
    size_t k = 0, got = 0;
    while (k < PIECES && got < most && c->element < b->count) {
        const size_t left = (size_t)(b->lengths[c->run] - c->done), m = shmtopo_min_size(left, most - got);
        v[k].iov_base = (void *)(base + (uintptr_t)(b->displ + (int64_t)c->element * b->extent +
                                                    b->offsets[c->run] + (int64_t)c->done));
        v[k++].iov_len = m;
        got += m;
        advance(b, c, m);
    }
    *n = got;
    return k;
}

/* Read n bytes of the peer's block (`from`, its runs here, its addresses
 * there) into this rank's block `to`, from both cursors on. */
static int read_pieces(shmtopo_comm_t *comm, int peer, const shmtopo_typed_block_t *from, cursor_t *fc,
                       const shmtopo_typed_block_t *to, char *recv, cursor_t *tc, size_t n)
{
    struct iovec theirs[PIECES], mine[PIECES];
    while (n) {
        cursor_t f = *fc, t = *tc;
        size_t nf, nt;
        size_t kf = pieces(from, 0, &f, n, theirs, &nf);
        const size_t kt = pieces(to, (uintptr_t)recv, &t, nf, mine, &nt);
        if (nt < nf) { /* this side ran out of pieces first: as many bytes of theirs */
            size_t sum = 0;
            for (kf = 0; sum < nt; kf++) {
                theirs[kf].iov_len = shmtopo_min_size(theirs[kf].iov_len, nt - sum);
                sum += theirs[kf].iov_len;
            }
        }
        const ssize_t k = shmtopo_sc_readv(comm, peer, mine, kt, theirs, kf, nt, "alltoallw");
        if (k < 0)
            return -1;
        skip(from, fc, (size_t)k);
        skip(to, tc, (size_t)k);
        n -= (size_t)k;
    }
    return 0;
}

/* After the first step: every peer's block for this rank read straight from
 * its memory, a round of up to SHMTOPO_SC_ROUND bytes of each at a time,
 * each round ended by a step (senders keep their buffers until the last). */
static int sc_alltoallw(shmtopo_comm_t *comm, const shmtopo_sig_t *sig, int which, size_t table, char *recv,
                        const shmtopo_typed_block_t *recvblocks, const size_t *got, size_t block)
{
    const int P = comm->size, me = comm->rank;
    shmtopo_typed_block_t *from = calloc((size_t)P, sizeof(*from));
    cursor_t *fc = calloc((size_t)P, sizeof(*fc)), *tc = calloc((size_t)P, sizeof(*tc));
    int err = from && fc && tc ? 0 : ENOMEM;
    if (err)
        shmtopo_fail(ENOMEM, -1, "alltoallw: out of memory for %d ranks' blocks", P);
    for (int i = 1; i < P && !err; i++) { /* every description and its runs, before any later step */
        const int s = (me + i) % P;
        if (!got[s])
            continue;
        posted_block_t d;
        memcpy(&d, shmtopo_chan_buffer(comm, s, which) + table + (size_t)me * sizeof(d), sizeof(d));
        int64_t *offsets = malloc(d.runs * sizeof(int64_t) + d.runs * sizeof(uint64_t));
        if (!offsets) {
            shmtopo_fail(ENOMEM, -1, "alltoallw: out of memory for %llu runs", (unsigned long long)d.runs);
            err = ENOMEM;
            break;
        }
        uint64_t *lengths = (uint64_t *)(offsets + d.runs);
        from[s] = (shmtopo_typed_block_t){(int64_t)d.at, d.count, d.extent, d.runs, offsets, lengths};
        if (shmtopo_sc_read(comm, s, offsets, d.offsets, d.runs * sizeof(int64_t), "alltoallw") < 0 ||
            shmtopo_sc_read(comm, s, lengths, d.lengths, d.runs * sizeof(uint64_t), "alltoallw") < 0) {
            if (shmtopo_sc_gone(comm, s))
                goto gone;
            err = errno;
            break;
        }
        fc[s] = cursor_at_start(&from[s]);
        tc[s] = cursor_at_start(&recvblocks[s]);
    }
    for (size_t off = 0; off < block; off += SHMTOPO_SC_ROUND) {
        for (int i = 1; i < P && !err; i++) {
            const int s = (me + P - i) % P; /* readers of one sender start at different peers */
            if (got[s] <= off)
                continue;
            const size_t m = shmtopo_min_size(SHMTOPO_SC_ROUND, got[s] - off);
            if (read_pieces(comm, s, &from[s], &fc[s], &recvblocks[s], recv, &tc[s], m) < 0) {
                if (shmtopo_sc_gone(comm, s))
                    goto gone;
                err = errno;
            }
        }
        if (shmtopo_step(comm, sig, err, NULL, 0) < 0)
            goto gone;
    }
    for (int p = 0; from && p < P; p++)
        free((void *)from[p].offsets);
    free(from), free(fc), free(tc);
    return 0;
gone:
    for (int p = 0; from && p < P; p++)
        free((void *)from[p].offsets);
    free(from), free(fc), free(tc);
    return -1;
}

int shmtopo_alltoallw(shmtopo_comm_t *comm, const void *send, const shmtopo_typed_block_t *sendblocks, void *recv,
                      const shmtopo_typed_block_t *recvblocks)
{
    const char *what = "alltoallw";
    if (shmtopo_comm_usable(comm, what) < 0)
        return -1;
    const int P = comm->size, me = comm->rank;
    const size_t B = comm->chan.buffer, row = (size_t)P * sizeof(size_t);
    shmtopo_sig_t sig = shmtopo_coll_sig(SHMTOPO_KIND_ALLTOALLW, 0, SHMTOPO_UINT8, -1, -1, -1);
    sig.flags = SHMTOPO_SIG_OWN_COUNT;
    /* the counts matrices (bytes), per peer where its block for me lies in
     * its stream and how long it is, this rank's own rows, and a cursor per peer */
    size_t *S = malloc(((size_t)P * P * 2 + 4 * (size_t)P) * sizeof(size_t) + 2 * (size_t)P * SHMTOPO_COLL_CURSOR);
    errno = 0;
    if (!S) {
        shmtopo_fail(ENOMEM, -1, "alltoallw: out of memory for the counts of %d ranks", P);
        return shmtopo_coll_refuse(comm, &sig);
    }
    size_t *R = S + (size_t)P * P, *from = R + (size_t)P * P, *len = from + P, *sent = len + P, *got = sent + P;
    void *cursors = got + P; /* shmtopo_coll_stream's */
    if (!sendblocks || !recvblocks) {
        shmtopo_fail(EINVAL, -1, "alltoallw: NULL blocks");
        goto out_refused;
    }
    const size_t table = 2 * row, posted = (size_t)P * sizeof(posted_block_t);
    if (table + posted > B) {
        shmtopo_fail(EINVAL, -1, "alltoallw: SHMTOPO_COLL_BUFFER too small for %d ranks", P);
        goto out_refused;
    }
    for (int p = 0; p < P; p++) {
        if (check_block(what, &sendblocks[p], send, p, &sent[p]) < 0 ||
            check_block(what, &recvblocks[p], recv, p, &got[p]) < 0)
            goto out_refused;
        sig.count += sent[p];
    }
    int which = shmtopo_chan_next_buffer(comm);
    memcpy(shmtopo_chan_buffer(comm, me, which), sent, row);
    memcpy(shmtopo_chan_buffer(comm, me, which) + row, got, row);
    for (int p = 0; p < P; p++) { /* for single copy: where this rank's block for p lies */
        const shmtopo_typed_block_t *b = &sendblocks[p];
        const posted_block_t d = {(uint64_t)((uintptr_t)send + (uintptr_t)b->displ), b->count, b->runs,
                                  (uint64_t)(uintptr_t)b->offsets, (uint64_t)(uintptr_t)b->lengths, b->extent};
        memcpy(shmtopo_chan_buffer(comm, me, which) + table + (size_t)p * sizeof(d), &d, sizeof(d));
    }
    size_t longest, mine;
    if (shmtopo_coll_step(comm, &sig, NULL, 0) < 0 ||
        shmtopo_coll_streams(comm, &sig, which, 1, S, R, from, len, &longest, &mine) < 0)
        goto out_failed;
    block_to_block(&sendblocks[me], send, &recvblocks[me], recv, sent[me]);
    /* every rank knows every block's size and pieces now, so all take the same path */
    size_t block = 0, bytes = 0, pieces = 0; /* block: the longest between two ranks */
    for (int r = 0; r < P; r++)
        for (int p = 0; p < P; p++) {
            const size_t n = S[(size_t)r * P + p];
            if (p == r || !n)
                continue;
            posted_block_t d;
            memcpy(&d, shmtopo_chan_buffer(comm, r, which) + table + (size_t)p * sizeof(d), sizeof(d));
            block = n > block ? n : block;
            bytes += n;
            pieces += (size_t)(d.count * d.runs);
        }
    if (comm->single_copy && P > 1 && block >= SC_MIN_TYPED && bytes >= SC_PIECE * pieces) {
        const int rc = sc_alltoallw(comm, &sig, which, table, recv, recvblocks, got, block);
        free(S);
        return rc;
    }
    const int rc = shmtopo_coll_stream(comm, &sig, send, sendblocks, sent, recv, recvblocks, from, len, longest,
                                       mine, cursors);
    free(S);
    return rc;
out_refused:
    free(S);
    return shmtopo_coll_refuse(comm, &sig);
out_failed:
    free(S);
    return -1;
}
