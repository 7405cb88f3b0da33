/* Communicators: a group of processes on one node that reach each other
 * through out-of-band callbacks (MPI in practice) for set-up only; all
 * synchronisation afterwards goes through shared memory. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

#define MASK_WORDS 16 /* affinity masks for CPUs 0..1023 */

typedef struct comm_record {
    shmtopo_status_t status;
    int32_t size, rank, pid, pad;
    uint64_t starttime;
    uint64_t cpumask[MASK_WORDS];
    char host[64];
    char boot_id[40];
} comm_record_t;

int shmtopo_comm_allgather(shmtopo_comm_t *comm, const void *sendbuf, void *recvbuf,
                           size_t nbytes)
{
    if (!comm)
        return shmtopo_fail(EBADF, -1, "communicator is NULL or freed");
    /* A second, tiny exchange tells every rank whether the first one failed
     * anywhere, so a failing callback fails the call on all ranks instead of
     * leaving the others waiting in the next step. */
    int32_t failed = comm->oob.allgather(sendbuf, recvbuf, nbytes, comm->oob.group) != 0;
    int32_t *all = calloc((size_t)comm->size, sizeof(*all));
    if (!all)
        return shmtopo_fail(ENOMEM, -1, "out of memory");
    int rc = 0;
    if (comm->oob.allgather(&failed, all, sizeof(failed), comm->oob.group) != 0)
        rc = shmtopo_fail(ECOMM, comm->rank, "out-of-band allgather callback failed on rank %d",
                          comm->rank);
    for (int r = 0; r < comm->size && rc == 0; r++)
        if (all[r])
            rc = shmtopo_fail(ECOMM, r, "out-of-band allgather callback failed on rank %d", r);
    free(all);
    return rc;
}

int shmtopo_comm_agree(shmtopo_comm_t *comm, int err, void *sendbuf, void *recvbuf,
                       size_t nbytes)
{
    shmtopo_status_t *mine = sendbuf;
    mine->err = err;
    memset(mine->message, 0, sizeof(mine->message));
    if (err)
        snprintf(mine->message, sizeof(mine->message), "%s", shmtopo_last_error());
    if (shmtopo_comm_allgather(comm, sendbuf, recvbuf, nbytes) < 0)
        return -1;
    for (int r = 0; r < comm->size; r++) {
        const shmtopo_status_t *st = (const void *)((const char *)recvbuf + (size_t)r * nbytes);
        if (st->err == 0)
            continue;
        if (r == comm->rank)
            return shmtopo_fail(st->err, r, "%.*s", (int)sizeof(st->message), st->message);
        return shmtopo_fail(st->err, r, "rank %d: %.*s", r, (int)sizeof(st->message),
                            st->message);
    }
    return 0;
}

/* The kernel's boot id tells two hosts with the same name apart. */
static void read_boot_id(char *buf, size_t len)
{
    memset(buf, 0, len);
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t n = read(fd, buf, len - 1);
    close(fd);
    if (n > 0 && buf[n - 1] == '\n')
        buf[n - 1] = '\0';
}

static void fill_record(comm_record_t *rec, int size, int rank)
{
    memset(rec, 0, sizeof(*rec));
    rec->size = size;
    rec->rank = rank;
    rec->pid = (int32_t)getpid();
    rec->starttime = shmtopo_process_starttime(getpid());
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) == 0)
        for (int cpu = 0; cpu < MASK_WORDS * 64 && cpu < CPU_SETSIZE; cpu++)
            if (CPU_ISSET(cpu, &set))
                rec->cpumask[cpu / 64] |= 1ull << (cpu % 64);
    gethostname(rec->host, sizeof(rec->host) - 1);
    read_boot_id(rec->boot_id, sizeof(rec->boot_id));
}

/* Every rank must agree on the size, know its own index, and be on this
 * host: a comm spanning nodes cannot share memory. */
static int check_records(const comm_record_t *recs, int size, int rank)
{
    for (int r = 0; r < size; r++) {
        if (recs[r].size != size)
            return shmtopo_fail(EINVAL, r, "rank %d was created with size %d, rank %d with %d",
                                r, recs[r].size, rank, size);
        if (recs[r].rank != r)
            return shmtopo_fail(EINVAL, r,
                                "rank %d at position %d: ranks must be 0..size-1 in allgather order",
                                recs[r].rank, r);
        if (strcmp(recs[r].host, recs[rank].host) != 0 ||
            strcmp(recs[r].boot_id, recs[rank].boot_id) != 0)
            return shmtopo_fail(EINVAL, r,
                                "rank %d runs on host '%s', rank %d on '%s': a comm must stay on one node",
                                r, recs[r].host, rank, recs[rank].host);
    }
    return 0;
}

int shmtopo_comm_create(int size, int rank, const shmtopo_oob_t *oob, shmtopo_comm_t **commp)
{
    if (!oob || !oob->allgather || !oob->barrier || !commp)
        return shmtopo_fail(EINVAL, -1, "comm_create needs allgather and barrier callbacks");
    if (size < 1 || rank < 0 || rank >= size)
        return shmtopo_fail(EINVAL, -1, "rank %d out of range for size %d", rank, size);

    shmtopo_comm_t *comm = calloc(1, sizeof(*comm));
    comm_record_t *recs = calloc((size_t)size, sizeof(*recs));
    if (!comm || !recs)
        goto out_nomem;
    comm->size = size;
    comm->rank = rank;
    comm->oob = *oob;
    comm->pids = calloc((size_t)size, sizeof(*comm->pids));
    comm->starttimes = calloc((size_t)size, sizeof(*comm->starttimes));
    if (!comm->pids || !comm->starttimes)
        goto out_nomem;

    shmtopo_sweep_stale_segments();
    comm_record_t mine;
    fill_record(&mine, size, rank);
    if (shmtopo_comm_allgather(comm, &mine, recs, sizeof(mine)) < 0)
        goto out_with_comm;
    if (check_records(recs, size, rank) < 0)
        goto out_with_comm;

    uint64_t mask[MASK_WORDS] = {0};
    for (int r = 0; r < size; r++) {
        comm->pids[r] = recs[r].pid;
        comm->starttimes[r] = recs[r].starttime;
        for (int w = 0; w < MASK_WORDS; w++)
            mask[w] |= recs[r].cpumask[w];
    }
    for (int w = 0; w < MASK_WORDS; w++)
        comm->ncpus += __builtin_popcountll(mask[w]);
    if (comm->ncpus == 0) /* affinity unknown: count online CPUs */
        comm->ncpus = (int)sysconf(_SC_NPROCESSORS_ONLN);
    comm->oversubscribed = size > comm->ncpus;
    free(recs);
    *commp = comm;
    return 0;

out_nomem:
    shmtopo_fail(ENOMEM, -1, "out of memory creating a comm of %d ranks", size);
out_with_comm:
    if (comm) {
        free(comm->pids);
        free(comm->starttimes);
    }
    free(comm);
    free(recs);
    return -1;
}

int shmtopo_comm_abandon(shmtopo_comm_t *comm)
{
    if (!comm)
        return shmtopo_fail(EBADF, -1, "communicator is NULL or freed");
    if (comm->coll)
        shmtopo_coll_abandon(comm->coll);
    free(comm->pids);
    free(comm->starttimes);
    free(comm);
    return 0;
}

int shmtopo_comm_destroy(shmtopo_comm_t *comm)
{
    if (!comm)
        return shmtopo_fail(EBADF, -1, "communicator is NULL or freed");
    int rc = 0;
    if (comm->coll) {
        rc = shmtopo_coll_free(comm->coll);
        comm->coll = NULL;
    }
    if (comm->oob.barrier(comm->oob.group) != 0)
        rc = shmtopo_fail(ECOMM, -1, "out-of-band barrier callback failed on rank %d", comm->rank);
    shmtopo_comm_abandon(comm);
    return rc;
}

int shmtopo_comm_rank(const shmtopo_comm_t *comm)
{
    return comm ? comm->rank : shmtopo_fail(EBADF, -1, "communicator is NULL or freed");
}

int shmtopo_comm_size(const shmtopo_comm_t *comm)
{
    return comm ? comm->size : shmtopo_fail(EBADF, -1, "communicator is NULL or freed");
}

int shmtopo_comm_pid(const shmtopo_comm_t *comm, int rank)
{
    if (!comm)
        return shmtopo_fail(EBADF, -1, "communicator is NULL or freed");
    if (rank < 0 || rank >= comm->size)
        return shmtopo_fail(EINVAL, rank, "rank %d out of range [0, %d)", rank, comm->size);
    return comm->pids[rank];
}

int shmtopo_comm_ncpus(const shmtopo_comm_t *comm)
{
    return comm ? comm->ncpus : shmtopo_fail(EBADF, -1, "communicator is NULL or freed");
}

int shmtopo_comm_oversubscribed(const shmtopo_comm_t *comm)
{
    return comm ? comm->oversubscribed : shmtopo_fail(EBADF, -1, "communicator is NULL or freed");
}
