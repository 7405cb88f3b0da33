/* Shrinking a comm, as ULFM's MPIX_Comm_shrink does for MPI: the ranks
 * still running make a comm of themselves, after a rank died or at any time.
 *
 * They meet in the old comm's channel, which every survivor still maps (a
 * dead rank's part too; nothing there is named in /dev/shm any more). Each
 * posts its arrival at an attempt; the lowest-ranked one that is running
 * chooses the members, once every rank has arrived, died or freed the comm,
 * and posts them; then the members make the new comm (shmtopo_comm_make),
 * its set-up exchanges running through their shrink lines' buffers.
 * A member that dies or gives up meanwhile fails that attempt on every
 * member (the exchange waits for all), and the next attempt goes on
 * without it. Each member waits under the old comm's timeout. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "state.h"
#include "wait.h"

#define WHAT "shrink"

typedef struct shrink {
    shmtopo_comm_t *old;
    uint64_t attempt;
    int n, me;          /* members, this rank's index among them */
    int *members;       /* their ranks in the old comm, ascending */
    uint32_t rounds;    /* exchange rounds of this attempt */
    int again;          /* the attempt failed because a member died or left: try without it */
} shrink_t;

static shmtopo_shrink_line_t *line_of(const shrink_t *s, int rank)
{
    return shmtopo_chan_shrink_line(s->old, rank);
}

static int running(const shrink_t *s, int rank)
{
    return rank == s->old->rank || shmtopo_process_alive(s->old->pids[rank], s->old->starttimes[rank]);
}

static int world(const shrink_t *s, int rank)
{
    return shmtopo_world(s->old, rank);
}

static int fail_dead(const shrink_t *s, int rank)
{
    return shmtopo_fail(EOWNERDEAD, world(s, rank), "rank %d (pid %d) exited while rank %d waited in shrink",
                        world(s, rank), (int)s->old->pids[rank], world(s, s->old->rank));
}

/* Why an awaited rank will not post what this rank waits for, or 0. */
typedef struct awaited {
    const shrink_t *s;
    int rank;
    int in_attempt;     /* it must take part in this attempt (a member) */
} awaited_t;

static int gone(const void *ctx, int full, int *originp)
{
    const awaited_t *a = ctx;
    const shrink_t *s = a->s;
    shmtopo_shrink_line_t *line = line_of(s, a->rank);
    const uint64_t arrived = atomic_load_explicit(&line->arrived, memory_order_acquire);
    *originp = a->rank;
    if (arrived == SHMTOPO_SHRINK_DEPARTED)
        return shmtopo_fail(ECONNABORTED, world(s, a->rank), "rank %d freed the comm while rank %d waited in shrink",
                            world(s, a->rank), world(s, s->old->rank));
    const uint64_t gave_up = atomic_load_explicit(&line->gave_up, memory_order_acquire);
    if (a->in_attempt && (gave_up >> 32) == s->attempt) {
        /* it saw a member die or leave: so will this rank, and say the same */
        const int cause = (int)(gave_up & 0xffffffffu) - 1;
        *originp = cause;
        if (cause >= 0 && cause < s->old->size && !running(s, cause))
            return fail_dead(s, cause);
        return shmtopo_fail(ECONNABORTED, world(s, a->rank), "rank %d gave up the shrink while rank %d waited in it",
                            world(s, a->rank), world(s, s->old->rank));
    }
    if (full && !running(s, a->rank))
        return fail_dead(s, a->rank);
    return 0;
}

/* Wait until `rank` posted at least `target` in *word (for a member of
 * the attempt: in this attempt): 0, or -1 with why and *originp, the rank
 * whose failure it is. */
static int await(const shrink_t *s, int rank, int in_attempt, _Atomic uint64_t *word, uint64_t target,
                 int *originp)
{
    const awaited_t ctx = {s, rank, in_attempt};
    shmtopo_wait_rule_t rule = {
        .gone = gone, .ctx = &ctx, .timeout = s->old->timeout, .me = world(s, s->old->rank),
        .peer = world(s, rank), .what = WHAT,
    };
    shmtopo_wait_spin_of(s->old, &rule);
    *originp = rank;
    if (shmtopo_wait_for(word, &line_of(s, rank)->waiters, target, &rule, originp) < 0)
        return -1;
    if (!in_attempt || (atomic_load_explicit(word, memory_order_acquire) >> 32) == s->attempt)
        return 0;
    if (gone(&ctx, 1, originp) < 0) /* it moved on to another attempt: its gave_up says why */
        return -1;
    return shmtopo_fail(ECONNABORTED, world(s, rank), "rank %d left the shrink while rank %d waited in it",
                        world(s, rank), world(s, s->old->rank));
}

/* This rank leaves the attempt because of `cause`'s failure, so that the
 * members waiting for it fail too. Returns -1, errno kept. */
static int give_up(shrink_t *s, int cause)
{
    const int err = errno;
    shmtopo_shrink_line_t *me = line_of(s, s->old->rank);
    atomic_store_explicit(&me->gave_up, s->attempt << 32 | (uint32_t)(cause + 1), memory_order_release);
    shmtopo_post(&me->round, &me->waiters, atomic_load(&me->round)); /* wakes those asleep on it */
    errno = err;
    return -1;
}

/* ---- choosing the members ------------------------------------------------------ */

static unsigned char *members_of(const shrink_t *s, int chooser)
{
    return line_of(s, chooser)->members;
}

static int read_members(shrink_t *s, int chooser)
{
    const unsigned char *bits = members_of(s, chooser);
    s->n = 0;
    s->me = -1;
    for (int r = 0; r < s->old->size; r++)
        if (bits[r / 8] & (1u << (r % 8))) {
            if (r == s->old->rank)
                s->me = s->n;
            s->members[s->n++] = r;
        }
    if (s->me < 0)
        return shmtopo_fail(EPROTO, world(s, chooser), "rank %d left rank %d out of the shrink", world(s, chooser),
                            world(s, s->old->rank));
    return 0;
}

/* This rank chooses: every rank that arrived at this attempt and still
 * runs, once each has arrived, died or freed the comm. */
static int choose(shrink_t *s)
{
    shmtopo_comm_t *old = s->old;
    unsigned char *bits = members_of(s, old->rank);
    memset(bits, 0, (size_t)(old->size + 7) / 8);
    for (int r = 0; r < old->size; r++) {
        int member = r == old->rank;
        int origin;
        if (!member && await(s, r, 0, &line_of(s, r)->arrived, s->attempt, &origin) == 0) {
            const uint64_t arrived = atomic_load_explicit(&line_of(s, r)->arrived, memory_order_acquire);
            member = arrived != SHMTOPO_SHRINK_DEPARTED && running(s, r);
        } else if (!member && errno != EOWNERDEAD && errno != ECONNABORTED) {
            return -1; /* the time ran out, or an interrupt */
        }
        if (member)
            bits[r / 8] |= (unsigned char)(1u << (r % 8));
    }
    shmtopo_shrink_line_t *me = line_of(s, old->rank);
    shmtopo_post(&me->sealed, &me->waiters, s->attempt);
    return read_members(s, old->rank);
}

/* The time ran out waiting for the chooser, which waits for the rank that
 * is late: name that one, as the chooser does. */
static int late(const shrink_t *s)
{
    const int err = errno;
    for (int r = 0; r < s->old->size; r++) {
        const uint64_t arrived = atomic_load_explicit(&line_of(s, r)->arrived, memory_order_acquire);
        if (arrived < s->attempt && running(s, r))
            return shmtopo_fail(ETIMEDOUT, world(s, r), "rank %d timed out after %.3g s in shrink waiting for "
                                "rank %d, which has not called it", world(s, s->old->rank), s->old->timeout,
                                world(s, r));
    }
    errno = err;
    return -1;
}

/* Arrive at the attempt, and learn its members: from the lowest-ranked
 * rank that runs (a chooser that died after posting them still did). */
static int meet(shrink_t *s)
{
    shmtopo_comm_t *old = s->old;
    shmtopo_shrink_line_t *me = line_of(s, old->rank);
    s->rounds = 0;
    s->again = 0;
    shmtopo_post(&me->arrived, &me->waiters, s->attempt);
    for (int c = 0; c < old->size; c++) {
        if (c == old->rank)
            return choose(s);
        int origin;
        if (await(s, c, 0, &line_of(s, c)->sealed, s->attempt, &origin) == 0)
            return read_members(s, c);
        if (errno == ETIMEDOUT)
            return late(s);
        if (errno != EOWNERDEAD && errno != ECONNABORTED)
            return -1;
    }
    return shmtopo_fail(EPROTO, -1, "shrink found no rank to choose its members");
}

/* ---- the new comm's set-up exchanges ---------------------------------------------- */

/* Through the members' shrink lines, a chunk per round in their two data
 * buffers in turn: a member reuses a buffer two rounds on, when every
 * member has posted the round in between, having read this one. */
static int allgather(shmtopo_comm_t *comm, const void *send, void *recv, size_t nbytes)
{
    shrink_t *s = comm->maker;
    shmtopo_comm_t *old = s->old;
    shmtopo_shrink_line_t *me = line_of(s, old->rank);
    const size_t chunk = SHMTOPO_SHRINK_CHUNK;
    size_t off = 0;
    do {
        const size_t len = nbytes - off < chunk ? nbytes - off : chunk;
        const int which = (int)(++s->rounds % 2);
        const uint64_t target = s->attempt << 32 | s->rounds;
        memcpy(me->data[which], (const char *)send + off, len);
        shmtopo_post(&me->round, &me->waiters, target);
        for (int i = 0; i < s->n; i++) {
            const int m = s->members[i];
            int origin;
            if (m != old->rank && await(s, m, 1, &line_of(s, m)->round, target, &origin) < 0) {
                s->again = errno == EOWNERDEAD || errno == ECONNABORTED;
                return give_up(s, origin);
            }
            memcpy((char *)recv + (size_t)i * nbytes + off,
                   m == old->rank ? (const char *)send + off : (const char *)line_of(s, m)->data[which], len);
        }
        off += len;
    } while (off < nbytes);
    return 0;
}

static int exchange(shmtopo_comm_t *comm, const shmtopo_sig_t *sig, int err, const void *mine, void *all,
                    size_t n)
{
    (void)sig; /* the records, the first exchange, check that the members agree */
    return shmtopo_exchange_statuses(comm, err, mine, all, n, allgather);
}

/* ---- the call ----------------------------------------------------------------- */

int shmtopo_comm_shrink(shmtopo_comm_t *old, shmtopo_comm_t **newp)
{
    if (!newp)
        return shmtopo_fail(EINVAL, -1, "shrink needs somewhere to put the new comm");
    *newp = NULL;
    if (!old || !old->chan.win)
        return shmtopo_fail(EBADF, -1, "communicator is NULL or freed");
    if (shmtopo_comm_same_process(old) < 0)
        return -1;
    if (old->shrunk)
        return shmtopo_fail(EPIPE, -1, "this comm was shrunk already: use the comm shrink made, and free this one");
    if (old->nnodes > 1)
        return shmtopo_fail(ENOTSUP, -1, "shrink works on one node: across nodes the MPI communicator itself "
                            "must shrink (MPI_Comm_shrink, ULFM)");
    if (old->size > 8 * SHMTOPO_SHRINK_CHUNK)
        return shmtopo_fail(ENOTSUP, -1, "shrink works on comms of up to %d ranks on a node", 8 * SHMTOPO_SHRINK_CHUNK);
    /* From here on the old comm only frees; ranks still waiting in it fail
     * instead of waiting for this one. */
    old->shrunk = 1;
    if (!old->broken) {
        old->broken = 1;
        shmtopo_chan_leave(old, shmtopo_comm_find_dead(old));
    }
    shrink_t s = {.old = old, .members = malloc((size_t)old->size * sizeof(int))};
    if (!s.members)
        return shmtopo_fail(ENOMEM, -1, "out of memory");
    int rc = -1;
    /* each failed attempt loses a member: at most one per rank */
    for (s.attempt = 1; s.attempt <= (uint64_t)old->size; s.attempt++) {
        if (meet(&s) < 0)
            break;
        rc = shmtopo_comm_make(s.n, s.me, exchange, NULL, &s, newp);
        if (rc == 0) {
            shmtopo_comm_set_timeout(*newp, old->timeout);
            break;
        }
        if (s.again)
            continue; /* a member died or left in an exchange: this rank gave up the attempt there */
        if (errno != EOWNERDEAD)
            break;
        /* it died on the new channel, which names it by its rank in the new comm */
        const int cause = shmtopo_last_error_rank();
        give_up(&s, cause >= 0 && cause < s.n ? s.members[cause] : -1);
    }
    free(s.members);
    if (rc < 0)
        shmtopo_chan_depart(old);
    return rc;
}
