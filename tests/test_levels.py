"""Collectives in levels of the shared topology (src/shmtopo/coll/levels.py):
the structure from where ranks sit, and, under mpiexec on synthetic
topologies (HWLOC_SYNTHETIC: this machine has 2 cores, so the ranks are
oversubscribed), results bit for bit equal to the rank-order fold and to
the flat algorithms, misuse raising on every rank, and SHMTOPO_COLL_LEVELS
parsed strictly and agreed at creation. Serial tests: each starts its own
mpiexec of tests/scripts/levels_check.py under the MPI of this run. One
test runs on every rank of the passes' jobs (one node, real nodes): levels
of the machine the ranks really run on."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import folds
import shmtopo
from conftest import CLEAN_ENV, REPEATED_RUN, mpiexec_command
from shmtopo._native import ffi, lib
from shmtopo.coll import levels
from shmtopo.coll.levels import Structure, Tier, structure_of

# Serial unless marked otherwise: the structure and the setting are one
# process's, and the tests under mpiexec start their own.
SCRIPT = Path(__file__).parent / "scripts" / "levels_check.py"


def run_check(n, synthetic, setting, *args, timeout=600):
    env = dict(CLEAN_ENV, HWLOC_SYNTHETIC=synthetic, OMPI_MCA_rmaps_base_oversubscribe="1")
    if setting is None:
        env.pop("SHMTOPO_COLL_LEVELS", None)
    else:
        env["SHMTOPO_COLL_LEVELS"] = setting
    proc = subprocess.run(mpiexec_command() + ["-n", str(n), sys.executable, str(SCRIPT), *args],
                          capture_output=True, text=True, timeout=timeout, env=env)
    assert proc.returncode == 0 and "LEVELS OK" in proc.stdout, proc.stdout[-4000:] + proc.stderr[-3000:]
    return proc.stdout


# ---- the structure: pure ---------------------------------------------------------------

@pytest.mark.serial
def test_consecutive_ranks_make_nested_groups():
    # 8 ranks on 2 packages x 2 NUMA nodes x 2 cores, in rank order
    s = structure_of([[r // 2, r // 4] for r in range(8)], ["numanode", "package"])
    assert s.tiers == (Tier("numanode", ((0, 1), (2, 3), (4, 5), (6, 7))),
                       Tier("package", ((0, 2), (4, 6))), Tier("node", ((0, 4),)))
    assert s.describe() == ("numanode (4 groups of 2) > package (2 groups of 2 numanode) > "
                            "node (1 group of 2 package)")


@pytest.mark.serial
def test_a_level_that_splits_nothing_is_left_out():
    # all in one package: only the NUMA level counts; uneven groups
    s = structure_of([[0 if r < 4 else 1, 0] for r in range(6)], ["numanode", "package"])
    assert [t.type for t in s.tiers] == ["numanode", "node"]
    assert s.tiers[0].groups == ((0, 1, 2, 3), (4, 5))
    assert s.describe() == "numanode (2 groups of 2-4) > node (1 group of 2 numanode)"


@pytest.mark.serial
def test_ranks_not_in_consecutive_runs_stay_flat():
    # round robin over 2 packages: no run of two consecutive ranks, so a
    # group would break the rank order of the fold: no levels
    s = structure_of([[r % 2] for r in range(8)], ["package"])
    assert s.tiers == () and s.describe().startswith("flat (")
    # runs are cut where the placement jumps: ranks 0-1 and 4-5 in package 0
    s = structure_of([[(r // 2) % 2] for r in range(8)], ["package"])
    assert s.tiers[0].groups == ((0, 1), (2, 3), (4, 5), (6, 7))


@pytest.mark.serial
@pytest.mark.parametrize("value", ["numa,numa", "numa,,package", "bogus", ",numa", "numa,", "group",
                                   "core,l1,l2,l3,numa", " numa"])
def test_setting_is_parsed_strictly(monkeypatch, value):
    monkeypatch.setenv("SHMTOPO_COLL_LEVELS", value)
    cfg = ffi.new("shmtopo_config_t *")
    assert lib.shmtopo_config_read(cfg) < 0
    assert ffi.string(lib.shmtopo_last_error()).decode().startswith(f"SHMTOPO_COLL_LEVELS={value}: expected")


@pytest.mark.serial
@pytest.mark.parametrize("value, mode, types", [("auto", 0, []), ("FLAT", 1, []), ("numa", 2, [5]),
                                                ("l3,numa,package", 2, [4, 5, 7]), ("package,numa", 2, [7, 5])])
def test_setting_values(monkeypatch, value, mode, types):
    monkeypatch.setenv("SHMTOPO_COLL_LEVELS", value)
    cfg = ffi.new("shmtopo_config_t *")
    assert lib.shmtopo_config_read(cfg) == 0
    assert cfg.coll_levels_mode == mode and [t for t in cfg.coll_levels if t] == types


# ---- under mpiexec -------------------------------------------------------------------------

NODE = "numanode (4 groups of 2) > package (2 groups of 2 numanode) > node (1 group of 2 package)"


@pytest.mark.serial
@pytest.mark.parametrize("n, synthetic, setting, expected, quick", [
    (8, "pack:2 numa:2 core:2 pu:1", "numa,package", NODE, True),
    (8, "pack:2 numa:2 core:2 pu:1", None, NODE, True),                       # auto from 8 ranks
    (4, "pack:2 core:2 pu:1", "package", "package (2 groups of 2) > node (1 group of 2 package)", False),
    (6, "pack:2 numa:2 core:4 pu:1", "numa,package", "numanode (2 groups of 2-4) > node", True),
    (5, "pack:1 l3:5 core:1 pu:1", "l3", "l3 (5 groups of 1)", True),         # never a level: flat
])
def test_levels_match_the_flat_bits(n, synthetic, setting, expected, quick):
    if REPEATED_RUN and setting is None:
        pytest.skip("a repeated run (conftest.REPEATED_RUN): the same levels as the run that names them")
    flat = expected.startswith("l3 (5")
    if flat:
        expected = "flat (l3: no level splits"
    run_check(n, synthetic, setting, expected, "flat" if flat else "levels", *(["quick"] if quick else []))


@pytest.mark.serial
@pytest.mark.parametrize("n, synthetic, setting, expected", [
    (4, "pack:2 core:2 pu:1", None, "package (2 groups of 2) > node (1 group of 2 package); auto: flat below 8"),
    (8, "pack:2 numa:2 core:2 pu:1", "flat", "flat (SHMTOPO_COLL_LEVELS=flat)"),
])
def test_flat_where_levels_are_not_asked_for(n, synthetic, setting, expected):
    if REPEATED_RUN and n > 4:
        pytest.skip("a repeated run (conftest.REPEATED_RUN): flat at 8 ranks takes no path 4 ranks do not")
    run_check(n, synthetic, setting, expected, "flat", "quick")


@pytest.mark.serial
@pytest.mark.parametrize("culprit", [0, 2, 3])
def test_a_rank_with_another_setting_fails_creation_everywhere(culprit):
    run_check(4, "pack:2 core:2 pu:1", "package", "disagree", str(culprit))


@pytest.mark.serial
@pytest.mark.parametrize("setting, expected", [
    ("numa,package", "levels          " + NODE + "; for arrays from 64 KiB"),
    (None, "levels          " + NODE + "; for arrays from 64 KiB"),
    ("flat", "levels          flat (SHMTOPO_COLL_LEVELS=flat)"),
])
def test_info_prints_the_levels(setting, expected):
    env = dict(CLEAN_ENV, HWLOC_SYNTHETIC="pack:2 numa:2 core:2 pu:1", OMPI_MCA_rmaps_base_oversubscribe="1")
    env.pop("SHMTOPO_COLL_LEVELS", None)
    if setting:
        env["SHMTOPO_COLL_LEVELS"] = setting
    proc = subprocess.run(mpiexec_command() + ["-n", "8", sys.executable, "-m", "shmtopo", "info"],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert expected in proc.stdout.splitlines(), proc.stdout


# ---- on every rank of the job ------------------------------------------------------------

def test_levels_where_the_ranks_run(monkeypatch):
    """Not serial: under every pass's mpiexec and on real nodes. Levels by
    core from where the ranks really run (this machine's cores, ranks
    oversubscribed and moving: a structure of groups or flat, whichever the
    places give): every rank finds the same structure, and large reductions
    and bcasts give the job's fold bit for bit (integer sums wrapping), the
    same as the flat algorithm. Across nodes the comm keeps its nodes as its
    levels: no call runs in levels of the topology."""
    monkeypatch.setenv("SHMTOPO_COLL_LEVELS", "core")
    with shmtopo.Comm.from_env() as comm:
        found = levels.describe(comm).encode()
        row = np.zeros(512, np.uint8)
        row[:len(found)] = np.frombuffer(found, np.uint8)
        assert (comm.allgather(row) == row).all(), found
        if comm.nnodes > 1:
            assert found.startswith(b"flat (multi-node comm"), found
        plan = folds.by_node(comm)
        me, n = comm.world_rank, comm.world_size
        for case, (dtype, op) in enumerate([(np.float64, "sum"), (np.float32, "prod"), (np.int8, "sum"),
                                            (np.int16, "sum"), (np.int32, "bxor")]):
            dtype = np.dtype(dtype)
            for count in (levels.MIN_BYTES // dtype.itemsize + 1, levels.CHUNK // dtype.itemsize + 3):
                def mine(rank):
                    rng = np.random.default_rng([case, count, rank])
                    if dtype.kind == "f":
                        return (1 + rng.standard_normal(count) * 0.01).astype(dtype)
                    info = np.iinfo(dtype)  # the whole range: sums wrap
                    return rng.integers(info.min, info.max, count, dtype=dtype, endpoint=True)
                inputs = [mine(r) for r in range(n)]
                want = folds.fold(op, inputs, plan)
                got = comm.allreduce(inputs[me], op)
                assert got.tobytes() == want.tobytes(), (dtype, op, count, "allreduce")
                assert comm.allreduce(inputs[me], op, algorithm="flat").tobytes() == want.tobytes()
                for root in sorted({0, n - 1}):
                    red = comm.reduce(inputs[me], op, root=root)
                    assert (red.tobytes() == want.tobytes()) if me == root else red is None, (dtype, op, root)
                    assert comm.bcast(inputs[me], root=root).tobytes() == inputs[root].tobytes()
        if comm.nnodes > 1:
            assert levels.levelled_calls(comm) == 0
