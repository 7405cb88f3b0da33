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
 * The channel (chan.c) is the comm's own shared memory, made with the comm: per rank
 * a header of step lines and three scratch buffers. A step posts a sequence
 * number that only grows, with the signature's hash, the validity and up to
 * SHMTOPO_INLINE bytes of data in the same cache line; the full signature
 * and message lie beside it, read only when something is wrong. Each rank
 * has a ring of RING lines and details, one per step mod RING.
 *
 * Running ahead (SHMTOPO_RUN_AHEAD=1, one node): a small bcast or reduce
 * waits only for the ranks whose data it needs (a bcast's receivers for the
 * root, a reduce's root for everyone; a bcast's root and a reduce's other
 * ranks for nobody), so a rank may post up to LAG steps past the slowest.
 * Every step is still judged on every rank from all ranks' posts: at once
 * where a rank waited for all, else at a later step, once every rank has
 * posted it ("settled"). A rank rewrites a line RING = 2 * LAG steps later,
 * after every rank has posted the LAG-th step after it, by which time each
 * has judged it. A failure judged late is raised at that later call, with
 * the same message as where it was judged at once, and leaves the comm
 * broken on every rank (the calls in between cannot be undone). */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chan.h"
#include "internal.h"
#include "state.h"

static int settle(shmtopo_comm_t *comm, uint64_t upto, const char *what);

/* A chunk starting at step s + 1 writes buffer (s + 1) % 3, last read by
 * the chunk of step s - 2, whose readers were done when they posted step
 * s - 1: a step every rank has posted unless some ran ahead since, so a
 * rank that ran ahead settles first. A failure breaks the comm, and the
 * step that follows fails with it. */
int shmtopo_chan_next_buffer(shmtopo_comm_t *comm)
{
    if (comm->chan.settled < comm->chan.step)
        (void)settle(comm, comm->chan.step, "the scratch buffers");
    return (int)((comm->chan.step + 1) % 3);
}

const void *shmtopo_step_data(const shmtopo_comm_t *comm, int rank)
{
    return chan_header(comm, rank)->line[chan_slot(comm->chan.step)].data;
}

const void *shmtopo_step_payload(const shmtopo_comm_t *comm, int rank, size_t n)
{
    return n <= SHMTOPO_INLINE ? shmtopo_step_data(comm, rank) : chan_ahead(chan_header(comm, rank), chan_slot(comm->chan.step));
}

static const chan_line_t *line_of(const shmtopo_comm_t *comm, int rank, uint64_t s)
{
    return &chan_header(comm, rank)->line[chan_slot(s)];
}

/* Whether a posted line agrees with this rank's step: no failure, and the
 * signature of `hash`. Branch-free: it is checked for every peer of every
 * step. */
static inline int line_agrees(const chan_line_t *l, uint64_t hash)
{
    return ((uint32_t)l->err | (l->hash ^ hash)) == 0;
}


/* ---- describing a call ---------------------------------------------------- */

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
    if (sig->flags & SHMTOPO_SIG_DELEGATED)
        FIELD("delegated to MPI");
    switch (sig->flags & SHMTOPO_SIG_DELEGATED ? 0 : sig->kind) {
    case SHMTOPO_KIND_BCAST: case SHMTOPO_KIND_REDUCE: case SHMTOPO_KIND_ALLREDUCE:
    case SHMTOPO_KIND_ALLGATHER: case SHMTOPO_KIND_REDUCE_SCATTER: case SHMTOPO_KIND_ALLTOALL:
    case SHMTOPO_KIND_GATHER: case SHMTOPO_KIND_SCATTER: case SHMTOPO_KIND_GATHERV:
    case SHMTOPO_KIND_SCATTERV: case SHMTOPO_KIND_ALLGATHERV: case SHMTOPO_KIND_ALLTOALLV:
    case SHMTOPO_KIND_SCAN: case SHMTOPO_KIND_EXSCAN: case SHMTOPO_KIND_ALLTOALLW:
        FIELD("count %llu", (unsigned long long)sig->count);
        if (sig->flags & SHMTOPO_SIG_COUNTS) /* short: it only has to tell arrays apart */
            FIELD("counts #%08llx", (unsigned long long)(sig->extra >> 32));
        FIELD("%s", shmtopo_dtype_name(sig->dtype));
        if (sig->op >= 0)
            FIELD("%s", shmtopo_op_name(sig->op));
        if (sig->root >= 0)
            FIELD("root %d", sig->root);
        if (sig->alg > 0)
            FIELD("%s", shmtopo_coll_alg_name(sig->alg));
        if (sig->flags & SHMTOPO_SIG_WINDOW)
            FIELD("in a window at offset %llu", (unsigned long long)sig->extra);
        if (sig->flags & SHMTOPO_SIG_IN_PLACE)
            FIELD("in place");
        if (sig->flags & SHMTOPO_SIG_SINGLE_COPY)
            FIELD("single copy");
        break;
    case SHMTOPO_KIND_WIN_ALLOC:
        FIELD("backend %s", shmtopo_backend_name(sig->dtype));
        FIELD("fence %s", shmtopo_fence_alg_name(sig->alg));
        FIELD("%s", sig->extra & 1 ? "contiguous" : "separate parts");
        if (sig->extra & 2)
            FIELD("symmetric");
        FIELD("placement %s", (sig->extra >> 2 & 3) == SHMTOPO_PLACEMENT_INTERLEAVE ? "interleave" : "local");
        if (sig->extra >> 4 & 3)
            FIELD("huge pages %s", (sig->extra >> 4 & 3) == SHMTOPO_HUGE_REQUIRED ? "required" : "if available");
        break;
    case SHMTOPO_KIND_WIN_FREE:
        FIELD("window #%llu", (unsigned long long)sig->extra);
        break;
    case SHMTOPO_KIND_TOPO_SHARE:
        FIELD("source %s", shmtopo_topo_source_name(sig->alg));
        if (sig->op > 0)
            FIELD("io %s", sig->op == 1 ? "important" : "all");
        break;
    case SHMTOPO_KIND_BIND:
        /* the names travel in the signature, so that the core needs no hwloc */
        FIELD("to %.8s", (const char *)&sig->extra);
        FIELD("%.8s", (const char *)&sig->count);
        break;
    case SHMTOPO_KIND_SPLIT:
        FIELD("by %.8s", (const char *)&sig->extra);
        break;
    }
    if (strcmp(sep, ", ") == 0 && n >= 0 && (size_t)n < len)
        snprintf(out + n, len - (size_t)n, ")");
#undef FIELD
}

/* ---- deciding ------------------------------------------------------------------ */

/* What a step says, summed up: the first failure, or the signatures posted
 * and by how many ranks. A node's leader sends its summary to the other
 * leaders, so that the job decides on all ranks' signatures at once. */
#define MAX_GROUPS 4

typedef struct sig_group {
    uint64_t hash;
    int32_t count;           /* ranks that posted it */
    int32_t first;           /* the lowest job rank among them */
    shmtopo_sig_t sig;
} sig_group_t;

typedef struct summary {
    int32_t err, origin;     /* the first failing rank's errno and job rank */
    int32_t ngroups;
    uint32_t vote;           /* the AND of every rank's vote */
    sig_group_t groups[MAX_GROUPS];
    char message[MESSAGE];
} summary_t;

/* Count a signature in; more distinct ones than MAX_GROUPS are dropped
 * (those ranks disagree anyway; the blame then falls on a kept one). */
static void add_group(summary_t *sum, uint64_t hash, int count, int first, const shmtopo_sig_t *sig)
{
    for (int g = 0; g < sum->ngroups; g++)
        if (sum->groups[g].hash == hash) {
            sum->groups[g].count += count;
            if (first < sum->groups[g].first)
                sum->groups[g].first = first;
            return;
        }
    if (sum->ngroups < MAX_GROUPS)
        sum->groups[sum->ngroups++] = (sig_group_t){hash, count, first, *sig};
}

static void summarize(const shmtopo_comm_t *comm, uint64_t s, summary_t *sum)
{
    memset(sum, 0, sizeof(*sum));
    sum->vote = 1;
    for (int r = 0; r < comm->size; r++)
        sum->vote &= line_of(comm, r, s)->vote;
    for (int r = 0; r < comm->size && !sum->err; r++) {
        const chan_header_t *h = chan_header(comm, r);
        const chan_line_t *l = line_of(comm, r, s);
        if (l->err) {
            sum->err = l->err;
            sum->origin = l->origin;
            snprintf(sum->message, sizeof(sum->message), "%.*s", MESSAGE - 1, h->detail[chan_slot(s)].message);
        }
    }
    for (int r = 0; r < comm->size && !sum->err; r++) {
        const chan_header_t *h = chan_header(comm, r);
        add_group(sum, line_of(comm, r, s)->hash, 1, shmtopo_world(comm, r), &h->detail[chan_slot(s)].sig);
    }
}

/* Whether ranks whose signatures differ may all hand the call to MPI
 * instead: some rank delegates it (SHMTOPO_SIG_DELEGATED: its arguments are
 * MPI's alone, such as a derived datatype where the others pass arrays of
 * the same type signature), every rank names the same operation and root,
 * the ranks that would run it here agree among themselves, and none ran
 * past the step (a rank that ran ahead cannot come back to MPI). */
static int all_may_delegate(const summary_t *sum)
{
    int delegated = 0, here = 0;
    uint64_t op = 0; /* the reduction's op where known: 1 + its code, or SHMTOPO_SIG_USER_OP */
    for (int g = 0; g < sum->ngroups; g++) {
        const shmtopo_sig_t *a = &sum->groups[g].sig, *first = &sum->groups[0].sig;
        if ((a->flags & SHMTOPO_SIG_RUN_AHEAD) || a->kind != first->kind || a->root != first->root)
            return 0;
        const int by_mpi = (a->flags & SHMTOPO_SIG_DELEGATED) != 0;
        const uint64_t its_op = by_mpi ? a->extra : a->op >= 0 ? (uint64_t)a->op + 1 : 0;
        if (its_op && op && its_op != op) /* different ops: erroneous, in MPI too */
            return 0;
        op = its_op ? its_op : op;
        delegated |= by_mpi;
        here += !by_mpi;
    }
    return delegated && here <= 1;
}

/* The verdict of a summary, the same wherever it is computed: the failure;
 * or, when signatures differ, blame the lowest rank outside the signature
 * most ranks posted (ties: the one of the lowest rank), naming both calls.
 * Judged at once (`at_once`: every rank is still in this call), ranks that
 * differ only in that some hand the call to MPI all do: ECANCELED, "hand
 * it to MPI", the same on every rank. */
static int verdict(const summary_t *sum, int at_once)
{
    if (sum->err)
        return shmtopo_fail(sum->err, sum->origin, "%.*s", MESSAGE, sum->message);
    if (sum->ngroups <= 1)
        return 0;
    if (at_once && all_may_delegate(sum))
        return shmtopo_fail(SHMTOPO_EDELEGATED, -1, "%s: a rank hands the call to MPI, and so does every rank",
                            shmtopo_kind_name(sum->groups[0].sig.kind));
    int ref = 0;
    for (int g = 1; g < sum->ngroups; g++) {
        const sig_group_t *a = &sum->groups[g], *b = &sum->groups[ref];
        if (a->count > b->count || (a->count == b->count && a->first < b->first))
            ref = g;
    }
    int odd = -1;
    for (int g = 0; g < sum->ngroups; g++)
        if (g != ref && (odd < 0 || sum->groups[g].first < sum->groups[odd].first))
            odd = g;
    char a[160], b[160];
    describe(&sum->groups[odd].sig, a, sizeof(a));
    describe(&sum->groups[ref].sig, b, sizeof(b));
    return shmtopo_fail(EINVAL, sum->groups[odd].first, "ranks disagree: rank %d called %s, but rank %d called %s",
                        sum->groups[odd].first, a, sum->groups[ref].first, b);
}

/* ---- running ahead: judging steps later ----------------------------------------- */

static int posted_by_all(const shmtopo_comm_t *comm, uint64_t s)
{
    for (int r = 0; r < comm->size; r++)
        if (atomic_load_explicit(&line_of(comm, r, s)->step, memory_order_acquire) < s)
            return 0;
    return 1;
}

/* The verdict of step s from every rank's post (all posted it): 0, or -1
 * with the same errno and message on every rank that judges it. */
static int judge(const shmtopo_comm_t *comm, uint64_t s)
{
    const uint64_t hash = line_of(comm, comm->rank, s)->hash;
    int clean = 1;
    for (int r = 0; r < comm->size; r++) {
        const chan_line_t *l = line_of(comm, r, s);
        clean &= line_agrees(l, hash);
    }
    if (clean)
        return 0;
    summary_t sum;
    summarize(comm, s, &sum);
    return verdict(&sum, 0); /* judged late: ranks may have gone on */
}

/* Whether a rank may have run past step s (it posted a call that runs
 * ahead): a failure of s then reaches it only at a later step. */
static int someone_ran_ahead(const shmtopo_comm_t *comm, uint64_t s)
{
    for (int r = 0; r < comm->size; r++)
        if (chan_header(comm, r)->detail[chan_slot(s)].sig.flags & SHMTOPO_SIG_RUN_AHEAD)
            return 1;
    return 0;
}

/* A failure ranks may have run past: the calls they made since cannot be
 * undone, so the comm is broken, and this rank leaves the channel so that
 * nobody waits for it (a peer then judges the failed step itself: see
 * failed_wait). Keeps the failure's errno and message. */
static void break_behind(shmtopo_comm_t *comm)
{
    const int err = errno;
    comm->broken = 1;
    shmtopo_chan_leave(comm, comm->rank);
    errno = err;
}

/* A wait failed (a peer died, left, or the time ran out): the comm is
 * broken. Where a peer left because of a step this rank ran past, raise
 * that step's verdict, as that peer did, rather than the departure. */
static int failed_wait(shmtopo_comm_t *comm)
{
    comm->broken = 1;
    for (uint64_t t = comm->chan.settled + 1; t <= comm->chan.step && posted_by_all(comm, t); t++)
        if (judge(comm, t) < 0)
            return -1;
    return -1;
}

static int wait_all(shmtopo_comm_t *comm, uint64_t s, const char *what)
{
    for (int i = 1; i < comm->size; i++) {
        const int p = (comm->rank + i) % comm->size;
        if (shmtopo_chan_wait(comm, p, s, what, 1) < 0)
            return failed_wait(comm);
    }
    return 0;
}

/* Judge the steps after chan.settled up to `upto` once every rank posted
 * them. A failure found here was judged at once only by the ranks that
 * waited for all: it breaks the comm. */
static int settle(shmtopo_comm_t *comm, uint64_t upto, const char *what)
{
    shmtopo_chan_t *chan = &comm->chan;
    if (upto <= chan->settled)
        return 0;
    if (comm->broken) {
        shmtopo_comm_unusable(comm, what);
        return -1;
    }
    if (wait_all(comm, upto, what) < 0)
        return -1;
    for (uint64_t t = chan->settled + 1; t <= upto; t++) {
        if (judge(comm, t) < 0) {
            break_behind(comm);
            return -1;
        }
        chan->settled = t;
    }
    return 0;
}

/* ---- a step ---------------------------------------------------------------------- */

/* Copy a step's inline data (n <= SHMTOPO_INLINE) with moves of 8 bytes or
 * fewer, the last overlapping: a call to memcpy would give the common step a
 * frame, and the data is mostly one element. */
static inline __attribute__((always_inline)) void copy_inline(unsigned char *dst, const unsigned char *src, size_t n)
{
    if (n == 0) /* a barrier, a later chunk's step: the most common */
        return;
    if (n >= 8) {
        for (size_t i = 0; i + 8 < n; i += 8)
            __builtin_memcpy(dst + i, src + i, 8);
        __builtin_memcpy(dst + n - 8, src + n - 8, 8);
    } else if (n >= 4) {
        __builtin_memcpy(dst, src, 4);
        __builtin_memcpy(dst + n - 4, src + n - 4, 4);
    } else {
        dst[0] = src[0];
        dst[n - 1] = src[n - 1];
        dst[n / 2] = src[n / 2];
    }
}

/* Write this rank's line of step s (`me`: its header) and the signature
 * beside it, not yet posted: the line. */
static inline __attribute__((always_inline)) chan_line_t *write_line(chan_header_t *me, uint64_t s,
                                                                     const shmtopo_sig_t *sig, uint64_t hash,
                                                                     int err, int origin, const char *message,
                                                                     uint32_t vote, const void *data, size_t n)
{
    const unsigned slot = chan_slot(s);
    chan_line_t *line = &me->line[slot];
    /* The detail keeps the signature last posted in this slot: a step that
     * repeats it (the same hash) leaves it. An own count is not in the hash,
     * so a signature with one is always written. */
    if (line->hash != hash || (sig->flags & SHMTOPO_SIG_OWN_COUNT)) {
        me->detail[slot].sig = *sig;
        line->hash = hash;
    }
    if (err)
        snprintf(me->detail[slot].message, MESSAGE, "%s", message);
    line->err = err;
    line->origin = origin;
    line->vote = vote;
    if (n > SHMTOPO_INLINE) /* a call that runs ahead, up to SHMTOPO_AHEAD_MAX */
        memcpy(chan_ahead(me, slot), data, n);
    else
        copy_inline(line->data, data, n);
    return line;
}

/* Write this rank's line of step s, the signature beside it, and post it. */
static inline void write_step(shmtopo_comm_t *comm, uint64_t s, const shmtopo_sig_t *sig, uint64_t hash,
                              int err, int origin, const char *message, uint32_t vote, const void *data,
                              size_t n)
{
    chan_header_t *me = chan_header(comm, comm->rank);
    chan_line_t *line = write_line(me, s, sig, hash, err, origin, message, vote, data, n);
    shmtopo_post(&line->step, &me->waiters, s);
}

/* Post step chan.step + 1: first, every rank must have posted the LAG-th
 * step before it (its line is then free to rewrite; always so unless some
 * rank ran ahead). */
static inline int post(shmtopo_comm_t *comm, const shmtopo_sig_t *sig, uint64_t hash, int err, int origin,
                       const char *message, uint32_t vote, const void *data, size_t n)
{
    shmtopo_chan_t *chan = &comm->chan;
    if (chan->settled + LAG < chan->step + 1 &&
        settle(comm, chan->step + 1 - LAG, shmtopo_kind_name(sig->kind)) < 0)
        return -1;
    const uint64_t s = ++chan->step;
    write_step(comm, s, sig, hash, err, origin, message, vote, data, n);
    return 0;
}

/* Wait for every other rank's post of step s (the next rank up first) and
 * check each line as it comes: 1 when every rank posted `hash` with no
 * failure, 0 when the step must be judged from the details, -1 when a wait
 * failed (the comm is then broken). *votep: the AND of all votes. The
 * call's name, for a wait's messages, is looked up only where a post was
 * not there at once. `spin`: as shmtopo_chan_wait's. */
static inline __attribute__((always_inline)) int await_step(shmtopo_comm_t *comm, uint64_t s, uint64_t hash, int kind,
                                                            int mine_failed, int spin, uint32_t *votep)
{
    const unsigned slot = chan_slot(s);
    const int size = comm->size, me = comm->rank;
    int clean = !mine_failed;
    uint32_t votes = chan_header(comm, me)->line[slot].vote;
    for (int i = 1, p = me + 1; i < size; i++, p++) {
        if (p == size)
            p = 0;
        const chan_line_t *l = &chan_header(comm, p)->line[slot];
        if (atomic_load_explicit(&l->step, memory_order_acquire) < s &&
            shmtopo_chan_wait(comm, p, s, shmtopo_kind_name(kind), spin) < 0)
            return failed_wait(comm);
        clean &= line_agrees(l, hash);
        votes &= l->vote;
    }
    *votep = votes;
    return clean;
}

/* A step every rank posted that is not clean: its summary, and what the
 * failure does to the comm. */
static void summarize_failed(shmtopo_comm_t *comm, uint64_t s, summary_t *sum)
{
    summarize(comm, s, sum);
    /* a transport failure a leader forwards leaves the leaders out of step */
    if (sum->err == ECOMM || sum->err == ETIMEDOUT)
        comm->broken = 1;
    /* a rank that ran past this step learns of the failure only later */
    if (shmtopo_runs_ahead(comm) && someone_ran_ahead(comm, s))
        break_behind(comm);
}

/* Post, wait for every rank, sum up. `message`: the whole text of this
 * rank's failure (err != 0), as every rank will raise it. 0, or -1 when a
 * wait failed or an earlier step this rank ran past failed (the comm is
 * then broken). */
static inline int post_and_gather(shmtopo_comm_t *comm, const shmtopo_sig_t *sig, uint64_t hash, int err, int origin,
                           const char *message, uint32_t vote, const void *data, size_t n, summary_t *sum)
{
    shmtopo_chan_t *chan = &comm->chan;
    if (comm->broken) /* a buffer's settling failed in this call (shmtopo_chan_next_buffer): its error stands */
        return -1;
    if (post(comm, sig, hash, err, origin, message, vote, data, n) < 0)
        return -1;
    const uint64_t s = chan->step;
    uint32_t all_votes = 1; /* set by await_step whenever it returns 0 or 1 */
    const int clean = await_step(comm, s, hash, sig->kind, err, 1, &all_votes);
    if (clean < 0)
        return -1;
    /* steps this rank ran past, judged now that everyone has posted them */
    if (chan->settled + 1 < s && settle(comm, s - 1, shmtopo_kind_name(sig->kind)) < 0)
        return -1;
    chan->settled = s;
    /* The common case, decided from the lines alone: every rank fine and
     * posting this signature (no summary to build). */
    if (clean) {
        sum->err = 0;
        sum->vote = all_votes;
        sum->ngroups = 1;
        if (comm->nnodes > 1) /* only the leaders' exchange reads the group */
            sum->groups[0] = (sig_group_t){hash, comm->size, shmtopo_world(comm, 0), *sig};
        return 0;
    }
    summarize_failed(comm, s, sum);
    return 0;
}

static inline int step_summary(shmtopo_comm_t *comm, const shmtopo_sig_t *sig, uint64_t hash, int err, uint32_t vote,
                        const void *data, size_t n, summary_t *sum)
{
    char message[MESSAGE]; /* not "" -initialised: that would clear it all on every step */
    message[0] = '\0';
    if (err)
        snprintf(message, sizeof(message), "rank %d: %s", shmtopo_world(comm, comm->rank),
                 shmtopo_last_error());
    return post_and_gather(comm, sig, hash, err, err ? shmtopo_world(comm, comm->rank) : -1, message, vote,
                           data, n, sum);
}

int shmtopo_step_ahead(shmtopo_comm_t *comm, const shmtopo_sig_t *sig, const void *data, size_t n, int from)
{
    const char *what = shmtopo_kind_name(sig->kind);
    const uint64_t hash = shmtopo_sig_hash(sig);
    if (post(comm, sig, hash, 0, -1, "", 1, data, n) < 0)
        return -1;
    shmtopo_chan_t *chan = &comm->chan;
    const uint64_t s = chan->step;
    if (from < 0 || from == comm->rank)
        return 0;
    if (from < comm->size) {
        chan_header_t *h = chan_header(comm, from);
        if (shmtopo_chan_wait(comm, from, s, what, 1) < 0)
            return failed_wait(comm);
        const chan_line_t *l = &h->line[chan_slot(s)];
        if (line_agrees(l, hash))
            return 0;
    }
    /* every rank's data needed, or something wrong in what this rank saw:
     * judge this step (and those before) from every rank's post */
    if (settle(comm, s, what) < 0)
        return -1;
    return 0;
}

/* The verdict of a step every rank posted that is not clean. Out of line,
 * so that the common step's frame holds no summary. */
static __attribute__((noinline)) int judge_unclean(shmtopo_comm_t *comm, uint64_t s)
{
    summary_t sum;
    summarize_failed(comm, s, &sum);
    return verdict(&sum, 1);
}

static __attribute__((noinline)) int step_general(shmtopo_comm_t *comm, const shmtopo_sig_t *sig, uint64_t hash, int err,
                                                  const void *data, size_t n)
{
    summary_t sum;
    if (step_summary(comm, sig, hash, err, 1, data, n, &sum) < 0)
        return -1;
    return sum.err == 0 && sum.ngroups == 1 ? 0 : verdict(&sum, 1);
}

/* The rest of the common step this rank just posted, which did not find
 * every rank there, and clean, after its spin: wake the peers that sleep on
 * this rank (`wake`), wait for every rank without spinning again (`spun`),
 * then judge. The step, its hash and its kind are read back from this
 * rank's line and detail, so that the caller keeps none of them. */
static __attribute__((noinline)) int finish_step(shmtopo_comm_t *comm, int wake, int spun)
{
    const uint64_t s = comm->chan.step;
    chan_header_t *me = chan_header(comm, comm->rank);
    chan_line_t *mine = &me->line[chan_slot(s)];
    if (wake)
        shmtopo_wake(&mine->step);
    uint32_t votes;
    const int clean = await_step(comm, s, mine->hash, me->detail[chan_slot(s)].sig.kind, 0, !spun, &votes);
    if (clean < 0)
        return -1;
    comm->chan.settled = s;
    return clean ? 0 : judge_unclean(comm, s);
}

/* The common step's look at the lines of the ranks whose parts lie in
 * [b, end), at offset `at`, each after the short spin a wait starts with:
 * 1 when each posted step s with `hash` and no failure, 0 at a line to
 * judge, -1 at a rank not there after the spin. */
static inline __attribute__((always_inline)) int peers_posted(char *const *b, char *const *end, size_t at,
                                                              uint64_t s, uint64_t hash)
{
    for (; b < end; b++) {
        chan_line_t *l = (chan_line_t *)(*b + at);
        if (!shmtopo_spin_until(&l->step, s))
            return -1;
        if (!line_agrees(l, hash))
            return 0;
    }
    return 1;
}

int shmtopo_step_hashed(shmtopo_comm_t *comm, const shmtopo_sig_t *sig, uint64_t hash, int err,
                        const void *data, size_t n)
{
    shmtopo_chan_t *chan = &comm->chan;
    /* The common step: nothing to report, the data in the line, no earlier
     * step left to judge (so its line is free). */
    if (err || n > SHMTOPO_INLINE || chan->settled != chan->step || comm->broken)
        return step_general(comm, sig, hash, err, data, n);
    const uint64_t s = ++chan->step;
    chan_header_t *me = chan_header(comm, comm->rank);
    chan_line_t *mine = write_line(me, s, sig, hash, 0, -1, NULL, 1, data, n);
    if (shmtopo_publish(&mine->step, &me->waiters, s))
        return finish_step(comm, 1, 0);
    /* Ask for the next step's line now, by a store of the value it holds
     * (no reader sees a change): its ownership is then on its way while this
     * rank waits here, instead of being fetched when it posts there. The
     * line is found from this one's offset in the ring, which the loop below
     * needs anyway (chan_slot(s + 1) costs this path three instructions more). */
    const size_t at = (size_t)((char *)mine - (char *)me);
    chan_line_t *next = (chan_line_t *)((char *)me->line + (at + sizeof(*mine)) % sizeof(me->line));
    __atomic_store_n(&next->vote, next->vote, __ATOMIC_RELAXED);
    /* Every peer's line, the ranks after this one first (as a wait takes
     * them), each after the short spin a wait starts with: where all posted
     * this signature with no failure, the step is done. Anything else (a
     * longer wait, a line to judge) goes on in finish_step, a tail call, so
     * that this path calls nothing. */
    char *const *base = chan->win->base;
    const int after = peers_posted(base + comm->rank + 1, base + comm->size, at, s, hash);
    const int found = after > 0 ? peers_posted(base, base + comm->rank, at, s, hash) : after;
    if (found <= 0)
        return finish_step(comm, 0, found < 0);
    chan->settled = s;
    return 0;
}

/* ---- across nodes ------------------------------------------------------------------ */

int shmtopo_leaders_allgather(shmtopo_comm_t *comm, const void *mine, void *all, size_t n)
{
    const int leader = shmtopo_world(comm, 0);
    if (!all)
        return shmtopo_fail(ENOMEM, leader, "rank %d: out of memory for the leaders' exchange", leader);
    shmtopo_release_armed(comm); /* MPI's lock, held by a thread waiting for ours, would never come */
    const int cb = comm->leaders.allgather(mine, all, n, comm->leaders.group);
    if (cb == 0)
        return 0;
    return shmtopo_fail(cb == ETIMEDOUT ? ETIMEDOUT : ECOMM, leader, "rank %d: the exchange between node leaders %s",
                        leader, cb == ETIMEDOUT ? "timed out" : "failed");
}

/* A small payload the job folds on the way through its agreement
 * (shmtopo_agree_fold): each leader's node part, then the job's. */
typedef struct fold {
    size_t n, count;
    int dtype, op;    /* op < 0: the job's payload is the one node part there is (a bcast's) */
    uint64_t holds;   /* this node has a part (in data) */
    unsigned char data[SHMTOPO_INLINE];
} fold_t;

/* What each leader sends the others: its node's summary and its part of
 * the payload, if any (every agreement across nodes sends the same size, so
 * that a rank that agrees without a payload meets those that fold one). */
typedef struct node_row {
    summary_t sum;
    uint64_t holds;
    unsigned char data[SHMTOPO_INLINE];
} node_row_t;

/* The job's payload from the nodes' parts (rows of `stride` bytes, each a
 * word at `holds` saying whether the node has a part, its n bytes at
 * `data`): folded in node order (every leader gets the same bits), or, for
 * op < 0 (a bcast's), the first part a node holds. */
static int combine_parts(void *out, const unsigned char *rows, size_t stride, size_t holds, size_t data,
                         int nnodes, size_t n, size_t count, int dtype, int op)
{
    int have = 0;
    for (int i = 0; i < nnodes; i++) {
        const unsigned char *row = rows + (size_t)i * stride;
        uint64_t held;
        memcpy(&held, row + holds, sizeof(held));
        if (!held)
            continue;
        if (have && op < 0)
            break;
        if (!have)
            memcpy(out, row + data, n);
        else if (shmtopo_reduce_local(out, row + data, count, dtype, op) < 0)
            return -1;
        have = 1;
    }
    return have ? 0 : shmtopo_fail(EPROTO, -1, "%s: no node holds the data", shmtopo_kind_name(SHMTOPO_KIND_BCAST));
}

int shmtopo_leaders_combine(shmtopo_comm_t *comm, void *part, int holds, size_t count, int dtype, int op)
{
    const size_t n = count * shmtopo_dtype_size(dtype), row = sizeof(uint64_t) + n;
    unsigned char *rows = malloc((size_t)(comm->nnodes + 1) * row), *mine = rows ? rows + comm->nnodes * row : NULL;
    if (mine) {
        const uint64_t held = holds != 0;
        memcpy(mine, &held, sizeof(held));
        memcpy(mine + sizeof(held), part, n);
    }
    int rc = shmtopo_leaders_allgather(comm, mine, rows, row);
    if (rc == 0)
        rc = combine_parts(part, rows, row, 0, sizeof(uint64_t), comm->nnodes, n, count, dtype, op);
    free(rows);
    return rc;
}

/* The leaders exchange their nodes' summaries (and parts of a payload) and
 * each posts the job's verdict (and payload) to its node in one more step. */
static int job_verdict(shmtopo_comm_t *comm, const summary_t *node, uint32_t *votep, fold_t *fold)
{
    int err = 0, origin = -1;
    uint32_t vote = 1;
    char message[MESSAGE];
    message[0] = '\0';
    if (comm->rank == 0) {
        node_row_t *all = calloc((size_t)comm->nnodes + 1, sizeof(*all)), *mine = all ? all + comm->nnodes : NULL;
        const int leader = shmtopo_world(comm, 0);
        if (mine) {
            mine->sum = *node;
            mine->holds = fold && fold->holds;
            if (mine->holds)
                memcpy(mine->data, fold->data, fold->n);
        }
        if (shmtopo_leaders_allgather(comm, mine, all, sizeof(*all)) < 0) {
            err = errno;
            snprintf(message, sizeof(message), "%s", shmtopo_last_error());
        } else {
            summary_t job;
            memset(&job, 0, sizeof(job));
            for (int i = 0; i < comm->nnodes; i++)
                vote &= all[i].sum.vote;
            for (int i = 0; i < comm->nnodes && !job.err; i++)
                if (all[i].sum.err)
                    job = all[i].sum;
            for (int i = 0; i < comm->nnodes && !job.err; i++)
                for (int g = 0; g < all[i].sum.ngroups; g++)
                    add_group(&job, all[i].sum.groups[g].hash, all[i].sum.groups[g].count,
                              all[i].sum.groups[g].first, &all[i].sum.groups[g].sig);
            if (verdict(&job, 1) < 0 || (fold && fold->n &&
                                          combine_parts(fold->data, (const unsigned char *)all, sizeof(*all),
                                                        offsetof(node_row_t, holds), offsetof(node_row_t, data),
                                                        comm->nnodes, fold->n, fold->count, fold->dtype,
                                                        fold->op) < 0)) {
                err = errno;
                origin = shmtopo_last_error_rank();
                snprintf(message, sizeof(message), "%s", shmtopo_last_error());
            }
        }
        if (err && origin < 0)
            origin = leader;
        free(all);
    }
    shmtopo_sig_t sig = shmtopo_sig(SHMTOPO_KIND_VERDICT);
    summary_t sum;
    const int carries = fold && comm->rank == 0 && !err;
    /* only the leader's vote counts: it is the job's */
    if (post_and_gather(comm, &sig, shmtopo_sig_hash(&sig), err, origin, message, comm->rank == 0 ? vote : 1,
                        carries ? fold->data : NULL, carries ? fold->n : 0, &sum) < 0)
        return -1;
    if (votep)
        *votep = sum.vote;
    if (verdict(&sum, 1) < 0)
        return -1;
    if (fold && comm->rank != 0)
        memcpy(fold->data, shmtopo_step_data(comm, 0), fold->n);
    return 0;
}

/* ---- the agreement ------------------------------------------------------------------ */

static int agree(shmtopo_comm_t *comm, const shmtopo_sig_t *sig, int err, uint32_t vote, uint32_t *votep,
                 const void *mine, void *all, size_t n)
{
    if (shmtopo_comm_usable(comm, shmtopo_kind_name(sig->kind)) < 0)
        return -1;
    const uint64_t hash = shmtopo_sig_hash(sig);
    summary_t sum;
    if (n <= SHMTOPO_INLINE) {
        if (step_summary(comm, sig, hash, err, vote, mine, n, &sum) < 0)
            return -1;
        for (int r = 0; !sum.err && sum.ngroups == 1 && n && r < comm->size; r++)
            memcpy((char *)all + (size_t)r * n, shmtopo_step_data(comm, r), n);
    } else {
        /* larger contributions go through the scratch buffers, in chunks; the
         * first chunk's step is the agreement, so a failure stops every rank
         * at the same step */
        const size_t B = comm->chan.buffer;
        for (size_t off = 0; off < n; off += B) {
            const size_t m = n - off < B ? n - off : B;
            const int which = shmtopo_chan_next_buffer(comm);
            if (!err)
                memcpy(shmtopo_chan_buffer(comm, comm->rank, which), (const char *)mine + off, m);
            if (step_summary(comm, sig, hash, off == 0 ? err : 0, off == 0 ? vote : 1, NULL, 0, &sum) < 0)
                return -1;
            if (sum.err || sum.ngroups > 1)
                break;
            for (int r = 0; r < comm->size; r++)
                memcpy((char *)all + (size_t)r * n + off, shmtopo_chan_buffer(comm, r, which), m);
        }
    }
    if (comm->nnodes > 1)
        return job_verdict(comm, &sum, votep, NULL);
    if (votep)
        *votep = sum.vote;
    return verdict(&sum, 1);
}

int shmtopo_agree(shmtopo_comm_t *comm, const shmtopo_sig_t *sig, int err, const void *mine, void *all,
                  size_t n)
{
    return agree(comm, sig, err, 1, NULL, mine, all, n);
}

int shmtopo_agree_fold(shmtopo_comm_t *comm, const shmtopo_sig_t *sig, int err, const void *mine, size_t count,
                       int dtype, int op, int from, void *result)
{
    if (shmtopo_comm_usable(comm, shmtopo_kind_name(sig->kind)) < 0)
        return -1;
    fold_t fold = {count * shmtopo_dtype_size(dtype), count, dtype, op, 0, {0}};
    if (comm->nnodes < 2 || fold.n > SHMTOPO_INLINE)
        return shmtopo_fail(EINVAL, -1, "agree_fold: %zu bytes on %d nodes", fold.n, comm->nnodes);
    summary_t sum;
    const int posts = !err && mine && (op >= 0 || from == comm->rank);
    if (step_summary(comm, sig, shmtopo_sig_hash(sig), err, 1, posts ? mine : NULL, posts ? fold.n : 0, &sum) < 0)
        return -1;
    if (comm->rank == 0 && !sum.err && sum.ngroups == 1 && fold.n) {
        if (op >= 0) { /* the node's ranks in rank order, as the node's own flat fold */
            memcpy(fold.data, shmtopo_step_data(comm, 0), fold.n);
            for (int r = 1; r < comm->size; r++)
                shmtopo_reduce_local(fold.data, shmtopo_step_data(comm, r), count, dtype, op);
            fold.holds = 1;
        } else if (from >= 0) {
            memcpy(fold.data, shmtopo_step_data(comm, from), fold.n);
            fold.holds = 1;
        }
    }
    if (job_verdict(comm, &sum, NULL, &fold) < 0)
        return -1;
    if (fold.n && result)
        memcpy(result, fold.data, fold.n);
    return 0;
}

int shmtopo_agree_vote(shmtopo_comm_t *comm, const shmtopo_sig_t *sig, int err, int vote, int *allp)
{
    uint32_t all = 0;
    int rc = agree(comm, sig, err, vote != 0, &all, NULL, NULL, 0);
    *allp = rc == 0 && all;
    return rc;
}

/* Check what Python or C passed before agreeing on it. */
static int check_sig(const shmtopo_comm_t *comm, const shmtopo_sig_t *sig)
{
    if (!shmtopo_kind_known(sig->kind) || sig->kind == SHMTOPO_KIND_VERDICT)
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

int shmtopo_agree_fields(shmtopo_comm_t *comm, int kind, uint64_t count, int dtype, int op, int root, int alg,
                         uint64_t extra, int flags)
{
    const shmtopo_sig_t sig = {.kind = kind, .dtype = dtype, .op = op, .root = root, .alg = alg, .flags = flags,
                               .count = count, .extra = extra};
    return shmtopo_agree_call(comm, &sig);
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

/* ---- counts of the v-variants ---------------------------------------------------- */

uint64_t shmtopo_counts_digest(const size_t *counts, size_t n)
{
    uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint64_t)counts[i]) * 0xbf58476d1ce4e5b9ull, h ^= h >> 29;
    return h;
}

int shmtopo_counts_verdict(const shmtopo_sig_t *sig, const size_t *posted, const size_t *table, size_t n)
{
    for (size_t r = 0; r < n; r++) {
        if (posted[r] == table[r])
            continue;
        shmtopo_sig_t mine = *sig;
        mine.count = posted[r];
        char call[160];
        describe(&mine, call, sizeof(call));
        return shmtopo_fail(EINVAL, (int)r, "rank %zu: %s, but root %d's counts give rank %zu %zu elements",
                            r, call, sig->root, r, table[r]);
    }
    return 0;
}

int shmtopo_pairs_verdict(const shmtopo_sig_t *sig, const size_t *send, const size_t *recv, size_t n)
{
    /* Either side of a mismatched pair may be wrong: blame the rank in most
     * of them (one rank with a wrong array is in all of its pairs). */
    size_t worst = n, worst_pairs = 0, first_r = 0, first_p = 0;
    for (size_t x = 0; x < n; x++) {
        size_t pairs = 0;
        for (size_t y = 0; y < n; y++) {
            const int sends = send[x * n + y] != recv[y * n + x];    /* x -> y */
            const int receives = send[y * n + x] != recv[x * n + y]; /* y -> x */
            pairs += (size_t)sends + (size_t)(receives && y != x);
        }
        if (pairs > worst_pairs) {
            worst = x;
            worst_pairs = pairs;
        }
    }
    if (worst == n)
        return 0;
    for (size_t y = 0; y < n; y++) { /* the blamed rank's first mismatched pair, for the message */
        if (send[worst * n + y] != recv[y * n + worst]) {
            first_r = worst, first_p = y;
            break;
        }
        if (send[y * n + worst] != recv[worst * n + y]) {
            first_r = y, first_p = worst;
            break;
        }
    }
    const char *unit = sig->kind == SHMTOPO_KIND_ALLTOALLW ? "bytes" : "elements";
    return shmtopo_fail(EINVAL, (int)worst, "rank %zu: %s: rank %zu sends %zu %s to rank %zu, which "
                        "expects %zu from it (%zu mismatched pairs involve rank %zu)", worst, shmtopo_kind_name(sig->kind),
                        first_r, send[first_r * n + first_p], unit, first_p, recv[first_p * n + first_r],
                        worst_pairs, worst);
}
