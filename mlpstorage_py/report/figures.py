"""Published figures of one result, exactly as the rules define them (3.3.8, 4.3.6, 5.x; the KV
cache row, 6.3.4, is kv_rows').

Each function takes the leaves of one result and returns (figures, issues): figures are the
values of the results table (None where the rules say the cell is blank), issues are messages
explaining a blank or an invalid aggregation. The training figures (3.3.8) are computed in
results/summary, which rule 3.3.8 shares.
"""

from __future__ import annotations

import statistics
from typing import Any

from mlpstorage_py.results.summary import Figures, dlio_engine_note
from mlpstorage_py.results.summary import mean_of as _mean_of
from mlpstorage_py.results.summary import metric as _metric
from mlpstorage_py.results.tree.package import Leaf
from mlpstorage_py.rules.tables import checker


def _count(leaf: Leaf, key: str) -> int:
    meta = leaf.metadata or {}
    value = (meta.get("args") or {}).get(key)
    if value is None:
        value = ((meta.get("parameters") or {}).get("checkpoint") or {}).get(key)
    if value is None:
        return 0
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
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
    for leaf in sorted(leaves, key=lambda l: l.path.name):
        note = dlio_engine_note(leaf.summary, leaf.metadata)
        if note:
            issues.append(f"{leaf.path.name}: {note}")
    return figures, issues


def _json(path) -> dict[str, Any] | None:
    from mlpstorage_py.results.tree.files import load_json, real_file

    if not real_file(path):
        return None
    data, problem = load_json(path)
    return data if problem is None and isinstance(data, dict) else None


def _vdb_record(leaf: Leaf) -> tuple[dict[str, Any] | None, str]:
    """A query run's figures: its summary.json, else the engine's native statistics.json that
    summary.json is a copy of (at the leaf root or under vectordb/<phase>/), as the reference's
    report generator read published rows; (None, why) when neither is there."""
    from mlpstorage_py.results.tree.files import DIR, entries

    summary = leaf.summary
    if isinstance(summary, dict) and "__unreadable__" not in summary:
        return summary, "summary.json"
    paths = [leaf.path / "statistics.json"] + [d / "statistics.json" for _, kind, d in entries(leaf.path / "vectordb") if kind == DIR]
    for path in paths:
        data = _json(path)
        if data is not None:
            return data, path.relative_to(leaf.path).as_posix()
    return None, "no summary.json and no statistics.json"


def _vdb_recall(leaf: Leaf, record: dict[str, Any] | None, source: str) -> tuple[float | None, str]:
    for key in ("recall", "mean_recall"):
        value = (record or {}).get(key)
        if isinstance(value, dict):
            value = value.get("mean_recall")
        if isinstance(value, (int, float)):
            return value, f"{source} {key}"
    stats = _json(leaf.path / "recall_stats.json")
    if stats and isinstance(stats.get("mean_recall"), (int, float)):
        return stats["mean_recall"], "recall_stats.json mean_recall"
    return None, "no recall recorded"


def _vdb_fact(leaf: Leaf, record: dict[str, Any] | None, name: str) -> tuple[Any, str]:
    """num_vectors / dimension / index_type from the run's record, config.json, the metadata's
    args (a run records the dimension as vector_dim) or result_verdict.json's collection total."""
    config = _json(leaf.path / "config.json") or {}
    meta = leaf.metadata if isinstance(leaf.metadata, dict) else {}
    args = meta.get("args") or {}
    verdict = _json(leaf.path / "result_verdict.json") or {}
    sources = {"num_vectors": [("num_vectors", (record or {}).get("num_vectors")), ("config.json", config.get("num_vectors")),
                               ("metadata args", args.get("num_vectors")),
                               ("result_verdict.json flat_setup.total_vectors", (verdict.get("flat_setup") or {}).get("total_vectors"))],
               "dimension": [("dimension", (record or {}).get("dimension")), ("config.json vector_dim", config.get("vector_dim")),
                             ("metadata args", args.get("dimension") or args.get("vector_dim"))],
               "index_type": [("index_type", (record or {}).get("index_type")), ("config.json", config.get("index_type")),
                              ("metadata args", args.get("index_type") or args.get("vdb_index"))]}[name]
    for where, value in sources:
        if value not in (None, ""):
            return value, where
    return None, "not recorded"


def _blank(label: str, key: str, lacking: list[tuple[str, str]], total: int) -> str:
    """Why a cell is blank: which runs lack the figure, grouped by the reason."""
    if not lacking:
        return f"{label} is blank: no runs"
    by_reason: dict[str, list[str]] = {}
    for name, why in lacking:
        by_reason.setdefault(why, []).append(name)
    shown = "; ".join(f"{', '.join(names)}: {why}" for why, names in by_reason.items())
    return f"{label} is blank: {len(lacking)} of {total} runs record no {key} ({shown})"


def _vdb_hosts(leaf: Leaf, record: dict[str, Any] | None) -> int | None:
    """Client hosts of a run: its record's num_hosts/host_count, the native statistics' disk_io
    host_count, else the metadata (args.hosts, or one host when args.distributed is false)."""
    from mlpstorage_py.results.tree.files import DIR, entries

    for value in ((record or {}).get("num_hosts"), (record or {}).get("host_count"),
                  ((record or {}).get("disk_io") or {}).get("host_count")):
        if isinstance(value, int) and value > 0:
            return value
    for _, kind, d in entries(leaf.path / "vectordb"):
        value = (((_json(d / "statistics.json") or {}).get("disk_io")) or {}).get("host_count") if kind == DIR else None
        if isinstance(value, int) and value > 0:
            return value
    args = (leaf.metadata or {}).get("args") or {} if isinstance(leaf.metadata, dict) else {}
    hosts = args.get("hosts")
    if isinstance(hosts, list) and hosts:
        return len(set(map(str, hosts)))
    if isinstance(hosts, str) and hosts.strip():
        return len({h.split(":")[0] for h in hosts.replace(",", " ").split()})
    if args.get("distributed") is False:
        return 1
    return None


def vector_database(runs: list[Leaf]) -> tuple[Figures, list[str]]:
    """Means over the query runs of throughput, p99 latency and recall (5.3.x), each run read from
    its summary.json or, lacking one, its native statistics.json; a cell is blank when any run
    lacks its figure, and the issues say which runs and why."""
    issues: list[str] = []
    expected = checker()["runs_per_result"]["vector_database"]
    if len(runs) != expected:
        issues.append(f"expected {expected} vector database runs, found {len(runs)}")
    ordered = sorted(runs, key=lambda leaf: leaf.path.name)
    records = {leaf.path.name: _vdb_record(leaf) for leaf in ordered}
    native = sorted(name for name, (record, source) in records.items() if record is not None and source != "summary.json")
    embedded = sorted({str(record.get("engine")) for record, _ in records.values() if isinstance(record, dict)
                       and isinstance(record.get("database"), dict) and record["database"].get("database") == "diskann"})
    issues += [f"engine: {name}; storage figures are the index device's reads over the timed window" for name in embedded]
    if native:
        issues.append(f"figures of run(s) {', '.join(native)} read from their native "
                      f"{records[native[0]][1]} (no summary.json)")

    def mean(label: str, key: str) -> float | None:
        values, lacking = [], []
        for name, (record, source) in records.items():
            # disk figures sit at the top level (published summaries) or under disk_io (ours)
            value = (record or {}).get(key, ((record or {}).get("disk_io") or {}).get(key))
            if isinstance(value, (int, float)):
                values.append(value)
            else:
                lacking.append((name, source if record is None else f"{source} has no {key}"))
        if values and not lacking:
            return statistics.fmean(values)
        issues.append(_blank(label, key, lacking, len(records)))
        return None

    recalls, lacking = [], []
    for leaf in ordered:
        record, source = records[leaf.path.name]
        value, where = _vdb_recall(leaf, record, source)
        (recalls.append(value) if value is not None else lacking.append(
            (leaf.path.name, source if record is None else f"{where}, nor recall_stats.json")))
    recall = statistics.fmean(recalls) if recalls and not lacking else None
    if recall is None:
        issues.append(_blank("Recall Percentage", "recall", lacking, len(records)))
    hosts, host_lacking = [], []
    for leaf in ordered:
        found = _vdb_hosts(leaf, records[leaf.path.name][0])
        (hosts.append(found) if found is not None else host_lacking.append((leaf.path.name, "no host count, host list or "
                                                                             "distributed flag recorded")))
    if not hosts:
        issues.append(_blank("# Client Nodes", "client host count", host_lacking, len(records)))

    def fact(label: str, name: str) -> Any:
        found: dict[Any, list[str]] = {}
        for leaf in ordered:
            value, where = _vdb_fact(leaf, records[leaf.path.name][0], name)
            if isinstance(value, (list, dict)):  # a malformed record: not a figure, and not hashable
                issues.append(f"{label}: {leaf.path.name} {where} is a {type(value).__name__}, not a value")
            elif value is not None:
                found.setdefault(value, []).append(f"{leaf.path.name} {where}")
        if len(found) == 1:
            return next(iter(found))
        issues.append(f"{label} is blank: " + ("no run records it" if not found else
                      "the runs disagree (" + "; ".join(f"{v}: {', '.join(w)}" for v, w in found.items()) + ")"))
        return None

    figures = {"qps": mean("Queries per Sec", "throughput_qps"), "p99_latency_ms": mean("Query Latency", "p99_latency_ms"),
               "recall_percentage": recall * 100 if recall is not None else None,
               "num_vectors": fact("Vector Count", "num_vectors"), "dimension": fact("Vector Dimension", "dimension"),
               "index_type": fact("Index Type", "index_type"), "read_iops": mean("Storage IOPs", "read_iops"),
               "read_mbps": mean("Read B/W", "read_mbps"),
               "client_nodes": max(hosts) if hosts else None,
               "sources": {name: source for name, (record, source) in records.items()}}
    figures["read_bw_gib_s"] = figures.pop("read_mbps") / 1024 if figures["read_mbps"] is not None else figures.pop("read_mbps")
    return figures, issues
