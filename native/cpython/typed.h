/* native/cpython/typed.h: part of shmtopo._fastpath, included once by
 * fastpath.c in its place (one translation unit).
 *
 * Alltoallw's plain case in C. The planner (accel/datatypes.py) owns the
 * decision and the layouts: it flattens each datatype and makes a side's
 * blocks (coll.args.TypedBlocks) once per (counts, displacements,
 * datatypes), and notes each layout it makes here (note_layout). A call
 * whose two messages are [buf, (counts, displs), types] or
 * [buf, counts, displs, types] with a noted layout each (the same counts
 * and displacements, the very same Datatype objects, none freed since), on
 * buffers the layouts fit (the receive buffer writable), apart, on a comm
 * of one node, runs here: one core call. Anything else goes to the planner. */

typedef struct {
    Py_ssize_t n;                       /* ranks */
    long long *counts, *displs;         /* n each */
    PyObject **types;                   /* n, held */
    PyObject *blocks;                   /* the TypedBlocks, held: it keeps the table and the runs alive */
    const shmtopo_typed_block_t *table; /* n blocks */
    long long first, end;               /* the bytes the blocks reach; both 0 where they hold none */
} layout_t;

#define LAYOUTS 32
static layout_t layouts[LAYOUTS];
static int layouts_next;

static void layout_clear(layout_t *l)
{
    for (Py_ssize_t i = 0; l->types && i < l->n; i++)
        Py_XDECREF(l->types[i]);
    Py_CLEAR(l->blocks);
    PyMem_Free(l->counts);
    PyMem_Free(l->types);
    *l = (layout_t){0};
}

/* An int of a sequence's item (its __index__), or -1 with ok cleared. */
static long long int_item(PyObject *o, int *ok)
{
    long long v = PyLong_CheckExact(o) ? PyLong_AsLongLong(o) : -1;
    if (!PyLong_CheckExact(o)) {
        PyObject *i = PyNumber_Index(o);
        v = i ? PyLong_AsLongLong(i) : -1;
        Py_XDECREF(i);
    }
    if (v == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        *ok = 0;
    }
    return v;
}

/* note_layout(counts, displs, types, blocks, table, first, end): a layout
 * the planner made (tuples of n; the table's address; the reach) */
static PyObject *note_layout(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7 || !PyTuple_Check(args[0]) || !PyTuple_Check(args[1]) || !PyTuple_Check(args[2]))
        return PyErr_Format(PyExc_TypeError, "note_layout(counts, displs, types, blocks, table, first, end)"), NULL;
    const Py_ssize_t n = PyTuple_GET_SIZE(args[2]);
    if (PyTuple_GET_SIZE(args[0]) != n || PyTuple_GET_SIZE(args[1]) != n)
        return PyErr_Format(PyExc_ValueError, "note_layout: %zd types, other lengths", n), NULL;
    layout_t l = {.n = n};
    l.counts = PyMem_Malloc(2 * (size_t)(n ? n : 1) * sizeof(long long));
    l.types = PyMem_Calloc((size_t)(n ? n : 1), sizeof(PyObject *));
    if (!l.counts || !l.types) {
        layout_clear(&l);
        return PyErr_NoMemory();
    }
    l.displs = l.counts + n;
    int ok = 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        l.counts[i] = int_item(PyTuple_GET_ITEM(args[0], i), &ok);
        l.displs[i] = int_item(PyTuple_GET_ITEM(args[1], i), &ok);
        l.types[i] = new_ref(PyTuple_GET_ITEM(args[2], i));
    }
    l.table = PyLong_AsVoidPtr(args[4]);
    l.first = PyLong_AsLongLong(args[5]);
    l.end = PyLong_AsLongLong(args[6]);
    if (!ok || PyErr_Occurred()) {
        layout_clear(&l);
        PyErr_Clear();
        Py_RETURN_NONE; /* not a form the C path reads: the planner keeps it */
    }
    l.blocks = new_ref(args[3]);
    layout_clear(&layouts[layouts_next]);
    layouts[layouts_next] = l;
    layouts_next = (layouts_next + 1) % LAYOUTS;
    Py_RETURN_NONE;
}

/* The noted layout of a message's counts, displacements and types, or NULL. */
static const layout_t *noted_layout(PyObject *counts, PyObject *displs, PyObject *types, Py_ssize_t n)
{
    if (!(PyList_Check(counts) || PyTuple_Check(counts)) || !(PyList_Check(displs) || PyTuple_Check(displs)) ||
        !(PyList_Check(types) || PyTuple_Check(types)) || PySequence_Fast_GET_SIZE(counts) != n ||
        PySequence_Fast_GET_SIZE(displs) != n || PySequence_Fast_GET_SIZE(types) != n)
        return NULL;
    PyObject **c = PySequence_Fast_ITEMS(counts), **d = PySequence_Fast_ITEMS(displs);
    PyObject **t = PySequence_Fast_ITEMS(types);
    for (int k = 0; k < LAYOUTS; k++) {
        const layout_t *l = &layouts[(layouts_next + LAYOUTS - 1 - k) % LAYOUTS]; /* the latest first */
        if (l->n != n || !l->blocks)
            continue;
        int same = 1;
        for (Py_ssize_t i = 0; same && i < n; i++)
            same = t[i] == l->types[i] && PyLong_CheckExact(c[i]) && PyLong_CheckExact(d[i]) &&
                   PyLong_AsLongLong(c[i]) == l->counts[i] && PyLong_AsLongLong(d[i]) == l->displs[i];
        if (!same)
            continue;
        for (Py_ssize_t i = 0; i < n; i++) { /* a datatype freed since is MPI's to refuse */
            const int live = PyObject_IsTrue(t[i]);
            if (live != 1) {
                PyErr_Clear();
                return NULL;
            }
        }
        return l;
    }
    return NULL;
}

/* A message's layout and its buffer (released by the caller), or NULL. */
static const layout_t *typed_message(PyObject *spec, Py_ssize_t n, int writable, Py_buffer *view)
{
    if (!(PyList_Check(spec) || PyTuple_Check(spec)))
        return NULL;
    const Py_ssize_t len = PySequence_Fast_GET_SIZE(spec);
    PyObject **item = PySequence_Fast_ITEMS(spec);
    const layout_t *l = NULL;
    if (len == 3 && (PyList_Check(item[1]) || PyTuple_Check(item[1])) && PySequence_Fast_GET_SIZE(item[1]) == 2)
        l = noted_layout(PySequence_Fast_ITEMS(item[1])[0], PySequence_Fast_ITEMS(item[1])[1], item[2], n);
    else if (len == 4)
        l = noted_layout(item[1], item[2], item[3], n);
    if (!l)
        return NULL;
    if (PyObject_GetBuffer(item[0], view, PyBUF_ANY_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0)) < 0) {
        PyErr_Clear();
        return NULL;
    }
    if (l->end > l->first && (l->first < 0 || l->end > view->len)) {
        PyBuffer_Release(view);
        return NULL;
    }
    return l;
}

/* accel_alltoallw(handle, sendbuf, recvbuf) -> True | None */
static PyObject *accel_alltoallw(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    shmtopo_comm_t *comm = comm_of(args[0]);
    const Py_ssize_t n = comm ? shmtopo_comm_size(comm) : 0;
    Py_buffer sv, rv;
    const layout_t *s = comm ? typed_message(args[1], n, 0, &sv) : NULL;
    if (!s)
        Py_RETURN_NONE;
    const layout_t *r = typed_message(args[2], n, 1, &rv);
    if (!r) {
        PyBuffer_Release(&sv);
        Py_RETURN_NONE;
    }
    const char *sb = sv.buf, *rb = rv.buf;
    PyObject *result;
    if (s->end > s->first && r->end > r->first && sb < rb + rv.len && rb < sb + sv.len) {
        result = new_ref(Py_None); /* overlapping buffers: the planner says why */
    } else {
        /* another thread may note layouts while this one runs without the
         * GIL, and reuse these entries: the tables stay with their blocks */
        const shmtopo_typed_block_t *st = s->table, *rt = r->table;
        PyObject *keep_s = new_ref(s->blocks), *keep_r = new_ref(r->blocks);
        int rc, err;
        CORE_CALL(comm, NULL, shmtopo_alltoallw(comm, sv.buf, st, rv.buf, rt));
        result = accel_done(rc, err);
        Py_DECREF(keep_s);
        Py_DECREF(keep_r);
    }
    PyBuffer_Release(&sv);
    PyBuffer_Release(&rv);
    return result;
}
