"""mlpstorage's own overhead on a tiny training run: the wall time of `mlpstorage open training
unet3d run` minus the wall time of the DLIO child it launched (taken from the leaf's log), both
measured in the same run. Prints seconds and the overhead as a fraction of the total.

    .venv/bin/python bench/training_overhead.py [--runs 2]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent / "mlpstorage"
SMALL = ["dataset.record_length_bytes=262144", "dataset.record_length_bytes_stdev=0",
         "dataset.record_length_bytes_resize=0", "train.epochs=2", "train.computation_time=0.01",
         "reader.batch_size=2", "reader.read_threads=1"]


def mlpstorage(env: dict[str, str], *argv: str) -> float:
    start = time.perf_counter()
    subprocess.run([str(BIN), *argv], env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=2)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryDirectory(dir="/dev/shm") as data:
        env = dict(os.environ, XDG_CONFIG_HOME=f"{tmp}/xdg", MLPSTORAGE_SYSTEMNAME="bench")
        results = f"{tmp}/results"
        subprocess.run([str(BIN), "init", "Bench", results], env=env, check=True, stdout=subprocess.DEVNULL)
        mlpstorage(env, "open", "training", "unet3d", "datagen", "-np", "2", "-dd", data, "-aip",
                   "--params", "dataset.num_files_train=16", *SMALL)
        for _ in range(opts.runs):
            total = mlpstorage(env, "open", "training", "unet3d", "run", "-at", "b200", "-na", "2", "-cm", "1",
                               "-dd", data, "-aip", "--params", *SMALL)
            leaf = sorted(Path(results).glob("open/Bench/results/bench/training/unet3d/run/*"))[-1]
            child = float(re.search(r"DLIO: exit 0 after ([0-9.]+) s", (leaf / "mlpstorage.log").read_text()).group(1))
            print(f"mlpstorage run {total:.2f} s, DLIO child {child:.2f} s, overhead {total - child:.2f} s "
                  f"({(total - child) / total:.0%} of the wall time)")


if __name__ == "__main__":
    main()
