/* Body of the KUPL-style API for one prefix; included by kupl_compat.c with
 * SHMTOPO_COMPAT_NAME, SHMTOPO_COMPAT_CONST and SHMTOPO_COMPAT_API defined.
 * Thin type adapters only: the logic is in kupl_compat.c's helpers and the
 * core. No include guard: it is meant to be included once per prefix. */

#define N(x) SHMTOPO_COMPAT_NAME(x)

/* Trampolines: the core calls these with the comm wrapper as its group; they
 * call the program's callbacks with the program's group. */
static int N(compat_allgather)(const void *sendbuf, void *recvbuf, size_t nbytes, void *group)
{
    N(shm_comm_h) comm = group;
    int count = compat_count(nbytes);
    if (count < 0)
        return -1;
    /* an MPI error code is not an errno: any failure is just a failure */
    return comm->oob.oob_allgather(sendbuf, recvbuf, count, comm->group,
                                   SHMTOPO_COMPAT_CONST(SHM_DATATYPE_CHAR)) == 0 ? 0 : -1;
}

static int N(compat_barrier)(void *group)
{
    N(shm_comm_h) comm = group;
    return comm->oob.oob_barrier(comm->group) == 0 ? 0 : -1;
}

int N(shm_comm_create)(int size, int rank, int pid, N(shm_oob_cb_h) oob_cbs, void *group,
                       N(shm_comm_h) *comm)
{
    (void)pid; /* the core exchanges getpid() itself */
    if (!comm)
        return compat_error(__func__, "comm must not be NULL");
    if (!oob_cbs || !oob_cbs->oob_allgather || !oob_cbs->oob_barrier)
        return compat_error(__func__, "oob_cbs must give oob_allgather and oob_barrier");
    N(shm_comm_h) c = calloc(1, sizeof(*c));
    if (!c)
        return compat_error(__func__, "out of memory");
    c->oob = *oob_cbs;
    c->group = group;
    shmtopo_oob_t oob = {N(compat_allgather), N(compat_barrier), c};
    if (shmtopo_comm_create(size, rank, &oob, &c->impl) < 0) {
        free(c);
        return compat_fail(__func__);
    }
    c->rank = rank;
    c->size = size;
    compat_settings(SHMTOPO_COMPAT_API, rank, &c->backend, &c->fence_alg);
    *comm = c;
    return SHMTOPO_COMPAT_CONST(OK);
}

int N(shm_comm_destroy)(N(shm_comm_h) comm)
{
    if (!comm)
        return compat_error(__func__, "comm is NULL");
    int rc = shmtopo_comm_destroy(comm->impl);
    free(comm);
    return rc < 0 ? compat_fail(__func__) : SHMTOPO_COMPAT_CONST(OK);
}

int N(shm_comm_rank)(N(shm_comm_h) comm, int *rank)
{
    if (!comm || !rank)
        return compat_error(__func__, "comm and rank must not be NULL");
    *rank = comm->rank;
    return SHMTOPO_COMPAT_CONST(OK);
}

int N(shm_comm_size)(N(shm_comm_h) comm, int *size)
{
    if (!comm || !size)
        return compat_error(__func__, "comm and size must not be NULL");
    *size = comm->size;
    return SHMTOPO_COMPAT_CONST(OK);
}

int N(shm_win_alloc)(size_t size, N(shm_comm_h) comm, void **baseptr, N(shm_win_h) *win)
{
    if (!comm)
        return compat_error(__func__, "comm is NULL");
    N(shm_win_h) w = calloc(1, sizeof(*w));
    const char *invalid = !baseptr || !win ? "baseptr and win must not be NULL"
                          : !w             ? "out of memory"
                                           : NULL;
    void *base;
    shmtopo_win_t *impl;
    if (compat_win_alloc(__func__, comm->impl, comm->backend, comm->fence_alg, size, invalid,
                         &base, &impl) < 0) {
        free(w);
        return SHMTOPO_COMPAT_CONST(ERROR);
    }
    w->rank = comm->rank;
    w->size = comm->size;
    w->baseptr = base;
    w->bytes = size;
    w->comm = comm;
    w->impl = impl;
    *baseptr = base;
    *win = w;
    return SHMTOPO_COMPAT_CONST(OK);
}

int N(shm_win_query)(N(shm_win_h) win, int rank, void **baseptr)
{
    if (!win || !baseptr)
        return compat_error(__func__, "win and baseptr must not be NULL");
    if (shmtopo_win_query(win->impl, rank, baseptr, NULL) < 0)
        return compat_fail(__func__);
    return SHMTOPO_COMPAT_CONST(OK);
}

int N(shm_win_free)(N(shm_win_h) win)
{
    if (!win)
        return compat_error(__func__, "win is NULL");
    int rc = shmtopo_win_free(win->impl);
    free(win);
    return rc < 0 ? compat_fail(__func__) : SHMTOPO_COMPAT_CONST(OK);
}

int N(shm_fence)(N(shm_win_h) win)
{
    if (!win)
        return compat_error(__func__, "win is NULL");
    if (shmtopo_win_fence(win->impl) < 0)
        return compat_fail(__func__);
    return SHMTOPO_COMPAT_CONST(OK);
}

int N(shm_peer_fence)(N(shm_win_h) win, int remote_rank)
{
    if (!win)
        return compat_error(__func__, "win is NULL");
    if (shmtopo_win_peer_fence(win->impl, remote_rank) < 0)
        return compat_fail(__func__);
    return SHMTOPO_COMPAT_CONST(OK);
}

/* Persistent collectives: a handle around the core's request. */
struct N(shm_request) {
    shmtopo_request_t *impl;
};

/* Finish an *_init: rc is the core's, impl its request. */
static int N(compat_request)(const char *fn, int rc, shmtopo_request_t *impl,
                             N(shm_request_h) *request)
{
    if (rc < 0)
        return compat_fail(fn);
    N(shm_request_h) r = malloc(sizeof(*r));
    if (!r) {
        shmtopo_request_free(impl);
        return compat_error(fn, "out of memory");
    }
    r->impl = impl;
    *request = r;
    return SHMTOPO_COMPAT_CONST(OK);
}

int N(shm_allreduce_init)(const void *sendbuf, void *recvbuf, int count,
                          N(shm_datatype_t) datatype, N(shm_reduce_op_t) op, N(shm_comm_h) comm,
                          N(shm_request_h) *request)
{
    if (!comm)
        return compat_error(__func__, "comm is NULL");
    char why[160];
    const char *bad = compat_init_check(request, count, sendbuf && recvbuf, why, sizeof(why));
    int dtype = bad ? -1 : compat_dtype("datatype", (int)datatype, why, sizeof(why));
    int sop = dtype < 0 ? -1 : compat_op((int)op, why, sizeof(why));
    if (bad || sop < 0)
        return compat_refuse(__func__, comm->impl, SHMTOPO_KIND_ALLREDUCE, why);
    shmtopo_request_t *impl = NULL;
    int rc = shmtopo_allreduce_init(comm->impl, sendbuf, recvbuf, (size_t)count, dtype, sop,
                                    SHMTOPO_COLL_AUTO, &impl);
    return N(compat_request)(__func__, rc, impl, request);
}

int N(shm_bcast_init)(void *buffer, int count, N(shm_datatype_t) datatype, int root,
                      N(shm_comm_h) comm, N(shm_request_h) *request)
{
    if (!comm)
        return compat_error(__func__, "comm is NULL");
    char why[160];
    const char *bad = compat_init_check(request, count, buffer != NULL, why, sizeof(why));
    int dtype = bad ? -1 : compat_dtype("datatype", (int)datatype, why, sizeof(why));
    if (dtype < 0)
        return compat_refuse(__func__, comm->impl, SHMTOPO_KIND_BCAST, why);
    shmtopo_request_t *impl = NULL;
    int rc = shmtopo_bcast_init(comm->impl, buffer, (size_t)count, dtype, root, &impl);
    return N(compat_request)(__func__, rc, impl, request);
}

int N(shm_alltoall_init)(const void *sendbuf, int sendcount, N(shm_datatype_t) sendtype,
                         void *recvbuf, int recvcount, N(shm_datatype_t) recvtype,
                         N(shm_comm_h) comm, N(shm_request_h) *request)
{
    if (!comm)
        return compat_error(__func__, "comm is NULL");
    char why[200];
    const char *bad = compat_init_check(request, sendcount, sendbuf && recvbuf, why, sizeof(why));
    int dtype = bad ? -1 : compat_dtype("sendtype", (int)sendtype, why, sizeof(why));
    if (dtype >= 0 && compat_dtype("recvtype", (int)recvtype, why, sizeof(why)) < 0)
        dtype = -1;
    if (dtype >= 0 && (recvcount != sendcount || recvtype != sendtype)) {
        snprintf(why, sizeof(why), "recvcount and recvtype (%d, %d) must equal sendcount and sendtype (%d, %d)",
                 recvcount, (int)recvtype, sendcount, (int)sendtype);
        dtype = -1;
    }
    if (dtype < 0)
        return compat_refuse(__func__, comm->impl, SHMTOPO_KIND_ALLTOALL, why);
    shmtopo_request_t *impl = NULL;
    int rc = shmtopo_alltoall_init(comm->impl, sendbuf, recvbuf, (size_t)sendcount, dtype, &impl);
    return N(compat_request)(__func__, rc, impl, request);
}

int N(shm_request_start)(N(shm_request_h) request)
{
    if (!request)
        return compat_error(__func__, "request is NULL");
    if (shmtopo_request_start(request->impl) < 0)
        return compat_fail(__func__);
    return SHMTOPO_COMPAT_CONST(OK);
}

int N(shm_request_wait)(N(shm_request_h) request)
{
    if (!request)
        return compat_error(__func__, "request is NULL");
    if (shmtopo_request_wait(request->impl) < 0)
        return compat_fail(__func__);
    return SHMTOPO_COMPAT_CONST(OK);
}

int N(shm_request_free)(N(shm_request_h) request)
{
    if (!request)
        return compat_error(__func__, "request is NULL");
    int rc = shmtopo_request_free(request->impl);
    free(request);
    return rc < 0 ? compat_fail(__func__) : SHMTOPO_COMPAT_CONST(OK);
}

#undef N
