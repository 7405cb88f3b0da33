/* Attaching another process's memory by its address (the KUPL layer's
 * shm_attach / shm_detach, its zero-copy path). Two ways, tried in order:
 *
 * - The range lies in a part of a window of a comm of this process: that
 *   segment is already mapped here, so it is mapped once more from this
 *   process's own mapping (mremap with old size 0 maps the same shared pages
 *   anew). Owners' addresses of their parts are gathered when the window is
 *   made, so a peer's address can be translated.
 * - Otherwise, where /dev/xpmem and libxpmem exist, through XPMEM: every
 *   process of a comm exports its address space when the comm is made and
 *   the segment ids are gathered with the comm, so an attach needs only the
 *   owner's pid.
 *
 * Anything else fails with the reason. The mappings made here are this
 * process's own: they outlive the window until detached. */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "internal.h"

/* ---- the registry ------------------------------------------------------ */

typedef struct tracked_win {
    const shmtopo_win_t *win;
    uint64_t *owner;           /* [r]: rank r's address of its own part */
    struct tracked_win *next;
} tracked_win_t;

typedef struct tracked_comm {
    const shmtopo_comm_t *comm;
    int64_t *segids;           /* [r]: rank r's XPMEM segment, -1 for none */
    struct tracked_comm *next;
} tracked_comm_t;

typedef struct attachment {
    void *ptr;                 /* what attach returned */
    void *base;                /* the page-aligned mapping */
    size_t length;
    int64_t apid;              /* XPMEM: the access handle; -1: an mremap'ed mapping */
    struct attachment *next;
} attachment_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static tracked_win_t *wins;
static tracked_comm_t *comms;
static attachment_t *attachments;

/* ---- XPMEM, loaded on first use ---------------------------------------- */

/* libxpmem's interface (xpmem.h), declared here so that shmtopo builds
 * without it. */
#define XPMEM_RDWR 0x2
#define XPMEM_PERMIT_MODE 0x1
#define XPMEM_MAXADDR_SIZE ((size_t)-1)

struct xpmem_addr_arg {
    int64_t apid;
    off_t offset;
};

static struct {
    int loaded;                /* tried already */
    int64_t segid;             /* this process's address space, -1: none */
    char why[200];             /* why XPMEM is unavailable */
    int64_t (*make)(void *vaddr, size_t size, int permit_type, void *permit_value);
    int64_t (*get)(int64_t segid, int flags, int permit_type, void *permit_value);
    int (*release)(int64_t apid);
    void *(*attach)(struct xpmem_addr_arg addr, size_t size, void *vaddr);
    int (*detach)(void *vaddr);
} xp = {.segid = -1};

/* Under lock: export this process's address space once, if XPMEM works here. */
static void xpmem_load(void)
{
    if (xp.loaded)
        return;
    xp.loaded = 1;
    if (access("/dev/xpmem", R_OK | W_OK) < 0) {
        snprintf(xp.why, sizeof(xp.why), "/dev/xpmem: %s", strerror(errno));
        return;
    }
    void *lib = dlopen("libxpmem.so.0", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        lib = dlopen("libxpmem.so", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(xp.why, sizeof(xp.why), "/dev/xpmem exists but libxpmem cannot be loaded (%s)", dlerror());
        return;
    }
    *(void **)&xp.make = dlsym(lib, "xpmem_make");
    *(void **)&xp.get = dlsym(lib, "xpmem_get");
    *(void **)&xp.release = dlsym(lib, "xpmem_release");
    *(void **)&xp.attach = dlsym(lib, "xpmem_attach");
    *(void **)&xp.detach = dlsym(lib, "xpmem_detach");
    if (!xp.make || !xp.get || !xp.release || !xp.attach || !xp.detach) {
        snprintf(xp.why, sizeof(xp.why), "libxpmem lacks xpmem_make/get/release/attach/detach");
        dlclose(lib);
        return;
    }
    /* the whole address space, readable and writable by this user only */
    xp.segid = xp.make(NULL, XPMEM_MAXADDR_SIZE, XPMEM_PERMIT_MODE, (void *)(uintptr_t)0600);
    if (xp.segid < 0)
        snprintf(xp.why, sizeof(xp.why), "xpmem_make failed: %s", strerror(errno));
}

/* ---- tracking comms and windows ------------------------------------------ */

int shmtopo_attach_track_comm(shmtopo_comm_t *comm)
{
    const int P = shmtopo_comm_size(comm);
    tracked_comm_t *t = calloc(1, sizeof(*t));
    int64_t *segids = calloc((size_t)P, sizeof(*segids));
    pthread_mutex_lock(&lock);
    xpmem_load();
    int64_t mine = xp.segid;
    pthread_mutex_unlock(&lock);
    /* every rank takes part, also one out of memory (it posts -1 and fails after) */
    int rc = shmtopo_allgather(comm, &mine, segids ? segids : &mine, segids ? 1 : 0, SHMTOPO_INT64);
    if (rc < 0 || !t || !segids) {
        free(t);
        free(segids);
        return rc < 0 ? -1 : shmtopo_fail(ENOMEM, -1, "out of memory tracking a comm");
    }
    t->comm = comm;
    t->segids = segids;
    pthread_mutex_lock(&lock);
    t->next = comms;
    comms = t;
    pthread_mutex_unlock(&lock);
    return 0;
}

void shmtopo_attach_untrack_comm(const shmtopo_comm_t *comm)
{
    pthread_mutex_lock(&lock);
    for (tracked_comm_t **p = &comms; *p; p = &(*p)->next)
        if ((*p)->comm == comm) {
            tracked_comm_t *t = *p;
            *p = t->next;
            free(t->segids);
            free(t);
            break;
        }
    pthread_mutex_unlock(&lock);
}

int shmtopo_attach_track_win(shmtopo_win_t *win)
{
    const int P = win->size;
    tracked_win_t *t = calloc(1, sizeof(*t));
    uint64_t *owner = calloc((size_t)P, sizeof(*owner));
    uint64_t mine = (uint64_t)(uintptr_t)win->base[win->rank];
    int rc = shmtopo_allgather(win->comm, &mine, owner ? owner : &mine, owner ? 1 : 0, SHMTOPO_UINT64);
    if (rc < 0 || !t || !owner) {
        free(t);
        free(owner);
        return rc < 0 ? -1 : shmtopo_fail(ENOMEM, -1, "out of memory tracking a window");
    }
    t->win = win;
    t->owner = owner;
    pthread_mutex_lock(&lock);
    t->next = wins;
    wins = t;
    pthread_mutex_unlock(&lock);
    return 0;
}

void shmtopo_attach_untrack_win(const shmtopo_win_t *win)
{
    pthread_mutex_lock(&lock);
    for (tracked_win_t **p = &wins; *p; p = &(*p)->next)
        if ((*p)->win == win) {
            tracked_win_t *t = *p;
            *p = t->next;
            free(t->owner);
            free(t);
            break;
        }
    pthread_mutex_unlock(&lock);
}

/* ---- attach / detach ---------------------------------------------------------- */

/* Under lock: where [addr, addr + size) of process pid is mapped here, or
 * NULL when no tracked window part holds it. */
static char *window_address(pid_t pid, uintptr_t addr, size_t size)
{
    for (const tracked_win_t *t = wins; t; t = t->next) {
        const shmtopo_win_t *win = t->win;
        for (int r = 0; r < win->size; r++) {
            const uintptr_t start = (uintptr_t)t->owner[r];
            if (win->comm->pids[r] != pid || win->sizes[r] == 0 || addr < start ||
                addr - start > win->sizes[r] || size > win->sizes[r] - (addr - start))
                continue;
            return win->base[r] + (addr - start);
        }
    }
    return NULL;
}

/* Under lock: rank pid's XPMEM segment in a tracked comm, or -1. */
static int64_t xpmem_segment(pid_t pid)
{
    for (const tracked_comm_t *t = comms; t; t = t->next)
        for (int r = 0; r < t->comm->size; r++)
            if (t->comm->pids[r] == pid && t->segids[r] >= 0)
                return t->segids[r];
    return -1;
}

void *shmtopo_attach(pid_t src_pid, const void *src_addr, size_t size)
{
    const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE), addr = (uintptr_t)src_addr;
    if (src_pid <= 0 || !src_addr || size == 0 || size > SIZE_MAX / 4 || addr > UINTPTR_MAX - size) {
        shmtopo_fail(EINVAL, -1, "attach needs a pid > 0, an address and a size > 0 (pid %d, %p, size %zu)",
                     (int)src_pid, src_addr, size);
        return NULL;
    }
    attachment_t *a = calloc(1, sizeof(*a));
    if (!a) {
        shmtopo_fail(ENOMEM, -1, "out of memory attaching");
        return NULL;
    }
    pthread_mutex_lock(&lock);
    char *local = window_address(src_pid, addr, size);
    if (local) {
        const uintptr_t start = (uintptr_t)local / pg * pg;
        a->length = shmtopo_round_up((uintptr_t)local + size - start, pg);
        a->base = mremap((void *)start, 0, a->length, MREMAP_MAYMOVE);
        a->apid = -1;
        if (a->base == MAP_FAILED) {
            shmtopo_fail_errno("mapping a window's segment again (mremap)");
            goto out_fail;
        }
        a->ptr = (char *)a->base + ((uintptr_t)local - start);
    } else {
        int64_t segid = xpmem_segment(src_pid);
        if (segid < 0) {
            xpmem_load();
            shmtopo_fail(EINVAL, -1,
                         "[%p, +%zu) of pid %d lies in no window of a comm of this process, and XPMEM "
                         "cannot attach it (%s)",
                         src_addr, size, (int)src_pid,
                         xp.segid < 0 ? xp.why : "that pid is no rank of a comm of this process");
            goto out_fail;
        }
        const uintptr_t start = addr / pg * pg;
        a->length = shmtopo_round_up(addr + size - start, pg);
        a->apid = xp.get(segid, XPMEM_RDWR, XPMEM_PERMIT_MODE, NULL);
        if (a->apid < 0) {
            shmtopo_fail_errno("xpmem_get");
            goto out_fail;
        }
        struct xpmem_addr_arg xa = {.apid = a->apid, .offset = (off_t)start};
        a->base = xp.attach(xa, a->length, NULL);
        if (!a->base || a->base == MAP_FAILED) {
            shmtopo_fail_errno("xpmem_attach");
            xp.release(a->apid);
            goto out_fail;
        }
        a->ptr = (char *)a->base + (addr - start);
    }
    a->next = attachments;
    attachments = a;
    pthread_mutex_unlock(&lock);
    return a->ptr;
out_fail:
    pthread_mutex_unlock(&lock);
    free(a);
    return NULL;
}

int shmtopo_detach(void *ptr)
{
    pthread_mutex_lock(&lock);
    attachment_t *a = NULL;
    for (attachment_t **p = &attachments; *p; p = &(*p)->next)
        if ((*p)->ptr == ptr) {
            a = *p;
            *p = a->next;
            break;
        }
    pthread_mutex_unlock(&lock);
    if (!a)
        return shmtopo_fail(EINVAL, -1, "%p was not returned by attach (or is detached already)", ptr);
    int rc = 0;
    if (a->apid < 0) {
        rc = munmap(a->base, a->length);
    } else {
        rc = xp.detach(a->base);
        xp.release(a->apid);
    }
    free(a);
    return rc < 0 ? shmtopo_fail_errno("detach") : 0;
}
