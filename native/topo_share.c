/* Sharing the node's topology: the node's leader (rank 0) loads it and
 * writes it with hwloc's shmem API at an address free in every rank (the
 * intersection of all ranks' free ranges, the chooser symmetric windows use),
 * every rank adopts it there, and the leader unlinks the file the moment all
 * have adopted. Each step ends in an agreement of the comm (agree.c), so
 * every rank of the job takes the same turn: when an adopt fails anywhere
 * (the range got taken meanwhile) all retry at the next address, then fall
 * back to an XML broadcast, then to a local load. A rank that dies midway
 * fails the others' agreement within the liveness period, and the
 * survivors remove the dead leader's file (the sweep of names whose
 * creator, of this namespace and user, is gone: segment.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <hwloc.h>

#include "internal.h"
#include "maps.h"
#include "state.h"
#include "topo_shmem.h"

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

#define ALIGN (2u << 20) /* huge-page friendly, far from page-granular picks of other runtimes */
#define PATH_BYTES 320

static double seconds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The conflict hook for tests: map an inaccessible page at addr so that
 * this rank's adopt there fails, as a racing mapping would make it. */
static void *occupy(uintptr_t addr)
{
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    void *p = mmap((void *)addr, page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    if ((uintptr_t)p != addr) {
        munmap(p, page);
        return NULL;
    }
    return p;
}

typedef struct share {
    shmtopo_comm_t *comm;
    shmtopo_sig_t sig;
    int leader, have, conflict_rank;
    int io;                    /* I/O objects in the leader's load (opts.io) */
    void *base;                /* leader: the topology it hands out */
    int base_err;              /* leader: why it has none */
    char base_msg[256];
} share_t;

/* A failure an agreement reported: a wait (the comm is broken, give up) or
 * a rank's failure (try the next way). */
static int gave_up(const share_t *sh)
{
    return sh->comm->broken;
}

/* The leader's write of its topology into a new file of the topology
 * directory, under a name nobody can tell in advance (shmtopo_name_make): a
 * name taken already (a file or link someone placed there) is never opened
 * (O_CREAT | O_EXCL) and another is tried. The name reaches the other ranks
 * through the next agreement, never recomputed. */
static int write_file(share_t *sh, uintptr_t addr, size_t length, char path[PATH_BYTES])
{
    char head[PATH_BYTES], tail[64];
    const char *dir = sh->comm->config.topo_dir;
    snprintf(head, sizeof(head), "%s/" SHMTOPO_TOPO_PREFIX, dir);
    snprintf(tail, sizeof(tail), ".hwloc-%s", shmtopo_hwloc_version());
    for (int tries = 0; tries < SHMTOPO_NAME_TRIES; tries++) {
        if (shmtopo_name_make(path, PATH_BYTES, head, tail, 16) < 0)
            break;
        if (shmtopo_topo_shmem_write(sh->base, path, addr, length) == 0)
            return 0;
        if (errno != EEXIST)
            break;
        if (tries == SHMTOPO_NAME_TRIES - 1)
            shmtopo_fail(EEXIST, -1, "cannot create a topology file in %s: %d fresh names were all taken "
                         "already (files or links someone else placed there?)", dir, SHMTOPO_NAME_TRIES);
    }
    path[0] = '\0';
    return -1;
}

/* One try at `attempt`: every rank's free ranges (and the leader's length),
 * the address, the leader's write, every rank's adopt. */
static int try_shmem(share_t *sh, unsigned attempt, void **topop, shmtopo_topo_share_info_t *info)
{
    shmtopo_comm_t *comm = sh->comm;
    shmtopo_sig_t sig = sh->sig;
    sig.extra = attempt + 1;
    size_t length = 0;
    int err = 0;
    if (sh->leader) {
        if (!sh->base)
            shmtopo_fail(err = sh->base_err, -1, "%s", sh->base_msg);
        else if (shmtopo_topo_shmem_length(sh->base, &length) < 0)
            err = errno;
    }
    shmtopo_range_t *ranges = NULL;
    size_t n = 0;
    uint64_t *values = calloc((size_t)comm->size, sizeof(*values));
    if (!values)
        return shmtopo_fail(ENOMEM, -1, "out of memory");
    int rc = shmtopo_common_free_ranges(comm, &sig, err, shmtopo_agree, length, values, &ranges, &n);
    length = values[0];
    free(values);
    if (rc < 0)
        return -1;
    uintptr_t addr = 0;
    /* every rank computes the same choice: a failure here is everyone's */
    rc = shmtopo_ranges_choose(ranges, n, length, ALIGN, attempt, &addr);
    free(ranges);
    if (rc < 0)
        return shmtopo_fail(ENOMEM, -1, "no %zu-byte range is free at the same address in every rank", length);

    char path[PATH_BYTES] = "";
    err = 0;
    if (sh->leader && write_file(sh, addr, length, path) < 0)
        err = errno; /* a failed write leaves no file */
    char *paths = malloc((size_t)comm->size * PATH_BYTES);
    if (!paths)
        err = ENOMEM, shmtopo_fail(ENOMEM, -1, "out of memory");
    rc = shmtopo_agree(comm, &sig, err, path, paths ? paths : path, paths ? PATH_BYTES : 0);
    if (rc == 0 && !sh->leader)
        memcpy(path, paths, PATH_BYTES); /* the leader's */
    free(paths);
    if (rc < 0) {
        if (sh->leader && !err && path[0])
            unlink(path);
        return -1;
    }

    void *topo = NULL, *blocker = NULL;
    err = 0;
    if (comm->rank == sh->conflict_rank && attempt == 0)
        blocker = occupy(addr);
    if (!sh->have) {
        const double t0 = seconds_now();
        if (shmtopo_topo_shmem_adopt(path, addr, length, &topo) < 0)
            err = errno;
        info->adopt_seconds = seconds_now() - t0;
    }
    if (blocker)
        munmap(blocker, (size_t)sysconf(_SC_PAGESIZE));
    rc = shmtopo_agree(comm, &sig, err, NULL, NULL, 0);
    /* everyone has adopted or given up: the mapping outlives the name */
    if (sh->leader)
        unlink(path);
    if (rc < 0) {
        shmtopo_topo_destroy(topo);
        return -1;
    }
    *topop = topo;
    info->address = addr;
    info->length = length;
    return 0;
}

/* The leader's XML, broadcast through the comm's scratch; every rank loads
 * it as this machine's. */
static int try_xml(share_t *sh, void **topop)
{
    shmtopo_comm_t *comm = sh->comm;
    shmtopo_sig_t sig = sh->sig;
    sig.extra = 0;
    char *xml = NULL;
    size_t len = 0;
    int err = 0;
    if (sh->leader) {
        if (!sh->base)
            shmtopo_fail(err = sh->base_err, -1, "%s", sh->base_msg);
        else if (shmtopo_topo_export_xml(sh->base, &xml, &len) < 0)
            err = errno;
    }
    uint64_t mine = len, *lens = calloc((size_t)comm->size, sizeof(*lens));
    if (!lens)
        err = ENOMEM, shmtopo_fail(ENOMEM, -1, "out of memory");
    int rc = shmtopo_agree(comm, &sig, err, &mine, lens ? lens : &mine, lens ? sizeof(mine) : 0);
    len = lens ? lens[0] : 0;
    free(lens);
    if (rc < 0) {
        shmtopo_topo_free_xml(xml);
        return -1;
    }
    err = 0;
    if (!sh->leader && !(xml = malloc(len + 1)))
        err = ENOMEM;
    /* one more agreement, on having room for it, before the node's bcast */
    if (shmtopo_agree(comm, &sig, err, NULL, NULL, 0) < 0 ||
        shmtopo_bcast(comm, xml, len, SHMTOPO_UINT8, 0) < 0) {
        shmtopo_topo_free_xml(xml);
        return -1;
    }
    void *topo = NULL;
    err = 0;
    if (!sh->have && shmtopo_topo_load_xml_flags(xml, len, HWLOC_TOPOLOGY_FLAG_IS_THISSYSTEM, sh->io, &topo) < 0)
        err = errno;
    shmtopo_topo_free_xml(xml);
    if (shmtopo_agree(comm, &sig, err, NULL, NULL, 0) < 0) {
        shmtopo_topo_destroy(topo);
        return -1;
    }
    *topop = topo;
    return 0;
}

int shmtopo_topo_share(shmtopo_comm_t *comm, const shmtopo_topo_share_opts_t *opts, void **topop,
                       shmtopo_topo_share_info_t *infop)
{
    if (shmtopo_comm_usable(comm, "share_topology") < 0)
        return -1;
    shmtopo_topo_share_opts_t o = {.source = -1, .attempts = 3, .have = 0, .conflict_rank = -1, .io = 0};
    if (opts)
        o = *opts;
    if (o.source < 0)
        o.source = comm->config.topo_source;
    if (o.conflict_rank < 0)
        o.conflict_rank = comm->config.conflict_rank;
    int err = 0;
    if (o.source < SHMTOPO_SOURCE_AUTO || o.source > SHMTOPO_SOURCE_LOCAL)
        shmtopo_fail(err = EINVAL, -1, "unknown topology source %d", o.source);
    else if (o.attempts < 1 || o.attempts > 64)
        shmtopo_fail(err = EINVAL, -1, "attempts must be in [1, 64], not %d", o.attempts);
    else if (o.io < 0 || o.io > 2)
        shmtopo_fail(err = EINVAL, -1, "io must be 0, 1 or 2, not %d", o.io);
    else if (!topop || !infop)
        shmtopo_fail(err = EINVAL, -1, "share_topology needs topop and infop");
    share_t sh = {.comm = comm, .sig = shmtopo_sig(SHMTOPO_KIND_TOPO_SHARE), .leader = comm->rank == 0,
                  .have = o.have != 0, .conflict_rank = o.conflict_rank, .io = o.io};
    sh.sig.alg = o.source;
    sh.sig.op = o.io; /* agreed like the source: the leader's load serves all */
    sh.sig.count = (uint64_t)o.attempts;
    /* the first agreement checks everyone's arguments and whether every
     * rank of the job already holds the shared topology */
    int everyone_has = 0;
    if (shmtopo_agree_vote(comm, &sh.sig, err, sh.have, &everyone_has) < 0)
        return -1;
    memset(infop, 0, sizeof(*infop));
    *topop = NULL;
    if (everyone_has) {
        infop->source = -1;
        return 0;
    }
    /* Never from an adopted copy: hwloc's write updates its source, a
     * segfault on the read-only mapping. */
    if (sh.leader && shmtopo_topo_load_local_io(sh.io, &sh.base) < 0) {
        sh.base_err = errno;
        snprintf(sh.base_msg, sizeof(sh.base_msg), "%s", shmtopo_last_error());
    }
    int rc = -1;
    if (o.source == SHMTOPO_SOURCE_AUTO || o.source == SHMTOPO_SOURCE_SHMEM)
        for (int attempt = 0; attempt < o.attempts && rc < 0 && !gave_up(&sh); attempt++) {
            infop->attempts = attempt + 1;
            if ((rc = try_shmem(&sh, (unsigned)attempt, topop, infop)) == 0)
                infop->source = SHMTOPO_SOURCE_SHMEM;
        }
    if (rc < 0 && !gave_up(&sh) && (o.source == SHMTOPO_SOURCE_AUTO || o.source == SHMTOPO_SOURCE_XML)) {
        if ((rc = try_xml(&sh, topop)) == 0)
            infop->source = SHMTOPO_SOURCE_XML;
    }
    if (rc < 0 && !gave_up(&sh) && (o.source == SHMTOPO_SOURCE_AUTO || o.source == SHMTOPO_SOURCE_LOCAL)) {
        err = !sh.have && shmtopo_topo_load_local_io(sh.io, topop) < 0 ? errno : 0;
        if ((rc = shmtopo_agree(comm, &sh.sig, err, NULL, NULL, 0)) == 0) {
            infop->source = SHMTOPO_SOURCE_LOCAL;
        } else {
            shmtopo_topo_destroy(*topop);
            *topop = NULL;
        }
    }
    int keep = errno;
    shmtopo_topo_destroy(sh.base);
    errno = keep;
    return rc;
}
