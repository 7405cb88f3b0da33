/* The KUPL / KPCCL shared-memory API (kupl.h, kpccl.h) over shmtopo's core.
 *
 * Programs written for the Kunpeng HPC kit build unchanged against these
 * headers and libshmtopo.so. The logic lives in the static helpers below and
 * in the core; kupl_compat_impl.h only adapts the prefixed types, and is
 * included once per prefix. Unlike the original, every failure returns
 * <PREFIX>_ERROR and prints why on stderr (the library's own functions never
 * print: this layer is the API boundary that has no other error channel). */
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "../src/shmtopo/include/kupl.h"
#include "../src/shmtopo/include/kpccl.h"

/* Report a failed call and return -1 (the value of <PREFIX>_ERROR). */
static int compat_error(const char *fn, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int compat_error(const char *fn, const char *fmt, ...)
{
    /* One write per message, so lines from ranks sharing stderr stay whole. */
    char line[1024];
    int len = snprintf(line, sizeof(line), "%s: ", fn);
    va_list ap;
    va_start(ap, fmt);
    if (len >= 0 && len < (int)sizeof(line) - 1)
        len += vsnprintf(line + len, sizeof(line) - 1 - (size_t)len, fmt, ap);
    va_end(ap);
    if (len < 0)
        return -1;
    if (len > (int)sizeof(line) - 2)
        len = (int)sizeof(line) - 2;
    line[len++] = '\n';
    fwrite(line, 1, (size_t)len, stderr);
    return -1;
}

/* A shmtopo call failed: report its message. */
static int compat_fail(const char *fn)
{
    return compat_error(fn, "%s", shmtopo_last_error());
}

/* The backend and fence algorithm <API>_SHM_TYPE / <API>_SHM_FENCE_ALGORITHM
 * ask for, read as the kit reads them (DEFAULT when unset). A backend that
 * is unknown or unavailable here falls back to posix with a warning, printed
 * by rank 0 only since every rank reads the same setting. */
static void compat_settings(const char *api, int rank, int *backendp, int *fence_algp)
{
    char var[48], warning[512];
    warning[0] = '\0';
    *backendp = SHMTOPO_BACKEND_DEFAULT;
    *fence_algp = SHMTOPO_FENCE_DEFAULT;
    snprintf(var, sizeof(var), "%s_SHM_TYPE", api);
    const char *v = getenv(var);
    if (v && *v) {
        int backend;
        if (shmtopo_backend_from_name(v, &backend) < 0)
            snprintf(warning, sizeof(warning), "%s=%s is not supported (posix, xpmem, memfd or sysv); using posix",
                     var, v);
        else if (shmtopo_backend_probe(backend) < 0)
            snprintf(warning, sizeof(warning), "%s=%s is unavailable here (%s); using posix", var, v,
                     shmtopo_last_error());
        *backendp = warning[0] ? SHMTOPO_BACKEND_POSIX : backend;
    }
    snprintf(var, sizeof(var), "%s_SHM_FENCE_ALGORITHM", api);
    v = getenv(var);
    if (v && *v)
        *fence_algp = shmtopo_fence_alg_from_kupl(v);
    if (warning[0] && rank == 0)
        fprintf(stderr, "shmtopo: warning: %s\n", warning);
}

/* A bad argument on this rank: fail the collective call on every rank
 * (through its agreement) rather than leave the others waiting. */
static int compat_refuse(const char *fn, shmtopo_comm_t *comm, int kind, const char *why)
{
    if (comm)
        shmtopo_reject(comm, kind, why);
    return compat_error(fn, "%s", comm ? shmtopo_last_error() : why);
}

/* shm_info_set(SHM_INFO_IS_CONTIG, v): a setting of the library for every
 * later allocation, whichever prefix set it (as in KUPL, a process-wide one). */
static _Atomic int compat_contig;

static int compat_info_set(const char *fn, const char *api, int flag, uint32_t value)
{
    if (flag != KUPL_SHM_INFO_IS_CONTIG)
        return compat_error(fn, "info_flag %d is not a setting (%s_SHM_INFO_IS_CONTIG is %d)", flag, api,
                            (int)KUPL_SHM_INFO_IS_CONTIG);
    if (value > 1)
        return compat_error(fn, "%s_SHM_INFO_IS_CONTIG takes 0 or 1, not %u", api, (unsigned)value);
    atomic_store(&compat_contig, (int)value);
    return 0;
}

/* Collective window allocation; `invalid` (non-NULL) is a bad argument
 * found on this rank. The window is tracked for attach (a second collective
 * step, gathering where each rank has its own part). */
static int compat_win_alloc(const char *fn, shmtopo_comm_t *comm, int backend, int fence_alg,
                            size_t size, const char *invalid, void **basep, shmtopo_win_t **winp)
{
    if (invalid)
        return compat_refuse(fn, comm, SHMTOPO_KIND_WIN_ALLOC, invalid);
    shmtopo_win_attr_t attr = {.backend = backend, .fence_alg = fence_alg,
                               .contiguous = atomic_load(&compat_contig)};
    if (shmtopo_win_alloc(comm, size, &attr, basep, winp) < 0)
        return compat_fail(fn);
    if (shmtopo_attach_track_win(*winp) < 0) {
        int rc = compat_fail(fn);
        shmtopo_win_abandon(*winp);
        return rc;
    }
    return 0;
}

/* Collective: free a window. 1 when it is gone (freed, or left after a
 * failed wait), 0 when the free failed and the window is still there (ranks
 * freed different windows: the agreement refused). */
static int compat_win_release(const char *fn, shmtopo_comm_t *comm, shmtopo_win_t *win, int *failedp)
{
    shmtopo_attach_untrack_win(win);
    int rc = shmtopo_win_free(win);
    *failedp = rc < 0;
    if (rc < 0)
        compat_fail(fn);
    return rc == 0 || shmtopo_comm_broken(comm);
}

/* The kit's logging call: "<API> ERROR: message\n" in one write. */
static void compat_log(const char *api, const char *fmt, va_list ap)
{
    char line[1024];
    int len = snprintf(line, sizeof(line), "%s ERROR: ", api);
    if (len >= 0 && len < (int)sizeof(line) - 1 && fmt)
        len += vsnprintf(line + len, sizeof(line) - 1 - (size_t)len, fmt, ap);
    if (len < 0)
        return;
    if (len > (int)sizeof(line) - 2)
        len = (int)sizeof(line) - 2;
    if (len == 0 || line[len - 1] != '\n')
        line[len++] = '\n';
    fwrite(line, 1, (size_t)len, stderr);
}

static int compat_memcpy(const char *fn, void *dst, const void *src, size_t count)
{
    if (count && (!dst || !src))
        return compat_error(fn, "dst and src must not be NULL (count %zu)", count);
    if (count)
        memmove(dst, src, count);
    return 0;
}

/* shm_attach: addr's fields checked here, the mapping made by kupl_attach.c. */
static void *compat_attach(const char *fn, void *src_addr, int src_pid, int dst_pid, size_t size)
{
    if (dst_pid != (int)getpid()) {
        compat_error(fn, "dst_pid %d is not this process (%d)", dst_pid, (int)getpid());
        return NULL;
    }
    void *p = shmtopo_attach(src_pid, src_addr, size);
    if (!p)
        compat_fail(fn);
    return p;
}

/* The core's allgather passes bytes; the program's callback takes a count
 * and a datatype, so pass CHAR with the byte count. */
static int compat_count(size_t nbytes)
{
    return nbytes > INT_MAX ? -1 : (int)nbytes;
}

/* Persistent collectives. The prefixes' enums have the same values, so the
 * KUPL ones stand for both. */
static const int compat_dtypes[] = {
    [KUPL_SHM_DATATYPE_CHAR] = SHMTOPO_INT8,
    [KUPL_SHM_DATATYPE_INT] = sizeof(int) == 8 ? SHMTOPO_INT64 : SHMTOPO_INT32,
    [KUPL_SHM_DATATYPE_LONG] = sizeof(long) == 8 ? SHMTOPO_INT64 : SHMTOPO_INT32,
    [KUPL_SHM_DATATYPE_FLOAT] = SHMTOPO_FLOAT32,
    [KUPL_SHM_DATATYPE_DOUBLE] = SHMTOPO_FLOAT64,
};

static const int compat_ops[] = {
    [KUPL_SHM_REDUCE_OP_MAX] = SHMTOPO_OP_MAX,   [KUPL_SHM_REDUCE_OP_MIN] = SHMTOPO_OP_MIN,
    [KUPL_SHM_REDUCE_OP_SUM] = SHMTOPO_OP_SUM,   [KUPL_SHM_REDUCE_OP_PROD] = SHMTOPO_OP_PROD,
    [KUPL_SHM_REDUCE_OP_BAND] = SHMTOPO_OP_BAND, [KUPL_SHM_REDUCE_OP_BOR] = SHMTOPO_OP_BOR,
    [KUPL_SHM_REDUCE_OP_BXOR] = SHMTOPO_OP_BXOR,
};

#define COMPAT_NELEMS(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* The shmtopo element type of a <PREFIX>_SHM_DATATYPE_*, or -1 with why. */
static int compat_dtype(const char *what, int datatype, char *why, size_t len)
{
    if (datatype >= 0 && datatype < COMPAT_NELEMS(compat_dtypes))
        return compat_dtypes[datatype];
    snprintf(why, len, "%s %d is not a datatype (CHAR, INT, LONG, FLOAT or DOUBLE)", what, datatype);
    return -1;
}

/* The shmtopo operation of a <PREFIX>_SHM_REDUCE_OP_*, or -1 with why. */
static int compat_op(int op, char *why, size_t len)
{
    if (op >= 0 && op < COMPAT_NELEMS(compat_ops))
        return compat_ops[op];
    snprintf(why, len, "op %d is not a reduce op (MAX, MIN, SUM, PROD, BAND, BOR or BXOR)", op);
    return -1;
}

/* Checks every *_init makes before the core sees its arguments: NULL, or
 * why they are bad. `buffers`: whether the buffers it needs are non-NULL. */
static const char *compat_init_check(const void *request, int count, int buffers, char *why, size_t len)
{
    if (!request)
        snprintf(why, len, "request must not be NULL");
    else if (count < 0)
        snprintf(why, len, "count %d is negative", count);
    else if (count > 0 && !buffers)
        snprintf(why, len, "buffers must not be NULL (count %d)", count);
    else
        return NULL;
    return why;
}

#define SHMTOPO_COMPAT_NAME(x) kupl_##x
#define SHMTOPO_COMPAT_CONST(x) KUPL_##x
#define SHMTOPO_COMPAT_API "KUPL"
#include "kupl_compat_impl.h"
#undef SHMTOPO_COMPAT_NAME
#undef SHMTOPO_COMPAT_CONST
#undef SHMTOPO_COMPAT_API

#define SHMTOPO_COMPAT_NAME(x) kpccl_##x
#define SHMTOPO_COMPAT_CONST(x) KPCCL_##x
#define SHMTOPO_COMPAT_API "KPCCL"
#include "kupl_compat_impl.h"
#undef SHMTOPO_COMPAT_NAME
#undef SHMTOPO_COMPAT_CONST
#undef SHMTOPO_COMPAT_API
