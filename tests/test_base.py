"""The lifetime rules every layer relies on (_base.py): a process that exits
with comms and windows open leaves them first, so that no peer waits for it."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import CLEAN_ENV, mpiexec_command
from conftest import keep_going_flags

pytestmark = pytest.mark.serial
HERE = Path(__file__).resolve().parent


@pytest.mark.parametrize("how", ["raise", "exit"])
@pytest.mark.parametrize("what", ["fence", "peer_fence", "accelerated_fence", "lock", "barrier"])
def test_leaving_with_windows_open_is_heard(how, what):
    env = dict(CLEAN_ENV)
    env.pop("SHMTOPO_TIMEOUT", None)  # wait forever: only the leave can end the wait
    proc = subprocess.run(mpiexec_command() + keep_going_flags() + ["-n", "2", sys.executable,
                          str(HERE / "scripts" / "leave_with_windows.py"), how, what],
                          capture_output=True, text=True, timeout=60, env=env)
    results = re.findall(r"RESULT (\d+) (\S+) (\S+)", proc.stdout)
    assert results == [("1", "PeerAbortedError", "0")], proc.stdout + proc.stderr
