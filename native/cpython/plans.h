/* native/cpython/plans.h: part of shmtopo._fastpath, included once by
 * fastpath.c in its place (one translation unit).
 *
 * The drop-in's entries per call (shmtopo.accel.plans): what each plain
 * call runs in shared memory. */

/* An entry's end: both messages released, then its answer. */
static PyObject *released(struct msg *a, struct msg *b, PyObject *answer)
{
    msg_release(a);
    msg_release(b);
    return answer;
}

/* accel_allreduce(handle, windows, sendbuf, recvbuf, op) -> True | None
 * (windows: the comm's list of its Windows, as for allreduce) */
static PyObject *accel_allreduce(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5)
        return PyErr_Format(PyExc_TypeError, "accel_allreduce takes 5 arguments"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    int op;
    struct msg in, out;
    shmtopo_win_t *win = NULL;
    size_t offset = 0;
    if (!comm || !accel_in_out(args[2], args[3], &in, &out))
        Py_RETURN_NONE;
    enum place place = place_of(args[1], comm, &in.at, &win, &offset);
    if (place == UNKNOWN || (op = accel_op(args[4], in.type)) < 0
        || (place == WINDOWED && !apart_or_same(&in.at, &out.at)))
        return released(&in, &out, new_ref(Py_None));
    int rc = reduce_at(place, comm, win, offset, &in.at, out.at.buf, in.code, op, -1), err = errno;
    return released(&in, &out, rc > 0 ? new_ref(Py_None) : accel_done(rc, err)); /* rc 1: declined */
}

/* accel_reduce(handle, windows, sendbuf, recvbuf, op, root) -> True | None
 * (recvbuf is read on the root only, as mpi4py does, where sendbuf may be IN_PLACE) */
static PyObject *accel_reduce(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6)
        return PyErr_Format(PyExc_TypeError, "accel_reduce takes 6 arguments"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    int op, root;
    struct msg in, out = {0};
    shmtopo_win_t *win = NULL;
    size_t offset = 0;
    if (!comm || (root = root_in(args[5], comm)) < 0)
        Py_RETURN_NONE;
    const int is_root = root == shmtopo_comm_job_rank(comm);
    if (is_root ? !accel_in_out(args[2], args[3], &in, &out) : !accel_msg(args[2], 0, 1, &in))
        Py_RETURN_NONE;
    enum place place = place_of(args[1], comm, &in.at, &win, &offset);
    if (place == UNKNOWN || (op = accel_op(args[4], in.type)) < 0
        || (place == WINDOWED && !apart_or_same(&in.at, &out.at)))
        return released(&in, &out, new_ref(Py_None));
    int rc = reduce_at(place, comm, win, offset, &in.at, out.at.buf, in.code, op, root), err = errno;
    return released(&in, &out, rc > 0 ? new_ref(Py_None) : accel_done(rc, err)); /* rc 1: declined */
}

/* accel_bcast(handle, windows, buf, root) -> True | None (a read-only root
 * buffer, which the planner copies, is not plain) */
static PyObject *accel_bcast(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4)
        return PyErr_Format(PyExc_TypeError, "accel_bcast takes 4 arguments"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    int root;
    struct msg buf;
    shmtopo_win_t *win = NULL;
    size_t offset = 0;
    if (!comm || (root = root_in(args[3], comm)) < 0 || !accel_msg(args[2], 1, 1, &buf))
        Py_RETURN_NONE;
    enum place place = place_of(args[1], comm, &buf.at, &win, &offset);
    if (place == UNKNOWN) {
        msg_release(&buf);
        Py_RETURN_NONE;
    }
    int rc = bcast_at(place, comm, win, offset, &buf.at, buf.code, root), err = errno;
    msg_release(&buf);
    return rc > 0 ? new_ref(Py_None) : accel_done(rc, err); /* rc 1: declined */
}

/* accel_allgather(handle, windows, sendbuf, recvbuf) -> True | None
 * (sendbuf IN_PLACE: this rank's block of recvbuf) */
static PyObject *accel_allgather(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4)
        return PyErr_Format(PyExc_TypeError, "accel_allgather takes 4 arguments"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    struct msg in, out;
    shmtopo_win_t *win = NULL;
    size_t offset = 0;
    const int size = comm ? shmtopo_comm_size(comm) : 0;
    if (!comm || !accel_msg(args[3], 1, size, &out)) /* recvbuf: a block per rank */
        Py_RETURN_NONE;
    if (accel_in_place(args[2])) {
        accel_block(&out, shmtopo_comm_rank(comm), size, &in);
    } else if (!accel_msg(args[2], 0, 1, &in)) {
        msg_release(&out);
        Py_RETURN_NONE;
    }
    enum place place = place_of(args[1], comm, &in.at, &win, &offset);
    if (place == UNKNOWN || out.code != in.code || out.at.len != in.at.len * size
        || (place == WINDOWED && overlaps(&in.at, &out.at)))
        return released(&in, &out, new_ref(Py_None));
    int rc = allgather_at(place, comm, win, offset, &in.at, &out.at, in.code), err = errno;
    return released(&in, &out, accel_done(rc, err));
}

/* accel_alltoall(handle, sendbuf, recvbuf) -> True | None (send and recv a
 * block per rank; the same buffer, or apart) */
static PyObject *accel_alltoall(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3)
        return PyErr_Format(PyExc_TypeError, "accel_alltoall takes 3 arguments"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    struct msg in, out;
    const int size = comm ? shmtopo_comm_size(comm) : 0;
    if (!comm || !accel_msg(args[1], 0, size, &in))
        Py_RETURN_NONE;
    if (!accel_msg(args[2], 1, size, &out)) {
        msg_release(&in);
        Py_RETURN_NONE;
    }
    if (out.code != in.code || out.at.len != in.at.len || !apart_or_same(&in.at, &out.at))
        return released(&in, &out, new_ref(Py_None));
    int rc, err;
    const size_t count = (size_t)in.at.len / shmtopo_dtype_size(in.code) / (size_t)size;
    CORE_CALL(comm, NULL, shmtopo_alltoall(comm, in.at.buf, out.at.buf, count, in.code));
    return released(&in, &out, accel_done(rc, err));
}

/* A rooted call's root side: `whole`, a block per rank, and `one`, the
 * root's own block (IN_PLACE: its block of whole), of one type, apart from
 * each other; 0 with nothing held otherwise. */
static int accel_rooted(PyObject *whole_spec, int whole_writable, PyObject *one_spec, int one_writable, int size,
                        int root, struct msg *whole, struct msg *one)
{
    if (!accel_msg(whole_spec, whole_writable, size, whole))
        return 0;
    if (accel_in_place(one_spec)) {
        accel_block(whole, root, size, one);
        return 1;
    }
    if (!accel_msg(one_spec, one_writable, 1, one)) {
        msg_release(whole);
        return 0;
    }
    if (one->code != whole->code || whole->at.len != one->at.len * size || overlaps(&one->at, &whole->at)) {
        msg_release(one);
        msg_release(whole);
        return 0;
    }
    return 1;
}

/* accel_gather(handle, sendbuf, recvbuf, root) -> True | None (recvbuf is read on the root only) */
static PyObject *accel_gather(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4)
        return PyErr_Format(PyExc_TypeError, "accel_gather takes 4 arguments"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    struct msg in, out = {0};
    int root;
    if (!comm || (root = root_in(args[3], comm)) < 0)
        Py_RETURN_NONE;
    const int size = shmtopo_comm_size(comm), is_root = root == shmtopo_comm_rank(comm);
    if (is_root ? !accel_rooted(args[2], 1, args[1], 0, size, root, &out, &in) : !accel_msg(args[1], 0, 1, &in))
        Py_RETURN_NONE;
    int rc, err;
    const size_t count = (size_t)in.at.len / shmtopo_dtype_size(in.code);
    CORE_CALL(comm, NULL, shmtopo_gather(comm, in.at.buf, is_root ? out.at.buf : NULL, count, in.code, root));
    return released(&in, &out, accel_done(rc, err));
}

/* accel_scatter(handle, sendbuf, recvbuf, root) -> True | None (sendbuf is read on the root only) */
static PyObject *accel_scatter(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4)
        return PyErr_Format(PyExc_TypeError, "accel_scatter takes 4 arguments"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    struct msg in = {0}, out;
    int root;
    if (!comm || (root = root_in(args[3], comm)) < 0)
        Py_RETURN_NONE;
    const int size = shmtopo_comm_size(comm), is_root = root == shmtopo_comm_rank(comm);
    if (is_root ? !accel_rooted(args[1], 0, args[2], 1, size, root, &in, &out) : !accel_msg(args[2], 1, 1, &out))
        Py_RETURN_NONE;
    int rc, err;
    const size_t count = (size_t)out.at.len / shmtopo_dtype_size(out.code);
    CORE_CALL(comm, NULL, shmtopo_scatter(comm, is_root ? in.at.buf : NULL, out.at.buf, count, out.code, root));
    return released(&in, &out, accel_done(rc, err));
}

/* accel_alltoallv(handle, sendbuf, recvbuf) -> True | None (apart) */
static PyObject *accel_alltoallv(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3)
        return PyErr_Format(PyExc_TypeError, "accel_alltoallv takes 3 arguments"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    if (!comm)
        Py_RETURN_NONE;
    const int size = shmtopo_comm_size(comm);
    size_t *sizes = PyMem_Malloc(4 * (size_t)size * sizeof(size_t));
    if (!sizes)
        return PyErr_NoMemory();
    size_t *sc = sizes, *sd = sc + size, *rc_ = sd + size, *rd = rc_ + size;
    struct msg in, out;
    PyObject *result = NULL;
    int ran = 0;
    if (accel_vector(args[1], 0, size, &in, sc, sd)) {
        if (accel_vector(args[2], 1, size, &out, rc_, rd)) {
            if (out.code == in.code && !overlaps(&in.at, &out.at)) {
                int rc, err;
                CORE_CALL(comm, NULL, shmtopo_alltoallv(comm, in.at.buf, sc, sd, out.at.buf, rc_, rd, in.code));
                ran = 1;
                result = accel_done(rc, err);
            }
            msg_release(&out);
        }
        msg_release(&in);
    }
    PyMem_Free(sizes);
    return ran ? result : new_ref(Py_None);
}

/* A v-variant's vector side and this rank's own block: `vector` (counts
 * and displs in sizes, 2n) and `own`, of its type and of counts[rank]
 * entries, apart from it (the v-gathers receive into the vector, Scatterv
 * sends from it); 0 with nothing held otherwise. */
static int accel_v_and_own(PyObject *vector, int vector_writable, PyObject *own, int own_writable, int size,
                           int rank, size_t *sizes, struct msg *v, struct msg *o)
{
    if (!accel_vector(vector, vector_writable, size, v, sizes, sizes + size))
        return 0;
    if (!accel_msg(own, own_writable, 1, o)) {
        msg_release(v);
        return 0;
    }
    if (o->code != v->code || (size_t)o->at.len != sizes[rank] * shmtopo_dtype_size(o->code)
        || overlaps(&o->at, &v->at)) {
        msg_release(o);
        msg_release(v);
        return 0;
    }
    return 1;
}

/* accel_allgatherv(handle, sendbuf, recvbuf) -> True | None */
static PyObject *accel_allgatherv(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3)
        return PyErr_Format(PyExc_TypeError, "accel_allgatherv takes 3 arguments"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    if (!comm)
        Py_RETURN_NONE;
    const int size = shmtopo_comm_size(comm), rank = shmtopo_comm_rank(comm);
    size_t *sizes = PyMem_Malloc(2 * (size_t)size * sizeof(size_t));
    if (!sizes)
        return PyErr_NoMemory();
    struct msg in, out;
    PyObject *result = NULL;
    int ran = 0;
    if (accel_v_and_own(args[2], 1, args[1], 0, size, rank, sizes, &out, &in)) {
        int rc, err;
        CORE_CALL(comm, NULL, shmtopo_allgatherv(comm, in.at.buf, sizes[rank], out.at.buf, sizes, sizes + size,
                                                 in.code));
        ran = 1;
        result = released(&in, &out, accel_done(rc, err));
    }
    PyMem_Free(sizes);
    return ran ? result : new_ref(Py_None);
}

/* Gatherv (scatter 0) and Scatterv (1): off the root one message (Gatherv's
 * sendbuf, Scatterv's recvbuf); at the root the vector (Gatherv's recvbuf,
 * Scatterv's sendbuf) and the root's own block. */
static PyObject *accel_v_rooted(PyObject *const *args, Py_ssize_t nargs, int scatter)
{
    if (nargs != 4)
        return PyErr_Format(PyExc_TypeError, "%s takes 4 arguments", scatter ? "accel_scatterv" : "accel_gatherv"),
               NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    int root;
    if (!comm || (root = root_in(args[3], comm)) < 0)
        Py_RETURN_NONE;
    const int size = shmtopo_comm_size(comm), rank = shmtopo_comm_rank(comm);
    PyObject *vector = args[scatter ? 1 : 2], *own = args[scatter ? 2 : 1];
    struct msg v, o;
    int rc, err;
    if (rank != root) {
        if (!accel_msg(own, scatter, 1, &o))
            Py_RETURN_NONE;
        const size_t count = (size_t)o.at.len / shmtopo_dtype_size(o.code);
        CORE_CALL(comm, NULL, scatter ? shmtopo_scatterv(comm, NULL, NULL, NULL, o.at.buf, count, o.code, root)
                                      : shmtopo_gatherv(comm, o.at.buf, count, NULL, NULL, NULL, o.code, root));
        msg_release(&o);
        return accel_done(rc, err);
    }
    size_t *sizes = PyMem_Malloc(2 * (size_t)size * sizeof(size_t));
    if (!sizes)
        return PyErr_NoMemory();
    PyObject *result = NULL;
    int ran = 0;
    if (accel_v_and_own(vector, !scatter, own, scatter, size, rank, sizes, &v, &o)) {
        const size_t *counts = sizes, *displs = sizes + size;
        CORE_CALL(comm, NULL,
                  scatter ? shmtopo_scatterv(comm, v.at.buf, counts, displs, o.at.buf, counts[rank], o.code, root)
                          : shmtopo_gatherv(comm, o.at.buf, counts[rank], v.at.buf, counts, displs, o.code, root));
        ran = 1;
        result = released(&v, &o, accel_done(rc, err));
    }
    PyMem_Free(sizes);
    return ran ? result : new_ref(Py_None);
}

/* accel_gatherv(handle, sendbuf, recvbuf, root) -> True | None (recvbuf is read on the root only) */
static PyObject *accel_gatherv(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return accel_v_rooted(args, nargs, 0);
}

/* accel_scatterv(handle, sendbuf, recvbuf, root) -> True | None (sendbuf is read on the root only) */
static PyObject *accel_scatterv(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return accel_v_rooted(args, nargs, 1);
}

/* accel_scan(handle, sendbuf, recvbuf, op, exclusive) -> True | None (in
 * place, or apart; exclusive: Exscan, rank 0's recvbuf left as it is) */
static PyObject *accel_scan(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5)
        return PyErr_Format(PyExc_TypeError, "accel_scan takes 5 arguments"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    struct msg in, out;
    int op;
    if (!comm || !accel_in_out(args[1], args[2], &in, &out))
        Py_RETURN_NONE;
    if ((op = accel_op(args[3], in.type)) < 0 || !apart_or_same(&in.at, &out.at))
        return released(&in, &out, new_ref(Py_None));
    int rc, err;
    CORE_CALL(comm, NULL, shmtopo_scan(comm, in.at.buf, out.at.buf, (size_t)in.at.len / shmtopo_dtype_size(in.code),
                                       in.code, op, PyObject_IsTrue(args[4]) == 1));
    return released(&in, &out, accel_done(rc, err));
}

/* accel_reduce_scatter_block(handle, sendbuf, recvbuf, op) -> True | None
 * (sendbuf: a block per rank, of recvbuf's datatype and length, apart from it) */
static PyObject *accel_reduce_scatter_block(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4)
        return PyErr_Format(PyExc_TypeError, "accel_reduce_scatter_block takes 4 arguments"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    struct msg in, out;
    int op;
    const int size = comm ? shmtopo_comm_size(comm) : 0;
    if (!comm || !accel_msg(args[2], 1, 1, &out))
        Py_RETURN_NONE;
    if (!accel_msg(args[1], 0, size, &in)) {
        msg_release(&out);
        Py_RETURN_NONE;
    }
    if (in.type != out.type || in.at.len != out.at.len * size || overlaps(&in.at, &out.at)
        || (op = accel_op(args[3], out.type)) < 0)
        return released(&in, &out, new_ref(Py_None));
    int rc, err;
    CORE_CALL(comm, NULL, shmtopo_reduce_scatter(comm, in.at.buf, out.at.buf,
                                                 (size_t)out.at.len / shmtopo_dtype_size(out.code), out.code, op));
    return released(&in, &out, accel_done(rc, err));
}

/* accel_reduce_scatter(handle, sendbuf, recvbuf, recvcounts, op) -> True |
 * None: recvcounts given, sendbuf of exactly their sum and recvbuf of this
 * rank's count, apart (in place and the rest: the planner) */
static PyObject *accel_reduce_scatter(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5)
        return PyErr_Format(PyExc_TypeError, "accel_reduce_scatter takes 5 arguments"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    if (!comm || args[3] == Py_None)
        Py_RETURN_NONE;
    const int size = shmtopo_comm_size(comm), rank = shmtopo_comm_rank(comm);
    size_t *counts = PyMem_Malloc((size_t)size * sizeof(size_t));
    if (!counts)
        return PyErr_NoMemory();
    struct msg in, out;
    PyObject *result = NULL;
    int ran = 0, op;
    if (sizes_of(args[3], size, counts) && accel_msg(args[2], 1, 1, &out)) {
        if (accel_msg(args[1], 0, 1, &in)) {
            size_t total = 0;
            for (int p = 0; p < size; p++)
                total += counts[p];
            const size_t esz = shmtopo_dtype_size(out.code);
            if (in.type == out.type && (size_t)out.at.len == counts[rank] * esz && (size_t)in.at.len == total * esz
                && !overlaps(&in.at, &out.at) && (op = accel_op(args[4], out.type)) >= 0) {
                int rc, err;
                CORE_CALL(comm, NULL, shmtopo_reduce_scatterv(comm, in.at.buf, out.at.buf, counts, out.code, op));
                ran = 1;
                result = accel_done(rc, err);
            }
            msg_release(&in);
        }
        msg_release(&out);
    }
    PyMem_Free(counts);
    return ran ? result : new_ref(Py_None);
}

/* accel_barrier(handle) -> True | None */
static PyObject *accel_barrier(PyObject *self, PyObject *handle)
{
    shmtopo_comm_t *comm = comm_of(handle);
    if (!comm)
        Py_RETURN_NONE;
    int rc, err;
    CORE_CALL(comm, NULL, shmtopo_span_barrier(comm)); /* the node's, or the job's across nodes */
    return accel_done(rc, err);
}

/* ---- the table of the drop-in's calls ----------------------------------
 *
 * By call: mpi4py's name, the entry above, which window list follows the
 * handle, mpi4py's parameters, and the call's agreement (CommFast's
 * methods, accel_comm.h, read it; so do the decisions of plans_mpi.h). */

enum { A_BARRIER, A_BCAST, A_REDUCE, A_ALLREDUCE, A_ALLGATHER, A_ALLTOALL, A_REDUCE_SCATTER_BLOCK, A_GATHER,
       A_SCATTER, A_GATHERV, A_SCATTERV, A_ALLGATHERV, A_ALLTOALLV, A_REDUCE_SCATTER, A_SCAN, A_EXSCAN, A_ALLTOALLW,
       NA };

enum { NO_WINDOWS, FAST_WINDOWS, ALL_WINDOWS }; /* which window list follows the handle */

typedef struct {
    const char *name;
    PyObject *(*entry)(PyObject *, PyObject *const *, Py_ssize_t);
    int windows;             /* NO_WINDOWS, FAST_WINDOWS (fast_windows) or ALL_WINDOWS (windows) */
    int nparams, required;   /* mpi4py's parameters, in order, the first `required` without a default */
    signed char params[4];   /* P_*: op defaults to the drop-in's SUM_DEFAULT, root to 0, recvcounts to None */
    int exclusive;           /* -1, or the entry's trailing flag (scan: 0, exscan: 1) */
    int kind;                /* SHMTOPO_KIND_*: the call's agreement */
    int spans;               /* the entry also takes a comm that spans nodes (its span_handle) */
} accel_call_t;

static PyObject *accel_barrier_entry(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return accel_barrier(self, args[0]);
}

#define SR P_SENDBUF, P_RECVBUF
static const accel_call_t accel_calls[NA] = {
    [A_BARRIER] = {"Barrier", accel_barrier_entry, NO_WINDOWS, 0, 0, {0}, -1, SHMTOPO_KIND_BARRIER, 1},
    [A_BCAST] = {"Bcast", accel_bcast, FAST_WINDOWS, 2, 1, {P_BUF, P_ROOT}, -1, SHMTOPO_KIND_BCAST, 1},
    [A_REDUCE] = {"Reduce", accel_reduce, FAST_WINDOWS, 4, 2, {SR, P_OP, P_ROOT}, -1, SHMTOPO_KIND_REDUCE, 1},
    [A_ALLREDUCE] = {"Allreduce", accel_allreduce, FAST_WINDOWS, 3, 2, {SR, P_OP}, -1, SHMTOPO_KIND_ALLREDUCE, 1},
    [A_ALLGATHER] = {"Allgather", accel_allgather, ALL_WINDOWS, 2, 2, {SR}, -1, SHMTOPO_KIND_ALLGATHER},
    [A_ALLTOALL] = {"Alltoall", accel_alltoall, NO_WINDOWS, 2, 2, {SR}, -1, SHMTOPO_KIND_ALLTOALL},
    [A_REDUCE_SCATTER_BLOCK] = {"Reduce_scatter_block", accel_reduce_scatter_block, NO_WINDOWS, 3, 2, {SR, P_OP}, -1,
                                SHMTOPO_KIND_REDUCE_SCATTER},
    [A_GATHER] = {"Gather", accel_gather, NO_WINDOWS, 3, 2, {SR, P_ROOT}, -1, SHMTOPO_KIND_GATHER},
    [A_SCATTER] = {"Scatter", accel_scatter, NO_WINDOWS, 3, 2, {SR, P_ROOT}, -1, SHMTOPO_KIND_SCATTER},
    [A_GATHERV] = {"Gatherv", accel_gatherv, NO_WINDOWS, 3, 2, {SR, P_ROOT}, -1, SHMTOPO_KIND_GATHERV},
    [A_SCATTERV] = {"Scatterv", accel_scatterv, NO_WINDOWS, 3, 2, {SR, P_ROOT}, -1, SHMTOPO_KIND_SCATTERV},
    [A_ALLGATHERV] = {"Allgatherv", accel_allgatherv, NO_WINDOWS, 2, 2, {SR}, -1, SHMTOPO_KIND_ALLGATHERV},
    [A_ALLTOALLV] = {"Alltoallv", accel_alltoallv, NO_WINDOWS, 2, 2, {SR}, -1, SHMTOPO_KIND_ALLTOALLV},
    [A_REDUCE_SCATTER] = {"Reduce_scatter", accel_reduce_scatter, NO_WINDOWS, 4, 2, {SR, P_RECVCOUNTS, P_OP}, -1,
                          SHMTOPO_KIND_REDUCE_SCATTER},
    [A_SCAN] = {"Scan", accel_scan, NO_WINDOWS, 3, 2, {SR, P_OP}, 0, SHMTOPO_KIND_SCAN},
    [A_EXSCAN] = {"Exscan", accel_scan, NO_WINDOWS, 3, 2, {SR, P_OP}, 1, SHMTOPO_KIND_EXSCAN},
    [A_ALLTOALLW] = {"Alltoallw", accel_alltoallw, NO_WINDOWS, 2, 2, {SR}, -1, SHMTOPO_KIND_ALLTOALLW},
};
#undef SR

