/* KUPL-style peer fences between rank 0 and every other rank, both ways:
 * rank p writes into its segment and peer-fences with 0, which then reads
 * it; then rank 0 writes into p's segment, they peer-fence, and p reads. The
 * writer sleeps first, so a reader let through early sees the old value. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "kupl.h"
#include "mpi_oob.h"

#define ROUNDS 20

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int world_size;
    MPI_Comm comm = MPI_COMM_WORLD;
    MPI_Comm_rank(comm, &world_rank);
    MPI_Comm_size(comm, &world_size);

    kupl_shm_oob_cb_t oob_cbs = {oob_allgather, oob_barrier};
    kupl_shm_comm_h kupl_comm;
    CHECK(kupl_shm_comm_create(world_size, world_rank, getpid(), &oob_cbs, (void *)&comm,
                               &kupl_comm) == KUPL_OK);
    kupl_shm_win_h win;
    volatile long *mine;
    CHECK(kupl_shm_win_alloc(2 * sizeof(long), kupl_comm, (void **)&mine, &win) == KUPL_OK);

    for (long round = 1; round <= ROUNDS; round++) {
        if (win->rank == 0) {
            for (int p = 1; p < world_size; p++) {
                volatile long *theirs;
                CHECK(kupl_shm_win_query(win, p, (void **)&theirs) == KUPL_OK);
                CHECK(kupl_shm_peer_fence(win, p) == KUPL_OK);
                CHECK(theirs[0] == round * 100 + p);    /* p wrote before its fence */
                usleep((unsigned)((round * 37 + p * 211) % 500));
                theirs[1] = round * 1000 + p;           /* p reads after the next one */
                CHECK(kupl_shm_peer_fence(win, p) == KUPL_OK);
            }
        } else {
            usleep((unsigned)((round * 53 + win->rank * 173) % 900));
            mine[0] = round * 100 + win->rank;
            CHECK(kupl_shm_peer_fence(win, 0) == KUPL_OK);
            CHECK(kupl_shm_peer_fence(win, 0) == KUPL_OK);
            CHECK(mine[1] == round * 1000 + win->rank);
        }
    }
    CHECK(kupl_shm_win_free(win) == KUPL_OK);
    CHECK(kupl_shm_comm_destroy(kupl_comm) == KUPL_OK);
    MPI_Barrier(comm);
    if (world_rank == 0)
        printf("kupl peer fence ok: %d rounds with %d peers\n", ROUNDS, world_size - 1);
    MPI_Finalize();
    return 0;
}
