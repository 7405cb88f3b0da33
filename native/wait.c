/* Waiting for a peer's sequence word. Busy-waiting with more ranks than CPUs
 * starves the very rank being waited for, so the spin budget is measured in
 * time and cut short when oversubscribed; after it we yield, then sleep on a
 * futex on the word itself (posters wake only when someone sleeps). */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "state.h"
#include "wait.h"

#define LIVENESS_PERIOD_NS 20000000ull   /* check peers every 20 ms of waiting */
#define SLEEP_NS 2000000                  /* futex sleeps at most 2 ms per round */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The futex is the low 32 bits of the 64-bit sequence word. */
static uint32_t *low_word(_Atomic uint64_t *seq)
{
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    return (uint32_t *)seq + 1;
#else
    return (uint32_t *)seq;
#endif
}

void shmtopo_wake(_Atomic uint64_t *seq)
{
    syscall(SYS_futex, low_word(seq), FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static void sleep_on(_Atomic uint64_t *seq, _Atomic uint32_t *waiters, uint64_t target)
{
    atomic_fetch_add_explicit(waiters, 1, memory_order_seq_cst);
    uint64_t seen = atomic_load_explicit(seq, memory_order_seq_cst);
    if (seen < target) {
        struct timespec ts = {0, SLEEP_NS};
        syscall(SYS_futex, low_word(seq), FUTEX_WAIT, (uint32_t)seen, &ts, NULL, 0);
    }
    atomic_fetch_sub_explicit(waiters, 1, memory_order_seq_cst);
}

/* The rank behind the first abandonment found (the awaited peer first), or
 * -1. A rank that left because of another names that one. */
static int find_abandoned(const shmtopo_win_t *win, int peer, int all)
{
    uint32_t origin = atomic_load_explicit(&win->ctrl[peer]->abandoned, memory_order_relaxed);
    for (int r = 0; !origin && all && r < win->size; r++)
        origin = atomic_load_explicit(&win->ctrl[r]->abandoned, memory_order_relaxed);
    return (int)origin - 1;
}

static int (*interrupt_hook)(void);

void shmtopo_set_interrupt_hook(int (*hook)(void))
{
    interrupt_hook = hook;
}

#define LEFT_OR_DEAD_MS 100

int shmtopo_fail_left(const shmtopo_win_t *win, int origin, const char *what, const char *doing)
{
    const shmtopo_comm_t *comm = win->comm;
    const int me = shmtopo_world(comm, comm->rank), them = shmtopo_world(comm, origin);
    /* a rank that left because a rank died, or left after an error,
     * elsewhere (it heard so through MPI) passes it on: every survivor names
     * that rank */
    atomic_thread_fence(memory_order_acquire); /* pairs with the leave's exchange, read relaxed */
    const int far = origin >= 0 && origin < comm->size
                        ? atomic_load_explicit(&win->ctrl[origin]->died_elsewhere, memory_order_relaxed) : 0;
    if (far > 0)
        return shmtopo_fail(EOWNERDEAD, far - 1, "rank %d exited while rank %d %s in %s (rank %d heard of it)",
                            far - 1, me, doing, what, them);
    if (far < 0)
        return shmtopo_fail(ECONNABORTED, -far - 1, "rank %d left %s after an error while rank %d %s in %s "
                            "(rank %d heard of it)", -far - 1, win->label, me, doing, what, them);
    /* A survivor that left because a rank died names that rank; the dead
     * rank itself never left (its own word is empty). Every survivor then
     * tells the same story, the death, whichever of them noticed first. A
     * rank named so that still runs is either still being torn down (a
     * SIGKILLed process shows as running for a few ms) or about to leave
     * after the same error (an exception naming it ends a with block):
     * which one shows within LEFT_OR_DEAD_MS. */
    if (origin >= 0 && origin < comm->size && origin != comm->rank &&
        atomic_load_explicit(&win->ctrl[origin]->departed, memory_order_acquire) &&
        !atomic_load_explicit(&win->ctrl[origin]->abandoned, memory_order_relaxed))
        return shmtopo_fail(ECONNABORTED, them, "rank %d freed %s while rank %d %s in %s", them, win->label, me,
                            doing, what);
    for (int ms = 0; origin != comm->rank && ms <= LEFT_OR_DEAD_MS &&
                     !atomic_load_explicit(&win->ctrl[origin]->abandoned, memory_order_relaxed); ms++) {
        if (!shmtopo_process_alive(comm->pids[origin], comm->starttimes[origin]))
            return shmtopo_fail(EOWNERDEAD, them, "rank %d (pid %d) exited while rank %d %s in %s", them,
                                (int)comm->pids[origin], me, doing, what);
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    return shmtopo_fail(ECONNABORTED, them, "rank %d left %s after an error while rank %d %s in %s", them,
                        win->label, me, doing, what);
}

int shmtopo_left_because(const shmtopo_win_t *win, int rank)
{
    return (int)atomic_load_explicit(&win->ctrl[rank]->abandoned, memory_order_relaxed) - 1;
}

/* The window's part of a wait's checks: a peer left (checked at every
 * pause: it costs a few loads), or died (every LIVENESS_PERIOD). */
typedef struct win_waiting {
    shmtopo_win_t *win;
    int peer;
    const char *what;
    int peer_writes; /* the awaited word is the peer's own to write (else: shmtopo_wait_shared) */
} win_waiting_t;

static int win_gone(const void *ctx, int full, int *originp)
{
    const win_waiting_t *w = ctx;
    const shmtopo_comm_t *comm = w->win->comm;
    int gone = find_abandoned(w->win, w->peer, full);
    if (gone >= 0) {
        *originp = gone;
        return shmtopo_fail_left(w->win, gone, w->what, "waited");
    }
    /* a peer that released its side cleanly is gone only for the words it
     * never wrote: the one awaited here (a post it made first is found) */
    if (w->peer_writes && atomic_load_explicit(&w->win->ctrl[w->peer]->departed, memory_order_acquire)) {
        *originp = w->peer;
        return shmtopo_fail_left(w->win, w->peer, w->what, "waited");
    }
    int dead = full ? shmtopo_comm_find_dead(comm) : -1;
    if (dead >= 0 && w->win->ctrl[dead] && atomic_load_explicit(&w->win->ctrl[dead]->departed, memory_order_acquire))
        dead = -1; /* released this window cleanly, then exited: no death */
    if (dead >= 0) {
        *originp = dead;
        return shmtopo_fail(EOWNERDEAD, shmtopo_world(comm, dead),
                            "rank %d (pid %d) exited while rank %d waited in %s",
                            shmtopo_world(comm, dead), (int)comm->pids[dead], shmtopo_world(comm, comm->rank),
                            w->what);
    }
    return 0;
}

static int wait_on(shmtopo_win_t *win, _Atomic uint64_t *seq, _Atomic uint32_t *waiters, uint64_t target, int peer,
                   const char *what, int peer_writes, int *originp)
{
    const shmtopo_comm_t *comm = win->comm;
    const win_waiting_t ctx = {win, peer, what, peer_writes};
    shmtopo_wait_rule_t rule = {
        .gone = win_gone, .ctx = &ctx, .timeout = win->timeout, .me = shmtopo_world(comm, comm->rank),
        .peer = shmtopo_world(comm, peer), .what = what, .release = shmtopo_armed_release(win),
    };
    shmtopo_wait_spin_of(comm, &rule);
    return shmtopo_wait_for(seq, waiters, target, &rule, originp);
}

int shmtopo_wait_slow(shmtopo_win_t *win, _Atomic uint64_t *seq, _Atomic uint32_t *waiters,
                      uint64_t target, int peer, const char *what, int *originp)
{
    return wait_on(win, seq, waiters, target, peer, what, 1, originp);
}

int shmtopo_wait_shared_slow(shmtopo_win_t *win, _Atomic uint64_t *seq, _Atomic uint32_t *waiters,
                             uint64_t target, int peer, const char *what, int *originp)
{
    return wait_on(win, seq, waiters, target, peer, what, 0, originp);
}

void shmtopo_wait_spin_of(const shmtopo_comm_t *comm, shmtopo_wait_rule_t *rule)
{
    /* Oversubscribed, the awaited rank may need our CPU: yield at once (the
     * inline spin of shmtopo_wait came first), measured best at 3-8 ranks on
     * 2 cores; otherwise spin long, as a rank on its own core answers fast.
     * SHMTOPO_SPIN_NS and SHMTOPO_YIELD_NS override both (tuning). */
    const int64_t spin_env = comm->config.spin_ns, yield_env = comm->config.yield_ns;
    rule->spin_ns = spin_env >= 0 ? (uint64_t)spin_env : comm->oversubscribed ? 0 : 200000;
    rule->yield_ns = yield_env >= 0 ? (uint64_t)yield_env : comm->oversubscribed ? 200000 : 2000000;
}

/* Why the wait cannot go on, or 0: the rule's own reason (a peer left or
 * died), the time is up, or the binding was interrupted (Ctrl-C). */
static int check(const shmtopo_wait_rule_t *rule, uint64_t waited, int full, int *originp)
{
    if (rule->gone(rule->ctx, full, originp) < 0)
        return -1;
    if (!full)
        return 0;
    if (rule->timeout > 0 && (double)waited * 1e-9 >= rule->timeout)
        return shmtopo_fail(ETIMEDOUT, rule->peer, "rank %d timed out after %.3g s in %s waiting for rank %d",
                            rule->me, rule->timeout, rule->what, rule->peer);
    if (interrupt_hook && interrupt_hook())
        return shmtopo_fail(EINTR, -1, "rank %d was interrupted while it waited in %s", rule->me, rule->what);
    return 0;
}

int shmtopo_wait_for(_Atomic uint64_t *seq, _Atomic uint32_t *waiters, uint64_t target,
                     const shmtopo_wait_rule_t *rule, int *originp)
{
    const uint64_t start = now_ns();
    uint64_t next_check = start + LIVENESS_PERIOD_NS;
    shmtopo_release_t *release = rule->release ? *rule->release : NULL;
    if (release) { /* once per call: the binding's lock stays released until the call returns */
        *rule->release = NULL;
        release->release(release);
    }

    for (;;) {
        for (int i = 0; i < 64; i++) {
            if (atomic_load_explicit(seq, memory_order_acquire) >= target)
                return 0;
            shmtopo_cpu_relax();
        }
        uint64_t now = now_ns();
        uint64_t waited = now - start;
        const int full = now >= next_check;
        int origin = -1;
        if (check(rule, waited, full, &origin) < 0) {
            int err = errno;
            /* A peer that posted this word and then left or died (a rank
             * that raised right after this very step) did post it: the wait
             * is over, and the step itself says what went wrong. Its leave
             * came after the post (seq_cst), so an acquire fence here sees
             * the post if the leave was seen. */
            atomic_thread_fence(memory_order_acquire);
            if ((err == ECONNABORTED || err == EOWNERDEAD) &&
                atomic_load_explicit(seq, memory_order_acquire) >= target)
                return 0;
            /* the waiter leaves, naming this cause */
            *originp = origin;
            errno = err;
            return -1;
        }
        if (full)
            next_check = now + LIVENESS_PERIOD_NS;
        if (waited < rule->spin_ns)
            continue;
        if (waited < rule->yield_ns)
            sched_yield();
        else
            sleep_on(seq, waiters, target);
    }
}
