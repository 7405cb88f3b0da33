/* native/cpython/window.h: part of shmtopo._fastpath, included once by
 * fastpath.c in its place (one translation unit).
 *
 * NativeWindow, the base of shmtopo.Window (shmtopo.window). */

/* ---- NativeWindow: the base of shmtopo.Window (its type is below) ------- */

static PyObject *window_fence(PyObject *self, PyObject *unused)
{
    int rc, err;
    shmtopo_win_t *win = ((NativeWindow *)self)->win;
    CORE_CALL(NULL, win, shmtopo_win_fence(win));
    if (rc < 0)
        return failed(NULL, err);
    Py_RETURN_NONE;
}

/* The rank as a C int: Python ints and anything with __index__ (numpy's
 * integers) but bools; LONG_MIN with no error set for anything else. */
static long rank_of(PyObject *rank)
{
    if (PyBool_Check(rank))
        return LONG_MIN;
    PyObject *index = PyLong_CheckExact(rank) ? new_ref(rank) : PyNumber_Index(rank);
    if (!index)
        return PyErr_Clear(), LONG_MIN;
    int overflow = 0;
    long value = PyLong_AsLongAndOverflow(index, &overflow);
    Py_DECREF(index);
    if (PyErr_Occurred())
        PyErr_Clear(), value = LONG_MIN;
    return overflow || value < INT_MIN || value > INT_MAX ? LONG_MIN : value;
}

static PyObject *window_peer_fence(PyObject *self, PyObject *rank)
{
    long peer = rank_of(rank);
    if (peer == LONG_MIN) {
        PyObject *exc = PyObject_CallFunction(bound.value_error, "Ni",
                                              PyUnicode_FromFormat("peer rank must be an integer rank, not %R", rank),
                                              EINVAL);
        if (exc) {
            PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
            Py_DECREF(exc);
        }
        return NULL;
    }
    int rc, err;
    shmtopo_win_t *win = ((NativeWindow *)self)->win;
    CORE_CALL(NULL, win, shmtopo_win_peer_fence(win, (int)peer));
    if (rc < 0)
        return failed(NULL, err);
    Py_RETURN_NONE;
}

/* A native pointer field as an int attribute (its address; 0 for NULL):
 * the getset's closure is the field's offset in the object. */
#define POINTER_FIELD(type, field) ((void *)offsetof(type, field))

static PyObject *get_pointer(PyObject *self, void *offset)
{
    return PyLong_FromVoidPtr(*(void **)((char *)self + (size_t)offset));
}

static int set_pointer(PyObject *self, PyObject *value, void *offset)
{
    void *pointer = value ? PyLong_AsVoidPtr(value) : NULL;
    if (!pointer && PyErr_Occurred())
        return -1;
    *(void **)((char *)self + (size_t)offset) = pointer;
    return 0;
}

static PyMethodDef window_methods[] = {
    {"fence", window_fence, METH_NOARGS,
     "fence()\n--\n\nCollective: every store any rank made before the fence is visible to every\n"
     "rank after it. A wait that lasts releases the GIL."},
    {"peer_fence", window_peer_fence, METH_O,
     "peer_fence(rank)\n--\n\nTwo-sided: this rank and ``rank`` both call it naming each other; each one's\n"
     "earlier stores are then visible to the other. A wait that lasts releases the GIL."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef window_getset[] = {
    {"_fast", get_pointer, set_pointer, "the native window's address (0: freed)", POINTER_FIELD(NativeWindow, win)},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject NativeWindowType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "shmtopo._fastpath.NativeWindow",
    .tp_basicsize = sizeof(NativeWindow),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "The native half of shmtopo.Window: its fences (internal).",
    .tp_methods = window_methods,
    .tp_getset = window_getset,
    .tp_new = PyType_GenericNew,
};
