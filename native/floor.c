/* The hardware floor probes (floor.h): a cache line's round trip between two
 * cores, copies out of another core's cache (one direction, and both at
 * once), local copies out of cache and out of DRAM, and the collectives' own
 * reduction kernel. Everything timed here is timed in C, so no Python call
 * sits inside a figure. */
#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>

#include "floor.h"
#include "internal.h"
#include "wait.h"

#define DATA_OFFSET 4096      /* the data starts a page after the sequence word */
#define POLLS_PER_CHECK 1024  /* spins between looks at the clock (and a yield) */
#define LIVENESS_EVERY 0.02   /* seconds between checks that the peer still runs */

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Per-round timings, kept as the means of at most MAX_BATCHES batches of
 * consecutive rounds: the probe reports the median batch, so a round that
 * lost its CPU to another process (this machine is shared) does not become
 * the figure. */
#define MAX_BATCHES 256
typedef struct batches {
    double sum[MAX_BATCHES];
    long count[MAX_BATCHES];
    long rounds;
    int n;
} batches_t;

static void batches_init(batches_t *b, long rounds)
{
    b->rounds = rounds;
    b->n = rounds < MAX_BATCHES ? (int)rounds : MAX_BATCHES;
    memset(b->sum, 0, sizeof(b->sum));
    memset(b->count, 0, sizeof(b->count));
}

/* Round i (1-based) took `seconds`. */
static void batches_add(batches_t *b, long i, double seconds)
{
    int k = (int)((i - 1) * b->n / b->rounds);
    b->sum[k] += seconds;
    b->count[k]++;
}

static double batches_median(batches_t *b)
{
    double mean[MAX_BATCHES];
    int n = 0;
    for (int k = 0; k < b->n; k++)
        if (b->count[k])
            mean[n++] = b->sum[k] / (double)b->count[k];
    if (n == 0)
        return 0;
    qsort(mean, (size_t)n, sizeof(*mean), by_value);
    return n % 2 ? mean[n / 2] : (mean[n / 2 - 1] + mean[n / 2]) / 2;
}

double shmtopo_floor_clock_cost(void)
{
    enum { N = 1001 };
    double d[N];
    for (int i = 0; i < N; i++) {
        double t0 = now();
        d[i] = now() - t0;
    }
    qsort(d, N, sizeof(*d), by_value);
    return d[N / 2];
}

int shmtopo_floor_cpu(void)
{
    return sched_getcpu();
}

size_t shmtopo_floor_region(size_t bytes)
{
    return DATA_OFFSET + shmtopo_round_up(bytes ? bytes : 1, 4096);
}

static _Atomic uint64_t *seq_of(void *region)
{
    return (_Atomic uint64_t *)region;
}

static unsigned char *data_of(void *region)
{
    return (unsigned char *)region + DATA_OFFSET;
}

/* Where a region's owner has its data, in its own address space: what a
 * process_vm_readv of it needs (the word after the sequence word). */
static uint64_t *own_address_of(void *region)
{
    return (uint64_t *)region + 1;
}

/* What a wait needs to give up instead of hanging. */
typedef struct waiter {
    int peer_pid;
    double timeout, start, last_check;
} waiter_t;

static void waiter_init(waiter_t *w, int peer_pid, double timeout)
{
    w->peer_pid = peer_pid;
    w->timeout = timeout;
    w->start = w->last_check = now();
}

static int wait_slow(waiter_t *w, _Atomic uint64_t *word, uint64_t target)
{
    for (;;) {
        for (int i = 0; i < POLLS_PER_CHECK; i++) {
            if (atomic_load_explicit(word, memory_order_acquire) >= target)
                return 0;
            shmtopo_cpu_relax();
        }
        sched_yield(); /* a peer that shares this CPU gets to answer */
        double t = now();
        if (t - w->last_check < LIVENESS_EVERY)
            continue;
        w->last_check = t;
        if (w->peer_pid > 0 && !shmtopo_pid_running(w->peer_pid))
            return shmtopo_fail(EOWNERDEAD, -1, "floor probe: the peer process %d exited",
                                w->peer_pid);
        if (w->timeout > 0 && t - w->start > w->timeout)
            return shmtopo_fail(ETIMEDOUT, -1, "floor probe: the peer did not answer within %g s",
                                w->timeout);
    }
}

/* Wait until the peer's word reaches target; the fast path is a plain spin. */
static inline int wait_for(waiter_t *w, _Atomic uint64_t *word, uint64_t target)
{
    for (int i = 0; i < 64; i++) {
        if (atomic_load_explicit(word, memory_order_acquire) >= target)
            return 0;
        shmtopo_cpu_relax();
    }
    return wait_slow(w, word, target);
}

static inline void post(_Atomic uint64_t *word, uint64_t value)
{
    atomic_store_explicit(word, value, memory_order_release);
}

/* Both processes post one step and wait for each other's: the probes start
 * together, from the same count (each has taken as many steps as the other). */
static int start_together(waiter_t *w, void *mine, void *peer, uint64_t *startp)
{
    uint64_t s = atomic_load_explicit(seq_of(mine), memory_order_relaxed) + 1;
    post(seq_of(mine), s);
    *startp = s;
    return wait_for(w, seq_of(peer), s);
}

static int check_pair(void *mine, void *peer, long rounds, double *secondsp)
{
    if (!mine || !peer || mine == peer || !secondsp || rounds < 1)
        return shmtopo_fail(EINVAL, -1, "floor probe: two distinct regions, rounds >= 1 and an output");
    if (((uintptr_t)mine | (uintptr_t)peer) % SHMTOPO_LINE)
        return shmtopo_fail(EINVAL, -1, "floor probe: regions must be %d-byte aligned", SHMTOPO_LINE);
    return 0;
}

int shmtopo_floor_pingpong(void *mine, void *peer, int side, long rounds, int peer_pid,
                           double timeout, double *secondsp)
{
    if (check_pair(mine, peer, rounds, secondsp) < 0)
        return -1;
    if (side != 0 && side != 1)
        return shmtopo_fail(EINVAL, -1, "floor ping-pong: side must be 0 or 1, not %d", side);
    waiter_t w;
    waiter_init(&w, peer_pid, timeout);
    uint64_t s;
    if (start_together(&w, mine, peer, &s) < 0)
        return -1;
    _Atomic uint64_t *out = seq_of(mine), *in = seq_of(peer);
    double clock_cost = shmtopo_floor_clock_cost();
    batches_t b;
    batches_init(&b, rounds);
    double t0 = now();
    for (long i = 1; i <= rounds; i++) {
        if (side == 0)
            post(out, s + i);
        if (wait_for(&w, in, s + i) < 0)
            return -1;
        if (side == 1)
            post(out, s + i);
        double t1 = now(); /* each round also reads the clock once: not counted */
        batches_add(&b, i, t1 - t0 - clock_cost);
        t0 = t1;
    }
    *secondsp = batches_median(&b);
    return 0;
}

/* Seconds since t0, less the clock's own cost (never below 0). */
static double elapsed(double t0, double clock_cost)
{
    const double d = now() - t0 - clock_cost;
    return d > 0 ? d : 0;
}

static double timed_copy(void *dst, const void *src, size_t n, double clock_cost)
{
    double t0 = now();
    memcpy(dst, src, n);
    return elapsed(t0, clock_cost);
}

static int arrived(const unsigned char *dst, size_t n, unsigned char value)
{
    if (dst[0] == value && dst[n - 1] == value && dst[n / 2] == value)
        return 0;
    return shmtopo_fail(EIO, -1, "floor probe: the bytes copied are not the bytes written");
}

int shmtopo_floor_copy(void *mine, void *peer, int role, size_t bytes, long rounds,
                       int peer_pid, double timeout, double *secondsp)
{
    if (check_pair(mine, peer, rounds, secondsp) < 0)
        return -1;
    if (role < SHMTOPO_FLOOR_WRITER || role > SHMTOPO_FLOOR_READER_CMA || bytes == 0)
        return shmtopo_fail(EINVAL, -1, "floor copy: role %d or size %zu invalid", role, bytes);
    const int writes = role == SHMTOPO_FLOOR_WRITER || role == SHMTOPO_FLOOR_BOTH, reads = role != SHMTOPO_FLOOR_WRITER;
    *own_address_of(mine) = (uint64_t)(uintptr_t)data_of(mine); /* seen by the peer after start_together */
    int cma_err = 0;
    unsigned char *dst = NULL;
    if (reads) {
        dst = aligned_alloc(4096, shmtopo_round_up(bytes, 4096));
        if (!dst)
            return shmtopo_fail(ENOMEM, -1, "floor copy: no memory for %zu bytes", bytes);
        memset(dst, 0, bytes);
    }
    double clock_cost = shmtopo_floor_clock_cost();
    batches_t b;
    batches_init(&b, rounds);
    int rc = -1;
    waiter_t w;
    waiter_init(&w, peer_pid, timeout);
    uint64_t s;
    if (start_together(&w, mine, peer, &s) < 0)
        goto out_with_dst;
    _Atomic uint64_t *out = seq_of(mine), *in = seq_of(peer);
    /* One direction: step i = written (writer) / copied (reader). Both at
     * once: steps 2i-1 = my data written, 2i = the peer's data copied. */
    uint64_t per_round = role == SHMTOPO_FLOOR_BOTH ? 2 : 1;
    for (long i = 1; i <= rounds; i++) {
        uint64_t step = s + per_round * (uint64_t)i;
        unsigned char value = (unsigned char)i;
        if (writes) {
            const double t0 = now();
            memset(data_of(mine), value, bytes);
            if (!reads && i > 1) /* round 1 writes lines nobody has read yet */
                batches_add(&b, i - 1, elapsed(t0, clock_cost));
            post(out, step - (per_round - 1));
        }
        if (reads) {
            if (wait_for(&w, in, step - (per_round - 1)) < 0)
                goto out_with_dst;
            if (role == SHMTOPO_FLOOR_READER_CMA) {
                struct iovec local = {dst, bytes}, remote = {(void *)(uintptr_t)*own_address_of(peer), bytes};
                const double t0 = now();
                const ssize_t n = process_vm_readv(peer_pid, &local, 1, &remote, 1, 0);
                batches_add(&b, i, elapsed(t0, clock_cost));
                if (n != (ssize_t)bytes && !cma_err) { /* reported after the rounds, which the writer waits for */
                    cma_err = n < 0 ? errno : EIO;
                    shmtopo_fail(cma_err, -1, "floor copy: process_vm_readv of %zu bytes from pid %d: %s", bytes,
                                 peer_pid, n < 0 ? strerror(cma_err) : "copied in part");
                }
            } else {
                batches_add(&b, i, timed_copy(dst, data_of(peer), bytes, clock_cost));
            }
            if (!cma_err && arrived(dst, bytes, value) < 0) /* after a failed copy, only that failure counts */
                goto out_with_dst;
            post(out, step);
        }
        /* the writer refills only once the reader is done with the data */
        if (writes && wait_for(&w, in, step) < 0)
            goto out_with_dst;
    }
    if (cma_err) {
        errno = cma_err;
        goto out_with_dst;
    }
    *secondsp = batches_median(&b);
    rc = 0;
out_with_dst:
    free(dst);
    return rc;
}

/* Evict [p, p + n) from every cache level; 0, or -1 where that cannot be done. */
static int flush(const unsigned char *p, size_t n)
{
#if defined(__x86_64__) || defined(__i386__)
    for (size_t off = 0; off < n; off += 64)
        __builtin_ia32_clflush(p + off);
    __builtin_ia32_mfence();
    return 0;
#elif defined(__aarch64__)
    for (size_t off = 0; off < n; off += 64)
        __asm__ __volatile__("dc civac, %0" ::"r"(p + off) : "memory");
    __asm__ __volatile__("dsb ish" ::: "memory");
    return 0;
#else
    (void)p, (void)n;
    return -1;
#endif
}

int shmtopo_floor_copy_local(size_t bytes, int dram, long rounds, double *secondsp)
{
    if (bytes == 0 || rounds < 1 || !secondsp)
        return shmtopo_fail(EINVAL, -1, "floor local copy: bytes and rounds >= 1 and an output");
    size_t len = shmtopo_round_up(bytes, 4096);
    unsigned char *src = aligned_alloc(4096, len), *dst = aligned_alloc(4096, len);
    int rc = -1;
    if (!src || !dst) {
        shmtopo_fail(ENOMEM, -1, "floor local copy: no memory for %zu bytes", bytes);
        goto out_with_buffers;
    }
    memset(dst, 0, bytes);
    double clock_cost = shmtopo_floor_clock_cost();
    batches_t b;
    batches_init(&b, rounds);
    for (long i = 1; i <= rounds; i++) {
        unsigned char value = (unsigned char)i;
        memset(src, value, bytes);
        if (dram && flush(src, bytes) < 0) {
            shmtopo_fail(ENOTSUP, -1, "floor DRAM copy: this architecture cannot flush caches from user space");
            goto out_with_buffers;
        }
        batches_add(&b, i, timed_copy(dst, src, bytes, clock_cost));
        if (arrived(dst, bytes, value) < 0)
            goto out_with_buffers;
    }
    *secondsp = batches_median(&b);
    rc = 0;
out_with_buffers:
    free(src);
    free(dst);
    return rc;
}

int shmtopo_floor_reduce(int dtype, int op, size_t bytes, long rounds, double *secondsp)
{
    if (shmtopo_reduce_check(dtype, op) < 0)
        return -1;
    size_t esz = shmtopo_dtype_size(dtype), count = bytes / esz;
    if (count == 0 || rounds < 1 || !secondsp)
        return shmtopo_fail(EINVAL, -1, "floor reduce: at least one element, rounds >= 1 and an output");
    size_t len = shmtopo_round_up(count * esz, 4096);
    unsigned char *a = aligned_alloc(4096, len), *b = aligned_alloc(4096, len),
                  *dst = aligned_alloc(4096, len);
    int rc = -1;
    if (!a || !b || !dst) {
        shmtopo_fail(ENOMEM, -1, "floor reduce: no memory for %zu bytes", bytes);
        goto out_with_buffers;
    }
    /* zeros: a valid value of every type, which no operation overflows */
    memset(a, 0, len);
    memset(b, 0, len);
    memset(dst, 0, len);
    shmtopo_reduce_pair(dst, a, b, count, dtype, op); /* warm: all three in cache */
    double clock_cost = shmtopo_floor_clock_cost();
    batches_t times;
    batches_init(&times, rounds);
    double t0 = now();
    for (long i = 1; i <= rounds; i++) {
        shmtopo_reduce_pair(dst, a, b, count, dtype, op);
        double t1 = now();
        batches_add(&times, i, t1 - t0 - clock_cost);
        t0 = t1;
    }
    *secondsp = batches_median(&times);
    rc = 0;
out_with_buffers:
    free(a);
    free(b);
    free(dst);
    return rc;
}
