/* Template of the KUPL / KPCCL shared-memory API, implemented by shmtopo.
 *
 * Not meant to be included directly: kupl.h and kpccl.h include it with two
 * macros that paste their prefix onto every name,
 *   SHMTOPO_COMPAT_NAME(x)  -> kupl_x  / kpccl_x   (functions and types)
 *   SHMTOPO_COMPAT_CONST(x) -> KUPL_x  / KPCCL_x   (constants)
 * so both spellings come from this one declaration list. There is no include
 * guard here; the prefix headers have theirs.
 *
 * Every function returns <PREFIX>_OK (0) or <PREFIX>_ERROR (-1); on an error
 * the reason is printed to stderr. Functions marked collective must be called
 * by every rank of the comm, in the same order.
 */
#if !defined(SHMTOPO_COMPAT_NAME) || !defined(SHMTOPO_COMPAT_CONST)
#error "include kupl.h or kpccl.h, not shmtopo_shm_compat.h"
#endif

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

struct shmtopo_comm; /* the native core's objects, see shmtopo.h */
struct shmtopo_win;

enum {
    SHMTOPO_COMPAT_CONST(OK) = 0,
    SHMTOPO_COMPAT_CONST(ERROR) = -1
};

/* Element type of an out-of-band allgather. shmtopo always exchanges bytes,
 * so the library itself only ever passes ..._SHM_DATATYPE_CHAR. */
typedef enum {
    SHMTOPO_COMPAT_CONST(SHM_DATATYPE_CHAR) = 0,
    SHMTOPO_COMPAT_CONST(SHM_DATATYPE_INT) = 1,
    SHMTOPO_COMPAT_CONST(SHM_DATATYPE_LONG) = 2,
    SHMTOPO_COMPAT_CONST(SHM_DATATYPE_FLOAT) = 3,
    SHMTOPO_COMPAT_CONST(SHM_DATATYPE_DOUBLE) = 4
} SHMTOPO_COMPAT_NAME(shm_datatype_t);

/* Reduction operation of allreduce_init. MAX, MIN and SUM are the original's
 * (which implements SUM only); PROD and the bitwise ones (integer types only)
 * are shmtopo's additions. */
typedef enum {
    SHMTOPO_COMPAT_CONST(SHM_REDUCE_OP_MAX) = 0,
    SHMTOPO_COMPAT_CONST(SHM_REDUCE_OP_MIN) = 1,
    SHMTOPO_COMPAT_CONST(SHM_REDUCE_OP_SUM) = 2,
    SHMTOPO_COMPAT_CONST(SHM_REDUCE_OP_PROD) = 3,
    SHMTOPO_COMPAT_CONST(SHM_REDUCE_OP_BAND) = 4,
    SHMTOPO_COMPAT_CONST(SHM_REDUCE_OP_BOR) = 5,
    SHMTOPO_COMPAT_CONST(SHM_REDUCE_OP_BXOR) = 6
} SHMTOPO_COMPAT_NAME(shm_reduce_op_t);

/* Out-of-band transport supplied by the program (MPI in practice).
 * oob_allgather: every rank contributes `size` elements of `datatype` from
 * sendbuf; recvbuf receives them from all ranks in rank order.
 * oob_barrier: all ranks arrive before any leaves. Both return 0 on success;
 * anything else makes the library call that used them fail on every rank. */
typedef struct SHMTOPO_COMPAT_NAME(shm_oob_cb) {
    int (*oob_allgather)(const void *sendbuf, void *recvbuf, int size, void *group,
                         SHMTOPO_COMPAT_NAME(shm_datatype_t) datatype);
    int (*oob_barrier)(void *group);
} SHMTOPO_COMPAT_NAME(shm_oob_cb_t), *SHMTOPO_COMPAT_NAME(shm_oob_cb_h);

/* A node-local communicator. Programs may read rank and size; the rest
 * belongs to the library. */
typedef struct SHMTOPO_COMPAT_NAME(shm_comm) {
    int rank;
    int size;
    int backend;                               /* from <PREFIX>_SHM_TYPE */
    int fence_alg;                             /* from <PREFIX>_SHM_FENCE_ALGORITHM */
    SHMTOPO_COMPAT_NAME(shm_oob_cb_t) oob;     /* the program's callbacks ... */
    void *group;                               /* ... and their group argument */
    struct shmtopo_comm *impl;
} *SHMTOPO_COMPAT_NAME(shm_comm_h);

/* A window: one segment per rank. Programs may read rank and size. */
typedef struct SHMTOPO_COMPAT_NAME(shm_win) {
    int rank;
    int size;
    void *baseptr;                             /* this rank's segment */
    size_t bytes;                              /* its size */
    SHMTOPO_COMPAT_NAME(shm_comm_h) comm;
    struct shmtopo_win *impl;
} *SHMTOPO_COMPAT_NAME(shm_win_h);

/* A persistent collective made by one of the *_init calls; opaque. */
typedef struct SHMTOPO_COMPAT_NAME(shm_request) *SHMTOPO_COMPAT_NAME(shm_request_h);

/* Collective: create a comm of `size` ranks on this node, reached through
 * oob_cbs with `group` as their group argument. `pid` is accepted for
 * compatibility and not used: the library exchanges getpid() itself. */
int SHMTOPO_COMPAT_NAME(shm_comm_create)(int size, int rank, int pid,
                                         SHMTOPO_COMPAT_NAME(shm_oob_cb_h) oob_cbs, void *group,
                                         SHMTOPO_COMPAT_NAME(shm_comm_h) *comm);
/* Collective: an out-of-band barrier, then free. Free the comm's windows first. */
int SHMTOPO_COMPAT_NAME(shm_comm_destroy)(SHMTOPO_COMPAT_NAME(shm_comm_h) comm);
/* This process's rank / the number of ranks, through *rank / *size. */
int SHMTOPO_COMPAT_NAME(shm_comm_rank)(SHMTOPO_COMPAT_NAME(shm_comm_h) comm, int *rank);
int SHMTOPO_COMPAT_NAME(shm_comm_size)(SHMTOPO_COMPAT_NAME(shm_comm_h) comm, int *size);

/* Collective: allocate a window whose part on this rank has `size` bytes
 * (zero-filled; sizes may differ between ranks). *baseptr: this rank's part. */
int SHMTOPO_COMPAT_NAME(shm_win_alloc)(size_t size, SHMTOPO_COMPAT_NAME(shm_comm_h) comm,
                                       void **baseptr, SHMTOPO_COMPAT_NAME(shm_win_h) *win);
/* Address of `rank`'s part in this process. */
int SHMTOPO_COMPAT_NAME(shm_win_query)(SHMTOPO_COMPAT_NAME(shm_win_h) win, int rank,
                                       void **baseptr);
/* Collective: fence, unmap, free. */
int SHMTOPO_COMPAT_NAME(shm_win_free)(SHMTOPO_COMPAT_NAME(shm_win_h) win);
/* Collective: stores made by any rank before the fence are visible to every
 * rank after it. */
int SHMTOPO_COMPAT_NAME(shm_fence)(SHMTOPO_COMPAT_NAME(shm_win_h) win);
/* Pairwise fence: this rank and remote_rank both call it naming each other. */
int SHMTOPO_COMPAT_NAME(shm_peer_fence)(SHMTOPO_COMPAT_NAME(shm_win_h) win, int remote_rank);

/* Persistent collectives. An *_init call checks and records its arguments
 * (local: no communication, and no need for the buffers to lie in a window);
 * every request_start then runs the collective on the buffers' current
 * contents (collective: all ranks start their matching requests in the same
 * order) and is complete on return; request_wait returns at once;
 * request_free releases the request (local; free requests before their comm).
 * Counts are in elements and may be 0; buffers may be NULL only then.
 * Ranks must agree on count, datatype, op and root, else start fails on all. */
/* recvbuf[i] = op over all ranks of sendbuf[i], on every rank
 * (sendbuf == recvbuf: in place). */
int SHMTOPO_COMPAT_NAME(shm_allreduce_init)(const void *sendbuf, void *recvbuf, int count,
                                            SHMTOPO_COMPAT_NAME(shm_datatype_t) datatype,
                                            SHMTOPO_COMPAT_NAME(shm_reduce_op_t) op,
                                            SHMTOPO_COMPAT_NAME(shm_comm_h) comm,
                                            SHMTOPO_COMPAT_NAME(shm_request_h) *request);
/* root's buffer is copied into every other rank's buffer. */
int SHMTOPO_COMPAT_NAME(shm_bcast_init)(void *buffer, int count,
                                        SHMTOPO_COMPAT_NAME(shm_datatype_t) datatype, int root,
                                        SHMTOPO_COMPAT_NAME(shm_comm_h) comm,
                                        SHMTOPO_COMPAT_NAME(shm_request_h) *request);
/* sendbuf and recvbuf hold size * count elements; block p of recvbuf is block
 * `rank` of p's sendbuf. sendcount must equal recvcount and sendtype recvtype. */
int SHMTOPO_COMPAT_NAME(shm_alltoall_init)(const void *sendbuf, int sendcount,
                                           SHMTOPO_COMPAT_NAME(shm_datatype_t) sendtype,
                                           void *recvbuf, int recvcount,
                                           SHMTOPO_COMPAT_NAME(shm_datatype_t) recvtype,
                                           SHMTOPO_COMPAT_NAME(shm_comm_h) comm,
                                           SHMTOPO_COMPAT_NAME(shm_request_h) *request);
int SHMTOPO_COMPAT_NAME(shm_request_start)(SHMTOPO_COMPAT_NAME(shm_request_h) request);
int SHMTOPO_COMPAT_NAME(shm_request_wait)(SHMTOPO_COMPAT_NAME(shm_request_h) request);
int SHMTOPO_COMPAT_NAME(shm_request_free)(SHMTOPO_COMPAT_NAME(shm_request_h) request);

#ifdef __cplusplus
}
#endif
