"""kv-cache.py's peak memory on Option 1's shape with llama3.1-8b (entries up to 3 GiB), against
the goal of 4 GiB per rank beyond the configured CPU tier, and against a bare interpreter that
only imports numpy, measured in the same run.

    .venv/bin/python bench/kvcache_memory.py [--dir DIR] [--users 20] [--duration 60] [--cpu-mem-gb 0]
                                             [--storage-capacity-gb 16]

Option 1 (Table KVCache-1): no GPU or CPU tier, 16 writes in flight (--max-concurrent-allocs),
generation mode none; the users are --users (20 by default, as issue 12 measured 19.3 GiB).
The peak is kv-cache.py's own summary.memory.peak_rss_bytes (VmHWM of its process), cross-checked
by the peak this script samples from /proc/<pid>/status while it runs.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
KV_CACHE = REPO / "kv_cache_benchmark" / "kv-cache.py"
GIB = 1 << 30
GOAL_BEYOND_CPU_TIER = 4 * GIB


def vm_hwm(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def bare_interpreter() -> int:
    code = "import numpy, pathlib; print(next(l for l in pathlib.Path('/proc/self/status').read_text().splitlines() if l.startswith('VmHWM')).split()[1])"
    return int(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout) * 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, help="the storage tier's parent (default: a temp dir beside the checkout)")
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--duration", type=float, default=60)
    parser.add_argument("--cpu-mem-gb", type=float, default=0.0, help="a CPU tier (Option 2 has 4)")
    parser.add_argument("--storage-capacity-gb", type=float, default=16.0, help="bounds the disk the run fills")
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=opts.dir or REPO.parent, prefix="kvcache-memory-") as tmp:
        out = Path(tmp) / "result.json"
        cmd = [sys.executable, str(KV_CACHE), "--model", "llama3.1-8b", "--num-users", str(opts.users),
               "--duration", str(opts.duration), "--gpu-mem-gb", "0", "--cpu-mem-gb", str(opts.cpu_mem_gb),
               "--max-concurrent-allocs", "16", "--generation-mode", "none", "--seed", "42",
               "--cache-dir", str(Path(tmp) / "cache"), "--storage-capacity-gb", str(opts.storage_capacity_gb),
               "--output", str(out), "--log-level", "WARNING"]
        child = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        sampled = 0
        while child.poll() is None:
            sampled = max(sampled, vm_hwm(child.pid))
            time.sleep(0.2)
        if child.returncode != 0:
            sys.exit(f"kv-cache.py exited {child.returncode}")
        summary = json.loads(out.read_text())["summary"]
    memory, stats = summary["memory"], summary["cache_stats"]
    peak = max(memory["peak_rss_bytes"], sampled)
    cpu_tier = int(opts.cpu_mem_gb * GIB)
    bare = bare_interpreter()
    beyond = peak - cpu_tier
    print(f"llama3.1-8b, {opts.users} users, {summary['elapsed_time']:.1f} s, {summary['total_requests']} requests; "
          f"storage wrote {stats['tier_storage_kv_bytes_written_gb']:.1f} GiB, read {stats['tier_storage_kv_bytes_read_gb']:.1f} GiB; "
          f"{memory['io_buffers_allocated']} I/O buffers of {memory['io_chunk_bytes'] >> 20} MiB")
    print(f"peak RSS {peak / GIB:.2f} GiB (kv-cache.py's VmHWM {memory['peak_rss_bytes'] / GIB:.2f}, sampled "
          f"{sampled / GIB:.2f}); bare interpreter + numpy {bare / GIB:.3f} GiB; CPU tier {opts.cpu_mem_gb:g} GiB")
    print(f"peak minus the CPU tier's capacity: {beyond / GIB:.2f} GiB of the 4 GiB goal (ratio {beyond / GOAL_BEYOND_CPU_TIER:.3f}; "
          f"{beyond / bare:.1f}x a bare interpreter) -> {'PASS' if beyond <= GOAL_BEYOND_CPU_TIER else 'FAIL'}")


if __name__ == "__main__":
    main()
