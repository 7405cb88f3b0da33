"""Jobs on one node without MPI: ``python -m shmtopo run -n N script.py`` and
``shmtopo.spawn(fn, n, *args)``.

Both start N processes, give each its rank and the launcher's rendezvous
(rendezvous.py) in its environment, and watch them: inside, ``Comm.from_env()``
joins the job. When a rank fails (a non-zero exit, an exception, a signal) the
others get GRACE seconds to end by themselves (a rank waiting for the dead
one raises PeerDeadError, naming it), then SIGTERM, then SIGKILL; the
``/dev/shm`` names the job's ranks left are swept. Ctrl-C reaches every rank;
a second one kills them.
"""
from __future__ import annotations

import ctypes
import functools
import multiprocessing
import multiprocessing.connection
import multiprocessing.context
import multiprocessing.popen_fork
import multiprocessing.util
import os
import pickle
import re
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
from multiprocessing.reduction import ForkingPickler
from typing import IO, Any, Callable, Sequence

from . import rendezvous
from ._native import ffi, lib
from .errors import PeerAbortedError, PeerDeadError, ShmtopoError, ShmtopoValueError
from .topology import Topology

BIND_CHOICES = ("none", "core", "numa")
GRACE = 0.5  # seconds the other ranks get after a failure, and again after SIGTERM
WAKE = 0.25  # the longest a wait for ranks lasts without running signal handlers
_PR_SET_PDEATHSIG = 1


def cpu_sets(n: int, bind: str) -> list[set[int]] | None:
    """The CPUs of each of n ranks: a core each, or the NUMA nodes in turn
    (ranks beyond them wrap round); None for no binding. Only CPUs this
    process may use count. ShmtopoValueError for more ranks than cores."""
    if bind not in BIND_CHOICES:
        raise ShmtopoValueError(f"bind must be one of {', '.join(BIND_CHOICES)}, not {bind!r}")
    if bind == "none":
        return None
    allowed = os.sched_getaffinity(0)
    with Topology.load() as topo:
        sets = [set(o.cpuset) & allowed for o in topo.objects("core" if bind == "core" else "numanode")]
    sets = [s for s in sets if s]
    if bind == "core" and n > len(sets):
        raise ShmtopoValueError(f"--bind core: {n} ranks but {len(sets)} core(s) to bind them to "
                                "(use --bind numa or none)")
    return [sets[r % len(sets)] for r in range(n)]


def status_text(code: int) -> str:
    """A process's end as Popen's returncode (negative: the signal) says it."""
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


def exit_status(code: int) -> int:
    """The shell's form of a returncode: 128 + the signal for a signal."""
    return 128 - code if code < 0 else code


def sweep() -> None:
    """Remove the /dev/shm names (and topology files) of processes that are
    gone: what a killed rank created and nobody unlinked."""
    cfg = ffi.new("shmtopo_config_t *")
    topo_dir = cfg.topo_dir if lib.shmtopo_config_read(cfg) == 0 else ffi.NULL
    lib.shmtopo_sweep_stale_files(topo_dir)


def _watch_ranks(live: dict[int, Any], wait_some: Callable[[float | None], None], ended: Callable[[], bool]) -> None:
    """Wait for the ranks in live (rank -> process, with a pid), forwarding
    signals, until none is left or ended() says the job is over; then end
    those left: GRACE seconds to end by themselves, then SIGTERM, then
    SIGKILL. wait_some(timeout) waits up to timeout seconds (None: until one
    does) for ranks to end, and removes those that did from live."""
    def gone(timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while live and time.monotonic() < deadline:
            wait_some(max(0.0, deadline - time.monotonic()))
        return not live

    with _Signals(lambda: [p.pid for p in live.values()]):
        while live and not ended():
            # not None: Python runs a signal's handler in the main thread only,
            # and one that the kernel gave a helper thread (a reader, the
            # rendezvous) interrupts no wait here; waking now and then runs it
            wait_some(WAKE)
        for sig in (None, signal.SIGTERM, signal.SIGKILL):
            if not live:
                return
            for proc in live.values():
                if sig is not None:
                    _signal(proc.pid, sig)
            gone(GRACE if sig != signal.SIGKILL else 10.0)


def _signal(pid: int, sig: int) -> None:
    """Signal a rank and whatever it started (each rank leads its group)."""
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


class _Signals:
    """While a job runs: SIGINT, SIGTERM and SIGHUP go on to every rank; a
    second one of them kills the ranks."""

    def __init__(self, pids: Callable[[], Sequence[int]]):
        self.pids, self.count = pids, 0
        self.previous: dict[int, Any] = {}

    def __enter__(self) -> "_Signals":
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                self.previous[sig] = signal.signal(sig, self.forward)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)

    def forward(self, sig: int, frame: Any) -> None:
        self.count += 1
        for pid in self.pids():
            _signal(pid, sig if self.count == 1 else signal.SIGKILL)


def become_rank(launcher: int, cpus: set[int] | None) -> None:
    """What a rank's process does first: lead a process group of its own (the
    launcher forwards signals to it, and only once), die with its parent,
    the launcher (pid launcher; or multiprocessing's forkserver, which ends
    with the launcher: launcher 0), take its CPUs; and raise
    KeyboardInterrupt at the SIGINT forwarded to it, even where the launcher
    was started with SIGINT ignored (a background job of a shell without job
    control), which a child inherits and a Python then keeps: such ranks
    never end."""
    os.setpgid(0, 0)
    # a handler, not SIG_IGN: exec resets it to SIG_DFL, and the rank's
    # Python installs its own; a forked rank (spawn) keeps it as it is
    signal.signal(signal.SIGINT, signal.default_int_handler)
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if launcher and os.getppid() != launcher:  # it died before the line above
        os._exit(1)
    if cpus:
        os.sched_setaffinity(0, cpus)


# ---- python -m shmtopo run -------------------------------------------------------

FLUSH_DELAY = 0.05  # seconds a partial line waits for its end before it is passed on anyway
FORWARD_CHUNK = 1 << 16  # bytes read at once; also the most of a partial line held back


def _tagged(prefix: bytes, data: bytes, state: str) -> tuple[bytes, str]:
    """data with prefix at the start of each line (and after a lone \r,
    where a progress bar starts over); state: "line" at a line's start, "cr"
    after a \r, "" inside a line. The text and the state after it."""
    out = bytearray()
    for piece in re.split(rb"(\r|\n)", data):
        if not piece:
            continue
        if piece == b"\n":
            out += (prefix if state == "line" else b"") + piece
            state = "line"
        elif piece == b"\r":
            out += (prefix if state == "line" else b"") + piece
            state = "cr"
        else:
            out += (prefix if state else b"") + piece
            state = ""
    return bytes(out), state


def _forward(prefix: bytes, source: IO[bytes], sink: IO[bytes], lock: threading.Lock) -> None:
    """A rank's output, as it comes: whole lines at once (what arrives
    together is written together, so whole lines of different ranks never
    mix: an unbuffered Python writes a print's text and its newline apart);
    the text up to a \r (a progress bar) at once; a partial line after
    FLUSH_DELAY, or once FORWARD_CHUNK bytes of it are held."""
    fd = source.fileno()
    pending, since, state = b"", 0.0, "line"

    def emit(data: bytes) -> None:
        nonlocal state
        if prefix:
            data, state = _tagged(prefix, data, state)
        with lock:
            sink.write(data)
            sink.flush()

    try:
        while True:
            if pending and not select.select([fd], [], [], max(0.0, since + FLUSH_DELAY - time.monotonic()))[0]:
                emit(pending)
                pending = b""
                continue
            chunk = os.read(fd, FORWARD_CHUNK)
            if not chunk:
                break
            if not pending:
                since = time.monotonic()
            pending += chunk
            cut = max(pending.rfind(b"\n"), pending.rfind(b"\r")) + 1
            if len(pending) - cut >= FORWARD_CHUNK:
                cut = len(pending)
            if cut:
                emit(pending[:cut])
                pending, since = pending[cut:], time.monotonic()
        if pending:
            emit(pending)
    finally:
        source.close()


def run(n: int, command: list[str], bind: str = "none", tag_output: bool = False,
        keep_going: bool = False) -> int:
    """Run ``command`` (a Python program: ``[script, args...]`` or ``["-m",
    module, args...]``) as ranks 0..n-1 and return the job's exit status:
    0, or the status of the first rank that failed. keep_going: a failed
    rank does not end the others (they may shrink their comm)."""
    cpus = cpu_sets(n, bind)
    server = rendezvous.Server(n)
    procs: dict[int, subprocess.Popen[bytes]] = {}
    readers: list[threading.Thread] = []
    try:
        # every fork before any thread (the rendezvous, the readers) starts
        for rank in range(n):
            env = dict(os.environ, **rendezvous.rank_environment(server.path, rank, n))
            stdin = None if rank == 0 and not sys.stdin.isatty() else subprocess.DEVNULL
            procs[rank] = subprocess.Popen([sys.executable, *command], env=env, stdin=stdin,
                                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                           preexec_fn=functools.partial(become_rank, os.getpid(),
                                                                        cpus[rank] if cpus else None))
        lock = threading.Lock()
        for rank, proc in procs.items():
            prefix = f"[{rank}] ".encode() if tag_output else b""
            for source, sink in ((proc.stdout, sys.stdout.buffer), (proc.stderr, sys.stderr.buffer)):
                assert source is not None
                readers.append(threading.Thread(target=_forward, args=(prefix, source, sink, lock), daemon=True))
                readers[-1].start()
        server.start({rank: proc.pid for rank, proc in procs.items()})
        return _watch_run(procs, server, keep_going)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                _signal(proc.pid, signal.SIGKILL)
                proc.wait()
        for reader in readers:
            reader.join()
        server.close()
        sweep()


# the job's status when a rank broke the rendezvous protocol (its own may be 0)
BROKEN_RENDEZVOUS_STATUS = 1


def _watch_run(procs: dict[int, subprocess.Popen[bytes]], server: rendezvous.Server, keep_going: bool) -> int:
    """run's ranks until the job is over: its exit status."""
    fds = {os.pidfd_open(p.pid): rank for rank, p in procs.items()}
    live = dict(procs)
    failure: tuple[int, int] | None = None

    def failed(rank: int, code: int, what: str) -> None:
        nonlocal failure
        if failure is None:
            failure = (rank, code)
            print(f"shmtopo run: rank {rank} (pid {procs[rank].pid}) {what}"
                  + ("" if keep_going else "; ending the job"), file=sys.stderr, flush=True)

    def reap(timeout: float | None) -> None:
        ready, _, _ = select.select(list(fds), [], [], timeout)
        # first: the rendezvous records a rank it cut off before it tells
        # the others, who may then end of that, and be seen here
        for rank, what in server.broken():
            failed(rank, BROKEN_RENDEZVOUS_STATUS, f"{what}: the rendezvous cut it off")
        for fd in ready:
            rank = fds.pop(fd)
            os.close(fd)
            code = live.pop(rank).wait()
            server.rank_ended(rank)
            if code != 0:
                failed(rank, code, status_text(code))

    _watch_ranks(live, reap, lambda: failure is not None and not keep_going)
    for fd in fds:
        os.close(fd)
    return 0 if failure is None else exit_status(failure[1])


# ---- shmtopo.spawn ---------------------------------------------------------------

def _spawned(fn: Callable[..., Any], args: tuple[Any, ...], env: dict[str, str], launcher: int,
             cpus: set[int] | None, results: multiprocessing.connection.Connection) -> None:
    become_rank(launcher, cpus)
    os.environ.update(env)
    rendezvous.forget_joined()  # a forked child must not use its parent's connection
    try:
        kind, value, text = "ok", fn(*args), ""
    except BaseException as exc:  # noqa: BLE001 - handed to the parent, which raises it
        kind, value, text = "error", exc, traceback.format_exc()
    try:
        payload = bytes(ForkingPickler.dumps(value))
    except Exception as exc:  # noqa: BLE001 - a result or exception that does not pickle
        what = "result" if kind == "ok" else f"exception ({_safe_repr(value)})"
        kind, payload = "error", bytes(ForkingPickler.dumps(RuntimeError(
            f"the rank's {what} could not be sent to the parent: {exc!r}")))
    # the outcome itself is plain (str, bytes): it always loads in the
    # parent, which then learns the rank's traceback even when the value
    # will not unpickle there
    results.send_bytes(pickle.dumps((kind, payload, text)))
    results.close()
    if kind == "error":
        sys.exit(1)


class _ForkPopen(multiprocessing.popen_fork.Popen):
    """multiprocessing's fork start, which closes its two pipes when the
    fork fails (RLIMIT_NPROC, ENOMEM): CPython's own leaves them open."""

    def _launch(self, process_obj: Any) -> None:
        parent_r, child_w = os.pipe()
        child_r, parent_w = os.pipe()
        try:
            self.pid = os.fork()
        except BaseException:
            for fd in (parent_r, child_w, child_r, parent_w):
                os.close(fd)
            raise
        if self.pid == 0:
            code = 1
            try:
                os.close(parent_r)
                os.close(parent_w)
                code = process_obj._bootstrap(parent_sentinel=child_r)
            finally:
                os._exit(code)
        os.close(child_w)
        os.close(child_r)
        self.finalizer = multiprocessing.util.Finalize(self, _close_fds, (parent_r, parent_w))
        self.sentinel = parent_r


def _close_fds(*fds: int) -> None:
    for fd in fds:
        os.close(fd)


class _ForkRank(multiprocessing.context.ForkProcess):
    @staticmethod
    def _Popen(process_obj: Any) -> Any:
        return _ForkPopen(process_obj)


def _safe_repr(value: object) -> str:
    try:
        return repr(value)
    except Exception:  # noqa: BLE001 - a repr that raises
        return f"a {type(value).__name__}"


def _outcome(rank: int, raw: bytes) -> tuple[str, Any, str]:
    """A rank's outcome from what its pipe brought: ("ok", result, "") or
    ("error", exception, the rank's traceback text)."""
    kind, payload, text = pickle.loads(raw)
    try:
        return kind, pickle.loads(payload), text
    except Exception as exc:  # noqa: BLE001 - told to the caller, naming the rank
        what = "result" if kind == "ok" else "exception"
        error = ShmtopoError(f"rank {rank}'s {what} could not be unpickled here: {exc!r}"
                             + (" (the rank's traceback is in the note below)" if text else ""), rank=rank)
        error.__cause__ = exc
        return "error", error, text


def _cause(errors: dict[int, tuple[BaseException, str]]) -> int:
    """The rank whose failure the others' stem from: from the first to fail,
    follow the ranks their PeerDeadError or PeerAbortedError names, while
    those failed with an exception of their own (a rank raising on its own
    abandons its windows, and a peer waiting there may report that first)."""
    rank = next(iter(errors))
    seen = {rank}
    while True:
        exc = errors[rank][0]
        named = getattr(exc, "rank", None)
        if not isinstance(exc, (PeerDeadError, PeerAbortedError)) or named not in errors or named in seen:
            return rank
        rank = named
        seen.add(rank)


def spawn(fn: Callable[..., Any], n: int, *args: Any, bind: str = "none",
          start_method: str | None = None) -> list[Any]:
    """Run ``fn(*args)`` in ``n`` new processes, ranks 0..n-1 of one job
    (inside, ``shmtopo.Comm.from_env()`` joins it), and return their results
    in rank order.

    The first rank to fail raises its exception here, with the rank's
    traceback as a note (a peer's PeerAbortedError or PeerDeadError gives way
    to the exception of the rank it names); a rank that dies raises
    PeerDeadError naming it. The other ranks are then ended (each gets GRACE
    seconds first) and nothing is left in /dev/shm.

    start_method: multiprocessing's ("fork" runs functions defined in a
    notebook; "spawn" and "forkserver" need fn importable); bind: as
    ``python -m shmtopo run --bind``."""
    if not isinstance(n, int) or n < 1:
        raise ShmtopoValueError(f"spawn needs n >= 1 processes, not {n!r}")
    if not callable(fn):
        raise ShmtopoValueError(f"spawn needs a callable, not {fn!r}")
    cpus = cpu_sets(n, bind)
    ctx: Any = multiprocessing.get_context(start_method)
    server = rendezvous.Server(n)
    procs: dict[int, Any] = {}  # the processes started
    pipes: dict[int, multiprocessing.connection.Connection] = {}
    results: dict[int, Any] = {}
    errors: dict[int, tuple[BaseException, str]] = {}  # in the order they came
    # a rank's parent: this process, or the forkserver (which ends with it)
    launcher = 0 if ctx.get_start_method() == "forkserver" else os.getpid()
    try:
        for rank in range(n):
            receiver, sender = ctx.Pipe(duplex=False)
            process = _ForkRank if ctx.get_start_method() == "fork" else ctx.Process
            proc = process(target=_spawned, args=(fn, args, rendezvous.rank_environment(server.path, rank, n),
                                                  launcher, cpus[rank] if cpus else None, sender),
                           name=f"shmtopo-rank-{rank}")
            try:
                proc.start()
            except BaseException as exc:
                receiver.close()
                if proc.pid is not None:  # started, then failed: ended below like the others
                    procs[rank] = proc
                if hasattr(exc, "add_note"):
                    exc.add_note(f"shmtopo.spawn could not start rank {rank} of {n} "
                                 f"(start method {ctx.get_start_method()!r})")
                raise
            finally:
                sender.close()
            procs[rank], pipes[rank] = proc, receiver
        server.start({rank: proc.pid for rank, proc in procs.items()})
        live = dict(procs)

        def collect(timeout: float | None) -> None:
            """Outcomes from the pipes, ends from the sentinels: a rank that
            sent its outcome stays in live until its process ends (or is
            ended), and nothing here waits for that."""
            waiting: dict[Any, int] = {pipes[r]: r for r in live if r in pipes}
            waiting.update({procs[r].sentinel: r for r in live})
            for ready in multiprocessing.connection.wait(list(waiting), timeout):
                rank, ended = waiting[ready], isinstance(ready, int)  # a sentinel: the process ended
                if rank in pipes and (not ended or pipes[rank].poll()):
                    pipe = pipes.pop(rank)
                    try:
                        kind, value, text = _outcome(rank, pipe.recv_bytes())
                    except (EOFError, OSError):
                        kind = ""  # it died before (or while) sending one
                    pipe.close()
                    if kind == "ok":
                        results[rank] = value
                    elif kind:
                        errors.setdefault(rank, (value, text))
                if ended and rank in live:
                    live.pop(rank).join()
                    server.rank_ended(rank)
                    if rank not in results and rank not in errors:
                        errors[rank] = (PeerDeadError(f"rank {rank} (pid {procs[rank].pid}) "
                                                      f"{status_text(procs[rank].exitcode)} without a result",
                                                      rank=rank), "")
            for rank, what in server.broken():
                errors.setdefault(rank, (ShmtopoError(f"rank {rank} (pid {procs[rank].pid}) {what}: the "
                                                      "rendezvous cut it off", rank=rank), ""))

        # the job is over at the first failure, or once every rank has
        # returned: then ranks still running (a thread that will not end)
        # get GRACE seconds to end, as under run
        _watch_ranks(live, collect, lambda: bool(errors) or len(results) == n)
    finally:
        for proc in procs.values():
            if proc.is_alive():
                _signal(proc.pid, signal.SIGKILL)
            proc.join()
        for pipe in pipes.values():
            pipe.close()
        server.close()
        sweep()
    if errors:
        rank = _cause(errors)
        error, text = errors[rank]
        if text and hasattr(error, "add_note"):
            error.add_note(f"raised on rank {rank} of {n}:\n{text.rstrip()}")
        raise error
    return [results[r] for r in range(n)]
