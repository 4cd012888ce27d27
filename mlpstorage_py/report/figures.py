"""Published figures of one result, exactly as the rules define them (3.3.8, 4.3.6, 5.x, 6.3.4).

Each function takes the leaves of one result and returns (figures, issues): figures are the
values of the results table (None where the rules say the cell is blank), issues are messages
explaining a blank or an invalid aggregation.
"""

from __future__ import annotations

import statistics
from typing import Any

from mlpstorage_py.checker.package import Leaf
from mlpstorage_py.rules.tables import checker

Figures = dict[str, Any]


def _metric(leaf: Leaf) -> dict[str, Any]:
    summary = leaf.summary or {}
    return summary.get("metric") or {} if "__unreadable__" not in summary else {}


def _mean_of(leaves: list[Leaf], key: str) -> float | None:
    """Arithmetic mean of one metric over leaves; None (blank) when any leaf lacks it."""
    values = [_metric(leaf).get(key) for leaf in leaves]
    if not values or any(not isinstance(v, (int, float)) for v in values):
        return None
    return statistics.fmean(values)


def training(runs: list[Leaf]) -> tuple[Figures, list[str]]:
    """Rules 3.3.8: the earliest of the run leaves is the warm-up; the other five are measured."""
    issues: list[str] = []
    expected = checker()["runs_per_result"]["training"]
    ordered = sorted(runs, key=lambda leaf: leaf.path.name)
    if len(ordered) != expected:
        issues.append(f"expected {expected} training runs (1 warm-up + {expected - 1}), found {len(ordered)}")
    measured = ordered[1:]
    io = _mean_of(measured, "train_io_mean_MB_per_second")
    figures: Figures = {"read_bw_gib_s": io / 1024 if io is not None else None, "measured_runs": [l.path.name for l in measured],
                        "warmup_run": ordered[0].path.name if ordered else None}
    names = sorted({k[len("train_"):] for leaf in measured for k, v in _metric(leaf).items()
                    if k.startswith("train_") and isinstance(v, list)})
    for name in names:
        per_run = [_metric(leaf).get(f"train_{name}") for leaf in measured]
        if any(not isinstance(v, list) or not v for v in per_run):
            issues.append(f"metric train_{name} is empty in a measured run; cannot aggregate")
            figures[f"train_mean_of_{name}"] = None
            continue
        figures[f"train_mean_of_{name}"] = statistics.fmean(statistics.fmean(v) for v in per_run)
    if figures["read_bw_gib_s"] is None:
        issues.append("a measured run lacks metric.train_io_mean_MB_per_second: Read B/W is blank")
    return figures, issues


def _count(leaf: Leaf, key: str) -> int:
    meta = leaf.metadata or {}
    value = (meta.get("args") or {}).get(key)
    if value is None:
        value = ((meta.get("parameters") or {}).get("checkpoint") or {}).get(key)
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def checkpointing(leaves: list[Leaf]) -> tuple[Figures, list[str]]:
    """Rules 4.3.6: means over the write-phase and over the read-phase leaves."""
    writes = [l for l in leaves if _count(l, "num_checkpoints_write") > 0 or "save_checkpoint_io_mean_GB_per_second" in _metric(l)]
    reads = [l for l in leaves if _count(l, "num_checkpoints_read") > 0 or "load_checkpoint_io_mean_GB_per_second" in _metric(l)]
    figures = {
        "write_bw_gib_s": _mean_of(writes, "save_checkpoint_io_mean_GB_per_second"),
        "write_duration_s": _mean_of(writes, "save_checkpoint_duration_mean_seconds"),
        "read_bw_gib_s": _mean_of(reads, "load_checkpoint_io_mean_GB_per_second"),
        "read_duration_s": _mean_of(reads, "load_checkpoint_duration_mean_seconds"),
    }
    issues = [f"{k} is blank: a {'write' if 'write' in k else 'read'}-phase run lacks it" for k, v in figures.items() if v is None]
    return figures, issues


def vector_database(runs: list[Leaf]) -> tuple[Figures, list[str]]:
    """Means over the query runs of throughput, p99 latency and recall (5.3.x)."""
    issues: list[str] = []
    expected = checker()["runs_per_result"]["vector_database"]
    if len(runs) != expected:
        issues.append(f"expected {expected} vector database runs, found {len(runs)}")

    def mean(key: str) -> float | None:
        # disk figures sit at the top level (published summaries) or under disk_io (ours)
        values = [(leaf.summary or {}).get(key, ((leaf.summary or {}).get("disk_io") or {}).get(key)) for leaf in runs]
        return statistics.fmean(values) if values and all(isinstance(v, (int, float)) for v in values) else None

    recall = mean("recall")
    if recall is None:
        recall = mean("mean_recall")
    first = runs[0].summary or {} if runs else {}
    figures = {"qps": mean("throughput_qps"), "p99_latency_ms": mean("p99_latency_ms"),
               "recall_percentage": recall * 100 if recall is not None else None,
               "num_vectors": first.get("num_vectors"), "dimension": first.get("dimension"),
               "index_type": first.get("index_type"), "read_iops": mean("read_iops"),
               "read_bw_gib_s": (mean("read_mbps") or 0) / 1024 if mean("read_mbps") is not None else None}
    return figures, issues


KV_FIELDS = {"throughput_tok_s": "aggregated_storage_throughput_tokens_per_sec",
             "read_bw_gib_s": "aggregated_read_bandwidth_gbps",
             "write_bw_gib_s": "aggregated_write_bandwidth_gbps",
             "p95_read_latency_ms": "aggregated_device_read_p95_ms"}


def kv_cache(runs: list[Leaf]) -> tuple[Figures, list[str]]:
    """Rules 6.3.4: the per-Option headline from the run's aggregated summary.json."""
    issues: list[str] = []
    if len(runs) != 1:
        issues.append(f"expected 1 KV cache run, found {len(runs)}")
    options = ((runs[-1].summary or {}).get("options") or {}) if runs else {}
    figures: Figures = {}
    for option in ("1", "2", "3"):
        block = options.get(option) or {}
        for name, key in KV_FIELDS.items():
            value = block.get(key)
            figures[f"option{option}_{name}"] = value if isinstance(value, (int, float)) else None
    return figures, issues
