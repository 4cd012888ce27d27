"""What limited a run, from its client hosts' telemetry (telemetry/<host>.jsonl in the leaf): per
phase, whether a client resource was saturated, with its figures, or that none was.

The record the writer (launch/watch.py) puts into the leaf's summary.json and
telemetry/bottleneck.json, and that validate reads back (checker: the clients, not the storage,
limited a CLOSED result). Thresholds (ManPage, Telemetry):
- client CPU: busy (100 - idle - iowait) at or above CPU_BUSY_PCT, averaged over the phase;
- a block device: utilisation at or above DEVICE_UTIL_PCT;
- a network link: received plus sent at or above LINK_SHARE of its reported speed;
- memory: used at or above MEMORY_USED_PCT of the total.
A phase shorter than two samples on a host cannot be judged there and says so.

TelemetrySample (one line of telemetry/<host>.jsonl: telemetry/sample.py measures it, watch.py
writes it), key "schema_version":
    none    t (seconds since the epoch), dt, host, cpu, mem, net, disks, nfs (telemetry/sample.py)
    1       the same fields
Bottleneck (one phase's record in telemetry/bottleneck.json and summary.json's `bottleneck` list,
written by launch/watch.py), key "schema_version":
    none    job, phase, start, end, saturated, clients_limited, summary, hosts, unjudged_hosts
    1       the same fields
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mlpstorage_py.results.schema import FLAG, LIST, NUMBER, OBJECT, TEXT, Schema, Unread

CPU_BUSY_PCT = 90.0
DEVICE_UTIL_PCT = 90.0
LINK_SHARE = 0.9
MEMORY_USED_PCT = 95.0
CLIENT_KINDS = ("client CPU", "client memory", "network link")  # saturations that are the clients', not the storage's
FILE = "bottleneck.json"


class TelemetrySample(Schema):
    KIND = "telemetry sample"
    VERSION = 1
    FIELDS = {"t": NUMBER, "dt": NUMBER, "host": TEXT, "cpu": OBJECT, "mem": OBJECT, "net": OBJECT, "disks": OBJECT,
              "nfs": OBJECT}


class Bottleneck(Schema):
    KIND = "bottleneck"
    VERSION = 1
    FIELDS = {"job": TEXT, "phase": TEXT, "start": NUMBER, "end": NUMBER, "saturated": LIST, "clients_limited": FLAG,
              "summary": TEXT, "hosts": OBJECT, "unjudged_hosts": LIST}


def read_records(data: Any) -> tuple[list[Bottleneck], list[Unread]]:
    """The bottleneck records of a list (bottleneck.json, summary.json's `bottleneck`) and those
    of a version this tool does not read; anything else in the list is skipped."""
    found = [Bottleneck.from_json(r) for r in data if isinstance(r, dict)] if isinstance(data, list) else []
    return [r for r in found if isinstance(r, Bottleneck)], [r for r in found if isinstance(r, Unread)]


def read_samples(directory: Path, unread: list[Unread] | None = None) -> dict[str, list[dict[str, Any]]]:
    """Each host's samples (telemetry/<host>.jsonl), in time order; a line that is not a record is
    skipped, one of a version this tool does not read is skipped and added to `unread`."""
    found: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(directory.glob("*.jsonl")) if directory.is_dir() else []:
        if path.is_symlink() or not path.is_file():
            continue
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            sample = TelemetrySample.from_json(record) if isinstance(record, dict) else None
            if isinstance(sample, Unread) and unread is not None:
                unread.append(sample)
            if isinstance(sample, TelemetrySample) and isinstance(sample.data.get("t"), (int, float)):
                found.setdefault(str(sample.data.get("host") or path.stem), []).append(record)
    return {host: sorted(samples, key=lambda r: r["t"]) for host, samples in found.items()}


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def host_figures(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """One host's figures over a phase's samples: mean CPU busy, iowait and steal, the busiest
    device's mean utilisation and queue, the busiest link's share of its speed, peak memory used."""
    cpu = [s.get("cpu") or {} for s in samples]
    busy = _mean([100.0 - float(c.get("idle", 0)) - float(c.get("iowait", 0)) for c in cpu])
    figures: dict[str, Any] = {"samples": len(samples), "cpu_busy_pct": round(busy, 1),
                               "cpu_iowait_pct": round(_mean([float(c.get("iowait", 0)) for c in cpu]), 1),
                               "cpu_steal_pct": round(_mean([float(c.get("steal", 0)) for c in cpu]), 1)}
    devices: dict[str, list[dict[str, Any]]] = {}
    links: dict[str, list[float]] = {}
    for s in samples:
        for name, d in (s.get("disks") or {}).items():
            devices.setdefault(name, []).append(d)
        for name, n in (s.get("net") or {}).items():
            speed = n.get("speed_mbps")
            if speed:
                bits = 8 * (int(n.get("rx_bytes") or 0) + int(n.get("tx_bytes") or 0)) / max(float(s.get("dt") or 1), 1e-6)
                links.setdefault(name, []).append(bits / (float(speed) * 1e6))
    if devices:  # a device idle in some samples is absent from them: its mean counts those as 0
        name, rows = max(devices.items(), key=lambda kv: sum(float(d.get("util_pct") or 0) for d in kv[1]))
        figures["device"] = {"name": name,
                             "util_pct": round(sum(float(d.get("util_pct") or 0) for d in rows) / len(samples), 1),
                             "queue_depth": round(sum(float(d.get("queue_depth") or 0) for d in rows) / len(samples), 2),
                             "read_mib_s": round(sum(int(d.get("read_bytes") or 0) for d in rows) / 2 ** 20
                                                 / max(sum(float(s.get("dt") or 0) for s in samples), 1e-6), 1),
                             "write_mib_s": round(sum(int(d.get("write_bytes") or 0) for d in rows) / 2 ** 20
                                                  / max(sum(float(s.get("dt") or 0) for s in samples), 1e-6), 1)}
    if links:
        name, shares = max(links.items(), key=lambda kv: _mean(kv[1]))
        figures["link"] = {"name": name, "share_of_speed": round(_mean(shares), 3)}
    mem = [s.get("mem") or {} for s in samples]
    used = [100 * float(m.get("used_mib") or 0) / float(m["total_mib"]) for m in mem if m.get("total_mib")]
    figures["memory_used_pct"] = round(max(used), 1) if used else None
    return figures


def saturations(host: str, figures: dict[str, Any]) -> list[dict[str, Any]]:
    """What was saturated on one host, each with its figure and the threshold it crossed."""
    found = []
    if figures["cpu_busy_pct"] >= CPU_BUSY_PCT:
        found.append({"what": "client CPU", "host": host, "figure": figures["cpu_busy_pct"], "limit": CPU_BUSY_PCT,
                      "text": f"client CPU busy {figures['cpu_busy_pct']:.0f} % on {host}"})
    device = figures.get("device")
    if device and device["util_pct"] >= DEVICE_UTIL_PCT:
        found.append({"what": "device", "host": host, "device": device["name"], "figure": device["util_pct"],
                      "limit": DEVICE_UTIL_PCT, "text": f"device {device['name']} on {host} at {device['util_pct']:.0f} % "
                                                        f"utilisation (queue {device['queue_depth']:.1f})"})
    link = figures.get("link")
    if link and link["share_of_speed"] >= LINK_SHARE:
        found.append({"what": "network link", "host": host, "link": link["name"], "figure": link["share_of_speed"],
                      "limit": LINK_SHARE, "text": f"link {link['name']} on {host} at {100 * link['share_of_speed']:.0f} % "
                                                   "of its speed"})
    if figures.get("memory_used_pct") is not None and figures["memory_used_pct"] >= MEMORY_USED_PCT:
        found.append({"what": "client memory", "host": host, "figure": figures["memory_used_pct"],
                      "limit": MEMORY_USED_PCT, "text": f"memory {figures['memory_used_pct']:.0f} % used on {host}"})
    return found


def analyse(samples: dict[str, list[dict[str, Any]]], phase: str, start: float, end: float) -> dict[str, Any]:
    """The bottleneck record of one phase ([start, end] wall-clock seconds) over every host's samples."""
    hosts: dict[str, Any] = {}
    saturated: list[dict[str, Any]] = []
    unjudged = []
    for host, rows in sorted(samples.items()):
        inside = [r for r in rows if start <= float(r["t"]) <= end + float(r.get("dt") or 0)]
        if len(inside) < 2:
            unjudged.append(host)
            continue
        hosts[host] = host_figures(inside)
        saturated += saturations(host, hosts[host])
    if saturated:
        summary = "; ".join(s["text"] for s in saturated)
    elif hosts:
        summary = "nothing saturated on the clients (CPU, memory, devices, links): the storage or the engine set the pace"
    else:
        summary = "not judged: fewer than two telemetry samples in the phase on every host"
    record = {"phase": phase, "start": round(start, 3), "end": round(end, 3), "saturated": saturated,
              "clients_limited": any(s["what"] in CLIENT_KINDS for s in saturated), "summary": summary, "hosts": hosts}
    if unjudged and hosts:
        record["unjudged_hosts"] = unjudged
    return record
