"""Under mpiexec (tests/test_mpi4py_suite.py): mpi4py's own collective and
one-sided tests with every communicator and window they use replaced by
shmtopo.accelerate'd ones.

    mpi4py_suite.py TESTDIR MODULE... [--node-size N] [--timeout S] [--only WORD]
                    [--windows {accelerated,shared}]

TESTDIR is the test/ folder of mpi4py's source distribution. The modules
are imported with `from mpi4py import MPI` giving them a namespace whose
COMM_WORLD and COMM_SELF are accelerated comms and whose Win is
shmtopo.AcceleratedWin (everything else is mpi4py's MPI), so their class
attributes (COMM = MPI.COMM_WORLD), their set-ups (MPI.COMM_SELF.Dup()) and
their windows (MPI.Win.Allocate_shared(...)) are accelerated; nothing is
edited on disk. Windows of other flavours (MPI.Win.Create, ...) are
accelerated too, and hand every call to MPI; with --windows shared,
MPI.Win.Create(memory, ...) makes a shared window of memory's size
instead (test_rma and test_rma_nb touch the memory they pass only to free
it), so that their one-sided calls run in shared memory.

With SHMTOPO_ACCEL_STRICT=1 (strict: a delegation raises) the tests are
restricted to what shmtopo can move: contiguous predefined types it has,
host buffers (numpy, array.array), and no test method built on derived
datatypes or on calls it does not accelerate.

Each rank runs every test; rank 0 prints every rank's failures, then one
line "SUMMARY ran R failed F skipped S delegations D" (D: calls handed to
MPI, all ranks together). The exit status is 1 on every rank if any test
failed on any rank.
"""
import argparse
import faulthandler
import importlib
import sys
import types
import unittest

import numpy as np

import mpi4py
from mpi4py import MPI

import shmtopo
import shmtopo.accel.window

# Test methods that need what strict mode excludes: derived datatypes
# (indexed, struct), MPI.BOTTOM (AlltoallwBottom) and PSCW (not accelerated).
STRICT_EXCLUDED_METHODS = ("TypeIndexed", "AlltoallwBottom", "StartComplete", "PostWait")
# Array backends whose buffers are host memory read through the buffer
# protocol; the others (DLPack, __cuda_array_interface__) go to MPI.
STRICT_BACKENDS = ("array", "numpy")


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("testdir")
    p.add_argument("modules", nargs="+")
    p.add_argument("--node-size", type=int, default=0)
    p.add_argument("--timeout", type=float, default=60.0)
    p.add_argument("--only", default="", help="run only the tests whose id contains this")
    p.add_argument("--skip", default="", help="comma-separated words: skip the test methods whose name has one")
    p.add_argument("--windows", choices=("accelerated", "shared"), default="accelerated",
                   help="shared: MPI.Win.Create makes a shared window of the memory's size")
    p.add_argument("--watchdog", type=float, default=0.0,
                   help="dump every thread's stack and exit after this many seconds (0: never)")
    return p.parse_args()


class Accelerated(types.ModuleType):
    """mpi4py's MPI, with accelerated COMM_WORLD and COMM_SELF, and Win."""

    def __init__(self, world, self_, win):
        super().__init__("mpi4py.MPI")
        self.COMM_WORLD = world
        self.COMM_SELF = self_
        self.Win = win

    def __getattr__(self, name):
        return getattr(MPI, name)


def window_class(shared_for_create):
    """The namespace's Win: shmtopo's, whose constructors return
    accelerated windows; shared_for_create: its Create makes shared ones."""
    base = shmtopo.accel.window.accelerated_win_class(MPI.Win)
    if not shared_for_create:
        return base

    class SharedForCreate(base):
        __slots__ = ()

        @classmethod
        def Create(cls, memory, disp_unit=1, info=MPI.INFO_NULL, comm=MPI.COMM_SELF):
            size = 0 if memory is None or memory is MPI.BOTTOM else len(MPI.buffer(memory))
            win = base.Allocate_shared(size, disp_unit, info, comm)
            # zeroed, as no rank's accumulates have begun: test_rma's testAccumulate
            # asserts that no accumulated entry is -1, which holds from zeros on, not
            # from any memory (MPI's may be a freed window's, holding test_rma's -1s)
            np.frombuffer(win.tomemory(), np.uint8)[:] = 0
            comm.Barrier()
            return win

    return SharedForCreate


def import_patched(testdir, names, namespace):
    """Import the test modules (and the helpers they import) with
    `from mpi4py import MPI` bound to `namespace`."""
    sys.path.insert(0, testdir)
    mpi4py.MPI = namespace
    try:
        return [importlib.import_module(name) for name in names]
    finally:
        mpi4py.MPI = MPI  # later imports see mpi4py's own module again


def restrict_for_strict(arrayimpl, tests):
    """Only what shmtopo moves itself: typecodes of types it has, host buffers."""
    moved = set(shmtopo._types.DTYPES)

    def has(typecode):
        try:
            return np.dtype(typecode) in moved
        except TypeError:
            return False

    # the fake GPU arrays claim backend "array" or "numpy" too: tell them by their base classes
    device = tuple(getattr(arrayimpl, name) for name in ("BaseFakeGPUArray", "BaseDLPackCPU")
                   if hasattr(arrayimpl, name))
    arrayimpl.ArrayBackends[:] = [b for b in arrayimpl.ArrayBackends
                                  if b.backend in STRICT_BACKENDS and not issubclass(b, device)]
    for backend in arrayimpl.ArrayBackends:
        backend.TypeMap = {code: t for code, t in backend.TypeMap.items() if has(code)}
    kept = unittest.TestSuite()
    excluded = []
    for test in iterate(tests):
        if any(word in test._testMethodName for word in STRICT_EXCLUDED_METHODS):
            excluded.append(test.id())
        else:
            kept.addTest(test)
    return kept, excluded


def iterate(suite):
    for item in suite:
        if isinstance(item, unittest.TestSuite):
            yield from iterate(item)
        else:
            yield item


class Result(unittest.TestResult):
    """Collects outcomes, and the accelerated comms the tests used (their
    shm_stats count the delegations)."""

    def __init__(self, comms):
        super().__init__()
        self.comms = comms
        self.windows = []  # their shm_stats, taken after tearDown freed them

    def stopTest(self, test):
        comm = getattr(test, "COMM", None)  # set by setUp (Dup) or the class
        if isinstance(comm, shmtopo.AcceleratedComm):
            self.comms[id(comm)] = comm
        win = getattr(test, "WIN", None)
        if isinstance(win, shmtopo.AcceleratedWin):
            self.windows.append(win.shm_stats())
        super().stopTest(test)

    def startTest(self, test):
        super().startTest(test)
        print(f"[rank {MPI.COMM_WORLD.Get_rank()}] {test.id()}", file=sys.stderr, flush=True)


def main():
    args = parse()
    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    if args.watchdog:
        faulthandler.dump_traceback_later(args.watchdog, exit=True)
    node_size = args.node_size or None
    aworld = shmtopo.accelerate(world, node_size=node_size, timeout=args.timeout)
    aself = shmtopo.accelerate(MPI.COMM_SELF, timeout=args.timeout)
    namespace = Accelerated(aworld, aself, window_class(args.windows == "shared"))
    modules = import_patched(args.testdir, args.modules, namespace)
    tests = unittest.TestSuite(unittest.defaultTestLoader.loadTestsFromModule(m) for m in modules)
    if args.only:
        tests = unittest.TestSuite(test for test in iterate(tests) if args.only in test.id())
    if args.skip:
        words = args.skip.split(",")
        tests = unittest.TestSuite(test for test in iterate(tests)
                                   if not any(word in test._testMethodName for word in words))
    excluded = []
    if aworld.strict:
        tests, excluded = restrict_for_strict(importlib.import_module("arrayimpl"), tests)

    comms = {id(aworld): aworld, id(aself): aself}
    result = Result(comms)
    tests.run(result)

    delegated = {}
    accelerated = {}
    stats = [comm.shm_stats() for comm in comms.values()] + result.windows
    for counts in stats:
        for name, (a, d) in counts.items():
            if d:
                delegated[name] = delegated.get(name, 0) + d
            if a:
                accelerated[name] = accelerated.get(name, 0) + a
    mine = {
        "rank": rank,
        "ran": result.testsRun,
        "failed": [(t.id(), text) for t, text in result.failures + result.errors],
        "skipped": len(result.skipped),
        "delegated": delegated,
        "accelerated": accelerated,
    }
    everyone = world.gather(mine, root=0)
    failed = world.allreduce(len(mine["failed"]))
    if rank == 0:
        total, ran_here = {}, {}
        for r in everyone:
            for name, d in r["delegated"].items():
                total[name] = total.get(name, 0) + d
            for name, a in r["accelerated"].items():
                ran_here[name] = ran_here.get(name, 0) + a
            for test_id, text in r["failed"]:
                print(f"FAILED on rank {r['rank']}: {test_id}\n{text}", flush=True)
        if excluded:
            print(f"strict mode: {len(excluded)} test methods excluded (derived datatypes, MPI.BOTTOM, PSCW)")
        print("accelerated calls by operation (all ranks):", dict(sorted(ran_here.items())))
        print("delegated calls by operation (all ranks):", dict(sorted(total.items())))
        print(f"SUMMARY ran {sum(r['ran'] for r in everyone)} failed {failed} "
              f"skipped {sum(r['skipped'] for r in everyone)} delegations {sum(total.values())} "
              f"accelerations {sum(ran_here.values())}", flush=True)
    aself.shm_free()
    aworld.shm_free()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
