"""The job around the node (job.py): what crosses nodes besides data. A
death is seen in shared memory by the dead rank's node only; every survivor
on every node must name it (news of a death, NodePlan.news). Simulated nodes
here (SHMTOPO_NODE_SIZE); tests/test_realnodes.py runs the same script on
real ones."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import CLEAN_ENV, mpiexec_command, survivors_of_a_kill_flags

pytestmark = pytest.mark.serial
HERE = Path(__file__).resolve().parent


def survivors_lines(proc):
    """{rank: (exception, exc.rank, seconds, message)} from the RESULT lines
    (found anywhere: a launcher may join two ranks' lines)."""
    return {int(m[0]): m[1:] for m in re.findall(r"RESULT (\d+) (\S+) (\S+) (\S+) \(([^)]*)\)", proc.stdout)}


# 4 ranks in 2 nodes of 2: rank 2 leads the second node, 3 does not
@pytest.mark.parametrize("victim", [2, 3])
@pytest.mark.parametrize("call", ["allreduce", "alltoall"])
def test_a_death_is_named_on_every_node(victim, call):
    env = dict(CLEAN_ENV, SHMTOPO_NODE_SIZE="2")
    env.pop("SHMTOPO_TIMEOUT", None)  # the default: wait forever
    proc = subprocess.run(mpiexec_command() + survivors_of_a_kill_flags() + ["-n", "4", sys.executable,
                          str(HERE / "scripts" / "death_across_nodes.py"), str(victim), call],
                          capture_output=True, text=True, timeout=120, env=env)
    lines = survivors_lines(proc)
    report = proc.stdout + proc.stderr
    assert sorted(lines) == sorted({0, 1, 2, 3} - {victim}), report
    for rank, (name, named, seconds, message) in lines.items():
        assert (name, named) == ("PeerDeadError", str(victim)), report


@pytest.mark.parametrize("victim", [2, 3])
def test_an_abandonment_is_named_on_every_node(victim):
    """A rank that leaves the comm after an error (abandon): its node-mate
    sees it in shared memory, the other node's ranks, waiting in MPI, hear it
    as news; every other rank raises PeerAbortedError naming it, at once."""
    env = dict(CLEAN_ENV, SHMTOPO_NODE_SIZE="2")
    env.pop("SHMTOPO_TIMEOUT", None)  # the default: wait forever
    proc = subprocess.run(mpiexec_command() + survivors_of_a_kill_flags() + ["-n", "4", sys.executable,
                          str(HERE / "scripts" / "death_across_nodes.py"), str(victim), "allreduce", "abandon"],
                          capture_output=True, text=True, timeout=120, env=env)
    lines = survivors_lines(proc)
    report = proc.stdout + proc.stderr
    assert sorted(lines) == sorted({0, 1, 2, 3} - {victim}), report
    for rank, (name, named, seconds, message) in lines.items():
        assert (name, named) == ("PeerAbortedError", str(victim)) and float(seconds) < 2, report


def test_news_left_unread_never_reaches_a_later_comm():
    """News that several ranks sent (each finder of a death or departure
    sends it) stays unread on the plan's own communicator, which is kept
    rather than freed: the next comms work (freed, it crashed Open MPI)."""
    proc = subprocess.run(mpiexec_command() + ["-n", "4", sys.executable, str(HERE / "scripts" / "news_storm.py")],
                          capture_output=True, text=True, timeout=120, env=dict(CLEAN_ENV))
    assert proc.returncode == 0 and proc.stdout.count(" ok") == 4, proc.stdout + proc.stderr


LATE_LEADER = """
import sys, time
from mpi4py import MPI
import shmtopo
comm = shmtopo.Comm.from_mpi(MPI.COMM_WORLD, timeout=1)
if MPI.COMM_WORLD.rank == 1:
    time.sleep(3)  # the second node's leader never comes to the barrier
    sys.exit(0)
t0 = time.monotonic()
try:
    comm.barrier()
except shmtopo.ShmtopoTimeoutError as exc:
    print(f"RESULT {time.monotonic() - t0:.2f} {exc}", flush=True)
"""


def test_the_leaders_exchange_waits_only_as_long_as_the_timeout(tmp_path):
    """The leaders' exchange is C calling MPI (native/mpi_oob.c); a wait that
    lasts goes on under the comm's timeout: a leader that never comes makes
    the other raise ShmtopoTimeoutError after the timeout, not hang."""
    script = tmp_path / "late_leader.py"
    script.write_text(LATE_LEADER)
    proc = subprocess.run(mpiexec_command() + ["-n", "2", sys.executable, str(script)], capture_output=True,
                          text=True, timeout=60, env=dict(CLEAN_ENV, SHMTOPO_NODE_SIZE="1"))
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT")), "")
    assert "the exchange between node leaders timed out" in line, proc.stdout + proc.stderr
    assert 0.9 < float(line.split()[1]) < 2.5, line
