/* Binding this process or thread with a topology (CPUs and memory), and
 * where ranks go when a comm binds them. Binding changes the process, not
 * the topology, so it works on an adopted copy too: hwloc's adopt gives
 * every process its own binding hooks. Placements are read-only walks. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <hwloc.h>

#include "internal.h"
#include "topology.h"

static hwloc_bitmap_t bitmap_of(const unsigned *idx, size_t n)
{
    return shmtopo_bitmap_of(idx, n, "bind");
}

/* Fill out/countp from a bitmap (see topology.h), then free it, keeping errno. */
static int give_set(hwloc_bitmap_t set, unsigned *out, size_t max, size_t *countp)
{
    int rc = shmtopo_bitmap_indices(set, out, max, countp);
    shmtopo_bitmap_drop(set);
    return rc;
}

/* hwloc may return -1 without errno (no hook for this system). */
static int fail_hwloc(const char *what)
{
    int err = errno ? errno : ENOSYS;
    return shmtopo_fail(err, -1, "%s: %s", what,
                        err == ENOSYS ? "not supported here (is the topology this machine's?)"
                        : err == EXDEV ? "cannot bind to exactly that set here"
                                       : strerror(err));
}

/* hwloc binds through a topology of another machine (XML, synthetic) with
 * hooks that do nothing and succeed: refuse instead. */
static int this_system(hwloc_topology_t topo, const char *what)
{
    if (!hwloc_topology_is_thissystem(topo))
        return shmtopo_fail(ENOSYS, -1,
                            "%s: the topology does not describe this machine (XML without this_system, or "
                            "synthetic); binding through it would do nothing", what);
    return 0;
}

static int check_flags(int flags, int allowed, const char *what)
{
    if (flags & ~allowed)
        return shmtopo_fail(EINVAL, -1, "%s: unknown flags %#x", what, (unsigned)(flags & ~allowed));
    return 0;
}

/* ---- CPUs ------------------------------------------------------------------------ */

/* A CPU set of this process (or of the calling thread, with
 * SHMTOPO_BIND_THREAD) that hwloc reads with `get` (named `what`). */
typedef int (*cpu_getter)(hwloc_topology_t, hwloc_bitmap_t, int);

static int read_cpus(void *topo, int flags, cpu_getter get, const char *what, unsigned *out, size_t max,
                     size_t *countp)
{
    hwloc_bitmap_t set;

    if (!topo || check_flags(flags, SHMTOPO_BIND_THREAD, what) < 0)
        return topo ? -1 : shmtopo_fail(EINVAL, -1, "%s: NULL topology", what);
    if (this_system(topo, what) < 0)
        return -1;
    if (!(set = hwloc_bitmap_alloc()))
        return shmtopo_fail(ENOMEM, -1, "%s: no memory for a bitmap", what);
    errno = 0;
    if (get(topo, set, flags & SHMTOPO_BIND_THREAD ? HWLOC_CPUBIND_THREAD : 0) < 0) {
        fail_hwloc(what);
        shmtopo_bitmap_drop(set);
        return -1;
    }
    return give_set(set, out, max, countp);
}

/* The binding of the whole process (all its threads), unless asked for the
 * calling thread's. */
int shmtopo_topo_get_cpubind(void *topo, int flags, unsigned *out, size_t max, size_t *countp)
{
    return read_cpus(topo, flags, hwloc_get_cpubind, "get_cpubind", out, max, countp);
}

int shmtopo_topo_get_last_cpu(void *topo, int flags, unsigned *out, size_t max, size_t *countp)
{
    return read_cpus(topo, flags, hwloc_get_last_cpu_location, "get_last_cpu_location", out, max, countp);
}

int shmtopo_topo_set_cpubind(void *topo, const unsigned *cpus, size_t n, int flags)
{
    hwloc_bitmap_t set;
    int hflags;

    if (!topo)
        return shmtopo_fail(EINVAL, -1, "set_cpubind: NULL topology");
    if (check_flags(flags, SHMTOPO_BIND_THREAD | SHMTOPO_BIND_STRICT, "set_cpubind") < 0 ||
        this_system(topo, "set_cpubind") < 0)
        return -1;
    if (n == 0)
        return shmtopo_fail(EINVAL, -1, "set_cpubind: an empty set of CPUs");
    if (!(set = bitmap_of(cpus, n)))
        return -1;
    if (!hwloc_bitmap_isincluded(set, hwloc_topology_get_topology_cpuset(topo))) {
        hwloc_bitmap_free(set);
        return shmtopo_fail(EINVAL, -1, "set_cpubind: CPUs outside the topology");
    }
    hflags = (flags & SHMTOPO_BIND_THREAD ? HWLOC_CPUBIND_THREAD : HWLOC_CPUBIND_PROCESS) |
             (flags & SHMTOPO_BIND_STRICT ? HWLOC_CPUBIND_STRICT : 0);
    errno = 0;
    if (hwloc_set_cpubind(topo, set, hflags) < 0) {
        fail_hwloc("hwloc_set_cpubind");
        shmtopo_bitmap_drop(set);
        return -1;
    }
    hwloc_bitmap_free(set);
    return 0;
}

/* ---- memory ---------------------------------------------------------------------- */

static const struct {
    const char *name;
    int policy;
} policies[] = {
    { "default", SHMTOPO_MEMBIND_DEFAULT }, { "firsttouch", SHMTOPO_MEMBIND_FIRSTTOUCH },
    { "bind", SHMTOPO_MEMBIND_BIND }, { "interleave", SHMTOPO_MEMBIND_INTERLEAVE },
    { "nexttouch", SHMTOPO_MEMBIND_NEXTTOUCH }, { "mixed", SHMTOPO_MEMBIND_MIXED },
};

int shmtopo_membind_policy_from_name(const char *name, int *policyp)
{
    size_t i;

    if (!name || !policyp)
        return shmtopo_fail(EINVAL, -1, "membind policy: NULL argument");
    for (i = 0; i < sizeof(policies) / sizeof(policies[0]); i++)
        if (!strcasecmp(name, policies[i].name) && policies[i].policy != SHMTOPO_MEMBIND_MIXED) {
            *policyp = policies[i].policy;
            return 0;
        }
    return shmtopo_fail(EINVAL, -1,
                        "unknown memory binding policy '%s' (default, firsttouch, bind, interleave, nexttouch)",
                        name);
}

const char *shmtopo_membind_policy_name(int policy)
{
    size_t i;

    for (i = 0; i < sizeof(policies) / sizeof(policies[0]); i++)
        if (policies[i].policy == policy)
            return policies[i].name;
    return "unknown";
}

int shmtopo_topo_get_membind(void *topo, int flags, int *policyp, unsigned *out, size_t max,
                             size_t *countp)
{
    hwloc_bitmap_t set;
    hwloc_membind_policy_t policy;

    if (!topo || !policyp)
        return shmtopo_fail(EINVAL, -1, "get_membind: NULL argument");
    if (check_flags(flags, SHMTOPO_BIND_THREAD, "get_membind") < 0 || this_system(topo, "get_membind") < 0)
        return -1;
    if (!(set = hwloc_bitmap_alloc()))
        return shmtopo_fail(ENOMEM, -1, "get_membind: no memory for a bitmap");
    errno = 0;
    if (hwloc_get_membind(topo, set, &policy,
                          HWLOC_MEMBIND_BYNODESET | (flags & SHMTOPO_BIND_THREAD ? HWLOC_MEMBIND_THREAD : 0)) < 0) {
        fail_hwloc("hwloc_get_membind");
        shmtopo_bitmap_drop(set);
        return -1;
    }
    *policyp = (int)policy;
    return give_set(set, out, max, countp);
}

int shmtopo_topo_set_membind(void *topo, const unsigned *nodes, size_t n, int policy, int flags)
{
    hwloc_bitmap_t set;
    int hflags;

    if (!topo)
        return shmtopo_fail(EINVAL, -1, "set_membind: NULL topology");
    if (check_flags(flags, SHMTOPO_BIND_THREAD | SHMTOPO_BIND_STRICT | SHMTOPO_BIND_MIGRATE, "set_membind") < 0 ||
        this_system(topo, "set_membind") < 0)
        return -1;
    if (policy < SHMTOPO_MEMBIND_DEFAULT || policy > SHMTOPO_MEMBIND_NEXTTOUCH)
        return shmtopo_fail(EINVAL, -1, "set_membind: bad policy %d", policy);
    if (n == 0 && policy != SHMTOPO_MEMBIND_DEFAULT)
        return shmtopo_fail(EINVAL, -1, "set_membind: an empty set of NUMA nodes");
    if (!(set = bitmap_of(nodes, n)))
        return -1;
    if (n == 0)
        hwloc_bitmap_copy(set, hwloc_topology_get_topology_nodeset(topo));
    if (!hwloc_bitmap_isincluded(set, hwloc_topology_get_topology_nodeset(topo))) {
        hwloc_bitmap_free(set);
        return shmtopo_fail(EINVAL, -1, "set_membind: NUMA nodes outside the topology");
    }
    hflags = HWLOC_MEMBIND_BYNODESET | (flags & SHMTOPO_BIND_THREAD ? HWLOC_MEMBIND_THREAD : 0) |
             (flags & SHMTOPO_BIND_STRICT ? HWLOC_MEMBIND_STRICT : 0) |
             (flags & SHMTOPO_BIND_MIGRATE ? HWLOC_MEMBIND_MIGRATE : 0);
    errno = 0;
    if (hwloc_set_membind(topo, set, (hwloc_membind_policy_t)policy, hflags) < 0) {
        fail_hwloc("hwloc_set_membind");
        shmtopo_bitmap_drop(set);
        return -1;
    }
    hwloc_bitmap_free(set);
    return 0;
}

/* ---- placements -------------------------------------------------------------------- */

int shmtopo_place_policy_from_name(const char *name, int *policyp)
{
    if (!name || !policyp)
        return shmtopo_fail(EINVAL, -1, "placement policy: NULL argument");
    if (!strcasecmp(name, "compact"))
        *policyp = SHMTOPO_PLACE_COMPACT;
    else if (!strcasecmp(name, "spread"))
        *policyp = SHMTOPO_PLACE_SPREAD;
    else
        return shmtopo_fail(EINVAL, -1, "unknown placement policy '%s' (compact or spread)", name);
    return 0;
}

/* An object ranks can be bound to: of the type, at its depth, with CPUs. */
static int is_target(hwloc_obj_t obj, int type, int depth)
{
    return (int)obj->type == type && obj->depth == depth && obj->cpuset && !hwloc_bitmap_iszero(obj->cpuset);
}

/* Targets in the subtree of obj (normal and memory children: NUMA nodes
 * hang from normal objects as memory children). */
static unsigned count_targets(hwloc_obj_t obj, int type, int depth)
{
    hwloc_obj_t child;
    unsigned n = is_target(obj, type, depth);

    if (n)
        return n;
    for (child = obj->first_child; child; child = child->next_sibling)
        n += count_targets(child, type, depth);
    for (child = obj->memory_first_child; child; child = child->next_sibling)
        n += count_targets(child, type, depth);
    return n;
}

/* Give k ranks to the subtree of obj (which holds at least k targets):
 * shared among its children in proportion to the targets each holds
 * (child i gets ceil(S_i k / S) - ceil(S_{i-1} k / S), S_i the targets in
 * the first i children), so that ranks fill the tree evenly from the top;
 * a child that gets one rank gives it its first target. The objects go to
 * out in rank order. */
static void spread(hwloc_obj_t obj, int type, int depth, unsigned k, hwloc_obj_t *out, unsigned *next)
{
    hwloc_obj_t child, lists[2];
    unsigned total, before = 0, here, chunk, l;

    if (!k)
        return;
    if (is_target(obj, type, depth)) {
        out[(*next)++] = obj;
        return;
    }
    total = count_targets(obj, type, depth);
    lists[0] = obj->first_child;
    lists[1] = obj->memory_first_child;
    for (l = 0; l < 2; l++)
        for (child = lists[l]; child; child = child->next_sibling) {
            if (!(here = count_targets(child, type, depth)))
                continue;
            chunk = (unsigned)(((uint64_t)(before + here) * k + total - 1) / total -
                               ((uint64_t)before * k + total - 1) / total);
            before += here;
            spread(child, type, depth, chunk, out, next);
        }
}

int shmtopo_topo_place(void *topo, int type, int policy, int overload, unsigned n, unsigned *indices)
{
    hwloc_obj_t obj, *chosen;
    int depth;
    unsigned count = 0, r, next = 0, distinct;
    /* ranks share a package or a NUMA node as they do under mpirun's
     * --bind-to; sharing a core or a PU is an overload, asked for */
    int shared = type != HWLOC_OBJ_CORE && type != HWLOC_OBJ_PU;

    if (!topo || (n && !indices))
        return shmtopo_fail(EINVAL, -1, "place: NULL argument");
    if (type < 0 || type >= (int)HWLOC_OBJ_TYPE_MAX)
        return shmtopo_fail(EINVAL, -1, "place: bad object type %d", type);
    if (policy != SHMTOPO_PLACE_COMPACT && policy != SHMTOPO_PLACE_SPREAD)
        return shmtopo_fail(EINVAL, -1, "place: bad policy %d", policy);
    depth = hwloc_get_type_depth(topo, (hwloc_obj_type_t)type);
    if (depth == HWLOC_TYPE_DEPTH_MULTIPLE)
        return shmtopo_fail(EINVAL, -1, "cannot bind to %s objects: they sit at several depths",
                            shmtopo_topo_type_name(type));
    if (type == HWLOC_OBJ_BRIDGE || type == HWLOC_OBJ_PCI_DEVICE || type == HWLOC_OBJ_OS_DEVICE ||
        type == HWLOC_OBJ_MISC)
        return shmtopo_fail(EINVAL, -1, "cannot bind to %s objects: they have no CPUs",
                            shmtopo_topo_type_name(type));
    if (depth != HWLOC_TYPE_DEPTH_UNKNOWN)
        for (obj = hwloc_get_obj_by_depth(topo, depth, 0); obj; obj = obj->next_cousin)
            count += is_target(obj, type, depth);
    if (n > count && (!count || !(shared || overload)))
        return shmtopo_fail(EINVAL, -1, "%u ranks but only %u %s object%s with CPUs to bind them to%s", n,
                            count, shmtopo_topo_type_name(type), count == 1 ? "" : "s",
                            count ? " (overload lets ranks share them)" : "");
    if (!n)
        return 0;
    distinct = n < count ? n : count;
    if (!(chosen = malloc(distinct * sizeof(*chosen))))
        return shmtopo_fail(ENOMEM, -1, "place: no memory for %u objects", distinct);
    if (policy == SHMTOPO_PLACE_COMPACT) {
        for (obj = hwloc_get_obj_by_depth(topo, depth, 0); obj && next < distinct; obj = obj->next_cousin)
            if (is_target(obj, type, depth))
                chosen[next++] = obj;
    } else {
        spread(hwloc_get_root_obj(topo), type, depth, distinct, chosen, &next);
    }
    /* more ranks than objects: compact fills each object in turn (blocks
     * of n / count ranks), spread deals them out round-robin */
    for (r = 0; r < n; r++)
        indices[r] = chosen[n <= count ? r
                            : policy == SHMTOPO_PLACE_COMPACT ? (unsigned)((uint64_t)r * count / n)
                                                              : r % count]->logical_index;
    free(chosen);
    return 0;
}
