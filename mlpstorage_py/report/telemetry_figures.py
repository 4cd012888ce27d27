"""`reports html`'s "Telemetry" part: each client host's telemetry (the leaf's telemetry/<host>.jsonl,
read by results/bottleneck.read_samples) on one time axis, the run's phases (telemetry/bottleneck.json,
else summary.json's `bottleneck` list) shaded and numbered, and each phase's bottleneck summary as text.

One SVG per leaf, panels stacked over one shared axis of seconds since the first sample began,
one colour per host: progress (GiB moved since the first sample, derived from the telemetry:
there is no per-second progress file), CPU busy and iowait %, memory used and dirty MiB, each
busiest device's MiB/s and utilisation %, each interface's MiB/s that carried traffic, each NFS
mount's READ/WRITE MiB/s. A rate is a sample's count over its interval, drawn at the interval's
middle. The files are untrusted like every other: a value that is no finite number is a gap,
names are drawn as glyph outlines and reach the markup escaped, a linked directory or file is not
read, and a file too large to draw is named instead of read.
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from html import escape
from typing import Any

from mlpstorage_py.report import markup, plots
from mlpstorage_py.results import bottleneck
from mlpstorage_py.results.schema import Unread
from mlpstorage_py.results.tree import files
from mlpstorage_py.results.tree.package import Leaf

DIRECTORY = "telemetry"
MAX_FILE_BYTES = 64 * 2 ** 20  # a host's file larger than this is named, not read
MAX_POINTS = 240               # per line: more samples are drawn as the means of consecutive runs of them
MAX_HOSTS = 20
MAX_DEVICES, MAX_LINKS, MAX_MOUNTS = 3, 2, 2
MAX_PHASES = 60
MAX_NAME = 120                 # characters of a host, device or phase name kept
MIB, GIB = 2.0 ** 20, 2.0 ** 30
BIG = 1e18                     # a value beyond this is no measurement: a gap
PANEL_H, TITLE_H, ROW_H = 58.0, 13.0, 10.5  # pt
PAD, TICK_LEN = plots.PAD, plots.TICK_LEN
SMALL, TICK, LABEL = plots.SMALL, 7.5, plots.LABEL
PHASE_FILL = {"limited": "#f4c7c3", "saturated": "#fde0b2", "clear": "#d4e4f4", "unjudged": "#e4e4e4"}
PHASE_WORDS = {"limited": "the clients limited it", "saturated": "a device saturated",
               "clear": "nothing saturated on the clients", "unjudged": "not judged"}
BOTTLENECK_HEAD = ["#", "phase", "from s", "to s", "seconds", "shaded as", "clients limited", "summary"]
HOST_HEAD = ["host", "samples", "from s", "to s", "CPU busy mean %", "CPU iowait mean %", "memory used peak MiB",
             "devices read GiB", "devices written GiB", "network received GiB", "network sent GiB"]


def _num(value: Any) -> float | None:
    """A finite number of a sane size from the file, else None (a gap)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and abs(value) < BIG
    return float(value) if ok else None


def _obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _name(value: Any) -> str:
    """A name from the file as the page shows it: control characters as '?', at most MAX_NAME characters."""
    text = "".join(c if c.isprintable() else "?" for c in str(value))
    return text if len(text) <= MAX_NAME else text[:MAX_NAME - 1] + "…"


def _size(count: float) -> str:
    """Bytes in binary units, as a reader takes them in."""
    for unit, power in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if count >= 1 << power:
            return f"{count / (1 << power):.3g} {unit}"
    return f"{count:g} bytes"


# --- what the leaf holds -------------------------------------------------------------------

@dataclass
class Phase:
    number: int
    name: str
    start: float | None
    end: float | None
    saturated: list[str]
    limited: bool
    summary: str
    status: str


@dataclass
class Line:
    host: str
    measure: str
    dashed: bool
    points: list[tuple[float, float | None]]  # (seconds since the first sample began, value)


@dataclass
class Panel:
    key: str
    title: str
    top: float | None = None  # a fixed top (percentages), else from the data
    lines: list[Line] = field(default_factory=list)


def _phases(leaf: Leaf, directory: Any) -> tuple[list[Phase], list[str]]:
    """The bottleneck records, from telemetry/bottleneck.json, else summary.json's `bottleneck`."""
    notes: list[str] = []
    records: Any = None
    path = directory / bottleneck.FILE
    if files.kind_of(path) is not None:
        records, problem = files.load_json(path)
        if problem:
            notes.append(f"{DIRECTORY}/{bottleneck.FILE}: {problem}")
    if not isinstance(records, list):
        records = _obj(leaf.summary).get("bottleneck")
    read, unread = bottleneck.read_records(records)
    notes += [f"a bottleneck record is not shown: {_name(r.text())}" for r in unread[:1]]
    records = [r.data for r in read]
    if len(records) > MAX_PHASES:
        notes.append(f"{len(records)} bottleneck records: the first {MAX_PHASES} are shown")
    phases = []
    for number, record in enumerate(records[:MAX_PHASES], 1):
        saturated = [_name(s.get("text")) for s in record.get("saturated") or [] if isinstance(s, dict) and s.get("text")] \
            if isinstance(record.get("saturated"), list) else []
        summary = record.get("summary")
        summary = _name(summary) if isinstance(summary, str) else ""
        limited = record.get("clients_limited") is True
        status = ("limited" if limited else "saturated" if saturated
                  else "unjudged" if summary.startswith("not judged") or not _obj(record.get("hosts")) else "clear")
        phases.append(Phase(number, _name(record.get("phase") or record.get("job") or f"phase {number}"),
                            _num(record.get("start")), _num(record.get("end")), saturated, limited, summary, status))
    return phases, notes


def _samples(directory: Any) -> tuple[dict[str, list[dict[str, Any]]], list[str]]:
    """Each host's samples, unless a host's file is too large to read (then none, and why)."""
    too_big = []
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except OSError as exc:
        return {}, [f"{DIRECTORY}/ cannot be listed: {exc.strerror or exc}"]
    for entry in entries:
        try:
            size = entry.stat(follow_symlinks=False).st_size if entry.is_file(follow_symlinks=False) else 0
        except OSError:
            size = 0  # gone since the listing: read_samples finds nothing there either
        if entry.name.endswith(".jsonl"):
            if size > MAX_FILE_BYTES:
                too_big.append(f"{DIRECTORY}/{_name(entry.name)} is {_size(size)}, over the {_size(MAX_FILE_BYTES)} "
                               "this page reads: the telemetry is not drawn")
    if too_big:
        return {}, too_big
    unread: list[Unread] = []
    found = bottleneck.read_samples(directory, unread)
    notes = [f"{len(unread)} telemetry samples are not drawn: {_name(unread[0].text())}"] if unread else []
    named: dict[str, list[dict[str, Any]]] = {}
    for host, rows in found.items():
        named.setdefault(_name(host), []).extend(r for r in rows if _num(r.get("t")) is not None)
    return {h: sorted(rows, key=lambda r: r["t"]) for h, rows in sorted(named.items()) if rows}, notes


# --- the panels ----------------------------------------------------------------------------

def _dt(sample: dict[str, Any]) -> float | None:
    dt = _num(sample.get("dt"))
    return dt if dt is not None and dt > 0 else None


def _rate(count: Any, sample: dict[str, Any]) -> float | None:
    value, dt = _num(count), _dt(sample)
    return value / dt / MIB if value is not None and dt is not None else None


def _thin(points: list[tuple[float, float | None]]) -> list[tuple[float, float | None]]:
    """At most MAX_POINTS points: means of consecutive runs of them where there are more."""
    if len(points) <= MAX_POINTS:
        return points
    size = math.ceil(len(points) / MAX_POINTS)
    out = []
    for i in range(0, len(points), size):
        chunk = points[i:i + size]
        values = [v for _, v in chunk if v is not None]
        out.append((sum(x for x, _ in chunk) / len(chunk), sum(values) / len(values) if values else None))
    return out


def _ranked(samples: dict[str, list[dict[str, Any]]], part: str, weigh: Any) -> list[str]:
    """Names under `part` (disks, net, nfs) that moved anything, the busiest first."""
    totals: dict[str, float] = {}
    for rows in samples.values():
        for s in rows:
            for name, entry in _obj(s.get(part)).items():
                totals[_name(name)] = totals.get(_name(name), 0.0) + weigh(_obj(entry))
    return [name for name, total in sorted(totals.items(), key=lambda kv: (-kv[1], kv[0])) if total > 0]


def _moved(entry: dict[str, Any], *keys: str) -> float:
    return sum(_num(entry.get(k)) or 0.0 for k in keys)


def _entry(sample: dict[str, Any], part: str, name: str) -> dict[str, Any] | None:
    """A sample's entry for a device, interface or mount, by its shown name (None: absent)."""
    for key, entry in _obj(sample.get(part)).items():
        if _name(key) == name:
            return _obj(entry)
    return None


def panels(samples: dict[str, list[dict[str, Any]]], t0: float) -> tuple[list[Panel], list[str]]:
    """The panels of one leaf's telemetry, and notes on what is not drawn."""
    notes: list[str] = []
    devices = _ranked(samples, "disks", lambda d: _moved(d, "read_bytes", "write_bytes") + (_num(d.get("util_pct")) or 0))
    links = _ranked(samples, "net", lambda n: _moved(n, "rx_bytes", "tx_bytes"))
    mounts = _ranked(samples, "nfs", lambda m: _moved(m, "READ_bytes", "WRITE_bytes"))
    for what, names, most in (("devices", devices, MAX_DEVICES), ("interfaces", links, MAX_LINKS),
                              ("NFS mounts", mounts, MAX_MOUNTS)):
        if len(names) > most:
            notes.append(f"the {most} busiest {what} are drawn; not drawn: {', '.join(names[most:][:20])}"
                         + (" and more" if len(names) > most + 20 else ""))
    if not links:
        notes.append("no interface carried traffic (loopback is not sampled)")
    found = {"progress": Panel("progress", "progress, GiB since the first sample: devices read + written (solid), "
                                           "network received + sent (dashed)"),
             "cpu": Panel("cpu", "CPU % of all cores: busy = 100 - idle - iowait (solid), iowait (dashed)", 100.0),
             "memory": Panel("memory", "memory MiB: used (solid), dirty (dashed)")}
    for name in devices[:MAX_DEVICES]:
        found[f"disk-{name}"] = Panel(f"disk-{name}", f"device {name} MiB/s: read (solid), written (dashed)")
        found[f"util-{name}"] = Panel(f"util-{name}", f"device {name} utilisation %", 100.0)
    for name in links[:MAX_LINKS]:
        found[f"net-{name}"] = Panel(f"net-{name}", f"network {name} MiB/s: received (solid), sent (dashed)")
    for name in mounts[:MAX_MOUNTS]:
        found[f"nfs-{name}"] = Panel(f"nfs-{name}", f"NFS {name} MiB/s: READ (solid), WRITE (dashed)")
    for host, rows in samples.items():
        series: dict[tuple[str, str, bool], list[tuple[float, float | None]]] = {}
        add = functools.partial(_add_point, series)
        first_dt = _dt(rows[0]) or 0.0
        add("progress", "devices GiB", False, rows[0]["t"] - first_dt - t0, 0.0)
        add("progress", "network GiB", True, rows[0]["t"] - first_dt - t0, 0.0)
        disk_total = net_total = 0.0
        for s in rows:
            dt = _dt(s) or 0.0
            end, middle = s["t"] - t0, s["t"] - dt / 2 - t0
            disks, nets = [_obj(d) for d in _obj(s.get("disks")).values()], [_obj(n) for n in _obj(s.get("net")).values()]
            disk_total += sum(_moved(d, "read_bytes", "write_bytes") for d in disks) / GIB
            net_total += sum(_moved(n, "rx_bytes", "tx_bytes") for n in nets) / GIB
            add("progress", "devices GiB", False, end, disk_total)
            add("progress", "network GiB", True, end, net_total)
            cpu = _obj(s.get("cpu"))
            idle, iowait = _num(cpu.get("idle")), _num(cpu.get("iowait"))
            add("cpu", "busy %", False, middle, 100 - idle - iowait if idle is not None and iowait is not None else None)
            add("cpu", "iowait %", True, middle, iowait)
            mem = _obj(s.get("mem"))
            add("memory", "used MiB", False, middle, _num(mem.get("used_mib")))
            add("memory", "dirty MiB", True, middle, _num(mem.get("dirty_mib")))
            for name in devices[:MAX_DEVICES]:
                d = _entry(s, "disks", name)  # a device idle over an interval is absent from its sample: 0
                add(f"disk-{name}", "read MiB/s", False, middle, _rate(d.get("read_bytes"), s) if d else 0.0)
                add(f"disk-{name}", "written MiB/s", True, middle, _rate(d.get("write_bytes"), s) if d else 0.0)
                add(f"util-{name}", "utilisation %", False, middle, _num(d.get("util_pct")) if d else 0.0)
            for name in links[:MAX_LINKS]:
                n = _entry(s, "net", name)
                add(f"net-{name}", "received MiB/s", False, middle, _rate(n.get("rx_bytes"), s) if n else None)
                add(f"net-{name}", "sent MiB/s", True, middle, _rate(n.get("tx_bytes"), s) if n else None)
            for name in mounts[:MAX_MOUNTS]:
                m = _entry(s, "nfs", name)
                add(f"nfs-{name}", "READ MiB/s", False, middle, _rate(m.get("READ_bytes"), s) if m else None)
                add(f"nfs-{name}", "WRITE MiB/s", True, middle, _rate(m.get("WRITE_bytes"), s) if m else None)
        for (panel, measure, dashed), points in series.items():
            found[panel].lines.append(Line(host, measure, dashed, _thin(points)))
    return list(found.values()), notes


def _add_point(series: dict[tuple[str, str, bool], list[tuple[float, float | None]]], panel: str, measure: str,
               dashed: bool, x: float, value: float | None) -> None:
    series.setdefault((panel, measure, dashed), []).append((x, value))


# --- drawing -------------------------------------------------------------------------------

def _fit(font: Any, text: str, size: float, width: float) -> str:
    """text, cut with an ellipsis to fit width ('' when not even one character does)."""
    if font.width(text, size) <= width:
        return text
    while text and font.width(text + "…", size) > width:
        text = text[:-1]
    return text + "…" if text else ""


def _scale(low: float, high: float, fixed: float | None) -> tuple[float, float, list[float]]:
    """A panel's value range and its three or four round ticks, from zero (or below, for a negative value)."""
    if fixed is not None:
        low, high = 0.0, fixed
    high = max(high, 0.0)
    low = min(low, 0.0)
    spread = (high - low) or 1.0
    power = 10.0 ** math.floor(math.log10(spread / 3))
    step = next(s * power for s in plots.STEPS if s * power >= spread / 3 * 0.999)
    if fixed is None:
        high = max(math.ceil(high / step - 1e-9) * step, step)
    low = math.floor(low / step + 1e-9) * step
    return low, high, [low + i * step for i in range(int(round((high - low) / step)) + 1)]


def _label(value: float) -> str:
    return format(round(value, 9), ".4g") if abs(value) > 1e-12 else "0"


def _fill_rows(canvas: Any, phases: list[tuple[Phase, float, float]], left: float, right: float, y: float) -> int:
    """The phase strip: each phase a box on its span (a thin one for an instant), numbered and
    named where there is room, overlapping ones in rows of their own; the rows it took."""
    font = canvas.font
    rows_end: list[float] = []  # per row, where its last label or box ends
    for phase, x0, x1 in phases:
        inside = _fit(font, f"{phase.number} {phase.name}", SMALL, x1 - x0 - 4)
        text = inside or _fit(font, f"{phase.number} {phase.name}", SMALL, right - x1 - 3)
        extent = x1 if inside else x1 + 3 + font.width(text, SMALL)
        row = next((i for i, end in enumerate(rows_end) if end <= x0 - 1), None)
        if row is None:
            if len(rows_end) >= 4:
                row, text = len(rows_end) - 1, ""
            else:
                rows_end.append(0.0)
                row = len(rows_end) - 1
        rows_end[row] = max(rows_end[row], extent)
        top = y + row * ROW_H
        canvas.parts.append(f'<rect x="{x0:.2f}" y="{top:.2f}" width="{max(x1 - x0, 1.2):.2f}" height="{ROW_H - 1.5:.2f}" '
                            f'fill="{PHASE_FILL[phase.status]}" stroke="#777" stroke-width="0.5" '
                            f'data-phase="{escape(phase.name)}"><title>{escape(f"{phase.number} {phase.name}")}</title></rect>')
        if text:
            canvas.text(text, x0 + 2 if inside else x1 + 3, top + ROW_H - 4, SMALL)
    return len(rows_end)


def _panel_y(bottom: float, low: float, high: float, value: float) -> float:
    """A value's y in a panel whose scale runs from low (at bottom) to high, clamped to it."""
    return bottom - (min(max(value, low), high) - low) / (high - low) * PANEL_H


def svg(found: list[Panel], phases: list[Phase], hosts: list[str], t0: float, span: float, ident: str) -> str:
    """The leaf's telemetry as one inline <svg>: a host legend, the phase strip, the panels on
    one time axis with the phases shaded, the axis at the bottom."""
    canvas = plots._Canvas(ident)
    font = canvas.font
    colour = {host: plots.COLOURS[i % len(plots.COLOURS)] for i, host in enumerate(hosts)}
    scales = {}
    for panel in found:
        values = [v for line in panel.lines for _, v in line.points if v is not None]
        scales[panel.key] = _scale(min(values, default=0.0), max(values, default=0.0), panel.top)
    tick_w = max(font.width(_label(t), TICK) for low, high, ticks in scales.values() for t in ticks)
    left, right = PAD + tick_w + TICK_LEN + 3, plots.WIDTH - PAD - 6
    y = PAD
    # the hosts' legend, wrapped
    x = left
    for host in hosts:
        width = 18 + font.width(host, SMALL) + 10
        if x + width > right and x > left:
            x, y = left, y + ROW_H
        canvas.line(x, y + 4, x + 14, y + 4, colour[host], 2.0)
        canvas.text(host, x + 18, y + 4 + SMALL * plots.ASCENT / 2, SMALL)
        x += width
    y += ROW_H + 4

    def x_of(seconds: float) -> float:
        return left + min(max(seconds / span, 0.0), 1.0) * (right - left)

    spans = sorted(((p, x_of(p.start - t0), x_of(p.end - t0)) for p in phases
                    if p.start is not None and p.end is not None and p.start <= p.end
                    and p.end - t0 >= 0 and p.start - t0 <= span), key=lambda s: (s[1], s[2]))
    if spans:
        canvas.text("phases", left - TICK_LEN - 2, y + ROW_H - 4, SMALL, "end")
        y += _fill_rows(canvas, spans, left, right, y) * ROW_H + 4
    ticks, decimals = plots._ticks(0.0, span)
    for panel in found:
        canvas.text(_fit(font, panel.title, SMALL, right - left), left, y + TITLE_H - 4, SMALL)
        top, bottom = y + TITLE_H, y + TITLE_H + PANEL_H
        low, high, values = scales[panel.key]
        for phase, x0, x1 in spans:
            canvas.parts.append(f'<rect x="{x0:.2f}" y="{top:.2f}" width="{max(x1 - x0, 1.2):.2f}" '
                                f'height="{PANEL_H:.2f}" fill="{PHASE_FILL[phase.status]}" fill-opacity="0.55"/>')
        grid = ' stroke-opacity="0.3"'
        for tick in ticks:
            canvas.line(x_of(tick), top, x_of(tick), bottom, "#b0b0b0", 0.6, grid)
        y_of = functools.partial(_panel_y, bottom, low, high)
        for value in values:
            canvas.line(left, y_of(value), right, y_of(value), "#b0b0b0", 0.6, grid)
            canvas.line(left - TICK_LEN, y_of(value), left, y_of(value))
            canvas.text(_label(value), left - TICK_LEN - 2, y_of(value) + TICK * plots.ASCENT / 2, TICK, "end")
        for line in panel.lines:
            runs: list[list[str]] = [[]]
            for seconds, reading in line.points:
                if reading is None:
                    runs.append([])
                else:
                    runs[-1].append(f"{x_of(seconds):.1f},{y_of(reading):.1f}")
            dash = ' stroke-dasharray="4 2"' if line.dashed else ""
            for points in (r for r in runs if r):
                canvas.parts.append(f'<polyline points="{" ".join(points)}" fill="none" stroke="{colour[line.host]}" '
                                    f'stroke-width="1.2" stroke-linejoin="round"{dash} data-panel="{escape(panel.key)}" '
                                    f'data-host="{escape(line.host)}" data-measure="{escape(line.measure)}">'
                                    f"<title>{escape(f'{line.host}: {line.measure}')}</title></polyline>")
        canvas.parts.append(f'<rect x="{left:.2f}" y="{top:.2f}" width="{right - left:.2f}" height="{PANEL_H:.2f}" '
                            f'fill="none" stroke="#000" stroke-width="0.8" data-frame="{escape(panel.key)}"/>')
        y = bottom + 2
    for tick in ticks:
        canvas.line(x_of(tick), y - 2, x_of(tick), y - 2 + TICK_LEN)
        canvas.text(f"{tick:.{decimals}f}", x_of(tick), y + TICK_LEN + TICK * plots.ASCENT, TICK, "middle")
    began = datetime.fromtimestamp(t0, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC") if abs(t0) < 1e11 else f"{t0:g}"
    y += TICK_LEN + TICK + 4
    canvas.text(f"seconds since the first sample began ({began})", (left + right) / 2, y + 8 * plots.ASCENT, 8,
                "middle")
    height = y + LABEL + PAD
    defs = "".join(f'<path id="{ref}" d="{font.glyph(char)[1]}"/>' for char, ref in canvas.used.items())
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{plots.WIDTH}pt" height="{height:.1f}pt" '
            f'viewBox="0 0 {plots.WIDTH} {height:.1f}" role="img"><title>client telemetry</title><defs>{defs}</defs>'
            f'<rect width="{plots.WIDTH}" height="{height:.1f}" fill="#fff"/>{"".join(canvas.parts)}</svg>')


# --- the page's part -----------------------------------------------------------------------

def _host_rows(samples: dict[str, list[dict[str, Any]]], t0: float) -> list[list[str]]:
    rows = []
    for host, found in samples.items():
        cpu = [_obj(s.get("cpu")) for s in found]
        busy = [100 - i - w for c in cpu if (i := _num(c.get("idle"))) is not None and (w := _num(c.get("iowait"))) is not None]
        iowait = [w for c in cpu if (w := _num(c.get("iowait"))) is not None]
        used = [u for s in found if (u := _num(_obj(s.get("mem")).get("used_mib"))) is not None]
        total = functools.partial(_total_gib, found)
        first = found[0]["t"] - (_dt(found[0]) or 0) - t0
        rows.append([markup.cell(host), markup.cell(len(found)), markup.cell(round(first, 3)),
                     markup.cell(round(found[-1]["t"] - t0, 3)),
                     markup.cell(round(sum(busy) / len(busy), 1) if busy else None),
                     markup.cell(round(sum(iowait) / len(iowait), 1) if iowait else None),
                     markup.cell(max(used) if used else None), markup.cell(total("disks", "read_bytes")),
                     markup.cell(total("disks", "write_bytes")), markup.cell(total("net", "rx_bytes")),
                     markup.cell(total("net", "tx_bytes"))])
    return rows


def _total_gib(found: list[dict[str, Any]], part: str, key: str) -> float:
    """GiB a host's samples moved through one counter (`disks`' read_bytes, `net`'s rx_bytes)."""
    return round(sum(_num(_obj(e).get(key)) or 0 for s in found for e in _obj(s.get(part)).values()) / GIB, 3)


def _phase_rows(phases: list[Phase], t0: float | None) -> list[list[str]]:
    def at(value: float | None) -> float | None:
        return round(value - t0, 3) if value is not None and t0 is not None else value

    return [[markup.cell(p.number), markup.cell(p.name), markup.cell(at(p.start)), markup.cell(at(p.end)),
             markup.cell(round(p.end - p.start, 3) if p.start is not None and p.end is not None else None),
             markup.cell(p.status, PHASE_WORDS[p.status]), markup.cell(p.limited, "yes" if p.limited else "no"),
             markup.cell(p.summary)] for p in phases]


def _caption(samples: dict[str, list[dict[str, Any]]], phases: bool) -> str:
    count = max(len(rows) for rows in samples.values())
    thinned = (f" A line of more than {MAX_POINTS} samples ({count} here) is drawn as the means of consecutive runs"
               " of them." if count > MAX_POINTS else "")
    shading = ("; shaded: the phases of the bottleneck records (telemetry/bottleneck.json), numbered as in the table "
               "below, " + ", ".join(f"{colour_word} {words}" for colour_word, words in
                                     zip(("red:", "orange:", "blue:", "grey:"), PHASE_WORDS.values(), strict=True))
               if phases else "")
    return ("Each client host's telemetry (telemetry/&lt;host&gt;.jsonl), one colour per host, on one time axis"
            f"{shading}. The progress curve is derived from the telemetry (there is no per-second progress file): "
            "the bytes the host's whole block devices read and wrote since the first sample (solid; a device-mapper "
            "or md device counts again with its members) and the bytes its interfaces received and sent (dashed; "
            "loopback is not sampled). Rates are each sample's counts over its interval, drawn at the interval's "
            f"middle.{thinned}")


def _notes(notes: list[str]) -> str:
    return "".join(f'<p class="note">{escape(n)}</p>' for n in notes)


def _leaf(leaf: Leaf, ident: str) -> tuple[str, int]:
    directory = leaf.path / DIRECTORY
    if files.kind_of(directory) != files.DIR:
        if files.kind_of(directory) is not None:
            return (f'<section class="telemetry" data-leaf="{escape(leaf.path.name)}"><h3>Telemetry: '
                    f'{escape(leaf.path.name)}</h3><p class="note">{DIRECTORY}/ is a '
                    f"{escape(files.kind_of(directory) or '')}, not a directory: not read</p></section>"), 0
        return "", 0
    samples, notes = _samples(directory)
    phases, phase_notes = _phases(leaf, directory)
    notes += phase_notes
    if not samples and not phases and not notes:
        return "", 0
    if len(samples) > MAX_HOSTS:
        notes.append(f"{len(samples)} hosts: the first {MAX_HOSTS} by name are drawn")
    drawn = dict(list(samples.items())[:MAX_HOSTS])
    parts, t0 = [], None
    if drawn:
        t0 = min(rows[0]["t"] - (_dt(rows[0]) or 0) for rows in drawn.values())
        span = max(max(rows[-1]["t"] for rows in drawn.values()) - t0, 1e-3)
        found, panel_notes = panels(drawn, t0)
        notes += panel_notes
        outside = [str(p.number) for p in phases if p.start is None or p.end is None or p.start > p.end
                   or p.end < t0 or p.start > t0 + span]
        if outside:
            notes.append(f"phases not drawn (no span inside the sampled time): {', '.join(outside)}")
        parts.append(f'<figure class="chart telemetry" data-chart="telemetry">'
                     f"{svg(found, phases, list(drawn), t0, span, ident)}"
                     f"<figcaption>{_caption(drawn, bool(phases))}</figcaption>"
                     f"{_notes(notes)}"
                     f"<details><summary>per host, over the whole telemetry</summary>"
                     f"{markup.grid(HOST_HEAD, _host_rows(samples, t0), 'telemetry-hosts')}</details></figure>")
    else:
        parts.append(_notes(notes + ["no telemetry samples to draw"]))
    if phases:
        parts.append(f"<h4>Bottleneck per phase</h4>"
                     f'<p class="note">seconds since the first sample began; what limited each phase, from the '
                     f"client hosts' telemetry</p>{markup.grid(BOTTLENECK_HEAD, _phase_rows(phases, t0), 'bottleneck')}")
    return (f'<section class="telemetry" data-leaf="{escape(leaf.path.name)}"><h3>Telemetry: {escape(leaf.path.name)}'
            f"</h3>{''.join(parts)}</section>"), int(bool(drawn))


def section(leaves: list[Leaf], ident: str) -> tuple[str, int]:
    """The telemetry parts of a result's leaves and the charts drawn; ("", 0) when no leaf has telemetry."""
    parts, drawn = [], 0
    for index, leaf in enumerate(leaves):
        html, charts = _leaf(leaf, f"{ident}-m{index}")
        parts.append(html)
        drawn += charts
    return "".join(parts), drawn
