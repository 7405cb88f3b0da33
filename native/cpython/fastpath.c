/* shmtopo._fastpath: the C entry of shmtopo's calls from Python.
 *
 * The calls a program makes most (the lower-case collectives on plain
 * arrays, the drop-in's upper-case ones on mpi4py's buffer arguments, the
 * accelerated windows' one-sided calls, the fences) cost a few hundred
 * nanoseconds in shared memory; Python and cffi around them cost more. This
 * module takes the plain cases straight through the buffer protocol and
 * calls the native core directly. The declarations are the core's own
 * (shmtopo.h), and the core is the one libshmtopo.so that shmtopo._native
 * and C programs link too (found through the rpath $ORIGIN/lib), so the
 * process holds one copy of the core and of its thread-local error state:
 * the message of a failure here is the one shmtopo.errors.last_error reads.
 *
 * Every entry returns None, having done nothing, when the arguments are not
 * the plain case; the caller then takes the general Python path, which also
 * explains what is wrong. A failure of the core call itself raises
 * shmtopo's own exception, made by the Python function bound for it.
 *
 * One file per concern, each named after the Python module it serves and
 * included here once, in this order: one translation unit, so the compiler
 * inlines across them as it did when they were one file. This file keeps the
 * module's method table and its init. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <errno.h>
#include <string.h>

#include "shmtopo.h"

#include "reading.h"
#include "api.h"
#include "api_vector.h"
#include "comm.h"
#include "sharing.h"
#include "buffers.h"
#include "typed.h"
#include "plans.h"
#include "window.h"
#include "accel_window.h"
#include "rma_state.h"
#include "request.h"
#include "plans_mpi.h"
#include "accel_comm.h"
#include "nonblocking.h"

static PyMethodDef methods[] = {
    {"bind", (PyCFunction)(void (*)(void))bind, METH_FASTCALL, "Bind numpy, the op table, the window size rule and the error makers (shmtopo internal)."},
    {"allreduce", (PyCFunction)(void (*)(void))fast_allreduce, METH_FASTCALL, "allreduce(handle, windows, array, out, op)"},
    {"reduce", (PyCFunction)(void (*)(void))fast_reduce, METH_FASTCALL, "reduce(handle, windows, array, out, op, root)"},
    {"bcast", (PyCFunction)(void (*)(void))fast_bcast, METH_FASTCALL, "bcast(handle, windows, array, root)"},
    {"allgather", (PyCFunction)(void (*)(void))fast_allgather, METH_FASTCALL, "allgather(handle, windows, array, out)"},
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
    {"bind_window", (PyCFunction)(void (*)(void))bind_window, METH_FASTCALL,
     "Bind the accelerated windows' Python methods, op table and masks (shmtopo.accelerate internal)."},
    {"bind_comm", bind_comm, METH_VARARGS,
     "bind_comm(api, heard_of): the general functions of NativeComm's methods, and what tells other nodes of "
     "a failure (shmtopo.Comm internal)."},
    {"bind_comm_fast", (PyCFunction)(void (*)(void))bind_comm_fast, METH_FASTCALL,
     "Bind AcceleratedComm's methods and the op default for CommFast's (shmtopo.accelerate internal)."},
    {"bind_mpi_direct", (PyCFunction)(void (*)(void))bind_mpi_direct, METH_FASTCALL,
     "bind_mpi_direct(bcast, allgather, handle_size, capi, in_place, exception): MPI's own functions, for the "
     "derived-datatype calls CommFast hands over (shmtopo.accelerate internal)."},
    {"bind_mpi_only", (PyCFunction)(void (*)(void))bind_mpi_only, METH_FASTCALL,
     "Bind what CommFast hands to MPI at once, and mpi4py's methods it calls (shmtopo.accelerate internal)."},
    {"copied_new", (PyCFunction)(void (*)(void))copied_new, METH_FASTCALL,
     "copied_new(cls, *args): the __new__ of the accelerated classes (shmtopo.accelerate internal)."},
    {"share_small", (PyCFunction)(void (*)(void))share_small, METH_FASTCALL,
     "share_small(handle, obj, root) -> array | (header,) | None: a small array's share (shmtopo.sharing internal)."},
    {"bind_share", (PyCFunction)(void (*)(void))bind_share, METH_FASTCALL,
     "Bind the share header's layout, sharing._dtype_word and numpy.frombuffer (shmtopo.sharing internal)."},
    {"note_layout", (PyCFunction)(void (*)(void))note_layout, METH_FASTCALL,
     "note_layout(counts, displs, types, blocks, table, first, end): a layout of Alltoallw's the planner made "
     "(shmtopo.accelerate internal)."},
    {"note_derived", note_derived, METH_O,
     "note_derived(datatype): the planner hands messages of this derived type to MPI (shmtopo.accelerate internal)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "shmtopo._fastpath",
    "The C entry of shmtopo's calls from Python: their plain cases without cffi's costs (internal).",
    -1, methods,
};

PyMODINIT_FUNC PyInit__fastpath(void)
{
    if (PyType_Ready(&NativeWindowType) < 0 || PyType_Ready(&RmaStateType) < 0 || PyType_Ready(&WinFastType) < 0
        || PyType_Ready(&NativeCommType) < 0 || PyType_Ready(&CommFastType) < 0 || PyType_Ready(&CallCountsType) < 0
        || PyType_Ready(&NativeRequestType) < 0 || PyType_Ready(&DoorbellType) < 0
        || comm_init_names() < 0)
        return NULL;
    for (int code = 0; code < NDTYPES; code++)
        seen.element_size[code] = shmtopo_dtype_size(code);
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
    Py_INCREF(&DoorbellType);
    if (PyModule_AddObject(m, "RmaState", (PyObject *)&RmaStateType) < 0
        || PyModule_AddObject(m, "WinFast", (PyObject *)&WinFastType) < 0
        || PyModule_AddObject(m, "NativeComm", (PyObject *)&NativeCommType) < 0
        || PyModule_AddObject(m, "CommFast", (PyObject *)&CommFastType) < 0
        || PyModule_AddObject(m, "CallCounts", (PyObject *)&CallCountsType) < 0
        || PyModule_AddObject(m, "NativeRequest", (PyObject *)&NativeRequestType) < 0
        || PyModule_AddObject(m, "Doorbell", (PyObject *)&DoorbellType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
