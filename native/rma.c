/* rma.c: one-sided operations on memory that every rank of a node maps
 * (the drop-in's accelerated MPI shared windows): accumulates that are
 * atomic per element, compare-and-swap, and a reader-writer lock per rank.
 *
 * The lock and the guard of each rank live in that rank's part of a
 * shmtopo window (`ctrl`, SHMTOPO_RMA_CTRL_BYTES per rank), so their waits
 * are the window's: spin, yield, sleep on the word, give up at the
 * window's timeout, and fail naming a peer that died or left.
 *
 * Atomicity per element, as MPI defines it for accumulates of one
 * predefined type: an element of 1, 2, 4 or 8 bytes at an address aligned
 * to its size is updated with one CPU atomic (fetch-add/and/or/xor,
 * exchange, or a compare-and-swap loop around the op); any other element
 * (16-byte types, a misaligned address) is updated under the target rank's
 * guard. Which way an element goes depends only on its type and address,
 * so two ranks updating the same element always go the same way. */
#include <string.h>

#include "internal.h"
#include "wait.h"

/* The words of one rank's lock and guard, each on its own line. A shared
 * holder counts itself into `reads_in` and, when no exclusive holder has
 * raised `writer`, holds the lock: one atomic. An exclusive holder takes
 * a ticket mutex (`next`, `serving`), raises `writer`, and waits until
 * every shared holder that came in has counted itself out (`reads_out`);
 * a shared holder that finds `writer` raised counts itself out again and
 * queues on the ticket mutex behind it, so writers are served in turn and
 * never starved. Lock_all touches no other rank's lines while no writer is
 * there: it counts itself into its own rank's `all_in` and checks every
 * rank's `writer`; a writer, once it has raised `writer`, also waits until
 * every rank's `all_out` has caught up with its `all_in` (a Lock_all that
 * finds a writer counts itself out again and takes each rank's shared lock,
 * noting that in its own `all_slow`). The guard is a second ticket mutex. */
typedef struct rma_words {
    _Alignas(SHMTOPO_LINE) _Atomic uint64_t next;
    _Alignas(SHMTOPO_LINE) _Atomic uint64_t serving;
    _Alignas(SHMTOPO_LINE) _Atomic uint32_t serving_waiters;
    _Alignas(SHMTOPO_LINE) _Atomic uint32_t writer;
    _Alignas(SHMTOPO_LINE) _Atomic uint64_t reads_in;
    _Alignas(SHMTOPO_LINE) _Atomic uint64_t reads_out;
    _Alignas(SHMTOPO_LINE) _Atomic uint32_t reads_out_waiters;
    _Alignas(SHMTOPO_LINE) _Atomic uint64_t all_in;
    _Alignas(SHMTOPO_LINE) _Atomic uint64_t all_out;
    _Alignas(SHMTOPO_LINE) _Atomic uint32_t all_out_waiters;
    _Alignas(SHMTOPO_LINE) uint32_t all_slow; /* read and written by its own rank only */
    _Alignas(SHMTOPO_LINE) _Atomic uint64_t guard_next;
    _Alignas(SHMTOPO_LINE) _Atomic uint64_t guard_serving;
    _Alignas(SHMTOPO_LINE) _Atomic uint32_t guard_waiters;
} rma_words_t;

_Static_assert(sizeof(rma_words_t) <= SHMTOPO_RMA_CTRL_BYTES, "SHMTOPO_RMA_CTRL_BYTES is too small");

static rma_words_t *words_of(shmtopo_win_t *ctrl, int target, const char *what)
{
    if (!ctrl)
        return shmtopo_fail(EBADF, -1, "%s: the window is NULL or freed", what), NULL;
    if (target < 0 || target >= ctrl->size)
        return shmtopo_fail(EINVAL, -1, "%s: target rank %d out of range [0, %d)", what, target, ctrl->size), NULL;
    if (ctrl->sizes[target] < sizeof(rma_words_t))
        return shmtopo_fail(EINVAL, -1, "%s: the control window's parts are smaller than %d bytes", what,
                            SHMTOPO_RMA_CTRL_BYTES), NULL;
    return (rma_words_t *)(void *)ctrl->base[target];
}

/* Take a ticket of (next, serving) and wait for its turn. */
static int ticket_acquire(shmtopo_win_t *ctrl, int target, _Atomic uint64_t *next, _Atomic uint64_t *serving,
                          _Atomic uint32_t *waiters, const char *what)
{
    const uint64_t ticket = atomic_fetch_add_explicit(next, 1, memory_order_relaxed);
    int origin = -1;
    if (shmtopo_wait_shared(ctrl, serving, waiters, ticket, target, what, &origin) < 0)
        return shmtopo_win_wait_failed(ctrl, origin);
    return 0;
}

static void ticket_release(_Atomic uint64_t *serving, _Atomic uint32_t *waiters)
{
    shmtopo_post(serving, waiters, atomic_load_explicit(serving, memory_order_relaxed) + 1);
}

/* A shared holder leaves: counted out, and a writer waiting for that woken. */
static void count_out(_Atomic uint64_t *out, _Atomic uint32_t *waiters)
{
    atomic_fetch_add_explicit(out, 1, memory_order_seq_cst);
    if (atomic_load_explicit(waiters, memory_order_seq_cst))
        shmtopo_wake(out);
}

static void read_out(rma_words_t *w)
{
    count_out(&w->reads_out, &w->reads_out_waiters);
}

/* Until every holder counted into `in` has counted itself out: `in` read
 * twice with the same value and `out` at it means none is inside (a holder
 * that comes in later sees the writer's flag and counts itself out again). */
static int drained(shmtopo_win_t *ctrl, int rank, _Atomic uint64_t *in, _Atomic uint64_t *out,
                   _Atomic uint32_t *waiters)
{
    for (;;) {
        const uint64_t holders = atomic_load_explicit(in, memory_order_seq_cst);
        int origin = -1;
        if (shmtopo_wait_shared(ctrl, out, waiters, holders, rank, "lock", &origin) < 0)
            return shmtopo_win_wait_failed(ctrl, origin);
        if (atomic_load_explicit(in, memory_order_seq_cst) == holders)
            return 0;
    }
}

int shmtopo_rma_lock(shmtopo_win_t *ctrl, int target, int exclusive)
{
    rma_words_t *w = words_of(ctrl, target, "lock");
    if (!w)
        return -1;
    if (!exclusive) {
        /* in, unless a writer is there or coming (it then waits for this count) */
        atomic_fetch_add_explicit(&w->reads_in, 1, memory_order_seq_cst);
        if (!atomic_load_explicit(&w->writer, memory_order_seq_cst))
            return 0;
        read_out(w);
        /* behind the writer: with the ticket held no writer can come in */
        if (ticket_acquire(ctrl, target, &w->next, &w->serving, &w->serving_waiters, "lock") < 0)
            return -1;
        atomic_fetch_add_explicit(&w->reads_in, 1, memory_order_seq_cst);
        ticket_release(&w->serving, &w->serving_waiters);
        return 0;
    }
    if (ticket_acquire(ctrl, target, &w->next, &w->serving, &w->serving_waiters, "lock") < 0)
        return -1;
    atomic_store_explicit(&w->writer, 1, memory_order_seq_cst);
    /* the shared holders of this rank, then every rank's Lock_all, must have left */
    int rc = drained(ctrl, target, &w->reads_in, &w->reads_out, &w->reads_out_waiters);
    for (int r = 0; rc == 0 && r < ctrl->size; r++) {
        rma_words_t *v = (rma_words_t *)(void *)ctrl->base[r];
        rc = drained(ctrl, r, &v->all_in, &v->all_out, &v->all_out_waiters);
    }
    if (rc < 0) {
        const int err = errno;
        atomic_store_explicit(&w->writer, 0, memory_order_seq_cst);
        ticket_release(&w->serving, &w->serving_waiters);
        errno = err;
    }
    return rc;
}

int shmtopo_rma_unlock(shmtopo_win_t *ctrl, int target, int exclusive)
{
    rma_words_t *w = words_of(ctrl, target, "unlock");
    if (!w)
        return -1;
    if (exclusive) {
        atomic_store_explicit(&w->writer, 0, memory_order_seq_cst);
        ticket_release(&w->serving, &w->serving_waiters);
        return 0;
    }
    read_out(w);
    return 0;
}

int shmtopo_rma_lock_all(shmtopo_win_t *ctrl)
{
    rma_words_t *mine = ctrl ? words_of(ctrl, ctrl->rank, "lock_all") : NULL;
    if (!mine)
        return ctrl ? -1 : shmtopo_fail(EBADF, -1, "lock_all: the window is NULL or freed");
    atomic_fetch_add_explicit(&mine->all_in, 1, memory_order_seq_cst);
    int writer = 0;
    for (int r = 0; r < ctrl->size && !writer; r++)
        writer = atomic_load_explicit(&((rma_words_t *)(void *)ctrl->base[r])->writer, memory_order_seq_cst) != 0;
    mine->all_slow = (uint32_t)writer;
    if (!writer)
        return 0;
    count_out(&mine->all_out, &mine->all_out_waiters);
    for (int r = 0; r < ctrl->size; r++) {
        if (shmtopo_rma_lock(ctrl, r, 0) < 0) {
            const int err = errno;
            while (r-- > 0) /* the ones taken go back */
                shmtopo_rma_unlock(ctrl, r, 0);
            errno = err;
            return -1;
        }
    }
    return 0;
}

int shmtopo_rma_unlock_all(shmtopo_win_t *ctrl)
{
    rma_words_t *mine = ctrl ? words_of(ctrl, ctrl->rank, "unlock_all") : NULL;
    if (!mine)
        return ctrl ? -1 : shmtopo_fail(EBADF, -1, "unlock_all: the window is NULL or freed");
    atomic_thread_fence(memory_order_seq_cst);
    if (!mine->all_slow) {
        count_out(&mine->all_out, &mine->all_out_waiters);
        return 0;
    }
    mine->all_slow = 0;
    for (int r = 0; r < ctrl->size; r++)
        shmtopo_rma_unlock(ctrl, r, 0);
    return 0;
}

void shmtopo_rma_sync(void)
{
    atomic_thread_fence(memory_order_seq_cst);
}

/* ---- elements ------------------------------------------------------------ */

static int lock_free(size_t size, const void *addr)
{
    return (size == 1 || size == 2 || size == 4 || size == 8) && (uintptr_t)addr % size == 0;
}

static int is_integer(int dtype)
{
    return dtype >= SHMTOPO_INT8 && dtype <= SHMTOPO_UINT64;
}

/* new = old op origin (REPLACE: origin; NO_OP: old), on aligned copies. */
static void combine(void *new, const void *old, const void *origin, size_t size, int dtype, int op)
{
    if (op == SHMTOPO_RMA_REPLACE)
        memcpy(new, origin, size);
    else if (op == SHMTOPO_RMA_NO_OP)
        memcpy(new, old, size);
    else
        shmtopo_reduce_pair(new, old, origin, 1, dtype, op);
}

#define CAS_LOOP(T)                                                                               \
    do {                                                                                          \
        T *p = addr, old = __atomic_load_n(p, __ATOMIC_RELAXED), new;                             \
        if (op == SHMTOPO_RMA_NO_OP) {                                                            \
            old = __atomic_load_n(p, __ATOMIC_SEQ_CST);                                           \
        } else if (op == SHMTOPO_RMA_REPLACE) {                                                   \
            memcpy(&new, origin, sizeof(T));                                                      \
            old = __atomic_exchange_n(p, new, __ATOMIC_SEQ_CST);                                  \
        } else if (fetch_op && op == SHMTOPO_OP_SUM) {                                            \
            memcpy(&new, origin, sizeof(T));                                                      \
            old = __atomic_fetch_add(p, new, __ATOMIC_SEQ_CST);                                   \
        } else if (fetch_op && op == SHMTOPO_OP_BAND) {                                           \
            memcpy(&new, origin, sizeof(T));                                                      \
            old = __atomic_fetch_and(p, new, __ATOMIC_SEQ_CST);                                   \
        } else if (fetch_op && op == SHMTOPO_OP_BOR) {                                            \
            memcpy(&new, origin, sizeof(T));                                                      \
            old = __atomic_fetch_or(p, new, __ATOMIC_SEQ_CST);                                    \
        } else if (fetch_op && op == SHMTOPO_OP_BXOR) {                                           \
            memcpy(&new, origin, sizeof(T));                                                      \
            old = __atomic_fetch_xor(p, new, __ATOMIC_SEQ_CST);                                   \
        } else {                                                                                  \
            do                                                                                    \
                combine(&new, &old, origin, sizeof(T), dtype, op);                                \
            while (!__atomic_compare_exchange_n(p, &old, new, 1, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)); \
        }                                                                                         \
        if (result)                                                                               \
            memcpy(result, &old, sizeof(T));                                                      \
    } while (0)

/* One element of `size` bytes at an aligned address, with one atomic. The
 * origin is an aligned copy; fetch-add and the bitwise fetch-ops are
 * integer ones (unsigned wrap-around, the same bits for signed types). */
static void atomic_element(void *addr, const void *origin, void *result, size_t size, int dtype, int op)
{
    const int fetch_op = is_integer(dtype);
    switch (size) {
    case 1: CAS_LOOP(uint8_t); break;
    case 2: CAS_LOOP(uint16_t); break;
    case 4: CAS_LOOP(uint32_t); break;
    default: CAS_LOOP(uint64_t); break;
    }
}

/* Elements under the target's guard: through aligned copies, a block at a time. */
static void guarded_elements(char *addr, const char *origin, char *result, size_t count, size_t size, int dtype,
                             int op)
{
    enum { BLOCK = 4096 };
    _Alignas(64) char old[BLOCK], in[BLOCK], new[BLOCK];
    const size_t per = BLOCK / size;
    for (size_t done = 0; done < count; done += per) {
        const size_t n = count - done < per ? count - done : per, bytes = n * size;
        memcpy(old, addr + done * size, bytes);
        if (result)
            memcpy(result + done * size, old, bytes);
        if (op == SHMTOPO_RMA_NO_OP)
            continue;
        if (op == SHMTOPO_RMA_REPLACE) {
            memcpy(addr + done * size, origin + done * size, bytes);
            continue;
        }
        memcpy(in, origin + done * size, bytes);
        shmtopo_reduce_pair(new, old, in, n, dtype, op);
        memcpy(addr + done * size, new, bytes);
    }
}

int shmtopo_rma_accumulate(shmtopo_win_t *ctrl, int target, void *addr, const void *origin, void *result,
                           size_t count, int dtype, int op)
{
    rma_words_t *w = words_of(ctrl, target, "accumulate");
    if (!w)
        return -1;
    if (dtype < 0 || dtype >= SHMTOPO_NDTYPES)
        return shmtopo_fail(EINVAL, -1, "accumulate: unknown element type %d", dtype);
    if (op != SHMTOPO_RMA_REPLACE && op != SHMTOPO_RMA_NO_OP && shmtopo_reduce_check(dtype, op) < 0)
        return -1;
    if (op == SHMTOPO_RMA_NO_OP && !result)
        return 0;
    if (count == 0)
        return 0;
    const size_t size = shmtopo_dtype_size(dtype);
    if (lock_free(size, addr)) {
        _Alignas(16) char in[16], out[16];
        for (size_t i = 0; i < count; i++) {
            memcpy(in, (const char *)origin + (op == SHMTOPO_RMA_NO_OP ? 0 : i * size), size);
            atomic_element((char *)addr + i * size, in, result ? out : NULL, size, dtype, op);
            if (result)
                memcpy((char *)result + i * size, out, size);
        }
        return 0;
    }
    if (ticket_acquire(ctrl, target, &w->guard_next, &w->guard_serving, &w->guard_waiters, "accumulate") < 0)
        return -1;
    guarded_elements(addr, origin, result, count, size, dtype, op);
    ticket_release(&w->guard_serving, &w->guard_waiters);
    return 0;
}

int shmtopo_rma_compare_and_swap(shmtopo_win_t *ctrl, int target, void *addr, const void *origin,
                                 const void *compare, void *result, size_t size)
{
    rma_words_t *w = words_of(ctrl, target, "compare_and_swap");
    if (!w)
        return -1;
    if (size == 0 || size > 16)
        return shmtopo_fail(EINVAL, -1, "compare_and_swap: element of %zu bytes", size);
    _Alignas(16) char old[16], want[16], new[16];
    memcpy(want, compare, size);
    memcpy(new, origin, size);
    if (lock_free(size, addr)) {
#define CAS_ONE(T)                                                                                \
    do {                                                                                          \
        T expected, desired;                                                                      \
        memcpy(&expected, want, sizeof(T));                                                       \
        memcpy(&desired, new, sizeof(T));                                                         \
        __atomic_compare_exchange_n((T *)addr, &expected, desired, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); \
        memcpy(old, &expected, sizeof(T));                                                        \
    } while (0)
        switch (size) {
        case 1: CAS_ONE(uint8_t); break;
        case 2: CAS_ONE(uint16_t); break;
        case 4: CAS_ONE(uint32_t); break;
        default: CAS_ONE(uint64_t); break;
        }
#undef CAS_ONE
    } else {
        if (ticket_acquire(ctrl, target, &w->guard_next, &w->guard_serving, &w->guard_waiters,
                           "compare_and_swap") < 0)
            return -1;
        memcpy(old, addr, size);
        if (memcmp(old, want, size) == 0)
            memcpy(addr, new, size);
        ticket_release(&w->guard_serving, &w->guard_waiters);
    }
    memcpy(result, old, size);
    return 0;
}
