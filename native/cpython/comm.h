/* native/cpython/comm.h: part of shmtopo._fastpath, included once by
 * fastpath.c in its place (one translation unit).
 *
 * NativeComm, the base of shmtopo.Comm (shmtopo.comm), and the general
 * path's claim of a comm. */

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
 * comm's attributes fast_handle (or span_handle), fast_windows and
 * windows. */
typedef struct {
    PyObject_HEAD
    PyObject *fast_handle;  /* the native comm as an int; 0 when the fast entries must not be taken */
    PyObject *fast_windows; /* the windows the fast entries may find large arrays in, or None */
    PyObject *windows;      /* every open window of the comm (a list) */
    PyObject *span_handle;  /* the native comm as an int where it spans nodes, else 0 (see entry_handle) */
} NativeComm;

enum { C_BARRIER, C_ALLREDUCE, C_REDUCE, C_BCAST, C_ALLGATHER, C_ALLTOALL, C_GATHER, C_SCATTER, C_REDUCE_SCATTER,
       C_GATHERV, C_SCATTERV, C_ALLGATHERV, C_ALLTOALLV, C_SCAN, C_EXSCAN, NC };

/* The parameters' names, interned: keywords compare by identity first.
 * The lower-case calls' and mpi4py's (CommFast binds with op, root, buf,
 * sendbuf, recvbuf and recvcounts). */
enum { P_ARRAY, P_OP, P_ROOT, P_OUT, P_ALGORITHM, P_BUF, P_SENDBUF, P_RECVBUF, P_RECVCOUNTS, P_COUNTS, P_DISPLS,
       P_SENDCOUNTS, P_SDISPLS, P_RDISPLS, NP };
static const char *const pnames[NP] = {"array", "op", "root", "out", "algorithm", "buf", "sendbuf", "recvbuf",
                                       "recvcounts", "counts", "displs", "sendcounts", "sdispls", "rdispls"};

static struct {
    PyObject *general[NC];  /* the Python functions, by call: general(comm, *args, **kwargs) */
    PyObject *heard_of;     /* heard_of(comm, exc): a failure across nodes told to the other nodes */
    PyObject *run_queued;   /* run_queued(address) -> bool: the comm's queued nonblocking calls run */
    PyObject *names[NP];
    PyObject *sum;          /* "sum", op's default */
    PyObject *zero;         /* 0, root's default */
} cm;

/* When an entry is tried at all (else the general function runs); W_SPANS:
 * also on a comm that spans nodes (given span_handle). */
enum { W_OUT = 1, W_OUT_IS_ARRAY = 2, W_NO_ALGORITHM = 4, W_SPANS = 8 };

/* One lower-case collective: its Python signature (the first `npos`
 * parameters may come by position, the first `required` must come; op
 * defaults to "sum", root to 0, the others to None) and the module entry
 * that takes its plain case. An entry answers its result, True for "done,
 * nothing to return" (None), or its "not plain" (None, or NotImplemented
 * where None is a result) to send the call to the general function. The
 * entry's arguments are written at its method below. */
typedef struct {
    const char *name;
    PyObject *(*entry)(PyObject *, PyObject *const *, Py_ssize_t);
    signed char nparams, npos, required, declined_by_notimplemented;
    unsigned char when;
    signed char params[6];
} comm_call_t;

static PyObject *barrier_entry(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return fast_barrier(self, args[0]);
}

static const comm_call_t comm_calls[NC] = {
    [C_BARRIER] = {"barrier", barrier_entry, 0, 0, 0, 0, W_SPANS, {0}},
    [C_ALLREDUCE] = {"allreduce", fast_allreduce, 4, 2, 1, 0, W_NO_ALGORITHM | W_SPANS,
                     {P_ARRAY, P_OP, P_OUT, P_ALGORITHM}},
    [C_REDUCE] = {"reduce", fast_reduce, 5, 3, 1, 1, W_NO_ALGORITHM | W_SPANS,
                  {P_ARRAY, P_OP, P_ROOT, P_OUT, P_ALGORITHM}},
    [C_BCAST] = {"bcast", fast_bcast, 3, 2, 1, 0, W_OUT_IS_ARRAY | W_SPANS, {P_ARRAY, P_ROOT, P_OUT}},
    [C_ALLGATHER] = {"allgather", fast_allgather, 2, 1, 1, 0, W_OUT, {P_ARRAY, P_OUT}},
    [C_ALLTOALL] = {"alltoall", fast_alltoall, 2, 1, 1, 0, W_OUT, {P_ARRAY, P_OUT}},
    [C_GATHER] = {"gather", fast_gather, 3, 2, 1, 0, 0, {P_ARRAY, P_ROOT, P_OUT}},
    [C_SCATTER] = {"scatter", fast_scatter, 3, 2, 1, 0, W_OUT, {P_ARRAY, P_ROOT, P_OUT}},
    [C_REDUCE_SCATTER] = {"reduce_scatter", fast_reduce_scatter, 4, 2, 1, 0, W_OUT, {P_ARRAY, P_OP, P_COUNTS, P_OUT}},
    [C_GATHERV] = {"gatherv", fast_gatherv, 5, 4, 1, 0, 0, {P_ARRAY, P_COUNTS, P_DISPLS, P_ROOT, P_OUT}},
    [C_SCATTERV] = {"scatterv", fast_scatterv, 5, 4, 1, 0, W_OUT, {P_ARRAY, P_COUNTS, P_DISPLS, P_ROOT, P_OUT}},
    [C_ALLGATHERV] = {"allgatherv", fast_allgatherv, 4, 3, 2, 0, W_OUT, {P_ARRAY, P_COUNTS, P_DISPLS, P_OUT}},
    [C_ALLTOALLV] = {"alltoallv", fast_alltoallv, 6, 5, 5, 0, W_OUT,
                     {P_ARRAY, P_SENDCOUNTS, P_SDISPLS, P_RECVCOUNTS, P_RDISPLS, P_OUT}},
    [C_SCAN] = {"scan", fast_scan, 3, 2, 1, 0, 0, {P_ARRAY, P_OP, P_OUT}},
    [C_EXSCAN] = {"exscan", fast_scan, 3, 2, 1, 0, 0, {P_ARRAY, P_OP, P_OUT}},
};

/* The call's arguments into values[parameter], for a signature whose first
 * `npos` parameters of `params` may come by position and all by keyword;
 * values keep their defaults where not given. 0 for anything Python would
 * refuse (too many, unknown or repeated names): the general path raises it. */
static inline __attribute__((always_inline)) int bind_args(PyObject *const *args, Py_ssize_t nargs,
                                                           PyObject *kwnames, const signed char *params,
                                                           int nparams, int npos, PyObject **values)
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

static PyObject *or_none(PyObject *o)
{
    return o ? o : Py_None;
}

/* The handle a call's entry takes on this comm, or NULL (none: the general
 * function runs). Handles are ints, 0 (the one small int 0) for none. */
static inline __attribute__((always_inline)) PyObject *entry_handle(const NativeComm *nc, int spans_too)
{
    if (nc->fast_handle && nc->fast_handle != cm.zero)
        return nc->fast_handle;
    return spans_too && nc->span_handle && nc->span_handle != cm.zero ? nc->span_handle : NULL;
}

/* A method's arguments bound into v (by parameter), and the handle its
 * entry takes with them, or NULL where it may not be tried. */
static inline __attribute__((always_inline)) PyObject *comm_bound(const comm_call_t *c, const NativeComm *nc,
                                                                  PyObject *const *args, Py_ssize_t nargs,
                                                                  PyObject *kwnames, PyObject **v)
{
    v[P_OP] = cm.sum, v[P_ROOT] = cm.zero;
    for (int i = 0; i < c->nparams; i++)
        if (i < c->required)
            v[c->params[i]] = NULL;
        else if (c->params[i] != P_OP && c->params[i] != P_ROOT)
            v[c->params[i]] = Py_None;
    PyObject *handle = entry_handle(nc, c->when & W_SPANS);
    if (!handle || !bind_args(args, nargs, kwnames, c->params, c->nparams, c->npos, v))
        return NULL;
    for (int i = 0; i < c->required; i++)
        if (!v[c->params[i]])
            return NULL;
    const int plain = (!(c->when & W_OUT) || v[P_OUT] != Py_None)
                      && (!(c->when & W_OUT_IS_ARRAY) || v[P_OUT] == v[P_ARRAY])
                      && (!(c->when & W_NO_ALGORITHM) || v[P_ALGORITHM] == Py_None);
    return plain ? handle : NULL;
}

/* An entry's failure on a comm that spans nodes: a death found on this
 * node is news for the others, which may be waiting in MPI (heard_of tells
 * them); the exception stays the call's. */
static PyObject *told_across(PyObject *comm)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    PyObject *done = cm.heard_of ? PyObject_CallFunctionObjArgs(cm.heard_of, comm, or_none(value), NULL) : NULL;
    if (!done && cm.heard_of) /* telling failed too: the call's own failure is the one to raise */
        PyErr_Clear();
    Py_XDECREF(done);
    PyErr_Restore(type, value, tb);
    return NULL;
}

/* An entry's answer as the method's: 0 when it declined (nothing held). */
static inline __attribute__((always_inline)) int comm_answered(const comm_call_t *c, PyObject *r, PyObject **result)
{
    if (r == (c->declined_by_notimplemented ? Py_NotImplemented : Py_None)) {
        Py_DECREF(r);
        return 0;
    }
    if (r == Py_True) /* done, nothing to return */
        Py_SETREF(r, new_ref(Py_None));
    *result = r; /* or NULL: the collective failed */
    return 1;
}

/* After a fast entry failed: 1 where it failed to claim the comm at
 * `handle` because the comm's queue of nonblocking calls held it (CORE_CALL
 * noted queued_comm): the queue has run (run_queued), and the entry may be
 * tried again. Else 0, with the entry's error (or run_queued's) set. */
static int run_queue_instead(PyObject *handle)
{
    shmtopo_comm_t *queued = queued_comm;
    queued_comm = NULL;
    if (!queued || queued != comm_of(handle) || !cm.run_queued || !PyErr_Occurred())
        return 0;
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyObject *ran = PyObject_CallFunctionObjArgs(cm.run_queued, handle, NULL);
    if (ran != Py_True) {
        if (ran) /* no queue after all: the entry's own error stands */
            PyErr_Restore(type, value, traceback), type = value = traceback = NULL;
        Py_XDECREF(ran);
        Py_XDECREF(type), Py_XDECREF(value), Py_XDECREF(traceback);
        return 0;
    }
    Py_DECREF(ran);
    Py_XDECREF(type), Py_XDECREF(value), Py_XDECREF(traceback);
    return 1;
}

/* NativeComm's method `fn`: the entry of comm_calls[call] with the
 * arguments listed (the handle, a window list, bound values v[P_*]) on the
 * plain case, else the general function with the very arguments. */
#define COMM_METHOD(fn, call, ...)                                                                      \
    static PyObject *fn(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)     \
    {                                                                                                   \
        const NativeComm *nc = (const NativeComm *)self;                                                \
        PyObject *v[NP], *result, *handle = comm_bound(&comm_calls[call], nc, args, nargs, kwnames, v); \
        if (handle) {                                                                                   \
            PyObject *const e[] = {__VA_ARGS__};                                                        \
            while (comm_answered(&comm_calls[call], comm_calls[call].entry(NULL, e, sizeof e / sizeof *e), \
                                 &result)) {                                                            \
                if (!result && run_queue_instead(handle)) /* nonblocking calls came first */           \
                    continue;                                                                           \
                return result || handle == nc->fast_handle ? result : told_across(self);               \
            }                                                                                           \
        }                                                                                               \
        return call_general(cm.general[call], "bind_comm", self, args, nargs, kwnames);                \
    }
#define HANDLE handle
#define FAST_WINS (handle == nc->fast_handle ? or_none(nc->fast_windows) : Py_None) /* none across nodes */
#define ALL_WINS or_none(nc->windows)
COMM_METHOD(comm_barrier, C_BARRIER, HANDLE)
COMM_METHOD(comm_allreduce, C_ALLREDUCE, HANDLE, FAST_WINS, v[P_ARRAY], v[P_OUT], v[P_OP])
COMM_METHOD(comm_reduce, C_REDUCE, HANDLE, FAST_WINS, v[P_ARRAY], v[P_OUT], v[P_OP], v[P_ROOT])
COMM_METHOD(comm_bcast, C_BCAST, HANDLE, FAST_WINS, v[P_ARRAY], v[P_ROOT])
COMM_METHOD(comm_allgather, C_ALLGATHER, HANDLE, ALL_WINS, v[P_ARRAY], v[P_OUT])
COMM_METHOD(comm_alltoall, C_ALLTOALL, HANDLE, v[P_ARRAY], v[P_OUT])
COMM_METHOD(comm_gather, C_GATHER, HANDLE, v[P_ARRAY], v[P_OUT], v[P_ROOT])
COMM_METHOD(comm_scatter, C_SCATTER, HANDLE, v[P_ARRAY], v[P_OUT], v[P_ROOT])
COMM_METHOD(comm_reduce_scatter, C_REDUCE_SCATTER, HANDLE, v[P_ARRAY], v[P_OUT], v[P_OP], v[P_COUNTS])
COMM_METHOD(comm_gatherv, C_GATHERV, HANDLE, v[P_ARRAY], v[P_COUNTS], v[P_DISPLS], v[P_ROOT], v[P_OUT])
COMM_METHOD(comm_scatterv, C_SCATTERV, HANDLE, v[P_ARRAY], v[P_COUNTS], v[P_DISPLS], v[P_ROOT], v[P_OUT])
COMM_METHOD(comm_allgatherv, C_ALLGATHERV, HANDLE, v[P_ARRAY], v[P_COUNTS], v[P_DISPLS], v[P_OUT])
COMM_METHOD(comm_alltoallv, C_ALLTOALLV, HANDLE, v[P_ARRAY], v[P_SENDCOUNTS], v[P_SDISPLS], v[P_RECVCOUNTS],
            v[P_RDISPLS], v[P_OUT])
COMM_METHOD(comm_scan, C_SCAN, HANDLE, v[P_ARRAY], v[P_OUT], v[P_OP], Py_False)
COMM_METHOD(comm_exscan, C_EXSCAN, HANDLE, v[P_ARRAY], v[P_OUT], v[P_OP], Py_True)
#undef HANDLE
#undef FAST_WINS
#undef ALL_WINS

/* bind_comm(api, heard_of, run_queued): the general functions of
 * NativeComm's methods, the attributes of their names (shmtopo.coll.api),
 * heard_of(comm, exc) (shmtopo.agreement) and run_queued(address)
 * (shmtopo.coll.nonblocking) */
static PyObject *bind_comm(PyObject *self, PyObject *args)
{
    PyObject *general, *heard_of, *run_queued;
    if (!PyArg_ParseTuple(args, "OOO:bind_comm", &general, &heard_of, &run_queued))
        return NULL;
    if (!PyCallable_Check(heard_of) || !PyCallable_Check(run_queued))
        return PyErr_Format(PyExc_TypeError, "bind_comm: heard_of and run_queued must be callable"), NULL;
    for (int i = 0; i < NC; i++) {
        PyObject *f = PyObject_GetAttrString(general, comm_calls[i].name);
        if (!f || !PyCallable_Check(f)) {
            Py_XDECREF(f);
            return PyErr_Format(PyExc_TypeError, "bind_comm: no function for %s", comm_calls[i].name), NULL;
        }
        Py_XSETREF(cm.general[i], f);
    }
    Py_INCREF(heard_of);
    Py_XSETREF(cm.heard_of, heard_of);
    Py_INCREF(run_queued);
    Py_XSETREF(cm.run_queued, run_queued);
    Py_RETURN_NONE;
}

/* claim(comm, win), unclaim(comm, win): the general path's calls hold the
 * comm and the window (either address may be 0) as the fast entries do, and
 * take them here, with the GIL, for the reason given at CORE_CALL. A comm
 * whose queue of nonblocking calls holds it (EINPROGRESS) runs them first,
 * as the fast entries do (run_queue_instead): MPI orders this call after
 * them. */
static PyObject *claim(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2)
        return PyErr_Format(PyExc_TypeError, "claim takes 2 arguments"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    while (shmtopo_call_begin(comm, (shmtopo_win_t *)comm_of(args[1]), NULL) < 0) {
        const int err = errno;
        if (err == EINPROGRESS) /* as CORE_CALL notes it for the fast entries */
            queued_comm = comm;
        failed(NULL, err);
        if (!run_queue_instead(args[0]))
            return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *unclaim(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2)
        return PyErr_Format(PyExc_TypeError, "unclaim takes 2 arguments"), NULL;
    shmtopo_call_end(comm_of(args[0]), (shmtopo_win_t *)comm_of(args[1]));
    Py_RETURN_NONE;
}

static int comm_traverse(PyObject *self, visitproc visit, void *arg)
{
    NativeComm *c = (NativeComm *)self;
    Py_VISIT(c->fast_handle);
    Py_VISIT(c->fast_windows);
    Py_VISIT(c->span_handle);
    Py_VISIT(c->windows);
    return 0;
}

static int comm_clear(PyObject *self)
{
    NativeComm *c = (NativeComm *)self;
    Py_CLEAR(c->fast_handle);
    Py_CLEAR(c->fast_windows);
    Py_CLEAR(c->span_handle);
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
    COMM_ENTRY("reduce_scatter", comm_reduce_scatter,
               "reduce_scatter(array, op='sum', *, counts=None, out=None)\n--\n\n"
               "Collective: rank r gets the reduction of everybody's block r (see shmtopo.coll.api.reduce_scatter)."),
    COMM_ENTRY("gatherv", comm_gatherv,
               "gatherv(array, counts=None, displs=None, root=0, *, out=None)\n--\n\n"
               "Collective: rank r's counts[r] elements land at displs[r] of the root's out "
               "(see shmtopo.coll.api.gatherv)."),
    COMM_ENTRY("scatterv", comm_scatterv,
               "scatterv(array, counts=None, displs=None, root=0, *, out=None)\n--\n\n"
               "Collective: rank r gets counts[r] elements of the root's array from displs[r] "
               "(see shmtopo.coll.api.scatterv)."),
    COMM_ENTRY("allgatherv", comm_allgatherv,
               "allgatherv(array, counts, displs=None, *, out=None)\n--\n\n"
               "Collective: every rank's counts[r] elements land at displs[r] of every rank's out "
               "(see shmtopo.coll.api.allgatherv)."),
    COMM_ENTRY("alltoallv", comm_alltoallv,
               "alltoallv(array, sendcounts, sdispls, recvcounts, rdispls, *, out=None)\n--\n\n"
               "Collective: rank r sends sendcounts[p] elements from sdispls[p] to rank p "
               "(see shmtopo.coll.api.alltoallv)."),
    COMM_ENTRY("scan", comm_scan,
               "scan(array, op='sum', *, out=None)\n--\n\n"
               "Collective: on rank r, the reduction of ranks 0..r's arrays (see shmtopo.coll.api.scan)."),
    COMM_ENTRY("exscan", comm_exscan,
               "exscan(array, op='sum', *, out=None)\n--\n\n"
               "Collective: on rank r, the reduction of ranks 0..r-1's arrays (see shmtopo.coll.api.exscan)."),
    {NULL, NULL, 0, NULL},
};

static PyMemberDef comm_members[] = {
    {"fast_handle", T_OBJECT, offsetof(NativeComm, fast_handle), 0,
     "the native comm as an int for the fast entries (0: not to be taken: freed, or spanning nodes)"},
    {"fast_windows", T_OBJECT, offsetof(NativeComm, fast_windows), 0,
     "the windows the fast entries may find large arrays in; None while the levels may take large calls"},
    {"windows", T_OBJECT, offsetof(NativeComm, windows), 0, "the comm's open windows, in creation order"},
    {"span_handle", T_OBJECT, offsetof(NativeComm, span_handle), 0,
     "the native comm as an int where its collectives span nodes (0 otherwise): small allreduces, reduces, bcasts "
     "and barriers then run whole in C"},
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
