/* Random calls of the whole KUPL API, driven by test_kupl.py's property test
 * (in place of KUPL's fuzz tests, which need a fuzzing library): argv[1] a
 * seed, argv[2] the number of operations. Every rank draws the same sequence
 * from the seed, so collective calls match; when a drawn rank gets a bad
 * argument (a size, count, datatype, op, root or buffer), the call must fail
 * on every rank alike. Results are checked wherever they can be computed.
 * The property: no crash, no hang, every check holds. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kupl.h"
#include "mpi_oob.h"

#define MAXWIN 4

static int me, P;
static uint64_t state;
static MPI_Comm world = MPI_COMM_WORLD;
static kupl_shm_comm_h kc;
static int *pids; /* [r]: rank r's process */

typedef struct {
    kupl_shm_win_h win;
    size_t size;          /* every rank's part */
    uint64_t *owner;      /* [r]: rank r's address of its part */
} window_t;

static window_t wins[MAXWIN];
static int nwins;

/* splitmix64: the same on every rank */
static uint64_t next(void)
{
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static long rnd(long n) { return n > 0 ? (long)(next() % (uint64_t)n) : 0; }

/* The rank that gets a bad argument this time, or -1 (three times in four). */
static int bad_rank(void) { return rnd(4) == 0 ? (int)rnd(P) : -1; }


/* (Every rank draws the same numbers: nothing is drawn on one rank only.) */

/* Rank r's element i, small enough that every op is exact in every type. */
static long input(int r, long i, int op, uint64_t salt)
{
    if (op == KUPL_SHM_REDUCE_OP_PROD)
        return (long)((r + i + (long)salt) % 3) - 1 + ((r + i) % 2 ? 2 : 0); /* -1 .. 3 */
    return (long)((r * 7 + i * 3 + (long)salt) % 9) - 4;
}

static double get(const void *buf, int dtype, long i)
{
    switch (dtype) {
    case KUPL_SHM_DATATYPE_CHAR: return ((const int8_t *)buf)[i];
    case KUPL_SHM_DATATYPE_INT: return ((const int *)buf)[i];
    case KUPL_SHM_DATATYPE_LONG: return (double)((const long *)buf)[i];
    case KUPL_SHM_DATATYPE_FLOAT: return ((const float *)buf)[i];
    default: return ((const double *)buf)[i];
    }
}

static void put(void *buf, int dtype, long i, long v)
{
    switch (dtype) {
    case KUPL_SHM_DATATYPE_CHAR: ((int8_t *)buf)[i] = (int8_t)v; break;
    case KUPL_SHM_DATATYPE_INT: ((int *)buf)[i] = (int)v; break;
    case KUPL_SHM_DATATYPE_LONG: ((long *)buf)[i] = v; break;
    case KUPL_SHM_DATATYPE_FLOAT: ((float *)buf)[i] = (float)v; break;
    default: ((double *)buf)[i] = (double)v; break;
    }
}

static long combine(long a, long b, int op)
{
    switch (op) {
    case KUPL_SHM_REDUCE_OP_MAX: return a > b ? a : b;
    case KUPL_SHM_REDUCE_OP_MIN: return a < b ? a : b;
    case KUPL_SHM_REDUCE_OP_SUM: return a + b;
    case KUPL_SHM_REDUCE_OP_PROD: return a * b;
    case KUPL_SHM_REDUCE_OP_BAND: return a & b;
    case KUPL_SHM_REDUCE_OP_BOR: return a | b;
    default: return a ^ b;
    }
}

static void make_comm(void)
{
    kupl_shm_oob_cb_t cbs = {oob_allgather, oob_barrier};
    CHECK(kupl_shm_comm_create(P, me, getpid(), &cbs, &world, &kc) == KUPL_OK);
}

static void op_alloc(void)
{
    static const long choices[] = {0, 1, 4096, 100000, 2000000};
    size_t size = rnd(2) ? (size_t)choices[rnd(5)] : (size_t)rnd(70000);
    int bad = bad_rank();
    if (nwins == MAXWIN)
        return;
    kupl_shm_win_h win;
    void *base;
    int rc = kupl_shm_win_alloc(me == bad ? (size_t)-1 : size, kc, &base, &win);
    CHECK(rc == (bad >= 0 ? KUPL_ERROR : KUPL_OK));
    if (rc != KUPL_OK)
        return;
    window_t *w = &wins[nwins++];
    w->win = win;
    w->size = size;
    w->owner = malloc((size_t)P * sizeof(*w->owner));
    CHECK(w->owner != NULL);
    uint64_t mine = (uint64_t)(uintptr_t)base;
    MPI_Allgather(&mine, 1, MPI_UINT64_T, w->owner, 1, MPI_UINT64_T, world);
    for (size_t i = 0; i < size; i += 997)
        CHECK(((unsigned char *)base)[i] == 0);
}

static void op_free(void)
{
    if (!nwins)
        return;
    int k = (int)rnd(nwins);
    CHECK(kupl_shm_win_free(wins[k].win) == KUPL_OK);
    free(wins[k].owner);
    wins[k] = wins[--nwins];
}

static void op_query_and_fences(void)
{
    void *addr;
    if (!nwins) {
        CHECK(kupl_shm_win_query(NULL, 0, &addr) == KUPL_ERROR);
        CHECK(kupl_shm_fence(NULL) == KUPL_ERROR);
        return;
    }
    window_t *w = &wins[rnd(nwins)];
    int r = (int)rnd(P + 4) - 2;
    CHECK(kupl_shm_win_query(w->win, r, &addr) == (r >= 0 && r < P ? KUPL_OK : KUPL_ERROR));
    CHECK(kupl_shm_peer_fence(w->win, me) == KUPL_ERROR);
    CHECK(kupl_shm_peer_fence(w->win, (int)rnd(2) ? P : -1) == KUPL_ERROR);
    for (long i = rnd(4); i >= 0; i--)
        CHECK(kupl_shm_fence(w->win) == KUPL_OK);
    int partner = me ^ 1;
    long pairs = rnd(3);
    if (partner < P)
        for (long i = pairs; i >= 0; i--)
            CHECK(kupl_shm_peer_fence(w->win, partner) == KUPL_OK);
}

static void op_allreduce(void)
{
    int dtype = (int)rnd(5);
    int integer = dtype <= KUPL_SHM_DATATYPE_LONG;
    int op = (int)rnd(integer ? 7 : 4);
    long count = rnd(3) == 0 ? 0 : 1 + rnd(rnd(2) ? 40 : 30000);
    int bad = bad_rank(), how = (int)rnd(5), in_place = (int)rnd(2), starts = 1 + (int)rnd(2);
    uint64_t salt = next() % 1000;
    long negative = -1 - rnd(1000); /* drawn by every rank, used by the bad one */
    char *send = malloc((size_t)count * 8 + 8), *recv = in_place ? send : malloc((size_t)count * 8 + 8);
    CHECK(send && recv);
    int d = dtype, o = op;
    long c = count;
    const void *sb = send;
    void *rb = recv;
    if (me == bad) {
        switch (how) {
        case 0: d = 42; break;
        case 1: o = 99; break;
        case 2: c = negative; break;
        case 3: sb = NULL; c = count ? count : 1; break;
        default: d = KUPL_SHM_DATATYPE_DOUBLE; o = KUPL_SHM_REDUCE_OP_BXOR; break;
        }
    }
    kupl_shm_request_h req;
    int rc = kupl_shm_allreduce_init(sb, rb, (int)c, (kupl_shm_datatype_t)d, (kupl_shm_reduce_op_t)o, kc, &req);
    CHECK(rc == (bad >= 0 ? KUPL_ERROR : KUPL_OK));
    if (rc == KUPL_OK) {
        for (int s = 0; s < starts; s++) {
            for (long i = 0; i < count; i++)
                put(send, dtype, i, input(me, i, op, salt + (uint64_t)s));
            CHECK(kupl_shm_request_start(req) == KUPL_OK && kupl_shm_request_wait(req) == KUPL_OK);
            for (long i = 0; i < count; i++) {
                long v = input(0, i, op, salt + (uint64_t)s);
                for (int r = 1; r < P; r++)
                    v = combine(v, input(r, i, op, salt + (uint64_t)s), op);
                CHECK(get(recv, dtype, i) == (double)v);
            }
        }
        if (rnd(5))
            CHECK(kupl_shm_request_free(req) == KUPL_OK); /* else comm_destroy frees it */
    }
    if (!in_place)
        free(recv);
    free(send);
}

static void op_bcast(void)
{
    int dtype = (int)rnd(5), root = (int)rnd(P), bad = bad_rank();
    long count = rnd(4) == 0 ? 0 : 1 + rnd(50000);
    char *buf = malloc((size_t)count * 8 + 8);
    CHECK(buf != NULL);
    for (long i = 0; i < count; i++)
        put(buf, dtype, i, me == root ? (i % 50) - 25 : 99);
    kupl_shm_request_h req;
    int wrong = rnd(2) ? P + (int)rnd(5) : -1 - (int)rnd(5); /* drawn by every rank */
    int r = me == bad ? wrong : root;
    int rc = kupl_shm_bcast_init(buf, (int)count, (kupl_shm_datatype_t)dtype, r, kc, &req);
    CHECK(rc == (bad >= 0 ? KUPL_ERROR : KUPL_OK));
    if (rc == KUPL_OK) {
        CHECK(kupl_shm_request_start(req) == KUPL_OK);
        for (long i = 0; i < count; i++)
            CHECK(get(buf, dtype, i) == (double)((i % 50) - 25));
        CHECK(kupl_shm_request_free(req) == KUPL_OK);
    }
    free(buf);
}

static void op_alltoall(void)
{
    int dtype = (int)rnd(5), bad = bad_rank();
    long count = rnd(4) == 0 ? 0 : 1 + rnd(3000);
    const size_t n = (size_t)count * (size_t)P;
    char *send = malloc(n * 8 + 8), *recv = malloc(n * 8 + 8);
    CHECK(send && recv);
    for (int p = 0; p < P; p++)
        for (long i = 0; i < count; i++)
            put(send, dtype, p * count + i, (me * 5 + p * 3 + i) % 100);
    kupl_shm_request_h req;
    long rcount = me == bad ? count + 1 : count;
    int rc = kupl_shm_alltoall_init(send, (int)count, (kupl_shm_datatype_t)dtype, recv, (int)rcount,
                                    (kupl_shm_datatype_t)dtype, kc, &req);
    CHECK(rc == (bad >= 0 ? KUPL_ERROR : KUPL_OK));
    if (rc == KUPL_OK) {
        CHECK(kupl_shm_request_start(req) == KUPL_OK);
        for (int p = 0; p < P; p++)
            for (long i = 0; i < count; i++)
                CHECK(get(recv, dtype, p * count + i) == (double)((p * 5 + me * 3 + i) % 100));
        CHECK(kupl_shm_request_free(req) == KUPL_OK);
    }
    free(send);
    free(recv);
}

static void op_local_calls(void)
{
    /* info_set: the same drawn value on every rank (a disagreement would be
     * the program's error, tested elsewhere) */
    uint32_t value = (uint32_t)rnd(3);
    int flag = rnd(6) ? KUPL_SHM_INFO_IS_CONTIG : 1 + (int)rnd(100);
    int expect = flag == KUPL_SHM_INFO_IS_CONTIG && value <= 1 ? KUPL_OK : KUPL_ERROR;
    CHECK(kupl_shm_info_set((kupl_info_flag_t)flag, value) == expect);
    /* memcpy */
    size_t len = (size_t)rnd(20000);
    char *a = malloc(len + 1), *b = malloc(len + 1);
    CHECK(a && b);
    for (size_t i = 0; i < len; i++)
        a[i] = (char)(i * 11 + 1);
    CHECK(kupl_memcpy(b, a, len) == KUPL_OK && memcmp(a, b, len) == 0);
    CHECK(kupl_memcpy(NULL, a, len + 1) == KUPL_ERROR && kupl_memcpy(b, NULL, 1) == KUPL_ERROR);
    CHECK(kupl_memcpy(NULL, NULL, 0) == KUPL_OK);
    free(a);
    free(b);
    /* NULL and freed handles */
    int x;
    CHECK(kupl_shm_request_start(NULL) == KUPL_ERROR && kupl_shm_request_wait(NULL) == KUPL_ERROR);
    CHECK(kupl_shm_request_free(NULL) == KUPL_ERROR && kupl_shm_win_free(NULL) == KUPL_ERROR);
    CHECK(kupl_shm_comm_destroy(NULL) == KUPL_ERROR && kupl_shm_comm_rank(NULL, &x) == KUPL_ERROR);
    CHECK(kupl_shm_comm_size(kc, NULL) == KUPL_ERROR);
    kupl_shm_comm_h other;
    kupl_shm_oob_cb_t cbs = {oob_allgather, oob_barrier};
    CHECK(kupl_shm_comm_create((int)rnd(3) - 2, me, getpid(), &cbs, &world, &other) == KUPL_ERROR);
}

static void op_attach(void)
{
    if (!nwins)
        return;
    window_t *w = &wins[rnd(nwins)];
    int r = (int)rnd(P);
    void *part;
    CHECK(kupl_shm_win_query(w->win, r, &part) == KUPL_OK);
    int pid = pids[r];
    if (w->size == 0)
        return;
    size_t off = (size_t)rnd((long)w->size), len = 1 + (size_t)rnd((long)(w->size - off));
    kupl_shm_addr_t addr = {(char *)(uintptr_t)w->owner[r] + off, pid, getpid()};
    unsigned char *p = kupl_shm_attach(addr, len);
    CHECK(p != NULL);
    CHECK(p[0] == ((unsigned char *)part)[off] && p[len - 1] == ((unsigned char *)part)[off + len - 1]);
    kupl_shm_detach(p);
    if (access("/dev/xpmem", F_OK) != 0) {
        kupl_shm_addr_t past = {(char *)(uintptr_t)w->owner[r] + off, pid, getpid()};
        CHECK(kupl_shm_attach(past, w->size - off + 1 + (size_t)rnd(5)) == NULL);
    }
}

static void op_recreate(void)
{
    /* left windows and requests go with the comm */
    CHECK(kupl_shm_comm_destroy(kc) == KUPL_OK);
    for (int k = 0; k < nwins; k++)
        free(wins[k].owner);
    nwins = 0;
    make_comm();
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(world, &me);
    MPI_Comm_size(world, &P);
    world_rank = me;
    CHECK(argc == 3);
    state = strtoull(argv[1], NULL, 10);
    long ops = strtol(argv[2], NULL, 10);
    pids = malloc((size_t)P * sizeof(*pids));
    CHECK(pids != NULL);
    int mypid = getpid();
    MPI_Allgather(&mypid, 1, MPI_INT, pids, 1, MPI_INT, world);
    make_comm();
    void (*const table[])(void) = {op_alloc, op_alloc, op_free, op_query_and_fences, op_allreduce,
                                   op_allreduce, op_bcast, op_alltoall, op_local_calls, op_attach,
                                   op_recreate};
    for (long i = 0; i < ops; i++)
        table[rnd(sizeof(table) / sizeof(table[0]))]();
    CHECK(kupl_shm_comm_destroy(kc) == KUPL_OK);
    for (int k = 0; k < nwins; k++)
        free(wins[k].owner);
    free(pids);
    MPI_Barrier(world);
    if (me == 0)
        printf("kupl fuzz ok: %ld operations on %d ranks\n", ops, P);
    MPI_Finalize();
    return 0;
}
