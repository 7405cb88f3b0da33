/* The C example of the Kunpeng HPC kit's developer manual, page kpccl_shm_peer_fence
 * (shared/seeds/002_2fe00b51c3cb18a6.txt), as printed. Only the manual's typos are fixed:
 * a full-width comma in a parameter list, `I + 1` for `i + 1`, and the
 * missing MPI_Init / MPI_Finalize (marked "added"). */
#include <stdio.h>
#include <mpi.h>
#include "kpccl.h"
int oob_allgather_callback(const void *sendbuf, void *recvbuf, int size, void *group, kpccl_shm_datatype_t datatype)
{
switch (datatype) {
case KPCCL_SHM_DATATYPE_CHAR:
return MPI_Allgather(sendbuf, size, MPI_CHAR, recvbuf, size, MPI_CHAR, (MPI_Comm)group);
case KPCCL_SHM_DATATYPE_INT:
return MPI_Allgather(sendbuf, size, MPI_INT, recvbuf, size, MPI_INT, (MPI_Comm)group);
case KPCCL_SHM_DATATYPE_LONG:
return MPI_Allgather(sendbuf, size, MPI_LONG, recvbuf, size, MPI_LONG, (MPI_Comm)group);
case KPCCL_SHM_DATATYPE_FLOAT:
return MPI_Allgather(sendbuf, size, MPI_FLOAT, recvbuf, size, MPI_FLOAT, (MPI_Comm)group);
case KPCCL_SHM_DATATYPE_DOUBLE:
return MPI_Allgather(sendbuf, size, MPI_DOUBLE, recvbuf, size, MPI_DOUBLE, (MPI_Comm)group);
default:
kpccl_error("not support datatype");
return KPCCL_ERROR;
}
}
int
oob_barrier_callback(
void
*
group)
{
return MPI_Barrier((MPI_Comm)group);
}
int main()
{
MPI_Init(NULL, NULL); /* added */
int myid, numprocs;
MPI_Comm comm = MPI_COMM_WORLD;
MPI_Comm_size(comm, &numprocs);
MPI_Comm_rank(comm, &myid);
kpccl_shm_oob_cb_t oob_cbs;
kpccl_shm_oob_cb_h oob_cbs_h = &oob_cbs;
oob_cbs_h->oob_allgather = oob_allgather_callback;
oob_cbs_h->oob_barrier = oob_barrier_callback;
kpccl_shm_comm_h kpccl_comm;
kpccl_shm_comm_create(numprocs, myid, myid, oob_cbs_h, (void *)comm, &kpccl_comm);
kpccl_shm_win_h win;
void *baseptr;
kpccl_shm_win_alloc(65536, kpccl_comm, &baseptr, &win);
MPI_Barrier(comm);
if (numprocs == 1) {
kpccl_shm_win_free(win);
kpccl_shm_comm_destroy(kpccl_comm);
MPI_Finalize(); /* added */
return 0;
}
for (int i = 0; i < numprocs; i++) {
for (int j = 1; j < numprocs; j++) {
if (win->rank == 0) {
kpccl_shm_peer_fence
(win, j);
}
}
for (int j = 1; j < numprocs; j++) {
if (win->rank == j) {
kpccl_shm_peer_fence
(win, 0);
}
}
}
MPI_Barrier(comm);
kpccl_shm_win_free(win);
kpccl_shm_comm_destroy(kpccl_comm);
MPI_Finalize(); /* added */
}
