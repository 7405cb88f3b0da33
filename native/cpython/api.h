/* native/cpython/api.h: part of shmtopo._fastpath, included once by
 * fastpath.c in its place (one translation unit).
 *
 * The lower-case collectives' entries (shmtopo.coll.api): one array in,
 * one out, to the window collective or the copy path. */

/* ---- NativeWindow: the base of shmtopo.Window ---------------------------
 *
 * It holds the native window, so that win.fence() is one C method call: a
 * Python method in between cost as much as the fence itself. `_fast` is the
 * shmtopo_win_t * as an int, 0 once freed (the core then says EBADF). */
typedef struct {
    PyObject_HEAD
    shmtopo_win_t *win;
} NativeWindow;
static PyTypeObject NativeWindowType;


/* Where an input lies: the one rule, which the general path asks through place().
 * WINDOWED: in this rank's part of one of `windows` (the comm's list of its
 * Windows), at *offsetp of *winp; PRIVATE: anywhere else, or smaller than
 * bound.window_min (a copy is as fast there, on every rank alike); UNKNOWN:
 * `windows` is not a list, so only small arrays are taken. */
enum place { PRIVATE, WINDOWED, UNKNOWN };

static enum place place_of(PyObject *windows, shmtopo_comm_t *comm, const Py_buffer *view,
                           shmtopo_win_t **winp, size_t *offsetp)
{
    if (view->len < bound.window_min)
        return PRIVATE;
    if (!PyList_Check(windows))
        return UNKNOWN;
    const int rank = shmtopo_comm_rank(comm);
    const char *start = view->buf;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(windows); i++) {
        PyObject *w = PyList_GET_ITEM(windows, i);
        shmtopo_win_t *win = PyObject_TypeCheck(w, &NativeWindowType) ? ((NativeWindow *)w)->win : NULL;
        void *base;
        size_t size;
        if (!win || shmtopo_win_query(win, rank, &base, &size) < 0)
            continue; /* freed: the general path skips it too */
        const char *lo = base;
        if (lo <= start && start + view->len <= lo + size) {
            *winp = win;
            *offsetp = (size_t)(start - lo);
            return WINDOWED;
        }
    }
    return PRIVATE;
}

/* A result that shares bytes with a window input other than exactly (in
 * place): the general path explains which overlaps are allowed. */
static int apart_or_same(const Py_buffer *in, const Py_buffer *out)
{
    const char *a = in->buf, *b = out->buf;
    if (!out->buf || !(a < b + out->len && b < a + in->len))
        return 1;
    return a == b && in->len == out->len;
}

/* The core call for an input where place_of found it: the window path or
 * the copy path (root < 0: allreduce). Returns the core's rc, errno kept. */
static int reduce_at(enum place place, shmtopo_comm_t *comm, shmtopo_win_t *win, size_t offset,
                     const Py_buffer *in, void *out, int code, int op, int root)
{
    int rc, err;
    const size_t n = count_of(in, code);
    if (place == WINDOWED) /* never across nodes: span_handle's entries get no windows */
        CORE_CALL(comm, win, shmtopo_win_reduce(win, offset, out, n, code, op, root, SHMTOPO_COLL_AUTO));
    else if (root < 0) /* the node's, or across nodes small: whole, else 1: declined */
        CORE_CALL(comm, NULL, shmtopo_span_allreduce(comm, in->buf, out, n, code, op, SHMTOPO_COLL_AUTO));
    else
        CORE_CALL(comm, NULL, shmtopo_span_reduce(comm, in->buf, out, n, code, op, root, SHMTOPO_COLL_AUTO));
    errno = err;
    return rc;
}

static int bcast_at(enum place place, shmtopo_comm_t *comm, shmtopo_win_t *win, size_t offset,
                    const Py_buffer *buf, int code, int root)
{
    int rc, err;
    if (place == WINDOWED) /* never across nodes: span_handle's entries get no windows */
        CORE_CALL(comm, win, shmtopo_win_bcast(win, offset, buf->buf, count_of(buf, code), code, root));
    else /* the node's, or across nodes small: whole, else 1: declined */
        CORE_CALL(comm, NULL, shmtopo_span_bcast(comm, buf->buf, buf->buf, count_of(buf, code), code, root));
    errno = err;
    return rc;
}

/* 0 where the core takes the call; else the general path explains a result over a window input */
static int allgather_at(enum place place, shmtopo_comm_t *comm, shmtopo_win_t *win, size_t offset,
                        const Py_buffer *in, const Py_buffer *out, int code)
{
    int rc, err;
    if (place == WINDOWED)
        CORE_CALL(comm, win, shmtopo_win_allgather(win, offset, out->buf, count_of(in, code), code));
    else
        CORE_CALL(comm, NULL, shmtopo_allgather(comm, in->buf, out->buf, count_of(in, code), code));
    errno = err;
    return rc;
}

static int overlaps(const Py_buffer *a, const Py_buffer *b)
{
    return (const char *)a->buf < (const char *)b->buf + b->len && (const char *)b->buf < (const char *)a->buf + a->len;
}

/* The root as the core takes it, or -1 for the general path to judge. */
static int root_in(PyObject *value, const shmtopo_comm_t *comm)
{
    int root = root_of(value);
    return root < shmtopo_comm_job_size(comm) ? root : -1;
}

/* The same for the lower-case API, whose roots are ints only: a bool (True
 * is 1 to mpi4py, whose rule the drop-in keeps, but not a rank number here)
 * or a numpy scalar goes to the general path, which refuses or takes it
 * alike on every rank. */
static int lower_root_in(PyObject *value, const shmtopo_comm_t *comm)
{
    return PyLong_CheckExact(value) ? root_in(value, comm) : -1;
}

/* allreduce(handle, windows, array, out, op) -> result | None */
static PyObject *fast_allreduce(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5)
        return PyErr_Format(PyExc_TypeError, "allreduce takes 5 arguments"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    int code, op = op_code(args[4]);
    Py_buffer in, out;
    shmtopo_win_t *win = NULL;
    size_t offset = 0;
    if (!comm || op < 0 || !view_of(args[2], &in, 0, &code))
        return not_handled();
    enum place place = place_of(args[1], comm, &in, &win, &offset);
    PyObject *result = place == UNKNOWN ? NULL : result_of(args[3], args[2], &in, code, &out);
    if (result && place == WINDOWED && !apart_or_same(&in, &out)) {
        PyBuffer_Release(&out);
        Py_CLEAR(result);
    }
    if (!result) {
        PyBuffer_Release(&in);
        return not_handled();
    }
    int rc = reduce_at(place, comm, win, offset, &in, out.buf, code, op, -1), err = errno;
    PyBuffer_Release(&in);
    PyBuffer_Release(&out);
    if (rc > 0) /* across nodes, too large to take whole */
        return Py_DECREF(result), not_handled();
    return rc < 0 ? failed(result, err) : result;
}

/* reduce(handle, windows, array, out, op, root) -> result (None off the
 * root) | NotImplemented (the fast entries take job ranks as the core's:
 * one node, in order) */
static PyObject *fast_reduce(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6)
        return PyErr_Format(PyExc_TypeError, "reduce takes 6 arguments"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    int code, op = op_code(args[4]), root = comm ? lower_root_in(args[5], comm) : -1;
    Py_buffer in, out = {0};
    shmtopo_win_t *win = NULL;
    size_t offset = 0;
    if (!comm || op < 0 || root < 0 || !view_of(args[2], &in, 0, &code))
        return PyErr_Occurred() ? NULL : new_ref(Py_NotImplemented);
    const int is_root = root == shmtopo_comm_job_rank(comm);
    enum place place = place_of(args[1], comm, &in, &win, &offset);
    PyObject *result = Py_None;
    if (place == UNKNOWN || (is_root && !(result = result_of(args[3], args[2], &in, code, &out)))) {
        PyBuffer_Release(&in);
        return PyErr_Occurred() ? NULL : new_ref(Py_NotImplemented);
    }
    if (!is_root)
        Py_INCREF(result);
    if (place == WINDOWED && !apart_or_same(&in, &out)) {
        PyBuffer_Release(&in);
        PyBuffer_Release(&out);
        Py_DECREF(result);
        return new_ref(Py_NotImplemented);
    }
    int rc = reduce_at(place, comm, win, offset, &in, out.buf, code, op, root), err = errno;
    PyBuffer_Release(&in);
    if (is_root)
        PyBuffer_Release(&out);
    if (rc > 0) /* declined */
        return Py_DECREF(result), new_ref(Py_NotImplemented);
    return rc < 0 ? failed(result, err) : result;
}

/* bcast(handle, windows, array, root) -> array (received in place) | None */
static PyObject *fast_bcast(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4)
        return PyErr_Format(PyExc_TypeError, "bcast takes 4 arguments"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    int code, root = comm ? lower_root_in(args[3], comm) : -1;
    Py_buffer buf;
    shmtopo_win_t *win = NULL;
    size_t offset = 0;
    if (!comm || root < 0 || !view_of(args[2], &buf, 1, &code))
        return not_handled();
    enum place place = place_of(args[1], comm, &buf, &win, &offset);
    if (place == UNKNOWN) {
        PyBuffer_Release(&buf);
        return not_handled();
    }
    int rc = bcast_at(place, comm, win, offset, &buf, code, root), err = errno;
    PyBuffer_Release(&buf);
    if (rc > 0) /* across nodes, too large to take whole */
        return not_handled();
    return rc < 0 ? failed(NULL, err) : new_ref(args[2]);
}

/* allgather(handle, windows, array, out) -> out | None (out: a block per rank of the job: one node) */
static PyObject *fast_allgather(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4)
        return PyErr_Format(PyExc_TypeError, "allgather takes 4 arguments"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    int code, out_code;
    Py_buffer in, out;
    shmtopo_win_t *win = NULL;
    size_t offset = 0;
    if (!comm || !view_of(args[2], &in, 0, &code))
        return not_handled();
    const Py_ssize_t nranks = shmtopo_comm_size(comm);
    enum place place = place_of(args[1], comm, &in, &win, &offset);
    if (place == UNKNOWN || !view_of(args[3], &out, 1, &out_code)) { /* out: nranks blocks */
        PyBuffer_Release(&in);
        return not_handled();
    }
    /* in a window, the general path explains a result over the input */
    if (out_code != code || out.len != in.len * nranks || (place == WINDOWED && overlaps(&in, &out))) {
        PyBuffer_Release(&in);
        PyBuffer_Release(&out);
        return not_handled();
    }
    int rc = allgather_at(place, comm, win, offset, &in, &out, code), err = errno;
    PyBuffer_Release(&in);
    PyBuffer_Release(&out);
    return rc < 0 ? failed(NULL, err) : new_ref(args[3]);
}

/* alltoall(handle, array, out) -> out | None: the first axis splits into
 * one block per rank; out of the same type and length, apart from array */
static PyObject *fast_alltoall(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3)
        return PyErr_Format(PyExc_TypeError, "alltoall takes 3 arguments"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    int code, out_code;
    Py_buffer in, out;
    if (!comm || !view_of(args[1], &in, 0, &code))
        return not_handled();
    const int size = shmtopo_comm_size(comm);
    if (in.ndim == 0 || in.shape[0] % size || !view_of(args[2], &out, 1, &out_code)) {
        PyBuffer_Release(&in);
        return not_handled();
    }
    if (out_code != code || out.len != in.len || overlaps(&in, &out)) {
        PyBuffer_Release(&in);
        PyBuffer_Release(&out);
        return not_handled();
    }
    int rc, err;
    CORE_CALL(comm, NULL, shmtopo_alltoall(comm, in.buf, out.buf, count_of(&in, code) / (size_t)size, code));
    PyBuffer_Release(&in);
    PyBuffer_Release(&out);
    return rc < 0 ? failed(NULL, err) : new_ref(args[2]);
}

/* gather(handle, array, out, root) -> out on the root, True elsewhere, None
 * where the general path must look (out, a block per rank, is read on the
 * root only; in place there is its business) */
static PyObject *fast_gather(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4)
        return PyErr_Format(PyExc_TypeError, "gather takes 4 arguments"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    int code, out_code, root;
    Py_buffer in, out = {0};
    if (!comm || (root = lower_root_in(args[3], comm)) < 0 || !view_of(args[1], &in, 0, &code))
        return not_handled();
    const int is_root = root == shmtopo_comm_rank(comm);
    if (is_root) {
        if (!view_of(args[2], &out, 1, &out_code)) {
            PyBuffer_Release(&in);
            return not_handled();
        }
        if (out_code != code || out.len != in.len * shmtopo_comm_size(comm) || overlaps(&in, &out)) {
            PyBuffer_Release(&in);
            PyBuffer_Release(&out);
            return not_handled();
        }
    }
    int rc, err;
    CORE_CALL(comm, NULL, shmtopo_gather(comm, in.buf, is_root ? out.buf : NULL, count_of(&in, code), code, root));
    PyBuffer_Release(&in);
    if (is_root)
        PyBuffer_Release(&out);
    if (rc < 0)
        return failed(NULL, err);
    return is_root ? new_ref(args[2]) : new_ref(Py_True);
}

/* scatter(handle, array, out, root) -> out | None: on the root array holds a
 * block per rank along its first axis, apart from out; array is not read
 * elsewhere */
static PyObject *fast_scatter(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4)
        return PyErr_Format(PyExc_TypeError, "scatter takes 4 arguments"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    int code, in_code, root;
    Py_buffer in = {0}, out;
    if (!comm || (root = lower_root_in(args[3], comm)) < 0 || !view_of(args[2], &out, 1, &code))
        return not_handled();
    const int is_root = root == shmtopo_comm_rank(comm), size = shmtopo_comm_size(comm);
    if (is_root) {
        if (!view_of(args[1], &in, 0, &in_code)) {
            PyBuffer_Release(&out);
            return not_handled();
        }
        if (in_code != code || in.ndim == 0 || in.shape[0] != size || in.len != out.len * size ||
            overlaps(&in, &out)) {
            PyBuffer_Release(&in);
            PyBuffer_Release(&out);
            return not_handled();
        }
    }
    int rc, err;
    CORE_CALL(comm, NULL, shmtopo_scatter(comm, is_root ? in.buf : NULL, out.buf, count_of(&out, code), code, root));
    if (is_root)
        PyBuffer_Release(&in);
    PyBuffer_Release(&out);
    return rc < 0 ? failed(NULL, err) : new_ref(args[2]);
}

/* scan(handle, array, out, op, exclusive) -> result | None: out given, in
 * place (out is array) or apart; or, for scan only, None for a new array
 * (exscan's new array starts zeroed: the general path makes it) */
static PyObject *fast_scan(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5)
        return PyErr_Format(PyExc_TypeError, "scan takes 5 arguments"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    int code, op = op_code(args[3]), exclusive = PyObject_IsTrue(args[4]);
    Py_buffer in, out;
    if (exclusive < 0)
        PyErr_Clear(), comm = NULL;
    if (!comm || op < 0 || (exclusive && args[2] == Py_None) || !view_of(args[1], &in, 0, &code))
        return not_handled();
    PyObject *result = result_of(args[2], args[1], &in, code, &out);
    if (result && !apart_or_same(&in, &out)) {
        PyBuffer_Release(&out);
        Py_CLEAR(result);
    }
    if (!result) {
        PyBuffer_Release(&in);
        return not_handled();
    }
    int rc, err;
    CORE_CALL(comm, NULL, shmtopo_scan(comm, in.buf, out.buf, count_of(&in, code), code, op, exclusive));
    PyBuffer_Release(&in);
    PyBuffer_Release(&out);
    return rc < 0 ? failed(result, err) : result;
}

/* reduce_scatter(handle, array, out, op, counts) -> out | None: counts None,
 * the first axis of array splits into one block per rank and out holds one;
 * else array holds sum(counts) elements and out this rank's count. out
 * apart from array (in place goes to the general path). */
static PyObject *fast_reduce_scatter(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5)
        return PyErr_Format(PyExc_TypeError, "reduce_scatter takes 5 arguments"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    int code, out_code, op = op_code(args[3]), rc, err;
    Py_buffer in, out;
    if (!comm || op < 0 || !view_of(args[1], &in, 0, &code))
        return not_handled();
    const int size = shmtopo_comm_size(comm), rank = shmtopo_comm_rank(comm);
    if (!view_of(args[2], &out, 1, &out_code)) {
        PyBuffer_Release(&in);
        return not_handled();
    }
    PyObject *result = NULL;
    size_t *counts = NULL;
    if (out_code != code || overlaps(&in, &out)) {
        /* the general path explains */
    } else if (args[4] == Py_None) {
        if (in.ndim > 0 && in.shape[0] % size == 0 && out.len * size == in.len) {
            CORE_CALL(comm, NULL, shmtopo_reduce_scatter(comm, in.buf, out.buf, count_of(&out, code), code, op));
            result = rc < 0 ? failed(NULL, err) : new_ref(args[2]);
        }
    } else if ((counts = PyMem_Malloc((size_t)size * sizeof(size_t))) == NULL) {
        PyErr_NoMemory();
    } else if (sizes_of(args[4], size, counts)) {
        size_t total = 0;
        int r = 0;
        for (; r < size && counts[r] <= count_of(&in, code) - total; r++) /* no sum past the input */
            total += counts[r];
        if (r == size && total == count_of(&in, code) && counts[rank] == count_of(&out, code)) {
            CORE_CALL(comm, NULL, shmtopo_reduce_scatterv(comm, in.buf, out.buf, counts, code, op));
            result = rc < 0 ? failed(NULL, err) : new_ref(args[2]);
        }
    }
    PyMem_Free(counts);
    PyBuffer_Release(&in);
    PyBuffer_Release(&out);
    return result || PyErr_Occurred() ? result : not_handled();
}
