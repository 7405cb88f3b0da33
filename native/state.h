/* state.c: whether this process may act as a comm's rank. */
#ifndef SHMTOPO_STATE_H
#define SHMTOPO_STATE_H

#include "internal.h"

/* Bumped in every fork child: a comm remembers the value of the
 * process that made it. Hidden: read directly on every call, not through
 * the GOT. */
extern __attribute__((visibility("hidden"))) _Atomic unsigned shmtopo_fork_generation;
/* Set the failure of a comm shmtopo_comm_usable refused (EBADF, ESRCH,
 * EPIPE). */
void shmtopo_comm_unusable(const shmtopo_comm_t *comm, const char *what);
/* 0 in the process that made the comm, -1/ESRCH in a fork child of it. */
int shmtopo_comm_same_process(const shmtopo_comm_t *comm);

/* 0 when this process may act as the comm's rank now: a comm exists, this is
 * the process that made it (not a fork child) and no wait broke it; else -1
 * (EBADF, ESRCH, EPIPE). `what` names the call for the message. On the path
 * of every collective: the common case is a few loads. */
static inline int shmtopo_comm_usable(const shmtopo_comm_t *comm, const char *what)
{
    if (comm && comm->chan.win && !comm->broken &&
        comm->fork_generation == atomic_load_explicit(&shmtopo_fork_generation, memory_order_relaxed))
        return 0;
    /* a call, then a constant: the caller's common path keeps no frame */
    shmtopo_comm_unusable(comm, what);
    return -1;
}

/* This thread's calls only, until shmtopo_unclaim (claims nest): 0, or -1
 * with EBUSY when another thread holds it; `what` names the object. */
int shmtopo_claim(shmtopo_claim_t *claim, const char *what);
void shmtopo_unclaim(shmtopo_claim_t *claim);

/* Where this thread's call on `win` or on its comm armed a release hook
 * (shmtopo_call_begin): the claim's slot, or NULL. Another thread's hook is
 * never returned: only the claim's user runs it. */
shmtopo_release_t **shmtopo_armed_release(shmtopo_win_t *win);
/* Run this thread's armed hook of its call on `comm` now, as a long wait
 * does (the binding's lock then stays released until the call returns):
 * before calling a library that takes locks of its own, which its threads
 * may hold while they wait for the binding's (MPI's, around callbacks into
 * Python). */
void shmtopo_release_armed(shmtopo_comm_t *comm);

#endif /* SHMTOPO_STATE_H */
