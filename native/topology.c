/* Read-only accessors on an hwloc topology for the Python Topology class:
 * types by name, objects by type, their sets, and this process's binding.
 * Only const queries: an adopted topology must never be written to. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <hwloc.h>

#include "internal.h"
#include "topology.h"

/* Short names first; hwloc's own type strings are accepted too. */
static const struct {
    const char *name;
    hwloc_obj_type_t type;
} type_names[] = {
    { "machine", HWLOC_OBJ_MACHINE },
    { "package", HWLOC_OBJ_PACKAGE },
#if HWLOC_API_VERSION >= 0x00020100
    { "die", HWLOC_OBJ_DIE },
#endif
    { "numanode", HWLOC_OBJ_NUMANODE },
    { "numa", HWLOC_OBJ_NUMANODE },
    { "group", HWLOC_OBJ_GROUP },
    { "l3", HWLOC_OBJ_L3CACHE },
    { "l2", HWLOC_OBJ_L2CACHE },
    { "l1", HWLOC_OBJ_L1CACHE },
    { "core", HWLOC_OBJ_CORE },
    { "pu", HWLOC_OBJ_PU },
};

#define NTYPE_NAMES (sizeof(type_names) / sizeof(type_names[0]))

static int valid_type(int type)
{
    return type >= 0 && type < (int)HWLOC_OBJ_TYPE_MAX;
}

int shmtopo_topo_type_from_name(const char *name, int *typep)
{
    size_t i;
    int t;

    if (!name || !typep)
        return shmtopo_fail(EINVAL, -1, "topology type: NULL argument");
    for (i = 0; i < NTYPE_NAMES; i++)
        if (!strcasecmp(name, type_names[i].name)) {
            *typep = (int)type_names[i].type;
            return 0;
        }
    /* Exact matches only: hwloc_type_sscanf would take prefixes like "pa". */
    for (t = 0; t < (int)HWLOC_OBJ_TYPE_MAX; t++) {
        const char *s = hwloc_obj_type_string((hwloc_obj_type_t)t);
        if (s && !strcasecmp(name, s)) {
            *typep = t;
            return 0;
        }
    }
    return shmtopo_fail(EINVAL, -1, "unknown topology object type '%s'", name);
}

const char *shmtopo_topo_type_name(int type)
{
    static _Thread_local char lower[32];
    const char *s;
    size_t i;

    for (i = 0; i < NTYPE_NAMES; i++)
        if ((int)type_names[i].type == type)
            return type_names[i].name;
    if (!valid_type(type))
        return "unknown";
    s = hwloc_obj_type_string((hwloc_obj_type_t)type);
    for (i = 0; s[i] && i + 1 < sizeof(lower); i++)
        lower[i] = (char)(s[i] >= 'A' && s[i] <= 'Z' ? s[i] - 'A' + 'a' : s[i]);
    lower[i] = '\0';
    return lower;
}

int shmtopo_topo_load_xml_here(const char *xml, size_t len, void **topop)
{
    return shmtopo_topo_load_xml_flags(xml, len, HWLOC_TOPOLOGY_FLAG_IS_THISSYSTEM, topop);
}

int shmtopo_topo_depth(void *topo)
{
    if (!topo)
        return shmtopo_fail(EINVAL, -1, "topology: NULL handle");
    return hwloc_topology_get_depth(topo);
}

int shmtopo_topo_nbobjs(void *topo, int type)
{
    int depth, d, n, total = 0;

    if (!topo)
        return shmtopo_fail(EINVAL, -1, "topology: NULL handle");
    if (!valid_type(type))
        return shmtopo_fail(EINVAL, -1, "topology: bad object type %d", type);
    depth = hwloc_get_type_depth(topo, (hwloc_obj_type_t)type);
    if (depth == HWLOC_TYPE_DEPTH_UNKNOWN)
        return 0;
    if (depth != HWLOC_TYPE_DEPTH_MULTIPLE)
        return (int)hwloc_get_nbobjs_by_depth(topo, depth);
    /* Only normal types (Groups, caches) can sit at several depths. */
    n = hwloc_topology_get_depth(topo);
    for (d = 0; d < n; d++)
        if ((int)hwloc_get_depth_type(topo, d) == type)
            total += (int)hwloc_get_nbobjs_by_depth(topo, d);
    return total;
}

int shmtopo_topo_obj(void *topo, int type, unsigned index, void **objp)
{
    int depth, d, n;
    unsigned left = index, count;
    hwloc_obj_t obj = NULL;

    if (!topo || !objp)
        return shmtopo_fail(EINVAL, -1, "topology: NULL argument");
    if (!valid_type(type))
        return shmtopo_fail(EINVAL, -1, "topology: bad object type %d", type);
    depth = hwloc_get_type_depth(topo, (hwloc_obj_type_t)type);
    if (depth == HWLOC_TYPE_DEPTH_MULTIPLE) {
        n = hwloc_topology_get_depth(topo);
        for (d = 0; d < n && !obj; d++) {
            if ((int)hwloc_get_depth_type(topo, d) != type)
                continue;
            count = hwloc_get_nbobjs_by_depth(topo, d);
            if (left < count)
                obj = hwloc_get_obj_by_depth(topo, d, left);
            else
                left -= count;
        }
    } else if (depth != HWLOC_TYPE_DEPTH_UNKNOWN) {
        obj = hwloc_get_obj_by_depth(topo, depth, index);
    }
    if (!obj)
        return shmtopo_fail(ERANGE, -1, "topology: no %s number %u",
                            shmtopo_topo_type_name(type), index);
    *objp = obj;
    return 0;
}

int shmtopo_topo_root(void *topo, void **objp)
{
    if (!topo || !objp)
        return shmtopo_fail(EINVAL, -1, "topology: NULL argument");
    *objp = hwloc_get_root_obj(topo);
    return 0;
}

int shmtopo_obj_info(void *objv, shmtopo_obj_info_t *infop)
{
    hwloc_obj_t obj = objv;

    if (!obj || !infop)
        return shmtopo_fail(EINVAL, -1, "topology object: NULL argument");
    memset(infop, 0, sizeof(*infop));
    infop->type = (int)obj->type;
    infop->depth = obj->depth;
    infop->os_index = obj->os_index == HWLOC_UNKNOWN_INDEX ? -1 : (int64_t)obj->os_index;
    infop->logical_index = obj->logical_index;
    if (obj->type == HWLOC_OBJ_NUMANODE)
        infop->local_memory = obj->attr->numanode.local_memory;
    infop->total_memory = obj->total_memory;
    infop->arity = obj->arity;
    infop->memory_arity = obj->memory_arity;
    return 0;
}

int shmtopo_obj_parent(void *objv, void **parentp)
{
    hwloc_obj_t obj = objv;

    if (!obj || !parentp)
        return shmtopo_fail(EINVAL, -1, "topology object: NULL argument");
    *parentp = obj->parent;
    return 0;
}

int shmtopo_obj_child(void *objv, unsigned index, void **childp)
{
    hwloc_obj_t obj = objv, child;
    unsigned i;

    if (!obj || !childp)
        return shmtopo_fail(EINVAL, -1, "topology object: NULL argument");
    if (index < obj->arity) {
        *childp = obj->children[index];
        return 0;
    }
    index -= obj->arity;
    for (child = obj->memory_first_child, i = 0; child; child = child->next_sibling, i++)
        if (i == index) {
            *childp = child;
            return 0;
        }
    return shmtopo_fail(ERANGE, -1, "topology object: no child number %u",
                        index + obj->arity);
}

static hwloc_const_bitmap_t obj_set(hwloc_obj_t obj, int which)
{
    return which == 1 ? obj->nodeset : obj->cpuset;
}

static int bitmap_list(hwloc_const_bitmap_t set, unsigned *out, size_t max,
                       size_t *countp)
{
    int weight, i;
    size_t n = 0;

    if (!set) {
        if (countp)
            *countp = 0;
        return 0;
    }
    weight = hwloc_bitmap_weight(set);
    if (weight < 0)
        return shmtopo_fail(ERANGE, -1, "topology: infinite set");
    if (countp)
        *countp = (size_t)weight;
    if ((size_t)weight > max || (weight && !out))
        return shmtopo_fail(ENOBUFS, -1, "topology: set of %d, room for %zu",
                            weight, max);
    hwloc_bitmap_foreach_begin(i, set)
        out[n++] = (unsigned)i;
    hwloc_bitmap_foreach_end();
    return 0;
}

int shmtopo_obj_set(void *objv, int which, unsigned *out, size_t max,
                    size_t *countp)
{
    if (!objv || (which != 0 && which != 1))
        return shmtopo_fail(EINVAL, -1, "topology object: bad argument");
    return bitmap_list(obj_set(objv, which), out, max, countp);
}

int shmtopo_obj_set_str(void *objv, int which, char *buf, size_t len)
{
    hwloc_const_bitmap_t set;
    int n;

    if (!objv || (which != 0 && which != 1) || (len && !buf))
        return shmtopo_fail(EINVAL, -1, "topology object: bad argument");
    set = obj_set(objv, which);
    if (!set) {
        if (len)
            buf[0] = '\0';
        return 0;
    }
    n = hwloc_bitmap_snprintf(buf, len, set);
    if (n < 0)
        return shmtopo_fail_errno("hwloc_bitmap_snprintf");
    return n;
}

int shmtopo_topo_cpubind(void *topo, int what, unsigned *out, size_t max,
                         size_t *countp)
{
    hwloc_bitmap_t set;
    int ret, err;

    if (!topo || (what != 0 && what != 1))
        return shmtopo_fail(EINVAL, -1, "topology cpubind: bad argument");
    set = hwloc_bitmap_alloc();
    if (!set)
        return shmtopo_fail(ENOMEM, -1, "topology cpubind: no memory for a bitmap");
    /* The binding of the whole process (all its threads), but the location
     * of the calling thread: the union over MPI's helper threads would
     * name several CPUs and say nothing about where this code runs. */
    errno = 0;
    if (what == 0)
        ret = hwloc_get_cpubind(topo, set, 0);
    else
        ret = hwloc_get_last_cpu_location(topo, set, HWLOC_CPUBIND_THREAD);
    if (ret < 0) {
        err = errno ? errno : ENOSYS;
        shmtopo_fail(err, -1, "%s: %s",
                     what ? "hwloc_get_last_cpu_location" : "hwloc_get_cpubind",
                     strerror(err));
        goto out_with_set;
    }
    ret = bitmap_list(set, out, max, countp);

out_with_set:
    err = errno;
    hwloc_bitmap_free(set);
    errno = err;
    return ret;
}
