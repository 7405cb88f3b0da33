/* Communicators: a group of processes on one node. They reach each other
 * through out-of-band callbacks (MPI in practice) only while the comm is
 * made: they exchange who they are and how they are configured, and map the
 * comm's channel (chan.c). From then on every agreement, set-up exchange
 * and synchronisation goes through shared memory, under the comm's timeout. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "state.h"

#define MASK_WORDS 16 /* affinity masks for CPUs 0..1023 */
#define MESSAGE 384

/* ---- the out-of-band bootstrap ----------------------------------------------- */

/* One allgather through the callbacks, and a second, tiny one that tells
 * every rank whether the first failed anywhere: a failing callback then
 * fails the call on all ranks instead of leaving the others waiting. A
 * callback may return an errno (ETIMEDOUT when its transport timed out). */
static int oob_allgather(shmtopo_comm_t *comm, const void *sendbuf, void *recvbuf, size_t nbytes)
{
    const int cb = comm->oob.allgather(sendbuf, recvbuf, nbytes, comm->oob.group);
    int32_t failed = cb != 0, *all = calloc((size_t)comm->size, sizeof(*all));
    if (!all)
        return shmtopo_fail(ENOMEM, -1, "out of memory");
    int rc = 0;
    if (comm->oob.allgather(&failed, all, sizeof(failed), comm->oob.group) != 0 || cb != 0)
        rc = shmtopo_fail(cb == ETIMEDOUT ? ETIMEDOUT : ECOMM, comm->rank,
                          "out-of-band allgather callback %s on rank %d",
                          cb == ETIMEDOUT ? "timed out" : "failed", comm->rank);
    for (int r = 0; r < comm->size && rc == 0; r++)
        if (all[r])
            rc = shmtopo_fail(ECOMM, r, "out-of-band allgather callback failed on rank %d", r);
    free(all);
    return rc;
}

typedef struct oob_status {
    int32_t err, origin;
    char message[MESSAGE];
} oob_status_t;

int shmtopo_exchange_statuses(shmtopo_comm_t *comm, int err, const void *mine, void *all, size_t n,
                              shmtopo_setup_allgather_fn allgather)
{
    const size_t rec = sizeof(oob_status_t) + shmtopo_round_up(n, 8);
    char *send = calloc(1, rec), *recv = calloc((size_t)comm->size, rec);
    int rc = -1;
    if (!send || !recv) {
        shmtopo_fail(ENOMEM, -1, "out of memory");
        goto out;
    }
    oob_status_t *st = (oob_status_t *)send;
    st->err = err;
    st->origin = comm->rank;
    if (err)
        snprintf(st->message, sizeof(st->message), "rank %d: %s", comm->rank, shmtopo_last_error());
    if (n)
        memcpy(send + sizeof(*st), mine, n);
    if (allgather(comm, send, recv, rec) < 0)
        goto out;
    for (int r = 0; r < comm->size; r++) {
        const oob_status_t *theirs = (const oob_status_t *)(recv + (size_t)r * rec);
        if (theirs->err) {
            shmtopo_fail(theirs->err, theirs->origin, "%.*s", MESSAGE, theirs->message);
            goto out;
        }
    }
    for (int r = 0; r < comm->size && n; r++)
        memcpy((char *)all + (size_t)r * n, recv + (size_t)r * rec + sizeof(*st), n);
    rc = 0;
out:
    free(send);
    free(recv);
    return rc;
}

/* The set-up exchanges (shmtopo_exchange_fn) of a comm made through the
 * callbacks, before its channel exists. */
static int oob_exchange(shmtopo_comm_t *comm, const shmtopo_sig_t *sig, int err, const void *mine,
                        void *all, size_t n)
{
    (void)sig; /* the first exchange, the records, is where ranks check that they agree */
    return shmtopo_exchange_statuses(comm, err, mine, all, n, oob_allgather);
}

/* ---- creation ------------------------------------------------------------------ */

typedef struct comm_record {
    int32_t size, rank, pid, pad;
    uint64_t starttime;
    uint64_t cpumask[MASK_WORDS];
    char host[64];
    char boot_id[40];
    uint64_t probe_word, probe_sink; /* single copy: where peers read and write a word of ours */
    shmtopo_config_t config;
} comm_record_t;

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

/* This rank's record; 0, or the errno of its own failure (its environment,
 * shmtopo_last_error says why), which the exchange fails every rank with. */
static int fill_record(comm_record_t *rec, int size, int rank)
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
    shmtopo_sc_publish(&rec->probe_word, &rec->probe_sink);
    return shmtopo_config_read(&rec->config) < 0 ? errno : 0;
}

/* The same verdict on every rank, from the same records: a size or order
 * that does not add up, ranks on different hosts, settings that must agree
 * but differ. */
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
        if (strcmp(recs[r].host, recs[0].host) != 0 || strcmp(recs[r].boot_id, recs[0].boot_id) != 0)
            return shmtopo_fail(EINVAL, r,
                                "rank %d runs on host '%s', rank 0 on '%s': a comm must stay on one node",
                                r, recs[r].host, recs[0].host);
    }
    shmtopo_config_t *cfgs = malloc((size_t)size * sizeof(*cfgs));
    if (!cfgs)
        return shmtopo_fail(ENOMEM, -1, "out of memory");
    for (int r = 0; r < size; r++)
        cfgs[r] = recs[r].config;
    int rc = shmtopo_config_compare(cfgs, size, NULL);
    free(cfgs);
    return rc;
}

/* Single copy, decided alike on every rank: each probes every peer (unless
 * SHMTOPO_SINGLE_COPY=0, which all ranks share), then one step of the
 * channel agrees: on only if every rank reached every peer. Where it is
 * required (=1), a rank that cannot fails the step, so the comm fails on
 * every rank with that rank's reason. */
static int agree_single_copy(shmtopo_comm_t *comm, const comm_record_t *recs)
{
    const int setting = comm->config.single_copy;
    comm->single_copy = SHMTOPO_SC_NONE;
    if (setting == SHMTOPO_SINGLE_COPY_OFF)
        return 0;
    if (comm->size == 1) {
        comm->single_copy = SHMTOPO_SC_CMA;
        return 0;
    }
    uint64_t *words = malloc((size_t)comm->size * 2 * sizeof(*words));
    int ok = 0, err = 0;
    if (!words) {
        err = ENOMEM;
        shmtopo_fail(ENOMEM, -1, "out of memory");
    } else {
        for (int r = 0; r < comm->size; r++) {
            words[r] = recs[r].probe_word;
            words[comm->size + r] = recs[r].probe_sink;
        }
        ok = shmtopo_sc_probe(comm, words, words + comm->size) == 0;
        if (!ok && setting == SHMTOPO_SINGLE_COPY_ON) {
            char why[400];
            snprintf(why, sizeof(why), "%s", shmtopo_last_error());
            shmtopo_fail(err = ENOTSUP, shmtopo_last_error_rank(),
                         "SHMTOPO_SINGLE_COPY=1, but single copy does not work here: %s", why);
        }
        free(words);
    }
    shmtopo_sig_t sig = shmtopo_sig(SHMTOPO_KIND_COMM_CREATE);
    int all = 0;
    if (shmtopo_agree_vote(comm, &sig, err, ok, &all) < 0)
        return -1;
    comm->single_copy = all ? SHMTOPO_SC_CMA : SHMTOPO_SC_NONE;
    return 0;
}

static void comm_delete(shmtopo_comm_t *comm)
{
    free(comm->pids);
    free(comm->starttimes);
    free(comm->world_ranks);
    free(comm);
}

int shmtopo_comm_create(int size, int rank, const shmtopo_oob_t *oob, shmtopo_comm_t **commp)
{
    if (!oob || !oob->allgather || !oob->barrier || !commp)
        return shmtopo_fail(EINVAL, -1, "comm_create needs allgather and barrier callbacks");
    if (size < 1 || rank < 0 || rank >= size)
        return shmtopo_fail(EINVAL, -1, "rank %d out of range for size %d", rank, size);
    return shmtopo_comm_make(size, rank, oob_exchange, oob, NULL, commp);
}

int shmtopo_comm_make(int size, int rank, shmtopo_exchange_fn exchange, const shmtopo_oob_t *oob,
                      void *maker, shmtopo_comm_t **commp)
{
    shmtopo_comm_t *comm = calloc(1, sizeof(*comm));
    comm_record_t *recs = calloc((size_t)size, sizeof(*recs));
    if (!comm || !recs)
        goto out_nomem;
    comm->size = size;
    comm->rank = rank;
    if (oob)
        comm->oob = *oob;
    comm->maker = maker;
    comm->fork_generation = atomic_load(&shmtopo_fork_generation);
    comm->world_size = size;
    comm->nnodes = 1;
    comm->pids = calloc((size_t)size, sizeof(*comm->pids));
    comm->starttimes = calloc((size_t)size, sizeof(*comm->starttimes));
    if (!comm->pids || !comm->starttimes)
        goto out_nomem;

    comm_record_t mine;
    const int err = fill_record(&mine, size, rank);
    shmtopo_sweep_stale_files(mine.config.topo_dir);
    shmtopo_sig_t sig = shmtopo_sig(SHMTOPO_KIND_COMM_CREATE);
    if (exchange(comm, &sig, err, &mine, recs, sizeof(mine)) < 0 || check_records(recs, size, rank) < 0)
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
    comm->config = mine.config;
    comm->timeout = mine.config.timeout;
    if (shmtopo_chan_create(comm, exchange) < 0)
        goto out_with_comm;
    comm->agree = shmtopo_agree;
    comm->maker = NULL;
    if (agree_single_copy(comm, recs) < 0)
        goto out_with_chan;
    free(recs);
    *commp = comm;
    return 0;

out_nomem:
    shmtopo_fail(ENOMEM, -1, "out of memory creating a comm of %d ranks", size);
    goto out_with_comm;
out_with_chan: {
    /* every rank failed the same step (or a wait broke the comm) */
    int err = errno;
    if (comm->broken)
        shmtopo_chan_abandon(comm, -1);
    else
        shmtopo_chan_free(comm);
    errno = err;
}
out_with_comm:
    if (comm) {
        int err = errno;
        comm_delete(comm);
        errno = err;
    }
    free(recs);
    return -1;
}

/* ---- the job around the node ---------------------------------------------------- */

int shmtopo_comm_set_span(shmtopo_comm_t *comm, int world_size, const int *world_ranks, int nnodes,
                          int node_index, const shmtopo_oob_t *leaders)
{
    if (!comm)
        return shmtopo_fail(EBADF, -1, "communicator is NULL or freed");
    if (world_size < comm->size || !world_ranks || nnodes < 1 || node_index < 0 || node_index >= nnodes)
        return shmtopo_fail(EINVAL, -1, "set_span: inconsistent job layout");
    if (nnodes > 1 && (comm->rank == 0) != (leaders && leaders->allgather))
        return shmtopo_fail(EINVAL, -1, "set_span: the node's rank 0, and only it, gets the leaders' allgather");
    int *copy = malloc((size_t)comm->size * sizeof(*copy));
    if (!copy)
        return shmtopo_fail(ENOMEM, -1, "out of memory");
    for (int r = 0; r < comm->size; r++) {
        if (world_ranks[r] < 0 || world_ranks[r] >= world_size) {
            free(copy);
            return shmtopo_fail(EINVAL, -1, "set_span: job rank %d out of range", world_ranks[r]);
        }
        copy[r] = world_ranks[r];
    }
    free(comm->world_ranks);
    comm->world_ranks = copy;
    comm->world_size = world_size;
    comm->nnodes = nnodes;
    comm->node_index = node_index;
    comm->has_leaders = leaders && leaders->allgather;
    if (comm->has_leaders)
        comm->leaders = *leaders;
    return 0;
}

/* ---- lifetime ------------------------------------------------------------------ */

int shmtopo_comm_abandon(shmtopo_comm_t *comm)
{
    if (!comm)
        return shmtopo_fail(EBADF, -1, "communicator is NULL or freed");
    shmtopo_chan_abandon(comm, -1);
    comm_delete(comm);
    return 0;
}

int shmtopo_comm_release(shmtopo_comm_t *comm)
{
    if (!comm)
        return shmtopo_fail(EBADF, -1, "communicator is NULL or freed");
    if (shmtopo_comm_same_process(comm) < 0)
        return -1;
    shmtopo_chan_release(comm);
    comm_delete(comm);
    return 0;
}

int shmtopo_comm_park(shmtopo_comm_t *comm)
{
    if (!comm)
        return shmtopo_fail(EBADF, -1, "communicator is NULL or freed");
    if (shmtopo_comm_same_process(comm) < 0)
        return -1;
    if (comm->broken || comm->shrunk || comm->nnodes > 1 || comm->config.run_ahead || !comm->chan.win ||
        comm->chan.win->broken)
        return shmtopo_fail(EBUSY, -1, "this comm cannot be kept for a later one: release it");
    return shmtopo_chan_park(comm);
}

/* The environment's settings now, when those that must agree are as the
 * comm was made with, and its files' folder too (where making a comm sweeps
 * stale files: a comm for another folder is made, and sweeps it); else -1. */
static int settings_as_made(const shmtopo_comm_t *comm, shmtopo_config_t *now)
{
    shmtopo_config_t both[2];
    if (shmtopo_config_read(now) < 0)
        return -1;
    if (strcmp(now->topo_dir, comm->config.topo_dir) != 0)
        return shmtopo_fail(EINVAL, -1, "SHMTOPO_TOPO_DIR changed since the comm was made");
    both[0] = comm->config;
    both[1] = *now;
    return shmtopo_config_compare(both, 2, NULL);
}

int shmtopo_comm_parked_step(const shmtopo_comm_t *comm, uint64_t *stepp)
{
    shmtopo_config_t now;
    if (!comm || !stepp)
        return shmtopo_fail(EBADF, -1, "communicator is NULL or freed");
    if (shmtopo_comm_same_process(comm) < 0 || !comm->chan.win || settings_as_made(comm, &now) < 0)
        return -1;
    *stepp = comm->chan.step;
    return 0;
}

int shmtopo_comm_unpark(shmtopo_comm_t *comm)
{
    shmtopo_config_t now;
    if (!comm || !comm->chan.win)
        return shmtopo_fail(EBADF, -1, "communicator is NULL or freed");
    if (shmtopo_comm_same_process(comm) < 0 || settings_as_made(comm, &now) < 0)
        return -1;
    comm->config = now; /* waits and timeout as a new comm's */
    shmtopo_chan_unpark(comm);
    return shmtopo_comm_set_timeout(comm, now.timeout);
}

int shmtopo_comm_leave(shmtopo_comm_t *comm)
{
    if (!comm || !comm->chan.win)
        return shmtopo_fail(EBADF, -1, "communicator is NULL or freed");
    if (!comm->broken)
        shmtopo_chan_leave(comm, -1);
    comm->broken = 1;
    return 0;
}

/* Leave because of job rank `job_rank`, elsewhere: `why` 1 + it (a death)
 * or -(1 + it) (it left after an error). */
static int leave_heard(shmtopo_comm_t *comm, int job_rank, int32_t why)
{
    if (!comm || !comm->chan.win)
        return shmtopo_fail(EBADF, -1, "communicator is NULL or freed");
    if (job_rank < 0)
        return shmtopo_fail(EINVAL, -1, "the rank heard of must be a job rank, not %d", job_rank);
    shmtopo_ctrl_t *me = comm->chan.win->ctrl[comm->rank];
    if (!comm->broken && me) {
        /* before the leave publishes it (a seq_cst exchange): peers that see
         * this rank gone read why */
        int32_t none = 0;
        atomic_compare_exchange_strong(&me->died_elsewhere, &none, why);
        shmtopo_chan_leave(comm, -1);
    }
    comm->broken = 1;
    return 0;
}

int shmtopo_comm_leave_dead(shmtopo_comm_t *comm, int job_rank)
{
    return leave_heard(comm, job_rank, job_rank + 1);
}

int shmtopo_comm_leave_aborted(shmtopo_comm_t *comm, int job_rank)
{
    return leave_heard(comm, job_rank, -(job_rank + 1));
}

int shmtopo_comm_dead_peer(const shmtopo_comm_t *comm)
{
    if (!comm)
        return -1;
    const int dead = shmtopo_comm_find_dead(comm);
    return dead < 0 ? -1 : shmtopo_world(comm, dead);
}

/* shmtopo_comm_destroy, or with keptp shmtopo_comm_destroy_keeping. */
static int destroy(shmtopo_comm_t **commp, int *keptp)
{
    shmtopo_comm_t *comm = commp ? *commp : NULL;
    if (keptp)
        *keptp = 0;
    if (!comm)
        return shmtopo_fail(EBADF, -1, "communicator is NULL or freed");
    if (shmtopo_comm_same_process(comm) < 0)
        return -1;
    int rc = 0;
    if (!comm->broken) {
        /* a mismatch (a rank called something else) leaves the comm as it
         * was; a failed wait breaks it, and it goes anyway */
        shmtopo_sig_t sig = shmtopo_sig(SHMTOPO_KIND_COMM_FREE);
        rc = shmtopo_agree(comm, &sig, 0, NULL, NULL, 0);
        if (rc < 0 && !comm->broken)
            return -1;
    }
    int err = errno;
    if (keptp && rc == 0 && shmtopo_comm_park(comm) == 0) {
        *keptp = 1; /* every rank agreed: nobody uses it any more */
        errno = err;
        return 0;
    }
    if (comm->broken)
        shmtopo_chan_abandon(comm, -1);
    else
        shmtopo_chan_free(comm);
    comm_delete(comm);
    *commp = NULL;
    errno = err;
    return rc;
}

int shmtopo_comm_destroy(shmtopo_comm_t **commp)
{
    return destroy(commp, NULL);
}

int shmtopo_comm_destroy_keeping(shmtopo_comm_t **commp, int *keptp)
{
    if (!keptp)
        return shmtopo_fail(EINVAL, -1, "destroy_keeping needs where to say whether it kept the comm");
    return destroy(commp, keptp);
}

/* ---- queries ------------------------------------------------------------------ */

int shmtopo_comm_rank(const shmtopo_comm_t *comm)
{
    return comm ? comm->rank : shmtopo_fail(EBADF, -1, "communicator is NULL or freed");
}

int shmtopo_comm_size(const shmtopo_comm_t *comm)
{
    return comm ? comm->size : shmtopo_fail(EBADF, -1, "communicator is NULL or freed");
}

int shmtopo_comm_job_rank(const shmtopo_comm_t *comm)
{
    return comm ? shmtopo_world(comm, comm->rank) : shmtopo_fail(EBADF, -1, "communicator is NULL or freed");
}

int shmtopo_comm_job_size(const shmtopo_comm_t *comm)
{
    if (!comm)
        return shmtopo_fail(EBADF, -1, "communicator is NULL or freed");
    return comm->world_size ? comm->world_size : comm->size;
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

int shmtopo_comm_single_copy(const shmtopo_comm_t *comm)
{
    return comm ? comm->single_copy : shmtopo_fail(EBADF, -1, "communicator is NULL or freed");
}

int shmtopo_comm_set_waits(shmtopo_comm_t *comm, int64_t spin_ns, int64_t yield_ns)
{
    if (!comm)
        return shmtopo_fail(EBADF, -1, "communicator is NULL or freed");
    if (spin_ns < -1 || yield_ns < -1)
        return shmtopo_fail(EINVAL, -1, "spin and yield must be >= 0 ns (-1: as they are), not %lld and %lld",
                            (long long)spin_ns, (long long)yield_ns);
    /* while a queued nonblocking call runs with waits of its own, the
     * comm's come back after it */
    const uintptr_t user = atomic_load_explicit(&comm->claim.user, memory_order_relaxed);
    const int lent = atomic_load_explicit(&comm->claim.lent, memory_order_relaxed) && user &&
                     user != SHMTOPO_CLAIM_QUEUED;
    if (spin_ns >= 0)
        *(lent ? &comm->claim.saved_spin_ns : &comm->config.spin_ns) = spin_ns;
    if (yield_ns >= 0)
        *(lent ? &comm->claim.saved_yield_ns : &comm->config.yield_ns) = yield_ns;
    return 0;
}

int shmtopo_comm_set_timeout(shmtopo_comm_t *comm, double seconds)
{
    if (!comm)
        return shmtopo_fail(EBADF, -1, "communicator is NULL or freed");
    if (!(seconds >= 0) || seconds > 1e9)
        return shmtopo_fail(EINVAL, -1, "timeout must be a finite number of seconds >= 0 (0: forever), not %g",
                            seconds);
    comm->timeout = seconds;
    if (comm->chan.win)
        comm->chan.win->timeout = seconds;
    return 0;
}

int shmtopo_comm_coll_levels(const shmtopo_comm_t *comm, int *modep, int *types)
{
    if (!comm)
        return shmtopo_fail(EBADF, -1, "comm is NULL or freed");
    *modep = comm->config.coll_levels_mode;
    for (int i = 0; i < SHMTOPO_MAX_LEVELS; i++)
        types[i] = comm->config.coll_levels[i];
    return 0;
}

int shmtopo_comm_runs_ahead(const shmtopo_comm_t *comm)
{
    if (!comm)
        return shmtopo_fail(EBADF, -1, "comm is NULL or freed");
    return shmtopo_runs_ahead(comm);
}

double shmtopo_comm_timeout(const shmtopo_comm_t *comm)
{
    return comm ? comm->timeout : -1;
}

int shmtopo_comm_broken(const shmtopo_comm_t *comm)
{
    return comm ? comm->broken : shmtopo_fail(EBADF, -1, "communicator is NULL or freed");
}

int shmtopo_comm_claim(shmtopo_comm_t *comm)
{
    return comm ? shmtopo_claim(&comm->claim, "the comm") : 0;
}

void shmtopo_comm_unclaim(shmtopo_comm_t *comm)
{
    if (comm)
        shmtopo_unclaim(&comm->claim);
}
