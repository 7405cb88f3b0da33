/* What every C test program shares: a CHECK that aborts the whole MPI job
 * (never a hang), and KUPL-style out-of-band callbacks over MPI, as a user's
 * program would write them. Include after kupl.h (and kpccl.h if used). */
#ifndef TEST_MPI_OOB_H
#define TEST_MPI_OOB_H

#include <mpi.h>
#include <stdio.h>

static int world_rank;

#define CHECK(cond)                                                                   \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "rank %d: check failed at line %d: %s\n", world_rank,     \
                    __LINE__, #cond);                                                 \
            MPI_Abort(MPI_COMM_WORLD, 1);                                             \
        }                                                                             \
    } while (0)

/* group: a pointer to the MPI_Comm. */
static int oob_allgather(const void *sendbuf, void *recvbuf, int size, void *group,
                         kupl_shm_datatype_t datatype)
{
    MPI_Comm comm = *(MPI_Comm *)group;
    switch (datatype) {
    case KUPL_SHM_DATATYPE_CHAR:
        return MPI_Allgather(sendbuf, size, MPI_CHAR, recvbuf, size, MPI_CHAR, comm);
    case KUPL_SHM_DATATYPE_INT:
        return MPI_Allgather(sendbuf, size, MPI_INT, recvbuf, size, MPI_INT, comm);
    case KUPL_SHM_DATATYPE_LONG:
        return MPI_Allgather(sendbuf, size, MPI_LONG, recvbuf, size, MPI_LONG, comm);
    case KUPL_SHM_DATATYPE_FLOAT:
        return MPI_Allgather(sendbuf, size, MPI_FLOAT, recvbuf, size, MPI_FLOAT, comm);
    case KUPL_SHM_DATATYPE_DOUBLE:
        return MPI_Allgather(sendbuf, size, MPI_DOUBLE, recvbuf, size, MPI_DOUBLE, comm);
    }
    return KUPL_ERROR;
}

static int oob_barrier(void *group)
{
    return MPI_Barrier(*(MPI_Comm *)group);
}

#ifdef SHMTOPO_KPCCL_H
/* The same allgather under the former prefix (same datatype values). */
__attribute__((unused)) static int kpccl_oob_allgather(const void *sendbuf, void *recvbuf, int size, void *group,
                               kpccl_shm_datatype_t datatype)
{
    return oob_allgather(sendbuf, recvbuf, size, group, (kupl_shm_datatype_t)datatype);
}
#endif

#endif /* TEST_MPI_OOB_H */
