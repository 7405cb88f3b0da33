/* Names of the core's enumerations, both ways: backends, fence algorithms,
 * topology sources, collective algorithms, level types and operation kinds.
 * Parsing is case-insensitive; a name that is not known is an error saying
 * what is accepted. */
#include <errno.h>
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

static const char *const source_names[] = {
    [SHMTOPO_SOURCE_AUTO] = "auto",
    [SHMTOPO_SOURCE_SHMEM] = "shmem",
    [SHMTOPO_SOURCE_XML] = "xml",
    [SHMTOPO_SOURCE_LOCAL] = "local",
};

static const char *const coll_alg_names[] = {
    [SHMTOPO_COLL_AUTO] = "auto",
    [SHMTOPO_COLL_FLAT] = "flat",
    [SHMTOPO_COLL_RSAG] = "rsag",
};

/* Level types by enum shmtopo_level_type; "numa" is also read as numanode. */
static const char *const level_type_names[] = {
    [SHMTOPO_LEVEL_CORE] = "core", [SHMTOPO_LEVEL_L1] = "l1", [SHMTOPO_LEVEL_L2] = "l2",
    [SHMTOPO_LEVEL_L3] = "l3", [SHMTOPO_LEVEL_NUMA] = "numanode", [SHMTOPO_LEVEL_DIE] = "die",
    [SHMTOPO_LEVEL_PACKAGE] = "package",
};

static const char *const kind_names[] = {
    [SHMTOPO_KIND_BARRIER] = "barrier", [SHMTOPO_KIND_BCAST] = "bcast",
    [SHMTOPO_KIND_REDUCE] = "reduce", [SHMTOPO_KIND_ALLREDUCE] = "allreduce",
    [SHMTOPO_KIND_ALLGATHER] = "allgather", [SHMTOPO_KIND_REDUCE_SCATTER] = "reduce_scatter",
    [SHMTOPO_KIND_ALLTOALL] = "alltoall", [SHMTOPO_KIND_WIN_ALLOC] = "allocate",
    [SHMTOPO_KIND_WIN_FREE] = "window free", [SHMTOPO_KIND_COMM_FREE] = "comm free",
    [SHMTOPO_KIND_TOPO_SHARE] = "share_topology", [SHMTOPO_KIND_SPLIT] = "split",
    [SHMTOPO_KIND_COMM_CREATE] = "comm creation", [SHMTOPO_KIND_BIND] = "bind",
    [SHMTOPO_KIND_VERDICT] = "agreement", [SHMTOPO_KIND_GATHER] = "gather",
    [SHMTOPO_KIND_SCATTER] = "scatter", [SHMTOPO_KIND_GATHERV] = "gatherv",
    [SHMTOPO_KIND_SCATTERV] = "scatterv", [SHMTOPO_KIND_ALLGATHERV] = "allgatherv",
    [SHMTOPO_KIND_ALLTOALLV] = "alltoallv", [SHMTOPO_KIND_SCAN] = "scan",
    [SHMTOPO_KIND_EXSCAN] = "exscan", [SHMTOPO_KIND_ALLTOALLW] = "alltoallw",
};

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const char *name_of(const char *const *names, int n, int i)
{
    return i >= 0 && i < n && names[i] ? names[i] : "unknown";
}

const char *shmtopo_backend_name(int backend)
{
    return name_of(backend_names, COUNT(backend_names), backend);
}

const char *shmtopo_fence_alg_name(int alg)
{
    return name_of(fence_alg_names, COUNT(fence_alg_names), alg);
}

const char *shmtopo_topo_source_name(int source)
{
    return name_of(source_names, COUNT(source_names), source);
}

const char *shmtopo_coll_alg_name(int alg)
{
    return name_of(coll_alg_names, COUNT(coll_alg_names), alg);
}

/* Index of `name` in names[first..n), case-insensitive, or -1. */
static int lookup(const char *const *names, int first, int n, const char *name)
{
    for (int i = first; name && i < n; i++)
        if (names[i] && strcasecmp(name, names[i]) == 0)
            return i;
    return -1;
}

/* names[first..n) by name into *outp, or EINVAL saying what is accepted. */
static int parse_name(const char *const *names, int first, int n, const char *name, const char *what,
                      const char *accepted, int *outp)
{
    int i = lookup(names, first, n, name);
    if (i < 0)
        return shmtopo_fail(EINVAL, -1, "unknown %s '%s' (%s)", what, name ? name : "(null)", accepted);
    *outp = i;
    return 0;
}

int shmtopo_backend_from_name(const char *name, int *backendp)
{
    return parse_name(backend_names, SHMTOPO_BACKEND_POSIX, COUNT(backend_names), name,
                      "shared-memory backend", SHMTOPO_BACKENDS_ACCEPTED, backendp);
}

int shmtopo_fence_alg_from_name(const char *name, int *algp)
{
    /* KUPL's numbers: 1 linear, 2 recursive doubling */
    if (name && strcmp(name, "1") == 0)
        return *algp = SHMTOPO_FENCE_LINEAR, 0;
    if (name && (strcmp(name, "2") == 0 || strcasecmp(name, "recursive_doubling") == 0))
        return *algp = SHMTOPO_FENCE_RD, 0;
    return parse_name(fence_alg_names, SHMTOPO_FENCE_AUTO, COUNT(fence_alg_names), name,
                      "fence algorithm", SHMTOPO_FENCES_ACCEPTED, algp);
}

int shmtopo_topo_source_from_name(const char *name, int *sourcep)
{
    return parse_name(source_names, 0, COUNT(source_names), name, "topology source", SHMTOPO_SOURCES_ACCEPTED,
                      sourcep);
}

const char *shmtopo_level_type_name(int type)
{
    return name_of(level_type_names, COUNT(level_type_names), type);
}

int shmtopo_coll_alg_from_name(const char *name, int *algp)
{
    return parse_name(coll_alg_names, 0, COUNT(coll_alg_names), name, "collective algorithm",
                      SHMTOPO_COLL_ALGS_ACCEPTED, algp);
}

int shmtopo_level_type_lookup(const char *name)
{
    if (name && strcasecmp(name, "numa") == 0)
        return SHMTOPO_LEVEL_NUMA;
    return lookup(level_type_names, 1, COUNT(level_type_names), name);
}

/* KUPL_SHM_FENCE_ALGORITHM as KUPL reads it: 1 is linear, any other value
 * recursive doubling; shmtopo's own names are accepted too. */
int shmtopo_fence_alg_from_kupl(const char *value)
{
    int alg;
    if (strcmp(value, "1") == 0)
        return SHMTOPO_FENCE_LINEAR;
    if (lookup(fence_alg_names, SHMTOPO_FENCE_AUTO, COUNT(fence_alg_names), value) >= 0 &&
        shmtopo_fence_alg_from_name(value, &alg) == 0)
        return alg;
    return SHMTOPO_FENCE_RD;
}

const char *shmtopo_kind_name(int kind)
{
    return shmtopo_kind_known(kind) ? kind_names[kind] : "an unknown operation";
}

int shmtopo_kind_known(int kind)
{
    return kind > 0 && kind < COUNT(kind_names) && kind_names[kind];
}
