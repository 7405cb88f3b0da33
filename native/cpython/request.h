/* native/cpython/request.h: part of shmtopo._fastpath, included once by
 * fastpath.c in its place (one translation unit).
 *
 * NativeRequest, the base of shmtopo's persistent requests (shmtopo.requests). */

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
    do
        CORE_CALL(comm, NULL, shmtopo_request_start(r->request));
    while (rc < 0 && !failed(NULL, err) && run_queue_instead(((NativeComm *)r->comm)->fast_handle));
    if (rc < 0)
        return NULL;
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
