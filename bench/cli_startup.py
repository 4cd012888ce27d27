"""`mlpstorage --help` and `mlpstorage version` start-up vs a bare interpreter, interleaved
(bare, help, version, bare, ...), medians of --rounds. Goal: each <= 3x `python -c pass`.

    .venv/bin/python bench/cli_startup.py [--rounds 15]

Both run the venv's interpreter the same way (the console script `mlpstorage` vs `python -c
pass`), so site start-up and the editable-install finder are in both; the difference is what the
CLI imports and builds (tests/test_cli_startup.py pins that no table or engine is loaded).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

BIN = Path(sys.executable).parent
COMMANDS = {"bare": [sys.executable, "-c", "pass"], "help": [str(BIN / "mlpstorage"), "--help"],
            "version": [str(BIN / "mlpstorage"), "version"]}


def wall(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=15)
    opts = parser.parse_args()
    for argv in COMMANDS.values():  # warm the file cache and the bytecode
        wall(argv)
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(opts.rounds):
        for name, argv in COMMANDS.items():
            times[name].append(wall(argv))
    med = {name: statistics.median(values) for name, values in times.items()}
    for name in ("help", "version"):
        print(f"mlpstorage {name}: {med[name] * 1000:.1f} ms, python -c pass {med['bare'] * 1000:.1f} ms, "
              f"ratio {med[name] / med['bare']:.2f} (median of {opts.rounds})")
    print("BENCH " + json.dumps({"medians_s": med, "ratios": {n: med[n] / med["bare"] for n in ("help", "version")}}))


if __name__ == "__main__":
    main()
