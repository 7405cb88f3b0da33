/* native/cpython/reading.h: part of shmtopo._fastpath, included once by
 * fastpath.c in its place (one translation unit).
 *
 * Reading Python values and numpy arrays cheaply, kept conversions, and the
 * error and release helpers every entry shares. */

#define NDTYPES SHMTOPO_NDTYPES /* enum shmtopo_dtype: codes 0 .. SHMTOPO_NDTYPES - 1 */

static struct {
    PyObject *ndarray;      /* numpy.ndarray */
    PyObject *empty_like;   /* numpy.empty_like */
    PyObject *ops;          /* {"sum": code, ...} */
    PyObject *dtypes[NDTYPES]; /* numpy dtype objects, by shmtopo_dtype code */
    PyObject *dtype_name;   /* "dtype" */
    PyObject *last_error;   /* last_error(errno) -> the exception to raise */
    PyObject *value_error;  /* ShmtopoValueError(message, errno) */
    Py_ssize_t window_min;  /* arrays from this size on take the window path where they lie in one */
} bound;

/* What the entries have read before and keep, under the GIL (see where each is used). */
#define KEPT 8
typedef struct kept {
    PyObject *key;
    intptr_t value;
} kept_t;

static struct {
    int fields_checked;           /* numpy's array fields: 0 not yet checked, 1 read directly, -1 buffer protocol */
    PyObject *last_dtype;         /* the last dtype found, one of bound.dtypes (bind clears it) ... */
    int last_code;                /* ... and its code: a program's calls mostly repeat one type */
    size_t element_size[NDTYPES]; /* bytes per element by code: the core's figures, read once at init */
    kept_t handles[KEPT];         /* native objects by handle (a Python int) */
    kept_t ops[KEPT];             /* op codes by op name */
} seen;

/* Calls into the core keep the GIL while their waits are short: dropping
 * and retaking it costs more than a fence whose peer is already there. The
 * core drops it through the call's gil_release at the first wait that
 * lasts; CORE_CALL takes it back after the call. The call claims the comm
 * and the window (either may be NULL) first (shmtopo_call_begin), still
 * holding the GIL: a thread that frees either claims it too, and clears
 * the handles this module is given before it goes, so no call here meets
 * a freed one.
 * `rc` and `err` (errno, read before the GIL is retaken) are the caller's. */
typedef struct gil_release {
    shmtopo_release_t hook;
    PyThreadState *saved;   /* set once the core released the GIL */
} gil_release_t;

static void release_gil(shmtopo_release_t *hook)
{
    ((gil_release_t *)hook)->saved = PyEval_SaveThread();
}

/* The comm whose claim a fast entry found held by its queue of nonblocking
 * calls (EINPROGRESS): NativeComm's methods run the queue, then the entry
 * again (comm.h, run_queue_instead). Read and cleared with the GIL held. */
static shmtopo_comm_t *queued_comm;

#define CORE_CALL(comm, win, call)                                  \
    do {                                                            \
        gil_release_t gil_ = {{release_gil}, NULL};                 \
        if (shmtopo_call_begin(comm, win, &gil_.hook) < 0) {        \
            rc = -1;                                                \
            err = errno;                                            \
            if (err == EINPROGRESS)                                 \
                queued_comm = comm;                                 \
            break;                                                  \
        }                                                           \
        rc = call;                                                  \
        err = errno;                                                \
        if (gil_.saved)                                             \
            PyEval_RestoreThread(gil_.saved);                       \
        shmtopo_call_end(comm, win);                                \
    } while (0)

static PyObject *new_ref(PyObject *o) /* Py_NewRef, which Python 3.9 lacks */
{
    Py_INCREF(o);
    return o;
}

/* The leading fields of numpy's array object (PyArrayObject_fields of
 * numpy/ndarraytypes.h), the same in numpy 1.x and 2.x: its C-API macros
 * (PyArray_DATA, PyArray_DIMS, PyArray_DESCR, PyArray_FLAGS) read them so
 * from compiled extensions. Reading them costs a few loads where the buffer
 * protocol and a dtype attribute lookup cost several hundred instructions a
 * call; the first array checked is compared with its buffer, and any
 * difference sends every later call through the buffer protocol. */
typedef struct {
    PyObject_HEAD
    char *data;
    int nd;
    Py_ssize_t *dimensions;
    Py_ssize_t *strides;
    PyObject *base;
    PyObject *descr;
    int flags;
} ArrayFields;
#define ARRAY_C_CONTIGUOUS 0x0001 /* NPY_ARRAY_C_CONTIGUOUS */
#define ARRAY_WRITEABLE 0x0400    /* NPY_ARRAY_WRITEABLE */

/* The element type's shmtopo_dtype code: numpy's built-in native-order
 * dtypes are singletons, so an identity scan of the ones bound at start finds
 * them (asking the buffer for its format string would make numpy build that
 * string on every call). -1 for anything else: the general path decides. */
static int code_of_dtype(PyObject *dtype)
{
    if (dtype == seen.last_dtype && dtype)
        return seen.last_code;
    for (int i = 0; i < NDTYPES; i++)
        if (dtype == bound.dtypes[i]) {
            seen.last_dtype = dtype, seen.last_code = i;
            return i;
        }
    return -1;
}

static int dtype_code(PyObject *array)
{
    if (seen.fields_checked > 0)
        return code_of_dtype(((ArrayFields *)array)->descr);
    PyObject *dtype = PyObject_GetAttr(array, bound.dtype_name);
    if (!dtype) {
        PyErr_Clear();
        return -1;
    }
    int code = code_of_dtype(dtype);
    Py_DECREF(dtype);
    return code;
}

/* Whether the mirror reads `obj` (an exact ndarray) as its buffer `view` does. */
static int fields_match(PyObject *obj, const Py_buffer *view)
{
    const ArrayFields *a = (const ArrayFields *)obj;
    PyObject *dtype = PyObject_GetAttr(obj, bound.dtype_name);
    if (!dtype) {
        PyErr_Clear();
        return 0;
    }
    int same = a->data == (char *)view->buf && a->nd == view->ndim && a->descr == dtype &&
               (a->flags & ARRAY_C_CONTIGUOUS);
    for (int i = 0; same && i < a->nd; i++)
        same = a->dimensions[i] == view->shape[i];
    Py_DECREF(dtype);
    return same;
}

/* Once, at the first C-contiguous ndarray of any dtype: whether the mirror
 * holds (a program whose arrays are all of a type the core lacks, such as
 * long double, would otherwise ask numpy for a format string per call). */
static void check_fields(PyObject *obj)
{
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Clear(); /* not contiguous: the next array decides */
        return;
    }
    seen.fields_checked = fields_match(obj, &view) ? 1 : -1;
    PyBuffer_Release(&view);
}

/* A view of an exact, C-contiguous ndarray of a supported type; 0 with no
 * error set (and no view held) otherwise. Through the mirror, the view holds
 * no export (view->obj NULL: PyBuffer_Release does nothing): the caller's
 * reference keeps the array, which a thread cannot resize while referenced. */
static int view_of(PyObject *obj, Py_buffer *view, int writable, int *code)
{
    if (Py_TYPE(obj) != (PyTypeObject *)bound.ndarray)
        return 0;
    if (!seen.fields_checked)
        check_fields(obj);
    if (seen.fields_checked > 0) {
        const ArrayFields *a = (const ArrayFields *)obj;
        if ((*code = code_of_dtype(a->descr)) < 0 || !(a->flags & ARRAY_C_CONTIGUOUS) ||
            (writable && !(a->flags & ARRAY_WRITEABLE)))
            return 0;
        const Py_ssize_t itemsize = (Py_ssize_t)seen.element_size[*code];
        Py_ssize_t len = itemsize;
        for (int i = 0; i < a->nd; i++)
            len *= a->dimensions[i];
        memset(view, 0, sizeof(*view));
        view->buf = a->data;
        view->len = len;
        view->readonly = !(a->flags & ARRAY_WRITEABLE);
        view->itemsize = itemsize;
        view->ndim = a->nd;
        view->shape = a->dimensions;
        view->strides = a->strides;
        return 1;
    }
    if ((*code = dtype_code(obj)) < 0)
        return 0;
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0)) < 0) {
        PyErr_Clear(); /* not contiguous, read-only: the general path says so */
        return 0;
    }
    return 1;
}

/* Elements in a view of an array whose type has code `code`. */
static size_t count_of(const Py_buffer *view, int code)
{
    return (size_t)view->len / seen.element_size[code];
}

/* Conversions every call makes again from the same few objects (a comm's
 * handle, an op's name) are kept by the object's identity: a table of
 * KEPT slots, indexed by the object's address, each holding a reference to
 * its object, so that the same object is still the same value: only exact
 * ints and strs are kept, immutable, with no __eq__ of a subclass to ask.
 * Used with the GIL, which guards the tables. */
static kept_t *kept_slot(kept_t *table, PyObject *key)
{
    return &table[((uintptr_t)key >> 5) % KEPT];
}

static void keep(kept_t *slot, PyObject *key, intptr_t value)
{
    Py_XSETREF(slot->key, new_ref(key));
    slot->value = value;
}

static void forget_all(kept_t *table)
{
    for (int i = 0; i < KEPT; i++)
        Py_CLEAR(table[i].key);
}

/* The native object a handle (a Python int) names, NULL for 0 or a
 * non-int (PyLong_AsVoidPtr costs about 70 instructions). */
static shmtopo_comm_t *comm_of(PyObject *handle)
{
    kept_t *slot = kept_slot(seen.handles, handle);
    if (slot->key == handle)
        return (shmtopo_comm_t *)slot->value;
    void *h = PyLong_AsVoidPtr(handle);
    if (!h && PyErr_Occurred()) {
        PyErr_Clear();
        return NULL;
    }
    if (PyLong_CheckExact(handle))
        keep(slot, handle, (intptr_t)h);
    return h;
}

/* out, or a new array like `like`; NULL with no error when out does not
 * fit (same type and byte length, writable). */
static PyObject *result_of(PyObject *out, PyObject *like, const Py_buffer *in, int code,
                           Py_buffer *view)
{
    int out_code;
    if (out == Py_None) {
        PyObject *made = PyObject_CallOneArg(bound.empty_like, like);
        if (!made)
            return NULL;
        if (!view_of(made, view, 1, &out_code)) {
            Py_DECREF(made);
            return NULL;
        }
        return made;
    }
    if (!view_of(out, view, 1, &out_code))
        return NULL;
    if (out_code != code || view->len != in->len) {
        PyBuffer_Release(view);
        return NULL;
    }
    Py_INCREF(out);
    return out;
}

/* An op's code, by its name in the bound table (a dict lookup costs about
 * 110 instructions), or -1. */
static int op_code(PyObject *op)
{
    kept_t *slot = kept_slot(seen.ops, op);
    if (slot->key == op)
        return (int)slot->value;
    PyObject *code = PyDict_GetItemWithError(bound.ops, op);
    if (!code)
        return PyErr_Clear(), -1;
    const int value = (int)PyLong_AsLong(code);
    if (PyUnicode_CheckExact(op))
        keep(slot, op, value);
    return value;
}

/* A root the core can take as it is: an int in C int's range; anything
 * else (2**32 would wrap to 0) goes to the general path, which refuses it
 * on every rank. -1 with no error set when it does not fit. */
static int root_of(PyObject *value)
{
    int overflow = 0;
    long v = PyLong_Check(value) ? PyLong_AsLongAndOverflow(value, &overflow) : -1;
    if (PyErr_Occurred())
        PyErr_Clear();
    return overflow || v < 0 || v > INT_MAX ? -1 : (int)v;
}

/* A count or a displacement given as a Python int, not negative; -1 for
 * anything else, which the general paths judge. */
static Py_ssize_t index_of(PyObject *value)
{
    if (!PyLong_CheckExact(value))
        return -1;
    Py_ssize_t n = PyLong_AsSsize_t(value);
    if (n < 0 && PyErr_Occurred())
        PyErr_Clear();
    return n < 0 ? -1 : n;
}

/* A v-variant's counts or displacements, n of them, not negative: a list or
 * tuple of Python ints, or a buffer of C ints or longs (array('i'), numpy);
 * 0 for anything else, which the general paths judge (the planner's
 * buffers.int_list, the lower-case counts_layout). */
static int sizes_of(PyObject *obj, Py_ssize_t n, size_t *out)
{
    if (PyList_CheckExact(obj) || PyTuple_CheckExact(obj)) {
        if (PySequence_Fast_GET_SIZE(obj) != n)
            return 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_ssize_t v = index_of(PySequence_Fast_ITEMS(obj)[i]);
            if (v < 0)
                return 0;
            out[i] = (size_t)v;
        }
        return 1;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyErr_Clear();
        return 0;
    }
    const char *f = view.format ? view.format : "B";
    f += *f == '@';
    int ok = (!strcmp(f, "i") || !strcmp(f, "l") || !strcmp(f, "q")) && (view.itemsize == 4 || view.itemsize == 8)
             && view.itemsize * n == view.len;
    for (Py_ssize_t i = 0; ok && i < n; i++) {
        long long v = view.itemsize == 4 ? ((const int *)view.buf)[i] : ((const long long *)view.buf)[i];
        ok = v >= 0;
        out[i] = (size_t)v;
    }
    PyBuffer_Release(&view);
    return ok;
}

/* A v-variant's layout: counts and displacements (None: packed in rank
 * order), n of each, as sizes_of reads them; 0 for anything else. */
static int layout_of(PyObject *counts, PyObject *displs, Py_ssize_t n, size_t *c, size_t *d)
{
    if (!sizes_of(counts, n, c))
        return 0;
    if (displs != Py_None)
        return sizes_of(displs, n, d);
    size_t at = 0;
    for (Py_ssize_t i = 0; i < n; at += c[i], i++)
        d[i] = at;
    return 1;
}

/* f(self, *args, **kwargs), for a C method's general path: the Python
 * function or method that reads the arguments in full, which `binder`
 * (bind_window, bind_comm, bind_comm_fast) handed down. */
static PyObject *call_general(PyObject *f, const char *binder, PyObject *self, PyObject *const *args,
                              Py_ssize_t nargs, PyObject *kwnames)
{
    if (!f)
        return PyErr_Format(PyExc_RuntimeError, "shmtopo._fastpath: %s was not called", binder), NULL;
    const Py_ssize_t total = nargs + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0);
    PyObject *small[8], **all = total + 1 <= 8 ? small : PyMem_Malloc((size_t)(total + 1) * sizeof(PyObject *));
    if (!all)
        return PyErr_NoMemory();
    all[0] = self;
    memcpy(all + 1, args, (size_t)total * sizeof(PyObject *));
    PyObject *result = PyObject_Vectorcall(f, all, (size_t)nargs + 1, kwnames);
    if (all != small)
        PyMem_Free(all);
    return result;
}

/* One past the last element a layout reaches (blocks of 0 reach nothing). */
static size_t layout_end(const size_t *c, const size_t *d, Py_ssize_t n)
{
    size_t end = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if (c[i] && d[i] + c[i] > end)
            end = d[i] + c[i];
    return end;
}

static PyObject *not_handled(void)
{
    if (PyErr_Occurred())
        return NULL; /* a real error (out of memory in empty_like) */
    Py_RETURN_NONE;
}

/* Raise the exception for the core's failure in this thread; errno is taken
 * by the caller, as cffi's saved copy never saw these calls. */
static PyObject *failed(PyObject *result, int err)
{
    Py_XDECREF(result);
    PyObject *exc = PyObject_CallFunction(bound.last_error, "i", err);
    if (exc) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
    }
    return NULL;
}
