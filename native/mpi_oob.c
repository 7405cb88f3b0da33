/* An out-of-band transport over MPI, reached through addresses the caller
 * looked up at run time: the core is built without MPI's headers and links no
 * MPI library, so it calls MPI_Iallgather, MPI_Ibarrier and MPI_Test through
 * prototypes of its own: handles are ints where they are 4 bytes wide
 * (MPICH's ABI) and pointers where they are 8 (Open MPI's, MPI 5's), and a
 * pointer to any struct is passed as a void pointer is.
 *
 * This is the node leaders' exchange of every call across nodes, so its fast
 * case stays in C: post, test for a few tens of microseconds, copy out.
 * A longer wait goes to the caller's slow_wait, which listens for news of a
 * death, honours the timeout and Ctrl-C (the binding's _oob.wait). */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

#define SPIN_NS 50000ull   /* test this long before handing a wait over */
#define STATUS_MAX 64      /* bytes of the MPI_Status a test may write */

typedef int (*iallgather_int_fn)(const void *, int, int, void *, int, int, int, int *);
typedef int (*iallgather_ptr_fn)(const void *, int, void *, void *, int, void *, void *, void **);
typedef int (*ibarrier_int_fn)(int, int *);
typedef int (*ibarrier_ptr_fn)(void *, void **);
typedef int (*test_fn)(void *, int *, void *);

typedef struct mpi_transport {
    shmtopo_mpi_calls_t calls;
    char *stage;     /* send, then size * n received bytes */
    size_t staged;   /* bytes allocated at stage */
} mpi_transport_t;

typedef union request {
    int i;
    void *p;
} request_t;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A request's handle as mpi4py takes it: an unsigned value of its width. */
static int64_t handle_value(const mpi_transport_t *t, const request_t *req)
{
    return t->calls.handle_size == 4 ? (int64_t)(uint32_t)req->i : (int64_t)(uintptr_t)req->p;
}

/* 0 once the request completed, else nonzero: an MPI error code, or what
 * slow_wait returned. On failure the stage is abandoned to MPI. */
static int complete(mpi_transport_t *t, request_t *req)
{
    _Alignas(16) char status[STATUS_MAX];
    const test_fn test = (test_fn)t->calls.test;
    uint64_t start = 0;
    for (unsigned i = 0;; i++) {
        int done = 0;
        const int rc = test(req, &done, status);
        if (rc != 0 || done)
            return rc;
        if (i % 16 == 15) {
            const uint64_t now = now_ns();
            if (!start)
                start = now;
            else if (now - start >= SPIN_NS)
                break;
        }
    }
    return t->calls.slow_wait(handle_value(t, req), t->calls.group);
}

static int abandoned(mpi_transport_t *t, int rc)
{
    t->stage = NULL; /* MPI may still write there: never free it */
    t->staged = 0;
    return rc ? rc : ECOMM;
}

static int mpi_allgather(const void *sendbuf, void *recvbuf, size_t nbytes, void *group)
{
    mpi_transport_t *t = group;
    const size_t size = (size_t)t->calls.size;
    if (nbytes > INT_MAX)
        return EMSGSIZE;
    const size_t need = (size + 1) * nbytes;
    if (need > t->staged) {
        char *stage = realloc(t->stage, need);
        if (!stage)
            return ENOMEM;
        t->stage = stage;
        t->staged = need;
    }
    memcpy(t->stage, sendbuf, nbytes);
    request_t req;
    memset(&req, 0, sizeof(req));
    int rc;
    if (t->calls.handle_size == 4)
        rc = ((iallgather_int_fn)t->calls.iallgather)(t->stage, (int)nbytes, (int)t->calls.byte,
                                                      t->stage + nbytes, (int)nbytes, (int)t->calls.byte,
                                                      (int)t->calls.comm, &req.i);
    else
        rc = ((iallgather_ptr_fn)t->calls.iallgather)(t->stage, (int)nbytes, (void *)(uintptr_t)t->calls.byte,
                                                      t->stage + nbytes, (int)nbytes,
                                                      (void *)(uintptr_t)t->calls.byte,
                                                      (void *)(uintptr_t)t->calls.comm, &req.p);
    if (rc != 0)
        return ECOMM;
    rc = complete(t, &req);
    if (rc != 0)
        return abandoned(t, rc);
    memcpy(recvbuf, t->stage + nbytes, size * nbytes);
    return 0;
}

static int mpi_barrier(void *group)
{
    mpi_transport_t *t = group;
    request_t req;
    memset(&req, 0, sizeof(req));
    const int rc = t->calls.handle_size == 4
        ? ((ibarrier_int_fn)t->calls.ibarrier)((int)t->calls.comm, &req.i)
        : ((ibarrier_ptr_fn)t->calls.ibarrier)((void *)(uintptr_t)t->calls.comm, &req.p);
    if (rc != 0)
        return ECOMM;
    return complete(t, &req);
}

int shmtopo_mpi_oob(const shmtopo_mpi_calls_t *calls, shmtopo_oob_t *oob)
{
    if (!calls || !oob || !calls->iallgather || !calls->ibarrier || !calls->test || !calls->slow_wait)
        return shmtopo_fail(EINVAL, -1, "mpi_oob: an MPI function or slow_wait is missing");
    if (calls->handle_size != 4 && calls->handle_size != (int)sizeof(void *))
        return shmtopo_fail(EINVAL, -1, "mpi_oob: MPI handles of %d bytes are not supported", calls->handle_size);
    if (calls->status_size <= 0 || calls->status_size > STATUS_MAX)
        return shmtopo_fail(EINVAL, -1, "mpi_oob: an MPI_Status of %d bytes is not supported", calls->status_size);
    if (calls->size < 1)
        return shmtopo_fail(EINVAL, -1, "mpi_oob: %d ranks", calls->size);
    mpi_transport_t *t = calloc(1, sizeof(*t));
    if (!t)
        return shmtopo_fail(ENOMEM, -1, "mpi_oob: out of memory");
    t->calls = *calls;
    oob->allgather = mpi_allgather;
    oob->barrier = mpi_barrier;
    oob->group = t;
    return 0;
}

void shmtopo_mpi_oob_free(shmtopo_oob_t *oob)
{
    if (!oob || oob->allgather != mpi_allgather)
        return;
    mpi_transport_t *t = oob->group;
    free(t->stage);
    free(t);
    oob->allgather = NULL;
    oob->barrier = NULL;
    oob->group = NULL;
}
