"""Turn the verdicts tests/test_agreement.py wrote (MISUSE_REPORT=FILE) into
one markdown table per MPI: a row per case, a column per layout, each cell
the outcome per culprit ("0,2: hang; 1: pass"), in short words.

    python tests/scripts/misuse_table.py FILE...
"""
import json
import re
import sys
from collections import defaultdict

LAYOUT_ORDER = ["1node-2", "1node-3", "1node-4", "nodes2-4", "nodes1-3", "nodes2-3"]


def short(summary: str) -> str:
    s = summary
    if s.startswith("hang"):
        return "hang"
    if s == "not run":
        return "(skipped: earlier culprit hung)"
    s = s.replace("ShmtopoValueError everywhere, but ", "ShmtopoValueError on all, but ")
    s = re.sub(r"ShmtopoValueError at (\S+), but ", r"ShmtopoValueError on all (at \1), but ", s)
    s = re.sub(r"message lacks 'rank \d+'", "no 'rank N' in message", s)
    s = s.replace("exc.rank != culprit", "exc.rank wrong")
    s = re.sub(r"raised on ranks [\d,]+ only", "raised on some ranks only", s)
    s = re.sub(r" on ranks [\d,]+", "", s)
    s = re.sub(r"comm unusable after", "comm unusable after", s)
    return s


def main(paths):
    cells = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))  # mpi -> case -> layout -> [(c, s)]
    order = []
    for path in paths:
        for line in open(path):
            d = json.loads(line)
            case, _, culprit = d["case"].rpartition("@")
            if case not in order:
                order.append(case)
            cells[d["mpi"]][case][d["layout"]].append((culprit, short(d["summary"])))
    for mpi, rows in cells.items():
        layouts = [lay for lay in LAYOUT_ORDER if any(lay in r for r in rows.values())]
        print(f"\n### {mpi}\n")
        print("| case | " + " | ".join(layouts) + " |")
        print("|---" * (len(layouts) + 1) + "|")
        for case in order:
            if case not in rows:
                continue
            out = []
            for lay in layouts:
                by = defaultdict(list)
                for culprit, s in rows[case].get(lay, []):
                    by[s].append(culprit)
                if not by:
                    out.append("")
                elif len(by) == 1:
                    out.append(next(iter(by)))
                else:
                    out.append("; ".join(f"{','.join(cs)}: {s}" for s, cs in by.items()))
            print(f"| {case} | " + " | ".join(out) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
