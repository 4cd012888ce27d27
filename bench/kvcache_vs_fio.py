"""kv-cache.py's storage tier vs fio doing the same work on the same directory, measured in the
same run. Prints GiB/s of both, the ratios kv-cache.py/fio (target >= 0.9), and the simulator's
CPU time per request.

    .venv/bin/python bench/kvcache_vs_fio.py [--dir DIR] [--object-mib 16] [--workers 4] [--users 8]
                                             [--duration 8] [--chunk-kib 4096] [--rounds 3]

kv-cache.py runs twice with one request template whose context budget is --object-mib MiB of
KV (tiny-1b), so every entry is uniform(budget/4, budget) as the reference draws it, no think
time, no prefix/multi-turn reuse, no memory tiers:
  write: --prefill-only, every request writes one new .npy entry in --chunk-kib chunks + fsync,
         --workers writes in flight (--max-concurrent-allocs);
  read:  --decode-only, one entry per user written first (untimed), then every request drops
         its entry from the page cache (POSIX_FADV_DONTNEED) and reads it twice; reads are not
         bounded by the allocation semaphore, so min(users, 500) reads are in flight.
fio then does the same work with the same concurrency, every lane busy all the time as a
kv-cache.py writer or reader is:
  write: the entries kv-cache.py wrote (its --request-trace) dealt into --workers lanes; each
         lane is one fio job that writes as many fresh files as its kv-cache.py writers did,
         one after another (create on open, no preallocation, buffered psync in 1 MiB
         blocks of fresh random data, refill_buffers, as kv-cache.py produces fresh incompressible
         data for every chunk; an fsync at each file's close), with the lane's bytes split evenly over them:
         the same files, bytes, fsyncs and writers in flight, at the lane's mean file size;
  read:  one fio job per kv-cache.py reader, each re-reading one entry-sized file (one of the
         files the write phase left) in passes until as many bytes moved as kv-cache.py read,
         the file's cached pages dropped at every open (invalidate=1, a POSIX_FADV_DONTNEED per
         pass, as kv-cache.py drops each entry before reading it).
The page cache is dropped before each phase of both tools. kv-cache.py evicts each file's clean
pages after its fsync; fio has no such option, so a thread here does it for fio's files (a
lane's file once the lane has created its next one). Reads: kv-cache.py has 8 users per
worker and one QoS class, so no two workers read one entry (sharing its freshly read pages) at
once, and each fio reader re-reads as many files of its own in turn, each twice in a row as a
kv-cache.py request reads its entry; those files are written afresh just before fio reads
them, as kv-cache.py writes its entries just before its read phase. Bandwidth is kv-cache.py's own
tier_storage_{write,read}_bandwidth_gbps (bytes / elapsed) and fio's bytes / its longest job's
runtime. (fio's wait_for chaining of one job per file, used before, spent about 90 % of its
wall time between jobs, so its lanes seldom overlapped: not the same concurrency.) The pairs run
--rounds times, interleaved, and the medians are the figures (this shared disk swings up to 2x
between identical runs).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from statistics import fmean, median

import yaml

REPO = Path(__file__).resolve().parents[1]
KV_CACHE = REPO / "kv_cache_benchmark" / "kv-cache.py"
MODEL = "tiny-1b"
BYTES_PER_TOKEN = 12 * 4 * 128 * 2 * 2  # tiny-1b: layers x kv_heads x head_dim x (K, V) x fp16
GIB = 1 << 30


NPY_HEADER = 128  # bytes before the data in every entry file kv-cache.py writes
READ_USERS_PER_WORKER = 8
# With no think time every user would enqueue requests as fast as Python draws them, up to
# 100,000 that the run never serves, the dispatcher taking the GIL from the I/O threads all run
# long; a short queue keeps the workers fed and the dispatcher idle.
QUEUED = 64
# fio writes whole blocks only, so its block is 1 MiB: each file then has its size to within
# 1 MiB, while kv-cache.py writes its own 4 MiB chunks (the bytes reach the page cache and the
# device alike; fio's smaller writes cost it a few more system calls).
FIO_BLOCK = 1 << 20
READS_PER_REQUEST = 2  # decode reads of a request generating 1 token: 1 + ceil(1 / 32)


def workload_config(tokens: int, chunk_kib: int, workers: int) -> dict:
    fixed = {"context_tokens": [tokens, tokens], "generation_tokens": [1, 1], "think_time_s": [0, 0], "weight": 1}
    return {"user_templates": {"chatbot": fixed, "coding": {"weight": 0}, "document": {"weight": 0}},
            "engine": {"io_chunk_kib": chunk_kib, "max_workers": workers, "max_queued_requests": QUEUED},
            # one QoS class: the queue then serves users in turn (with classes, the few interactive
            # users' queued requests would all be served first, several of one user's at once)
            "qos_distribution": {"interactive_probability": 0.0, "responsive_threshold": 0.0}}


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


def lane_file_size(lane: list[tuple[str, int]], block: int) -> int:
    """The size fio gives each file of a lane: the lane's mean, in whole blocks (fio writes no
    partial block)."""
    return max(block, round(sum(size for _, size in lane) / len(lane) / block) * block)


def run_fio(rw: str, directory: Path, lanes: list[list[tuple[str, int]]], block: int, passes: int = 1) -> float:
    """GiB/s of fio with one job per lane, all lanes running at once for the whole run.
    Writes: each lane's files are created one after another (sequential file service, one open
    at a time), each fsync'd at its close; fio splits a job's size evenly over its files, so
    each lane writes its files at their mean size (a multiple of `block`). Reads: each lane's
    one file is read `passes` times, its cached pages dropped at every open. Rate = all bytes /
    the longest job's runtime."""
    lines = ["[global]", "ioengine=psync", "direct=0", f"rw={rw}", f"bs={block}", f"directory={directory}",
             "fallocate=none", "thread", "file_service_type=sequential", "openfiles=1"]
    # refill_buffers: fresh random data in every block, as kv-cache.py writes (fio would otherwise
    # rewrite one buffer with a few bytes scrambled: dedupable, and no data to produce)
    lines += ["fsync_on_close=1", "create_on_open=1", "refill_buffers=1"] if rw == "write" else \
        ["invalidate=1", f"loops={passes}"]
    expected = 0
    for number, lane in enumerate(lanes):
        each = lane_file_size(lane, block)
        lines += [f"[{rw}_{number}]", "filename=" + ":".join(name for name, _ in lane), f"size={each * len(lane)}"]
        expected += each * len(lane) * (passes if rw == "read" else 1)
    jobfile = directory / f"{rw}.fio"
    jobfile.write_text("\n".join(lines) + "\n")
    drop_caches()
    result = directory / f"{rw}.json"
    done = threading.Event()
    evictor = threading.Thread(target=evict_written, args=(directory, lanes, done), daemon=True)
    if rw == "write":
        evictor.start()
    try:
        subprocess.run(["fio", "--output-format=json", f"--output={result}", str(jobfile)], check=True,
                       capture_output=True, cwd=directory)
    finally:
        done.set()
    text = result.read_text()
    report = json.loads(text[text.index("{"):])["jobs"]  # fio may print notes before the JSON
    moved = sum(j[rw]["io_bytes"] for j in report)
    if moved != expected:
        raise RuntimeError(f"fio {rw} moved {moved} bytes, expected {expected}")
    return moved / GIB / max(j[rw]["runtime"] / 1000 for j in report)


def evict_written(directory: Path, lanes: list[list[tuple[str, int]]], done: threading.Event) -> None:
    """What kv-cache.py does after each fsync, for fio, which has no such option: a lane's file
    is fsync'd and closed once the lane has created its next one, and then its clean pages are
    evicted (POSIX_FADV_DONTNEED). Without it this machine writes about 2x slower, the page
    cache filling with clean pages."""
    position = [0] * len(lanes)
    while not done.wait(0.005):
        for number, lane in enumerate(lanes):
            while position[number] + 1 < len(lane) and (directory / lane[position[number] + 1][0]).exists():
                fd = os.open(directory / lane[position[number]][0], os.O_RDONLY)
                try:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                finally:
                    os.close(fd)
                position[number] += 1


def rewrite(files: dict[str, int], directory: Path) -> None:
    """Write the read phase's files afresh just before it (untimed), as kv-cache.py writes its
    users' entries just before its read phase: the disk's own cache below this machine then
    holds the same recent writes for both."""
    chunk = os.urandom(1 << 20)
    for name, size in files.items():
        with open(directory / name, "wb") as fh:
            for offset in range(0, size, len(chunk)):
                fh.write(chunk[:min(len(chunk), size - offset)])
            fh.flush()
            os.fsync(fh.fileno())


def deal(items: list[tuple[str, int]], lanes: int) -> list[list[tuple[str, int]]]:
    return [items[i::lanes] for i in range(lanes) if items[i::lanes]]


def one_round(root: Path, config: Path, opts: argparse.Namespace, block: int, number: int) -> dict:
    """kv-cache.py's write and read phases, then fio doing the same work, in fresh directories."""
    kv_write, written = run_kv(root, config, "prefill", opts.workers, opts.users, opts.duration)
    # reads: READ_USERS_PER_WORKER entries per reader, so no two readers share a file (and its
    # freshly read pages) at once, as fio's readers do not
    kv_read, _ = run_kv(root, config, "decode", opts.workers, opts.users * READ_USERS_PER_WORKER, opts.duration)
    fio_dir = root / f"fio_{number}"
    fio_dir.mkdir()
    # fio writes the same objects: one file per entry kv-cache.py wrote, dealt into as many
    # lanes as kv-cache.py had writes in flight (each lane at its mean size; both means printed).
    files = [(f"kv_{i}.npy", size) for i, size in enumerate(written)]
    lanes = deal(files, opts.workers)
    fio_write = run_fio("write", fio_dir, lanes, block)
    fio_size = {name: lane_file_size(lane, block) for lane in lanes for name, _ in lane}
    # fio reads what kv-cache.py read: as many readers, each re-reading its own files (files the
    # write phase left, as many per reader as kv-cache.py had users per worker) in turn until as
    # many bytes moved.
    readers = int(kv_read["concurrency"]["workers"])
    working = []
    for reader in range(readers):  # a reader's files come from one write lane: one size, as fio needs
        lane, first = lanes[reader % len(lanes)], reader // len(lanes) * READ_USERS_PER_WORKER
        # each file twice in a row: a kv-cache.py request reads its entry 1 + ceil(1 / 32) = 2 times
        working.append([(name, fio_size[name]) for name, _ in lane[first:first + READ_USERS_PER_WORKER]
                        for _ in range(READS_PER_REQUEST)])
    working = [lane for lane in working if lane]
    read_bytes = kv_read["cache_stats"]["tier_storage_kv_bytes_read_gb"] * GIB
    passes = max(1, round(read_bytes / sum(size for lane in working for _, size in lane)))
    rewrite({name: size for lane in working for name, size in lane}, fio_dir)
    fio_read = run_fio("read", fio_dir, working, block, passes)
    shutil.rmtree(fio_dir)
    return {"kv_write": kv_write, "kv_read": kv_read, "written": written, "fio_mean": fmean(fio_size.values()),
            "passes": passes, "working": sum(map(len, working)), "readers": readers,
            "kvw": kv_write["cache_stats"]["tier_storage_write_bandwidth_gbps"],
            "kvr": kv_read["cache_stats"]["tier_storage_read_bandwidth_gbps"], "fiow": fio_write, "fior": fio_read}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, help="where both write (default: a temp dir beside the checkout)")
    parser.add_argument("--object-mib", type=float, default=16, help="an entry's largest KV size in MiB (default 16)")
    parser.add_argument("--workers", type=int, default=4, help="writes in flight: kv-cache.py allocs = fio write jobs (default 4)")
    parser.add_argument("--users", type=int, default=8, help="kv-cache.py users = its workers = fio read jobs (default 8)")
    parser.add_argument("--duration", type=float, default=8, help="seconds of each kv-cache.py run (default 8)")
    parser.add_argument("--chunk-kib", type=int, default=4096,
                        help="kv-cache.py's I/O chunk, engine.io_chunk_kib (default 4096, the tool's own)")
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
        config.write_text(yaml.safe_dump(workload_config(tokens, opts.chunk_kib, opts.users)))
        if not drop_caches():
            print("note: cannot drop the page cache (not root); both tools rely on per-file fadvise/invalidate")
        print(f"directory {root}; {MODEL} entries of uniform({tokens // 4}, {tokens}) tokens + the .npy header; "
              f"{opts.workers} writes in flight; kv-cache.py {block} B chunks, fio {FIO_BLOCK} B blocks; "
              f"kv-cache.py {opts.duration:g} s per phase")
        print(f"{'round':5} {'phase':6} {'kv-cache.py':>12} {'fio':>8}  ratio   (GiB/s)")
        rounds = []
        for number in range(opts.rounds):
            r = one_round(root, config, opts, FIO_BLOCK, number)
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
