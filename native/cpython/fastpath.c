/* shmtopo._fastpath: the Python entry of small window collectives.
 *
 * A small allreduce costs about 0.4 us in shared memory, and going through
 * cffi (two ffi.from_buffer calls, dtype and op lookups) added 1-2 us of
 * Python on top. This module takes numpy arrays straight through the buffer
 * protocol and calls the native core directly. The declarations are the
 * core's own (shmtopo.h), and the core is the one libshmtopo.so that
 * shmtopo._native and C programs link too (found through the rpath
 * $ORIGIN/lib), so the process holds one copy of the core and of its
 * thread-local error state: the message of a failure here is the one
 * shmtopo.errors.last_error reads through cffi.
 *
 * Every function returns None, having done nothing, when the arguments are
 * not the plain case (exact ndarrays, C-contiguous, native byte order, a
 * supported type, below the size limit, a matching out); the caller then
 * takes the general Python path, which also explains what is wrong. A
 * failure of the collective itself raises shmtopo's own exception, made by
 * the Python function bound for it (shmtopo.errors.last_error). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
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
    Py_ssize_t max_bytes;   /* larger arrays take the general path (window detection) */
} bound;

/* Calls into the core keep the GIL while their waits are short: dropping
 * and retaking it costs more than a fence whose peer is already there. The
 * core drops it through release_gil at the first wait that lasts
 * (shmtopo_release_while_waiting); CORE_CALL takes it back after the call.
 * `rc` and `err` (errno, read before the GIL is retaken) are the caller's. */
static _Thread_local PyThreadState *released;

static void release_gil(void)
{
    released = PyEval_SaveThread();
}

#define CORE_CALL(call)                                 \
    do {                                                \
        shmtopo_release_while_waiting(release_gil);     \
        rc = call;                                      \
        err = errno;                                    \
        shmtopo_release_while_waiting(NULL);            \
        if (released) {                                 \
            PyThreadState *state = released;            \
            released = NULL;                            \
            PyEval_RestoreThread(state);                \
        }                                               \
    } while (0)

static PyObject *new_ref(PyObject *o) /* Py_NewRef, which Python 3.9 lacks */
{
    Py_INCREF(o);
    return o;
}

/* The element type's shmtopo_dtype code: numpy's built-in native-order
 * dtypes are singletons, so an identity scan of the ones bound at start finds
 * them (asking the buffer for its format string would make numpy build that
 * string on every call). -1 for anything else: the general path decides. */
static int dtype_code(PyObject *array)
{
    PyObject *dtype = PyObject_GetAttr(array, bound.dtype_name);
    if (!dtype) {
        PyErr_Clear();
        return -1;
    }
    int code = -1;
    for (int i = 0; i < NDTYPES && code < 0; i++)
        if (dtype == bound.dtypes[i])
            code = i;
    Py_DECREF(dtype);
    return code;
}

/* A view of an exact, C-contiguous ndarray of a supported type, of fewer
 * than `limit` bytes; 0 with no error set (and no view held) otherwise. */
static int array_view(PyObject *obj, Py_buffer *view, int writable, int *code, Py_ssize_t limit)
{
    if (Py_TYPE(obj) != (PyTypeObject *)bound.ndarray || (*code = dtype_code(obj)) < 0)
        return 0;
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0)) < 0) {
        PyErr_Clear(); /* not contiguous, read-only: the general path says so */
        return 0;
    }
    if (view->len >= limit) {
        PyBuffer_Release(view);
        return 0;
    }
    return 1;
}

/* Inputs and same-sized results: larger arrays may lie in a window, which
 * the general path looks for. */
static int view_of(PyObject *obj, Py_buffer *view, int writable, int *code)
{
    return array_view(obj, view, writable, code, bound.max_bytes);
}

/* Elements in a view of an array whose type has code `code`. */
static size_t count_of(const Py_buffer *view, int code)
{
    return (size_t)view->len / shmtopo_dtype_size(code);
}

static shmtopo_comm_t *comm_of(PyObject *handle)
{
    void *h = PyLong_AsVoidPtr(handle);
    if (!h && PyErr_Occurred())
        PyErr_Clear();
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

static int op_code(PyObject *op)
{
    PyObject *code = PyDict_GetItemWithError(bound.ops, op);
    return code ? (int)PyLong_AsLong(code) : (PyErr_Clear(), -1);
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

/* allreduce(handle, array, out, op) -> result | None */
static PyObject *fast_allreduce(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4)
        return PyErr_Format(PyExc_TypeError, "allreduce takes 4 arguments"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    int code, op = op_code(args[3]);
    Py_buffer in, out;
    if (!comm || op < 0 || !view_of(args[1], &in, 0, &code))
        return not_handled();
    PyObject *result = result_of(args[2], args[1], &in, code, &out);
    if (!result) {
        PyBuffer_Release(&in);
        return not_handled();
    }
    int rc, err;
    CORE_CALL(shmtopo_allreduce(comm, in.buf, out.buf, count_of(&in, code), code, op, SHMTOPO_COLL_AUTO));
    PyBuffer_Release(&in);
    PyBuffer_Release(&out);
    return rc < 0 ? failed(result, err) : result;
}

/* reduce(handle, array, out, op, root, is_root) -> result (None off the root) | NotImplemented */
static PyObject *fast_reduce(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6)
        return PyErr_Format(PyExc_TypeError, "reduce takes 6 arguments"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    int code, op = op_code(args[3]);
    int root = root_of(args[4]), is_root = PyObject_IsTrue(args[5]);
    Py_buffer in, out = {0};
    if (PyErr_Occurred())
        PyErr_Clear(), comm = NULL;
    if (!comm || op < 0 || root < 0 || !view_of(args[1], &in, 0, &code))
        return PyErr_Occurred() ? NULL : new_ref(Py_NotImplemented);
    PyObject *result = Py_None;
    if (is_root && !(result = result_of(args[2], args[1], &in, code, &out))) {
        PyBuffer_Release(&in);
        return PyErr_Occurred() ? NULL : new_ref(Py_NotImplemented);
    }
    if (!is_root)
        Py_INCREF(result);
    int rc, err;
    CORE_CALL(shmtopo_reduce(comm, in.buf, out.buf, count_of(&in, code), code, op, root, SHMTOPO_COLL_AUTO));
    PyBuffer_Release(&in);
    if (is_root)
        PyBuffer_Release(&out);
    return rc < 0 ? failed(result, err) : result;
}

/* bcast(handle, array, root) -> array (received in place) | None */
static PyObject *fast_bcast(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3)
        return PyErr_Format(PyExc_TypeError, "bcast takes 3 arguments"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    int code, root = root_of(args[2]);
    Py_buffer buf;
    if (PyErr_Occurred())
        PyErr_Clear(), comm = NULL;
    if (!comm || root < 0 || !view_of(args[1], &buf, 1, &code))
        return not_handled();
    int rc, err;
    CORE_CALL(shmtopo_bcast(comm, buf.buf, count_of(&buf, code), code, root));
    PyBuffer_Release(&buf);
    return rc < 0 ? failed(NULL, err) : new_ref(args[1]);
}

/* allgather(handle, array, out, nranks) -> out | None */
static PyObject *fast_allgather(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4)
        return PyErr_Format(PyExc_TypeError, "allgather takes 4 arguments"), NULL;
    shmtopo_comm_t *comm = comm_of(args[0]);
    Py_ssize_t nranks = PyLong_AsSsize_t(args[3]);
    int code, out_code;
    Py_buffer in, out;
    if (PyErr_Occurred())
        PyErr_Clear(), comm = NULL;
    if (!comm || !view_of(args[1], &in, 0, &code))
        return not_handled();
    if (!array_view(args[2], &out, 1, &out_code, PY_SSIZE_T_MAX)) { /* out: nranks blocks */
        PyBuffer_Release(&in);
        return not_handled();
    }
    if (out_code != code || out.len != in.len * nranks) {
        PyBuffer_Release(&in);
        PyBuffer_Release(&out);
        return not_handled();
    }
    int rc, err;
    CORE_CALL(shmtopo_allgather(comm, in.buf, out.buf, count_of(&in, code), code));
    PyBuffer_Release(&in);
    PyBuffer_Release(&out);
    return rc < 0 ? failed(NULL, err) : new_ref(args[2]);
}

/* bind(ndarray, empty_like, ops, max_bytes, dtypes, last_error, value_error):
 * numpy's type and constructor, the op-name table, the size limit, the dtypes
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
    bound.max_bytes = PyLong_AsSsize_t(args[3]);
    if (PyErr_Occurred())
        return NULL;
    if (!PyTuple_Check(args[4]) || PyTuple_GET_SIZE(args[4]) != NDTYPES)
        return PyErr_Format(PyExc_TypeError, "bind: expected a tuple of %d dtypes", NDTYPES), NULL;
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

/* ---- NativeWindow: the base of shmtopo.Window ---------------------------
 *
 * It holds the native window, so that win.fence() is one C method call: a
 * Python method in between cost as much as the fence itself. `_fast` is the
 * shmtopo_win_t * as an int, 0 once freed (the core then says EBADF). */
typedef struct {
    PyObject_HEAD
    shmtopo_win_t *win;
} NativeWindow;

static PyObject *window_fence(PyObject *self, PyObject *unused)
{
    int rc, err;
    CORE_CALL(shmtopo_win_fence(((NativeWindow *)self)->win));
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
    CORE_CALL(shmtopo_win_peer_fence(((NativeWindow *)self)->win, (int)peer));
    if (rc < 0)
        return failed(NULL, err);
    Py_RETURN_NONE;
}

static PyObject *window_get_fast(PyObject *self, void *closure)
{
    return PyLong_FromVoidPtr(((NativeWindow *)self)->win);
}

static int window_set_fast(PyObject *self, PyObject *value, void *closure)
{
    void *win = value ? PyLong_AsVoidPtr(value) : NULL;
    if (!win && PyErr_Occurred())
        return -1;
    ((NativeWindow *)self)->win = win;
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
    {"_fast", window_get_fast, window_set_fast, "the native window's address (0: freed)", NULL},
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

static PyMethodDef methods[] = {
    {"bind", (PyCFunction)(void (*)(void))bind, METH_FASTCALL, "Bind numpy, the op table, the size limit and the error maker (shmtopo internal)."},
    {"allreduce", (PyCFunction)(void (*)(void))fast_allreduce, METH_FASTCALL, "allreduce(handle, array, out, op)"},
    {"reduce", (PyCFunction)(void (*)(void))fast_reduce, METH_FASTCALL, "reduce(handle, array, out, op, root, is_root)"},
    {"bcast", (PyCFunction)(void (*)(void))fast_bcast, METH_FASTCALL, "bcast(handle, array, root)"},
    {"allgather", (PyCFunction)(void (*)(void))fast_allgather, METH_FASTCALL, "allgather(handle, array, out, nranks)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "shmtopo._fastpath",
    "Small window collectives on numpy arrays without cffi's per-call costs (internal).",
    -1, methods,
};

PyMODINIT_FUNC PyInit__fastpath(void)
{
    if (PyType_Ready(&NativeWindowType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    Py_INCREF(&NativeWindowType);
    if (PyModule_AddObject(m, "NativeWindow", (PyObject *)&NativeWindowType) < 0) {
        Py_DECREF(&NativeWindowType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
