"""The launcher's rendezvous (rendezvous.py): exchanges in rank order, parts
of different lengths, and ranks that leave. Ranks are threads here, each with
a connection of its own, as processes have."""
import threading

import pytest

from shmtopo import rendezvous
from shmtopo.errors import PeerDeadError, ShmtopoOSError, ShmtopoTimeoutError, ShmtopoValueError

pytestmark = [pytest.mark.serial, pytest.mark.no_mpi]


def on_every_rank(server, body):
    """body(client) on a thread per rank; {rank: result or exception}."""
    out = {}

    def rank_thread(rank):
        client = rendezvous.Client(server.path, rank, server.size)
        try:
            out[rank] = body(client)
        except Exception as exc:  # noqa: BLE001 - the test looks at it
            out[rank] = exc
        finally:
            client.sock.close()

    threads = [threading.Thread(target=rank_thread, args=(r,)) for r in range(server.size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return out


def test_exchanges_come_back_in_rank_order():
    with rendezvous.Server(4) as server:
        server.start()
        out = on_every_rank(server, lambda c: [c.exchange(bytes([c.rank]) * 3) for _ in range(5)]
                            + [c.barrier(), c.exchange(b"")])
    for rank in range(4):
        assert out[rank] == [bytes([0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3])] * 5 + [None, b""]


def test_parts_of_different_lengths_fail_on_every_rank():
    with rendezvous.Server(3) as server:
        server.start()
        out = on_every_rank(server, lambda c: c.exchange(b"x" * (8 if c.rank == 1 else 4)))
    for rank in range(3):
        assert isinstance(out[rank], ShmtopoValueError), out
        assert "rank 0: 4, rank 1: 8, rank 2: 4 bytes" in str(out[rank])


def test_a_rank_that_leaves_fails_the_exchange_it_misses_naming_it():
    """Rank 2 takes part in one exchange and closes; the next fails on the
    others, whether they reach it before or after rank 2 left."""
    with rendezvous.Server(3) as server:
        server.start()

        def body(c):
            c.exchange(b"1")
            if c.rank == 2:
                return "left"
            try:
                c.exchange(b"2")
            except PeerDeadError as exc:
                return exc.rank, str(exc)
            return "no error"

        out = on_every_rank(server, body)
    assert out[2] == "left"
    for rank in (0, 1):
        assert out[rank] == (2, "rank 2 left the job (it exited or died) before an exchange it takes part in")


def test_a_rank_that_ends_before_connecting():
    """The launcher saw rank 1's process end before it ever connected."""
    with rendezvous.Server(2) as server:
        server.start()
        client = rendezvous.Client(server.path, 0, 2)
        server.rank_ended(1)
        with pytest.raises(PeerDeadError, match="rank 1 left the job") as info:
            client.exchange(b"x")
        assert info.value.rank == 1
        client.sock.close()


def test_an_exchange_times_out():
    with rendezvous.Server(2) as server:
        server.start()
        client = rendezvous.Client(server.path, 0, 2)
        with pytest.raises(ShmtopoTimeoutError, match="timed out after 0.2 s"):
            client.exchange(b"x", timeout=0.2)
        # the late reply would answer the next exchange: there is none
        with pytest.raises(ShmtopoTimeoutError, match="out of step"):
            client.exchange(b"y", timeout=0.2)
        client.sock.close()


def test_a_rank_out_of_range_is_refused():
    with rendezvous.Server(2) as server:
        with pytest.raises(ShmtopoValueError, match="rank 2 out of range for a job of 2"):
            rendezvous.Client(server.path, 2, 2)


def test_a_launcher_that_is_gone(tmp_path):
    with pytest.raises(ShmtopoOSError, match="cannot reach the launcher's rendezvous at .*/gone"):
        rendezvous.Client(str(tmp_path / "gone"), 0, 2)
