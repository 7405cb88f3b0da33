"""How the ranks of a job without MPI meet: ``python -m shmtopo run`` and
``shmtopo.spawn`` listen on a Unix-domain socket in a private directory, and
every rank they start connects to it, says its rank, and runs the out-of-band
allgather and barrier of ``Comm.from_callbacks`` through it (the set-up
exchanges only: the data of windows and collectives never passes here).

A rank learns where to connect from its environment (RANK_VARIABLE,
SIZE_VARIABLE, SOCKET_VARIABLE). The server answers an exchange once every
rank has sent its part of it, each part of the same length, in rank order. A
rank whose connection closed (it exited or died) before an exchange it should
take part in makes that exchange fail on every rank, naming it, so nobody
waits for a rank that is gone.
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

from .errors import PeerDeadError, ShmtopoOSError, ShmtopoTimeoutError, ShmtopoValueError

RANK_VARIABLE = "SHMTOPO_RANK"
SIZE_VARIABLE = "SHMTOPO_SIZE"
SOCKET_VARIABLE = "SHMTOPO_RENDEZVOUS"

# Every message: a length, then that many bytes. A reply whose length is
# negative carries an error text of -length bytes instead of the data.
_LENGTH = struct.Struct("<q")
_FAILED_BY_DEPARTURE = 1  # the error text's first byte: 1 when it names a rank that left


def rank_environment(path: str, rank: int, size: int) -> dict[str, str]:
    """The variables that tell rank ``rank`` of ``size`` where to meet."""
    return {RANK_VARIABLE: str(rank), SIZE_VARIABLE: str(size), SOCKET_VARIABLE: path}


def in_environment(env: Mapping[str, str] = os.environ) -> bool:
    """True in a process started by the launcher (or spawn)."""
    return SOCKET_VARIABLE in env


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise ConnectionError("the launcher's rendezvous closed (the launcher is gone)")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


class Client:
    """One rank's connection: allgather and barrier for Comm.from_callbacks."""

    def __init__(self, path: str, rank: int, size: int):
        if not 0 <= rank < size:
            raise ShmtopoValueError(f"rank {rank} out of range for a job of {size}", _errno.EINVAL)
        self.rank, self.size = rank, size
        self.lock = threading.Lock()  # one exchange at a time
        self.out_of_step = False
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.sock.connect(path)
            self.sock.sendall(_LENGTH.pack(rank))
        except OSError as exc:
            self.sock.close()
            raise ShmtopoOSError(f"cannot reach the launcher's rendezvous at {path} ({exc.strerror}): "
                                 f"{SOCKET_VARIABLE} names a job that has ended?", exc.errno or 0) from None

    def exchange(self, data: bytes, timeout: float | None = None) -> bytes:
        """Every rank's ``data`` (all of one length), concatenated in rank
        order; ShmtopoTimeoutError after ``timeout`` seconds (None, 0: none)."""
        with self.lock:
            if self.out_of_step:
                raise ShmtopoTimeoutError("an earlier exchange with the launcher timed out: this rank is out "
                                          "of step with the job's exchanges", _errno.ETIMEDOUT)
            try:
                self.sock.settimeout(timeout or None)
                self.sock.sendall(_LENGTH.pack(len(data)) + data)
                (length,) = _LENGTH.unpack(_recv_exact(self.sock, _LENGTH.size))
                body = _recv_exact(self.sock, abs(length))
            except socket.timeout:
                # the exchange's reply may still come: this connection is
                # out of step from here on, like a comm after a timeout
                self.out_of_step = True
                raise ShmtopoTimeoutError(f"the launcher's rendezvous timed out after {timeout:g} s "
                                          "(a rank did not take part)", _errno.ETIMEDOUT) from None
        if length >= 0:
            return body
        message = body[1:].decode(errors="replace")
        if body[0] == _FAILED_BY_DEPARTURE:
            rank = int(message.split()[1])
            raise PeerDeadError(message, _errno.EOWNERDEAD, rank)
        raise ShmtopoValueError(message, _errno.EINVAL)

    def allgather(self, send: memoryview, recv: memoryview, timeout: float | None = None) -> None:
        recv[:] = self.exchange(bytes(send), timeout)

    def barrier(self, timeout: float | None = None) -> None:
        self.exchange(b"", timeout)


_joined: Client | None = None
_joined_lock = threading.Lock()


def joined(env: Mapping[str, str] = os.environ) -> Client:
    """This process's connection to its launcher, made once (every comm it
    makes from the environment runs its exchanges through it, in order)."""
    global _joined
    with _joined_lock:
        if _joined is None:
            try:
                rank, size, path = int(env[RANK_VARIABLE]), int(env[SIZE_VARIABLE]), env[SOCKET_VARIABLE]
            except (KeyError, ValueError):
                raise ShmtopoValueError(f"{SOCKET_VARIABLE} is set but {RANK_VARIABLE} or {SIZE_VARIABLE} "
                                        "is missing or not a number", _errno.EINVAL) from None
            _joined = Client(path, rank, size)
        return _joined


class Server:
    """The launcher's end, for ``size`` ranks. Listening from construction
    (ranks may connect before :meth:`start`, which a forking caller runs
    only after its forks), served by a thread from start() to close()."""

    def __init__(self, size: int):
        self.size = size
        self.dir = tempfile.mkdtemp(prefix="shmtopo-run-")  # 0700: only this user's processes
        self.path = os.path.join(self.dir, "rendezvous")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(size)
        self._wake_r, self._wake_w = socket.socketpair()
        self._thread: threading.Thread | None = None
        # per connection: its rank (None until it said so) and unread bytes
        self._rank: dict[socket.socket, int | None] = {}
        self._unread: dict[socket.socket, bytearray] = {}
        self._conn: dict[int, socket.socket] = {}
        # per rank, its parts not yet answered, each with its exchange's
        # number (the rank's count of parts sent)
        self._parts: dict[int, deque[tuple[int, bytes]]] = {r: deque() for r in range(size)}
        self._sent = [0] * size
        self._left: set[int] = set()
        self._lock = threading.Lock()
        self._ended: list[int] = []

    def start(self) -> None:
        self._thread = threading.Thread(target=self._serve, name="shmtopo-rendezvous", daemon=True)
        self._thread.start()

    def rank_ended(self, rank: int) -> None:
        """The launcher saw rank's process end: it takes part in no more
        exchanges (it may have ended before it ever connected)."""
        with self._lock:
            self._ended.append(rank)
        self._wake_w.send(b"e")

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
                        self._left.update(ended)
                        self._progress()
                        continue
                    if sock is self.listener:
                        conn, _ = self.listener.accept()
                        self._rank[conn], self._unread[conn] = None, bytearray()
                        sel.register(conn, selectors.EVENT_READ)
                        continue
                    assert isinstance(sock, socket.socket)
                    try:
                        data = sock.recv(1 << 20)
                    except OSError:
                        data = b""
                    if not data:
                        sel.unregister(sock)
                        self._departed(sock)
                        continue
                    self._unread[sock] += data
                    self._read_messages(sock)

    def _read_messages(self, sock: socket.socket) -> None:
        buf = self._unread[sock]
        while len(buf) >= _LENGTH.size:
            (value,) = _LENGTH.unpack_from(buf)
            rank = self._rank[sock]
            if rank is None:  # the greeting: the rank, alone
                del buf[:_LENGTH.size]
                if not 0 <= value < self.size or value in self._conn:
                    buf.clear()  # not a rank of this job: ignored
                    return
                self._rank[sock], self._conn[value] = value, sock
                continue
            if len(buf) < _LENGTH.size + value:
                return
            part = bytes(buf[_LENGTH.size:_LENGTH.size + value])
            del buf[:_LENGTH.size + value]
            self._sent[rank] += 1
            self._parts[rank].append((self._sent[rank], part))
            self._progress()

    def _departed(self, sock: socket.socket) -> None:
        rank = self._rank.pop(sock, None)
        self._unread.pop(sock, None)
        sock.close()
        if rank is not None:
            self._left.add(rank)
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
                    self._reply(range(self.size), self._error(0, f"ranks sent parts of different lengths "
                                                                 f"to one exchange ({sizes} bytes)"))
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
            self._reply(waiting, self._error(_FAILED_BY_DEPARTURE, f"rank {missing[0]} left the job (it "
                                                                   "exited or died) before an exchange it "
                                                                   "takes part in"))

    @staticmethod
    def _error(kind: int, message: str) -> bytes:
        body = bytes([kind]) + message.encode()
        return _LENGTH.pack(-len(body)) + body

    def _reply(self, ranks: range | list[int], message: bytes) -> None:
        for r in ranks:
            sock = self._conn.get(r)
            if sock is not None and r not in self._left:
                try:
                    sock.sendall(message)
                except OSError:
                    pass  # it is gone; its departure comes next


def forget_joined() -> None:
    """In a forked child: the parent's connection is not this process's."""
    global _joined
    _joined = None
