/* Read-only accessors on an hwloc topology for the Python Topology class:
 * types by name, objects by type or index, their attributes and sets,
 * relations between objects, lookups by cpuset, and hwloc's bitmap
 * syntaxes. Only const queries: an adopted topology must never be written
 * to (binding, which changes the process, is in topo_bind.c; distances,
 * memory attributes and CPU kinds in topo_attrs.c). */
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
    { "l5", HWLOC_OBJ_L5CACHE },
    { "l4", HWLOC_OBJ_L4CACHE },
    { "l3", HWLOC_OBJ_L3CACHE },
    { "l2", HWLOC_OBJ_L2CACHE },
    { "l1", HWLOC_OBJ_L1CACHE },
    { "l3i", HWLOC_OBJ_L3ICACHE },
    { "l2i", HWLOC_OBJ_L2ICACHE },
    { "l1i", HWLOC_OBJ_L1ICACHE },
    { "core", HWLOC_OBJ_CORE },
    { "pu", HWLOC_OBJ_PU },
#if HWLOC_API_VERSION >= 0x00020100
    { "memcache", HWLOC_OBJ_MEMCACHE },
#endif
    { "bridge", HWLOC_OBJ_BRIDGE },
    { "pci", HWLOC_OBJ_PCI_DEVICE },
    { "osdev", HWLOC_OBJ_OS_DEVICE },
    { "misc", HWLOC_OBJ_MISC },
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

/* ---- loading ------------------------------------------------------------------ */

int shmtopo_topo_load_xml_here(const char *xml, size_t len, void **topop)
{
    return shmtopo_topo_load_xml_flags(xml, len, HWLOC_TOPOLOGY_FLAG_IS_THISSYSTEM, 0, topop);
}

int shmtopo_topo_load_xml_io(const char *xml, size_t len, int this_system, int io, void **topop)
{
    if (io < 0 || io > 2)
        return shmtopo_fail(EINVAL, -1, "topology: io must be 0, 1 or 2, not %d", io);
    return shmtopo_topo_load_xml_flags(xml, len, this_system ? HWLOC_TOPOLOGY_FLAG_IS_THISSYSTEM : 0,
                                       io, topop);
}

int shmtopo_topo_load_synthetic(const char *description, void **topop)
{
    hwloc_topology_t topo;
    int err;

    if (!description || !topop)
        return shmtopo_fail(EINVAL, -1, "synthetic topology: NULL argument");
    if (hwloc_topology_init(&topo) < 0)
        return shmtopo_fail_errno("hwloc_topology_init");
    errno = 0;
    if (hwloc_topology_set_synthetic(topo, description) < 0) {
        shmtopo_fail(EINVAL, -1, "hwloc_topology_set_synthetic: invalid description '%s'", description);
        goto out_with_topo;
    }
    if (hwloc_topology_load(topo) < 0) {
        shmtopo_fail(errno ? errno : EINVAL, -1, "hwloc_topology_load of synthetic '%s' failed",
                     description);
        goto out_with_topo;
    }
    *topop = topo;
    return 0;

out_with_topo:
    err = errno;
    hwloc_topology_destroy(topo);
    errno = err;
    return -1;
}

int shmtopo_topo_is_this_system(void *topo)
{
    if (!topo)
        return shmtopo_fail(EINVAL, -1, "is_this_system: NULL topology");
    return hwloc_topology_is_thissystem(topo) ? 1 : 0;
}

int shmtopo_topo_io(void *topo)
{
    enum hwloc_type_filter_e filter;

    if (!topo)
        return shmtopo_fail(EINVAL, -1, "topology: NULL handle");
    /* the filter the load set on the I/O types (an adopted copy has the
     * writer's; XML loads set it from their io argument) */
    if (hwloc_topology_get_type_filter(topo, HWLOC_OBJ_PCI_DEVICE, &filter) < 0)
        return shmtopo_fail_errno("hwloc_topology_get_type_filter");
    switch (filter) {
    case HWLOC_TYPE_FILTER_KEEP_NONE:
        return 0;
    case HWLOC_TYPE_FILTER_KEEP_ALL:
        return 2;
    default:
        return 1;
    }
}

/* ---- types and objects ----------------------------------------------------------- */

/* The depths where objects of a type sit (several only for Groups and
 * caches of a kind that appears at different levels); returns how many. */
static int type_depths(hwloc_topology_t topo, int type, int *depths, int max)
{
    int depth = hwloc_get_type_depth(topo, (hwloc_obj_type_t)type), d, n = 0;

    if (depth == HWLOC_TYPE_DEPTH_UNKNOWN)
        return 0;
    if (depth != HWLOC_TYPE_DEPTH_MULTIPLE) {
        depths[0] = depth;
        return 1;
    }
    for (d = 0; d < hwloc_topology_get_depth(topo) && n < max; d++)
        if ((int)hwloc_get_depth_type(topo, d) == type)
            depths[n++] = d;
    return n;
}

#define MAX_DEPTHS 64

int shmtopo_topo_depth(void *topo)
{
    if (!topo)
        return shmtopo_fail(EINVAL, -1, "topology: NULL handle");
    return hwloc_topology_get_depth(topo);
}

int shmtopo_topo_nbobjs(void *topo, int type)
{
    int depths[MAX_DEPTHS], n, i, total = 0;

    if (!topo)
        return shmtopo_fail(EINVAL, -1, "topology: NULL handle");
    if (!valid_type(type))
        return shmtopo_fail(EINVAL, -1, "topology: bad object type %d", type);
    n = type_depths(topo, type, depths, MAX_DEPTHS);
    for (i = 0; i < n; i++)
        total += (int)hwloc_get_nbobjs_by_depth(topo, depths[i]);
    return total;
}

int shmtopo_topo_obj(void *topo, int type, unsigned index, void **objp)
{
    int depths[MAX_DEPTHS], n, i;
    unsigned left = index, count;
    hwloc_obj_t obj = NULL;

    if (!topo || !objp)
        return shmtopo_fail(EINVAL, -1, "topology: NULL argument");
    if (!valid_type(type))
        return shmtopo_fail(EINVAL, -1, "topology: bad object type %d", type);
    n = type_depths(topo, type, depths, MAX_DEPTHS);
    for (i = 0; i < n && !obj; i++) {
        count = hwloc_get_nbobjs_by_depth(topo, depths[i]);
        if (left < count)
            obj = hwloc_get_obj_by_depth(topo, depths[i], left);
        else
            left -= count;
    }
    if (!obj)
        return shmtopo_fail(ERANGE, -1, "topology: no %s number %u",
                            shmtopo_topo_type_name(type), index);
    *objp = obj;
    return 0;
}

int shmtopo_topo_obj_by_os_index(void *topo, int type, unsigned os_index, void **objp)
{
    int depths[MAX_DEPTHS], n, i;
    hwloc_obj_t obj;

    if (!topo || !objp)
        return shmtopo_fail(EINVAL, -1, "topology: NULL argument");
    if (!valid_type(type))
        return shmtopo_fail(EINVAL, -1, "topology: bad object type %d", type);
    *objp = NULL;
    n = type_depths(topo, type, depths, MAX_DEPTHS);
    for (i = 0; i < n; i++)
        for (obj = hwloc_get_obj_by_depth(topo, depths[i], 0); obj; obj = obj->next_cousin)
            if (obj->os_index == os_index) {
                *objp = obj;
                return 0;
            }
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
    infop->io_arity = obj->io_arity;
    infop->misc_arity = obj->misc_arity;
    infop->gp_index = obj->gp_index;
    infop->sibling_rank = obj->sibling_rank;
    infop->symmetric_subtree = obj->symmetric_subtree;
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
    hwloc_obj_t obj = objv, child = NULL;
    unsigned i = 0;

    if (!obj || !childp)
        return shmtopo_fail(EINVAL, -1, "topology object: NULL argument");
    if (index < obj->arity) {
        *childp = obj->children[index];
        return 0;
    }
    /* hwloc's own order: normal, memory, I/O, then Misc children */
    while ((child = hwloc_get_next_child(NULL, obj, child)) != NULL)
        if (i++ == index) {
            *childp = child;
            return 0;
        }
    return shmtopo_fail(ERANGE, -1, "topology object: no child number %u", index);
}

/* ---- sets ------------------------------------------------------------------------ */

static hwloc_const_bitmap_t obj_set(hwloc_obj_t obj, int which)
{
    return which == 1 ? obj->nodeset : obj->cpuset;
}

static int bitmap_list(hwloc_const_bitmap_t set, unsigned *out, size_t max,
                       size_t *countp)
{
    int weight, i;
    size_t n = 0;

    if (!countp)
        return shmtopo_fail(EINVAL, -1, "topology: NULL count pointer");
    if (!set) {
        *countp = 0;
        return 0;
    }
    weight = hwloc_bitmap_weight(set);
    if (weight < 0)
        return shmtopo_fail(ERANGE, -1, "topology: infinite set");
    *countp = (size_t)weight;
    if ((size_t)weight > max || (weight && !out))
        return shmtopo_fail(ENOBUFS, -1, "topology: set of %d, room for %zu",
                            weight, max);
    hwloc_bitmap_foreach_begin(i, set)
        out[n++] = (unsigned)i;
    hwloc_bitmap_foreach_end();
    return 0;
}

void *shmtopo_bitmap_of(const unsigned *idx, size_t n, const char *what)
{
    hwloc_bitmap_t set;
    size_t i;

    if (n && !idx) {
        shmtopo_fail(EINVAL, -1, "%s: NULL index array", what);
        return NULL;
    }
    set = hwloc_bitmap_alloc();
    if (!set) {
        shmtopo_fail(ENOMEM, -1, "%s: no memory for a bitmap", what);
        return NULL;
    }
    for (i = 0; i < n; i++)
        if (idx[i] > INT_MAX || hwloc_bitmap_set(set, idx[i]) < 0) {
            hwloc_bitmap_free(set);
            shmtopo_fail(idx[i] > INT_MAX ? EINVAL : ENOMEM, -1, "%s: cannot hold index %u", what,
                         idx[i]);
            return NULL;
        }
    return set;
}

static hwloc_bitmap_t bitmap_of(const unsigned *idx, size_t n)
{
    return shmtopo_bitmap_of(idx, n, "topology");
}

void shmtopo_bitmap_drop(void *set)
{
    int err = errno;
    hwloc_bitmap_free(set);
    errno = err;
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

/* ---- attributes ------------------------------------------------------------------- */

static void pci_attr(const struct hwloc_pcidev_attr_s *pci, shmtopo_obj_attr_t *a)
{
    a->pci_domain = pci->domain;
    a->pci_bus = pci->bus;
    a->pci_dev = pci->dev;
    a->pci_func = pci->func;
    a->pci_class_id = pci->class_id;
    a->pci_vendor_id = pci->vendor_id;
    a->pci_device_id = pci->device_id;
    a->pci_subvendor_id = pci->subvendor_id;
    a->pci_subdevice_id = pci->subdevice_id;
    a->pci_revision = pci->revision;
    a->pci_linkspeed = pci->linkspeed;
}

int shmtopo_obj_attr(void *objv, shmtopo_obj_attr_t *a)
{
    hwloc_obj_t obj = objv;

    if (!obj || !a)
        return shmtopo_fail(EINVAL, -1, "topology object: NULL argument");
    memset(a, 0, sizeof(*a));
    a->name = obj->name;
    a->subtype = obj->subtype;
    if (!obj->attr)
        return 0;
    if (hwloc_obj_type_is_cache(obj->type)) {
        a->kind = SHMTOPO_ATTR_CACHE;
        a->cache_size = obj->attr->cache.size;
        a->cache_depth = obj->attr->cache.depth;
        a->cache_linesize = obj->attr->cache.linesize;
        a->cache_associativity = obj->attr->cache.associativity;
        a->cache_type = (int)obj->attr->cache.type;
    } else {
        switch (obj->type) {
        case HWLOC_OBJ_NUMANODE:
            a->kind = SHMTOPO_ATTR_NUMA;
            a->page_types = obj->attr->numanode.page_types_len;
            break;
        case HWLOC_OBJ_GROUP:
            a->kind = SHMTOPO_ATTR_GROUP;
            a->group_depth = obj->attr->group.depth;
            break;
        case HWLOC_OBJ_PCI_DEVICE:
            a->kind = SHMTOPO_ATTR_PCI;
            pci_attr(&obj->attr->pcidev, a);
            break;
        case HWLOC_OBJ_BRIDGE:
            a->kind = SHMTOPO_ATTR_BRIDGE;
            a->bridge_upstream = obj->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_PCI;
            if (a->bridge_upstream)
                pci_attr(&obj->attr->bridge.upstream.pci, a);
            a->bridge_downstream = obj->attr->bridge.downstream_type == HWLOC_OBJ_BRIDGE_PCI;
            a->bridge_domain = obj->attr->bridge.downstream.pci.domain;
            a->bridge_secondary_bus = obj->attr->bridge.downstream.pci.secondary_bus;
            a->bridge_subordinate_bus = obj->attr->bridge.downstream.pci.subordinate_bus;
            a->bridge_depth = obj->attr->bridge.depth;
            break;
        case HWLOC_OBJ_OS_DEVICE:
            a->kind = SHMTOPO_ATTR_OSDEV;
            a->osdev_type = (int)obj->attr->osdev.type;
            break;
        default:
            break;
        }
    }
    return 0;
}

const char *shmtopo_osdev_type_name(int type)
{
    switch (type) {
    case HWLOC_OBJ_OSDEV_BLOCK: return "block";
    case HWLOC_OBJ_OSDEV_GPU: return "gpu";
    case HWLOC_OBJ_OSDEV_NETWORK: return "network";
    case HWLOC_OBJ_OSDEV_OPENFABRICS: return "openfabrics";
    case HWLOC_OBJ_OSDEV_DMA: return "dma";
    case HWLOC_OBJ_OSDEV_COPROC: return "coproc";
    default: return "unknown";
    }
}

int shmtopo_obj_infos(void *objv, const char **names, const char **values, size_t max,
                      size_t *countp)
{
    hwloc_obj_t obj = objv;
    unsigned i;

    if (!obj || !countp)
        return shmtopo_fail(EINVAL, -1, "topology object: NULL argument");
    *countp = obj->infos_count;
    if (obj->infos_count > max || (obj->infos_count && (!names || !values)))
        return shmtopo_fail(ENOBUFS, -1, "topology object: %u infos, room for %zu",
                            obj->infos_count, max);
    for (i = 0; i < obj->infos_count; i++) {
        names[i] = obj->infos[i].name;
        values[i] = obj->infos[i].value;
    }
    return 0;
}

int shmtopo_obj_page_types(void *objv, uint64_t *sizes, uint64_t *counts, size_t max,
                           size_t *countp)
{
    hwloc_obj_t obj = objv;
    unsigned i, n;

    if (!obj || !countp)
        return shmtopo_fail(EINVAL, -1, "topology object: NULL argument");
    n = obj->type == HWLOC_OBJ_NUMANODE ? obj->attr->numanode.page_types_len : 0;
    *countp = n;
    if (n > max || (n && (!sizes || !counts)))
        return shmtopo_fail(ENOBUFS, -1, "topology object: %u page types, room for %zu", n, max);
    for (i = 0; i < n; i++) {
        sizes[i] = obj->attr->numanode.page_types[i].size;
        counts[i] = obj->attr->numanode.page_types[i].count;
    }
    return 0;
}

/* ---- relations and lookups ------------------------------------------------------- */

int shmtopo_obj_ancestor(void *topo, void *objv, int type, void **ancestorp)
{
    if (!topo || !objv || !ancestorp)
        return shmtopo_fail(EINVAL, -1, "topology object: NULL argument");
    if (!valid_type(type))
        return shmtopo_fail(EINVAL, -1, "topology: bad object type %d", type);
    *ancestorp = hwloc_get_ancestor_obj_by_type(topo, (hwloc_obj_type_t)type, objv);
    return 0;
}

/* The object a memory, I/O or Misc object hangs from (itself if normal). */
static hwloc_obj_t normal_self_or_parent(hwloc_obj_t obj)
{
    while (obj && obj->depth < 0)
        obj = obj->parent;
    return obj;
}

int shmtopo_obj_common_ancestor(void *topo, void *a, void *b, void **ancestorp)
{
    hwloc_obj_t x, y;

    if (!topo || !a || !b || !ancestorp)
        return shmtopo_fail(EINVAL, -1, "topology object: NULL argument");
    if (a == b) {
        *ancestorp = a;
        return 0;
    }
    /* hwloc's helper walks by depth, which negative depths would derail */
    x = normal_self_or_parent(a);
    y = normal_self_or_parent(b);
    if (!x || !y)
        return shmtopo_fail(EINVAL, -1, "topology object: not attached to the tree");
    *ancestorp = hwloc_get_common_ancestor_obj(topo, x, y);
    return 0;
}

int shmtopo_obj_is_inside(void *topo, void *obj, void *root)
{
    if (!topo || !obj || !root)
        return shmtopo_fail(EINVAL, -1, "topology object: NULL argument");
    return hwloc_obj_is_in_subtree(topo, obj, root) ? 1 : 0;
}

int shmtopo_obj_non_io_ancestor(void *topo, void *obj, void **ancestorp)
{
    if (!topo || !obj || !ancestorp)
        return shmtopo_fail(EINVAL, -1, "topology object: NULL argument");
    *ancestorp = hwloc_get_non_io_ancestor_obj(topo, obj);
    return 0;
}

int shmtopo_topo_covering(void *topo, const unsigned *cpus, size_t n, void **objp)
{
    hwloc_bitmap_t set;

    if (!topo || !objp)
        return shmtopo_fail(EINVAL, -1, "topology: NULL argument");
    if (!(set = bitmap_of(cpus, n)))
        return -1;
    *objp = hwloc_get_obj_covering_cpuset(topo, set);
    hwloc_bitmap_free(set);
    return 0;
}

static int has_cpuset(int type)
{
    return type != HWLOC_OBJ_BRIDGE && type != HWLOC_OBJ_PCI_DEVICE && type != HWLOC_OBJ_OS_DEVICE &&
           type != HWLOC_OBJ_MISC;
}

int shmtopo_topo_inside(void *topo, const unsigned *cpus, size_t n, int type, void **objs,
                        size_t max, size_t *countp)
{
    hwloc_bitmap_t set;
    hwloc_obj_t obj, *all = NULL;
    int depths[MAX_DEPTHS], ndepths, i, got;
    size_t count = 0;

    if (!topo || !countp)
        return shmtopo_fail(EINVAL, -1, "topology: NULL argument");
    if (type >= 0 && (!valid_type(type) || !has_cpuset(type)))
        return shmtopo_fail(EINVAL, -1, "topology: %s objects have no cpuset to lie inside one",
                            shmtopo_topo_type_name(type));
    if (!(set = bitmap_of(cpus, n)))
        return -1;
    if (type >= 0) {
        ndepths = type_depths(topo, type, depths, MAX_DEPTHS);
        for (i = 0; i < ndepths; i++)
            for (obj = NULL; (obj = hwloc_get_next_obj_inside_cpuset_by_depth(topo, set, depths[i], obj));) {
                if (count < max && objs)
                    objs[count] = obj;
                count++;
            }
    } else {
        /* CPUs the topology lacks lie inside no object */
        hwloc_bitmap_and(set, set, hwloc_get_root_obj(topo)->cpuset);
    }
    if (type < 0 && !hwloc_bitmap_iszero(set)) {
        /* the largest objects are disjoint, each holds a PU of the set:
         * room for one per PU is enough to learn how many there are */
        int room = hwloc_bitmap_weight(set);
        all = malloc((size_t)room * sizeof(*all));
        if (!all) {
            hwloc_bitmap_free(set);
            return shmtopo_fail(ENOMEM, -1, "topology: no memory for %d objects", room);
        }
        got = hwloc_get_largest_objs_inside_cpuset(topo, set, all, room);
        if (got < 0) {
            shmtopo_fail(EINVAL, -1, "hwloc_get_largest_objs_inside_cpuset: the set lies outside the topology");
            free(all);
            shmtopo_bitmap_drop(set);
            return -1;
        }
        for (i = 0; i < got; i++)
            if ((size_t)i < max && objs)
                objs[i] = all[i];
        count = (size_t)got;
        free(all);
    }
    hwloc_bitmap_free(set);
    *countp = count;
    if (count > max || (count && !objs))
        return shmtopo_fail(ENOBUFS, -1, "topology: %zu objects, room for %zu", count, max);
    return 0;
}

int shmtopo_topo_convert_set(void *topo, int to_nodeset, const unsigned *in, size_t n,
                             unsigned *out, size_t max, size_t *countp)
{
    hwloc_bitmap_t from, to;
    int rc;

    if (!topo)
        return shmtopo_fail(EINVAL, -1, "topology: NULL handle");
    if (!(from = bitmap_of(in, n)))
        return -1;
    if (!(to = hwloc_bitmap_alloc())) {
        hwloc_bitmap_free(from);
        return shmtopo_fail(ENOMEM, -1, "topology: no memory for a bitmap");
    }
    if (to_nodeset)
        hwloc_cpuset_to_nodeset(topo, from, to);
    else
        hwloc_cpuset_from_nodeset(topo, to, from);
    rc = bitmap_list(to, out, max, countp);
    shmtopo_bitmap_drop(from);
    shmtopo_bitmap_drop(to);
    return rc;
}

/* ---- bitmaps in hwloc's syntaxes -------------------------------------------------- */

int shmtopo_bitmap_parse(const char *text, int syntax, unsigned *out, size_t max, size_t *countp)
{
    hwloc_bitmap_t set;
    int rc;

    if (!text || !countp)
        return shmtopo_fail(EINVAL, -1, "bitmap: NULL argument");
    if (!(set = hwloc_bitmap_alloc()))
        return shmtopo_fail(ENOMEM, -1, "bitmap: no memory");
    switch (syntax) {
    case SHMTOPO_BITMAP_LIST:
        rc = hwloc_bitmap_list_sscanf(set, text);
        break;
    case SHMTOPO_BITMAP_MASK:
        rc = hwloc_bitmap_sscanf(set, text);
        break;
    case SHMTOPO_BITMAP_TASKSET:
        rc = hwloc_bitmap_taskset_sscanf(set, text);
        break;
    default:
        hwloc_bitmap_free(set);
        return shmtopo_fail(EINVAL, -1, "bitmap: unknown syntax %d", syntax);
    }
    if (rc < 0) {
        hwloc_bitmap_free(set);
        return shmtopo_fail(EINVAL, -1, "bitmap: '%s' is not in hwloc's %s syntax", text,
                            syntax == SHMTOPO_BITMAP_LIST ? "list" : syntax == SHMTOPO_BITMAP_MASK ? "mask" : "taskset");
    }
    if (hwloc_bitmap_weight(set) < 0) {
        hwloc_bitmap_free(set);
        return shmtopo_fail(EINVAL, -1, "bitmap: '%s' is an infinite set", text);
    }
    rc = bitmap_list(set, out, max, countp);
    shmtopo_bitmap_drop(set);
    return rc;
}

int shmtopo_bitmap_format(const unsigned *idx, size_t n, int syntax, char *buf, size_t len)
{
    hwloc_bitmap_t set;
    int rc;

    if (len && !buf)
        return shmtopo_fail(EINVAL, -1, "bitmap: NULL buffer");
    if (syntax < SHMTOPO_BITMAP_LIST || syntax > SHMTOPO_BITMAP_TASKSET)
        return shmtopo_fail(EINVAL, -1, "bitmap: unknown syntax %d", syntax);
    if (!(set = bitmap_of(idx, n)))
        return -1;
    if (syntax == SHMTOPO_BITMAP_LIST)
        rc = hwloc_bitmap_list_snprintf(buf, len, set);
    else if (syntax == SHMTOPO_BITMAP_MASK)
        rc = hwloc_bitmap_snprintf(buf, len, set);
    else
        rc = hwloc_bitmap_taskset_snprintf(buf, len, set);
    if (rc < 0)
        shmtopo_fail_errno("hwloc_bitmap_snprintf");
    shmtopo_bitmap_drop(set);
    return rc;
}

int shmtopo_bitmap_indices(const void *bitmap, unsigned *out, size_t max, size_t *countp)
{
    if (!bitmap)
        return shmtopo_fail(EINVAL, -1, "bitmap: NULL argument");
    return bitmap_list(bitmap, out, max, countp);
}
