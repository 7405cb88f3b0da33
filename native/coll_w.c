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
 * The first step carries every rank's byte counts (its send row, then its
 * receive row) and agrees on the call; a pair whose sizes differ fails on
 * every rank before any data moves (shmtopo_pairs_verdict). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "internal.h"
#include "state.h"

/* Where a walk through a block stands: which element, which run of it, and
 * how many bytes of that run are behind. */
typedef struct cursor {
    uint64_t element, run, done;
} cursor_t;

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

static cursor_t start(const shmtopo_typed_block_t *b)
{
    cursor_t c = {0, 0, 0};
    advance(b, &c, 0); /* past leading runs of 0 bytes */
    return c;
}

void shmtopo_typed_pack(const void *buf, const shmtopo_typed_block_t *b, void *out)
{
    cursor_t c = start(b);
    walk(b, buf, &c, out, shmtopo_typed_size(b), 1);
}

void shmtopo_typed_unpack(const void *in, const shmtopo_typed_block_t *b, void *buf)
{
    cursor_t c = start(b);
    walk(b, buf, &c, (char *)in, shmtopo_typed_size(b), 0);
}

/* n bytes from one block to another, run against run (a rank's own block). */
static void block_to_block(const shmtopo_typed_block_t *from, const char *send, const shmtopo_typed_block_t *to,
                           char *recv, size_t n)
{
    cursor_t s = start(from), r = start(to);
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
    size_t *S = malloc(((size_t)P * P * 2 + 4 * (size_t)P) * sizeof(size_t) + 2 * (size_t)P * sizeof(cursor_t));
    errno = 0;
    if (!S) {
        shmtopo_fail(ENOMEM, -1, "alltoallw: out of memory for the counts of %d ranks", P);
        return shmtopo_coll_refuse(comm, &sig);
    }
    size_t *R = S + (size_t)P * P, *from = R + (size_t)P * P, *len = from + P, *sent = len + P, *got = sent + P;
    cursor_t *out_at = (cursor_t *)(got + P), *in_at = out_at + P;
    if (!sendblocks || !recvblocks) {
        shmtopo_fail(EINVAL, -1, "alltoallw: NULL blocks");
        goto out_refused;
    }
    if (2 * row > B) {
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
    if (shmtopo_coll_step(comm, &sig, NULL, 0) < 0)
        goto out_failed;
    for (int r = 0; r < P; r++) {
        memcpy(S + (size_t)r * P, shmtopo_chan_buffer(comm, r, which), row);
        memcpy(R + (size_t)r * P, shmtopo_chan_buffer(comm, r, which) + row, row);
    }
    if (shmtopo_pairs_verdict(&sig, S, R, (size_t)P) < 0)
        goto out_failed;
    /* rank r's stream: its blocks for every other rank, in rank order */
    size_t longest = 0, mine = 0;
    for (int r = 0; r < P; r++) {
        size_t at = 0;
        for (int p = 0; p < P; p++) {
            if (p == me)
                from[r] = at, len[r] = S[(size_t)r * P + p];
            at += p != r ? S[(size_t)r * P + p] : 0;
        }
        longest = longest > at ? longest : at;
        if (r == me)
            mine = at;
    }
    block_to_block(&sendblocks[me], send, &recvblocks[me], recv, sent[me]);
    for (int p = 0; p < P; p++) {
        out_at[p] = start(&sendblocks[p]);
        in_at[p] = start(&recvblocks[p]);
    }
    for (size_t lo = 0; lo < longest; lo += B) {
        const size_t hi = lo + B;
        which = shmtopo_chan_next_buffer(comm);
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
        if (shmtopo_coll_step(comm, &sig, NULL, 0) < 0)
            goto out_failed;
        for (int i = 1; i < P; i++) {
            const int r = (me + i) % P;
            const size_t a = lo > from[r] ? lo : from[r], b = shmtopo_min_size(hi, from[r] + len[r]);
            if (a < b)
                walk(&recvblocks[r], recv, &in_at[r], shmtopo_chan_buffer(comm, r, which) + (a - lo), b - a, 0);
        }
    }
    free(S);
    return 0;
out_refused:
    free(S);
    return shmtopo_coll_refuse(comm, &sig);
out_failed:
    free(S);
    return -1;
}
