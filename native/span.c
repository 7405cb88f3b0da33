/* Small collectives over a comm that spans nodes, whole in C. Each is the
 * binding's hierarchy (coll/across.py) in one call: the agreement over the
 * job, on the very signature the binding's general path agrees on (so ranks
 * on either path meet), the node's part in shared memory, one allgather
 * between the node leaders through the comm's leaders' transport (each leader
 * keeps what it needs: partials folded in node order give every leader the
 * same bits), then the node's part again. A failure after the agreement
 * leaves the comm, so that peers fail instead of waiting.
 *
 * Not taken (1, nothing done): calls whose gathered bytes exceed
 * SPAN_GATHERED, and reductions that accumulate in a wider type (16-bit
 * floats): the binding moves those in blocks. The rule reads agreed fields
 * only (the count, the element type, the nodes), so every rank of a call
 * that can succeed takes the same path. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "internal.h"
#include "state.h"

#define SPAN_GATHERED (64 * 1024) /* bytes one leader gathers from all nodes */

static int not_taken(const shmtopo_comm_t *comm, size_t count, int dtype, int reduces)
{
    const size_t size = shmtopo_dtype_size(dtype);
    if (!size || count > SPAN_GATHERED / size / (size_t)comm->nnodes)
        return 1;
    return reduces && shmtopo_dtype_accumulator(dtype) != dtype;
}

/* What travels with an agreement (at most SHMTOPO_INLINE bytes): this
 * rank's data (a bcast's: from local rank `from` of the root's node only),
 * and where the job's comes back. */
typedef struct payload {
    const void *mine;
    int from;
    void *result;
} payload_t;

/* The agreement over the job with this rank's own checks folded in (check:
 * 0, or -1 with the failure recorded), so that every rank fails with the
 * first failing rank's reason before anything moves; with a payload, the
 * call itself (shmtopo_agree_fold: one exchange between the leaders). */
static int agreed(shmtopo_comm_t *comm, int kind, size_t count, int dtype, int op, int root, int alg, int check,
                  const payload_t *p)
{
    shmtopo_sig_t sig = shmtopo_coll_sig(kind, count, dtype, op, root, alg);
    const int err = check < 0 ? (errno ? errno : EINVAL) : 0;
    if (p)
        return shmtopo_agree_fold(comm, &sig, err, p->mine, count, dtype, op, p->from, p->result);
    if (!err)
        return shmtopo_agree_call(comm, &sig);
    if (shmtopo_agree(comm, &sig, err, NULL, NULL, 0) == 0)
        return shmtopo_fail(EINVAL, -1, "%s: the agreement went through a failed check", shmtopo_kind_name(kind));
    return -1;
}

/* Whether the call is small enough to travel with its agreement: a bcast,
 * or a reduction folded in rank order (as the node's flat fold). */
static int travels(const shmtopo_comm_t *comm, size_t n, int alg)
{
    if (alg == SHMTOPO_COLL_AUTO)
        alg = comm->config.coll_alg;
    return n && n <= SHMTOPO_INLINE && alg != SHMTOPO_COLL_RSAG;
}

static int root_checked(const shmtopo_comm_t *comm, int root)
{
    if (root < 0 || root >= comm->world_size)
        return shmtopo_fail(EINVAL, -1, "root %d out of range [0, %d)", root, comm->world_size);
    return 0;
}

/* A reduction's own checks (those of the node's, coll.c). */
static int reduce_checked(const char *what, const void *send, void *recv, size_t count, int dtype, int op, int alg)
{
    const size_t n = count * shmtopo_dtype_size(dtype);
    errno = 0;
    if (shmtopo_reduce_check(dtype, op) < 0 || shmtopo_coll_check_alg(alg) < 0 ||
        shmtopo_coll_check_buffers(what, count, send, recv) < 0 ||
        shmtopo_coll_check_overlap(what, send, n, recv, n, recv == send) < 0)
        return -1;
    return 0;
}

/* After the agreement the call is half done on some ranks: leave. */
static int broken(shmtopo_comm_t *comm)
{
    const int err = errno;
    shmtopo_comm_leave(comm);
    errno = err;
    return -1;
}

/* The local rank of job rank `root` on this node, or -1. */
static int local_of(const shmtopo_comm_t *comm, int root)
{
    for (int r = 0; r < comm->size; r++)
        if (shmtopo_world(comm, r) == root)
            return r;
    return -1;
}

static __attribute__((noinline)) int across_barrier(shmtopo_comm_t *comm)
{
    if (shmtopo_comm_usable(comm, "barrier") < 0)
        return -1;
    static const shmtopo_sig_t sig = SHMTOPO_SIG_OF(SHMTOPO_KIND_BARRIER);
    return shmtopo_agree(comm, &sig, 0, NULL, NULL, 0); /* an agreement over the job is a barrier over it */
}

int shmtopo_span_barrier(shmtopo_comm_t *comm)
{
    if (!comm || comm->nnodes < 2) /* the node is the job */
        return shmtopo_barrier(comm);
    return across_barrier(comm);
}

/* Out of line, so that the node's call above is a plain jump. */
static __attribute__((noinline)) int across_allreduce(shmtopo_comm_t *comm, const void *send, void *recv, size_t count,
                                                      int dtype, int op, int alg)
{
    if (shmtopo_comm_usable(comm, "allreduce") < 0)
        return -1;
    if (not_taken(comm, count, dtype, 1))
        return 1;
    const int check = reduce_checked("allreduce", send, recv, count, dtype, op, alg);
    const payload_t p = {send, -1, recv};
    if (travels(comm, count * shmtopo_dtype_size(dtype), alg))
        return agreed(comm, SHMTOPO_KIND_ALLREDUCE, count, dtype, op, -1, alg, check, &p);
    if (agreed(comm, SHMTOPO_KIND_ALLREDUCE, count, dtype, op, -1, alg, check, NULL) < 0)
        return -1;
    if (!count)
        return 0;
    if (shmtopo_reduce(comm, send, recv, count, dtype, op, 0, alg) < 0)
        return broken(comm);
    if (comm->rank == 0 && shmtopo_leaders_combine(comm, recv, 1, count, dtype, op) < 0)
        return broken(comm);
    return shmtopo_bcast(comm, recv, count, dtype, 0) < 0 ? broken(comm) : 0;
}

int shmtopo_span_allreduce(shmtopo_comm_t *comm, const void *send, void *recv, size_t count, int dtype, int op,
                           int alg)
{
    if (!comm || comm->nnodes < 2) /* the node is the job */
        return shmtopo_allreduce(comm, send, recv, count, dtype, op, alg);
    return across_allreduce(comm, send, recv, count, dtype, op, alg);
}

static __attribute__((noinline)) int across_reduce(shmtopo_comm_t *comm, const void *send, void *recv, size_t count,
                                                   int dtype, int op, int root, int alg)
{
    if (shmtopo_comm_usable(comm, "reduce") < 0)
        return -1;
    if (not_taken(comm, count, dtype, 1))
        return 1;
    /* recv is the root's only (others may pass NULL, as to MPI); the other
     * ranks fold and pass on the way in room of their own */
    const size_t n = count * shmtopo_dtype_size(dtype);
    const int is_root = root == shmtopo_world(comm, comm->rank);
    errno = 0;
    const int check = root_checked(comm, root) < 0
        ? -1 : reduce_checked("reduce", send, is_root ? recv : (void *)send, count, dtype, op, alg);
    const payload_t p = {send, -1, is_root ? recv : NULL};
    if (travels(comm, n, alg))
        return agreed(comm, SHMTOPO_KIND_REDUCE, count, dtype, op, root, alg, check, &p);
    if (agreed(comm, SHMTOPO_KIND_REDUCE, count, dtype, op, root, alg, check, NULL) < 0)
        return -1;
    if (!count)
        return 0;
    void *room = is_root ? recv : malloc(n);
    if (!room)
        return shmtopo_fail(ENOMEM, -1, "reduce: out of memory"), broken(comm);
    int rc = shmtopo_reduce(comm, send, room, count, dtype, op, 0, alg);
    if (rc == 0 && comm->rank == 0)
        rc = shmtopo_leaders_combine(comm, room, 1, count, dtype, op);
    /* the result is at the node's rank 0: the root's node passes it on */
    const int here = local_of(comm, root);
    if (rc == 0 && here > 0)
        rc = shmtopo_bcast(comm, room, count, dtype, 0);
    if (!is_root)
        free(room);
    return rc < 0 ? broken(comm) : 0;
}

int shmtopo_span_reduce(shmtopo_comm_t *comm, const void *send, void *recv, size_t count, int dtype, int op,
                        int root, int alg)
{
    if (!comm || comm->nnodes < 2) /* the node is the job */
        return shmtopo_reduce(comm, send, recv, count, dtype, op, root, alg);
    return across_reduce(comm, send, recv, count, dtype, op, root, alg);
}

static __attribute__((noinline)) int across_bcast(shmtopo_comm_t *comm, const void *send, void *recv, size_t count,
                                                  int dtype, int root)
{
    if (shmtopo_comm_usable(comm, "bcast") < 0)
        return -1;
    if (not_taken(comm, count, dtype, 0))
        return 1;
    const size_t n = count * shmtopo_dtype_size(dtype);
    errno = 0;
    const int check = root_checked(comm, root) < 0 || shmtopo_coll_check_dtype(dtype) < 0 ||
                      shmtopo_coll_check_buffers("bcast", count, send, recv) < 0 ||
                      shmtopo_coll_check_overlap("bcast", send, n, recv, n, recv == send) < 0 ? -1 : 0;
    const payload_t p = {send, local_of(comm, root), recv};
    if (travels(comm, n, SHMTOPO_COLL_AUTO))
        return agreed(comm, SHMTOPO_KIND_BCAST, count, dtype, -1, root, -1, check, &p);
    if (agreed(comm, SHMTOPO_KIND_BCAST, count, dtype, -1, root, -1, check, NULL) < 0)
        return -1;
    if (!count)
        return 0;
    const int here = local_of(comm, root);
    if (here == comm->rank && send != recv)
        memcpy(recv, send, n);
    if (here >= 0 && shmtopo_bcast(comm, recv, count, dtype, here) < 0)
        return broken(comm);
    /* the leaders pass the root's data on: the node that has it to the others */
    if (comm->rank == 0 && shmtopo_leaders_combine(comm, recv, here >= 0, count, dtype, -1) < 0)
        return broken(comm);
    if (here < 0 && shmtopo_bcast(comm, recv, count, dtype, 0) < 0)
        return broken(comm);
    return 0;
}

/* One node, the root's data in a buffer of its own: into recv first. */
static __attribute__((noinline)) int node_bcast_from(shmtopo_comm_t *comm, const void *send, void *recv, size_t count,
                                                     int dtype, int root)
{
    const size_t n = count * shmtopo_dtype_size(dtype);
    if (root == comm->rank && n && send && recv)
        memmove(recv, send, n);
    return shmtopo_bcast(comm, recv, count, dtype, root);
}

int shmtopo_span_bcast(shmtopo_comm_t *comm, const void *send, void *recv, size_t count, int dtype, int root)
{
    if (!comm || comm->nnodes < 2) /* the node is the job */
        return send == recv || !comm ? shmtopo_bcast(comm, recv, count, dtype, root)
                                     : node_bcast_from(comm, send, recv, count, dtype, root);
    return across_bcast(comm, send, recv, count, dtype, root);
}
