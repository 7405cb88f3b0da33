/* hwloc topology glue: load locally or from XML, and share one copy through
 * hwloc's shmem API (a leader writes a file, every rank adopts it read-only
 * at the same virtual address). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <hwloc.h>
#include <hwloc/export.h>
#include <hwloc/shmem.h>

#include "internal.h"
#include "topo_shmem.h"

/* Must match struct hwloc_shmem_header in hwloc's shmem.c (version 1); only
 * read to explain an EINVAL from adopt, never relied upon otherwise. */
struct shmem_header_v1 {
    uint32_t header_version;
    uint32_t header_length;
    uint64_t mmap_address;
    uint64_t mmap_length;
};

static size_t page_size(void)
{
    long ps = sysconf(_SC_PAGESIZE);
    return ps > 0 ? (size_t)ps : 4096;
}

static int check_range(const char *what, uintptr_t addr, size_t length)
{
    size_t page = page_size();

    if (addr == 0 || addr % page)
        return shmtopo_fail(EINVAL, -1, "%s: address %#lx is not page-aligned",
                            what, (unsigned long)addr);
    if (length == 0 || length % page)
        return shmtopo_fail(EINVAL, -1,
                            "%s: length %zu is not a positive multiple of the page size",
                            what, length);
    if (addr > UINTPTR_MAX - length)
        return shmtopo_fail(EINVAL, -1, "%s: range %#lx+%zu wraps around",
                            what, (unsigned long)addr, length);
    return 0;
}

/* hwloc's filters for io = 0 (hwloc's defaults: no I/O, no Misc objects),
 * 1 (the important I/O objects), 2 (every I/O object, and Misc objects:
 * memory modules, annotations). */
static int set_io_filter(hwloc_topology_t topo, int io)
{
    if (io == 0)
        return 0;
    if (hwloc_topology_set_io_types_filter(topo, io == 2 ? HWLOC_TYPE_FILTER_KEEP_ALL
                                                         : HWLOC_TYPE_FILTER_KEEP_IMPORTANT) < 0)
        return shmtopo_fail_errno("hwloc_topology_set_io_types_filter");
    if (io == 2 && hwloc_topology_set_type_filter(topo, HWLOC_OBJ_MISC, HWLOC_TYPE_FILTER_KEEP_ALL) < 0)
        return shmtopo_fail_errno("hwloc_topology_set_type_filter");
    return 0;
}

int shmtopo_topo_load_local(void **topop)
{
    return shmtopo_topo_load_local_io(0, topop);
}

int shmtopo_topo_load_local_io(int io, void **topop)
{
    hwloc_topology_t topo;

    if (!topop)
        return shmtopo_fail(EINVAL, -1, "topology: NULL result pointer");
    if (io < 0 || io > 2)
        return shmtopo_fail(EINVAL, -1, "topology: io must be 0, 1 or 2, not %d", io);
    if (hwloc_topology_init(&topo) < 0)
        return shmtopo_fail_errno("hwloc_topology_init");
    if (set_io_filter(topo, io) < 0)
        goto out_with_topo;
    if (hwloc_topology_load(topo) < 0) {
        shmtopo_fail_errno("hwloc_topology_load");
        goto out_with_topo;
    }
    *topop = topo;
    return 0;

out_with_topo:
    {
        int err = errno;
        hwloc_topology_destroy(topo);
        errno = err;
    }
    return -1;
}

int shmtopo_topo_load_xml(const char *xml, size_t len, void **topop)
{
    return shmtopo_topo_load_xml_flags(xml, len, 0, 0, topop);
}

int shmtopo_topo_load_xml_flags(const char *xml, size_t len, unsigned long flags, int io, void **topop)
{
    hwloc_topology_t topo;
    char *copy = NULL;
    const char *buf = xml;
    size_t buflen = len;
    int err;

    if (!topop || !xml || len == 0)
        return shmtopo_fail(EINVAL, -1, "topology XML: empty or NULL buffer");
    /* hwloc parses the buffer as a C string with the NUL counted in size. */
    if (xml[len - 1] != '\0') {
        copy = malloc(len + 1);
        if (!copy)
            return shmtopo_fail(ENOMEM, -1, "topology XML: no memory to copy %zu bytes",
                                len);
        memcpy(copy, xml, len);
        copy[len] = '\0';
        buf = copy;
        buflen = len + 1;
    }
    if (buflen > INT_MAX) {
        shmtopo_fail(EINVAL, -1, "topology XML: %zu bytes is too large", len);
        goto out_with_copy;
    }
    if (hwloc_topology_init(&topo) < 0) {
        shmtopo_fail_errno("hwloc_topology_init");
        goto out_with_copy;
    }
    /* hwloc does not always set errno when it rejects XML. */
    errno = 0;
    if (set_io_filter(topo, io) < 0)
        goto out_with_topo;
    if (hwloc_topology_set_flags(topo, flags) < 0 ||
        hwloc_topology_set_xmlbuffer(topo, buf, (int)buflen) < 0) {
        shmtopo_fail(errno ? errno : EINVAL, -1,
                     "hwloc_topology_set_xmlbuffer: cannot use the XML buffer");
        goto out_with_topo;
    }
    errno = 0;
    if (hwloc_topology_load(topo) < 0) {
        shmtopo_fail(errno ? errno : EINVAL, -1,
                     "hwloc_topology_load: invalid topology XML");
        goto out_with_topo;
    }
    free(copy);
    *topop = topo;
    return 0;

out_with_topo:
    err = errno;
    hwloc_topology_destroy(topo);
    errno = err;
out_with_copy:
    err = errno;
    free(copy);
    errno = err;
    return -1;
}

int shmtopo_topo_export_xml(void *topo, char **xmlp, size_t *lenp)
{
    char *hbuf, *copy;
    int hlen, err;
    size_t len;

    if (!topo || !xmlp || !lenp)
        return shmtopo_fail(EINVAL, -1, "topology export: NULL argument");
    if (hwloc_topology_export_xmlbuffer(topo, &hbuf, &hlen, 0) < 0)
        return shmtopo_fail_errno("hwloc_topology_export_xmlbuffer");
    /* hwloc's buffer must go back through hwloc_free_xmlbuffer with the
     * topology (libxml or not); the caller only has the pointer, so copy. */
    len = hlen > 0 ? (size_t)hlen : 0;
    if (len && hbuf[len - 1] == '\0')
        len--;
    copy = malloc(len + 1);
    if (!copy) {
        shmtopo_fail(ENOMEM, -1, "topology export: no memory for %zu bytes", len + 1);
        goto out_with_hbuf;
    }
    memcpy(copy, hbuf, len);
    copy[len] = '\0';
    hwloc_free_xmlbuffer(topo, hbuf);
    *xmlp = copy;
    *lenp = len;
    return 0;

out_with_hbuf:
    err = errno;
    hwloc_free_xmlbuffer(topo, hbuf);
    errno = err;
    return -1;
}

void shmtopo_topo_free_xml(char *xml)
{
    free(xml);
}

int shmtopo_topo_shmem_length(void *topo, size_t *lenp)
{
    size_t len;

    if (!topo || !lenp)
        return shmtopo_fail(EINVAL, -1, "shmem length: NULL argument");
    if (hwloc_shmem_topology_get_length(topo, &len, 0) < 0)
        return shmtopo_fail_errno("hwloc_shmem_topology_get_length");
    *lenp = shmtopo_round_up(len, page_size());
    return 0;
}

/* hwloc's write leaves the copy's memory-attribute caches to be filled on
 * first use (it refreshes the source's instead): an adopter's first memory
 * attribute query would then write into its read-only mapping and crash.
 * So the writer fills them once in the file itself, through a writable
 * mapping at the address every rank will use, before anyone adopts: after
 * that, queries on adopted copies only read. Distances were refreshed by
 * hwloc's write already; hwloc_topology_refresh does both. */
static int prime_caches(int fd, const char *path, uintptr_t addr, size_t length)
{
#if HWLOC_API_VERSION >= 0x00020300
    hwloc_topology_t copy;
    int err;

    errno = 0;
    if (hwloc_shmem_topology_adopt(&copy, fd, 0, (void *)addr, length, 0) < 0) {
        err = errno ? errno : EINVAL;
        return shmtopo_fail(err, -1, "shmem write: map %s at %#lx to fill its caches: %s", path,
                            (unsigned long)addr, strerror(err));
    }
    if (mprotect((void *)addr, length, PROT_READ | PROT_WRITE) < 0) {
        err = errno;
        hwloc_topology_destroy(copy);
        return shmtopo_fail(err, -1, "shmem write: make %s writable to fill its caches: %s", path,
                            strerror(err));
    }
    err = hwloc_topology_refresh(copy) < 0 ? (errno ? errno : EINVAL) : 0;
    hwloc_topology_destroy(copy); /* unmaps */
    if (err)
        return shmtopo_fail(err, -1, "shmem write: hwloc_topology_refresh of %s: %s", path,
                            strerror(err));
#else
    (void)fd, (void)path, (void)addr, (void)length;
#endif
    return 0;
}

int shmtopo_topo_shmem_write(void *topo, const char *path, uintptr_t addr,
                             size_t length)
{
    size_t need;
    int fd, err;

    if (!topo || !path)
        return shmtopo_fail(EINVAL, -1, "shmem write: NULL argument");
    if (check_range("shmem write", addr, length) < 0)
        return -1;
    /* If hwloc ran out of room while copying it would return with its
     * mapping still in place, so refuse a short length up front. */
    if (hwloc_shmem_topology_get_length(topo, &need, 0) < 0)
        return shmtopo_fail_errno("hwloc_shmem_topology_get_length");
    if (length < need)
        return shmtopo_fail(EINVAL, -1,
                            "shmem write: length %zu is below the %zu bytes needed",
                            length, need);

    fd = open(path, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) {
        err = errno;
        return shmtopo_fail(err, -1, "shmem write: create %s: %s", path,
                            strerror(err));
    }
    /* Reserve the blocks now: a full tmpfs must fail here, not SIGBUS later. */
    err = posix_fallocate(fd, 0, (off_t)length);
    if (err) {
        shmtopo_fail(err, -1, "shmem write: reserve %zu bytes in %s: %s", length,
                     path, strerror(err));
        goto out_with_file;
    }
    errno = 0;
    if (hwloc_shmem_topology_write(topo, fd, 0, (void *)addr, length, 0) < 0) {
        err = errno ? errno : EIO;
        shmtopo_fail(err, -1, "hwloc_shmem_topology_write at %#lx+%zu: %s",
                     (unsigned long)addr, length,
                     err == EBUSY ? "address range taken in this process"
                                  : strerror(err));
        goto out_with_file;
    }
    if (prime_caches(fd, path, addr, length) < 0)
        goto out_with_file;
    close(fd);
    return 0;

out_with_file:
    err = errno;
    close(fd);
    unlink(path);
    errno = err;
    return -1;
}

/* Why adopt said EINVAL, from the header hwloc wrote at the file start. */
static int fail_adopt_einval(int fd, const char *path, uintptr_t addr,
                             size_t length)
{
    struct shmem_header_v1 h;

    if (pread(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h))
        return shmtopo_fail(EINVAL, -1,
                            "shmem adopt %s: file too short for an hwloc topology",
                            path);
    if (h.header_version == 1 && h.header_length == sizeof(h)
        && (h.mmap_address != addr || h.mmap_length != length))
        return shmtopo_fail(EINVAL, -1,
                            "shmem adopt %s: written for %#llx+%llu, asked for %#lx+%zu",
                            path, (unsigned long long)h.mmap_address,
                            (unsigned long long)h.mmap_length,
                            (unsigned long)addr, length);
    return shmtopo_fail(EINVAL, -1,
                        "shmem adopt %s: not an hwloc shmem topology, or another hwloc ABI",
                        path);
}

int shmtopo_topo_shmem_adopt(const char *path, uintptr_t addr, size_t length,
                             void **topop)
{
    hwloc_topology_t topo;
    int fd, err;

    if (!path || !topop)
        return shmtopo_fail(EINVAL, -1, "shmem adopt: NULL argument");
    if (check_range("shmem adopt", addr, length) < 0)
        return -1;
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        err = errno;
        return shmtopo_fail(err, -1, "shmem adopt: open %s: %s", path,
                            strerror(err));
    }
    /* hwloc returns -1 without touching errno on a short header read. */
    errno = 0;
    if (hwloc_shmem_topology_adopt(&topo, fd, 0, (void *)addr, length, 0) < 0) {
        err = errno ? errno : EINVAL;
        if (err == EINVAL)
            fail_adopt_einval(fd, path, addr, length);
        else
            shmtopo_fail(err, -1, "hwloc_shmem_topology_adopt %s at %#lx+%zu: %s",
                         path, (unsigned long)addr, length,
                         err == EBUSY ? "address range taken in this process"
                                      : strerror(err));
        goto out_with_fd;
    }
    /* The mapping outlives the descriptor. */
    close(fd);
    *topop = topo;
    return 0;

out_with_fd:
    err = errno;
    close(fd);
    errno = err;
    return -1;
}

void shmtopo_topo_destroy(void *topo)
{
    if (topo)
        hwloc_topology_destroy(topo);
}

/* The running library's own version: hwloc records it in the root object's
 * "hwlocVersion" info of every topology it loads (a one-PU synthetic one
 * costs microseconds); hwloc_get_api_version() gives only the API level. */
static char library_version[32];
static pthread_once_t library_once = PTHREAD_ONCE_INIT;

static void find_library_version(void)
{
    hwloc_topology_t topo;
    const char *v = NULL;
    if (hwloc_topology_init(&topo) == 0) {
        if (hwloc_topology_set_synthetic(topo, "pu:1") == 0 && hwloc_topology_load(topo) == 0)
            v = hwloc_obj_get_info_by_name(hwloc_get_root_obj(topo), "hwlocVersion");
        if (v)
            snprintf(library_version, sizeof(library_version), "%s", v);
        hwloc_topology_destroy(topo);
    }
    if (!library_version[0]) { /* an hwloc that records no version: its API level */
        unsigned run = hwloc_get_api_version();
        snprintf(library_version, sizeof(library_version), "%u.%u.%u", run >> 16, (run >> 8) & 0xff,
                 run & 0xff);
    }
}

const char *shmtopo_hwloc_version(void)
{
    pthread_once(&library_once, find_library_version);
    return library_version;
}

static void api_string(unsigned v, char *buf, size_t len)
{
    snprintf(buf, len, "%u.%u.%u", v >> 16, (v >> 8) & 0xff, v & 0xff);
}

int shmtopo_hwloc_api_versions(char *runp, char *builtp, size_t len)
{
    if (!runp || !builtp || len < 12)
        return shmtopo_fail(EINVAL, -1, "hwloc_api_versions: buffers of 12 bytes or more needed");
    api_string(hwloc_get_api_version(), runp, len);
    api_string(HWLOC_API_VERSION, builtp, len);
    return 0;
}

#ifndef SHMTOPO_HWLOC_ORIGIN
#define SHMTOPO_HWLOC_ORIGIN "unknown (built without build_ffi.py)"
#endif

const char *shmtopo_hwloc_origin(void)
{
    return SHMTOPO_HWLOC_ORIGIN;
}
