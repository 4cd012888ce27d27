"""kv-cache.py's storage tier vs fio doing the same work on the same directory, measured in the
same run. Prints GiB/s of both, the ratios kv-cache.py/fio (target >= 0.7), and the simulator's
CPU time per request.

    .venv/bin/python bench/kvcache_vs_fio.py [--dir DIR] [--object-mib 16] [--workers 4] [--users 8]
                                             [--duration 8] [--chunk-kib 1024] [--rounds 3]

kv-cache.py runs twice with one request template whose context budget is --object-mib MiB of
KV (tiny-1b), so every entry is uniform(budget/4, budget) as the reference draws it, no think
time, no prefix/multi-turn reuse, no memory tiers:
  write: --prefill-only, every request writes one new .npy entry in --chunk-kib chunks + fsync,
         --workers writes in flight (--max-concurrent-allocs);
  read:  --decode-only, one entry per user written first (untimed), then every request drops
         its entry from the page cache (POSIX_FADV_DONTNEED) and reads it twice; reads are not
         bounded by the allocation semaphore, so min(users, 500) reads are in flight.
The entries kv-cache.py actually wrote (its --request-trace) give fio its objects: one fio job
per entry, of that entry's size (header included, rounded to the nearest block: fio writes whole
blocks), chained into lanes (wait_for) so exactly as many are in flight as kv-cache.py had. fio
does the same shape of I/O: fresh files created on open (no preallocation, as kv-cache.py's are
not), buffered psync in --chunk-kib blocks (kv-cache.py's chunk), an fsync at each file's close,
--workers lanes for writes, each file's pages evicted after its fsync; for reads, one object per user re-read until as many bytes moved as
kv-cache.py read, as many lanes as kv-cache.py's workers, invalidate=1 dropping each file's
cached pages at its open; the page cache is dropped before each phase of both tools. Bandwidth is
kv-cache.py's own tier_storage_{write,read}_bandwidth_gbps (bytes / elapsed) and fio's bytes /
its busiest lane's summed job runtimes; both mean object sizes are printed so the ratio compares
like with like. The pairs run --rounds times, interleaved, and the medians are the figures (this
shared disk swings up to 2x between identical runs).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from statistics import fmean, median

import yaml

REPO = Path(__file__).resolve().parents[1]
KV_CACHE = REPO / "kv_cache_benchmark" / "kv-cache.py"
MODEL = "tiny-1b"
BYTES_PER_TOKEN = 12 * 4 * 128 * 2 * 2  # tiny-1b: layers x kv_heads x head_dim x (K, V) x fp16
GIB = 1 << 30


NPY_HEADER = 128  # bytes before the data in every entry file kv-cache.py writes


def workload_config(tokens: int, chunk_kib: int) -> dict:
    fixed = {"context_tokens": [tokens, tokens], "generation_tokens": [1, 1], "think_time_s": [0, 0], "weight": 1}
    return {"user_templates": {"chatbot": fixed, "coding": {"weight": 0}, "document": {"weight": 0}},
            "engine": {"io_chunk_kib": chunk_kib}}


def run_kv(root: Path, config: Path, phase: str, workers: int, users: int, duration: float) -> tuple[dict, list[int]]:
    """kv-cache.py's summary and the sizes (bytes, header included) of the entries it wrote."""
    out, trace = root / f"kv_{phase}.json", root / f"kv_{phase}.jsonl"
    cmd = [sys.executable, str(KV_CACHE), "--model", MODEL, "--num-users", str(users), "--duration", str(duration),
           "--gpu-mem-gb", "0", "--cpu-mem-gb", "0", "--generation-mode", "none", "--seed", "1",
           "--max-concurrent-allocs", str(workers), "--disable-multi-turn", "--disable-prefix-caching",
           "--config", str(config), "--cache-dir", str(root / f"kv_{phase}"), "--storage-capacity-gb", "8",
           "--output", str(out), "--log-level", "WARNING", f"--{phase}-only", "--request-trace", str(trace)]
    drop_caches()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    sizes = [o["tokens"] * BYTES_PER_TOKEN + NPY_HEADER for line in trace.read_text().splitlines()
             for o in json.loads(line)["ops"] if o["op"] == "write"]
    return json.loads(out.read_text())["summary"], sizes


def drop_caches() -> bool:
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def run_fio(rw: str, directory: Path, lanes: list[list[tuple[str, int]]], block: int) -> float:
    """GiB/s of fio doing one file per job, exactly the given (name, bytes), len(lanes) jobs in
    flight: each lane's jobs run one after another (wait_for), like one kv-cache.py writer or
    reader taking entry after entry. Writes: a fresh file created on open, no preallocation,
    buffered psync in `block` pieces, fsync at close, then its clean pages evicted (dd
    iflag=nocache, as kv-cache.py's POSIX_FADV_DONTNEED after fsync; without it this machine
    writes about 2x slower, the page cache filling with clean pages). Reads: invalidate=1 drops the file's
    cached pages at open, as kv-cache.py drops each entry before reading it. Rate = all bytes /
    the busiest lane's summed job runtimes (fio's start-up between chained jobs not counted)."""
    lines = ["[global]", "ioengine=psync", "direct=0", f"rw={rw}", f"bs={block}", "bs_unaligned=1",
             f"directory={directory}", "fallocate=none", "thread"]
    lines += ["fsync_on_close=1", "create_on_open=1"] if rw == "write" else ["invalidate=1"]
    lane_of: dict[str, int] = {}
    for number, lane in enumerate(lanes):
        previous = None
        for job, (name, size) in enumerate(lane):
            title = f"{rw}_{number}_{job}"
            lines += [f"[{title}]", f"filename={name}", f"filesize={size}", f"size={size}"]
            if rw == "write":  # kv-cache.py evicts each fsync'd file's clean pages: the same cache state
                lines.append(f"exec_postrun=dd if={directory / name} iflag=nocache count=0 status=none")
            if previous:
                lines.append(f"wait_for={previous}")
            lane_of[title] = number
            previous = title
    jobfile = directory / f"{rw}.fio"
    jobfile.write_text("\n".join(lines) + "\n")
    drop_caches()
    result = directory / f"{rw}.json"  # not stdout: fio announces each exec_postrun there
    # cwd: fio leaves each exec_postrun's output (<job>.postrun.txt) in its working directory
    subprocess.run(["fio", "--output-format=json", f"--output={result}", str(jobfile)], check=True,
                   capture_output=True, cwd=directory)
    text = result.read_text()
    report = json.loads(text[text.index("{"):])["jobs"]  # fio may print notes before the JSON
    moved = sum(j[rw]["io_bytes"] for j in report)
    expected = sum(size for lane in lanes for _, size in lane)
    if moved != expected:
        raise RuntimeError(f"fio {rw} moved {moved} bytes, expected {expected}")
    busy = [0.0] * len(lanes)
    for j in report:
        busy[lane_of[j["jobname"]]] += j[rw]["runtime"] / 1000
    return moved / GIB / max(busy)


def deal(items: list[tuple[str, int]], lanes: int) -> list[list[tuple[str, int]]]:
    return [items[i::lanes] for i in range(lanes) if items[i::lanes]]


def one_round(root: Path, config: Path, opts: argparse.Namespace, block: int, number: int) -> dict:
    """kv-cache.py's write and read phases, then fio doing the same work, in fresh directories."""
    kv_write, written = run_kv(root, config, "prefill", opts.workers, opts.users, opts.duration)
    kv_read, _ = run_kv(root, config, "decode", opts.workers, opts.users, opts.duration)
    fio_dir = root / f"fio_{number}"
    fio_dir.mkdir()
    # fio writes the same objects: one file per entry kv-cache.py wrote, the same sizes (rounded
    # to the nearest block: fio writes whole blocks; both means printed), as many in flight.
    files = [(f"kv_{i}.npy", max(block, round(size / block) * block)) for i, size in enumerate(written)]
    fio_write = run_fio("write", fio_dir, deal(files, opts.workers), block)
    # fio reads what kv-cache.py read: one object per user, re-read until as many bytes moved,
    # as many readers in flight.
    readers = int(kv_read["concurrency"]["workers"])
    working = files[:opts.users]
    read_bytes = kv_read["cache_stats"]["tier_storage_kv_bytes_read_gb"] * GIB
    passes = max(1, min(2000 // len(working), round(read_bytes / sum(size for _, size in working))))
    fio_read = run_fio("read", fio_dir, deal(working * passes, readers), block)
    shutil.rmtree(fio_dir)
    return {"kv_write": kv_write, "kv_read": kv_read, "written": written, "fio_mean": fmean(s for _, s in files),
            "passes": passes, "working": len(working), "readers": readers,
            "kvw": kv_write["cache_stats"]["tier_storage_write_bandwidth_gbps"],
            "kvr": kv_read["cache_stats"]["tier_storage_read_bandwidth_gbps"], "fiow": fio_write, "fior": fio_read}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, help="where both write (default: a temp dir beside the checkout)")
    parser.add_argument("--object-mib", type=float, default=16, help="an entry's largest KV size in MiB (default 16)")
    parser.add_argument("--workers", type=int, default=4, help="writes in flight: kv-cache.py allocs = fio write jobs (default 4)")
    parser.add_argument("--users", type=int, default=8, help="kv-cache.py users = its workers = fio read jobs (default 8)")
    parser.add_argument("--duration", type=float, default=8, help="seconds of each kv-cache.py run (default 8)")
    parser.add_argument("--chunk-kib", type=int, default=1024, help="kv-cache.py's I/O chunk = fio's block (default 1024)")
    parser.add_argument("--rounds", type=int, default=3, help="kv-cache.py/fio pairs, interleaved; the median ratio is "
                                                               "the figure (default 3: a shared disk swings run to run)")
    opts = parser.parse_args()
    if not shutil.which("fio"):
        sys.exit("fio not found: apt-get update && apt-get install -y fio")
    tokens = max(4, round(opts.object_mib * (1 << 20) / BYTES_PER_TOKEN))
    block = opts.chunk_kib << 10
    with tempfile.TemporaryDirectory(dir=opts.dir or REPO.parent, prefix="kvcache-vs-fio-") as tmp:
        root = Path(tmp)
        config = root / "bench.yaml"
        config.write_text(yaml.safe_dump(workload_config(tokens, opts.chunk_kib)))
        if not drop_caches():
            print("note: cannot drop the page cache (not root); both tools rely on per-file fadvise/invalidate")
        print(f"directory {root}; {MODEL} entries of uniform({tokens // 4}, {tokens}) tokens + the .npy header; "
              f"{opts.workers} writes in flight; {block} B chunks; kv-cache.py {opts.duration:g} s per phase")
        print(f"{'round':5} {'phase':6} {'kv-cache.py':>12} {'fio':>8}  ratio   (GiB/s)")
        rounds = []
        for number in range(opts.rounds):
            r = one_round(root, config, opts, block, number)
            rounds.append(r)
            print(f"{number:5} {'write':6} {r['kvw']:12.3f} {r['fiow']:8.3f}  {r['kvw'] / r['fiow']:.3f}   "
                  f"({len(r['written'])} objects, mean {fmean(r['written']) / (1 << 20):.2f} MiB; fio's "
                  f"{r['fio_mean'] / (1 << 20):.2f} MiB)")
            print(f"{number:5} {'read':6} {r['kvr']:12.3f} {r['fior']:8.3f}  {r['kvr'] / r['fior']:.3f}   "
                  f"({r['readers']} in flight; fio {r['passes']} passes over {r['working']} objects)", flush=True)

    for name, ours, theirs in (("write", "kvw", "fiow"), ("read", "kvr", "fior")):
        ratios = [r[ours] / r[theirs] for r in rounds]
        print(f"median {name}: kv-cache.py {median(r[ours] for r in rounds):.3f} GiB/s, fio "
              f"{median(r[theirs] for r in rounds):.3f} GiB/s, ratio {median(ratios):.3f} "
              f"(rounds {min(ratios):.2f}-{max(ratios):.2f})")
    last = rounds[-1]
    for name, summary in (("write", last["kv_write"]), ("read", last["kv_read"])):
        cpu = summary["cpu_overhead"]
        stats = summary["cache_stats"]
        ops = stats["storage_write_ops"] if name == "write" else stats["storage_read_ops"]
        p95 = stats[f"storage_{name}_device_p95_ms"]
        print(f"kv-cache.py {name}: {summary['total_requests']} requests, {ops} storage ops, device P95 {p95:.2f} ms; "
              f"CPU per request: user {cpu['user_ms_per_request']:.2f} ms, user+system {cpu['total_ms_per_request']:.2f} ms")


if __name__ == "__main__":
    main()
