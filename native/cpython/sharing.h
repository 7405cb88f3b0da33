/* native/cpython/sharing.h: part of shmtopo._fastpath, included once by
 * fastpath.c in its place (one translation unit).
 *
 * shmtopo.sharing's most common share in one C call: a small C-contiguous
 * array of a core type, which travels inside the share's header (one bcast,
 * no segment). In Python the header's making and reading cost ten times the
 * bcast itself; with more ranks than cores every rank's share of that is
 * paid in turn. The header's layout is sharing.py's (bind_share gives its
 * size, its fields' names in order and the tier of inline data); anything
 * else, on any rank, is sharing.py's to do, and both meet in the same
 * bcast of the header. */

static struct {
    Py_ssize_t words;        /* the header's length in uint64 words */
    Py_ssize_t data_word;    /* where the inline data starts (after the fields and the extents) */
    Py_ssize_t max_dims;     /* extents the header has room for */
    uint64_t inline_tier;    /* the tier of data inside the header */
    int tier, nbytes, described, word, dims; /* the fields C reads or writes, by position */
    int nfields;
    PyObject *dtype_word;    /* sharing._dtype_word(dtype) -> the header's word for a dtype (0: none) */
    PyObject *frombuffer;    /* numpy.frombuffer */
    PyObject *toreadonly, *reshape; /* method names */
    uint64_t dtype_words[NDTYPES]; /* the word of each core type ... */
    PyObject *asked[NDTYPES];      /* ... asked for this dtype object (bind may bind others later) */
} shr;

/* The header's word of each core type bound, asked of sharing.py once per
 * dtype object (bfloat16 is bound when first met). 0 on failure. */
static int share_words_known(void)
{
    for (int i = 0; i < NDTYPES; i++) {
        PyObject *dtype = bound.dtypes[i];
        if (dtype == shr.asked[i])
            continue;
        uint64_t word = 0;
        if (dtype && dtype != Py_None) {
            PyObject *w = PyObject_CallOneArg(shr.dtype_word, dtype);
            if (!w)
                return 0;
            word = PyLong_AsUnsignedLongLong(w);
            Py_DECREF(w);
            if (PyErr_Occurred())
                return 0;
        }
        shr.dtype_words[i] = word;
        shr.asked[i] = dtype; /* (bound keeps it: compared by identity only) */
    }
    return 1;
}

static int share_code_of_word(uint64_t word)
{
    for (int i = 0; word && i < NDTYPES; i++)
        if (shr.dtype_words[i] == word && bound.dtypes[i] && bound.dtypes[i] != Py_None)
            return i;
    return -1;
}

/* On the root: the header of `obj` with its data inside, where obj is a
 * small C-contiguous ndarray of a core type; 0 (nothing written) else. */
static int share_small_header(PyObject *obj, uint64_t *h)
{
    Py_buffer view;
    int code;
    if (!view_of(obj, &view, 0, &code))
        return 0;
    const int fits = shr.dtype_words[code] && view.ndim <= shr.max_dims &&
                     view.len <= (shr.words - shr.data_word) * (Py_ssize_t)sizeof *h;
    if (fits) {
        memset(h, 0, (size_t)shr.words * sizeof *h);
        h[shr.tier] = shr.inline_tier;
        h[shr.nbytes] = (uint64_t)view.len;
        h[shr.word] = shr.dtype_words[code];
        h[shr.dims] = (uint64_t)view.ndim;
        for (int i = 0; i < view.ndim; i++)
            h[shr.nfields + i] = (uint64_t)view.shape[i];
        memcpy(h + shr.data_word, view.buf, (size_t)view.len);
    }
    PyBuffer_Release(&view);
    return fits;
}

/* The read-only array of an inline header of core type `code`: viewing it
 * through a read-only memoryview, so nobody can make it writeable again. */
static PyObject *share_inline_array(PyObject *header, const uint64_t *h, int code)
{
    const uint64_t dims = h[shr.dims];
    PyObject *view = PyMemoryView_FromObject(header);
    PyObject *readonly = view ? PyObject_CallMethodNoArgs(view, shr.toreadonly) : NULL;
    Py_XDECREF(view);
    if (!readonly)
        return NULL;
    PyObject *count = PyLong_FromUnsignedLongLong(h[shr.nbytes] / seen.element_size[code]);
    PyObject *offset = PyLong_FromSsize_t(shr.data_word * (Py_ssize_t)sizeof *h);
    PyObject *out = NULL;
    if (count && offset) {
        PyObject *const a[] = {readonly, bound.dtypes[code], count, offset};
        out = PyObject_Vectorcall(shr.frombuffer, a, 4, NULL);
    }
    Py_DECREF(readonly);
    Py_XDECREF(count);
    Py_XDECREF(offset);
    if (!out || dims == 1)
        return out;
    PyObject *shape = PyTuple_New((Py_ssize_t)dims);
    for (uint64_t i = 0; shape && i < dims; i++) {
        PyObject *extent = PyLong_FromUnsignedLongLong(h[shr.nfields + i]);
        if (!extent)
            Py_CLEAR(shape);
        else
            PyTuple_SET_ITEM(shape, (Py_ssize_t)i, extent);
    }
    PyObject *shaped = shape ? PyObject_CallMethodOneArg(out, shr.reshape, shape) : NULL;
    Py_XDECREF(shape);
    Py_DECREF(out);
    return shaped;
}

/* share_small(handle, obj, root): the share of a one-node comm (handle: its
 * fast_handle) when the root's obj is a small array: the read-only array on
 * every rank. (header,) once the header is bcast but holds anything else,
 * for sharing.py to go on from; None, having done nothing collective, where
 * sharing.py must take the whole call (a root in doubt, the root's object
 * not such an array, a comm this entry does not take). */
static PyObject *share_small(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3)
        return PyErr_Format(PyExc_TypeError, "share_small takes 3 arguments"), NULL;
    shmtopo_comm_t *comm = shr.frombuffer ? comm_of(args[0]) : NULL;
    const int root = comm ? lower_root_in(args[2], comm) : -1;
    PyObject *uint64 = bound.dtypes[SHMTOPO_UINT64];
    if (!comm || root < 0 || !uint64 || uint64 == Py_None || !share_words_known())
        return not_handled();
    PyObject *bytes = PyByteArray_FromStringAndSize(NULL, shr.words * (Py_ssize_t)sizeof(uint64_t));
    if (!bytes)
        return NULL;
    uint64_t *h = (uint64_t *)(void *)PyByteArray_AS_STRING(bytes);
    if (shmtopo_comm_job_rank(comm) == root && !share_small_header(args[1], h)) {
        Py_DECREF(bytes);
        return not_handled();
    }
    PyObject *const f[] = {bytes, uint64};
    PyObject *header = PyObject_Vectorcall(shr.frombuffer, f, 2, NULL); /* holds the bytearray's export */
    Py_DECREF(bytes);
    if (!header)
        return NULL;
    PyObject *const b[] = {args[0], Py_None, header, args[2]};
    PyObject *sent = fast_bcast(NULL, b, 4);
    if (sent != header) { /* NULL: it failed; None: declined, nothing done (the Python path bcasts) */
        Py_DECREF(header);
        return sent;
    }
    Py_DECREF(sent);
    const int code = share_code_of_word(h[shr.word]);
    PyObject *result;
    if (h[shr.tier] == shr.inline_tier && !h[shr.described] && h[shr.dims] <= (uint64_t)shr.max_dims && code >= 0 &&
        h[shr.nbytes] <= (uint64_t)(shr.words - shr.data_word) * sizeof *h && h[shr.nbytes] % seen.element_size[code] == 0)
        result = share_inline_array(header, h, code);
    else
        result = PyTuple_Pack(1, header);
    Py_DECREF(header);
    return result;
}

static int share_field(PyObject *names, const char *name)
{
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(names); i++)
        if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(names, i), name) == 0)
            return (int)i;
    return -1;
}

/* bind_share(words, data_word, fields, inline_tier, dtype_word, frombuffer):
 * the header's layout as sharing.py writes it (its length, where the data
 * starts, its fields' names in order: tier, nbytes, described, word and dims
 * are read here; the extents follow the fields), the tier of inline data,
 * sharing._dtype_word and numpy.frombuffer. */
static PyObject *bind_share(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6 || !PyTuple_Check(args[2]) || !PyCallable_Check(args[4]) || !PyCallable_Check(args[5]))
        return PyErr_Format(PyExc_TypeError, "bind_share(words, data_word, fields, inline_tier, dtype_word, "
                                             "frombuffer)"), NULL;
    const Py_ssize_t words = PyLong_AsSsize_t(args[0]), data_word = PyLong_AsSsize_t(args[1]);
    const uint64_t tier = PyLong_AsUnsignedLongLong(args[3]);
    if (PyErr_Occurred())
        return NULL;
    const int nfields = (int)PyTuple_GET_SIZE(args[2]);
    const int at[] = {share_field(args[2], "tier"), share_field(args[2], "nbytes"),
                      share_field(args[2], "described"), share_field(args[2], "word"), share_field(args[2], "dims")};
    for (int i = 0; i < 5; i++)
        if (at[i] < 0)
            return PyErr_Format(PyExc_ValueError, "bind_share: the header lacks a field C reads"), NULL;
    if (data_word <= nfields || words <= data_word)
        return PyErr_Format(PyExc_ValueError, "bind_share: a header of %zd words, data at %zd", words, data_word),
               NULL;
    if ((!shr.toreadonly && !(shr.toreadonly = PyUnicode_InternFromString("toreadonly"))) ||
        (!shr.reshape && !(shr.reshape = PyUnicode_InternFromString("reshape"))))
        return NULL;
    shr.words = words, shr.data_word = data_word, shr.max_dims = data_word - nfields, shr.nfields = nfields;
    shr.tier = at[0], shr.nbytes = at[1], shr.described = at[2], shr.word = at[3], shr.dims = at[4];
    shr.inline_tier = tier;
    Py_XSETREF(shr.dtype_word, new_ref(args[4]));
    Py_XSETREF(shr.frombuffer, new_ref(args[5]));
    memset(shr.asked, 0, sizeof shr.asked);
    Py_RETURN_NONE;
}
