/* kupl_shm_comm_destroy frees what the program left on the comm, as KUPL
 * does: windows (their memory is unmapped afterwards, which mincore tells)
 * and persistent requests (the heap in use comes back to where it was).
 * Windows are left the way KUPL's own tests leave them: allocated over the
 * handle of a live one. */
#include <errno.h>
#include <malloc.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kupl.h"
#include "mpi_oob.h"

#define REQUESTS 3000

static int nranks;

/* 1 while the page holding addr is mapped in this process. */
static int mapped(const void *addr)
{
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    unsigned char vec;
    void *start = (void *)((uintptr_t)addr / page * page);
    if (mincore(start, page, &vec) == 0)
        return 1;
    CHECK(errno == ENOMEM);
    return 0;
}

static kupl_shm_comm_h make_comm(MPI_Comm *group)
{
    kupl_shm_oob_cb_t cbs = {oob_allgather, oob_barrier};
    kupl_shm_comm_h kc;
    CHECK(kupl_shm_comm_create(nranks, world_rank, getpid(), &cbs, group, &kc) == KUPL_OK);
    return kc;
}

/* A comm with REQUESTS requests that are never freed. */
static void leave_requests(MPI_Comm *group, int requests)
{
    kupl_shm_comm_h kc = make_comm(group);
    static double send[4], recv[4];
    for (int i = 0; i < requests; i++) {
        kupl_shm_request_h req;
        if (i % 2)
            CHECK(kupl_shm_allreduce_init(send, recv, 4, KUPL_SHM_DATATYPE_DOUBLE, KUPL_SHM_REDUCE_OP_SUM,
                                          kc, &req) == KUPL_OK);
        else
            CHECK(kupl_shm_bcast_init(recv, 4, KUPL_SHM_DATATYPE_DOUBLE, 0, kc, &req) == KUPL_OK);
        if (i == 0) { /* one is used, to show it is a real one */
            CHECK(kupl_shm_request_start(req) == KUPL_OK);
        }
    }
    CHECK(kupl_shm_comm_destroy(kc) == KUPL_OK);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm comm = MPI_COMM_WORLD;
    MPI_Comm_rank(comm, &world_rank);
    MPI_Comm_size(comm, &nranks);

    /* Windows, contiguous and not: the first of each pair is overwritten. */
    for (uint32_t contig = 0; contig <= 1; contig++) {
        CHECK(kupl_shm_info_set(KUPL_SHM_INFO_IS_CONTIG, contig) == KUPL_OK);
        kupl_shm_comm_h kc = make_comm(&comm);
        kupl_shm_win_h win, kept;
        void *first, *second, *third;
        CHECK(kupl_shm_win_alloc(65536, kc, &first, &win) == KUPL_OK);
        CHECK(kupl_shm_win_alloc(0, kc, &second, &win) == KUPL_OK);
        CHECK(kupl_shm_win_free(win) == KUPL_OK);
        CHECK(kupl_shm_win_alloc(3 * 4096 + 5, kc, &third, &kept) == KUPL_OK);
        ((char *)first)[100] = 1;
        ((char *)third)[3 * 4096] = 1;
        CHECK(mapped(first) && mapped((char *)third + 3 * 4096));
        CHECK(kupl_shm_comm_destroy(kc) == KUPL_OK);
        CHECK(!mapped(first));
        CHECK(!mapped((char *)third + 3 * 4096));
    }
    CHECK(kupl_shm_info_set(KUPL_SHM_INFO_IS_CONTIG, 0) == KUPL_OK);

    /* Requests: a warm-up round, then the heap must not grow by what
     * REQUESTS requests take (about a hundred bytes each). */
    leave_requests(&comm, 10);
    struct mallinfo2 before = mallinfo2();
    leave_requests(&comm, REQUESTS);
    struct mallinfo2 after = mallinfo2();
    long grown = (long)after.uordblks - (long)before.uordblks;
    if (grown > REQUESTS * 16L) {
        fprintf(stderr, "rank %d: the heap grew by %ld bytes over a comm with %d requests left\n",
                world_rank, grown, REQUESTS);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Barrier(comm);
    if (world_rank == 0)
        printf("kupl destroy ok on %d ranks\n", nranks);
    MPI_Finalize();
    return 0;
}
