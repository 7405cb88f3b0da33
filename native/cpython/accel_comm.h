/* native/cpython/accel_comm.h: part of shmtopo._fastpath, included once by
 * fastpath.c in its place (one translation unit).
 *
 * CommFast: an accelerated comm's upper-case calls (shmtopo.accel.comm). */

/* ---- accelerated comms: the plain upper-case calls ----------------------
 *
 * shmtopo.accelerate(comm) returns an instance of a class whose first base
 * is CommFast: its buffer collectives are these C methods, so that a plain
 * call (positional arguments, the shmtopo comm still there) costs one C
 * call and no Python frame. Each runs the drop-in's entry of the same name
 * (accel_*, which decides what is plain, as the planner would) on the comm
 * in the instance's slot `_shm`, and counts the call in its slot
 * `_fast_counts` (a CallCounts; shm_stats adds these counts to the Python
 * methods' own, whose entries keep the order of the first calls). Anything
 * else, and every call the entry declines, goes with the very arguments to
 * the Python method of the same name (bound by bind_comm_fast:
 * AcceleratedComm's), which plans it in full. */

typedef struct {
    PyObject_HEAD
    unsigned long long counts[NA];    /* the calls CommFast's methods ran in shared memory, by call */
    unsigned long long delegated[NA]; /* ... and handed to MPI at once (accel_mpi_only), by call */
} CallCounts;
static PyTypeObject CallCountsType;

static struct {
    PyObject *general[NA];  /* AcceleratedComm's Python methods, by call */
    PyObject *to_mpi[NA];   /* by call: MPI's method on the caller's arguments, counted as handed to MPI */
    PyObject *delegated;    /* the exception of an agreement whose verdict is "every rank hands it to MPI" */
    PyObject *sum_default;  /* the op parameters' default (the drop-in's SUM_DEFAULT) */
    slot_t shm;             /* "_shm" */
    slot_t counts;          /* "_fast_counts" */
    slot_t stats;           /* "_stats" */
    slot_t strict;          /* "_strict" */
} af;

static PyObject *accel_general(int call, PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames)
{
    return call_general(af.general[call], "bind_comm_fast", self, args, nargs, kwnames);
}

/* The first count of a call: its entry in the Python stats (slot `_stats`)
 * takes its place among the calls made so far, as a count there does, so
 * that shm_stats keeps the order of the first calls. */
static int first_count(PyObject *self, const char *name)
{
    PyObject *stats = slot_value(self, &af.stats);
    if (!stats || !PyDict_Check(stats) || PyDict_GetItemString(stats, name))
        return 0;
    PyObject *counts = Py_BuildValue("[ii]", 0, 0);
    const int rc = counts ? PyDict_SetItemString(stats, name, counts) : -1;
    Py_XDECREF(counts);
    return rc;
}

/* MPI's method on the caller's arguments, at once, counted as handed to MPI. */
static PyObject *to_mpi_now(int call, PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                            PyObject *counts)
{
    PyObject *done = call_general(tm.mpi[call], "bind_mpi_only", self, args, nargs, kwnames);
    if (done && ++((CallCounts *)counts)->delegated[call] == 1 && first_count(self, accel_calls[call].name) < 0)
        Py_CLEAR(done);
    return done;
}

static PyObject *accel_method(int call, PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                              PyObject *kwnames)
{
    const accel_call_t *c = &accel_calls[call];
    PyObject *v[NP] = {NULL};
    v[P_OP] = af.sum_default, v[P_ROOT] = cm.zero, v[P_RECVCOUNTS] = Py_None;
    int plain = bind_args(args, nargs, kwnames, c->params, c->nparams, c->nparams, v);
    for (int i = 0; plain && i < c->required; i++)
        plain = v[c->params[i]] != NULL;
    PyObject *shm = plain ? slot_value(self, &af.shm) : NULL;
    PyObject *counts = shm ? slot_value(self, &af.counts) : NULL;
    if (counts && Py_IS_TYPE(counts, &CallCountsType) && PyObject_TypeCheck(shm, &NativeCommType)) {
        NativeComm *nc = (NativeComm *)shm;
        PyObject *e[8];
        int n = 0;
        PyObject *handle = entry_handle(nc, c->spans);
        e[n++] = handle ? handle : cm.zero;
        if (c->windows != NO_WINDOWS) /* none across nodes: the entries there take private arrays */
            e[n++] = handle != nc->fast_handle ? Py_None
                     : or_none(c->windows == FAST_WINDOWS ? nc->fast_windows : nc->windows);
        for (int i = 0; i < c->nparams; i++)
            e[n++] = v[c->params[i]];
        if (c->exclusive >= 0)
            e[n++] = c->exclusive ? Py_True : Py_False;
        if (v[P_OP] && tm.mpi[call] && seen_user_op(v[P_OP]) && slot_value(self, &af.strict) == Py_False)
            return to_mpi_now(call, self, args, nargs, kwnames, counts); /* as below, without reading the buffers */
        PyObject *r = c->entry(NULL, e, n);
        if (!r && af.delegated && PyErr_ExceptionMatches(af.delegated)) {
            /* another rank's arguments are MPI's alone: every rank hands the
             * call to MPI, this one with its very arguments */
            PyErr_Clear();
            return call_general(af.to_mpi[call], "bind_comm_fast", self, args, nargs, kwnames);
        }
        if (r != Py_None) {
            if (r == Py_True) { /* done */
                Py_SETREF(r, new_ref(Py_None));
                if (++((CallCounts *)counts)->counts[call] == 1 && first_count(self, c->name) < 0)
                    Py_CLEAR(r);
            }
            if (!r && handle && handle != nc->fast_handle)
                return told_across(shm);
            return r; /* or NULL: the collective failed */
        }
        Py_DECREF(r);
        PyObject *strict = slot_value(self, &af.strict);
        if (strict == Py_False && tm.mpi[call] && accel_mpi_only(call, v))
            return to_mpi_now(call, self, args, nargs, kwnames, counts); /* every rank knows it: MPI's, at once */
        shmtopo_sig_t sig;
        PyObject *agreeing = entry_handle(nc, 1); /* an agreement spans nodes as well */
        shmtopo_comm_t *comm = agreeing ? comm_of(agreeing) : NULL;
        if (strict == Py_False && tm.mpi[call] && derived_call(call, v, comm, &sig)) {
            /* every rank hands it over: agreed (0), or others would have run it here (EDELEGATED) */
            if (shmtopo_agree_call(comm, &sig) < 0 && errno != SHMTOPO_EDELEGATED) {
                PyObject *failure = accel_done(-1, errno);
                return agreeing == nc->fast_handle ? failure : told_across(shm);
            }
            /* sig.root: a rooted call's root as derived_call read it (-1 for the others) */
            PyObject *done = direct_call(call, self, v, sig.root == shmtopo_comm_job_rank(comm));
            if (done == Py_NotImplemented) {
                Py_DECREF(done);
                done = call_general(tm.mpi[call], "bind_mpi_only", self, args, nargs, kwnames);
            }
            if (done && ++((CallCounts *)counts)->delegated[call] == 1 && first_count(self, c->name) < 0)
                Py_CLEAR(done);
            return done;
        }
    }
    return accel_general(call, self, args, nargs, kwnames);
}

#define ACCEL_METHOD(fn, call)                                                                   \
    static PyObject *fn(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) \
    {                                                                                            \
        return accel_method(call, self, args, nargs, kwnames);                                   \
    }
ACCEL_METHOD(acomm_barrier, A_BARRIER)
ACCEL_METHOD(acomm_bcast, A_BCAST)
ACCEL_METHOD(acomm_reduce, A_REDUCE)
ACCEL_METHOD(acomm_allreduce, A_ALLREDUCE)
ACCEL_METHOD(acomm_allgather, A_ALLGATHER)
ACCEL_METHOD(acomm_alltoall, A_ALLTOALL)
ACCEL_METHOD(acomm_reduce_scatter_block, A_REDUCE_SCATTER_BLOCK)
ACCEL_METHOD(acomm_gather, A_GATHER)
ACCEL_METHOD(acomm_scatter, A_SCATTER)
ACCEL_METHOD(acomm_gatherv, A_GATHERV)
ACCEL_METHOD(acomm_scatterv, A_SCATTERV)
ACCEL_METHOD(acomm_allgatherv, A_ALLGATHERV)
ACCEL_METHOD(acomm_alltoallv, A_ALLTOALLV)
ACCEL_METHOD(acomm_reduce_scatter, A_REDUCE_SCATTER)
ACCEL_METHOD(acomm_scan, A_SCAN)
ACCEL_METHOD(acomm_exscan, A_EXSCAN)
ACCEL_METHOD(acomm_alltoallw, A_ALLTOALLW)

#define ACOMM_ENTRY(name, fn) \
    {name, (PyCFunction)(void (*)(void))fn, METH_FASTCALL | METH_KEYWORDS, "Collective: as mpi4py's " name "."}

static PyMethodDef commfast_methods[] = {
    ACOMM_ENTRY("Barrier", acomm_barrier),
    ACOMM_ENTRY("Bcast", acomm_bcast),
    ACOMM_ENTRY("Reduce", acomm_reduce),
    ACOMM_ENTRY("Allreduce", acomm_allreduce),
    ACOMM_ENTRY("Allgather", acomm_allgather),
    ACOMM_ENTRY("Alltoall", acomm_alltoall),
    ACOMM_ENTRY("Reduce_scatter_block", acomm_reduce_scatter_block),
    ACOMM_ENTRY("Gather", acomm_gather),
    ACOMM_ENTRY("Scatter", acomm_scatter),
    ACOMM_ENTRY("Gatherv", acomm_gatherv),
    ACOMM_ENTRY("Scatterv", acomm_scatterv),
    ACOMM_ENTRY("Allgatherv", acomm_allgatherv),
    ACOMM_ENTRY("Alltoallv", acomm_alltoallv),
    ACOMM_ENTRY("Reduce_scatter", acomm_reduce_scatter),
    ACOMM_ENTRY("Scan", acomm_scan),
    ACOMM_ENTRY("Exscan", acomm_exscan),
    ACOMM_ENTRY("Alltoallw", acomm_alltoallw),
    {NULL, NULL, 0, NULL},
};

static PyTypeObject CommFastType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "shmtopo._fastpath.CommFast",
    .tp_basicsize = sizeof(PyObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "The plain buffer collectives of an accelerated comm, in C (internal; a base adding no fields).",
    .tp_methods = commfast_methods,
};

/* count_of(name): the calls of that name CommFast's methods ran */
static PyObject *call_counts_count_of(PyObject *self, PyObject *name)
{
    for (int i = 0; i < NA; i++)
        if (PyUnicode_Check(name) && PyUnicode_CompareWithASCIIString(name, accel_calls[i].name) == 0)
            return PyLong_FromUnsignedLongLong(((CallCounts *)self)->counts[i]);
    return PyLong_FromLong(0);
}

/* delegated_of(name): the calls of that name CommFast's methods handed to MPI at once */
static PyObject *call_counts_delegated_of(PyObject *self, PyObject *name)
{
    for (int i = 0; i < NA; i++)
        if (PyUnicode_Check(name) && PyUnicode_CompareWithASCIIString(name, accel_calls[i].name) == 0)
            return PyLong_FromUnsignedLongLong(((CallCounts *)self)->delegated[i]);
    return PyLong_FromLong(0);
}

static PyMethodDef call_counts_methods[] = {
    {"count_of", call_counts_count_of, METH_O, "count_of(name) -> the calls of that name run in C"},
    {"delegated_of", call_counts_delegated_of, METH_O,
     "delegated_of(name) -> the calls of that name handed to MPI from C"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject CallCountsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "shmtopo._fastpath.CallCounts",
    .tp_basicsize = sizeof(CallCounts),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An accelerated comm's counts of the calls CommFast's methods ran (internal).",
    .tp_methods = call_counts_methods,
    .tp_new = PyType_GenericNew,
};

/* bind_comm_fast({"Barrier": f, ...}, sum_default, {"Barrier": to_mpi, ...},
 * delegated): AcceleratedComm's methods, the general path of CommFast's;
 * the op parameters' default; by call, what hands the caller's arguments
 * to MPI, and the exception that says every rank does */
static PyObject *bind_comm_fast(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyDict_Check(args[0]) || !PyDict_Check(args[2]))
        return PyErr_Format(PyExc_TypeError, "bind_comm_fast(general: dict, sum_default, to_mpi: dict, delegated)"),
               NULL;
    for (int i = 0; i < NA; i++) {
        PyObject *f = PyDict_GetItemString(args[0], accel_calls[i].name);
        PyObject *m = PyDict_GetItemString(args[2], accel_calls[i].name);
        if (!f || !PyCallable_Check(f) || !m || !PyCallable_Check(m))
            return PyErr_Format(PyExc_TypeError, "bind_comm_fast: no method for %s", accel_calls[i].name), NULL;
        Py_XSETREF(af.general[i], new_ref(f));
        Py_XSETREF(af.to_mpi[i], new_ref(m));
    }
    Py_XSETREF(af.sum_default, new_ref(args[1]));
    Py_XSETREF(af.delegated, new_ref(args[3]));
    if (!af.shm.name && !(af.shm.name = PyUnicode_InternFromString("_shm")))
        return NULL;
    if (!af.counts.name && !(af.counts.name = PyUnicode_InternFromString("_fast_counts")))
        return NULL;
    if (!af.stats.name && !(af.stats.name = PyUnicode_InternFromString("_stats")))
        return NULL;
    if (!af.strict.name && !(af.strict.name = PyUnicode_InternFromString("_strict")))
        return NULL;
    Py_RETURN_NONE;
}
