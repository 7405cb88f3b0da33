/* The same program under KUPL's former name, KPCCL: kpccl_shm_* calls and
 * KPCCL_* constants. It includes kupl.h too, to show both prefixes can live in
 * one program. Every rank writes into rank 0's segment; after a fence rank 0
 * sums what arrived and every rank checks the sum. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "kpccl.h"
#include "kupl.h"
#include "mpi_oob.h"

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int world_size;
    MPI_Comm comm = MPI_COMM_WORLD;
    MPI_Comm_rank(comm, &world_rank);
    MPI_Comm_size(comm, &world_size);
    if (argc > 1)
        setenv("KPCCL_SHM_TYPE", argv[1], 1);

    kpccl_shm_oob_cb_t cbs;
    kpccl_shm_oob_cb_h cbs_h = &cbs;
    cbs_h->oob_allgather = kpccl_oob_allgather;
    cbs_h->oob_barrier = oob_barrier;
    kpccl_shm_comm_h kcomm;
    CHECK(kpccl_shm_comm_create(world_size, world_rank, getpid(), cbs_h, (void *)&comm, &kcomm) ==
          KPCCL_OK);
    int size;
    CHECK(kpccl_shm_comm_size(kcomm, &size) == KPCCL_OK && size == world_size);

    kpccl_shm_win_h win;
    double *local;
    CHECK(kpccl_shm_win_alloc((size_t)(world_size + 1) * sizeof(double), kcomm, (void **)&local,
                              &win) == KPCCL_OK);
    double *root;
    CHECK(kpccl_shm_win_query(win, 0, (void **)&root) == KPCCL_OK);
    root[win->rank] = 0.5 * (win->rank + 1);
    CHECK(kpccl_shm_fence(win) == KPCCL_OK);
    if (win->rank == 0) {
        double sum = 0;
        for (int r = 0; r < world_size; r++)
            sum += local[r];
        local[world_size] = sum;
    }
    CHECK(kpccl_shm_fence(win) == KPCCL_OK);
    double expect = 0.25 * world_size * (world_size + 1);
    CHECK(root[world_size] == expect);
    CHECK(kpccl_shm_win_free(win) == KPCCL_OK);
    CHECK(kpccl_shm_comm_destroy(kcomm) == KPCCL_OK);
    MPI_Barrier(comm);
    if (world_rank == 0)
        printf("kpccl window ok: sum %g on %d ranks\n", expect, world_size);
    MPI_Finalize();
    return 0;
}
