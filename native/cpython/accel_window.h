/* native/cpython/accel_window.h: part of shmtopo._fastpath, included once by
 * fastpath.c in its place (one translation unit).
 *
 * WinFast: an accelerated window's plain one-sided calls (shmtopo.accel.window). */

/* ---- accelerated windows: the plain one-sided calls -----------------------
 *
 * shmtopo.accelerate(win) returns an instance of a class whose first base is
 * WinFast: Fence, Lock, Unlock, Lock_all, Unlock_all, Flush, Put, Get,
 * Accumulate, Fetch_and_op and Compare_and_swap are these C methods, so that
 * a plain call (numpy arrays of a type the tables name, Python ints for
 * ranks and displacements, no keywords, inside an epoch, within the target's
 * segment) costs one C call and no Python frame. Anything else goes, with
 * the very arguments, to the Python method of the same name (bound by
 * bind_window: AcceleratedWin's), which reads it in full and says what is
 * wrong. Both keep the epochs in the window's RmaState (its slot `_rs`), so
 * that they take the same decisions. */

#define HELD 1u      /* in RmaState.locks: this rank holds a Lock of the target */
#define EXCLUSIVE 2u /* ... an exclusive one */
#define TAKEN 4u     /* ... taken in shared memory (not MODE_NOCHECK) */
#define RMA_CAS (1u << 30) /* in rma.masks: Compare_and_swap takes the type (integer, logical, byte) */

enum { W_FENCE, W_LOCK, W_UNLOCK, W_LOCK_ALL, W_UNLOCK_ALL, W_FLUSH, W_PUT, W_GET, W_ACCUMULATE, W_FETCH_AND_OP,
       W_CAS, NW };
static const char *const wnames[NW] = {"Fence", "Lock", "Unlock", "Lock_all", "Unlock_all", "Flush", "Put", "Get",
                                       "Accumulate", "Fetch_and_op", "Compare_and_swap"};

typedef struct {
    PyObject_HEAD
    PyObject *ctrl;   /* the control Window (a NativeWindow, whose win is NULL once freed), or None */
    unsigned long long counts[NW]; /* the calls these methods ran, by call (the Python ones count theirs) */
    int n;            /* ranks of the window */
    char **bases;     /* each rank's segment, */
    size_t *sizes;    /* its bytes */
    Py_ssize_t *units; /* and its displacement unit */
    unsigned char *locks; /* per target: HELD | EXCLUSIVE | TAKEN */
    int nlocks;
    char fence_open, lock_all, all_taken, fast;
} RmaState;
static PyTypeObject RmaStateType;

/* A slot of a class's instances, by name, and where it was last found. */
typedef struct slot {
    PyObject *name;          /* interned */
    PyTypeObject *type;      /* the type it was found in (a reference) */
    unsigned int version;    /* that type's tp_version_tag then */
    Py_ssize_t offset;       /* in its instances; 0: no object slot */
} slot_t;

static struct {
    PyObject *general[NW]; /* AcceleratedWin's Python methods, by call */
    PyObject *ops;         /* ((op object, code), ...): enum shmtopo_op, REPLACE, NO_OP */
    PyObject *sum;         /* MPI.SUM, the default op */
    unsigned masks[NDTYPES]; /* by core type: ACCEL_MOVES | 1 << op | RMA_CAS */
    long lock_exclusive, lock_shared;
    slot_t state;          /* "_rs" */
} rma;

/* Where `slot` lies in instances of `type`: its member descriptor's offset.
 * The descriptor is the class attribute of that name (a member descriptor
 * read from its class returns itself); looking it up gives the type the
 * version tag that slot_value compares. */
static __attribute__((noinline)) void slot_find(PyTypeObject *type, slot_t *slot)
{
    PyObject *descr = slot->name ? PyObject_GetAttr((PyObject *)type, slot->name) : NULL;
    if (!descr)
        PyErr_Clear();
    Py_ssize_t offset = 0;
    if (descr && Py_IS_TYPE(descr, &PyMemberDescr_Type)) {
        const PyMemberDef *m = ((PyMemberDescrObject *)descr)->d_member;
        if (m->type == T_OBJECT_EX)
            offset = m->offset;
    }
    Py_XDECREF(descr);
    Py_XSETREF(slot->type, (PyTypeObject *)new_ref((PyObject *)type)); /* its address stays its own */
    slot->version = type->tp_version_tag; /* 0: look up every time */
    slot->offset = offset;
}

/* The object in self's slot (__slots__) `slot->name`, borrowed; NULL when
 * there is no such slot or it is empty. The slot is looked up (about 30
 * instructions, on the path of every drop-in and one-sided call) only when
 * self's type is not the one it was found in, or has changed since (its
 * version tag). */
static inline PyObject *slot_value(PyObject *self, slot_t *slot)
{
    PyTypeObject *type = Py_TYPE(self);
    if (type != slot->type || type->tp_version_tag != slot->version || !slot->version)
        slot_find(type, slot);
    return slot->offset ? *(PyObject **)((char *)self + slot->offset) : NULL;
}

/* The window's RmaState, from its slot `_rs`; NULL if it has none. */
static RmaState *state_of(PyObject *self)
{
    PyObject *rs = slot_value(self, &rma.state);
    return rs && Py_IS_TYPE(rs, &RmaStateType) ? (RmaState *)rs : NULL;
}

/* copied_new(cls, *args): the __new__ of the accelerated classes
 * (accel/window.py's copies_state): mpi4py's own __new__ (the class's
 * _mpi_new) makes the object; a copy of an accelerated object
 * (type(obj)(obj), as mpi4py copies a handle) then gets its shmtopo state
 * (the class's _copy_state). In C: mpi4py makes every derived comm
 * through it, and a Python frame here was a tenth of a Dup's time. */
static PyObject *copied_new(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    static PyObject *mpi_new_name, *copy_state_name, *new_name;
    if (nargs < 1 || !PyType_Check(args[0]))
        return PyErr_Format(PyExc_TypeError, "copied_new(cls, *args)"), NULL;
    if ((!mpi_new_name && !(mpi_new_name = PyUnicode_InternFromString("_mpi_new")))
        || (!copy_state_name && !(copy_state_name = PyUnicode_InternFromString("_copy_state")))
        || (!new_name && !(new_name = PyUnicode_InternFromString("__new__"))))
        return NULL;
    PyObject *mpi_new = PyObject_GetAttr(args[0], mpi_new_name);
    if (!mpi_new)
        return NULL;
    PyObject *made = PyObject_Vectorcall(mpi_new, args, (size_t)nargs, NULL);
    Py_DECREF(mpi_new);
    if (!made || nargs < 2)
        return made;
    /* a copy of an accelerated object: one whose class's __new__ is this one
     * (a plain mpi4py comm made accelerated has no state to copy) */
    PyObject *ours = PyObject_GetAttr(args[0], new_name);
    PyObject *theirs = ours ? PyObject_GetAttr((PyObject *)Py_TYPE(args[1]), new_name) : NULL;
    const int copy = theirs && theirs == ours;
    Py_XDECREF(ours);
    Py_XDECREF(theirs);
    if (PyErr_Occurred())
        Py_CLEAR(made);
    if (!copy)
        return made;
    PyObject *const pair[3] = {args[0], made, args[1]};
    PyObject *done = PyObject_VectorcallMethod(copy_state_name, pair, 3, NULL);
    if (!done)
        Py_CLEAR(made);
    Py_XDECREF(done);
    return made;
}

/* The Python method's answer, for what is not plain. */
static PyObject *general(int call, PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    return call_general(rma.general[call], "bind_window", self, args, nargs, kwnames);
}

/* One more call of `call` in shared memory (shm_stats adds these to the Python methods' counts). */
static PyObject *counted(RmaState *rs, int call)
{
    rs->counts[call]++;
    Py_RETURN_NONE;
}

static shmtopo_win_t *ctrl_of(const RmaState *rs)
{
    return rs->fast && PyObject_TypeCheck(rs->ctrl, &NativeWindowType) ? ((NativeWindow *)rs->ctrl)->win : NULL;
}

/* A Python int in [0, limit), else -1. */
static long exact_below(PyObject *value, long limit)
{
    if (!PyLong_CheckExact(value))
        return -1;
    long v = PyLong_AsLong(value);
    if (v == -1 && PyErr_Occurred())
        PyErr_Clear();
    return v >= 0 && v < limit ? v : -1;
}

/* An exact ndarray, C-contiguous, of a type the window's calls move; 0 with nothing held otherwise. */
static int rma_array(PyObject *obj, int writable, Py_buffer *view, int *code)
{
    return Py_TYPE(obj) == (PyTypeObject *)bound.ndarray && (*code = dtype_code(obj)) >= 0
           && (rma.masks[*code] & ACCEL_MOVES) && view_of(obj, view, writable, code);
}

static int in_epoch(const RmaState *rs, long rank)
{
    return rs->fence_open || rs->lock_all || (rs->locks[rank] & HELD);
}

/* nbytes at displacement disp of rank's segment, which they must lie in; NULL otherwise. */
static char *target_at(const RmaState *rs, long rank, Py_ssize_t disp, Py_ssize_t nbytes)
{
    const size_t size = rs->sizes[rank], unit = (size_t)rs->units[rank];
    if (disp < 0 || (unit && (size_t)disp > size / unit))
        return NULL;
    const size_t offset = (size_t)disp * unit;
    return (size_t)nbytes <= size - offset ? rs->bases[rank] + offset : NULL;
}

/* The op's code where the type takes it in an accumulate, else -1. */
static int rma_op(PyObject *op, int code)
{
    if (op == Py_None)
        op = rma.sum;
    for (Py_ssize_t i = 0; rma.ops && i < PyTuple_GET_SIZE(rma.ops); i++) {
        PyObject *pair = PyTuple_GET_ITEM(rma.ops, i);
        if (PyTuple_GET_ITEM(pair, 0) == op) {
            const int opc = (int)PyLong_AsLong(PyTuple_GET_ITEM(pair, 1));
            return opc >= SHMTOPO_RMA_REPLACE || (opc < 30 && rma.masks[code] & (1u << opc)) ? opc : -1;
        }
    }
    return -1;
}

/* The core's failure as the Python path raises it (errors.last_error). */
static PyObject *rma_done(RmaState *rs, int call, int rc, int err)
{
    return rc < 0 ? failed(NULL, err) : counted(rs, call);
}

/* A Python int of value 0 (the plain assertion). */
static int exact_zero(PyObject *value)
{
    return PyLong_CheckExact(value) && PyLong_AsLong(value) == 0;
}

#define WIN_METHOD(name) static PyObject *name(PyObject *self, PyObject *const *args, Py_ssize_t nargs, \
                                               PyObject *kwnames)

WIN_METHOD(win_fence)
{
    RmaState *rs = kwnames || nargs > 1 ? NULL : state_of(self);
    shmtopo_win_t *ctrl = rs ? ctrl_of(rs) : NULL;
    if (!ctrl || rs->nlocks || rs->lock_all || (nargs == 1 && !exact_zero(args[0])))
        return general(W_FENCE, self, args, nargs, kwnames);
    int rc, err;
    CORE_CALL(NULL, ctrl, shmtopo_win_fence(ctrl));
    if (rc == 0)
        rs->fence_open = 1;
    return rma_done(rs, W_FENCE, rc, err);
}

WIN_METHOD(win_lock_all)
{
    RmaState *rs = kwnames || nargs > 1 ? NULL : state_of(self);
    shmtopo_win_t *ctrl = rs ? ctrl_of(rs) : NULL;
    if (!ctrl || rs->nlocks || rs->lock_all || (nargs == 1 && !exact_zero(args[0])))
        return general(W_LOCK_ALL, self, args, nargs, kwnames);
    int rc, err;
    CORE_CALL(NULL, ctrl, shmtopo_rma_lock_all(ctrl));
    if (rc == 0)
        rs->lock_all = rs->all_taken = 1;
    return rma_done(rs, W_LOCK_ALL, rc, err);
}

WIN_METHOD(win_unlock_all)
{
    RmaState *rs = kwnames || nargs ? NULL : state_of(self);
    shmtopo_win_t *ctrl = rs ? ctrl_of(rs) : NULL;
    if (!ctrl || !rs->lock_all)
        return general(W_UNLOCK_ALL, self, args, nargs, kwnames);
    int rc = 0, err = 0;
    rs->lock_all = 0;
    if (rs->all_taken)
        CORE_CALL(NULL, ctrl, shmtopo_rma_unlock_all(ctrl));
    else
        shmtopo_rma_sync();
    return rma_done(rs, W_UNLOCK_ALL, rc, err);
}

WIN_METHOD(win_lock) /* rank[, lock_type[, assertion]] */
{
    RmaState *rs = kwnames || nargs < 1 || nargs > 3 ? NULL : state_of(self);
    shmtopo_win_t *ctrl = rs ? ctrl_of(rs) : NULL;
    const long rank = ctrl ? exact_below(args[0], rs->n) : -1;
    long type = rma.lock_exclusive;
    if (nargs > 1 && args[1] != Py_None)
        type = PyLong_CheckExact(args[1]) ? PyLong_AsLong(args[1]) : LONG_MIN;
    PyErr_Clear();
    if (rank < 0 || rs->lock_all || (rs->locks[rank] & HELD) || (type != rma.lock_exclusive && type != rma.lock_shared)
        || (nargs == 3 && !exact_zero(args[2])))
        return general(W_LOCK, self, args, nargs, kwnames);
    const int exclusive = type == rma.lock_exclusive;
    int rc, err;
    CORE_CALL(NULL, ctrl, shmtopo_rma_lock(ctrl, (int)rank, exclusive));
    if (rc == 0) {
        rs->locks[rank] = (unsigned char)(HELD | TAKEN | (exclusive ? EXCLUSIVE : 0));
        rs->nlocks++;
    }
    return rma_done(rs, W_LOCK, rc, err);
}

WIN_METHOD(win_unlock)
{
    RmaState *rs = kwnames || nargs != 1 ? NULL : state_of(self);
    shmtopo_win_t *ctrl = rs ? ctrl_of(rs) : NULL;
    long rank = ctrl ? exact_below(args[0], rs->n) : -1;
    if (rank < 0 || !(rs->locks[rank] & HELD))
        return general(W_UNLOCK, self, args, nargs, kwnames);
    const unsigned held = rs->locks[rank];
    rs->locks[rank] = 0;
    rs->nlocks--;
    int rc = 0, err = 0;
    shmtopo_rma_sync();
    if (held & TAKEN)
        CORE_CALL(NULL, ctrl, shmtopo_rma_unlock(ctrl, (int)rank, !!(held & EXCLUSIVE)));
    return rma_done(rs, W_UNLOCK, rc, err);
}

WIN_METHOD(win_flush)
{
    RmaState *rs = kwnames || nargs != 1 ? NULL : state_of(self);
    long rank = rs && ctrl_of(rs) ? exact_below(args[0], rs->n) : -1;
    if (rank < 0 || !(rs->lock_all || (rs->locks[rank] & HELD)))
        return general(W_FLUSH, self, args, nargs, kwnames);
    shmtopo_rma_sync();
    return counted(rs, W_FLUSH);
}

/* Put (put) or Get: origin, target_rank[, target displacement]. */
static PyObject *copy_call(int call, PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    const int put = call == W_PUT;
    RmaState *rs = kwnames || nargs < 2 || nargs > 3 ? NULL : state_of(self);
    long rank = rs && ctrl_of(rs) ? exact_below(args[1], rs->n) : -1;
    Py_ssize_t disp = nargs == 3 && args[2] != Py_None ? exact_below(args[2], LONG_MAX) : 0;
    Py_buffer view;
    int code;
    char *at;
    if (rank < 0 || disp < 0 || !in_epoch(rs, rank) || !rma_array(args[0], !put, &view, &code))
        return general(call, self, args, nargs, kwnames);
    if (!(at = target_at(rs, rank, disp, view.len))) {
        PyBuffer_Release(&view);
        return general(call, self, args, nargs, kwnames);
    }
    if (put)
        memmove(at, view.buf, (size_t)view.len);
    else
        memmove(view.buf, at, (size_t)view.len);
    PyBuffer_Release(&view);
    return counted(rs, call);
}

WIN_METHOD(win_put)
{
    return copy_call(W_PUT, self, args, nargs, kwnames);
}

WIN_METHOD(win_get)
{
    return copy_call(W_GET, self, args, nargs, kwnames);
}

WIN_METHOD(win_accumulate) /* origin, target_rank[, target displacement[, op]] */
{
    RmaState *rs = kwnames || nargs < 2 || nargs > 4 ? NULL : state_of(self);
    shmtopo_win_t *ctrl = rs ? ctrl_of(rs) : NULL;
    long rank = ctrl ? exact_below(args[1], rs->n) : -1;
    Py_ssize_t disp = nargs >= 3 && args[2] != Py_None ? exact_below(args[2], LONG_MAX) : 0;
    Py_buffer view;
    int code, op;
    char *at;
    if (rank < 0 || disp < 0 || !in_epoch(rs, rank) || !rma_array(args[0], 0, &view, &code))
        return general(W_ACCUMULATE, self, args, nargs, kwnames);
    if ((op = rma_op(nargs == 4 ? args[3] : Py_None, code)) < 0 || !(at = target_at(rs, rank, disp, view.len))) {
        PyBuffer_Release(&view);
        return general(W_ACCUMULATE, self, args, nargs, kwnames);
    }
    int rc = 0, err = 0;
    const size_t count = count_of(&view, code);
    if (count)
        CORE_CALL(NULL, ctrl, shmtopo_rma_accumulate(ctrl, (int)rank, at, view.buf, NULL, count, code, op));
    PyBuffer_Release(&view);
    return rma_done(rs, W_ACCUMULATE, rc, err);
}

/* One element of the origin's type, in `view` (held); 0 with nothing held otherwise. */
static int rma_single(PyObject *obj, int writable, int code, Py_buffer *view)
{
    int got;
    if (!rma_array(obj, writable, view, &got))
        return 0;
    if (got != code || (size_t)view->len != shmtopo_dtype_size(code)) {
        PyBuffer_Release(view);
        return 0;
    }
    return 1;
}

WIN_METHOD(win_fetch_and_op) /* origin, result, target_rank[, target_disp[, op]] */
{
    RmaState *rs = kwnames || nargs < 3 || nargs > 5 ? NULL : state_of(self);
    shmtopo_win_t *ctrl = rs ? ctrl_of(rs) : NULL;
    long rank = ctrl ? exact_below(args[2], rs->n) : -1;
    Py_ssize_t disp = nargs >= 4 ? exact_below(args[3], LONG_MAX) : 0;
    Py_buffer origin, result;
    int code, op;
    char *at;
    if (rank < 0 || disp < 0 || !in_epoch(rs, rank) || !rma_array(args[0], 0, &origin, &code))
        return general(W_FETCH_AND_OP, self, args, nargs, kwnames);
    if ((size_t)origin.len != shmtopo_dtype_size(code) || !rma_single(args[1], 1, code, &result)) {
        PyBuffer_Release(&origin);
        return general(W_FETCH_AND_OP, self, args, nargs, kwnames);
    }
    if ((op = rma_op(nargs == 5 ? args[4] : Py_None, code)) < 0 || !(at = target_at(rs, rank, disp, origin.len))) {
        PyBuffer_Release(&origin);
        PyBuffer_Release(&result);
        return general(W_FETCH_AND_OP, self, args, nargs, kwnames);
    }
    int rc, err;
    CORE_CALL(NULL, ctrl, shmtopo_rma_accumulate(ctrl, (int)rank, at, origin.buf, result.buf, 1, code, op));
    PyBuffer_Release(&origin);
    PyBuffer_Release(&result);
    return rma_done(rs, W_FETCH_AND_OP, rc, err);
}

WIN_METHOD(win_compare_and_swap) /* origin, compare, result, target_rank[, target_disp] */
{
    RmaState *rs = kwnames || nargs < 4 || nargs > 5 ? NULL : state_of(self);
    shmtopo_win_t *ctrl = rs ? ctrl_of(rs) : NULL;
    long rank = ctrl ? exact_below(args[3], rs->n) : -1;
    Py_ssize_t disp = nargs == 5 ? exact_below(args[4], LONG_MAX) : 0;
    Py_buffer origin, compare, result;
    int code;
    char *at;
    if (rank < 0 || disp < 0 || !in_epoch(rs, rank) || !rma_array(args[0], 0, &origin, &code))
        return general(W_CAS, self, args, nargs, kwnames);
    if (!(rma.masks[code] & RMA_CAS) || (size_t)origin.len != shmtopo_dtype_size(code)
        || !(at = target_at(rs, rank, disp, origin.len)) || !rma_single(args[1], 0, code, &compare)) {
        PyBuffer_Release(&origin);
        return general(W_CAS, self, args, nargs, kwnames);
    }
    if (!rma_single(args[2], 1, code, &result)) {
        PyBuffer_Release(&origin);
        PyBuffer_Release(&compare);
        return general(W_CAS, self, args, nargs, kwnames);
    }
    int rc, err;
    CORE_CALL(NULL, ctrl, shmtopo_rma_compare_and_swap(ctrl, (int)rank, at, origin.buf, compare.buf, result.buf,
                                                       (size_t)origin.len));
    PyBuffer_Release(&origin);
    PyBuffer_Release(&compare);
    PyBuffer_Release(&result);
    return rma_done(rs, W_CAS, rc, err);
}

#define WIN_ENTRY(name, fn, doc) \
    {name, (PyCFunction)(void (*)(void))fn, METH_FASTCALL | METH_KEYWORDS, doc}

static PyMethodDef winfast_methods[] = {
    WIN_ENTRY("Fence", win_fence, "Collective: as mpi4py's Fence, in shared memory."),
    WIN_ENTRY("Lock", win_lock, "Local: as mpi4py's Lock: a real lock of the target's memory."),
    WIN_ENTRY("Unlock", win_unlock, "Local: as mpi4py's Unlock."),
    WIN_ENTRY("Lock_all", win_lock_all, "Local: as mpi4py's Lock_all: a shared lock of every rank."),
    WIN_ENTRY("Unlock_all", win_unlock_all, "Local: as mpi4py's Unlock_all."),
    WIN_ENTRY("Flush", win_flush, "Local: the calls to the rank are complete at both ends (they are, on return)."),
    WIN_ENTRY("Put", win_put, "Local: as mpi4py's Put: a copy into the target's segment."),
    WIN_ENTRY("Get", win_get, "Local: as mpi4py's Get: a copy from the target's segment."),
    WIN_ENTRY("Accumulate", win_accumulate, "Local: as mpi4py's Accumulate (default MPI.SUM), atomic per element."),
    WIN_ENTRY("Fetch_and_op", win_fetch_and_op, "Local: as mpi4py's Fetch_and_op, one CPU atomic where it can."),
    WIN_ENTRY("Compare_and_swap", win_compare_and_swap, "Local: as mpi4py's Compare_and_swap, one CPU atomic where it can."),
    {NULL, NULL, 0, NULL},
};

static PyTypeObject WinFastType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "shmtopo._fastpath.WinFast",
    .tp_basicsize = sizeof(PyObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "The plain one-sided calls of an accelerated window, in C (internal; a base adding no fields).",
    .tp_methods = winfast_methods,
};
