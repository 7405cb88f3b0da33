"""One agreement (issue 10): the misuse matrix.

One rank (the culprit) passes a bad or disagreeing argument, or the ranks'
environments differ, and every rank must raise the same exception (class and
message) within a bounded time, on one node and across simulated nodes; the
comm stays usable after an argument error and nothing is left in /dev/shm.
Then: orders that can never match (timeouts, no hang), ranks SIGKILLed inside
share_topology / comm creation / the first collective, memory admission
inside a memory cgroup, and misuse that must be detected (a fork child using
the parent's comm, KeyboardInterrupt in a callback, SIGINT in a fence).

The MPI cases run tests/scripts/misuse.py under mpiexec, many cases per job,
with SHMTOPO_TIMEOUT=2; a case not over on every rank after 4 s counts as a
hang: the driver's watchdog ends the job and a new job runs the cases after
it. Once a case hung with one culprit its other culprits are skipped (each
hang costs a job); MISUSE_FULL=1 runs them all. Jobs run MISUSE_JOBS (4) at a
time. Set MISUSE_REPORT=FILE to append one JSON line per case with its
verdict (tests/scripts/misuse_table.py turns them into a table).

All serial: every test starts its own mpiexec or processes.
"""
from __future__ import annotations

import importlib.util
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import shmtopo
from conftest import CLEAN_ENV, REPEATED_RUN, mpiexec_command
from values import culprits
import test_hardening
from test_hardening import DEAD_LIMIT, OOB_TIMEOUT, Ranks, shm_names_of, sysv_segments_of

OOB_LIMIT = 2 * OOB_TIMEOUT + 1.5  # a peer dying inside an out-of-band exchange (and its failure agreement)

pytestmark = pytest.mark.serial
HERE = Path(__file__).resolve().parent
DRIVER = HERE / "scripts" / "misuse.py"

# SHMTOPO_TIMEOUT in every job: a wait that cannot complete fails after this
# many seconds. A case must be over on every rank within DEADLINE seconds
# (the driver's watchdog), else it counts as a hang.
TIMEOUT = float(os.environ.get("MISUSE_TIMEOUT", "2"))
DEADLINE = float(os.environ.get("MISUSE_DEADLINE", str(2 * TIMEOUT)))
REPORT = os.environ.get("MISUSE_REPORT")
FULL = os.environ.get("MISUSE_FULL") == "1"

# (id, ranks, node_size): one node, and simulated nodes
# (the first, middle and last rank of 3 take every path 2 ranks take; a rank
# running ahead of 2 others every path it takes ahead of 3)
LAYOUTS = [("1node-3", 3, None), ("1node-4", 4, None),
           ("nodes2-4", 4, 2), ("nodes1-3", 3, 1), ("nodes2-3", 3, 2),
           ("ahead-3", 3, None)]
# The agreement is shmtopo's own (no MPI takes part). Where a run repeats the
# first (conftest.REPEATED_RUN), the smallest layouts that take each path:
# first, middle and last rank, a node of one, another node's leader, running ahead.
if REPEATED_RUN:
    LAYOUTS = [lay for lay in LAYOUTS if lay[0] in ("1node-3", "nodes1-3", "nodes2-4", "ahead-3")]
# Layouts whose id starts so run with SHMTOPO_RUN_AHEAD=1: a rank that ran
# past a failed small bcast or reduce raises it at its next call (the
# driver's usable check), and the comm is then broken on every rank.
AHEAD = "ahead-"
RUNS_AHEAD_CASES = ("bcast", "reduce")  # words of the names of cases whose calls may run ahead


def _load_driver():
    spec = importlib.util.spec_from_file_location("misuse_driver", DRIVER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CASES = _load_driver().CASES


def job_env(**extra) -> dict:
    """CLEAN_ENV without the variables these tests set, plus theirs."""
    env = {k: v for k, v in CLEAN_ENV.items()
           if not (k.startswith("SHMTOPO_") or k.startswith("KUPL_") or k.startswith("KPCCL_"))
           or k in ("SHMTOPO_MPIEXEC", "SHMTOPO_TOPO_DIR")}
    env.update(SHMTOPO_TIMEOUT=str(TIMEOUT), MISUSE_DEADLINE=str(DEADLINE))
    env.update(extra)
    return env


# ---- running jobs -------------------------------------------------------------------

def run_job(argv: list, env: dict, timeout: float):
    """Run mpiexec + argv in its own session, the ranks writing their lines
    into a fresh directory (MISUSE_OUT); on timeout kill that session
    (mpiexec and its ranks). Returns (events, stderr, returncode)."""
    out_dir = tempfile.mkdtemp(prefix="misuse-")
    # Open MPI's own shared-memory files: in there too, so that a job the
    # watchdog ended leaves none in /dev/shm
    env = dict(env, MISUSE_OUT=out_dir, OMPI_MCA_btl_vader_backing_directory=out_dir)
    try:
        proc = subprocess.Popen(mpiexec_command() + [str(a) for a in argv], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            err += f"\n[test] job killed after {timeout:.0f} s"
        try:  # ranks the watchdog ended may leave orphans in the session
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        events = []
        for name in sorted(os.listdir(out_dir)):
            if name.startswith("rank") and name.endswith(".jsonl"):
                for line in Path(out_dir, name).read_text().splitlines():
                    try:
                        events.append(json.loads(line[7:]))
                    except ValueError:
                        pass
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
    pids = {str(e["pid"]) for e in events if e.get("ev") == "hello"}
    for name in os.listdir("/dev/shm"):  # left by ranks the end of the job killed
        parts = name.split(".") if name.startswith("shmtopo.") else name.rsplit("-", 2)
        if name.startswith(("shmtopo.", "shmtopo-topo-")) and len(parts) > 2 and parts[1] in pids:
            try:
                os.unlink(f"/dev/shm/{name}")
            except OSError:
                pass
    return events, (out[-1500:] + err)[-3000:], proc.returncode


def collect(n: int, events: list, case_ids: list, err: str) -> tuple[dict, list]:
    """Results of the cases this job got through, and the ids it did not
    reach. The first case without an end line from every rank hung (or the
    job died in it)."""
    results = {}
    for i, cid in enumerate(case_ids):
        mine = [e for e in events if e.get("case") == cid]
        ends = {e["rank"]: e for e in mine if e["ev"] == "end"}
        left = [e for e in mine if e["ev"] == "leftover"]
        entry = {"ranks": ends, "leftover": left[0]["names"] if left else []}
        if len(ends) == n:
            results[cid] = entry
            continue
        hung = {e["rank"]: e for e in mine if e["ev"] == "hang"}
        started = {e["rank"] for e in mine if e["ev"] == "start"}
        for r in range(n):
            if r not in ends:
                if r in hung:
                    ends[r] = {"outcome": "hang", "phase": hung[r].get("phase")}
                else:
                    ends[r] = {"outcome": "no report", "started": r in started}
        entry["stderr"] = err[-1500:]
        results[cid] = entry
        return results, case_ids[i + 1:]
    return results, []


def run_layout(layout: tuple) -> dict:
    """Every case of the matrix for one layout, in as few jobs as hangs
    allow. After a case hangs with one culprit, its other culprits are
    skipped (each hang costs a job), unless MISUSE_FULL=1."""
    layout_id, n, node_size = layout
    env = job_env(SHMTOPO_RUN_AHEAD="1") if layout_id.startswith(AHEAD) else job_env()
    ids = []
    for name, spec in CASES.items():
        if spec["kind"] == "all":
            ids.append(f"{name}@*")
        else:
            ids += [f"{name}@{c}" for c in culprits(n, node_size)]
    results, remaining = {}, ids
    while remaining:
        argv = ["-n", n, sys.executable, DRIVER, "cases", node_size or "-"] + remaining
        events, err, rc = run_job(argv, env, timeout=30 + len(remaining) * (DEADLINE + 3))
        got, remaining = collect(n, events, remaining, err)
        if not got:  # the job never got to its first case
            raise AssertionError(f"misuse driver did not start (rc {rc}):\n{err}")
        results.update(got)
        hung = [cid for cid, entry in got.items() if "stderr" in entry]
        if hung and not FULL:
            name = hung[0].split("@")[0]
            for cid in [c for c in remaining if c.split("@")[0] == name]:
                results[cid] = {"skipped": f"not run: {hung[0]} hung"}
            remaining = [c for c in remaining if c.split("@")[0] != name]
    return results


# Jobs run MISUSE_JOBS at a time (most of a job that hangs is waiting), the
# ones the selected tests need, started when the first of them runs.
_POOL = ThreadPoolExecutor(max(1, int(os.environ.get("MISUSE_JOBS", "4"))))
_FUTURES: dict = {}


def _submit(key, fn, *args):
    if key not in _FUTURES:
        _FUTURES[key] = _POOL.submit(fn, *args)
    return _FUTURES[key]


def _env_job(item):
    """(key, function, arguments) of the env job(s) of one collected test item."""
    params = item.callspec.params
    lay, var, value = params["layout"], params["var"], params["value"]
    if item.originalname == "test_env_differs_on_one_rank":
        key = (lay[1], lay[2], var, _mismatched_value(lay, var, value))
        return ("env-group",) + key, run_env_group, key
    key = (lay[1], lay[2], var, value, params["culprit"])
    return ("env",) + key, run_env_case, key


@pytest.fixture(scope="session")
def misuse_jobs(request):
    """Starts every job the selected tests need (MISUSE_JOBS at a time)."""
    items = [i for i in request.session.items if getattr(i, "callspec", None) is not None]
    for item in items:
        if item.originalname == "test_misuse":
            lay = item.callspec.params["layout"]
            _submit(("layout", lay), run_layout, lay)
    for item in items:
        if item.originalname in ("test_env_differs_on_one_rank", "test_invalid_env"):
            key, fn, args = _env_job(item)
            _submit(key, fn, *args)
    yield lambda key, fn, *args: _submit(key, fn, *args).result()
    for future in _FUTURES.values():
        future.cancel()


# ---- judging one case -------------------------------------------------------------------

def _doubled(msg: str, width: int = 25) -> bool:
    """True when some stretch of `width` characters appears twice."""
    return any(msg.find(msg[i:i + width], i + 1) >= 0 for i in range(len(msg) - width))


def _short(rec: dict) -> str:
    if rec["outcome"] == "raised":
        return f"{rec['cls']}({rec['msg']!r}, rank={rec['exc_rank']})"
    if rec["outcome"] == "returned":
        extra = "" if rec.get("correct") is None else (" correct" if rec["correct"] else " WRONG")
        return f"returned {rec.get('value')}{extra}"
    return rec["outcome"] + (f" in {rec['phase']}" if rec.get("phase") else "")


def _ranks(rs) -> str:
    return ",".join(str(r) for r in sorted(rs))


def _is_mismatch(raised: dict) -> bool:
    return all(rec["msg"].startswith("ranks disagree") for rec in raised.values())


def judge(spec: dict, entry: dict, culprit, ws: int, broken_after: bool = False) -> tuple[str, list]:
    """(summary for the table, list of contract violations). broken_after:
    the case may leave the comm broken, if on every rank alike (a failure
    ranks ran past)."""
    ranks = entry["ranks"]
    problems = []
    hung = [r for r, rec in ranks.items() if rec["outcome"] not in ("raised", "returned")]
    raised = {r: rec for r, rec in ranks.items() if rec["outcome"] == "raised"}
    returned = {r: rec for r, rec in ranks.items() if rec["outcome"] == "returned"}
    expect = spec["expect"]
    if hung:
        others = {r: _short(rec) for r, rec in ranks.items() if r not in hung}
        summary = f"hang (ranks {_ranks(hung)})"
        problems.append(f"{summary}; the others: {others}")
        return summary, problems
    if not raised:
        wrong = [r for r, rec in returned.items() if rec.get("correct") is False]
        if expect == "value_error_or_correct" and all(rec.get("correct") for rec in returned.values()):
            summary = "pass"
        elif wrong:
            summary = f"wrong result (ranks {_ranks(wrong)})"
        else:
            summary = "no error (returned on every rank)"
            whose = {rec.get("value", {}).get("data_of_rank") if isinstance(rec.get("value"), dict) else None
                     for rec in returned.values()}
            if len(whose) == 1 and None not in whose:
                summary = f"no error: every rank returned rank {whose.pop()}'s data"
        if summary != "pass":
            problems.append(f"{summary}: " + "; ".join(f"{r}: {_short(rec)}" for r, rec in sorted(ranks.items())))
    elif returned:
        if culprit != "*" and set(raised) == {culprit}:
            summary = f"raised on culprit only ({raised[culprit]['cls']})"
        else:
            summary = f"raised on ranks {_ranks(raised)} only ({'/'.join(sorted({x['cls'] for x in raised.values()}))})"
        wrong = [r for r, rec in returned.items() if rec.get("correct") is False]
        if wrong:
            summary += f", wrong result on ranks {_ranks(wrong)}"
        problems.append(f"{summary}: " + "; ".join(f"{r}: {_short(rec)}" for r, rec in sorted(ranks.items())))
    else:
        classes = {rec["cls"] for rec in raised.values()}
        if expect == "abort":
            ok = {"ShmtopoTimeoutError", "PeerAbortedError", "ShmtopoValueError"}
            bad = {r: rec for r, rec in raised.items() if rec["cls"] not in ok}
        else:
            bad = {r: rec for r, rec in raised.items() if rec["cls"] != "ShmtopoValueError"}
        if bad:
            by_cls = {}
            for r, rec in bad.items():
                by_cls.setdefault(rec["cls"], []).append(r)
            summary = "wrong exception (" + "; ".join(f"{c} on ranks {_ranks(rs)}" for c, rs in by_cls.items()) + ")"
            problems.append(f"{summary}: " + "; ".join(f"{r}: {_short(rec)}" for r, rec in sorted(ranks.items())))
        else:
            summary = "pass"
            if expect != "abort":
                details = []
                if len(classes) > 1 or len({rec["msg"] for rec in raised.values()}) > 1:
                    details.append("messages differ")
                if culprit != "*":
                    # Two ranks that pass different valid arguments are a tie:
                    # either may be the odd one out, and the agreement blames
                    # the higher. Its own invalid argument names the culprit.
                    blamed = {culprit, 1 - culprit} if ws == 2 and _is_mismatch(raised) else {culprit}
                    if any(not any(re.search(rf"\brank {b}\b", rec["msg"]) for b in blamed)
                           for rec in raised.values()):
                        details.append(f"message lacks 'rank {culprit}'")
                    if any(rec["exc_rank"] not in blamed for rec in raised.values()):
                        details.append("exc.rank != culprit")
                for word in spec.get("mentions", ()):
                    if any(word not in rec["msg"] for rec in raised.values()):
                        details.append(f"message lacks {word!r}")
                if spec.get("usable"):
                    unusable = [r for r, rec in raised.items() if not rec.get("usable")]
                    if unusable and not (broken_after and len(unusable) == len(ranks)):
                        details.append(f"comm unusable after on ranks {_ranks(unusable)}")
                if details:
                    summary = "ShmtopoValueError everywhere, but " + ", ".join(details)
                    problems.append(f"{summary}: " + "; ".join(
                        f"{r}: {_short(rec)}" + ("" if rec.get("usable", True) else
                                                 f" [after: {rec.get('usable_detail')}]")
                        for r, rec in sorted(ranks.items())))
    slow = {r: rec["elapsed"] for r, rec in ranks.items() if rec.get("elapsed", 0) > DEADLINE}
    if slow:
        problems.append(f"slower than {DEADLINE} s: {slow}")
    if spec.get("usable") and not raised:
        unusable = [r for r, rec in returned.items() if not rec.get("usable")]
        if unusable:
            problems.append(f"comm unusable after on ranks {_ranks(unusable)}")
    if entry.get("leftover"):
        problems.append(f"left in /dev/shm: {entry['leftover']}")
        if summary == "pass":
            summary = "left names in /dev/shm"
    return summary, problems


def _record(layout_id: str, case_id: str, summary: str, problems: list) -> None:
    if not REPORT:
        return
    with open(REPORT, "a") as f:
        f.write(json.dumps({"mpi": " ".join(mpiexec_command()), "layout": layout_id, "case": case_id,
                            "summary": summary, "problems": problems}) + "\n")


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("layout", LAYOUTS, ids=[lay[0] for lay in LAYOUTS])
def test_misuse(misuse_jobs, layout, name):
    """Cases 1-9 and 12 of the issue, every culprit of the layout."""
    layout_id, n, node_size = layout
    spec = CASES[name]
    results = misuse_jobs(("layout", layout), run_layout, layout)
    failures = []
    for cid, entry in results.items():
        case_name, culprit = cid.split("@")
        if case_name != name:
            continue
        if "skipped" in entry:
            _record(layout_id, cid, "not run", [entry["skipped"]])
            failures.append(f"{cid}: {entry['skipped']}")
            continue
        culprit = "*" if culprit == "*" else int(culprit)
        summary, problems = judge(spec, entry, culprit, n,
                                  broken_after=layout_id.startswith(AHEAD) and
                                  any(word in RUNS_AHEAD_CASES for word in name.split("_")))
        _record(layout_id, cid, summary, problems)
        if problems:
            failures.append(f"{cid} ({n} ranks, node_size={node_size}): " + "\n    ".join(problems)
                            + (f"\n    job output: {entry['stderr'][-600:]}" if entry.get("stderr") else ""))
    assert not failures, "\n".join(failures)


# ---- per-rank environments (MPMD) ------------------------------------------------------

#: 10: the same variable, another value on the culprit only
MISMATCHED_ENV = [("SHMTOPO_COLL_ALGORITHM", "flat"), ("SHMTOPO_COLL_BUFFER", "8192"),
                  ("SHMTOPO_SHM_TYPE", "memfd"), ("SHMTOPO_NODE_SIZE", "2"), ("SHMTOPO_RUN_AHEAD", "1")]
#: 11: values that are invalid
INVALID_ENV = [("SHMTOPO_TIMEOUT", "nan"), ("SHMTOPO_TIMEOUT", "1e400"), ("SHMTOPO_TIMEOUT", "-1"),
               ("SHMTOPO_SPIN_NS", "-1"), ("SHMTOPO_YIELD_NS", "banana"), ("SHMTOPO_SHM_TYPE", "bogus"),
               ("SHMTOPO_NODE_SIZE", "abc"), ("SHMTOPO_NODE_SIZE", "0"), ("SHMTOPO_COLL_BUFFER", "12"),
               ("SHMTOPO_RUN_AHEAD", "yes")]
ENV_LAYOUTS = [("1node-3", 3, None), ("nodes2-4", 4, 2)]
ENV_ALL_LAYOUTS = [("1node-2", 2, None), ("nodes2-4", 4, 2)]
if REPEATED_RUN:  # every culprit position and a node boundary, at one layout
    ENV_LAYOUTS = ENV_ALL_LAYOUTS = [("nodes2-4", 4, 2)]


def run_env_case(n: int, node_size, var: str, value: str, culprit) -> dict:
    """One job: `var=value` in the environment of the culprit (of every rank
    for '*'); the layout's node size comes from SHMTOPO_NODE_SIZE on all."""
    base = {"SHMTOPO_NODE_SIZE": str(node_size)} if node_size else {}
    cid = f"{var}={value}@{culprit}"
    script = [sys.executable, DRIVER, "env", cid]
    if culprit == "*":
        argv, env = ["-n", n] + script, job_env(**{**base, var: value})
    else:
        groups = []
        if culprit > 0:
            groups.append((culprit, []))
        groups.append((1, ["env", f"{var}={value}"]))
        if n - culprit - 1 > 0:
            groups.append((n - culprit - 1, []))
        argv = []
        for count, prefix in groups:
            argv += ([":"] if argv else []) + ["-n", count] + prefix + script
        env = job_env(**base)
    events, err, rc = run_job(argv, env, timeout=DEADLINE + 25)
    got, _ = collect(n, events, [cid], err)
    return got[cid]


def run_env_group(n: int, node_size, var: str, value: str) -> dict:
    """run_env_case for every culprit in turn; after one hangs, the others
    are skipped unless MISUSE_FULL=1."""
    out = {}
    for culprit in culprits(n, node_size):
        entry = run_env_case(n, node_size, var, value, culprit)
        out[culprit] = entry
        if "stderr" in entry and not FULL:
            for other in culprits(n, node_size):
                out.setdefault(other, {"skipped": f"not run: {var}={value} on rank {culprit} hung"})
            break
    return out


def judge_env(entry: dict, var: str, value: str, culprit, invalid: bool) -> tuple[str, list]:
    ranks = entry["ranks"]
    problems = []
    hung = [r for r, rec in ranks.items() if rec["outcome"] not in ("raised", "returned")]
    raised = {r: rec for r, rec in ranks.items() if rec["outcome"] == "raised"}
    returned = {r: rec for r, rec in ranks.items() if rec["outcome"] == "returned"}

    def listing():
        return "; ".join(f"{r}: " + (_short(rec) + (f" at {rec['step']}" if rec.get("step") else ""))
                         for r, rec in sorted(ranks.items()))

    if hung:
        summary = f"hang (ranks {_ranks(hung)})"
    elif not raised:
        wrong = [r for r, rec in returned.items() if not rec.get("correct")]
        summary = f"wrong result (ranks {_ranks(wrong)})" if wrong else "no error (returned on every rank)"
    elif returned:
        steps = "/".join(sorted({rec["step"] for rec in raised.values()}))
        if culprit != "*" and set(raised) == {culprit}:
            summary = f"raised on culprit only ({raised[culprit]['cls']} at {steps})"
        else:
            summary = f"raised on ranks {_ranks(raised)} only ({'/'.join(sorted({x['cls'] for x in raised.values()}))} at {steps})"
    else:
        by_cls = {}
        for r, rec in raised.items():
            by_cls.setdefault(rec["cls"], []).append(r)
        steps = {rec["step"] for rec in raised.values()}
        if set(by_cls) != {"ShmtopoValueError"}:
            summary = "wrong exception (" + "; ".join(f"{c} on ranks {_ranks(rs)}" for c, rs in by_cls.items()) \
                + f" at {'/'.join(sorted(steps))})"
        else:
            details = []
            msgs = {rec["msg"] for rec in raised.values()}
            if len(msgs) > 1:
                details.append("messages differ")
            if len(steps) > 1:
                details.append(f"raised at different steps ({'/'.join(sorted(steps))})")
            if invalid:
                allowed = {"from_mpi", "allocate"} if var == "SHMTOPO_SHM_TYPE" else {"from_mpi"}
                if not steps <= allowed:
                    details.append(f"raised at {'/'.join(sorted(steps))}, not at {'/'.join(sorted(allowed))}")
                for m in msgs:
                    if f"{var}={value}" not in m:
                        details.append(f"message lacks '{var}={value}'")
                    if "expected" not in m:
                        details.append("message lacks 'expected'")
                    if "ckend" in m or _doubled(m):
                        details.append("garbled or doubled message")
            elif any(var not in m for m in msgs):
                details.append(f"message lacks '{var}'")
            if culprit != "*":
                if any(not re.search(rf"\brank {culprit}\b", m) for m in msgs):
                    details.append(f"message lacks 'rank {culprit}'")
                if any(rec["exc_rank"] != culprit for rec in raised.values()):
                    details.append("exc.rank != culprit")
            summary = "pass" if not details else \
                f"ShmtopoValueError at {'/'.join(sorted(steps))}, but " + ", ".join(sorted(set(details)))
    if summary != "pass":
        problems.append(f"{summary}: {listing()}" + (f"\n    stderr: {entry['stderr'][-600:]}"
                                                     if entry.get("stderr") else ""))
    return summary, problems


def _env_params():
    for lay in ENV_LAYOUTS:
        for var, value in MISMATCHED_ENV:
            yield pytest.param(lay, var, value, id=f"{lay[0]}-{var}={value}")


def _mismatched_value(layout, var, value):
    if var == "SHMTOPO_NODE_SIZE" and layout[2] == 2:
        return "1"  # the layout has 2 already
    return value


@pytest.mark.parametrize("layout,var,value", list(_env_params()))
def test_env_differs_on_one_rank(misuse_jobs, layout, var, value):
    """10: one rank's environment differs: ShmtopoValueError on every rank,
    naming the variable, at Comm.from_mpi or the first operation that
    depends on it (the same on every rank)."""
    layout_id, n, node_size = layout
    value = _mismatched_value(layout, var, value)
    failures = []
    key = (n, node_size, var, value)
    for culprit, entry in misuse_jobs(("env-group",) + key, run_env_group, *key).items():
        if "skipped" in entry:
            _record(layout_id, f"env {var}={value}@{culprit}", "not run", [entry["skipped"]])
            failures.append(entry["skipped"])
            continue
        summary, problems = judge_env(entry, var, value, culprit, invalid=False)
        _record(layout_id, f"env {var}={value}@{culprit}", summary, problems)
        failures += [f"{var}={value} on rank {culprit} only: {p}" for p in problems]
    assert not failures, "\n".join(failures)


def _invalid_params():
    for lay in ENV_ALL_LAYOUTS:
        for var, value in INVALID_ENV:
            yield pytest.param(lay, var, value, "*", id=f"{lay[0]}-{var}={value}-all")
    for lay in ENV_LAYOUTS:
        cs = culprits(lay[1], lay[2])
        for i, (var, value) in enumerate(INVALID_ENV):
            c = cs[i % len(cs)]  # every culprit position, over the values
            yield pytest.param(lay, var, value, c, id=f"{lay[0]}-{var}={value}-rank{c}")


@pytest.mark.parametrize("layout,var,value,culprit", list(_invalid_params()))
def test_invalid_env(misuse_jobs, layout, var, value, culprit):
    """11: an invalid value, on every rank or on one: Comm.from_mpi (the
    first allocation for SHMTOPO_SHM_TYPE) raises ShmtopoValueError on every
    rank; the message quotes VAR=value and says what is expected."""
    layout_id, n, node_size = layout
    key = (n, node_size, var, value, culprit)
    entry = misuse_jobs(("env",) + key, run_env_case, *key)
    summary, problems = judge_env(entry, var, value, culprit, invalid=True)
    _record(layout_id, f"env {var}={value}@{culprit}", summary, problems)
    assert not problems, "\n".join(problems)


# ---- 13. a rank SIGKILLed inside share_topology, comm creation, the first collective ----

SHMTOPO_ERRORS = {cls.__name__ for cls in vars(shmtopo).values()
                  if isinstance(cls, type) and issubclass(cls, shmtopo.ShmtopoError)}


def _arm_kill(comm, rng, mode, topo_dir=None):
    """On the victim: SIGKILL itself at the mode's moment. 'random': after a
    random delay (0-40 ms); 'file': as soon as the leader's topology file
    exists (between the leader's write and its unlink, while the ranks
    adopt); 'call:K': at the start of the K-th out-of-band callback from now
    (callbacks are used only while a comm is made)."""
    me = os.getpid()
    if mode == "random":
        delay = rng.uniform(0.0, 0.04)

        def later():
            time.sleep(delay)
            os.kill(me, signal.SIGKILL)
        threading.Thread(target=later, daemon=True).start()
    elif mode == "file":
        def watch():
            while not any(n.startswith("shmtopo-topo.") for n in os.listdir(topo_dir)):
                time.sleep(0.0002)
            os.kill(me, signal.SIGKILL)
        threading.Thread(target=watch, daemon=True).start()
    else:
        count, k = [0], int(mode.split(":")[1])
        transport = test_hardening.CALLBACKS
        inner_allgather, inner_barrier = transport.allgather, transport.barrier

        def tick():
            count[0] += 1
            if count[0] == k:
                os.kill(me, signal.SIGKILL)

        def allgather(send, recv):
            tick()
            inner_allgather(send, recv)

        def barrier():
            tick()
            inner_barrier()
        transport.allgather, transport.barrier = allgather, barrier


def _share_until_killed(comm, ready, victim, mode, topo_dir, seed):
    # A comm reads SHMTOPO_TOPO_DIR when it is made: make one after setting it.
    os.environ["SHMTOPO_TOPO_DIR"] = topo_dir
    transport = test_hardening.CALLBACKS
    comm = shmtopo.Comm.from_callbacks(comm.size, comm.rank, allgather=lambda s, r: transport.allgather(s, r),
                                       barrier=lambda: transport.barrier())
    ready.release()
    if comm.rank == victim:
        _arm_kill(comm, random.Random(seed), mode, topo_dir)
    deadline = time.monotonic() + 10
    shares = 0
    while time.monotonic() < deadline:  # until the victim's death fails a share
        topo = shmtopo.share_topology(comm)
        topo.close()
        shares += 1
    return shares


def _create_until_killed(comm, ready, victim, mode, seed):
    """Comms over the same transport, made and freed until the victim dies."""
    ready.release()
    transport = test_hardening.CALLBACKS
    if comm.rank == victim:
        _arm_kill(comm, random.Random(seed), mode)
    deadline = time.monotonic() + 10
    made = 0
    while time.monotonic() < deadline:
        c = shmtopo.Comm.from_callbacks(comm.size, comm.rank, allgather=lambda s, r: transport.allgather(s, r),
                                        barrier=lambda: transport.barrier())
        c.free()
        made += 1
    return made


def _first_collective_killed(comm, ready, victim, mode, seed):
    ready.release()
    if comm.rank == victim:
        _arm_kill(comm, random.Random(seed), mode)
    comm.barrier()  # the comm's first collective (its scratch was made with the comm)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        comm.allreduce(np.ones(4))
    return "victim never died"


def _kill_run(fn, victim, mode, seed, *args):
    """3 ranks run fn; rank `victim` kills itself. Returns the survivors'
    results, the time of death and the pids."""
    ranks = Ranks(3, fn, victim, mode, *args, seed)
    from multiprocessing.connection import wait
    try:
        ranks.wait_ready()
        died = wait([ranks.procs[victim].sentinel], timeout=20)
        died_at = time.monotonic()
    finally:
        out = ranks.finish(timeout=OOB_LIMIT + 6)
    assert died, f"the victim (rank {victim}, {mode}) never died: {out}"
    assert victim not in out, out
    problems = []
    for rank, (status, value, when) in sorted(out.items()):
        if status not in SHMTOPO_ERRORS:
            problems.append(f"rank {rank}: {status} {value!r} (wanted a shmtopo.ShmtopoError)")
        elif when - died_at > OOB_LIMIT:
            problems.append(f"rank {rank}: {status} only {when - died_at:.2f} s after the death")
    return out, problems, ranks.pids


# share_topology agrees through the comm's shared memory (no callbacks): the
# victim dies at a random moment, or while the leader's file exists (the
# leader itself, or a rank adopting from it).
KILL_SHARE = [("leader-after-write", 0, "file"), ("leader-random", 0, "random"),
              ("nonleader-random", 1, "random"), ("nonleader-after-write", 2, "file"),
              ("last-random", 2, "random")]


@pytest.mark.no_mpi
@pytest.mark.parametrize("victim,mode", [(v, m) for _, v, m in KILL_SHARE], ids=[i for i, _, _ in KILL_SHARE])
def test_sigkill_inside_share_topology(tmp_path, victim, mode):
    """13: survivors raise a ShmtopoError within a few seconds, and no
    topology file is left once they have returned (a few runs each)."""
    failures = []
    for run in range(2 if mode in ("random", "file") else 1):
        topo_dir = tmp_path / f"run{run}"
        topo_dir.mkdir()
        out, problems, pids = _kill_run(_share_until_killed, victim, mode, 1000 * run + victim, str(topo_dir))
        left = sorted(n for n in os.listdir(topo_dir) if n.startswith("shmtopo-topo."))
        if left:
            problems.append(f"left {left} in $SHMTOPO_TOPO_DIR after the survivors returned")
        for name in os.listdir(topo_dir):
            os.unlink(topo_dir / name)
        failures += [f"run {run}: {p}" for p in problems]
    assert not failures, "\n".join(failures)


# call:K: at the K-th out-of-band callback (comm creation: the records, then
# the three exchanges of the channel's allocation, each followed by the
# tiny exchange that tells whether it failed anywhere)
KILL_CREATE = [("random", 1, "random"), ("callback-1", 2, "call:1"), ("callback-2", 0, "call:2"),
               ("callback-3", 1, "call:3"), ("callback-6", 2, "call:6")]
# After creation no callback is called: the first collective is killed at
# random moments.
KILL_FIRST = [("random-0", 0, "random"), ("random-1", 1, "random"), ("random-2", 2, "random")]


@pytest.mark.no_mpi
@pytest.mark.parametrize("victim,mode", [(v, m) for _, v, m in KILL_CREATE], ids=[i for i, _, _ in KILL_CREATE])
def test_sigkill_during_comm_creation(victim, mode):
    """13: a rank dies while Comm.from_callbacks builds a comm: the others
    raise a ShmtopoError within a few seconds and leave nothing."""
    out, problems, pids = _kill_run(_create_until_killed, victim, mode, 7 + victim)
    survivors = [p for r, p in enumerate(pids) if r != victim]
    left = shm_names_of(survivors) | sysv_segments_of(survivors)
    if left:
        problems.append(f"survivors left {sorted(left)}")
    for name in shm_names_of(pids):
        os.unlink(f"/dev/shm/{name}")
    assert not problems, "\n".join(problems)


@pytest.mark.no_mpi
@pytest.mark.parametrize("victim,mode", [(v, m) for _, v, m in KILL_FIRST], ids=[i for i, _, _ in KILL_FIRST])
def test_sigkill_during_first_collective(victim, mode):
    """13: a rank dies inside the comm's first collectives: the others raise
    a ShmtopoError within a few seconds."""
    out, problems, pids = _kill_run(_first_collective_killed, victim, mode, 11 + victim)
    survivors = [p for r, p in enumerate(pids) if r != victim]
    left = shm_names_of(survivors) | sysv_segments_of(survivors)
    if left:
        problems.append(f"survivors left {sorted(left)}")
    for name in shm_names_of(pids):  # the victim's own name: the known gap of test_hardening
        os.unlink(f"/dev/shm/{name}")
    assert not problems, "\n".join(problems)


# ---- 14. memory admission inside a memory cgroup -----------------------------------------

CGROUP_LIMIT = 256 << 20


def _own_cgroup(controller: str | None) -> str:
    """This process's cgroup path in the v1 hierarchy of `controller` (None: v2)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if (controller is None and controllers == "") or controller in controllers.split(","):
            return path
    return "/"


def _cgroup_candidates():
    """(directory to create the cgroup in, version) to try, nested in our
    own cgroup first."""
    mounts = [line.split() for line in Path("/proc/self/mounts").read_text().splitlines()]
    for fields in mounts:
        if fields[2] == "cgroup" and "memory" in fields[3].split(","):
            own = _own_cgroup("memory").lstrip("/")
            for parent in ([os.path.join(fields[1], own)] if own else []) + [fields[1]]:
                yield parent, 1
    for fields in mounts:
        if fields[2] == "cgroup2":
            own = _own_cgroup(None).lstrip("/")
            for parent in ([os.path.join(fields[1], own)] if own else []) + [fields[1]]:
                yield parent, 2


class MemoryCgroup:
    """A memory cgroup of our own with a hard limit and no swap; removed on exit."""

    def __init__(self, limit: int):
        self.path = None
        errors = []
        for parent, version in _cgroup_candidates():
            path = os.path.join(parent, f"shmtopo-agreement-{os.getpid()}-{uuid.uuid4().hex[:8]}")
            try:
                if version == 2:
                    controllers = Path(parent, "cgroup.controllers").read_text().split()
                    if "memory" not in controllers:
                        raise OSError(f"no memory controller in {parent}")
                    if "memory" not in Path(parent, "cgroup.subtree_control").read_text().split():
                        Path(parent, "cgroup.subtree_control").write_text("+memory")
                os.mkdir(path)
            except OSError as exc:
                errors.append(f"{parent}: {exc}")
                continue
            self.path, self.version = path, version
            try:
                if version == 1:
                    Path(path, "memory.limit_in_bytes").write_text(str(limit))
                    if Path(path, "memory.memsw.limit_in_bytes").exists():
                        Path(path, "memory.memsw.limit_in_bytes").write_text(str(limit))
                else:
                    Path(path, "memory.max").write_text(str(limit))
                    if Path(path, "memory.swap.max").exists():
                        Path(path, "memory.swap.max").write_text("0")
            except OSError as exc:
                self.remove()
                errors.append(f"{path}: {exc}")
                continue
            return
        pytest.skip("no writable memory cgroup: " + "; ".join(errors))

    def add(self, pid: int) -> None:
        Path(self.path, "cgroup.procs").write_text(str(pid))

    def oom_kills(self) -> str:
        try:
            if self.version == 1:
                return Path(self.path, "memory.oom_control").read_text().replace("\n", " ")
            return Path(self.path, "memory.events").read_text().replace("\n", " ")
        except OSError:
            return "?"

    def remove(self) -> None:
        if self.path is None:
            return
        for _ in range(100):  # only processes this test started can be in it
            try:
                pids = [int(p) for p in Path(self.path, "cgroup.procs").read_text().split()]
            except OSError:
                pids = []
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                os.rmdir(self.path)
                self.path = None
                return
            except OSError:
                time.sleep(0.1)
        raise AssertionError(f"could not remove the cgroup {self.path}")


@pytest.mark.no_mpi
@pytest.mark.parametrize("mode,nbytes", [("one", 1 << 30), ("two", 512 << 20)], ids=["1-rank-1GiB", "2-ranks-512MiB"])
def test_window_beyond_memory_limit_raises_memory_error(mode, nbytes):
    """14: in a 256 MiB memory cgroup, a window of 1 GiB in all fails with
    ShmtopoMemoryError on every rank instead of the OOM killer."""
    script = HERE / "scripts" / "memory_admission.py"
    cgroup = MemoryCgroup(CGROUP_LIMIT)
    out, err, left = "", "", set()
    try:
        proc = subprocess.Popen([sys.executable, script, mode, str(nbytes), "posix"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=job_env(), start_new_session=True)
        try:
            first = proc.stdout.readline().split()
            assert first[:1] == ["ready"], first
            cgroup.add(proc.pid)
            proc.stdin.write("go\n")
            proc.stdin.flush()
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        oom = cgroup.oom_kills()
    finally:
        pids = {int(line.split()[1]) for line in out.splitlines()
                if line.startswith("pid ") and line.split()[1].isdigit()}
        left = shm_names_of(pids)
        for name in left:
            os.unlink(f"/dev/shm/{name}")
        cgroup.remove()
    results = [json.loads(line[7:]) for line in out.splitlines() if line.startswith("RESULT ")]
    want = 1 if mode == "one" else 2
    status = f"exit status {proc.returncode}, cgroup: {oom}; stdout: {out[-800:]!r}; stderr: {err[-800:]!r}"
    assert len(results) == want, f"{want - len(results)} rank(s) reported nothing (OOM-killed?): {status}"
    for r in results:
        assert r["cls"] == "ShmtopoMemoryError", f"rank {r['rank']}: {r['cls']} {r['msg']!r}; {status}"
    assert not left, f"left in /dev/shm: {sorted(left)}"


# ---- 15. misuse that must be detected ------------------------------------------------------

def _fork_child_uses_comm(comm, ready, what):
    """Rank 0 forks; the child calls `what` on the parent's comm/window and
    reports; then the parent and rank 1 go on as if nothing happened."""
    os.environ["SHMTOPO_TIMEOUT"] = "3"  # read when the scratch window is made
    win = comm.allocate(shape=(4,), dtype=np.float64, timeout=3)
    comm.allreduce(np.ones(3))  # the scratch window exists before the fork
    ready.release()
    if comm.rank == 1:
        if what == "fence":
            win.fence()
            seen = float(win.query(0)[0])  # the parent stores 42 before its fence
            got = comm.allreduce(np.ones(3))
        else:
            got = comm.allreduce(np.ones(3))  # the parent contributes 2
            win.fence()
            seen = float(win.query(0)[0])
        win.free()
        return {"seen": seen, "sum": got.tolist()}
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        t0 = time.monotonic()
        try:
            if what == "fence":
                win.fence()
            else:
                comm.allreduce(np.full(3, 100.0))
            report = {"cls": None}
        except BaseException as exc:  # noqa: BLE001
            report = {"cls": type(exc).__name__, "shmtopo": isinstance(exc, shmtopo.ShmtopoError),
                      "timeout": isinstance(exc, TimeoutError), "msg": str(exc)}
        report["elapsed"] = time.monotonic() - t0
        os.write(w, json.dumps(report).encode())
        os._exit(0)
    os.close(w)
    deadline = time.monotonic() + 8
    while os.waitpid(pid, os.WNOHANG) == (0, 0):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            break
        time.sleep(0.01)
    raw = os.read(r, 65536)
    os.close(r)
    child = json.loads(raw) if raw else {"cls": "hang (killed after 8 s)"}
    win.local[0] = 42.0
    if what == "fence":
        win.fence()
        got = comm.allreduce(np.full(3, 2.0))
    else:
        got = comm.allreduce(np.full(3, 2.0))
        win.fence()
    win.free()
    return {"child": child, "sum": got.tolist()}


@pytest.mark.no_mpi
@pytest.mark.parametrize("what", ["fence", "allreduce"])
def test_fork_child_cannot_act_as_the_rank(what):
    """15a: a fork() child using its parent's comm gets a clear ShmtopoError
    (at once, not a timeout); the parent and its peer are unaffected."""
    ranks = Ranks(2, _fork_child_uses_comm, what)
    out = ranks.finish(timeout=30)
    assert out[0][0] == "ok" and out[1][0] == "ok", out
    child = out[0][1]["child"]
    assert child.get("shmtopo") and not child.get("timeout") and child["elapsed"] < 2.0, \
        f"the fork child's {what}: {child}"
    assert out[1][1]["seen"] == 42.0, f"rank 1 did not see the parent's store: {out[1][1]} (child: {child})"
    assert out[0][1]["sum"] == [3.0] * 3 and out[1][1]["sum"] == [3.0] * 3, (out, child)


class _Interrupt:
    """Out-of-band callbacks of a 1-rank comm that raise `exc` at `where`."""

    def __init__(self, exc, where):
        self.exc, self.where, self.armed, self.fired = exc, where, False, False

    def allgather(self, send, recv):
        if self.armed and self.where != "barrier":
            self.fired = True
            raise self.exc()
        recv[:] = send

    def barrier(self):
        if self.armed and self.where == "barrier":
            self.fired = True
            raise self.exc()


# Only comm creation calls the out-of-band callbacks (everything later runs
# through the comm's shared memory), so that is where one can raise.
@pytest.mark.no_mpi
@pytest.mark.parametrize("where", ["create"])
@pytest.mark.parametrize("exc", [KeyboardInterrupt, SystemExit])
def test_interrupt_in_callback_comes_out_unchanged(exc, where):
    """15b: KeyboardInterrupt / SystemExit raised by an out-of-band callback
    comes out of the shmtopo call as itself, not as CallbackError."""
    cb = _Interrupt(exc, "barrier" if where == "free" else "allgather")
    cb.armed = where == "create"
    comm = None
    got = None
    try:
        comm = shmtopo.Comm.from_callbacks(1, 0, allgather=cb.allgather, barrier=cb.barrier)
        cb.armed = True
        if where == "allocate":
            comm.allocate(4096)
        elif where == "first-collective":
            comm.allreduce(np.ones(3))
        elif where == "free":
            comm.free()
    except BaseException as e:  # noqa: BLE001 - the class is the point
        got = e
    finally:
        cb.armed = False
        if comm is not None and not comm.freed:
            comm.abandon()
    assert cb.fired, "the callback was never called there"
    assert type(got) is exc, f"wanted {exc.__name__}, got {type(got).__name__}: {got!r}"


def _sigint_in_fence(comm, ready):
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if comm.rank == 0:
        try:
            with comm.allocate(64, timeout=30) as win:
                ready.release()
                win.fence()  # rank 1 sleeps: only SIGINT can end this
            return ("fence returned", time.monotonic())
        except KeyboardInterrupt:
            return ("KeyboardInterrupt", time.monotonic())
    with comm.allocate(64, timeout=30) as win:
        ready.release()
        time.sleep(4.0)
        outcomes = []
        for _ in range(2):  # rank 0 posted its arrival at the first before it left
            try:
                win.fence()
                outcomes.append("returned")
            except BaseException as exc:  # noqa: BLE001
                outcomes.append(type(exc).__name__)
                break
        return outcomes


@pytest.mark.no_mpi
def test_sigint_ends_a_fence_wait():
    """15c: SIGINT to a rank waiting in a fence that cannot complete ends the
    wait with KeyboardInterrupt within ~2 s; its peer's next wait then raises
    PeerAbortedError."""
    ranks = Ranks(2, _sigint_in_fence)
    try:
        ranks.wait_ready()
        time.sleep(0.3)
        os.kill(ranks.pids[0], signal.SIGINT)
        sent = time.monotonic()
    finally:
        out = ranks.finish(timeout=20)
    status, value, _ = out[0]
    assert status == "ok" and value[0] == "KeyboardInterrupt", out
    assert value[1] - sent < 2.0, f"KeyboardInterrupt {value[1] - sent:.2f} s after SIGINT"
    status, outcomes, _ = out[1]
    assert status == "ok" and outcomes in (["PeerAbortedError"], ["returned", "PeerAbortedError"]), out


def _timing_out_allgather(send, recv):
    raise TimeoutError("the transport gave up")


@pytest.mark.no_mpi
def test_transport_timeout_is_a_shmtopo_timeout():
    """4: a transport that gives up (TimeoutError in the callback) fails the
    comm's creation with ShmtopoTimeoutError, the transport's error chained."""
    with pytest.raises(shmtopo.ShmtopoTimeoutError) as info:
        shmtopo.Comm.from_callbacks(1, 0, allgather=_timing_out_allgather, barrier=lambda: None)
    assert isinstance(info.value.__cause__, TimeoutError), repr(info.value.__cause__)


SKIP_FROM_MPI = """
import sys, time
from mpi4py import MPI
import shmtopo
if MPI.COMM_WORLD.rank == 1:
    time.sleep(4)  # never calls from_mpi in time
    print("rank 1 done", flush=True)
    sys.exit(0)
t0 = time.monotonic()
try:
    shmtopo.Comm.from_mpi(timeout=1)
except shmtopo.ShmtopoTimeoutError as exc:
    print(f"rank 0 ShmtopoTimeoutError after {time.monotonic() - t0:.1f} s: {exc}", flush=True)
"""


def test_from_mpi_waits_only_as_long_as_its_timeout(tmp_path):
    """4: Comm.from_mpi's own exchanges over MPI run under the timeout: a rank
    that never joins makes the others raise ShmtopoTimeoutError, not hang."""
    script = tmp_path / "skip.py"
    script.write_text(SKIP_FROM_MPI)
    proc = subprocess.run(mpiexec_command() + ["-n", "2", sys.executable, str(script)], capture_output=True,
                          text=True, timeout=60, env=job_env())
    line = next((x for x in proc.stdout.splitlines() if x.startswith("rank 0")), "")
    assert "ShmtopoTimeoutError" in line, proc.stdout + proc.stderr
    assert float(line.split("after ")[1].split(" s")[0]) < 3.0, line


UNCAUGHT = """
import numpy as np
from mpi4py import MPI
import shmtopo
comm = shmtopo.Comm.from_mpi(MPI.COMM_WORLD)
if comm.rank == comm.size - 1:
    raise RuntimeError("a bug on the last rank")
try:
    comm.allreduce(np.ones(3))
except shmtopo.ShmtopoError as exc:
    print(f"rank {comm.rank}: {type(exc).__name__}", flush=True)
"""


def test_uncaught_exception_on_one_rank_ends_the_others_waits(tmp_path):
    """A rank that exits by an uncaught exception leaves its open comms, so
    that peers waiting on it raise PeerAbortedError at once, instead of
    waiting for it to exit, which MPI_Finalize may hold up forever."""
    script = tmp_path / "uncaught.py"
    script.write_text(UNCAUGHT)
    proc = subprocess.run(mpiexec_command() + ["-n", "3", sys.executable, str(script)], capture_output=True,
                          text=True, timeout=60, env=job_env(SHMTOPO_TIMEOUT="0"))
    for rank in (0, 1):
        assert f"rank {rank}: PeerAbortedError" in proc.stdout, proc.stdout + proc.stderr
