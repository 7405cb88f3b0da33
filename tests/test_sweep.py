"""The sweep of abandoned names (native/segment.c): it removes only what it
can prove abandoned.

Processes in other PID namespaces (containers sharing /dev/shm, nodes sharing
a topology directory), other users' files and segments, and System V
segments still attached must survive a sweep; a topology file's name cannot
be taken in advance by another user; and a file of this user and namespace
whose creator was killed is still removed.

A holder (this file run as a script) makes a comm or shares the topology the
normal way and is stalled while it holds a name: a posix segment's name is
held inside the comm's out-of-band allgather (the channel's segment exists,
its name not yet unlinked), a topology file by a SIGSTOP its keeper sends
when the file appears (inotify). The keeper runs as pid 1 of a new PID
namespace (unshare) and gives the holder a pid that no process of this
namespace has, so a sweep judging by pid alone would take it for dead.
Every sweep here is a comm creation in a process of its own.

Each test runs in a box of its own where it can (root): a mount and IPC
namespace with a private /dev/shm, entered with nsenter by every process the
test starts, so that no other shmtopo on the machine (an older one sweeping
by pid alone, say) removes what the test holds, and nothing is left behind.
"""
from __future__ import annotations

import ctypes
import os
import pwd
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.serial, pytest.mark.no_mpi]

HERE = Path(__file__).resolve()
OTHER_USER = "shmtopo"       # an unprivileged user of the test machines (uid 1001)
SYSV_TAG = 0x40000000        # segment.c's key: tag | creator pid << 8 | try
IN_CREATE = 0x100
IPC_CREAT, IPC_EXCL = 0o1000, 0o2000
LINE_TIMEOUT = 120.0         # generous: the machine is small and busy

SWEEP = """
import shmtopo
c = shmtopo.Comm.from_callbacks(1, 0, allgather=lambda s, r: r.__setitem__(slice(None), s),
                                barrier=lambda: None)
c.free()
"""


def base_env(topo_dir=None) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMPI_", "PMIX_", "PMI_", "HYDRA_", "SHMTOPO_"))}
    env["MPI4PY_RC_INITIALIZE"] = "0"
    env["SHMTOPO_SHM_TYPE"] = "posix"
    if topo_dir:
        env["SHMTOPO_TOPO_DIR"] = str(topo_dir)
    return env


class Box:
    """Where a test's processes run: with root, a mount and IPC namespace
    with a private /dev/shm (see the module docstring); else this one."""

    def __init__(self):
        self.proc = None
        self.prefix: list[str] = []
        if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("nsenter"):
            return
        self.proc = subprocess.Popen(
            ["unshare", "--mount", "--ipc", "--propagation", "private", "sh", "-c",
             "mount -t tmpfs -o size=256m,mode=1777 shmtopo-test /dev/shm && echo ready && exec sleep 100000"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if self.proc.stdout.readline().strip() != "ready":
            self.proc.kill()
            self.proc.wait()
            self.proc = None
            return
        self.prefix = ["nsenter", "-t", str(self.proc.pid), "-m", "-i", "--"]

    def cmd(self, args) -> list[str]:
        return self.prefix + [str(a) for a in args]

    def path(self, path) -> Path:
        """A path of the box's mount namespace, as this process reaches it."""
        return Path(f"/proc/{self.proc.pid}/root{path}") if self.proc else Path(path)

    def run(self, args, **kwargs) -> subprocess.CompletedProcess:
        return subprocess.run(self.cmd(args), capture_output=True, text=True, timeout=300, **kwargs)

    def close(self) -> None:
        if self.proc:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def box():
    b = Box()
    yield b
    b.close()


def sweep(box: Box, topo_dir=None) -> None:
    """A comm creation in a process of this PID namespace: it sweeps."""
    proc = box.run([sys.executable, "-c", SWEEP], env=base_env(topo_dir))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def require_root_and_unshare() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (a new PID namespace, another user's files)")
    if shutil.which("unshare") is None:
        pytest.skip("unshare(1) is not installed")
    probe = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True,
                           text=True, timeout=60)
    if probe.returncode != 0:
        pytest.skip(f"cannot make a PID namespace here (unshare --pid): {probe.stderr.strip()}")


def require_other_user() -> int:
    if os.geteuid() != 0:
        pytest.skip("needs root to act as another user")
    try:
        return pwd.getpwnam(OTHER_USER).pw_uid
    except KeyError:
        pytest.skip(f"no user {OTHER_USER!r} on this machine")


def free_pid() -> int:
    """A pid no process of this namespace has now (high, so none gets it soon)."""
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    for pid in range(min(pid_max, 1 << 22) - 1000, 1000, -97):
        if not os.path.exists(f"/proc/{pid}"):
            return pid
    pytest.skip("no free pid found")


class Keeper:
    """The keeper process (see the module's docstring) and its holder.
    namespace: run the keeper as pid 1 of a new PID namespace, the holder
    at a pid free here; else both run in this namespace."""

    def __init__(self, box: Box, mode: str, topo_dir=None, namespace: bool = True):
        self.box, self.topo_dir = box, topo_dir
        pid = free_pid() if namespace else 0
        cmd = [sys.executable, str(HERE), "keeper", mode, str(pid), str(topo_dir or "/dev/shm")]
        if namespace:
            cmd = ["unshare", "--pid", "--fork", "--mount-proc"] + cmd
        # a session of its own: a failed test ends the keeper's whole group
        self.proc = subprocess.Popen(box.cmd(cmd), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, env=base_env(topo_dir), start_new_session=True)
        self.wanted_pid = pid
        self.lines: list[str] = []
        self.pending = b""

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()

    def line(self, start: str) -> str:
        """The next line of the keeper's or holder's output starting with
        `start` (read unbuffered: select sees only what no buffer took)."""
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + LINE_TIMEOUT
        while time.monotonic() < deadline:
            while b"\n" in self.pending:
                text, self.pending = self.pending.split(b"\n", 1)
                text = text.decode()
                self.lines.append(text)
                if text.startswith(start):
                    return text[len(start):].strip()
            if not select.select([fd], [], [], 1.0)[0]:
                continue
            data = os.read(fd, 65536)
            if not data:
                break
            self.pending += data
        self.kill()
        raise AssertionError(f"no {start!r} line; output:\n" + "\n".join(self.lines)
                             + self.pending.decode(errors="replace"))

    def send(self, command: str) -> None:
        self.proc.stdin.write(command.encode() + b"\n")
        self.proc.stdin.flush()

    def finish(self) -> str:
        """Waits for the keeper's end; all it said."""
        try:
            out, _ = self.proc.communicate(timeout=LINE_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.kill()
            out, _ = self.proc.communicate()
        return "\n".join(self.lines) + "\n" + (self.pending + out).decode(errors="replace")

    def holder_pid(self) -> int:
        """The holder's pid as it reported it; in a new namespace it must be
        one that no process here has, which is what the test relies on."""
        pid = int(self.line("pid"))
        if self.wanted_pid:
            assert pid == self.wanted_pid, f"holder got pid {pid}, not {self.wanted_pid}"
            assert not os.path.exists(f"/proc/{pid}"), f"pid {pid} is also in use in this namespace"
        return pid


def held_path(keeper: Keeper, mode: str, name: str) -> Path:
    return keeper.box.path(Path("/dev/shm" if mode == "posix" else (keeper.topo_dir or "/dev/shm")) / name)


def hold(box: Box, mode: str, topo_dir, namespace: bool):
    keeper = Keeper(box, mode, topo_dir, namespace)
    keeper.holder_pid()
    name = keeper.line("held")
    path = held_path(keeper, mode, name)
    assert path.exists(), keeper.lines
    return keeper, path


#: (what is held, where): posix segments live in /dev/shm only
CASES = [("posix", "dev_shm"), ("topo", "dev_shm"), ("topo", "topo_dir")]


@pytest.fixture
def shared_dir():
    """A topology directory shared by all (sticky, like /dev/shm and /tmp)."""
    d = Path(tempfile.mkdtemp(prefix="shmtopo-shared-"))
    d.chmod(0o1777)
    yield d
    left = [p.name for p in d.iterdir()]
    shutil.rmtree(d, ignore_errors=True)
    assert not left, f"left in the shared topology directory: {left}"


@pytest.mark.parametrize("mode, where", CASES)
def test_other_pid_namespace_keeps_its_names(mode, where, shared_dir, box):
    """A holder in another PID namespace (sharing /dev/shm or a topology
    directory, as containers and the nodes of a shared file system do)
    holds a name; a sweep in this namespace must leave it alone, and the
    holder then finishes normally."""
    require_root_and_unshare()
    topo_dir = shared_dir if where == "topo_dir" else None
    keeper, path = hold(box, mode, topo_dir, namespace=True)
    try:
        sweep(box, topo_dir)
        survived = path.exists()
        keeper.send("cont")
        done = keeper.line("done")
        out = keeper.finish()
        assert survived, f"a sweep in another PID namespace removed {path} while its creator ran"
        assert keeper.proc.returncode == 0, out
        if mode == "topo":
            assert done == "shmem", out
        assert not path.exists(), out
    finally:
        if keeper.proc.poll() is None:
            keeper.kill()
        path.unlink(missing_ok=True)


@pytest.mark.parametrize("mode, where", CASES)
def test_abandoned_names_of_this_namespace_are_swept(mode, where, shared_dir, box):
    """The creator is killed (SIGKILL) while it holds a name: a sweep in its
    namespace, by its user, removes the name."""
    topo_dir = shared_dir if where == "topo_dir" else None
    keeper, path = hold(box, mode, topo_dir, namespace=False)
    try:
        keeper.send("kill")
        keeper.line("killed")
        keeper.finish()
        sweep(box, topo_dir)
        assert not path.exists(), f"the sweep left {path}, whose creator was killed"
    finally:
        if keeper.proc.poll() is None:
            keeper.kill()
        path.unlink(missing_ok=True)


# ---- another user's files at the names of the next topology files -----------

def hwloc_version() -> str:
    from shmtopo._native import ffi, lib
    return ffi.string(lib.shmtopo_hwloc_version()).decode()


@pytest.mark.parametrize("where", ["dev_shm", "topo_dir"])
def test_other_users_files_cannot_take_the_topology_files_names(where, shared_dir, box):
    """Another user places symlinks and files at the names the next topology
    files of a process would get under a name made of its pid and a counter;
    the process still shares its topology through shmem, and nothing is
    written through the symlinks."""
    uid = require_other_user()
    topo_dir = shared_dir if where == "topo_dir" else None
    directory = Path(topo_dir or "/dev/shm")
    victim_dir = Path(tempfile.mkdtemp(prefix="shmtopo-victim-"))
    os.chown(victim_dir, uid, -1)
    env = base_env(topo_dir)
    env["SHMTOPO_TOPO_SOURCE"] = "shmem"
    proc = subprocess.Popen(box.cmd([sys.executable, HERE, "once"]), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    placed: list[Path] = []
    try:
        pid = int(proc.stdout.readline().split()[1])
        version = hwloc_version()
        script = []
        for n in range(16):
            name = directory / f"shmtopo-topo.{pid}.{n}.hwloc-{version}"
            placed.append(name)
            if n % 2:
                script.append(f"touch '{name}'")
            else:
                script.append(f"ln -s '{victim_dir}/target{n}' '{name}'")
        placing = box.run(["runuser", "-u", OTHER_USER, "--", "sh", "-ec", "; ".join(script)])
        assert placing.returncode == 0, placing.stderr
        placed = [box.path(p) for p in placed]
        before = {p.name: os.lstat(p) for p in placed}
        out, err = proc.communicate("go\n", timeout=300)
        assert proc.returncode == 0, out + err
        assert "shared shmem" in out, out + err
        assert list(victim_dir.iterdir()) == [], "something was written through another user's symlink"
        for p in placed:  # untouched
            st = os.lstat(p)
            assert (st.st_ino, st.st_uid, st.st_size) == (before[p.name].st_ino, uid, before[p.name].st_size)
    finally:
        if proc.poll() is None:
            proc.kill()
        for p in placed:
            p.unlink(missing_ok=True)
        shutil.rmtree(victim_dir, ignore_errors=True)


# ---- System V segments --------------------------------------------------------

SYSV_CREATOR = """
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
key = {tag} | (os.getpid() & 0x3fffff) << 8 | 0xfe
shmid = libc.shmget(key, 4096, {flags})
if shmid < 0:
    sys.exit("shmget: " + os.strerror(ctypes.get_errno()))
attach = sys.argv[1] == "attached"
if attach and libc.shmat(shmid, None, 0) in (None, ctypes.c_void_p(-1).value):
    sys.exit("shmat: " + os.strerror(ctypes.get_errno()))
keeper = os.fork() if attach else 1
if keeper == 0:  # holds the attachment after its creator is gone
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    time.sleep(600)
    os._exit(0)
print(shmid, key, keeper if attach else 0, flush=True)
os._exit(0)
""".format(tag=SYSV_TAG, flags=IPC_CREAT | IPC_EXCL | 0o600)


def sysv_table(box: Box) -> dict[int, dict[str, int]]:
    """The box's /proc/sysvipc/shm by shmid, its columns by the header's names."""
    lines = box.run(["cat", "/proc/sysvipc/shm"]).stdout.splitlines()
    head = lines[0].split()
    return {int(row["shmid"]): row for row in
            ({k: int(v) for k, v in zip(head, line.split()) if v.lstrip("-").isdigit()} for line in lines[1:])}


def remove_sysv(box: Box, shmid: int) -> None:
    box.run(["ipcrm", "-m", shmid])


SYSV_CASES = {
    # the creator exited, a process it forked still has the segment attached
    "attached": ([], "attached"),
    # another user's segment, creator gone, nothing attached: root must not remove it
    "other_user": (["runuser", "-u", OTHER_USER, "--"], "detached"),
}


@pytest.mark.parametrize("case", SYSV_CASES)
def test_sysv_segment_that_is_not_abandoned_survives(case, box):
    """A segment keyed like shmtopo's whose creator is gone survives a root
    sweep while a process has it attached (nattch 1), or when another user
    owns it."""
    prefix, how = SYSV_CASES[case]
    if os.geteuid() != 0:
        pytest.skip("needs root (the sweeper must be able to remove any segment)")
    if prefix:
        require_other_user()
    # the other user runs the system's Python (this one may lie where it cannot read)
    python = sys.executable if not prefix else "/usr/bin/python3"
    if not os.access(python, os.X_OK):
        pytest.skip(f"{python} is needed to act as another user")
    proc = box.run(prefix + [python, "-c", SYSV_CREATOR, how])
    assert proc.returncode == 0, proc.stderr
    shmid, key, holder = map(int, proc.stdout.split())
    try:
        row = sysv_table(box)[shmid]
        assert row["key"] == key and row["nattch"] == (1 if how == "attached" else 0), row
        assert not os.path.exists(f"/proc/{row['cpid']}"), "the creator still runs"
        sweep(box)
        row = sysv_table(box).get(shmid)
        assert row is not None and row["key"] == key, \
            f"the sweep removed segment {shmid} ({case}): {row}"
    finally:
        if holder:
            os.kill(holder, signal.SIGKILL)
        remove_sysv(box, shmid)


def test_abandoned_sysv_segment_is_swept(box):
    """This user's segment keyed by a creator that is gone, attached by
    nobody: the sweep removes it."""
    proc = box.run([sys.executable, "-c", SYSV_CREATOR, "detached"])
    assert proc.returncode == 0, proc.stderr
    shmid = int(proc.stdout.split()[0])
    try:
        assert shmid in sysv_table(box)
        sweep(box)
        assert shmid not in sysv_table(box), "the sweep left an abandoned segment"
    finally:
        remove_sysv(box, shmid)


# ---- the keeper and the holder (this file run as a script) --------------------

def _say(*words) -> None:
    print(*words, flush=True)


def _holder(mode: str) -> None:
    """Holds a name (see the module docstring), then finishes normally:
    "done" (posix) or "done <source>" (topo)."""
    import shmtopo
    _say("pid", os.getpid())
    prefix = f"shmtopo.{os.getpid()}."

    def allgather(send, recv):
        recv[:] = send
        if mode == "posix":
            names = [n for n in os.listdir("/dev/shm") if n.startswith(prefix)]
            if names and not held:
                held.append(names[0])
                _say("held", names[0])
                sys.stdin.readline()  # stalled with the name in place

    held: list[str] = []
    comm = shmtopo.Comm.from_callbacks(1, 0, allgather=allgather, barrier=lambda: None)
    if mode == "posix":
        assert held, "the comm's creation made no posix name"
        comm.free()
        _say("done")
        return
    source = None
    while not select.select([sys.stdin], [], [], 0)[0]:  # until the keeper says stop
        topo = shmtopo.share_topology(comm, source="shmem")
        source = topo.source
        topo.close()
    comm.free()
    _say("done", source)


def _inotify(directory: str) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_CLOEXEC)
    if fd < 0 or libc.inotify_add_watch(fd, directory.encode(), IN_CREATE) < 0:
        raise OSError(ctypes.get_errno(), "inotify")
    return fd


def _stopped(pid: int) -> bool:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return text[text.rindex(")") + 2] in "Tt"


def _keeper(mode: str, pid: int, directory: str) -> None:
    """Starts the holder (at `pid` when not 0, in this new PID namespace),
    reports its name held ("held NAME"; a topology file: the holder stopped
    by SIGSTOP with the file in place), then obeys its input: "cont" lets
    the holder finish, "kill" kills it ("killed")."""
    if pid:
        Path("/proc/sys/kernel/ns_last_pid").write_text(str(pid - 1))
    watch = _inotify(directory) if mode == "topo" else -1
    holder = subprocess.Popen([sys.executable, str(HERE), "holder", mode], stdin=subprocess.PIPE, text=True)
    if mode == "topo":
        prefix = f"shmtopo-topo.{holder.pid}."
        deadline = time.monotonic() + LINE_TIMEOUT
        while True:
            if time.monotonic() > deadline or holder.poll() is not None:
                _say("never caught the holder with its file")
                holder.kill()
                sys.exit(1)
            if not select.select([watch], [], [], 1.0)[0]:
                continue
            data, names, at = os.read(watch, 65536), [], 0
            while at < len(data):
                _, _, _, length = struct.unpack_from("iIII", data, at)
                names.append(data[at + 16:at + 16 + length].rstrip(b"\0").decode())
                at += 16 + length
            name = next((n for n in names if n.startswith(prefix)), None)
            if name is None:
                continue
            holder.send_signal(signal.SIGSTOP)
            while not _stopped(holder.pid):
                time.sleep(0.001)
            if os.path.lexists(os.path.join(directory, name)):
                _say("held", name)
                break
            holder.send_signal(signal.SIGCONT)  # too late: the name was gone; the next one
    for command in sys.stdin:
        command = command.strip()
        if command == "kill":
            holder.kill()
            holder.wait()
            _say("killed")
            return
        if command == "cont":
            holder.stdin.write("go\n")
            holder.stdin.flush()
            holder.send_signal(signal.SIGCONT)
            sys.exit(holder.wait())


def _once() -> None:
    """Waits for "go", then shares the topology over a one-rank comm:
    "shared SOURCE" (or the error)."""
    import shmtopo
    _say("pid", os.getpid())
    sys.stdin.readline()
    comm = shmtopo.Comm.from_callbacks(1, 0, allgather=lambda s, r: r.__setitem__(slice(None), s),
                                       barrier=lambda: None)
    try:
        topo = shmtopo.share_topology(comm)
        _say("shared", topo.source)
        topo.close()
    except shmtopo.ShmtopoError as exc:
        _say("error", exc)
    comm.free()


if __name__ == "__main__":
    role = sys.argv[1]
    if role == "keeper":
        _keeper(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    elif role == "holder":
        _holder(sys.argv[2])
    else:
        _once()
