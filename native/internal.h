/* Declarations shared between the native sources; not part of the API. */
#ifndef SHMTOPO_INTERNAL_H
#define SHMTOPO_INTERNAL_H

#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include "shmtopo.h"

#define SHMTOPO_LINE 128 /* flag padding: a cache line plus its prefetch pair */

/* error.c: record a message, set errno, return -1. */
int shmtopo_fail(int err, int rank, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* error.c: shmtopo_fail with errno and strerror, prefixed by `what`. */
int shmtopo_fail_errno(const char *what);

static inline size_t shmtopo_round_up(size_t n, size_t to)
{
    return (n + to - 1) / to * to;
}

/* ---- names.c --------------------------------------------------------------- */

/* What each kind of name accepts, in messages about arguments and variables. */
#define SHMTOPO_BACKENDS_ACCEPTED "expected posix, memfd, sysv or xpmem"
#define SHMTOPO_FENCES_ACCEPTED "expected auto, linear, rd, dissemination, 1 or 2"
#define SHMTOPO_SOURCES_ACCEPTED "expected auto, shmem, xml or local"
#define SHMTOPO_COLL_ALGS_ACCEPTED "expected auto, flat or rsag"

const char *shmtopo_coll_alg_name(int alg);
int shmtopo_coll_alg_from_name(const char *name, int *algp);
/* A level type by name (numa as numanode too), or -1. */
int shmtopo_level_type_lookup(const char *name);
/* A fence algorithm as KUPL reads KUPL_SHM_FENCE_ALGORITHM: 1 is linear, any
 * other value recursive doubling; shmtopo's own names are accepted too. */
int shmtopo_fence_alg_from_kupl(const char *value);
/* "allreduce", "allocate", ...: the operation a kind names, for messages. */
const char *shmtopo_kind_name(int kind) __attribute__((const));
/* Whether a kind names an operation. */
int shmtopo_kind_known(int kind) __attribute__((const));

/* ---- segment.c ---------------------------------------------------------- */

/* What a peer needs to map a segment; travels through the allgather. */
typedef struct shmtopo_seg_key {
    int32_t backend;
    int32_t pid;      /* creator */
    int32_t handle;   /* memfd: fd number in the creator; sysv: shmid */
    int32_t huge;     /* enum shmtopo_huge_kind: peers madvise transparent ones too */
    uint64_t length;
    char name[48];    /* posix: shm_open name */
} shmtopo_seg_key_t;

typedef struct shmtopo_seg {
    shmtopo_seg_key_t key;
    void *addr;
    size_t length;
    int fd;           /* creator, until everyone has mapped */
    int owner;
} shmtopo_seg_t;

/* ---- window.c: types ------------------------------------------------------ */

/* Per-rank control block at the start of each window. Each line has one
 * writer: the owning rank writes its sequence words; peers only increment the
 * waiter counts, and only on the slow (sleeping) path. */
typedef struct shmtopo_ctrl {
    _Alignas(SHMTOPO_LINE) _Atomic uint64_t fence_seq;  /* stages reached, only grows */
    _Atomic uint32_t abandoned;                         /* owner left after an error: 1 + the
                                                           rank whose failure caused it */
    _Atomic int32_t died_elsewhere;                     /* set before abandoned: 1 + the job rank
                                                           whose death it heard of, -(1 + the job
                                                           rank) that it heard left after an error */
    _Atomic uint32_t departed;                          /* owner released its side cleanly (no
                                                           error): set once, never cleared */
    _Alignas(SHMTOPO_LINE) _Atomic uint32_t fence_waiters;
    _Alignas(SHMTOPO_LINE) _Atomic uint32_t peer_waiters;
    _Alignas(SHMTOPO_LINE) _Atomic uint64_t peer_seq[]; /* [p]: peer fences done with p */
} shmtopo_ctrl_t;

/* Which thread is inside a call on an object (0: none), and how deep
 * (state.c: shmtopo_claim). */
typedef struct shmtopo_claim {
    _Atomic uintptr_t user;
    int depth;
    shmtopo_release_t *release; /* armed by shmtopo_call_begin, for the user's waits */
    _Atomic int lent;                      /* the queue holds it, or one of its calls runs */
    int64_t saved_spin_ns, saved_yield_ns; /* the comm's waits meanwhile: the call runs with its own */
} shmtopo_claim_t;

/* The user of a comm's claim while its queue of nonblocking calls holds it
 * (shmtopo_comm_queue_hold): never a thread's pthread_self(). */
#define SHMTOPO_CLAIM_QUEUED ((uintptr_t)1)

struct shmtopo_win {
    shmtopo_comm_t *comm;
    shmtopo_claim_t claim;   /* shmtopo_win_claim */
    uint64_t id;             /* per comm, in allocation order */
    const char *label;       /* how messages name it: "the window", or as its owner calls it */
    /* the owner's part of this rank's leaving (waking its own sleepers), or NULL */
    void (*on_leave)(struct shmtopo_win *win);
    int rank, size;
    int backend, fence_alg;
    int contiguous;
    int symmetric;           /* every segment at the same address in every rank */
    int disowned;            /* mappings belong to the caller now */
    int placement;           /* enum shmtopo_placement, resolved */
    int huge;                /* enum shmtopo_huge_kind the segments got */
    size_t huge_page;        /* their page size (hugetlb), else the base page */
    shmtopo_win_place_t *place; /* [rank]: how its part was placed */
    int broken;              /* a wait failed: epochs no longer agree, only free works */
    double timeout;          /* seconds, 0 = forever */
    int nsegs;
    shmtopo_seg_t *segs;     /* one per rank, or one when contiguous */
    shmtopo_ctrl_t **ctrl;   /* [rank] */
    char **base;             /* [rank]: start of each part */
    size_t *sizes;           /* [rank] */
    uint64_t fence_epoch;    /* fences completed by this rank */
    uint64_t *peer_epoch;    /* [p]: peer fences done with p */
};

/* ---- set-up exchanges ---------------------------------------------------------- */

/* One set-up exchange of an allocation: every rank contributes err (its
 * failure so far) and n bytes; 0, or -1 with one verdict on every rank.
 * Windows use the comm's agreement (comm->agree); the comm's own channel,
 * made before shared memory exists, the out-of-band callbacks (comm.c). */
typedef int (*shmtopo_exchange_fn)(shmtopo_comm_t *comm, const shmtopo_sig_t *sig, int err,
                                   const void *mine, void *all, size_t n);

/* An allgather of nbytes per rank of a comm being made: 0, or -1 with the
 * failure on every rank that could not complete it. */
typedef int (*shmtopo_setup_allgather_fn)(shmtopo_comm_t *comm, const void *send, void *recv, size_t nbytes);
/* comm.c: a set-up exchange (shmtopo_exchange_fn) over an allgather, before
 * the comm's channel exists: each rank sends its status (err, and then the
 * message of its failure) with its n bytes, and all raise the first
 * failure, in rank order. */
int shmtopo_exchange_statuses(shmtopo_comm_t *comm, int err, const void *mine, void *all, size_t n,
                              shmtopo_setup_allgather_fn allgather);

/* ---- chan.c: the comm's channel ------------------------------------------- */

/* The comm's own shared memory, made with the comm: per rank a header of
 * step lines (the agreement and synchronisation primitive) and three scratch
 * buffers that collectives and set-up exchanges move data through. */
typedef struct shmtopo_chan {
    struct shmtopo_win *win;   /* one part per rank: header, then the buffers */
    size_t header;             /* header bytes, page-rounded */
    size_t buffer;             /* bytes per scratch buffer */
    uint64_t step;             /* steps this rank has taken */
    uint64_t settled;          /* every rank posted every step up to it, and this rank judged them */
    char *tmp;                 /* private scratch of one buffer's size */
    char *sc_tmp;              /* private chunks of single-copy reductions, made on first use */
    size_t sc_tmp_size;
} shmtopo_chan_t;

/* A rank's part of shrink's rendezvous of the survivors (shrink.c), in its
 * part of the channel; the channel posts SHMTOPO_SHRINK_DEPARTED in this
 * rank's `arrived` when it frees or abandons the comm. Its own buffers: the
 * scratch buffers may still be read by a rank finishing its last call. */
#define SHMTOPO_SHRINK_DEPARTED UINT64_MAX
#define SHMTOPO_SHRINK_CHUNK 4096
typedef struct shmtopo_shrink_line {
    _Alignas(SHMTOPO_LINE) _Atomic uint64_t arrived; /* the attempt this rank is in, from 1 */
    _Atomic uint64_t sealed;   /* the attempt whose members this rank chose */
    _Atomic uint64_t round;    /* attempt << 32 | exchange rounds posted in it */
    _Atomic uint64_t gave_up;  /* attempt << 32 | 1 + the rank whose failure ended it here */
    _Alignas(SHMTOPO_LINE) _Atomic uint32_t waiters;
    _Alignas(SHMTOPO_LINE) unsigned char members[SHMTOPO_SHRINK_CHUNK]; /* a bit per rank */
    unsigned char data[2][SHMTOPO_SHRINK_CHUNK]; /* rounds' chunks, in turn */
} shmtopo_shrink_line_t;
shmtopo_shrink_line_t *shmtopo_chan_shrink_line(const shmtopo_comm_t *comm, int rank);
/* Post SHMTOPO_SHRINK_DEPARTED: this rank takes part in no shrink of the
 * comm (it drops the comm, or its shrink failed). Keeps errno. */
void shmtopo_chan_depart(shmtopo_comm_t *comm);

/* Scratch buffer `which` (0..2) of a rank. */
char *shmtopo_chan_buffer(const shmtopo_comm_t *comm, int rank, int which);
/* Make / release the channel (comm_create, comm_destroy, comm_abandon). */
int shmtopo_chan_create(shmtopo_comm_t *comm, shmtopo_exchange_fn exchange);
int shmtopo_chan_free(shmtopo_comm_t *comm);
void shmtopo_chan_abandon(shmtopo_comm_t *comm, int origin);
/* Local: drop this process's side of the channel as a clean departure
 * (shmtopo_win_release), or, on a broken comm, as shmtopo_chan_abandon. */
void shmtopo_chan_release(shmtopo_comm_t *comm);
/* Local: the same departure, keeping the channel mapped (shmtopo_comm_park);
 * and taken back (shmtopo_comm_unpark). park: 0, or -1 where a shrink has
 * begun on the channel (its lines are then no longer as made). */
int shmtopo_chan_park(shmtopo_comm_t *comm);
void shmtopo_chan_unpark(shmtopo_comm_t *comm);
/* Leave the channel (origin: the rank whose failure caused it, -1 for this
 * one): peers waiting on it fail instead of hanging. */
void shmtopo_chan_leave(shmtopo_comm_t *comm, int origin);

/* ---- comm.c ------------------------------------------------------------ */

struct shmtopo_comm {
    int size, rank;
    shmtopo_oob_t oob;               /* used by comm_create only */
    void *maker;                     /* while the comm is made: the state of the exchange it is
                                        made through, when not the callbacks (shrink.c) */
    pid_t *pids;                     /* per rank */
    unsigned long long *starttimes;  /* per rank, from /proc/PID/stat: tells pid reuse apart */
    int ncpus;                       /* CPUs in the union of all affinity masks */
    int oversubscribed;              /* size > ncpus */
    int single_copy;                 /* enum shmtopo_single_copy, agreed at creation */
    uint64_t next_win_id;
    shmtopo_config_t config;         /* the environment, read at creation */
    double timeout;                  /* seconds, 0 = forever */
    int broken;                      /* a wait failed: only free/abandon work */
    int shrunk;                      /* shrink made the survivors' comm: windows only free */
    unsigned fork_generation;        /* of the process that made the comm */
    /* the job this node belongs to (shmtopo_comm_set_span) */
    int world_size;
    int *world_ranks;                /* [rank]: job rank, NULL = the same */
    int nnodes, node_index;
    shmtopo_oob_t leaders;           /* leader of a multi-node comm only */
    int has_leaders;
    shmtopo_chan_t chan;
    /* the agreement its windows allocate and free through (set with the
     * channel by comm.c, which stands above them) */
    shmtopo_exchange_fn agree;
    shmtopo_claim_t claim;           /* shmtopo_comm_claim */
};

/* Collective: make a comm of `size` ranks whose set-up exchanges go
 * through `exchange` (the callbacks' for shmtopo_comm_create; oob: those
 * callbacks, or NULL), which finds its own state in comm->maker while the
 * comm is made. size and rank are checked by the caller. */
int shmtopo_comm_make(int size, int rank, shmtopo_exchange_fn exchange, const shmtopo_oob_t *oob,
                      void *maker, shmtopo_comm_t **commp);

/* The job rank of a local rank (for messages and roots). */
static inline int shmtopo_world(const shmtopo_comm_t *comm, int rank)
{
    return comm->world_ranks && rank >= 0 && rank < comm->size ? comm->world_ranks[rank] : rank;
}

/* ---- agree.c --------------------------------------------------------------- */

#define SHMTOPO_INLINE 96 /* bytes of data a step carries in its flag line */
/* A small bcast or reduce that runs ahead carries its data (up to
 * SHMTOPO_AHEAD_MAX, shmtopo.h) in its step, beside the line above
 * SHMTOPO_INLINE: such calls bypass the scratch buffers, which a rank may
 * reuse only once every rank is past. */

_Static_assert(sizeof(shmtopo_sig_t) == 40, "a signature is five 64-bit words");

/* The signature's five words, mixed (multiply-xor): every field changes it.
 * Inline, so that a signature known where it is built (a barrier's) is
 * hashed by the compiler. */
static inline uint64_t shmtopo_sig_hash(const shmtopo_sig_t *s)
{
    uint64_t w[5];
    memcpy(w, s, sizeof(w));
    if (s->flags & SHMTOPO_SIG_OWN_COUNT)
        w[3] = 0; /* a v-variant's own count differs by rank: the counts check covers it */
    uint64_t h = 0x9e3779b97f4a7c15ull;
#pragma GCC unroll 5
    for (int i = 0; i < 5; i++)
        h = (h ^ w[i]) * 0xbf58476d1ce4e5b9ull;
    return h ^ (h >> 31);
}

/* shmtopo_step (coll.h) with the signature's hash, computed where the call is. */
int shmtopo_step_hashed(shmtopo_comm_t *comm, const shmtopo_sig_t *sig, uint64_t hash, int err,
                        const void *data, size_t n);

/* A step of a small bcast or reduce on a comm that runs ahead (its
 * signature has SHMTOPO_SIG_RUN_AHEAD): post n bytes of data (up to
 * SHMTOPO_AHEAD_MAX), then wait only for `from` (-1: nobody; comm->size:
 * every rank), whose data this rank needs. 0 when what this rank saw is
 * fine (the step is judged in full later, see agree.c), else -1 with the
 * step's verdict. */
int shmtopo_step_ahead(shmtopo_comm_t *comm, const shmtopo_sig_t *sig, const void *data, size_t n, int from);
/* The n bytes `rank` posted with the last step (shmtopo_step_data, or for a
 * call that runs ahead, up to SHMTOPO_AHEAD_MAX). */
const void *shmtopo_step_payload(const shmtopo_comm_t *comm, int rank, size_t n);
/* Whether small bcasts and reduces of this comm run ahead. */
static inline int shmtopo_runs_ahead(const shmtopo_comm_t *comm)
{
    return comm->config.run_ahead && comm->nnodes <= 1 && comm->size > 1;
}
/* Data the last step carried from `rank` (valid until this rank's next step). */
const void *shmtopo_step_data(const shmtopo_comm_t *comm, int rank);
/* Collective over the whole job: shmtopo_step, then, across nodes, the
 * leaders' exchange and the job's verdict. mine/all: n bytes per rank of the
 * node, gathered in rank order (through the scratch buffers when large);
 * NULL/0 for none. */
int shmtopo_agree(shmtopo_comm_t *comm, const shmtopo_sig_t *sig, int err, const void *mine, void *all,
                  size_t n);
/* The node leaders' allgather (rank 0 of a comm that spans nodes): n bytes
 * of every node's leader into all, in node order; or -1 with the failure
 * recorded (all NULL: out of memory). */
int shmtopo_leaders_allgather(shmtopo_comm_t *comm, const void *mine, void *all, size_t n);
/* At a node leader: part (count elements of dtype) exchanged with the other
 * leaders and replaced by the job's: every node's folded in node order (op
 * >= 0; the same bits on every leader), or the part of the first node that
 * holds one (op < 0, a bcast's; holds: whether this node's is). */
int shmtopo_leaders_combine(shmtopo_comm_t *comm, void *part, int holds, size_t count, int dtype, int op);
/* The agreement over the job (nnodes > 1) with a small reduction or bcast
 * folded in on the way, for calls of at most SHMTOPO_INLINE bytes: every
 * rank posts its count elements of dtype (mine; a bcast: only local rank
 * `from`, on the root's node, -1 elsewhere) in the agreement's step; the
 * leader folds its node's in rank order (op >= 0) or takes the root's (op
 * < 0) and sends that part with its summary; the leaders fold the parts in
 * node order, and the verdict's step brings the job's to every rank
 * (result). The same steps and exchange as shmtopo_agree: a rank that
 * refuses the call meets the others there. */
int shmtopo_agree_fold(shmtopo_comm_t *comm, const shmtopo_sig_t *sig, int err, const void *mine, size_t count,
                       int dtype, int op, int from, void *result);
/* shmtopo_agree that also tells whether every rank of the job voted yes
 * (*allp), so that all ranks take the same turn on a local fact. */
int shmtopo_agree_vote(shmtopo_comm_t *comm, const shmtopo_sig_t *sig, int err, int vote, int *allp);
/* A signature of `kind` with every other field unused; as an initializer,
 * for a constant one. */
#define SHMTOPO_SIG_OF(k) {.kind = (k), .dtype = -1, .op = -1, .root = -1, .alg = -1}
static inline shmtopo_sig_t shmtopo_sig(int kind)
{
    return (shmtopo_sig_t)SHMTOPO_SIG_OF(kind);
}
/* The scratch buffer a chunk starting at the next step uses (0..2). */
int shmtopo_chan_next_buffer(shmtopo_comm_t *comm);

/* ---- single_copy.c ----------------------------------------------------- */

/* Addresses of this process's probe words (set up for this process), for
 * the comm record peers probe. */
void shmtopo_sc_publish(uint64_t *wordp, uint64_t *sinkp);
/* Read every peer's probe word and write its sink (the addresses each
 * published): 0, or -1 with the first failure (errno, the peer, why). */
int shmtopo_sc_probe(const shmtopo_comm_t *comm, const uint64_t *words, const uint64_t *sinks);
/* Copy n bytes from address `src` of rank `peer` into dst here / from src
 * here to its address `dst`. 0, or -1 naming the peer, the address and the
 * errno (EFAULT: the range is not mapped there; EOWNERDEAD: the peer is
 * gone); `what` names the collective. */
int shmtopo_sc_read(const shmtopo_comm_t *comm, int peer, void *dst, uint64_t src, size_t n, const char *what);
/* One process_vm_readv of up to IOV_MAX pieces each side, n bytes in all:
 * the bytes it copied (maybe fewer: copy the rest in another call), or -1
 * with the failure recorded as shmtopo_sc_read records it. */
struct iovec;
ssize_t shmtopo_sc_readv(const shmtopo_comm_t *comm, int peer, const struct iovec *local, size_t nlocal,
                         const struct iovec *remote, size_t nremote, size_t n, const char *what);
int shmtopo_sc_write(const shmtopo_comm_t *comm, int peer, uint64_t dst, const void *src, size_t n,
                     const char *what);
/* After a failed copy with `peer`: 1 when the peer is gone (EOWNERDEAD) or
 * left after a failure (ECONNABORTED, or EOWNERDEAD for the death it saw):
 * the comm is then broken and this rank has left it, as after a wait that
 * found the same, and the call must end; 0 when the failure is to be
 * posted in the step that ends the round, so that every rank raises it. */
int shmtopo_sc_gone(shmtopo_comm_t *comm, int peer);

/* ---- liveness.c ----------------------------------------------------------- */

/* Start time of a process (clock ticks since boot), 0 if it does not exist. */
unsigned long long shmtopo_process_starttime(pid_t pid);
/* 1 if the process with this pid and start time still runs (not a zombie). */
int shmtopo_process_alive(pid_t pid, unsigned long long starttime);
/* 1 while a process with this pid runs (a zombie does not), whoever it is. */
int shmtopo_pid_running(pid_t pid);
/* First rank of the comm whose process is gone, or -1. */
int shmtopo_comm_find_dead(const shmtopo_comm_t *comm);

/* ---- segment.c: reserving and mapping ---------------------------------- */

/* 0 when `total` more bytes of shared memory fit: in MemAvailable, under the
 * cgroup's memory limit and in the free space of /dev/shm; else ENOMEM (or
 * ENOSPC) saying which limit. tmpfs may be sized above the RAM, so its free
 * space alone would let the OOM killer decide instead. */
int shmtopo_mem_admit(int backend, uint64_t total, int huge, uint64_t hugetlb_free);
/* What huge pages a backend's segments can get here, from /proc/meminfo,
 * shmem_enabled and /dev/shm's mount options. */
typedef struct shmtopo_huge_probe {
    uint64_t hugetlb_page;   /* bytes per hugetlb page; 0: none for this backend */
    uint64_t hugetlb_free;   /* bytes free in the pool */
    uint32_t thp;            /* 1: madvise(MADV_HUGEPAGE) can get transparent huge pages */
    uint32_t pad;
} shmtopo_huge_probe_t;
void shmtopo_huge_probe(int backend, shmtopo_huge_probe_t *probep);
/* Set the placement policy of [addr, addr + length) (a rank's own part)
 * before its pages exist; never fails: *placep says what was done. */
void shmtopo_seg_place(void *addr, size_t length, int placement, const uint64_t *nodes, int bind,
                       shmtopo_win_place_t *placep);
/* Fault [addr, addr + length) in now (offset: its place in the file fd, -1
 * when this process holds none), so a lack of memory fails here: ENOSPC or
 * ENOMEM, never SIGBUS later. */
int shmtopo_seg_populate(void *addr, size_t length, int fd, size_t offset);
/* What shmtopo names in shared directories for a moment, made by
 * shmtopo_name_make: posix segments "/" SHMTOPO_SEG_PREFIX
 * "<pid>.<origin>.<random>", topology files SHMTOPO_TOPO_PREFIX
 * "<pid>.<origin>.<random>.hwloc-<version>". */
#define SHMTOPO_SEG_PREFIX "shmtopo."
#define SHMTOPO_TOPO_PREFIX "shmtopo-topo."
/* How many fresh names a creation tries when each is taken (EEXIST). */
#define SHMTOPO_NAME_TRIES 8
/* (shmtopo_origin, in shmtopo.h: the origin a name carries.) */
/* Write head "<pid>.<origin>.<digits random hex digits>" tail into name
 * (len bytes), from getrandom: 0, or -1 (ENAMETOOLONG, or getrandom's
 * errno). The caller creates it with O_CREAT | O_EXCL and tries another
 * when it is taken. */
int shmtopo_name_make(char *name, size_t len, const char *head, const char *tail, int digits);
/* Create a segment of `length` bytes (a multiple of its page size), mapped
 * but not populated (shmtopo_seg_populate), with huge pages of kind `huge`. */
int shmtopo_seg_create(int backend, size_t length, uint64_t win_id, int huge, shmtopo_seg_t *seg);
/* Map a segment a peer created. */
int shmtopo_seg_attach(const shmtopo_seg_key_t *key, shmtopo_seg_t *seg);
/* Creator, once every rank has mapped: drop the name / fd so that nothing
 * outlives the processes. */
void shmtopo_seg_unpublish(shmtopo_seg_t *seg);
/* Unmap (unless disowned) and unpublish if still published. */
void shmtopo_seg_destroy(shmtopo_seg_t *seg, int unmap);

/* ---- window.c --------------------------------------------------------------- */

int shmtopo_win_alloc_via(shmtopo_comm_t *comm, size_t size, const shmtopo_win_attr_t *attr,
                          shmtopo_exchange_fn exchange, void **basep, shmtopo_win_t **winp);
/* Mark a window broken and left by this rank (origin: the rank whose failure
 * caused it, -1 for this one), waking its peers and calling the owner's
 * on_leave; the memory stays mapped until freed. A fork child of the rank's
 * process leaves nothing (the window is its parent's). */
void shmtopo_win_leave(shmtopo_win_t *win, int origin);
/* After a wait on the window failed (errno, the message; origin as the
 * wait reported it): sweep a dead peer's files and leave, so that peers
 * waiting for this rank fail too instead of hanging. Returns -1, errno
 * kept. */
int shmtopo_win_wait_failed(shmtopo_win_t *win, int origin);
/* shmtopo_sweep_stale_files where a peer was just found dead: a segment
 * still attached by its dying creator is waited for, a little. */
int shmtopo_sweep_after_death(const char *topo_dir);
/* Local: unmap (unless disowned) and free, telling nobody. */
void shmtopo_win_delete(shmtopo_win_t *win);
/* Local: this rank's departure from the window as a release makes it
 * (peers never wait for it again), its memory kept mapped; and taken back,
 * once every rank has departed so (shmtopo_comm_park). */
void shmtopo_win_depart_keeping(shmtopo_win_t *win);
void shmtopo_win_take_back(shmtopo_win_t *win);

/* ---- reduce.c ------------------------------------------------------------ */

/* 0 if the (dtype, op) pair has a kernel, else -1/EINVAL. */
int shmtopo_reduce_check(int dtype, int op);
/* dst op= src, no checks (call shmtopo_reduce_check first). */
void shmtopo_reduce_into(void *dst, const void *src, size_t count, int dtype, int op);
/* dst = a op b, no checks; dst may be a or b but must not overlap them otherwise. */
void shmtopo_reduce_pair(void *dst, const void *a, const void *b, size_t count, int dtype, int op);
/* Folding several ranks' inputs into an accumulator of the type the
 * reduction works in (shmtopo_dtype_accumulator: float32 for 16-bit
 * floats, else the type itself, when these are the two kernels above):
 * acc = a op b, acc op= src, then dst = acc rounded once (a copy, or
 * nothing when dst is acc, for the other types). */
void shmtopo_acc_pair(void *acc, const void *a, const void *b, size_t count, int dtype, int op);
void shmtopo_acc_into(void *acc, const void *src, size_t count, int dtype, int op);
void shmtopo_acc_round(void *dst, const void *acc, size_t count, int dtype);
/* Bytes of one accumulator element (of a known dtype). */
size_t shmtopo_acc_size(int dtype);
/* "float16", "maxloc", ...: for messages. */
const char *shmtopo_dtype_name(int dtype);
const char *shmtopo_op_name(int op);

/* ---- topology.c ------------------------------------------------------------- */

/* A new hwloc bitmap (hwloc_bitmap_t) holding the n indices, for the
 * topology calls that take sets; NULL with the failure set (named `what`). */
void *shmtopo_bitmap_of(const unsigned *idx, size_t n, const char *what);
/* Free a hwloc bitmap without touching errno (failure paths keep theirs). */
void shmtopo_bitmap_drop(void *set);

/* ---- topo_shmem.c ----------------------------------------------------------- */

/* Load a topology from XML with hwloc topology flags (IS_THISSYSTEM lets
 * binding queries work on a copy of this machine's topology), keeping the
 * XML's I/O objects when io is 1 (the important ones) or 2 (all). */
int shmtopo_topo_load_xml_flags(const char *xml, size_t len, unsigned long flags, int io, void **topop);

/* ---- maps.c: a common address ------------------------------------------------ */

struct shmtopo_range; /* shmtopo_range_t, maps.h */

/* Collective (through `exchange`): every rank's free address ranges, and a
 * value each contributes (values[r], if not NULL), gathered; *outp (malloc,
 * the caller frees) holds their intersection, the same list on every rank.
 * err: this rank's failure so far, which fails the exchange everywhere. */
int shmtopo_common_free_ranges(shmtopo_comm_t *comm, const shmtopo_sig_t *sig, int err,
                               shmtopo_exchange_fn exchange, uint64_t value, uint64_t *values,
                               struct shmtopo_range **outp, size_t *np);

/* ---- symmetric.c ------------------------------------------------------------- */

/* Collective: move every segment of the window to one address range that is
 * the same in all ranks (segments in order, back to back). */
int shmtopo_win_make_symmetric(shmtopo_win_t *win, shmtopo_exchange_fn exchange);

/* ---- kupl_attach.c: the KUPL layer's attach by address ------------------------ */

/* Collective: remember the comm for attach (gathers every rank's XPMEM
 * segment, -1 where XPMEM is unavailable). Untrack before freeing it. */
int shmtopo_attach_track_comm(shmtopo_comm_t *comm);
void shmtopo_attach_untrack_comm(const shmtopo_comm_t *comm);
/* Collective: remember the window for attach (gathers every rank's address
 * of its own part). Untrack before freeing it. */
int shmtopo_attach_track_win(shmtopo_win_t *win);
void shmtopo_attach_untrack_win(const shmtopo_win_t *win);
/* Map [src_addr, src_addr + size) of process src_pid here: NULL with the
 * reason (shmtopo_last_error) when neither a tracked window nor XPMEM can. */
void *shmtopo_attach(pid_t src_pid, const void *src_addr, size_t size);
/* Unmap what shmtopo_attach returned. */
int shmtopo_detach(void *ptr);

#endif /* SHMTOPO_INTERNAL_H */
