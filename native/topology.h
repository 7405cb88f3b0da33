/* Read-only queries on a topology (local, from XML or synthetic, or adopted
 * from shmem): types, objects and their attributes, lookups by index or by
 * set, distances, memory attributes, CPU kinds, I/O devices; and binding of
 * this process or thread, which changes the process, never the topology.
 * Nothing here modifies a topology: an adopted one lives in read-only
 * shared memory, where a write would be a segfault.
 *
 * Sets (cpusets, nodesets) cross this interface as sorted arrays of
 * indices. Outputs of variable length are filled into (out, max) with the
 * total in *countp; ENOBUFS when it exceeds max (call again, larger). Every
 * call returns -1 with errno and a message on failure (shmtopo_last_error). */
#ifndef SHMTOPO_TOPOLOGY_H
#define SHMTOPO_TOPOLOGY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* CDEF BEGIN */

/* Topology handles are hwloc_topology_t, objects hwloc_obj_t, as void *. */

/* ---- types and objects --------------------------------------------------- */

/* What one object says about itself, filled in a single call. */
typedef struct shmtopo_obj_info {
    int type;                /* hwloc_obj_type_t */
    int depth;               /* negative for memory, I/O and Misc objects */
    int64_t os_index;        /* -1 when unknown */
    int64_t logical_index;
    uint64_t local_memory;   /* NUMA nodes: their own memory; else 0 */
    uint64_t total_memory;   /* memory of all NUMA nodes below */
    unsigned arity;          /* normal children */
    unsigned memory_arity;   /* memory children (NUMA nodes) */
    unsigned io_arity;       /* I/O children (bridges, PCI and OS devices) */
    unsigned misc_arity;     /* Misc children */
    uint64_t gp_index;       /* hwloc's global persistent index */
    unsigned sibling_rank;
    int symmetric_subtree;
} shmtopo_obj_info_t;

/* Type number for a name: "machine", "package", "die", "numanode"/"numa",
 * "group", "l1" to "l5", "l1i" to "l3i", "core", "pu", "memcache", "bridge",
 * "pci", "osdev", "misc", or any hwloc type string ("L1iCache", "PCIDev",
 * ...), case-insensitive. EINVAL: unknown name, or a type this hwloc lacks. */
int shmtopo_topo_type_from_name(const char *name, int *typep);
/* Short lower-case name of a type ("numanode", "l3", "pu", "pci", ...). */
const char *shmtopo_topo_type_name(int type);
/* Load XML exported on this same machine (by another rank of the node):
 * like shmtopo_topo_load_xml, but hwloc treats it as this system, so that
 * binding queries work. */
int shmtopo_topo_load_xml_here(const char *xml, size_t len, void **topop);
/* Load hwloc XML keeping its I/O objects (io: 0 none, 1 the important
 * ones, 2 all); this_system as for shmtopo_topo_load_xml_here. */
int shmtopo_topo_load_xml_io(const char *xml, size_t len, int this_system, int io, void **topop);
/* A synthetic topology from hwloc's description ("pack:2 core:4 pu:2").
 * EINVAL: a description hwloc rejects. */
int shmtopo_topo_load_synthetic(const char *description, void **topop);
/* The I/O objects a topology was loaded with: 0 none, 1 important, 2 all. */
int shmtopo_topo_io(void *topo);
/* 1 when the topology describes this machine (binding through it works), 0
 * for another machine's (XML without this_system, synthetic). */
int shmtopo_topo_is_this_system(void *topo);
/* Levels of normal objects (Machine down to PU). */
int shmtopo_topo_depth(void *topo);
/* Objects of a type, over every depth where it appears (Groups may sit at
 * several); 0 if none. EINVAL: bad handle or type. */
int shmtopo_topo_nbobjs(void *topo, int type);
/* The index-th object of a type (depth by depth, logical order inside
 * each). EINVAL: bad type; ERANGE: index out of range. */
int shmtopo_topo_obj(void *topo, int type, unsigned index, void **objp);
/* The object of a type with that OS (physical) index; *objp NULL if none. */
int shmtopo_topo_obj_by_os_index(void *topo, int type, unsigned os_index, void **objp);
/* The root (Machine) object. */
int shmtopo_topo_root(void *topo, void **objp);
int shmtopo_obj_info(void *obj, shmtopo_obj_info_t *infop);
/* Parent, NULL for the root. */
int shmtopo_obj_parent(void *obj, void **parentp);
/* Child i: the normal children first, then memory, I/O and Misc children
 * (hwloc_get_next_child's order). ERANGE past all of them. */
int shmtopo_obj_child(void *obj, unsigned index, void **childp);
/* Indices in an object's cpuset (which = 0: PU os indices) or nodeset
 * (which = 1: NUMA os indices); none for I/O objects. ERANGE for an
 * infinite set. */
int shmtopo_obj_set(void *obj, int which, unsigned *out, size_t max,
                    size_t *countp);
/* hwloc's string form of that set ("0x0000000f"), truncated to len bytes;
 * returns the length it needs without the NUL, like snprintf. */
int shmtopo_obj_set_str(void *obj, int which, char *buf, size_t len);

/* ---- attributes ------------------------------------------------------------ */

enum shmtopo_attr_kind {
    SHMTOPO_ATTR_NONE = 0, SHMTOPO_ATTR_CACHE = 1, SHMTOPO_ATTR_NUMA = 2, SHMTOPO_ATTR_GROUP = 3,
    SHMTOPO_ATTR_PCI = 4, SHMTOPO_ATTR_BRIDGE = 5, SHMTOPO_ATTR_OSDEV = 6
};

/* The type-specific attributes of an object (the fields its kind uses) and
 * its strings, which point into the topology (valid while it is open). */
typedef struct shmtopo_obj_attr {
    int kind;                   /* enum shmtopo_attr_kind */
    const char *name;           /* NULL if none */
    const char *subtype;        /* NULL if none */
    /* cache */
    uint64_t cache_size;        /* bytes */
    unsigned cache_depth;       /* 1 for L1 ... */
    unsigned cache_linesize;    /* 0 unknown */
    int cache_associativity;    /* -1 fully associative, 0 unknown */
    int cache_type;             /* 0 unified, 1 data, 2 instruction */
    /* NUMA node */
    unsigned page_types;        /* entries for shmtopo_obj_page_types */
    /* group */
    unsigned group_depth;
    /* PCI device, or a bridge's upstream PCI side */
    unsigned pci_domain, pci_bus, pci_dev, pci_func;
    unsigned pci_class_id, pci_vendor_id, pci_device_id, pci_subvendor_id, pci_subdevice_id;
    unsigned pci_revision;
    float pci_linkspeed;        /* GB/s, 0 unknown */
    /* bridge */
    int bridge_upstream;        /* 0 host, 1 PCI */
    int bridge_downstream;      /* 1 PCI */
    unsigned bridge_domain, bridge_secondary_bus, bridge_subordinate_bus, bridge_depth;
    /* OS device */
    int osdev_type;             /* hwloc_obj_osdev_type_t */
} shmtopo_obj_attr_t;

int shmtopo_obj_attr(void *obj, shmtopo_obj_attr_t *attrp);
/* Name of an OS device type ("block", "gpu", "network", "openfabrics",
 * "dma", "coproc"); "unknown" otherwise. */
const char *shmtopo_osdev_type_name(int type);
/* The info attributes of an object (CPUModel, CPUVendor, ...), in order:
 * names[i] = values[i]; the strings belong to the topology. */
int shmtopo_obj_infos(void *obj, const char **names, const char **values, size_t max,
                      size_t *countp);
/* A NUMA node's page types: sizes[i] bytes, counts[i] pages. */
int shmtopo_obj_page_types(void *obj, uint64_t *sizes, uint64_t *counts, size_t max,
                           size_t *countp);

/* ---- relations and lookups ---------------------------------------------- */

/* The closest ancestor of a type (not the object itself); NULL if none. */
int shmtopo_obj_ancestor(void *topo, void *obj, int type, void **ancestorp);
/* The deepest object that is both objects' ancestor or one of them (memory,
 * I/O and Misc objects count from the normal object they hang from). */
int shmtopo_obj_common_ancestor(void *topo, void *a, void *b, void **ancestorp);
/* 1 if obj lies inside the subtree of root (by cpusets, as hwloc decides:
 * objects without a cpuset, like I/O ones, are inside nothing), else 0. */
int shmtopo_obj_is_inside(void *topo, void *obj, void *root);
/* The object itself if it has a cpuset, else its first ancestor that has
 * one (for I/O objects: where they are attached). */
int shmtopo_obj_non_io_ancestor(void *topo, void *obj, void **ancestorp);
/* The deepest normal object whose cpuset holds all of cpus; NULL when none
 * does (empty set, or CPUs outside the topology). */
int shmtopo_topo_covering(void *topo, const unsigned *cpus, size_t n, void **objp);
/* Objects inside a cpuset: type >= 0: every object of that type whose
 * (non-empty) cpuset lies inside it; type < 0: the largest objects that
 * together cover it exactly. EINVAL for types without cpusets (I/O, Misc). */
int shmtopo_topo_inside(void *topo, const unsigned *cpus, size_t n, int type, void **objs,
                        size_t max, size_t *countp);
/* cpuset -> nodeset (to_nodeset = 1: the NUMA nodes near those CPUs) or
 * nodeset -> cpuset (0: the CPUs near those NUMA nodes). */
int shmtopo_topo_convert_set(void *topo, int to_nodeset, const unsigned *in, size_t n,
                             unsigned *out, size_t max, size_t *countp);

/* ---- bitmaps in hwloc's syntaxes --------------------------------------------- */

enum shmtopo_bitmap_syntax {
    SHMTOPO_BITMAP_LIST = 0,     /* "0-3,8" */
    SHMTOPO_BITMAP_MASK = 1,     /* "0x0000010f" (32-bit words, comma-separated) */
    SHMTOPO_BITMAP_TASKSET = 2   /* "0x10f" */
};

/* Parse text in a syntax into indices. EINVAL: not that syntax, or an
 * infinite set ("0-"). */
int shmtopo_bitmap_parse(const char *text, int syntax, unsigned *out, size_t max, size_t *countp);
/* Format indices in a syntax, snprintf-like: the length needed without
 * the NUL. */
int shmtopo_bitmap_format(const unsigned *idx, size_t n, int syntax, char *buf, size_t len);
/* Indices of a bitmap that belongs to a topology (memory attribute
 * initiators). */
int shmtopo_bitmap_indices(const void *bitmap, unsigned *out, size_t max, size_t *countp);

/* ---- binding (topo_bind.c): changes this process or thread ---------------- */

enum shmtopo_bind_flags {
    SHMTOPO_BIND_THREAD = 1,    /* the calling thread, not the whole process */
    SHMTOPO_BIND_STRICT = 2,    /* hwloc's STRICT */
    SHMTOPO_BIND_MIGRATE = 4    /* memory binding: move pages already there */
};

/* CPUs (PU os indices) this process (or thread) is bound to. ENOSYS: the
 * topology is not this machine's, or the OS cannot tell. */
int shmtopo_topo_get_cpubind(void *topo, int flags, unsigned *out, size_t max, size_t *countp);
/* Where this process's threads (or the calling thread) last ran. */
int shmtopo_topo_get_last_cpu(void *topo, int flags, unsigned *out, size_t max, size_t *countp);
/* Bind this process (all its threads) or the calling thread to cpus.
 * EINVAL: an empty set; EXDEV/ENOSYS: hwloc cannot bind there. */
int shmtopo_topo_set_cpubind(void *topo, const unsigned *cpus, size_t n, int flags);

enum shmtopo_membind_policy {
    SHMTOPO_MEMBIND_DEFAULT = 0, SHMTOPO_MEMBIND_FIRSTTOUCH = 1, SHMTOPO_MEMBIND_BIND = 2,
    SHMTOPO_MEMBIND_INTERLEAVE = 3, SHMTOPO_MEMBIND_NEXTTOUCH = 4, SHMTOPO_MEMBIND_MIXED = -1
};

/* "default", "firsttouch", "bind", "interleave", "nexttouch", "mixed". */
int shmtopo_membind_policy_from_name(const char *name, int *policyp);
const char *shmtopo_membind_policy_name(int policy);
/* Memory binding of this process (or thread): NUMA os indices and policy. */
int shmtopo_topo_get_membind(void *topo, int flags, int *policyp, unsigned *out, size_t max,
                             size_t *countp);
/* Bind memory to NUMA nodes (os indices) with a policy ("default" resets
 * it; nodes may then be empty). */
int shmtopo_topo_set_membind(void *topo, const unsigned *nodes, size_t n, int policy, int flags);

enum shmtopo_place_policy {
    SHMTOPO_PLACE_COMPACT = 0,  /* rank r on object r, in logical order */
    SHMTOPO_PLACE_SPREAD = 1    /* ranks shared out over the tree, proportionally */
};

/* "compact" or "spread". */
int shmtopo_place_policy_from_name(const char *name, int *policyp);
/* Where n ranks go, one object of `type` each: indices[r] is the logical
 * index of rank r's object. Only objects with CPUs count. More ranks than
 * objects share them (compact: in blocks, spread: round-robin), cores and
 * PUs only where `overload` is set. EINVAL: a type at several depths or
 * without CPUs, or more ranks than cores or PUs without `overload`. */
int shmtopo_topo_place(void *topo, int type, int policy, int overload, unsigned n, unsigned *indices);

/* ---- distances, memory attributes, CPU kinds (topo_attrs.c) --------------- */

typedef struct shmtopo_distances_info {
    const char *name;        /* NULL if unnamed (or hwloc < 2.1) */
    unsigned long kind;      /* hwloc_distances_kind_e bits */
    unsigned nbobjs;
} shmtopo_distances_info_t;

/* Number of distance matrices. */
int shmtopo_topo_ndistances(void *topo);
/* Matrix `index`: its info, its objects (nbobjs) and values (nbobjs^2,
 * row-major), when they fit in max objects (else ENOBUFS, with the info
 * filled). ERANGE: no such matrix. */
int shmtopo_topo_distances(void *topo, unsigned index, shmtopo_distances_info_t *infop, void **objs,
                           uint64_t *values, size_t max);

typedef struct shmtopo_memattr_info {
    const char *name;
    unsigned long flags;     /* hwloc_memattr_flag_e bits */
} shmtopo_memattr_info_t;

/* Memory attributes are numbered 0 .. n-1 (Capacity, Locality, Bandwidth,
 * Latency, ... then user-defined ones). ENOSYS before hwloc 2.3. */
int shmtopo_topo_nmemattrs(void *topo);
int shmtopo_topo_memattr_info(void *topo, unsigned id, shmtopo_memattr_info_t *infop);
/* EINVAL: no attribute of that name. */
int shmtopo_topo_memattr_by_name(void *topo, const char *name, unsigned *idp);
/* The NUMA nodes that have a value, with it. */
int shmtopo_topo_memattr_targets(void *topo, unsigned id, void **targets, uint64_t *values,
                                 size_t max, size_t *countp);
/* The initiators that have a value for target: kinds[i] 1 (locs[i] is a
 * bitmap, see shmtopo_bitmap_indices) or 2 (an object). */
int shmtopo_topo_memattr_initiators(void *topo, unsigned id, void *target, int *kinds, void **locs,
                                    uint64_t *values, size_t max, size_t *countp);
/* The value for target from initiator cpus (n = 0: no initiator). ENOENT:
 * none. */
int shmtopo_topo_memattr_value(void *topo, unsigned id, void *target, const unsigned *cpus, size_t n,
                               uint64_t *valuep);
/* The best target for initiator cpus, with its value. ENOENT: none. */
int shmtopo_topo_memattr_best_target(void *topo, unsigned id, const unsigned *cpus, size_t n,
                                     void **targetp, uint64_t *valuep);
/* The NUMA nodes local to cpus (n = 0: all of them); flags as hwloc's
 * HWLOC_LOCAL_NUMANODE_FLAG_* (1 larger, 2 smaller localities, 4 all). */
int shmtopo_topo_local_numanodes(void *topo, const unsigned *cpus, size_t n, unsigned long flags,
                                 void **nodes, size_t max, size_t *countp);

/* Number of CPU kinds (0 when unknown; ENOSYS before hwloc 2.4). Kinds are
 * ranked by efficiency, lowest first. */
int shmtopo_topo_ncpukinds(void *topo);
/* Kind `index`: its efficiency (-1 unknown) and PUs. ENOENT: no such kind. */
int shmtopo_topo_cpukind(void *topo, unsigned index, int *efficiencyp, unsigned *cpus, size_t max,
                         size_t *countp);
/* Kind `index`'s info attributes (CoreType, FrequencyMaxMHz, ...). */
int shmtopo_topo_cpukind_infos(void *topo, unsigned index, const char **names, const char **values,
                               size_t max, size_t *countp);
/* The kind all of cpus belong to. EXDEV: they span several; ENOENT: no
 * kind holds them. */
int shmtopo_topo_cpukind_of(void *topo, const unsigned *cpus, size_t n);

/* CDEF END */

#ifdef __cplusplus
}
#endif
#endif /* SHMTOPO_TOPOLOGY_H */
