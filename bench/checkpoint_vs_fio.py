"""Checkpoint engine throughput vs fio on the same directory, measured interleaved in one run.
Prints GiB/s of each side per round, the medians and the ratios ours/fio (1.0 = as fast as fio).

    .venv/bin/python bench/checkpoint_vs_fio.py [--dir DIR] [--block-size BYTES] [--rounds 3]
        [--o-direct] [--json FILE]

Each round, every side into fresh files of a fresh directory, `sync` before each write so no side
inherits another's dirty pages, the page cache dropped before each read; the order of the sides
turns by one each round, so none always follows the same neighbour (the disk is mounted with
`discard`: the side before has just deleted a GiB, and the page cache it dropped is still free):

- ours: `mpirun -np 2 --bind-to none` engine, launched as `mlpstorage` launches it (ranks not
  pinned to cores: a pinned rank waits for its core while the other core idles), a ~1 GiB llama-shaped checkpoint (ZeRO-3: 2 files per rank of
  the layout's exact sizes), one checkpoint written then read; the figure as published (rank
  0's GiB over its duration, which ends after every rank's fsyncs).
- twin: fio doing the same work: one job per file, a rank's second file started when its first
  ends (`wait_for`), the same block size per syscall (psync), the same fsync points (each file
  on close), no preallocation (`fallocate=none`, files created by the job); the rank's time is
  the sum of its jobs' runtimes, GiB/s = its bytes (each file rounded down to whole blocks) /
  the slowest rank's time. Read back likewise after the drop. With --o-direct both sides use
  O_DIRECT. What fio cannot do is drop pages behind it, so buffered, the twin keeps them.
- plain: the disk reference the issue names: fio, 1 MiB blocks, one job per rank writing one
  file of the rank's bytes with end_fsync (fio defaults otherwise), then reading it back.

fio keeps every page it moved in the page cache, so each of its runs takes a GiB of pages from
free memory; ours drops pages behind it and reuses them (storage/posix.py). On a VM whose
balloon reports free memory to the host, fio's figure therefore depends on whether the memory it
gets was freed just before (by the side before it) or already returned to the host (a host fault
per page): its write and read swing by 2-3x with the order, and ours can exceed it.
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
from collections.abc import Callable
from pathlib import Path

from mlpstorage_py.checkpoint.engine import FILE_BLOCK_SIZE
from mlpstorage_py.checkpoint.shards import GIB, Layout, build_layout
from mlpstorage_py.storage import drop_page_cache

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
RANKS = 2
PLAIN_BLOCK = 1 << 20
WORKLOAD = {
    "model": {"name": "llama_1gib", "num_layers": 4, "model_datatype": "fp16", "optimizer_datatype": "fp32",
              "parallelism": {"tensor": 1, "pipeline": 1, "zero_stage": 3},
              "transformer": {"vocab_size": 16000, "hidden_size": 1024, "ffn_hidden_size": 2816,
                              "num_attention_heads": 16, "num_kv_heads": 4}},
    "checkpoint": {"time_between_checkpoints": 0, "fsync": True},
}


def run_engine(root: Path, block: int, direct: bool) -> tuple[float, float, dict]:
    """One checkpoint written then read; (save GiB/s, load GiB/s) as published, and the engine record."""
    spec = root / "workload.json"
    spec.write_text(json.dumps(WORKLOAD), encoding="utf-8")
    out = root / "engine_out"
    env = os.environ | {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    os.sync()
    subprocess.run([str(BIN / "mpirun"), "-np", str(RANKS), "--bind-to", "none", str(BIN / "python"), "-m", "mlpstorage_py.checkpoint.engine",
                    "--workload", str(spec), "--checkpoint-folder", str(root / "engine_ckpt"), "--output-dir", str(out),
                    "--num-write", "1", "--num-read", "1", "--block-size", str(block), *(["--o-direct"] if direct else [])],
                   check=True, cwd=root, env=env, stdout=subprocess.DEVNULL)
    summary = json.loads((out / "summary.json").read_text())
    metric = summary["metric"]
    shutil.rmtree(root / "engine_ckpt")
    return (metric["save_checkpoint_io_mean_GB_per_second"], metric["load_checkpoint_io_mean_GB_per_second"],
            summary["checkpoint_engine"])


def fio(rw: str, jobs: list[tuple[str, Path, int, str | None]], options: list[str]) -> dict[str, float]:
    """One fio run; jobs are (name, file, bytes, job to wait for). Returns seconds per job."""
    cmd = ["fio", "--output-format=json", "--ioengine=psync", f"--rw={rw}", *options]
    for name, path, size, after in jobs:
        cmd += [f"--name={name}", f"--filename={path}", f"--size={size}", *([f"--wait_for={after}"] if after else [])]
    result = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)["jobs"]
    moved = sum(j[rw]["io_bytes"] for j in result)
    if moved != sum(size for _, _, size, _ in jobs):
        raise RuntimeError(f"fio {rw} moved {moved} bytes, expected {sum(size for _, _, size, _ in jobs)}")
    return {j["jobname"]: j["job_runtime"] / 1000 for j in result}


def twin(root: Path, layout: Layout, block: int, direct: bool) -> tuple[float, float]:
    """fio doing the engine's work: its files, sizes, block size, fsync points and file order."""
    root.mkdir()
    jobs = []
    for rank in range(RANKS):
        previous = None
        for index, f in enumerate(layout.files(rank)):
            name = f"r{rank}f{index}"
            # fio moves whole blocks: each file's bytes rounded down to the block size
            jobs.append((name, root / f.name.replace("/", "_"), f.nbytes // block * block, previous))
            previous = name
    options = [f"--bs={block}", f"--direct={int(direct)}", "--fallocate=none", "--create_on_open=1"]
    rates = []
    for rw in ("write", "read"):
        if rw == "write":
            os.sync()
        elif not drop_page_cache():
            sys.exit("the page cache cannot be dropped (needs root): the read figures would be cache figures")
        seconds = fio(rw, jobs, options + (["--fsync_on_close=1"] if rw == "write" else []))
        per_rank = [sum(t for name, t in seconds.items() if name.startswith(f"r{r}f")) for r in range(RANKS)]
        rates.append(sum(size for _, _, size, _ in jobs) / GIB / max(per_rank))
    shutil.rmtree(root)
    return rates[0], rates[1]


def plain(root: Path, layout: Layout) -> tuple[float, float]:
    """fio with 1 MiB blocks, one file per rank, end_fsync: the disk's plain sequential figure."""
    root.mkdir()
    sizes = [layout.rank_bytes(r) // PLAIN_BLOCK * PLAIN_BLOCK for r in range(RANKS)]
    jobs = [(f"rank{r}", root / f"rank{r}.dat", sizes[r], None) for r in range(RANKS)]
    os.sync()
    wrote = fio("write", jobs, [f"--bs={PLAIN_BLOCK}", "--end_fsync=1"])
    if not drop_page_cache():
        sys.exit("the page cache cannot be dropped (needs root): the read figures would be cache figures")
    read = fio("read", jobs, [f"--bs={PLAIN_BLOCK}"])
    shutil.rmtree(root)
    return sum(sizes) / GIB / max(wrote.values()), sum(sizes) / GIB / max(read.values())


def measure(base: Path, block: int, rounds: int, direct: bool) -> dict:
    """Interleaved rounds (ours, twin, plain, the order turned by one each round); medians and ratios."""
    layout = build_layout(WORKLOAD, RANKS)
    runs: dict[str, list[float]] = {k: [] for k in ("ours_write", "ours_read", "twin_write", "twin_read",
                                                   "plain_write", "plain_read")}
    engine: dict = {}
    with tempfile.TemporaryDirectory(dir=base, prefix="ckpt-vs-fio-") as tmp:
        root = Path(tmp)
        print(f"directory {root}; checkpoint {layout.total_bytes} B = {layout.total_gib:.3f} GiB on {RANKS} ranks, "
              f"{sum(len(layout.files(r)) for r in range(RANKS))} files; block size {block}; O_DIRECT {direct}; "
              f"{rounds} interleaved rounds", flush=True)

        def ours(index: int) -> tuple[float, float]:
            save, load, record = run_engine(root, block, direct)
            engine.update(record)
            return save, load

        sides: dict[str, Callable[[int], tuple[float, float]]] = {
            "ours": ours,
            "twin": lambda index: twin(root / f"twin{index}", layout, block, direct),
            "plain": lambda index: plain(root / f"plain{index}", layout),
        }
        names = list(sides)
        for index in range(rounds):
            order = names[index % len(names):] + names[:index % len(names)]
            got = {name: sides[name](index) for name in order}
            for name, (wrote, read) in got.items():
                runs[f"{name}_write"].append(wrote)
                runs[f"{name}_read"].append(read)
            print(f"round {index + 1} ({', '.join(order)}): write ours {got['ours'][0]:.3f} twin {got['twin'][0]:.3f} "
                  f"plain {got['plain'][0]:.3f}; read ours {got['ours'][1]:.3f} twin {got['twin'][1]:.3f} "
                  f"plain {got['plain'][1]:.3f} GiB/s", flush=True)
    med = {k: statistics.median(v) for k, v in runs.items()}
    ratios = {f"{phase}_vs_{ref}": med[f"ours_{phase}"] / med[f"{ref}_{phase}"]
              for phase in ("write", "read") for ref in ("twin", "plain")}
    return {"block_size": block, "o_direct": direct, "engine": {k: engine.get(k) for k in ("direct_io", "durability",
            "cache_policy_applied", "page_cache_behind")}, "runs": runs, "medians": med, "ratios": ratios}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, help="where every side writes (default: a temp dir under /work)")
    parser.add_argument("--block-size", type=int, default=FILE_BLOCK_SIZE,
                        help="ours and the twin's bytes per syscall (default: the engine's for files)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (medians are reported)")
    parser.add_argument("--o-direct", action="store_true", help="both ours and the twin with O_DIRECT")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON here")
    opts = parser.parse_args()
    if not shutil.which("fio"):
        sys.exit("fio not found: apt-get update && apt-get install -y fio")
    result = measure(opts.dir or REPO.parent, opts.block_size, opts.rounds, opts.o_direct)
    med, ratios = result["medians"], result["ratios"]
    print(f"engine: {result['engine']}")
    print(f"{'phase':6} {'ours':>7} {'twin':>7} {'plain':>7}   ours/twin ours/plain   (GiB/s, medians)")
    for phase in ("write", "read"):
        print(f"{phase:6} {med[f'ours_{phase}']:7.3f} {med[f'twin_{phase}']:7.3f} {med[f'plain_{phase}']:7.3f}   "
              f"{ratios[f'{phase}_vs_twin']:9.3f} {ratios[f'{phase}_vs_plain']:10.3f}")
    if opts.json:
        opts.json.write_text(json.dumps(result, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
