/* The agreement: the one way ranks decide together that a call may go on.
 *
 * Every collective operation (a window collective, a window's allocation or
 * free, the topology share, freeing the comm) starts with a step on the
 * comm's channel: each rank posts its call's signature (the operation and
 * every argument that must match), whether its own arguments were valid,
 * and why not, then waits for all the others and decides from what they
 * posted. Every rank reads the same posts, so every rank reaches the same
 * verdict: go on, or fail with the first failing rank's message, or fail on
 * a mismatch naming both calls. Nothing is rejected on one rank alone.
 * Across nodes, each node's leader folds its node's verdict into one
 * exchange with the other leaders and posts the job's verdict back (a
 * second step), before any data crosses nodes.
 *
 * The channel is the comm's own shared memory, made with the comm: per rank
 * a header of step lines and three scratch buffers. A step posts a sequence
 * number that only grows, with the signature's hash, the validity and up to
 * SHMTOPO_INLINE bytes of data in the same cache line; the full signature
 * and message lie beside it, read only when something is wrong. Lines and
 * details alternate by step parity: a rank rewrites one only two steps
 * later, after every peer has posted the step in between, by which time
 * they are done reading it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

#define MESSAGE 384

typedef struct chan_line {
    _Alignas(SHMTOPO_LINE) _Atomic uint64_t step;
    uint64_t hash;           /* of the signature posted with this step */
    int32_t err;             /* 0, or errno: the poster's arguments or set-up failed */
    int32_t origin;          /* the job rank that failure is about */
    unsigned char data[SHMTOPO_INLINE];
} chan_line_t;

typedef struct chan_detail {
    shmtopo_sig_t sig;
    char message[MESSAGE];   /* with err: the whole text every rank raises */
} chan_detail_t;

typedef struct chan_header {
    chan_line_t line[2];     /* by step parity */
    _Alignas(SHMTOPO_LINE) _Atomic uint32_t waiters;
    _Alignas(SHMTOPO_LINE) chan_detail_t detail[2];
} chan_header_t;

_Static_assert(sizeof(chan_line_t) == SHMTOPO_LINE, "a step line is one padded cache line");

static chan_header_t *header(const shmtopo_comm_t *comm, int rank)
{
    return (chan_header_t *)comm->chan.win->base[rank];
}

char *shmtopo_chan_buffer(const shmtopo_comm_t *comm, int rank, int which)
{
    return comm->chan.win->base[rank] + comm->chan.header + (size_t)which * comm->chan.buffer;
}

int shmtopo_chan_next_buffer(const shmtopo_comm_t *comm)
{
    return (int)((comm->chan.step + 1) % 3);
}

const void *shmtopo_step_data(const shmtopo_comm_t *comm, int rank)
{
    return header(comm, rank)->line[comm->chan.step & 1].data;
}

shmtopo_sig_t shmtopo_sig(int kind)
{
    return (shmtopo_sig_t){.kind = kind, .dtype = -1, .op = -1, .root = -1, .alg = -1};
}

/* ---- describing a call ---------------------------------------------------- */

static const char *const kind_names[] = {
    [SHMTOPO_KIND_BARRIER] = "barrier", [SHMTOPO_KIND_BCAST] = "bcast",
    [SHMTOPO_KIND_REDUCE] = "reduce", [SHMTOPO_KIND_ALLREDUCE] = "allreduce",
    [SHMTOPO_KIND_ALLGATHER] = "allgather", [SHMTOPO_KIND_REDUCE_SCATTER] = "reduce_scatter",
    [SHMTOPO_KIND_ALLTOALL] = "alltoall", [SHMTOPO_KIND_WIN_ALLOC] = "allocate",
    [SHMTOPO_KIND_WIN_FREE] = "window free", [SHMTOPO_KIND_COMM_FREE] = "comm free",
    [SHMTOPO_KIND_TOPO_SHARE] = "share_topology", [SHMTOPO_KIND_SPLIT] = "split",
    [SHMTOPO_KIND_COMM_CREATE] = "comm creation", [SHMTOPO_KIND_VERDICT] = "agreement",
};

const char *shmtopo_kind_name(int kind)
{
    int n = (int)(sizeof(kind_names) / sizeof(kind_names[0]));
    return kind > 0 && kind < n && kind_names[kind] ? kind_names[kind] : "an unknown operation";
}

static const char *const dtype_names[] = {"int8", "int16", "int32", "int64", "uint8", "uint16",
                                          "uint32", "uint64", "float32", "float64"};
static const char *const op_names[] = {"sum", "prod", "min", "max", "band", "bor", "bxor"};

/* "allreduce(count 4, float64, sum, flat)": the fields the kind uses. */
static void describe(const shmtopo_sig_t *sig, char *out, size_t len)
{
    int n = snprintf(out, len, "%s", shmtopo_kind_name(sig->kind));
    const char *sep = "(";
#define FIELD(...)                                                                         \
    do {                                                                                    \
        if (n >= 0 && (size_t)n < len)                                                      \
            n += snprintf(out + n, len - (size_t)n, "%s", sep);                             \
        if (n >= 0 && (size_t)n < len)                                                      \
            n += snprintf(out + n, len - (size_t)n, __VA_ARGS__);                           \
        sep = ", ";                                                                         \
    } while (0)
    switch (sig->kind) {
    case SHMTOPO_KIND_BCAST: case SHMTOPO_KIND_REDUCE: case SHMTOPO_KIND_ALLREDUCE:
    case SHMTOPO_KIND_ALLGATHER: case SHMTOPO_KIND_REDUCE_SCATTER: case SHMTOPO_KIND_ALLTOALL:
        FIELD("count %llu", (unsigned long long)sig->count);
        FIELD("%s", sig->dtype >= 0 && sig->dtype < 10 ? dtype_names[sig->dtype] : "an unknown type");
        if (sig->op >= 0)
            FIELD("%s", sig->op < 7 ? op_names[sig->op] : "an unknown op");
        if (sig->root >= 0)
            FIELD("root %d", sig->root);
        if (sig->alg > 0)
            FIELD("%s", shmtopo_coll_alg_name(sig->alg));
        if (sig->flags & SHMTOPO_SIG_WINDOW)
            FIELD("in a window at offset %llu", (unsigned long long)sig->extra);
        if (sig->flags & SHMTOPO_SIG_IN_PLACE)
            FIELD("in place");
        break;
    case SHMTOPO_KIND_WIN_ALLOC:
        FIELD("backend %s", shmtopo_backend_name(sig->dtype));
        FIELD("fence %s", shmtopo_fence_alg_name(sig->alg));
        FIELD("%s", sig->extra & 1 ? "contiguous" : "separate parts");
        if (sig->extra & 2)
            FIELD("symmetric");
        break;
    case SHMTOPO_KIND_WIN_FREE:
        FIELD("window #%llu", (unsigned long long)sig->extra);
        break;
    case SHMTOPO_KIND_TOPO_SHARE:
        FIELD("source %s", shmtopo_topo_source_name(sig->alg));
        break;
    }
    if (strcmp(sep, ", ") == 0 && n >= 0 && (size_t)n < len)
        snprintf(out + n, len - (size_t)n, ")");
#undef FIELD
}

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h * 0xbf58476d1ce4e5b9ull;
}

static uint64_t sig_hash(const shmtopo_sig_t *s)
{
    uint64_t h = mix(0, (uint64_t)s->kind);
    h = mix(h, (uint64_t)(uint32_t)s->dtype);
    h = mix(h, (uint64_t)(uint32_t)s->op);
    h = mix(h, (uint64_t)(uint32_t)s->root);
    h = mix(h, (uint64_t)(uint32_t)s->alg);
    h = mix(h, (uint64_t)(uint32_t)s->flags);
    h = mix(h, s->count);
    return mix(h, s->extra);
}

/* ---- deciding ------------------------------------------------------------------ */

/* The signature most ranks posted (weights: how many ranks each stands for;
 * ties go to the lowest index), so that a mismatch blames the odd one out. */
static int plurality(const uint64_t *hashes, const int *weights, int n)
{
    int best = 0, best_weight = -1;
    for (int i = 0; i < n; i++) {
        int w = 0;
        for (int j = 0; j < n; j++)
            if (hashes[j] == hashes[i])
                w += weights ? weights[j] : 1;
        if (w > best_weight) {
            best = i;
            best_weight = w;
        }
    }
    return best;
}

static int mismatch(int odd_rank, const shmtopo_sig_t *odd, int ref_rank, const shmtopo_sig_t *ref)
{
    char a[160], b[160];
    describe(odd, a, sizeof(a));
    describe(ref, b, sizeof(b));
    return shmtopo_fail(EINVAL, odd_rank,
                        "ranks disagree: rank %d called %s, but rank %d called %s", odd_rank, a,
                        ref_rank, b);
}

/* The verdict of step s, from every rank's post: the same on every rank. */
static int decide(shmtopo_comm_t *comm, uint64_t s)
{
    const int P = comm->size;
    for (int r = 0; r < P; r++) {
        const chan_header_t *h = header(comm, r);
        const chan_line_t *l = &h->line[s & 1];
        if (l->err) {
            /* a transport failure a leader forwards leaves the leaders out of step */
            if (l->err == ECOMM || l->err == ETIMEDOUT)
                comm->broken = 1;
            return shmtopo_fail(l->err, l->origin, "%.*s", MESSAGE, h->detail[s & 1].message);
        }
    }
    const uint64_t first = header(comm, 0)->line[s & 1].hash;
    int same = 1;
    for (int r = 1; r < P && same; r++)
        same = header(comm, r)->line[s & 1].hash == first;
    if (same)
        return 0;
    uint64_t *hashes = malloc((size_t)P * sizeof(*hashes));
    if (!hashes)
        return shmtopo_fail(ENOMEM, -1, "out of memory deciding an agreement");
    for (int r = 0; r < P; r++)
        hashes[r] = header(comm, r)->line[s & 1].hash;
    const int ref = plurality(hashes, NULL, P);
    int odd = 0;
    while (hashes[odd] == hashes[ref])
        odd++;
    free(hashes);
    return mismatch(shmtopo_world(comm, odd), &header(comm, odd)->detail[s & 1].sig,
                    shmtopo_world(comm, ref), &header(comm, ref)->detail[s & 1].sig);
}

/* Post, wait for every rank, decide. `message`: the whole text of this
 * rank's failure (err != 0), as every rank will raise it. */
static int post_and_decide(shmtopo_comm_t *comm, const shmtopo_sig_t *sig, int err, int origin,
                           const char *message, const void *data, size_t n)
{
    shmtopo_chan_t *chan = &comm->chan;
    const uint64_t s = ++chan->step;
    chan_header_t *me = header(comm, comm->rank);
    chan_line_t *line = &me->line[s & 1];
    me->detail[s & 1].sig = *sig;
    if (err)
        snprintf(me->detail[s & 1].message, MESSAGE, "%s", message);
    line->hash = sig_hash(sig);
    line->err = err;
    line->origin = origin;
    if (n)
        memcpy(line->data, data, n);
    shmtopo_post(&line->step, &me->waiters, s);
    for (int i = 1; i < comm->size; i++) {
        const int p = (comm->rank + i) % comm->size;
        chan_header_t *h = header(comm, p);
        if (shmtopo_wait(chan->win, &h->line[s & 1].step, &h->waiters, s, p,
                         shmtopo_kind_name(sig->kind)) < 0) {
            comm->broken = 1;
            return -1;
        }
    }
    return decide(comm, s);
}

int shmtopo_step(shmtopo_comm_t *comm, const shmtopo_sig_t *sig, int err, const void *data, size_t n)
{
    char message[MESSAGE] = "";
    if (err)
        snprintf(message, sizeof(message), "rank %d: %s", shmtopo_world(comm, comm->rank),
                 shmtopo_last_error());
    return post_and_decide(comm, sig, err, err ? shmtopo_world(comm, comm->rank) : -1, message,
                           data, n);
}

/* ---- across nodes ------------------------------------------------------------------ */

/* What a leader tells the others about its node's verdict. */
typedef struct node_record {
    int32_t err, origin;
    uint64_t hash;
    int32_t leader, weight;      /* the leader's job rank, the node's size */
    shmtopo_sig_t sig;
    char message[MESSAGE];
} node_record_t;

/* The job's verdict from the nodes' records, the same on every leader. */
static int decide_nodes(const node_record_t *recs, int n)
{
    for (int i = 0; i < n; i++)
        if (recs[i].err)
            return shmtopo_fail(recs[i].err, recs[i].origin, "%.*s", MESSAGE, recs[i].message);
    uint64_t *hashes = malloc((size_t)n * sizeof(*hashes));
    int *weights = malloc((size_t)n * sizeof(*weights));
    int rc = 0;
    if (!hashes || !weights) {
        rc = shmtopo_fail(ENOMEM, -1, "out of memory deciding an agreement");
        goto out;
    }
    for (int i = 0; i < n; i++) {
        hashes[i] = recs[i].hash;
        weights[i] = recs[i].weight;
    }
    const int ref = plurality(hashes, weights, n);
    for (int i = 0; i < n && rc == 0; i++)
        if (hashes[i] != hashes[ref])
            rc = mismatch(recs[i].leader, &recs[i].sig, recs[ref].leader, &recs[ref].sig);
out:
    free(hashes);
    free(weights);
    return rc;
}

/* After the node's verdict (rc): the leaders exchange theirs and each posts
 * the job's verdict to its node in one more step. */
static int job_verdict(shmtopo_comm_t *comm, const shmtopo_sig_t *sig, int rc)
{
    if (comm->broken)
        return -1; /* this rank left the channel: its node fails without it */
    int err = 0, origin = -1;
    char message[MESSAGE] = "";
    if (comm->rank == 0) {
        node_record_t mine, *all = calloc((size_t)comm->nnodes, sizeof(*all));
        memset(&mine, 0, sizeof(mine));
        mine.err = rc < 0 ? errno : 0;
        mine.origin = rc < 0 ? shmtopo_last_error_rank() : -1;
        mine.hash = sig_hash(sig);
        mine.leader = shmtopo_world(comm, 0);
        mine.weight = comm->size;
        mine.sig = *sig;
        if (rc < 0)
            snprintf(mine.message, sizeof(mine.message), "%s", shmtopo_last_error());
        int cb = all ? comm->leaders.allgather(&mine, all, sizeof(mine), comm->leaders.group) : -1;
        if (!all) {
            err = ENOMEM;
            snprintf(message, sizeof(message), "rank %d: out of memory for the leaders' exchange",
                     mine.leader);
        } else if (cb != 0) {
            err = cb == ETIMEDOUT ? ETIMEDOUT : ECOMM;
            snprintf(message, sizeof(message), "rank %d: the exchange between node leaders %s",
                     mine.leader, err == ETIMEDOUT ? "timed out" : "failed");
        } else if (decide_nodes(all, comm->nnodes) < 0) {
            err = errno;
            origin = shmtopo_last_error_rank();
            snprintf(message, sizeof(message), "%s", shmtopo_last_error());
        }
        if (err && origin < 0)
            origin = mine.leader;
        free(all);
    }
    shmtopo_sig_t verdict = shmtopo_sig(SHMTOPO_KIND_VERDICT);
    return post_and_decide(comm, &verdict, err, origin, message, NULL, 0);
}

/* ---- the agreement ------------------------------------------------------------------ */

int shmtopo_agree(shmtopo_comm_t *comm, const shmtopo_sig_t *sig, int err, const void *mine, void *all,
                  size_t n)
{
    if (shmtopo_comm_usable(comm, shmtopo_kind_name(sig->kind)) < 0)
        return -1;
    int rc;
    if (n <= SHMTOPO_INLINE) {
        rc = shmtopo_step(comm, sig, err, mine, n);
        for (int r = 0; rc == 0 && n && r < comm->size; r++)
            memcpy((char *)all + (size_t)r * n, shmtopo_step_data(comm, r), n);
    } else {
        /* larger contributions go through the scratch buffers, in chunks; the
         * first chunk's step is the agreement, so a failure stops every rank
         * at the same step */
        const size_t B = comm->chan.buffer;
        rc = 0;
        for (size_t off = 0; off < n && rc == 0; off += B) {
            const size_t m = n - off < B ? n - off : B;
            const int which = shmtopo_chan_next_buffer(comm);
            if (!err)
                memcpy(shmtopo_chan_buffer(comm, comm->rank, which), (const char *)mine + off, m);
            rc = shmtopo_step(comm, sig, off == 0 ? err : 0, NULL, 0);
            for (int r = 0; rc == 0 && r < comm->size; r++)
                memcpy((char *)all + (size_t)r * n + off, shmtopo_chan_buffer(comm, r, which), m);
        }
    }
    return comm->nnodes > 1 ? job_verdict(comm, sig, rc) : rc;
}

/* Check what Python or C passed before agreeing on it. */
static int check_sig(const shmtopo_comm_t *comm, const shmtopo_sig_t *sig)
{
    if (sig->kind < SHMTOPO_KIND_BARRIER || sig->kind >= SHMTOPO_KIND_VERDICT)
        return shmtopo_fail(EINVAL, -1, "unknown operation kind %d", sig->kind);
    if (sig->dtype != -1 && !shmtopo_dtype_size(sig->dtype))
        return shmtopo_fail(EINVAL, -1, "unknown element type %d", sig->dtype);
    if (sig->op != -1 && shmtopo_reduce_check(sig->dtype, sig->op) < 0)
        return -1;
    const int world = comm->world_size ? comm->world_size : comm->size;
    if (sig->root != -1 && (sig->root < 0 || sig->root >= world))
        return shmtopo_fail(EINVAL, -1, "root %d out of range [0, %d)", sig->root, world);
    return 0;
}

int shmtopo_agree_call(shmtopo_comm_t *comm, const shmtopo_sig_t *sig)
{
    if (!sig)
        return shmtopo_fail(EINVAL, -1, "agree_call: NULL signature");
    if (shmtopo_comm_usable(comm, shmtopo_kind_name(sig->kind)) < 0)
        return -1;
    int err = check_sig(comm, sig) < 0 ? errno : 0;
    return shmtopo_agree(comm, sig, err, NULL, NULL, 0);
}

int shmtopo_reject(shmtopo_comm_t *comm, int kind, const char *reason)
{
    if (shmtopo_comm_usable(comm, shmtopo_kind_name(kind)) < 0)
        return -1;
    shmtopo_fail(EINVAL, -1, "%s", reason && *reason ? reason : "invalid arguments");
    shmtopo_sig_t sig = shmtopo_sig(kind);
    if (shmtopo_agree(comm, &sig, EINVAL, NULL, NULL, 0) == 0)
        return shmtopo_fail(EINVAL, -1, "reject: the agreement went through"); /* cannot happen */
    return -1;
}

void shmtopo_chan_wake(shmtopo_win_t *win)
{
    chan_header_t *me = (chan_header_t *)win->base[win->rank];
    if (!me)
        return;
    shmtopo_wake(&me->line[0].step);
    shmtopo_wake(&me->line[1].step);
}

/* ---- the channel's lifetime ---------------------------------------------------------- */

int shmtopo_chan_create(shmtopo_comm_t *comm, shmtopo_exchange_fn exchange)
{
    shmtopo_chan_t *chan = &comm->chan;
    chan->buffer = comm->config.coll_buffer;
    chan->header = shmtopo_round_up(sizeof(chan_header_t), (size_t)sysconf(_SC_PAGESIZE));
    chan->step = 0;
    chan->tmp = malloc(chan->buffer);
    if (!chan->tmp)
        return shmtopo_fail(ENOMEM, -1, "out of memory for the comm's scratch");
    shmtopo_win_attr_t attr = {.backend = SHMTOPO_BACKEND_DEFAULT, .fence_alg = SHMTOPO_FENCE_DEFAULT};
    void *base;
    if (shmtopo_win_alloc_via(comm, chan->header + 3 * chan->buffer, &attr, exchange, &base,
                              &chan->win) < 0) {
        int err = errno;
        free(chan->tmp);
        chan->tmp = NULL;
        errno = err;
        return -1;
    }
    chan->win->is_channel = 1;
    return 0;
}

int shmtopo_chan_free(shmtopo_comm_t *comm)
{
    shmtopo_win_t *win = comm->chan.win;
    comm->chan.win = NULL;
    free(comm->chan.tmp);
    comm->chan.tmp = NULL;
    if (win)
        shmtopo_win_delete(win); /* every rank agreed to free: nobody waits on it any more */
    return 0;
}

void shmtopo_chan_abandon(shmtopo_comm_t *comm, int origin)
{
    shmtopo_win_t *win = comm->chan.win;
    comm->chan.win = NULL;
    free(comm->chan.tmp);
    comm->chan.tmp = NULL;
    if (win)
        shmtopo_win_abandon_because(win, origin);
}
