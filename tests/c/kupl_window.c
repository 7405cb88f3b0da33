/* KUPL-style program: a window per rank; every rank writes its slot of rank
 * 0's segment and of its own, fences, and checks what everybody wrote.
 * argv[1], if given, becomes KUPL_SHM_TYPE (tests the fallback warning). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

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
        setenv("KUPL_SHM_TYPE", argv[1], 1);

    kupl_shm_oob_cb_t oob_cbs;
    kupl_shm_oob_cb_h oob_cbs_h = &oob_cbs;
    oob_cbs_h->oob_allgather = oob_allgather;
    oob_cbs_h->oob_barrier = oob_barrier;
    kupl_shm_comm_h kupl_comm;
    CHECK(kupl_shm_comm_create(world_size, world_rank, getpid(), oob_cbs_h, (void *)&comm,
                               &kupl_comm) == KUPL_OK);
    int rank = -1, size = -1;
    CHECK(kupl_shm_comm_rank(kupl_comm, &rank) == KUPL_OK && rank == world_rank);
    CHECK(kupl_shm_comm_size(kupl_comm, &size) == KUPL_OK && size == world_size);

    kupl_shm_win_h win;
    int *local;
    /* slots [0, size): written by every rank into rank 0's segment;
     * [size, 2 size): each rank's own slot in its own segment */
    size_t bytes = 2 * (size_t)world_size * sizeof(int);
    CHECK(kupl_shm_win_alloc(bytes, kupl_comm, (void **)&local, &win) == KUPL_OK);
    CHECK(win->rank == world_rank);
    for (int i = 0; i < 2 * world_size; i++)
        CHECK(local[i] == 0); /* zero-filled */
    CHECK(kupl_shm_fence(win) == KUPL_OK); /* everyone checked before anyone writes */

    void *mine;
    CHECK(kupl_shm_win_query(win, world_rank, &mine) == KUPL_OK && mine == (void *)local);
    int *root;
    CHECK(kupl_shm_win_query(win, 0, (void **)&root) == KUPL_OK);
    root[world_rank] = 100 + world_rank;
    local[world_size + world_rank] = 200 + world_rank;
    CHECK(kupl_shm_fence(win) == KUPL_OK);

    for (int r = 0; r < world_size; r++) {
        CHECK(root[r] == 100 + r);
        int *theirs;
        CHECK(kupl_shm_win_query(win, r, (void **)&theirs) == KUPL_OK);
        CHECK(theirs[world_size + r] == 200 + r);
    }
    /* Errors are reported, not ignored. */
    void *nowhere;
    CHECK(kupl_shm_win_query(win, world_size, &nowhere) == KUPL_ERROR);
    CHECK(kupl_shm_peer_fence(win, world_rank) == KUPL_ERROR);
    CHECK(kupl_shm_fence(NULL) == KUPL_ERROR);

    CHECK(kupl_shm_win_free(win) == KUPL_OK);
    CHECK(kupl_shm_comm_destroy(kupl_comm) == KUPL_OK);
    printf("rank %d: window ok\n", world_rank);
    MPI_Barrier(comm);
    if (world_rank == 0)
        printf("kupl window ok on %d ranks\n", world_size);
    MPI_Finalize();
    return 0;
}
