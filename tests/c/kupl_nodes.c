/* The KUPL API on a job of several nodes, the way a program that runs on
 * more than one node uses it: the shm comm is made over each node's ranks
 * (MPI_Comm_split_type, MPI_COMM_TYPE_SHARED), never over MPI_COMM_WORLD.
 * A window with a slot per node rank, fenced and checked; a persistent
 * allreduce on the node, whose result the node leaders sum across nodes with
 * MPI and a persistent bcast hands back to the node; checked on every rank
 * against the sum over the world. Run by ./dev test's real-node pass. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "kupl.h"
#include "mpi_oob.h"

#define COUNT 1000

static long input(int r, int i) { return (long)(r + 1) * 1000 + i; }

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int world_size, node_rank, node_size;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    MPI_Comm node, leaders;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &node_rank);
    MPI_Comm_size(node, &node_size);
    MPI_Comm_split(MPI_COMM_WORLD, node_rank == 0 ? 0 : MPI_UNDEFINED, world_rank, &leaders);
    int nnodes = 0;
    if (node_rank == 0)
        MPI_Comm_size(leaders, &nnodes);
    MPI_Bcast(&nnodes, 1, MPI_INT, 0, node);

    kupl_shm_oob_cb_t cbs = {oob_allgather, oob_barrier};
    kupl_shm_comm_h kc;
    CHECK(kupl_shm_comm_create(node_size, node_rank, getpid(), &cbs, (void *)&node, &kc) == KUPL_OK);
    int size = -1;
    CHECK(kupl_shm_comm_size(kc, &size) == KUPL_OK && size == node_size);

    /* every node rank writes its world rank into node rank 0's part */
    kupl_shm_win_h win;
    int *local, *first;
    CHECK(kupl_shm_win_alloc(node_size * sizeof(int), kc, (void **)&local, &win) == KUPL_OK);
    CHECK(kupl_shm_win_query(win, 0, (void **)&first) == KUPL_OK);
    CHECK(kupl_shm_fence(win) == KUPL_OK);
    first[node_rank] = world_rank;
    CHECK(kupl_shm_fence(win) == KUPL_OK);
    int node_ranks[node_size];
    MPI_Allgather(&world_rank, 1, MPI_INT, node_ranks, 1, MPI_INT, node);
    for (int r = 0; r < node_size; r++)
        CHECK(first[r] == node_ranks[r]);
    CHECK(kupl_shm_fence(win) == KUPL_OK);

    /* the sum over the world: the node's, then the leaders' over MPI, then
     * handed back to the node */
    static long send[COUNT], recv[COUNT];
    for (int i = 0; i < COUNT; i++)
        send[i] = input(world_rank, i);
    kupl_shm_request_h sum, back;
    CHECK(kupl_shm_allreduce_init(send, recv, COUNT, KUPL_SHM_DATATYPE_LONG, KUPL_SHM_REDUCE_OP_SUM, kc,
                                  &sum) == KUPL_OK);
    CHECK(kupl_shm_bcast_init(recv, COUNT, KUPL_SHM_DATATYPE_LONG, 0, kc, &back) == KUPL_OK);
    for (int round = 0; round < 3; round++) {
        CHECK(kupl_shm_request_start(sum) == KUPL_OK);
        CHECK(kupl_shm_request_wait(sum) == KUPL_OK);
        if (node_rank == 0)
            MPI_Allreduce(MPI_IN_PLACE, recv, COUNT, MPI_LONG, MPI_SUM, leaders);
        CHECK(kupl_shm_request_start(back) == KUPL_OK);
        CHECK(kupl_shm_request_wait(back) == KUPL_OK);
        for (int i = 0; i < COUNT; i++) {
            long want = 0;
            for (int r = 0; r < world_size; r++)
                want += input(r, i);
            CHECK(recv[i] == want);
        }
    }
    CHECK(kupl_shm_request_free(sum) == KUPL_OK);
    CHECK(kupl_shm_request_free(back) == KUPL_OK);
    CHECK(kupl_shm_win_free(win) == KUPL_OK);
    CHECK(kupl_shm_comm_destroy(kc) == KUPL_OK);

    char host[256];
    gethostname(host, sizeof host);
    printf("kupl nodes ok: rank %d of %d, node rank %d of %d on %s, %d nodes\n", world_rank, world_size,
           node_rank, node_size, host, nnodes);
    if (leaders != MPI_COMM_NULL)
        MPI_Comm_free(&leaders);
    MPI_Comm_free(&node);
    MPI_Finalize();
    return 0;
}
