/* Symmetric windows: every rank maps every segment at the same virtual
 * address, so pointers stored inside the window are valid everywhere. The
 * address comes from the intersection of all ranks' free ranges; each rank
 * reserves it (MAP_FIXED_NOREPLACE never takes a range already in use), all
 * agree, and only then move their mappings there. A race with another
 * mapping makes every rank retry at the next candidate. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"
#include "maps.h"

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

#define ATTEMPTS 4
#define ALIGN (2u << 20)

/* Reserve [addr, addr + length) without touching anything already mapped. */
static int reserve(uintptr_t addr, size_t length)
{
    void *p = mmap((void *)addr, length, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    if (p == MAP_FAILED)
        return shmtopo_fail(errno, -1, "address range %#lx+%zu is taken: %s", (unsigned long)addr,
                            length, strerror(errno));
    if ((uintptr_t)p != addr) { /* a kernel without MAP_FIXED_NOREPLACE took it as a hint */
        munmap(p, length);
        return shmtopo_fail(EEXIST, -1, "address range %#lx+%zu is taken", (unsigned long)addr, length);
    }
    return 0;
}

int shmtopo_win_make_symmetric(shmtopo_win_t *win, shmtopo_exchange_fn exchange)
{
    shmtopo_sig_t sig = shmtopo_sig(SHMTOPO_KIND_WIN_ALLOC);
    size_t total = 0;
    for (int i = 0; i < win->nsegs; i++)
        total += win->segs[i].length;
    shmtopo_range_t *ranges = NULL;
    size_t n = 0;
    int rc = -1;
    for (unsigned attempt = 0; attempt < ATTEMPTS; attempt++) {
        free(ranges);
        ranges = NULL;
        if (shmtopo_common_free_ranges(win->comm, &sig, 0, exchange, 0, NULL, &ranges, &n) < 0)
            goto out;
        uintptr_t base = 0;
        if (shmtopo_ranges_choose(ranges, n, total, ALIGN, attempt, &base) < 0) {
            shmtopo_fail(ENOMEM, -1, "no address range of %zu bytes is free in every rank", total);
            goto out; /* every rank computed the same list: all fail here alike */
        }
        int err = reserve(base, total) < 0 ? errno : 0;
        if (exchange(win->comm, &sig, err, NULL, NULL, 0) < 0) {
            if (!err)
                munmap((void *)base, total);
            if (errno != EEXIST && errno != EBUSY && errno != ENOMEM)
                goto out; /* not a lost race: a wait or the transport failed */
            continue; /* someone lost the race: everyone tries the next address */
        }
        /* Move each mapping into its place over our own reservation. */
        uintptr_t at = base;
        err = 0;
        for (int i = 0; i < win->nsegs && !err; i++) {
            shmtopo_seg_t *seg = &win->segs[i];
            /* The system call itself: MPI stacks (UCX's memory hooks under
             * MPICH) interpose mremap and lose its fifth argument. */
            void *moved = (void *)syscall(SYS_mremap, seg->addr, seg->length, seg->length,
                                          MREMAP_MAYMOVE | MREMAP_FIXED, (void *)at);
            if (moved != (void *)at) {
                err = errno;
                shmtopo_fail_errno("mremap into the symmetric range");
                break;
            }
            seg->addr = moved;
            at += seg->length;
        }
        rc = exchange(win->comm, &sig, err, NULL, NULL, 0);
        if (rc < 0) {
            /* drop the whole range, moved segments included */
            int keep = errno;
            munmap((void *)base, total);
            for (int i = 0; i < win->nsegs; i++)
                if ((uintptr_t)win->segs[i].addr >= base && (uintptr_t)win->segs[i].addr < base + total)
                    win->segs[i].addr = NULL;
            errno = keep;
        }
        goto out;
    }
    shmtopo_fail(EBUSY, -1, "no common free address held still in %d attempts", ATTEMPTS);
out:
    free(ranges);
    return rc;
}
