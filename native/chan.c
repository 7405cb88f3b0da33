/* The comm's channel: its own shared memory, made with the comm (one part
 * per rank: a header of step lines, then three scratch buffers), and left
 * or released with it. What travels through it is the agreement's (agree.c). */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "chan.h"
#include "internal.h"
#include "state.h"
#include "wait.h"

char *shmtopo_chan_buffer(const shmtopo_comm_t *comm, int rank, int which)
{
    return comm->chan.win->base[rank] + comm->chan.header + (size_t)which * comm->chan.buffer;
}

/* The channel's part of leaving: wake every rank asleep on this rank's step lines. */
static void wake_lines(shmtopo_win_t *win)
{
    chan_header_t *me = (chan_header_t *)win->base[win->rank];
    if (!me)
        return;
    for (int i = 0; i < RING; i++)
        shmtopo_wake(&me->line[i].step);
}

int shmtopo_chan_create(shmtopo_comm_t *comm, shmtopo_exchange_fn exchange)
{
    shmtopo_chan_t *chan = &comm->chan;
    chan->buffer = comm->config.coll_buffer;
    chan->header = shmtopo_round_up(chan_header_size(comm), (size_t)sysconf(_SC_PAGESIZE));
    chan->step = chan->settled = 0;
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
    chan->win->label = "the comm";
    chan->win->on_leave = wake_lines;
    return 0;
}

shmtopo_shrink_line_t *shmtopo_chan_shrink_line(const shmtopo_comm_t *comm, int rank)
{
    return &chan_header(comm, rank)->shrink;
}

void shmtopo_chan_depart(shmtopo_comm_t *comm)
{
    const shmtopo_win_t *win = comm->chan.win;
    if (!win || !win->base[win->rank] || shmtopo_comm_same_process(comm) < 0)
        return; /* set-up had not got that far, or a fork child's copy */
    const int err = errno;
    shmtopo_shrink_line_t *line = shmtopo_chan_shrink_line(comm, comm->rank);
    shmtopo_post(&line->arrived, &line->waiters, SHMTOPO_SHRINK_DEPARTED);
    errno = err;
}

int shmtopo_chan_park(shmtopo_comm_t *comm)
{
    shmtopo_shrink_line_t *line = shmtopo_chan_shrink_line(comm, comm->rank);
    if (atomic_load(&line->arrived) || atomic_load(&line->sealed) || atomic_load(&line->round) ||
        atomic_load(&line->gave_up))
        return shmtopo_fail(EBUSY, -1, "a shrink has begun on this comm: it can only be released");
    shmtopo_chan_depart(comm);
    shmtopo_win_depart_keeping(comm->chan.win);
    return 0;
}

void shmtopo_chan_unpark(shmtopo_comm_t *comm)
{
    /* every member parked it: nobody reads these lines until they all have
     * taken it back (the caller's exchange after this) */
    atomic_store(&shmtopo_chan_shrink_line(comm, comm->rank)->arrived, 0);
    shmtopo_win_take_back(comm->chan.win);
}

/* Drop this process's hold on the channel (no shrink waits for this rank
 * any more); its window is the caller's to release. */
static shmtopo_win_t *detach(shmtopo_comm_t *comm)
{
    shmtopo_win_t *win = comm->chan.win;
    shmtopo_chan_depart(comm);
    comm->chan.win = NULL;
    free(comm->chan.tmp);
    comm->chan.tmp = NULL;
    free(comm->chan.sc_tmp);
    comm->chan.sc_tmp = NULL;
    return win;
}

int shmtopo_chan_free(shmtopo_comm_t *comm)
{
    shmtopo_win_t *win = detach(comm);
    if (win)
        shmtopo_win_delete(win); /* every rank agreed to free: nobody waits on it any more */
    return 0;
}

void shmtopo_chan_abandon(shmtopo_comm_t *comm, int origin)
{
    shmtopo_win_t *win = detach(comm);
    if (win)
        shmtopo_win_abandon_because(win, origin);
}

void shmtopo_chan_release(shmtopo_comm_t *comm)
{
    const int broken = comm->broken;
    shmtopo_win_t *win = detach(comm);
    if (!win)
        return;
    if (broken)
        shmtopo_win_abandon_because(win, -1);
    else
        shmtopo_win_release(win);
}

void shmtopo_chan_leave(shmtopo_comm_t *comm, int origin)
{
    shmtopo_win_leave(comm->chan.win, origin);
}

int shmtopo_chan_wait_failed(shmtopo_comm_t *comm, int origin)
{
    return shmtopo_win_wait_failed(comm->chan.win, origin);
}
