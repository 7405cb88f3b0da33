/* native/cpython/plans_mpi.h: part of shmtopo._fastpath, included once by
 * fastpath.c in its place (one translation unit).
 *
 * The drop-in's decisions to hand a call to MPI (shmtopo.accel.plans:
 * mpi_only, and the derived datatypes unmoved_in notes), for CommFast's
 * methods: what MPI's own rules give every rank alike, without an
 * agreement, and the derived-datatype calls handed over after one. */

#define UNMOVED_DESCRS 4
#define DERIVED_TYPES 16
#define USER_OPS 8

/* What every rank hands to MPI by MPI's own rules (plans.mpi_only), bound
 * by bind_mpi_only, and the derived types the planner handed over. */
static struct {
    PyObject *mpi[NA];      /* by call: mpi4py's own method (of MPI.Intracomm) */
    PyObject *unmoved;      /* the predefined Datatypes shmtopo never moves (long double...), by identity */
    PyObject *unmoved_formats; /* {format: True} of the buffers mpi4py types as one of those */
    PyObject *op_class;     /* MPI.Op */
    PyObject *is_predefined; /* "is_predefined" */
    PyObject *unmoved_descrs[UNMOVED_DESCRS]; /* numpy dtypes whose arrays mpi4py types as one of those */
    PyObject *derived[DERIVED_TYPES]; /* derived Datatypes the planner has handed to MPI (note_derived) */
    PyObject *user_ops[USER_OPS];     /* Ops a program made, seen by accel_mpi_only */
    int next_descr, next_derived, next_user_op; /* the rings' next slots */
} tm;

/* Whether `op` is an Op the program made that accel_mpi_only has seen (by
 * identity): its calls go to MPI before anything else is read. */
static int seen_user_op(PyObject *op)
{
    for (int i = 0; i < USER_OPS; i++)
        if (tm.user_ops[i] == op)
            return 1;
    return 0;
}

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
        for (Py_ssize_t i = 0; tm.unmoved && i < PyTuple_GET_SIZE(tm.unmoved) && !unmoved; i++)
            unmoved = PyTuple_GET_ITEM(tm.unmoved, i) == datatype;
        if (!unmoved)
            return 0;
        if (count)
            return PyLong_CheckExact(count) && index_of(count) > 0;
    }
    if (!accel_data(buf))
        return 0;
    /* an ndarray alone of a dtype found unmoved before (numpy's are singletons): its fields say */
    const int array = !datatype && seen.fields_checked > 0 && Py_TYPE(buf) == (PyTypeObject *)bound.ndarray;
    if (array) {
        const ArrayFields *a = (const ArrayFields *)buf;
        for (int i = 0; i < UNMOVED_DESCRS; i++)
            if (tm.unmoved_descrs[i] == a->descr) {
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
        unmoved = key && tm.unmoved_formats && PyDict_GetItemWithError(tm.unmoved_formats, key);
        Py_XDECREF(key);
        PyErr_Clear();
        if (unmoved && array) { /* kept, with a reference, so that the address stays its */
            Py_XSETREF(tm.unmoved_descrs[tm.next_descr], new_ref(((const ArrayFields *)buf)->descr));
            tm.next_descr = (tm.next_descr + 1) % UNMOVED_DESCRS;
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
    if (op && tm.op_class && PyObject_TypeCheck(op, (PyTypeObject *)tm.op_class)) {
        int known = 0;
        for (Py_ssize_t i = 0; accel.ops && i < PyTuple_GET_SIZE(accel.ops) && !known; i++)
            known = PyTuple_GET_ITEM(PyTuple_GET_ITEM(accel.ops, i), 0) == op;
        if (!known) {
            PyObject *predefined = PyObject_GetAttr(op, tm.is_predefined);
            const int user = predefined == Py_False;
            Py_XDECREF(predefined);
            PyErr_Clear();
            if (user) {
                Py_XSETREF(tm.user_ops[tm.next_user_op], new_ref(op));
                tm.next_user_op = (tm.next_user_op + 1) % USER_OPS;
                return 1;
            }
        }
    }
    switch (call) {
    case A_GATHERV: case A_SCATTERV: case A_ALLGATHERV: case A_ALLTOALLV: case A_REDUCE_SCATTER: case A_ALLTOALLW:
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
    for (int i = 0; i < DERIVED_TYPES; i++)
        if (tm.derived[i] == datatype)
            Py_RETURN_NONE;
    Py_XSETREF(tm.derived[tm.next_derived], new_ref(datatype));
    tm.next_derived = (tm.next_derived + 1) % DERIVED_TYPES;
    Py_RETURN_NONE;
}

/* The datatype of `spec` when it is [buf, count, datatype] of a noted derived
 * type (not freed since), a count >= 0, on a C-contiguous buffer (writable
 * where `writable`), and its count in *count; else NULL. With a view, the
 * buffer stays held there (the caller releases it). */
static PyObject *derived_view(PyObject *spec, int writable, Py_ssize_t *count, Py_buffer *view)
{
    if (!(PyList_CheckExact(spec) || PyTuple_CheckExact(spec)) || PySequence_Fast_GET_SIZE(spec) != 3)
        return NULL;
    PyObject **item = PySequence_Fast_ITEMS(spec);
    int noted = 0;
    for (int i = 0; i < DERIVED_TYPES && !noted; i++)
        noted = tm.derived[i] == item[2];
    if (!noted || (*count = index_of(item[1])) < 0)
        return NULL;
    const int live = PyObject_IsTrue(item[2]); /* MPI.DATATYPE_NULL once freed */
    if (live <= 0) {
        PyErr_Clear();
        return NULL;
    }
    Py_buffer mine;
    if (!view)
        view = &mine;
    if (PyObject_GetBuffer(item[0], view, writable ? PyBUF_WRITABLE : PyBUF_SIMPLE) < 0) {
        PyErr_Clear();
        return NULL;
    }
    if (view == &mine)
        PyBuffer_Release(&mine);
    return item[2];
}

static PyObject *derived_message(PyObject *spec, int writable, Py_ssize_t *count)
{
    return derived_view(spec, writable, count, NULL);
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
    const int rank = shmtopo_comm_job_rank(comm); /* roots are job ranks, across nodes too */
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

/* ---- MPI's own call, from C ---------------------------------------------
 *
 * Once every rank has agreed to hand a derived-datatype call over, mpi4py's
 * method would read its arguments again (most of what a plain call costs
 * above MPI's own); this method has read them, so it calls the function of
 * the MPI library mpi4py loaded itself (found by address: _oob.mpi_functions),
 * on the handles mpi4py's C API keeps in the comm and datatype objects,
 * without the GIL, and raises mpi4py's MPI.Exception for an error code, as
 * mpi4py's method does. Bcast and Allgather, in the forms derived_call
 * agrees on (an Allgather's sendbuf a noted derived type too, or IN_PLACE);
 * anything else, a count beyond an int, or a library not found: mpi4py's
 * method. Handles are ints where 4 bytes wide, pointers where 8 (the
 * prototypes of native/mpi_oob.c). */
typedef union mpi_handle {
    int i;
    void *p;
} mpi_handle_t;
typedef int (*bcast_int_fn)(void *, int, int, int, int);
typedef int (*bcast_ptr_fn)(void *, int, void *, int, void *);
typedef int (*allgather_int_fn)(const void *, int, int, void *, int, int, int);
typedef int (*allgather_ptr_fn)(const void *, int, void *, void *, int, void *, void *);
typedef void *(*handle_get_fn)(PyObject *);

static struct {
    void *bcast, *allgather;                /* MPI_Bcast, MPI_Allgather; NULL: mpi4py's methods */
    int handle_size;                        /* 4, or sizeof(void *) */
    handle_get_fn comm_get, datatype_get;   /* mpi4py's PyMPIComm_Get, PyMPIDatatype_Get */
    void *in_place;                         /* MPI_IN_PLACE */
    PyObject *exception;                    /* MPI.Exception */
} md;

static int handle_of(handle_get_fn get, PyObject *obj, mpi_handle_t *h)
{
    const void *at = get(obj); /* where the object keeps its handle */
    if (!at) {
        PyErr_Clear();
        return -1;
    }
    memcpy(md.handle_size == 4 ? (void *)&h->i : (void *)&h->p, at, (size_t)md.handle_size);
    return 0;
}

static PyObject *mpi_failed(int rc)
{
    PyObject *exc = PyObject_CallFunction(md.exception, "i", rc);
    if (exc) {
        PyErr_SetObject(md.exception, exc);
        Py_DECREF(exc);
    }
    return NULL;
}

/* MPI_Bcast of [buf, count, datatype] (root: this rank is it): None, NULL
 * with mpi4py's exception, or NotImplemented (mpi4py's method, then). */
static PyObject *direct_bcast(PyObject *self, PyObject *const *v, int is_root)
{
    Py_buffer view;
    Py_ssize_t count;
    mpi_handle_t comm, type;
    const int root = root_of(v[P_ROOT]);
    PyObject *dt = md.bcast && root >= 0 ? derived_view(v[P_BUF], !is_root, &count, &view) : NULL;
    if (!dt)
        return new_ref(Py_NotImplemented);
    if (count > INT_MAX || handle_of(md.comm_get, self, &comm) < 0 || handle_of(md.datatype_get, dt, &type) < 0) {
        PyBuffer_Release(&view);
        return new_ref(Py_NotImplemented);
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = md.handle_size == 4 ? ((bcast_int_fn)md.bcast)(view.buf, (int)count, type.i, root, comm.i)
                             : ((bcast_ptr_fn)md.bcast)(view.buf, (int)count, type.p, root, comm.p);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return rc ? mpi_failed(rc) : new_ref(Py_None);
}

/* MPI_Allgather of [buf, count, datatype] (or IN_PLACE) into [buf, count, datatype]. */
static PyObject *direct_allgather(PyObject *self, PyObject *const *v)
{
    Py_buffer send = {0}, recv;
    Py_ssize_t scount = 0, rcount;
    mpi_handle_t comm, stype, rtype;
    const int in_place = accel_in_place(v[P_SENDBUF]);
    PyObject *rt = md.allgather ? derived_view(v[P_RECVBUF], 1, &rcount, &recv) : NULL;
    if (!rt)
        return new_ref(Py_NotImplemented);
    PyObject *st = in_place ? rt : derived_view(v[P_SENDBUF], 0, &scount, &send);
    int ok = st && scount <= INT_MAX && rcount <= INT_MAX && handle_of(md.comm_get, self, &comm) == 0 &&
             handle_of(md.datatype_get, st, &stype) == 0 && handle_of(md.datatype_get, rt, &rtype) == 0;
    if (!ok) {
        if (st && !in_place)
            PyBuffer_Release(&send);
        PyBuffer_Release(&recv);
        return new_ref(Py_NotImplemented);
    }
    const void *sbuf = in_place ? md.in_place : send.buf;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = md.handle_size == 4
        ? ((allgather_int_fn)md.allgather)(sbuf, (int)scount, stype.i, recv.buf, (int)rcount, rtype.i, comm.i)
        : ((allgather_ptr_fn)md.allgather)(sbuf, (int)scount, stype.p, recv.buf, (int)rcount, rtype.p, comm.p);
    Py_END_ALLOW_THREADS
    if (!in_place)
        PyBuffer_Release(&send);
    PyBuffer_Release(&recv);
    return rc ? mpi_failed(rc) : new_ref(Py_None);
}

/* The agreed derived-datatype call by MPI's own function where it has one
 * here; NotImplemented elsewhere. */
static PyObject *direct_call(int call, PyObject *self, PyObject *const *v, int is_root)
{
    switch (call) {
    case A_BCAST:
        return direct_bcast(self, v, is_root);
    case A_ALLGATHER:
        return direct_allgather(self, v);
    default:
        return new_ref(Py_NotImplemented);
    }
}

/* bind_mpi_direct(bcast, allgather, handle_size, capi, in_place, exception):
 * the addresses of MPI_Bcast and MPI_Allgather (0: none), the width of a
 * handle, mpi4py's C API (MPI.__pyx_capi__), MPI.IN_PLACE and MPI.Exception. */
static PyObject *bind_mpi_direct(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6 || !PyDict_Check(args[3]))
        return PyErr_Format(PyExc_TypeError, "bind_mpi_direct(bcast, allgather, handle_size, capi, in_place, "
                                             "exception)"), NULL;
    void *get[2] = {NULL, NULL};
    const char *names[2] = {"PyMPIComm_Get", "PyMPIDatatype_Get"};
    for (int i = 0; i < 2; i++) {
        PyObject *capsule = PyDict_GetItemString(args[3], names[i]);
        if (capsule && PyCapsule_CheckExact(capsule))
            get[i] = PyCapsule_GetPointer(capsule, PyCapsule_GetName(capsule));
        if (!get[i]) {
            PyErr_Clear();
            Py_RETURN_NONE; /* no C API: mpi4py's methods */
        }
    }
    const long long size = PyLong_AsLongLong(args[2]);
    void *bcast = PyLong_AsVoidPtr(args[0]), *allgather = PyLong_AsVoidPtr(args[1]),
         *in_place = PyLong_AsVoidPtr(args[4]);
    if (PyErr_Occurred())
        return NULL;
    if (size != 4 && size != (long long)sizeof(void *))
        Py_RETURN_NONE;
    md.bcast = bcast, md.allgather = allgather, md.handle_size = (int)size, md.in_place = in_place;
    md.comm_get = (handle_get_fn)get[0], md.datatype_get = (handle_get_fn)get[1];
    Py_XSETREF(md.exception, new_ref(args[5]));
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
        Py_XSETREF(tm.mpi[i], methods[i]);
    Py_XSETREF(tm.unmoved, new_ref(args[0]));
    Py_XSETREF(tm.unmoved_formats, new_ref(args[1]));
    Py_XSETREF(tm.op_class, new_ref(args[2]));
    if (!tm.is_predefined && !(tm.is_predefined = PyUnicode_InternFromString("is_predefined")))
        return NULL;
    Py_RETURN_NONE;
}
