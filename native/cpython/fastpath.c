/* shmtopo._fastpath: the Python entry of window collectives on plain arrays.
 *
 * A small allreduce costs about 0.4 us in shared memory, and going through
 * cffi (two ffi.from_buffer calls, dtype and op lookups, the search for a
 * window holding the array) added 1-2 us of Python on top. This module takes numpy arrays straight through the buffer
 * protocol and calls the native core directly. The declarations are the
 * core's own (shmtopo.h), and the core is the one libshmtopo.so that
 * shmtopo._native and C programs link too (found through the rpath
 * $ORIGIN/lib), so the process holds one copy of the core and of its
 * thread-local error state: the message of a failure here is the one
 * shmtopo.errors.last_error reads through cffi.
 *
 * Every function returns None, having done nothing, when the arguments are
 * not the plain case (exact ndarrays, C-contiguous, native byte order, a
 * supported type, a matching out); the caller then takes the general Python
 * path, which also explains what is wrong. Arrays of any size are taken: a
 * large one that lies in this rank's part of one of the comm's windows
 * (the comm's list of Windows, passed in, walked as the general path walks
 * it) goes to the window collective, any other to the copy path. A
 * failure of the collective itself raises shmtopo's own exception, made by
 * the Python function bound for it (shmtopo.errors.last_error). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <errno.h>
#include <string.h>

#include "shmtopo.h"

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

#define CORE_CALL(comm, win, call)                                  \
    do {                                                            \
        gil_release_t gil_ = {{release_gil}, NULL};                 \
        if (shmtopo_call_begin(comm, win, &gil_.hook) < 0) {        \
            rc = -1;                                                \
            err = errno;                                            \
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

static int fields_checked; /* 0: not yet, 1: the mirror holds, -1: use the buffer protocol */

/* The last type found, one of bound.dtypes (which keeps it alive; bind
 * clears it): a program's calls mostly repeat one type. Under the GIL. */
static PyObject *last_dtype;
static int last_code;

/* The element type's shmtopo_dtype code: numpy's built-in native-order
 * dtypes are singletons, so an identity scan of the ones bound at start finds
 * them (asking the buffer for its format string would make numpy build that
 * string on every call). -1 for anything else: the general path decides. */
static int code_of_dtype(PyObject *dtype)
{
    if (dtype == last_dtype && dtype)
        return last_code;
    for (int i = 0; i < NDTYPES; i++)
        if (dtype == bound.dtypes[i]) {
            last_dtype = dtype, last_code = i;
            return i;
        }
    return -1;
}

/* Bytes per element by shmtopo_dtype code: the core's figures, read once
 * (on the path of every call, where a call into the library cost more). */
static size_t element_size[NDTYPES];

static int dtype_code(PyObject *array)
{
    if (fields_checked > 0)
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

/* A view of an exact, C-contiguous ndarray of a supported type; 0 with no
 * error set (and no view held) otherwise. Through the mirror, the view holds
 * no export (view->obj NULL: PyBuffer_Release does nothing): the caller's
 * reference keeps the array, which a thread cannot resize while referenced. */
static int view_of(PyObject *obj, Py_buffer *view, int writable, int *code)
{
    if (Py_TYPE(obj) != (PyTypeObject *)bound.ndarray)
        return 0;
    if (fields_checked > 0) {
        const ArrayFields *a = (const ArrayFields *)obj;
        if ((*code = code_of_dtype(a->descr)) < 0 || !(a->flags & ARRAY_C_CONTIGUOUS) ||
            (writable && !(a->flags & ARRAY_WRITEABLE)))
            return 0;
        const Py_ssize_t itemsize = (Py_ssize_t)element_size[*code];
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
    if (!fields_checked)
        fields_checked = fields_match(obj, view) ? 1 : -1;
    return 1;
}

/* Elements in a view of an array whose type has code `code`. */
static size_t count_of(const Py_buffer *view, int code)
{
    return (size_t)view->len / element_size[code];
}

/* Conversions every call makes again from the same few objects (a comm's
 * handle, an op's name) are kept by the object's identity: a table of
 * KEPT slots, indexed by the object's address, each holding a reference to
 * its object, so that the same object is still the same value: only exact
 * ints and strs are kept, immutable, with no __eq__ of a subclass to ask.
 * Used with the GIL, which guards the tables. */
#define KEPT 8
typedef struct kept {
    PyObject *key;
    intptr_t value;
} kept_t;

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
static kept_t handles_kept[KEPT];

static shmtopo_comm_t *comm_of(PyObject *handle)
{
    kept_t *slot = kept_slot(handles_kept, handle);
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
static kept_t ops_kept[KEPT];

static int op_code(PyObject *op)
{
    kept_t *slot = kept_slot(ops_kept, op);
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

/* ---- NativeWindow: the base of shmtopo.Window ---------------------------
 *
 * It holds the native window, so that win.fence() is one C method call: a
 * Python method in between cost as much as the fence itself. `_fast` is the
 * shmtopo_win_t * as an int, 0 once freed (the core then says EBADF). */
typedef struct {
    PyObject_HEAD
    shmtopo_win_t *win;
} NativeWindow;
static PyTypeObject NativeWindowType;


/* Where an input lies: the one rule, which the general path asks through place().
 * WINDOWED: in this rank's part of one of `windows` (the comm's list of its
 * Windows), at *offsetp of *winp; PRIVATE: anywhere else, or smaller than
 * bound.window_min (a copy is as fast there, on every rank alike); UNKNOWN:
 * `windows` is not a list, so only small arrays are taken. */
enum place { PRIVATE, WINDOWED, UNKNOWN };

static enum place place_of(PyObject *windows, shmtopo_comm_t *comm, const Py_buffer *view,
                           shmtopo_win_t **winp, size_t *offsetp)
{
    if (view->len < bound.window_min)
        return PRIVATE;
    if (!PyList_Check(windows))
        return UNKNOWN;
    const int rank = shmtopo_comm_rank(comm);
    const char *start = view->buf;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(windows); i++) {
        PyObject *w = PyList_GET_ITEM(windows, i);
        shmtopo_win_t *win = PyObject_TypeCheck(w, &NativeWindowType) ? ((NativeWindow *)w)->win : NULL;
        void *base;
        size_t size;
        if (!win || shmtopo_win_query(win, rank, &base, &size) < 0)
            continue; /* freed: the general path skips it too */
        const char *lo = base;
        if (lo <= start && start + view->len <= lo + size) {
            *winp = win;
            *offsetp = (size_t)(start - lo);
            return WINDOWED;
        }
    }
    return PRIVATE;
}

/* A result that shares bytes with a window input other than exactly (in
 * place): the general path explains which overlaps are allowed. */
static int apart_or_same(const Py_buffer *in, const Py_buffer *out)
{
    const char *a = in->buf, *b = out->buf;
    if (!out->buf || !(a < b + out->len && b < a + in->len))
        return 1;
    return a == b && in->len == out->len;
}

/* The core call for an input where place_of found it: the window path or
 * the copy path (root < 0: allreduce). Returns the core's rc, errno kept. */
static int reduce_at(enum place place, shmtopo_comm_t *comm, shmtopo_win_t *win, size_t offset,
                     const Py_buffer *in, void *out, int code, int op, int root)
{
    int rc, err;
    const size_t n = count_of(in, code);
    if (place == WINDOWED)
        CORE_CALL(comm, win, shmtopo_win_reduce(win, offset, out, n, code, op, root, SHMTOPO_COLL_AUTO));
    else if (root < 0)
        CORE_CALL(comm, NULL, shmtopo_allreduce(comm, in->buf, out, n, code, op, SHMTOPO_COLL_AUTO));
    else
        CORE_CALL(comm, NULL, shmtopo_reduce(comm, in->buf, out, n, code, op, root, SHMTOPO_COLL_AUTO));
    errno = err;
    return rc;
}

static int bcast_at(enum place place, shmtopo_comm_t *comm, shmtopo_win_t *win, size_t offset,
                    const Py_buffer *buf, int code, int root)
{
    int rc, err;
    if (place == WINDOWED)
        CORE_CALL(comm, win, shmtopo_win_bcast(win, offset, buf->buf, count_of(buf, code), code, root));
    else
        CORE_CALL(comm, NULL, shmtopo_bcast(comm, buf->buf, count_of(buf, code), code, root));
    errno = err;
    return rc;
}

/* 0 where the core takes the call; else the general path explains a result over a window input */
static int allgather_at(enum place place, shmtopo_comm_t *comm, shmtopo_win_t *win, size_t offset,
                        const Py_buffer *in, const Py_buffer *out, int code)
{
    int rc, err;
    if (place == WINDOWED)
        CORE_CALL(comm, win, shmtopo_win_allgather(win, offset, out->buf, count_of(in, code), code));
    else
        CORE_CALL(comm, NULL, shmtopo_allgather(comm, in->buf, out->buf, count_of(in, code), code));
    errno = err;
    return rc;
}

static int overlaps(const Py_buffer *a, const Py_buffer *b)
{
    return (const char *)a->buf < (const char *)b->buf + b->len && (const char *)b->buf < (const char *)a->buf + a->len;
}

/* allreduce(handle, windows, array, out, op) -> result | None */
static PyObject *fast_allreduce(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5)
        return PyErr_Format(PyExc_TypeError, "allreduce takes 5 arguments"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    int code, op = op_code(args[4]);
    Py_buffer in, out;
    shmtopo_win_t *win = NULL;
    size_t offset = 0;
    if (!comm || op < 0 || !view_of(args[2], &in, 0, &code))
        return not_handled();
    enum place place = place_of(args[1], comm, &in, &win, &offset);
    PyObject *result = place == UNKNOWN ? NULL : result_of(args[3], args[2], &in, code, &out);
    if (result && place == WINDOWED && !apart_or_same(&in, &out)) {
        PyBuffer_Release(&out);
        Py_CLEAR(result);
    }
    if (!result) {
        PyBuffer_Release(&in);
        return not_handled();
    }
    int rc = reduce_at(place, comm, win, offset, &in, out.buf, code, op, -1), err = errno;
    PyBuffer_Release(&in);
    PyBuffer_Release(&out);
    return rc < 0 ? failed(result, err) : result;
}

/* reduce(handle, windows, array, out, op, root, is_root) -> result (None off the root) | NotImplemented */
static PyObject *fast_reduce(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7)
        return PyErr_Format(PyExc_TypeError, "reduce takes 7 arguments"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    int code, op = op_code(args[4]);
    int root = root_of(args[5]), is_root = PyObject_IsTrue(args[6]);
    Py_buffer in, out = {0};
    shmtopo_win_t *win = NULL;
    size_t offset = 0;
    if (PyErr_Occurred())
        PyErr_Clear(), comm = NULL;
    if (!comm || op < 0 || root < 0 || !view_of(args[2], &in, 0, &code))
        return PyErr_Occurred() ? NULL : new_ref(Py_NotImplemented);
    enum place place = place_of(args[1], comm, &in, &win, &offset);
    PyObject *result = Py_None;
    if (place == UNKNOWN || (is_root && !(result = result_of(args[3], args[2], &in, code, &out)))) {
        PyBuffer_Release(&in);
        return PyErr_Occurred() ? NULL : new_ref(Py_NotImplemented);
    }
    if (!is_root)
        Py_INCREF(result);
    if (place == WINDOWED && !apart_or_same(&in, &out)) {
        PyBuffer_Release(&in);
        PyBuffer_Release(&out);
        Py_DECREF(result);
        return new_ref(Py_NotImplemented);
    }
    int rc = reduce_at(place, comm, win, offset, &in, out.buf, code, op, root), err = errno;
    PyBuffer_Release(&in);
    if (is_root)
        PyBuffer_Release(&out);
    return rc < 0 ? failed(result, err) : result;
}

/* bcast(handle, windows, array, root) -> array (received in place) | None */
static PyObject *fast_bcast(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4)
        return PyErr_Format(PyExc_TypeError, "bcast takes 4 arguments"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    int code, root = root_of(args[3]);
    Py_buffer buf;
    shmtopo_win_t *win = NULL;
    size_t offset = 0;
    if (PyErr_Occurred())
        PyErr_Clear(), comm = NULL;
    if (!comm || root < 0 || !view_of(args[2], &buf, 1, &code))
        return not_handled();
    enum place place = place_of(args[1], comm, &buf, &win, &offset);
    if (place == UNKNOWN) {
        PyBuffer_Release(&buf);
        return not_handled();
    }
    int rc = bcast_at(place, comm, win, offset, &buf, code, root), err = errno;
    PyBuffer_Release(&buf);
    return rc < 0 ? failed(NULL, err) : new_ref(args[2]);
}

/* allgather(handle, windows, array, out, nranks) -> out | None */
static PyObject *fast_allgather(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5)
        return PyErr_Format(PyExc_TypeError, "allgather takes 5 arguments"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    Py_ssize_t nranks = PyLong_AsSsize_t(args[4]);
    int code, out_code;
    Py_buffer in, out;
    shmtopo_win_t *win = NULL;
    size_t offset = 0;
    if (PyErr_Occurred())
        PyErr_Clear(), comm = NULL;
    if (!comm || !view_of(args[2], &in, 0, &code))
        return not_handled();
    enum place place = place_of(args[1], comm, &in, &win, &offset);
    if (place == UNKNOWN || !view_of(args[3], &out, 1, &out_code)) { /* out: nranks blocks */
        PyBuffer_Release(&in);
        return not_handled();
    }
    /* in a window, the general path explains a result over the input */
    if (out_code != code || out.len != in.len * nranks || (place == WINDOWED && overlaps(&in, &out))) {
        PyBuffer_Release(&in);
        PyBuffer_Release(&out);
        return not_handled();
    }
    int rc = allgather_at(place, comm, win, offset, &in, &out, code), err = errno;
    PyBuffer_Release(&in);
    PyBuffer_Release(&out);
    return rc < 0 ? failed(NULL, err) : new_ref(args[3]);
}

/* The root as the core takes it, or -1 for the general path to judge. */
static int root_in(PyObject *value, const shmtopo_comm_t *comm)
{
    int root = root_of(value);
    return root < shmtopo_comm_size(comm) ? root : -1;
}

/* The same for the lower-case API, whose roots are ints only: a bool (True
 * is 1 to mpi4py, whose rule the drop-in keeps, but not a rank number here)
 * or a numpy scalar goes to the general path, which refuses or takes it
 * alike on every rank. */
static int lower_root_in(PyObject *value, const shmtopo_comm_t *comm)
{
    return PyLong_CheckExact(value) ? root_in(value, comm) : -1;
}

/* alltoall(handle, array, out) -> out | None: the first axis splits into
 * one block per rank; out of the same type and length, apart from array */
static PyObject *fast_alltoall(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3)
        return PyErr_Format(PyExc_TypeError, "alltoall takes 3 arguments"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    int code, out_code;
    Py_buffer in, out;
    if (!comm || !view_of(args[1], &in, 0, &code))
        return not_handled();
    const int size = shmtopo_comm_size(comm);
    if (in.ndim == 0 || in.shape[0] % size || !view_of(args[2], &out, 1, &out_code)) {
        PyBuffer_Release(&in);
        return not_handled();
    }
    if (out_code != code || out.len != in.len || overlaps(&in, &out)) {
        PyBuffer_Release(&in);
        PyBuffer_Release(&out);
        return not_handled();
    }
    int rc, err;
    CORE_CALL(comm, NULL, shmtopo_alltoall(comm, in.buf, out.buf, count_of(&in, code) / (size_t)size, code));
    PyBuffer_Release(&in);
    PyBuffer_Release(&out);
    return rc < 0 ? failed(NULL, err) : new_ref(args[2]);
}

/* gather(handle, array, out, root) -> out on the root, True elsewhere, None
 * where the general path must look (out, a block per rank, is read on the
 * root only; in place there is its business) */
static PyObject *fast_gather(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4)
        return PyErr_Format(PyExc_TypeError, "gather takes 4 arguments"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    int code, out_code, root;
    Py_buffer in, out = {0};
    if (!comm || (root = lower_root_in(args[3], comm)) < 0 || !view_of(args[1], &in, 0, &code))
        return not_handled();
    const int is_root = root == shmtopo_comm_rank(comm);
    if (is_root) {
        if (!view_of(args[2], &out, 1, &out_code)) {
            PyBuffer_Release(&in);
            return not_handled();
        }
        if (out_code != code || out.len != in.len * shmtopo_comm_size(comm) || overlaps(&in, &out)) {
            PyBuffer_Release(&in);
            PyBuffer_Release(&out);
            return not_handled();
        }
    }
    int rc, err;
    CORE_CALL(comm, NULL, shmtopo_gather(comm, in.buf, is_root ? out.buf : NULL, count_of(&in, code), code, root));
    PyBuffer_Release(&in);
    if (is_root)
        PyBuffer_Release(&out);
    if (rc < 0)
        return failed(NULL, err);
    return is_root ? new_ref(args[2]) : new_ref(Py_True);
}

/* scatter(handle, array, out, root) -> out | None: on the root array holds a
 * block per rank along its first axis, apart from out; array is not read
 * elsewhere */
static PyObject *fast_scatter(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4)
        return PyErr_Format(PyExc_TypeError, "scatter takes 4 arguments"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    int code, in_code, root;
    Py_buffer in = {0}, out;
    if (!comm || (root = lower_root_in(args[3], comm)) < 0 || !view_of(args[2], &out, 1, &code))
        return not_handled();
    const int is_root = root == shmtopo_comm_rank(comm), size = shmtopo_comm_size(comm);
    if (is_root) {
        if (!view_of(args[1], &in, 0, &in_code)) {
            PyBuffer_Release(&out);
            return not_handled();
        }
        if (in_code != code || in.ndim == 0 || in.shape[0] != size || in.len != out.len * size ||
            overlaps(&in, &out)) {
            PyBuffer_Release(&in);
            PyBuffer_Release(&out);
            return not_handled();
        }
    }
    int rc, err;
    CORE_CALL(comm, NULL, shmtopo_scatter(comm, is_root ? in.buf : NULL, out.buf, count_of(&out, code), code, root));
    if (is_root)
        PyBuffer_Release(&in);
    PyBuffer_Release(&out);
    return rc < 0 ? failed(NULL, err) : new_ref(args[2]);
}

/* scan(handle, array, out, op, exclusive) -> result | None: out given, in
 * place (out is array) or apart; or, for scan only, None for a new array
 * (exscan's new array starts zeroed: the general path makes it) */
static PyObject *fast_scan(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5)
        return PyErr_Format(PyExc_TypeError, "scan takes 5 arguments"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    int code, op = op_code(args[3]), exclusive = PyObject_IsTrue(args[4]);
    Py_buffer in, out;
    if (exclusive < 0)
        PyErr_Clear(), comm = NULL;
    if (!comm || op < 0 || (exclusive && args[2] == Py_None) || !view_of(args[1], &in, 0, &code))
        return not_handled();
    PyObject *result = result_of(args[2], args[1], &in, code, &out);
    if (result && !apart_or_same(&in, &out)) {
        PyBuffer_Release(&out);
        Py_CLEAR(result);
    }
    if (!result) {
        PyBuffer_Release(&in);
        return not_handled();
    }
    int rc, err;
    CORE_CALL(comm, NULL, shmtopo_scan(comm, in.buf, out.buf, count_of(&in, code), code, op, exclusive));
    PyBuffer_Release(&in);
    PyBuffer_Release(&out);
    return rc < 0 ? failed(result, err) : result;
}

/* reduce_scatter(handle, array, out, op, counts) -> out | None: counts None,
 * the first axis of array splits into one block per rank and out holds one;
 * else array holds sum(counts) elements and out this rank's count. out
 * apart from array (in place goes to the general path). */
static PyObject *fast_reduce_scatter(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5)
        return PyErr_Format(PyExc_TypeError, "reduce_scatter takes 5 arguments"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    int code, out_code, op = op_code(args[3]), rc, err;
    Py_buffer in, out;
    if (!comm || op < 0 || !view_of(args[1], &in, 0, &code))
        return not_handled();
    const int size = shmtopo_comm_size(comm), rank = shmtopo_comm_rank(comm);
    if (!view_of(args[2], &out, 1, &out_code)) {
        PyBuffer_Release(&in);
        return not_handled();
    }
    PyObject *result = NULL;
    size_t *counts = NULL;
    if (out_code != code || overlaps(&in, &out)) {
        /* the general path explains */
    } else if (args[4] == Py_None) {
        if (in.ndim > 0 && in.shape[0] % size == 0 && out.len * size == in.len) {
            CORE_CALL(comm, NULL, shmtopo_reduce_scatter(comm, in.buf, out.buf, count_of(&out, code), code, op));
            result = rc < 0 ? failed(NULL, err) : new_ref(args[2]);
        }
    } else if ((counts = PyMem_Malloc((size_t)size * sizeof(size_t))) == NULL) {
        PyErr_NoMemory();
    } else if (sizes_of(args[4], size, counts)) {
        size_t total = 0;
        int r = 0;
        for (; r < size && counts[r] <= count_of(&in, code) - total; r++) /* no sum past the input */
            total += counts[r];
        if (r == size && total == count_of(&in, code) && counts[rank] == count_of(&out, code)) {
            CORE_CALL(comm, NULL, shmtopo_reduce_scatterv(comm, in.buf, out.buf, counts, code, op));
            result = rc < 0 ? failed(NULL, err) : new_ref(args[2]);
        }
    }
    PyMem_Free(counts);
    PyBuffer_Release(&in);
    PyBuffer_Release(&out);
    return result || PyErr_Occurred() ? result : not_handled();
}

/* The lower-case v-variants: arrays as the entries above take them, counts
 * and displs as layout_of reads them, out given and apart from the input
 * (in place, a new result and the rest go to the general path, which does
 * them or explains). The root's own count must be its array's length. */

/* A v-variant's layout into c (counts, then displs: 2 * size) and its vector
 * array (the gathers' out, scatterv's input) in v: of `code`, reaching every
 * block of the layout, apart from `own`, which holds this rank's count; 0
 * with v not held otherwise. */
static int v_layout(PyObject *counts, PyObject *displs, PyObject *vector, int writable, const Py_buffer *own,
                    int code, int size, int rank, size_t *c, Py_buffer *v)
{
    int vector_code;
    if (!layout_of(counts, displs, size, c, c + size) || !view_of(vector, v, writable, &vector_code))
        return 0;
    if (vector_code == code && c[rank] == count_of(own, code) && layout_end(c, c + size, size) <= count_of(v, code)
        && !overlaps(own, v))
        return 1;
    PyBuffer_Release(v);
    return 0;
}

/* gatherv (scatter 0) and scatterv (1): (handle, array, counts, displs,
 * root, out). Off the root one array: gatherv's input, scatterv's out; at
 * the root also the vector (gatherv's out, scatterv's input) and the layout.
 * Returns out, gatherv True off the root, or None. */
static PyObject *fast_v_rooted(PyObject *const *args, Py_ssize_t nargs, int scatter)
{
    if (nargs != 6)
        return PyErr_Format(PyExc_TypeError, "%s takes 6 arguments", scatter ? "scatterv" : "gatherv"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    PyObject *own_arg = args[scatter ? 5 : 1], *vector = args[scatter ? 1 : 5];
    int code, root, rc, err;
    Py_buffer own, v = {0};
    if (!comm || (root = lower_root_in(args[4], comm)) < 0 || !view_of(own_arg, &own, scatter, &code))
        return not_handled();
    const int size = shmtopo_comm_size(comm), rank = shmtopo_comm_rank(comm);
    const size_t count = count_of(&own, code);
    size_t *c = NULL;
    if (rank == root) {
        if (!(c = PyMem_Malloc(2 * (size_t)size * sizeof(size_t)))) {
            PyBuffer_Release(&own);
            return PyErr_NoMemory();
        }
        if (!v_layout(args[2], args[3], vector, !scatter, &own, code, size, rank, c, &v)) {
            PyMem_Free(c);
            PyBuffer_Release(&own);
            return not_handled();
        }
    }
    const size_t *d = c ? c + size : NULL;
    CORE_CALL(comm, NULL, scatter ? shmtopo_scatterv(comm, v.buf, c, d, own.buf, count, code, root)
                                  : shmtopo_gatherv(comm, own.buf, count, v.buf, c, d, code, root));
    if (c)
        PyBuffer_Release(&v);
    PyMem_Free(c);
    PyBuffer_Release(&own);
    return rc < 0 ? failed(NULL, err) : new_ref(scatter || rank == root ? args[5] : Py_True);
}

/* gatherv(handle, array, counts, displs, root, out) -> out on the root, True
 * elsewhere | None (counts, displs and out are read on the root only) */
static PyObject *fast_gatherv(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return fast_v_rooted(args, nargs, 0);
}

/* scatterv(handle, array, counts, displs, root, out) -> out | None (array,
 * counts and displs are read on the root only) */
static PyObject *fast_scatterv(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return fast_v_rooted(args, nargs, 1);
}

/* allgatherv(handle, array, counts, displs, out) -> out | None */
static PyObject *fast_allgatherv(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5)
        return PyErr_Format(PyExc_TypeError, "allgatherv takes 5 arguments"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    int code, rc, err;
    Py_buffer in, out;
    if (!comm || !view_of(args[1], &in, 0, &code))
        return not_handled();
    const int size = shmtopo_comm_size(comm), rank = shmtopo_comm_rank(comm);
    size_t *c = PyMem_Malloc(2 * (size_t)size * sizeof(size_t));
    if (!c) {
        PyBuffer_Release(&in);
        return PyErr_NoMemory();
    }
    PyObject *result = NULL;
    if (v_layout(args[2], args[3], args[4], 1, &in, code, size, rank, c, &out)) {
        CORE_CALL(comm, NULL, shmtopo_allgatherv(comm, in.buf, c[rank], out.buf, c, c + size, code));
        result = rc < 0 ? failed(NULL, err) : new_ref(args[4]);
        PyBuffer_Release(&out);
    }
    PyMem_Free(c);
    PyBuffer_Release(&in);
    return result || PyErr_Occurred() ? result : not_handled();
}

/* alltoallv(handle, array, sendcounts, sdispls, recvcounts, rdispls, out) -> out | None */
static PyObject *fast_alltoallv(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7)
        return PyErr_Format(PyExc_TypeError, "alltoallv takes 7 arguments"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    int code, out_code, rc, err;
    Py_buffer in, out;
    if (!comm || !view_of(args[1], &in, 0, &code))
        return not_handled();
    const int size = shmtopo_comm_size(comm);
    size_t *sc = PyMem_Malloc(4 * (size_t)size * sizeof(size_t));
    if (!sc) {
        PyBuffer_Release(&in);
        return PyErr_NoMemory();
    }
    size_t *sd = sc + size, *rcs = sd + size, *rd = rcs + size;
    PyObject *result = NULL;
    if (layout_of(args[2], args[3], size, sc, sd) && layout_of(args[4], args[5], size, rcs, rd)
        && view_of(args[6], &out, 1, &out_code)) {
        if (out_code == code && layout_end(sc, sd, size) <= count_of(&in, code)
            && layout_end(rcs, rd, size) <= count_of(&out, code) && !overlaps(&in, &out)) {
            CORE_CALL(comm, NULL, shmtopo_alltoallv(comm, in.buf, sc, sd, out.buf, rcs, rd, code));
            result = rc < 0 ? failed(NULL, err) : new_ref(args[6]);
        }
        PyBuffer_Release(&out);
    }
    PyMem_Free(sc);
    PyBuffer_Release(&in);
    return result || PyErr_Occurred() ? result : not_handled();
}

/* barrier(handle) -> True | None (handle 0: not a live single-node comm) */
static PyObject *fast_barrier(PyObject *self, PyObject *handle)
{
    shmtopo_comm_t *comm = comm_of(handle);
    if (!comm)
        Py_RETURN_NONE;
    int rc, err;
    CORE_CALL(comm, NULL, shmtopo_barrier(comm));
    if (rc < 0)
        return failed(NULL, err);
    Py_RETURN_TRUE;
}

/* claim(comm, win), unclaim(comm, win): the general path's calls hold the
 * comm and the window (either address may be 0) as the fast entries do, and
 * take them here, with the GIL, for the reason given at CORE_CALL. */
static PyObject *claim(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2)
        return PyErr_Format(PyExc_TypeError, "claim takes 2 arguments"), NULL;
    if (shmtopo_call_begin(comm_of(args[0]), (shmtopo_win_t *)comm_of(args[1]), NULL) < 0)
        return failed(NULL, errno);
    Py_RETURN_NONE;
}

static PyObject *unclaim(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2)
        return PyErr_Format(PyExc_TypeError, "unclaim takes 2 arguments"), NULL;
    shmtopo_call_end(comm_of(args[0]), (shmtopo_win_t *)comm_of(args[1]));
    Py_RETURN_NONE;
}

/* start(handle, request): one start of a persistent request on the comm at
 * handle (shmtopo_request_start), holding the comm as the entries above. */
static PyObject *start(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2)
        return PyErr_Format(PyExc_TypeError, "start takes 2 arguments"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    shmtopo_request_t *request = PyLong_AsVoidPtr(args[1]);
    if (!request && PyErr_Occurred())
        return NULL;
    int rc, err;
    CORE_CALL(comm, NULL, shmtopo_request_start(request));
    if (rc < 0)
        return failed(NULL, err);
    Py_RETURN_NONE;
}

/* place(handle, windows, array) -> (window, offset) | None: the window of
 * `windows` whose part of this rank holds `array` (C-contiguous, from
 * bound.window_min bytes), found by the rule the fast entries follow, so
 * the general path asks here instead of deciding again. */
static PyObject *fast_place(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3)
        return PyErr_Format(PyExc_TypeError, "place takes 3 arguments"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    Py_buffer view;
    if (!comm || PyObject_GetBuffer(args[2], &view, PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    shmtopo_win_t *win = NULL;
    size_t offset = 0;
    enum place place = place_of(args[1], comm, &view, &win, &offset);
    PyBuffer_Release(&view);
    if (place != WINDOWED)
        Py_RETURN_NONE;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(args[1]); i++) {
        PyObject *w = PyList_GET_ITEM(args[1], i);
        if (PyObject_TypeCheck(w, &NativeWindowType) && ((NativeWindow *)w)->win == win)
            return Py_BuildValue("(On)", w, (Py_ssize_t)offset);
    }
    Py_RETURN_NONE;
}

/* bind(ndarray, empty_like, ops, window_min, dtypes, last_error, value_error):
 * numpy's type and constructor, the op-name table, the size from which an
 * array in a window takes the window path, the dtypes
 * in shmtopo_dtype order, the maker of failures' exceptions and the class of
 * bad arguments' ones. The native functions need no binding: they are linked. */
static PyObject *bind(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7)
        return PyErr_Format(PyExc_TypeError, "bind takes 7 arguments"), NULL;
    if (!PyType_Check(args[0]) || !PyDict_Check(args[2]))
        return PyErr_Format(PyExc_TypeError, "bind: expected a type and a dict"), NULL;
    Py_XSETREF(bound.ndarray, new_ref(args[0]));
    Py_XSETREF(bound.empty_like, new_ref(args[1]));
    Py_XSETREF(bound.ops, new_ref(args[2]));
    forget_all(ops_kept);
    bound.window_min = PyLong_AsSsize_t(args[3]);
    if (PyErr_Occurred())
        return NULL;
    if (!PyTuple_Check(args[4]) || PyTuple_GET_SIZE(args[4]) != NDTYPES)
        return PyErr_Format(PyExc_TypeError, "bind: expected a tuple of %d dtypes", NDTYPES), NULL;
    last_dtype = NULL;
    for (int i = 0; i < NDTYPES; i++)
        Py_XSETREF(bound.dtypes[i], new_ref(PyTuple_GET_ITEM(args[4], i)));
    if (!bound.dtype_name && !(bound.dtype_name = PyUnicode_InternFromString("dtype")))
        return NULL;
    if (!PyCallable_Check(args[5]))
        return PyErr_Format(PyExc_TypeError, "bind: last_error must be callable"), NULL;
    Py_XSETREF(bound.last_error, new_ref(args[5]));
    if (!PyCallable_Check(args[6]))
        return PyErr_Format(PyExc_TypeError, "bind: value_error must be callable"), NULL;
    Py_XSETREF(bound.value_error, new_ref(args[6]));
    Py_RETURN_NONE;
}

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

/* The op's core code where MPI defines it on the datatype (index `type`), else -1. */
static int accel_op(PyObject *op, int type)
{
    Py_ssize_t n = accel.ops ? PyTuple_GET_SIZE(accel.ops) : 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PyTuple_GET_ITEM(accel.ops, i);
        if (PyTuple_GET_ITEM(pair, 0) == op) {
            int opc = (int)PyLong_AsLong(PyTuple_GET_ITEM(pair, 1));
            return accel.masks[type] & (1u << opc) ? opc : -1;
        }
    }
    return -1;
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

/* accel_allreduce(handle, windows, sendbuf, recvbuf, op) -> True | None
 * (windows: the comm's list of its Windows, as for allreduce) */
static PyObject *accel_allreduce(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5)
        return PyErr_Format(PyExc_TypeError, "accel_allreduce takes 5 arguments"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    int op;
    struct msg in, out;
    shmtopo_win_t *win = NULL;
    size_t offset = 0;
    if (!comm || !accel_in_out(args[2], args[3], &in, &out))
        Py_RETURN_NONE;
    enum place place = place_of(args[1], comm, &in.at, &win, &offset);
    if (place == UNKNOWN || (op = accel_op(args[4], in.type)) < 0
        || (place == WINDOWED && !apart_or_same(&in.at, &out.at))) {
        msg_release(&in);
        msg_release(&out);
        Py_RETURN_NONE;
    }
    int rc = reduce_at(place, comm, win, offset, &in.at, out.at.buf, in.code, op, -1), err = errno;
    msg_release(&in);
    msg_release(&out);
    return accel_done(rc, err);
}

/* accel_reduce(handle, windows, sendbuf, recvbuf, op, root) -> True | None
 * (recvbuf is read on the root only, as mpi4py does, where sendbuf may be IN_PLACE) */
static PyObject *accel_reduce(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6)
        return PyErr_Format(PyExc_TypeError, "accel_reduce takes 6 arguments"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    int op, root;
    struct msg in, out = {0};
    shmtopo_win_t *win = NULL;
    size_t offset = 0;
    if (!comm || (root = root_in(args[5], comm)) < 0)
        Py_RETURN_NONE;
    const int is_root = root == shmtopo_comm_rank(comm);
    if (is_root ? !accel_in_out(args[2], args[3], &in, &out) : !accel_msg(args[2], 0, 1, &in))
        Py_RETURN_NONE;
    enum place place = place_of(args[1], comm, &in.at, &win, &offset);
    if (place == UNKNOWN || (op = accel_op(args[4], in.type)) < 0
        || (place == WINDOWED && !apart_or_same(&in.at, &out.at))) {
        msg_release(&in);
        msg_release(&out);
        Py_RETURN_NONE;
    }
    int rc = reduce_at(place, comm, win, offset, &in.at, out.at.buf, in.code, op, root), err = errno;
    msg_release(&in);
    msg_release(&out);
    return accel_done(rc, err);
}

/* accel_bcast(handle, windows, buf, root) -> True | None (a read-only root
 * buffer, which the planner copies, is not plain) */
static PyObject *accel_bcast(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4)
        return PyErr_Format(PyExc_TypeError, "accel_bcast takes 4 arguments"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    int root;
    struct msg buf;
    shmtopo_win_t *win = NULL;
    size_t offset = 0;
    if (!comm || (root = root_in(args[3], comm)) < 0 || !accel_msg(args[2], 1, 1, &buf))
        Py_RETURN_NONE;
    enum place place = place_of(args[1], comm, &buf.at, &win, &offset);
    if (place == UNKNOWN) {
        msg_release(&buf);
        Py_RETURN_NONE;
    }
    int rc = bcast_at(place, comm, win, offset, &buf.at, buf.code, root), err = errno;
    msg_release(&buf);
    return accel_done(rc, err);
}

/* accel_allgather(handle, windows, sendbuf, recvbuf) -> True | None
 * (sendbuf IN_PLACE: this rank's block of recvbuf) */
static PyObject *accel_allgather(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4)
        return PyErr_Format(PyExc_TypeError, "accel_allgather takes 4 arguments"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    struct msg in, out;
    shmtopo_win_t *win = NULL;
    size_t offset = 0;
    const int size = comm ? shmtopo_comm_size(comm) : 0;
    if (!comm || !accel_msg(args[3], 1, size, &out)) /* recvbuf: a block per rank */
        Py_RETURN_NONE;
    if (accel_in_place(args[2])) {
        accel_block(&out, shmtopo_comm_rank(comm), size, &in);
    } else if (!accel_msg(args[2], 0, 1, &in)) {
        msg_release(&out);
        Py_RETURN_NONE;
    }
    enum place place = place_of(args[1], comm, &in.at, &win, &offset);
    if (place == UNKNOWN || out.code != in.code || out.at.len != in.at.len * size
        || (place == WINDOWED && overlaps(&in.at, &out.at))) {
        msg_release(&in);
        msg_release(&out);
        Py_RETURN_NONE;
    }
    int rc = allgather_at(place, comm, win, offset, &in.at, &out.at, in.code), err = errno;
    msg_release(&in);
    msg_release(&out);
    return accel_done(rc, err);
}

/* accel_alltoall(handle, sendbuf, recvbuf) -> True | None (send and recv a
 * block per rank; the same buffer, or apart) */
static PyObject *accel_alltoall(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3)
        return PyErr_Format(PyExc_TypeError, "accel_alltoall takes 3 arguments"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    struct msg in, out;
    const int size = comm ? shmtopo_comm_size(comm) : 0;
    if (!comm || !accel_msg(args[1], 0, size, &in))
        Py_RETURN_NONE;
    if (!accel_msg(args[2], 1, size, &out)) {
        msg_release(&in);
        Py_RETURN_NONE;
    }
    if (out.code != in.code || out.at.len != in.at.len || !apart_or_same(&in.at, &out.at)) {
        msg_release(&in);
        msg_release(&out);
        Py_RETURN_NONE;
    }
    int rc, err;
    const size_t count = (size_t)in.at.len / shmtopo_dtype_size(in.code) / (size_t)size;
    CORE_CALL(comm, NULL, shmtopo_alltoall(comm, in.at.buf, out.at.buf, count, in.code));
    msg_release(&in);
    msg_release(&out);
    return accel_done(rc, err);
}

/* A rooted call's root side: `whole`, a block per rank, and `one`, the
 * root's own block (IN_PLACE: its block of whole), of one type, apart from
 * each other; 0 with nothing held otherwise. */
static int accel_rooted(PyObject *whole_spec, int whole_writable, PyObject *one_spec, int one_writable, int size,
                        int root, struct msg *whole, struct msg *one)
{
    if (!accel_msg(whole_spec, whole_writable, size, whole))
        return 0;
    if (accel_in_place(one_spec)) {
        accel_block(whole, root, size, one);
        return 1;
    }
    if (!accel_msg(one_spec, one_writable, 1, one)) {
        msg_release(whole);
        return 0;
    }
    if (one->code != whole->code || whole->at.len != one->at.len * size || overlaps(&one->at, &whole->at)) {
        msg_release(one);
        msg_release(whole);
        return 0;
    }
    return 1;
}

/* accel_gather(handle, sendbuf, recvbuf, root) -> True | None (recvbuf is read on the root only) */
static PyObject *accel_gather(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4)
        return PyErr_Format(PyExc_TypeError, "accel_gather takes 4 arguments"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    struct msg in, out = {0};
    int root;
    if (!comm || (root = root_in(args[3], comm)) < 0)
        Py_RETURN_NONE;
    const int size = shmtopo_comm_size(comm), is_root = root == shmtopo_comm_rank(comm);
    if (is_root ? !accel_rooted(args[2], 1, args[1], 0, size, root, &out, &in) : !accel_msg(args[1], 0, 1, &in))
        Py_RETURN_NONE;
    int rc, err;
    const size_t count = (size_t)in.at.len / shmtopo_dtype_size(in.code);
    CORE_CALL(comm, NULL, shmtopo_gather(comm, in.at.buf, is_root ? out.at.buf : NULL, count, in.code, root));
    msg_release(&in);
    msg_release(&out);
    return accel_done(rc, err);
}

/* accel_scatter(handle, sendbuf, recvbuf, root) -> True | None (sendbuf is read on the root only) */
static PyObject *accel_scatter(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4)
        return PyErr_Format(PyExc_TypeError, "accel_scatter takes 4 arguments"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    struct msg in = {0}, out;
    int root;
    if (!comm || (root = root_in(args[3], comm)) < 0)
        Py_RETURN_NONE;
    const int size = shmtopo_comm_size(comm), is_root = root == shmtopo_comm_rank(comm);
    if (is_root ? !accel_rooted(args[1], 0, args[2], 1, size, root, &in, &out) : !accel_msg(args[2], 1, 1, &out))
        Py_RETURN_NONE;
    int rc, err;
    const size_t count = (size_t)out.at.len / shmtopo_dtype_size(out.code);
    CORE_CALL(comm, NULL, shmtopo_scatter(comm, is_root ? in.at.buf : NULL, out.at.buf, count, out.code, root));
    msg_release(&in);
    msg_release(&out);
    return accel_done(rc, err);
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

/* accel_alltoallv(handle, sendbuf, recvbuf) -> True | None (apart) */
static PyObject *accel_alltoallv(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3)
        return PyErr_Format(PyExc_TypeError, "accel_alltoallv takes 3 arguments"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    if (!comm)
        Py_RETURN_NONE;
    const int size = shmtopo_comm_size(comm);
    size_t *sizes = PyMem_Malloc(4 * (size_t)size * sizeof(size_t));
    if (!sizes)
        return PyErr_NoMemory();
    size_t *sc = sizes, *sd = sc + size, *rc_ = sd + size, *rd = rc_ + size;
    struct msg in, out;
    PyObject *result = NULL;
    int ran = 0;
    if (accel_vector(args[1], 0, size, &in, sc, sd)) {
        if (accel_vector(args[2], 1, size, &out, rc_, rd)) {
            if (out.code == in.code && !overlaps(&in.at, &out.at)) {
                int rc, err;
                CORE_CALL(comm, NULL, shmtopo_alltoallv(comm, in.at.buf, sc, sd, out.at.buf, rc_, rd, in.code));
                ran = 1;
                result = accel_done(rc, err);
            }
            msg_release(&out);
        }
        msg_release(&in);
    }
    PyMem_Free(sizes);
    return ran ? result : new_ref(Py_None);
}

/* A v-variant's vector side and this rank's own block: `vector` (counts
 * and displs in sizes, 2n) and `own`, of its type and of counts[rank]
 * entries, apart from it (the v-gathers receive into the vector, Scatterv
 * sends from it); 0 with nothing held otherwise. */
static int accel_v_and_own(PyObject *vector, int vector_writable, PyObject *own, int own_writable, int size,
                           int rank, size_t *sizes, struct msg *v, struct msg *o)
{
    if (!accel_vector(vector, vector_writable, size, v, sizes, sizes + size))
        return 0;
    if (!accel_msg(own, own_writable, 1, o)) {
        msg_release(v);
        return 0;
    }
    if (o->code != v->code || (size_t)o->at.len != sizes[rank] * shmtopo_dtype_size(o->code)
        || overlaps(&o->at, &v->at)) {
        msg_release(o);
        msg_release(v);
        return 0;
    }
    return 1;
}

/* accel_allgatherv(handle, sendbuf, recvbuf) -> True | None */
static PyObject *accel_allgatherv(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3)
        return PyErr_Format(PyExc_TypeError, "accel_allgatherv takes 3 arguments"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    if (!comm)
        Py_RETURN_NONE;
    const int size = shmtopo_comm_size(comm), rank = shmtopo_comm_rank(comm);
    size_t *sizes = PyMem_Malloc(2 * (size_t)size * sizeof(size_t));
    if (!sizes)
        return PyErr_NoMemory();
    struct msg in, out;
    PyObject *result = NULL;
    int ran = 0;
    if (accel_v_and_own(args[2], 1, args[1], 0, size, rank, sizes, &out, &in)) {
        int rc, err;
        CORE_CALL(comm, NULL, shmtopo_allgatherv(comm, in.at.buf, sizes[rank], out.at.buf, sizes, sizes + size,
                                                 in.code));
        ran = 1;
        result = accel_done(rc, err);
        msg_release(&in);
        msg_release(&out);
    }
    PyMem_Free(sizes);
    return ran ? result : new_ref(Py_None);
}

/* Gatherv (scatter 0) and Scatterv (1): off the root one message (Gatherv's
 * sendbuf, Scatterv's recvbuf); at the root the vector (Gatherv's recvbuf,
 * Scatterv's sendbuf) and the root's own block. */
static PyObject *accel_v_rooted(PyObject *const *args, Py_ssize_t nargs, int scatter)
{
    if (nargs != 4)
        return PyErr_Format(PyExc_TypeError, "%s takes 4 arguments", scatter ? "accel_scatterv" : "accel_gatherv"),
               NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    int root;
    if (!comm || (root = root_in(args[3], comm)) < 0)
        Py_RETURN_NONE;
    const int size = shmtopo_comm_size(comm), rank = shmtopo_comm_rank(comm);
    PyObject *vector = args[scatter ? 1 : 2], *own = args[scatter ? 2 : 1];
    struct msg v, o;
    int rc, err;
    if (rank != root) {
        if (!accel_msg(own, scatter, 1, &o))
            Py_RETURN_NONE;
        const size_t count = (size_t)o.at.len / shmtopo_dtype_size(o.code);
        CORE_CALL(comm, NULL, scatter ? shmtopo_scatterv(comm, NULL, NULL, NULL, o.at.buf, count, o.code, root)
                                      : shmtopo_gatherv(comm, o.at.buf, count, NULL, NULL, NULL, o.code, root));
        msg_release(&o);
        return accel_done(rc, err);
    }
    size_t *sizes = PyMem_Malloc(2 * (size_t)size * sizeof(size_t));
    if (!sizes)
        return PyErr_NoMemory();
    PyObject *result = NULL;
    int ran = 0;
    if (accel_v_and_own(vector, !scatter, own, scatter, size, rank, sizes, &v, &o)) {
        const size_t *counts = sizes, *displs = sizes + size;
        CORE_CALL(comm, NULL,
                  scatter ? shmtopo_scatterv(comm, v.at.buf, counts, displs, o.at.buf, counts[rank], o.code, root)
                          : shmtopo_gatherv(comm, o.at.buf, counts[rank], v.at.buf, counts, displs, o.code, root));
        ran = 1;
        result = accel_done(rc, err);
        msg_release(&v);
        msg_release(&o);
    }
    PyMem_Free(sizes);
    return ran ? result : new_ref(Py_None);
}

/* accel_gatherv(handle, sendbuf, recvbuf, root) -> True | None (recvbuf is read on the root only) */
static PyObject *accel_gatherv(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return accel_v_rooted(args, nargs, 0);
}

/* accel_scatterv(handle, sendbuf, recvbuf, root) -> True | None (sendbuf is read on the root only) */
static PyObject *accel_scatterv(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return accel_v_rooted(args, nargs, 1);
}

/* accel_scan(handle, sendbuf, recvbuf, op, exclusive) -> True | None (in
 * place, or apart; exclusive: Exscan, rank 0's recvbuf left as it is) */
static PyObject *accel_scan(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5)
        return PyErr_Format(PyExc_TypeError, "accel_scan takes 5 arguments"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    struct msg in, out;
    int op;
    if (!comm || !accel_in_out(args[1], args[2], &in, &out))
        Py_RETURN_NONE;
    if ((op = accel_op(args[3], in.type)) < 0 || !apart_or_same(&in.at, &out.at)) {
        msg_release(&in);
        msg_release(&out);
        Py_RETURN_NONE;
    }
    int rc, err;
    CORE_CALL(comm, NULL, shmtopo_scan(comm, in.at.buf, out.at.buf, (size_t)in.at.len / shmtopo_dtype_size(in.code),
                                       in.code, op, PyObject_IsTrue(args[4]) == 1));
    msg_release(&in);
    msg_release(&out);
    return accel_done(rc, err);
}

/* accel_reduce_scatter_block(handle, sendbuf, recvbuf, op) -> True | None
 * (sendbuf: a block per rank, of recvbuf's datatype and length, apart from it) */
static PyObject *accel_reduce_scatter_block(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4)
        return PyErr_Format(PyExc_TypeError, "accel_reduce_scatter_block takes 4 arguments"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    struct msg in, out;
    int op;
    const int size = comm ? shmtopo_comm_size(comm) : 0;
    if (!comm || !accel_msg(args[2], 1, 1, &out))
        Py_RETURN_NONE;
    if (!accel_msg(args[1], 0, size, &in)) {
        msg_release(&out);
        Py_RETURN_NONE;
    }
    if (in.type != out.type || in.at.len != out.at.len * size || overlaps(&in.at, &out.at)
        || (op = accel_op(args[3], out.type)) < 0) {
        msg_release(&in);
        msg_release(&out);
        Py_RETURN_NONE;
    }
    int rc, err;
    CORE_CALL(comm, NULL, shmtopo_reduce_scatter(comm, in.at.buf, out.at.buf,
                                                 (size_t)out.at.len / shmtopo_dtype_size(out.code), out.code, op));
    msg_release(&in);
    msg_release(&out);
    return accel_done(rc, err);
}

/* accel_reduce_scatter(handle, sendbuf, recvbuf, recvcounts, op) -> True |
 * None: recvcounts given, sendbuf of exactly their sum and recvbuf of this
 * rank's count, apart (in place and the rest: the planner) */
static PyObject *accel_reduce_scatter(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5)
        return PyErr_Format(PyExc_TypeError, "accel_reduce_scatter takes 5 arguments"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    if (!comm || args[3] == Py_None)
        Py_RETURN_NONE;
    const int size = shmtopo_comm_size(comm), rank = shmtopo_comm_rank(comm);
    size_t *counts = PyMem_Malloc((size_t)size * sizeof(size_t));
    if (!counts)
        return PyErr_NoMemory();
    struct msg in, out;
    PyObject *result = NULL;
    int ran = 0, op;
    if (sizes_of(args[3], size, counts) && accel_msg(args[2], 1, 1, &out)) {
        if (accel_msg(args[1], 0, 1, &in)) {
            size_t total = 0;
            for (int p = 0; p < size; p++)
                total += counts[p];
            const size_t esz = shmtopo_dtype_size(out.code);
            if (in.type == out.type && (size_t)out.at.len == counts[rank] * esz && (size_t)in.at.len == total * esz
                && !overlaps(&in.at, &out.at) && (op = accel_op(args[4], out.type)) >= 0) {
                int rc, err;
                CORE_CALL(comm, NULL, shmtopo_reduce_scatterv(comm, in.at.buf, out.at.buf, counts, out.code, op));
                ran = 1;
                result = accel_done(rc, err);
            }
            msg_release(&in);
        }
        msg_release(&out);
    }
    PyMem_Free(counts);
    return ran ? result : new_ref(Py_None);
}

/* accel_barrier(handle) -> True | None */
static PyObject *accel_barrier(PyObject *self, PyObject *handle)
{
    shmtopo_comm_t *comm = comm_of(handle);
    if (!comm)
        Py_RETURN_NONE;
    int rc, err;
    CORE_CALL(comm, NULL, shmtopo_barrier(comm));
    return accel_done(rc, err);
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

/* Where `slot` lies in instances of `type`: its member descriptor's offset. */
static __attribute__((noinline)) void slot_find(PyTypeObject *type, slot_t *slot)
{
    PyObject *descr = slot->name ? _PyType_Lookup(type, slot->name) : NULL;
    Py_ssize_t offset = 0;
    if (descr && Py_IS_TYPE(descr, &PyMemberDescr_Type)) {
        const PyMemberDef *m = ((PyMemberDescrObject *)descr)->d_member;
        if (m->type == T_OBJECT_EX)
            offset = m->offset;
    }
    Py_XSETREF(slot->type, (PyTypeObject *)new_ref((PyObject *)type)); /* its address stays its own */
    slot->version = type->tp_version_tag; /* the lookup tagged it; 0: look up every time */
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

/* ---- NativeRequest: the base of shmtopo's persistent requests ------------
 *
 * request.start() is a C method: one call into the core with no Python
 * frame, as the plain collectives are. It holds the comm (`_comm`, a Comm)
 * and the native request (`_address`, 0 once freed); while the comm takes
 * the fast entries and the request is there, start() runs it, else it
 * hands over to the Python method `_start_general`, which says why not. */
typedef struct {
    PyObject_HEAD
    PyObject *comm;               /* _comm */
    shmtopo_request_t *request;   /* _address */
} NativeRequest;

static PyObject *request_start(PyObject *self, PyObject *unused)
{
    NativeRequest *r = (NativeRequest *)self;
    shmtopo_comm_t *comm = r->comm && PyObject_TypeCheck(r->comm, &NativeCommType) &&
                           ((NativeComm *)r->comm)->fast_handle ? comm_of(((NativeComm *)r->comm)->fast_handle) : NULL;
    if (!comm || !r->request)
        return PyObject_CallMethod(self, "_start_general", NULL);
    int rc, err;
    CORE_CALL(comm, NULL, shmtopo_request_start(r->request));
    if (rc < 0)
        return failed(NULL, err);
    Py_RETURN_NONE;
}

static int request_traverse(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(((NativeRequest *)self)->comm);
    return 0;
}

static int request_clear(PyObject *self)
{
    Py_CLEAR(((NativeRequest *)self)->comm);
    return 0;
}

static void request_dealloc(PyObject *self)
{
    PyObject_GC_UnTrack(self);
    request_clear(self);
    Py_TYPE(self)->tp_free(self);
}

static PyMethodDef request_methods[] = {
    {"start", request_start, METH_NOARGS, "start()\n--\n\nCollective: run the collective once on the request's arrays."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef request_members[] = {
    {"_comm", T_OBJECT, offsetof(NativeRequest, comm), 0, "the comm the request runs on"},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef request_getset[] = {
    {"_address", get_pointer, set_pointer, "the native request's address (0: freed)",
     POINTER_FIELD(NativeRequest, request)},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject NativeRequestType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "shmtopo._fastpath.NativeRequest",
    .tp_basicsize = sizeof(NativeRequest),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The native half of a persistent request: its start() (internal).",
    .tp_methods = request_methods,
    .tp_members = request_members,
    .tp_getset = request_getset,
    .tp_traverse = request_traverse,
    .tp_clear = request_clear,
    .tp_dealloc = request_dealloc,
    .tp_new = PyType_GenericNew,
};

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
    int params[4];           /* P_*: op defaults to the drop-in's SUM_DEFAULT, root to 0, recvcounts to None */
    int exclusive;           /* -1, or the entry's trailing flag (scan: 0, exscan: 1) */
} accel_call_t;

static PyObject *accel_barrier_entry(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return accel_barrier(self, args[0]);
}

#define SR P_SENDBUF, P_RECVBUF
static const accel_call_t accel_calls[NA] = {
    [A_BARRIER] = {"Barrier", accel_barrier_entry, NO_WINDOWS, 0, 0, {0}, -1},
    [A_BCAST] = {"Bcast", accel_bcast, FAST_WINDOWS, 2, 1, {P_BUF, P_ROOT}, -1},
    [A_REDUCE] = {"Reduce", accel_reduce, FAST_WINDOWS, 4, 2, {SR, P_OP, P_ROOT}, -1},
    [A_ALLREDUCE] = {"Allreduce", accel_allreduce, FAST_WINDOWS, 3, 2, {SR, P_OP}, -1},
    [A_ALLGATHER] = {"Allgather", accel_allgather, ALL_WINDOWS, 2, 2, {SR}, -1},
    [A_ALLTOALL] = {"Alltoall", accel_alltoall, NO_WINDOWS, 2, 2, {SR}, -1},
    [A_REDUCE_SCATTER_BLOCK] = {"Reduce_scatter_block", accel_reduce_scatter_block, NO_WINDOWS, 3, 2, {SR, P_OP}, -1},
    [A_GATHER] = {"Gather", accel_gather, NO_WINDOWS, 3, 2, {SR, P_ROOT}, -1},
    [A_SCATTER] = {"Scatter", accel_scatter, NO_WINDOWS, 3, 2, {SR, P_ROOT}, -1},
    [A_GATHERV] = {"Gatherv", accel_gatherv, NO_WINDOWS, 3, 2, {SR, P_ROOT}, -1},
    [A_SCATTERV] = {"Scatterv", accel_scatterv, NO_WINDOWS, 3, 2, {SR, P_ROOT}, -1},
    [A_ALLGATHERV] = {"Allgatherv", accel_allgatherv, NO_WINDOWS, 2, 2, {SR}, -1},
    [A_ALLTOALLV] = {"Alltoallv", accel_alltoallv, NO_WINDOWS, 2, 2, {SR}, -1},
    [A_REDUCE_SCATTER] = {"Reduce_scatter", accel_reduce_scatter, NO_WINDOWS, 4, 2, {SR, P_RECVCOUNTS, P_OP}, -1},
    [A_SCAN] = {"Scan", accel_scan, NO_WINDOWS, 3, 2, {SR, P_OP}, 0},
    [A_EXSCAN] = {"Exscan", accel_scan, NO_WINDOWS, 3, 2, {SR, P_OP}, 1},
};
#undef SR

typedef struct {
    PyObject_HEAD
    unsigned long long counts[NA];    /* the calls CommFast's methods ran in shared memory, by call */
    unsigned long long delegated[NA]; /* ... and handed to MPI at once (accel_mpi_only), by call */
} CallCounts;
static PyTypeObject CallCountsType;

#define UNMOVED_DESCRS 4

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

static PyMethodDef methods[] = {
    {"bind", (PyCFunction)(void (*)(void))bind, METH_FASTCALL, "Bind numpy, the op table, the window size rule and the error makers (shmtopo internal)."},
    {"allreduce", (PyCFunction)(void (*)(void))fast_allreduce, METH_FASTCALL, "allreduce(handle, windows, array, out, op)"},
    {"reduce", (PyCFunction)(void (*)(void))fast_reduce, METH_FASTCALL, "reduce(handle, windows, array, out, op, root, is_root)"},
    {"bcast", (PyCFunction)(void (*)(void))fast_bcast, METH_FASTCALL, "bcast(handle, windows, array, root)"},
    {"allgather", (PyCFunction)(void (*)(void))fast_allgather, METH_FASTCALL, "allgather(handle, windows, array, out, nranks)"},
    {"barrier", fast_barrier, METH_O, "barrier(handle) -> True | None"},
    {"alltoall", (PyCFunction)(void (*)(void))fast_alltoall, METH_FASTCALL, "alltoall(handle, array, out) -> out | None"},
    {"gather", (PyCFunction)(void (*)(void))fast_gather, METH_FASTCALL,
     "gather(handle, array, out, root) -> out on the root, True elsewhere | None"},
    {"scatter", (PyCFunction)(void (*)(void))fast_scatter, METH_FASTCALL, "scatter(handle, array, out, root) -> out | None"},
    {"gatherv", (PyCFunction)(void (*)(void))fast_gatherv, METH_FASTCALL,
     "gatherv(handle, array, counts, displs, root, out) -> out on the root, True elsewhere | None"},
    {"scatterv", (PyCFunction)(void (*)(void))fast_scatterv, METH_FASTCALL,
     "scatterv(handle, array, counts, displs, root, out) -> out | None"},
    {"allgatherv", (PyCFunction)(void (*)(void))fast_allgatherv, METH_FASTCALL,
     "allgatherv(handle, array, counts, displs, out) -> out | None"},
    {"alltoallv", (PyCFunction)(void (*)(void))fast_alltoallv, METH_FASTCALL,
     "alltoallv(handle, array, sendcounts, sdispls, recvcounts, rdispls, out) -> out | None"},
    {"scan", (PyCFunction)(void (*)(void))fast_scan, METH_FASTCALL,
     "scan(handle, array, out, op, exclusive) -> result | None"},
    {"reduce_scatter", (PyCFunction)(void (*)(void))fast_reduce_scatter, METH_FASTCALL,
     "reduce_scatter(handle, array, out, op, counts) -> out | None"},
    {"claim", (PyCFunction)(void (*)(void))claim, METH_FASTCALL,
     "claim(comm, win): this thread's calls only, until unclaim (EBUSY otherwise)"},
    {"unclaim", (PyCFunction)(void (*)(void))unclaim, METH_FASTCALL, "unclaim(comm, win)"},
    {"start", (PyCFunction)(void (*)(void))start, METH_FASTCALL, "start(handle, request): a persistent request's start"},
    {"place", (PyCFunction)(void (*)(void))fast_place, METH_FASTCALL, "place(handle, windows, array) -> (window, offset) | None"},
    {"bind_accelerate", (PyCFunction)(void (*)(void))bind_accelerate, METH_FASTCALL,
     "Bind the drop-in's op objects, datatypes and formats (shmtopo.accelerate internal)."},
    {"accel_allreduce", (PyCFunction)(void (*)(void))accel_allreduce, METH_FASTCALL,
     "accel_allreduce(handle, windows, sendbuf, recvbuf, op) -> True | None"},
    {"accel_reduce", (PyCFunction)(void (*)(void))accel_reduce, METH_FASTCALL,
     "accel_reduce(handle, windows, sendbuf, recvbuf, op, root) -> True | None"},
    {"accel_bcast", (PyCFunction)(void (*)(void))accel_bcast, METH_FASTCALL, "accel_bcast(handle, windows, buf, root) -> True | None"},
    {"accel_allgather", (PyCFunction)(void (*)(void))accel_allgather, METH_FASTCALL,
     "accel_allgather(handle, windows, sendbuf, recvbuf) -> True | None"},
    {"accel_alltoall", (PyCFunction)(void (*)(void))accel_alltoall, METH_FASTCALL,
     "accel_alltoall(handle, sendbuf, recvbuf) -> True | None"},
    {"accel_allgatherv", (PyCFunction)(void (*)(void))accel_allgatherv, METH_FASTCALL,
     "accel_allgatherv(handle, sendbuf, recvbuf) -> True | None"},
    {"accel_reduce_scatter", (PyCFunction)(void (*)(void))accel_reduce_scatter, METH_FASTCALL,
     "accel_reduce_scatter(handle, sendbuf, recvbuf, recvcounts, op) -> True | None"},
    {"accel_scatterv", (PyCFunction)(void (*)(void))accel_scatterv, METH_FASTCALL,
     "accel_scatterv(handle, sendbuf, recvbuf, root) -> True | None"},
    {"accel_gatherv", (PyCFunction)(void (*)(void))accel_gatherv, METH_FASTCALL,
     "accel_gatherv(handle, sendbuf, recvbuf, root) -> True | None"},
    {"accel_scan", (PyCFunction)(void (*)(void))accel_scan, METH_FASTCALL,
     "accel_scan(handle, sendbuf, recvbuf, op, exclusive) -> True | None"},
    {"accel_reduce_scatter_block", (PyCFunction)(void (*)(void))accel_reduce_scatter_block, METH_FASTCALL,
     "accel_reduce_scatter_block(handle, sendbuf, recvbuf, op) -> True | None"},
    {"accel_gather", (PyCFunction)(void (*)(void))accel_gather, METH_FASTCALL,
     "accel_gather(handle, sendbuf, recvbuf, root) -> True | None"},
    {"accel_scatter", (PyCFunction)(void (*)(void))accel_scatter, METH_FASTCALL,
     "accel_scatter(handle, sendbuf, recvbuf, root) -> True | None"},
    {"accel_alltoallv", (PyCFunction)(void (*)(void))accel_alltoallv, METH_FASTCALL,
     "accel_alltoallv(handle, sendbuf, recvbuf) -> True | None"},
    {"bind_window", (PyCFunction)(void (*)(void))bind_window, METH_FASTCALL,
     "Bind the accelerated windows' Python methods, op table and masks (shmtopo.accelerate internal)."},
    {"accel_barrier", accel_barrier, METH_O, "accel_barrier(handle) -> True | None"},
    {"bind_comm", bind_comm, METH_O, "Bind the general functions of NativeComm's methods (shmtopo.Comm internal)."},
    {"bind_comm_fast", (PyCFunction)(void (*)(void))bind_comm_fast, METH_FASTCALL,
     "Bind AcceleratedComm's methods and the op default for CommFast's (shmtopo.accelerate internal)."},
    {"bind_mpi_only", (PyCFunction)(void (*)(void))bind_mpi_only, METH_FASTCALL,
     "Bind what CommFast hands to MPI at once, and mpi4py's methods it calls (shmtopo.accelerate internal)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "shmtopo._fastpath",
    "Window collectives on plain numpy arrays without cffi's per-call costs (internal).",
    -1, methods,
};

PyMODINIT_FUNC PyInit__fastpath(void)
{
    if (PyType_Ready(&NativeWindowType) < 0 || PyType_Ready(&RmaStateType) < 0 || PyType_Ready(&WinFastType) < 0
        || PyType_Ready(&NativeCommType) < 0 || PyType_Ready(&CommFastType) < 0 || PyType_Ready(&CallCountsType) < 0
        || PyType_Ready(&NativeRequestType) < 0
        || comm_init_names() < 0)
        return NULL;
    for (int code = 0; code < NDTYPES; code++)
        element_size[code] = shmtopo_dtype_size(code);
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    Py_INCREF(&NativeWindowType);
    if (PyModule_AddObject(m, "NativeWindow", (PyObject *)&NativeWindowType) < 0) {
        Py_DECREF(&NativeWindowType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&RmaStateType);
    Py_INCREF(&WinFastType);
    Py_INCREF(&NativeCommType);
    Py_INCREF(&CommFastType);
    Py_INCREF(&CallCountsType);
    Py_INCREF(&NativeRequestType);
    if (PyModule_AddObject(m, "RmaState", (PyObject *)&RmaStateType) < 0
        || PyModule_AddObject(m, "WinFast", (PyObject *)&WinFastType) < 0
        || PyModule_AddObject(m, "NativeComm", (PyObject *)&NativeCommType) < 0
        || PyModule_AddObject(m, "CommFast", (PyObject *)&CommFastType) < 0
        || PyModule_AddObject(m, "CallCounts", (PyObject *)&CallCountsType) < 0
        || PyModule_AddObject(m, "NativeRequest", (PyObject *)&NativeRequestType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
