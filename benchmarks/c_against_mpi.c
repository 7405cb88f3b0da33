/* shmtopo's C API against the MPI library's own C calls, in one run: KUPL's
 * persistent allreduce (sum of doubles) and bcast (from rank 0), started
 * once per call, against MPI_Allreduce and MPI_Bcast on the same buffers;
 * KUPL's window fence against MPI_Win_fence on an MPI shared window.
 *
 *   mpicc -O2 benchmarks/c_against_mpi.c $(python -m shmtopo --cflags --libs)
 *   mpiexec -n 2 ./a.out [MAX_BYTES (16 MiB)] [BLOCKS (9)]
 *
 * Sizes from 8 B to MAX_BYTES (x8 up to 4 KiB, then x4). Each block times
 * every row both ways, one after the other (interleaved), for about 2 ms
 * each way; a figure is the median over the blocks of the slowest rank's
 * time per call, with the range. Rank 0 prints the rows. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kupl.h"

static int oob_allgather(const void *send, void *recv, int size, void *group, kupl_shm_datatype_t type)
{
    (void)type; /* the library passes bytes */
    return MPI_Allgather(send, size, MPI_CHAR, recv, size, MPI_CHAR, *(MPI_Comm *)group);
}

static int oob_barrier(void *group) { return MPI_Barrier(*(MPI_Comm *)group); }

#define MAX_BLOCKS 64

/* One row: the two ways of making the same call, timed in turn. */
struct row {
    const char *name;
    size_t bytes;
    kupl_shm_request_h request; /* the KUPL way; NULL for the fence row */
    int (*mpi)(struct row *);   /* the MPI way */
    double *send, *recv;
    int count;
    double ours[MAX_BLOCKS], theirs[MAX_BLOCKS];
};

static MPI_Win mpi_win;
static kupl_shm_win_h kupl_win;

static int mpi_allreduce(struct row *r)
{
    return MPI_Allreduce(r->send, r->recv, r->count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
}
static int mpi_bcast(struct row *r) { return MPI_Bcast(r->recv, r->count, MPI_DOUBLE, 0, MPI_COMM_WORLD); }
static int mpi_fence(struct row *r)
{
    (void)r;
    return MPI_Win_fence(0, mpi_win);
}

static int ours_once(struct row *r)
{
    return r->request ? kupl_shm_request_start(r->request) : kupl_shm_fence(kupl_win);
}

/* Seconds per call of the slowest rank, over `calls` calls. */
static double timed(struct row *r, int ours, int calls)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < calls; i++)
        if ((ours ? ours_once(r) : r->mpi(r)) != 0)
            MPI_Abort(MPI_COMM_WORLD, 2);
    double mine = (MPI_Wtime() - t0) / calls, slowest;
    MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return slowest;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n, double *lo, double *hi)
{
    double s[MAX_BLOCKS];
    memcpy(s, v, n * sizeof *s);
    qsort(s, n, sizeof *s, by_value);
    *lo = s[0];
    *hi = s[n - 1];
    return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    size_t max_bytes = argc > 1 ? strtoull(argv[1], NULL, 10) : 16u << 20;
    int blocks = argc > 2 ? atoi(argv[2]) : 9;
    if (blocks < 1 || blocks > MAX_BLOCKS || max_bytes < 8)
        MPI_Abort(MPI_COMM_WORLD, 1);
    int rank, size;
    MPI_Comm world = MPI_COMM_WORLD;
    MPI_Comm_rank(world, &rank);
    MPI_Comm_size(world, &size);
    kupl_shm_oob_cb_t cbs = {oob_allgather, oob_barrier};
    kupl_shm_comm_h comm;
    if (kupl_shm_comm_create(size, rank, getpid(), &cbs, &world, &comm) != KUPL_OK)
        MPI_Abort(world, 1);
    void *base;
    if (kupl_shm_win_alloc(64, comm, &base, &kupl_win) != KUPL_OK ||
        MPI_Win_allocate_shared(64, 1, MPI_INFO_NULL, world, &base, &mpi_win) != MPI_SUCCESS)
        MPI_Abort(world, 1);

    struct row rows[64];
    int nrows = 0;
    rows[nrows++] = (struct row){.name = "fence", .mpi = mpi_fence};
    for (size_t bytes = 8; bytes <= max_bytes; bytes *= bytes < 4096 ? 8 : 4) {
        for (int kind = 0; kind < 2; kind++) {
            struct row *r = &rows[nrows++];
            *r = (struct row){.name = kind ? "bcast" : "allreduce", .bytes = bytes, .count = (int)(bytes / 8)};
            r->send = malloc(bytes);
            r->recv = malloc(bytes);
            for (int i = 0; i < r->count; i++)
                r->send[i] = r->recv[i] = rank + i;
            int ok = kind ? kupl_shm_bcast_init(r->recv, r->count, KUPL_SHM_DATATYPE_DOUBLE, 0, comm, &r->request)
                          : kupl_shm_allreduce_init(r->send, r->recv, r->count, KUPL_SHM_DATATYPE_DOUBLE,
                                                    KUPL_SHM_REDUCE_OP_SUM, comm, &r->request);
            if (ok != KUPL_OK)
                MPI_Abort(world, 1);
            r->mpi = kind ? mpi_bcast : mpi_allreduce;
        }
    }
    for (int b = 0; b < blocks; b++) {
        for (int i = 0; i < nrows; i++) {
            struct row *r = &rows[i];
            int calls = r->bytes <= 4096 ? 2000 : r->bytes <= 65536 ? 400 : r->bytes <= (1u << 20) ? 40 : 6;
            r->ours[b] = timed(r, 1, calls);
            r->theirs[b] = timed(r, 0, calls);
        }
    }
    if (rank == 0) {
        char version[MPI_MAX_LIBRARY_VERSION_STRING];
        int length;
        MPI_Get_library_version(version, &length);
        version[strcspn(version, "\n,")] = 0;
        printf("%d ranks, %s; per call, median (min-max) of %d interleaved blocks, us\n", size, version, blocks);
        printf("%-10s %10s %26s %26s %8s\n", "call", "bytes", "shmtopo (KUPL API)", "MPI", "x MPI");
        for (int i = 0; i < nrows; i++) {
            struct row *r = &rows[i];
            double a_lo, a_hi, b_lo, b_hi;
            double a = median(r->ours, blocks, &a_lo, &a_hi), b = median(r->theirs, blocks, &b_lo, &b_hi);
            char ours[64], theirs[64];
            snprintf(ours, sizeof ours, "%.2f (%.2f-%.2f)", a * 1e6, a_lo * 1e6, a_hi * 1e6);
            snprintf(theirs, sizeof theirs, "%.2f (%.2f-%.2f)", b * 1e6, b_lo * 1e6, b_hi * 1e6);
            printf("%-10s %10zu %26s %26s %8.2f\n", r->name, r->bytes, ours, theirs, a / b);
        }
    }
    for (int i = 1; i < nrows; i++) {
        kupl_shm_request_free(rows[i].request);
        free(rows[i].send);
        free(rows[i].recv);
    }
    MPI_Win_free(&mpi_win);
    kupl_shm_win_free(kupl_win);
    kupl_shm_comm_destroy(comm);
    MPI_Finalize();
    return 0;
}
