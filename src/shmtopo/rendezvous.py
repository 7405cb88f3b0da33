"""How the ranks of a job without MPI meet: ``python -m shmtopo run`` and
``shmtopo.spawn`` listen on a Unix-domain socket in a private directory, and
every rank they start connects to it, says its rank, and runs the out-of-band
allgather and barrier of ``Comm.from_callbacks`` through it (the set-up
exchanges only: the data of windows and collectives never passes here).

A rank learns where to connect from its environment (RANK_VARIABLE,
SIZE_VARIABLE, SOCKET_VARIABLE). Ranks are who they say they are: the
launcher gives the server each rank's process id, and a connection joins as a
rank only from that process (its SO_PEERCRED), so a child of a rank (os.fork,
a subprocess) that inherited the environment is refused with
ForkedProcessError instead of taking the rank's place. The server answers an
exchange once every rank has sent its part of it, each part of the same
length (MAX_PART bytes at most), in rank order. A rank whose connection
closed (it exited or died), or that the server cut off for a malformed
message, before an exchange it should take part in makes that exchange fail
on every rank, naming it, so nobody waits for a rank that is gone.

The protocol: every message is a length, then that many bytes. A rank
connects and sends its rank alone (a length field with no bytes after it);
the server answers that greeting (an empty message: joined), then answers
each part the rank sends with the exchange's data. A reply whose length is
negative carries an error of -length bytes instead: a kind byte, then text.
"""
from __future__ import annotations

import errno as _errno
import os
import selectors
import shutil
import socket
import struct
import tempfile
import threading
from collections import deque
from typing import Mapping

from .errors import (ForkedProcessError, PeerDeadError, ShmtopoOSError, ShmtopoTimeoutError,
                     ShmtopoValueError)

RANK_VARIABLE = "SHMTOPO_RANK"
SIZE_VARIABLE = "SHMTOPO_SIZE"
SOCKET_VARIABLE = "SHMTOPO_RENDEZVOUS"

# The most one rank may give one exchange. Set-up data is a few hundred
# bytes per rank; anything near this is a broken or hostile peer.
MAX_PART = 1 << 20
_MAX_ERROR = 1 << 16  # an error reply's bytes, at most
SEND_TIMEOUT = 10.0  # seconds the server waits for a rank to take a reply it does not read

_LENGTH = struct.Struct("<q")
_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
# an error's kind, its first byte
_FAILED = 0
_FAILED_BY_DEPARTURE = 1  # the text begins "rank N ": the rank that left
_NOT_THE_RANK = 2  # the connecting process is not the rank's process


def rank_environment(path: str, rank: int, size: int) -> dict[str, str]:
    """The variables that tell rank ``rank`` of ``size`` where to meet."""
    return {RANK_VARIABLE: str(rank), SIZE_VARIABLE: str(size), SOCKET_VARIABLE: path}


def in_environment(env: Mapping[str, str] = os.environ) -> bool:
    """True in a process started by the launcher (or spawn). An empty
    SOCKET_VARIABLE counts as unset, as every SHMTOPO_* variable's does."""
    return bool(env.get(SOCKET_VARIABLE))


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise ConnectionError("the launcher's rendezvous closed (the launcher is gone)")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _error_reply(kind: int, message: str) -> bytes:
    body = (bytes([kind]) + message.encode())[:_MAX_ERROR]
    return _LENGTH.pack(-len(body)) + body


def _raise_error(body: bytes) -> None:
    """Raise the exception an error reply stands for."""
    kind, message = body[0], body[1:].decode(errors="replace")
    if kind == _FAILED_BY_DEPARTURE:
        words = message.split()
        rank = int(words[1]) if len(words) > 1 and words[1].isdigit() else None
        raise PeerDeadError(message, _errno.EOWNERDEAD, rank)
    if kind == _NOT_THE_RANK:
        raise ForkedProcessError(message, _errno.ESRCH)
    raise ShmtopoValueError(message, _errno.EINVAL)


class Client:
    """One rank's connection: allgather and barrier for Comm.from_callbacks.
    Only the process that made it may use it (a fork child gets
    ForkedProcessError)."""

    def __init__(self, path: str, rank: int, size: int):
        if not 0 <= rank < size:
            raise ShmtopoValueError(f"rank {rank} out of range for a job of {size}", _errno.EINVAL)
        self.rank, self.size, self.pid = rank, size, os.getpid()
        self.lock = threading.Lock()  # one exchange at a time
        self.out_of_step = False
        self.malformed: str | None = None  # a reply that broke the protocol: nothing more can be read
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.sock.connect(path)
            self.sock.sendall(_LENGTH.pack(rank))
        except OSError as exc:
            self.sock.close()
            raise ShmtopoOSError(f"cannot reach the launcher's rendezvous at {path} ({exc.strerror}): "
                                 f"{SOCKET_VARIABLE} names a job that has ended?", exc.errno or 0) from None
        try:
            self._reply()  # joined, or why not
        except BaseException:
            self.sock.close()
            raise

    def _reply(self) -> bytes:
        """The server's next message, checked: its data, or its error raised."""
        (length,) = _LENGTH.unpack(_recv_exact(self.sock, _LENGTH.size))
        if not -_MAX_ERROR <= length <= self.size * MAX_PART:
            self.malformed = f"the launcher's rendezvous sent a malformed reply (length {length})"
            raise ShmtopoValueError(self.malformed, _errno.EPROTO)
        body = _recv_exact(self.sock, abs(length))
        if length < 0:
            _raise_error(body)
        return body

    def exchange(self, data: bytes, timeout: float | None = None) -> bytes:
        """Every rank's ``data`` (all of one length), concatenated in rank
        order; ShmtopoTimeoutError after ``timeout`` seconds (None, 0: none)."""
        if os.getpid() != self.pid:
            raise ForkedProcessError(_not_the_rank(self), _errno.ESRCH)
        if len(data) > MAX_PART:
            raise ShmtopoValueError(f"{len(data)} bytes for one exchange through the launcher's rendezvous: "
                                    f"at most {MAX_PART}", _errno.EINVAL)
        with self.lock:
            if self.malformed:
                raise ShmtopoValueError(self.malformed, _errno.EPROTO)
            if self.out_of_step:
                raise ShmtopoTimeoutError("an earlier exchange with the launcher timed out: this rank is out "
                                          "of step with the job's exchanges", _errno.ETIMEDOUT)
            try:
                self.sock.settimeout(timeout or None)
                self.sock.sendall(_LENGTH.pack(len(data)) + data)
                return self._reply()
            except socket.timeout:
                # the exchange's reply may still come: this connection is
                # out of step from here on, like a comm after a timeout
                self.out_of_step = True
                raise ShmtopoTimeoutError(f"the launcher's rendezvous timed out after {timeout:g} s "
                                          "(a rank did not take part)", _errno.ETIMEDOUT) from None

    def allgather(self, send: memoryview, recv: memoryview, timeout: float | None = None) -> None:
        recv[:] = self.exchange(bytes(send), timeout)

    def barrier(self, timeout: float | None = None) -> None:
        self.exchange(b"", timeout)


def _not_the_rank(client: Client) -> str:
    return (f"this process (pid {os.getpid()}) is a child of rank {client.rank}'s process (pid {client.pid}), "
            f"not that rank: only the process the launcher started can act as rank {client.rank} (a fork "
            "child of a rank cannot join its job, nor use the rank's comms)")


_joined: Client | None = None
_joined_lock = threading.Lock()


def joined(env: Mapping[str, str] = os.environ) -> Client:
    """This process's connection to its launcher, made once (every comm it
    makes from the environment runs its exchanges through it, in order).
    ForkedProcessError in a process that is not the rank the launcher
    started: a fork child of a rank (before or after the rank joined), or a
    subprocess that inherited the rank's environment."""
    global _joined
    with _joined_lock:
        if _joined is not None and _joined.pid != os.getpid():
            raise ForkedProcessError(_not_the_rank(_joined), _errno.ESRCH)
        if _joined is None:
            try:
                rank, size, path = int(env[RANK_VARIABLE]), int(env[SIZE_VARIABLE]), env[SOCKET_VARIABLE]
            except (KeyError, ValueError):
                raise ShmtopoValueError(f"{SOCKET_VARIABLE} is set but {RANK_VARIABLE} or {SIZE_VARIABLE} "
                                        "is missing or not a number", _errno.EINVAL) from None
            _joined = Client(path, rank, size)
        return _joined


def _after_fork_in_child() -> None:
    # another thread may have held the lock at the fork: the child's copy
    # would stay locked; the joined client itself is kept, to say whose it is
    global _joined_lock
    _joined_lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


class _Refused(Exception):
    """A connection that does not join: why (kind, text)."""


class _Broken(Exception):
    """A joined rank broke the protocol: what it sent."""


class Server:
    """The launcher's end, for ``size`` ranks. Listening from construction
    (ranks may connect before :meth:`start`, which a forking caller runs
    only after its forks), served by a thread from start() to close()."""

    def __init__(self, size: int):
        self.size = size
        self.dir = tempfile.mkdtemp(prefix="shmtopo-run-")  # 0700: only this user's processes
        self.path = os.path.join(self.dir, "rendezvous")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.listener.bind(self.path)
            self.listener.listen(size)
            self._wake_r, self._wake_w = socket.socketpair()
        except BaseException:
            self.listener.close()
            shutil.rmtree(self.dir, ignore_errors=True)
            raise
        self._thread: threading.Thread | None = None
        self._sel: selectors.BaseSelector | None = None
        self._pids: Mapping[int, int] | None = None
        # per connection: the pid that made it, its rank (None until it
        # joined) and unread bytes
        self._peer: dict[socket.socket, int] = {}
        self._rank: dict[socket.socket, int | None] = {}
        self._unread: dict[socket.socket, bytearray] = {}
        self._conn: dict[int, socket.socket] = {}
        # per rank, its parts not yet answered, each with its exchange's
        # number (the rank's count of parts sent): one at most, as a rank
        # sends its next part only after the reply to the last
        self._parts: dict[int, deque[tuple[int, bytes]]] = {r: deque() for r in range(size)}
        self._sent = [0] * size
        self._left: dict[int, str] = {}  # rank -> how it left ("left the job ...")
        self._lock = threading.Lock()
        self._ended: list[int] = []
        self._broken: list[tuple[int, str]] = []  # (rank, what it sent), for the launcher

    def start(self, pids: Mapping[int, int] | None = None) -> None:
        """Serve. pids: each rank's process id (the processes the launcher
        started): a connection joins as rank r only from process pids[r].
        None: no check (ranks that are threads of one process, in tests)."""
        self._pids = dict(pids) if pids is not None else None
        self._thread = threading.Thread(target=self._serve, name="shmtopo-rendezvous", daemon=True)
        self._thread.start()

    def rank_ended(self, rank: int) -> None:
        """The launcher saw rank's process end: it takes part in no more
        exchanges (it may have ended before it ever connected)."""
        with self._lock:
            self._ended.append(rank)
        self._wake_w.send(b"e")

    def broken(self) -> list[tuple[int, str]]:
        """The ranks cut off since the last call for breaking the protocol
        (a malformed or hostile message), each with what it sent: the
        launcher fails the job, naming them."""
        with self._lock:
            broken, self._broken = self._broken, []
        return broken

    def close(self) -> None:
        if self._thread is not None:
            self._wake_w.send(b"q")
            self._thread.join()
            self._thread = None
        for sock in [self.listener, self._wake_r, self._wake_w, *self._rank]:
            sock.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the serving thread ------------------------------------------------
    def _serve(self) -> None:
        with selectors.DefaultSelector() as sel:
            self._sel = sel
            sel.register(self.listener, selectors.EVENT_READ)
            sel.register(self._wake_r, selectors.EVENT_READ)
            while True:
                for key, _ in sel.select():
                    sock = key.fileobj
                    if sock is self._wake_r:
                        if b"q" in self._wake_r.recv(4096):
                            return
                        with self._lock:
                            ended, self._ended = self._ended, []
                        for rank in ended:
                            self._left.setdefault(rank, "left the job (it exited or died)")
                        self._progress()
                        continue
                    if sock is self.listener:
                        self._accept()
                        continue
                    assert isinstance(sock, socket.socket)
                    if sock not in self._rank:
                        continue  # closed earlier in this round
                    try:
                        data = sock.recv(1 << 16)
                    except OSError:
                        data = b""
                    if not data:
                        self._departed(sock)
                        continue
                    self._unread[sock] += data
                    try:
                        self._read_messages(sock)
                    except _Refused as refused:
                        kind, text = refused.args
                        self._drop(sock, _error_reply(kind, text))
                    except _Broken as broken:
                        self._cut_off(sock, broken.args[0])

    def _accept(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        try:
            pid = _PEERCRED.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))[0]
        except OSError:
            pid = 0
        # a reply to a rank that does not read it must not stall the others
        conn.settimeout(SEND_TIMEOUT)
        self._peer[conn], self._rank[conn], self._unread[conn] = pid, None, bytearray()
        assert self._sel is not None
        self._sel.register(conn, selectors.EVENT_READ)

    def _read_messages(self, sock: socket.socket) -> None:
        buf = self._unread[sock]
        while len(buf) >= _LENGTH.size:
            (value,) = _LENGTH.unpack_from(buf)
            rank = self._rank[sock]
            if rank is None:  # the greeting: the rank, alone
                del buf[:_LENGTH.size]
                self._join(sock, value)
                continue
            if not 0 <= value <= MAX_PART:
                raise _Broken(f"a message of length {value}, not 0 to {MAX_PART} bytes")
            if self._parts[rank]:
                raise _Broken("a second part before the reply to its last")
            if len(buf) < _LENGTH.size + value:
                return
            part = bytes(buf[_LENGTH.size:_LENGTH.size + value])
            del buf[:_LENGTH.size + value]
            self._sent[rank] += 1
            self._parts[rank].append((self._sent[rank], part))
            self._progress()

    def _join(self, sock: socket.socket, rank: int) -> None:
        """A connection's greeting: it joins as rank, or _Refused says why."""
        pid = self._peer[sock]
        if not 0 <= rank < self.size:
            raise _Refused(_FAILED, f"rank {rank} is not a rank of this job of {self.size}")
        if self._pids is not None and self._pids.get(rank) != pid:
            raise _Refused(_NOT_THE_RANK, f"this process (pid {pid}) is not rank {rank} of the job: the "
                                          f"launcher started rank {rank} as pid {self._pids.get(rank)}, and "
                                          "only that process can join as it (a child of a rank, by os.fork "
                                          "or a subprocess that inherited its environment, cannot)")
        if rank in self._conn or rank in self._left:
            raise _Refused(_FAILED, f"rank {rank} joined the job already (pid {pid} connected a second time)"
                           if rank in self._conn else f"rank {rank} {self._left[rank]} already")
        self._rank[sock], self._conn[rank] = rank, sock
        self._send(sock, _LENGTH.pack(0))

    def _forget(self, sock: socket.socket) -> int | None:
        """Stop serving a connection; its rank, if it had joined."""
        assert self._sel is not None
        self._sel.unregister(sock)
        rank = self._rank.pop(sock, None)
        self._unread.pop(sock, None)
        self._peer.pop(sock, None)
        sock.close()
        return rank

    def _drop(self, sock: socket.socket, reply: bytes) -> None:
        """Refuse a connection that did not join: tell it why, and close."""
        self._send(sock, reply)
        self._forget(sock)

    def _departed(self, sock: socket.socket) -> None:
        rank = self._forget(sock)
        if rank is not None:
            self._left.setdefault(rank, "left the job (it exited or died)")
            self._progress()

    def _cut_off(self, sock: socket.socket, what: str) -> None:
        """A joined rank broke the protocol: close its connection (it is
        gone for every exchange from now on) and report it."""
        rank = self._rank[sock]
        assert rank is not None
        why = f"sent the launcher's rendezvous {what}"
        self._send(sock, _error_reply(_FAILED, f"rank {rank} {why}: its connection was closed"))
        self._forget(sock)
        # what it sent is not to be trusted: its unanswered part goes, and
        # the exchange it was in fails on the others, naming it
        self._sent[rank] -= len(self._parts[rank])
        self._parts[rank].clear()
        self._left.setdefault(rank, f"was cut off from the job (it {why})")
        with self._lock:
            self._broken.append((rank, why))
        self._progress()

    def _progress(self) -> None:
        """Answer every exchange that can be answered now, in order."""
        while True:
            waiting = [r for r in range(self.size) if self._parts[r]]
            if not waiting:
                return
            if len(waiting) == self.size:
                parts = [self._parts[r].popleft()[1] for r in range(self.size)]
                if len({len(p) for p in parts}) > 1:
                    sizes = ", ".join(f"rank {r}: {len(p)}" for r, p in enumerate(parts))
                    self._reply(range(self.size), _error_reply(_FAILED, f"ranks sent parts of different "
                                                                        f"lengths to one exchange ({sizes} "
                                                                        "bytes)"))
                else:
                    self._reply(range(self.size), _LENGTH.pack(sum(map(len, parts))) + b"".join(parts))
                continue
            # The exchange the waiting ranks are in, and who left before it.
            number = self._parts[waiting[0]][0][0]
            missing = sorted(r for r in self._left if self._sent[r] < number)
            if not missing:
                return
            for r in waiting:
                self._parts[r].popleft()
            self._reply(waiting, _error_reply(_FAILED_BY_DEPARTURE, f"rank {missing[0]} {self._left[missing[0]]} "
                                                                    "before an exchange it takes part in"))

    def _send(self, sock: socket.socket, message: bytes) -> bool:
        """False when the peer took nothing for SEND_TIMEOUT seconds (a
        gone peer counts as served: its departure comes next)."""
        try:
            sock.sendall(message)
        except socket.timeout:
            return False
        except OSError:
            pass
        return True

    def _reply(self, ranks: range | list[int], message: bytes) -> None:
        stalled = [self._conn[r] for r in ranks if r in self._conn and r not in self._left
                   and not self._send(self._conn[r], message)]
        for sock in stalled:
            if sock in self._rank:
                self._cut_off(sock, "a part and did not read the reply")


def forget_joined() -> None:
    """In a forked child: the parent's connection is not this process's."""
    global _joined
    _joined = None
