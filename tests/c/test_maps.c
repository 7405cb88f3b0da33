/* Standalone test of maps.c: cc -Inative tests/c/test_maps.c
 * native/maps.c native/error.c && ./a.out (prints failures, exits 1). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "maps.h"
#include "shmtopo.h"

static int failures;

#define CHECK(cond)                                                        \
    do {                                                                   \
        if (!(cond)) {                                                     \
            fprintf(stderr, "%s:%d: CHECK(%s) failed; last error: %s\n",   \
                    __FILE__, __LINE__, #cond, shmtopo_last_error());      \
            failures++;                                                    \
        }                                                                  \
    } while (0)

#define MIB ((uintptr_t)1 << 20)
#define GIB ((uintptr_t)1 << 30)

static size_t page;

static int parse(const char *text, uintptr_t limit, shmtopo_range_t *out,
                 size_t max, size_t *n)
{
    return shmtopo_maps_parse_free(text, strlen(text), limit, out, max, n);
}

static void expect_einval(const char *text, const char *needle)
{
    shmtopo_range_t r[8];
    size_t n = 0;

    errno = 0;
    CHECK(parse(text, 0, r, 8, &n) == -1);
    CHECK(errno == EINVAL);
    if (needle && !strstr(shmtopo_last_error(), needle)) {
        fprintf(stderr, "message '%s' lacks '%s'\n", shmtopo_last_error(), needle);
        failures++;
    }
}

static void test_handmade(void)
{
    shmtopo_range_t r[8];
    size_t n;
    const char *basic =
        "00400000-00452000 r-xp 00000000 08:02 173521      /usr/bin/dbus-daemon\n"
        "00651000-00652000 r--p 00051000 08:02 173521      /usr/bin/dbus-daemon\n"
        "00e03000-00e24000 rw-p 00000000 00:00 0           [heap]\n"
        "7f0000000000-7f0000100000 rw-s 00000000 00:05 12 /dev/shm/x (deleted)\n";

    /* empty input: everything from the first page to the limit */
    CHECK(parse("", 0x100000000, r, 8, &n) == 0);
    CHECK(n == 1 && r[0].start == page && r[0].end == 0x100000000);
    CHECK(shmtopo_maps_parse_free(NULL, 0, 0x100000000, r, 8, &n) == 0 && n == 1);
    /* empty input, default limit */
    CHECK(parse("", 0, r, 8, &n) == 0);
    CHECK(n == 1 && r[0].start == page && r[0].end > 0x100000000);

    CHECK(parse(basic, 0x800000000000, r, 8, &n) == 0);
    CHECK(n == 5);
    CHECK(r[0].start == page && r[0].end == 0x400000);
    CHECK(r[1].start == 0x452000 && r[1].end == 0x651000);
    CHECK(r[2].start == 0x652000 && r[2].end == 0xe03000);
    CHECK(r[3].start == 0xe24000 && r[3].end == 0x7f0000000000);
    CHECK(r[4].start == 0x7f0000100000 && r[4].end == 0x800000000000);
    /* (the limit clips the last gap) */
    CHECK(parse(basic, 0x100000000, r, 8, &n) == 0 && n == 4
          && r[3].end == 0x100000000);

    /* the last line need not end in a newline; a counted NUL ends the text */
    CHECK(parse("00400000-00452000 r-xp 00000000 08:02 1 /bin/x", 0x1000000, r, 8, &n) == 0
          && n == 2 && r[1].start == 0x452000);
    CHECK(shmtopo_maps_parse_free("00400000-00452000 r-xp 00000000 08:02 1\n", 41,
                                  0x1000000, r, 8, &n) == 0 && n == 2);

    /* ENOBUFS, total still reported; size query with NULL out */
    errno = 0;
    CHECK(parse(basic, 0x800000000000, r, 2, &n) == -1 && errno == ENOBUFS && n == 5);
    CHECK(parse(basic, 0x800000000000, NULL, 0, &n) == -1 && n == 5);

    /* [stack]: a gap of at least 1 MiB (plus rlimit) is kept below it */
    {
        const char *stk =
            "00400000-00452000 r-xp 00000000 08:02 1 /bin/x\n"
            "7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]\n"
            "7ffd00100000-7ffd00102000 r-xp 00000000 00:00 0 [vdso]\n"
            "ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0 [vsyscall]\n";
        CHECK(parse(stk, 0, r, 8, &n) == 0);
        CHECK(n == 4);
        CHECK(r[1].start == 0x452000 && r[1].end <= 0x7ffd00000000 - MIB);
        CHECK(r[2].start == 0x7ffd00021000 && r[2].end == 0x7ffd00100000);
        /* the [vsyscall] page does not count for the default limit */
#if defined(__x86_64__)
        CHECK(parse(stk, 0, r, 8, &n) == 0 && r[n - 1].end <= 0x800000000000);
#endif
    }

    /* malformed: message names the line */
    expect_einval("zz400000-00452000 r-xp 00000000 08:02 1\n", "line 1");
    expect_einval("00400000 00452000 r-xp 00000000 08:02 1\n", "line 1");
    expect_einval("00400000-00452000 r-xp 00000000 08:02 1\n"
                  "00500000-00500000 r-xp 00000000 08:02 1\n", "line 2");
    expect_einval("00600000-00500000 r-xp 00000000 08:02 1\n", "line 1");
    expect_einval("00400000-00452000 r-xp 00000000 08:02 1\n"
                  "00500000-00600000 r-xp", "line 2");
    expect_einval("00400000-00452000 r-xp 00000000 08:02\n", "line 1");
    expect_einval("00400000-00452000 r-xp 00000000 08:02 12x\n", "line 1");
    expect_einval("00400000-00452000 rwzp 00000000 08:02 1\n", "line 1");
    expect_einval("00400000-\n", "line 1");
    expect_einval("\n", "line 1");
    expect_einval("00400000-00452000 r-xp 00000000 08:02 1\n\n", "line 2");
    expect_einval("1ffffffffffffffff-2ffffffffffffffff r-xp 0 08:02 1\n", "line 1");
    /* out of order, overlapping */
    expect_einval("00500000-00600000 r-xp 00000000 08:02 1\n"
                  "00400000-00452000 r-xp 00000000 08:02 1\n", "out of order");
    expect_einval("00400000-00600000 r-xp 00000000 08:02 1\n"
                  "00500000-00700000 r-xp 00000000 08:02 1\n", "overlap");
}

/* Random mutations of valid text must give 0 or EINVAL, never a crash. */
static void test_fuzz(void)
{
    const char *base =
        "00400000-00452000 r-xp 00000000 08:02 173521 /usr/bin/x\n"
        "00e03000-00e24000 rw-p 00000000 00:00 0 [heap]\n"
        "7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]\n";
    const char alphabet[] = "0123456789abcdefxz-: \n[]";
    size_t len = strlen(base), n;
    shmtopo_range_t r[8];
    char *buf = malloc(len);
    unsigned seed = 12345;
    int i, k, rc;

    for (i = 0; i < 20000; i++) {
        size_t cut;
        memcpy(buf, base, len);
        for (k = 0; k < 3; k++) {
            seed = seed * 1103515245u + 12345u;
            buf[(seed >> 8) % len] = alphabet[(seed >> 20) % (sizeof(alphabet) - 1)];
        }
        seed = seed * 1103515245u + 12345u;
        cut = (seed >> 8) % (len + 1);
        errno = 0;
        rc = shmtopo_maps_parse_free(buf, cut, 0, r, 8, &n);
        CHECK(rc == 0 || errno == EINVAL || errno == ENOBUFS);
    }
    free(buf);
}

static void test_self(void)
{
    shmtopo_range_t *r;
    size_t n = 0, m, i;
    uintptr_t addr, prev[4];
    void *p;
    unsigned a;
    int rc;

    rc = shmtopo_maps_self_free(NULL, 0, &n);
    CHECK(rc == -1 && errno == ENOBUFS && n > 0);
    r = calloc(n + 64, sizeof(*r));
    CHECK(shmtopo_maps_self_free(r, n + 64, &m) == 0);
    printf("self: %zu free ranges\n", m);
    for (i = 0; i < m; i++) {
        CHECK(r[i].start < r[i].end);
        CHECK(r[i].start % page == 0 && r[i].end % page == 0);
        CHECK(i == 0 || r[i].start > r[i - 1].end);
        CHECK(r[i].start >= page);
    }
    for (a = 0; a < 4; a++) {
        size_t len = 3 * MIB + 12345;
        CHECK(shmtopo_ranges_choose(r, m, len, 2 * MIB, a, &addr) == 0);
        printf("  attempt %u: %#lx\n", a, (unsigned long)addr);
        CHECK(addr % (2 * MIB) == 0);
        for (i = 0; i < m; i++)
            if (addr >= r[i].start && addr + len <= r[i].end)
                break;
        CHECK(i < m);
        for (i = 0; i < a; i++)
            CHECK(prev[i] != addr);
        prev[a] = addr;
        /* really free here */
        p = mmap((void *)addr, len, PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        CHECK(p == (void *)addr);
        if (p != MAP_FAILED)
            munmap(p, len);
    }
    free(r);
}

static void test_intersect(void)
{
    shmtopo_range_t a[] = { { 0x1000, 0x5000 }, { 0x8000, 0x10000 }, { 0x20000, 0x30000 } };
    shmtopo_range_t b[] = { { 0x3000, 0x9000 }, { 0xa000, 0xb000 }, { 0xf000, 0x21000 } };
    shmtopo_range_t bad[] = { { 0x3000, 0x9000 }, { 0x1000, 0x2000 } };
    shmtopo_range_t o[8];
    size_t n;

    CHECK(shmtopo_ranges_intersect(a, 3, b, 3, o, 8, &n) == 0);
    CHECK(n == 5);
    CHECK(o[0].start == 0x3000 && o[0].end == 0x5000);
    CHECK(o[1].start == 0x8000 && o[1].end == 0x9000);
    CHECK(o[2].start == 0xa000 && o[2].end == 0xb000);
    CHECK(o[3].start == 0xf000 && o[3].end == 0x10000);
    CHECK(o[4].start == 0x20000 && o[4].end == 0x21000);
    /* symmetric */
    CHECK(shmtopo_ranges_intersect(b, 3, a, 3, o, 8, &n) == 0 && n == 5);
    /* empty input */
    CHECK(shmtopo_ranges_intersect(a, 3, NULL, 0, o, 8, &n) == 0 && n == 0);
    /* touching ranges do not intersect */
    {
        shmtopo_range_t x[] = { { 0x1000, 0x2000 } }, y[] = { { 0x2000, 0x3000 } };
        CHECK(shmtopo_ranges_intersect(x, 1, y, 1, o, 8, &n) == 0 && n == 0);
    }
    errno = 0;
    CHECK(shmtopo_ranges_intersect(a, 3, b, 3, o, 2, &n) == -1 && errno == ENOBUFS && n == 5);
    errno = 0;
    CHECK(shmtopo_ranges_intersect(a, 3, bad, 2, o, 8, &n) == -1 && errno == EINVAL);
}

static void test_choose(void)
{
    shmtopo_range_t one[] = { { 0x10000000, 0x90000000 } }; /* 2 GiB */
    shmtopo_range_t two[] = { { 0x1000, 0x3000 }, { 0x100000000, 0x140000000 },
                              { 0x200000000, 0x300000000 } };
    uintptr_t addr, seen[16];
    unsigned a, i;

    for (a = 0; a < 16; a++) {
        CHECK(shmtopo_ranges_choose(one, 1, MIB, 2 * MIB, a, &addr) == 0);
        CHECK(addr % (2 * MIB) == 0);
        CHECK(addr >= 0x10000000 + 64 * MIB && addr + MIB <= 0x90000000 - 64 * MIB);
        /* away from the midpoint */
        CHECK(addr + MIB <= 0x50000000 - 2 * MIB || addr >= 0x50000000 + 2 * MIB);
        for (i = 0; i < a; i++)
            CHECK(seen[i] != addr);
        seen[a] = addr;
    }
    /* deterministic */
    CHECK(shmtopo_ranges_choose(one, 1, MIB, 2 * MIB, 0, &addr) == 0 && addr == seen[0]);
    /* the first attempt lands in the largest hole, near its top quarter */
    CHECK(shmtopo_ranges_choose(two, 3, 64 * MIB, 2 * MIB, 0, &addr) == 0);
    CHECK(addr >= 0x200000000 + 2 * GIB && addr < 0x300000000);
    CHECK(shmtopo_ranges_choose(two, 3, 64 * MIB, 2 * MIB, 1, &addr) == 0);
    CHECK(addr >= 0x100000000 && addr + 64 * MIB <= 0x140000000);
    /* the tiny hole never fits */
    for (a = 0; a < 8; a++)
        CHECK(shmtopo_ranges_choose(two, 3, 64 * MIB, 2 * MIB, a, &addr) == 0
              && addr >= 0x100000000);
    /* a hole just big enough: no margin, still fits */
    {
        shmtopo_range_t tight[] = { { 0x200000, 0x600000 } };
        CHECK(shmtopo_ranges_choose(tight, 1, 4 * MIB, 2 * MIB, 3, &addr) == 0
              && addr == 0x200000);
        errno = 0;
        CHECK(shmtopo_ranges_choose(tight, 1, 4 * MIB + 1, 2 * MIB, 0, &addr) == -1
              && errno == ENOMEM);
    }
    errno = 0;
    CHECK(shmtopo_ranges_choose(one, 1, MIB, 3 * MIB, 0, &addr) == -1 && errno == EINVAL);
    errno = 0;
    CHECK(shmtopo_ranges_choose(one, 1, MIB, page / 2, 0, &addr) == -1 && errno == EINVAL);
    errno = 0;
    CHECK(shmtopo_ranges_choose(one, 1, 0, 2 * MIB, 0, &addr) == -1 && errno == EINVAL);
    errno = 0;
    CHECK(shmtopo_ranges_choose(NULL, 0, MIB, 2 * MIB, 0, &addr) == -1 && errno == ENOMEM);
    errno = 0;
    CHECK(shmtopo_ranges_choose(one, 1, 4 * GIB, 2 * MIB, 0, &addr) == -1 && errno == ENOMEM);
}

int main(void)
{
    page = (size_t)sysconf(_SC_PAGESIZE);
    test_handmade();
    test_fuzz();
    test_intersect();
    test_choose();
    test_self();
    if (failures) {
        printf("test_maps: %d failures\n", failures);
        return 1;
    }
    printf("test_maps: ok\n");
    return 0;
}
