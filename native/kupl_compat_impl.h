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
    /* collective, like the creation: fails on every rank alike */
    if (shmtopo_attach_track_comm(c->impl) < 0) {
        compat_fail(__func__);
        shmtopo_comm_destroy(&c->impl);
        free(c);
        return SHMTOPO_COMPAT_CONST(ERROR);
    }
    c->rank = rank;
    c->size = size;
    compat_settings(SHMTOPO_COMPAT_API, rank, &c->backend, &c->fence_alg);
    *comm = c;
    return SHMTOPO_COMPAT_CONST(OK);
}

static void N(compat_win_unlink)(N(shm_win_h) w)
{
    if (w->prev)
        w->prev->next = w->next;
    else
        w->comm->wins = w->next;
    if (w->next)
        w->next->prev = w->prev;
}

/* Forward: comm_destroy frees the requests left. */
static void N(compat_request_drop)(N(shm_request_h) r);

int N(shm_comm_destroy)(N(shm_comm_h) comm)
{
    if (!comm)
        return compat_error(__func__, "comm is NULL");
    int failed = 0;
    /* What the program left, as KUPL frees it: requests (local), then
     * windows, oldest first, so every rank frees them in the same order. */
    while (comm->requests)
        N(compat_request_drop)(comm->requests);
    N(shm_win_h) w = comm->wins;
    while (w && w->next)
        w = w->next;
    while (w) {
        N(shm_win_h) newer = w->prev;
        int err = 0;
        if (failed || !compat_win_release(__func__, comm->impl, w->impl, &err)) {
            /* ranks hold different windows: leave the rest without waiting
             * for anyone, so that the comm itself can still be freed */
            if (!failed)
                compat_error(__func__, "ranks still hold different windows; leaving them");
            shmtopo_win_abandon(w->impl);
            failed = 1;
        }
        failed |= err;
        N(compat_win_unlink)(w);
        free(w);
        w = newer;
    }
    shmtopo_attach_untrack_comm(comm->impl);
    if (shmtopo_comm_destroy(&comm->impl) < 0) {
        compat_fail(__func__);
        if (comm->impl)
            return SHMTOPO_COMPAT_CONST(ERROR); /* a rank called something else: still there */
        failed = 1;
    }
    free(comm);
    return failed ? SHMTOPO_COMPAT_CONST(ERROR) : SHMTOPO_COMPAT_CONST(OK);
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

int N(shm_info_set)(N(info_flag_t) info_flag, uint32_t value)
{
    return compat_info_set(__func__, SHMTOPO_COMPAT_API, (int)info_flag, value);
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
    w->next = comm->wins;
    if (w->next)
        w->next->prev = w;
    comm->wins = w;
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
    int failed;
    if (!compat_win_release(__func__, win->comm->impl, win->impl, &failed))
        return SHMTOPO_COMPAT_CONST(ERROR); /* ranks freed different windows: still there */
    N(compat_win_unlink)(win);
    free(win);
    return failed ? SHMTOPO_COMPAT_CONST(ERROR) : SHMTOPO_COMPAT_CONST(OK);
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

void *N(shm_attach)(N(shm_addr_t) addr, size_t size)
{
    return compat_attach(__func__, addr.src_addr, addr.src_pid, addr.dst_pid, size);
}

void N(shm_detach)(void *ptr)
{
    if (shmtopo_detach(ptr) < 0)
        compat_fail(__func__);
}

int N(memcpy)(void *dst, const void *src, size_t count)
{
    return compat_memcpy(__func__, dst, src, count) < 0 ? SHMTOPO_COMPAT_CONST(ERROR)
                                                        : SHMTOPO_COMPAT_CONST(OK);
}

void N(error)(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    compat_log(SHMTOPO_COMPAT_API, fmt, ap);
    va_end(ap);
}

/* Persistent collectives: a handle around the core's request. */
struct N(shm_request) {
    shmtopo_request_t *impl;
    N(shm_comm_h) comm;
    struct N(shm_request) *prev, *next; /* in comm->requests */
};

/* Unlink from the comm and free (request_free, comm_destroy). */
static void N(compat_request_drop)(N(shm_request_h) r)
{
    if (r->prev)
        r->prev->next = r->next;
    else
        r->comm->requests = r->next;
    if (r->next)
        r->next->prev = r->prev;
    shmtopo_request_free(r->impl);
    free(r);
}

/* Finish an *_init: rc is the core's, impl its request. */
static int N(compat_request)(const char *fn, N(shm_comm_h) comm, int rc, shmtopo_request_t *impl,
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
    r->comm = comm;
    r->prev = NULL;
    r->next = comm->requests;
    if (r->next)
        r->next->prev = r;
    comm->requests = r;
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
    return N(compat_request)(__func__, comm, rc, impl, request);
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
    return N(compat_request)(__func__, comm, rc, impl, request);
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
    return N(compat_request)(__func__, comm, rc, impl, request);
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
    N(compat_request_drop)(request);
    return SHMTOPO_COMPAT_CONST(OK);
}

#undef N
