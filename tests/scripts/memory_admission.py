"""Memory admission (issue 10), run by tests/test_agreement.py inside a
memory cgroup: a window larger than the memory the cgroup allows must fail
with ShmtopoMemoryError on every rank, not bring in the OOM killer.

    memory_admission.py one NBYTES BACKEND   one rank (Comm.from_callbacks)
    memory_admission.py two NBYTES BACKEND   two processes (tests/ranks.py), NBYTES each

It prints "ready PID" and waits for a line on stdin: the test moves it into
the cgroup in between. Then one line "RESULT {json}" per rank, and
"pid PID" before each rank allocates (the test removes what a killed rank
leaves in /dev/shm).
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def say(line: str) -> None:
    """One write per line: two ranks share this stdout."""
    os.write(1, (line + "\n").encode())


def allocate(comm, nbytes, backend):
    import shmtopo

    say(f"pid {os.getpid()}")
    try:
        win = comm.allocate(nbytes, backend=backend)
    except BaseException as exc:  # noqa: BLE001 - reported
        result = {"rank": comm.rank, "cls": type(exc).__name__, "msg": str(exc),
                  "shmtopo": isinstance(exc, shmtopo.ShmtopoError)}
    else:
        result = {"rank": comm.rank, "cls": None, "msg": f"allocated {win.nbytes} bytes"}
        win.free()
    say("RESULT " + json.dumps(result))
    return result


def main():
    mode, nbytes, backend = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    print(f"ready {os.getpid()}", flush=True)
    sys.stdin.readline()
    if mode == "one":
        import shmtopo

        comm = shmtopo.Comm.from_callbacks(1, 0, allgather=lambda s, r: r.__setitem__(slice(None), s),
                                           barrier=lambda: None)
        allocate(comm, nbytes, backend)
        comm.free()
    else:
        import ranks

        ranks.TIMEOUT = 5.0  # a rank the OOM killer took must not keep the other waiting long
        out = ranks.run(2, allocate, nbytes, backend, timeout=20)
        print("SUMMARY " + json.dumps({str(r): v[0] for r, v in out.items()}), flush=True)


if __name__ == "__main__":
    main()
