/* KUPL-style fence test that can fail: in every round each rank sleeps an
 * uneven time, records its arrival in its own segment, fences, and then
 * checks that every rank had arrived. A rank let through early would see a
 * peer's old round number. argv[1], if given, becomes
 * KUPL_SHM_FENCE_ALGORITHM (1 linear, 2 recursive doubling). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "kupl.h"
#include "mpi_oob.h"

#define ROUNDS 60

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int world_size;
    MPI_Comm comm = MPI_COMM_WORLD;
    MPI_Comm_rank(comm, &world_rank);
    MPI_Comm_size(comm, &world_size);
    if (argc > 1)
        setenv("KUPL_SHM_FENCE_ALGORITHM", argv[1], 1);

    kupl_shm_oob_cb_t oob_cbs = {oob_allgather, oob_barrier};
    kupl_shm_comm_h kupl_comm;
    CHECK(kupl_shm_comm_create(world_size, world_rank, getpid(), &oob_cbs, (void *)&comm,
                               &kupl_comm) == KUPL_OK);
    kupl_shm_win_h win;
    volatile long *arrived;
    if (kupl_shm_win_alloc(sizeof(long), kupl_comm, (void **)&arrived, &win) != KUPL_OK) {
        /* Fails on every rank alike (a bad KUPL_SHM_FENCE_ALGORITHM): leave
         * through MPI_Finalize, since after MPI_Abort MPICH's mpiexec may drop
         * the ranks' messages. */
        kupl_shm_comm_destroy(kupl_comm);
        MPI_Finalize();
        return 1;
    }
    volatile long **peers = calloc((size_t)world_size, sizeof(*peers));
    CHECK(peers != NULL);
    for (int r = 0; r < world_size; r++)
        CHECK(kupl_shm_win_query(win, r, (void **)&peers[r]) == KUPL_OK);

    for (long round = 1; round <= ROUNDS; round++) {
        /* A different rank is the slowest each round; others vary too. */
        int slow = (int)(round % world_size) == win->rank;
        usleep(slow ? 3000 : (unsigned)((win->rank * 397 + round * 131) % 700));
        *arrived = round;
        CHECK(kupl_shm_fence(win) == KUPL_OK);
        for (int r = 0; r < world_size; r++)
            if (peers[r][0] < round) {
                fprintf(stderr, "rank %d passed fence %ld before rank %d arrived\n",
                        win->rank, round, r);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
    }
    CHECK(kupl_shm_win_free(win) == KUPL_OK);
    CHECK(kupl_shm_comm_destroy(kupl_comm) == KUPL_OK);
    free(peers);
    MPI_Barrier(comm);
    if (world_rank == 0)
        printf("kupl fence ok: %d rounds on %d ranks\n", ROUNDS, world_size);
    MPI_Finalize();
    return 0;
}
