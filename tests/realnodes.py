"""Jobs on real nodes (tests/nodes/nodes.sh), for tests that pytest runs in
the cluster's head namespace: ./dev test's real-node pass, or by hand after
./dev nodes (which prints how).

    SHMTOPO_NODES       the cluster's state directory (/run/shmtopo-nodes/NAME)
    SHMTOPO_NODES_MPI   openmpi (default) or mpich

A test module that needs the nodes calls skip_unless_available() at module
level. A job is usually a short script under tests/scripts/ that prints one
line per rank, "RANK <world rank> <json>"; records() reads them back.
"""
import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NODES_SH = ROOT / "tests" / "nodes" / "nodes.sh"
SCRIPTS = ROOT / "tests" / "scripts"
STATE = os.environ.get("SHMTOPO_NODES", "")
MPI = os.environ.get("SHMTOPO_NODES_MPI", "openmpi")


def available():
    return bool(STATE)


def skip_unless_available():
    if not available():
        pytest.skip("no real nodes: SHMTOPO_NODES is unset (./dev test's real-node pass sets it; ./dev nodes)",
                    allow_module_level=True)


def _state():
    return Path(STATE)


def layout():
    """Ranks per node, node1 first."""
    return [int(n) for n in (_state() / "layout").read_text().split(",")]


def nodes():
    return [f"node{i + 1}" for i in range(len(layout()))]


def world_size():
    return sum(layout())


def node_of_rank():
    """[world rank] -> node index (0 for node1): mpirun places ranks 0..k-1
    on node1, and so on, by the layout."""
    return [n for n, count in enumerate(layout()) for _ in range(count)]


def _nodes_sh(args):
    env = dict(os.environ, SHMTOPO_NODES_RUN=str(_state().parent))
    return [str(NODES_SH)] + [str(a) for a in args], env


def _run(cmd, env, timeout):
    """cmd in a session of its own; at timeout the launcher is asked to end
    its job (SIGTERM), then killed with everything it started here; raises
    subprocess.TimeoutExpired with what it had printed."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            cwd=ROOT, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        raise subprocess.TimeoutExpired(cmd, timeout, output=out, stderr=err) from None
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def job(argv, timeout=300, env=None, keep_going=False):
    """argv on every rank of the layout, launched from the head by the MPI
    of SHMTOPO_NODES_MPI, from the checkout (the same path on every node).
    env: variables set for the ranks (nothing else of this process's
    environment reaches them). keep_going: a rank's non-zero exit does not
    end the others. Returns the CompletedProcess (text stdout, stderr)."""
    variables = dict(env or {})
    if MPI == "mpich":
        # run as root with the pip-only user's virtualenv: write nothing into it
        variables.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    args = ["mpirun", _state().name, MPI] + (["--keep-going"] if keep_going else [])
    for key, value in variables.items():
        args += ["--env", f"{key}={value}"]
    cmd, nodes_env = _nodes_sh(args + ["--"] + [str(a) for a in argv])
    return _run(cmd, nodes_env, timeout)


def python_job(script, *args, timeout=300, env=None, keep_going=False):
    """tests/scripts/<script> under the virtualenv's python on every rank."""
    return job(["python", SCRIPTS / script, *args], timeout=timeout, env=env, keep_going=keep_going)


def node_exec(node, argv, timeout=60):
    """argv on one node (node1, ..., or head), as its rsh runs commands."""
    cmd, env = _nodes_sh(["exec", _state().name, node] + list(argv))
    return _run(cmd, env, timeout)


def shm_files(node):
    """What is in that node's /dev/shm."""
    proc = node_exec(node, ["ls", "-A", "/dev/shm"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return sorted(proc.stdout.split())


def records(proc):
    """{world rank: record} from the job's "RANK <r> <json>" lines; every
    rank of the layout must have printed exactly one."""
    out = {}
    for line in proc.stdout.splitlines():
        if line.startswith("RANK "):
            _, rank, text = line.split(" ", 2)
            assert int(rank) not in out, f"rank {rank} printed twice:\n{proc.stdout}"
            out[int(rank)] = json.loads(text)
    assert sorted(out) == list(range(world_size())), \
        f"records of ranks {sorted(out)}, not of all {world_size()}:\n{proc.stdout}\n{proc.stderr}"
    return out
