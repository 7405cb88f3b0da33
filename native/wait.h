/* wait.c: publishing a sequence word and waiting for one. */
#ifndef SHMTOPO_WAIT_H
#define SHMTOPO_WAIT_H

#include "internal.h"

/* Wake every process sleeping on a sequence word. */
void shmtopo_wake(_Atomic uint64_t *seq);

/* Publish `value` in a sequence word: nonzero when a process may sleep on
 * it, which the caller wakes (shmtopo_wake). The seq_cst exchange also
 * orders every earlier store of this rank before it. */
static inline int shmtopo_publish(_Atomic uint64_t *seq, _Atomic uint32_t *waiters, uint64_t value)
{
    atomic_exchange_explicit(seq, value, memory_order_seq_cst);
    return atomic_load_explicit(waiters, memory_order_seq_cst) != 0;
}

/* Publish `value` in a sequence word and wake sleepers, if any. */
static inline void shmtopo_post(_Atomic uint64_t *seq, _Atomic uint32_t *waiters, uint64_t value)
{
    if (shmtopo_publish(seq, waiters, value))
        shmtopo_wake(seq);
}

static inline void shmtopo_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#endif
}

/* The short spin every wait starts with, inline (no call, no frame):
 * nonzero once *seq >= target, 0 when it is not there after the spin (the
 * wait then goes on in shmtopo_wait_slow). */
static inline int shmtopo_spin_until(_Atomic uint64_t *seq, uint64_t target)
{
    if (atomic_load_explicit(seq, memory_order_acquire) >= target) /* most often: nothing to count */
        return 1;
    for (int i = 0; i < 64; i++) {
        shmtopo_cpu_relax();
        if (atomic_load_explicit(seq, memory_order_acquire) >= target)
            return 1;
    }
    return 0;
}

/* How a wait goes on and when it gives up (shmtopo_wait_for). */
typedef struct shmtopo_wait_rule {
    /* 0 while the awaited rank may still post, else -1 with the failure set
     * and *originp the rank whose failure it is; `full` every 20 ms of
     * waiting (time for the costlier checks: is a process still there?) */
    int (*gone)(const void *ctx, int full, int *originp);
    const void *ctx;
    double timeout;          /* seconds, 0: forever */
    int me, peer;            /* job ranks, for the timeout's message */
    const char *what;        /* the call, for messages */
    uint64_t spin_ns, yield_ns; /* spin, then yield, then sleep on the word */
    /* the calling binding's hook, run (and cleared) at the first pause; NULL: none */
    shmtopo_release_t **release;
} shmtopo_wait_rule_t;

/* The spin and yield budgets of waits on this comm's words. */
void shmtopo_wait_spin_of(const shmtopo_comm_t *comm, shmtopo_wait_rule_t *rule);

/* Wait until *seq >= target under the rule: 0, or -1 with why (errno, the
 * message) and *originp: the rule's, ETIMEDOUT, or EINTR when the interrupt
 * hook says so (Ctrl-C). A word posted before its poster failed counts as
 * posted. */
int shmtopo_wait_for(_Atomic uint64_t *seq, _Atomic uint32_t *waiters, uint64_t target,
                     const shmtopo_wait_rule_t *rule, int *originp);

int shmtopo_wait_slow(shmtopo_win_t *win, _Atomic uint64_t *seq, _Atomic uint32_t *waiters,
                      uint64_t target, int peer, const char *what, int *originp);

/* Wait until *seq >= target: spin briefly here, then the slow path backs off
 * (yield, futex sleep) and checks peers' liveness, abandonment, the timeout
 * and the interrupt hook. 0, or -1 with why (errno, the message) and
 * *originp: the rank whose failure caused it (-1: this one). The waiter
 * then leaves the window (shmtopo_win_wait_failed), so that peers fail
 * with ECONNABORTED instead of waiting for it. */
static inline int shmtopo_wait(shmtopo_win_t *win, _Atomic uint64_t *seq, _Atomic uint32_t *waiters,
                               uint64_t target, int peer, const char *what, int *originp)
{
    if (shmtopo_spin_until(seq, target))
        return 0;
    return shmtopo_wait_slow(win, seq, waiters, target, peer, what, originp);
}

/* shmtopo_wait for a word of `peer`'s part that other ranks write (a lock's
 * words): a peer that released its side cleanly (shmtopo_win_release) is
 * no reason to stop waiting, since it is not the one who will write it. */
int shmtopo_wait_shared_slow(shmtopo_win_t *win, _Atomic uint64_t *seq, _Atomic uint32_t *waiters,
                             uint64_t target, int peer, const char *what, int *originp);

static inline int shmtopo_wait_shared(shmtopo_win_t *win, _Atomic uint64_t *seq, _Atomic uint32_t *waiters,
                                      uint64_t target, int peer, const char *what, int *originp)
{
    if (shmtopo_spin_until(seq, target))
        return 0;
    return shmtopo_wait_shared_slow(win, seq, waiters, target, peer, what, originp);
}

/* The rank whose failure made `rank` leave `win` (itself, or the peer it
 * named), or -1 while it has not left. */
int shmtopo_left_because(const shmtopo_win_t *win, int rank);

/* Fail (-1) for a leave of `win` that names `origin`: PeerDead (EOWNERDEAD)
 * when origin is a peer that never left and no longer runs (one that still
 * shows as running gets a short while to die or leave), so that every
 * survivor names the death, else ECONNABORTED for origin's error. `doing`
 * and `what` say what this rank was doing ("waited", "copied memory"). */
int shmtopo_fail_left(const shmtopo_win_t *win, int origin, const char *what, const char *doing);

#endif /* SHMTOPO_WAIT_H */
