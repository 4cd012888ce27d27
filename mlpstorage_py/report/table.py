"""The results table: fixed column order (the published v3.0 layout), one row per result.

Every value in a row comes from a package made elsewhere, and results.csv's cells are shown as
HTML (its links are <a> elements) and opened in spreadsheets: to_csv writes markup only for a
Link this module builds, escapes every other string and keeps a formula from starting a cell."""

from __future__ import annotations

import csv
import html
import io
import math
from pathlib import Path
from typing import Any

from mlpstorage_py.report import sut_cells
from mlpstorage_py.results.tree import files
from mlpstorage_py.results.tree.package import Leaf

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
SYSTEM_YAML_LIMIT = 256 << 10  # bytes: the published descriptions are at most 12 KB, and a cell repeats in every row
SHORT_DIGITS = 12  # tidy: a decimal this short plus noise past the 15th digit is that decimal
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")  # what a spreadsheet reads as the start of a formula


class Link(dict):
    """A cell that to_csv writes as <a href>: only link() makes one, so no value read from the tree
    (a YAML mapping with an href of its own) becomes markup; results.json writes its text and href."""


def system_columns(org_dir: Path, system: str) -> dict[str, Any]:
    """The system-under-test cells from systems/<system>.yaml (sut_cells; blank where it says nothing),
    read as the checker reads it: a link or special file is not opened, a malformed or oversized
    file (or one with YAML aliases: files) leaves blanks."""
    path = org_dir / "systems" / f"{system}.yaml"
    data = files.yaml_or_unreadable(path) if files.kind_of(path) == files.FILE and _small(path) else None
    try:
        return sut_cells.cells(data, system)
    except (AttributeError, TypeError, ValueError, OverflowError):  # wrong types inside the description
        return sut_cells.cells({}, system)


def _small(path: Path) -> bool:
    try:
        return path.lstat().st_size <= SYSTEM_YAML_LIMIT
    except OSError:
        return False


def link(text: str, href: str) -> Link | str:
    """A link to a path relative to the package root; the text alone for any other href (a scheme
    such as javascript: or data:, an absolute path, a way out with .., a control character)."""
    parts = href.split("/")
    inside = href.isprintable() and "\\" not in href and ":" not in parts[0] and all(p not in ("", "..") for p in parts)
    return Link(text=text, href=href) if inside else text


def tidy(value: Any) -> Any:
    """A figure as the table publishes it: the float as computed, less binary representation noise
    (recall x 100 gives 30.520000000000003; DLIO records a mean of 2.2853939000000003). A float whose
    15-significant-digit form is a decimal of at most 12 digits is that decimal; any other figure
    (3.076140817854296) keeps every digit it was read or computed with, as the published tables
    carry them. NaN and infinities are blank, as there; integers and text as they are."""
    if not isinstance(value, float):
        return value
    if not math.isfinite(value):
        return None
    short = f"{value:.15g}"
    digits = short.split("e")[0].lstrip("-").replace(".", "").strip("0")
    return float(short) if len(digits) <= SHORT_DIGITS else value


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
    """CSV in columns(rows) order; Links become <a href>, other strings escaped text, missing values blank."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    header = columns(rows)
    known = set(COLUMNS)
    writer.writerow([column if column in known else _text(column) for column in header])  # a KV column names a model
    for row in rows:
        writer.writerow([_cell(row.get(column)) for column in header])
    return out.getvalue()


def _cell(value: Any) -> Any:
    """One CSV cell: a number as it is, anything else text (a list joined with "; ")."""
    if isinstance(value, Link):
        return f'<a href="{html.escape(value["href"], quote=True)}">{html.escape(value["text"], quote=True)}</a>'
    if value is None:
        return ""
    if isinstance(value, (int, float)):
        return value
    return _text("; ".join(map(str, value)) if isinstance(value, list) else str(value))


def _text(value: str) -> str:
    """A string cell: HTML-escaped (a carriage return too: the writer quotes only a line feed, so a
    bare one would end the row), and led by an apostrophe where a spreadsheet would read a formula."""
    text = html.escape(value, quote=True).replace("\r", "&#13;")
    return "'" + text if value.startswith(FORMULA_STARTS) else text
