/* native/cpython/buffers.h: part of shmtopo._fastpath, included once by
 * fastpath.c in its place (one translation unit).
 *
 * The drop-in's message reader (shmtopo.accel.buffers): mpi4py's buffer
 * arguments in their plain forms. */

/* ---- the drop-in's entries (shmtopo.accelerate) -------------------------
 *
 * The collectives on mpi4py's upper-case arguments, in their plain case: a
 * message of a predefined datatype shmtopo moves, in a form mpi4py reads
 * (a buffer typed by its format, [buf, type], [buf, count, type],
 * [buf, (count, displ), type], [buf, count, displ, type]; counts and
 * displacements as Python ints), over any C-contiguous buffer (numpy arrays
 * and their slices, bytearray, mmap, memoryview, array.array), aligned for
 * its element type (the kernels load whole elements); an op object of the
 * table below; an int root in range. Each returns True once the collective
 * ran, and None, having done nothing, for anything else: the drop-in's
 * planner then reads the arguments in full, and says what is wrong. What is
 * plain comes from the planner's own tables (bind_accelerate), and a
 * message's bounds are read as the planner reads them (buffers.message), so
 * both take the same decisions; a message that does not fit its buffer is
 * left to the planner to refuse. */

#define ACCEL_MOVES (1u << 31) /* in a type's mask: a datatype shmtopo moves */
#define ACCEL_MAX_TYPES 64

static struct {
    PyObject *ops;          /* ((op object, shmtopo_op code), ...), matched by identity */
    PyObject *datatypes;    /* the predefined mpi4py Datatypes shmtopo knows, matched by identity */
    int ntypes;             /* their number; by index, each one's: */
    int codes[ACCEL_MAX_TYPES];         /* core element type */
    unsigned masks[ACCEL_MAX_TYPES];    /* ACCEL_MOVES | 1 << op for each op MPI defines on it */
    int by_code[NDTYPES];   /* the datatype (index) of an ndarray of that core type passed alone, -1: none */
    PyObject *formats;      /* {format: index}: the datatype of another buffer passed alone */
    PyObject *in_place;     /* MPI.IN_PLACE (None stands for it too) */
    PyObject *bottom;       /* MPI.BOTTOM */
    PyObject *last_error;   /* last_error(errno) -> the exception, as the planner's path words it */
} accel;

static int accel_in_place(PyObject *spec)
{
    return spec == Py_None || (accel.in_place && spec == accel.in_place);
}

/* MPI.IN_PLACE and MPI.BOTTOM export empty buffers, but are no buffer of data. */
static int accel_data(PyObject *buf)
{
    return !accel_in_place(buf) && buf != accel.bottom;
}

static int accel_type_of(PyObject *datatype)
{
    for (int i = 0; i < accel.ntypes; i++)
        if (PyTuple_GET_ITEM(accel.datatypes, i) == datatype)
            return i;
    return -1;
}

/* The op's core code (the ops' table, by identity: the drop-in's SUM default
 * too), else -1. */
static int accel_op_code(PyObject *op)
{
    Py_ssize_t n = accel.ops ? PyTuple_GET_SIZE(accel.ops) : 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PyTuple_GET_ITEM(accel.ops, i);
        if (PyTuple_GET_ITEM(pair, 0) == op)
            return (int)PyLong_AsLong(PyTuple_GET_ITEM(pair, 1));
    }
    return -1;
}

/* The op's core code where MPI defines it on the datatype (index `type`), else -1. */
static int accel_op(PyObject *op, int type)
{
    const int opc = accel_op_code(op);
    return opc >= 0 && accel.masks[type] & (1u << opc) ? opc : -1;
}

/* The datatype of a buffer passed without one, from its format (NULL: bytes). */
static int accel_format(const char *format)
{
    PyObject *key = PyUnicode_FromString(format ? format : "B");
    PyObject *index = key && accel.formats ? PyDict_GetItemWithError(accel.formats, key) : NULL;
    Py_XDECREF(key);
    if (!index) {
        PyErr_Clear();
        return -1;
    }
    return (int)PyLong_AsLong(index);
}

/* mpi4py's forms of a message, split as buffers._split splits them; 0 for
 * one the planner must read (a type given by name, numpy integers, ...). */
static int accel_split(PyObject *spec, PyObject **buf, Py_ssize_t *count, Py_ssize_t *displ, int *type)
{
    *count = *displ = -1;
    *type = -1;
    if (!PyList_CheckExact(spec) && !PyTuple_CheckExact(spec)) {
        *buf = spec;
        return 1;
    }
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(spec);
    PyObject **item = PySequence_Fast_ITEMS(spec), *c, *d = NULL;
    if (n < 2 || n > 4)
        return 0;
    *buf = item[0];
    if (n == 2) { /* [buf, type] or [buf, count] */
        *type = accel_type_of(item[1]);
        c = *type < 0 ? item[1] : NULL;
    } else {
        c = item[1];
        d = n == 4 ? item[2] : NULL;
        if ((*type = accel_type_of(item[n - 1])) < 0)
            return 0;
    }
    if (c && n < 4 && (PyList_CheckExact(c) || PyTuple_CheckExact(c))) { /* (count, displ) */
        if (PySequence_Fast_GET_SIZE(c) != 2)
            return 0;
        d = PySequence_Fast_ITEMS(c)[1];
        c = PySequence_Fast_ITEMS(c)[0];
    }
    return (!c || (*count = index_of(c)) >= 0) && (!d || (*displ = index_of(d)) >= 0);
}

/* One buffer argument, read as buffers.message reads it. */
struct msg {
    Py_buffer held; /* the buffer as acquired; msg_release gives it back */
    Py_buffer at;   /* held's .buf and .len narrowed to the message's entries (only those two are read) */
    int type;       /* its datatype, an index in accel's tables */
    int code;       /* the core's element type */
};

static void msg_release(struct msg *m)
{
    PyBuffer_Release(&m->held);
}

/* The buffer of a message into m->held, and its datatype: `type` when one
 * was given (>= 0), else mpi4py's for the buffer's format; -1 with nothing
 * held when it is not one shmtopo moves, or not a C-contiguous buffer. */
static int accel_buffer(PyObject *buf, int type, int writable, struct msg *m)
{
    int code, flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (!accel_data(buf))
        return -1;
    if (type < 0 && Py_TYPE(buf) == (PyTypeObject *)bound.ndarray) {
        /* typed by numpy's dtype object, read as the lower-case entries read it */
        if (!view_of(buf, &m->held, writable, &code))
            return -1;
        if ((type = accel.by_code[code]) < 0 || !(accel.masks[type] & ACCEL_MOVES)) {
            msg_release(m);
            return -1;
        }
        return type;
    }
    if (type < 0)
        flags |= PyBUF_FORMAT;
    if (PyObject_GetBuffer(buf, &m->held, flags) < 0) {
        PyErr_Clear(); /* no buffer, not contiguous, read-only: the planner says which */
        return -1;
    }
    if (type < 0)
        type = accel_format(m->held.format);
    if (type < 0 || !(accel.masks[type] & ACCEL_MOVES)) {
        msg_release(m);
        return -1;
    }
    return type;
}

/* The message `spec` of `blocks` blocks (0 or 1: one), when it is plain:
 * its type known and moved by shmtopo, its entries inside the buffer and
 * aligned; 0 with nothing held otherwise. */
static int accel_msg(PyObject *spec, int writable, Py_ssize_t blocks, struct msg *m)
{
    PyObject *buf;
    Py_ssize_t count, displ;
    int type, code;
    if (!accel_split(spec, &buf, &count, &displ, &type) || (type = accel_buffer(buf, type, writable, m)) < 0)
        return 0;
    code = accel.codes[type];
    const Py_ssize_t size = (Py_ssize_t)shmtopo_dtype_size(code), per = blocks > 1 ? blocks : 1;
    Py_ssize_t len = m->held.len, entries;
    int fits;
    if (displ < 0)
        displ = 0;
    fits = displ <= len / size;
    len -= fits ? displ * size : 0;
    if (count >= 0) {
        fits = fits && count <= len / size / per;
        entries = count * per;
    } else {
        fits = fits && len % size == 0 && len / size % per == 0;
        entries = len / size;
    }
    m->at = m->held;
    m->at.buf = (char *)m->held.buf + (fits ? displ * size : 0);
    m->at.len = entries * size;
    if (!fits || (uintptr_t)m->at.buf % (uintptr_t)size) {
        msg_release(m);
        return 0;
    }
    m->type = type;
    m->code = code;
    return 1;
}

/* Block i of the n blocks of `whole`, which holds the buffer (releasing the block does nothing). */
static void accel_block(const struct msg *whole, int i, int n, struct msg *block)
{
    *block = *whole;
    block->held.obj = NULL;
    block->at.len = whole->at.len / n;
    block->at.buf = (char *)whole->at.buf + block->at.len * i;
}

/* A result like `in`: the same datatype and length, writable; 0 with nothing held otherwise. */
static int accel_result(PyObject *spec, struct msg *out, const struct msg *in)
{
    if (!accel_msg(spec, 1, 1, out))
        return 0;
    if (out->type != in->type || out->at.len != in->at.len) {
        msg_release(out);
        return 0;
    }
    return 1;
}

static PyObject *accel_done(int rc, int err)
{
    if (rc < 0 && !accel.last_error) /* called before bind_accelerate */
        return failed(NULL, err);
    if (rc < 0) {
        PyObject *exc = PyObject_CallFunction(accel.last_error, "i", err);
        if (exc) {
            PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
            Py_DECREF(exc);
        }
        return NULL;
    }
    Py_RETURN_TRUE;
}

/* A reduction's input and result, of one datatype and length; sendbuf
 * IN_PLACE (or None): the result's own entries. 0 with nothing held otherwise. */
static int accel_in_out(PyObject *sendbuf, PyObject *recvbuf, struct msg *in, struct msg *out)
{
    if (accel_in_place(sendbuf)) {
        if (!accel_msg(recvbuf, 1, 1, out))
            return 0;
        accel_block(out, 0, 1, in);
        return 1;
    }
    if (!accel_msg(sendbuf, 0, 1, in))
        return 0;
    if (!accel_result(recvbuf, out, in)) {
        msg_release(in);
        return 0;
    }
    return 1;
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
