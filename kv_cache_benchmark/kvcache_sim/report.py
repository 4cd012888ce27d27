"""The output JSON: run settings, `summary` (throughput, latencies, QoS) and `summary.cache_stats`.

Units: *_gb are GiB (2^30 bytes), *_bandwidth_gbps are GiB/s over the run's elapsed time,
*_iops are storage-tier operations per second, *_ms are milliseconds.
"""

from __future__ import annotations

from typing import Any

from kvcache_sim.cache import MultiTierCache, TierStats
from kvcache_sim.engine import Outcome, RunSettings
from kvcache_sim.stats import PERCENTILES, Series, summarize_ms
from kvcache_sim.tiers import GIB

# mlpstorage reads it as results/kv.py KvRank.VERSION; this package does not import mlpstorage (README),
# so tests/test_record_schemas.py keeps the two equal.
SCHEMA = "mlps-kvcache-result/1"
# Percentiles of a latency series that must be backed by this many samples before an SLA check uses them.
MIN_SAMPLES = {"p95": 20, "p99": 100, "p999": 1000, "p9999": 10000}


def _tier_block(stats: TierStats, elapsed: float, used: int, entries: int) -> dict[str, Any]:
    name = stats.name
    block: dict[str, Any] = {
        f"{name}_entries": entries,
        f"tier_{name}_kv_bytes_written_gb": stats.bytes_written / GIB,
        f"tier_{name}_kv_bytes_read_gb": stats.bytes_read / GIB,
        f"tier_{name}_write_bandwidth_gbps": stats.bytes_written / GIB / elapsed if elapsed > 0 else 0.0,
        f"tier_{name}_read_bandwidth_gbps": stats.bytes_read / GIB / elapsed if elapsed > 0 else 0.0,
        f"tier_{name}_read_ops": stats.read_ops,
        f"tier_{name}_write_ops": stats.write_ops,
        f"tier_{name}_used_gb": used / GIB,
    }
    for op, series in (("read", stats.read_latency), ("write", stats.write_latency)):
        summary = series.summary_ms()
        block.update({f"{name}_{op}_{p}_ms": summary[p] for p in PERCENTILES})
    return block


def _storage_detail(stats: TierStats) -> dict[str, Any]:
    """Device spans (a read's open() and data reads after the page-cache drop; a write's fsync) and
    host spans of the storage tier."""
    block: dict[str, Any] = {}
    for op, device, host in (("read", stats.read_device, stats.read_host), ("write", stats.write_device, stats.write_host)):
        for kind, series in (("device", device), ("host", host)):
            summary = series.summary_ms()
            block.update({f"storage_{op}_{kind}_{p}_ms": summary[p] for p in PERCENTILES})
            block[f"storage_{op}_{kind}_mean_ms"] = summary["mean"]
    return block


def _storage_health(profile: str, cache_stats: dict[str, Any]) -> dict[str, Any]:
    if profile == "latency":
        write_p95 = cache_stats["storage_write_device_p95_ms"] or cache_stats["storage_write_p95_ms"]
        criteria = [("storage write P95", 500.0, write_p95, "ms", write_p95 < 500.0),
                    ("storage read P95", 200.0, cache_stats["storage_read_p95_ms"], "ms",
                     cache_stats["storage_read_p95_ms"] < 200.0),
                    ("CPU memory P95", 150.0, max(cache_stats["cpu_read_p95_ms"], cache_stats["cpu_write_p95_ms"]), "ms",
                     max(cache_stats["cpu_read_p95_ms"], cache_stats["cpu_write_p95_ms"]) < 150.0),
                    ("cache hit rate", 0.30, cache_stats["cache_hit_rate"], "ratio", cache_stats["cache_hit_rate"] > 0.30)]
    else:
        criteria = [("storage read bandwidth", 0.0, cache_stats["tier_storage_read_bandwidth_gbps"], "GiB/s",
                     cache_stats["tier_storage_read_bandwidth_gbps"] > 0),
                    ("storage write bandwidth", 0.0, cache_stats["tier_storage_write_bandwidth_gbps"], "GiB/s",
                     cache_stats["tier_storage_write_bandwidth_gbps"] > 0)]
    rows = [{"name": n, "target": t, "actual": a, "unit": u, "passed": bool(p)} for n, t, a, u, p in criteria]
    passed = sum(r["passed"] for r in rows)
    return {"profile": profile, "overall_status": "PASS" if passed == len(rows) else "FAIL", "criteria": rows,
            "passed_count": passed, "total_count": len(rows)}


def _qos(config: dict[str, Any], series: dict[str, Series], counters: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"latency_basis": "service latency: queue wait + KV cache I/O, excluding simulated generation"}
    for level, profile in config["qos_profiles"].items():
        samples = series[level].samples
        targets = profile["sla_ms"]
        if not samples:
            out[level] = {"priority": profile["priority"], "total_requests": 0, "no_data": True,
                          "sla": {"targets_ms": targets, "met": None, "compliance": None, "violations": 0}}
            continue
        latency = summarize_ms(samples)
        violations = sum(1 for s in samples if s * 1000.0 > targets["p95"])
        checked = {p: latency[p] <= targets[p] for p in targets if len(samples) >= MIN_SAMPLES.get(p, 0)}
        out[level] = {"priority": profile["priority"], "total_requests": len(samples), "no_data": False,
                      "latency_ms": latency,
                      "sla": {"targets_ms": targets, "met": all(checked.values()), "percentiles_checked": sorted(checked),
                              "compliance": 1.0 - violations / len(samples), "violations": violations}}
    return out


def build(settings: RunSettings, run_args: dict[str, Any], config: dict[str, Any], cache: MultiTierCache,
          outcome: Outcome, entries: dict[str, int], used: dict[str, int], tiers_enabled: dict[str, bool],
          performance_profile: str) -> dict[str, Any]:
    elapsed = outcome.elapsed
    c = outcome.counters
    by_name = {s.name: s for s in cache.stats}
    for name in ("gpu", "cpu", "storage"):
        by_name.setdefault(name, TierStats(name))
    cache_stats: dict[str, Any] = {}
    hits, misses = int(c.get("cache_hits")), int(c.get("cache_misses"))
    cache_stats.update(cache_hits=hits, cache_misses=misses,
                       cache_hit_rate=hits / (hits + misses) if hits + misses else 0.0)
    for name in ("gpu", "cpu", "storage"):
        cache_stats.update(_tier_block(by_name[name], elapsed, used.get(name, 0), entries.get(name, 0)))
    storage = by_name["storage"]
    cache_stats.update(_storage_detail(storage))
    total_read = sum(s.bytes_read for s in by_name.values())
    total_write = sum(s.bytes_written for s in by_name.values())
    cache_stats.update(
        gpu_memory_used_gb=used.get("gpu", 0) / GIB, cpu_memory_used_gb=used.get("cpu", 0) / GIB,
        storage_used_gb=used.get("storage", 0) / GIB,
        offloads_cpu=by_name["cpu"].offloads_in, offloads_storage=storage.offloads_in,
        evictions_storage=storage.evictions, rejected_writes=int(c.get("rejected_writes")),
        prefill_writes=int(c.get("prefill_writes")), decode_rewrites=int(c.get("decode_rewrite_writes")),
        decode_reads=int(c.get("decode_reads")),
        system_prompt_hits=int(c.get("system_prompt_hits")), multi_turn_hits=int(c.get("multi_turn_hits")),
        rag_hits=int(c.get("rag_hits")),
        total_read_bytes=total_read, total_write_bytes=total_write,
        total_read_gb=total_read / GIB, total_write_gb=total_write / GIB,
        read_write_ratio=total_read / total_write if total_write else 0.0,
        storage_read_ops=storage.read_ops, storage_write_ops=storage.write_ops,
        storage_demotion_writes=storage.offloads_in, storage_demotion_bytes_written=storage.offload_bytes_in,
        read_iops=storage.read_ops / elapsed if elapsed > 0 else 0.0,
        write_iops=storage.write_ops / elapsed if elapsed > 0 else 0.0,
        storage_tokens_processed=storage.tokens_read + storage.tokens_written,
        tiers_enabled=tiers_enabled,
    )
    cache_stats["storage_health"] = _storage_health(performance_profile, cache_stats)

    io_time = outcome.storage_io.total()
    requests = outcome.requests
    summary: dict[str, Any] = {
        "total_requests": requests,
        "total_tokens": outcome.tokens,
        "elapsed_time": elapsed,
        "avg_throughput_tokens_per_sec": outcome.tokens / elapsed if elapsed > 0 else 0.0,
        "total_storage_io_time": io_time,
        # Generated tokens per second of KV cache I/O time summed over requests (all tiers).
        "storage_throughput_tokens_per_sec": outcome.tokens / io_time if io_time > 0 else 0.0,
        "requests_per_second": requests / elapsed if elapsed > 0 else 0.0,
        "requests_pending_at_end": outcome.pending_at_end,
        "requests_truncated_at_deadline": int(c.get("truncated_at_deadline")),
        # Served, but some I/O it needed could not happen (its KV could not be stored): not
        # counted in total_requests, tokens, throughput or latency.
        "requests_failed": int(c.get("requests_failed")),
        "failed_requests": outcome.failures,
        "end_to_end_latency_ms": outcome.end_to_end.summary_ms(),
        "service_latency_ms": outcome.service.summary_ms(),
        "storage_io_latency_ms": outcome.storage_io.summary_ms(),
        "generation_latency_ms": outcome.generation.summary_ms(),
        "queue_wait_latency_ms": outcome.queue_wait.summary_ms(),
        "cache_stats": cache_stats,
        "qos_metrics": _qos(config, outcome.qos_service, c),
        # The reference's names: prefix_hits are requests that carry a system prompt (whose KV
        # lookup then misses: it is never written), bytes_saved the KV those prompts left out.
        "prefix_cache_stats": {"prefix_hits": int(c.get("prefix_hits")), "prefix_misses": int(c.get("prefix_misses")),
                               "system_prompt_reuse": int(c.get("prefix_hits")),
                               "system_prompt_lookup_hits": int(c.get("system_prompt_hits")),
                               "bytes_saved": int(c.get("prefix_bytes_saved"))},
        "multi_turn_stats": {"cache_hits": int(c.get("multi_turn_hits")), "cache_misses": int(c.get("multi_turn_misses")),
                             "hit_rate": _rate(c.get("multi_turn_hits"), c.get("multi_turn_misses"))},
        "rag_stats": {"enabled": settings.features.rag, "documents": settings.rag_num_docs,
                      "retrievals_hit": int(c.get("rag_hits")), "retrievals_missed": int(c.get("rag_misses"))},
        "concurrency": {"workers": outcome.workers, "peak_in_flight": outcome.peak_in_flight,
                        "peak_writes_in_flight": outcome.peak_writes_in_flight,
                        "max_concurrent_allocs": settings.max_concurrent_allocs},
        "memory": outcome.memory,
        "cpu_overhead": {"user_s": outcome.cpu_user_s, "system_s": outcome.cpu_system_s,
                         "user_ms_per_request": outcome.cpu_user_s * 1000.0 / requests if requests else 0.0,
                         "total_ms_per_request": (outcome.cpu_user_s + outcome.cpu_system_s) * 1000.0 / requests
                         if requests else 0.0},
        "errors": outcome.errors,
    }
    summary["differences_from_reference"], summary["figures_reference_way"] = reference_way(
        settings, outcome, storage, cache.tiers[-1].capacity)
    return {
        "schema": SCHEMA,
        "status": "failed" if outcome.errors else "ok",
        "run": run_args,
        "model": settings.model.as_dict(),
        "seed": settings.seed,
        "requests_completed": requests,
        "total_tokens_generated": outcome.tokens,
        "summary": summary,
    }


def _rate(hits: float, misses: float) -> float:
    return hits / (hits + misses) if hits + misses else 0.0


def reference_way(settings: RunSettings, outcome: Outcome, storage: TierStats,
                  capacity: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every place our figures knowingly differ from the MLCommons reference's (its accounting,
    its work after the deadline, its capacity), with the numbers to reconcile them, and the
    headline figures computed its way: divided by the nominal --duration, with CPU-to-storage
    demotion writes left out and every served request counted."""
    nominal = float(settings.duration)
    demoted = storage.offload_bytes_in
    written = storage.bytes_written
    c = outcome.counters
    failed, truncated = int(c.get("requests_failed")), int(c.get("truncated_at_deadline"))
    differences = [
        {"aspect": "elapsed_time",
         "ours": "real elapsed seconds: from the start to the last worker's end, so work finished after "
                 "the deadline is divided by the time it took",
         "reference": "the nominal --duration, also for work done after the deadline",
         "elapsed_time_s": outcome.elapsed, "nominal_duration_s": nominal},
        {"aspect": "storage_demotion_writes",
         "ours": "storage bytes written and write ops include the CPU-to-storage demotion writes",
         "reference": "demotion writes are not counted in storage bytes written",
         "storage_bytes_written": written, "storage_demotion_bytes_written": demoted,
         "storage_demotion_writes": storage.offloads_in,
         "storage_bytes_written_reference_way": written - demoted},
        {"aspect": "request_counting",
         "ours": "a request counts (requests, tokens, throughput, latency) only when every I/O it needed "
                 "happened: its KV stored and its decode reads done; one whose KV could not be stored is "
                 "counted in requests_failed",
         "reference": "every request taken from the queue counts as completed, whatever its I/O did",
         "requests_completed": outcome.requests, "requests_failed": failed,
         "requests_counted_reference_way": outcome.requests + failed + truncated},
        {"aspect": "work_after_deadline",
         "ours": "no I/O starts after the deadline: a request still in progress then is not completed "
                 "(requests_truncated_at_deadline) and its tokens are not counted",
         "reference": "requests in progress at the deadline run to the end and count",
         "requests_truncated_at_deadline": truncated},
        {"aspect": "storage_capacity",
         "ours": "the storage tier never holds more than its capacity: least recently used entries are "
                 "evicted to make room, and a write whose room is held by writes still in flight waits "
                 "for them (until the deadline)",
         "reference": "when eviction cannot free room it writes past the configured capacity "
                      "('forcing write to NVMe')",
         "storage_capacity_bytes": capacity, "storage_evictions": storage.evictions,
         "rejected_writes": int(c.get("rejected_writes"))},
    ]

    def per_nominal(value: float) -> float:
        return value / nominal if nominal > 0 else 0.0

    figures = {
        "basis": "the reference's way: over nominal_duration_s, storage writes without demotions, "
                 "failed and truncated requests (and their tokens) counted",
        "tier_storage_read_bandwidth_gbps": per_nominal(storage.bytes_read / GIB),
        "tier_storage_write_bandwidth_gbps": per_nominal((written - demoted) / GIB),
        "tier_storage_kv_bytes_written_gb": (written - demoted) / GIB,
        "read_iops": per_nominal(storage.read_ops),
        "write_iops": per_nominal(storage.write_ops - storage.offloads_in),
        "avg_throughput_tokens_per_sec": per_nominal(outcome.tokens + c.get("tokens_failed")
                                                     + c.get("tokens_truncated")),
        "requests_per_second": per_nominal(outcome.requests + failed + truncated),
    }
    return differences, figures
