"""kv-cache.py's KV data on the disk: >= 1 GiB of cache files that `zstd -1 --long=31` cannot
shrink (goal: input/output <= 1.01) and that hold no duplicate 512 B block (goal: 0), written
about as fast as a plain writer of pre-made bytes writes the same files in the same run (goal:
kv-cache.py/plain >= 0.7, as bench/kvcache_vs_fio.py's against fio).

    .venv/bin/python bench/kvcache_data.py [--dir DIR] [--gib 1.25] [--model tiny-1b]
                                           [--object-mib 16] [--workers 4] [--rounds 5]

Each round, on one fresh directory (the page cache dropped before each side, when root):
  kv-cache.py: the storage tier only (--gpu-mem-gb 0 --cpu-mem-gb 0), --prefill-only, no
         multi-turn or prefix reuse, no think time; entries uniform(budget/4, budget) of an
         --object-mib MiB budget, --workers writes in flight, as many requests as make --gib
         GiB, its files kept. Its figure is its own tier_storage_write_bandwidth_gbps (KV bytes
         / the run's elapsed time);
  plain: --workers threads taking the same file sizes off one queue, each file os.write()n in
         kv-cache.py's chunk size from one chunk of random bytes made before the clock starts,
         then fsync and POSIX_FADV_DONTNEED, as kv-cache.py does; KV bytes (headers excluded)
         / the wall time of all the writes.
So the ratio is what producing unique data and running the simulator cost on top of the writes.
The first round's kv-cache.py files are then read back in write order as one stream into
`zstd -1 --long=31 -T1` (one frame, a 2 GiB window: every file within reach of every later
one), and every 512 B block at its file offset (what a deduplicating store sees) is hashed.
The rounds interleave the two sides, the plain side first in every other round (the same seed,
so the same sizes every round), and the median ratio is the figure (this shared disk swings up
to 2x between identical runs).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from statistics import median

import numpy as np
import yaml

from mlpstorage_py.storage import drop_page_cache

REPO = Path(__file__).resolve().parents[1]
KV_DIR = REPO / "kv_cache_benchmark"
sys.path.insert(0, str(KV_DIR))

from kvcache_sim.models import load_models

GIB = 1 << 30
BLOCK = 512
HEADER = 128  # bytes before the data in every entry file kv-cache.py writes
_DONTNEED = getattr(os, "POSIX_FADV_DONTNEED", 4)


def workload_config(tokens: int, chunk_kib: int) -> dict:
    fixed = {"context_tokens": [tokens, tokens], "generation_tokens": [1, 1], "think_time_s": [0, 0], "weight": 1}
    return {"user_templates": {"chatbot": fixed, "coding": {"weight": 0}, "document": {"weight": 0}},
            "engine": {"io_chunk_kib": chunk_kib}}


def run_kv(root: Path, config: Path, opts: argparse.Namespace, requests: int) -> tuple[dict, list[Path]]:
    """kv-cache.py's summary and the files it wrote, in write order."""
    cache, out = root / "kv", root / "kv.json"
    cmd = [sys.executable, str(KV_DIR / "kv-cache.py"), "--model", opts.model, "--num-users", str(2 * opts.workers),
           "--duration", "3600", "--max-requests", str(requests), "--gpu-mem-gb", "0", "--cpu-mem-gb", "0",
           "--generation-mode", "none", "--seed", "1", "--max-concurrent-allocs", str(opts.workers),
           "--disable-multi-turn", "--disable-prefix-caching", "--prefill-only", "--config", str(config),
           "--cache-dir", str(cache), "--storage-capacity-gb", f"{2 * opts.gib + 1:g}", "--keep-cache-files",
           "--output", str(out), "--log-level", "WARNING"]
    drop_page_cache()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    files = sorted(cache.glob("kv_*.npy"), key=lambda p: int(p.name.split("_")[1]))
    return json.loads(out.read_text())["summary"], files


def plain_write(directory: Path, sizes: list[int], workers: int, chunk: int) -> float:
    """GiB/s of KV bytes (headers excluded) written as files of these sizes by `workers` threads,
    into a new directory."""
    directory.mkdir()
    data = memoryview(np.random.default_rng(0).bytes(chunk))
    queue = iter(enumerate(sizes))
    lock = threading.Lock()

    def writer() -> None:
        while True:
            with lock:
                item = next(queue, None)
            if item is None:
                return
            number, left = item
            fd = os.open(directory / f"plain_{number}.npy", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
            try:
                while left:
                    left -= os.write(fd, data[:min(left, chunk)])
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, _DONTNEED)
            finally:
                os.close(fd)

    threads = [threading.Thread(target=writer) for _ in range(workers)]
    drop_page_cache()
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    return (sum(sizes) - HEADER * len(sizes)) / GIB / elapsed


def examine(files: list[Path]) -> tuple[int, int, int, int]:
    """(bytes in, zstd -1 --long=31 bytes out, duplicate 512 B blocks, blocks) over the files as
    one stream; each file is read in 4 MiB pieces, so blocks stay at their file offsets."""
    zstd = subprocess.Popen(["zstd", "-1", "--long=31", "-T1", "-c"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    compressed = [0]

    def count() -> None:
        while piece := zstd.stdout.read(1 << 20):
            compressed[0] += len(piece)

    counter = threading.Thread(target=count)
    counter.start()
    seen: set[bytes] = set()
    total = blocks = 0
    for path in files:
        with open(path, "rb") as fh:
            while piece := fh.read(4 << 20):
                zstd.stdin.write(piece)
                total += len(piece)
                view = memoryview(piece)
                for start in range(0, len(piece) - BLOCK + 1, BLOCK):
                    seen.add(hashlib.blake2b(view[start:start + BLOCK], digest_size=16).digest())
                    blocks += 1
    zstd.stdin.close()
    counter.join()
    if zstd.wait():
        raise RuntimeError(f"zstd exited {zstd.returncode}")
    return total, compressed[0], blocks - len(seen), blocks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, help="where both write (default: a temp dir beside the checkout)")
    parser.add_argument("--gib", type=float, default=1.25, help="GiB kv-cache.py writes per round, at least 1 (default 1.25)")
    parser.add_argument("--model", default="tiny-1b", help="a model of kv-cache.py's table (default tiny-1b)")
    parser.add_argument("--object-mib", type=float, default=16, help="an entry's largest KV size in MiB (default 16)")
    parser.add_argument("--workers", type=int, default=4, help="writes in flight on both sides (default 4)")
    parser.add_argument("--chunk-kib", type=int, default=4096, help="kv-cache.py's I/O chunk = plain's write size (default 4096)")
    parser.add_argument("--rounds", type=int, default=5, help="kv-cache.py/plain pairs, interleaved (default 5)")
    opts = parser.parse_args()
    if opts.gib < 1:
        sys.exit("--gib must be at least 1: the checks are over at least 1 GiB of files")
    if not shutil.which("zstd"):
        sys.exit("zstd not found: apt-get update && apt-get install -y zstd")
    per_token = load_models()[opts.model].kv_bytes_per_token
    tokens = max(4, round(opts.object_mib * (1 << 20) / per_token))
    # uniform(budget/4, budget) averages 5/8 of the budget; 15 % more requests for the spread
    requests = math.ceil(1.15 * opts.gib * GIB / (0.625 * tokens * per_token))
    with tempfile.TemporaryDirectory(dir=opts.dir or REPO.parent, prefix="kvcache-data-") as tmp:
        root = Path(tmp)
        config = root / "bench.yaml"
        config.write_text(yaml.safe_dump(workload_config(tokens, opts.chunk_kib)))
        if not drop_page_cache():
            print("note: cannot drop the page cache (not root); both sides evict their own files after fsync")
        print(f"directory {root}; {opts.model} entries of uniform({tokens // 4}, {tokens}) tokens, {requests} "
              f"requests a round; {opts.workers} writes in flight; {opts.chunk_kib} KiB chunks")
        print(f"{'round':5} {'kv-cache.py':>12} {'plain':>8}  ratio   (write GiB/s)")
        ratios, ours, plains, checked = [], [], [], ()
        sizes: list[int] = []
        for number in range(opts.rounds):
            # odd rounds write the plain files first (the last round's sizes): neither side
            # always follows the other's deletes and writeback
            plain_first = number % 2 == 1
            if plain_first:
                plain = plain_write(root / "plain", sizes, opts.workers, opts.chunk_kib << 10)
            summary, files = run_kv(root, config, opts, requests)
            sizes = [p.stat().st_size for p in files]
            if sum(sizes) < opts.gib * GIB:
                sys.exit(f"kv-cache.py wrote {sum(sizes) / GIB:.2f} GiB, under --gib {opts.gib:g}")
            if not checked:
                checked = (*examine(files), len(files))
            if not plain_first:
                plain = plain_write(root / "plain", sizes, opts.workers, opts.chunk_kib << 10)
            shutil.rmtree(root / "kv")
            shutil.rmtree(root / "plain")
            kv = summary["cache_stats"]["tier_storage_write_bandwidth_gbps"]
            ratios.append(kv / plain)
            ours.append(kv)
            plains.append(plain)
            print(f"{number:5} {kv:12.3f} {plain:8.3f}  {kv / plain:.3f}   ({len(files)} files, "
                  f"{sum(sizes) / GIB:.2f} GiB{'; plain first' if plain_first else ''})", flush=True)
    total, compressed, duplicates, blocks, count = checked
    print(f"median write: kv-cache.py {median(ours):.3f} GiB/s, plain {median(plains):.3f} GiB/s, ratio "
          f"{median(ratios):.3f} (rounds {min(ratios):.2f}-{max(ratios):.2f})")
    print(f"zstd -1 --long=31: {total:,} bytes in {count} files -> {compressed:,} bytes, ratio {total / compressed:.4f}")
    print(f"duplicate 512 B blocks: {duplicates} of {blocks:,}")


if __name__ == "__main__":
    main()
