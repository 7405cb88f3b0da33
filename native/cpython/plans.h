/* native/cpython/plans.h: part of shmtopo._fastpath, included once by
 * fastpath.c in its place (one translation unit).
 *
 * The drop-in's entries per call (shmtopo.accel.plans): what each plain
 * call runs in shared memory. */

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
        || (place == WINDOWED && !apart_or_same(&in.at, &out.at))) {
        msg_release(&in);
        msg_release(&out);
        Py_RETURN_NONE;
    }
    int rc = reduce_at(place, comm, win, offset, &in.at, out.at.buf, in.code, op, -1), err = errno;
    msg_release(&in);
    msg_release(&out);
    return accel_done(rc, err);
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
    const int is_root = root == shmtopo_comm_rank(comm);
    if (is_root ? !accel_in_out(args[2], args[3], &in, &out) : !accel_msg(args[2], 0, 1, &in))
        Py_RETURN_NONE;
    enum place place = place_of(args[1], comm, &in.at, &win, &offset);
    if (place == UNKNOWN || (op = accel_op(args[4], in.type)) < 0
        || (place == WINDOWED && !apart_or_same(&in.at, &out.at))) {
        msg_release(&in);
        msg_release(&out);
        Py_RETURN_NONE;
    }
    int rc = reduce_at(place, comm, win, offset, &in.at, out.at.buf, in.code, op, root), err = errno;
    msg_release(&in);
    msg_release(&out);
    return accel_done(rc, err);
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
    return accel_done(rc, err);
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
        || (place == WINDOWED && overlaps(&in.at, &out.at))) {
        msg_release(&in);
        msg_release(&out);
        Py_RETURN_NONE;
    }
    int rc = allgather_at(place, comm, win, offset, &in.at, &out.at, in.code), err = errno;
    msg_release(&in);
    msg_release(&out);
    return accel_done(rc, err);
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
    if (out.code != in.code || out.at.len != in.at.len || !apart_or_same(&in.at, &out.at)) {
        msg_release(&in);
        msg_release(&out);
        Py_RETURN_NONE;
    }
    int rc, err;
    const size_t count = (size_t)in.at.len / shmtopo_dtype_size(in.code) / (size_t)size;
    CORE_CALL(comm, NULL, shmtopo_alltoall(comm, in.at.buf, out.at.buf, count, in.code));
    msg_release(&in);
    msg_release(&out);
    return accel_done(rc, err);
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
    msg_release(&in);
    msg_release(&out);
    return accel_done(rc, err);
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
    msg_release(&in);
    msg_release(&out);
    return accel_done(rc, err);
}

/* A v-variant's buffer argument (buffers.vector) in its plain forms:
 * [buf, counts], [buf, (counts, displs)], [buf, counts, T],
 * [buf, (counts, displs), T], [buf, counts, displs, T] (displs None: packed
 * in rank order), every block inside the buffer; 0 with nothing held
 * otherwise. m->at is the whole buffer; counts and displs (n each) are in
 * entries. */
static int accel_vector(PyObject *spec, int writable, Py_ssize_t n, struct msg *m, size_t *counts, size_t *displs)
{
    if (!PyList_CheckExact(spec) && !PyTuple_CheckExact(spec))
        return 0;
    const Py_ssize_t len = PySequence_Fast_GET_SIZE(spec);
    PyObject **item = PySequence_Fast_ITEMS(spec), *c = len > 1 ? item[1] : NULL, *d = Py_None;
    int type = -1;
    if (len < 2 || len > 4 || (len > 2 && (type = accel_type_of(item[len - 1])) < 0))
        return 0;
    if (len == 4) {
        d = item[2];
    } else if (PyTuple_Check(c)) { /* (counts, displs), as mpi4py unpacks any tuple there */
        if (!PyTuple_CheckExact(c) || PyTuple_GET_SIZE(c) != 2)
            return 0;
        d = PyTuple_GET_ITEM(c, 1);
        c = PyTuple_GET_ITEM(c, 0);
    }
    if (!layout_of(c, d, n, counts, displs))
        return 0;
    if ((type = accel_buffer(item[0], type, writable, m)) < 0)
        return 0;
    const int code = accel.codes[type];
    const size_t size = shmtopo_dtype_size(code), total = (size_t)m->held.len / size;
    int fits = (size_t)m->held.len % size == 0 && (uintptr_t)m->held.buf % size == 0;
    for (Py_ssize_t i = 0; fits && i < n; i++)
        fits = !counts[i] || (displs[i] <= total && counts[i] <= total - displs[i]);
    if (!fits) {
        msg_release(m);
        return 0;
    }
    m->at = m->held;
    m->type = type;
    m->code = code;
    return 1;
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
        result = accel_done(rc, err);
        msg_release(&in);
        msg_release(&out);
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
        result = accel_done(rc, err);
        msg_release(&v);
        msg_release(&o);
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
    if ((op = accel_op(args[3], in.type)) < 0 || !apart_or_same(&in.at, &out.at)) {
        msg_release(&in);
        msg_release(&out);
        Py_RETURN_NONE;
    }
    int rc, err;
    CORE_CALL(comm, NULL, shmtopo_scan(comm, in.at.buf, out.at.buf, (size_t)in.at.len / shmtopo_dtype_size(in.code),
                                       in.code, op, PyObject_IsTrue(args[4]) == 1));
    msg_release(&in);
    msg_release(&out);
    return accel_done(rc, err);
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
        || (op = accel_op(args[3], out.type)) < 0) {
        msg_release(&in);
        msg_release(&out);
        Py_RETURN_NONE;
    }
    int rc, err;
    CORE_CALL(comm, NULL, shmtopo_reduce_scatter(comm, in.at.buf, out.at.buf,
                                                 (size_t)out.at.len / shmtopo_dtype_size(out.code), out.code, op));
    msg_release(&in);
    msg_release(&out);
    return accel_done(rc, err);
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
    CORE_CALL(comm, NULL, shmtopo_barrier(comm));
    return accel_done(rc, err);
}

/* bind_accelerate(ops, types, by_code, formats, in_place, bottom, last_error): the drop-in's
 * op objects with their shmtopo_op codes; the predefined datatypes shmtopo
 * moves, as (Datatype, core type code, mask described at ACCEL_MOVES); per
 * core type code, the index in types of an ndarray's datatype (-1: none);
 * {buffer format: index in types}; MPI.IN_PLACE and MPI.BOTTOM; the maker
 * of failures' exceptions. */
static PyObject *bind_accelerate(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7 || !PyTuple_Check(args[0]) || !PyTuple_Check(args[1]) || !PyTuple_Check(args[2])
        || PyTuple_GET_SIZE(args[2]) != NDTYPES || !PyDict_Check(args[3]) || !PyCallable_Check(args[6]))
        return PyErr_Format(PyExc_TypeError, "bind_accelerate takes a tuple of (op, code), a tuple of "
                            "(datatype, code, mask), %d type indices, a dict, IN_PLACE, BOTTOM and a callable",
                            NDTYPES), NULL;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(args[0]); i++) {
        PyObject *pair = PyTuple_GET_ITEM(args[0], i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 || !PyLong_Check(PyTuple_GET_ITEM(pair, 1)))
            return PyErr_Format(PyExc_TypeError, "bind_accelerate: ops are (op, code) pairs"), NULL;
        long opc = PyLong_AsLong(PyTuple_GET_ITEM(pair, 1));
        if (opc < 0 || opc > 30)
            return PyErr_Format(PyExc_ValueError, "bind_accelerate: op code %ld", opc), NULL;
    }
    const Py_ssize_t ntypes = PyTuple_GET_SIZE(args[1]);
    if (ntypes > ACCEL_MAX_TYPES)
        return PyErr_Format(PyExc_ValueError, "bind_accelerate: more than %d datatypes", ACCEL_MAX_TYPES), NULL;
    int codes[ACCEL_MAX_TYPES], by_code[NDTYPES];
    unsigned masks[ACCEL_MAX_TYPES];
    PyObject *datatypes = PyTuple_New(ntypes);
    if (!datatypes)
        return NULL;
    for (Py_ssize_t i = 0; i < ntypes; i++) {
        PyObject *entry = PyTuple_GET_ITEM(args[1], i);
        if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 3) {
            Py_DECREF(datatypes);
            return PyErr_Format(PyExc_TypeError, "bind_accelerate: types are (datatype, code, mask)"), NULL;
        }
        PyTuple_SET_ITEM(datatypes, i, new_ref(PyTuple_GET_ITEM(entry, 0)));
        codes[i] = (int)PyLong_AsLong(PyTuple_GET_ITEM(entry, 1));
        masks[i] = (unsigned)PyLong_AsUnsignedLongMask(PyTuple_GET_ITEM(entry, 2));
        if (!PyErr_Occurred() && (codes[i] < 0 || codes[i] >= NDTYPES))
            PyErr_Format(PyExc_ValueError, "bind_accelerate: type code %d", codes[i]);
    }
    for (int i = 0; i < NDTYPES && !PyErr_Occurred(); i++) {
        by_code[i] = (int)PyLong_AsLong(PyTuple_GET_ITEM(args[2], i));
        if (!PyErr_Occurred() && (by_code[i] < -1 || by_code[i] >= ntypes))
            PyErr_Format(PyExc_ValueError, "bind_accelerate: type index %d", by_code[i]);
    }
    if (PyErr_Occurred()) {
        Py_DECREF(datatypes);
        return NULL;
    }
    Py_XSETREF(accel.ops, new_ref(args[0]));
    Py_XSETREF(accel.datatypes, datatypes);
    Py_XSETREF(accel.formats, new_ref(args[3]));
    Py_XSETREF(accel.in_place, new_ref(args[4]));
    Py_XSETREF(accel.bottom, new_ref(args[5]));
    Py_XSETREF(accel.last_error, new_ref(args[6]));
    accel.ntypes = (int)ntypes;
    memcpy(accel.codes, codes, sizeof codes);
    memcpy(accel.masks, masks, sizeof masks);
    memcpy(accel.by_code, by_code, sizeof by_code);
    Py_RETURN_NONE;
}
