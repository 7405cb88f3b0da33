/* Free virtual address ranges, read from /proc/self/maps, and the choice of a
 * common address for a segment every rank maps at the same place. */
#ifndef SHMTOPO_MAPS_H
#define SHMTOPO_MAPS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* CDEF BEGIN */

/* [start, end) */
typedef struct shmtopo_range { uintptr_t start, end; } shmtopo_range_t;

/* Parse maps-format text (len bytes, need not be NUL-terminated) into the
 * free ranges of the address space within [page_size, limit) (limit 0: this
 * architecture's user-space top, or the highest mapping end if larger).
 * Keeps a guard gap below [stack]. EINVAL (with the line number) for malformed
 * or unordered text; ENOBUFS when more than max ranges (*countp: the total). */
int shmtopo_maps_parse_free(const char *text, size_t len, uintptr_t limit,
                            shmtopo_range_t *out, size_t max, size_t *countp);
/* Same for this process, from /proc/self/maps. */
int shmtopo_maps_self_free(shmtopo_range_t *out, size_t max, size_t *countp);
/* Intersection of two sorted, disjoint range lists. ENOBUFS if out is too
 * small (*countp: the total); EINVAL for unsorted input. */
int shmtopo_ranges_intersect(const shmtopo_range_t *a, size_t na,
                             const shmtopo_range_t *b, size_t nb,
                             shmtopo_range_t *out, size_t max, size_t *countp);
/* A start address for `length` bytes inside the ranges, aligned to `align`
 * (a power of two >= the page size), deterministic, away from hole midpoints;
 * each `attempt` gives another candidate. EINVAL: bad length/align; ENOMEM:
 * nothing fits. */
int shmtopo_ranges_choose(const shmtopo_range_t *ranges, size_t n,
                          size_t length, size_t align, unsigned attempt,
                          uintptr_t *addrp);

/* CDEF END */

#ifdef __cplusplus
}
#endif
#endif /* SHMTOPO_MAPS_H */
