/* hwloc's topology attributes: distance matrices, memory attributes
 * (bandwidth, latency, capacity of NUMA nodes as seen from initiators) and
 * CPU kinds. They travel with an adopted topology; reading them is safe
 * there because the writer filled hwloc's caches in the file before anyone
 * adopted it (topo_shmem.c), so these queries only read. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <hwloc.h>
#include <hwloc/distances.h>

#include "internal.h"
#include "topology.h"

/* ---- distances ------------------------------------------------------------------- */

/* All matrices; release with put_all. */
static int get_all(hwloc_topology_t topo, struct hwloc_distances_s ***distsp, unsigned *nrp)
{
    unsigned nr = 0, got;
    struct hwloc_distances_s **dists;

    *distsp = NULL;
    *nrp = 0;
    errno = 0;
    if (hwloc_distances_get(topo, &nr, NULL, 0, 0) < 0)
        return shmtopo_fail(errno ? errno : EINVAL, -1, "hwloc_distances_get failed");
    if (!nr)
        return 0;
    if (!(dists = calloc(nr, sizeof(*dists))))
        return shmtopo_fail(ENOMEM, -1, "distances: no memory");
    got = nr;
    if (hwloc_distances_get(topo, &got, dists, 0, 0) < 0) {
        free(dists);
        return shmtopo_fail(errno ? errno : EINVAL, -1, "hwloc_distances_get failed");
    }
    *distsp = dists;
    *nrp = got < nr ? got : nr;
    return 0;
}

static void put_all(hwloc_topology_t topo, struct hwloc_distances_s **dists, unsigned nr)
{
    unsigned i;
    int err = errno;

    for (i = 0; i < nr; i++)
        hwloc_distances_release(topo, dists[i]);
    free(dists);
    errno = err;
}

int shmtopo_topo_ndistances(void *topo)
{
    unsigned nr = 0;

    if (!topo)
        return shmtopo_fail(EINVAL, -1, "distances: NULL topology");
    errno = 0;
    if (hwloc_distances_get(topo, &nr, NULL, 0, 0) < 0)
        return shmtopo_fail(errno ? errno : EINVAL, -1, "hwloc_distances_get failed");
    return (int)nr;
}

int shmtopo_topo_distances(void *topo, unsigned index, shmtopo_distances_info_t *infop, void **objs,
                           uint64_t *values, size_t max)
{
    struct hwloc_distances_s **dists, *d;
    unsigned nr, i;
    int rc = 0;

    if (!topo || !infop)
        return shmtopo_fail(EINVAL, -1, "distances: NULL argument");
    if (get_all(topo, &dists, &nr) < 0)
        return -1;
    if (index >= nr) {
        put_all(topo, dists, nr);
        return shmtopo_fail(ERANGE, -1, "distances: no matrix number %u (%u)", index, nr);
    }
    d = dists[index];
    memset(infop, 0, sizeof(*infop));
#if HWLOC_API_VERSION >= 0x00020100
    infop->name = hwloc_distances_get_name(topo, d); /* belongs to the topology */
#endif
    infop->kind = d->kind;
    infop->nbobjs = d->nbobjs;
    if (d->nbobjs > max || (d->nbobjs && (!objs || !values))) {
        rc = shmtopo_fail(ENOBUFS, -1, "distances: %u objects, room for %zu", d->nbobjs, max);
    } else {
        for (i = 0; i < d->nbobjs; i++)
            objs[i] = d->objs[i];
        memcpy(values, d->values, (size_t)d->nbobjs * d->nbobjs * sizeof(*values));
    }
    put_all(topo, dists, nr);
    return rc;
}

/* ---- memory attributes ---------------------------------------------------------------- */

#if HWLOC_API_VERSION >= 0x00020300

static hwloc_bitmap_t cpus_of(const unsigned *cpus, size_t n)
{
    return shmtopo_bitmap_of(cpus, n, "memattr");
}

static int known_id(hwloc_topology_t topo, unsigned id)
{
    const char *name;
    if (hwloc_memattr_get_name(topo, (hwloc_memattr_id_t)id, &name) < 0)
        return shmtopo_fail(EINVAL, -1, "memattr: no attribute number %u", id);
    return 0;
}

/* An attribute measured from initiators (bandwidth, latency) needs one. */
static int check_initiator(hwloc_topology_t topo, unsigned id, size_t n)
{
    unsigned long flags = 0;
    const char *name = "";

    hwloc_memattr_get_flags(topo, (hwloc_memattr_id_t)id, &flags);
    hwloc_memattr_get_name(topo, (hwloc_memattr_id_t)id, &name);
    if ((flags & HWLOC_MEMATTR_FLAG_NEED_INITIATOR) && !n)
        return shmtopo_fail(EINVAL, -1, "memattr: %s is seen from initiators: give the CPUs", name);
    return 0;
}

int shmtopo_topo_nmemattrs(void *topo)
{
    const char *name;
    unsigned id = 0;

    if (!topo)
        return shmtopo_fail(EINVAL, -1, "memattr: NULL topology");
    while (hwloc_memattr_get_name(topo, (hwloc_memattr_id_t)id, &name) == 0)
        id++;
    return (int)id;
}

int shmtopo_topo_memattr_info(void *topo, unsigned id, shmtopo_memattr_info_t *infop)
{
    if (!topo || !infop)
        return shmtopo_fail(EINVAL, -1, "memattr: NULL argument");
    if (known_id(topo, id) < 0)
        return -1;
    hwloc_memattr_get_name(topo, (hwloc_memattr_id_t)id, &infop->name);
    hwloc_memattr_get_flags(topo, (hwloc_memattr_id_t)id, &infop->flags);
    return 0;
}

int shmtopo_topo_memattr_by_name(void *topo, const char *name, unsigned *idp)
{
    hwloc_memattr_id_t id;

    if (!topo || !name || !idp)
        return shmtopo_fail(EINVAL, -1, "memattr: NULL argument");
    if (hwloc_memattr_get_by_name(topo, name, &id) < 0)
        return shmtopo_fail(EINVAL, -1, "no memory attribute named '%s'", name);
    *idp = (unsigned)id;
    return 0;
}

int shmtopo_topo_memattr_targets(void *topo, unsigned id, void **targets, uint64_t *values,
                                 size_t max, size_t *countp)
{
    unsigned nr = 0, room;
    hwloc_obj_t *objs;
    hwloc_uint64_t *vals;
    int err = 0;

    if (!topo || !countp)
        return shmtopo_fail(EINVAL, -1, "memattr: NULL argument");
    if (known_id(topo, id) < 0)
        return -1;
    if (hwloc_memattr_get_targets(topo, (hwloc_memattr_id_t)id, NULL, 0, &nr, NULL, NULL) < 0)
        return shmtopo_fail_errno("hwloc_memattr_get_targets");
    *countp = nr;
    if (nr > max || (nr && (!targets || !values)))
        return shmtopo_fail(ENOBUFS, -1, "memattr: %u targets, room for %zu", nr, max);
    if (!nr)
        return 0;
    room = nr;
    objs = calloc(room, sizeof(*objs));
    vals = calloc(room, sizeof(*vals));
    if (!objs || !vals)
        err = ENOMEM, shmtopo_fail(ENOMEM, -1, "memattr: no memory");
    else if (hwloc_memattr_get_targets(topo, (hwloc_memattr_id_t)id, NULL, 0, &room, objs, vals) < 0)
        err = errno, shmtopo_fail_errno("hwloc_memattr_get_targets");
    else
        for (unsigned i = 0; i < nr && i < room; i++) {
            targets[i] = objs[i];
            values[i] = vals[i];
        }
    free(objs);
    free(vals);
    errno = err;
    return err ? -1 : 0;
}

int shmtopo_topo_memattr_initiators(void *topo, unsigned id, void *target, int *kinds, void **locs,
                                    uint64_t *values, size_t max, size_t *countp)
{
    unsigned nr = 0, room, i;
    struct hwloc_location *where;
    hwloc_uint64_t *vals;
    int err = 0;

    if (!topo || !target || !countp)
        return shmtopo_fail(EINVAL, -1, "memattr: NULL argument");
    if (known_id(topo, id) < 0)
        return -1;
    if (hwloc_memattr_get_initiators(topo, (hwloc_memattr_id_t)id, target, 0, &nr, NULL, NULL) < 0)
        return shmtopo_fail_errno("hwloc_memattr_get_initiators");
    *countp = nr;
    if (nr > max || (nr && (!kinds || !locs || !values)))
        return shmtopo_fail(ENOBUFS, -1, "memattr: %u initiators, room for %zu", nr, max);
    if (!nr)
        return 0;
    room = nr;
    where = calloc(room, sizeof(*where));
    vals = calloc(room, sizeof(*vals));
    if (!where || !vals)
        err = ENOMEM, shmtopo_fail(ENOMEM, -1, "memattr: no memory");
    else if (hwloc_memattr_get_initiators(topo, (hwloc_memattr_id_t)id, target, 0, &room, where, vals) < 0)
        err = errno, shmtopo_fail_errno("hwloc_memattr_get_initiators");
    else
        for (i = 0; i < nr && i < room; i++) {
            if (where[i].type == HWLOC_LOCATION_TYPE_CPUSET) {
                kinds[i] = 1;
                locs[i] = where[i].location.cpuset;
            } else {
                kinds[i] = 2;
                locs[i] = where[i].location.object;
            }
            values[i] = vals[i];
        }
    free(where);
    free(vals);
    errno = err;
    return err ? -1 : 0;
}

int shmtopo_topo_memattr_value(void *topo, unsigned id, void *target, const unsigned *cpus, size_t n,
                               uint64_t *valuep)
{
    struct hwloc_location loc;
    hwloc_bitmap_t set = NULL;
    hwloc_uint64_t value;
    int rc, err;

    if (!topo || !target || !valuep)
        return shmtopo_fail(EINVAL, -1, "memattr: NULL argument");
    if (known_id(topo, id) < 0)
        return -1;
    if (((hwloc_obj_t)target)->type != HWLOC_OBJ_NUMANODE)
        return shmtopo_fail(EINVAL, -1, "memattr: a target is a NUMA node, not a %s",
                            shmtopo_topo_type_name((int)((hwloc_obj_t)target)->type));
    if (check_initiator(topo, id, n) < 0)
        return -1;
    if (n) {
        if (!(set = cpus_of(cpus, n)))
            return -1;
        loc.type = HWLOC_LOCATION_TYPE_CPUSET;
        loc.location.cpuset = set;
    }
    errno = 0;
    rc = hwloc_memattr_get_value(topo, (hwloc_memattr_id_t)id, target, set ? &loc : NULL, 0, &value);
    err = errno ? errno : EINVAL;
    if (set)
        shmtopo_bitmap_drop(set);
    /* the arguments are checked: hwloc's EINVAL here means no such value */
    if (rc < 0)
        return shmtopo_fail(err == EINVAL ? ENOENT : err, -1, "hwloc_memattr_get_value: %s",
                            err == EINVAL || err == ENOENT ? "no value for that target and initiator"
                                                           : strerror(err));
    *valuep = value;
    return 0;
}

int shmtopo_topo_memattr_best_target(void *topo, unsigned id, const unsigned *cpus, size_t n,
                                     void **targetp, uint64_t *valuep)
{
    struct hwloc_location loc;
    hwloc_bitmap_t set = NULL;
    hwloc_obj_t best = NULL;
    hwloc_uint64_t value = 0;
    int rc, err;

    if (!topo || !targetp || !valuep)
        return shmtopo_fail(EINVAL, -1, "memattr: NULL argument");
    if (known_id(topo, id) < 0 || check_initiator(topo, id, n) < 0)
        return -1;
    if (n) {
        if (!(set = cpus_of(cpus, n)))
            return -1;
        loc.type = HWLOC_LOCATION_TYPE_CPUSET;
        loc.location.cpuset = set;
    }
    errno = 0;
    rc = hwloc_memattr_get_best_target(topo, (hwloc_memattr_id_t)id, set ? &loc : NULL, 0, &best, &value);
    err = errno ? errno : EINVAL;
    if (set)
        shmtopo_bitmap_drop(set);
    if (rc < 0)
        return shmtopo_fail(err, -1, "hwloc_memattr_get_best_target: %s",
                            err == ENOENT ? "no target has a value for that initiator" : strerror(err));
    *targetp = best;
    *valuep = value;
    return 0;
}

int shmtopo_topo_local_numanodes(void *topo, const unsigned *cpus, size_t n, unsigned long flags,
                                 void **nodes, size_t max, size_t *countp)
{
    struct hwloc_location loc;
    hwloc_bitmap_t set;
    hwloc_obj_t *found;
    unsigned nr, room, i;
    int err = 0;

    if (!topo || !countp)
        return shmtopo_fail(EINVAL, -1, "local NUMA nodes: NULL argument");
    if (flags & ~7ul)
        return shmtopo_fail(EINVAL, -1, "local NUMA nodes: unknown flags %#lx", flags & ~7ul);
    if (!n && !(flags & HWLOC_LOCAL_NUMANODE_FLAG_ALL))
        return shmtopo_fail(EINVAL, -1, "local NUMA nodes: an empty set of CPUs");
    if (!(set = cpus_of(cpus, n)))
        return -1;
    if (!n)
        hwloc_bitmap_copy(set, hwloc_topology_get_topology_cpuset(topo));
    loc.type = HWLOC_LOCATION_TYPE_CPUSET;
    loc.location.cpuset = set;
    room = (unsigned)hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
    if (!(found = calloc(room ? room : 1, sizeof(*found)))) {
        shmtopo_bitmap_drop(set);
        return shmtopo_fail(ENOMEM, -1, "local NUMA nodes: no memory");
    }
    nr = room;
    errno = 0;
    if (hwloc_get_local_numanode_objs(topo, &loc, &nr, found, flags) < 0) {
        err = errno ? errno : EINVAL;
        shmtopo_fail(err, -1, "hwloc_get_local_numanode_objs: %s", strerror(err));
    } else {
        *countp = nr;
        if (nr > max || (nr && !nodes))
            err = ENOBUFS, shmtopo_fail(ENOBUFS, -1, "local NUMA nodes: %u, room for %zu", nr, max);
        else
            for (i = 0; i < nr; i++)
                nodes[i] = found[i];
    }
    free(found);
    hwloc_bitmap_free(set);
    errno = err;
    return err ? -1 : 0;
}

#else /* hwloc < 2.3: no memory attributes */

#define NO_MEMATTRS return shmtopo_fail(ENOSYS, -1, "memory attributes need hwloc >= 2.3")

int shmtopo_topo_nmemattrs(void *topo) { NO_MEMATTRS; }
int shmtopo_topo_memattr_info(void *topo, unsigned id, shmtopo_memattr_info_t *infop) { NO_MEMATTRS; }
int shmtopo_topo_memattr_by_name(void *topo, const char *name, unsigned *idp) { NO_MEMATTRS; }
int shmtopo_topo_memattr_targets(void *topo, unsigned id, void **targets, uint64_t *values, size_t max,
                                 size_t *countp) { NO_MEMATTRS; }
int shmtopo_topo_memattr_initiators(void *topo, unsigned id, void *target, int *kinds, void **locs,
                                    uint64_t *values, size_t max, size_t *countp) { NO_MEMATTRS; }
int shmtopo_topo_memattr_value(void *topo, unsigned id, void *target, const unsigned *cpus, size_t n,
                               uint64_t *valuep) { NO_MEMATTRS; }
int shmtopo_topo_memattr_best_target(void *topo, unsigned id, const unsigned *cpus, size_t n,
                                     void **targetp, uint64_t *valuep) { NO_MEMATTRS; }
int shmtopo_topo_local_numanodes(void *topo, const unsigned *cpus, size_t n, unsigned long flags,
                                 void **nodes, size_t max, size_t *countp) { NO_MEMATTRS; }
#endif

/* ---- CPU kinds ------------------------------------------------------------------------ */

#if HWLOC_API_VERSION >= 0x00020400

int shmtopo_topo_ncpukinds(void *topo)
{
    int n;

    if (!topo)
        return shmtopo_fail(EINVAL, -1, "cpukinds: NULL topology");
    if ((n = hwloc_cpukinds_get_nr(topo, 0)) < 0)
        return shmtopo_fail_errno("hwloc_cpukinds_get_nr");
    return n;
}

int shmtopo_topo_cpukind(void *topo, unsigned index, int *efficiencyp, unsigned *cpus, size_t max,
                         size_t *countp)
{
    hwloc_bitmap_t set;
    int rc, err;

    if (!topo || !efficiencyp || !countp)
        return shmtopo_fail(EINVAL, -1, "cpukinds: NULL argument");
    if (!(set = hwloc_bitmap_alloc()))
        return shmtopo_fail(ENOMEM, -1, "cpukinds: no memory for a bitmap");
    errno = 0;
    if (hwloc_cpukinds_get_info(topo, index, set, efficiencyp, NULL, NULL, 0) < 0) {
        err = errno ? errno : ENOENT;
        hwloc_bitmap_free(set);
        return shmtopo_fail(err, -1, "cpukinds: no kind number %u", index);
    }
    rc = shmtopo_bitmap_indices(set, cpus, max, countp);
    shmtopo_bitmap_drop(set);
    return rc;
}

int shmtopo_topo_cpukind_infos(void *topo, unsigned index, const char **names, const char **values,
                               size_t max, size_t *countp)
{
    unsigned nr = 0, i;
    struct hwloc_info_s *infos = NULL;
    int efficiency;

    if (!topo || !countp)
        return shmtopo_fail(EINVAL, -1, "cpukinds: NULL argument");
    errno = 0;
    if (hwloc_cpukinds_get_info(topo, index, NULL, &efficiency, &nr, &infos, 0) < 0)
        return shmtopo_fail(errno ? errno : ENOENT, -1, "cpukinds: no kind number %u", index);
    *countp = nr;
    if (nr > max || (nr && (!names || !values)))
        return shmtopo_fail(ENOBUFS, -1, "cpukinds: %u infos, room for %zu", nr, max);
    for (i = 0; i < nr; i++) {
        names[i] = infos[i].name;
        values[i] = infos[i].value;
    }
    return 0;
}

int shmtopo_topo_cpukind_of(void *topo, const unsigned *cpus, size_t n)
{
    hwloc_bitmap_t set;
    size_t i;
    int rc, err;

    if (!topo || (n && !cpus))
        return shmtopo_fail(EINVAL, -1, "cpukinds: NULL argument");
    if (!n)
        return shmtopo_fail(EINVAL, -1, "cpukinds: an empty set of CPUs");
    if (!(set = hwloc_bitmap_alloc()))
        return shmtopo_fail(ENOMEM, -1, "cpukinds: no memory for a bitmap");
    for (i = 0; i < n; i++)
        if (cpus[i] > INT_MAX || hwloc_bitmap_set(set, cpus[i]) < 0) {
            hwloc_bitmap_free(set);
            return shmtopo_fail(EINVAL, -1, "cpukinds: cannot hold CPU %u", cpus[i]);
        }
    errno = 0;
    rc = hwloc_cpukinds_get_by_cpuset(topo, set, 0);
    err = errno ? errno : ENOENT;
    hwloc_bitmap_free(set);
    if (rc < 0)
        return shmtopo_fail(err, -1, "cpukinds: %s",
                            err == EXDEV ? "those CPUs are of several kinds"
                            : err == ENOENT ? "no kind holds those CPUs" : strerror(err));
    return rc;
}

#else /* hwloc < 2.4: no CPU kinds */

#define NO_CPUKINDS return shmtopo_fail(ENOSYS, -1, "CPU kinds need hwloc >= 2.4")

int shmtopo_topo_ncpukinds(void *topo) { NO_CPUKINDS; }
int shmtopo_topo_cpukind(void *topo, unsigned index, int *efficiencyp, unsigned *cpus, size_t max,
                         size_t *countp) { NO_CPUKINDS; }
int shmtopo_topo_cpukind_infos(void *topo, unsigned index, const char **names, const char **values,
                               size_t max, size_t *countp) { NO_CPUKINDS; }
int shmtopo_topo_cpukind_of(void *topo, const unsigned *cpus, size_t n) { NO_CPUKINDS; }
#endif
