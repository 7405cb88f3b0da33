/* native/cpython/comm.h: part of shmtopo._fastpath, included once by
 * fastpath.c in its place (one translation unit).
 *
 * NativeComm, the base of shmtopo.Comm (shmtopo.comm). */

/* ---- NativeComm: the base of shmtopo.Comm -------------------------------
 *
 * comm.allreduce(a, out=out) and the other calls below are C methods, so
 * that a plain call costs one C call: the Python function in between cost
 * 0.06 us of a 0.39 us allreduce. Each reads its arguments as the Python
 * signature does and, in the plain case, runs the module's entry of the
 * same name (whose checks decide what is plain); anything else, and every
 * call the entry declines, goes with the very arguments to the general
 * Python function bound by bind_comm (coll/api.py's), which reads them in
 * full and says what is wrong. The handle and window lists are the
 * comm's attributes fast_handle, fast_windows and windows. */
typedef struct {
    PyObject_HEAD
    PyObject *fast_handle;  /* the native comm as an int; 0 when the fast entries must not be taken */
    PyObject *fast_windows; /* the windows the fast entries may find large arrays in, or None */
    PyObject *windows;      /* every open window of the comm (a list) */
} NativeComm;

enum { C_BARRIER, C_ALLREDUCE, C_REDUCE, C_BCAST, C_ALLGATHER, C_ALLTOALL, C_GATHER, C_SCATTER, NC };
static const char *const cnames[NC] = {"barrier", "allreduce", "reduce", "bcast", "allgather", "alltoall",
                                       "gather", "scatter"};

/* The parameters' names, interned: keywords compare by identity first. */
enum { P_ARRAY, P_OP, P_ROOT, P_OUT, P_ALGORITHM, P_BUF, P_SENDBUF, P_RECVBUF, P_RECVCOUNTS, NP };
static const char *const pnames[NP] = {"array", "op", "root", "out", "algorithm", "buf", "sendbuf", "recvbuf",
                                       "recvcounts"};

static struct {
    PyObject *general[NC];  /* the Python functions, by call: general(comm, *args, **kwargs) */
    PyObject *names[NP];
    PyObject *sum;          /* "sum", op's default */
    PyObject *zero;         /* 0, root's default */
} cm;

/* The call's arguments into values[parameter], for a signature whose first
 * `npos` parameters of `params` may come by position and all by keyword;
 * values keep their defaults where not given. 0 for anything Python would
 * refuse (too many, unknown or repeated names): the general path raises it. */
static int bind_args(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, const int *params, int nparams,
                     int npos, PyObject **values)
{
    if (nargs > npos)
        return 0;
    for (Py_ssize_t i = 0; i < nargs; i++)
        values[params[i]] = args[i];
    const Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, k);
        int i = 0;
        while (i < nparams && key != cm.names[params[i]])
            i++;
        for (int j = 0; i == nparams && j < nparams; j++)
            if (PyUnicode_Check(key) && PyUnicode_Compare(key, cm.names[params[j]]) == 0)
                i = j;
        if (i == nparams || i < nargs)
            return 0;
        values[params[i]] = args[nargs + k];
    }
    return 1;
}

/* The general function's answer: general(self, *args, **kwargs). */
static PyObject *comm_general(int call, PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    return call_general(cm.general[call], "bind_comm", self, args, nargs, kwnames);
}

static PyObject *or_none(PyObject *o)
{
    return o ? o : Py_None;
}

/* An entry's answer: `declined` (borrowed; None or NotImplemented) sends the
 * call to the general function, anything else (a result, or NULL with an
 * error) is the call's. */
#define ENTRY_OR_GENERAL(answer, declined)                                \
    do {                                                                  \
        PyObject *r_ = (answer);                                          \
        if (r_ != (declined))                                             \
            return r_;                                                    \
        Py_DECREF(r_);                                                    \
    } while (0)

#define COMM_METHOD(fn) \
    static PyObject *fn(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)

COMM_METHOD(comm_barrier)
{
    NativeComm *c = (NativeComm *)self;
    if (!nargs && !kwnames && c->fast_handle) {
        PyObject *r = fast_barrier(NULL, c->fast_handle);
        if (r == Py_True) /* done */
            Py_SETREF(r, new_ref(Py_None));
        else if (r == Py_None) /* declined */
            Py_CLEAR(r);
        if (r || PyErr_Occurred())
            return r;
    }
    return comm_general(C_BARRIER, self, args, nargs, kwnames);
}

/* allreduce(array, op="sum", *, out=None, algorithm=None) */
COMM_METHOD(comm_allreduce)
{
    static const int params[] = {P_ARRAY, P_OP, P_OUT, P_ALGORITHM};
    NativeComm *c = (NativeComm *)self;
    PyObject *v[NP] = {NULL, cm.sum, NULL, Py_None, Py_None};
    if (c->fast_handle && bind_args(args, nargs, kwnames, params, 4, 2, v) && v[P_ARRAY] &&
        v[P_ALGORITHM] == Py_None) {
        PyObject *const e[5] = {c->fast_handle, or_none(c->fast_windows), v[P_ARRAY], v[P_OUT], v[P_OP]};
        ENTRY_OR_GENERAL(fast_allreduce(NULL, e, 5), Py_None);
    }
    return comm_general(C_ALLREDUCE, self, args, nargs, kwnames);
}

/* reduce(array, op="sum", root=0, *, out=None, algorithm=None) */
COMM_METHOD(comm_reduce)
{
    static const int params[] = {P_ARRAY, P_OP, P_ROOT, P_OUT, P_ALGORITHM};
    NativeComm *c = (NativeComm *)self;
    PyObject *v[NP] = {NULL, cm.sum, cm.zero, Py_None, Py_None};
    shmtopo_comm_t *comm = c->fast_handle ? comm_of(c->fast_handle) : NULL;
    if (comm && bind_args(args, nargs, kwnames, params, 5, 3, v) && v[P_ARRAY] && v[P_ALGORITHM] == Py_None &&
        PyLong_CheckExact(v[P_ROOT])) {
        /* the fast entries take job ranks as the core's: one node, in order */
        const int is_root = PyLong_AsLong(v[P_ROOT]) == shmtopo_comm_rank(comm);
        if (PyErr_Occurred())
            PyErr_Clear();
        PyObject *const e[7] = {c->fast_handle, or_none(c->fast_windows), v[P_ARRAY], v[P_OUT], v[P_OP],
                                v[P_ROOT], is_root ? Py_True : Py_False};
        ENTRY_OR_GENERAL(fast_reduce(NULL, e, 7), Py_NotImplemented);
    }
    return comm_general(C_REDUCE, self, args, nargs, kwnames);
}

/* bcast(array, root=0, *, out=None): in C when in place (out is array) */
COMM_METHOD(comm_bcast)
{
    static const int params[] = {P_ARRAY, P_ROOT, P_OUT};
    NativeComm *c = (NativeComm *)self;
    PyObject *v[NP] = {NULL, NULL, cm.zero, Py_None, NULL};
    if (c->fast_handle && bind_args(args, nargs, kwnames, params, 3, 2, v) && v[P_ARRAY] &&
        v[P_OUT] == v[P_ARRAY] && PyLong_CheckExact(v[P_ROOT])) {
        PyObject *const e[4] = {c->fast_handle, or_none(c->fast_windows), v[P_ARRAY], v[P_ROOT]};
        ENTRY_OR_GENERAL(fast_bcast(NULL, e, 4), Py_None);
    }
    return comm_general(C_BCAST, self, args, nargs, kwnames);
}

/* allgather(array, *, out=None): in C with out given */
COMM_METHOD(comm_allgather)
{
    static const int params[] = {P_ARRAY, P_OUT};
    NativeComm *c = (NativeComm *)self;
    PyObject *v[NP] = {NULL, NULL, NULL, Py_None, NULL};
    shmtopo_comm_t *comm = c->fast_handle ? comm_of(c->fast_handle) : NULL;
    if (comm && bind_args(args, nargs, kwnames, params, 2, 1, v) && v[P_ARRAY] && v[P_OUT] != Py_None) {
        PyObject *nranks = PyLong_FromLong(shmtopo_comm_size(comm)); /* the job's: one node */
        if (!nranks)
            return NULL;
        PyObject *const e[5] = {c->fast_handle, or_none(c->windows), v[P_ARRAY], v[P_OUT], nranks};
        PyObject *r = fast_allgather(NULL, e, 5);
        Py_DECREF(nranks);
        ENTRY_OR_GENERAL(r, Py_None);
    }
    return comm_general(C_ALLGATHER, self, args, nargs, kwnames);
}

/* alltoall(array, *, out=None): in C with out given */
COMM_METHOD(comm_alltoall)
{
    static const int params[] = {P_ARRAY, P_OUT};
    NativeComm *c = (NativeComm *)self;
    PyObject *v[NP] = {NULL, NULL, NULL, Py_None, NULL};
    if (c->fast_handle && bind_args(args, nargs, kwnames, params, 2, 1, v) && v[P_ARRAY] && v[P_OUT] != Py_None) {
        PyObject *const e[3] = {c->fast_handle, v[P_ARRAY], v[P_OUT]};
        ENTRY_OR_GENERAL(fast_alltoall(NULL, e, 3), Py_None);
    }
    return comm_general(C_ALLTOALL, self, args, nargs, kwnames);
}

/* gather(array, root=0, *, out=None) */
COMM_METHOD(comm_gather)
{
    static const int params[] = {P_ARRAY, P_ROOT, P_OUT};
    NativeComm *c = (NativeComm *)self;
    PyObject *v[NP] = {NULL, NULL, cm.zero, Py_None, NULL};
    if (c->fast_handle && bind_args(args, nargs, kwnames, params, 3, 2, v) && v[P_ARRAY]) {
        PyObject *const e[4] = {c->fast_handle, v[P_ARRAY], v[P_OUT], v[P_ROOT]};
        PyObject *r = fast_gather(NULL, e, 4);
        if (r == Py_True) { /* done, off the root */
            Py_DECREF(r);
            Py_RETURN_NONE;
        }
        ENTRY_OR_GENERAL(r, Py_None);
    }
    return comm_general(C_GATHER, self, args, nargs, kwnames);
}

/* scatter(array, root=0, *, out=None): in C with out given */
COMM_METHOD(comm_scatter)
{
    static const int params[] = {P_ARRAY, P_ROOT, P_OUT};
    NativeComm *c = (NativeComm *)self;
    PyObject *v[NP] = {NULL, NULL, cm.zero, Py_None, NULL};
    if (c->fast_handle && bind_args(args, nargs, kwnames, params, 3, 2, v) && v[P_ARRAY] && v[P_OUT] != Py_None) {
        PyObject *const e[4] = {c->fast_handle, v[P_ARRAY], v[P_OUT], v[P_ROOT]};
        ENTRY_OR_GENERAL(fast_scatter(NULL, e, 4), Py_None);
    }
    return comm_general(C_SCATTER, self, args, nargs, kwnames);
}

/* bind_comm({"barrier": f, ...}): the general functions of NativeComm's methods */
static PyObject *bind_comm(PyObject *self, PyObject *general)
{
    if (!PyDict_Check(general))
        return PyErr_Format(PyExc_TypeError, "bind_comm: expected a dict"), NULL;
    for (int i = 0; i < NC; i++) {
        PyObject *f = PyDict_GetItemString(general, cnames[i]);
        if (!f || !PyCallable_Check(f))
            return PyErr_Format(PyExc_TypeError, "bind_comm: no function for %s", cnames[i]), NULL;
        Py_XSETREF(cm.general[i], new_ref(f));
    }
    Py_RETURN_NONE;
}

static int comm_traverse(PyObject *self, visitproc visit, void *arg)
{
    NativeComm *c = (NativeComm *)self;
    Py_VISIT(c->fast_handle);
    Py_VISIT(c->fast_windows);
    Py_VISIT(c->windows);
    return 0;
}

static int comm_clear(PyObject *self)
{
    NativeComm *c = (NativeComm *)self;
    Py_CLEAR(c->fast_handle);
    Py_CLEAR(c->fast_windows);
    Py_CLEAR(c->windows);
    return 0;
}

static void comm_dealloc(PyObject *self)
{
    PyObject_GC_UnTrack(self);
    comm_clear(self);
    Py_TYPE(self)->tp_free(self);
}

#define COMM_ENTRY(name, fn, doc) \
    {name, (PyCFunction)(void (*)(void))fn, METH_FASTCALL | METH_KEYWORDS, doc}

static PyMethodDef comm_methods[] = {
    COMM_ENTRY("barrier", comm_barrier, "barrier()\n--\n\nCollective: no rank leaves before every rank arrived."),
    COMM_ENTRY("allreduce", comm_allreduce,
               "allreduce(array, op='sum', *, out=None, algorithm=None)\n--\n\n"
               "Collective: the element-wise reduction of every rank's array (see shmtopo.coll.api.allreduce)."),
    COMM_ENTRY("reduce", comm_reduce,
               "reduce(array, op='sum', root=0, *, out=None, algorithm=None)\n--\n\n"
               "Collective: the reduction on rank root (see shmtopo.coll.api.reduce)."),
    COMM_ENTRY("bcast", comm_bcast,
               "bcast(array, root=0, *, out=None)\n--\n\n"
               "Collective: every rank gets rank root's array (see shmtopo.coll.api.bcast)."),
    COMM_ENTRY("allgather", comm_allgather,
               "allgather(array, *, out=None)\n--\n\n"
               "Collective: shape (nranks, *array.shape), row r from rank r (see shmtopo.coll.api.allgather)."),
    COMM_ENTRY("alltoall", comm_alltoall,
               "alltoall(array, *, out=None)\n--\n\n"
               "Collective: block p of the result is block rank of rank p's array (see shmtopo.coll.api.alltoall)."),
    COMM_ENTRY("gather", comm_gather,
               "gather(array, root=0, *, out=None)\n--\n\n"
               "Collective: on rank root, row r from rank r (see shmtopo.coll.api.gather)."),
    COMM_ENTRY("scatter", comm_scatter,
               "scatter(array, root=0, *, out=None)\n--\n\n"
               "Collective: rank r gets block r of the root's array (see shmtopo.coll.api.scatter)."),
    {NULL, NULL, 0, NULL},
};

static PyMemberDef comm_members[] = {
    {"fast_handle", T_OBJECT, offsetof(NativeComm, fast_handle), 0,
     "the native comm as an int for the fast entries (0: not to be taken: freed, or spanning nodes)"},
    {"fast_windows", T_OBJECT, offsetof(NativeComm, fast_windows), 0,
     "the windows the fast entries may find large arrays in; None while the levels may take large calls"},
    {"windows", T_OBJECT, offsetof(NativeComm, windows), 0, "the comm's open windows, in creation order"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject NativeCommType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "shmtopo._fastpath.NativeComm",
    .tp_basicsize = sizeof(NativeComm),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The native half of shmtopo.Comm: its plain collectives in C (internal).",
    .tp_methods = comm_methods,
    .tp_members = comm_members,
    .tp_traverse = comm_traverse,
    .tp_clear = comm_clear,
    .tp_dealloc = comm_dealloc,
    .tp_new = PyType_GenericNew,
};

/* The parameter names and defaults NativeComm's methods bind with. */
static int comm_init_names(void)
{
    for (int i = 0; i < NP; i++)
        if (!cm.names[i] && !(cm.names[i] = PyUnicode_InternFromString(pnames[i])))
            return -1;
    if (!cm.sum && !(cm.sum = PyUnicode_InternFromString("sum")))
        return -1;
    if (!cm.zero && !(cm.zero = PyLong_FromLong(0)))
        return -1;
    return 0;
}
