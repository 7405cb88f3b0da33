/* Contiguous windows: after kupl_shm_info_set(KUPL_SHM_INFO_IS_CONTIG, 1)
 * every window lays all ranks' parts back to back in one segment, rank r's
 * part right after rank r-1's, unrounded (only the segment is page-rounded,
 * as in KUPL). Checked for sizes that are and are not page multiples and for
 * sizes that differ between ranks: the addresses win_query gives, that one
 * array through rank 0's part reaches every part, zero fill, and that
 * setting 0 goes back to a segment per rank. Bad flags or values are
 * refused, and ranks that disagree on the setting fail win_alloc on all. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "kupl.h"
#include "mpi_oob.h"

static int nranks;

/* Allocate with rank r's part sizes[r] bytes and check the layout. */
static void check_layout(kupl_shm_comm_h comm, const size_t *sizes)
{
    kupl_shm_win_h win;
    unsigned char *mine;
    CHECK(kupl_shm_win_alloc(sizes[world_rank], comm, (void **)&mine, &win) == KUPL_OK);
    unsigned char *base0;
    CHECK(kupl_shm_win_query(win, 0, (void **)&base0) == KUPL_OK);
    size_t offset = 0, total = 0;
    for (int r = 0; r < nranks; r++) {
        unsigned char *part;
        CHECK(kupl_shm_win_query(win, r, (void **)&part) == KUPL_OK);
        CHECK(part == base0 + offset); /* back to back, no rounding */
        if (r == world_rank)
            CHECK(part == mine);
        offset += sizes[r];
    }
    total = offset;
    for (size_t i = 0; i < sizes[world_rank]; i++) {
        CHECK(mine[i] == 0); /* zero-filled */
        mine[i] = (unsigned char)(world_rank * 31 + i * 7 + 1);
    }
    CHECK(kupl_shm_fence(win) == KUPL_OK);
    /* the whole window is one array starting at rank 0's part */
    size_t i = 0;
    for (int r = 0; r < nranks; r++)
        for (size_t j = 0; j < sizes[r]; j++, i++)
            CHECK(base0[i] == (unsigned char)(r * 31 + j * 7 + 1));
    CHECK(i == total);
    CHECK(kupl_shm_fence(win) == KUPL_OK);
    CHECK(kupl_shm_win_free(win) == KUPL_OK);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm comm = MPI_COMM_WORLD;
    MPI_Comm_rank(comm, &world_rank);
    MPI_Comm_size(comm, &nranks);

    /* bad settings, refused locally and changing nothing */
    CHECK(kupl_shm_info_set((kupl_info_flag_t)1, 1) == KUPL_ERROR);
    CHECK(kupl_shm_info_set((kupl_info_flag_t)-1, 0) == KUPL_ERROR);
    CHECK(kupl_shm_info_set(KUPL_SHM_INFO_IS_CONTIG, 2) == KUPL_ERROR);
    CHECK(kupl_shm_info_set(KUPL_SHM_INFO_IS_CONTIG, UINT32_MAX) == KUPL_ERROR);

    kupl_shm_oob_cb_t cbs = {oob_allgather, oob_barrier};
    kupl_shm_comm_h kc;
    CHECK(kupl_shm_comm_create(nranks, world_rank, getpid(), &cbs, &comm, &kc) == KUPL_OK);
    CHECK(kupl_shm_info_set(KUPL_SHM_INFO_IS_CONTIG, 1) == KUPL_OK);

    const size_t equal[] = {1, 4, 256, 1000, 4095, 4096, 4097, 65536, 0};
    size_t *sizes = malloc((size_t)nranks * sizeof(*sizes));
    CHECK(sizes != NULL);
    for (size_t k = 0; k < sizeof(equal) / sizeof(equal[0]); k++) {
        for (int r = 0; r < nranks; r++)
            sizes[r] = equal[k];
        check_layout(kc, sizes); /* rank r at base0 + r * size */
    }
    for (int r = 0; r < nranks; r++)
        sizes[r] = 100 + 37 * (size_t)r + (r == 1 ? 5000 : 0);
    check_layout(kc, sizes); /* prefix sums of uneven sizes */
    for (int r = 0; r < nranks; r++)
        sizes[r] = r % 2 ? 0 : 12;
    check_layout(kc, sizes); /* empty parts in between */

    /* back to one segment per rank: parts are no longer adjacent */
    CHECK(kupl_shm_info_set(KUPL_SHM_INFO_IS_CONTIG, 0) == KUPL_OK);
    kupl_shm_win_h win;
    char *mine, *base0, *base1;
    CHECK(kupl_shm_win_alloc(256, kc, (void **)&mine, &win) == KUPL_OK);
    if (nranks > 1) {
        CHECK(kupl_shm_win_query(win, 0, (void **)&base0) == KUPL_OK);
        CHECK(kupl_shm_win_query(win, 1, (void **)&base1) == KUPL_OK);
        CHECK(base1 != base0 + 256);
    }
    CHECK(kupl_shm_win_free(win) == KUPL_OK);

    /* ranks that disagree: the allocation fails on every rank, nobody waits */
    if (nranks > 1) {
        CHECK(kupl_shm_info_set(KUPL_SHM_INFO_IS_CONTIG, world_rank == 0) == KUPL_OK);
        CHECK(kupl_shm_win_alloc(64, kc, (void **)&mine, &win) == KUPL_ERROR);
        CHECK(kupl_shm_info_set(KUPL_SHM_INFO_IS_CONTIG, 1) == KUPL_OK);
        CHECK(kupl_shm_win_alloc(64, kc, (void **)&mine, &win) == KUPL_OK); /* the comm still works */
        CHECK(kupl_shm_win_free(win) == KUPL_OK);
    }
    CHECK(kupl_shm_comm_destroy(kc) == KUPL_OK);
    free(sizes);
    MPI_Barrier(comm);
    if (world_rank == 0)
        printf("kupl contig ok on %d ranks\n", nranks);
    MPI_Finalize();
    return 0;
}
