"""What `--trace-io` costs a checkpoint run, and how close the replay.fio of a traced run comes
to the run, in one run of this bench (issue 27). Needs root and bpftrace (else it says so and
measures nothing).

    .venv/bin/python bench/trace_replay.py [--rounds 3] [--dir DIR] [--only checkpoint kvcache training]

checkpoint: each round runs the same OPEN llama3-8b checkpoint (2 ranks, a scaled-down model of
about --layers layers, one write then one read, the folder on DIR's disk, the results tree apart
from it) untraced, then traced, then `mlpstorage replay` of that traced leaf on DIR; the figures
are the engine's own save and load GiB/s (rank 0's, as published) and the replay's write and
read. Printed: per round all three; the medians' ratios traced / untraced (goal >= 0.95, at most
5 % overhead) and replay / untraced (goal: within 15 %).

kvcache: each round a traced OPEN kvcache Option 1 run (Max Storage Stress: storage only, 2
ranks, --kv-users users each for --kv-duration s, its cache on DIR's disk), replayed on DIR: the
replay's read and write MiB/s against the original's as `mlpstorage replay` prints it beside
(the traced work's bytes over the time it issued them; goal: within 15 %, medians of the rounds),
and against the ranks' own storage bandwidth (their summed tier_storage_*_bandwidth_gbps: the
KV bytes they moved over the nominal duration; reported). A KV run paces its I/O, so its replay
offers the run's rate (fio rate=): the ratio says whether the disk kept up with that load.

training: a traced OPEN unet3d run (2 accelerators, a small dataset generated first on DIR's
disk), replayed on DIR: the replay's read MiB/s against DLIO's train_io_mean_MB_per_second
(reported, no goal).

Every part runs on a disk of its own: an ext4 on a loop device over a sparse --disk-gib image
under DIR (direct I/O to the image, so the page cache holds the data once), because on a machine
with one disk the ranks' interpreters and libraries, read after the page cache is dropped, land
on the data's device and would be its I/O too. The page cache is dropped before each run reads.

The last line is `BENCH {json}` for bench/run_all.py.
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
import time
from pathlib import Path
from typing import Iterator

REPO = Path(__file__).resolve().parents[1]
MLPSTORAGE = str(Path(sys.executable).parent / "mlpstorage")
GIB_TO_MIB = 1024.0
SETTLE_S = 5.0  # seconds after a removal before the next run or replay starts


@contextlib.contextmanager
def own_disk(base: Path, gib: int) -> Iterator[Path]:
    """An ext4 on a loop device (direct I/O to a sparse image under base), mounted for the block."""
    image, mount = base / "disk.img", base / "disk"
    with open(image, "wb") as fh:
        fh.truncate(gib << 30)
    subprocess.run(["mkfs.ext4", "-q", "-E", "lazy_itable_init=0,lazy_journal_init=0", str(image)], check=True,
                   capture_output=True)
    device = subprocess.run(["losetup", "--find", "--show", "--direct-io=on", str(image)], check=True,
                            capture_output=True, text=True).stdout.strip()
    mount.mkdir()
    try:
        subprocess.run(["mount", device, str(mount)], check=True, capture_output=True)
        try:
            yield mount
        finally:
            subprocess.run(["umount", "-l", str(mount)], capture_output=True)
    finally:
        subprocess.run(["losetup", "-d", device], capture_output=True)
        image.unlink(missing_ok=True)


def remove(path: Path) -> None:
    """Delete a run's or a replay's files and settle the disk before anything is measured: the
    journal committed and the freed blocks trimmed out of the image (fstrim), so the image never
    grows past what is on the disk at once and no discard runs under the next measurement."""
    shutil.rmtree(path, ignore_errors=True)
    os.sync()
    mount = next((p for p in path.parents if p.name == "disk"), None)
    if mount is not None and shutil.which("fstrim"):
        subprocess.run(["fstrim", str(mount)], capture_output=True)
    # This VM's balloon reports freed memory to its host about 2 s after it is freed, and a page
    # touched after that is a host fault (ManPage, Performance): every run and replay starts
    # from that settled state, so the tracer's few seconds of start-up are no handicap.
    time.sleep(SETTLE_S)


def drop_caches() -> None:
    subprocess.run(["sync"], check=True)
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def model(layers: int) -> list[str]:
    return [f"model.num_layers={layers}", "model.hidden_size=1024", "model.ffn_hidden_size=4096",
            "model.vocab_size=32768", "model.num_attention_heads=8", "model.num_kv_heads=2",
            "checkpoint.time_between_checkpoints=0"]


def run(results: Path, folder: Path, layers: int, traced: bool) -> tuple[float, float, Path]:
    """One checkpoint run: (save GiB/s, load GiB/s, its leaf)."""
    remove(folder)
    folder.mkdir(parents=True)
    argv = [MLPSTORAGE, "open", "checkpointing", "llama3-8b", "run", "-np", "2", "-at", "b200", "-cm", "8",
            "-cf", str(folder), "-sn", "bench", "-rd", str(results), "-ncw", "1", "-ncr", "1",
            "--skip-fs-separation-gate", *(["--trace-io"] if traced else []), "--params", *model(layers)]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"trace_replay: the checkpoint run failed (exit {done.returncode}): {done.stderr[-600:]}")
    leaf = max((p.parent for p in results.rglob("summary.json")), key=lambda p: p.name)
    metric = json.loads((leaf / "summary.json").read_text())["metric"]
    return metric["save_checkpoint_io_mean_GB_per_second"], metric["load_checkpoint_io_mean_GB_per_second"], leaf


def kvcache(results: Path, cache: Path, users: int, duration: int) -> tuple[float, float, Path]:
    """One traced Option 1 run: (the ranks' summed storage read, write MiB/s, its leaf)."""
    remove(cache)
    cache.mkdir(parents=True)
    argv = [MLPSTORAGE, "open", "kvcache", "run", "-np", "2", "--cache-dir", str(cache), "-rd", str(results), "-sn", "bench",
            "--option", "1", "--num-users", str(users), "--duration", str(duration), "--trials", "1",
            "--inter-option-delay", "0", "--trace-io"]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"trace_replay: the kvcache run failed (exit {done.returncode}): {done.stderr[-600:]}")
    leaf = max((p.parent for p in results.rglob("io_trace.json") if "kv_cache" in str(p)), key=lambda p: p.name)
    read = write = 0.0
    for result in leaf.rglob("kvcache_results_*.json"):
        stats = json.loads(result.read_text())["summary"]["cache_stats"]
        read += stats["tier_storage_read_bandwidth_gbps"] * GIB_TO_MIB
        write += stats["tier_storage_write_bandwidth_gbps"] * GIB_TO_MIB
    return read, write, leaf


TRAINING = ["dataset.record_length_bytes=1048576", "dataset.record_length_bytes_stdev=0",
            "dataset.record_length_bytes_resize=0", "reader.batch_size=2", "reader.read_threads=1"]


def training(results: Path, data: Path, files: int) -> tuple[float, Path]:
    """A small dataset generated, then one traced run: (DLIO's train_io_mean_MB_per_second, its leaf)."""
    remove(data)
    data.mkdir(parents=True)
    common = ["-dd", str(data), "-sn", "bench", "-rd", str(results), "-aip"]
    for argv in (["datagen", "-np", "2", *common, "--params", f"dataset.num_files_train={files}", *TRAINING],
                 ["run", "-at", "b200", "-na", "2", "-cm", "1", *common, "--trace-io", "--params",
                  f"dataset.num_files_train={files}", "train.epochs=2", "train.computation_time=0.01", *TRAINING]):
        if argv[0] == "run":
            drop_caches()  # DLIO reads the files from the disk, not from what datagen left cached
        done = subprocess.run([MLPSTORAGE, "open", "training", "unet3d", *argv], capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"trace_replay: training {argv[0]} failed (exit {done.returncode}): {done.stderr[-600:]}")
    leaf = max((p.parent for p in results.rglob("io_trace.json") if "training" in str(p)), key=lambda p: p.name)
    return float(json.loads((leaf / "summary.json").read_text())["metric"]["train_io_mean_MB_per_second"]), leaf


def replay(leaf: Path, directory: Path) -> dict:
    remove(directory)
    directory.mkdir(parents=True)
    done = subprocess.run([MLPSTORAGE, "replay", str(leaf), "--directory", str(directory)], capture_output=True, text=True)
    print(done.stdout)
    if done.returncode != 0:
        raise SystemExit(f"trace_replay: the replay failed (exit {done.returncode}): {done.stderr[-600:]}")
    return json.loads(max(leaf.glob("replay_*.json")).read_text())


def checkpoint_figures(args: argparse.Namespace, work: Path, results: Path) -> dict:
    plain: list[tuple[float, float]] = []
    traced: list[tuple[float, float]] = []
    replayed: list[tuple[float, float]] = []
    for index in range(args.rounds):
        save, load, _ = run(results, work / "ckpt", args.layers, False)
        plain.append((save, load))
        save_t, load_t, leaf = run(results, work / "ckpt", args.layers, True)
        traced.append((save_t, load_t))
        remove(work / "ckpt")  # room on the disk for the replay's files
        record = replay(leaf, work / "replay")  # each round's traced run, replayed in its round
        remove(work / "replay")
        replayed.append(tuple((record["replay"][d]["mib_s"] or 0) / GIB_TO_MIB for d in ("write", "read")))
        print(f"round {index + 1}: untraced save {save:.3f} load {load:.3f} GiB/s; traced save {save_t:.3f} "
              f"load {load_t:.3f} GiB/s; its replay write {replayed[-1][0]:.3f} read {replayed[-1][1]:.3f} GiB/s")
    med = {k: statistics.median(v[i] for v in runs) for k, runs, i in
           (("save", plain, 0), ("load", plain, 1), ("save_traced", traced, 0), ("load_traced", traced, 1),
            ("replay_write", replayed, 0), ("replay_read", replayed, 1))}
    figures = {"medians_gib_s": med,
               "overhead_ratio": {"save": med["save_traced"] / med["save"], "load": med["load_traced"] / med["load"]},
               "replay_mib_s": {"write": med["replay_write"] * GIB_TO_MIB, "read": med["replay_read"] * GIB_TO_MIB},
               "replay_ratio": {"write": med["replay_write"] / med["save"], "read": med["replay_read"] / med["load"]}}
    print(f"checkpoint traced / untraced: save {figures['overhead_ratio']['save']:.3f}, "
          f"load {figures['overhead_ratio']['load']:.3f} (goal >= 0.95)")
    print(f"checkpoint replay / run (medians): write {figures['replay_ratio']['write']:.3f}, "
          f"read {figures['replay_ratio']['read']:.3f} (goal 0.85-1.15)")
    return figures


def kvcache_figures(args: argparse.Namespace, work: Path, results: Path) -> dict:
    rounds = []
    for index in range(args.rounds):
        read, write, leaf = kvcache(results, work / "kv", args.kv_users, args.kv_duration)
        remove(work / "kv")  # room on the disk for the replay's files
        record = replay(leaf, work / "replay")
        remove(work / "replay")
        mib_s = {d: record["replay"][d]["mib_s"] or 0 for d in ("read", "write")}
        rounds.append({"run_mib_s": {"read": read, "write": write}, "replay_mib_s": mib_s,
                       "replay_ratio": {d: record["ratio"].get(f"{d}_mib_s") for d in ("read", "write")},
                       "ranks_ratio": {"read": mib_s["read"] / read if read else None,
                                       "write": mib_s["write"] / write if write else None}})
        print(f"round {index + 1}: kvcache Option 1 ranks' own read {read:.1f} write {write:.1f} MiB/s; replay "
              f"read {mib_s['read']:.1f} write {mib_s['write']:.1f} MiB/s; replay / traced run {rounds[-1]['replay_ratio']}")

    def med(key: str, d: str) -> float | None:
        values = [r[key][d] for r in rounds if r[key][d] is not None]
        return statistics.median(values) if values else None

    figures = {"rounds": rounds, "replay_ratio": {d: med("replay_ratio", d) for d in ("read", "write")},
               "ranks_ratio": {d: med("ranks_ratio", d) for d in ("read", "write")}}
    print(f"kvcache Option 1 replay / traced run (medians): read {figures['replay_ratio']['read']}, "
          f"write {figures['replay_ratio']['write']} (goal 0.85-1.15); replay / the ranks' own bandwidth: "
          f"read {figures['ranks_ratio']['read']}, write {figures['ranks_ratio']['write']} (reported)")
    return figures


def training_figures(args: argparse.Namespace, work: Path, results: Path) -> dict:
    dlio, leaf = training(results, work / "data", args.train_files)
    record = replay(leaf, work / "replay")
    read = record["replay"]["read"]["mib_s"] or 0
    print(f"training unet3d: DLIO {dlio:.1f} MiB/s, replay read {read:.1f} MiB/s, ratio {read / dlio:.3f} (reported)")
    return {"dlio_mib_s": dlio, "replay_read_mib_s": read, "replay_ratio": read / dlio if dlio else None}


PARTS = {"checkpoint": checkpoint_figures, "kvcache": kvcache_figures, "training": training_figures}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--layers", type=int, default=8, help="model layers (8: about 1 GiB per checkpoint)")
    parser.add_argument("--kv-users", type=int, default=5, help="kvcache users per rank")
    parser.add_argument("--kv-duration", type=int, default=10, help="kvcache seconds")
    parser.add_argument("--train-files", type=int, default=64, help="training files of 1 MiB")
    parser.add_argument("--only", nargs="+", choices=sorted(PARTS), default=list(PARTS))
    parser.add_argument("--dir", type=Path, help="where the disk image goes (default: under build/)")
    parser.add_argument("--disk-gib", type=int, default=40, help="the own disk's size (sparse: it takes what is written)")
    args = parser.parse_args()
    missing = [tool for tool in ("bpftrace", "mkfs.ext4", "losetup", "fio") if not shutil.which(tool)]
    if os.geteuid() != 0 or missing:
        why = "needs root" if os.geteuid() != 0 else f"needs {', '.join(missing)}"
        print(f"trace_replay: {why}; nothing measured")
        print("BENCH " + json.dumps({"skipped": why}))
        return 0
    base = args.dir or REPO / "build"
    base.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="trace-bench-", dir=base))
    results = Path(tempfile.mkdtemp(prefix="trace-bench-results-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None))
    try:
        subprocess.run([MLPSTORAGE, "init", "Bench", str(results)], check=True, capture_output=True,
                       env={**os.environ, "XDG_CONFIG_HOME": str(results / "xdg")})
        with own_disk(scratch, args.disk_gib) as work:
            figures = {name: PARTS[name](args, work, results) for name in args.only}
        print("BENCH " + json.dumps(figures))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(results, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
