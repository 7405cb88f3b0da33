/* The hardware floor: probes of what the collectives are made of, timed in C
 * on the cores the job placed its ranks on (python -m shmtopo bench --floor).
 *
 * The two-process probes run between two processes that share memory: each
 * owns a region of shmtopo_floor_region(bytes) bytes (zero-filled, e.g. its
 * part of a shmtopo window) that both have mapped. The region starts with
 * this process's sequence word, which only grows, so the probes can be run
 * again and again on the same regions; both processes must make the same
 * calls in the same order. While waiting for the peer a probe spins with a
 * pause instruction (yielding now and then), checks every 20 ms that the
 * peer's process still runs (EOWNERDEAD if not) and gives up after
 * `timeout` seconds (ETIMEDOUT; 0: never).
 *
 * Every probe returns 0 and the seconds one operation takes in *secondsp:
 * the median over batches of consecutive rounds (up to 256 batches) of the
 * batch's mean, so rounds that lost the CPU to another process do not make
 * the figure; or -1 with errno set (EINVAL for bad arguments, ENOMEM, EIO
 * when the data that arrived is not the data sent). Timed intervals exclude
 * the cost of reading the clock (shmtopo_floor_clock_cost). */
#ifndef SHMTOPO_FLOOR_H
#define SHMTOPO_FLOOR_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* CDEF BEGIN */

/* Roles in shmtopo_floor_copy. */
enum shmtopo_floor_role {
    SHMTOPO_FLOOR_WRITER = 0,  /* fills its region; the peer reads it */
    SHMTOPO_FLOOR_READER = 1,  /* copies the peer's region, just written there */
    SHMTOPO_FLOOR_BOTH = 2,    /* both at once, each reading the other's */
    SHMTOPO_FLOOR_READER_CMA = 3 /* READER, by process_vm_readv out of the peer's own mapping */
};

/* Bytes a process's region needs for probes of up to `bytes` of data. */
size_t shmtopo_floor_region(size_t bytes);

/* One cache line from this core to the peer's and back, `rounds` times.
 * side 0 sends first, side 1 answers; *secondsp: one round trip. */
int shmtopo_floor_pingpong(void *mine, void *peer, int side, long rounds, int peer_pid,
                           double timeout, double *secondsp);

/* Copy `bytes` out of the other core's cache: per round the writer fills
 * its region's data (memset), then the reader memcpy's it into a private
 * buffer. role: enum shmtopo_floor_role (the peer takes the other one, or
 * BOTH when this one does). *secondsp: on a reading side one copy; on the
 * WRITER one refill of the data the reader has just copied (from the second
 * round on), which first takes each line back from the reader's cache.
 * READER_CMA copies as single copy does (single_copy.c), with the writer's
 * pid and the address of its data in its own address space, which every
 * role publishes in its region. */
int shmtopo_floor_copy(void *mine, void *peer, int role, size_t bytes, long rounds,
                       int peer_pid, double timeout, double *secondsp);

/* memcpy of `bytes` this core has just written (in its cache as far as they
 * fit), or with dram set, of bytes flushed from every cache level first
 * (ENOTSUP where this architecture cannot flush from user space). */
int shmtopo_floor_copy_local(size_t bytes, int dram, long rounds, double *secondsp);

/* The collectives' own reduction kernel (dst = a op b, reduce.c) over
 * `bytes` of each of two arrays of element type `dtype` that lie in cache. */
int shmtopo_floor_reduce(int dtype, int op, size_t bytes, long rounds, double *secondsp);

/* Seconds one reading of the clock the probes use costs (the median). */
double shmtopo_floor_clock_cost(void);

/* The CPU this thread runs on now (-1 if unknown). */
int shmtopo_floor_cpu(void);

/* CDEF END */

#ifdef __cplusplus
}
#endif
#endif /* SHMTOPO_FLOOR_H */
