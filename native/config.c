/* Configuration: every environment variable shmtopo reads, parsed here and
 * nowhere else, strictly (a value that is not exactly what the variable
 * accepts is an error naming the variable, the value and what it accepts).
 * The names of backends, fence algorithms and the like are names.c's. A comm
 * reads the environment once, at creation, and its ranks compare the
 * settings that must agree. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "internal.h"

static const char *const var_names[SHMTOPO_NVARS] = {
    [SHMTOPO_VAR_SHM_TYPE] = "SHMTOPO_SHM_TYPE",
    [SHMTOPO_VAR_FENCE_ALGORITHM] = "SHMTOPO_FENCE_ALGORITHM",
    [SHMTOPO_VAR_COLL_ALGORITHM] = "SHMTOPO_COLL_ALGORITHM",
    [SHMTOPO_VAR_COLL_BUFFER] = "SHMTOPO_COLL_BUFFER",
    [SHMTOPO_VAR_NODE_SIZE] = "SHMTOPO_NODE_SIZE",
    [SHMTOPO_VAR_TOPO_SOURCE] = "SHMTOPO_TOPO_SOURCE",
    [SHMTOPO_VAR_TIMEOUT] = "SHMTOPO_TIMEOUT",
    [SHMTOPO_VAR_SPIN_NS] = "SHMTOPO_SPIN_NS",
    [SHMTOPO_VAR_YIELD_NS] = "SHMTOPO_YIELD_NS",
    [SHMTOPO_VAR_TOPO_DIR] = "SHMTOPO_TOPO_DIR",
    [SHMTOPO_VAR_TOPO_CONFLICT_RANK] = "SHMTOPO_TOPO_CONFLICT_RANK",
    [SHMTOPO_VAR_SINGLE_COPY] = "SHMTOPO_SINGLE_COPY",
    [SHMTOPO_VAR_COLL_LEVELS] = "SHMTOPO_COLL_LEVELS",
    [SHMTOPO_VAR_RUN_AHEAD] = "SHMTOPO_RUN_AHEAD",
};

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* What the variables without a name table accept, in messages. */
#define SINGLE_COPY_ACCEPTED "expected auto (where every rank can copy from every peer), 0 (off) " \
                             "or 1 (required: comm creation fails where a rank cannot)"
#define LEVELS_ACCEPTED "expected auto, flat, or up to 4 object types innermost first, separated by " \
                        "commas (core, l1, l2, l3, numa, die, package), none twice"
#define DEFAULT_COLL_BUFFER (256 * 1024)

/* ---- parsing one variable ------------------------------------------------ */

/* The failure for `var`: its name and value, then why (what it accepts).
 * `why` must not point into the last-error buffer this writes. */
static int bad_value(int var, const char *value, const char *why)
{
    return shmtopo_fail(EINVAL, -1, "%s=%s: %s", var_names[var], value, why);
}

/* A decimal integer in [lo, hi], the whole string, no sign games. */
static int parse_int(int var, const char *value, long long lo, long long hi, const char *expected,
                     long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(value, &end, 10);
    if (errno || end == value || *end || v < lo || v > hi)
        return bad_value(var, value, expected);
    *out = v;
    return 0;
}

/* The variable's value, or NULL when unset or empty; remembered (cut to
 * fit) for messages that compare ranks' settings. */
static const char *value_of(shmtopo_config_t *cfg, int var)
{
    const char *v = getenv(var_names[var]);
    if (!v || !*v)
        return NULL;
    snprintf(cfg->text[var], sizeof(cfg->text[var]), "%s", v);
    return v;
}

/* SHMTOPO_COLL_LEVELS: auto, flat, or "numa,package" (types from inner to
 * outer, none twice; which encloses which depends on the machine, so the
 * levels nest by construction in levels.py rather than by a rule here). */
static int parse_levels(shmtopo_config_t *cfg, const char *v)
{
    if (strcasecmp(v, "auto") == 0)
        return cfg->coll_levels_mode = SHMTOPO_LEVELS_AUTO, 0;
    if (strcasecmp(v, "flat") == 0)
        return cfg->coll_levels_mode = SHMTOPO_LEVELS_FLAT, 0;
    char copy[64];
    if (strlen(v) >= sizeof(copy))
        return -1;
    snprintf(copy, sizeof(copy), "%s", v);
    int n = 0;
    for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int t = shmtopo_level_type_lookup(tok);
        for (int i = 0; i < n && t > 0; i++)
            if (cfg->coll_levels[i] == t)
                t = -1;
        if (t <= 0 || n == SHMTOPO_MAX_LEVELS) /* unknown, twice, or too many */
            return -1;
        cfg->coll_levels[n++] = t;
    }
    /* a trailing or doubled comma leaves an empty name, which strtok skips */
    if (n == 0 || v[strlen(v) - 1] == ',' || v[0] == ',' || strstr(v, ",,"))
        return -1;
    for (int i = n; i < SHMTOPO_MAX_LEVELS; i++)
        cfg->coll_levels[i] = SHMTOPO_LEVEL_END;
    cfg->coll_levels_mode = SHMTOPO_LEVELS_LIST;
    return 0;
}

static int read_var(shmtopo_config_t *cfg, int var)
{
    const char *v = value_of(cfg, var);
    long long n;
    int i;
    double d;
    char *end;
    if (!v && var == SHMTOPO_VAR_FENCE_ALGORITHM) {
        const char *k = getenv("KUPL_SHM_FENCE_ALGORITHM");
        if (k && *k) {
            snprintf(cfg->text[var], sizeof(cfg->text[var]), "KUPL:%s", k);
            cfg->fence_alg = shmtopo_fence_alg_from_kupl(k);
        }
        return 0;
    }
    if (!v)
        return 0;
    switch (var) {
    case SHMTOPO_VAR_SHM_TYPE:
        if (shmtopo_backend_from_name(v, &i) < 0)
            return bad_value(var, v, SHMTOPO_BACKENDS_ACCEPTED);
        cfg->backend = i;
        return 0;
    case SHMTOPO_VAR_FENCE_ALGORITHM:
        if (shmtopo_fence_alg_from_name(v, &i) < 0)
            return bad_value(var, v, SHMTOPO_FENCES_ACCEPTED);
        cfg->fence_alg = i;
        return 0;
    case SHMTOPO_VAR_COLL_ALGORITHM:
        if (shmtopo_coll_alg_from_name(v, &i) < 0)
            return bad_value(var, v, SHMTOPO_COLL_ALGS_ACCEPTED);
        cfg->coll_alg = i;
        return 0;
    case SHMTOPO_VAR_TOPO_SOURCE:
        if (shmtopo_topo_source_from_name(v, &i) < 0)
            return bad_value(var, v, SHMTOPO_SOURCES_ACCEPTED);
        cfg->topo_source = i;
        return 0;
    case SHMTOPO_VAR_COLL_BUFFER:
        if (parse_int(var, v, 4096, 1ll << 30, "expected a number of bytes in [4096, 1073741824]", &n) < 0)
            return -1;
        cfg->coll_buffer = shmtopo_round_up((size_t)n, (size_t)sysconf(_SC_PAGESIZE));
        return 0;
    case SHMTOPO_VAR_NODE_SIZE:
        if (parse_int(var, v, 1, INT_MAX, "expected a positive number of ranks per simulated node", &n) < 0)
            return -1;
        cfg->node_size = (int32_t)n;
        return 0;
    case SHMTOPO_VAR_SPIN_NS:
    case SHMTOPO_VAR_YIELD_NS:
        if (parse_int(var, v, 0, 3600ll * 1000000000ll, "expected nanoseconds, an integer in [0, 3.6e12]", &n) < 0)
            return -1;
        *(var == SHMTOPO_VAR_SPIN_NS ? &cfg->spin_ns : &cfg->yield_ns) = n;
        return 0;
    case SHMTOPO_VAR_TIMEOUT:
        errno = 0;
        d = strtod(v, &end);
        if (errno || end == v || *end || !isfinite(d) || d < 0)
            return bad_value(var, v, "expected a finite number of seconds >= 0 (0: wait forever)");
        cfg->timeout = d;
        return 0;
    case SHMTOPO_VAR_TOPO_CONFLICT_RANK:
        if (parse_int(var, v, 0, INT_MAX, "expected a rank number (a test hook)", &n) < 0)
            return -1;
        cfg->conflict_rank = (int32_t)n;
        return 0;
    case SHMTOPO_VAR_SINGLE_COPY:
        if (strcmp(v, "0") == 0)
            cfg->single_copy = SHMTOPO_SINGLE_COPY_OFF;
        else if (strcmp(v, "1") == 0)
            cfg->single_copy = SHMTOPO_SINGLE_COPY_ON;
        else if (strcasecmp(v, "auto") == 0)
            cfg->single_copy = SHMTOPO_SINGLE_COPY_AUTO;
        else
            return bad_value(var, v, SINGLE_COPY_ACCEPTED);
        return 0;
    case SHMTOPO_VAR_RUN_AHEAD:
        if (strcmp(v, "0") != 0 && strcmp(v, "1") != 0)
            return bad_value(var, v, "expected 0 (every call meets every rank) or 1 (small bcast and "
                             "reduce wait only for the ranks they need)");
        cfg->run_ahead = v[0] == '1';
        return 0;
    case SHMTOPO_VAR_COLL_LEVELS:
        if (parse_levels(cfg, v) < 0) {
            memset(cfg->coll_levels, 0, sizeof(cfg->coll_levels));
            cfg->coll_levels_mode = SHMTOPO_LEVELS_AUTO;
            return bad_value(var, v, LEVELS_ACCEPTED);
        }
        return 0;
    case SHMTOPO_VAR_TOPO_DIR:
        if (strlen(v) >= sizeof(cfg->topo_dir))
            return bad_value(var, v, "expected a directory path shorter than 256 bytes");
        snprintf(cfg->topo_dir, sizeof(cfg->topo_dir), "%s", v);
        return 0;
    }
    return 0;
}

int shmtopo_config_read(shmtopo_config_t *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->backend = SHMTOPO_BACKEND_POSIX;
    cfg->fence_alg = SHMTOPO_FENCE_AUTO;
    cfg->coll_alg = SHMTOPO_COLL_AUTO;
    cfg->topo_source = SHMTOPO_SOURCE_AUTO;
    cfg->conflict_rank = -1;
    cfg->coll_buffer = DEFAULT_COLL_BUFFER;
    cfg->spin_ns = cfg->yield_ns = -1;
    snprintf(cfg->topo_dir, sizeof(cfg->topo_dir), "/dev/shm");
    /* Every variable is read even after a bad one, so the text of all of
     * them is there for messages; the first failure is the one reported. */
    int rc = 0, err = 0;
    char first[512] = "";
    for (int var = 0; var < SHMTOPO_NVARS; var++)
        if (read_var(cfg, var) < 0 && rc == 0) {
            rc = -1;
            err = errno;
            snprintf(first, sizeof(first), "%s", shmtopo_last_error());
        }
    return rc < 0 ? shmtopo_fail(err, -1, "%s", first) : 0;
}

/* The settings ranks must share: a difference would desynchronise their
 * collectives (algorithm, buffer size, single copy or not) or split them
 * differently. */
static const int must_agree[] = {
    SHMTOPO_VAR_SHM_TYPE, SHMTOPO_VAR_FENCE_ALGORITHM, SHMTOPO_VAR_COLL_ALGORITHM,
    SHMTOPO_VAR_COLL_BUFFER, SHMTOPO_VAR_NODE_SIZE, SHMTOPO_VAR_TOPO_SOURCE,
    SHMTOPO_VAR_SINGLE_COPY, SHMTOPO_VAR_COLL_LEVELS, SHMTOPO_VAR_RUN_AHEAD,
};

static int same_setting(const shmtopo_config_t *a, const shmtopo_config_t *b, int var)
{
    switch (var) {
    case SHMTOPO_VAR_SHM_TYPE: return a->backend == b->backend;
    case SHMTOPO_VAR_FENCE_ALGORITHM: return a->fence_alg == b->fence_alg;
    case SHMTOPO_VAR_COLL_ALGORITHM: return a->coll_alg == b->coll_alg;
    case SHMTOPO_VAR_COLL_BUFFER: return a->coll_buffer == b->coll_buffer;
    case SHMTOPO_VAR_NODE_SIZE: return a->node_size == b->node_size;
    case SHMTOPO_VAR_TOPO_SOURCE: return a->topo_source == b->topo_source;
    case SHMTOPO_VAR_SINGLE_COPY: return a->single_copy == b->single_copy;
    case SHMTOPO_VAR_RUN_AHEAD: return a->run_ahead == b->run_ahead;
    case SHMTOPO_VAR_COLL_LEVELS:
        return a->coll_levels_mode == b->coll_levels_mode &&
               memcmp(a->coll_levels, b->coll_levels, sizeof(a->coll_levels)) == 0;
    }
    return 1;
}

int shmtopo_config_compare(const shmtopo_config_t *cfgs, int n, const int *ranks)
{
    for (int k = 0; k < COUNT(must_agree); k++) {
        const int var = must_agree[k];
        /* the setting most ranks have (ties: the lowest rank's); blame the
         * first rank with another one */
        int ref = 0, best = 0;
        for (int i = 0; i < n; i++) {
            int alike = 0;
            for (int j = 0; j < n; j++)
                alike += same_setting(&cfgs[i], &cfgs[j], var);
            if (alike > best) {
                best = alike;
                ref = i;
            }
        }
        for (int i = 0; i < n; i++) {
            if (same_setting(&cfgs[ref], &cfgs[i], var))
                continue;
            const char *a = cfgs[i].text[var][0] ? cfgs[i].text[var] : "unset";
            const char *b = cfgs[ref].text[var][0] ? cfgs[ref].text[var] : "unset";
            const int ri = ranks ? ranks[i] : i, rr = ranks ? ranks[ref] : ref;
            return shmtopo_fail(EINVAL, ri,
                                "%s differs between ranks: rank %d has %s, rank %d has %s "
                                "(every rank must set it alike)",
                                var_names[var], ri, a, rr, b);
        }
    }
    return 0;
}

int shmtopo_affinity_ncpus(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) < 0)
        return shmtopo_fail_errno("sched_getaffinity");
    return CPU_COUNT(&set);
}
