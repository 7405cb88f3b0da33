/* Persistent collectives: the arguments are checked and kept once, so each
 * start costs one call and no argument handling. A start runs the whole
 * collective (shared memory makes it short), so wait has nothing left to do. */
#include <errno.h>
#include <stdlib.h>

#include "internal.h"

enum request_kind { REQ_ALLREDUCE, REQ_BCAST, REQ_ALLTOALL };

struct shmtopo_request {
    enum request_kind kind;
    shmtopo_comm_t *comm;
    const void *send;
    void *recv;
    size_t count;
    int dtype, op, root, alg;
};

static int make(shmtopo_comm_t *comm, int dtype, shmtopo_request_t **reqp, shmtopo_request_t init)
{
    if (!comm)
        return shmtopo_fail(EBADF, -1, "communicator is NULL or freed");
    if (!reqp)
        return shmtopo_fail(EINVAL, -1, "request pointer is NULL");
    if (!shmtopo_dtype_size(dtype))
        return shmtopo_fail(EINVAL, -1, "unknown element type %d", dtype);
    shmtopo_request_t *req = malloc(sizeof(*req));
    if (!req)
        return shmtopo_fail(ENOMEM, -1, "out of memory");
    *req = init;
    *reqp = req;
    return 0;
}

int shmtopo_allreduce_init(shmtopo_comm_t *comm, const void *send, void *recv, size_t count,
                           int dtype, int op, int alg, shmtopo_request_t **reqp)
{
    if (shmtopo_reduce_check(dtype, op) < 0)
        return -1;
    return make(comm, dtype, reqp, (shmtopo_request_t){REQ_ALLREDUCE, comm, send, recv, count,
                                                       dtype, op, 0, alg});
}

int shmtopo_bcast_init(shmtopo_comm_t *comm, void *buf, size_t count, int dtype, int root,
                       shmtopo_request_t **reqp)
{
    if (comm && (root < 0 || root >= comm->size))
        return shmtopo_fail(EINVAL, root, "root %d out of range [0, %d)", root, comm->size);
    return make(comm, dtype, reqp, (shmtopo_request_t){REQ_BCAST, comm, buf, buf, count, dtype,
                                                       0, root, 0});
}

int shmtopo_alltoall_init(shmtopo_comm_t *comm, const void *send, void *recv, size_t count,
                          int dtype, shmtopo_request_t **reqp)
{
    return make(comm, dtype, reqp, (shmtopo_request_t){REQ_ALLTOALL, comm, send, recv, count,
                                                       dtype, 0, 0, 0});
}

int shmtopo_request_start(shmtopo_request_t *req)
{
    if (!req)
        return shmtopo_fail(EBADF, -1, "request is NULL or freed");
    switch (req->kind) {
    case REQ_ALLREDUCE:
        return shmtopo_allreduce(req->comm, req->send, req->recv, req->count, req->dtype, req->op,
                                 req->alg);
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
