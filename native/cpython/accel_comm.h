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

enum { A_BARRIER, A_BCAST, A_REDUCE, A_ALLREDUCE, A_ALLGATHER, A_ALLTOALL, A_REDUCE_SCATTER_BLOCK, A_GATHER,
       A_SCATTER, A_GATHERV, A_SCATTERV, A_ALLGATHERV, A_ALLTOALLV, A_REDUCE_SCATTER, A_SCAN, A_EXSCAN, NA };

enum { NO_WINDOWS, FAST_WINDOWS, ALL_WINDOWS }; /* which window list follows the handle */

typedef struct {
    const char *name;
    PyObject *(*entry)(PyObject *, PyObject *const *, Py_ssize_t);
    int windows;             /* NO_WINDOWS, FAST_WINDOWS (fast_windows) or ALL_WINDOWS (windows) */
    int nparams, required;   /* mpi4py's parameters, in order, the first `required` without a default */
    signed char params[4];   /* P_*: op defaults to the drop-in's SUM_DEFAULT, root to 0, recvcounts to None */
    int exclusive;           /* -1, or the entry's trailing flag (scan: 0, exscan: 1) */
    int kind;                /* SHMTOPO_KIND_*: the call's agreement */
} accel_call_t;

static PyObject *accel_barrier_entry(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return accel_barrier(self, args[0]);
}

#define SR P_SENDBUF, P_RECVBUF
static const accel_call_t accel_calls[NA] = {
    [A_BARRIER] = {"Barrier", accel_barrier_entry, NO_WINDOWS, 0, 0, {0}, -1, SHMTOPO_KIND_BARRIER},
    [A_BCAST] = {"Bcast", accel_bcast, FAST_WINDOWS, 2, 1, {P_BUF, P_ROOT}, -1, SHMTOPO_KIND_BCAST},
    [A_REDUCE] = {"Reduce", accel_reduce, FAST_WINDOWS, 4, 2, {SR, P_OP, P_ROOT}, -1, SHMTOPO_KIND_REDUCE},
    [A_ALLREDUCE] = {"Allreduce", accel_allreduce, FAST_WINDOWS, 3, 2, {SR, P_OP}, -1, SHMTOPO_KIND_ALLREDUCE},
    [A_ALLGATHER] = {"Allgather", accel_allgather, ALL_WINDOWS, 2, 2, {SR}, -1, SHMTOPO_KIND_ALLGATHER},
    [A_ALLTOALL] = {"Alltoall", accel_alltoall, NO_WINDOWS, 2, 2, {SR}, -1, SHMTOPO_KIND_ALLTOALL},
    [A_REDUCE_SCATTER_BLOCK] = {"Reduce_scatter_block", accel_reduce_scatter_block, NO_WINDOWS, 3, 2, {SR, P_OP}, -1,
                                SHMTOPO_KIND_REDUCE_SCATTER},
    [A_GATHER] = {"Gather", accel_gather, NO_WINDOWS, 3, 2, {SR, P_ROOT}, -1, SHMTOPO_KIND_GATHER},
    [A_SCATTER] = {"Scatter", accel_scatter, NO_WINDOWS, 3, 2, {SR, P_ROOT}, -1, SHMTOPO_KIND_SCATTER},
    [A_GATHERV] = {"Gatherv", accel_gatherv, NO_WINDOWS, 3, 2, {SR, P_ROOT}, -1, SHMTOPO_KIND_GATHERV},
    [A_SCATTERV] = {"Scatterv", accel_scatterv, NO_WINDOWS, 3, 2, {SR, P_ROOT}, -1, SHMTOPO_KIND_SCATTERV},
    [A_ALLGATHERV] = {"Allgatherv", accel_allgatherv, NO_WINDOWS, 2, 2, {SR}, -1, SHMTOPO_KIND_ALLGATHERV},
    [A_ALLTOALLV] = {"Alltoallv", accel_alltoallv, NO_WINDOWS, 2, 2, {SR}, -1, SHMTOPO_KIND_ALLTOALLV},
    [A_REDUCE_SCATTER] = {"Reduce_scatter", accel_reduce_scatter, NO_WINDOWS, 4, 2, {SR, P_RECVCOUNTS, P_OP}, -1,
                          SHMTOPO_KIND_REDUCE_SCATTER},
    [A_SCAN] = {"Scan", accel_scan, NO_WINDOWS, 3, 2, {SR, P_OP}, 0, SHMTOPO_KIND_SCAN},
    [A_EXSCAN] = {"Exscan", accel_scan, NO_WINDOWS, 3, 2, {SR, P_OP}, 1, SHMTOPO_KIND_EXSCAN},
};
#undef SR

typedef struct {
    PyObject_HEAD
    unsigned long long counts[NA];    /* the calls CommFast's methods ran in shared memory, by call */
    unsigned long long delegated[NA]; /* ... and handed to MPI at once (accel_mpi_only), by call */
} CallCounts;
static PyTypeObject CallCountsType;

#define UNMOVED_DESCRS 4
#define DERIVED_TYPES 16

static struct {
    PyObject *general[NA];  /* AcceleratedComm's Python methods, by call */
    PyObject *to_mpi[NA];   /* by call: MPI's method on the caller's arguments, counted as handed to MPI */
    PyObject *delegated;    /* the exception of an agreement whose verdict is "every rank hands it to MPI" */
    PyObject *sum_default;  /* the op parameters' default (the drop-in's SUM_DEFAULT) */
    slot_t shm;             /* "_shm" */
    slot_t counts;          /* "_fast_counts" */
    slot_t stats;           /* "_stats" */
    slot_t strict;          /* "_strict" */
    /* what every rank hands to MPI by MPI's own rules (plans.mpi_only), bound by bind_mpi_only */
    PyObject *mpi[NA];      /* by call: mpi4py's own method (of MPI.Intracomm) */
    PyObject *unmoved;      /* the predefined Datatypes shmtopo never moves (long double...), by identity */
    PyObject *unmoved_formats; /* {format: True} of the buffers mpi4py types as one of those */
    PyObject *op_class;     /* MPI.Op */
    PyObject *is_predefined; /* "is_predefined" */
    PyObject *unmoved_descrs[UNMOVED_DESCRS]; /* numpy dtypes whose arrays mpi4py types as one of those */
    PyObject *derived[DERIVED_TYPES]; /* derived Datatypes the planner has handed to MPI (note_derived) */
} af;

/* Whether `spec`, a message MPI reads, holds entries of a predefined type
 * shmtopo never moves (the forms of accel_split, the datatype matched by
 * identity; a buffer alone, by its format): 1, else 0 (not known here:
 * the Python method decides, plans.mpi_only, the same way where this does). */
static int holds_unmoved(PyObject *spec)
{
    PyObject *buf = spec, *datatype = NULL, *count = NULL;
    if (PyList_CheckExact(spec) || PyTuple_CheckExact(spec)) {
        const Py_ssize_t n = PySequence_Fast_GET_SIZE(spec);
        PyObject **item = PySequence_Fast_ITEMS(spec);
        if (n < 2 || n > 4)
            return 0;
        buf = item[0];
        datatype = item[n - 1];
        count = n == 2 ? NULL : item[1];
        if (count && n == 3 && PyTuple_CheckExact(count)) /* (count, displ) */
            count = PyTuple_GET_SIZE(count) == 2 ? PyTuple_GET_ITEM(count, 0) : NULL;
        int unmoved = 0;
        for (Py_ssize_t i = 0; af.unmoved && i < PyTuple_GET_SIZE(af.unmoved) && !unmoved; i++)
            unmoved = PyTuple_GET_ITEM(af.unmoved, i) == datatype;
        if (!unmoved)
            return 0;
        if (count)
            return PyLong_CheckExact(count) && index_of(count) > 0;
    }
    if (!accel_data(buf))
        return 0;
    /* an ndarray alone of a dtype found unmoved before (numpy's are singletons): its fields say */
    const int array = !datatype && fields_checked > 0 && Py_TYPE(buf) == (PyTypeObject *)bound.ndarray;
    if (array) {
        const ArrayFields *a = (const ArrayFields *)buf;
        for (int i = 0; i < UNMOVED_DESCRS; i++)
            if (af.unmoved_descrs[i] == a->descr) {
                Py_ssize_t n = 1;
                for (int d = 0; d < a->nd; d++)
                    n *= a->dimensions[d];
                return n > 0;
            }
    }
    Py_buffer view;
    if (PyObject_GetBuffer(buf, &view, datatype ? PyBUF_SIMPLE : PyBUF_FORMAT | PyBUF_ND) < 0) {
        PyErr_Clear();
        return 0;
    }
    int unmoved = view.len > 0;
    if (unmoved && !datatype) {
        PyObject *key = PyUnicode_FromString(view.format ? view.format : "B");
        unmoved = key && af.unmoved_formats && PyDict_GetItemWithError(af.unmoved_formats, key);
        Py_XDECREF(key);
        PyErr_Clear();
        if (unmoved && array) { /* kept, with a reference, so that the address stays its */
            static int next;
            Py_XSETREF(af.unmoved_descrs[next], new_ref(((const ArrayFields *)buf)->descr));
            next = (next + 1) % UNMOVED_DESCRS;
        }
    }
    PyBuffer_Release(&view);
    return unmoved;
}

/* plans.mpi_only for the plain forms: 1 where every rank hands the call to
 * MPI by MPI's own rules (a user-defined op; a message MPI reads on every
 * rank that holds a type shmtopo never moves, for the calls whose counts are
 * the same everywhere), 0 where this cannot tell. `v`: the call's parameters. */
static int accel_mpi_only(int call, PyObject *const *v)
{
    PyObject *op = v[P_OP];
    if (op && op != af.sum_default && af.op_class && PyObject_TypeCheck(op, (PyTypeObject *)af.op_class)) {
        int known = 0;
        for (Py_ssize_t i = 0; accel.ops && i < PyTuple_GET_SIZE(accel.ops) && !known; i++)
            known = PyTuple_GET_ITEM(PyTuple_GET_ITEM(accel.ops, i), 0) == op;
        if (!known) {
            PyObject *predefined = PyObject_GetAttr(op, af.is_predefined);
            const int user = predefined == Py_False;
            Py_XDECREF(predefined);
            PyErr_Clear();
            if (user)
                return 1;
        }
    }
    switch (call) {
    case A_GATHERV: case A_SCATTERV: case A_ALLGATHERV: case A_ALLTOALLV: case A_REDUCE_SCATTER:
        return 0; /* counts may be 0 on some ranks */
    case A_BARRIER:
        return 0;
    case A_BCAST:
        return holds_unmoved(v[P_BUF]);
    case A_SCATTER:
        return holds_unmoved(accel_in_place(v[P_RECVBUF]) ? v[P_SENDBUF] : v[P_RECVBUF]);
    default:
        return holds_unmoved(accel_in_place(v[P_SENDBUF]) ? v[P_RECVBUF] : v[P_SENDBUF]);
    }
}

/* ---- derived datatypes: handed to MPI after one agreement, from C -------
 *
 * A derived datatype on one rank and plain arrays on another is legal MPI
 * (the type signatures match), so a call of one is handed to MPI only after
 * an agreement that every rank does (plans.py's planner, the owner of that
 * decision: LeftToMPI). The planner notes each derived type it has handed
 * over (plans.unmoved_in, through note_derived); a call whose messages are
 * [buf, count, datatype] of such a type, in the forms and on the buffers the
 * planner reads before it hands the call over (a count >= 0, a buffer it may
 * write where it writes), is agreed and handed over here, without the
 * planner's Python: the same decision, its cost that of MPI's call and one
 * meeting. Anything else goes to the planner (test_plans.py checks both
 * decide alike). */

/* note_derived(datatype): the planner hands messages of this derived type to MPI. */
static PyObject *note_derived(PyObject *self, PyObject *datatype)
{
    static int next;
    for (int i = 0; i < DERIVED_TYPES; i++)
        if (af.derived[i] == datatype)
            Py_RETURN_NONE;
    Py_XSETREF(af.derived[next], new_ref(datatype));
    next = (next + 1) % DERIVED_TYPES;
    Py_RETURN_NONE;
}

/* The datatype of `spec` when it is [buf, count, datatype] of a noted derived
 * type (not freed since), a count >= 0, on a C-contiguous buffer (writable
 * where `writable`), and its count in *count; else NULL. */
static PyObject *derived_message(PyObject *spec, int writable, Py_ssize_t *count)
{
    if (!(PyList_CheckExact(spec) || PyTuple_CheckExact(spec)) || PySequence_Fast_GET_SIZE(spec) != 3)
        return NULL;
    PyObject **item = PySequence_Fast_ITEMS(spec);
    int noted = 0;
    for (int i = 0; i < DERIVED_TYPES && !noted; i++)
        noted = af.derived[i] == item[2];
    if (!noted || (*count = index_of(item[1])) < 0)
        return NULL;
    const int live = PyObject_IsTrue(item[2]); /* MPI.DATATYPE_NULL once freed */
    if (live <= 0) {
        PyErr_Clear();
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(item[0], &view, writable ? PyBUF_WRITABLE : PyBUF_SIMPLE) < 0) {
        PyErr_Clear();
        return NULL;
    }
    PyBuffer_Release(&view);
    return item[2];
}

/* A reduction's result side, as the planner reads it (plans._reduction on
 * a receiving rank): recvbuf derived, sendbuf IN_PLACE or of the same type
 * and count. */
static int derived_reduction(PyObject *const *v)
{
    Py_ssize_t n, m;
    PyObject *type = derived_message(v[P_RECVBUF], 1, &n);
    return type && (accel_in_place(v[P_SENDBUF]) || (derived_message(v[P_SENDBUF], 0, &m) == type && m == n));
}

/* The signature's extra for the op of a delegated reduction (as
 * AcceleratedComm._op_word gives it): 1 + the core's op; -1 for an op this
 * does not know (the planner decides). */
static long long derived_op_word(PyObject *op)
{
    const int opc = accel_op_code(op);
    return opc < 0 ? -1 : 1 + opc;
}

/* Whether this rank's call is one the planner hands to MPI for a derived
 * type (see above); its delegated signature in *sig. */
static int derived_call(int call, PyObject *const *v, shmtopo_comm_t *comm, shmtopo_sig_t *sig)
{
    Py_ssize_t n;
    if (!comm)
        return 0;
    const int rank = shmtopo_comm_rank(comm);
    int root = -1, ok;
    long long op = 0;
    if (call == A_BCAST || call == A_REDUCE || call == A_GATHER || call == A_SCATTER)
        if ((root = root_in(v[P_ROOT], comm)) < 0)
            return 0;
    if (call == A_REDUCE || call == A_ALLREDUCE || call == A_SCAN || call == A_EXSCAN)
        if ((op = derived_op_word(v[P_OP])) < 0)
            return 0;
    switch (call) {
    case A_BCAST:
        ok = !accel_in_place(v[P_BUF]) && derived_message(v[P_BUF], rank != root, &n);
        break;
    case A_REDUCE:
        ok = rank == root ? derived_reduction(v)
                          : !accel_in_place(v[P_SENDBUF]) && derived_message(v[P_SENDBUF], 0, &n);
        break;
    case A_ALLREDUCE: case A_SCAN: case A_EXSCAN:
        ok = derived_reduction(v);
        break;
    case A_ALLGATHER: case A_ALLTOALL: /* the planner reads recvbuf first */
        ok = derived_message(v[P_RECVBUF], 1, &n) != NULL;
        break;
    case A_GATHER:
        ok = derived_message(rank == root ? v[P_RECVBUF] : v[P_SENDBUF], rank == root, &n) != NULL;
        break;
    case A_SCATTER:
        ok = derived_message(rank == root ? v[P_SENDBUF] : v[P_RECVBUF], rank != root, &n) != NULL;
        break;
    default:
        ok = 0;
    }
    *sig = (shmtopo_sig_t){.kind = accel_calls[call].kind, .dtype = -1, .op = -1, .root = root, .alg = -1,
                           .flags = SHMTOPO_SIG_DELEGATED, .extra = (uint64_t)op};
    return ok;
}

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
        e[n++] = nc->fast_handle ? nc->fast_handle : cm.zero;
        if (c->windows != NO_WINDOWS)
            e[n++] = or_none(c->windows == FAST_WINDOWS ? nc->fast_windows : nc->windows);
        for (int i = 0; i < c->nparams; i++)
            e[n++] = v[c->params[i]];
        if (c->exclusive >= 0)
            e[n++] = c->exclusive ? Py_True : Py_False;
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
            return r; /* or NULL: the collective failed */
        }
        Py_DECREF(r);
        PyObject *strict = slot_value(self, &af.strict);
        if (strict == Py_False && af.mpi[call] && accel_mpi_only(call, v)) {
            /* every rank knows it from its own arguments: MPI's call, at once */
            PyObject *done = call_general(af.mpi[call], "bind_mpi_only", self, args, nargs, kwnames);
            if (done && ++((CallCounts *)counts)->delegated[call] == 1 && first_count(self, c->name) < 0)
                Py_CLEAR(done);
            return done;
        }
        shmtopo_sig_t sig;
        shmtopo_comm_t *comm = nc->fast_handle ? comm_of(nc->fast_handle) : NULL;
        if (strict == Py_False && af.mpi[call] && derived_call(call, v, comm, &sig)) {
            /* every rank hands it over: agreed (0), or others would have run it here (EDELEGATED) */
            if (shmtopo_agree_call(comm, &sig) < 0 && errno != SHMTOPO_EDELEGATED)
                return accel_done(-1, errno);
            PyObject *done = call_general(af.mpi[call], "bind_mpi_only", self, args, nargs, kwnames);
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

/* bind_mpi_only(unmoved, unmoved_formats, op_class, mpi_class): what
 * accel_mpi_only decides by (the predefined Datatypes and buffer formats
 * shmtopo never moves, MPI.Op), and the class whose methods it then calls
 * (MPI.Intracomm: mpi4py's own collectives). */
static PyObject *bind_mpi_only(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyTuple_Check(args[0]) || !PyDict_Check(args[1]) || !PyType_Check(args[2]))
        return PyErr_Format(PyExc_TypeError, "bind_mpi_only(unmoved: tuple, formats: dict, op_class, mpi_class)"),
               NULL;
    PyObject *methods[NA];
    for (int i = 0; i < NA; i++)
        if (!(methods[i] = PyObject_GetAttrString(args[3], accel_calls[i].name))) {
            for (int j = 0; j < i; j++)
                Py_DECREF(methods[j]);
            return NULL;
        }
    for (int i = 0; i < NA; i++)
        Py_XSETREF(af.mpi[i], methods[i]);
    Py_XSETREF(af.unmoved, new_ref(args[0]));
    Py_XSETREF(af.unmoved_formats, new_ref(args[1]));
    Py_XSETREF(af.op_class, new_ref(args[2]));
    if (!af.is_predefined && !(af.is_predefined = PyUnicode_InternFromString("is_predefined")))
        return NULL;
    Py_RETURN_NONE;
}
