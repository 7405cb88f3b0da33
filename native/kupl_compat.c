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
#include <stdio.h>
#include <stdlib.h>

#include "shmtopo.h"
#include "../shmtopo/include/kupl.h"
#include "../shmtopo/include/kpccl.h"

/* Report a failed call and return -1 (the value of <PREFIX>_ERROR). */
static int compat_error(const char *fn, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int compat_error(const char *fn, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", fn);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return -1;
}

/* A shmtopo call failed: report its message. */
static int compat_fail(const char *fn)
{
    return compat_error(fn, "%s", shmtopo_last_error());
}

/* The backend <API>_SHM_TYPE asks for. Unknown names and backends this
 * machine lacks (xpmem without /dev/xpmem) fall back to posix with a
 * warning, printed by rank 0 only since every rank reads the same setting. */
static int compat_backend(const char *api, int rank)
{
    char var[48];
    snprintf(var, sizeof(var), "%s_SHM_TYPE", api);
    const char *value = getenv(var);
    int backend;
    if (!value || !*value)
        return SHMTOPO_BACKEND_DEFAULT; /* SHMTOPO_SHM_TYPE, else posix */
    if (shmtopo_backend_from_name(value, &backend) < 0 || backend == SHMTOPO_BACKEND_DEFAULT) {
        if (rank == 0)
            fprintf(stderr, "shmtopo: warning: %s=%s is not supported "
                            "(posix, xpmem, memfd or sysv); using posix\n", var, value);
        return SHMTOPO_BACKEND_POSIX;
    }
    if (shmtopo_backend_probe(backend) < 0) {
        if (rank == 0)
            fprintf(stderr, "shmtopo: warning: %s=%s is unavailable here (%s); using posix\n",
                    var, value, shmtopo_last_error());
        return SHMTOPO_BACKEND_POSIX;
    }
    return backend;
}

/* Collective window allocation. `invalid` (non-NULL) is a bad argument found
 * on this rank: the core then fails the call on every rank with it rather
 * than leaving the others waiting. <API>_SHM_FENCE_ALGORITHM takes the KUPL
 * numbers (1 linear, 2 recursive doubling) or shmtopo's names. */
static int compat_win_alloc(const char *fn, const char *api, shmtopo_comm_t *comm,
                            int backend, size_t size, const char *invalid,
                            void **basep, shmtopo_win_t **winp)
{
    shmtopo_win_attr_t attr = {.backend = backend, .fence_alg = SHMTOPO_FENCE_DEFAULT,
                               .invalid = invalid};
    char var[48], why[256];
    snprintf(var, sizeof(var), "%s_SHM_FENCE_ALGORITHM", api);
    const char *value = getenv(var);
    if (!invalid && value && *value && shmtopo_fence_alg_from_name(value, &attr.fence_alg) < 0) {
        snprintf(why, sizeof(why), "%s=%s: %s", var, value, shmtopo_last_error());
        attr.invalid = why;
    }
    if (shmtopo_win_alloc(comm, size, &attr, basep, winp) < 0)
        return compat_fail(fn);
    return 0;
}

/* The core's allgather passes bytes; the program's callback takes a count
 * and a datatype, so pass CHAR with the byte count. */
static int compat_count(size_t nbytes)
{
    return nbytes > INT_MAX ? -1 : (int)nbytes;
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
