/* native/cpython/api_vector.h: part of shmtopo._fastpath, included once by
 * fastpath.c in its place (one translation unit).
 *
 * The lower-case v-variants' entries (shmtopo.coll.api), the barrier, the
 * general path's start, place() and bind(). */

/* The lower-case v-variants: arrays as the entries above take them, counts
 * and displs as layout_of reads them, out given and apart from the input
 * (in place, a new result and the rest go to the general path, which does
 * them or explains). The root's own count must be its array's length. */

/* A v-variant's layout into c (counts, then displs: 2 * size) and its vector
 * array (the gathers' out, scatterv's input) in v: of `code`, reaching every
 * block of the layout, apart from `own`, which holds this rank's count; 0
 * with v not held otherwise. */
static int v_layout(PyObject *counts, PyObject *displs, PyObject *vector, int writable, const Py_buffer *own,
                    int code, int size, int rank, size_t *c, Py_buffer *v)
{
    int vector_code;
    if (!layout_of(counts, displs, size, c, c + size) || !view_of(vector, v, writable, &vector_code))
        return 0;
    if (vector_code == code && c[rank] == count_of(own, code) && layout_end(c, c + size, size) <= count_of(v, code)
        && !overlaps(own, v))
        return 1;
    PyBuffer_Release(v);
    return 0;
}

/* gatherv (scatter 0) and scatterv (1): (handle, array, counts, displs,
 * root, out). Off the root one array: gatherv's input, scatterv's out; at
 * the root also the vector (gatherv's out, scatterv's input) and the layout.
 * Returns out, gatherv True off the root, or None. */
static PyObject *fast_v_rooted(PyObject *const *args, Py_ssize_t nargs, int scatter)
{
    if (nargs != 6)
        return PyErr_Format(PyExc_TypeError, "%s takes 6 arguments", scatter ? "scatterv" : "gatherv"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    PyObject *own_arg = args[scatter ? 5 : 1], *vector = args[scatter ? 1 : 5];
    int code, root, rc, err;
    Py_buffer own, v = {0};
    if (!comm || (root = lower_root_in(args[4], comm)) < 0 || !view_of(own_arg, &own, scatter, &code))
        return not_handled();
    const int size = shmtopo_comm_size(comm), rank = shmtopo_comm_rank(comm);
    const size_t count = count_of(&own, code);
    size_t *c = NULL;
    if (rank == root) {
        if (!(c = PyMem_Malloc(2 * (size_t)size * sizeof(size_t)))) {
            PyBuffer_Release(&own);
            return PyErr_NoMemory();
        }
        if (!v_layout(args[2], args[3], vector, !scatter, &own, code, size, rank, c, &v)) {
            PyMem_Free(c);
            PyBuffer_Release(&own);
            return not_handled();
        }
    }
    const size_t *d = c ? c + size : NULL;
    CORE_CALL(comm, NULL, scatter ? shmtopo_scatterv(comm, v.buf, c, d, own.buf, count, code, root)
                                  : shmtopo_gatherv(comm, own.buf, count, v.buf, c, d, code, root));
    if (c)
        PyBuffer_Release(&v);
    PyMem_Free(c);
    PyBuffer_Release(&own);
    return rc < 0 ? failed(NULL, err) : new_ref(scatter || rank == root ? args[5] : Py_True);
}

/* gatherv(handle, array, counts, displs, root, out) -> out on the root, True
 * elsewhere | None (counts, displs and out are read on the root only) */
static PyObject *fast_gatherv(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return fast_v_rooted(args, nargs, 0);
}

/* scatterv(handle, array, counts, displs, root, out) -> out | None (array,
 * counts and displs are read on the root only) */
static PyObject *fast_scatterv(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return fast_v_rooted(args, nargs, 1);
}

/* allgatherv(handle, array, counts, displs, out) -> out | None */
static PyObject *fast_allgatherv(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5)
        return PyErr_Format(PyExc_TypeError, "allgatherv takes 5 arguments"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    int code, rc, err;
    Py_buffer in, out;
    if (!comm || !view_of(args[1], &in, 0, &code))
        return not_handled();
    const int size = shmtopo_comm_size(comm), rank = shmtopo_comm_rank(comm);
    size_t *c = PyMem_Malloc(2 * (size_t)size * sizeof(size_t));
    if (!c) {
        PyBuffer_Release(&in);
        return PyErr_NoMemory();
    }
    PyObject *result = NULL;
    if (v_layout(args[2], args[3], args[4], 1, &in, code, size, rank, c, &out)) {
        CORE_CALL(comm, NULL, shmtopo_allgatherv(comm, in.buf, c[rank], out.buf, c, c + size, code));
        result = rc < 0 ? failed(NULL, err) : new_ref(args[4]);
        PyBuffer_Release(&out);
    }
    PyMem_Free(c);
    PyBuffer_Release(&in);
    return result || PyErr_Occurred() ? result : not_handled();
}

/* alltoallv(handle, array, sendcounts, sdispls, recvcounts, rdispls, out) -> out | None */
static PyObject *fast_alltoallv(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7)
        return PyErr_Format(PyExc_TypeError, "alltoallv takes 7 arguments"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    int code, out_code, rc, err;
    Py_buffer in, out;
    if (!comm || !view_of(args[1], &in, 0, &code))
        return not_handled();
    const int size = shmtopo_comm_size(comm);
    size_t *sc = PyMem_Malloc(4 * (size_t)size * sizeof(size_t));
    if (!sc) {
        PyBuffer_Release(&in);
        return PyErr_NoMemory();
    }
    size_t *sd = sc + size, *rcs = sd + size, *rd = rcs + size;
    PyObject *result = NULL;
    if (layout_of(args[2], args[3], size, sc, sd) && layout_of(args[4], args[5], size, rcs, rd)
        && view_of(args[6], &out, 1, &out_code)) {
        if (out_code == code && layout_end(sc, sd, size) <= count_of(&in, code)
            && layout_end(rcs, rd, size) <= count_of(&out, code) && !overlaps(&in, &out)) {
            CORE_CALL(comm, NULL, shmtopo_alltoallv(comm, in.buf, sc, sd, out.buf, rcs, rd, code));
            result = rc < 0 ? failed(NULL, err) : new_ref(args[6]);
        }
        PyBuffer_Release(&out);
    }
    PyMem_Free(sc);
    PyBuffer_Release(&in);
    return result || PyErr_Occurred() ? result : not_handled();
}

/* barrier(handle) -> True | None (handle 0: not a live single-node comm) */
static PyObject *fast_barrier(PyObject *self, PyObject *handle)
{
    shmtopo_comm_t *comm = comm_of(handle);
    if (!comm)
        Py_RETURN_NONE;
    int rc, err;
    CORE_CALL(comm, NULL, shmtopo_span_barrier(comm)); /* the node's, or the job's across nodes */
    if (rc < 0)
        return failed(NULL, err);
    Py_RETURN_TRUE;
}

/* start(handle, request): one start of a persistent request on the comm at
 * handle (shmtopo_request_start), holding the comm as the entries above. */
static PyObject *start(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2)
        return PyErr_Format(PyExc_TypeError, "start takes 2 arguments"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    shmtopo_request_t *request = PyLong_AsVoidPtr(args[1]);
    if (!request && PyErr_Occurred())
        return NULL;
    int rc, err;
    CORE_CALL(comm, NULL, shmtopo_request_start(request));
    if (rc < 0)
        return failed(NULL, err);
    Py_RETURN_NONE;
}

/* place(handle, windows, array) -> (window, offset) | None: the window of
 * `windows` whose part of this rank holds `array` (C-contiguous, from
 * bound.window_min bytes), found by the rule the fast entries follow, so
 * the general path asks here instead of deciding again. */
static PyObject *fast_place(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3)
        return PyErr_Format(PyExc_TypeError, "place takes 3 arguments"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    Py_buffer view;
    if (!comm || PyObject_GetBuffer(args[2], &view, PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    shmtopo_win_t *win = NULL;
    size_t offset = 0;
    enum place place = place_of(args[1], comm, &view, &win, &offset);
    PyBuffer_Release(&view);
    if (place != WINDOWED)
        Py_RETURN_NONE;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(args[1]); i++) {
        PyObject *w = PyList_GET_ITEM(args[1], i);
        if (PyObject_TypeCheck(w, &NativeWindowType) && ((NativeWindow *)w)->win == win)
            return Py_BuildValue("(On)", w, (Py_ssize_t)offset);
    }
    Py_RETURN_NONE;
}

/* bind(ndarray, empty_like, ops, window_min, dtypes, last_error, value_error):
 * numpy's type and constructor, the op-name table, the size from which an
 * array in a window takes the window path, the dtypes
 * in shmtopo_dtype order, the maker of failures' exceptions and the class of
 * bad arguments' ones. The native functions need no binding: they are linked. */
static PyObject *bind(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7)
        return PyErr_Format(PyExc_TypeError, "bind takes 7 arguments"), NULL;
    if (!PyType_Check(args[0]) || !PyDict_Check(args[2]))
        return PyErr_Format(PyExc_TypeError, "bind: expected a type and a dict"), NULL;
    Py_XSETREF(bound.ndarray, new_ref(args[0]));
    Py_XSETREF(bound.empty_like, new_ref(args[1]));
    Py_XSETREF(bound.ops, new_ref(args[2]));
    forget_all(seen.ops);
    bound.window_min = PyLong_AsSsize_t(args[3]);
    if (PyErr_Occurred())
        return NULL;
    if (!PyTuple_Check(args[4]) || PyTuple_GET_SIZE(args[4]) != NDTYPES)
        return PyErr_Format(PyExc_TypeError, "bind: expected a tuple of %d dtypes", NDTYPES), NULL;
    seen.last_dtype = NULL;
    for (int i = 0; i < NDTYPES; i++)
        Py_XSETREF(bound.dtypes[i], new_ref(PyTuple_GET_ITEM(args[4], i)));
    if (!bound.dtype_name && !(bound.dtype_name = PyUnicode_InternFromString("dtype")))
        return NULL;
    if (!PyCallable_Check(args[5]))
        return PyErr_Format(PyExc_TypeError, "bind: last_error must be callable"), NULL;
    Py_XSETREF(bound.last_error, new_ref(args[5]));
    if (!PyCallable_Check(args[6]))
        return PyErr_Format(PyExc_TypeError, "bind: value_error must be callable"), NULL;
    Py_XSETREF(bound.value_error, new_ref(args[6]));
    Py_RETURN_NONE;
}
