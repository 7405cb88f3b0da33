"""The launcher's rendezvous (rendezvous.py): exchanges in rank order, parts
of different lengths, and ranks that leave. Ranks are threads here, each with
a connection of its own, as processes have."""
import os
import re
import struct
import threading

import pytest

from shmtopo import rendezvous
from shmtopo.errors import ForkedProcessError, PeerDeadError, ShmtopoOSError, ShmtopoTimeoutError, ShmtopoValueError

pytestmark = [pytest.mark.serial, pytest.mark.no_mpi, pytest.mark.unsanitized]


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


def raw_connection(server, greeting_rank=None):
    """A connection of this test's own, writing raw bytes; greeted as
    greeting_rank (and its answer read) when that is given."""
    import socket

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(30)
    sock.connect(server.path)
    if greeting_rank is not None:
        sock.sendall(struct.pack("<q", greeting_rank))
        assert sock.recv(8) == struct.pack("<q", 0)  # joined
    return sock


def read_to_the_end(sock):
    data = b""
    while chunk := sock.recv(1 << 16):
        data += chunk
    return data


@pytest.mark.parametrize("what,sent", [
    ("a message of length -8", struct.pack("<q", -8)),
    (f"a message of length {1 << 40}", struct.pack("<q", 1 << 40)),
    ("a second part before the reply to its last", struct.pack("<q", 1) + b"x" + struct.pack("<q", 1) + b"y"),
])
def test_a_malformed_message_cuts_its_rank_off_and_fails_the_exchange_naming_it(what, sent):
    """Rank 1 (raw bytes from this test) sends a malformed message: its
    connection is closed with an error saying what it sent, rank 0's
    exchange fails naming rank 1, and the launcher is told; the server
    holds no more than a bounded part (before: a negative length made the
    server loop forever, its memory growing; a huge one, or a part ahead of
    its turn, left rank 0 waiting)."""
    with rendezvous.Server(2) as server:
        server.start()
        rank1 = raw_connection(server, greeting_rank=1)
        rank1.sendall(sent)
        reply = read_to_the_end(rank1)
        (length,) = struct.unpack_from("<q", reply)
        assert length < 0 and f"rank 1 sent the launcher's rendezvous {what}".encode() in reply, reply
        rank1.close()
        client = rendezvous.Client(server.path, 0, 2)
        with pytest.raises(PeerDeadError, match=re.escape(f"rank 1 was cut off from the job (it sent the "
                                                          f"launcher's rendezvous {what}")) as info:
            client.exchange(b"a", timeout=30)
        assert info.value.rank == 1
        client.sock.close()
        [(rank, why)] = server.broken()
        assert rank == 1 and why.startswith(f"sent the launcher's rendezvous {what}"), why


@pytest.mark.parametrize("greeting", [-1, 2, 1 << 62])
def test_a_connection_that_names_no_rank_of_the_job_is_refused_and_harms_nothing(greeting):
    with rendezvous.Server(2) as server:
        server.start()
        stranger = raw_connection(server)
        stranger.sendall(struct.pack("<q", greeting))
        reply = read_to_the_end(stranger)
        assert f"rank {greeting} is not a rank of this job of 2".encode() in reply, reply
        stranger.close()
        out = on_every_rank(server, lambda c: c.exchange(bytes([c.rank])))
        assert out == {0: b"\0\1", 1: b"\0\1"}
        assert server.broken() == []


def test_only_the_rank_s_own_process_joins_as_it():
    """The launcher names each rank's process: a connection from any other
    (a child of the rank that inherited its environment) is refused with
    ForkedProcessError, and the rank itself still joins."""
    with rendezvous.Server(2) as server:
        server.start({0: os.getpid(), 1: 1})  # rank 1 is pid 1's, not this process's
        with pytest.raises(ForkedProcessError, match=r"this process \(pid \d+\) is not rank 1 of the job: "
                                                     r"the launcher started rank 1 as pid 1"):
            rendezvous.Client(server.path, 1, 2)
        client = rendezvous.Client(server.path, 0, 2)
        server.rank_ended(1)
        with pytest.raises(PeerDeadError, match="rank 1 left the job"):
            client.exchange(b"x", timeout=30)
        client.sock.close()


def test_a_part_too_large_is_refused_before_it_is_sent():
    with rendezvous.Server(1) as server:
        server.start()
        client = rendezvous.Client(server.path, 0, 1)
        with pytest.raises(ShmtopoValueError, match=f"at most {rendezvous.MAX_PART}"):
            client.exchange(b"x" * (rendezvous.MAX_PART + 1))
        assert client.exchange(b"still in step") == b"still in step"
        client.sock.close()


def test_an_empty_rendezvous_variable_is_unset():
    """As every SHMTOPO_* variable: empty counts as unset."""
    assert not rendezvous.in_environment({rendezvous.SOCKET_VARIABLE: ""})
    assert rendezvous.in_environment({rendezvous.SOCKET_VARIABLE: "/x/rendezvous"})
