/* The layout of the comm's channel (chan.c), which the agreement (agree.c)
 * reads and writes: per rank a header of step lines, then the scratch
 * buffers. Private to those two. */
#ifndef SHMTOPO_CHAN_H
#define SHMTOPO_CHAN_H

#include "internal.h"
#include "wait.h"

#define MESSAGE 384
#define LAG SHMTOPO_RUN_AHEAD_LAG /* steps a rank may run ahead of the slowest */
#define RING (2 * LAG)  /* step lines per rank */

static inline unsigned chan_slot(uint64_t s)
{
    return (unsigned)(s % RING);
}

typedef struct chan_line {
    _Alignas(SHMTOPO_LINE) _Atomic uint64_t step;
    uint64_t hash;           /* of the signature posted with this step */
    int32_t err;             /* 0, or errno: the poster's arguments or set-up failed */
    int32_t origin;          /* the job rank that failure is about */
    uint32_t vote;           /* ANDed over the job by shmtopo_agree_vote */
    _Alignas(16) unsigned char data[SHMTOPO_INLINE]; /* aligned for any element type */
} chan_line_t;

typedef struct chan_detail {
    shmtopo_sig_t sig;
    char message[MESSAGE];   /* with err: the whole text every rank raises */
} chan_detail_t;

typedef struct chan_header {
    chan_line_t line[RING];  /* by step mod RING */
    _Alignas(SHMTOPO_LINE) _Atomic uint32_t waiters;
    shmtopo_shrink_line_t shrink;
    _Alignas(SHMTOPO_LINE) chan_detail_t detail[RING];
    /* the data of a call that runs ahead, beyond what its line holds:
     * RING slots of SHMTOPO_AHEAD_MAX bytes, only where the comm runs ahead
     * (chan_ahead) */
    _Alignas(SHMTOPO_LINE) unsigned char ahead[];
} chan_header_t;

/* The header's bytes: the slots of calls that run ahead only where they may. */
static inline size_t chan_header_size(const shmtopo_comm_t *comm)
{
    return sizeof(chan_header_t) + (comm->config.run_ahead && comm->size > 1 ? (size_t)RING * SHMTOPO_AHEAD_MAX : 0);
}

/* Slot `slot` of the data that calls running ahead carry. */
static inline unsigned char *chan_ahead(chan_header_t *h, unsigned slot)
{
    return h->ahead + (size_t)slot * SHMTOPO_AHEAD_MAX;
}

_Static_assert(sizeof(chan_line_t) == SHMTOPO_LINE, "a step line is one padded cache line");

/* Rank `rank`'s header, in every process. */
static inline chan_header_t *chan_header(const shmtopo_comm_t *comm, int rank)
{
    return (chan_header_t *)comm->chan.win->base[rank];
}

/* After a wait on the channel failed (origin as the wait reported it):
 * leave it, as shmtopo_win_wait_failed. Returns -1, errno kept. */
int shmtopo_chan_wait_failed(shmtopo_comm_t *comm, int origin);

/* Wait until `rank` has posted step s: 0, or -1 having left the channel,
 * so that peers waiting for this rank fail too. `spin`: 0 where this step
 * has had its short spin already (shmtopo_spin_until), so that a rank never
 * spins longer before the wait's own back-off. */
static inline int shmtopo_chan_wait(shmtopo_comm_t *comm, int rank, uint64_t s, const char *what, int spin)
{
    chan_header_t *h = chan_header(comm, rank);
    _Atomic uint64_t *seq = &h->line[chan_slot(s)].step;
    int origin;
    if ((spin && shmtopo_spin_until(seq, s)) ||
        shmtopo_wait_slow(comm->chan.win, seq, &h->waiters, s, rank, what, &origin) == 0)
        return 0;
    return shmtopo_chan_wait_failed(comm, origin);
}

#endif /* SHMTOPO_CHAN_H */
