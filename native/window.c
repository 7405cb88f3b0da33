/* Windows: every rank's part mapped in every process, plus a control block
 * per rank for fences. Set-up runs in steps, each ending in an agreement of
 * the comm (comm->agree), so a failure on any rank fails the call on all of
 * them and each cleans up what it made. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "state.h"
#include "wait.h"

static size_t page_size(void)
{
    return (size_t)sysconf(_SC_PAGESIZE);
}

static size_t ctrl_stride(int size)
{
    return shmtopo_round_up(sizeof(shmtopo_ctrl_t) + (size_t)size * sizeof(uint64_t), SHMTOPO_LINE);
}

/* The fence algorithm AUTO stands for with this many ranks. */
static int resolve_fence_alg(int alg, int size, int oversubscribed)
{
    if (alg != SHMTOPO_FENCE_AUTO)
        return alg;
    /* Measured on 2 cores (see README): recursive doubling is best up to 4
     * ranks; beyond, when ranks share CPUs, every round waits for a peer to
     * be scheduled, so the two hops of linear win; else the rounds do. */
    if (size <= 4)
        return SHMTOPO_FENCE_RD;
    return oversubscribed ? SHMTOPO_FENCE_LINEAR : SHMTOPO_FENCE_DISSEMINATION;
}

/* The attributes with defaults from the comm's configuration; *ap: them
 * resolved (the placement request lives there until the segments exist). */
static int resolve_attr(const shmtopo_win_attr_t *attr, shmtopo_win_t *win, shmtopo_win_attr_t *ap)
{
    shmtopo_win_attr_t a = {0};
    if (attr)
        a = *attr;
    const shmtopo_config_t *cfg = &win->comm->config;
    /* named /dev/shm files cannot hold hugetlb pages: a backend left to the
     * default (no SHMTOPO_SHM_TYPE either) is memfd when huge pages are asked */
    if (a.backend == SHMTOPO_BACKEND_DEFAULT && a.huge_pages != SHMTOPO_HUGE_OFF &&
        !cfg->text[SHMTOPO_VAR_SHM_TYPE][0])
        a.backend = SHMTOPO_BACKEND_MEMFD;
    if (a.backend == SHMTOPO_BACKEND_DEFAULT)
        a.backend = cfg->backend;
    if (a.fence_alg == SHMTOPO_FENCE_DEFAULT)
        a.fence_alg = cfg->fence_alg;
    if (a.placement == SHMTOPO_PLACEMENT_DEFAULT)
        a.placement = SHMTOPO_PLACEMENT_LOCAL;
    win->backend = a.backend;
    win->fence_alg = a.fence_alg;
    win->contiguous = a.contiguous != 0;
    win->symmetric = a.symmetric != 0;
    win->placement = a.placement;
    win->timeout = a.timeout > 0 ? a.timeout : win->comm->timeout;
    *ap = a;
    if (a.backend < SHMTOPO_BACKEND_POSIX || a.backend > SHMTOPO_BACKEND_XPMEM)
        return shmtopo_fail(EINVAL, -1, "unknown backend number %d", a.backend);
    if (a.fence_alg < SHMTOPO_FENCE_AUTO || a.fence_alg > SHMTOPO_FENCE_DISSEMINATION)
        return shmtopo_fail(EINVAL, -1, "unknown fence algorithm number %d", a.fence_alg);
    if (a.placement < SHMTOPO_PLACEMENT_LOCAL || a.placement > SHMTOPO_PLACEMENT_INTERLEAVE)
        return shmtopo_fail(EINVAL, -1, "unknown placement number %d", a.placement);
    if (a.huge_pages < SHMTOPO_HUGE_OFF || a.huge_pages > SHMTOPO_HUGE_REQUIRED)
        return shmtopo_fail(EINVAL, -1, "unknown huge_pages number %d", a.huge_pages);
    if (!(a.timeout >= 0) || a.timeout > 1e9)
        return shmtopo_fail(EINVAL, -1, "timeout must be a finite number of seconds >= 0, not %g", a.timeout);
    win->fence_alg = resolve_fence_alg(a.fence_alg, win->size, win->comm->oversubscribed);
    return shmtopo_backend_probe(a.backend);
}

/* What every rank's allocation must agree on. */
static shmtopo_sig_t alloc_sig(const shmtopo_win_t *win, const shmtopo_win_attr_t *a)
{
    shmtopo_sig_t sig = shmtopo_sig(SHMTOPO_KIND_WIN_ALLOC);
    sig.dtype = win->backend; /* described as the backend */
    sig.alg = win->fence_alg;
    sig.extra = (uint64_t)win->contiguous | (uint64_t)win->symmetric << 1 |
                (uint64_t)(a->placement & 3) << 2 | (uint64_t)(a->huge_pages & 3) << 4;
    return sig;
}

static shmtopo_win_t *win_new(shmtopo_comm_t *comm)
{
    shmtopo_win_t *win = calloc(1, sizeof(*win));
    if (!win)
        return NULL;
    size_t n = (size_t)comm->size;
    win->comm = comm;
    win->rank = comm->rank;
    win->size = comm->size;
    win->segs = calloc(n, sizeof(*win->segs));
    win->ctrl = calloc(n, sizeof(*win->ctrl));
    win->base = calloc(n, sizeof(*win->base));
    win->sizes = calloc(n, sizeof(*win->sizes));
    win->peer_epoch = calloc(n, sizeof(*win->peer_epoch));
    win->place = calloc(n, sizeof(*win->place));
    win->huge_page = page_size();
    win->label = "the window";
    if (!win->segs || !win->ctrl || !win->base || !win->sizes || !win->peer_epoch || !win->place) {
        free(win->segs), free(win->ctrl), free(win->base), free(win->sizes), free(win->peer_epoch);
        free(win->place);
        free(win);
        return NULL;
    }
    return win;
}

void shmtopo_win_delete(shmtopo_win_t *win)
{
    for (int i = 0; i < win->nsegs; i++)
        shmtopo_seg_destroy(&win->segs[i], !win->disowned);
    free(win->segs), free(win->ctrl), free(win->base), free(win->sizes), free(win->peer_epoch);
    free(win->place);
    free(win);
}

/* What each rank contributes to the first exchange. */
typedef struct alloc_info {
    uint64_t size;
    shmtopo_huge_probe_t huge; /* what this rank sees of huge pages (rank 0's decides) */
} alloc_info_t;

/* The length of rank r's segment (or, contiguous, of the one), a multiple of
 * the segments' page size. */
static size_t seg_length(const shmtopo_win_t *win, const alloc_info_t *infos, int r, size_t ctrl_len)
{
    uint64_t data = 0;
    if (win->contiguous)
        for (int q = 0; q < win->size; q++)
            data += infos[q].size;
    else
        data = infos[r].size;
    return shmtopo_round_up(ctrl_len + shmtopo_round_up(data, page_size()), win->huge_page);
}

/* Admission: the node's whole window must fit before anyone reserves. */
static int admit(const shmtopo_win_t *win, const alloc_info_t *infos, size_t ctrl_len)
{
    uint64_t total = 0;
    for (int r = 0; r < (win->contiguous ? 1 : win->size); r++)
        total += seg_length(win, infos, r, ctrl_len);
    return shmtopo_mem_admit(win->backend, total, win->huge, infos[0].huge.hugetlb_free);
}

/* The huge pages every rank's segments get, decided alike everywhere from
 * rank 0's view: hugetlb when the pool holds the node's window, else
 * transparent ones where allowed, else none (an error only when required). */
static int choose_huge(shmtopo_win_t *win, int request, const alloc_info_t *infos, size_t ctrl_len)
{
    const shmtopo_huge_probe_t *h = &infos[0].huge;
    win->huge = SHMTOPO_HUGE_NONE;
    win->huge_page = page_size();
    if (request == SHMTOPO_HUGE_OFF)
        return 0;
    if (h->hugetlb_page > page_size()) {
        win->huge = SHMTOPO_HUGE_HUGETLB;
        win->huge_page = h->hugetlb_page;
        uint64_t total = 0;
        for (int r = 0; r < (win->contiguous ? 1 : win->size); r++)
            total += seg_length(win, infos, r, ctrl_len);
        if (total <= h->hugetlb_free)
            return 0;
        win->huge = SHMTOPO_HUGE_NONE;
        win->huge_page = page_size();
    }
    if (h->thp) {
        win->huge = SHMTOPO_HUGE_TRANSPARENT;
        return 0;
    }
    if (request == SHMTOPO_HUGE_REQUIRED)
        return shmtopo_fail(ENOMEM, -1,
                            "huge pages are required, but this %s window can get none here (hugetlb pool: "
                            "%llu bytes free of pages of %llu bytes; transparent huge pages for shared "
                            "memory not enabled)", shmtopo_backend_name(win->backend),
                            (unsigned long long)h->hugetlb_free, (unsigned long long)h->hugetlb_page);
    return 0;
}

/* Contiguous: rank r's own pages, [*startp, *startp + *lenp) of the one
 * segment (a page on the border of two parts goes to either). */
static void own_range(const shmtopo_win_t *win, const alloc_info_t *infos, size_t ctrl_len, size_t *startp,
                      size_t *lenp)
{
    size_t start = ctrl_len;
    for (int q = 0; q < win->rank; q++)
        start += infos[q].size;
    size_t end = start + infos[win->rank].size;
    if (win->rank == 0)
        start = 0; /* the control blocks too */
    start = start / win->huge_page * win->huge_page;
    end = shmtopo_round_up(end, win->huge_page);
    *startp = start;
    *lenp = end > start ? end - start : 0;
}

/* The steps of an allocation, each ending in an exchange that fails all
 * ranks together: sizes (after which every rank knows the node's total and
 * checks it fits), segment keys, and that every rank mapped every segment
 * and placed and populated its own pages (after which the names go). Each
 * rank's part lies in its own segment [control block | data], or,
 * contiguous, all in one made by rank 0: [P control blocks | part 0 | part
 * 1 | ...], packed so the whole window is one array. Every rank touches its
 * own part first, so its pages lie near it, not near the creator. */
static int alloc_steps(shmtopo_win_t *win, size_t size, int err, shmtopo_exchange_fn exchange,
                       const shmtopo_win_attr_t *a)
{
    const shmtopo_sig_t sig = alloc_sig(win, a);
    const int P = win->size;
    alloc_info_t mine = {.size = size}, *infos = calloc((size_t)P, sizeof(*infos));
    shmtopo_seg_key_t key, *keys = calloc((size_t)P, sizeof(*keys));
    shmtopo_win_place_t placed;
    int rc = -1;
    memset(&placed, 0, sizeof(placed));
    if (!infos || !keys) {
        shmtopo_fail(ENOMEM, -1, "out of memory allocating a window");
        err = ENOMEM;
    }
    if (!err && a->huge_pages != SHMTOPO_HUGE_OFF) /* files to read: only when asked */
        shmtopo_huge_probe(win->backend, &mine.huge);
    if (exchange(win->comm, &sig, err, &mine, infos, sizeof(mine)) < 0)
        goto out;

    const size_t stride = ctrl_stride(P);
    const size_t ctrl_len = shmtopo_round_up(win->contiguous ? stride * (size_t)P : stride, page_size());
    memset(&key, 0, sizeof(key));
    err = choose_huge(win, a->huge_pages, infos, ctrl_len) < 0 || admit(win, infos, ctrl_len) < 0 ? errno : 0;
    shmtopo_seg_t *own = &win->segs[win->contiguous ? 0 : win->rank];
    win->nsegs = win->contiguous ? 1 : P;
    if (!err && (!win->contiguous || win->rank == 0)) {
        size_t length = seg_length(win, infos, win->rank, ctrl_len);
        if (shmtopo_seg_create(win->backend, length, win->id, win->huge, own) < 0)
            err = errno;
        else
            key = own->key;
        /* our own segment: placed and populated by us, before peers map it */
        if (!err && !win->contiguous) {
            shmtopo_seg_place(own->addr, length, win->placement, a->nodes, a->bind_nodes, &placed);
            if (shmtopo_seg_populate(own->addr, length, own->fd, 0) < 0)
                err = errno;
        }
    }
    if (exchange(win->comm, &sig, err, &key, keys, sizeof(key)) < 0)
        goto out;

    err = 0;
    for (int r = 0; r < win->nsegs && !err; r++) {
        const int creator = win->contiguous ? 0 : r;
        if (creator == win->rank || shmtopo_seg_attach(&keys[creator], &win->segs[r]) == 0)
            continue;
        err = errno;
        /* a creator that died after publishing its key took the segment (its
         * memfd, or its name) along: say so, as a wait would have */
        if (!shmtopo_process_alive(win->comm->pids[creator], win->comm->starttimes[creator]))
            shmtopo_fail(err = EOWNERDEAD, shmtopo_world(win->comm, creator),
                         "rank %d (pid %d) exited while rank %d mapped its segment",
                         shmtopo_world(win->comm, creator), (int)win->comm->pids[creator],
                         shmtopo_world(win->comm, win->rank));
    }
    if (!err && win->contiguous) {
        size_t start, length;
        own_range(win, infos, ctrl_len, &start, &length);
        char *at = (char *)win->segs[0].addr + start;
        shmtopo_seg_place(at, length, win->placement, a->nodes, a->bind_nodes, &placed);
        if (shmtopo_seg_populate(at, length, win->rank == 0 ? own->fd : -1, start) < 0)
            err = errno;
    }
    if (exchange(win->comm, &sig, err, &placed, win->place, sizeof(placed)) < 0)
        goto out;
    /* Everyone has mapped everything: nothing needs the name any more. */
    shmtopo_seg_unpublish(own);
    if (win->symmetric && shmtopo_win_make_symmetric(win, exchange) < 0)
        goto out;
    char *data = (char *)win->segs[0].addr + ctrl_len;
    for (int r = 0; r < P; r++) {
        if (win->contiguous) {
            win->ctrl[r] = (shmtopo_ctrl_t *)((char *)win->segs[0].addr + stride * (size_t)r);
            win->base[r] = data;
            data += infos[r].size;
        } else {
            win->ctrl[r] = win->segs[r].addr;
            win->base[r] = (char *)win->segs[r].addr + ctrl_len;
        }
        win->sizes[r] = infos[r].size;
    }
    rc = 0;
out:
    free(infos);
    free(keys);
    return rc;
}

int shmtopo_win_alloc_via(shmtopo_comm_t *comm, size_t size, const shmtopo_win_attr_t *attr,
                          shmtopo_exchange_fn exchange, void **basep, shmtopo_win_t **winp)
{
    shmtopo_win_t *win = win_new(comm);
    if (!win)
        return shmtopo_fail(ENOMEM, -1, "out of memory allocating a window");
    win->id = comm->next_win_id++;
    int err = 0;
    shmtopo_win_attr_t a = {0};
    if (size > (SIZE_MAX >> 2))
        shmtopo_fail(err = EINVAL, -1, "window size %zu is too large", size);
    else if (resolve_attr(attr, win, &a) < 0)
        err = errno;
    else if (!basep || !winp)
        shmtopo_fail(err = EINVAL, -1, "win_alloc needs basep and winp");
    /* A bad argument on one rank fails the first exchange on every rank. */
    if (alloc_steps(win, size, err, exchange, &a) < 0) {
        err = errno;
        /* every rank failed this allocation, one that refused its arguments
         * before reaching the core too (shmtopo_reject): none keeps the id,
         * or the next window's free would name different ids */
        comm->next_win_id = win->id;
        shmtopo_win_delete(win);
        errno = err;
        return -1;
    }
    *basep = win->base[win->rank];
    *winp = win;
    return 0;
}

int shmtopo_win_alloc(shmtopo_comm_t *comm, size_t size, const shmtopo_win_attr_t *attr,
                      void **basep, shmtopo_win_t **winp)
{
    if (shmtopo_comm_usable(comm, "allocate") < 0)
        return -1;
    return shmtopo_win_alloc_via(comm, size, attr, comm->agree, basep, winp);
}

int shmtopo_win_query(const shmtopo_win_t *win, int rank, void **addrp, size_t *sizep)
{
    if (!win)
        return shmtopo_fail(EBADF, -1, "window is NULL or freed");
    if (rank < 0 || rank >= win->size)
        return shmtopo_fail(EINVAL, rank, "rank %d out of range [0, %d)", rank, win->size);
    if (addrp)
        *addrp = win->base[rank];
    if (sizep)
        *sizep = win->sizes[rank];
    return 0;
}

int shmtopo_win_placement(const shmtopo_win_t *win, int rank, int *placementp, shmtopo_win_place_t *placep)
{
    if (!win)
        return shmtopo_fail(EBADF, -1, "window is NULL or freed");
    if (rank < 0 || rank >= win->size)
        return shmtopo_fail(EINVAL, rank, "rank %d out of range [0, %d)", rank, win->size);
    if (placementp)
        *placementp = win->placement;
    if (placep)
        *placep = win->place[rank];
    return 0;
}

int shmtopo_win_huge_pages(const shmtopo_win_t *win, size_t *page_sizep)
{
    if (!win)
        return shmtopo_fail(EBADF, -1, "window is NULL or freed");
    if (page_sizep)
        *page_sizep = win->huge_page;
    return win->huge;
}

int shmtopo_win_fence_alg(const shmtopo_win_t *win)
{
    return win ? win->fence_alg : shmtopo_fail(EBADF, -1, "window is NULL or freed");
}

int shmtopo_win_backend(const shmtopo_win_t *win)
{
    return win ? win->backend : shmtopo_fail(EBADF, -1, "window is NULL or freed");
}

int shmtopo_win_claim(shmtopo_win_t *win)
{
    return win ? shmtopo_claim(&win->claim, win->label) : 0;
}

void shmtopo_win_unclaim(shmtopo_win_t *win)
{
    if (win)
        shmtopo_unclaim(&win->claim);
}

int shmtopo_win_set_timeout(shmtopo_win_t *win, double seconds)
{
    if (!win)
        return shmtopo_fail(EBADF, -1, "window is NULL or freed");
    if (!(seconds >= 0))
        return shmtopo_fail(EINVAL, -1, "timeout must be >= 0 seconds (0: wait forever)");
    win->timeout = seconds;
    return 0;
}

int shmtopo_win_nmappings(const shmtopo_win_t *win)
{
    return win ? win->nsegs : shmtopo_fail(EBADF, -1, "window is NULL or freed");
}

int shmtopo_win_mapping(const shmtopo_win_t *win, int index, void **addrp, size_t *lengthp)
{
    if (!win)
        return shmtopo_fail(EBADF, -1, "window is NULL or freed");
    if (index < 0 || index >= win->nsegs)
        return shmtopo_fail(EINVAL, -1, "mapping %d out of range [0, %d)", index, win->nsegs);
    *addrp = win->segs[index].addr;
    *lengthp = win->segs[index].length;
    return 0;
}

int shmtopo_win_disown_mappings(shmtopo_win_t *win)
{
    if (!win)
        return shmtopo_fail(EBADF, -1, "window is NULL or freed");
    win->disowned = 1;
    return 0;
}

void shmtopo_win_leave(shmtopo_win_t *win, int origin)
{
    win->broken = 1;
    if (shmtopo_comm_same_process(win->comm) < 0)
        return; /* a fork child's copy: the window is its parent's */
    if (origin < 0 || origin >= win->size)
        origin = win->rank;
    shmtopo_ctrl_t *me = win->ctrl[win->rank];
    if (!me)
        return; /* set-up had not got that far */
    /* rank + 1, so that 0 still means "here"; the first cause stays */
    uint32_t none = 0;
    atomic_compare_exchange_strong(&me->abandoned, &none, (uint32_t)origin + 1);
    /* Peers asleep on our words wake up and see the flag at once. */
    shmtopo_wake(&me->fence_seq);
    for (int p = 0; p < win->size; p++)
        shmtopo_wake(&me->peer_seq[p]);
    if (win->on_leave)
        win->on_leave(win);
}

int shmtopo_win_wait_failed(shmtopo_win_t *win, int origin)
{
    const int err = errno;
    if (err == EOWNERDEAD) /* what the dead peer published goes with it */
        shmtopo_sweep_after_death(win->comm->config.topo_dir);
    shmtopo_win_leave(win, origin);
    errno = err;
    return -1;
}

int shmtopo_win_depart(shmtopo_win_t *win)
{
    if (!win)
        return shmtopo_fail(EBADF, -1, "window is NULL or freed");
    if (!win->broken)
        shmtopo_win_leave(win, -1);
    return 0;
}

/* A clean departure: mark it (peers never count this rank as dead or
 * failed from here on, only as gone for the steps it never posts), and
 * wake the peers asleep on this rank's words, who look again. */
static void depart_clean(shmtopo_win_t *win)
{
    shmtopo_ctrl_t *me = win->ctrl[win->rank];
    if (!me)
        return; /* set-up had not got that far */
    atomic_store_explicit(&me->departed, 1, memory_order_seq_cst);
    shmtopo_wake(&me->fence_seq);
    for (int p = 0; p < win->size; p++)
        shmtopo_wake(&me->peer_seq[p]);
    if (win->on_leave)
        win->on_leave(win);
}

void shmtopo_win_depart_keeping(shmtopo_win_t *win)
{
    depart_clean(win);
}

void shmtopo_win_take_back(shmtopo_win_t *win)
{
    shmtopo_ctrl_t *me = win->ctrl[win->rank];
    if (me)
        atomic_store_explicit(&me->departed, 0, memory_order_seq_cst);
}

int shmtopo_win_release(shmtopo_win_t *win)
{
    if (!win)
        return shmtopo_fail(EBADF, -1, "window is NULL or freed");
    if (shmtopo_comm_same_process(win->comm) < 0)
        return -1;
    if (win->broken || win->comm->broken)
        shmtopo_win_leave(win, -1);
    else
        depart_clean(win);
    shmtopo_win_delete(win);
    return 0;
}

int shmtopo_win_abandon(shmtopo_win_t *win)
{
    return shmtopo_win_abandon_because(win, -1);
}

int shmtopo_win_abandon_because(shmtopo_win_t *win, int origin)
{
    if (!win)
        return shmtopo_fail(EBADF, -1, "window is NULL or freed");
    shmtopo_win_leave(win, origin);
    shmtopo_win_delete(win);
    return 0;
}

int shmtopo_win_free(shmtopo_win_t *win)
{
    if (!win)
        return shmtopo_fail(EBADF, -1, "window is NULL or freed");
    if (shmtopo_comm_same_process(win->comm) < 0)
        return -1;
    shmtopo_comm_t *comm = win->comm;
    int rc = 0;
    if (!win->broken && !comm->broken) {
        /* Nobody may still use a part when its owner unmaps it: every rank
         * agrees to free this window. A mismatch leaves it as it was; a
         * failed wait breaks the comm, and the window goes anyway. */
        shmtopo_sig_t sig = shmtopo_sig(SHMTOPO_KIND_WIN_FREE);
        sig.extra = win->id;
        rc = comm->agree(comm, &sig, 0, NULL, NULL, 0);
        if (rc < 0 && !comm->broken)
            return -1;
    }
    int err = errno;
    if (win->broken || comm->broken)
        shmtopo_win_leave(win, -1);
    shmtopo_win_delete(win);
    errno = err;
    return rc;
}
