/* native/cpython/nonblocking.h: part of shmtopo._fastpath, included once by
 * fastpath.c in its place (one translation unit).
 *
 * Doorbell: how a progress thread of accel/nonblocking.py learns, without
 * the GIL, that a posted call waits for it. A thread that wakes only to
 * find the call taken would still take the GIL to look, and each such
 * hand-over of the GIL costs the program more than a small collective; so
 * the thread waits here until a call has been posted and no thread has
 * taken it for a grace period (the program's own Wait usually runs a small
 * call itself at once), and only then returns to Python. */
#include <linux/futex.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    PyObject_HEAD
    _Atomic uint32_t posted;   /* calls posted; the word the thread sleeps on */
    _Atomic uint32_t taken;    /* calls taken by a thread to run */
    _Atomic uint32_t sleepers;
    _Atomic uint32_t closed;
    _Atomic int64_t grace_ns;  /* how long a posted call may go untaken (0: not at all) */
} Doorbell;

static void doorbell_wake(Doorbell *d)
{
    if (atomic_load(&d->sleepers))
        syscall(SYS_futex, (uint32_t *)&d->posted, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static PyObject *doorbell_ring(PyObject *self, PyObject *unused)
{
    Doorbell *d = (Doorbell *)self;
    atomic_fetch_add(&d->posted, 1);
    doorbell_wake(d);
    Py_RETURN_NONE;
}

static PyObject *doorbell_take(PyObject *self, PyObject *unused)
{
    atomic_fetch_add(&((Doorbell *)self)->taken, 1);
    Py_RETURN_NONE;
}

static PyObject *doorbell_close(PyObject *self, PyObject *unused)
{
    Doorbell *d = (Doorbell *)self;
    atomic_store(&d->closed, 1);
    atomic_fetch_add(&d->posted, 1);  /* changes the word a sleeper waits on */
    doorbell_wake(d);
    Py_RETURN_NONE;
}

#define DOORBELL_IDLE_NS 10000000ull  /* after 10 ms without a call, sleep until rung */
#define DOORBELL_POLL_NS 20000        /* a look at least this often while calls come */

static uint64_t doorbell_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static PyObject *doorbell_set_grace(PyObject *self, PyObject *arg)
{
    double grace = PyFloat_AsDouble(arg);
    if (grace == -1.0 && PyErr_Occurred())
        return NULL;
    if (!(grace >= 0) || grace > 1.0) {
        PyErr_SetString(PyExc_ValueError, "grace must be between 0 and 1 s");
        return NULL;
    }
    atomic_store(&((Doorbell *)self)->grace_ns, (int64_t)(grace * 1e9));
    Py_RETURN_NONE;
}

/* Sleep, without the GIL, until a call has been posted that no thread has
 * taken for the grace period (set_grace; read at every look, so a change
 * reaches a thread already waiting; 0: as soon as one is seen), or the bell
 * is closed. While calls come, the thread looks every grace period (at
 * least every DOORBELL_POLL_NS), so that posting one costs no system call;
 * once none has come for DOORBELL_IDLE_NS it sleeps until rung. */
static PyObject *doorbell_wait(PyObject *self, PyObject *unused)
{
    Doorbell *d = (Doorbell *)self;
    Py_BEGIN_ALLOW_THREADS
    uint32_t last_posted = atomic_load(&d->posted);
    uint64_t last_post_ns = doorbell_now();
    int untaken = 0;      /* the oldest untaken call was untaken at the last look already */
    uint32_t oldest = 0;  /* which one: the count taken then */
    for (;;) {
        if (atomic_load(&d->closed))
            break;
        const int64_t grace_ns = atomic_load(&d->grace_ns);
        uint32_t posted = atomic_load(&d->posted), taken = atomic_load(&d->taken);
        if (taken != posted) {
            if (grace_ns == 0 || (untaken && oldest == taken))
                break;
            untaken = 1;
            oldest = taken;
        } else {
            untaken = 0;
        }
        uint64_t now = doorbell_now();
        if (posted != last_posted) {
            last_posted = posted;
            last_post_ns = now;
        }
        if (taken == posted && now - last_post_ns > DOORBELL_IDLE_NS) {
            atomic_fetch_add(&d->sleepers, 1);
            if (atomic_load(&d->posted) == posted && !atomic_load(&d->closed))
                syscall(SYS_futex, (uint32_t *)&d->posted, FUTEX_WAIT_PRIVATE, posted, NULL, NULL, 0);
            atomic_fetch_sub(&d->sleepers, 1);
            last_post_ns = doorbell_now();
            continue;
        }
        const int64_t pause_ns = grace_ns > DOORBELL_POLL_NS ? grace_ns : DOORBELL_POLL_NS;
        struct timespec pause = {(time_t)(pause_ns / 1000000000), (long)(pause_ns % 1000000000)};
        nanosleep(&pause, NULL);
    }
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyMethodDef doorbell_methods[] = {
    {"ring", doorbell_ring, METH_NOARGS, "ring()\n--\n\nA call has been posted."},
    {"take", doorbell_take, METH_NOARGS, "take()\n--\n\nA thread has taken a posted call to run it."},
    {"close", doorbell_close, METH_NOARGS, "close()\n--\n\nNo more calls: wait() returns at once from now on."},
    {"set_grace", doorbell_set_grace, METH_O,
     "set_grace(seconds)\n--\n\nHow long a posted call may go untaken before wait() returns (0: not at all)."},
    {"wait", doorbell_wait, METH_NOARGS,
     "wait()\n--\n\nSleep without the GIL until a posted call has gone untaken for the grace period, "
     "or the bell is closed."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject DoorbellType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "shmtopo._fastpath.Doorbell",
    .tp_basicsize = sizeof(Doorbell),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "How a progress thread learns, without the GIL, that a posted call waits for it (internal).",
    .tp_methods = doorbell_methods,
    .tp_new = PyType_GenericNew,
};
