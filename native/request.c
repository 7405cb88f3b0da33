/* Persistent collectives: the arguments are checked and kept once, so each
 * start costs one call and no argument handling (an allreduce's start runs
 * it from the signature and checks made at its init). A start runs the
 * whole collective (shared memory makes it short), so wait has nothing left
 * to do. */
#include <errno.h>
#include <stdlib.h>

#include "coll.h"
#include "internal.h"
#include "state.h"

enum request_kind { REQ_ALLREDUCE, REQ_BCAST, REQ_ALLTOALL };

struct shmtopo_request {
    enum request_kind kind;
    shmtopo_comm_t *comm;
    const void *send;
    void *recv;
    size_t count;
    int dtype, op, root, alg;
    shmtopo_sig_t run;       /* an allreduce's: its start's signature, its arguments checked */
};

/* Check on this rank, agree on every rank, then record. The request's
 * signature marks it as an init, so a rank that starts the collective
 * itself meanwhile fails instead of being taken for one. */
static int make(shmtopo_comm_t *comm, int kind, int err, shmtopo_request_t **reqp, shmtopo_request_t init)
{
    if (shmtopo_comm_usable(comm, shmtopo_kind_name(kind)) < 0)
        return -1;
    if (!err && !reqp)
        shmtopo_fail(err = EINVAL, -1, "request pointer is NULL");
    if (!err && !shmtopo_dtype_size(init.dtype))
        shmtopo_fail(err = EINVAL, -1, "unknown element type %d", init.dtype);
    if (!err && init.count && (!init.send || !init.recv))
        shmtopo_fail(err = EINVAL, -1, "%s_init: NULL buffer for %zu elements", shmtopo_kind_name(kind), init.count);
    if (!err && init.kind == REQ_ALLREDUCE &&
        shmtopo_coll_allreduce_prepare(comm, init.send, init.recv, init.count, init.dtype, init.op, init.alg,
                                       &init.run) < 0)
        err = errno ? errno : EINVAL;
    shmtopo_sig_t sig = shmtopo_sig(kind);
    sig.flags = SHMTOPO_SIG_INIT;
    sig.count = init.count;
    sig.dtype = init.dtype;
    sig.op = kind == SHMTOPO_KIND_ALLREDUCE ? init.op : -1;
    sig.root = kind == SHMTOPO_KIND_BCAST ? init.root : -1;
    shmtopo_request_t *req = err ? NULL : malloc(sizeof(*req));
    if (!err && !req)
        shmtopo_fail(err = ENOMEM, -1, "out of memory");
    if (shmtopo_agree(comm, &sig, err, NULL, NULL, 0) < 0) {
        free(req);
        return -1;
    }
    *req = init;
    *reqp = req;
    return 0;
}

int shmtopo_allreduce_init(shmtopo_comm_t *comm, const void *send, void *recv, size_t count,
                           int dtype, int op, int alg, shmtopo_request_t **reqp)
{
    int err = shmtopo_reduce_check(dtype, op) < 0 ? errno : 0;
    if (!err && alg != SHMTOPO_COLL_AUTO && alg != SHMTOPO_COLL_FLAT && alg != SHMTOPO_COLL_RSAG)
        shmtopo_fail(err = EINVAL, -1, "unknown algorithm %d (auto, flat or rsag)", alg);
    return make(comm, SHMTOPO_KIND_ALLREDUCE, err, reqp,
                (shmtopo_request_t){REQ_ALLREDUCE, comm, send, recv, count, dtype, op, 0, alg, {0}});
}

int shmtopo_bcast_init(shmtopo_comm_t *comm, void *buf, size_t count, int dtype, int root,
                       shmtopo_request_t **reqp)
{
    int err = 0;
    if (comm && (root < 0 || root >= comm->size))
        shmtopo_fail(err = EINVAL, -1, "root %d out of range [0, %d)", root, comm->size);
    return make(comm, SHMTOPO_KIND_BCAST, err, reqp,
                (shmtopo_request_t){REQ_BCAST, comm, buf, buf, count, dtype, 0, root, 0, {0}});
}

int shmtopo_alltoall_init(shmtopo_comm_t *comm, const void *send, void *recv, size_t count,
                          int dtype, shmtopo_request_t **reqp)
{
    return make(comm, SHMTOPO_KIND_ALLTOALL, 0, reqp,
                (shmtopo_request_t){REQ_ALLTOALL, comm, send, recv, count, dtype, 0, 0, 0, {0}});
}

int shmtopo_request_start(shmtopo_request_t *req)
{
    if (!req)
        return shmtopo_fail(EBADF, -1, "request is NULL or freed");
    switch (req->kind) {
    case REQ_ALLREDUCE:
        return shmtopo_coll_allreduce_run(req->comm, &req->run, req->send, req->recv, req->count, req->dtype,
                                          req->op);
    case REQ_BCAST:
        return shmtopo_bcast(req->comm, req->recv, req->count, req->dtype, req->root);
    case REQ_ALLTOALL:
        return shmtopo_alltoall(req->comm, req->send, req->recv, req->count, req->dtype);
    }
    return shmtopo_fail(EINVAL, -1, "corrupt request");
}

int shmtopo_request_wait(shmtopo_request_t *req)
{
    return req ? 0 : shmtopo_fail(EBADF, -1, "request is NULL or freed");
}

int shmtopo_request_free(shmtopo_request_t *req)
{
    free(req);
    return 0;
}
