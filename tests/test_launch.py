"""python -m shmtopo run and shmtopo.spawn: jobs on one node without MPI.
The programs run with mpi4py hidden (a package of that name that fails to
import comes first on their path), as on a machine without it."""
import ctypes
import multiprocessing
import os
import pickle
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import ranks
import shmtopo
from conftest import environment_without_a_job

pytestmark = [pytest.mark.serial, pytest.mark.no_mpi, pytest.mark.unsanitized]
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def no_mpi_env(tmp_path_factory):
    """The environment of a machine without mpi4py or an MPI launcher."""
    hidden = tmp_path_factory.mktemp("hidden") / "mpi4py"
    hidden.mkdir()
    (hidden / "__init__.py").write_text("raise ImportError('mpi4py is hidden from this test')\n")
    env = environment_without_a_job(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(hidden.parent)] + env.get("PYTHONPATH", "").split(os.pathsep))
    return env


def launch(env, *args, timeout=120, **kw):
    return subprocess.run([sys.executable, "-m", "shmtopo", "run", *map(str, args)], env=env,
                          capture_output=True, text=True, timeout=timeout, **kw)


def script(tmp_path, body: str) -> Path:
    path = tmp_path / "rank_program.py"
    path.write_text(textwrap.dedent(body))
    return path


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_the_demo_runs_without_mpi(no_mpi_env, n):
    before = ranks.shm_files()
    proc = launch(no_mpi_env, "-n", n, ROOT / "examples" / "demo.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "demo ok" in proc.stdout and f"from {n} ranks" in proc.stdout, proc.stdout
    assert proc.stdout.count("after a peer fence") == n - n % 2
    assert ranks.shm_files() - before == set()


PROGRAM = """
    import sys
    import numpy as np
    import shmtopo

    with shmtopo.Comm.from_env() as comm:
        assert "mpi4py.MPI" not in sys.modules and comm.mpi is None
        total = comm.allreduce(np.full(3, comm.rank + 1.0))
        with comm.allocate(shape=(comm.size,), dtype=np.int64) as win:
            win.query(0)[comm.rank] = comm.rank
            win.fence()
            seen = win.query(0).tolist()
        with shmtopo.share_topology(comm) as topo:
            source = topo.source
        print(f"rank {comm.rank}/{comm.size} total {total[0]:g} seen {seen} topology {source} "
              f"args {sys.argv[1:]}", flush=True)
"""


def test_every_rank_joins_with_collectives_windows_and_topology(no_mpi_env, tmp_path):
    proc = launch(no_mpi_env, "-n", 3, "--tag-output", script(tmp_path, PROGRAM), "-v", "--x=1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = sorted(proc.stdout.splitlines())
    assert lines == [f"[{r}] rank {r}/3 total 6 seen [0, 1, 2] topology shmem args ['-v', '--x=1']"
                     for r in range(3)], proc.stdout


def test_a_module_runs_as_python_m_would(no_mpi_env, tmp_path):
    """-m and a module's own options (which are not run's)."""
    (tmp_path / "rank_module.py").write_text(textwrap.dedent(PROGRAM))
    env = dict(no_mpi_env, PYTHONPATH=f"{tmp_path}{os.pathsep}{no_mpi_env['PYTHONPATH']}")
    proc = launch(env, "-n", 2, "-m", "rank_module", "-n", "7")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("args ['-n', '7']") == 2, proc.stdout


def test_a_test_suite_slice_under_the_launcher(no_mpi_env):
    """The suite's conftest runs under run as under mpiexec: the window,
    fence and collective tests at 3 ranks, a failure on one rank failing the
    job."""
    proc = launch(no_mpi_env, "-n", 3, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                  *(ROOT / "tests" / f"test_{name}.py" for name in ("window", "fence", "collectives")),
                  cwd=ROOT / "tests", timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.count(" passed") == 3 and " failed" not in proc.stdout, proc.stdout[-3000:]


KILLED = """
    import os, signal, sys, time
    import shmtopo

    victim, step = int(sys.argv[1]), int(sys.argv[2])
    with shmtopo.Comm.from_env() as comm:
        with comm.allocate(4096) as win:
            for i in range(1_000_000):
                if comm.rank == victim and i == step:
                    print(f"killed at {time.monotonic()!r}", flush=True)
                    os.kill(os.getpid(), signal.SIGKILL)
                win.fence()
"""


@pytest.mark.parametrize("n,victim", [(2, 0), (3, 1), (4, 3)])
def test_a_killed_rank_ends_the_job_within_2s_and_nothing_is_left(no_mpi_env, tmp_path, n, victim):
    before = ranks.shm_files()
    proc = launch(no_mpi_env, "-n", n, script(tmp_path, KILLED), victim, 200)
    ended = time.monotonic()
    assert proc.returncode == 128 + signal.SIGKILL, proc.stdout + proc.stderr
    killed = float(proc.stdout.split("killed at ")[1].split()[0])
    assert ended - killed < 2.0
    assert f"rank {victim} (pid " in proc.stderr and "was killed by SIGKILL" in proc.stderr, proc.stderr
    # the survivors that were waiting name the dead rank
    assert "PeerDeadError" in proc.stderr, proc.stderr
    assert ranks.shm_files() - before == set()


def test_a_rank_killed_while_allocating_leaves_nothing(no_mpi_env, tmp_path):
    """Killed between creating its segment's name and the unlink that
    follows everyone's mapping: the launcher sweeps the name."""
    body = """
        import os, signal
        import shmtopo

        with shmtopo.Comm.from_env() as comm:
            for i in range(200):
                if comm.rank == 1 and i == 100:
                    os.kill(os.getpid(), signal.SIGKILL)
                comm.allocate(1 << 16, backend="posix").free()
    """
    before = ranks.shm_files()
    proc = launch(no_mpi_env, "-n", 3, script(tmp_path, body))
    assert proc.returncode == 137, proc.stderr
    assert ranks.shm_files() - before == set()


def test_the_first_failing_rank_s_status_is_the_job_s(no_mpi_env, tmp_path):
    body = """
        import os, time
        import shmtopo

        comm = shmtopo.Comm.from_env()
        win = comm.allocate(64)
        if comm.rank == 2:
            time.sleep(0.2)
            os._exit(7)  # the first to end; its peers, waiting in the fence, end after it
        win.fence()
    """
    proc = launch(no_mpi_env, "-n", 4, script(tmp_path, body))
    assert proc.returncode == 7, proc.stderr
    assert "rank 2 (pid" in proc.stderr and "exited with status 7" in proc.stderr, proc.stderr


def test_a_rank_that_ends_before_joining_fails_the_others_join(no_mpi_env, tmp_path):
    """Rank 0 exits before from_env: the others' join raises, naming it,
    instead of waiting for it."""
    body = """
        import sys
        import shmtopo

        if shmtopo.launch.rendezvous.in_environment() and __import__("os").environ["SHMTOPO_RANK"] == "0":
            sys.exit(0)
        try:
            shmtopo.Comm.from_env()
        except shmtopo.ShmtopoError as exc:
            print(f"raised {type(exc).__name__}: {exc}", flush=True)
            sys.exit(3)
    """
    start = time.monotonic()
    proc = launch(no_mpi_env, "-n", 3, script(tmp_path, body))
    assert time.monotonic() - start < 30
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "rank 0 left the job" in proc.stdout, proc.stdout


CTRL_C_BODY = """
    import shmtopo

    with shmtopo.Comm.from_env() as comm:
        with comm.allocate(64) as win:
            print("running", flush=True)
            while True:
                win.fence()
"""


def _to_a_helper_thread(proc):
    """SIGINT to one of the launcher's other threads (a reader, the
    rendezvous): the kernel may pick any thread for a process's signal."""
    tid = max(int(t) for t in os.listdir(f"/proc/{proc.pid}/task"))
    assert tid != proc.pid
    assert ctypes.CDLL(None, use_errno=True).tgkill(proc.pid, tid, signal.SIGINT) == 0


@pytest.mark.parametrize("how", ["plain", "started-ignoring-sigint", "helper-thread"])
def test_ctrl_c_ends_every_rank(no_mpi_env, tmp_path, how):
    """Also when the launcher was started with SIGINT ignored (a background
    job of a shell without job control: its ranks would inherit that), and
    when the signal lands on one of its helper threads."""
    before = ranks.shm_files()
    ignoring = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if how == "started-ignoring-sigint" else None
    proc = subprocess.Popen([sys.executable, "-m", "shmtopo", "run", "-n", "3", str(script(tmp_path, CTRL_C_BODY))],
                            env=no_mpi_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=ignoring)
    try:
        for _ in range(3):
            assert proc.stdout.readline() == "running\n"
        time.sleep(0.2)
        if how == "helper-thread":
            _to_a_helper_thread(proc)
        else:
            proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=10)
    finally:
        proc.kill()  # on a failure above: its ranks die with it
        proc.wait()
    assert proc.returncode != 0
    assert err.count("KeyboardInterrupt") >= 1, err
    assert ranks.shm_files() - before == set()


def test_keep_going_lets_the_survivors_shrink(no_mpi_env, tmp_path):
    """--keep-going (mpiexec's --enable-recovery): a dead rank does not end
    the job; the survivors carry on with comm.shrink()."""
    body = """
        import os, signal
        import numpy as np
        import shmtopo

        with shmtopo.Comm.from_env() as comm:
            try:
                for i in range(1000):
                    if comm.rank == 2 and i == 20:
                        os.kill(os.getpid(), signal.SIGKILL)
                    comm.allreduce(np.ones(4))
            except shmtopo.PeerDeadError as dead:
                with comm.shrink() as survivors:
                    total = survivors.allreduce(np.array([1.0]))[0]
                    print(f"rank {comm.rank}: rank {dead.rank} died, {survivors.size} left, sum {total:g}",
                          flush=True)
    """
    before = ranks.shm_files()
    proc = launch(no_mpi_env, "-n", 4, "--keep-going", script(tmp_path, body))
    assert proc.returncode == 137, proc.stdout + proc.stderr
    assert sorted(proc.stdout.splitlines()) == [f"rank {r}: rank 2 died, 3 left, sum 3" for r in (0, 1, 3)], \
        proc.stdout + proc.stderr
    assert ranks.shm_files() - before == set()


@pytest.mark.parametrize("args,message", [
    ([], "the following arguments are required: -n"),
    (["-n", "0", "x.py"], "whole number >= 1"),
    (["-n", "two", "x.py"], "whole number >= 1"),
    (["-n", "2"], "name a Python script"),
    (["-n", "2", "-m"], "name a Python script"),
    (["-n", "2", "no/such/script.py"], "no such script: no/such/script.py"),
    (["-n", "2", "--bind", "socket", "x.py"], "invalid choice: 'socket'"),
    (["-n", "99", "--bind", "core", "{script}"], "99 ranks but"),
])
def test_bad_arguments_exit_2_with_a_message(no_mpi_env, tmp_path, args, message):
    path = script(tmp_path, "print('ran')\n")
    proc = launch(no_mpi_env, *[a.format(script=path) for a in args])
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr and "ran" not in proc.stdout, proc.stderr


def test_bind_core_gives_each_rank_a_core_of_its_own(no_mpi_env, tmp_path):
    n = min(2, len(shmtopo.Topology.load().objects("core")))
    want = shmtopo.launch.cpu_sets(n, "core")
    body = """
        import os
        import shmtopo

        with shmtopo.Comm.from_env() as comm:
            print(comm.rank, sorted(os.sched_getaffinity(0)), flush=True)
    """
    proc = launch(no_mpi_env, "-n", n, "--bind", "core", script(tmp_path, body))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(proc.stdout.splitlines()) == [f"{r} {sorted(want[r])}" for r in range(n)], proc.stdout
    assert n == 1 or want[0] != want[1]


def test_comm_bind_and_peer_fences_under_the_launcher(no_mpi_env, tmp_path):
    """What a program does after joining works as under mpiexec: binding
    through the shared topology, and peer fences."""
    body = """
        import os
        import numpy as np
        import shmtopo

        with shmtopo.Comm.from_env() as comm:
            places = comm.bind("core", overload=True)
            assert sorted(os.sched_getaffinity(0)) == sorted(places[comm.rank].cpuset)
            with comm.allocate(shape=(1,), dtype=np.int64) as win:
                partner = comm.rank ^ 1
                if partner < comm.size:
                    win.query(partner)[0] = 10 + comm.rank
                    win.peer_fence(partner)
                    assert win.local[0] == 10 + partner
                win.fence()
            print(comm.rank, [str(p.cpuset) for p in places], flush=True)
    """
    proc = launch(no_mpi_env, "-n", 3, script(tmp_path, body))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = sorted(proc.stdout.splitlines())
    assert len(lines) == 3 and len({line.split(" ", 1)[1] for line in lines}) == 1, proc.stdout


@pytest.mark.parametrize("extra", [{}, {"SHMTOPO_RENDEZVOUS": ""}], ids=["unset", "empty"])
def test_from_env_alone_is_a_comm_of_one(no_mpi_env, tmp_path, extra):
    """An empty SHMTOPO_RENDEZVOUS is unset, as every SHMTOPO_* variable's
    empty value is (before: ShmtopoValueError)."""
    body = """
        import sys
        import numpy as np
        import shmtopo

        with shmtopo.Comm.from_env() as comm:
            assert (comm.rank, comm.size, comm.mpi) == (0, 1, None)
            assert comm.allreduce(np.ones(2)).tolist() == [1.0, 1.0]
            print("alone ok", "mpi4py.MPI" in sys.modules)
    """
    proc = subprocess.run([sys.executable, str(script(tmp_path, body))], env=dict(no_mpi_env, **extra),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "alone ok False" in proc.stdout, proc.stdout + proc.stderr


# ---- shmtopo.spawn ---------------------------------------------------------------

def sum_of_ranks(scale):
    with shmtopo.Comm.from_env() as comm:
        return comm.rank, float(comm.allreduce(np.array([scale * comm.rank]))[0])


def test_spawn_returns_every_rank_s_result_in_rank_order():
    """Under every start method (before: under "forkserver" every rank
    exited at once, its parent being the forkserver, not the caller)."""
    for start_method in ("fork", "spawn", "forkserver"):
        out = shmtopo.spawn(sum_of_ranks, 3, 2.0, start_method=start_method)
        assert out == [(0, 6.0), (1, 6.0), (2, 6.0)], (start_method, out)


def middle_rank_raises():
    with shmtopo.Comm.from_env() as comm:
        with comm.allocate(64) as win:
            if comm.rank == 1:
                raise KeyError("only on rank 1")
            win.fence()
    return "no error"


def test_spawn_raises_the_first_failing_rank_s_exception():
    before = ranks.shm_files()
    with pytest.raises(KeyError, match="only on rank 1") as info:
        shmtopo.spawn(middle_rank_raises, 3)
    assert any("raised on rank 1 of 3" in note for note in getattr(info.value, "__notes__", [])), info.value
    assert ranks.shm_files() - before == set()


def killed_mid_allreduce(victim):
    import signal as sig

    with shmtopo.Comm.from_env() as comm:
        for i in range(1000):
            if comm.rank == victim and i == 20:
                os.kill(os.getpid(), sig.SIGKILL)
            comm.allreduce(np.ones(4))
    return "no error"


def test_spawn_names_a_dead_rank():
    before = ranks.shm_files()
    with pytest.raises(shmtopo.PeerDeadError, match="rank 2 .* was killed by SIGKILL") as info:
        shmtopo.spawn(killed_mid_allreduce, 4, 2)
    assert info.value.rank == 2
    assert ranks.shm_files() - before == set()


def test_spawn_rejects_bad_arguments():
    with pytest.raises(ValueError, match="n >= 1"):
        shmtopo.spawn(sum_of_ranks, 0)
    with pytest.raises(ValueError, match="callable"):
        shmtopo.spawn("sum_of_ranks", 2)
    with pytest.raises(ValueError, match="bind must be one of"):
        shmtopo.spawn(sum_of_ranks, 2, bind="socket")


# ---- who may join, and what the rendezvous takes ------------------------------------

IMPOSTOR = """
    import os, subprocess, sys
    import numpy as np
    import shmtopo

    how, rank = sys.argv[1], int(os.environ["SHMTOPO_RANK"])
    JOIN = "\\n".join([
        "import shmtopo",
        "try:",
        "    with shmtopo.Comm.from_env(timeout=10) as comm:",
        "        print(f'joined as rank {comm.rank} of {comm.size}')",
        "except Exception as exc:",
        "    print(f'{type(exc).__name__}: {exc}')",
    ])


    def in_a_fork():
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.dup2(w, 1)
            try:
                exec(JOIN)
            finally:
                sys.stdout.flush()
                os._exit(0)
        os.close(w)
        with os.fdopen(r) as f:
            text = f.read()
        os.waitpid(pid, 0)
        return text.strip()


    if rank == 0 and how == "fork-before-join":
        print("child:", in_a_fork(), flush=True)
    elif rank == 0 and how == "subprocess-before-join":
        child = subprocess.run([sys.executable, "-c", JOIN], capture_output=True, text=True, timeout=60)
        print("child:", child.stdout.strip(), child.stderr.strip(), flush=True)
    with shmtopo.Comm.from_env(timeout=20) as comm:
        if rank == 0 and how == "fork-after-join":
            print("child:", in_a_fork(), flush=True)
        total = comm.allreduce(np.array([1.0]))[0]
        print(f"rank {comm.rank} of {comm.size}: sum {total:g}", flush=True)
"""


@pytest.mark.parametrize("how", ["fork-before-join", "fork-after-join", "subprocess-before-join"])
def test_a_child_of_a_rank_cannot_take_its_place(no_mpi_env, tmp_path, how):
    """A child of rank 0 (os.fork before or after rank 0 joined, or a
    subprocess started before) calls from_env with the rank's environment:
    it gets ForkedProcessError, and the job goes on with the real rank 0
    (before: the child joined as rank 0 of 2, rank 1 built its comm with it,
    and the real rank 0 timed out)."""
    before = ranks.shm_files()
    proc = launch(no_mpi_env, "-n", 2, script(tmp_path, IMPOSTOR), how, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = sorted(proc.stdout.splitlines())
    assert lines[0].startswith("child: ForkedProcessError: this process (pid "), proc.stdout
    assert "not rank 0 of the job" in lines[0] or "a child of rank 0's process" in lines[0], lines[0]
    assert lines[1:] == ["rank 0 of 2: sum 2", "rank 1 of 2: sum 2"], proc.stdout + proc.stderr
    assert ranks.shm_files() - before == set()


def forks_a_child_that_joins():
    """A spawn rank whose fork child calls from_env after the rank joined."""
    with shmtopo.Comm.from_env(timeout=20) as comm:
        pid = os.fork()
        if pid == 0:
            try:
                shmtopo.Comm.from_env(timeout=10)
                os._exit(1)
            except shmtopo.errors.ForkedProcessError:
                os._exit(0)
            finally:
                os._exit(2)
        _, status = os.waitpid(pid, 0)
        return comm.rank, os.waitstatus_to_exitcode(status), float(comm.allreduce(np.array([1.0]))[0])


def test_spawn_ranks_are_who_they_say_they_are():
    assert shmtopo.spawn(forks_a_child_that_joins, 2) == [(0, 0, 2.0), (1, 0, 2.0)]


HOSTILE = """
    import os, socket, struct, time
    import shmtopo

    if os.environ["SHMTOPO_RANK"] == "1":
        # rank 1 itself, on a connection of its own: a valid greeting, then a
        # negative length
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(os.environ["SHMTOPO_RENDEZVOUS"])
        s.sendall(struct.pack("<q", 1) + struct.pack("<q", -8))
        time.sleep(60)
    else:
        shmtopo.Comm.from_env(timeout=60)
"""


def test_a_malformed_rendezvous_message_fails_the_job_naming_it(no_mpi_env, tmp_path):
    """Before: the launcher never exited, its memory growing without bound."""
    before = ranks.shm_files()
    proc = launch(no_mpi_env, "-n", 2, script(tmp_path, HOSTILE), timeout=60)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "shmtopo run: rank 1 (pid " in proc.stderr and "a message of length -8" in proc.stderr, proc.stderr
    assert "rank 1 was cut off from the job" in proc.stderr, proc.stderr  # rank 0's PeerDeadError
    assert ranks.shm_files() - before == set()


# ---- output ---------------------------------------------------------------------

def test_output_is_forwarded_as_it_comes(no_mpi_env, tmp_path):
    """A progress bar's \\r, and a partial line, pass on before the line
    ends (before: only with the newline). Each rank waits until the test has
    seen its text."""
    body = f"""
        import os, sys, time
        rank = os.environ["SHMTOPO_RANK"]
        sys.stdout.write(f"progress {{rank}}: 50%\\r"); sys.stdout.flush()
        sys.stderr.write(f"partial {{rank}}"); sys.stderr.flush()
        deadline = time.monotonic() + 30
        while not os.path.exists({str(tmp_path / 'seen')!r}) and time.monotonic() < deadline:
            time.sleep(0.01)
        print(f"rank {{rank}}:", "seen" if time.monotonic() < deadline else "not seen", flush=True)
    """
    proc = subprocess.Popen([sys.executable, "-m", "shmtopo", "run", "-n", "2", "--tag-output",
                             str(script(tmp_path, body))], env=no_mpi_env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        got = {proc.stdout: b"", proc.stderr: b""}
        want = [b"[0] progress 0: 50%\r", b"[1] progress 1: 50%\r", b"[0] partial 0", b"[1] partial 1"]
        deadline = time.monotonic() + 60
        while not all(w in got[proc.stdout] + got[proc.stderr] for w in want) and time.monotonic() < deadline:
            for f in select.select(list(got), [], [], 1)[0]:
                got[f] += os.read(f.fileno(), 1 << 16)
        (tmp_path / "seen").touch()
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    out, err = got[proc.stdout] + out, got[proc.stderr] + err
    assert proc.returncode == 0, out + err
    for rank in (0, 1):
        assert f"[{rank}] progress {rank}: 50%\r".encode() in out, out
        assert f"[{rank}] rank {rank}: seen\n".encode() in out, out
        assert f"[{rank}] partial {rank}".encode() in err, err


def test_a_long_line_passes_through_a_bounded_buffer(no_mpi_env, tmp_path):
    """128 MiB with no newline: the launcher's memory grows by far less
    (before: it held the whole line)."""
    body = """
        import os, sys

        def launcher_peak():
            with open(f"/proc/{os.getppid()}/status") as f:
                return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) // 1024

        out = sys.stdout.buffer
        out.write(b"x" * (1 << 20)); out.flush()
        start = launcher_peak()
        block = b"y" * (1 << 20)
        for _ in range(128):
            out.write(block)
        out.flush()
        print(f"launcher grew by {launcher_peak() - start} MiB", file=sys.stderr, flush=True)
    """
    proc = subprocess.run([sys.executable, "-m", "shmtopo", "run", "-n", "1", str(script(tmp_path, body))],
                          env=no_mpi_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    grew = int(proc.stderr.split("launcher grew by ")[1].split()[0])
    assert grew < 32, proc.stderr


# ---- spawn: bounded waits, start failures, outcomes that will not load -------------

def returns_leaving_a_thread(fail):
    """Rank 0 returns at once but leaves a thread that keeps its process
    alive for 40 s; with fail, rank 1 raises after 0.5 s."""
    import threading

    rank = int(os.environ["SHMTOPO_RANK"])
    if rank == 0:
        threading.Thread(target=time.sleep, args=(40,)).start()  # not a daemon: the process stays
    elif fail:
        time.sleep(0.5)
        raise ValueError("rank 1 fails after rank 0 returned")
    return rank


@pytest.mark.parametrize("fail", [True, False])
def test_spawn_does_not_wait_for_a_rank_that_returned_but_stays(fail):
    """Before: spawn waited for rank 0's process to end (40 s)."""
    start = time.monotonic()
    if fail:
        with pytest.raises(ValueError, match="rank 1 fails"):
            shmtopo.spawn(returns_leaving_a_thread, 2, fail)
    else:
        assert shmtopo.spawn(returns_leaving_a_thread, 2, fail) == [0, 1]
    assert time.monotonic() - start < 20
    assert multiprocessing.active_children() == []


def fds_and_dirs(tmp):
    return sorted(os.listdir("/proc/self/fd")), sorted(os.listdir(tmp))


def spawn_in_a_pool_worker(tmp):
    tempfile.tempdir = tmp
    before = fds_and_dirs(tmp)
    try:
        shmtopo.spawn(sum_of_ranks, 2, 1.0)
        error = "no error"
    except BaseException as exc:  # noqa: BLE001 - the test looks at it
        error = f"{type(exc).__name__}: {exc}"
    return error, before == fds_and_dirs(tmp), multiprocessing.active_children()


def test_spawn_start_failures_raise_the_real_error_and_leave_nothing(tmp_path, monkeypatch):
    """A lambda under start_method="spawn" (it does not pickle), and a call
    in a multiprocessing.Pool worker (daemonic): the real error, and no
    rendezvous directory, socket, fd or child left (before: AssertionError:
    can only join a started process, and the rendezvous leaked)."""
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()  # "spawn" starts it once, for good: not a leak
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    before = fds_and_dirs(tmp_path)
    with pytest.raises((pickle.PicklingError, AttributeError), match="pickle") as info:
        shmtopo.spawn(lambda: 1, 2, start_method="spawn")
    assert "shmtopo.spawn could not start rank 0 of 2 (start method 'spawn')" in info.value.__notes__
    assert fds_and_dirs(tmp_path) == before
    assert multiprocessing.active_children() == []
    with multiprocessing.get_context("fork").Pool(1) as pool:
        error, nothing_left, children = pool.apply(spawn_in_a_pool_worker, (str(tmp_path),))
    assert error == "AssertionError: daemonic processes are not allowed to have children", error
    assert nothing_left and children == []


NPROC = """
    import multiprocessing, os, pwd, resource, sys, tempfile
    import shmtopo

    def join():
        shmtopo.Comm.from_env()  # waits: the rendezvous serves once every rank started

    def tasks(uid):
        n = 0
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                for tid in os.listdir(f"/proc/{pid}/task"):
                    with open(f"/proc/{pid}/task/{tid}/status") as f:
                        n += any(line.split()[:2] == ["Uid:", str(uid)] for line in f)
            except OSError:
                pass
        return n

    # as the unprivileged user (root's RLIMIT_NPROC is not enforced); the
    # interpreter is root's, so everything is imported first
    import multiprocessing.popen_fork
    user = pwd.getpwnam(sys.argv[1])
    tempfile.tempdir = sys.argv[2]
    os.setgroups([]); os.setgid(user.pw_gid); os.setuid(user.pw_uid)
    before = sorted(os.listdir("/proc/self/fd"))
    # room for one more process of this user at most: a later rank's fork fails
    resource.setrlimit(resource.RLIMIT_NPROC, (tasks(os.getuid()) + 1, resource.getrlimit(resource.RLIMIT_NPROC)[1]))
    try:
        shmtopo.spawn(join, 3, start_method="fork")
        print("no error")
    except OSError as exc:
        print(f"{type(exc).__name__}: {exc};", *exc.__notes__)
    print("left:", os.listdir(sys.argv[2]), sorted(os.listdir("/proc/self/fd")) == before,
          multiprocessing.active_children())
"""


def test_spawn_reports_a_fork_that_fails_and_leaves_nothing(no_mpi_env, tmp_path):
    """RLIMIT_NPROC exhausted, as an unprivileged user (as root: nobody,
    whose processes no other suite runs beside this one): the
    OSError, and nothing left (the ranks started before are ended; before:
    AssertionError: can only join a started process, and the rendezvous
    leaked)."""
    import pwd

    if os.geteuid() != 0:
        user = pwd.getpwuid(os.geteuid()).pw_name  # the limit holds for this user itself
    else:
        try:
            user = pwd.getpwnam("nobody").pw_name
        except KeyError:
            pytest.skip("as root RLIMIT_NPROC is not enforced, and there is no user nobody to run as")
    tmp = tempfile.mkdtemp()  # tmp_path's parents are root's alone
    try:
        if os.geteuid() == 0:
            os.chown(tmp, pwd.getpwnam(user).pw_uid, pwd.getpwnam(user).pw_gid)
        proc = subprocess.run([sys.executable, str(script(tmp_path, NPROC)), user, tmp], env=no_mpi_env,
                              capture_output=True, text=True, timeout=120)
    finally:
        shutil.rmtree(tmp)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "BlockingIOError: [Errno 11] Resource temporarily unavailable; shmtopo.spawn could not start rank" \
        in proc.stdout, proc.stdout + proc.stderr
    assert "left: [] True []" in proc.stdout, proc.stdout


class NeedsTwo(Exception):
    """Pickles, but will not unpickle: its args hold one of its two."""

    def __init__(self, a, b):
        super().__init__(a)


def _refuse_to_load():
    raise RuntimeError("refuses to load")


class LoadsNowhere:
    def __reduce__(self):
        return _refuse_to_load, ()


def outcome_that_will_not_load(what):
    rank = int(os.environ["SHMTOPO_RANK"])
    if rank == 1 and what == "exception":
        raise NeedsTwo("raised on rank 1", "b")
    return LoadsNowhere() if rank == 1 else rank


def test_spawn_names_the_rank_whose_outcome_will_not_unpickle():
    """Before: a bare TypeError, with no rank and no traceback."""
    with pytest.raises(shmtopo.ShmtopoError, match=r"rank 1's exception could not be unpickled here: "
                                                   r"TypeError\(.*missing 1 required positional") as info:
        shmtopo.spawn(outcome_that_will_not_load, 2, "exception")
    assert info.value.rank == 1 and isinstance(info.value.__cause__, TypeError)
    [note] = info.value.__notes__
    assert note.startswith("raised on rank 1 of 2:\nTraceback") and "NeedsTwo: raised on rank 1" in note, note
    with pytest.raises(shmtopo.ShmtopoError, match=r"rank 1's result could not be unpickled here: "
                                                   r"RuntimeError\('refuses to load'\)") as info:
        shmtopo.spawn(outcome_that_will_not_load, 2, "result")
    assert info.value.rank == 1
