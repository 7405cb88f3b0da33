/* Fence algorithms over a window's control blocks. Each rank owns one
 * sequence word that only grows: fence number E (from 1) of an algorithm with
 * R stages posts E*R + s at stage s, and a waiter needs "peer reached at
 * least stage s of fence E", which a faster peer already in a later stage or
 * fence also satisfies. So no flag is ever reset. The fence calls of a
 * window are here too. */
#include <errno.h>

#include "internal.h"
#include "state.h"
#include "wait.h"

static inline int post_stage(shmtopo_win_t *win, uint64_t value)
{
    shmtopo_ctrl_t *me = win->ctrl[win->rank];
    shmtopo_post(&me->fence_seq, &me->fence_waiters, value);
    return 0;
}

static inline int wait_stage(shmtopo_win_t *win, int peer, uint64_t value)
{
    shmtopo_ctrl_t *c = win->ctrl[peer];
    int origin;
    if (shmtopo_wait(win, &c->fence_seq, &c->fence_waiters, value, peer, "fence", &origin) < 0)
        return shmtopo_win_wait_failed(win, origin);
    return 0;
}

/* Linear: everyone reports to rank 0, rank 0 releases everyone. */
static int fence_linear(shmtopo_win_t *win, uint64_t epoch)
{
    const uint64_t arrive = epoch * 2, release = epoch * 2 + 1;
    if (win->rank != 0) {
        post_stage(win, arrive);
        return wait_stage(win, 0, release);
    }
    for (int r = 1; r < win->size; r++)
        if (wait_stage(win, r, arrive) < 0)
            return -1;
    return post_stage(win, release);
}

static int log2_floor(int n)
{
    int l = 0;
    while ((2 << l) <= n)
        l++;
    return l;
}

/* Recursive doubling on the largest power of two pof2 <= P. The first
 * 2*(P - pof2) ranks pair up: the even one hands its arrival to the odd one
 * before the rounds and waits for the odd one's release after them. */
static int fence_rd(shmtopo_win_t *win, uint64_t epoch)
{
    const int rank = win->rank, lg = log2_floor(win->size);
    const int pof2 = 1 << lg, rem = win->size - pof2;
    const uint64_t stages = (uint64_t)lg + 2, base = epoch * stages;
    const uint64_t release = base + (uint64_t)lg + 1;
    int newrank;

    if (rank < 2 * rem) {
        if (rank % 2 == 0) {
            post_stage(win, base);
            return wait_stage(win, rank + 1, release);
        }
        if (wait_stage(win, rank - 1, base) < 0)
            return -1;
        newrank = rank / 2;
    } else {
        newrank = rank - rem;
    }
    for (int k = 0; k < lg; k++) {
        int partner_new = newrank ^ (1 << k);
        int partner = partner_new < rem ? partner_new * 2 + 1 : partner_new + rem;
        post_stage(win, base + 1 + (uint64_t)k);
        if (wait_stage(win, partner, base + 1 + (uint64_t)k) < 0)
            return -1;
    }
    if (rank < 2 * rem)
        post_stage(win, release);
    return 0;
}

/* Dissemination: ceil(log2 P) rounds, in round k wait for rank - 2^k. No
 * folding needed for any P. */
static int fence_dissemination(shmtopo_win_t *win, uint64_t epoch)
{
    int rounds = 0;
    while ((1 << rounds) < win->size)
        rounds++;
    const uint64_t base = epoch * (uint64_t)rounds;
    for (int k = 0; k < rounds; k++) {
        int from = (win->rank - (1 << k) + win->size) % win->size;
        post_stage(win, base + (uint64_t)k);
        if (wait_stage(win, from, base + (uint64_t)k) < 0)
            return -1;
    }
    return 0;
}

static int fence_run(shmtopo_win_t *win)
{
    /* Order this rank's earlier stores before its later loads, even when the
     * algorithm starts by waiting rather than posting. */
    atomic_thread_fence(memory_order_seq_cst);
    if (win->size == 1) {
        win->fence_epoch++;
        return 0;
    }
    uint64_t epoch = ++win->fence_epoch;
    switch (win->fence_alg) {
    case SHMTOPO_FENCE_LINEAR:
        return fence_linear(win, epoch);
    case SHMTOPO_FENCE_RD:
        return fence_rd(win, epoch);
    case SHMTOPO_FENCE_DISSEMINATION:
        return fence_dissemination(win, epoch);
    default:
        return shmtopo_fail(EINVAL, -1, "window has no valid fence algorithm (%d)",
                            win->fence_alg);
    }
}

static int peer_fence_run(shmtopo_win_t *win, int peer)
{
    atomic_thread_fence(memory_order_seq_cst);
    uint64_t n = ++win->peer_epoch[peer];
    shmtopo_ctrl_t *me = win->ctrl[win->rank], *other = win->ctrl[peer];
    shmtopo_post(&me->peer_seq[peer], &me->peer_waiters, n);
    int origin;
    if (shmtopo_wait(win, &other->peer_seq[win->rank], &other->peer_waiters, n, peer, "peer fence",
                     &origin) < 0)
        return shmtopo_win_wait_failed(win, origin);
    return 0;
}

/* ---- the calls -------------------------------------------------------------- */

static int usable(shmtopo_win_t *win)
{
    if (!win)
        return shmtopo_fail(EBADF, -1, "window is NULL or freed");
    if (win->comm->shrunk)
        return shmtopo_fail(EPIPE, -1, "the window's comm was shrunk: the window can only be freed");
    if (win->broken)
        return shmtopo_fail(EPIPE, -1, "window is unusable after a failed wait; free it");
    return shmtopo_comm_same_process(win->comm);
}

/* A failed wait has already left the window (wait_stage). */
int shmtopo_win_fence(shmtopo_win_t *win)
{
    if (usable(win) < 0)
        return -1;
    return fence_run(win);
}

static int check_peer(const shmtopo_win_t *win, int peer)
{
    if (peer < 0 || peer >= win->size)
        return shmtopo_fail(EINVAL, peer, "peer rank %d out of range [0, %d)", peer, win->size);
    if (peer == win->rank)
        return shmtopo_fail(EINVAL, peer, "rank %d cannot peer-fence with itself", peer);
    return 0;
}

int shmtopo_win_peer_fence(shmtopo_win_t *win, int peer)
{
    if (usable(win) < 0 || check_peer(win, peer) < 0)
        return -1;
    return peer_fence_run(win, peer);
}

int shmtopo_win_fence_loop(shmtopo_win_t *win, long count)
{
    if (usable(win) < 0)
        return -1;
    for (long i = 0; i < count; i++)
        if (fence_run(win) < 0)
            return -1;
    return 0;
}

int shmtopo_win_peer_fence_loop(shmtopo_win_t *win, int peer, long count)
{
    if (usable(win) < 0 || check_peer(win, peer) < 0)
        return -1;
    for (long i = 0; i < count; i++)
        if (peer_fence_run(win, peer) < 0)
            return -1;
    return 0;
}
