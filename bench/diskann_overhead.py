"""Our DiskANN query run against a bare diskannpy loop over the same index and queries, in
interleaved rounds (the order turned each round): queries/s of both and the ratio ours/bare
(goal >= 0.98; 1.0 = no harness overhead), and the device bytes per query against what the
graph degree and beam width imply.

    .venv/bin/python bench/diskann_overhead.py [--num-vectors 50000] [--dimension 64] [--queries 2000]
        [--search-list 64] [--beam-width 4] [--rounds 5] [--dir DIR]

The index is built once by `mlpstorage open vectordb DISKANN datagen --vdb-engine diskann`, on an
ext4 loop device of its own as root (so its counters see only the index's reads), else under
--dir / a temporary directory on the real disk. Ours: `... run --queries Q -np 1` (one MPI rank,
QPS over its timed window, from summary.json). Bare: bench/diskann_bare.py, one process that
opens the same index as a rank does and times a plain `index.search` loop over the same queries,
search_list and beam width. Each figure is the median of the rounds with
min-max and IQR; a verdict is given only while the machine's others' load (tasks outside this
bench's tree, runnable or in D, sampled each second: trace_replay.OthersLoad) stays <= 0.75 x
cores, else "no verdict: load X".

Device bytes per query: the run's device_read_bytes_per_query against search_list x
ceil(node bytes / 4 KiB) x 4 KiB (every expanded node one sector read; the beam width sets the
rounds, not the count), as a ratio; measured only where the index has a device of its own.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
REPO = BENCH.parent
BIN = Path(sys.executable).parent
LOAD_PER_CORE = 0.75

from trace_replay import OthersLoad, own_disk


def mlps(args: list[str], env: dict[str, str]) -> None:
    done = subprocess.run([str(BIN / "mlpstorage"), *args], env=env, cwd=REPO, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        sys.exit(f"mlpstorage {' '.join(args[:5])} exited {done.returncode}: {done.stderr.strip()[-1500:]}")


def newest(results: Path, command: str) -> dict:
    found = sorted(results.glob(f"open/Org/results/bench/vector_database/diskann/DISKANN/{command}/*/summary.json"))
    return json.loads(found[-1].read_text())


def bare(index_dir: Path, load: dict, opts: argparse.Namespace) -> float:
    """The bare loop (bench/diskann_bare.py) as its own process, over the same index and queries."""
    argv = [sys.executable, str(BENCH / "diskann_bare.py"), str(index_dir), str(load["seed"]), load["distribution"],
            str(opts.dimension), str(opts.query_vectors), str(opts.queries), str(opts.search_list), str(opts.beam_width)]
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    # DiskANN prints its own lines on stdout too
    return json.loads(next(line for line in done.stdout.splitlines() if line.startswith("BARE "))[5:])["qps"]


def stats(values: list[float]) -> str:
    q = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    return (f"median {statistics.median(values):.3f} (min-max {min(values):.3f}-{max(values):.3f}, "
            f"IQR {q[0]:.3f}-{q[2]:.3f}, {len(values)} rounds)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--num-vectors", type=int, default=50_000)
    ap.add_argument("--dimension", type=int, default=64)
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument("--query-vectors", type=int, default=1000)
    ap.add_argument("--search-list", type=int, default=64)
    ap.add_argument("--beam-width", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--dir", help="work directory (default: a temporary one, removed afterwards)")
    opts = ap.parse_args()
    work = Path(opts.dir or tempfile.mkdtemp(prefix="diskann-bench-", dir=str(REPO / "build")
                                             if (REPO / "build").is_dir() else None))
    work.mkdir(parents=True, exist_ok=True)
    results = work / "results"
    env = os.environ | {"XDG_CONFIG_HOME": str(work / "xdg"), "MLPSTORAGE_SYSTEMNAME": "bench"}
    try:
        return rounds(opts, work, results, env)
    finally:
        if not opts.dir:
            shutil.rmtree(work, ignore_errors=True)


def rounds(opts: argparse.Namespace, work: Path, results: Path, env: dict[str, str]) -> int:
    """The index, once; then the interleaved rounds and the figures."""
    subprocess.run([str(BIN / "mlpstorage"), "init", "Org", str(results)], check=True, env=env, stdout=subprocess.DEVNULL)
    own = os.geteuid() == 0
    with (own_disk(work, 1) if own else contextlib.nullcontext(work)) as disk:
        store = disk / "vdb"
        store.mkdir(exist_ok=True)
        common = ["--num-vectors", str(opts.num_vectors), "--dimension", str(opts.dimension), "--vdb-engine", "diskann",
                  "--storage-root", str(store), "-rd", str(results)]
        mlps(["open", "vectordb", "DISKANN", "datagen", *common, "--metric-type", "L2", "--max-degree", "32",
              "--search-list-size", "64", "--force"], env)
        load = newest(results, "datagen")
        index_dir = Path(load["index_dir"])
        others = OthersLoad()
        others.start()
        ours, direct, ratios, bytes_ratio = [], [], [], []
        for r in range(opts.rounds):
            order = ("ours", "bare") if r % 2 == 0 else ("bare", "ours")
            got = {}
            for side in order:
                if side == "ours":
                    mlps(["open", "vectordb", "DISKANN", "run", *common, "--queries", str(opts.queries), "-np", "1",
                          "--num-query-vectors", str(opts.query_vectors), "--search-ef", str(opts.search_list),
                          "--beam-width", str(opts.beam_width)], env)
                    run = newest(results, "run")
                    got["ours"] = run["throughput_qps"]
                    if run.get("device_read_bytes_per_query") is not None and own:
                        bytes_ratio.append(run["device_read_bytes_per_query"] / run["expected_reads"]["bytes_per_query"])
                else:
                    got["bare"] = bare(index_dir, load, opts)
            ours.append(got["ours"])
            direct.append(got["bare"])
            ratios.append(got["ours"] / got["bare"])
            print(f"round {r + 1} ({' then '.join(order)}): queries/s ours {got['ours']:,.1f} bare {got['bare']:,.1f} "
                  f"ratio {ratios[-1]:.3f}; others' load {others.mean():.2f}", flush=True)
        others.stop()
    cores, busy = os.cpu_count() or 1, max(others.mean(), 0.0)
    verdict = ("PASS" if statistics.median(ratios) >= 0.98 else "FAIL") if busy <= LOAD_PER_CORE * cores \
        else f"no verdict: load {busy:.2f} > {LOAD_PER_CORE} x {cores} cores"
    print(f"queries/s ours {stats(ours)}; bare diskannpy {stats(direct)}")
    print(f"median ratio ours/bare {statistics.median(ratios):.3f}: {stats(ratios)}, goal >= 0.98: {verdict}")
    if bytes_ratio:
        print(f"device bytes per query / (search_list x sectors per node x 4 KiB): {stats(bytes_ratio)} "
              f"(search_list {opts.search_list}, beam width {opts.beam_width})")
    else:
        print("device bytes per query: not measured (needs root and a loop device of the index's own)")
    withheld = None if busy <= LOAD_PER_CORE * cores else verdict.removeprefix("no verdict: ")
    print("BENCH " + json.dumps({"qps_ours": statistics.median(ours), "qps_bare": statistics.median(direct),
                                 "ratio": statistics.median(ratios), "rounds": ratios, "withheld": withheld,
                                 "device_bytes_ratio": statistics.median(bytes_ratio) if bytes_ratio else None}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
