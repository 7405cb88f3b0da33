/* coll.c: what every collective (coll.c, coll_v.c) uses. */
#ifndef SHMTOPO_COLL_H
#define SHMTOPO_COLL_H

#include <errno.h>

#include "internal.h"

static inline size_t shmtopo_min_size(size_t a, size_t b)
{
    return a < b ? a : b;
}

/* Collective over the node: post this rank's signature (err != 0: this
 * rank's arguments or set-up failed, shmtopo_last_error says why) and up to
 * SHMTOPO_INLINE bytes of data, wait for every rank, decide. Returns 0 when
 * all ranks are fine and posted the same signature, else -1 with the same
 * errno and message on every rank (the first failing rank's, or a mismatch
 * naming both calls). A failed wait breaks the comm. */
static inline int shmtopo_step(shmtopo_comm_t *comm, const shmtopo_sig_t *sig, int err, const void *data,
                               size_t n)
{
    return shmtopo_step_hashed(comm, sig, shmtopo_sig_hash(sig), err, data, n);
}

/* A signature of a collective call (-1: a field it does not use). */
static inline shmtopo_sig_t shmtopo_coll_sig(int kind, size_t count, int dtype, int op, int root, int alg)
{
    shmtopo_sig_t sig = shmtopo_sig(kind);
    sig.count = count;
    sig.dtype = dtype;
    sig.op = op;
    sig.root = root;
    sig.alg = alg;
    return sig;
}

/* A step of a call already agreed on (its later chunks): the signature
 * still travels, so ranks that fell out of step fail instead of mixing data. */
static inline int shmtopo_coll_step(shmtopo_comm_t *comm, const shmtopo_sig_t *sig, const void *data, size_t n)
{
    return shmtopo_step(comm, sig, 0, data, n);
}

/* The agreement of a call whose arguments failed a check on this rank
 * (errno, the message recorded): one step with the failure, so every rank
 * fails with it. */
static inline int shmtopo_coll_refuse(shmtopo_comm_t *comm, const shmtopo_sig_t *sig)
{
    return shmtopo_step(comm, sig, errno ? errno : EINVAL, NULL, 0);
}

/* The local checks of a call, in the order every entry applies them; the
 * first failure is recorded (errno, message) and returned as -1. */
int shmtopo_coll_check_dtype(int dtype);
int shmtopo_coll_check_root(const shmtopo_comm_t *comm, int root);
int shmtopo_coll_check_alg(int alg);
int shmtopo_coll_check_buffers(const char *what, size_t count, const void *a, const void *b);
/* The result may replace its input exactly (in_place), or lie apart from it. */
int shmtopo_coll_check_overlap(const char *what, const void *send, size_t ns, const void *recv, size_t nr,
                               int in_place);

/* A persistent allreduce (request.c): the signature and the checks of a
 * private-array allreduce once, at its init (0, or -1 with the failure
 * recorded; *sig set either way), then each start runs it with no checks. */
int shmtopo_coll_allreduce_prepare(const shmtopo_comm_t *comm, const void *send, void *recv, size_t count,
                                   int dtype, int op, int alg, shmtopo_sig_t *sig);
int shmtopo_coll_allreduce_run(shmtopo_comm_t *comm, const shmtopo_sig_t *sig, const void *send, void *recv,
                               size_t count, int dtype, int op);

/* coll_w.c, for alltoallv and alltoallw alike. After the first step of one, whose buffer `which`
 * holds each rank's send counts, then its receive counts (a row of size_t
 * each): both matrices read into S and R (size x size), the pairs checked
 * (shmtopo_pairs_verdict: -1 on every rank alike), and every rank's stream
 * (its blocks for every other rank, in rank order, esz bytes a count):
 * where rank r's block for this rank lies in it (from[r], len[r]), the
 * longest stream and this rank's own. */
int shmtopo_coll_streams(shmtopo_comm_t *comm, const shmtopo_sig_t *sig, int which, size_t esz, size_t *S,
                         size_t *R, size_t *from, size_t *len, size_t *longest, size_t *mine);

/* The scratch-buffer stream of alltoallv and alltoallw, after
 * shmtopo_coll_streams: every rank's blocks for the others, chunk by chunk,
 * each block gathered from its runs into the chunk and scattered from it
 * into the receiver's (sent[p]: bytes of this rank's block for p).
 * cursors: room for 2 * size of them (SHMTOPO_COLL_CURSOR bytes each). */
#define SHMTOPO_COLL_CURSOR (3 * sizeof(uint64_t))
int shmtopo_coll_stream(shmtopo_comm_t *comm, const shmtopo_sig_t *sig, const void *send,
                        const shmtopo_typed_block_t *sendblocks, const size_t *sent, void *recv,
                        const shmtopo_typed_block_t *recvblocks, const size_t *from, const size_t *len,
                        size_t longest, size_t mine, void *cursors);

/* Where a rank's input for a fold lies (a callback, so one fold serves the
 * scratch buffers, the step lines and windows). */
/* Single copy (single_copy.c) in the collectives. Where it starts for a
 * kind of call (SHMTOPO_KIND_*): the same on every rank, from the sizes
 * measured in coll.c. */
size_t shmtopo_coll_sc_min(const shmtopo_comm_t *comm, int kind);
/* The address rank `rank` posted in the step just taken (8 bytes of step data). */
uint64_t shmtopo_coll_posted_address(const shmtopo_comm_t *comm, int rank);
/* Bytes of the data a round of single copy moves before the step that ends
 * it: a step is a few microseconds, and a wait then never spans more than
 * a few milliseconds of copying (the timeout stays meaningful). */
#define SHMTOPO_SC_ROUND ((size_t)32 << 20)
/* Single-copy gathering, a round at a time, after the first step's
 * agreement posts the addresses. The ranks that receive post their out
 * (root < 0, allgather: every rank; root >= 0, gather: the root), and every
 * rank writes its n-byte block into each of them at me * n (peers in a
 * different order on each rank) while it copies its own into its own out.
 * Blocks are copied from `send` unless in place; inputs and outputs stay
 * until the step that ends the round. `what` names the call in failures. */
int shmtopo_coll_sc_gather(shmtopo_comm_t *comm, const shmtopo_sig_t *sig, const char *send, char *out, size_t n,
                           int root, const char *what);

typedef const char *(*shmtopo_coll_src_fn)(const shmtopo_comm_t *comm, int rank, const void *arg);
/* dst = in[0] op ... op in[nranks - 1], in rank order (bit-identical on every rank). */
void shmtopo_coll_fold(const shmtopo_comm_t *comm, char *dst, shmtopo_coll_src_fn src, const void *arg,
                       int nranks, size_t count, int dtype, int op);

/* A chunk in the scratch buffers: buffer `which` of every rank, from `offset`. */
typedef struct shmtopo_chunk_at {
    int which;
    size_t offset;     /* bytes into each rank's buffer */
    const char *own;   /* this rank's input for the same elements, read there instead, or NULL */
} shmtopo_chunk_at_t;
/* The shmtopo_coll_src_fn of a chunk (arg: a shmtopo_chunk_at_t). */
const char *shmtopo_coll_from_buffer(const shmtopo_comm_t *comm, int rank, const void *arg);

#endif /* SHMTOPO_COLL_H */
