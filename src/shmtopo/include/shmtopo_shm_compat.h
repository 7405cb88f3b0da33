/* Template of the KUPL / KPCCL shared-memory API, implemented by shmtopo.
 *
 * Not meant to be included directly: kupl.h and kpccl.h include it with two
 * macros that paste their prefix onto every name,
 *   SHMTOPO_COMPAT_NAME(x)  -> kupl_x  / kpccl_x   (functions, types, tags)
 *   SHMTOPO_COMPAT_CONST(x) -> KUPL_x  / KPCCL_x   (constants)
 * so both spellings come from this one declaration list, named as in KUPL's
 * kupl.h (its shm part): enum tags, typedefs and callback types included.
 * <PREFIX>_OK / <PREFIX>_ERROR and <prefix>_export are macros of the prefix
 * headers. There is no include guard here; the prefix headers have theirs.
 *
 * Every int function returns <PREFIX>_OK (0) or <PREFIX>_ERROR (-1); on an
 * error the reason is printed to stderr. Functions marked collective must be
 * called by every rank of the comm, in the same order; a bad argument on one
 * rank fails such a call on every rank.
 */
#if !defined(SHMTOPO_COMPAT_NAME) || !defined(SHMTOPO_COMPAT_CONST)
#error "include kupl.h or kpccl.h, not shmtopo_shm_compat.h"
#endif

#include <stddef.h>
#include <stdint.h>

#ifndef SHMTOPO_COMPAT_EXPORT
#define SHMTOPO_COMPAT_EXPORT __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

struct shmtopo_comm; /* the native core's objects, see shmtopo.h */
struct shmtopo_win;

/* Element type of the collectives and of an out-of-band allgather. shmtopo
 * always exchanges bytes, so the library itself only passes ..._CHAR. */
typedef enum SHMTOPO_COMPAT_NAME(shm_datatype) {
    SHMTOPO_COMPAT_CONST(SHM_DATATYPE_CHAR) = 0,
    SHMTOPO_COMPAT_CONST(SHM_DATATYPE_INT) = 1,
    SHMTOPO_COMPAT_CONST(SHM_DATATYPE_LONG) = 2,
    SHMTOPO_COMPAT_CONST(SHM_DATATYPE_FLOAT) = 3,
    SHMTOPO_COMPAT_CONST(SHM_DATATYPE_DOUBLE) = 4
} SHMTOPO_COMPAT_NAME(shm_datatype_t);

/* Reduction operation of allreduce_init. MAX, MIN and SUM are the original's
 * (which implements SUM only); PROD and the bitwise ones (integer types only)
 * are shmtopo's additions. */
typedef enum SHMTOPO_COMPAT_NAME(shm_reduce_op) {
    SHMTOPO_COMPAT_CONST(SHM_REDUCE_OP_MAX) = 0,
    SHMTOPO_COMPAT_CONST(SHM_REDUCE_OP_MIN) = 1,
    SHMTOPO_COMPAT_CONST(SHM_REDUCE_OP_SUM) = 2,
    SHMTOPO_COMPAT_CONST(SHM_REDUCE_OP_PROD) = 3,
    SHMTOPO_COMPAT_CONST(SHM_REDUCE_OP_BAND) = 4,
    SHMTOPO_COMPAT_CONST(SHM_REDUCE_OP_BOR) = 5,
    SHMTOPO_COMPAT_CONST(SHM_REDUCE_OP_BXOR) = 6
} SHMTOPO_COMPAT_NAME(shm_reduce_op_t);

/* Settings of shm_info_set. */
typedef enum SHMTOPO_COMPAT_NAME(info_flag) {
    /* 1: later win_allocs lay all ranks' parts back to back; 0: one segment
     * per rank (the default) */
    SHMTOPO_COMPAT_CONST(SHM_INFO_IS_CONTIG) = 0
} SHMTOPO_COMPAT_NAME(info_flag_t);

/* Out-of-band transport supplied by the program (MPI in practice).
 * oob_allgather: every rank contributes `size` elements of `datatype` from
 * sendbuf; recvbuf receives them from all ranks in rank order.
 * oob_barrier: all ranks arrive before any leaves. Both return 0 on success;
 * anything else makes the library call that used them fail on every rank. */
typedef int (*SHMTOPO_COMPAT_NAME(shm_oob_allgather_cb_t))(const void *sendbuf, void *recvbuf,
                                                          int size, void *group,
                                                          SHMTOPO_COMPAT_NAME(shm_datatype_t) datatype);
typedef int (*SHMTOPO_COMPAT_NAME(shm_oob_barrier_cb_t))(void *group);

typedef struct SHMTOPO_COMPAT_NAME(shm_oob_cb) {
    SHMTOPO_COMPAT_NAME(shm_oob_allgather_cb_t) oob_allgather;
    SHMTOPO_COMPAT_NAME(shm_oob_barrier_cb_t) oob_barrier;
} SHMTOPO_COMPAT_NAME(shm_oob_cb_t), *SHMTOPO_COMPAT_NAME(shm_oob_cb_h);

struct SHMTOPO_COMPAT_NAME(shm_win);
struct SHMTOPO_COMPAT_NAME(shm_request);

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
    struct SHMTOPO_COMPAT_NAME(shm_win) *wins;         /* still allocated, newest first */
    struct SHMTOPO_COMPAT_NAME(shm_request) *requests; /* not yet freed */
} *SHMTOPO_COMPAT_NAME(shm_comm_h);

/* A window: one part per rank. Programs may read rank and size. */
typedef struct SHMTOPO_COMPAT_NAME(shm_win) {
    int rank;
    int size;
    void *baseptr;                             /* this rank's part */
    size_t bytes;                              /* its size */
    SHMTOPO_COMPAT_NAME(shm_comm_h) comm;
    struct shmtopo_win *impl;
    struct SHMTOPO_COMPAT_NAME(shm_win) *prev, *next; /* in comm->wins */
} *SHMTOPO_COMPAT_NAME(shm_win_h);

/* A persistent collective made by one of the *_init calls; opaque. */
typedef struct SHMTOPO_COMPAT_NAME(shm_request) *SHMTOPO_COMPAT_NAME(shm_request_h);

/* Another process's memory, for shm_attach. */
typedef struct SHMTOPO_COMPAT_NAME(shm_addr) {
    void *src_addr; /* an address in process src_pid */
    int src_pid;
    int dst_pid;    /* this process */
} SHMTOPO_COMPAT_NAME(shm_addr_t);

/* Collective: create a comm of `size` ranks on this node, reached through
 * oob_cbs with `group` as their group argument. `pid` is accepted for
 * compatibility and not used: the library exchanges getpid() itself. */
SHMTOPO_COMPAT_EXPORT int SHMTOPO_COMPAT_NAME(shm_comm_create)(int size, int rank, int pid,
                                                               SHMTOPO_COMPAT_NAME(shm_oob_cb_h) oob_cbs,
                                                               void *group,
                                                               SHMTOPO_COMPAT_NAME(shm_comm_h) *comm);
/* Collective: free the comm's requests and windows not freed yet (windows in
 * allocation order, each a collective free), then the comm. */
SHMTOPO_COMPAT_EXPORT int SHMTOPO_COMPAT_NAME(shm_comm_destroy)(SHMTOPO_COMPAT_NAME(shm_comm_h) comm);
/* This process's rank / the number of ranks, through *rank / *size. */
SHMTOPO_COMPAT_EXPORT int SHMTOPO_COMPAT_NAME(shm_comm_rank)(SHMTOPO_COMPAT_NAME(shm_comm_h) comm,
                                                             int *rank);
SHMTOPO_COMPAT_EXPORT int SHMTOPO_COMPAT_NAME(shm_comm_size)(SHMTOPO_COMPAT_NAME(shm_comm_h) comm,
                                                             int *size);

/* Local: a setting for later win_allocs of every comm of this process
 * (both prefixes share it). SHM_INFO_IS_CONTIG, value 0 or 1; any other flag
 * or value is an error. Ranks must agree on it, else win_alloc fails on all. */
SHMTOPO_COMPAT_EXPORT int SHMTOPO_COMPAT_NAME(shm_info_set)(SHMTOPO_COMPAT_NAME(info_flag_t) info_flag,
                                                            uint32_t value);

/* Collective: allocate a window whose part on this rank has `size` bytes
 * (zero-filled; sizes may differ between ranks). *baseptr: this rank's part.
 * Contiguous (SHM_INFO_IS_CONTIG 1): all parts in one segment, rank r's part
 * right after rank r-1's (at base0 + r * size when sizes are equal); only the
 * whole segment is rounded up to a page. */
SHMTOPO_COMPAT_EXPORT int SHMTOPO_COMPAT_NAME(shm_win_alloc)(size_t size,
                                                             SHMTOPO_COMPAT_NAME(shm_comm_h) comm,
                                                             void **baseptr,
                                                             SHMTOPO_COMPAT_NAME(shm_win_h) *win);
/* Address of `rank`'s part in this process. */
SHMTOPO_COMPAT_EXPORT int SHMTOPO_COMPAT_NAME(shm_win_query)(SHMTOPO_COMPAT_NAME(shm_win_h) win,
                                                             int rank, void **baseptr);
/* Collective: agree, unmap, free. */
SHMTOPO_COMPAT_EXPORT int SHMTOPO_COMPAT_NAME(shm_win_free)(SHMTOPO_COMPAT_NAME(shm_win_h) win);
/* Collective: stores made by any rank before the fence are visible to every
 * rank after it. */
SHMTOPO_COMPAT_EXPORT int SHMTOPO_COMPAT_NAME(shm_fence)(SHMTOPO_COMPAT_NAME(shm_win_h) win);
/* Pairwise fence: this rank and remote_rank both call it naming each other. */
SHMTOPO_COMPAT_EXPORT int SHMTOPO_COMPAT_NAME(shm_peer_fence)(SHMTOPO_COMPAT_NAME(shm_win_h) win,
                                                              int remote_rank);

/* Local: map `size` bytes at addr.src_addr of process addr.src_pid into this
 * process; returns where, or NULL (with the reason on stderr). Works when the
 * range lies in a part of a window of a comm of this process (a new mapping
 * of that segment), and, where /dev/xpmem and libxpmem exist, for any memory
 * of a rank of such a comm. The mapping stays valid after the window is
 * freed, until shm_detach(returned pointer). */
SHMTOPO_COMPAT_EXPORT void *SHMTOPO_COMPAT_NAME(shm_attach)(SHMTOPO_COMPAT_NAME(shm_addr_t) addr,
                                                            size_t size);
SHMTOPO_COMPAT_EXPORT void SHMTOPO_COMPAT_NAME(shm_detach)(void *ptr);

/* Persistent collectives. An *_init call checks and records its arguments
 * (no need for the buffers to lie in a window); every request_start then runs
 * the collective on the buffers' current contents (collective: all ranks
 * start their matching requests in the same order) and is complete on
 * return; request_wait returns at once; request_free releases the request
 * (local; comm_destroy frees those left). Counts are in elements and may be
 * 0; buffers may be NULL only then. Ranks must agree on count, datatype, op
 * and root, else the call fails on all. */
/* recvbuf[i] = op over all ranks of sendbuf[i], on every rank
 * (sendbuf == recvbuf: in place). */
SHMTOPO_COMPAT_EXPORT int SHMTOPO_COMPAT_NAME(shm_allreduce_init)(
    const void *sendbuf, void *recvbuf, int count, SHMTOPO_COMPAT_NAME(shm_datatype_t) datatype,
    SHMTOPO_COMPAT_NAME(shm_reduce_op_t) op, SHMTOPO_COMPAT_NAME(shm_comm_h) comm,
    SHMTOPO_COMPAT_NAME(shm_request_h) *request);
/* root's buffer is copied into every other rank's buffer. */
SHMTOPO_COMPAT_EXPORT int SHMTOPO_COMPAT_NAME(shm_bcast_init)(
    void *buffer, int count, SHMTOPO_COMPAT_NAME(shm_datatype_t) datatype, int root,
    SHMTOPO_COMPAT_NAME(shm_comm_h) comm, SHMTOPO_COMPAT_NAME(shm_request_h) *request);
/* sendbuf and recvbuf hold size * count elements; block p of recvbuf is block
 * `rank` of p's sendbuf. sendcount must equal recvcount and sendtype recvtype. */
SHMTOPO_COMPAT_EXPORT int SHMTOPO_COMPAT_NAME(shm_alltoall_init)(
    const void *sendbuf, int sendcount, SHMTOPO_COMPAT_NAME(shm_datatype_t) sendtype, void *recvbuf,
    int recvcount, SHMTOPO_COMPAT_NAME(shm_datatype_t) recvtype, SHMTOPO_COMPAT_NAME(shm_comm_h) comm,
    SHMTOPO_COMPAT_NAME(shm_request_h) *request);
SHMTOPO_COMPAT_EXPORT int SHMTOPO_COMPAT_NAME(shm_request_start)(SHMTOPO_COMPAT_NAME(shm_request_h) request);
SHMTOPO_COMPAT_EXPORT int SHMTOPO_COMPAT_NAME(shm_request_wait)(SHMTOPO_COMPAT_NAME(shm_request_h) request);
SHMTOPO_COMPAT_EXPORT int SHMTOPO_COMPAT_NAME(shm_request_free)(SHMTOPO_COMPAT_NAME(shm_request_h) request);

/* The kit's helpers. memcpy: copy count bytes (the ranges must not
 * overlap); NULL with count > 0 is an error. error: the kit's logging call,
 * printf-style: writes "<PREFIX> ERROR: <message>" and a newline to stderr
 * in one write (at most 1023 bytes). */
SHMTOPO_COMPAT_EXPORT int SHMTOPO_COMPAT_NAME(memcpy)(void *dst, const void *src, size_t count);
SHMTOPO_COMPAT_EXPORT void SHMTOPO_COMPAT_NAME(error)(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));

#ifdef __cplusplus
}
#endif
