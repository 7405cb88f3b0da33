/* Read-only queries on a topology (local, from XML or adopted from shmem):
 * object counts and objects by type, their sets, and this process's
 * binding. Nothing here modifies a topology: an adopted one lives in
 * read-only shared memory, where a write would be a segfault. */
#ifndef SHMTOPO_TOPOLOGY_H
#define SHMTOPO_TOPOLOGY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* CDEF BEGIN */

/* Topology handles are hwloc_topology_t, objects hwloc_obj_t, as void *. */

/* What one object says about itself, filled in a single call. */
typedef struct shmtopo_obj_info {
    int type;                /* hwloc_obj_type_t */
    int depth;               /* negative for memory (NUMA) objects */
    int64_t os_index;        /* -1 when unknown */
    int64_t logical_index;
    uint64_t local_memory;   /* NUMA nodes: their own memory; else 0 */
    uint64_t total_memory;   /* memory of all NUMA nodes below */
    unsigned arity;          /* normal children */
    unsigned memory_arity;   /* memory children (NUMA nodes) */
} shmtopo_obj_info_t;

/* Type number for a name: "machine", "package", "die", "numanode"/"numa",
 * "group", "l3", "l2", "l1", "core", "pu", or any hwloc type string
 * ("L1iCache", "Misc", ...), case-insensitive. EINVAL: unknown name, or a
 * type this hwloc lacks. */
int shmtopo_topo_type_from_name(const char *name, int *typep);
/* Short lower-case name of a type ("numanode", "l3", "pu", ...). */
const char *shmtopo_topo_type_name(int type);
/* Load XML exported on this same machine (by another rank of the node):
 * like shmtopo_topo_load_xml, but hwloc treats it as this system, so that
 * binding queries work. */
int shmtopo_topo_load_xml_here(const char *xml, size_t len, void **topop);
/* Levels of normal objects (Machine down to PU). */
int shmtopo_topo_depth(void *topo);
/* Objects of a type, over every depth where it appears (Groups may sit at
 * several); 0 if none. EINVAL: bad handle or type. */
int shmtopo_topo_nbobjs(void *topo, int type);
/* The index-th object of a type (depth by depth, logical order inside
 * each). EINVAL: bad type; ERANGE: index out of range. */
int shmtopo_topo_obj(void *topo, int type, unsigned index, void **objp);
/* The root (Machine) object. */
int shmtopo_topo_root(void *topo, void **objp);
int shmtopo_obj_info(void *obj, shmtopo_obj_info_t *infop);
/* Parent, NULL for the root. */
int shmtopo_obj_parent(void *obj, void **parentp);
/* Child i: the normal children first, then the memory children. ERANGE
 * past arity + memory_arity. */
int shmtopo_obj_child(void *obj, unsigned index, void **childp);
/* Indices in an object's cpuset (which = 0: PU os indices) or nodeset
 * (which = 1: NUMA os indices). *countp: the total; ENOBUFS when it exceeds
 * max; ERANGE for an infinite set. */
int shmtopo_obj_set(void *obj, int which, unsigned *out, size_t max,
                    size_t *countp);
/* hwloc's string form of that set ("0x0000000f"), truncated to len bytes;
 * returns the length it needs without the NUL, like snprintf. */
int shmtopo_obj_set_str(void *obj, int which, char *buf, size_t len);
/* PU os indices this process is bound to (what = 0), or where the calling
 * thread last ran (what = 1). Same conventions as shmtopo_obj_set. */
int shmtopo_topo_cpubind(void *topo, int what, unsigned *out, size_t max,
                         size_t *countp);

/* CDEF END */

#ifdef __cplusplus
}
#endif
#endif /* SHMTOPO_TOPOLOGY_H */
