/* native/cpython/rma_state.h: part of shmtopo._fastpath, included once by
 * fastpath.c in its place (one translation unit).
 *
 * RmaState: an accelerated window's epochs (shmtopo.accel.window). */

/* ---- RmaState: an accelerated window's epochs, shared by both paths ---- */

static void rma_state_clear(RmaState *rs)
{
    PyMem_Free(rs->bases);
    PyMem_Free(rs->sizes);
    PyMem_Free(rs->units);
    PyMem_Free(rs->locks);
    rs->bases = NULL, rs->sizes = NULL, rs->units = NULL, rs->locks = NULL;
    rs->n = 0;
}

static void rma_state_dealloc(PyObject *self)
{
    RmaState *rs = (RmaState *)self;
    Py_XDECREF(rs->ctrl);
    rma_state_clear(rs);
    Py_TYPE(self)->tp_free(self);
}

/* RmaState(ctrl, bases, sizes, units): ctrl the control Window (or None:
 * every call goes to the Python methods); bases, sizes, units per rank. */
static int rma_state_init(PyObject *self, PyObject *args, PyObject *kwds)
{
    RmaState *rs = (RmaState *)self;
    PyObject *ctrl, *bases, *sizes, *units;
    if (!PyArg_ParseTuple(args, "OO!O!O!:RmaState", &ctrl, &PyList_Type, &bases, &PyList_Type, &sizes,
                          &PyList_Type, &units))
        return -1;
    const Py_ssize_t n = PyList_GET_SIZE(bases);
    if (PyList_GET_SIZE(sizes) != n || PyList_GET_SIZE(units) != n || n > INT_MAX) {
        PyErr_SetString(PyExc_ValueError, "RmaState: bases, sizes and units differ in length");
        return -1;
    }
    rma_state_clear(rs);
    rs->bases = PyMem_Calloc((size_t)n + 1, sizeof(char *));
    rs->sizes = PyMem_Calloc((size_t)n + 1, sizeof(size_t));
    rs->units = PyMem_Calloc((size_t)n + 1, sizeof(Py_ssize_t));
    rs->locks = PyMem_Calloc((size_t)n + 1, 1);
    if (!rs->bases || !rs->sizes || !rs->units || !rs->locks) {
        rma_state_clear(rs);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        rs->bases[i] = PyLong_AsVoidPtr(PyList_GET_ITEM(bases, i));
        rs->sizes[i] = PyLong_AsSize_t(PyList_GET_ITEM(sizes, i));
        rs->units[i] = PyLong_AsSsize_t(PyList_GET_ITEM(units, i));
        if (PyErr_Occurred()) {
            rma_state_clear(rs);
            return -1;
        }
    }
    rs->n = (int)n;
    Py_XSETREF(rs->ctrl, new_ref(ctrl));
    memset(rs->counts, 0, sizeof rs->counts);
    rs->nlocks = 0;
    rs->fence_open = rs->lock_all = rs->all_taken = rs->fast = 0;
    return 0;
}

static long rank_in(RmaState *rs, PyObject *rank)
{
    long r = PyLong_Check(rank) ? PyLong_AsLong(rank) : -1;
    if (r == -1 && PyErr_Occurred())
        return -1;
    if (r < 0 || r >= rs->n) {
        PyErr_Format(PyExc_IndexError, "RmaState: rank %ld not in [0, %d)", r, rs->n);
        return -1;
    }
    return r;
}

static PyObject *lock_tuple(unsigned held)
{
    return held & HELD ? Py_BuildValue("(OO)", held & EXCLUSIVE ? Py_True : Py_False, held & TAKEN ? Py_True : Py_False)
                       : new_ref(Py_None);
}

static PyObject *rma_lock_of(PyObject *self, PyObject *rank)
{
    RmaState *rs = (RmaState *)self;
    long r = rank_in(rs, rank);
    return r < 0 ? NULL : lock_tuple(rs->locks[r]);
}

static PyObject *rma_pop_lock(PyObject *self, PyObject *rank)
{
    RmaState *rs = (RmaState *)self;
    long r = rank_in(rs, rank);
    if (r < 0)
        return NULL;
    const unsigned held = rs->locks[r];
    if (held & HELD) {
        rs->locks[r] = 0;
        rs->nlocks--;
    }
    return lock_tuple(held);
}

static PyObject *rma_set_lock(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    RmaState *rs = (RmaState *)self;
    if (nargs != 3)
        return PyErr_Format(PyExc_TypeError, "set_lock(rank, exclusive, taken)"), NULL;
    long r = rank_in(rs, args[0]);
    int exclusive = PyObject_IsTrue(args[1]), taken = PyObject_IsTrue(args[2]);
    if (r < 0 || exclusive < 0 || taken < 0)
        return NULL;
    if (!(rs->locks[r] & HELD))
        rs->nlocks++;
    rs->locks[r] = (unsigned char)(HELD | (exclusive ? EXCLUSIVE : 0) | (taken ? TAKEN : 0));
    Py_RETURN_NONE;
}

/* The index of a call's name, or -1 with KeyError. */
static int call_named(PyObject *name)
{
    for (int i = 0; i < NW; i++)
        if (PyUnicode_Check(name) && PyUnicode_CompareWithASCIIString(name, wnames[i]) == 0)
            return i;
    PyErr_SetObject(PyExc_KeyError, name);
    return -1;
}

static PyObject *rma_count_of(PyObject *self, PyObject *name)
{
    int i = call_named(name);
    return i < 0 ? NULL : PyLong_FromUnsignedLongLong(((RmaState *)self)->counts[i]);
}

static PyObject *rma_uncount(PyObject *self, PyObject *name)
{
    int i = call_named(name);
    if (i < 0)
        return NULL;
    RmaState *rs = (RmaState *)self;
    rs->counts[i] -= rs->counts[i] > 0;
    Py_RETURN_NONE;
}

static PyObject *rma_release(PyObject *self, PyObject *unused)
{
    RmaState *rs = (RmaState *)self;
    rs->fast = 0;
    Py_XSETREF(rs->ctrl, new_ref(Py_None));
    Py_RETURN_NONE;
}

static PyMethodDef rma_state_methods[] = {
    {"lock_of", rma_lock_of, METH_O, "lock_of(rank) -> (exclusive, taken) | None: this rank's Lock of rank"},
    {"pop_lock", rma_pop_lock, METH_O, "pop_lock(rank) -> (exclusive, taken) | None: that lock, off the books"},
    {"set_lock", (PyCFunction)(void (*)(void))rma_set_lock, METH_FASTCALL, "set_lock(rank, exclusive, taken)"},
    {"release", rma_release, METH_NOARGS, "shmtopo's part is gone: every call takes the Python methods"},
    {"count_of", rma_count_of, METH_O, "count_of(name) -> the calls of that name these C methods ran"},
    {"uncount", rma_uncount, METH_O, "uncount(name): one call fewer (a request-based call counts as itself)"},
    {NULL, NULL, 0, NULL},
};

#define FLAG_GETSET(field)                                                        \
    static PyObject *get_##field(PyObject *self, void *c)                          \
    {                                                                              \
        return PyBool_FromLong(((RmaState *)self)->field);                         \
    }                                                                              \
    static int set_##field(PyObject *self, PyObject *value, void *c)               \
    {                                                                              \
        int v = value ? PyObject_IsTrue(value) : -1;                               \
        if (v < 0)                                                                 \
            return value ? -1 : (PyErr_SetString(PyExc_TypeError, "cannot delete"), -1); \
        ((RmaState *)self)->field = (char)v;                                       \
        return 0;                                                                  \
    }
FLAG_GETSET(fence_open)
FLAG_GETSET(lock_all)
FLAG_GETSET(all_taken)
FLAG_GETSET(fast)

static PyObject *get_nlocks(PyObject *self, void *c)
{
    return PyLong_FromLong(((RmaState *)self)->nlocks);
}

static PyGetSetDef rma_state_getset[] = {
    {"fence_open", get_fence_open, set_fence_open, "a Fence epoch is open", NULL},
    {"lock_all", get_lock_all, set_lock_all, "a Lock_all epoch is open", NULL},
    {"all_taken", get_all_taken, set_all_taken, "that Lock_all took the locks (not MODE_NOCHECK)", NULL},
    {"fast", get_fast, set_fast, "the C methods may run: accelerated, outside a Start epoch", NULL},
    {"nlocks", get_nlocks, NULL, "how many targets this rank holds a Lock of", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject RmaStateType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "shmtopo._fastpath.RmaState",
    .tp_basicsize = sizeof(RmaState),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An accelerated window's epochs and segments, read by WinFast's methods and the Python ones.",
    .tp_methods = rma_state_methods,
    .tp_getset = rma_state_getset,
    .tp_init = rma_state_init,
    .tp_new = PyType_GenericNew,
    .tp_dealloc = rma_state_dealloc,
};

/* bind_window(general, ops, masks, sum, lock_exclusive, lock_shared): the
 * Python methods by call name, ((op, code), ...) with REPLACE and NO_OP, per
 * core type the mask described at `rma`, MPI.SUM, the lock types. */
static PyObject *bind_window(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6 || !PyDict_Check(args[0]) || !PyTuple_Check(args[1]) || !PyTuple_Check(args[2])
        || PyTuple_GET_SIZE(args[2]) != NDTYPES)
        return PyErr_Format(PyExc_TypeError, "bind_window(general, ops, masks, sum, exclusive, shared)"), NULL;
    for (int i = 0; i < NW; i++) {
        PyObject *f = PyDict_GetItemString(args[0], wnames[i]);
        if (!f)
            return PyErr_Occurred() ? NULL : PyErr_Format(PyExc_KeyError, "bind_window: no %s", wnames[i]), NULL;
        Py_XSETREF(rma.general[i], new_ref(f));
    }
    for (int i = 0; i < NDTYPES; i++) {
        rma.masks[i] = (unsigned)PyLong_AsUnsignedLongMask(PyTuple_GET_ITEM(args[2], i));
        if (PyErr_Occurred())
            return NULL;
    }
    rma.lock_exclusive = PyLong_AsLong(args[4]);
    rma.lock_shared = PyLong_AsLong(args[5]);
    if (PyErr_Occurred())
        return NULL;
    if (!rma.state.name && !(rma.state.name = PyUnicode_InternFromString("_rs")))
        return NULL;
    Py_XSETREF(rma.ops, new_ref(args[1]));
    Py_XSETREF(rma.sum, new_ref(args[3]));
    Py_RETURN_NONE;
}
