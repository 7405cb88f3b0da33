/* shmtopo: node-local shared-memory windows, fences and a shared hwloc topology.
 *
 * Conventions: every function returns 0 (or a count) on success and -1 with
 * errno set on failure; shmtopo_last_error() then holds a message for this
 * thread. Collective functions must be called by every rank of the comm in the
 * same order. Nothing here depends on MPI: ranks talk through the out-of-band
 * callbacks given at comm creation.
 *
 * build_ffi.py feeds the part between the CDEF markers to cffi, so that part
 * holds plain declarations only (no macros, no includes).
 */
#ifndef SHMTOPO_H
#define SHMTOPO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* CDEF BEGIN */

/* ---- errors ---------------------------------------------------------- */

/* Message describing the last failure of a shmtopo call in this thread. */
const char *shmtopo_last_error(void);
/* Rank the last failure was about (a dead or mismatching peer), or -1. */
int shmtopo_last_error_rank(void);

/* ---- communicators ---------------------------------------------------- */

typedef struct shmtopo_comm shmtopo_comm_t;

/* Out-of-band transport. allgather: every rank contributes nbytes from
 * sendbuf; recvbuf receives size*nbytes bytes in rank order. barrier: all
 * ranks arrive before any leaves. Both return 0, or nonzero on failure
 * (then the shmtopo call fails with ECOMM). */
typedef int (*shmtopo_allgather_fn)(const void *sendbuf, void *recvbuf,
                                    size_t nbytes, void *group);
typedef int (*shmtopo_barrier_fn)(void *group);

typedef struct shmtopo_oob {
    shmtopo_allgather_fn allgather;
    shmtopo_barrier_fn barrier;
    void *group;
} shmtopo_oob_t;

/* Collective: build a comm of `size` ranks on this node. Exchanges pids and
 * CPU affinity masks. EINVAL: bad size/rank, or ranks that disagree on size
 * or sit on different hosts; ECOMM: a callback failed. */
int shmtopo_comm_create(int size, int rank, const shmtopo_oob_t *oob,
                        shmtopo_comm_t **commp);
/* Collective: a barrier through the out-of-band callback, then free. */
int shmtopo_comm_destroy(shmtopo_comm_t *comm);
/* Local: free without the barrier, after an error on this rank (abandon the
 * comm's windows first). */
int shmtopo_comm_abandon(shmtopo_comm_t *comm);
int shmtopo_comm_rank(const shmtopo_comm_t *comm);
int shmtopo_comm_size(const shmtopo_comm_t *comm);
/* Process id of a rank; -1/EINVAL for a rank out of range. */
int shmtopo_comm_pid(const shmtopo_comm_t *comm, int rank);
/* CPUs in the union of all ranks' affinity masks. */
int shmtopo_comm_ncpus(const shmtopo_comm_t *comm);
/* 1 when ranks outnumber those CPUs (waits then spin only briefly). */
int shmtopo_comm_oversubscribed(const shmtopo_comm_t *comm);
/* Collective: exchange nbytes per rank through the comm's callbacks. */
int shmtopo_comm_allgather(shmtopo_comm_t *comm, const void *sendbuf,
                           void *recvbuf, size_t nbytes);

/* ---- windows ---------------------------------------------------------- */

typedef struct shmtopo_win shmtopo_win_t;

enum shmtopo_backend {
    SHMTOPO_BACKEND_DEFAULT = 0, /* SHMTOPO_SHM_TYPE, else posix */
    SHMTOPO_BACKEND_POSIX = 1,   /* shm_open, unlinked once all have mapped */
    SHMTOPO_BACKEND_MEMFD = 2,   /* memfd_create, peers open /proc/pid/fd/N */
    SHMTOPO_BACKEND_SYSV = 3,    /* shmget, marked for removal at once */
    SHMTOPO_BACKEND_XPMEM = 4    /* needs /dev/xpmem */
};

enum shmtopo_fence_alg {
    SHMTOPO_FENCE_DEFAULT = 0,   /* SHMTOPO_FENCE_ALGORITHM, else auto */
    SHMTOPO_FENCE_AUTO = 1,
    SHMTOPO_FENCE_LINEAR = 2,    /* gather at rank 0, release from rank 0 */
    SHMTOPO_FENCE_RD = 3,        /* recursive doubling, folded for non-pof2 */
    SHMTOPO_FENCE_DISSEMINATION = 4
};

typedef struct shmtopo_win_attr {
    int backend;        /* enum shmtopo_backend */
    int fence_alg;      /* enum shmtopo_fence_alg */
    int contiguous;     /* nonzero: all ranks' parts back to back in one segment */
    double timeout;     /* seconds a wait may last; <= 0: SHMTOPO_TIMEOUT or forever */
    int symmetric;      /* nonzero: every part at the same virtual address in every
                           rank (pointers into the window are valid everywhere);
                           EBUSY/ENOMEM when no common address range holds */
    const char *invalid; /* non-NULL: the caller found a bad argument on this
                            rank; the call fails on every rank with EINVAL and
                            this message instead of leaving the others waiting */
} shmtopo_win_attr_t;

/* Collective: allocate a window; this rank's part has `size` bytes (sizes may
 * differ, 0 allowed), zero-filled, memory reserved up front (ENOSPC/ENOMEM
 * here, never SIGBUS later). attr may be NULL. *basep: this rank's part.
 * Errors: EINVAL (bad attr, ranks disagree on backend/algorithm/layout),
 * ENODEV (backend unavailable here), ENOSPC/ENOMEM, ECOMM. */
int shmtopo_win_alloc(shmtopo_comm_t *comm, size_t size,
                      const shmtopo_win_attr_t *attr, void **basep,
                      shmtopo_win_t **winp);
/* Address and size of a rank's part, as mapped in this process. */
int shmtopo_win_query(const shmtopo_win_t *win, int rank, void **addrp,
                      size_t *sizep);
/* Collective: every store made before the fence by any rank is visible to
 * every rank after it. ETIMEDOUT; EOWNERDEAD when a peer process died
 * (shmtopo_last_error_rank names it); ECONNABORTED when a peer abandoned
 * the window; EBADF for a NULL window; EPIPE after an earlier failed wait. */
int shmtopo_win_fence(shmtopo_win_t *win);
/* Pairwise fence: this rank and `peer` both call it naming each other.
 * EINVAL for peer == self or out of range. */
int shmtopo_win_peer_fence(shmtopo_win_t *win, int peer);
/* Fence `count` times in a row (benchmarks: no per-call overhead). */
int shmtopo_win_fence_loop(shmtopo_win_t *win, long count);
int shmtopo_win_peer_fence_loop(shmtopo_win_t *win, int peer, long count);
/* Algorithm and backend actually in use (after DEFAULT/AUTO resolution). */
int shmtopo_win_fence_alg(const shmtopo_win_t *win);
int shmtopo_win_backend(const shmtopo_win_t *win);
int shmtopo_win_set_timeout(shmtopo_win_t *win, double seconds);
/* Mappings this process holds for the window (one per segment). */
int shmtopo_win_nmappings(const shmtopo_win_t *win);
int shmtopo_win_mapping(const shmtopo_win_t *win, int index, void **addrp,
                        size_t *lengthp);
/* Hand the mappings over to the caller: shmtopo_win_free then leaves them
 * mapped and the caller unmaps each with shmtopo_unmap (so views that
 * outlive the window never point at unmapped memory). */
int shmtopo_win_disown_mappings(shmtopo_win_t *win);
int shmtopo_unmap(void *addr, size_t length);
/* Collective: fence, then unmap and free. */
int shmtopo_win_free(shmtopo_win_t *win);
/* Local: leave the window after an error on this rank, without waiting for
 * anyone. Peers waiting on it fail with ECONNABORTED instead of hanging. */
int shmtopo_win_abandon(shmtopo_win_t *win);
/* The same, leaving because of rank `origin` (which died or abandoned
 * first): peers' errors then name that rank, the root cause. */
int shmtopo_win_abandon_because(shmtopo_win_t *win, int origin);

/* ---- collectives -------------------------------------------------------- */

/* Element types and reduction operations of the window collectives. */
enum shmtopo_dtype {
    SHMTOPO_INT8 = 0, SHMTOPO_INT16 = 1, SHMTOPO_INT32 = 2, SHMTOPO_INT64 = 3,
    SHMTOPO_UINT8 = 4, SHMTOPO_UINT16 = 5, SHMTOPO_UINT32 = 6, SHMTOPO_UINT64 = 7,
    SHMTOPO_FLOAT32 = 8, SHMTOPO_FLOAT64 = 9
};

enum shmtopo_op {
    SHMTOPO_OP_SUM = 0, SHMTOPO_OP_PROD = 1, SHMTOPO_OP_MIN = 2, SHMTOPO_OP_MAX = 3,
    SHMTOPO_OP_BAND = 4, SHMTOPO_OP_BOR = 5, SHMTOPO_OP_BXOR = 6
};

enum shmtopo_coll_alg {
    SHMTOPO_COLL_AUTO = 0,  /* by size (SHMTOPO_COLL_ALGORITHM overrides) */
    SHMTOPO_COLL_FLAT = 1,  /* publish, one sync, every rank reads all inputs */
    SHMTOPO_COLL_RSAG = 2   /* per chunk: each rank reduces its slice, then all copy */
};

/* All collectives are collective over the comm, in the same order on every
 * rank. They go through per-comm scratch buffers (made by the first call,
 * SHMTOPO_COLL_BUFFER bytes per buffer, two per rank) in chunks, so any size
 * works; send == recv is allowed (in place). Counts are in elements.
 * EINVAL on every rank when ranks pass different counts, types, operations
 * or roots (checked in the flag words); EOWNERDEAD/ETIMEDOUT as for fences. */
int shmtopo_barrier(shmtopo_comm_t *comm);
int shmtopo_bcast(shmtopo_comm_t *comm, void *buf, size_t count, int dtype, int root);
int shmtopo_reduce(shmtopo_comm_t *comm, const void *send, void *recv, size_t count,
                   int dtype, int op, int root, int alg);
int shmtopo_allreduce(shmtopo_comm_t *comm, const void *send, void *recv, size_t count,
                      int dtype, int op, int alg);
/* recv: size * count elements, rank r's block at r * count. */
int shmtopo_allgather(shmtopo_comm_t *comm, const void *send, void *recv, size_t count,
                      int dtype);
/* send: size * count elements; recv: count, the reduction of block `rank`. */
int shmtopo_reduce_scatter(shmtopo_comm_t *comm, const void *send, void *recv, size_t count,
                           int dtype, int op);
/* send, recv: size * count elements; block p of recv is block `rank` of p's send. */
int shmtopo_alltoall(shmtopo_comm_t *comm, const void *send, void *recv, size_t count,
                     int dtype);
/* Zero-copy variants: every rank's input lies at byte `offset` of its own
 * part of `win` (a window of the comm), where peers read it directly.
 * win_reduce with root < 0 is an allreduce; its result may be the input
 * itself (in place, then every rank reduces its slice where it lies).
 * win_bcast copies the root's part straight into `buf`; when every `buf` is
 * the rank's own part at that offset, all ranks share the copying.
 * win_allgather copies every rank's part into `recv` (size * count elements).
 * All ranks must take the window path together, at the same offset, and a
 * result must not overlap another rank's input (else EINVAL on all). */
int shmtopo_win_reduce(shmtopo_win_t *win, size_t offset, void *recv, size_t count, int dtype,
                       int op, int root, int alg);
int shmtopo_win_bcast(shmtopo_win_t *win, size_t offset, void *buf, size_t count, int dtype,
                      int root);
int shmtopo_win_allgather(shmtopo_win_t *win, size_t offset, void *recv, size_t count, int dtype);

/* Persistent collectives (as MPI_Allreduce_init): check and record the
 * arguments once (local, no communication); each request_start then runs
 * the collective on them (collective, complete on return); request_wait
 * returns at once; request_free releases the record (local). */
typedef struct shmtopo_request shmtopo_request_t;
int shmtopo_allreduce_init(shmtopo_comm_t *comm, const void *send, void *recv, size_t count,
                           int dtype, int op, int alg, shmtopo_request_t **reqp);
int shmtopo_bcast_init(shmtopo_comm_t *comm, void *buf, size_t count, int dtype, int root,
                       shmtopo_request_t **reqp);
int shmtopo_alltoall_init(shmtopo_comm_t *comm, const void *send, void *recv, size_t count,
                          int dtype, shmtopo_request_t **reqp);
int shmtopo_request_start(shmtopo_request_t *req);
int shmtopo_request_wait(shmtopo_request_t *req);
int shmtopo_request_free(shmtopo_request_t *req);

/* dst[i] = dst[i] op src[i] (the kernel the collectives use). */
int shmtopo_reduce_local(void *dst, const void *src, size_t count, int dtype, int op);
size_t shmtopo_dtype_size(int dtype);

/* ---- configuration ---------------------------------------------------- */

/* Parse a backend / fence algorithm name ("posix", "rd", ...; also the KUPL
 * numbers "1"/"2" for algorithms). EINVAL for an unknown name. */
int shmtopo_backend_from_name(const char *name, int *backendp);
int shmtopo_fence_alg_from_name(const char *name, int *algp);
const char *shmtopo_backend_name(int backend);
const char *shmtopo_fence_alg_name(int alg);
/* 0 when the backend can be used on this machine, else -1 with the reason. */
int shmtopo_backend_probe(int backend);
/* The backend / algorithm the environment selects (EINVAL if it names an
 * unknown one). */
int shmtopo_default_backend(int *backendp);
int shmtopo_default_fence_alg(int *algp);
/* Unlink the /dev/shm names of posix segments whose creator process no
 * longer exists (left by a kill during allocation); returns how many. Run
 * by comm_create and when a wait finds a dead peer. */
int shmtopo_sweep_stale_segments(void);
/* CPUs in this process's affinity mask. */
int shmtopo_affinity_ncpus(void);

/* CDEF END */

#ifdef __cplusplus
}
#endif
#endif /* SHMTOPO_H */
