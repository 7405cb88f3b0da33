/* Names of backends and fence algorithms, and their defaults from the
 * environment (SHMTOPO_* first, then the KUPL spellings). */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "internal.h"

static const char *const backend_names[] = {
    [SHMTOPO_BACKEND_DEFAULT] = "default",
    [SHMTOPO_BACKEND_POSIX] = "posix",
    [SHMTOPO_BACKEND_MEMFD] = "memfd",
    [SHMTOPO_BACKEND_SYSV] = "sysv",
    [SHMTOPO_BACKEND_XPMEM] = "xpmem",
};

static const char *const fence_alg_names[] = {
    [SHMTOPO_FENCE_DEFAULT] = "default",
    [SHMTOPO_FENCE_AUTO] = "auto",
    [SHMTOPO_FENCE_LINEAR] = "linear",
    [SHMTOPO_FENCE_RD] = "rd",
    [SHMTOPO_FENCE_DISSEMINATION] = "dissemination",
};

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

const char *shmtopo_backend_name(int backend)
{
    return backend >= 0 && backend < COUNT(backend_names) ? backend_names[backend] : "unknown";
}

const char *shmtopo_fence_alg_name(int alg)
{
    return alg >= 0 && alg < COUNT(fence_alg_names) ? fence_alg_names[alg] : "unknown";
}

int shmtopo_backend_from_name(const char *name, int *backendp)
{
    for (int i = 0; i < COUNT(backend_names); i++)
        if (name && strcasecmp(name, backend_names[i]) == 0) {
            *backendp = i;
            return 0;
        }
    return shmtopo_fail(EINVAL, -1,
                        "unknown shared-memory backend '%s' (expected posix, memfd, sysv or xpmem)",
                        name ? name : "(null)");
}

int shmtopo_fence_alg_from_name(const char *name, int *algp)
{
    /* KUPL_SHM_FENCE_ALGORITHM numbers: 1 linear, 2 recursive doubling. */
    if (name && strcmp(name, "1") == 0) {
        *algp = SHMTOPO_FENCE_LINEAR;
        return 0;
    }
    if (name && strcmp(name, "2") == 0) {
        *algp = SHMTOPO_FENCE_RD;
        return 0;
    }
    if (name && strcasecmp(name, "recursive_doubling") == 0) {
        *algp = SHMTOPO_FENCE_RD;
        return 0;
    }
    for (int i = 0; i < COUNT(fence_alg_names); i++)
        if (name && strcasecmp(name, fence_alg_names[i]) == 0) {
            *algp = i;
            return 0;
        }
    return shmtopo_fail(EINVAL, -1,
                        "unknown fence algorithm '%s' (expected auto, linear, rd, dissemination, 1 or 2)",
                        name ? name : "(null)");
}

/* An environment variable's value, or NULL when unset or empty. */
static const char *env_value(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

int shmtopo_default_backend(int *backendp)
{
    const char *v = env_value("SHMTOPO_SHM_TYPE");
    if (!v) {
        *backendp = SHMTOPO_BACKEND_POSIX;
        return 0;
    }
    if (shmtopo_backend_from_name(v, backendp) < 0)
        return shmtopo_fail(EINVAL, -1, "SHMTOPO_SHM_TYPE=%s: %s", v, shmtopo_last_error());
    if (*backendp == SHMTOPO_BACKEND_DEFAULT)
        *backendp = SHMTOPO_BACKEND_POSIX;
    return 0;
}

int shmtopo_default_fence_alg(int *algp)
{
    const char *var = "SHMTOPO_FENCE_ALGORITHM";
    const char *v = env_value(var);
    if (!v) {
        var = "KUPL_SHM_FENCE_ALGORITHM";
        v = env_value(var);
    }
    if (!v) {
        *algp = SHMTOPO_FENCE_AUTO;
        return 0;
    }
    if (shmtopo_fence_alg_from_name(v, algp) < 0)
        return shmtopo_fail(EINVAL, -1, "%s=%s: %s", var, v, shmtopo_last_error());
    if (*algp == SHMTOPO_FENCE_DEFAULT)
        *algp = SHMTOPO_FENCE_AUTO;
    return 0;
}

int shmtopo_affinity_ncpus(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) < 0)
        return shmtopo_fail_errno("sched_getaffinity");
    return CPU_COUNT(&set);
}
