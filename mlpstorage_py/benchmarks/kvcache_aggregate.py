"""KV cache aggregation (Rules 6.3.4): the rank result files of each trial and the per-Option
aggregate over trials x ranks, kept apart from the launching so both stay readable."""

from __future__ import annotations

import json
import os
from pathlib import Path
from statistics import fmean
from typing import Any

from mlpstorage_py.errors import BenchmarkFailed
from mlpstorage_py.results.kv import RANK_COUNT, TOTAL_RANKS, TRIAL_COUNT
from mlpstorage_py.results.logs import log

# -- aggregation (Rules 6.3.4) --------------------------------------------------------------
# summary.figures_reference_way keys kv-cache.py reports, reduced like ours.
REFERENCE_WAY = {"read_bandwidth_gbps": "tier_storage_read_bandwidth_gbps",
                 "write_bandwidth_gbps": "tier_storage_write_bandwidth_gbps",
                 "avg_throughput_tokens_per_sec": "avg_throughput_tokens_per_sec"}

def rank_file(trial_dir: Path, rank: int) -> Path | None:
    """The one result file of a rank; None when absent. Two files is an isolation failure."""
    files = sorted((trial_dir / f"rank_{rank}").glob("kvcache_results_*.json"))
    if len(files) > 1:
        raise BenchmarkFailed(f"{trial_dir / f'rank_{rank}'} holds {len(files)} result files; each rank must write one (Rules 6.3.3.3)")
    return files[0] if files else None


def read_trial(trial_dir: Path, total_ranks: int) -> dict[int, dict[str, Any] | None]:
    """rank -> its parsed result, or None when missing or unreadable."""
    results: dict[int, dict[str, Any] | None] = {}
    for rank in range(total_ranks):
        path = rank_file(trial_dir, rank)
        data = None
        if path is not None:
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
                if not isinstance(data.get("summary"), dict):
                    log.warning(f"{path} has no summary; counted as missing")
                    data = None
            except (OSError, json.JSONDecodeError) as exc:
                log.warning(f"cannot read {path}: {exc}; counted as missing")
        results[rank] = data
    return results


def _stats(result: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    summary = result.get("summary") or {}
    return summary, summary.get("cache_stats") or {}


def aggregate_option(option: str, trials: list[dict[int, dict[str, Any] | None]], total_ranks: int) -> dict[str, Any]:
    """One Option's aggregate over trials x ranks:
    bandwidth and storage throughput: sum over a trial's ranks, fmean over trials (6.3.4.1/2);
    device P95s: max over all ranks and trials (6.3.4.3); ranks with storage_entries == 0
    contribute 0.0 to the device latencies and are listed in cpu_tier_ranks (6.3.4.4)."""
    per_trial: list[dict[str, Any]] = []
    missing: list[str] = []
    cpu_tier: list[dict[str, int]] = []
    for trial, ranks in enumerate(trials):
        present: dict[int, dict[str, Any]] = {}
        for rank in range(total_ranks):
            result = ranks.get(rank)
            if result is None:
                missing.append(f"option_{option}/trial_{trial}/rank_{rank}")
            else:
                present[rank] = result
        sums = {"read_bandwidth_gbps": 0.0, "write_bandwidth_gbps": 0.0, "storage_throughput_tokens_per_sec": 0.0,
                "avg_throughput_tokens_per_sec": 0.0, **{f"reference_way_{k}": 0.0 for k in REFERENCE_WAY}}
        counts = {"requests_completed": 0, "requests_failed": 0, "requests_truncated_at_deadline": 0}
        maxima = {"device_read_p95_ms": 0.0, "device_write_p95_ms": 0.0, "storage_read_p95_ms": 0.0, "p95_latency_ms": 0.0}
        trial_cpu: list[int] = []
        for rank, result in sorted(present.items()):
            summary, cache = _stats(result)
            storage_rank = cache.get("storage_entries", 0) > 0
            if not storage_rank:
                trial_cpu.append(rank)
                cpu_tier.append({"trial": trial, "rank": rank})
            sums["read_bandwidth_gbps"] += float(cache.get("tier_storage_read_bandwidth_gbps", 0.0))
            sums["write_bandwidth_gbps"] += float(cache.get("tier_storage_write_bandwidth_gbps", 0.0))
            sums["storage_throughput_tokens_per_sec"] += float(summary.get("storage_throughput_tokens_per_sec", 0.0))
            sums["avg_throughput_tokens_per_sec"] += float(summary.get("avg_throughput_tokens_per_sec", 0.0))
            counts["requests_completed"] += int(summary.get("total_requests", 0))
            counts["requests_failed"] += int(summary.get("requests_failed", 0))
            counts["requests_truncated_at_deadline"] += int(summary.get("requests_truncated_at_deadline", 0))
            reference = summary.get("figures_reference_way") or {}
            for key, source in REFERENCE_WAY.items():
                sums[f"reference_way_{key}"] += float(reference.get(source, 0.0))
            if storage_rank:
                maxima["device_read_p95_ms"] = max(maxima["device_read_p95_ms"], float(cache.get("storage_read_device_p95_ms", 0.0)))
                maxima["device_write_p95_ms"] = max(maxima["device_write_p95_ms"], float(cache.get("storage_write_device_p95_ms", 0.0)))
                maxima["storage_read_p95_ms"] = max(maxima["storage_read_p95_ms"], float(cache.get("storage_read_p95_ms", 0.0)))
            maxima["p95_latency_ms"] = max(maxima["p95_latency_ms"], float((summary.get("end_to_end_latency_ms") or {}).get("p95", 0.0)))
        per_trial.append({"trial": trial, "ranks_reported": len(present), "cpu_tier_ranks": trial_cpu, **sums, **maxima,
                          **counts})
    counted = [t for t in per_trial if t["ranks_reported"]]

    def mean(key: str) -> float:
        return fmean(t[key] for t in counted) if counted else 0.0

    def peak(key: str) -> float:
        return max((t[key] for t in counted), default=0.0)

    partial = bool(missing)
    return {
        "option": int(option),
        "aggregated_read_bandwidth_gbps": mean("read_bandwidth_gbps"),
        "aggregated_write_bandwidth_gbps": mean("write_bandwidth_gbps"),
        "aggregated_avg_throughput_tokens_per_sec": mean("avg_throughput_tokens_per_sec"),
        "aggregated_storage_throughput_tokens_per_sec": mean("storage_throughput_tokens_per_sec"),
        "aggregated_p95_latency_ms": peak("p95_latency_ms"),
        "aggregated_device_read_p95_ms": peak("device_read_p95_ms"),
        "aggregated_device_write_p95_ms": peak("device_write_p95_ms"),
        "aggregated_storage_read_p95_ms": peak("storage_read_p95_ms"),
        RANK_COUNT: total_ranks,
        TRIAL_COUNT: len(trials),
        TOTAL_RANKS: total_ranks,
        "partial_failure": partial,
        "missing_files": missing,
        # Over every rank and trial: requests whose I/O all happened, and those that could not
        # store their KV (never counted in the figures above).
        "requests_completed": sum(t["requests_completed"] for t in per_trial),
        "requests_failed": sum(t["requests_failed"] for t in per_trial),
        "cpu_tier_ranks": sorted({c["rank"] for c in cpu_tier}),
        "cpu_tier_rank_trials": cpu_tier,
        "all_ranks_cpu_tier": bool(counted) and all(len(t["cpu_tier_ranks"]) == t["ranks_reported"] for t in counted),
        "per_trial": per_trial,
        # The same reductions over each rank's figures_reference_way (nominal duration, no
        # demotion writes), to set beside published results; absent figures count 0.
        "aggregated_reference_way": {key: mean(f"reference_way_{key}") for key in REFERENCE_WAY},
        "headline": {"storage_read_bandwidth_gbps": mean("read_bandwidth_gbps"),
                     "device_read_p95_ms": peak("device_read_p95_ms"),
                     "device_write_p95_ms": peak("device_write_p95_ms"),
                     "storage_throughput_tokens_per_sec": mean("storage_throughput_tokens_per_sec"),
                     TOTAL_RANKS: total_ranks},
    }


def _rank_index(leaf: Path, option: str, trials: list[dict[int, dict[str, Any] | None]]) -> dict[str, Any]:
    """Where each rank's file is and the numbers aggregation used from it."""
    index: dict[str, Any] = {}
    for trial, ranks in enumerate(trials):
        entry: dict[str, Any] = {}
        for rank, result in ranks.items():
            path = rank_file(leaf / f"option_{option}" / f"trial_{trial}", rank)
            if result is None:
                entry[f"rank_{rank}"] = {"file": None, "status": "missing"}
                continue
            summary, cache = _stats(result)
            entry[f"rank_{rank}"] = {
                "file": os.path.relpath(path, leaf) if path else None, "status": result.get("status", "ok"),
                "seed": result.get("seed"), "storage_entries": cache.get("storage_entries", 0),
                "tier_storage_read_bandwidth_gbps": cache.get("tier_storage_read_bandwidth_gbps", 0.0),
                "tier_storage_write_bandwidth_gbps": cache.get("tier_storage_write_bandwidth_gbps", 0.0),
                "storage_throughput_tokens_per_sec": summary.get("storage_throughput_tokens_per_sec", 0.0),
                "storage_read_device_p95_ms": cache.get("storage_read_device_p95_ms", 0.0),
                "storage_write_device_p95_ms": cache.get("storage_write_device_p95_ms", 0.0)}
        index[f"trial_{trial}"] = entry
    return index
