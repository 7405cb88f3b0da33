"""shmtopo demo: run with `mpiexec -n 4 python examples/demo.py`, or without
MPI with `python -m shmtopo run -n 4 examples/demo.py`.

1. Every rank writes into rank 0's part of a shared window at its own index;
   after a fence rank 0 sees all the values.
2. Ranks pair up (0-1, 2-3, ...) and swap a message through each other's
   parts, synchronised by a peer fence between the two only.
"""
import sys

import numpy as np

import shmtopo


def say(line):
    # one write per line: print() may write the text and its newline apart,
    # and a launcher forwarding several ranks' output can join them there
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


with shmtopo.Comm.from_env() as comm:   # under mpiexec: Comm.from_mpi(MPI.COMM_WORLD)
    rank, size = comm.rank, comm.size

    # 1. all ranks -> rank 0, then one fence over everybody
    with comm.allocate(shape=(size,), dtype=np.float64) as win:
        board = win.query(0)               # rank 0's part, mapped here too
        board[rank] = 100.0 + rank         # a plain numpy store into shared memory
        win.fence()
        if rank == 0:
            expected = 100.0 + np.arange(size)
            assert np.array_equal(board, expected), board
            say(f"rank 0 sees {board.tolist()} from {size} ranks "
                f"(fence algorithm: {win.fence_algorithm}, backend: {win.backend})")

    # 2. pairwise exchange with peer fences
    with comm.allocate(shape=(2,), dtype=np.int64) as win:
        partner = rank ^ 1
        if partner < size:
            win.query(partner)[:] = (rank, rank * rank)   # write into the partner's part
            win.peer_fence(partner)                        # both sides call it
            got = win.local.tolist()
            assert got == [partner, partner * partner], got
            say(f"rank {rank} got {got} from rank {partner} after a peer fence")
        win.fence()
    if rank == 0:
        say("demo ok")
