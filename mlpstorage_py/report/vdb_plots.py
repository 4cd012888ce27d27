"""The vector runs of a result as a sweep of the search list (HNSW ef, DISKANN search_list):
recall against QPS, latency against the search list, and device reads per query, each run read
from its summary.json as figures.py reads it. A result whose runs record no search list (FLAT,
published packages) gets none of these; one without device counts gets no device chart.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from mlpstorage_py.report import figures
from mlpstorage_py.results.tree.package import Leaf

LATENCIES = {"p50": ("p50_latency_ms", "median_latency_ms"), "p95": ("p95_latency_ms",), "p99": ("p99_latency_ms",)}


def _number(value: Any) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def search_list(record: dict[str, Any]) -> int | None:
    """The run's search list: DISKANN's search_list, else its search_params' search_list or ef."""
    params = record.get("search_params")
    params = params if isinstance(params, dict) else {}
    for value in (record.get("search_list"), params.get("search_list"), params.get("ef")):
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _points(leaves: list[Leaf]) -> list[tuple[str, dict[str, Any], int]]:
    """(run, its record, its search list) of every run that records a search list."""
    points = []
    for leaf in leaves:
        record, _ = figures._vdb_record(leaf)
        found = search_list(record) if isinstance(record, dict) else None
        if isinstance(record, dict) and found is not None:
            points.append((leaf.path.name, record, found))
    return points


def sweep_charts(leaves: list[Leaf]) -> list[Any]:
    """Recall vs QPS, latency vs search list and device reads per query, where the runs record them."""
    from mlpstorage_py.report.plots import Chart

    points = _points(leaves)
    if not points:
        return []
    charts = []
    pairs = sorted((q, r * 100, f"{name} (L {sl})") for name, record, sl in points
                   if (q := _number(record.get("throughput_qps"))) is not None
                   and (r := _number(record.get("recall"))) is not None)
    if pairs:
        charts.append(Chart("vdb-recall-qps", "Recall against queries per second (one point per run)", "recall@k %",
                            "queries/s", "line", [label for _, _, label in pairs], {"Recall %": [r for _, r, _ in pairs]},
                            x_values=[q for q, _, _ in pairs]))
    lists = sorted({sl for _, _, sl in points})
    series: dict[str, list[float | None]] = {}
    for name, keys in LATENCIES.items():
        values = []
        for sl in lists:
            found = [v for _, record, s in points if s == sl
                     for v in [next((_number(record.get(k)) for k in keys if _number(record.get(k)) is not None), None)]
                     if v is not None]
            values.append(statistics.fmean(found) if found else None)
        if any(v is not None for v in values):
            series[f"{name} ms"] = values
    if series:
        repeated = len(points) > len(lists)
        charts.append(Chart("vdb-latency-search-list", "Query latency against the search list", "ms",
                            "search list (DISKANN search_list, HNSW ef)", "line", [str(sl) for sl in lists], series,
                            notes=["runs of the same search list are averaged"] if repeated else []))
    reads = [(f"{name} (L {sl})", _number(record.get("device_reads_per_query")),
              _number((record.get("expected_reads") or {}).get("reads_per_query"))
              if isinstance(record.get("expected_reads"), dict) else None) for name, record, sl in sorted(points, key=lambda p: p[2])]
    if any(measured is not None for _, measured, _ in reads):
        charts.append(Chart("vdb-device-reads", "Device reads per query", "reads per query", "run (search list)", "bar",
                            [label for label, _, _ in reads],
                            {"measured (block device)": [m for _, m, _ in reads],
                             "graph estimate (search_list x sectors per node)": [e for _, _, e in reads]},
                            notes=["measured: the index device's read I/Os over the timed window / queries"]))
    return charts
