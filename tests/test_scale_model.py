"""The floor model at scale, on paper (shmtopo.scale_model): the levels it
prices are the ones the code builds, its steps cost what its docstring
says, levels win only where a boundary bounds the call, and the command
prints every machine."""
import dataclasses
import subprocess
import sys

import pytest

from shmtopo import scale_model
from shmtopo.coll.levels import structure_of
from shmtopo.scale_model import GB, MACHINES, NS, TOP, Layout, Level

# a model on paper: the same under any MPI and at any number of ranks
pytestmark = [pytest.mark.serial, pytest.mark.no_mpi, pytest.mark.unsanitized]

EPYC, KUNPENG, KNL = MACHINES
MiB = 1 << 20


def uniform(machine, exit_rate=None):
    """The machine with one set of figures at every level."""
    same = Level(100 * NS, 10 * GB, exit_rate)
    return dataclasses.replace(machine, levels={name: same for name in machine.levels})


def test_the_levels_priced_are_the_ones_the_code_builds():
    """Rank r on PU r, auto's types, the code's structure_of: what
    python -m shmtopo info prints on such a node."""
    assert Layout(EPYC, 128).structure.describe() == (
        "l3 (16 groups of 8) > numanode (8 groups of 2 l3) > package (2 groups of 4 numanode) > "
        "node (1 group of 2 package)")
    assert Layout(EPYC, 8).structure.tiers == ()       # one CCX: flat
    assert Layout(KUNPENG, 32).structure.tiers == ()    # one die
    assert Layout(KNL, 64).structure.describe() == "numanode (4 groups of 16) > node (1 group of 4 numanode)"
    # an explicit list, as SHMTOPO_COLL_LEVELS gives it: KNL's tiles
    assert Layout(KNL, 8, level_types=["l2"]).structure == structure_of([[r // 2] for r in range(8)], ["l2"])


def test_a_step_costs_the_slower_of_the_reader_and_the_boundary():
    layout = Layout(EPYC, 128)
    far = EPYC.levels[TOP]
    # rank 0 and 64 sit on two packages: one read of 1 MiB across them
    assert layout.level(0, 64) == far and layout.level(0, 1) == EPYC.levels["l3"]
    assert layout.step([(0, 64, MiB)]) == pytest.approx(far.latency + MiB / far.read)
    # 64 readers of one source on the other package: every copy leaves the
    # source's CCD, package and NUMA node; the thinnest of those exits bounds it
    many = layout.step([(0, r, MiB) for r in range(64, 128)])
    assert many == pytest.approx(64 * MiB / min(EPYC.levels[t].exit for t in ("l3", "numanode", "package")))
    # a reduction step is bounded by the kernel when it is slower than the reads
    slow = dataclasses.replace(EPYC, reduce=1 * GB)
    assert Layout(slow, 16).step([(1, 0, MiB)], reduces=True) == pytest.approx(
        EPYC.levels["l3"].latency + MiB / (1 * GB))


@pytest.mark.parametrize("op", ["bcast", "reduce", "allreduce"])
def test_levels_gain_nothing_on_a_uniform_node(op):
    """Where every pair of cores is alike and no boundary is thin, a tier is
    one more step: the model must not find a gain there."""
    for p in (16, 64, 128):
        layout = Layout(uniform(EPYC), p)
        assert layout.structure.tiers
        for n in (64 << 10, MiB, 16 * MiB):
            assert layout.levelled(op, n) >= layout.flat(op, n) * 0.999, (op, p, n)


def test_levels_win_where_the_boundary_bounds_the_call():
    """The same uniform node with thin boundaries: the flat bcast's copies
    all cross the root's package and CCD, the levelled one's once per group."""
    layout = Layout(uniform(EPYC, exit_rate=5 * GB), 128)
    assert layout.levelled("bcast", MiB) < 0.5 * layout.flat("bcast", MiB)


def test_the_chain_is_a_pipeline_of_one_stage_per_group():
    """(chunks + groups - 1) stages: an array of one chunk crosses the
    groups one after another, a smaller chunk overlaps them."""
    big, small = Layout(EPYC, 128), Layout(EPYC, 128, chunk=64 << 10)
    groups = len(big.structure.tiers[0].groups)
    assert groups == 16
    one_stage = big.chain(MiB) / groups
    assert big.chain(4 * MiB) == pytest.approx((4 + groups - 1) * one_stage)
    assert small.chain(MiB) < big.chain(MiB) / 2


def test_the_command_prints_every_machine_and_row():
    out = subprocess.run([sys.executable, "-m", "shmtopo", "scaling"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    for machine in MACHINES:
        assert f"== {machine.name}" in out.stdout
    rows = [line.split() for line in out.stdout.splitlines() if line.split()[:1] and line.split()[0] in
            scale_model.OPERATIONS]
    # 3 sizes of 3 operations and the barrier, at 5 rank counts (4 on the 64-core KNL)
    assert len(rows) == (3 * 3 + 1) * (5 + 5 + 4)
    bad = subprocess.run([sys.executable, "-m", "shmtopo", "scaling", "--chunk", "0"], capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2 and "a size in bytes must be a whole number >= 1" in bad.stderr
