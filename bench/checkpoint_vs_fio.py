"""Checkpoint engine throughput vs fio on the same directory, block size and bytes, measured in the
same run. Prints GiB/s of both and the ratios ours/fio (1.0 = as fast as fio).

    .venv/bin/python bench/checkpoint_vs_fio.py [--dir DIR] [--block-size BYTES] [--count 3]

Ours: `mpirun -np 2` engine, a ~1 GiB llama-shaped checkpoint (ZeRO-3, 2 files per rank), every
file fsync'd, --count writes then --count reads after the page cache was dropped. fio: 2 jobs
(one per rank) each writing one file of that rank's bytes (rounded down to whole blocks) sequentially with buffered psync I/O
and end_fsync (fio counts the fsync in its runtime), --count times into fresh files; then the
page cache is dropped once and each set is read back. Both rates are total bytes over the
slowest job's time; ours is also shown as published (rank 0's own duration).
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

from mlpstorage_py.checkpoint.shards import GIB, build_layout
from mlpstorage_py.storage import drop_page_cache

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
RANKS = 2
WORKLOAD = {
    "model": {"name": "llama_1gib", "num_layers": 4, "model_datatype": "fp16", "optimizer_datatype": "fp32",
              "parallelism": {"tensor": 1, "pipeline": 1, "zero_stage": 3},
              "transformer": {"vocab_size": 16000, "hidden_size": 1024, "ffn_hidden_size": 2816,
                              "num_attention_heads": 16, "num_kv_heads": 4}},
    "checkpoint": {"time_between_checkpoints": 0, "fsync": True},
}


def run_engine(root: Path, block: int, count: int) -> dict[str, list[float]]:
    """Rates per checkpoint: as published (rank 0) and by the slowest rank, for save and load."""
    spec = root / "workload.json"
    spec.write_text(json.dumps(WORKLOAD), encoding="utf-8")
    out = root / "engine_out"
    env = os.environ | {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    subprocess.run([str(BIN / "mpirun"), "-np", str(RANKS), str(BIN / "python"), "-m", "mlpstorage_py.checkpoint.engine",
                    "--workload", str(spec), "--checkpoint-folder", str(root / "engine_ckpt"), "--output-dir", str(out),
                    "--num-write", str(count), "--num-read", str(count), "--block-size", str(block)],
                   check=True, cwd=root, env=env, stdout=subprocess.DEVNULL)
    stats = [json.loads((out / f"{r}_per_epoch_stats.json").read_text())["1"] for r in range(RANKS)]
    size = build_layout(WORKLOAD, RANKS).total_gib
    rates: dict[str, list[float]] = {}
    for phase in ("save", "load"):
        keys = [f"{phase}_ckpt{i}" for i in range(1, count + 1)]
        rates[f"{phase}_rank0"] = [stats[0][k]["throughput"] for k in keys]
        rates[f"{phase}_slowest"] = [size / max(s[k]["duration"] for s in stats) for k in keys]
    policy = json.loads((out / "summary.json").read_text())["checkpoint_engine"]["cache_policy_applied"]
    print(f"engine cache policy before reads: {policy}")
    return rates


def run_fio(rw: str, files: list[Path], sizes: list[int], block: int) -> float:
    """One fio run, one job per file; GiB/s = all bytes / the slowest job's runtime."""
    cmd = ["fio", "--output-format=json", "--ioengine=psync", "--direct=0", f"--rw={rw}", f"--bs={block}",
           "--end_fsync=1" if rw == "write" else "--invalidate=1"]
    for index, (path, size) in enumerate(zip(files, sizes)):
        cmd += [f"--name=rank{index}", f"--filename={path}", f"--size={size}"]
    jobs = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)["jobs"]
    moved = sum(j[rw]["io_bytes"] for j in jobs)
    if moved != sum(sizes):
        raise RuntimeError(f"fio {rw} moved {moved} bytes, expected {sum(sizes)}")
    return moved / GIB / (max(j[rw]["runtime"] for j in jobs) / 1000)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, help="where both write (default: a temp dir under /work)")
    parser.add_argument("--block-size", type=int, default=16 << 20)
    parser.add_argument("--count", type=int, default=3, help="checkpoints written and read by each side")
    opts = parser.parse_args()
    if not shutil.which("fio"):
        sys.exit("fio not found: apt-get update && apt-get install -y fio")
    base = opts.dir or REPO.parent
    with tempfile.TemporaryDirectory(dir=base, prefix="ckpt-vs-fio-") as tmp:
        root = Path(tmp)
        layout = build_layout(WORKLOAD, RANKS)
        # fio moves whole blocks only: each job gets its rank's bytes rounded down to the block size.
        sizes = [layout.rank_bytes(r) // opts.block_size * opts.block_size for r in range(RANKS)]
        print(f"directory {root}; checkpoint {layout.total_bytes} B = {layout.total_gib:.3f} GiB on {RANKS} ranks "
              f"(fio: {sum(sizes)} B); block size {opts.block_size}; {opts.count} writes + {opts.count} reads each")
        ours = run_engine(root, opts.block_size, opts.count)
        shutil.rmtree(root / "engine_ckpt")
        sets = [[root / "fio" / f"ckpt_{k}" / f"rank{r}.dat" for r in range(RANKS)] for k in range(opts.count)]
        for files in sets:
            files[0].parent.mkdir(parents=True)
        fio_write = [run_fio("write", files, sizes, opts.block_size) for files in sets]
        if not drop_page_cache():
            print("note: cannot drop the page cache (not root); fio reads rely on its invalidate=1 (fadvise)")
        fio_read = [run_fio("read", files, sizes, opts.block_size) for files in sets]

    mean = statistics.mean
    rows = [("write", ours["save_rank0"], ours["save_slowest"], fio_write),
            ("read", ours["load_rank0"], ours["load_slowest"], fio_read)]
    print(f"{'phase':6} {'ours rank0':>11} {'ours slowest':>13} {'fio':>8}   ratio ours/fio (rank0, slowest)")
    for name, rank0, slowest, fio in rows:
        print(f"{name:6} {mean(rank0):9.3f}   {mean(slowest):11.3f}   {mean(fio):6.3f}   "
              f"{mean(rank0) / mean(fio):.3f}, {mean(slowest) / mean(fio):.3f}   (GiB/s, mean of {len(fio)})")
    for name, rank0, slowest, fio in rows:
        print(f"{name} per run: ours slowest {[round(x, 3) for x in slowest]}, fio {[round(x, 3) for x in fio]}")


if __name__ == "__main__":
    main()
