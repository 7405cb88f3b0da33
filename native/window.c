/* Windows: every rank's part mapped in every process, plus a control block
 * per rank for fences. Set-up runs in steps separated by allgathers that carry
 * a status, so a failure on any rank fails the call on all of them and each
 * cleans up what it made. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

/* First allgather: what each rank asks for, plus its segment when each rank
 * owns one. */
typedef struct alloc_record {
    shmtopo_status_t status;
    uint64_t size;
    int32_t backend, fence_alg, contiguous, symmetric;
    shmtopo_seg_key_t key;
} alloc_record_t;

static size_t page_size(void)
{
    return (size_t)sysconf(_SC_PAGESIZE);
}

static size_t ctrl_stride(int size)
{
    return shmtopo_round_up(sizeof(shmtopo_ctrl_t) + (size_t)size * sizeof(uint64_t), SHMTOPO_LINE);
}

static int resolve_attr(const shmtopo_win_attr_t *attr, shmtopo_win_t *win)
{
    shmtopo_win_attr_t a = {0};
    if (attr)
        a = *attr;
    if (a.invalid)
        return shmtopo_fail(EINVAL, -1, "%s", a.invalid);
    if (a.backend == SHMTOPO_BACKEND_DEFAULT) {
        if (shmtopo_default_backend(&a.backend) < 0)
            return -1;
    } else if (a.backend < 0 || a.backend > SHMTOPO_BACKEND_XPMEM) {
        return shmtopo_fail(EINVAL, -1, "unknown backend number %d", a.backend);
    }
    if (shmtopo_backend_probe(a.backend) < 0)
        return -1;
    if (a.fence_alg == SHMTOPO_FENCE_DEFAULT) {
        if (shmtopo_default_fence_alg(&a.fence_alg) < 0)
            return -1;
    } else if (a.fence_alg < 0 || a.fence_alg > SHMTOPO_FENCE_DISSEMINATION) {
        return shmtopo_fail(EINVAL, -1, "unknown fence algorithm number %d", a.fence_alg);
    }
    if (a.timeout <= 0) {
        const char *t = getenv("SHMTOPO_TIMEOUT");
        char *end = NULL;
        a.timeout = t && *t ? strtod(t, &end) : 0;
        if (t && *t && (*end != '\0' || a.timeout < 0))
            return shmtopo_fail(EINVAL, -1, "SHMTOPO_TIMEOUT=%s is not a number of seconds >= 0", t);
    }
    win->backend = a.backend;
    win->fence_alg = shmtopo_fence_resolve(a.fence_alg, win->size, win->comm->oversubscribed);
    win->contiguous = a.contiguous != 0;
    win->symmetric = a.symmetric != 0;
    win->timeout = a.timeout;
    return 0;
}

static int check_agreement(const shmtopo_win_t *win, const alloc_record_t *recs)
{
    for (int r = 0; r < win->size; r++) {
        if (recs[r].backend != win->backend)
            return shmtopo_fail(EINVAL, r, "ranks disagree on the backend: rank %d uses %s, rank %d uses %s",
                                win->rank, shmtopo_backend_name(win->backend), r,
                                shmtopo_backend_name(recs[r].backend));
        if (recs[r].fence_alg != win->fence_alg)
            return shmtopo_fail(EINVAL, r, "ranks disagree on the fence algorithm: rank %d uses %s, rank %d uses %s",
                                win->rank, shmtopo_fence_alg_name(win->fence_alg), r,
                                shmtopo_fence_alg_name(recs[r].fence_alg));
        if (recs[r].contiguous != win->contiguous)
            return shmtopo_fail(EINVAL, r, "ranks disagree on the contiguous option (rank %d)", r);
        if (recs[r].symmetric != win->symmetric)
            return shmtopo_fail(EINVAL, r, "ranks disagree on the symmetric option (rank %d)", r);
    }
    return 0;
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
    if (!win->segs || !win->ctrl || !win->base || !win->sizes || !win->peer_epoch) {
        free(win->segs), free(win->ctrl), free(win->base), free(win->sizes), free(win->peer_epoch);
        free(win);
        return NULL;
    }
    return win;
}

static void win_delete(shmtopo_win_t *win)
{
    for (int i = 0; i < win->nsegs; i++)
        shmtopo_seg_destroy(&win->segs[i], !win->disowned);
    free(win->segs), free(win->ctrl), free(win->base), free(win->sizes), free(win->peer_epoch);
    free(win);
}

/* Each rank's part in its own segment: [control block | data], both
 * page-aligned. */
static int alloc_separate(shmtopo_win_t *win, size_t size, uint64_t id, alloc_record_t *mine,
                          alloc_record_t *recs)
{
    const size_t ctrl_len = shmtopo_round_up(ctrl_stride(win->size), page_size());
    shmtopo_seg_t *own = &win->segs[win->rank];
    int err = 0;
    if (shmtopo_seg_create(win->backend, ctrl_len + shmtopo_round_up(size, page_size()), id, own) < 0)
        err = errno;
    else
        mine->key = own->key;
    win->nsegs = win->size;
    if (shmtopo_comm_agree(win->comm, err, mine, recs, sizeof(*mine)) < 0 ||
        check_agreement(win, recs) < 0)
        return -1;

    err = 0;
    for (int r = 0; r < win->size && !err; r++)
        if (r != win->rank && shmtopo_seg_attach(&recs[r].key, &win->segs[r]) < 0)
            err = errno;
    if (shmtopo_comm_agree(win->comm, err, mine, recs, sizeof(*mine)) < 0)
        return -1;
    /* Everyone has mapped everything: nothing needs the name any more. */
    shmtopo_seg_unpublish(own);
    if (win->symmetric && shmtopo_win_make_symmetric(win) < 0)
        return -1;
    for (int r = 0; r < win->size; r++) {
        win->ctrl[r] = win->segs[r].addr;
        win->base[r] = (char *)win->segs[r].addr + ctrl_len;
        win->sizes[r] = recs[r].size;
    }
    return 0;
}

/* All parts back to back in one segment made by rank 0:
 * [P control blocks | part 0 | part 1 | ...], parts packed without gaps so
 * the whole window is one array. */
static int alloc_contiguous(shmtopo_win_t *win, alloc_record_t *mine, alloc_record_t *recs)
{
    if (shmtopo_comm_agree(win->comm, 0, mine, recs, sizeof(*mine)) < 0 ||
        check_agreement(win, recs) < 0)
        return -1;
    const size_t stride = ctrl_stride(win->size);
    const size_t ctrl_len = shmtopo_round_up(stride * (size_t)win->size, page_size());
    size_t total = 0;
    for (int r = 0; r < win->size; r++)
        total += recs[r].size;

    int err = 0;
    win->nsegs = 1;
    shmtopo_seg_t *seg = &win->segs[0];
    if (win->rank == 0) {
        if (shmtopo_seg_create(win->backend, ctrl_len + shmtopo_round_up(total, page_size()),
                               win->comm->next_win_id, seg) < 0)
            err = errno;
        else
            mine->key = seg->key;
    }
    if (shmtopo_comm_agree(win->comm, err, mine, recs, sizeof(*mine)) < 0)
        return -1;
    err = 0;
    if (win->rank != 0 && shmtopo_seg_attach(&recs[0].key, seg) < 0)
        err = errno;
    if (shmtopo_comm_agree(win->comm, err, mine, recs, sizeof(*mine)) < 0)
        return -1;
    shmtopo_seg_unpublish(seg);
    if (win->symmetric && shmtopo_win_make_symmetric(win) < 0)
        return -1;
    char *data = (char *)seg->addr + ctrl_len;
    for (int r = 0; r < win->size; r++) {
        win->ctrl[r] = (shmtopo_ctrl_t *)((char *)seg->addr + stride * (size_t)r);
        win->base[r] = data;
        win->sizes[r] = recs[r].size;
        data += recs[r].size;
    }
    return 0;
}

int shmtopo_win_alloc(shmtopo_comm_t *comm, size_t size, const shmtopo_win_attr_t *attr,
                      void **basep, shmtopo_win_t **winp)
{
    if (!comm)
        return shmtopo_fail(EBADF, -1, "communicator is NULL or freed");
    if (!basep || !winp)
        return shmtopo_fail(EINVAL, -1, "win_alloc needs basep and winp");
    shmtopo_win_t *win = win_new(comm);
    alloc_record_t *recs = calloc((size_t)comm->size, sizeof(*recs));
    alloc_record_t mine;
    memset(&mine, 0, sizeof(mine));
    if (!win || !recs) {
        shmtopo_fail(ENOMEM, -1, "out of memory allocating a window");
        goto out_with_win;
    }
    const uint64_t id = comm->next_win_id++;
    int err = 0;
    if (size > (SIZE_MAX >> 2))
        shmtopo_fail(err = EINVAL, -1, "window size %zu is too large", size);
    else if (resolve_attr(attr, win) < 0)
        err = errno;
    mine.size = size;
    mine.backend = win->backend;
    mine.fence_alg = win->fence_alg;
    mine.contiguous = win->contiguous;
    mine.symmetric = win->symmetric;
    /* A bad argument on one rank must fail all of them, not leave the others
     * waiting in the next step. */
    if (err) {
        shmtopo_comm_agree(comm, err, &mine, recs, sizeof(mine));
        goto out_with_win;
    }
    if ((win->contiguous ? alloc_contiguous(win, &mine, recs)
                         : alloc_separate(win, size, id, &mine, recs)) < 0)
        goto out_with_win;
    free(recs);
    *basep = win->base[win->rank];
    *winp = win;
    return 0;

out_with_win:
    err = errno;
    if (win)
        win_delete(win);
    free(recs);
    errno = err;
    return -1;
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

static int usable(shmtopo_win_t *win)
{
    if (!win)
        return shmtopo_fail(EBADF, -1, "window is NULL or freed");
    if (win->broken)
        return shmtopo_fail(EPIPE, -1, "window is unusable after a failed wait; free it");
    return 0;
}

static int mark(shmtopo_win_t *win, int rc)
{
    if (rc < 0)
        win->broken = 1;
    return rc;
}

int shmtopo_win_fence(shmtopo_win_t *win)
{
    if (usable(win) < 0)
        return -1;
    return mark(win, shmtopo_fence_run(win));
}

static int check_peer(const shmtopo_win_t *win, int peer)
{
    if (peer < 0 || peer >= win->size)
        return shmtopo_fail(EINVAL, peer, "peer rank %d out of range [0, %d)", peer, win->size);
    if (peer == win->rank)
        return shmtopo_fail(EINVAL, peer, "rank %d cannot peer-fence with itself", peer);
    return 0;
}

int shmtopo_win_peer_fence(shmtopo_win_t *win, int peer)
{
    if (usable(win) < 0 || check_peer(win, peer) < 0)
        return -1;
    return mark(win, shmtopo_peer_fence_run(win, peer));
}

int shmtopo_win_fence_loop(shmtopo_win_t *win, long count)
{
    if (usable(win) < 0)
        return -1;
    for (long i = 0; i < count; i++)
        if (shmtopo_fence_run(win) < 0)
            return mark(win, -1);
    return 0;
}

int shmtopo_win_peer_fence_loop(shmtopo_win_t *win, int peer, long count)
{
    if (usable(win) < 0 || check_peer(win, peer) < 0)
        return -1;
    for (long i = 0; i < count; i++)
        if (shmtopo_peer_fence_run(win, peer) < 0)
            return mark(win, -1);
    return 0;
}

int shmtopo_win_fence_alg(const shmtopo_win_t *win)
{
    return win ? win->fence_alg : shmtopo_fail(EBADF, -1, "window is NULL or freed");
}

int shmtopo_win_backend(const shmtopo_win_t *win)
{
    return win ? win->backend : shmtopo_fail(EBADF, -1, "window is NULL or freed");
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

int shmtopo_win_abandon(shmtopo_win_t *win)
{
    return shmtopo_win_abandon_because(win, -1);
}

int shmtopo_win_abandon_because(shmtopo_win_t *win, int origin)
{
    if (!win)
        return shmtopo_fail(EBADF, -1, "window is NULL or freed");
    if (origin < 0 || origin >= win->size)
        origin = win->rank;
    shmtopo_ctrl_t *me = win->ctrl[win->rank];
    /* rank + 1, so that 0 still means "here" */
    atomic_store_explicit(&me->abandoned, (uint32_t)origin + 1, memory_order_seq_cst);
    /* Peers asleep on our words wake up and see the flag at once. */
    shmtopo_wake(&me->fence_seq);
    for (int p = 0; p < win->size; p++)
        shmtopo_wake(&me->peer_seq[p]);
    win_delete(win);
    return 0;
}

int shmtopo_win_free(shmtopo_win_t *win)
{
    if (!win)
        return shmtopo_fail(EBADF, -1, "window is NULL or freed");
    /* Nobody may still be reading a part when its owner unmaps it. A broken
     * window skips this: its peers are gone or out of step anyway. */
    int rc = win->broken ? 0 : shmtopo_fence_run(win);
    int err = errno;
    win_delete(win);
    errno = err;
    return rc;
}
