"""kv-cache.py: one client of the KV-cache storage benchmark.

    python kv-cache.py --model llama3.1-8b --num-users 100 --duration 60 \\
        --gpu-mem-gb 0 --cpu-mem-gb 4 --cache-dir /mnt/nvme/kv --output result.json

Exit status: 0 success, 1 the run failed (an I/O error, or out of memory: one line on stderr
and a result file with status "failed"), 2 invalid input.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvcache_sim import __version__
from kvcache_sim.config import DEFAULTS, ConfigError, build_config, load_config_file
from kvcache_sim.models import ModelError, load_models

MAX_USERS = 100_000
MAX_DURATION_S = 86_400
MAX_GPU_MEMORY_GB = 65_536
MAX_CPU_MEMORY_GB = 131_072
# A cache directory may not live in (or be) one of these; /dev/shm is a scratch tmpfs and allowed.
SYSTEM_DIRS = ("/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/usr", "/boot", "/sys", "/proc", "/dev",
               "/var/lib", "/var/log", "/run")
ALLOWED_UNDER_SYSTEM = ("/dev/shm",)

log = logging.getLogger("kvcache_sim")
GIL_SWITCH_S = 0.001  # see run()


class InputError(ValueError):
    """Input kv-cache.py refuses before doing anything."""


class RunFailed(RuntimeError):
    """A run that could not start or finish (no result to report beyond the error)."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kv-cache.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"kv-cache.py {__version__}")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"])
    w = p.add_argument_group("workload")
    w.add_argument("--model", default="llama3.1-8b", help="model whose KV cache is simulated (default llama3.1-8b)")
    w.add_argument("--models-file", help="model table YAML (default: configs/kvcache/models.yaml of this checkout)")
    w.add_argument("--num-users", type=int, default=100, help="concurrent simulated users (default 100)")
    w.add_argument("--duration", type=float, default=60, help="seconds of measured run (default 60)")
    w.add_argument("--generation-mode", choices=sorted(DEFAULTS["generation_timing"]), default="realistic",
                   help="simulated decode time per token: none 0, fast 2 ms, realistic 30 ms (default realistic)")
    w.add_argument("--performance-profile", choices=["latency", "throughput"], default="latency",
                   help="which pass/fail criteria storage_health applies (default latency)")
    w.add_argument("--disable-multi-turn", action="store_true", help="every request starts a new conversation")
    w.add_argument("--disable-prefix-caching", action="store_true", help="no shared system-prompt KV")
    w.add_argument("--enable-rag", action="store_true", help="requests retrieve documents whose KV is cached")
    w.add_argument("--rag-num-docs", type=int, default=10, help="documents in the RAG corpus (default 10)")
    w.add_argument("--max-concurrent-allocs", type=int, default=0,
                   help="KV writes in flight at once (a semaphore on writes only; 0: no limit)")
    w.add_argument("--max-requests", type=int, default=0, help="stop after this many requests (0: run for --duration)")
    w.add_argument("--seed", type=int, help="seed of every random choice (same seed, same request sequence)")
    w.add_argument("--config", help="YAML overriding the simulation defaults; unknown keys are errors")
    phase = w.add_mutually_exclusive_group()
    phase.add_argument("--prefill-only", action="store_true", help="write KV only (a disaggregated prefill node)")
    phase.add_argument("--decode-only", action="store_true", help="read pre-populated KV only (a decode node)")
    t = p.add_argument_group("trace replay")
    t.add_argument("--trace-path", "--burst-trace-path", dest="trace_path",
                   help="CSV file, directory or glob with request/response token counts (BurstGPT columns)")
    t.add_argument("--use-burst-trace", action="store_true", help="(compatibility) replay --trace-path")
    t.add_argument("--trace-speedup", type=float, default=1.0, help="divide trace timestamps by this (0: no pacing)")
    t.add_argument("--replay-cycles", type=int, default=0, help="passes over the trace (0: until --duration)")
    c = p.add_argument_group("cache tiers")
    c.add_argument("--gpu-mem-gb", type=float, default=16.0, help="GPU tier GiB (needs CUDA and torch; 0 disables)")
    c.add_argument("--cpu-mem-gb", type=float, default=32.0, help="CPU tier GiB (0 disables)")
    c.add_argument("--cache-dir", help="storage tier directory (required: the storage under test)")
    c.add_argument("--storage-capacity-gb", type=float, default=0.0,
                   help="storage tier GiB (0: a share of the free space, divided among MPI ranks)")
    c.add_argument("--keep-cache-files", action="store_true", help="leave the storage tier's .npy files at the end")
    o = p.add_argument_group("output")
    o.add_argument("--output", help="result JSON (default kv_cache_results_<timestamp>.json)")
    o.add_argument("--request-log", help="write every request's seed-determined fields and its enqueue time (enqueued_s, "
                                                 "seconds after the start) as JSON lines")
    o.add_argument("--request-trace", help="write every served request with the reads and writes it did, as JSON lines")
    o.add_argument("--validate-only", action="store_true", help="check every input, then exit without any I/O")
    o.add_argument("--enable-latency-tracing", "--trace-io", dest="latency_tracing", action="store_true",
                   help="trace this client's I/O on --cache-dir (bpftrace, as root) into <output>_io_trace.json")
    return p


def under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def check_cache_dir(raw: str | None) -> Path:
    if not raw:
        raise InputError("--cache-dir is required: it is the storage tier under test")
    resolved = os.path.realpath(os.path.abspath(os.path.expanduser(raw)))
    if resolved == "/":
        raise InputError("--cache-dir may not be the root directory")
    if not any(under(resolved, ok) for ok in ALLOWED_UNDER_SYSTEM):
        for root in SYSTEM_DIRS:
            if under(resolved, root):
                raise InputError(f"--cache-dir {raw} resolves to {resolved}, inside the system directory {root}; "
                                 "point it at the storage under test")
    return Path(resolved)


def validate(args: argparse.Namespace) -> None:
    """Refuse absurd or dangerous input with one clear message."""
    if args.num_users < 1:
        raise InputError(f"--num-users must be at least 1 (got {args.num_users})")
    if args.num_users > MAX_USERS:
        raise InputError(f"--num-users {args.num_users} is above the limit of {MAX_USERS}")
    if not args.duration > 0:
        raise InputError(f"--duration must be greater than 0 seconds (got {args.duration})")
    if args.duration > MAX_DURATION_S:
        raise InputError(f"--duration {args.duration:g} s is more than a day ({MAX_DURATION_S} s)")
    for flag, value, limit in (("--gpu-mem-gb", args.gpu_mem_gb, MAX_GPU_MEMORY_GB),
                               ("--cpu-mem-gb", args.cpu_mem_gb, MAX_CPU_MEMORY_GB),
                               ("--storage-capacity-gb", args.storage_capacity_gb, None)):
        if value < 0:
            raise InputError(f"{flag} must not be negative (got {value:g})")
        if limit is not None and value > limit:
            raise InputError(f"{flag} {value:g} is above the limit of {limit}")
    for flag, value in (("--max-concurrent-allocs", args.max_concurrent_allocs), ("--max-requests", args.max_requests),
                        ("--rag-num-docs", args.rag_num_docs), ("--replay-cycles", args.replay_cycles)):
        if value < 0:
            raise InputError(f"{flag} must not be negative (got {value})")
    if args.trace_speedup < 0:
        raise InputError(f"--trace-speedup must not be negative (got {args.trace_speedup:g})")
    if args.enable_rag and args.rag_num_docs < 1:
        raise InputError("--enable-rag needs --rag-num-docs of at least 1")
    if args.use_burst_trace and not args.trace_path:
        raise InputError("--use-burst-trace needs --trace-path")
    if args.decode_only and args.trace_path:
        raise InputError("--decode-only reads pre-populated KV and cannot replay a trace")


def world_size() -> int:
    for name in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_NTASKS"):
        value = os.environ.get(name)
        if value and value.isdigit() and int(value) > 0:
            return int(value)
    return 1


def storage_capacity(args: argparse.Namespace, cache_dir: Path, fraction: float) -> int:
    if args.storage_capacity_gb > 0:
        return int(args.storage_capacity_gb * (1 << 30))
    free = shutil.disk_usage(cache_dir).free
    return int(free * fraction / world_size())


@dataclass
class Inputs:
    cache_dir: Path
    config: dict[str, Any]
    model: Any
    trace: Any


def check_inputs(args: argparse.Namespace) -> Inputs:
    """Everything that can be refused before any I/O (no numpy needed)."""
    from kvcache_sim.workload import TraceError, load_trace

    validate(args)
    cache_dir = check_cache_dir(args.cache_dir)
    try:
        config = load_config_file(args.config) if args.config else build_config()
        models = load_models(args.models_file, config["model_configs"])
    except (ConfigError, ModelError) as exc:
        raise InputError(str(exc)) from None
    if args.model not in models:
        raise InputError(f"unknown --model {args.model!r} (known: {', '.join(sorted(models))})")
    trace = None
    if args.trace_path:
        try:
            trace = load_trace(args.trace_path)
        except (TraceError, OSError) as exc:
            raise InputError(str(exc)) from None
    return Inputs(cache_dir, config, models[args.model], trace)


def run(args: argparse.Namespace) -> int:
    inputs = check_inputs(args)
    if args.validate_only:
        print(f"kv-cache.py: input valid (model {inputs.model.key}, {inputs.model.kv_bytes_per_token} KV bytes/token)")
        return 0
    from kvcache_sim import latency_trace, report
    from kvcache_sim.cache import MultiTierCache
    from kvcache_sim.engine import Engine, RunSettings
    from kvcache_sim.payload import ChunkBuffers, KVData
    from kvcache_sim.storage import StorageTier
    from kvcache_sim.tiers import CpuTier, GpuTier, gpu_available, numpy_dtype
    from kvcache_sim.workload import Features

    cache_dir, config, model, trace = inputs.cache_dir, inputs.config, inputs.model, inputs.trace
    seed = args.seed if args.seed is not None else int(time.time()) & 0x7FFFFFFF
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create --cache-dir {cache_dir}: {exc.strerror}") from None
    stale = StorageTier.stale_files(cache_dir)
    if stale:
        log.warning("removing %d KV files a previous run left in %s", len(stale), cache_dir)
        for path in stale:
            path.unlink(missing_ok=True)

    buffers = ChunkBuffers(int(config["engine"]["io_chunk_kib"]) << 10)
    tiers: list[Any] = []
    enabled = {"gpu": False, "cpu": args.cpu_mem_gb > 0, "storage": True}
    if args.gpu_mem_gb > 0:
        if gpu_available():
            tiers.append(GpuTier(int(args.gpu_mem_gb * (1 << 30)), buffers=buffers))
            enabled["gpu"] = True
        else:
            log.warning("--gpu-mem-gb %g ignored: no CUDA device (or no torch); the GPU tier is disabled", args.gpu_mem_gb)
    if args.cpu_mem_gb > 0:
        tiers.append(CpuTier(int(args.cpu_mem_gb * (1 << 30)), buffers=buffers))
    tiers.append(StorageTier(storage_capacity(args, cache_dir, config["storage"]["auto_capacity_fraction"]), cache_dir,
                             buffers=buffers))
    cache = MultiTierCache(tiers)
    data = KVData(model.elements_per_token, numpy_dtype(model.dtype), int(config["engine"]["data_pool_mib"]), seed)
    phase = "prefill" if args.prefill_only else "decode" if args.decode_only else "both"
    settings = RunSettings(
        model=model, num_users=args.num_users, duration=args.duration, generation_mode=args.generation_mode,
        max_concurrent_allocs=args.max_concurrent_allocs, max_requests=args.max_requests, seed=seed,
        features=Features(multi_turn=not args.disable_multi_turn, prefix_caching=not args.disable_prefix_caching,
                          rag=args.enable_rag),
        rag_num_docs=args.rag_num_docs if args.enable_rag else 0, phase=phase, trace=trace,
        trace_speedup=args.trace_speedup, replay_cycles=args.replay_cycles,
        request_log=Path(args.request_log) if args.request_log else None,
        request_trace=Path(args.request_trace) if args.request_trace else None)
    engine = Engine(settings, config, cache, data)
    # Every chunk a worker writes or reads hands the GIL back; with its default 5 ms interval a
    # worker whose syscall has returned waits on others' Python. 1 ms raised the storage write
    # rate by about 6 % (bench/kvcache_vs_fio.py, interleaved runs) and costs nothing measurable.
    sys.setswitchinterval(GIL_SWITCH_S)
    output = Path(args.output or f"kv_cache_results_{time.strftime('%Y%m%d_%H%M%S')}.json")
    log.info("model %s: %d KV bytes/token; %d users, %d workers, %g s; tiers %s; cache dir %s",
             model.key, model.kv_bytes_per_token, args.num_users, engine.workers, args.duration,
             ", ".join(f"{t.name} {t.capacity / (1 << 30):.2f} GiB" for t in tiers), cache_dir)
    try:
        try:
            engine.prepare()
        except MemoryError as exc:
            raise RunFailed(f"out of memory preparing the run: {exc or 'MemoryError'}") from None
        except OSError as exc:
            raise RunFailed(f"preparing the run: {exc}") from None
        try:
            with latency_trace.traced(args.latency_tracing, cache_dir, output):
                outcome = engine.run()
        except latency_trace.TracingUnavailable as exc:
            raise InputError(str(exc)) from None
        entries, used = cache.entry_counts(), cache.used_bytes()
    finally:
        if not args.keep_cache_files:
            cache.clear()
        cache.close()
    run_args = {k: v for k, v in vars(args).items()}
    run_args.update(seed=seed, cache_dir=str(cache_dir), storage_capacity_bytes=tiers[-1].capacity,
                    phase=phase, kv_cache_version=__version__)
    result = report.build(settings, run_args, config, cache, outcome, entries, used, enabled, args.performance_profile)
    # Which client wrote this file and what it did about the page cache, so a multi-host run
    # can be described per host from the rank files alone.
    result["host"] = {"hostname": socket.gethostname(), "page_cache": tiers[-1].page_cache_record()}
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(f".{output.name}.tmp")
    tmp.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, output)
    s, cs = result["summary"], result["summary"]["cache_stats"]
    print(f"kv-cache.py: {s['total_requests']} requests done, {s['requests_failed']} failed "
          f"(KV not stored), {s['requests_truncated_at_deadline']} cut by the deadline; "
          f"{s['total_tokens']} tokens in {s['elapsed_time']:.1f} s; "
          f"storage read {cs['tier_storage_read_bandwidth_gbps']:.3f} GiB/s, write {cs['tier_storage_write_bandwidth_gbps']:.3f} GiB/s, "
          f"device P95 read {cs['storage_read_device_p95_ms']:.2f} ms, write {cs['storage_write_device_p95_ms']:.2f} ms; "
          f"output {output}", flush=True)
    if outcome.errors:
        print(f"kv-cache.py: error: the run failed: {outcome.errors[0]}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=getattr(logging, args.log_level), format="%(asctime)s %(levelname)s %(message)s",
                        stream=sys.stderr)
    try:
        return run(args)
    except InputError as exc:
        print(f"kv-cache.py: error: {exc}", file=sys.stderr)
        return 2
    except RunFailed as exc:
        print(f"kv-cache.py: error: the run failed: {exc}", file=sys.stderr)
        return 1
    except MemoryError as exc:  # anywhere outside a worker (a worker's ends the run with a result file)
        print(f"kv-cache.py: error: the run failed: out of memory: {exc or 'MemoryError'}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("kv-cache.py: interrupted", file=sys.stderr)
        return 130
