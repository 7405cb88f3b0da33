/* kupl_shm_attach / kupl_shm_detach: every rank attaches a range of every
 * other rank's part of a window by the owner's address and pid (what the
 * owner sends it), reads what the owner wrote, writes through the attached
 * mapping and the owner sees it; the mapping outlives the window until
 * detached. Separate and contiguous windows, both prefixes. Addresses
 * outside any window (without XPMEM) and bad arguments are refused. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kpccl.h"
#include "kupl.h"
#include "mpi_oob.h"

#define PART (3 * 4096 + 100) /* spans pages, not a page multiple */
#define OFFSET 4000           /* attached range: [OFFSET, PART) of each part */

static int nranks;

typedef struct {
    uint64_t addr; /* the owner's address of its part */
    int64_t pid;
} where_t;

static unsigned char pattern(int r, size_t i) { return (unsigned char)(r * 13 + i * 5 + 3); }

static void attach_peers(kupl_shm_comm_h kc, int use_kpccl)
{
    kupl_shm_win_h win;
    unsigned char *mine;
    CHECK(kupl_shm_win_alloc(PART, kc, (void **)&mine, &win) == KUPL_OK);
    for (size_t i = 0; i < PART; i++)
        mine[i] = pattern(world_rank, i);
    where_t me = {(uint64_t)(uintptr_t)mine, getpid()};
    where_t *all = malloc((size_t)nranks * sizeof(*all));
    unsigned char **at = calloc((size_t)nranks, sizeof(*at));
    CHECK(all && at);
    MPI_Allgather(&me, sizeof(me), MPI_BYTE, all, sizeof(me), MPI_BYTE, MPI_COMM_WORLD);
    CHECK(kupl_shm_fence(win) == KUPL_OK);

    for (int r = 0; r < nranks; r++) {
        const size_t len = PART - OFFSET;
        if (use_kpccl) {
            kpccl_shm_addr_t addr = {(char *)(uintptr_t)all[r].addr + OFFSET, (int)all[r].pid, getpid()};
            at[r] = kpccl_shm_attach(addr, len);
        } else {
            kupl_shm_addr_t addr = {(char *)(uintptr_t)all[r].addr + OFFSET, (int)all[r].pid, getpid()};
            at[r] = kupl_shm_attach(addr, len);
        }
        CHECK(at[r] != NULL);
        void *part;
        CHECK(kupl_shm_win_query(win, r, &part) == KUPL_OK);
        CHECK(at[r] != (unsigned char *)part + OFFSET); /* a mapping of its own */
        for (size_t i = 0; i < len; i++)
            CHECK(at[r][i] == pattern(r, OFFSET + i));
    }
    CHECK(kupl_shm_fence(win) == KUPL_OK); /* everyone has read before anyone writes */
    for (int r = 0; r < nranks; r++)
        at[r][world_rank] = (unsigned char)(200 + world_rank); /* into r's part */
    CHECK(kupl_shm_fence(win) == KUPL_OK);
    for (int p = 0; p < nranks; p++)
        CHECK(mine[OFFSET + p] == (unsigned char)(200 + p)); /* what every peer wrote */
    CHECK(kupl_shm_fence(win) == KUPL_OK);
    CHECK(kupl_shm_win_free(win) == KUPL_OK);
    /* still readable after the window is gone, until detached */
    for (int r = 0; r < nranks; r++) {
        CHECK(at[r][nranks + 1] == pattern(r, OFFSET + nranks + 1));
        CHECK(at[r][0] == 200); /* rank 0's mark */
        if (use_kpccl)
            kpccl_shm_detach(at[r]);
        else
            kupl_shm_detach(at[r]);
    }
    free(all);
    free(at);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm comm = MPI_COMM_WORLD;
    MPI_Comm_rank(comm, &world_rank);
    MPI_Comm_size(comm, &nranks);

    kupl_shm_oob_cb_t cbs = {oob_allgather, oob_barrier};
    kupl_shm_comm_h kc;
    CHECK(kupl_shm_comm_create(nranks, world_rank, getpid(), &cbs, &comm, &kc) == KUPL_OK);
    attach_peers(kc, 0);
    CHECK(kupl_shm_info_set(KUPL_SHM_INFO_IS_CONTIG, 1) == KUPL_OK);
    attach_peers(kc, 1);
    CHECK(kupl_shm_info_set(KUPL_SHM_INFO_IS_CONTIG, 0) == KUPL_OK);

    /* refused: outside every window (when XPMEM cannot help), bad arguments */
    static char private_memory[64];
    kupl_shm_addr_t addr = {private_memory, getpid(), getpid()};
    void *p = kupl_shm_attach(addr, sizeof(private_memory));
    if (access("/dev/xpmem", F_OK) != 0)
        CHECK(p == NULL);
    else if (p)
        kupl_shm_detach(p);
    kupl_shm_win_h win;
    char *mine;
    CHECK(kupl_shm_win_alloc(100, kc, (void **)&mine, &win) == KUPL_OK);
    kupl_shm_addr_t past = {mine + 50, getpid(), getpid()};
    if (access("/dev/xpmem", F_OK) != 0)
        CHECK(kupl_shm_attach(past, 51) == NULL); /* runs past the part */
    kupl_shm_addr_t bad[] = {
        {NULL, getpid(), getpid()},     /* no address */
        {mine, 0, getpid()},            /* no pid */
        {mine, getpid(), getpid() + 1}, /* dst_pid is not this process */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        CHECK(kupl_shm_attach(bad[i], 10) == NULL);
    kupl_shm_addr_t ok = {mine, getpid(), getpid()};
    CHECK(kupl_shm_attach(ok, 0) == NULL); /* size 0 */
    kupl_shm_detach(mine);                 /* not attached: a message, nothing else */
    kupl_shm_detach(NULL);
    CHECK(kupl_shm_win_free(win) == KUPL_OK);
    CHECK(kupl_shm_comm_destroy(kc) == KUPL_OK);
    MPI_Barrier(comm);
    if (world_rank == 0)
        printf("kupl attach ok on %d ranks\n", nranks);
    MPI_Finalize();
    return 0;
}
