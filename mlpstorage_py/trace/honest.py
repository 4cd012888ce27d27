"""What makes a trace's figures less than they seem, said in the leaf's io_trace.json (issue 42).

A traced device may carry other traffic (the root disk beside other work, the journal): each
host's device record says how much of its bytes were not the run's (`others_share_bytes`,
trace/parse.py); a share above OTHERS_WARN becomes a warning. Where the leaf holds the engine's
own per-rank byte counts (the checkpoint engine's `<rank>_output.json` bytes_written/bytes_read,
each KV rank's kvcache_results_*.json cache_stats), each rank's work streams are set against them
(`rank_bytes`), and a rank whose traced bytes exceed what it says it moved by more than
TOLERANCE is a warning: its streams hold I/O that is not its data (its logs and outputs on the
same disk, metadata), so replay.fio and the per-rank figures count more than the workload did.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from mlpstorage_py.results.logs import log

TOLERANCE = 0.05   # a rank's traced bytes may exceed its own count by this share before it is said
OTHERS_WARN = 0.05  # a device whose others' share is above this is said in the warnings
PAST = {"write": "wrote", "read": "read"}
_RANK_DIR = re.compile(r"rank_(\d+)$")


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def engine_rank_bytes(leaf: Path) -> dict[int, dict[str, int]]:
    """rank -> {"write": n, "read": n}, what each rank says it moved, where the leaf has it."""
    found: dict[int, dict[str, int]] = {}
    for path in leaf.glob("*_output.json"):  # the checkpoint engine's per-rank output
        rank, data = path.name.split("_", 1)[0], _json(path)
        if rank.isdigit() and isinstance(data, dict):
            said = {op: _int(data.get(key)) for op, key in (("write", "bytes_written"), ("read", "bytes_read"))}
            if all(v is not None for v in said.values()):
                found[int(rank)] = {op: v for op, v in said.items() if v is not None}
    for path in leaf.glob("option_*/trial_*/rank_*/kvcache_results_*.json"):  # each KV rank's, per trial
        match, data = _RANK_DIR.match(path.parent.name), _json(path)
        stats = ((data or {}).get("summary") or {}).get("cache_stats") if isinstance(data, dict) else None
        if match is None or not isinstance(stats, dict):
            continue
        mine = found.setdefault(int(match.group(1)), {"write": 0, "read": 0})
        for op, key in (("write", "total_write_bytes"), ("read", "total_read_bytes")):
            mine[op] += _int(stats.get(key)) or 0
    return found


def traced_rank_bytes(record: dict[str, Any]) -> dict[int, dict[str, int]]:
    """rank -> {"write": n, "read": n} over the rank's work streams on every host."""
    found: dict[int, dict[str, int]] = {}
    for host in (record.get("hosts") or {}).values():
        for stream in host.get("streams") or []:
            rank = stream.get("rank")
            if isinstance(rank, int) and stream.get("work"):
                mine = found.setdefault(rank, {"write": 0, "read": 0})
                for op in mine:
                    mine[op] += int(((stream.get("ops") or {}).get(op) or {}).get("bytes") or 0)
    return found


def check(record: dict[str, Any], leaf: Path) -> dict[str, Any]:
    """The record with `rank_bytes` (where the engine counts per rank) and `warnings` added;
    each warning is logged too."""
    warnings: list[str] = list(record.get("warnings") or [])
    for host, entry in (record.get("hosts") or {}).items():
        for name, device in (entry.get("devices") or {}).items():
            share = device.get("others_share_bytes")
            if isinstance(share, (int, float)) and share > OTHERS_WARN:
                warnings.append(f"{host} {name}: {share:.1%} of the bytes the device moved during the trace were not "
                                f"the run's ({device.get('others_bytes')} B: other processes, the kernel's journal)")
    said, traced = engine_rank_bytes(leaf), traced_rank_bytes(record)
    compared = []
    for rank in sorted(said):
        for op in ("write", "read"):
            if rank not in traced or not said[rank][op]:
                continue
            ratio = round(traced[rank][op] / said[rank][op], 4)
            compared.append({"rank": rank, "op": op, "traced": traced[rank][op], "said": said[rank][op], "ratio": ratio})
            if ratio > 1 + TOLERANCE:
                warnings.append(f"rank {rank}: its traced {op} bytes are {ratio:.3f}x what it says it "
                                f"{PAST[op]} ({traced[rank][op]} of {said[rank][op]} B): its streams "
                                "hold I/O that is not its data (its logs or outputs on the same device, metadata), "
                                "and replay.fio replays it")
    if compared:
        record["rank_bytes"] = compared
    record["warnings"] = warnings
    for line in warnings:
        log.warning(f"trace-io: {line}")
    return record
