/* Segment backends: how one rank's memory becomes mappable by its peers.
 * posix: a named shm_open file, unlinked as soon as all peers mapped it;
 *        its name is unpredictable and created exclusively.
 * memfd: no name at all; peers open /proc/PID/fd/N while the creator holds it.
 * sysv:  marked for removal right after creation (Linux lets peers attach a
 *        removed segment while it is attached); until then its key names the
 *        creator, so a creator killed in between leaves nothing the sweep
 *        does not find.
 * xpmem: needs the XPMEM kernel module; detected, not built here.
 * Also here: the names of what shmtopo leaves in shared directories for a
 * moment (whose they are), and the sweep of those whose creator is gone. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/shm.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"
#include "state.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#ifndef MFD_HUGETLB
#define MFD_HUGETLB 4
#endif
/* the kernel's mempolicy modes (linux/mempolicy.h), for mbind */
#define POLICY_PREFERRED 1
#define POLICY_INTERLEAVE 3
#define MPOL_F_MEMS_ALLOWED (1 << 2)

/* ---- whose names these are ------------------------------------------------------ */

/* A pid means something only in the PID namespace that gave it: containers
 * sharing /dev/shm, and nodes sharing a topology directory, each have their
 * own pid N. So a name carries, beside its creator's pid, the creator's
 * origin: a hash of this kernel's boot id and of the PID namespace the
 * creator runs in (the nsfs inode of /proc/self/ns/pid). The sweep judges by
 * pid only the names of its own origin.
 * 0 when it cannot be known for sure, which makes the sweep remove nothing:
 * boot id or namespace unreadable, or a /proc that is not this namespace's
 * (unshare -p without a /proc of its own: /proc/self names this process by
 * another namespace's pid, and the pids the sweep reads there would be that
 * namespace's). A process's own namespace only changes with a fork, so the
 * value is kept per fork generation. */
static _Atomic uint64_t origin_value;
static _Atomic uint64_t origin_stamp; /* (fork generation << 1) | 1 it was computed in */

static uint64_t fnv1a(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static uint64_t compute_origin(void)
{
    char boot[64], link[32], self[32];
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, boot, sizeof(boot));
    close(fd);
    ssize_t m = readlink("/proc/self", link, sizeof(link) - 1);
    if (n < 32 || m <= 0)
        return 0;
    link[m] = '\0';
    snprintf(self, sizeof(self), "%d", (int)getpid());
    struct stat ns;
    if (strcmp(link, self) != 0 || stat("/proc/self/ns/pid", &ns) < 0)
        return 0;
    uint64_t h = fnv1a(0xcbf29ce484222325ull, boot, (size_t)n);
    h = fnv1a(h, &ns.st_dev, sizeof(ns.st_dev));
    h = fnv1a(h, &ns.st_ino, sizeof(ns.st_ino));
    return h ? h : 1;
}

uint64_t shmtopo_origin(void)
{
    const uint64_t stamp = (uint64_t)atomic_load_explicit(&shmtopo_fork_generation, memory_order_relaxed) << 1 | 1;
    if (atomic_load_explicit(&origin_stamp, memory_order_acquire) == stamp)
        return atomic_load_explicit(&origin_value, memory_order_relaxed);
    /* threads racing here compute the same value */
    const uint64_t value = compute_origin();
    atomic_store_explicit(&origin_value, value, memory_order_relaxed);
    atomic_store_explicit(&origin_stamp, stamp, memory_order_release);
    return value;
}

int shmtopo_name_make(char *name, size_t len, const char *head, const char *tail, int digits)
{
    static const char hex[] = "0123456789abcdef";
    unsigned char bytes[16];
    char random[33];
    if (digits < 1 || digits > 32)
        return shmtopo_fail(EINVAL, -1, "a name's random part must have 1 to 32 digits, not %d", digits);
    const size_t want = (size_t)(digits + 1) / 2;
    size_t got = 0;
    while (got < want) {
        ssize_t n = getrandom(bytes + got, want - got, 0);
        if (n < 0 && errno != EINTR)
            return shmtopo_fail(errno, -1, "getrandom for a fresh name: %s", strerror(errno));
        got += n > 0 ? (size_t)n : 0;
    }
    for (int i = 0; i < digits; i++)
        random[i] = hex[(bytes[i / 2] >> (i % 2 ? 0 : 4)) & 0xf];
    random[digits] = '\0';
    const int n = snprintf(name, len, "%s%d.%016llx.%s%s", head, (int)getpid(),
                           (unsigned long long)shmtopo_origin(), random, tail);
    if (n < 0 || (size_t)n >= len)
        return shmtopo_fail(ENAMETOOLONG, -1, "the name %s%d... does not fit in %zu bytes", head, (int)getpid(),
                            len);
    return 0;
}

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

/* Size the file; its pages are reserved by shmtopo_seg_populate, once
 * placed, by the rank that owns them. */
static int size_fd(int fd, size_t length, const char *what)
{
    if (ftruncate(fd, (off_t)length) < 0)
        return shmtopo_fail_errno(what);
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

/* "/shmtopo.<pid>.<origin>.<12 random hex digits>": 46 bytes at most, in
 * the key's 48. A name taken (someone placed a file or link there) is
 * retried under another; O_EXCL|O_NOFOLLOW never opens what was there. */
static int create_posix(size_t length, shmtopo_seg_t *seg)
{
    for (int tries = 0; tries < SHMTOPO_NAME_TRIES; tries++) {
        if (shmtopo_name_make(seg->key.name, sizeof(seg->key.name), "/" SHMTOPO_SEG_PREFIX, "", 12) < 0)
            return -1;
        seg->fd = shm_open(seg->key.name, O_CREAT | O_EXCL | O_NOFOLLOW | O_RDWR | O_CLOEXEC, 0600);
        if (seg->fd >= 0 || errno != EEXIST)
            break;
    }
    if (seg->fd < 0 && errno == EEXIST)
        return shmtopo_fail(EEXIST, -1, "shm_open: %d fresh names in /dev/shm were all taken already (files "
                            "or links someone else placed there?)", SHMTOPO_NAME_TRIES);
    if (seg->fd < 0)
        return shmtopo_fail(errno, -1, "shm_open %s: %s", seg->key.name, strerror(errno));
    if (size_fd(seg->fd, length, "posix segment in /dev/shm") < 0 ||
        map_fd(seg->fd, length, &seg->addr) < 0) {
        int err = errno;
        shm_unlink(seg->key.name);
        close(seg->fd);
        errno = err;
        return -1;
    }
    return 0;
}

static int create_memfd(size_t length, int huge, shmtopo_seg_t *seg)
{
    seg->fd = memfd_create("shmtopo", MFD_CLOEXEC | (huge == SHMTOPO_HUGE_HUGETLB ? MFD_HUGETLB : 0));
    if (seg->fd < 0)
        return shmtopo_fail_errno(huge == SHMTOPO_HUGE_HUGETLB ? "memfd_create(MFD_HUGETLB)" : "memfd_create");
    /* a hugetlb mapping reserves its pages from the pool at mmap: ENOMEM there */
    if (size_fd(seg->fd, length, "memfd segment") < 0 || map_fd(seg->fd, length, &seg->addr) < 0) {
        int err = errno;
        close(seg->fd);
        errno = err;
        return -1;
    }
    seg->key.handle = seg->fd;
    return 0;
}

/* A sysv segment's key while it is not yet marked for removal: a tag in
 * the top bits, the creator's pid (at most 22 bits on Linux) and a try
 * count. IPC_RMID turns the key back to IPC_PRIVATE. */
#define SYSV_TAG 0x40000000u
#define SYSV_KEY(pid, try) ((key_t)(SYSV_TAG | ((uint32_t)(pid) & 0x3fffffu) << 8 | ((try) & 0xffu)))
#define SYSV_KEY_PID(key) ((pid_t)(((uint32_t)(key) >> 8) & 0x3fffffu))

static int create_sysv(size_t length, shmtopo_seg_t *seg)
{
    int id = -1;
    for (int tries = 0; tries < 256 && id < 0; tries++) {
        id = shmget(SYSV_KEY(getpid(), tries), length, IPC_CREAT | IPC_EXCL | 0600);
        if (id < 0 && errno != EEXIST)
            break;
    }
    if (id < 0)
        return shmtopo_fail(errno, -1, "shmget of %zu bytes: %s", length, strerror(errno));
    void *addr = shmat(id, NULL, 0);
    int err = errno;
    shmctl(id, IPC_RMID, NULL); /* gone with the last detach, whatever happens */
    if (addr == (void *)-1)
        return shmtopo_fail(err, -1, "shmat: %s", strerror(err));
    seg->key.handle = id;
    seg->addr = addr;
    return 0;
}

static int create_any(int backend, size_t length, int huge, shmtopo_seg_t *seg)
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
        return create_posix(length, seg);
    case SHMTOPO_BACKEND_MEMFD:
        return create_memfd(length, huge, seg);
    case SHMTOPO_BACKEND_SYSV:
        return create_sysv(length, seg);
    default:
        return shmtopo_backend_probe(backend) < 0 ? -1
               : shmtopo_fail(ENOTSUP, -1, "backend %s cannot create segments",
                              shmtopo_backend_name(backend));
    }
}

int shmtopo_seg_create(int backend, size_t length, uint64_t win_id, int huge, shmtopo_seg_t *seg)
{
    (void)win_id; /* names are random: a window's id adds nothing to them */
    if (create_any(backend, length, huge, seg) == 0) {
        seg->key.huge = huge;
        /* before any page exists: the kernel then faults huge ones */
        if (huge == SHMTOPO_HUGE_TRANSPARENT)
            madvise(seg->addr, length, MADV_HUGEPAGE);
        return 0;
    }
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
        break;
    }
    default:
        return shmtopo_fail(EINVAL, -1, "cannot attach a %s segment",
                            shmtopo_backend_name(key->backend));
    }
    if (fd >= 0) {
        int rc = map_fd(fd, seg->length, &seg->addr);
        close(fd);
        if (rc < 0)
            return -1;
    }
    /* the advice is per mapping: a peer that faults pages (its own part of
     * a contiguous window) asks for huge ones too */
    if (key->huge == SHMTOPO_HUGE_TRANSPARENT)
        madvise(seg->addr, seg->length, MADV_HUGEPAGE);
    return 0;
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

/* ---- placing and reserving a rank's pages ------------------------------------ */

static int count_nodes(const uint64_t *nodes)
{
    int n = 0;
    for (int w = 0; w < 16; w++)
        n += __builtin_popcountll(nodes[w]);
    return n;
}

void shmtopo_seg_place(void *addr, size_t length, int placement, const uint64_t *nodes, int bind,
                       shmtopo_win_place_t *placep)
{
    memset(placep, 0, sizeof(*placep));
    memcpy(placep->nodes, nodes, sizeof(placep->nodes));
    uint64_t allowed[16] = {0};
    /* the nodes this process may allocate on (its cpuset's mems) */
    if (syscall(SYS_get_mempolicy, NULL, allowed, (unsigned long)16 * 64 + 1, NULL, MPOL_F_MEMS_ALLOWED) < 0)
        allowed[0] = 1;
    placep->allowed = count_nodes(allowed);
    int n = count_nodes(nodes);
    if (placement == SHMTOPO_PLACEMENT_INTERLEAVE && !n) {
        memcpy(placep->nodes, allowed, sizeof(allowed));
        nodes = placep->nodes;
        n = placep->allowed;
        bind = 1;
    }
    placep->placed = SHMTOPO_PLACED_FIRST_TOUCH;
    /* local with several nodes near the owner: its first touch picks the one it runs on */
    if (!length || !n || (placement == SHMTOPO_PLACEMENT_LOCAL && n > 1))
        return;
    if (!bind) {
        placep->placed = SHMTOPO_PLACED_MODELLED;
        return;
    }
    /* The kernel call hwloc_set_area_membind makes (the core knows no hwloc).
     * On shared memory it sets the file's own policy for the range, which
     * every later fault obeys, whoever faults. Preferred, not bound: a full
     * node spills over instead of failing the allocation. */
    const int mode = placement == SHMTOPO_PLACEMENT_INTERLEAVE ? POLICY_INTERLEAVE : POLICY_PREFERRED;
    if (syscall(SYS_mbind, addr, length, mode, nodes, (unsigned long)16 * 64 + 1, 0ul) < 0) {
        placep->placed = SHMTOPO_PLACED_UNSUPPORTED;
        placep->err = errno;
        return;
    }
    placep->placed = SHMTOPO_PLACED_BOUND;
}

int shmtopo_seg_populate(void *addr, size_t length, int fd, size_t offset)
{
    if (!length)
        return 0;
    /* Fault the pages in now, through this mapping (so madvise's huge pages
     * and the placement apply), so that a lack of memory shows up here. */
    if (madvise(addr, length, MADV_POPULATE_WRITE) == 0)
        return 0;
    int err = errno;
    if (err == EINVAL && fd >= 0) /* a kernel before 5.14: reserve through the file */
        err = posix_fallocate(fd, (off_t)offset, (off_t)length);
    else if (err == EINVAL)
        err = 0; /* nothing to reserve with: the pages come at first use */
    if (err == EFAULT) /* the fault found no room: tmpfs full, or the hugetlb pool empty */
        err = ENOSPC;
    if (err)
        return shmtopo_fail(err, -1, "cannot reserve %zu bytes of shared memory: %s", length, strerror(err));
    return 0;
}

/* ---- huge pages --------------------------------------------------------------- */

static uint64_t field_of(const char *path, const char *key, uint64_t unit);

/* The word in [brackets] of a sysfs choice file ("always [madvise] never"). */
static int chosen_word(const char *path, char *out, size_t len)
{
    FILE *f = fopen(path, "re");
    char line[256] = "";
    int ok = f && fgets(line, sizeof(line), f);
    if (f)
        fclose(f);
    char *open_ = ok ? strchr(line, '[') : NULL, *close_ = open_ ? strchr(open_, ']') : NULL;
    if (!close_)
        return 0;
    snprintf(out, len, "%.*s", (int)(close_ - open_ - 1), open_ + 1);
    return 1;
}

/* The huge= option of the tmpfs mounted at /dev/shm ("never" without one). */
static void dev_shm_huge(char *out, size_t len)
{
    snprintf(out, len, "never");
    FILE *f = fopen("/proc/self/mounts", "re");
    if (!f)
        return;
    char line[1024];
    while (fgets(line, sizeof(line), f)) {
        char dev[256], dir[256], type[64], opts[512];
        if (sscanf(line, "%255s %255s %63s %511s", dev, dir, type, opts) != 4 || strcmp(dir, "/dev/shm"))
            continue;
        char *h = strstr(opts, "huge=");
        snprintf(out, len, "%.*s", h ? (int)strcspn(h + 5, ",") : 5, h ? h + 5 : "never");
    }
    fclose(f);
}

void shmtopo_huge_probe(int backend, shmtopo_huge_probe_t *probep)
{
    memset(probep, 0, sizeof(*probep));
    /* hugetlb pages come from the pool through MFD_HUGETLB only */
    if (backend == SHMTOPO_BACKEND_MEMFD) {
        probep->hugetlb_page = field_of("/proc/meminfo", "Hugepagesize:", 1024);
        probep->hugetlb_free = field_of("/proc/meminfo", "HugePages_Free:", 1) * probep->hugetlb_page;
    }
    /* shmem_enabled rules memfd and System V memory; a tmpfs mount's huge=
     * option its files, unless shmem_enabled forces or denies */
    char global[32] = "never", mount[32] = "never";
    chosen_word("/sys/kernel/mm/transparent_hugepage/shmem_enabled", global, sizeof(global));
    const char *rule = global;
    if (backend == SHMTOPO_BACKEND_POSIX && strcmp(global, "force") && strcmp(global, "deny")) {
        dev_shm_huge(mount, sizeof(mount));
        rule = mount;
    }
    probep->thp = !strcmp(rule, "always") || !strcmp(rule, "within_size") || !strcmp(rule, "advise") ||
                  !strcmp(rule, "force");
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

int shmtopo_mem_admit(int backend, uint64_t total, int huge, uint64_t hugetlb_free)
{
    const unsigned long long want = (unsigned long long)total;
    /* hugetlb pages come from their own pool, outside MemAvailable and /dev/shm */
    if (huge == SHMTOPO_HUGE_HUGETLB)
        return total > hugetlb_free
               ? shmtopo_fail(ENOMEM, -1, "the node's part of this window, %llu bytes in huge pages, exceeds "
                              "the free huge page pool (HugePages_Free: %llu bytes)", want,
                              (unsigned long long)hugetlb_free)
               : 0;
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

/* Remove the files in `dir` named prefix<pid>.<origin>.* that this sweep
 * can prove abandoned: a creator killed between creating a name and the
 * unlink that follows everyone's mapping (or adoption) leaves it behind.
 * Proven means: made in this boot and PID namespace (the origin in the name
 * is this process's, so the pid is this namespace's pid), a regular file of
 * this user (never a link, never another user's: root sweeps only root's),
 * and no process runs with that pid. Anything else may belong to a live
 * process elsewhere (another container, another node of a shared
 * directory) and stays. Unlinking a name never touches memory that live
 * processes still map. */
static int sweep(const char *dir, const char *prefix, uint64_t origin)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    char mark[24];
    snprintf(mark, sizeof(mark), ".%016llx.", (unsigned long long)origin);
    const size_t n = strlen(prefix), marklen = strlen(mark);
    const uid_t euid = geteuid();
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *s = e->d_name + n;
        if (strncmp(e->d_name, prefix, n) != 0 || !isdigit((unsigned char)*s))
            continue;
        char *end;
        long pid = strtol(s, &end, 10);
        if (pid <= 0 || pid > INT_MAX || strncmp(end, mark, marklen) != 0)
            continue;
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode) ||
            st.st_uid != euid || shmtopo_pid_running((pid_t)pid))
            continue;
        if (unlinkat(dirfd(d), e->d_name, 0) == 0)
            removed++;
    }
    closedir(d);
    return removed;
}

/* The columns of /proc/sysvipc/shm the sweep reads, found by their names in
 * the header (their order is the kernel's to choose). */
enum { COL_KEY, COL_SHMID, COL_CPID, COL_NATTCH, COL_UID, COL_CUID, NCOLS };
static const char *const col_names[NCOLS] = {"key", "shmid", "cpid", "nattch", "uid", "cuid"};

/* The kernel's own word, just before the removal (the table's line may be
 * old): the same key and creator (IPC_STAT gives its pid in this process's
 * namespace), still attached by nobody, still this user's, not yet marked
 * for removal. */
static int sysv_abandoned(int id, uint32_t key, pid_t cpid, uid_t euid)
{
    struct shmid_ds ds;
    return shmctl(id, IPC_STAT, &ds) == 0 && (uint32_t)ds.shm_perm.__key == key && ds.shm_cpid == cpid &&
           ds.shm_nattch == 0 && ds.shm_perm.uid == euid && ds.shm_perm.cuid == euid &&
           !(ds.shm_perm.mode & SHM_DEST);
}

/* Whether segment `id` is attached by nobody, looking again every ms while
 * *grace_ms lasts (spent across the sweep): a creator seen dead may still
 * be unmapping its memory, its own attachment with it (a process that reads
 * its /proc entry at that moment holds that memory a little longer). */
static int sysv_unattached(int id, int *grace_ms)
{
    struct shmid_ds ds;
    while (shmctl(id, IPC_STAT, &ds) == 0) {
        if (ds.shm_nattch == 0)
            return 1;
        if (*grace_ms <= 0)
            break;
        nanosleep(&(struct timespec){0, 1000000}, NULL);
        --*grace_ms;
    }
    return 0;
}

/* Remove the sysv segments still keyed by a creator that is gone (killed
 * between shmget and IPC_RMID). Only those attached by nobody, owned and
 * created by this user, and whose creator the kernel shows in this PID
 * namespace (cpid 0: not visible here, so not judged) with the pid the key
 * names, and no process runs with it. A segment a live process keeps
 * attached keeps its key; one still attached by its dying creator is waited
 * for while grace_ms lasts. */
static int sweep_sysv(int grace_ms)
{
    FILE *f = fopen("/proc/sysvipc/shm", "re");
    if (!f)
        return 0;
    char line[512], *save, *t;
    int at[NCOLS], removed = 0, i;
    for (int c = 0; c < NCOLS; c++)
        at[c] = -1;
    if (!fgets(line, sizeof(line), f))
        goto out;
    for (i = 0, t = strtok_r(line, " \t\n", &save); t; i++, t = strtok_r(NULL, " \t\n", &save))
        for (int c = 0; c < NCOLS; c++)
            if (strcmp(t, col_names[c]) == 0)
                at[c] = i;
    for (int c = 0; c < NCOLS; c++)
        if (at[c] < 0)
            goto out; /* a table this code cannot read: remove nothing */
    const uid_t euid = geteuid();
    while (fgets(line, sizeof(line), f)) {
        long long v[NCOLS];
        int got = 0;
        for (i = 0, t = strtok_r(line, " \t\n", &save); t; i++, t = strtok_r(NULL, " \t\n", &save))
            for (int c = 0; c < NCOLS; c++) {
                char *end;
                if (at[c] != i)
                    continue;
                v[c] = strtoll(t, &end, 10);
                got += *end == '\0';
            }
        if (got != NCOLS)
            continue;
        const uint32_t key = (uint32_t)v[COL_KEY];
        const pid_t cpid = (pid_t)v[COL_CPID];
        if ((key & 0xc0000000u) != SYSV_TAG || cpid <= 0 || SYSV_KEY_PID(key) != cpid ||
            v[COL_UID] != (long long)euid || v[COL_CUID] != (long long)euid || shmtopo_pid_running(cpid))
            continue;
        const int id = (int)v[COL_SHMID];
        if ((v[COL_NATTCH] == 0 || sysv_unattached(id, &grace_ms)) && sysv_abandoned(id, key, cpid, euid) &&
            shmctl(id, IPC_RMID, NULL) == 0)
            removed++;
    }
out:
    fclose(f);
    return removed;
}

/* The moment a peer is found dead is the one its leftovers are swept at:
 * its last attachment may take a few more ms to go. */
#define AFTER_DEATH_GRACE_MS 200

static int sweep_all(const char *topo_dir, int grace_ms)
{
    /* whose pids this process cannot judge, it removes nothing of */
    const uint64_t origin = shmtopo_origin();
    if (!origin)
        return 0;
    int removed = sweep("/dev/shm", SHMTOPO_SEG_PREFIX, origin) + sweep("/dev/shm", SHMTOPO_TOPO_PREFIX, origin) +
                  sweep_sysv(grace_ms);
    if (topo_dir && *topo_dir && strcmp(topo_dir, "/dev/shm") != 0)
        removed += sweep(topo_dir, SHMTOPO_TOPO_PREFIX, origin);
    return removed;
}

int shmtopo_sweep_stale_files(const char *topo_dir)
{
    return sweep_all(topo_dir, 0);
}

int shmtopo_sweep_after_death(const char *topo_dir)
{
    return sweep_all(topo_dir, AFTER_DEATH_GRACE_MS);
}

int shmtopo_unmap(void *addr, size_t length)
{
    /* sysv attachments are unmapped by shmdt; munmap works on them too on
     * Linux (the segment is detached when its last mapping goes). */
    if (addr && munmap(addr, length) < 0)
        return shmtopo_fail_errno("munmap");
    return 0;
}
