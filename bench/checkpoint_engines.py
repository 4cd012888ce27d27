"""Our checkpoint engine vs the working group's DLIO (3.0.x fork) on the same directory, interleaved.
Prints save and load GiB/s of each engine per round (as each publishes them in summary.json), the
medians, and the ratios dlio/ours (1.0 = the same figure).

    .venv/bin/python bench/checkpoint_engines.py --dlio-bin-path /path/to/fork-venv/bin \\
        [--dir DIR] [--rounds 2] [--checkpoints 2] [--json FILE]

Both run through `mlpstorage open checkpointing llama3-8b run -np 2` with the same scaled-down
model shape (about 1 GiB per checkpoint), into a fresh folder below DIR each round:
- ours: `--engine mlpstorage`, one invocation writing then reading, the page cache dropped before
  the reads; incompressible data, every rank timed, the most recent checkpoints read;
- dlio: `--engine dlio`, a write invocation and a read invocation of the fork with a page-cache
  drop on the host between; the fork's own writer (zero-filled buffers, fsync per file), rank 0
  timed, the first checkpoints read.
The fork is not on PyPI: install it by hand in another environment (ManPage, DLIO ENGINES).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MLPS = Path(sys.executable).parent / "mlpstorage"
SHAPE = ["model.num_layers=4", "model.hidden_size=1024", "model.ffn_hidden_size=2816", "model.vocab_size=16000",
         "model.num_attention_heads=16", "model.num_kv_heads=4", "checkpoint.time_between_checkpoints=0"]
TIMEOUT_S = 900


def run(engine: str, folder: Path, results: Path, env: dict[str, str], checkpoints: int,
        bin_path: str) -> dict[str, float]:
    """One mlpstorage invocation; the metric of the leaf it wrote."""
    before = set(results.rglob("summary.json"))
    argv = [str(MLPS), "open", "checkpointing", "llama3-8b", "run", "-np", "2", "-at", "b200", "-cm", "1",
            "-cf", str(folder), "-ncw", str(checkpoints), "-ncr", str(checkpoints), "-sn", "bench", "-rd", str(results),
            "--params", *SHAPE, "--engine", engine]
    if engine == "dlio":
        argv += ["--dlio-bin-path", bin_path]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{engine}: mlpstorage exited {done.returncode}: {done.stderr.strip()[-500:]}")
    (summary,) = [p for p in set(results.rglob("summary.json")) - before if p.parent.parent.name == "llama3-8b"]
    return json.loads(summary.read_text(encoding="utf-8"))["metric"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dlio-bin-path", default=os.environ.get("MLPSTORAGE_DLIO_BIN_PATH"),
                        help="bin directory of the environment the fork is installed in")
    parser.add_argument("--dir", type=Path, default=Path("/var/tmp"),
                        help="where both engines write their checkpoints, a fresh folder per round (a disk: "
                             "tmpfs keeps every read in memory whatever the cache drops)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--checkpoints", type=int, default=2, help="checkpoints written and read per invocation")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if not args.dlio_bin_path:
        raise SystemExit("name the fork's environment with --dlio-bin-path (or MLPSTORAGE_DLIO_BIN_PATH)")
    work = Path(tempfile.mkdtemp(prefix="mlps-bench-engines-"))
    data = Path(tempfile.mkdtemp(prefix="mlps-bench-ckpt-", dir=args.dir))
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLPSTORAGE_")}
    env.update(XDG_CONFIG_HOME=str(work / "xdg"), OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    results = work / "results"
    subprocess.run([str(MLPS), "init", "BenchOrg", str(results)], env=env, check=True, capture_output=True, timeout=60)
    figures: dict[str, dict[str, list[float]]] = {e: {"save": [], "load": []} for e in ("mlpstorage", "dlio")}
    try:
        for round_no in range(1, args.rounds + 1):
            for engine in ("mlpstorage", "dlio"):
                folder = data / f"{engine}-{round_no}"
                folder.mkdir()
                metric = run(engine, folder, results, env, args.checkpoints, args.dlio_bin_path)
                for phase in ("save", "load"):
                    figures[engine][phase].append(metric[f"{phase}_checkpoint_io_mean_GB_per_second"])
                print(f"round {round_no} {engine:10s}: checkpoint {metric['checkpoint_size_GB']:.3f} GiB, "
                      f"save {figures[engine]['save'][-1]:.3f} GiB/s, load {figures[engine]['load'][-1]:.3f} GiB/s",
                      flush=True)
                shutil.rmtree(folder)
    finally:
        shutil.rmtree(data, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
    medians = {e: {p: statistics.median(v) for p, v in phases.items()} for e, phases in figures.items()}
    ratios = {p: medians["dlio"][p] / medians["mlpstorage"][p] for p in ("save", "load")}
    for engine, phases in medians.items():
        print(f"median {engine:10s}: save {phases['save']:.3f} GiB/s, load {phases['load']:.3f} GiB/s")
    print(f"ratio dlio/ours: save {ratios['save']:.2f}, load {ratios['load']:.2f}")
    if args.json:
        args.json.write_text(json.dumps({"rounds": figures, "medians": medians, "ratios": ratios}, indent=2),
                             encoding="utf-8")


if __name__ == "__main__":
    main()
