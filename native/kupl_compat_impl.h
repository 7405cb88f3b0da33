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
    return comm->oob.oob_allgather(sendbuf, recvbuf, count, comm->group,
                                   SHMTOPO_COMPAT_CONST(SHM_DATATYPE_CHAR));
}

static int N(compat_barrier)(void *group)
{
    N(shm_comm_h) comm = group;
    return comm->oob.oob_barrier(comm->group);
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
    c->backend = compat_backend(SHMTOPO_COMPAT_API, rank);
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
    if (compat_win_alloc(__func__, SHMTOPO_COMPAT_API, comm->impl, comm->backend, size,
                         invalid, &base, &impl) < 0) {
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

#undef N
