/* Whether this process may act as a comm's rank: the process that made it
 * (not a fork child, which inherits the mappings but not the rank), and the
 * comm not broken by a failed wait. */
#include <errno.h>
#include <pthread.h>
#include <unistd.h>

#include "internal.h"
#include "state.h"

/* Bumped in every fork child: a comm remembers the value of the process that
 * made it, so a child (which inherits the mappings, not the rank) is told
 * apart with a load instead of a getpid() system call per operation. */
_Atomic unsigned shmtopo_fork_generation;

static void forked(void)
{
    atomic_fetch_add(&shmtopo_fork_generation, 1);
}

__attribute__((constructor)) static void watch_forks(void)
{
    pthread_atfork(NULL, NULL, forked);
}

int shmtopo_comm_same_process(const shmtopo_comm_t *comm)
{
    if (comm->fork_generation == atomic_load_explicit(&shmtopo_fork_generation, memory_order_relaxed))
        return 0;
    return shmtopo_fail(ESRCH, -1,
                        "this process (pid %d) is a fork of rank %d's process (pid %d): a forked "
                        "child cannot act as the rank",
                        (int)getpid(), shmtopo_world(comm, comm->rank), (int)comm->pids[comm->rank]);
}

void shmtopo_comm_unusable(const shmtopo_comm_t *comm, const char *what)
{
    if (!comm || !comm->chan.win)
        shmtopo_fail(EBADF, -1, "communicator is NULL or freed");
    else if (shmtopo_comm_same_process(comm) < 0)
        return;
    else if (comm->shrunk)
        shmtopo_fail(EPIPE, -1, "%s: the comm was shrunk: use the comm shrink made, and free this one", what);
    else /* broken */
        shmtopo_fail(EPIPE, -1, "%s: the comm is unusable after a failed wait or a failed call ranks ran ahead "
                     "of; free it", what);
}

/* pthread_self, not a thread-local's address: a shared library's
 * thread-locals cost a __tls_get_addr call, which a fence felt. */
int shmtopo_claim(shmtopo_claim_t *claim, const char *what)
{
    const uintptr_t me = (uintptr_t)pthread_self();
    uintptr_t seen = 0;
    if (atomic_compare_exchange_strong_explicit(&claim->user, &seen, me, memory_order_acquire,
                                                memory_order_relaxed)) {
        claim->depth = 1;
        return 0;
    }
    if (seen == me) {
        claim->depth++;
        return 0;
    }
    /* the queue holds it between its calls, or a thread runs one of them:
     * either way this call comes after them */
    if (seen == SHMTOPO_CLAIM_QUEUED || atomic_load_explicit(&claim->lent, memory_order_acquire))
        return shmtopo_fail(EINPROGRESS, -1, "%s has nonblocking calls posted before this one that have not run "
                                             "yet: they run first (a binding runs its queue, then claims again)",
                            what);
    return shmtopo_fail(EBUSY, -1, "%s is in use by another thread: it takes one call at a time "
                                   "(MPI_THREAD_SERIALIZED)", what);
}

void shmtopo_unclaim(shmtopo_claim_t *claim)
{
    if (atomic_load_explicit(&claim->user, memory_order_relaxed) == (uintptr_t)pthread_self() &&
        --claim->depth == 0)
        atomic_store_explicit(&claim->user, 0, memory_order_release);
}

/* The queue holds the comm between its calls as SHMTOPO_CLAIM_QUEUED, which
 * no thread's claim takes; the thread that runs the next call takes it
 * over, and hands it back to the queue or to nobody after. */
int shmtopo_comm_queue_hold(shmtopo_comm_t *comm)
{
    if (!comm)
        return shmtopo_fail(EBADF, -1, "communicator is NULL or freed");
    uintptr_t seen = 0;
    if (atomic_compare_exchange_strong_explicit(&comm->claim.user, &seen, SHMTOPO_CLAIM_QUEUED,
                                                memory_order_acquire, memory_order_relaxed)) {
        atomic_store_explicit(&comm->claim.lent, 1, memory_order_release);
        return 0;
    }
    if (seen == SHMTOPO_CLAIM_QUEUED)
        return 0;
    return shmtopo_fail(EBUSY, -1, "the comm is in use by another thread: it takes one call at a time "
                                   "(MPI_THREAD_SERIALIZED)");
}

int shmtopo_comm_queue_take(shmtopo_comm_t *comm, int64_t spin_ns, int64_t yield_ns)
{
    if (!comm)
        return shmtopo_fail(EBADF, -1, "communicator is NULL or freed");
    uintptr_t seen = SHMTOPO_CLAIM_QUEUED;
    if (!atomic_compare_exchange_strong_explicit(&comm->claim.user, &seen, (uintptr_t)pthread_self(),
                                                 memory_order_acquire, memory_order_relaxed))
        return shmtopo_fail(EBUSY, -1, "the comm's queue of nonblocking calls does not hold it");
    comm->claim.depth = 1;
    comm->claim.saved_spin_ns = comm->config.spin_ns;
    comm->claim.saved_yield_ns = comm->config.yield_ns;
    if (spin_ns >= 0)
        comm->config.spin_ns = spin_ns;
    if (yield_ns >= 0)
        comm->config.yield_ns = yield_ns;
    return 0;
}

void shmtopo_comm_queue_give(shmtopo_comm_t *comm, int more)
{
    if (!comm)
        return;
    const uintptr_t user = atomic_load_explicit(&comm->claim.user, memory_order_relaxed);
    if (user == (uintptr_t)pthread_self()) {
        comm->config.spin_ns = comm->claim.saved_spin_ns;
        comm->config.yield_ns = comm->claim.saved_yield_ns;
        comm->claim.depth = 0;
    } else if (user != SHMTOPO_CLAIM_QUEUED) {
        return;
    }
    atomic_store_explicit(&comm->claim.user, more ? SHMTOPO_CLAIM_QUEUED : 0, memory_order_release);
    /* after the user: a claim that still sees the runner then says
     * EINPROGRESS (and tries again), never EBUSY */
    if (!more)
        atomic_store_explicit(&comm->claim.lent, 0, memory_order_release);
}

/* The hook goes on the comm's claim when there is one (a collective's waits
 * are on its channel and its windows), else on the window's. */
int shmtopo_call_begin(shmtopo_comm_t *comm, shmtopo_win_t *win, shmtopo_release_t *release)
{
    if (comm && shmtopo_claim(&comm->claim, "the comm") < 0)
        return -1;
    if (win && shmtopo_claim(&win->claim, win->label) < 0) {
        const int err = errno;
        if (comm)
            shmtopo_unclaim(&comm->claim);
        errno = err;
        return -1;
    }
    if (comm)
        comm->claim.release = release;
    else if (win)
        win->claim.release = release;
    return 0;
}

void shmtopo_call_end(shmtopo_comm_t *comm, shmtopo_win_t *win)
{
    if (win) {
        win->claim.release = NULL;
        shmtopo_unclaim(&win->claim);
    }
    if (comm) {
        comm->claim.release = NULL;
        shmtopo_unclaim(&comm->claim);
    }
}

void shmtopo_release_armed(shmtopo_comm_t *comm)
{
    if (atomic_load_explicit(&comm->claim.user, memory_order_relaxed) == (uintptr_t)pthread_self() &&
        comm->claim.release) {
        shmtopo_release_t *release = comm->claim.release;
        comm->claim.release = NULL;
        release->release(release);
    }
}

shmtopo_release_t **shmtopo_armed_release(shmtopo_win_t *win)
{
    const uintptr_t me = (uintptr_t)pthread_self();
    if (atomic_load_explicit(&win->claim.user, memory_order_relaxed) == me && win->claim.release)
        return &win->claim.release;
    shmtopo_comm_t *comm = win->comm;
    if (comm && atomic_load_explicit(&comm->claim.user, memory_order_relaxed) == me)
        return &comm->claim.release;
    return NULL;
}
