// The KUPL shm API from C++, the way KUPL's own C++ tests use it: enum tags
// as type names (kupl_shm_datatype, kupl_shm_reduce_op), the callback
// typedefs, kupl_info_flag_t and kupl_shm_info_set, kupl_memcpy, the status
// macros in #if, kupl_export; both prefixes in one program. It walks the
// same ground as KUPL's shm functional tests, in its own way: refused
// arguments, windows (several, on several comms, one left for comm_destroy),
// queries, fences, peer fences, and the persistent collectives on window
// memory checked against MPI's own, every case once with separate parts and
// once contiguous. Prints "kupl suite ok" on rank 0.
#include <mpi.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "kpccl.h"
#include "kupl.h"
#include "mpi_oob.h"

#if KUPL_OK != 0 || KUPL_ERROR != -1 || KPCCL_OK != 0 || KPCCL_ERROR != -1
#error "the status macros must be usable in #if"
#endif

// A program may mark its own functions with the kit's export macro.
kupl_export int suite_version(void) { return 1; }
kpccl_export int suite_version_kpccl(void) { return 1; }

static const kupl_shm_oob_allgather_cb_t allgather_cb = oob_allgather;
static const kupl_shm_oob_barrier_cb_t barrier_cb = oob_barrier;
static const kpccl_shm_oob_allgather_cb_t kpccl_allgather_cb = kpccl_oob_allgather;
static const kpccl_shm_oob_barrier_cb_t kpccl_barrier_cb = oob_barrier;

static MPI_Comm world = MPI_COMM_WORLD;
static int me, nranks;

static kupl_shm_comm_h make_comm(MPI_Comm *group, int size, int rank)
{
    kupl_shm_oob_cb_t cbs;
    cbs.oob_allgather = allgather_cb;
    cbs.oob_barrier = barrier_cb;
    kupl_shm_comm_h comm = nullptr;
    CHECK(kupl_shm_comm_create(size, rank, getpid(), &cbs, group, &comm) == KUPL_OK && comm);
    return comm;
}

template <typename T> static MPI_Datatype mpi_type();
template <> MPI_Datatype mpi_type<signed char>() { return MPI_SIGNED_CHAR; }
template <> MPI_Datatype mpi_type<int>() { return MPI_INT; }
template <> MPI_Datatype mpi_type<long>() { return MPI_LONG; }
template <> MPI_Datatype mpi_type<float>() { return MPI_FLOAT; }
template <> MPI_Datatype mpi_type<double>() { return MPI_DOUBLE; }

// Arguments that are refused: every rank passes the same, every rank fails.
static void refused(kupl_shm_comm_h comm)
{
    kupl_shm_oob_cb_t cbs = {allgather_cb, barrier_cb};
    kupl_shm_comm_h other;
    CHECK(kupl_shm_comm_create(-1, me, getpid(), &cbs, &world, &other) == KUPL_ERROR);
    CHECK(kupl_shm_comm_create(nranks, nranks, getpid(), &cbs, &world, &other) == KUPL_ERROR);
    CHECK(kupl_shm_comm_create(nranks, me, getpid(), nullptr, &world, &other) == KUPL_ERROR);
    void *base;
    kupl_shm_win_h win;
    CHECK(kupl_shm_win_alloc(static_cast<size_t>(-1), comm, &base, &win) == KUPL_ERROR);
    CHECK(kupl_shm_win_alloc(1, nullptr, &base, &win) == KUPL_ERROR);
    CHECK(kupl_shm_win_alloc(1, comm, nullptr, &win) == KUPL_ERROR);
    kupl_shm_request_h req;
    int one = 1;
    CHECK(kupl_shm_allreduce_init(nullptr, nullptr, 1, KUPL_SHM_DATATYPE_CHAR, KUPL_SHM_REDUCE_OP_SUM, comm,
                                  &req) == KUPL_ERROR);
    CHECK(kupl_shm_allreduce_init(&one, &one, -1, KUPL_SHM_DATATYPE_INT, KUPL_SHM_REDUCE_OP_SUM, comm, &req) ==
          KUPL_ERROR);
    CHECK(kupl_shm_alltoall_init(nullptr, 1, KUPL_SHM_DATATYPE_CHAR, nullptr, 1, KUPL_SHM_DATATYPE_CHAR, comm,
                                 &req) == KUPL_ERROR);
    CHECK(kupl_shm_alltoall_init(&one, -1, KUPL_SHM_DATATYPE_INT, &one, -1, KUPL_SHM_DATATYPE_INT, comm, &req) ==
          KUPL_ERROR);
    CHECK(kupl_shm_bcast_init(nullptr, -1, KUPL_SHM_DATATYPE_CHAR, 0, comm, &req) == KUPL_ERROR);
    CHECK(kupl_shm_bcast_init(&one, 1, KUPL_SHM_DATATYPE_INT, -1, comm, &req) == KUPL_ERROR);
    CHECK(kupl_shm_bcast_init(&one, 1, static_cast<kupl_shm_datatype>(9), 0, comm, &req) == KUPL_ERROR);
    CHECK(kupl_shm_request_start(nullptr) == KUPL_ERROR);
    CHECK(kupl_shm_request_wait(nullptr) == KUPL_ERROR);
    CHECK(kupl_shm_request_free(nullptr) == KUPL_ERROR);
    CHECK(kupl_shm_win_free(nullptr) == KUPL_ERROR);
    CHECK(kupl_shm_comm_destroy(nullptr) == KUPL_ERROR);
    CHECK(kupl_shm_fence(nullptr) == KUPL_ERROR);
    CHECK(kupl_shm_peer_fence(nullptr, 0) == KUPL_ERROR);
    int rank;
    CHECK(kupl_shm_comm_rank(nullptr, &rank) == KUPL_ERROR);
    CHECK(kupl_shm_comm_size(comm, nullptr) == KUPL_ERROR);
    kupl_info_flag_t bad_flag = static_cast<kupl_info_flag_t>(3);
    CHECK(kupl_shm_info_set(bad_flag, 0) == KUPL_ERROR);
    CHECK(kupl_shm_info_set(KUPL_SHM_INFO_IS_CONTIG, 2) == KUPL_ERROR);
}

// Windows: two at once, one allocated over the handle of another (that one
// is left for comm_destroy to free), a 0-byte one; queries in range only.
static void windows(kupl_shm_comm_h comm)
{
    kupl_shm_win_h a, b;
    void *pa, *pb;
    CHECK(kupl_shm_win_alloc(65536, comm, &pa, &a) == KUPL_OK);
    CHECK(kupl_shm_win_alloc(4096, comm, &pb, &b) == KUPL_OK);
    CHECK(pa != pb);
    CHECK(kupl_shm_win_alloc(0, comm, &pa, &a) == KUPL_OK); // the 65536-byte one stays allocated
    void *q;
    CHECK(kupl_shm_win_query(b, nranks - 1, &q) == KUPL_OK && q);
    CHECK(kupl_shm_win_query(b, 0, nullptr) == KUPL_ERROR);
    CHECK(kupl_shm_win_query(b, -1, &q) == KUPL_ERROR);
    CHECK(kupl_shm_win_query(b, nranks, &q) == KUPL_ERROR);
    // every rank writes its slot of rank 0's part
    int *root;
    CHECK(kupl_shm_win_query(b, 0, reinterpret_cast<void **>(&root)) == KUPL_OK);
    root[me] = me + 1;
    CHECK(kupl_shm_fence(b) == KUPL_OK);
    for (int r = 0; r < nranks; r++)
        CHECK(root[r] == r + 1);
    CHECK(kupl_shm_win_free(a) == KUPL_OK);
    CHECK(kupl_shm_win_free(b) == KUPL_OK);
}

// Two comms at once, over different MPI comms: even/odd ranks, and all.
static void several_comms()
{
    MPI_Comm half;
    MPI_Comm_split(world, me % 2, me, &half);
    int hr, hs;
    MPI_Comm_rank(half, &hr);
    MPI_Comm_size(half, &hs);
    kupl_shm_comm_h a = make_comm(&half, hs, hr);
    kupl_shm_comm_h b = make_comm(&world, nranks, me);
    kupl_shm_win_h wa, wb;
    long *pa, *pb;
    CHECK(kupl_shm_win_alloc(sizeof(long) * 8, a, reinterpret_cast<void **>(&pa), &wa) == KUPL_OK);
    CHECK(kupl_shm_win_alloc(sizeof(long) * 8, b, reinterpret_cast<void **>(&pb), &wb) == KUPL_OK);
    *pa = 100 + me;
    *pb = 200 + me;
    CHECK(kupl_shm_fence(wa) == KUPL_OK && kupl_shm_fence(wb) == KUPL_OK);
    long *other;
    CHECK(kupl_shm_win_query(wa, hs - 1, reinterpret_cast<void **>(&other)) == KUPL_OK);
    CHECK(*other == 100 + (hs - 1) * 2 + me % 2);
    CHECK(kupl_shm_win_query(wb, nranks - 1, reinterpret_cast<void **>(&other)) == KUPL_OK);
    CHECK(*other == 200 + nranks - 1);
    CHECK(kupl_shm_win_free(wa) == KUPL_OK && kupl_shm_comm_destroy(a) == KUPL_OK);
    CHECK(kupl_shm_win_free(wb) == KUPL_OK && kupl_shm_comm_destroy(b) == KUPL_OK);
    MPI_Comm_free(&half);
}

// Fences with uneven delays: after each, every rank's counter has moved on;
// peer fences between rank 0 and each other rank, both ways.
static void fences(kupl_shm_comm_h comm)
{
    kupl_shm_win_h win;
    volatile int *mine;
    CHECK(kupl_shm_win_alloc(256, comm, (void **)&mine, &win) == KUPL_OK);
    std::vector<volatile int *> part(static_cast<size_t>(nranks));
    for (int r = 0; r < nranks; r++)
        CHECK(kupl_shm_win_query(win, r, (void **)&part[static_cast<size_t>(r)]) == KUPL_OK);
    for (int round = 1; round <= 8; round++) {
        usleep(static_cast<useconds_t>(((me + round) % nranks) * 700));
        mine[0] = round;
        CHECK(kupl_shm_fence(win) == KUPL_OK);
        for (int r = 0; r < nranks; r++)
            CHECK(part[static_cast<size_t>(r)][0] == round);
        CHECK(kupl_shm_fence(win) == KUPL_OK);
    }
    CHECK(kupl_shm_peer_fence(win, -1) == KUPL_ERROR);
    CHECK(kupl_shm_peer_fence(win, nranks) == KUPL_ERROR);
    for (int round = 1; round <= 4 && nranks > 1; round++) {
        if (me == 0) {
            for (int p = 1; p < nranks; p++) {
                CHECK(kupl_shm_peer_fence(win, p) == KUPL_OK);
                CHECK(part[static_cast<size_t>(p)][1] == round * 10 + p);
                CHECK(kupl_shm_peer_fence(win, p) == KUPL_OK); /* read before p writes again */
            }
        } else {
            usleep(static_cast<useconds_t>(me * 300));
            mine[1] = round * 10 + me;
            CHECK(kupl_shm_peer_fence(win, 0) == KUPL_OK);
            CHECK(kupl_shm_peer_fence(win, 0) == KUPL_OK);
        }
    }
    CHECK(kupl_shm_win_free(win) == KUPL_OK);
}

// Bcast of window memory from every root, each on a comm of its own.
template <typename T> static void bcast(kupl_shm_datatype datatype)
{
    const int count = 20000;
    for (int root = 0; root < nranks; root++) {
        kupl_shm_comm_h comm = make_comm(&world, nranks, me);
        kupl_shm_win_h win;
        T *buf;
        CHECK(kupl_shm_win_alloc(sizeof(T) * count, comm, reinterpret_cast<void **>(&buf), &win) == KUPL_OK);
        for (int i = 0; i < count; i++)
            buf[i] = static_cast<T>(me == root ? (i * 3 + root) % 101 : -1);
        kupl_shm_request_h req;
        CHECK(kupl_shm_bcast_init(buf, count, datatype, root, comm, &req) == KUPL_OK);
        CHECK(kupl_shm_request_start(req) == KUPL_OK && kupl_shm_request_wait(req) == KUPL_OK);
        for (int i = 0; i < count; i++)
            CHECK(buf[i] == static_cast<T>((i * 3 + root) % 101));
        CHECK(kupl_shm_request_free(req) == KUPL_OK);
        CHECK(kupl_shm_win_free(win) == KUPL_OK);
        CHECK(kupl_shm_comm_destroy(comm) == KUPL_OK);
    }
}

// Allreduce (sum) and alltoall of window memory, against MPI's results.
template <typename T> static void reduce_and_exchange(kupl_shm_comm_h comm, kupl_shm_datatype datatype)
{
    const int count = 3000;
    const size_t bytes = sizeof(T) * static_cast<size_t>(count) * static_cast<size_t>(nranks);
    kupl_shm_win_h ws, wr;
    T *send, *recv;
    CHECK(kupl_shm_win_alloc(bytes, comm, reinterpret_cast<void **>(&send), &ws) == KUPL_OK);
    CHECK(kupl_shm_win_alloc(bytes, comm, reinterpret_cast<void **>(&recv), &wr) == KUPL_OK);
    std::vector<T> expect(static_cast<size_t>(count) * static_cast<size_t>(nranks));
    for (int i = 0; i < count * nranks; i++)
        send[i] = static_cast<T>((me * 7 + i) % 23 - 11);

    kupl_shm_reduce_op op = KUPL_SHM_REDUCE_OP_SUM;
    kupl_shm_request_h req;
    CHECK(kupl_shm_allreduce_init(send, recv, count, datatype, op, comm, &req) == KUPL_OK);
    CHECK(kupl_shm_request_start(req) == KUPL_OK);
    MPI_Allreduce(send, expect.data(), count, mpi_type<T>(), MPI_SUM, world);
    for (int i = 0; i < count; i++)
        CHECK(recv[i] == expect[static_cast<size_t>(i)]);
    CHECK(kupl_shm_request_free(req) == KUPL_OK);

    // in place, one half after the other, copied back with kupl_memcpy
    for (int half = 0; half < 2; half++) {
        T *part = send + half * (count / 2);
        CHECK(kupl_shm_allreduce_init(part, recv, count / 2, datatype, op, comm, &req) == KUPL_OK);
        CHECK(kupl_shm_request_start(req) == KUPL_OK);
        CHECK(kupl_memcpy(part, recv, sizeof(T) * static_cast<size_t>(count / 2)) == KUPL_OK);
        CHECK(kupl_shm_request_free(req) == KUPL_OK);
    }
    for (int i = 0; i < count / 2 * 2; i++)
        CHECK(send[i] == expect[static_cast<size_t>(i)]);

    for (int i = 0; i < count * nranks; i++)
        send[i] = static_cast<T>((me * 5 + i) % 19);
    CHECK(kupl_shm_alltoall_init(send, count, datatype, recv, count, datatype, comm, &req) == KUPL_OK);
    CHECK(kupl_shm_request_start(req) == KUPL_OK && kupl_shm_request_wait(req) == KUPL_OK);
    MPI_Alltoall(send, count, mpi_type<T>(), expect.data(), count, mpi_type<T>(), world);
    for (int i = 0; i < count * nranks; i++)
        CHECK(recv[i] == expect[static_cast<size_t>(i)]);
    CHECK(kupl_shm_request_free(req) == KUPL_OK);
    CHECK(kupl_shm_win_free(ws) == KUPL_OK && kupl_shm_win_free(wr) == KUPL_OK);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(world, &me);
    MPI_Comm_size(world, &nranks);
    world_rank = me;
    CHECK(suite_version() == 1 && suite_version_kpccl() == 1);

    for (uint32_t contig = 0; contig <= 1; contig++) {
        CHECK(kupl_shm_info_set(KUPL_SHM_INFO_IS_CONTIG, contig) == KUPL_OK);
        kupl_shm_comm_h comm = make_comm(&world, nranks, me);
        int rank = -1, size = -1;
        CHECK(kupl_shm_comm_rank(comm, &rank) == KUPL_OK && rank == me);
        CHECK(kupl_shm_comm_size(comm, &size) == KUPL_OK && size == nranks);
        refused(comm);
        windows(comm);
        several_comms();
        fences(comm);
        bcast<signed char>(KUPL_SHM_DATATYPE_CHAR);
        bcast<int>(KUPL_SHM_DATATYPE_INT);
        bcast<long>(KUPL_SHM_DATATYPE_LONG);
        reduce_and_exchange<signed char>(comm, KUPL_SHM_DATATYPE_CHAR);
        reduce_and_exchange<int>(comm, KUPL_SHM_DATATYPE_INT);
        reduce_and_exchange<long>(comm, KUPL_SHM_DATATYPE_LONG);
        reduce_and_exchange<float>(comm, KUPL_SHM_DATATYPE_FLOAT);
        reduce_and_exchange<double>(comm, KUPL_SHM_DATATYPE_DOUBLE);
        CHECK(kupl_shm_comm_destroy(comm) == KUPL_OK);
    }
    CHECK(kupl_shm_info_set(KUPL_SHM_INFO_IS_CONTIG, 0) == KUPL_OK);

    // The former prefix, with its own callback typedefs.
    kpccl_shm_oob_cb_t kcbs = {kpccl_allgather_cb, kpccl_barrier_cb};
    kpccl_shm_comm_h kc;
    CHECK(kpccl_shm_comm_create(nranks, me, getpid(), &kcbs, &world, &kc) == KPCCL_OK);
    CHECK(kpccl_shm_info_set(KPCCL_SHM_INFO_IS_CONTIG, 1) == KPCCL_OK);
    kpccl_shm_win_h kw;
    double *kp;
    CHECK(kpccl_shm_win_alloc(64, kc, reinterpret_cast<void **>(&kp), &kw) == KPCCL_OK);
    CHECK(kpccl_shm_fence(kw) == KPCCL_OK && kpccl_shm_win_free(kw) == KPCCL_OK);
    CHECK(kpccl_shm_info_set(KPCCL_SHM_INFO_IS_CONTIG, 0) == KPCCL_OK);
    CHECK(kpccl_memcpy(nullptr, kp, 1) == KPCCL_ERROR);
    CHECK(kpccl_shm_comm_destroy(kc) == KPCCL_OK);

    kupl_error("suite: a message through kupl_error, rank %d", me);
    kpccl_error("suite: and through kpccl_error");
    MPI_Barrier(world);
    if (me == 0)
        std::printf("kupl suite ok on %d ranks\n", nranks);
    MPI_Finalize();
    return 0;
}
