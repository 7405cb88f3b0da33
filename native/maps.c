/* Free virtual address ranges from /proc/<pid>/maps, their intersection
 * across processes, and the choice of an address inside them, so that every
 * rank can map a segment (such as an hwloc shmem topology) at one address. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "internal.h"
#include "maps.h"

#define MIB ((uintptr_t)1 << 20)
/* The kernel keeps stack_guard_gap (256 pages, 1 MiB) below a growing stack. */
#define STACK_GUARD MIB
/* An unlimited or huge stack rlimit must not swallow the address space. */
#define STACK_RLIMIT_CAP ((uintptr_t)1 << 30)
#define CHOOSE_MAX_MARGIN ((uintptr_t)64 << 20)
#define CHOOSE_HOLES 4     /* attempts cycle over this many largest holes */
#define CHOOSE_LEVELS 24   /* fractions down to 1/2^24 of a hole */

struct maps_line {
    uintptr_t start, end;
    const char *name;
    size_t namelen;
};

struct maps_cursor {
    const char *p, *end;
    size_t lineno;
};

struct range_sink {
    shmtopo_range_t *out;
    size_t max, n;
};

static size_t page_size(void)
{
    long ps = sysconf(_SC_PAGESIZE);
    return ps > 0 ? (size_t)ps : 4096;
}

static uintptr_t align_down(uintptr_t v, uintptr_t align)
{
    return v & ~(align - 1);
}

/* Saturates instead of wrapping, so a range near the top stays empty. */
static uintptr_t align_up_sat(uintptr_t v, uintptr_t align)
{
    if (v > UINTPTR_MAX - (align - 1))
        return align_down(UINTPTR_MAX, align);
    return align_down(v + align - 1, align);
}

static void sink_push(struct range_sink *sink, uintptr_t start, uintptr_t end)
{
    if (start >= end)
        return;
    if (sink->n < sink->max) {
        sink->out[sink->n].start = start;
        sink->out[sink->n].end = end;
    }
    sink->n++;
}

static int sink_finish(const struct range_sink *sink, size_t *countp,
                       const char *what)
{
    if (countp)
        *countp = sink->n;
    if (sink->n > sink->max)
        return shmtopo_fail(ENOBUFS, -1, "%s: %zu ranges, room for %zu",
                            what, sink->n, sink->max);
    return 0;
}

/* ---- parsing ---------------------------------------------------------- */

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* At least one hex digit, no overflow; *vp may be NULL to only skip. */
static int parse_hex(const char **pp, const char *eol, uintptr_t *vp)
{
    const char *p = *pp;
    uint64_t v = 0;
    int d;

    if (p >= eol || hexval(*p) < 0)
        return -1;
    while (p < eol && (d = hexval(*p)) >= 0) {
        if (v > (UINT64_MAX >> 4))
            return -1;
        v = (v << 4) | (uint64_t)d;
        p++;
    }
    if (vp) {
        if (v > UINTPTR_MAX)
            return -1;
        *vp = (uintptr_t)v;
    }
    *pp = p;
    return 0;
}

static int expect(const char **pp, const char *eol, char c)
{
    if (*pp >= eol || **pp != c)
        return -1;
    (*pp)++;
    return 0;
}

/* One line: "start-end perms offset major:minor inode [name]". Returns 1 with
 * *line filled, 0 at the end of the text, -1 (EINVAL) if malformed. */
static int next_line(struct maps_cursor *cur, struct maps_line *line)
{
    const char *p = cur->p, *eol, *nl;
    const char *why;
    int i;

    if (p >= cur->end)
        return 0;
    cur->lineno++;
    nl = memchr(p, '\n', (size_t)(cur->end - p));
    eol = nl ? nl : cur->end;
    cur->p = nl ? nl + 1 : cur->end;

    why = "bad start address";
    if (parse_hex(&p, eol, &line->start) < 0)
        goto out_malformed;
    why = "missing '-'";
    if (expect(&p, eol, '-') < 0)
        goto out_malformed;
    why = "bad end address";
    if (parse_hex(&p, eol, &line->end) < 0)
        goto out_malformed;
    why = "start not below end";
    if (line->start >= line->end)
        goto out_malformed;
    why = "bad permissions";
    if (expect(&p, eol, ' ') < 0 || eol - p < 4)
        goto out_malformed;
    for (i = 0; i < 4; i++, p++)
        if (!strchr("rwxps-", *p) || *p == '\0')
            goto out_malformed;
    why = "bad offset";
    if (expect(&p, eol, ' ') < 0 || parse_hex(&p, eol, NULL) < 0)
        goto out_malformed;
    why = "bad device";
    if (expect(&p, eol, ' ') < 0 || parse_hex(&p, eol, NULL) < 0
        || expect(&p, eol, ':') < 0 || parse_hex(&p, eol, NULL) < 0)
        goto out_malformed;
    why = "bad inode";
    if (expect(&p, eol, ' ') < 0 || p >= eol || *p < '0' || *p > '9')
        goto out_malformed;
    while (p < eol && *p >= '0' && *p <= '9')
        p++;
    if (p < eol && *p != ' ')
        goto out_malformed;
    while (p < eol && *p == ' ')
        p++;
    line->name = p;
    line->namelen = (size_t)(eol - p);
    return 1;

out_malformed:
    return shmtopo_fail(EINVAL, -1, "maps line %zu: %s", cur->lineno, why);
}

static int name_is(const struct maps_line *line, const char *name)
{
    size_t n = strlen(name);
    return line->namelen == n && !memcmp(line->name, name, n);
}

/* Mappings the kernel puts above the user-space top, not part of the layout. */
static int is_special_high(const struct maps_line *line)
{
    return name_is(line, "[vsyscall]") || name_is(line, "[vectors]");
}

static uintptr_t default_limit(uintptr_t highest, size_t page)
{
    uintptr_t base;

#if UINTPTR_MAX > 0xffffffffu
# if defined(__x86_64__)
    /* 47-bit TASK_SIZE; 5-level paging only hands out more on request, and
     * then the highest mapping raises the limit below. */
    base = ((uintptr_t)1 << 47) - page;
# else
    /* VA size varies with the kernel configuration (39 to 52 bits) and the
     * stack sits at the top: take the power of two that covers it. */
    unsigned bits = 39;
    if (highest == 0)
        bits = 47;
    while (bits < 63 && ((uintptr_t)1 << bits) < highest)
        bits++;
    base = (uintptr_t)1 << bits;
# endif
#else
    base = 0xc0000000u; /* the classic 3G/1G split */
#endif
    highest = align_up_sat(highest, page);
    return highest > base ? highest : base;
}

/* Lowest address a growing stack [start, end) may reach, minus the guard. */
static uintptr_t stack_floor(uintptr_t start, uintptr_t end, uintptr_t rlim)
{
    uintptr_t lo = start;

    if (rlim >= end)
        lo = 0;
    else if (end - rlim < lo)
        lo = end - rlim;
    return lo > STACK_GUARD ? lo - STACK_GUARD : 0;
}

static uintptr_t stack_rlimit(void)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_STACK, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY
        || rl.rlim_cur > STACK_RLIMIT_CAP)
        return STACK_RLIMIT_CAP;
    return (uintptr_t)rl.rlim_cur;
}

int shmtopo_maps_parse_free(const char *text, size_t len, uintptr_t limit,
                            shmtopo_range_t *out, size_t max, size_t *countp)
{
    struct maps_cursor cur;
    struct maps_line line;
    struct range_sink sink = { out, out ? max : 0, 0 };
    uintptr_t prev_start = 0, prev_end = 0, highest = 0, cursor, rlim;
    size_t page = page_size();
    const char *nul;
    int err;

    if (!text && len)
        return shmtopo_fail(EINVAL, -1, "maps: NULL text");
    /* A NUL-terminated buffer may be passed with the terminator counted. */
    if (len && (nul = memchr(text, '\0', len)))
        len = (size_t)(nul - text);

    /* First pass: validate everything and find the highest mapping, which
     * the default limit depends on. */
    cur.p = text;
    cur.end = text + len;
    cur.lineno = 0;
    while ((err = next_line(&cur, &line)) > 0) {
        if (cur.lineno > 1 && line.start < prev_end)
            return shmtopo_fail(EINVAL, -1, "maps line %zu: %s", cur.lineno,
                                line.start < prev_start ? "out of order"
                                                        : "overlaps the previous mapping");
        prev_start = line.start;
        prev_end = line.end;
        if (!is_special_high(&line) && line.end > highest)
            highest = line.end;
    }
    if (err < 0)
        return -1;

    if (limit == 0)
        limit = default_limit(highest, page);
    else
        limit = align_down(limit, page);
    rlim = stack_rlimit();

    /* Second pass: the gaps between mappings, page-aligned and clipped. */
    cur.p = text;
    cur.lineno = 0;
    cursor = page;
    while (cursor < limit && next_line(&cur, &line) > 0) {
        uintptr_t obstacle = line.start;

        if (name_is(&line, "[stack]"))
            obstacle = stack_floor(line.start, line.end, rlim);
        if (obstacle > cursor)
            sink_push(&sink, align_up_sat(cursor, page),
                      align_down(obstacle < limit ? obstacle : limit, page));
        if (line.end > cursor)
            cursor = line.end;
    }
    if (cursor < limit)
        sink_push(&sink, align_up_sat(cursor, page), limit);
    return sink_finish(&sink, countp, "maps");
}

int shmtopo_maps_self_free(shmtopo_range_t *out, size_t max, size_t *countp)
{
    size_t cap = 64 << 10, len = 0;
    char *buf, *bigger;
    ssize_t got;
    int fd, ret = -1;

    fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return shmtopo_fail_errno("open /proc/self/maps");
    buf = malloc(cap);
    if (!buf) {
        shmtopo_fail(ENOMEM, -1, "maps: no memory for a %zu-byte buffer", cap);
        goto out_with_fd;
    }
    for (;;) {
        if (len == cap) {
            bigger = realloc(buf, cap * 2);
            if (!bigger) {
                shmtopo_fail(ENOMEM, -1, "maps: no memory for a %zu-byte buffer",
                             cap * 2);
                goto out_with_buf;
            }
            buf = bigger;
            cap *= 2;
        }
        got = read(fd, buf + len, cap - len);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            shmtopo_fail_errno("read /proc/self/maps");
            goto out_with_buf;
        }
        if (got == 0)
            break;
        len += (size_t)got;
    }
    /* The kernel resumes each read after the last address shown, so the text
     * stays ascending even though the buffer growth itself maps memory. */
    ret = shmtopo_maps_parse_free(buf, len, 0, out, max, countp);

out_with_buf:
    free(buf);
out_with_fd:
    close(fd);
    return ret;
}

/* ---- range lists ------------------------------------------------------ */

static int check_sorted(const shmtopo_range_t *r, size_t n, const char *which)
{
    uintptr_t prev_end = 0;
    size_t i;

    if (n && !r)
        return shmtopo_fail(EINVAL, -1, "ranges %s: NULL list", which);
    for (i = 0; i < n; i++) {
        if (r[i].start > r[i].end)
            return shmtopo_fail(EINVAL, -1, "ranges %s[%zu]: start above end",
                                which, i);
        if (r[i].start == r[i].end)
            continue;
        if (r[i].start < prev_end)
            return shmtopo_fail(EINVAL, -1,
                                "ranges %s[%zu]: not sorted or overlapping",
                                which, i);
        prev_end = r[i].end;
    }
    return 0;
}

int shmtopo_ranges_intersect(const shmtopo_range_t *a, size_t na,
                             const shmtopo_range_t *b, size_t nb,
                             shmtopo_range_t *out, size_t max, size_t *countp)
{
    struct range_sink sink = { out, out ? max : 0, 0 };
    size_t i = 0, j = 0;

    if (check_sorted(a, na, "a") < 0 || check_sorted(b, nb, "b") < 0)
        return -1;
    while (i < na && j < nb) {
        uintptr_t lo = a[i].start > b[j].start ? a[i].start : b[j].start;
        uintptr_t hi = a[i].end < b[j].end ? a[i].end : b[j].end;

        sink_push(&sink, lo, hi);
        if (a[i].end < b[j].end)
            i++;
        else
            j++;
    }
    return sink_finish(&sink, countp, "intersection");
}

/* Aligned starts [*firstp, *lastp] for `length` bytes in [start, end). */
static int fits(uintptr_t start, uintptr_t end, size_t length, size_t align,
                uintptr_t *firstp, uintptr_t *lastp)
{
    uintptr_t first, last;

    if (end <= start || end - start < length)
        return 0;
    if (start > UINTPTR_MAX - (align - 1))
        return 0;
    first = align_down(start + align - 1, align);
    last = align_down(end - length, align);
    if (first > last)
        return 0;
    *firstp = first;
    *lastp = last;
    return 1;
}

/* Larger holes first; equal sizes by address, so the order is total. */
static int hole_before(const shmtopo_range_t *x, const shmtopo_range_t *y)
{
    uintptr_t sx = x->end - x->start, sy = y->end - y->start;

    return sx != sy ? sx > sy : x->start < y->start;
}

/* The j-th fraction num/2^level in the order 3/4, 1/4, 7/8, 1/8, 5/8, 3/8,
 * 15/16, ...: extremes first, never 1/2 (where others put their segments). */
static void fraction(unsigned long j, unsigned *levelp, uint64_t *nump)
{
    unsigned long total = (1UL << CHOOSE_LEVELS) - 2; /* levels 2..LEVELS */
    unsigned level = 2;
    unsigned long k;

    j %= total;
    while (j >= (1UL << (level - 1))) {
        j -= 1UL << (level - 1);
        level++;
    }
    k = j;
    *levelp = level;
    *nump = (k & 1) ? k : ((uint64_t)1 << level) - 1 - k;
}

/* x * num / 2^level without overflowing. */
static uintptr_t scale(uintptr_t x, uint64_t num, unsigned level)
{
    uint64_t den = (uint64_t)1 << level;

    return (uintptr_t)((uint64_t)x / den * num + ((uint64_t)x % den) * num / den);
}

int shmtopo_ranges_choose(const shmtopo_range_t *ranges, size_t n,
                          size_t length, size_t align, unsigned attempt,
                          uintptr_t *addrp)
{
    const shmtopo_range_t *best[CHOOSE_HOLES];
    const shmtopo_range_t *h;
    uintptr_t first, last, margin, size;
    uint64_t num;
    unsigned level, nbest = 0, k;
    size_t i;

    if (!addrp || (n && !ranges))
        return shmtopo_fail(EINVAL, -1, "choose: NULL argument");
    if (length == 0)
        return shmtopo_fail(EINVAL, -1, "choose: zero length");
    if (align < page_size() || (align & (align - 1)))
        return shmtopo_fail(EINVAL, -1,
                            "choose: alignment %zu is not a power of two >= the page size",
                            align);

    /* Keep the few largest holes that fit, in a fixed order. */
    for (i = 0; i < n; i++) {
        h = &ranges[i];
        if (!fits(h->start, h->end, length, align, &first, &last))
            continue;
        for (k = nbest; k > 0 && hole_before(h, best[k - 1]); k--)
            if (k < CHOOSE_HOLES)
                best[k] = best[k - 1];
        if (k < CHOOSE_HOLES) {
            best[k] = h;
            if (nbest < CHOOSE_HOLES)
                nbest++;
        }
    }
    if (nbest == 0)
        return shmtopo_fail(ENOMEM, -1,
                            "choose: no free range holds %zu bytes aligned to %zu",
                            length, align);

    /* Successive attempts move to another hole first, then to another
     * fraction of the same holes. */
    h = best[attempt % nbest];
    size = h->end - h->start;
    margin = size / 16 < CHOOSE_MAX_MARGIN ? size / 16 : CHOOSE_MAX_MARGIN;
    if (!fits(h->start + margin, h->end - margin, length, align, &first, &last))
        fits(h->start, h->end, length, align, &first, &last);
    fraction(attempt / nbest, &level, &num);
    *addrp = align_down(first + scale(last - first, num, level), align);
    return 0;
}

/* ---- a common address for all ranks ------------------------------------------- */

#define MAX_RANGES 512 /* per rank; fewer known free ranges only shrink the choice */

typedef struct ranges_record {
    uint64_t value;
    uint64_t count;
    shmtopo_range_t ranges[MAX_RANGES];
} ranges_record_t;

int shmtopo_common_free_ranges(shmtopo_comm_t *comm, const shmtopo_sig_t *sig, int err,
                               shmtopo_exchange_fn exchange, uint64_t value, uint64_t *values,
                               shmtopo_range_t **outp, size_t *np)
{
    ranges_record_t *mine = calloc(1, sizeof(*mine));
    ranges_record_t *all = calloc((size_t)comm->size, sizeof(*all));
    shmtopo_range_t *acc = NULL, *tmp = NULL;
    int rc = -1;
    size_t n = 0, count = 0;
    if (!mine || !all) {
        shmtopo_fail(ENOMEM, -1, "out of memory");
        err = ENOMEM;
    }
    if (!err && shmtopo_maps_self_free(mine->ranges, MAX_RANGES, &count) < 0 && errno != ENOBUFS)
        err = errno;
    if (mine) {
        mine->value = value;
        mine->count = count < MAX_RANGES ? count : MAX_RANGES;
    }
    if (exchange(comm, sig, err, mine, all, sizeof(*mine)) < 0)
        goto out;
    acc = malloc(MAX_RANGES * sizeof(*acc));
    tmp = malloc(MAX_RANGES * sizeof(*tmp));
    if (!acc || !tmp) {
        shmtopo_fail(ENOMEM, -1, "out of memory");
        goto out;
    }
    memcpy(acc, all[0].ranges, all[0].count * sizeof(*acc));
    n = all[0].count;
    /* the same lists in the same order on every rank: the same result */
    for (int r = 1; r < comm->size; r++) {
        size_t m = 0;
        if (shmtopo_ranges_intersect(acc, n, all[r].ranges, all[r].count, tmp, MAX_RANGES, &m) < 0 &&
            errno != ENOBUFS)
            goto out;
        n = m < MAX_RANGES ? m : MAX_RANGES;
        shmtopo_range_t *swap = acc;
        acc = tmp;
        tmp = swap;
    }
    for (int r = 0; values && r < comm->size; r++)
        values[r] = all[r].value;
    *outp = acc;
    *np = n;
    acc = NULL;
    rc = 0;
out:
    free(acc);
    free(tmp);
    free(mine);
    free(all);
    return rc;
}
