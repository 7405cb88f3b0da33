/* Standalone test of topo_shmem.c: cc -Inative tests/c/test_topo_shmem.c
 * native/topo_shmem.c native/maps.c native/error.c $(pkg-config --cflags
 * --libs hwloc) && ./a.out (prints failures, exits 1). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <hwloc.h>
#include <hwloc/shmem.h>

#include "maps.h"
#include "shmtopo.h"
#include "topo_shmem.h"

static int failures;

#define CHECK(cond)                                                        \
    do {                                                                   \
        if (!(cond)) {                                                     \
            fprintf(stderr, "[%d] %s:%d: CHECK(%s) failed; errno %d; last error: %s\n", \
                    (int)getpid(), __FILE__, __LINE__, #cond, errno,       \
                    shmtopo_last_error());                                 \
            failures++;                                                    \
        }                                                                  \
    } while (0)

#define MIB ((uintptr_t)1 << 20)

static int same_counts(void *a, void *b)
{
    return hwloc_get_nbobjs_by_type(a, HWLOC_OBJ_PU) == hwloc_get_nbobjs_by_type(b, HWLOC_OBJ_PU)
        && hwloc_get_nbobjs_by_type(a, HWLOC_OBJ_CORE) == hwloc_get_nbobjs_by_type(b, HWLOC_OBJ_CORE)
        && hwloc_get_nbobjs_by_type(a, HWLOC_OBJ_NUMANODE)
               == hwloc_get_nbobjs_by_type(b, HWLOC_OBJ_NUMANODE);
}

static int choose(size_t length, unsigned attempt, uintptr_t *addrp)
{
    shmtopo_range_t r[512];
    size_t n;

    if (shmtopo_maps_self_free(r, 512, &n) < 0)
        return -1;
    return shmtopo_ranges_choose(r, n, length, 2 * MIB, attempt, addrp);
}

static void test_errors(void *local, size_t length, uintptr_t addr, const char *path)
{
    char other[160];
    void *t = NULL, *p;
    uintptr_t b;
    int fd;

    /* exclusive create */
    errno = 0;
    CHECK(shmtopo_topo_shmem_write(local, path, addr, length) == -1 && errno == EEXIST);
    CHECK(access(path, F_OK) == 0); /* somebody else's file is left alone */

    /* a wrong address or length against the header: EINVAL */
    errno = 0;
    CHECK(shmtopo_topo_shmem_adopt(path, addr + 2 * MIB, length, &t) == -1 && errno == EINVAL);
    printf("  adopt at another address: %s\n", shmtopo_last_error());
    errno = 0;
    CHECK(shmtopo_topo_shmem_adopt(path, addr, length + 4096, &t) == -1 && errno == EINVAL);
    errno = 0;
    CHECK(shmtopo_topo_shmem_adopt(path, addr + 100, length, &t) == -1 && errno == EINVAL);
    errno = 0;
    CHECK(shmtopo_topo_shmem_adopt(path, addr, length - 1, &t) == -1 && errno == EINVAL);
    /* what hwloc itself says for a misaligned address */
    fd = open(path, O_RDONLY);
    errno = 0;
    {
        hwloc_topology_t ht;
        int rc = hwloc_shmem_topology_adopt(&ht, fd, 0, (void *)(addr + 100), length, 0);
        printf("  hwloc adopt, misaligned address: rc %d errno %d (%s)\n", rc, errno,
               strerror(errno));
        if (rc == 0)
            hwloc_topology_destroy(ht);
    }
    close(fd);

    /* the range taken in this process: EBUSY */
    p = mmap((void *)(addr + length - 4096), 4096, PROT_NONE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    CHECK(p == (void *)(addr + length - 4096));
    errno = 0;
    CHECK(shmtopo_topo_shmem_adopt(path, addr, length, &t) == -1 && errno == EBUSY);
    printf("  adopt over a taken page: %s\n", shmtopo_last_error());
    snprintf(other, sizeof(other), "%s-busy", path);
    errno = 0;
    CHECK(shmtopo_topo_shmem_write(local, other, addr, length) == -1 && errno == EBUSY);
    CHECK(access(other, F_OK) == -1 && errno == ENOENT); /* removed on failure */
    munmap(p, 4096);

    /* missing file, empty file, short length */
    errno = 0;
    CHECK(shmtopo_topo_shmem_adopt("/dev/shm/shmtopo-test-none", addr, length, &t) == -1
          && errno == ENOENT);
    fd = open(other, O_CREAT | O_EXCL | O_RDWR, 0600);
    CHECK(fd >= 0);
    close(fd);
    errno = 0;
    CHECK(shmtopo_topo_shmem_adopt(other, addr, length, &t) == -1 && errno == EINVAL);
    printf("  adopt an empty file: %s\n", shmtopo_last_error());
    unlink(other);
    errno = 0;
    CHECK(shmtopo_topo_shmem_write(local, other, addr, 4096) == -1 && errno == EINVAL);
    CHECK(access(other, F_OK) == -1);

    /* an address above the user-space top: the kernel ignores the hint */
    b = (uintptr_t)1 << 62;
    errno = 0;
    CHECK(shmtopo_topo_shmem_write(local, other, b, length) == -1);
    printf("  write above the address-space top: errno %d: %s\n", errno,
           shmtopo_last_error());
    CHECK(access(other, F_OK) == -1);
}

int main(void)
{
    void *local = NULL, *adopted = NULL, *fromxml = NULL;
    char path[128], *xml;
    size_t length, xmllen;
    uintptr_t addr = 0;
    unsigned attempt;
    pid_t child;
    int status, rc;

    printf("hwloc %s\n", shmtopo_hwloc_version());
    CHECK(shmtopo_topo_load_local(&local) == 0);
    if (!local)
        return 1;
    CHECK(shmtopo_topo_shmem_length(local, &length) == 0);
    CHECK(length > 0 && length % (size_t)sysconf(_SC_PAGESIZE) == 0);
    printf("PUs %d cores %d, shmem length %zu\n",
           hwloc_get_nbobjs_by_type(local, HWLOC_OBJ_PU),
           hwloc_get_nbobjs_by_type(local, HWLOC_OBJ_CORE), length);

    snprintf(path, sizeof(path), "/dev/shm/shmtopo-test-%d", (int)getpid());
    for (attempt = 0; attempt < 4; attempt++) {
        CHECK(choose(length, attempt, &addr) == 0);
        rc = shmtopo_topo_shmem_write(local, path, addr, length);
        if (rc == 0 || errno != EBUSY)
            break;
    }
    CHECK(rc == 0);
    printf("written at %#lx (attempt %u)\n", (unsigned long)addr, attempt);
    if (rc < 0)
        goto out;

    fflush(stdout); /* the child would print the buffered lines again */
    child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        void *t = NULL;
        int ok = shmtopo_topo_shmem_adopt(path, addr, length, &t) == 0
                 && same_counts(t, local);
        if (!ok)
            fprintf(stderr, "child: %s\n", shmtopo_last_error());
        shmtopo_topo_destroy(t);
        shmtopo_topo_destroy(local);
        _exit(ok ? 0 : 1);
    }
    CHECK(waitpid(child, &status, 0) == child);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);

    CHECK(shmtopo_topo_shmem_adopt(path, addr, length, &adopted) == 0);
    if (adopted) {
        CHECK(same_counts(adopted, local));
        CHECK(hwloc_get_root_obj(adopted) != NULL);
        CHECK((uintptr_t)hwloc_get_root_obj(adopted) >= addr
              && (uintptr_t)hwloc_get_root_obj(adopted) < addr + length);
        /* a second adoption in the same process overlaps the first */
        {
            void *t2 = NULL;
            errno = 0;
            CHECK(shmtopo_topo_shmem_adopt(path, addr, length, &t2) == -1 && errno == EBUSY);
        }
        /* XML round trip from the adopted (read-only) copy */
        CHECK(shmtopo_topo_export_xml(adopted, &xml, &xmllen) == 0);
        if (xml) {
            CHECK(strlen(xml) == xmllen);
            CHECK(shmtopo_topo_load_xml(xml, xmllen, &fromxml) == 0);
            CHECK(fromxml && same_counts(fromxml, local));
            shmtopo_topo_destroy(fromxml);
            fromxml = NULL;
            CHECK(shmtopo_topo_load_xml(xml, xmllen + 1, &fromxml) == 0);
            shmtopo_topo_destroy(fromxml);
            shmtopo_topo_free_xml(xml);
        }
        errno = 0;
        CHECK(shmtopo_topo_load_xml("<not xml", 8, &fromxml) == -1 && errno == EINVAL);
        printf("  bad XML: %s\n", shmtopo_last_error());
        shmtopo_topo_destroy(adopted);
        /* destroy unmapped it: the range is free again */
        {
            void *p = mmap((void *)addr, length, PROT_NONE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
            CHECK(p == (void *)addr);
            if (p != MAP_FAILED)
                munmap(p, length);
        }
    }
    test_errors(local, length, addr, path);
    CHECK(unlink(path) == 0);

out:
    shmtopo_topo_destroy(local);
    shmtopo_topo_destroy(NULL);
    if (failures) {
        printf("test_topo_shmem: %d failures\n", failures);
        return 1;
    }
    printf("test_topo_shmem: ok\n");
    return 0;
}
