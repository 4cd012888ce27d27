"""Fault, fuzz and bad-input figures (issue 15): runs the suites at bench size and prints

    faults injected / survived, fuzz cases / crashes (and findings per mutation kind),
    bad inputs tried / clean errors

from the figure lines each test records (tests/fault_figures.py). Bench size: every signal
variant (MLPS_FAULTS_FULL=1), 10,000 fuzz cases (MLPS_FUZZ_CASES), every mode's copy of every
flag (MLPS_BAD_INPUT_FULL=1). --ci runs the sizes CI runs.

    .venv/bin/python bench/faults.py [--ci] [--fuzz-cases N] [pytest args...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SUITES = ["tests/test_faults_checkpointing.py", "tests/test_faults_object.py", "tests/test_faults_vectordb.py", "tests/test_faults_kvcache.py", "tests/test_faults_training.py",
          "tests/test_faults_tree.py", "tests/test_fuzz_checker.py", "tests/test_cli_bad_input.py"]


def summarize(lines: list[dict]) -> str:
    totals: dict[str, Counter] = defaultdict(Counter)
    per_kind: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for line in lines:
        totals[line["kind"]]["tried"] += line["tried"]
        totals[line["kind"]]["clean"] += line["clean"]
        for kind, ratio in (line.get("reported_per_kind") or {}).items():
            reported, cases = (int(x) for x in ratio.split("/"))
            per_kind[kind][0] += reported
            per_kind[kind][1] += cases
    fault, fuzz, bad = totals["fault"], totals["fuzz"], totals["bad-input"]
    out = [f"faults injected {fault['tried']}, survived {fault['clean']}",
           f"fuzz cases {fuzz['tried']}, crashes {fuzz['tried'] - fuzz['clean']} (goal 0)",
           f"bad inputs tried {bad['tried']}, clean errors {bad['clean']}"]
    if per_kind:
        out.append("fuzz findings per mutation kind (cases reported as a new finding / cases):")
        out.extend(f"  {kind:<14} {reported}/{cases}" for kind, (reported, cases) in sorted(per_kind.items()))
    out.append("per fault:")
    out.extend(f"  {line.get('benchmark', '?'):<14} {line.get('fault', '?'):<34} {line['clean']}/{line['tried']} "
               f"in {line.get('seconds', '?')} s" for line in lines if line["kind"] == "fault")
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ci", action="store_true", help="the sizes CI runs (a few hundred fuzz cases, one signal each)")
    parser.add_argument("--fuzz-cases", type=int, default=10000, help="fuzz cases in all (bench size 10,000)")
    args, pytest_args = parser.parse_known_args()
    with tempfile.NamedTemporaryFile("r", suffix=".jsonl") as figures:
        env = dict(os.environ, MLPS_FIGURES=figures.name)
        if not args.ci:
            env.update(MLPS_FAULTS_FULL="1", MLPS_BAD_INPUT_FULL="1", MLPS_FUZZ_CASES=str(args.fuzz_cases))
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *SUITES, *pytest_args],
                              cwd=REPO, env=env)
        lines = [json.loads(line) for line in figures.read().splitlines() if line.strip()]
    print(f"\n== faults, fuzz and bad input ({'CI' if args.ci else 'bench'} size, {time.monotonic() - started:.0f} s, "
          f"pytest exit {done.returncode}) ==")
    print(summarize(lines))
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
