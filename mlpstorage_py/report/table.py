"""The results table: fixed column order (the published v3.0 layout), one row per result."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any


from mlpstorage_py.results.tree import files
from mlpstorage_py.results.tree.package import Leaf
from mlpstorage_py.report import sut_cells

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
# CLOSED's KV columns, per Option of Table KVCache-1 (configs/kvcache/options.yaml labels); an
# Option run with another model or other memory tiers gets columns of its own (report/kv_rows.py).
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
    """The system-under-test cells from systems/<system>.yaml (sut_cells; blank where it says nothing),
    read as the checker reads it: a link or special file is not opened, a malformed file leaves blanks."""
    path = org_dir / "systems" / f"{system}.yaml"
    data = files.yaml_or_unreadable(path) if files.kind_of(path) == files.FILE else None
    try:
        return sut_cells.cells(data, system)
    except (AttributeError, TypeError, ValueError, OverflowError):  # wrong types inside the description
        return sut_cells.cells({}, system)


def link(text: str, href: str) -> dict[str, str]:
    return {"text": text, "href": href}


def leaf_hosts(leaf: Leaf) -> int | None:
    summary = leaf.summary or {}
    value = summary.get("num_hosts") or summary.get("host_count")
    return int(value) if isinstance(value, (int, float)) else None


def columns(rows: list[dict[str, Any]]) -> list[str]:
    """COLUMNS, with any KV columns of the rows' own (an Option outside CLOSED's table) before Issues."""
    known = set(COLUMNS)
    extra = list(dict.fromkeys(c for row in rows for c in row if c.startswith("KVCache ") and c not in known))
    return COLUMNS[:-1] + extra + COLUMNS[-1:]


def to_csv(rows: list[dict[str, Any]]) -> str:
    """CSV in columns(rows) order; links become <a href> and missing values blank cells."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    header = columns(rows)
    writer.writerow(header)
    for row in rows:
        cells = []
        for column in header:
            value = row.get(column)
            if isinstance(value, dict):
                value = f'<a href="{value["href"]}">{value["text"]}</a>'
            elif isinstance(value, list):
                value = "; ".join(value)
            cells.append("" if value is None else value)
        writer.writerow(cells)
    return out.getvalue()
