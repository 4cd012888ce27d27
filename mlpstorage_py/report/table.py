"""The results table: fixed column order (the published v3.0 layout), one row per result."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any


from mlpstorage_py.checker import files
from mlpstorage_py.checker.package import Leaf

SUT = ["Public ID", "Organization", "Division", "Benchmark Type", "Model", "Rules Edition", "Comparability Class",
       "Name", "Description", "Type", "Access Protocol", "Availability", "RU's",
       "Integrated Client Storage (TiB)", "Usable Capacity (TiB)", "Provisioned Power (W)"]
TRAINING = ["Training - Accelerator Type", "Training - # Client Nodes", "Training - Code", "Training - Logs",
            "Training - # Simulated Accelerators", "Training - Read B/W (GiB/s)"]
CHECKPOINTING = ["Checkpointing - Checkpoint Mode", "Checkpointing - # Client Nodes", "Checkpointing - DP Instances",
                 "Checkpointing - Code", "Checkpointing - Logs", "Checkpointing - Write B/W (GiB/s)",
                 "Checkpointing - Write Duration (secs)", "Checkpointing - Read B/W (GiB/s)",
                 "Checkpointing - Read Duration (secs)"]
VDB = ["VDB - # Client Nodes", "VDB - Code", "VDB - Logs", "VDB - Vector Count", "VDB - Vector Dimension",
       "VDB - Index Type", "VDB - Queries per Sec", "VDB - Query Latency (ms)", "VDB - Recall Percentage",
       "VDB - Storage IOPs", "VDB - Read B/W (GiB/s)"]
KV_GROUPS = {"1": "llama3.1-8b Storage Only", "2": "llama3.1-8b Storage + Mem", "3": "llama3.1-70b Storage Only"}
KV_METRICS = {"throughput_tok_s": "Throughput (tok/s)", "read_bw_gib_s": "Read B/W (GiB/s)",
              "write_bw_gib_s": "Write B/W (GiB/s)", "p95_read_latency_ms": "P95 Read Latency (ms)"}
KVCACHE = ["KVCache - # Client Nodes", "KVCache - Code", "KVCache - Logs"] + [
    f"KVCache {group} - {label}" for group in KV_GROUPS.values() for label in KV_METRICS.values()]
COLUMNS = SUT + TRAINING + CHECKPOINTING + VDB + KVCACHE + ["Issues"]
MODEL_LABELS = {"unet3d": "Unet3D", "retinanet": "RetinaNet", "llama3-8b": "8B", "llama3-70b": "70B",
                "llama3-405b": "405B", "llama3-1t": "1250B"}
BENCHMARK_LABELS = {"training": "Training", "checkpointing": "Checkpointing", "vector_database": "VDB",
                    "kv_cache": "KVCache"}


def system_columns(org_dir: Path, system: str) -> dict[str, Any]:
    """The system-under-test block from systems/<system>.yaml (blank where it says nothing), read
    as the checker reads it: a link or special file is not opened, a malformed file leaves blanks."""
    path = org_dir / "systems" / f"{system}.yaml"
    data = files.yaml_or_unreadable(path) if files.kind_of(path) == files.FILE else None
    try:
        return _sut_columns(data if isinstance(data, dict) else {}, system)
    except (AttributeError, TypeError, ValueError, OverflowError):  # wrong types inside the description
        return _sut_columns({}, system)


def _sut_columns(data: dict[str, Any], system: str) -> dict[str, Any]:
    sut = data.get("system_under_test") or {}
    solution = sut.get("solution") or {}
    arch = solution.get("architecture") or {}
    nodes = sut.get("product_nodes") or []
    units = [int(n.get("quantity") or 1) * int((n.get("chassis") or {}).get("rack_units") or 0) for n in nodes]
    watts = [int(n.get("quantity") or 1) * sum(int(p.get("unit_count") or 1) * int(p.get("nameplate_power_watts") or 0)
                                               for p in ((n.get("chassis") or {}).get("power") or {}).get("psus_configured") or [])
             for n in nodes]
    return {"Name": solution.get("submission_name") or system,
            "Description": " ".join(str(solution.get("friendly_description") or "").split()),
            "Type": arch.get("storage_location"), "Access Protocol": arch.get("product_API"),
            "Availability": solution.get("availability"), "RU's": sum(units) or None,
            "Integrated Client Storage (TiB)": solution.get("integrated_client_storage_tib"),
            "Usable Capacity (TiB)": solution.get("usable_capacity_tib"),
            "Provisioned Power (W)": sum(watts) or None}


def link(text: str, href: str) -> dict[str, str]:
    return {"text": text, "href": href}


def leaf_hosts(leaf: Leaf) -> int | None:
    summary = leaf.summary or {}
    value = summary.get("num_hosts") or summary.get("host_count")
    return int(value) if isinstance(value, (int, float)) else None


def to_csv(rows: list[dict[str, Any]]) -> str:
    """CSV in COLUMNS order; links become <a href> and missing values blank cells."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    for row in rows:
        cells = []
        for column in COLUMNS:
            value = row.get(column)
            if isinstance(value, dict):
                value = f'<a href="{value["href"]}">{value["text"]}</a>'
            elif isinstance(value, list):
                value = "; ".join(value)
            cells.append("" if value is None else value)
        writer.writerow(cells)
    return out.getvalue()
