"""Device reads of a DiskANN query run, from the host leaders' counters in the rank files
(vectordb/diskann_rank.py); the queries, latencies and recall are clients.aggregate's.

  device_reads_per_query       = sum over distinct devices of read I/Os in the window / queries
  device_read_bytes_per_query  = the same for bytes read
A device is counted once per kernel (boot_id): hosts simulated on one machine share its devices
and counters, so their leaders report the same device twice. A leader whose index is on a
filesystem with no block device here (NFS, tmpfs) leaves the figures null, with its reason.
"""

from __future__ import annotations

from typing import Any


def device_reads(docs: list[dict[str, Any]], queries: int, window_s: float) -> dict[str, Any]:
    """The per-query device figures and what they were read from."""
    devices: dict[tuple[str, int, int], dict[str, Any]] = {}
    missing: list[str] = []
    for doc in sorted(docs, key=lambda d: d["rank"]):
        io = doc.get("host_io")
        if not doc.get("host_leader") or not isinstance(io, dict):
            continue
        if not io.get("device") or "counters" not in io:
            missing.append(f"{doc['hostname']}: {io.get('reason', 'no device counters')}")
            continue
        key = (str(io.get("boot_id")), int(io["major"]), int(io["minor"]))
        entry = devices.setdefault(key, {"device": io["device"], "hosts": [], **io["counters"]})
        entry["hosts"].append(doc["hostname"])
    totals = {k: sum(d[k] for d in devices.values()) for k in ("read_ios", "read_bytes", "write_ios", "write_bytes")}
    complete = bool(devices) and not missing and queries > 0
    return {
        "device_reads_per_query": totals["read_ios"] / queries if complete else None,
        "device_read_bytes_per_query": totals["read_bytes"] / queries if complete else None,
        "device_io": {
            "scope": "block-device counters (/sys/dev/block/MAJ:MIN/stat) of the index's device on each client "
                     "host, read by the host's first rank between the start and end barriers; a device is counted "
                     "once per kernel; other processes' I/O to the same device counts too",
            "devices": list(devices.values()), "missing": missing, **totals,
            "window_seconds": window_s, "queries": queries,
            "read_iops": totals["read_ios"] / window_s if window_s > 0 else None,
            "read_mbps": totals["read_bytes"] / 2**20 / window_s if window_s > 0 else None,
        },
    }


def engine_facts(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """What every rank saw of the index: O_DIRECT on ann_disk.index, resident memory, where it read."""
    direct = [d.get("o_direct") for d in docs]
    return {"o_direct_all_ranks": all(v is True for v in direct),
            "o_direct_by_rank": direct,
            "rss_bytes_max": max((int(d.get("rss_bytes") or 0) for d in docs), default=0),
            "index_dirs": sorted({str(d.get("index_dir")) for d in docs}),
            "index_copies": [d["index_copy"] for d in docs if d.get("index_copy")],
            "page_cache": sorted({str((d.get("host_io") or {}).get("page_cache")) for d in docs if d.get("host_leader")})}
