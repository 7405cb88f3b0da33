/* KUPL persistent collectives: requests made once and started many times.
 * Allreduce (sum of ints and of doubles, max of longs, in place) with new
 * inputs before every start, bcast from every root, alltoall of ints; buffers
 * both from malloc and from a window, as the original requires. Each result
 * is checked against the value computed here. The same allreduce is run once
 * through the KPCCL prefix, and a few bad calls check that they are refused. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kpccl.h"
#include "kupl.h"
#include "mpi_oob.h"

#define STARTS 5
#define COUNT 1000
#define BIG 200000 /* doubles: more than one pass through the scratch buffers */

/* Rank r's input element i at start s. */
static int int_input(int s, int r, int i) { return (s + 1) * (r + 1) + i % 7 - 3 * s; }
static double double_input(int s, int r, int i) { return 0.5 * (r + 1) + 0.25 * s + (i % 5); }

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int n;
    MPI_Comm comm = MPI_COMM_WORLD;
    MPI_Comm_rank(comm, &world_rank);
    MPI_Comm_size(comm, &n);
    const int me = world_rank;

    kupl_shm_oob_cb_t cbs = {oob_allgather, oob_barrier};
    kupl_shm_comm_h kc;
    CHECK(kupl_shm_comm_create(n, me, getpid(), &cbs, (void *)&comm, &kc) == KUPL_OK);

    /* Allreduce sum of ints, buffers in a window. */
    kupl_shm_win_h win;
    int *ibuf;
    CHECK(kupl_shm_win_alloc(2 * COUNT * sizeof(int), kc, (void **)&ibuf, &win) == KUPL_OK);
    int *isend = ibuf, *irecv = ibuf + COUNT;
    kupl_shm_request_h ireq;
    CHECK(kupl_shm_allreduce_init(isend, irecv, COUNT, KUPL_SHM_DATATYPE_INT,
                                  KUPL_SHM_REDUCE_OP_SUM, kc, &ireq) == KUPL_OK);

    /* Allreduce sum of doubles, malloc'd, large. */
    double *dsend = malloc(BIG * sizeof(double)), *drecv = malloc(BIG * sizeof(double));
    CHECK(dsend && drecv);
    kupl_shm_request_h dreq;
    CHECK(kupl_shm_allreduce_init(dsend, drecv, BIG, KUPL_SHM_DATATYPE_DOUBLE,
                                  KUPL_SHM_REDUCE_OP_SUM, kc, &dreq) == KUPL_OK);

    /* Allreduce max of longs, in place. */
    long lbuf[COUNT];
    kupl_shm_request_h lreq;
    CHECK(kupl_shm_allreduce_init(lbuf, lbuf, COUNT, KUPL_SHM_DATATYPE_LONG,
                                  KUPL_SHM_REDUCE_OP_MAX, kc, &lreq) == KUPL_OK);

    for (int s = 0; s < STARTS; s++) {
        for (int i = 0; i < COUNT; i++) {
            isend[i] = int_input(s, me, i);
            irecv[i] = -1;
            lbuf[i] = (long)((me * 31 + i * 17 + s * 5) % (n + 11)) << 33;
        }
        for (int i = 0; i < BIG; i++) {
            dsend[i] = double_input(s, me, i);
            drecv[i] = -1;
        }
        CHECK(kupl_shm_request_start(ireq) == KUPL_OK);
        CHECK(kupl_shm_request_wait(ireq) == KUPL_OK);
        CHECK(kupl_shm_request_start(dreq) == KUPL_OK);
        CHECK(kupl_shm_request_wait(dreq) == KUPL_OK);
        CHECK(kupl_shm_request_start(lreq) == KUPL_OK);
        CHECK(kupl_shm_request_wait(lreq) == KUPL_OK);
        for (int i = 0; i < COUNT; i++) {
            int isum = 0;
            long lmax = 0;
            for (int r = 0; r < n; r++) {
                isum += int_input(s, r, i);
                long v = (long)((r * 31 + i * 17 + s * 5) % (n + 11)) << 33;
                lmax = v > lmax ? v : lmax;
            }
            CHECK(irecv[i] == isum);
            CHECK(isend[i] == int_input(s, me, i)); /* input untouched */
            CHECK(lbuf[i] == lmax);
        }
        for (int i = 0; i < BIG; i++) {
            double dsum = 0;
            for (int r = 0; r < n; r++)
                dsum += double_input(s, r, i);
            CHECK(drecv[i] == dsum); /* exact: multiples of 1/4, small */
        }
    }
    CHECK(kupl_shm_request_free(ireq) == KUPL_OK);
    CHECK(kupl_shm_request_free(dreq) == KUPL_OK);
    CHECK(kupl_shm_request_free(lreq) == KUPL_OK);

    /* Bcast from every root, twice each, with fresh data each time. */
    float *fbuf = malloc(COUNT * sizeof(float));
    CHECK(fbuf);
    for (int root = 0; root < n; root++) {
        kupl_shm_request_h breq;
        CHECK(kupl_shm_bcast_init(fbuf, COUNT, KUPL_SHM_DATATYPE_FLOAT, root, kc, &breq) ==
              KUPL_OK);
        for (int s = 0; s < 2; s++) {
            for (int i = 0; i < COUNT; i++)
                fbuf[i] = me == root ? (float)(root * 1000 + s * 100 + i % 50) : -1.0f;
            CHECK(kupl_shm_request_start(breq) == KUPL_OK);
            CHECK(kupl_shm_request_wait(breq) == KUPL_OK);
            for (int i = 0; i < COUNT; i++)
                CHECK(fbuf[i] == (float)(root * 1000 + s * 100 + i % 50));
        }
        CHECK(kupl_shm_request_free(breq) == KUPL_OK);
    }

    /* Alltoall of ints (block per rank), send buffer in a window. */
    kupl_shm_win_h awin;
    int *asend;
    CHECK(kupl_shm_win_alloc((size_t)n * COUNT * sizeof(int), kc, (void **)&asend, &awin) ==
          KUPL_OK);
    int *arecv = malloc((size_t)n * COUNT * sizeof(int));
    CHECK(arecv);
    kupl_shm_request_h areq;
    CHECK(kupl_shm_alltoall_init(asend, COUNT, KUPL_SHM_DATATYPE_INT, arecv, COUNT,
                                 KUPL_SHM_DATATYPE_INT, kc, &areq) == KUPL_OK);
    for (int s = 0; s < 3; s++) {
        for (int p = 0; p < n; p++)
            for (int i = 0; i < COUNT; i++) {
                asend[p * COUNT + i] = s * 1000000 + me * 10000 + p * 1000 + i % 1000;
                arecv[p * COUNT + i] = -1;
            }
        CHECK(kupl_shm_request_start(areq) == KUPL_OK);
        CHECK(kupl_shm_request_wait(areq) == KUPL_OK);
        for (int p = 0; p < n; p++)
            for (int i = 0; i < COUNT; i++)
                CHECK(arecv[p * COUNT + i] == s * 1000000 + p * 10000 + me * 1000 + i % 1000);
    }
    CHECK(kupl_shm_request_free(areq) == KUPL_OK);

    /* Bad calls are refused locally, each with a message. */
    kupl_shm_request_h bad;
    CHECK(kupl_shm_bcast_init(fbuf, COUNT, KUPL_SHM_DATATYPE_FLOAT, n, kc, &bad) == KUPL_ERROR);
    CHECK(kupl_shm_alltoall_init(asend, COUNT, KUPL_SHM_DATATYPE_INT, arecv, COUNT + 1,
                                 KUPL_SHM_DATATYPE_INT, kc, &bad) == KUPL_ERROR);
    CHECK(kupl_shm_allreduce_init(dsend, drecv, COUNT, KUPL_SHM_DATATYPE_DOUBLE,
                                  KUPL_SHM_REDUCE_OP_BXOR, kc, &bad) == KUPL_ERROR);
    CHECK(kupl_shm_allreduce_init(NULL, drecv, COUNT, KUPL_SHM_DATATYPE_DOUBLE,
                                  KUPL_SHM_REDUCE_OP_SUM, kc, &bad) == KUPL_ERROR);
    CHECK(kupl_shm_allreduce_init(dsend, drecv, COUNT, (kupl_shm_datatype_t)42,
                                  KUPL_SHM_REDUCE_OP_SUM, kc, &bad) == KUPL_ERROR);
    CHECK(kupl_shm_request_start(NULL) == KUPL_ERROR);

    CHECK(kupl_shm_win_free(awin) == KUPL_OK);
    CHECK(kupl_shm_win_free(win) == KUPL_OK);
    CHECK(kupl_shm_comm_destroy(kc) == KUPL_OK);

    /* The same through the KPCCL prefix: min of chars. */
    kpccl_shm_oob_cb_t kcbs = {kpccl_oob_allgather, oob_barrier};
    kpccl_shm_comm_h pc;
    CHECK(kpccl_shm_comm_create(n, me, getpid(), &kcbs, (void *)&comm, &pc) == KPCCL_OK);
    signed char csend[64], crecv[64];
    kpccl_shm_request_h creq;
    CHECK(kpccl_shm_allreduce_init(csend, crecv, 64, KPCCL_SHM_DATATYPE_CHAR,
                                   KPCCL_SHM_REDUCE_OP_MIN, pc, &creq) == KPCCL_OK);
    for (int s = 0; s < 2; s++) {
        for (int i = 0; i < 64; i++)
            csend[i] = (signed char)(i - 32 - me - s);
        CHECK(kpccl_shm_request_start(creq) == KPCCL_OK);
        CHECK(kpccl_shm_request_wait(creq) == KPCCL_OK);
        for (int i = 0; i < 64; i++)
            CHECK(crecv[i] == (signed char)(i - 32 - (n - 1) - s));
    }
    CHECK(kpccl_shm_request_free(creq) == KPCCL_OK);
    CHECK(kpccl_shm_comm_destroy(pc) == KPCCL_OK);

    free(dsend);
    free(drecv);
    free(fbuf);
    free(arecv);
    MPI_Barrier(comm);
    if (me == 0)
        printf("kupl persistent ok: allreduce, bcast, alltoall on %d ranks\n", n);
    MPI_Finalize();
    return 0;
}
