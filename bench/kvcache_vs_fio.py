"""kv-cache.py's storage tier vs fio: same directory, same object size, same concurrency, measured
in the same run. Prints GiB/s of both, the ratios kv-cache.py/fio (target >= 0.7), and the
simulator's CPU time per request.

    .venv/bin/python bench/kvcache_vs_fio.py [--dir DIR] [--object-mib 16] [--workers 4] [--duration 8]

kv-cache.py runs twice with one fixed request shape (a single template whose KV object is
--object-mib MiB, no think time, no prefix/multi-turn reuse, no memory tiers):
  write: --prefill-only, every request np.save + fsync's one new object;
  read:  --decode-only, the users' objects are written first (untimed), then every request
         drops one object from the page cache (POSIX_FADV_DONTNEED) and np.load's it.
Bandwidth is kv-cache.py's own tier_storage_{write,read}_bandwidth_gbps (bytes / elapsed).
fio: --workers jobs, buffered psync I/O in --fio-bs blocks (1 MiB), one file per object:
  write: each job writes its files sequentially with an fsync at each file's close;
  read:  the page cache is dropped, then one file per kv-cache.py user (the same working set) is
         read round and round for --duration seconds, fio's invalidate=1 dropping each file's
         cached pages at every open (kv-cache.py drops each object before np.load).
Rate = all bytes / the slowest job's runtime.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
KV_CACHE = REPO / "kv_cache_benchmark" / "kv-cache.py"
MODEL = "tiny-1b"
BYTES_PER_TOKEN = 12 * 4 * 128 * 2 * 2  # tiny-1b: layers x kv_heads x head_dim x (K, V) x fp16
GIB = 1 << 30


def workload_config(tokens: int) -> dict:
    fixed = {"context_tokens": [tokens, tokens], "generation_tokens": [1, 1], "think_time_s": [0, 0], "weight": 1}
    return {"user_templates": {"chatbot": fixed, "coding": {"weight": 0}, "document": {"weight": 0}},
            "decode": {"batch_tokens": 1, "max_reads_per_request": 1}}


def run_kv(root: Path, config: Path, phase: str, workers: int, users: int, duration: float) -> dict:
    out = root / f"kv_{phase}.json"
    cmd = [sys.executable, str(KV_CACHE), "--model", MODEL, "--num-users", str(users), "--duration", str(duration),
           "--gpu-mem-gb", "0", "--cpu-mem-gb", "0", "--generation-mode", "none", "--seed", "1",
           "--max-concurrent-allocs", str(workers), "--disable-multi-turn", "--disable-prefix-caching",
           "--config", str(config), "--cache-dir", str(root / f"kv_{phase}"), "--storage-capacity-gb", "8",
           "--output", str(out), "--log-level", "WARNING", f"--{phase}-only"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())["summary"]


def drop_caches() -> bool:
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def run_fio(rw: str, directory: Path, workers: int, files_per_job: int, size: int, block: int,
            runtime: float = 0) -> float:
    """Writes: every file once, fsync at close. Reads: the first files_per_job files of each job
    over and over for `runtime` seconds; fio reopens each file in turn and invalidate=1 drops
    its cached pages at every open, as kv-cache.py drops each object before np.load."""
    cmd = ["fio", "--output-format=json", "--ioengine=psync", "--direct=0", f"--rw={rw}", f"--bs={min(block, size)}",
           f"--filesize={size}", f"--nrfiles={files_per_job}", "--file_service_type=sequential", "--openfiles=1",
           f"--directory={directory}", f"--numjobs={workers}", "--group_reporting=0", "--name=kv"]
    cmd += ["--fsync_on_close=1"] if rw == "write" else ["--invalidate=1", "--time_based", f"--runtime={runtime:g}"]
    jobs = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)["jobs"]
    moved = sum(j[rw]["io_bytes"] for j in jobs)
    files = workers * files_per_job
    if rw == "write" and not files * (size - min(block, size)) < moved <= files * size:
        raise RuntimeError(f"fio write moved {moved} bytes, expected about {files * size}")
    if moved == 0:
        raise RuntimeError(f"fio {rw} moved nothing")
    return moved / GIB / (max(j[rw]["runtime"] for j in jobs) / 1000)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, help="where both write (default: a temp dir beside the checkout)")
    parser.add_argument("--object-mib", type=float, default=16, help="KV object size in MiB (default 16)")
    parser.add_argument("--workers", type=int, default=4, help="concurrent I/Os: kv-cache.py allocs = fio jobs (default 4)")
    parser.add_argument("--duration", type=float, default=8, help="seconds of each kv-cache.py run (default 8)")
    parser.add_argument("--fio-bs", type=int, default=1 << 20,
                        help="fio block size in bytes (default 1 MiB; an object-sized block is slower on Linux reads)")
    opts = parser.parse_args()
    if not shutil.which("fio"):
        sys.exit("fio not found: apt-get update && apt-get install -y fio")
    tokens = max(1, round(opts.object_mib * (1 << 20) / BYTES_PER_TOKEN))
    payload = tokens * BYTES_PER_TOKEN
    users = max(2 * opts.workers, 32)
    with tempfile.TemporaryDirectory(dir=opts.dir or REPO.parent, prefix="kvcache-vs-fio-") as tmp:
        root = Path(tmp)
        config = root / "bench.yaml"
        config.write_text(yaml.safe_dump(workload_config(tokens)))
        print(f"directory {root}; object {payload} B ({payload / (1 << 20):.2f} MiB, {tokens} tokens of {MODEL}) "
              f"+ the .npy header; {opts.workers} concurrent I/Os; kv-cache.py {opts.duration:g} s per phase; "
              f"fio block {min(opts.fio_bs, payload)} B")
        kv_write = run_kv(root, config, "prefill", opts.workers, users, opts.duration)
        kv_read = run_kv(root, config, "decode", opts.workers, users, opts.duration)
        kvw = kv_write["cache_stats"]["tier_storage_write_bandwidth_gbps"]
        kvr = kv_read["cache_stats"]["tier_storage_read_bandwidth_gbps"]
        # fio moves about what kv-cache.py moved, so both run for a similar time.
        moved = kv_write["cache_stats"]["tier_storage_kv_bytes_written_gb"] * GIB
        files_per_job = max(4, min(256, math.ceil(moved / payload / opts.workers)))
        fio_dir = root / "fio"
        fio_dir.mkdir()
        fio_write = run_fio("write", fio_dir, opts.workers, files_per_job, payload, opts.fio_bs)
        if not drop_caches():
            print("note: cannot drop the page cache (not root); fio reads rely on its invalidate=1 (fadvise)")
        # The read working set matches kv-cache.py's: one object per user, re-read for the same time.
        fio_read = run_fio("read", fio_dir, opts.workers, min(files_per_job, math.ceil(users / opts.workers)), payload,
                           opts.fio_bs, runtime=opts.duration)

    print(f"{'phase':6} {'kv-cache.py':>12} {'fio':>8}  ratio   (GiB/s)")
    print(f"{'write':6} {kvw:12.3f} {fio_write:8.3f}  {kvw / fio_write:.3f}")
    print(f"{'read':6} {kvr:12.3f} {fio_read:8.3f}  {kvr / fio_read:.3f}")
    for name, summary in (("write", kv_write), ("read", kv_read)):
        cpu = summary["cpu_overhead"]
        stats = summary["cache_stats"]
        ops = stats["storage_write_ops"] if name == "write" else stats["storage_read_ops"]
        p95 = stats[f"storage_{name}_device_p95_ms"]
        print(f"kv-cache.py {name}: {summary['total_requests']} requests, {ops} storage ops, device P95 {p95:.2f} ms; "
              f"CPU per request: user {cpu['user_ms_per_request']:.2f} ms, user+system {cpu['total_ms_per_request']:.2f} ms")


if __name__ == "__main__":
    main()
