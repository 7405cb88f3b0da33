/* Segment backends: how one rank's memory becomes mappable by its peers.
 * posix: a named shm_open file, unlinked as soon as all peers mapped it.
 * memfd: no name at all; peers open /proc/PID/fd/N while the creator holds it.
 * sysv:  marked for removal right after creation (Linux lets peers attach a
 *        removed segment while it is attached), so it can never leak.
 * xpmem: needs the XPMEM kernel module; detected, not built here. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

int shmtopo_backend_probe(int backend)
{
    switch (backend) {
    case SHMTOPO_BACKEND_POSIX:
    case SHMTOPO_BACKEND_MEMFD:
    case SHMTOPO_BACKEND_SYSV:
        return 0;
    case SHMTOPO_BACKEND_XPMEM:
        if (access("/dev/xpmem", R_OK | W_OK) < 0)
            return shmtopo_fail(ENODEV, -1,
                                "xpmem backend needs /dev/xpmem (the XPMEM kernel module), which is %s",
                                errno == ENOENT ? "missing on this machine" : "not accessible");
        return shmtopo_fail(ENOTSUP, -1,
                            "/dev/xpmem exists but shmtopo was built without libxpmem support");
    default:
        return shmtopo_fail(EINVAL, -1, "unknown backend number %d", backend);
    }
}

/* Reserve the memory now: a full /dev/shm must fail here, not SIGBUS later. */
static int reserve_fd(int fd, size_t length, const char *what)
{
    if (ftruncate(fd, (off_t)length) < 0)
        return shmtopo_fail_errno(what);
    int err = posix_fallocate(fd, 0, (off_t)length);
    if (err)
        return shmtopo_fail(err, -1, "%s: cannot reserve %zu bytes: %s", what, length,
                            strerror(err));
    return 0;
}

static int map_fd(int fd, size_t length, void **addrp)
{
    void *addr = mmap(NULL, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (addr == MAP_FAILED)
        return shmtopo_fail_errno("mmap");
    *addrp = addr;
    return 0;
}

static int create_posix(size_t length, uint64_t win_id, shmtopo_seg_t *seg)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    for (int tries = 0; tries < 16; tries++) {
        snprintf(seg->key.name, sizeof(seg->key.name), "/shmtopo.%d.%llu.%lx", (int)getpid(),
                 (unsigned long long)win_id, (unsigned long)(ts.tv_nsec + tries * 7919) & 0xfffff);
        seg->fd = shm_open(seg->key.name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
        if (seg->fd >= 0 || errno != EEXIST)
            break;
    }
    if (seg->fd < 0)
        return shmtopo_fail(errno, -1, "shm_open %s: %s", seg->key.name, strerror(errno));
    if (reserve_fd(seg->fd, length, "posix segment in /dev/shm") < 0 ||
        map_fd(seg->fd, length, &seg->addr) < 0) {
        int err = errno;
        shm_unlink(seg->key.name);
        close(seg->fd);
        errno = err;
        return -1;
    }
    return 0;
}

static int create_memfd(size_t length, shmtopo_seg_t *seg)
{
    seg->fd = memfd_create("shmtopo", MFD_CLOEXEC);
    if (seg->fd < 0)
        return shmtopo_fail_errno("memfd_create");
    if (reserve_fd(seg->fd, length, "memfd segment") < 0 ||
        map_fd(seg->fd, length, &seg->addr) < 0) {
        int err = errno;
        close(seg->fd);
        errno = err;
        return -1;
    }
    seg->key.handle = seg->fd;
    return 0;
}

static int create_sysv(size_t length, shmtopo_seg_t *seg)
{
    int id = shmget(IPC_PRIVATE, length, IPC_CREAT | IPC_EXCL | 0600);
    if (id < 0)
        return shmtopo_fail(errno, -1, "shmget of %zu bytes: %s", length, strerror(errno));
    void *addr = shmat(id, NULL, 0);
    int err = errno;
    shmctl(id, IPC_RMID, NULL); /* gone with the last detach, whatever happens */
    if (addr == (void *)-1)
        return shmtopo_fail(err, -1, "shmat: %s", strerror(err));
    /* Fault the pages in now so that a lack of memory shows up here. */
    if (madvise(addr, length, MADV_POPULATE_WRITE) < 0 && errno != EINVAL) {
        err = errno;
        shmdt(addr);
        return shmtopo_fail(err, -1, "cannot reserve %zu bytes of System V memory: %s", length,
                            strerror(err));
    }
    seg->key.handle = id;
    seg->addr = addr;
    return 0;
}

static int create_any(int backend, size_t length, uint64_t win_id, shmtopo_seg_t *seg)
{
    memset(seg, 0, sizeof(*seg));
    seg->fd = -1;
    seg->owner = 1;
    seg->length = length;
    seg->key.backend = backend;
    seg->key.pid = (int32_t)getpid();
    seg->key.length = length;
    switch (backend) {
    case SHMTOPO_BACKEND_POSIX:
        return create_posix(length, win_id, seg);
    case SHMTOPO_BACKEND_MEMFD:
        return create_memfd(length, seg);
    case SHMTOPO_BACKEND_SYSV:
        return create_sysv(length, seg);
    default:
        return shmtopo_backend_probe(backend) < 0 ? -1
               : shmtopo_fail(ENOTSUP, -1, "backend %s cannot create segments",
                              shmtopo_backend_name(backend));
    }
}

int shmtopo_seg_create(int backend, size_t length, uint64_t win_id, shmtopo_seg_t *seg)
{
    if (create_any(backend, length, win_id, seg) == 0)
        return 0;
    /* Each create_* has undone its own work; leave nothing for destroy. */
    int err = errno;
    memset(seg, 0, sizeof(*seg));
    seg->fd = -1;
    errno = err;
    return -1;
}

int shmtopo_seg_attach(const shmtopo_seg_key_t *key, shmtopo_seg_t *seg)
{
    memset(seg, 0, sizeof(*seg));
    seg->key = *key;
    seg->fd = -1;
    seg->length = key->length;
    int fd = -1;
    char path[64];
    switch (key->backend) {
    case SHMTOPO_BACKEND_POSIX:
        fd = shm_open(key->name, O_RDWR | O_CLOEXEC, 0);
        if (fd < 0)
            return shmtopo_fail(errno, -1, "shm_open %s: %s", key->name, strerror(errno));
        break;
    case SHMTOPO_BACKEND_MEMFD:
        snprintf(path, sizeof(path), "/proc/%d/fd/%d", key->pid, key->handle);
        fd = open(path, O_RDWR | O_CLOEXEC);
        if (fd < 0)
            return shmtopo_fail(errno, -1, "open %s: %s", path, strerror(errno));
        break;
    case SHMTOPO_BACKEND_SYSV: {
        void *addr = shmat(key->handle, NULL, 0);
        if (addr == (void *)-1)
            return shmtopo_fail(errno, -1, "shmat id %d: %s", key->handle, strerror(errno));
        seg->addr = addr;
        return 0;
    }
    default:
        return shmtopo_fail(EINVAL, -1, "cannot attach a %s segment",
                            shmtopo_backend_name(key->backend));
    }
    int rc = map_fd(fd, seg->length, &seg->addr);
    close(fd);
    return rc;
}

void shmtopo_seg_unpublish(shmtopo_seg_t *seg)
{
    if (!seg->owner)
        return;
    if (seg->key.backend == SHMTOPO_BACKEND_POSIX && seg->key.name[0]) {
        shm_unlink(seg->key.name);
        seg->key.name[0] = '\0';
    }
    if (seg->fd >= 0) {
        close(seg->fd);
        seg->fd = -1;
    }
}

void shmtopo_seg_destroy(shmtopo_seg_t *seg, int unmap)
{
    shmtopo_seg_unpublish(seg);
    if (unmap && seg->addr) {
        if (seg->key.backend == SHMTOPO_BACKEND_SYSV)
            shmdt(seg->addr);
        else
            munmap(seg->addr, seg->length);
    }
    seg->addr = NULL;
}

/* ---- admission -------------------------------------------------------------- */

/* A number after `key` in a "key value" file (/proc/meminfo, memory.stat),
 * times `unit`; 0 when absent. */
static uint64_t field_of(const char *path, const char *key, uint64_t unit)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    char line[256];
    uint64_t v = 0;
    const size_t n = strlen(key);
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, key, n) == 0 && (line[n] == ' ' || line[n] == '\t')) {
            v = strtoull(line + n, NULL, 10) * unit;
            break;
        }
    fclose(f);
    return v;
}

/* The first number in a file ("max" counts as none); 1 when read. */
static int number_in(const char *path, uint64_t *out)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    char buf[64] = "";
    int ok = fgets(buf, sizeof(buf), f) != NULL && buf[0] >= '0' && buf[0] <= '9';
    fclose(f);
    if (ok)
        *out = strtoull(buf, NULL, 10);
    return ok;
}

/* Room left under the memory cgroup's limits: at each level from this
 * process's cgroup up to the root, limit minus usage (plus the page cache
 * the kernel would reclaim first), the least of them. cgroup v2
 * (memory.max) or v1 (memory.limit_in_bytes). 1 when some limit applies. */
static int cgroup_room(uint64_t *roomp)
{
    FILE *f = fopen("/proc/self/cgroup", "re");
    if (!f)
        return 0;
    char line[512], v1[400] = "", v2[400] = "";
    int have_v1 = 0, have_v2 = 0;
    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = '\0';
        char *ctl = strchr(line, ':'), *path = ctl ? strchr(ctl + 1, ':') : NULL;
        if (!path)
            continue;
        *path++ = '\0';
        ctl++;
        if (strcmp(ctl, "") == 0 && !have_v2)
            have_v2 = snprintf(v2, sizeof(v2), "%s", path) > 0;
        else if ((strcmp(ctl, "memory") == 0 || strstr(ctl, "memory")) && !have_v1)
            have_v1 = snprintf(v1, sizeof(v1), "%s", path) > 0;
    }
    fclose(f);
    const struct { int have; const char *rel, *mount, *limit, *usage, *cache; } kinds[] = {
        {have_v1, v1, "/sys/fs/cgroup/memory", "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"},
        {have_v2, v2, "/sys/fs/cgroup", "memory.max", "memory.current", "inactive_file"},
        {have_v2, v2, "/sys/fs/cgroup/unified", "memory.max", "memory.current", "inactive_file"},
    };
    int found = 0;
    uint64_t room = UINT64_MAX;
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
        if (!kinds[k].have)
            continue;
        char dir[1024], file[1100];
        snprintf(dir, sizeof(dir), "%s%s", kinds[k].mount, kinds[k].rel);
        for (;;) {
            uint64_t limit, usage = 0;
            snprintf(file, sizeof(file), "%s/%s", dir, kinds[k].limit);
            if (number_in(file, &limit) && limit < (1ull << 60)) {
                snprintf(file, sizeof(file), "%s/%s", dir, kinds[k].usage);
                number_in(file, &usage);
                snprintf(file, sizeof(file), "%s/memory.stat", dir);
                uint64_t cache = field_of(file, kinds[k].cache, 1);
                uint64_t used = usage > cache ? usage - cache : 0;
                uint64_t left = limit > used ? limit - used : 0;
                if (left < room)
                    room = left;
                found = 1;
            }
            char *slash = strrchr(dir, '/');
            if (!slash || (size_t)(slash - dir) < strlen(kinds[k].mount))
                break;
            *slash = '\0';
        }
    }
    if (found)
        *roomp = room;
    return found;
}

int shmtopo_mem_admit(int backend, uint64_t total)
{
    const unsigned long long want = (unsigned long long)total;
    uint64_t avail = field_of("/proc/meminfo", "MemAvailable:", 1024);
    if (avail && total > avail)
        return shmtopo_fail(ENOMEM, -1,
                            "the node's part of this window, %llu bytes, exceeds the memory available "
                            "(MemAvailable: %llu bytes)", want, (unsigned long long)avail);
    uint64_t room;
    if (cgroup_room(&room) && total > room)
        return shmtopo_fail(ENOMEM, -1,
                            "the node's part of this window, %llu bytes, exceeds what the memory cgroup "
                            "has left (%llu bytes)", want, (unsigned long long)room);
    struct statvfs fs;
    if (backend == SHMTOPO_BACKEND_POSIX && statvfs("/dev/shm", &fs) == 0 &&
        total > (uint64_t)fs.f_bavail * fs.f_frsize)
        return shmtopo_fail(ENOSPC, -1,
                            "the node's part of this window, %llu bytes, exceeds the free space of /dev/shm "
                            "(%llu bytes)", want, (unsigned long long)fs.f_bavail * fs.f_frsize);
    return 0;
}

/* ---- leftovers of dead processes ------------------------------------------------ */

/* Remove the files in `dir` named prefix<pid>... whose creator process is
 * gone: a creator killed between creating a name and the unlink that
 * follows everyone's mapping (or adoption) leaves it behind, and only the
 * pid in the name tells whose it was. Unlinking a name never touches memory
 * that live processes still map. */
static int sweep(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int removed = 0;
    const size_t n = strlen(prefix);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, prefix, n) != 0)
            continue;
        char *end;
        long pid = strtol(e->d_name + n, &end, 10);
        if (pid <= 0 || *end != '.' || shmtopo_pid_running((pid_t)pid))
            continue;
        if (unlinkat(dirfd(d), e->d_name, 0) == 0)
            removed++;
    }
    closedir(d);
    return removed;
}

int shmtopo_sweep_stale_segments(void)
{
    return sweep("/dev/shm", "shmtopo.");
}

int shmtopo_sweep_stale_files(const char *topo_dir)
{
    int removed = sweep("/dev/shm", "shmtopo.") + sweep("/dev/shm", SHMTOPO_TOPO_PREFIX);
    if (topo_dir && *topo_dir && strcmp(topo_dir, "/dev/shm") != 0)
        removed += sweep(topo_dir, SHMTOPO_TOPO_PREFIX);
    return removed;
}

int shmtopo_unmap(void *addr, size_t length)
{
    /* sysv attachments are unmapped by shmdt; munmap works on them too on
     * Linux (the segment is detached when its last mapping goes). */
    if (addr && munmap(addr, length) < 0)
        return shmtopo_fail_errno("munmap");
    return 0;
}
