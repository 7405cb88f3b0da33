/* Declarations shared between the native sources; not part of the API. */
#ifndef SHMTOPO_INTERNAL_H
#define SHMTOPO_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
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

/* ---- comm.c ------------------------------------------------------------ */

struct shmtopo_comm {
    int size, rank;
    shmtopo_oob_t oob;
    pid_t *pids;                     /* per rank */
    unsigned long long *starttimes;  /* per rank, from /proc/PID/stat: tells pid reuse apart */
    int ncpus;                       /* CPUs in the union of all affinity masks */
    int oversubscribed;              /* size > ncpus */
    uint64_t next_win_id;
    struct shmtopo_coll *coll;       /* collectives' scratch, made by the first one */
};

/* Status record exchanged at every step of a collective set-up, so that a
 * failure on one rank makes the call fail on every rank with its message. */
typedef struct shmtopo_status {
    int32_t err;        /* errno of the failure, 0 if fine */
    char message[124];
} shmtopo_status_t;

/* Allgather `nbytes` per rank that start with a shmtopo_status_t; fill this
 * rank's status from (err, last error) first. Returns 0 when every rank is
 * fine, else -1 with errno and message of the first failing rank. */
int shmtopo_comm_agree(shmtopo_comm_t *comm, int err, void *sendbuf, void *recvbuf,
                       size_t nbytes);

/* ---- liveness.c ----------------------------------------------------------- */

/* Start time of a process (clock ticks since boot), 0 if it does not exist. */
unsigned long long shmtopo_process_starttime(pid_t pid);
/* 1 if the process with this pid and start time still runs (not a zombie). */
int shmtopo_process_alive(pid_t pid, unsigned long long starttime);
/* First rank of the comm whose process is gone, or -1. */
int shmtopo_comm_find_dead(const shmtopo_comm_t *comm);

/* ---- segment.c ---------------------------------------------------------- */

/* What a peer needs to map a segment; travels through the allgather. */
typedef struct shmtopo_seg_key {
    int32_t backend;
    int32_t pid;      /* creator */
    int32_t handle;   /* memfd: fd number in the creator; sysv: shmid */
    int32_t pad;
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

/* Create a segment of `length` bytes (page multiple), reserved and mapped. */
int shmtopo_seg_create(int backend, size_t length, uint64_t win_id, shmtopo_seg_t *seg);
/* Map a segment a peer created. */
int shmtopo_seg_attach(const shmtopo_seg_key_t *key, shmtopo_seg_t *seg);
/* Creator, once every rank has mapped: drop the name / fd so that nothing
 * outlives the processes. */
void shmtopo_seg_unpublish(shmtopo_seg_t *seg);
/* Unmap (unless disowned) and unpublish if still published. */
void shmtopo_seg_destroy(shmtopo_seg_t *seg, int unmap);

/* ---- window.c ------------------------------------------------------------ */

/* Per-rank control block at the start of each window. Each line has one
 * writer: the owning rank writes its sequence words; peers only increment the
 * waiter counts, and only on the slow (sleeping) path. */
typedef struct shmtopo_ctrl {
    _Alignas(SHMTOPO_LINE) _Atomic uint64_t fence_seq;  /* stages reached, only grows */
    _Atomic uint32_t abandoned;                         /* owner left after an error: 1 + the
                                                           rank whose failure caused it */
    _Alignas(SHMTOPO_LINE) _Atomic uint32_t fence_waiters;
    _Alignas(SHMTOPO_LINE) _Atomic uint32_t peer_waiters;
    _Alignas(SHMTOPO_LINE) _Atomic uint64_t peer_seq[]; /* [p]: peer fences done with p */
} shmtopo_ctrl_t;

struct shmtopo_win {
    shmtopo_comm_t *comm;
    int rank, size;
    int backend, fence_alg;
    int contiguous;
    int symmetric;           /* every segment at the same address in every rank */
    int disowned;            /* mappings belong to the caller now */
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

/* ---- wait.c ----------------------------------------------------------------- */

/* Wake every process sleeping on a sequence word. */
void shmtopo_wake(_Atomic uint64_t *seq);

/* Publish `value` in a sequence word and wake sleepers, if any. The seq_cst
 * exchange also orders every earlier store of this rank before it. */
static inline void shmtopo_post(_Atomic uint64_t *seq, _Atomic uint32_t *waiters, uint64_t value)
{
    atomic_exchange_explicit(seq, value, memory_order_seq_cst);
    if (atomic_load_explicit(waiters, memory_order_seq_cst))
        shmtopo_wake(seq);
}

static inline void shmtopo_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#endif
}

int shmtopo_wait_slow(const shmtopo_win_t *win, _Atomic uint64_t *seq,
                      _Atomic uint32_t *waiters, uint64_t target, int peer, const char *what);

/* Wait until *seq >= target: spin briefly here, then the slow path backs off
 * (yield, futex sleep) and checks peers' liveness and the timeout. */
static inline int shmtopo_wait(const shmtopo_win_t *win, _Atomic uint64_t *seq,
                               _Atomic uint32_t *waiters, uint64_t target, int peer,
                               const char *what)
{
    for (int i = 0; i < 64; i++) {
        if (atomic_load_explicit(seq, memory_order_acquire) >= target)
            return 0;
        shmtopo_cpu_relax();
    }
    return shmtopo_wait_slow(win, seq, waiters, target, peer, what);
}

/* ---- fence.c ------------------------------------------------------------------ */

int shmtopo_fence_resolve(int alg, int size, int oversubscribed);
int shmtopo_fence_run(shmtopo_win_t *win);
int shmtopo_peer_fence_run(shmtopo_win_t *win, int peer);

/* ---- reduce.c ------------------------------------------------------------ */

/* 0 if the (dtype, op) pair has a kernel, else -1/EINVAL. */
int shmtopo_reduce_check(int dtype, int op);
/* dst op= src, no checks (call shmtopo_reduce_check first). */
void shmtopo_reduce_into(void *dst, const void *src, size_t count, int dtype, int op);
/* dst = a op b, no checks; dst may be a or b but must not overlap them otherwise. */
void shmtopo_reduce_pair(void *dst, const void *a, const void *b, size_t count, int dtype, int op);

/* ---- coll.c ---------------------------------------------------------------- */

typedef struct shmtopo_coll shmtopo_coll_t;
/* Local: release the comm's collective state (collective_free is in comm
 * destroy, abandon when leaving after an error). */
int shmtopo_coll_free(shmtopo_coll_t *coll);
void shmtopo_coll_abandon(shmtopo_coll_t *coll);

/* ---- topo_shmem.c ----------------------------------------------------------- */

/* Load a topology from XML with hwloc topology flags (IS_THISSYSTEM lets
 * binding queries work on a copy of this machine's topology). */
int shmtopo_topo_load_xml_flags(const char *xml, size_t len, unsigned long flags, void **topop);

/* ---- symmetric.c ------------------------------------------------------------- */

/* Collective: move every segment of the window to one address range that is
 * the same in all ranks (segments in order, back to back). */
int shmtopo_win_make_symmetric(shmtopo_win_t *win);

#endif /* SHMTOPO_INTERNAL_H */
