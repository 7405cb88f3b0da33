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

#include <errno.h>
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
/* Rank the last failure was about (a dead or mismatching peer, the rank
 * with bad arguments), as a rank of the job (see shmtopo_comm_set_span), or
 * -1. */
int shmtopo_last_error_rank(void);

/* Waits call this every 20 ms; a nonzero return ends the wait with EINTR
 * (the binding runs its signal handlers there: Ctrl-C interrupts a wait).
 * The waiting rank then leaves the window or comm, as after any failed
 * wait, so its peers fail with ECONNABORTED instead of hanging. NULL: none. */
void shmtopo_set_interrupt_hook(int (*hook)(void));

/* For a binding that calls the core holding a lock its other threads need
 * (Python's GIL): what a call runs at its first wait that does not end
 * within its short inline spin, once (the binding drops its lock there and
 * records so in its own struct, which embeds this one), so calls whose
 * peers are already there never pay for dropping and retaking it. */
typedef struct shmtopo_release {
    void (*release)(struct shmtopo_release *self);
} shmtopo_release_t;

/* ---- communicators ---------------------------------------------------- */

typedef struct shmtopo_comm shmtopo_comm_t;

/* Out-of-band transport. allgather: every rank contributes nbytes from
 * sendbuf; recvbuf receives size*nbytes bytes in rank order. barrier: all
 * ranks arrive before any leaves. Both return 0, or nonzero on failure:
 * ETIMEDOUT when the transport gave up waiting (the shmtopo call then fails
 * with ETIMEDOUT), anything else for other failures (ECOMM). */
typedef int (*shmtopo_allgather_fn)(const void *sendbuf, void *recvbuf,
                                    size_t nbytes, void *group);
typedef int (*shmtopo_barrier_fn)(void *group);

typedef struct shmtopo_oob {
    shmtopo_allgather_fn allgather;
    shmtopo_barrier_fn barrier;
    void *group;
} shmtopo_oob_t;

/* An out-of-band transport over an MPI communicator, for a caller that finds
 * the MPI library at run time (the core links no MPI): the addresses of the
 * library's MPI_Iallgather, MPI_Ibarrier and MPI_Test, the values of the
 * communicator's and MPI_BYTE's handles, and the handles' width in bytes (4:
 * integers, as MPICH's; 8: pointers, as Open MPI's). An exchange copies its
 * data through buffers of its own and tests its request for a few tens of
 * microseconds; then it hands the request to slow_wait(request, group), which
 * completes it and returns 0, or returns nonzero to give up (the transport
 * fails with that value and abandons the request with its buffers: MPI may
 * still write there, so they are never freed or reused). */
typedef struct shmtopo_mpi_calls {
    void *iallgather;
    void *ibarrier;
    void *test;
    uint64_t comm;
    uint64_t byte;
    int handle_size;
    int status_size;
    int size;            /* ranks of the communicator */
    int (*slow_wait)(int64_t request, void *group);
    void *group;
} shmtopo_mpi_calls_t;
/* Local: fill *oob with a transport over `calls` (copied), or -1 (EINVAL: a
 * handle width or status size it cannot call with; ENOMEM).
 * shmtopo_mpi_oob_free releases what it holds (not an abandoned exchange's
 * buffers). */
int shmtopo_mpi_oob(const shmtopo_mpi_calls_t *calls, shmtopo_oob_t *oob);
void shmtopo_mpi_oob_free(shmtopo_oob_t *oob);

/* Collective: build a comm of `size` ranks on this node. The out-of-band
 * callbacks are used here only: ranks exchange pids, CPU affinity masks and
 * their environment settings (shmtopo_config_t), and map the comm's own
 * shared memory (its channel), through which every later agreement and
 * set-up exchange runs, under the timeout; then every rank probes single
 * copy against every peer and the ranks agree on it (shmtopo_comm_single_copy).
 * EINVAL: bad size/rank, ranks that disagree on size or a setting that must
 * agree, sit on different hosts, or an invalid environment variable on some
 * rank; ECOMM: a callback failed; ENOTSUP: SHMTOPO_SINGLE_COPY=1 and a rank
 * cannot copy from a peer (the message says which and why). */
int shmtopo_comm_create(int size, int rank, const shmtopo_oob_t *oob,
                        shmtopo_comm_t **commp);
/* Collective: agree that every rank frees *commp, then free it and set
 * *commp to NULL (a comm made unusable by a failed wait is freed locally).
 * -1 when the agreement failed: on a mismatch (a rank called something
 * else) the comm stays as it was and *commp keeps it; when the agreement
 * broke the comm it is freed anyway and *commp is NULL. */
int shmtopo_comm_destroy(shmtopo_comm_t **commp);
/* Collective over the ranks still running (ULFM's MPIX_Comm_shrink on one
 * node): after a rank died, or at any time, every survivor calls it and
 * gets a new comm (*newp) of the survivors, ranked in their old order, with
 * the old comm's timeout. The old comm is then unusable (EPIPE): its
 * windows and itself can only be freed (locally); ranks still waiting in
 * it fail instead of waiting for this one. The survivors wait for every
 * rank to call it, exit, or free the comm (under the timeout); a member
 * dying meanwhile is left out on every member. ENOTSUP across nodes (the
 * MPI communicator itself must shrink); EPIPE when called twice. */
int shmtopo_comm_shrink(shmtopo_comm_t *old, shmtopo_comm_t **newp);
/* Local: free without the agreement, after an error on this rank; peers
 * waiting on the comm fail with ECONNABORTED (abandon its windows first). */
int shmtopo_comm_abandon(shmtopo_comm_t *comm);
/* Local: this rank stops taking part (an exception left a call half done):
 * the comm becomes unusable here and peers waiting on it fail with
 * ECONNABORTED; free or abandon it afterwards. */
int shmtopo_comm_leave(shmtopo_comm_t *comm);
/* Local: drop this rank's side of the comm without waiting for the others,
 * as MPI_Comm_free does in practice (release its windows first, with
 * shmtopo_win_release). A clean departure, not an error: peers still
 * finishing an earlier call are not disturbed (their own mappings keep the
 * memory, which goes when the last rank has left), and their waits never
 * count this rank as dead once its process exits; only a peer waiting for
 * a step this rank never posts fails, with ECONNABORTED naming it. A comm
 * broken by an earlier failure is abandoned instead. */
int shmtopo_comm_release(shmtopo_comm_t *comm);
/* Local: as shmtopo_comm_release for the peers (a clean departure), but
 * this process keeps the comm, so that a later comm of the same ranks in
 * the same order can take it up (shmtopo_comm_unpark) instead of making its
 * shared memory anew. EBUSY where it cannot be kept (broken, shrunk or
 * shrinking, across nodes, running ahead): release it instead. */
int shmtopo_comm_park(shmtopo_comm_t *comm);
/* Collective: as shmtopo_comm_destroy, but where the comm can be kept
 * (shmtopo_comm_park) it is, once every rank agreed to free it: *commp
 * stays and *keptp is 1; else it goes as shmtopo_comm_destroy makes it go
 * and *keptp is 0. */
int shmtopo_comm_destroy_keeping(shmtopo_comm_t **commp, int *keptp);
/* Local, on a parked comm: 0 and the steps its channel has taken into
 * *stepp where this process could take it up now (the same process, the
 * settings that must agree and SHMTOPO_TOPO_DIR as they were when it was
 * made); else -1. Every member must see the same steps to take it up. */
int shmtopo_comm_parked_step(const shmtopo_comm_t *comm, uint64_t *stepp);
/* Local, on a parked comm that every member parked and agreed to take up
 * (each with the same steps): it is theirs again, with the environment's
 * timeout and waits as a new comm would have them. The caller's next
 * exchange among the members must come before its first call: until every
 * member has taken it back, peers still see this rank as departed. */
int shmtopo_comm_unpark(shmtopo_comm_t *comm);
/* Local: as shmtopo_comm_leave, because job rank `job_rank` died (on another
 * node, as this rank heard through MPI, or on this one): peers waiting on
 * the comm fail with EOWNERDEAD naming that rank, as if they had seen the
 * death themselves. */
int shmtopo_comm_leave_dead(shmtopo_comm_t *comm, int job_rank);
/* Local: the same, because job rank `job_rank` left the comm after an error
 * (abandoned it) on another node, as this rank heard through MPI: peers
 * waiting on the comm fail with ECONNABORTED naming that rank. */
int shmtopo_comm_leave_aborted(shmtopo_comm_t *comm, int job_rank);
/* Local: the job rank of a rank of this node whose process is gone, or -1
 * (the check a wait makes now and then; a few system calls per rank). */
int shmtopo_comm_dead_peer(const shmtopo_comm_t *comm);
/* Local, set up by every rank alike: the comm is one node of a job of
 * `world_size` ranks in `nnodes` nodes; world_ranks[r] is the job rank of
 * local rank r. Agreements then span all nodes: the node's rank 0 (the
 * leader, the only rank given `leaders`, an allgather over one leader per
 * node in node order) folds its node's verdict into that exchange, so a bad
 * argument anywhere fails the call everywhere. Messages name job ranks. */
int shmtopo_comm_set_span(shmtopo_comm_t *comm, int world_size, const int *world_ranks,
                          int nnodes, int node_index, const shmtopo_oob_t *leaders);
/* Seconds any wait of the comm (and of windows allocated later) may last;
 * 0: forever. Default: SHMTOPO_TIMEOUT. */
int shmtopo_comm_set_timeout(shmtopo_comm_t *comm, double seconds);
/* Local: how this rank's waits in the comm's calls spend their time before
 * they sleep on the awaited word: spin for spin_ns, then yield for
 * yield_ns (-1 keeps one as it is: SHMTOPO_SPIN_NS / SHMTOPO_YIELD_NS, else
 * chosen by oversubscription).
 * A thread that shares its core with the program's own work (a progress
 * thread) should not spin. */
int shmtopo_comm_set_waits(shmtopo_comm_t *comm, int64_t spin_ns, int64_t yield_ns);
double shmtopo_comm_timeout(const shmtopo_comm_t *comm);
/* 1 when a failed wait left the comm unusable (only free/abandon work). */
int shmtopo_comm_broken(const shmtopo_comm_t *comm);
/* A comm takes one thread at a time in its collectives, and each window in
 * its fences (MPI_THREAD_SERIALIZED per object). A caller whose threads may
 * share them claims the object around each call (a window's collectives
 * and its free: the comm and the window): -1 with EBUSY when another
 * thread holds it, instead of a free racing a wait. The holder's claims
 * nest; NULL (a freed handle) claims nothing, and the call itself then
 * says EBADF. */
int shmtopo_comm_claim(shmtopo_comm_t *comm);
void shmtopo_comm_unclaim(shmtopo_comm_t *comm);
/* A binding's nonblocking collectives: a queue of calls it keeps and runs
 * one at a time, in the order posted, on whichever of its threads gets to
 * them first. MPI orders a blocking call after the calls posted before it,
 * so the queue holds the comm between them, and the thread that runs one
 * while it runs: until the queue is empty, another claim fails with
 * EINPROGRESS (the binding runs the queue, then claims again).
 * shmtopo_comm_queue_hold: the queue holds the comm from now (also when it
 * held it already; -1/EBUSY while a thread is inside a call).
 * shmtopo_comm_queue_take: this thread takes it over to run the next call,
 * its waits spinning spin_ns, then yielding yield_ns (-1: as set) until
 * shmtopo_comm_queue_give hands it back: to the queue (`more` calls posted)
 * or to nobody. A give from another thread hands back what the queue holds. */
int shmtopo_comm_queue_hold(shmtopo_comm_t *comm);
int shmtopo_comm_queue_take(shmtopo_comm_t *comm, int64_t spin_ns, int64_t yield_ns);
void shmtopo_comm_queue_give(shmtopo_comm_t *comm, int more);
int shmtopo_comm_rank(const shmtopo_comm_t *comm);
int shmtopo_comm_size(const shmtopo_comm_t *comm);
/* Ranks in the job: the comm's size, or across nodes all nodes' (roots of
 * the collectives lie in [0, job size)). */
int shmtopo_comm_job_size(const shmtopo_comm_t *comm);
/* This rank's rank in the job (its rank in the comm where it spans no nodes). */
int shmtopo_comm_job_rank(const shmtopo_comm_t *comm);
/* Process id of a rank; -1/EINVAL for a rank out of range. */
int shmtopo_comm_pid(const shmtopo_comm_t *comm, int rank);
/* CPUs in the union of all ranks' affinity masks. */
int shmtopo_comm_ncpus(const shmtopo_comm_t *comm);
/* 1 when ranks outnumber those CPUs (waits then spin only briefly). */
int shmtopo_comm_oversubscribed(const shmtopo_comm_t *comm);

/* How collectives move large data between ranks' private arrays without the
 * scratch buffers: decided once at comm creation (every rank probes every
 * peer, then they agree; SHMTOPO_SINGLE_COPY), the same on every rank. */
enum shmtopo_single_copy {
    SHMTOPO_SC_NONE = 0,  /* off (SHMTOPO_SINGLE_COPY=0), or a rank could not reach a peer */
    SHMTOPO_SC_CMA = 1    /* process_vm_readv / process_vm_writev */
};
/* The comm's enum shmtopo_single_copy (a 1-rank comm: CMA unless disabled). */
int shmtopo_comm_single_copy(const shmtopo_comm_t *comm);
/* "cma", "none". */
const char *shmtopo_single_copy_name(int mechanism);

/* ---- agreement ----------------------------------------------------------- */

/* What a rank calls: the operation and every argument that must be the
 * same on all ranks. Fields an operation does not use are -1 (0 for
 * count/extra). Every collective operation starts with an agreement on it:
 * each rank posts its signature and whether its own arguments were valid,
 * and all ranks decide together, before any data moves. */
enum shmtopo_kind {
    SHMTOPO_KIND_BARRIER = 1, SHMTOPO_KIND_BCAST = 2, SHMTOPO_KIND_REDUCE = 3,
    SHMTOPO_KIND_ALLREDUCE = 4, SHMTOPO_KIND_ALLGATHER = 5, SHMTOPO_KIND_REDUCE_SCATTER = 6,
    SHMTOPO_KIND_ALLTOALL = 7, SHMTOPO_KIND_WIN_ALLOC = 8, SHMTOPO_KIND_WIN_FREE = 9,
    SHMTOPO_KIND_COMM_FREE = 10, SHMTOPO_KIND_TOPO_SHARE = 11, SHMTOPO_KIND_SPLIT = 12,
    SHMTOPO_KIND_COMM_CREATE = 13, SHMTOPO_KIND_BIND = 14, SHMTOPO_KIND_VERDICT = 15,
    SHMTOPO_KIND_GATHER = 16, SHMTOPO_KIND_SCATTER = 17, SHMTOPO_KIND_GATHERV = 18,
    SHMTOPO_KIND_SCATTERV = 19, SHMTOPO_KIND_ALLGATHERV = 20, SHMTOPO_KIND_ALLTOALLV = 21,
    SHMTOPO_KIND_SCAN = 22, SHMTOPO_KIND_EXSCAN = 23, SHMTOPO_KIND_ALLTOALLW = 24
};

typedef struct shmtopo_sig {
    int32_t kind;       /* enum shmtopo_kind */
    int32_t dtype, op;  /* enum shmtopo_dtype / shmtopo_op */
    int32_t root;       /* job rank */
    int32_t alg;        /* resolved algorithm (enum shmtopo_coll_alg, fence, source) */
    int32_t flags;      /* SHMTOPO_SIG_* path bits */
    uint64_t count;     /* elements */
    uint64_t extra;     /* window offset, option bits */
} shmtopo_sig_t;

enum shmtopo_sig_flags {
    SHMTOPO_SIG_WINDOW = 1,    /* data read in place in a window of the comm */
    SHMTOPO_SIG_IN_PLACE = 2,  /* the result replaces the input */
    SHMTOPO_SIG_INIT = 4,      /* making a persistent request for the call */
    SHMTOPO_SIG_SINGLE_COPY = 8, /* data copied straight between ranks' own arrays */
    SHMTOPO_SIG_OWN_COUNT = 16, /* count is this rank's own (v-variants): not compared,
                                   checked against the counts the call holds instead */
    SHMTOPO_SIG_COUNTS = 32,    /* extra is shmtopo_counts_digest of a counts array every
                                   rank passes (allgatherv, reduce_scatter with counts) */
    SHMTOPO_SIG_DELEGATED = 64, /* the caller hands the call to another library (shmtopo.accelerate's
                                   MPI path): described as such; kind, root and (extra) the op compared,
                                   other fields unused. Where other ranks would run the call here, the
                                   agreement fails every rank with SHMTOPO_EDELEGATED: all hand it over */
    SHMTOPO_SIG_RUN_AHEAD = 128 /* a small bcast or reduce that need not meet every rank
                                   (SHMTOPO_RUN_AHEAD=1): judged at a later step */
};

/* A delegated signature's extra: the reduction's op, as 1 + the core's op,
 * or this for an op the program made (MPI.Op.Create); 0: none, or unknown. */
#define SHMTOPO_SIG_USER_OP 0x10000

/* Collective: agree on a call before doing it by other means (the
 * across-nodes half of a collective): checks the signature (known kind,
 * element type and operation, root inside the job), then agrees. 0 when
 * every rank passed the same valid signature; else -1 with the same errno
 * (EINVAL) and message on every rank, naming the rank at fault. */
int shmtopo_agree_call(shmtopo_comm_t *comm, const shmtopo_sig_t *sig);
/* shmtopo_agree_call on the signature these fields make (a binding's
 * cheaper call: no struct to build). */
int shmtopo_agree_fields(shmtopo_comm_t *comm, int kind, uint64_t count, int dtype, int op, int root, int alg,
                         uint64_t extra, int flags);
/* Collective, over the job of a comm that spans nodes (the node's own calls
 * above stay on the node; on a comm that spans none these are those): a
 * barrier; a small allreduce, reduce or bcast at once (agreement, the node in
 * shared memory, one exchange between the node leaders); root is a job rank,
 * recv the root's only for a reduce. 1 when the call is not small enough
 * (then nothing was done: the caller moves it in parts), 0 when done, -1 as
 * for the node's own calls. */
int shmtopo_span_barrier(shmtopo_comm_t *comm);
int shmtopo_span_allreduce(shmtopo_comm_t *comm, const void *send, void *recv, size_t count, int dtype, int op,
                           int alg);
int shmtopo_span_reduce(shmtopo_comm_t *comm, const void *send, void *recv, size_t count, int dtype, int op,
                        int root, int alg);
int shmtopo_span_bcast(shmtopo_comm_t *comm, const void *send, void *recv, size_t count, int dtype, int root);
/* Collective: this rank could not even convert its arguments to `kind`
 * (reason says why): take part in that operation's agreement as invalid.
 * Always -1: EINVAL on every rank, with "rank R: reason". */
int shmtopo_reject(shmtopo_comm_t *comm, int kind, const char *reason);
/* A 64-bit digest of n counts, for a signature's extra word: ranks whose
 * counts arrays differ post different signatures. */
uint64_t shmtopo_counts_digest(const size_t *counts, size_t n);
/* The verdict on counts every rank of a call has seen (the v-variants; the
 * core calls these after the agreement's step, the across-nodes half after
 * gathering the same arrays), the same wherever it is computed; ranks are
 * job ranks 0..n-1. counts_verdict: rank r passed posted[r] elements where
 * the call's counts (the root's) give it table[r]. pairs_verdict (alltoallv):
 * rank r's sendcounts[p] is send[r * n + p], rank p's recvcounts[r] is
 * recv[p * n + r]; every pair must match. 0, or -1/EINVAL naming the rank at
 * fault (the first that differs; for pairs, the rank in most mismatched
 * pairs, the lowest of a tie). sig describes the call for the message. */
int shmtopo_counts_verdict(const shmtopo_sig_t *sig, const size_t *posted, const size_t *table, size_t n);
int shmtopo_pairs_verdict(const shmtopo_sig_t *sig, const size_t *send, const size_t *recv, size_t n);

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
    int placement;      /* enum shmtopo_placement */
    int huge_pages;     /* enum shmtopo_huge_pages */
    int bind_nodes;     /* nonzero: bind this rank's part to `nodes` (mbind); zero:
                           `nodes` is only reported (chosen on a topology of another
                           machine), the kernel places the pages */
    uint64_t nodes[16]; /* NUMA nodes (OS indices 0..1023) chosen for this rank's part
                           (local) or the window (interleave); all zero: the kernel's */
} shmtopo_win_attr_t;

/* Where each rank's pages go. Every rank populates (first touches) its own
 * part itself, in every layout, so by default they lie on the NUMA node the
 * owner runs on, not the allocating rank's. */
enum shmtopo_placement {
    SHMTOPO_PLACEMENT_DEFAULT = 0,    /* local */
    SHMTOPO_PLACEMENT_LOCAL = 1,      /* bound to `nodes` when that is one node, else first touch */
    SHMTOPO_PLACEMENT_INTERLEAVE = 2  /* pages spread over `nodes` (all zero: the nodes allowed) */
};

/* What a rank's part got (shmtopo_win_placement); never a failure of the allocation. */
enum shmtopo_placed {
    SHMTOPO_PLACED_FIRST_TOUCH = 0,   /* the owner touched its pages, the kernel chose (one node,
                                         or no single node to bind to) */
    SHMTOPO_PLACED_BOUND = 1,         /* mbind to the chosen nodes, then touched by the owner */
    SHMTOPO_PLACED_MODELLED = 2,      /* nodes chosen on another machine's topology, not bound */
    SHMTOPO_PLACED_UNSUPPORTED = 3    /* the kernel refused mbind (errno kept), first touch */
};

/* Huge pages: OFF (default); AUTO takes the best available (explicit
 * hugetlb pages for memfd segments when the pool holds the node's whole
 * window, else transparent huge pages where shmem_enabled or /dev/shm's
 * huge= mount option let madvise ask for them, else normal pages) and
 * reports it; REQUIRED fails the allocation on every rank (ENOMEM) when
 * neither kind is available. A default backend becomes memfd when huge
 * pages are asked for (named /dev/shm files cannot hold hugetlb pages). */
enum shmtopo_huge_pages {
    SHMTOPO_HUGE_OFF = 0, SHMTOPO_HUGE_AUTO = 1, SHMTOPO_HUGE_REQUIRED = 2
};
/* What a window's segments got (shmtopo_win_huge_pages). */
enum shmtopo_huge_kind {
    SHMTOPO_HUGE_NONE = 0,       /* normal pages */
    SHMTOPO_HUGE_HUGETLB = 1,    /* MFD_HUGETLB, pages of shmtopo_win_huge_pages' *sizep */
    SHMTOPO_HUGE_TRANSPARENT = 2 /* madvise(MADV_HUGEPAGE): the kernel may use huge pages */
};

typedef struct shmtopo_win_place {
    int placed;         /* enum shmtopo_placed */
    int err;            /* errno of a refused mbind */
    int allowed;        /* NUMA nodes the owner may allocate on (its mems_allowed) */
    int pad;
    uint64_t nodes[16]; /* the nodes chosen for the rank's part: as given, or for
                           interleave without any, those it may allocate on */
} shmtopo_win_place_t;

/* Collective: allocate a window; this rank's part has `size` bytes (sizes may
 * differ, 0 allowed), zero-filled, memory reserved up front (ENOSPC/ENOMEM
 * here, never SIGBUS later) by the rank that owns it (placed as attr says,
 * then first touched). Before reserving, the node's total is checked
 * against the memory available (MemAvailable, the cgroup's limit, or the
 * free hugetlb pool) and the file system's free space: ENOMEM on every rank
 * when it cannot fit, or when huge pages are required and none exist. attr
 * may be NULL. *basep: this rank's part. Errors, on every rank alike:
 * EINVAL (bad attr, ranks disagree on backend/algorithm/layout), ENODEV
 * (backend unavailable here), ENOSPC/ENOMEM; ETIMEDOUT, EOWNERDEAD as for
 * fences. */
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
/* How rank's part was placed (placement as resolved: enum shmtopo_placement). */
int shmtopo_win_placement(const shmtopo_win_t *win, int rank, int *placementp,
                          shmtopo_win_place_t *placep);
/* enum shmtopo_huge_kind the window's segments got, and their page size. */
int shmtopo_win_huge_pages(const shmtopo_win_t *win, size_t *page_sizep);
/* Algorithm and backend actually in use (after DEFAULT/AUTO resolution). */
int shmtopo_win_fence_alg(const shmtopo_win_t *win);
int shmtopo_win_backend(const shmtopo_win_t *win);
/* As shmtopo_comm_claim, for the window's fences: the comm's collectives
 * and each of its windows' fences may each have a thread of their own. */
int shmtopo_win_claim(shmtopo_win_t *win);
void shmtopo_win_unclaim(shmtopo_win_t *win);

/* One call of a binding: claim the comm and the window (either may be NULL)
 * as shmtopo_comm_claim and shmtopo_win_claim do, and arm `release` (may be
 * NULL) for this thread's calls on them until shmtopo_call_end, which
 * disarms it and drops both claims. The hook is held by the claim, not by
 * a thread-local: a shared library's thread-locals cost a __tls_get_addr
 * call each, on the path of every small call. 0, or -1 (EBUSY, nothing
 * held). */
int shmtopo_call_begin(shmtopo_comm_t *comm, shmtopo_win_t *win, shmtopo_release_t *release);
void shmtopo_call_end(shmtopo_comm_t *comm, shmtopo_win_t *win);
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
/* Collective: agree that every rank frees this window, then unmap and free
 * (a broken window, or one of a broken comm, is freed locally). -1 when the
 * agreement failed: on a mismatch the window stays as it was (the comm is
 * not broken); after a failed wait it is freed anyway. */
int shmtopo_win_free(shmtopo_win_t *win);
/* Local: leave the window after an error on this rank, without waiting for
 * anyone. Peers waiting on it fail with ECONNABORTED instead of hanging. */
int shmtopo_win_abandon(shmtopo_win_t *win);
/* The same, leaving because of rank `origin` (which died or abandoned
 * first): peers' errors then name that rank, the root cause. */
int shmtopo_win_abandon_because(shmtopo_win_t *win, int origin);
/* Local: this rank stops taking part in the window (its process is about to
 * exit with the window open): peers waiting on it fail with ECONNABORTED
 * naming this rank, at once. The memory stays mapped until the window is
 * freed or abandoned. */
int shmtopo_win_depart(shmtopo_win_t *win);
/* Local: as shmtopo_comm_release, for a window: this rank's side goes
 * without an agreement, as a clean departure (a broken window: as
 * shmtopo_win_abandon). */
int shmtopo_win_release(shmtopo_win_t *win);

/* ---- collectives -------------------------------------------------------- */

/* Element types and reduction operations of the window collectives.
 * FLOAT16 and BFLOAT16 (IEEE half, and the upper half of a float32) reduce
 * in float32 over all ranks and round once, to nearest even, at the end;
 * COMPLEX64/128 are (real, imaginary) pairs of FLOAT32/64; the pair types
 * are the structs below, laid out as MPI's MPI_FLOAT_INT, MPI_DOUBLE_INT,
 * MPI_LONG_INT, MPI_2INT and MPI_SHORT_INT. Which type takes which op:
 * integers all of sum..lxor; floats sum, prod, min, max; bool land, lor,
 * lxor and band, bor, bxor (the same, on 0/1); complex sum, prod; pairs
 * maxloc, minloc. */
enum shmtopo_dtype {
    SHMTOPO_INT8 = 0, SHMTOPO_INT16 = 1, SHMTOPO_INT32 = 2, SHMTOPO_INT64 = 3,
    SHMTOPO_UINT8 = 4, SHMTOPO_UINT16 = 5, SHMTOPO_UINT32 = 6, SHMTOPO_UINT64 = 7,
    SHMTOPO_FLOAT32 = 8, SHMTOPO_FLOAT64 = 9,
    SHMTOPO_BOOL = 10, SHMTOPO_COMPLEX64 = 11, SHMTOPO_COMPLEX128 = 12,
    SHMTOPO_FLOAT16 = 13, SHMTOPO_BFLOAT16 = 14,
    SHMTOPO_FLOAT_INT = 15, SHMTOPO_DOUBLE_INT = 16, SHMTOPO_LONG_INT = 17, SHMTOPO_2INT = 18,
    SHMTOPO_SHORT_INT = 19,
    SHMTOPO_NDTYPES = 20  /* how many there are */
};

/* LAND, LOR, LXOR: 1 or 0 of the element type (MPI's). MAXLOC/MINLOC: the
 * pair with the larger/smaller value, on equal values the smaller index. */
enum shmtopo_op {
    SHMTOPO_OP_SUM = 0, SHMTOPO_OP_PROD = 1, SHMTOPO_OP_MIN = 2, SHMTOPO_OP_MAX = 3,
    SHMTOPO_OP_BAND = 4, SHMTOPO_OP_BOR = 5, SHMTOPO_OP_BXOR = 6,
    SHMTOPO_OP_LAND = 7, SHMTOPO_OP_LOR = 8, SHMTOPO_OP_LXOR = 9,
    SHMTOPO_OP_MAXLOC = 10, SHMTOPO_OP_MINLOC = 11,
    SHMTOPO_NOPS = 12  /* how many there are */
};

/* The (value, index) elements of maxloc and minloc. */
typedef struct shmtopo_float_int { float value; int index; } shmtopo_float_int_t;
typedef struct shmtopo_double_int { double value; int index; } shmtopo_double_int_t;
typedef struct shmtopo_long_int { long value; int index; } shmtopo_long_int_t;
typedef struct shmtopo_2int { int value; int index; } shmtopo_2int_t;
typedef struct shmtopo_short_int { short value; int index; } shmtopo_short_int_t;

enum shmtopo_coll_alg {
    SHMTOPO_COLL_AUTO = 0,  /* by size (SHMTOPO_COLL_ALGORITHM overrides) */
    SHMTOPO_COLL_FLAT = 1,  /* publish, one sync, every rank reads all inputs */
    SHMTOPO_COLL_RSAG = 2   /* per chunk: each rank reduces its slice, then all copy */
};

/* All collectives are collective over the comm, in the same order on every
 * rank. They go through the comm's scratch buffers (SHMTOPO_COLL_BUFFER
 * bytes per buffer, three per rank, made with the comm) in chunks, so any
 * size works; send == recv is allowed (in place), a partial overlap of send
 * and recv is not. Counts are in elements. The first step is the call's
 * agreement: EINVAL on every rank, naming the rank at fault, when one rank
 * passes a bad argument or ranks pass different counts, types, operations,
 * roots or algorithms; EOWNERDEAD/ETIMEDOUT/ECONNABORTED/EINTR as for
 * fences, after which the comm is unusable (EPIPE). */
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
/* Rooted and varying-count collectives (coll_v.c), through the scratch
 * buffers like the others, any size. root is a rank of the comm; counts and
 * displacements are in elements. gather: recv (size * count, root only) gets
 * rank r's block at r * count; send may be the root's own block of recv (in
 * place). scatter: send (root only) holds size blocks of count; recv may be
 * the root's own block of send (in place). gatherv / scatterv: counts and
 * displs (size each) matter on the root only, `count` is this rank's own
 * and must equal the root's counts[rank] (checked in the agreement, EINVAL
 * on every rank naming the rank). allgatherv: counts (the same on every
 * rank) and displs (this rank's layout of recv); send may be this rank's
 * block of recv. alltoallv: rank r's sendcounts[p] must equal rank p's
 * recvcounts[r]; send and recv must not overlap. reduce_scatterv: send holds
 * sum(counts) elements, recv gets counts[rank]: the reduction of everybody's
 * elements from sum(counts[:rank]); recv may be send (in place, the result at
 * its start). scan: recv = send of ranks 0..rank reduced in rank order;
 * exclusive: of ranks 0..rank-1, and rank 0's recv is left as it is; recv
 * may be send. */
int shmtopo_gather(shmtopo_comm_t *comm, const void *send, void *recv, size_t count, int dtype, int root);
int shmtopo_scatter(shmtopo_comm_t *comm, const void *send, void *recv, size_t count, int dtype, int root);
int shmtopo_gatherv(shmtopo_comm_t *comm, const void *send, size_t count, void *recv, const size_t *counts,
                    const size_t *displs, int dtype, int root);
int shmtopo_scatterv(shmtopo_comm_t *comm, const void *send, const size_t *counts, const size_t *displs,
                     void *recv, size_t count, int dtype, int root);
int shmtopo_allgatherv(shmtopo_comm_t *comm, const void *send, size_t count, void *recv, const size_t *counts,
                       const size_t *displs, int dtype);
int shmtopo_alltoallv(shmtopo_comm_t *comm, const void *send, const size_t *sendcounts, const size_t *sdispls,
                      void *recv, const size_t *recvcounts, const size_t *rdispls, int dtype);
int shmtopo_reduce_scatterv(shmtopo_comm_t *comm, const void *send, void *recv, const size_t *counts,
                            int dtype, int op);
/* alltoallw (coll_w.c): alltoallv of typed blocks, one per rank, each the
 * shape of a flattened MPI datatype: `count` elements `extent` bytes apart,
 * the first `displ` bytes into the buffer, each element's bytes in `runs`
 * runs (offsets[i] from the element's start, lengths[i] bytes). A block's
 * bytes are its elements' runs in order (what MPI_Pack makes of it): rank
 * r's sendblocks[p] travel in that order into rank p's recvblocks[r], whose
 * size must be the same (else EINVAL on every rank, naming the rank at
 * fault). Every run must lie in its buffer; send and recv must not overlap.
 * typed_size: a block's bytes (SIZE_MAX if too many); typed_pack/unpack:
 * a block's bytes to or from a contiguous array of that size. */
typedef struct shmtopo_typed_block {
    int64_t displ;
    uint64_t count;
    int64_t extent;
    uint64_t runs;
    const int64_t *offsets;
    const uint64_t *lengths;
} shmtopo_typed_block_t;
int shmtopo_alltoallw(shmtopo_comm_t *comm, const void *send, const shmtopo_typed_block_t *sendblocks, void *recv,
                      const shmtopo_typed_block_t *recvblocks);
size_t shmtopo_typed_size(const shmtopo_typed_block_t *b);
void shmtopo_typed_pack(const void *buf, const shmtopo_typed_block_t *b, void *out);
void shmtopo_typed_unpack(const void *in, const shmtopo_typed_block_t *b, void *buf);
int shmtopo_scan(shmtopo_comm_t *comm, const void *send, void *recv, size_t count, int dtype, int op,
                 int exclusive);
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

/* Persistent collectives (as MPI_Allreduce_init, collective like it):
 * check the arguments and agree on them once; each request_start then runs
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

/* dst[i] = dst[i] op src[i] (the kernel the collectives use; 16-bit
 * floats: computed in float32 and rounded). */
int shmtopo_reduce_local(void *dst, const void *src, size_t count, int dtype, int op);
size_t shmtopo_dtype_size(int dtype);
/* The type reductions of dtype accumulate in: SHMTOPO_FLOAT32 for FLOAT16
 * and BFLOAT16, dtype itself for the others; -1/EINVAL for an unknown
 * type. A reduction done in pieces (across nodes) passes partials of this
 * type and rounds once, with shmtopo_reduce_round. */
int shmtopo_dtype_accumulator(int dtype);
/* dst = acc rounded to dtype, to nearest even (acc: count elements of
 * shmtopo_dtype_accumulator(dtype)); a copy where that is dtype itself. */
int shmtopo_reduce_round(void *dst, const void *acc, size_t count, int dtype);

/* One-sided operations on windows' memory (rma.c: the drop-in's
 * accelerated MPI shared windows). `ctrl` is a window of at least
 * SHMTOPO_RMA_CTRL_BYTES per rank, zero-filled, that holds each rank's lock
 * and guard; `target` is a rank of it, `addr` an address in memory every
 * rank maps. Waits are the window's (timeout, a peer dead or gone). */
#define SHMTOPO_RMA_CTRL_BYTES 2048
/* The ops of accumulates besides enum shmtopo_op: MPI_REPLACE, MPI_NO_OP. */
enum shmtopo_rma_op { SHMTOPO_RMA_REPLACE = 100, SHMTOPO_RMA_NO_OP = 101 };
/* Lock target's lock, shared (any number of holders) or exclusive (one);
 * tickets: first come, first served. */
int shmtopo_rma_lock(shmtopo_win_t *ctrl, int target, int exclusive);
int shmtopo_rma_unlock(shmtopo_win_t *ctrl, int target, int exclusive);
/* A shared lock of every rank (none held if it fails), and its release
 * after a full memory barrier. */
int shmtopo_rma_lock_all(shmtopo_win_t *ctrl);
int shmtopo_rma_unlock_all(shmtopo_win_t *ctrl);
/* result[i] = addr[i] (when result is not NULL), then addr[i] = addr[i] op
 * origin[i], atomic per element: one CPU atomic for elements of 1, 2, 4 or
 * 8 bytes at aligned addresses, else under target's guard. op: enum
 * shmtopo_op, SHMTOPO_RMA_REPLACE or SHMTOPO_RMA_NO_OP (origin unread). */
int shmtopo_rma_accumulate(shmtopo_win_t *ctrl, int target, void *addr, const void *origin, void *result,
                           size_t count, int dtype, int op);
/* *result = *addr, and *addr = *origin where it equalled *compare (bitwise), atomically. */
int shmtopo_rma_compare_and_swap(shmtopo_win_t *ctrl, int target, void *addr, const void *origin,
                                 const void *compare, void *result, size_t size);
/* A full memory barrier (MPI_Win_sync). */
void shmtopo_rma_sync(void);

/* ---- configuration ---------------------------------------------------- */

enum shmtopo_topo_source {
    SHMTOPO_SOURCE_AUTO = 0,   /* shmem, then xml, then local */
    SHMTOPO_SOURCE_SHMEM = 1, SHMTOPO_SOURCE_XML = 2, SHMTOPO_SOURCE_LOCAL = 3
};

/* Every environment variable shmtopo reads, parsed in one place. */
enum shmtopo_var {
    SHMTOPO_VAR_SHM_TYPE = 0, SHMTOPO_VAR_FENCE_ALGORITHM = 1, SHMTOPO_VAR_COLL_ALGORITHM = 2,
    SHMTOPO_VAR_COLL_BUFFER = 3, SHMTOPO_VAR_NODE_SIZE = 4, SHMTOPO_VAR_TOPO_SOURCE = 5,
    SHMTOPO_VAR_TIMEOUT = 6, SHMTOPO_VAR_SPIN_NS = 7, SHMTOPO_VAR_YIELD_NS = 8,
    SHMTOPO_VAR_TOPO_DIR = 9, SHMTOPO_VAR_TOPO_CONFLICT_RANK = 10, SHMTOPO_VAR_SINGLE_COPY = 11,
    SHMTOPO_VAR_COLL_LEVELS = 12, SHMTOPO_VAR_RUN_AHEAD = 13,
    SHMTOPO_NVARS = 14
};

/* SHMTOPO_COLL_LEVELS: auto (levels from the topology on big comms), flat
 * (never), or a list of object types, innermost first ("numa,package"). */
enum shmtopo_coll_levels_mode {
    SHMTOPO_LEVELS_AUTO = 0, SHMTOPO_LEVELS_FLAT = 1, SHMTOPO_LEVELS_LIST = 2
};
/* The object types a level may follow (0 ends a list); names as hwloc's
 * short ones, so the Python side finds them in the topology. */
enum shmtopo_level_type {
    SHMTOPO_LEVEL_END = 0, SHMTOPO_LEVEL_CORE = 1, SHMTOPO_LEVEL_L1 = 2, SHMTOPO_LEVEL_L2 = 3,
    SHMTOPO_LEVEL_L3 = 4, SHMTOPO_LEVEL_NUMA = 5, SHMTOPO_LEVEL_DIE = 6, SHMTOPO_LEVEL_PACKAGE = 7
};
#define SHMTOPO_MAX_LEVELS 4

/* SHMTOPO_SINGLE_COPY: auto (where every rank can reach every peer), 0 (off),
 * 1 (required: comm creation fails on every rank where a rank cannot). */
enum shmtopo_single_copy_setting {
    SHMTOPO_SINGLE_COPY_AUTO = 0, SHMTOPO_SINGLE_COPY_OFF = 1, SHMTOPO_SINGLE_COPY_ON = 2
};

typedef struct shmtopo_config {
    int32_t backend;        /* SHMTOPO_SHM_TYPE (posix) */
    int32_t fence_alg;      /* SHMTOPO_FENCE_ALGORITHM, else KUPL_SHM_FENCE_ALGORITHM (auto) */
    int32_t coll_alg;       /* SHMTOPO_COLL_ALGORITHM (auto) */
    int32_t node_size;      /* SHMTOPO_NODE_SIZE (0: real nodes) */
    int32_t topo_source;    /* SHMTOPO_TOPO_SOURCE (auto) */
    int32_t conflict_rank;  /* SHMTOPO_TOPO_CONFLICT_RANK, a test hook (-1) */
    int32_t single_copy;    /* SHMTOPO_SINGLE_COPY (auto): enum shmtopo_single_copy_setting */
    int32_t run_ahead;      /* SHMTOPO_RUN_AHEAD (0): small bcast and reduce wait only for the ranks they need */
    uint64_t coll_buffer;   /* SHMTOPO_COLL_BUFFER, page-rounded (262144) */
    double timeout;         /* SHMTOPO_TIMEOUT, seconds (0: forever) */
    int64_t spin_ns;        /* SHMTOPO_SPIN_NS (-1: by oversubscription) */
    int64_t yield_ns;       /* SHMTOPO_YIELD_NS (-1: by oversubscription) */
    int32_t coll_levels_mode;                  /* SHMTOPO_COLL_LEVELS (auto): enum shmtopo_coll_levels_mode */
    int32_t coll_levels[4];   /* SHMTOPO_MAX_LEVELS: its types when a list, innermost first, 0-ended */
    char topo_dir[256];     /* SHMTOPO_TOPO_DIR (/dev/shm) */
    char text[14][48];      /* [enum shmtopo_var]: the value as set ("" if unset), for messages */
} shmtopo_config_t;

/* Read and check every variable. EINVAL, the message naming the variable,
 * its value and what is accepted (*cfg then holds the defaults for the rest). */
int shmtopo_config_read(shmtopo_config_t *cfg);
/* 0 when the settings that must agree (SHMTOPO_SHM_TYPE, the fence and
 * collective algorithms, SHMTOPO_COLL_BUFFER, SHMTOPO_NODE_SIZE,
 * SHMTOPO_TOPO_SOURCE, SHMTOPO_SINGLE_COPY, SHMTOPO_COLL_LEVELS, SHMTOPO_RUN_AHEAD) are alike in cfgs[0..n); else EINVAL naming the
 * variable and two ranks' values (ranks[i]: the rank of cfgs[i], NULL for i). */
int shmtopo_config_compare(const shmtopo_config_t *cfgs, int n, const int *ranks);
/* The name of a level type ("numanode", "package", ...; "unknown"). */
const char *shmtopo_level_type_name(int type);
/* The comm's SHMTOPO_COLL_LEVELS, as agreed at creation: the mode (enum
 * shmtopo_coll_levels_mode) into *modep and, for a list, its types into
 * types[0..SHMTOPO_MAX_LEVELS) (0-ended). EBADF for a freed comm. */
int shmtopo_comm_coll_levels(const shmtopo_comm_t *comm, int *modep, int *types);
/* How many steps a rank that runs ahead may post past the slowest rank: a
 * failure it ran past reaches it at most this many calls later. 16, not 8:
 * with 4 ranks on 2 cores, a small bcast at 8 was 0.68x mpi4py's time, at 16
 * 0.33-0.47x (each rank's channel holds twice as many step lines, 48 KiB). */
#define SHMTOPO_RUN_AHEAD_LAG 16
/* The most data (bytes) a bcast or reduce carries running ahead: each rank's
 * channel then holds 2 x SHMTOPO_RUN_AHEAD_LAG slots of it (128 KiB; none
 * where the comm does not run ahead). 4 KiB: MPICH's own bcast of 4 KiB returns
 * at the root at once, and a strict one was 1.1-1.2x its time. */
#define SHMTOPO_AHEAD_MAX 4096
/* 1 when the comm's small bcasts and reduces run ahead (SHMTOPO_RUN_AHEAD=1
 * as agreed at creation, on one node, two ranks or more), else 0; -1/EBADF
 * for a freed comm. */
int shmtopo_comm_runs_ahead(const shmtopo_comm_t *comm);
/* Parse a backend / fence algorithm / topology source name ("posix", "rd",
 * "xml", ...). EINVAL for an unknown name, saying what is accepted. */
int shmtopo_backend_from_name(const char *name, int *backendp);
int shmtopo_fence_alg_from_name(const char *name, int *algp);
int shmtopo_topo_source_from_name(const char *name, int *sourcep);
const char *shmtopo_backend_name(int backend);
const char *shmtopo_fence_alg_name(int alg);
const char *shmtopo_topo_source_name(int source);
/* 0 when the backend can be used on this machine, else -1 with the reason. */
int shmtopo_backend_probe(int backend);
/* Unlink the posix segment names and topology files (in /dev/shm and
 * topo_dir, NULL: /dev/shm only) that are provably abandoned: this user's
 * regular files, made in this boot and PID namespace by a process that no
 * longer runs (left by a kill during allocation or sharing); and the System
 * V segments of this user such a creator had not yet marked for removal,
 * attached by nobody. Whatever another namespace, host or user made stays.
 * Returns how many. Run by
 * comm_create, when a wait finds a dead peer (then waiting up to 200 ms
 * for the dead creator's own attachment to go), and by the launcher
 * (python -m shmtopo run) once a job's ranks are gone. */
int shmtopo_sweep_stale_files(const char *topo_dir);
/* The origin this process's names carry, as 16 hex digits after the pid
 * (shmtopo.<pid>.<origin>.<random>, shmtopo-topo.<pid>.<origin>.<random>.
 * hwloc-<version>): a nonzero hash of this kernel's boot id and the PID
 * namespace the process runs in, or 0 when that cannot be known for sure
 * (then the sweep removes nothing). The sweep judges by pid only names of
 * its own origin. */
uint64_t shmtopo_origin(void);
/* CPUs in this process's affinity mask. */
int shmtopo_affinity_ncpus(void);

/* CDEF END */

/* The errno of an agreement whose verdict is that every rank hands the call
 * to MPI (SHMTOPO_SIG_DELEGATED); Python reads it as errno.ECANCELED. */
#define SHMTOPO_EDELEGATED ECANCELED

#ifdef __cplusplus
}
#endif
#endif /* SHMTOPO_H */
