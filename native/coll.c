/* Window collectives: per-comm scratch memory in a window of its own, and
 * one synchronisation primitive, the step: post my step number (with a
 * signature of the call's arguments and, for tiny messages, the data in the
 * same cache line), then wait until every peer posted it too.
 *
 * Data goes through three buffers per rank, the one of a chunk chosen by
 * the step number its first step has, mod 3. A chunk's readers are done by
 * the time they post the step after its last one, and a buffer is written
 * again only by a chunk starting three steps later, after seeing everyone
 * past that point: so no chunk overwrites data still being read. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

#define COLL_INLINE 96                 /* bytes of data carried in the flag line */
#define DEFAULT_BUFFER (256 * 1024)    /* per buffer, three per rank */
#define NBUFFERS 3
#define FLAT_MAX (64 * 1024)           /* auto: above this, reduce-scatter + allgather */

typedef struct coll_line {
    _Alignas(SHMTOPO_LINE) _Atomic uint64_t step;
    _Atomic uint64_t signature;
    unsigned char data[COLL_INLINE];
} coll_line_t;

typedef struct coll_header {
    coll_line_t line[2];               /* by step parity */
    _Alignas(SHMTOPO_LINE) _Atomic uint32_t waiters;
} coll_header_t;

struct shmtopo_coll {
    shmtopo_win_t *win;
    int rank, size;
    int default_alg;
    size_t buffer;                      /* bytes per buffer */
    size_t header;                      /* header bytes, page-rounded */
    uint64_t step;
    char *tmp;                          /* private scratch of one buffer's size */
};

enum kind { BARRIER = 1, BCAST, REDUCE, ALLREDUCE, ALLGATHER, REDUCE_SCATTER, ALLTOALL };
static const char *const kind_names[] = {"", "barrier", "bcast", "reduce", "allreduce",
                                         "allgather", "reduce_scatter", "alltoall"};
#define POISON 0xbad0bad0bad0bad0ull   /* signature of a rank whose own arguments were bad */

static coll_header_t *header(const shmtopo_coll_t *c, int rank)
{
    return (coll_header_t *)c->win->base[rank];
}

static char *buffer(const shmtopo_coll_t *c, int rank, int which)
{
    return c->win->base[rank] + c->header + (size_t)which * c->buffer;
}

/* The buffer of a chunk whose first step is the next one. */
static int next_buffer(const shmtopo_coll_t *c)
{
    return (int)((c->step + 1) % NBUFFERS);
}

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h * 0xbf58476d1ce4e5b9ull;
}

static uint64_t signature(int kind, int dtype, int op, int root, size_t count)
{
    return mix(mix(mix(mix(mix(0, (uint64_t)kind), (uint64_t)dtype), (uint64_t)op),
                   (uint64_t)(int64_t)root), (uint64_t)count);
}

/* One step: publish (with up to COLL_INLINE bytes of data), then wait for
 * every peer. All ranks finish the step even when signatures differ, so a
 * mismatch fails the call everywhere and leaves the step counts in agreement. */
static int step(shmtopo_coll_t *c, int kind, uint64_t sig, const void *data, size_t n)
{
    const uint64_t s = ++c->step;
    coll_header_t *me = header(c, c->rank);
    coll_line_t *mine = &me->line[s & 1];
    if (n)
        memcpy(mine->data, data, n);
    atomic_store_explicit(&mine->signature, sig, memory_order_relaxed);
    shmtopo_post(&mine->step, &me->waiters, s);
    int odd = -1;
    for (int i = 1; i < c->size; i++) {
        int p = (c->rank + i) % c->size;
        coll_header_t *h = header(c, p);
        if (shmtopo_wait(c->win, &h->line[s & 1].step, &h->waiters, s, p, kind_names[kind]) < 0) {
            c->win->broken = 1;
            return -1;
        }
        if (odd < 0 && atomic_load_explicit(&h->line[s & 1].signature, memory_order_relaxed) != sig)
            odd = p;
    }
    if (sig == POISON)
        return -1; /* this rank's own error is already recorded */
    if (odd >= 0)
        return shmtopo_fail(EINVAL, odd,
                            "rank %d called %s with other arguments than rank %d "
                            "(count, type, operation or root differ)",
                            odd, kind_names[kind], c->rank);
    return 0;
}

static const unsigned char *inline_data(const shmtopo_coll_t *c, int rank)
{
    return header(c, rank)->line[c->step & 1].data;
}

static int coll_create(shmtopo_comm_t *comm, shmtopo_coll_t **collp)
{
    size_t bytes = DEFAULT_BUFFER;
    const char *env = getenv("SHMTOPO_COLL_BUFFER");
    int err = 0;
    if (env && *env) {
        char *end;
        unsigned long long v = strtoull(env, &end, 10);
        if (*end || v < 4096 || v > (1ull << 30))
            shmtopo_fail(err = EINVAL, -1, "SHMTOPO_COLL_BUFFER=%s: expected bytes in [4096, 2^30]", env);
        else
            bytes = shmtopo_round_up((size_t)v, 4096);
    }
    int alg = SHMTOPO_COLL_AUTO;
    env = getenv("SHMTOPO_COLL_ALGORITHM");
    if (!err && env && *env) {
        if (strcmp(env, "flat") == 0)
            alg = SHMTOPO_COLL_FLAT;
        else if (strcmp(env, "rsag") == 0)
            alg = SHMTOPO_COLL_RSAG;
        else if (strcmp(env, "auto") != 0)
            shmtopo_fail(err = EINVAL, -1, "SHMTOPO_COLL_ALGORITHM=%s: expected auto, flat or rsag", env);
    }
    shmtopo_coll_t *c = calloc(1, sizeof(*c));
    if (!c)
        return shmtopo_fail(ENOMEM, -1, "out of memory");
    c->rank = comm->rank;
    c->size = comm->size;
    c->buffer = bytes;
    c->default_alg = alg;
    c->header = shmtopo_round_up(sizeof(coll_header_t), (size_t)sysconf(_SC_PAGESIZE));
    c->tmp = malloc(bytes);
    /* A bad setting on one rank becomes an invalid allocation there, which
     * fails the allocation on every rank. */
    shmtopo_win_attr_t attr = {0};
    char reason[256];
    snprintf(reason, sizeof(reason), "%s", shmtopo_last_error());
    attr.invalid = err ? reason : NULL;
    void *base;
    if (!c->tmp || shmtopo_win_alloc(comm, c->header + NBUFFERS * bytes, &attr, &base, &c->win) < 0)
        goto out_with_coll;
    /* Ranks with different buffer sizes would read past each other's chunks. */
    if (step(c, BARRIER, signature(0, 0, 0, 0, bytes), NULL, 0) < 0) {
        shmtopo_win_abandon(c->win);
        goto out_with_coll;
    }
    *collp = c;
    return 0;

out_with_coll:
    if (!c->tmp)
        shmtopo_fail(ENOMEM, -1, "out of memory");
    err = errno;
    free(c->tmp);
    free(c);
    errno = err;
    return -1;
}

int shmtopo_coll_free(shmtopo_coll_t *c)
{
    int rc = shmtopo_win_free(c->win);
    free(c->tmp);
    free(c);
    return rc;
}

void shmtopo_coll_abandon(shmtopo_coll_t *c)
{
    shmtopo_win_abandon(c->win);
    free(c->tmp);
    free(c);
}

/* The comm's collective state, made by the first collective call (which
 * every rank makes at the same point, so making it there is collective). */
static int begin(shmtopo_comm_t *comm, shmtopo_coll_t **cp)
{
    if (!comm)
        return shmtopo_fail(EBADF, -1, "communicator is NULL or freed");
    if (!comm->coll && coll_create(comm, &comm->coll) < 0)
        return -1;
    if (comm->coll->win->broken)
        return shmtopo_fail(EPIPE, -1, "collectives are unusable on this comm after a failed wait");
    *cp = comm->coll;
    return 0;
}

/* begin() for a window's comm: the zero-copy collectives start here. */
static int begin_window(const shmtopo_win_t *win, shmtopo_coll_t **cp)
{
    if (!win)
        return shmtopo_fail(EBADF, -1, "window is NULL or freed");
    return begin(win->comm, cp);
}

/* A bad argument on this rank: take part in one step with a poisoned
 * signature so the peers fail too, then report the local error. */
static int poison(shmtopo_coll_t *c, int kind)
{
    char message[256];
    int err = errno;
    strncpy(message, shmtopo_last_error(), sizeof(message) - 1);
    message[sizeof(message) - 1] = '\0';
    step(c, kind, POISON, NULL, 0);
    return shmtopo_fail(err, -1, "%s", message);
}

static int check_root(const shmtopo_coll_t *c, int root)
{
    if (root < 0 || root >= c->size)
        return shmtopo_fail(EINVAL, root, "root %d out of range [0, %d)", root, c->size);
    return 0;
}

static int check_dtype(int dtype)
{
    return shmtopo_dtype_size(dtype) ? 0 : shmtopo_fail(EINVAL, -1, "unknown element type %d", dtype);
}

static size_t min_size(size_t a, size_t b)
{
    return a < b ? a : b;
}

/* ---- reductions ------------------------------------------------------------ */

/* dst = in[0] op in[1] op ... in rank order, the same on every rank so that
 * floating-point results agree bit for bit. dst may be in[0] or in[1] (the
 * pair kernel allows that); when it is a later input, which the first
 * writes would clobber, the result goes through the private slice. */
static void reduce_ranks(const shmtopo_coll_t *c, char *dst, const char *(*src)(const shmtopo_coll_t *, int, const void *),
                         const void *arg, size_t count, int dtype, int op)
{
    const size_t esz = shmtopo_dtype_size(dtype);
    if (c->size == 1) {
        memmove(dst, src(c, 0, arg), count * esz);
        return;
    }
    int later = 0;
    for (int p = 2; p < c->size; p++)
        later |= src(c, p, arg) == dst;
    const size_t per = later ? c->buffer / esz : count;
    for (size_t off = 0; off < count; off += per) {
        const size_t m = min_size(per, count - off);
        char *out = later ? c->tmp : dst + off * esz;
        shmtopo_reduce_pair(out, src(c, 0, arg) + off * esz, src(c, 1, arg) + off * esz, m, dtype, op);
        for (int p = 2; p < c->size; p++)
            shmtopo_reduce_into(out, src(c, p, arg) + off * esz, m, dtype, op);
        if (later)
            memcpy(dst + off * esz, out, m * esz);
    }
}

typedef struct chunk_at {
    int which;
    size_t offset;     /* bytes into each rank's buffer */
    const char *own;   /* this rank's input for the same elements, read there instead, or NULL */
} chunk_at_t;

/* Where each rank's input lies: copied into its scratch buffers chunk by
 * chunk (any array), or in place at `offset` of its part of a window of the
 * comm (zero-copy: peers read it there). */
typedef struct source {
    const char *send;          /* this rank's input, copy path */
    const shmtopo_win_t *win;  /* window path */
    size_t offset;
} source_t;

static const char *from_window(const shmtopo_coll_t *c, int rank, const void *arg)
{
    (void)c;
    const source_t *src = arg;
    return src->win->base[rank] + src->offset;
}

static const char *from_line(const shmtopo_coll_t *c, int rank, const void *arg)
{
    (void)arg;
    return (const char *)inline_data(c, rank);
}

static const char *from_buffer(const shmtopo_coll_t *c, int rank, const void *arg)
{
    const chunk_at_t *at = arg;
    return rank == c->rank && at->own ? at->own : buffer(c, rank, at->which) + at->offset;
}

/* Every rank publishes, one step, and the readers reduce all inputs. */
static int flat_reduce(shmtopo_coll_t *c, int kind, uint64_t sig, const source_t *src, char *recv,
                       size_t count, int dtype, int op, int root)
{
    const size_t esz = shmtopo_dtype_size(dtype), n = count * esz;
    const int reads = root < 0 || root == c->rank;
    if (src->win) {
        /* in place: one step to start reading, one so nobody changes its
         * part while a peer still reads it */
        if (step(c, kind, sig, NULL, 0) < 0)
            return -1;
        if (reads)
            reduce_ranks(c, recv, from_window, src, count, dtype, op);
        return step(c, kind, sig, NULL, 0);
    }
    if (n <= COLL_INLINE) {
        if (step(c, kind, sig, src->send, n) < 0)
            return -1;
        if (reads && n)
            reduce_ranks(c, recv, from_line, NULL, count, dtype, op);
        return 0;
    }
    const size_t per = c->buffer / esz;
    for (size_t off = 0; off < count; off += per) {
        const size_t m = min_size(per, count - off);
        chunk_at_t at = {next_buffer(c), 0, NULL};
        memcpy(buffer(c, c->rank, at.which), src->send + off * esz, m * esz);
        if (step(c, kind, sig, NULL, 0) < 0)
            return -1;
        if (reads)
            reduce_ranks(c, recv + off * esz, from_buffer, &at, m, dtype, op);
    }
    return 0;
}

/* Per chunk: each rank reduces its own slice of everybody's chunk (in
 * parallel, so the memory traffic is shared), publishes it, then the readers
 * copy the others' slices: the memory-bandwidth-bound shape. Only the slices
 * peers reduce are copied in: a rank reads its own slice from its input. */
static int rsag_reduce(shmtopo_coll_t *c, int kind, uint64_t sig, const source_t *src, char *recv,
                       size_t count, int dtype, int op, int root)
{
    const size_t esz = shmtopo_dtype_size(dtype), per = c->buffer / esz;
    const int reads = root < 0 || root == c->rank;
    for (size_t off = 0; off < count; off += per) {
        const size_t m = min_size(per, count - off);
        const int which = next_buffer(c);
        char *mine = buffer(c, c->rank, which);
        const size_t lo = m * (size_t)c->rank / (size_t)c->size;
        const size_t hi = m * (size_t)(c->rank + 1) / (size_t)c->size;
        if (!src->win) {
            memcpy(mine, src->send + off * esz, lo * esz);
            memcpy(mine + hi * esz, src->send + (off + hi) * esz, (m - hi) * esz);
        }
        if (step(c, kind, sig, NULL, 0) < 0)
            return -1;
        /* a rank without a result reduces straight into its scratch, where
         * the readers copy it from; a reader publishes a copy unless it is
         * the only reader (the root of a reduce) */
        char *dst = reads ? recv + (off + lo) * esz : mine + lo * esz;
        if (src->win) {
            source_t at = {NULL, src->win, src->offset + (off + lo) * esz};
            reduce_ranks(c, dst, from_window, &at, hi - lo, dtype, op);
        } else {
            chunk_at_t at = {which, lo * esz, src->send + (off + lo) * esz};
            reduce_ranks(c, dst, from_buffer, &at, hi - lo, dtype, op);
        }
        if (reads && root < 0)
            memcpy(mine + lo * esz, dst, (hi - lo) * esz);
        if (step(c, kind, sig, NULL, 0) < 0)
            return -1;
        if (!reads)
            continue;
        for (int p = 0; p < c->size; p++) {
            const size_t plo = m * (size_t)p / (size_t)c->size;
            const size_t phi = m * (size_t)(p + 1) / (size_t)c->size;
            if (p != c->rank)
                memcpy(recv + (off + plo) * esz, buffer(c, p, which) + plo * esz, (phi - plo) * esz);
        }
    }
    return 0;
}

/* A window path needs the window of this comm and the data inside every
 * rank's part; false arguments on one rank fail the call on all. The result
 * may replace this rank's own input (in place) but must not overlap any
 * other input, which peers read while it is written. */
static int check_window(const shmtopo_coll_t *c, const shmtopo_comm_t *comm, const source_t *src,
                        const char *recv, size_t nbytes, size_t recv_bytes)
{
    if (!src->win)
        return 0;
    if (src->win->comm != comm)
        return shmtopo_fail(EINVAL, -1, "the window belongs to another comm");
    for (int p = 0; p < c->size; p++) {
        if (src->offset + nbytes > src->win->sizes[p])
            return shmtopo_fail(EINVAL, p, "bytes [%zu, %zu) lie outside rank %d's part of the window (%zu bytes)",
                                src->offset, src->offset + nbytes, p, src->win->sizes[p]);
        const char *input = src->win->base[p] + src->offset;
        if (recv && nbytes && recv < input + nbytes && input < recv + recv_bytes &&
            !(p == c->rank && recv == input && recv_bytes == nbytes))
            return shmtopo_fail(EINVAL, p, "the result buffer overlaps rank %d's input in the window "
                                "(only exactly in place, on this rank's own input, is allowed)", p);
    }
    return 0;
}

/* Allreduce in place in a window: each rank reduces its slice of all inputs
 * into its own input there, then copies the other slices from their owners.
 * No scratch copies; peers only ever read slices nobody is writing. */
static int inplace_allreduce(shmtopo_coll_t *c, uint64_t sig, const source_t *src, char *recv,
                             size_t count, int dtype, int op)
{
    const size_t esz = shmtopo_dtype_size(dtype);
    if (step(c, ALLREDUCE, sig, NULL, 0) < 0)
        return -1;
    const size_t lo = count * (size_t)c->rank / (size_t)c->size;
    const size_t hi = count * (size_t)(c->rank + 1) / (size_t)c->size;
    source_t slice = {NULL, src->win, src->offset + lo * esz};
    reduce_ranks(c, recv + lo * esz, from_window, &slice, hi - lo, dtype, op);
    if (step(c, ALLREDUCE, sig, NULL, 0) < 0)
        return -1;
    for (int p = 0; p < c->size; p++) {
        const size_t plo = count * (size_t)p / (size_t)c->size;
        const size_t phi = count * (size_t)(p + 1) / (size_t)c->size;
        if (p != c->rank)
            memcpy(recv + plo * esz, src->win->base[p] + src->offset + plo * esz, (phi - plo) * esz);
    }
    /* my slice stays as it is until every peer has copied it */
    return step(c, ALLREDUCE, sig, NULL, 0);
}

static int reduce_common(shmtopo_comm_t *comm, int kind, const source_t *src, void *recv,
                         size_t count, int dtype, int op, int root, int alg)
{
    shmtopo_coll_t *c = NULL;
    if (begin(comm, &c) < 0)
        return -1;
    const int reads = root < 0 || root == c->rank;
    if ((root >= 0 && check_root(c, root) < 0) || shmtopo_reduce_check(dtype, op) < 0 ||
        check_window(c, comm, src, reads ? recv : NULL, count * shmtopo_dtype_size(dtype),
                     count * shmtopo_dtype_size(dtype)) < 0)
        return poison(c, kind);
    if ((count && !src->win && !src->send) || (count && reads && !recv) ||
        (alg != SHMTOPO_COLL_AUTO && alg != SHMTOPO_COLL_FLAT && alg != SHMTOPO_COLL_RSAG)) {
        shmtopo_fail(EINVAL, -1, "%s: NULL buffer or unknown algorithm %d", kind_names[kind], alg);
        return poison(c, kind);
    }
    /* the signature also tells the copy path from the window path, and an
     * allreduce in place in the window from one that is not */
    const int in_place = src->win && root < 0 && count &&
                         (const char *)recv == src->win->base[c->rank] + src->offset;
    const uint64_t sig = mix(mix(signature(kind, dtype, op, root, count),
                                 src->win ? src->offset + 1 : 0), (uint64_t)in_place);
    const size_t n = count * shmtopo_dtype_size(dtype);
    if (alg == SHMTOPO_COLL_AUTO)
        alg = c->default_alg;
    if (alg == SHMTOPO_COLL_AUTO)
        alg = n <= FLAT_MAX || c->size == 1 ? SHMTOPO_COLL_FLAT : SHMTOPO_COLL_RSAG;
    if (count == 0) /* still a step: arguments are checked and everyone meets */
        return step(c, kind, sig, NULL, 0);
    if (in_place) /* flat would overwrite inputs peers still read */
        return inplace_allreduce(c, sig, src, recv, count, dtype, op);
    if (alg == SHMTOPO_COLL_FLAT)
        return flat_reduce(c, kind, sig, src, recv, count, dtype, op, root);
    return rsag_reduce(c, kind, sig, src, recv, count, dtype, op, root);
}

int shmtopo_win_reduce(shmtopo_win_t *win, size_t offset, void *recv, size_t count, int dtype,
                       int op, int root, int alg)
{
    if (!win)
        return shmtopo_fail(EBADF, -1, "window is NULL or freed");
    source_t src = {NULL, win, offset};
    return reduce_common(win->comm, root < 0 ? ALLREDUCE : REDUCE, &src, recv, count, dtype, op,
                         root, alg);
}

int shmtopo_reduce(shmtopo_comm_t *comm, const void *send, void *recv, size_t count, int dtype,
                   int op, int root, int alg)
{
    source_t src = {send, NULL, 0};
    return reduce_common(comm, REDUCE, &src, recv, count, dtype, op, root, alg);
}

int shmtopo_allreduce(shmtopo_comm_t *comm, const void *send, void *recv, size_t count, int dtype,
                      int op, int alg)
{
    source_t src = {send, NULL, 0};
    return reduce_common(comm, ALLREDUCE, &src, recv, count, dtype, op, -1, alg);
}

/* ---- data movement ------------------------------------------------------------- */

int shmtopo_barrier(shmtopo_comm_t *comm)
{
    shmtopo_coll_t *c = NULL;
    if (begin(comm, &c) < 0)
        return -1;
    return step(c, BARRIER, signature(BARRIER, 0, 0, 0, 0), NULL, 0);
}

int shmtopo_bcast(shmtopo_comm_t *comm, void *buf, size_t count, int dtype, int root)
{
    shmtopo_coll_t *c = NULL;
    if (begin(comm, &c) < 0)
        return -1;
    if (check_root(c, root) < 0 || check_dtype(dtype) < 0)
        return poison(c, BCAST);
    if (count && !buf) {
        shmtopo_fail(EINVAL, -1, "bcast: NULL buffer");
        return poison(c, BCAST);
    }
    const uint64_t sig = signature(BCAST, dtype, 0, root, count);
    const size_t esz = shmtopo_dtype_size(dtype), n = count * esz;
    char *data = buf;
    if (n <= COLL_INLINE) {
        if (step(c, BCAST, sig, c->rank == root ? buf : NULL, c->rank == root ? n : 0) < 0)
            return -1;
        if (c->rank != root && n)
            memcpy(buf, inline_data(c, root), n);
        return 0;
    }
    for (size_t off = 0; off < n; off += c->buffer) {
        const size_t m = min_size(c->buffer, n - off);
        const int which = next_buffer(c);
        if (c->rank == root)
            memcpy(buffer(c, root, which), data + off, m);
        if (step(c, BCAST, sig, NULL, 0) < 0)
            return -1;
        if (c->rank != root)
            memcpy(data + off, buffer(c, root, which), m);
    }
    return 0;
}

int shmtopo_win_bcast(shmtopo_win_t *win, size_t offset, void *buf, size_t count, int dtype, int root)
{
    shmtopo_coll_t *c = NULL;
    if (begin_window(win, &c) < 0)
        return -1;
    const size_t n = count * shmtopo_dtype_size(dtype);
    source_t src = {NULL, win, offset};
    if (check_root(c, root) < 0 || check_dtype(dtype) < 0 || check_window(c, win->comm, &src, NULL, n, 0) < 0)
        return poison(c, BCAST);
    if (count && !buf) {
        shmtopo_fail(EINVAL, -1, "bcast: NULL buffer");
        return poison(c, BCAST);
    }
    /* In place (every rank's buffer is its own part of the window, at the
     * same offset): all ranks share the copying, each filling its segment of
     * every destination, instead of each reader copying everything itself. */
    const int in_place = n && (char *)buf == win->base[c->rank] + offset;
    const uint64_t sig = mix(mix(signature(BCAST, dtype, 0, root, count), offset + 1), (uint64_t)in_place);
    if (step(c, BCAST, sig, NULL, 0) < 0)
        return -1;
    const char *from = win->base[root] + offset;
    if (in_place) {
        /* segment bounds are whole cache lines from the start of the data:
         * when the data starts on a line in every part (separate parts start
         * on pages), no two ranks write the same line */
        const size_t lo = n * (size_t)c->rank / (size_t)c->size / SHMTOPO_LINE * SHMTOPO_LINE;
        const size_t hi = c->rank + 1 == c->size ? n
                          : n * (size_t)(c->rank + 1) / (size_t)c->size / SHMTOPO_LINE * SHMTOPO_LINE;
        for (int i = 1; i < c->size && hi > lo; i++) {
            const int p = (root + i) % c->size;
            memcpy(win->base[p] + offset + lo, from + lo, hi - lo);
        }
    } else if (n && (char *)buf != from) {
        memmove(buf, from, n);
    }
    /* the root keeps its data unchanged until every copy is done */
    return step(c, BCAST, sig, NULL, 0);
}

int shmtopo_allgather(shmtopo_comm_t *comm, const void *send, void *recv, size_t count, int dtype)
{
    shmtopo_coll_t *c = NULL;
    if (begin(comm, &c) < 0)
        return -1;
    if (check_dtype(dtype) < 0)
        return poison(c, ALLGATHER);
    if (count && (!send || !recv)) {
        shmtopo_fail(EINVAL, -1, "allgather: NULL buffer");
        return poison(c, ALLGATHER);
    }
    const uint64_t sig = signature(ALLGATHER, dtype, 0, 0, count);
    const size_t n = count * shmtopo_dtype_size(dtype);
    char *out = recv;
    if (n <= COLL_INLINE) {
        if (step(c, ALLGATHER, sig, send, n) < 0)
            return -1;
        for (int p = 0; p < c->size && n; p++)
            memcpy(out + (size_t)p * n, inline_data(c, p), n);
        return 0;
    }
    for (size_t off = 0; off < n; off += c->buffer) {
        const size_t m = min_size(c->buffer, n - off);
        const int which = next_buffer(c);
        memcpy(buffer(c, c->rank, which), (const char *)send + off, m);
        if (step(c, ALLGATHER, sig, NULL, 0) < 0)
            return -1;
        /* peers first, each rank starting at a different one so no buffer
         * has every reader at once; this rank's own block from its input */
        for (int i = 1; i < c->size; i++) {
            const int p = (c->rank + i) % c->size;
            memcpy(out + (size_t)p * n + off, buffer(c, p, which), m);
        }
        memmove(out + (size_t)c->rank * n + off, (const char *)send + off, m); /* send may be that block */
    }
    return 0;
}

int shmtopo_win_allgather(shmtopo_win_t *win, size_t offset, void *recv, size_t count, int dtype)
{
    shmtopo_coll_t *c = NULL;
    if (begin_window(win, &c) < 0)
        return -1;
    const size_t n = count * shmtopo_dtype_size(dtype);
    source_t src = {NULL, win, offset};
    if (check_dtype(dtype) < 0 || check_window(c, win->comm, &src, recv, n, n * (size_t)c->size) < 0)
        return poison(c, ALLGATHER);
    if (count && !recv) {
        shmtopo_fail(EINVAL, -1, "allgather: NULL buffer");
        return poison(c, ALLGATHER);
    }
    const uint64_t sig = mix(signature(ALLGATHER, dtype, 0, 0, count), offset + 1);
    if (step(c, ALLGATHER, sig, NULL, 0) < 0)
        return -1;
    for (int i = 0; i < c->size && n; i++) {
        const int p = (c->rank + i) % c->size; /* ranks start on different parts */
        memcpy((char *)recv + (size_t)p * n, win->base[p] + offset, n);
    }
    /* the parts stay unchanged until every rank has copied them */
    return step(c, ALLGATHER, sig, NULL, 0);
}

/* reduce_scatter and alltoall: chunk k holds elements [off, off+m) of every
 * block, block b at b*m in the buffer, so every rank has work in every chunk. */
static int blocks_common(shmtopo_comm_t *comm, int kind, const void *send, void *recv, size_t count,
                         int dtype, int op)
{
    shmtopo_coll_t *c = NULL;
    if (begin(comm, &c) < 0)
        return -1;
    if (check_dtype(dtype) < 0 || (kind == REDUCE_SCATTER && shmtopo_reduce_check(dtype, op) < 0))
        return poison(c, kind);
    const size_t esz = shmtopo_dtype_size(dtype), P = (size_t)c->size;
    if ((count && (!send || !recv)) || c->buffer < P * esz) {
        shmtopo_fail(EINVAL, -1, "%s: NULL buffer, or SHMTOPO_COLL_BUFFER too small for %d ranks",
                     kind_names[kind], c->size);
        return poison(c, kind);
    }
    const uint64_t sig = signature(kind, dtype, op, 0, count);
    if (count == 0)
        return step(c, kind, sig, NULL, 0);
    const char *in = send;
    char *out = recv;
    const size_t per = c->buffer / (esz * P);
    for (size_t off = 0; off < count; off += per) {
        const size_t m = min_size(per, count - off);
        chunk_at_t at = {next_buffer(c), (size_t)c->rank * m * esz, NULL};
        char *mine = buffer(c, c->rank, at.which);
        for (size_t b = 0; b < P; b++)
            memcpy(mine + b * m * esz, in + (b * count + off) * esz, m * esz);
        if (step(c, kind, sig, NULL, 0) < 0)
            return -1;
        if (kind == REDUCE_SCATTER) {
            reduce_ranks(c, out + off * esz, from_buffer, &at, m, dtype, op);
            continue;
        }
        for (size_t p = 0; p < P; p++)
            memcpy(out + (p * count + off) * esz, from_buffer(c, (int)p, &at), m * esz);
    }
    return 0;
}

int shmtopo_reduce_scatter(shmtopo_comm_t *comm, const void *send, void *recv, size_t count,
                           int dtype, int op)
{
    return blocks_common(comm, REDUCE_SCATTER, send, recv, count, dtype, op);
}

int shmtopo_alltoall(shmtopo_comm_t *comm, const void *send, void *recv, size_t count, int dtype)
{
    return blocks_common(comm, ALLTOALL, send, recv, count, dtype, 0);
}
