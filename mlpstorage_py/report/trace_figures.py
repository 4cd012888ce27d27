"""`reports html`'s "I/O trace" section: what a run traced with `--trace-io` sent to the storage
(its leaf's io_trace.json, read by results/io_trace), so a reviewer sees the I/O behind the figures.

Per host and device: request sizes and completion latencies (log2 buckets, every bucket between
the smallest and the largest kept, so the x axis stays log2), the queue depth over the run, and
a table per op; then the trace's level and why, what no client host issued (unattributed), and
the biggest streams. No percentile is shown from fewer than io_trace.MIN_SAMPLES latencies (the
count is, `n=7`); requests whose completion the tracer did not see are said under the table;
each device says how much of its bytes were not the run's, and the trace's warnings lead. The
file is untrusted like every other: a value of the wrong type is a blank, never a crash, and
every string reaches the page through markup (escaped) or as glyph outlines in the SVG.
"""

from __future__ import annotations

import math
from html import escape
from typing import Any

from mlpstorage_py.report import markup
from mlpstorage_py.report.plots import Chart
from mlpstorage_py.results import io_trace
from mlpstorage_py.results.tree.package import Leaf

TOP_STREAMS = 20
DEPTH_BINS = 24      # queue-depth points per chart: even slices of the run, each a mean and a peak
MAX_BUCKETS = 80     # a histogram's buckets at most (a hostile key like 2**300 must not make thousands)
QUANTILES = (("p50", 0.50), ("p95", 0.95), ("p99", 0.99))
OP_HEAD = ["op", "requests", "bytes", "share of read+write bytes", "sequential share", "p50 ≤", "p95 ≤", "p99 ≤"]
STREAM_HEAD = ["host", "pid", "comm", "device", "rank", "run's work", "kernel thread", "read bytes", "write bytes",
               "flush bytes"]


def _num(value: Any) -> float | None:
    """A finite number from the file, else None."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return value if ok else None


def _obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _counts(hist: Any) -> dict[int, float]:
    """A log2 histogram as {lower bound: count}; keys that are no bound and counts that are no
    number are dropped."""
    counts: dict[int, float] = {}
    for key, count in _obj(hist).items():
        try:
            low = int(key)
        except (TypeError, ValueError):
            continue
        if low >= 0 and _num(count) is not None and count >= 0:
            counts[low] = counts.get(low, 0) + count
    return counts


def _lows(*hists: dict[int, float]) -> list[int]:
    """The lower bounds the x axis shows: every power of two from the smallest to the largest
    bucket (an empty one is a zero bar), and 0 where a histogram has it."""
    found = {low for hist in hists for low in hist}
    positive = [low for low in found if low > 0]
    if positive:
        low, high = 1 << (min(positive).bit_length() - 1), max(positive)
        while low <= high and len(found) < MAX_BUCKETS:
            found.add(low)
            low *= 2
    return sorted(found)[:MAX_BUCKETS]


def _bytes_label(low: float) -> str:
    """A size bucket as storage people write it: 4K, 1M (binary units)."""
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if low >= 1 << shift and low % (1 << shift) == 0:
            return f"{int(low) >> shift}{unit}"
    return f"{low:g}"


def _latency_label(us: float) -> str:
    if us < 1000:
        return f"{us:g}us"
    return f"{us / 1000:.3g}ms" if us < 1e6 else f"{us / 1e6:.3g}s"


def _bytes_text(value: Any) -> str | None:
    """Bytes shown in binary units (the exact count stays in the cell's data-value)."""
    if _num(value) is None:
        return None
    for unit, power in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if abs(value) >= 1 << power:
            return f"{value / (1 << power):.3g} {unit}"
    return f"{value:g} B"


def _percentiles(hist: dict[int, float]) -> dict[str, float | None]:
    """p50/p95/p99, each None without io_trace.MIN_SAMPLES latencies."""
    return {name: io_trace.percentile({str(k): v for k, v in hist.items()}, q) for name, q in QUANTILES}


def _too_few(hist: dict[int, float]) -> str:
    """Why a histogram with latencies shows no percentile: its count, below the minimum."""
    return f"{int(sum(hist.values()))} latencies: fewer than {io_trace.MIN_SAMPLES}, no percentile"


def _size_chart(device: dict[str, Any], title: str) -> Chart:
    hists = {op: _counts(_obj(device.get(op)).get("size_hist")) for op in ("read", "write")}
    lows = _lows(*hists.values())
    series: dict[str, list[float | None]] = {op: [hist.get(low, 0) for low in lows] for op, hist in hists.items() if hist}
    return Chart("trace-size", f"{title}: request sizes", "requests", "request size (log2 bucket, K = 1024 bytes)",
                 "bar", [_bytes_label(low) for low in lows], series,
                 notes=[] if series else ["no request sizes recorded"])


def _latency_chart(op: str, entry: dict[str, Any], title: str) -> Chart:
    """One op's completion latencies, p50/p95/p99 as dashed rules where their bucket ends (the
    percentile is that bucket's upper bound, as io_trace.percentile and `mlpstorage replay` take it)."""
    hist = _counts(entry.get("latency_us_hist"))
    found = _percentiles(hist)
    # the bucket a top percentile's bound opens is shown (empty), so its rule stands between bars
    lows = _lows(hist, {int(v): 0 for v in found.values() if v is not None})
    at: dict[float, list[str]] = {}
    for name, value in found.items():
        if value is not None:
            at.setdefault(value, []).append(name)
    marks = {f"{', '.join(names)} ≤ {_latency_label(value)}": sum(low < value for low in lows) - 0.5
             for value, names in at.items()}
    notes = ["; ".join(f"{name} ≤ {_latency_label(v)}" for name, v in found.items() if v is not None) +
             " (the upper bound of the bucket each falls in)"] if marks else \
        [_too_few(hist)] if hist else ["no latencies recorded"]
    unseen = _num(entry.get("latency_unseen"))
    if unseen:
        notes.append(_unseen_text(op, unseen, _num(entry.get("requests"))))
    return Chart(f"trace-latency-{op}", f"{title}: {op} completion latency", "requests",
                 "completion latency (log2 bucket)", "bar", [_latency_label(low) for low in lows],
                 {op: [hist.get(low, 0) for low in lows]} if hist else {}, notes=notes, marks=marks)


def _unseen_text(op: str, unseen: float, requests: float | None) -> str:
    """Requests counted whose completion the tracer did not see (io_trace.json latency_unseen)."""
    of = f" of {requests:g}" if requests is not None else ""
    return (f"{op}: {unseen:g}{of} requests' completions were not seen (in flight when the tracer stopped, or "
            "skipped by the kernel while another BPF program ran): they are in no latency histogram")


def _depth_chart(series: Any, duration: float | None, title: str) -> Chart:
    """The queue_depth series in even slices of the run (a category per slice): each slice's mean
    of the points in it and its highest point; a slice without a point is a gap."""
    points = [(p[0], p[1]) for p in (series if isinstance(series, list) else [])
              if isinstance(p, list) and len(p) == 2 and _num(p[0]) is not None and _num(p[1]) is not None]
    if not points:
        return Chart("trace-queue-depth", f"{title}: queue depth", "in flight", "s", "line", [],
                     notes=["no queue-depth points recorded"])
    bins = min(DEPTH_BINS, len(points))
    end = max(max(t for t, _ in points), duration or 0.0)
    width = end / bins if end > 0 else 1.0
    slices: list[list[float]] = [[] for _ in range(bins)]
    for t, depth in points:
        slices[min(max(int(t / width), 0), bins - 1)].append(depth)
    return Chart("trace-queue-depth", f"{title}: queue depth", "in flight", "time since the tracers attached (s)",
                 "line", [f"{(i + 0.5) * width:.3g}" for i in range(bins)],
                 {"mean in flight": [sum(s) / len(s) if s else None for s in slices],
                  "highest point": [max(s) if s else None for s in slices]})


def _op_rows(device: dict[str, Any]) -> list[list[str]]:
    """requests, bytes, share of the read+write bytes, sequential share and percentiles per op."""
    entries = {op: _obj(device.get(op)) for op in io_trace.OPS}
    moved = sum(_num(entries[op].get("bytes")) or 0 for op in ("read", "write"))
    rows = []
    for op, entry in entries.items():
        if not entry:
            continue
        moved_op = _num(entry.get("bytes"))
        share = round(moved_op / moved, 4) if op != "flush" and moved and moved_op is not None else None
        hist = _counts(entry.get("latency_us_hist"))
        found = _percentiles(hist)
        few = f"n={int(sum(hist.values()))}" if hist else None  # too few latencies: their count instead
        rows.append([markup.cell(op), markup.cell(_num(entry.get("requests"))),
                     markup.cell(moved_op, _bytes_text(moved_op)), markup.cell(share),
                     markup.cell(_num(entry.get("sequential_share"))),
                     *(markup.cell(v, few if v is None else _latency_label(v)) for v in found.values())])
    return rows


def _device_notes(device: dict[str, Any]) -> str:
    """Beside the op table: the share of the device's bytes that were not the run's, and the
    requests whose completion the tracer did not see."""
    facts = [(key, device.get(key)) for key in ("others_share_bytes", "others_bytes", "others_basis") if key in device]
    notes = [_unseen_text(op, unseen, _num(_obj(device.get(op)).get("requests"))) for op in io_trace.OPS
             if (unseen := _num(_obj(device.get(op)).get("latency_unseen")))]
    share = _num(device.get("others_share_bytes"))
    lead = [f"{share:.1%} of the bytes this device moved during the trace were not the run's"] if share else []
    return ((markup.pairs(facts, "trace-device-facts", "io_trace.json devices") if facts else "") +
            "".join(f'<p class="note">{escape(n)}</p>' for n in lead + notes))


def _device(host: str, name: str, device: dict[str, Any], duration: float | None, ident: str) -> tuple[str, int]:
    title = f"{host} {name}"
    charts = [_size_chart(device, title)]
    charts += [_latency_chart(op, _obj(device.get(op)), title) for op in io_trace.OPS
               if _num(_obj(device.get(op)).get("requests")) or _counts(_obj(device.get(op)).get("latency_us_hist"))]
    charts.append(_depth_chart(device.get("queue_depth"), duration, title))
    level = device.get("level")
    html = (f'<div class="trace-device" data-host="{escape(host)}" data-device="{escape(name)}">'
            f"<h4>{escape(host)}: device {escape(name)} ({escape(str(level))} level)</h4>"
            f"{markup.grid(OP_HEAD, _op_rows(device), 'trace-ops')}{_device_notes(device)}"
            f"{''.join(markup.chart(c, f'{ident}-{c.key}') for c in charts)}</div>")
    return html, sum(c.drawable() for c in charts)


def _streams(trace: dict[str, Any]) -> str:
    """The biggest streams by bytes, the hosts' and the unattributed (kernel writeback) alike."""
    found = [(host, s) for host, entry in _obj(trace.get("hosts")).items()
             for s in (_obj(entry).get("streams") or []) if isinstance(s, dict)]
    unattributed = _obj(trace.get("unattributed")).get("streams")
    found += [("unattributed", s) for s in (unattributed if isinstance(unattributed, list) else []) if isinstance(s, dict)]

    def moved(stream: dict[str, Any], op: str) -> float | None:
        return _num(_obj(_obj(stream.get("ops")).get(op)).get("bytes"))

    found.sort(key=lambda hs: -sum(moved(hs[1], op) or 0 for op in io_trace.OPS))
    rows = []
    for host, s in found[:TOP_STREAMS]:
        rank = s.get("rank")
        rows.append([markup.cell(host), markup.cell(s.get("pid")), markup.cell(s.get("comm")), markup.cell(s.get("device")),
                     markup.cell(rank, "" if rank is None else None), markup.cell(s.get("work") is True),
                     markup.cell(s.get("kernel_thread") is True),
                     *(markup.cell(moved(s, op), _bytes_text(moved(s, op))) for op in io_trace.OPS)])
    if not rows:
        return '<p class="note">no streams recorded</p>'
    return (f'<h4>Streams</h4><p class="note">the {len(rows)} biggest of {len(found)} streams by bytes '
            f"(one issuing process on one device)</p>{markup.grid(STREAM_HEAD, rows, 'trace-streams')}")


def _unattributed(trace: dict[str, Any]) -> str:
    """What the traced disks saw that no client host issued (writeback, other namespaces), totalled."""
    part = _obj(trace.get("unattributed"))
    devices = [_obj(d) for d in _obj(part.get("devices")).values()]
    rows = [[markup.cell(op), markup.cell(sum(_num(_obj(d.get(op)).get("requests")) or 0 for d in devices)),
             markup.cell(total := sum(_num(_obj(d.get(op)).get("bytes")) or 0 for d in devices), _bytes_text(total))]
            for op in io_trace.OPS]
    names = part.get("hostnames")
    about = [("why", part.get("why")), ("hostnames", names if isinstance(names, list) else None),
             ("devices", sorted(map(str, _obj(part.get("devices")))))]
    return (f"<h4>Unattributed</h4>{markup.pairs(about, 'trace-unattributed', 'io_trace.json unattributed')}"
            f"{markup.grid(['op', 'requests', 'bytes'], rows, 'trace-unattributed-ops')}")


def _trace(leaf: Leaf, trace: dict[str, Any], ident: str) -> tuple[str, int]:
    hosts = _obj(trace.get("hosts"))
    about = [("level", trace.get("level")), ("why", trace.get("why")), ("complete", trace.get("complete")),
             ("duration_s", _num(trace.get("duration_s"))), ("data_paths", trace.get("data_paths")),
             ("hosts", sorted(map(str, hosts)))]
    parts, drawn = [], 0
    for h, (host, entry) in enumerate(hosts.items()):
        entry = _obj(entry)
        facts = [("hostname", entry.get("hostname")), ("complete", entry.get("complete"))]
        if "skipped_probe_runs" in entry:  # probe runs the kernel skipped (completions among them)
            facts.append(("skipped_probe_runs", entry.get("skipped_probe_runs")))
        if entry.get("complete") is not True:
            facts.append(("error", entry.get("error")))
        parts.append(f'<div class="trace-host" data-host="{escape(host)}"><h4>host {escape(host)}</h4>'
                     f"{markup.pairs(facts, 'trace-host-facts', 'io_trace.json hosts')}")
        devices = _obj(entry.get("devices"))
        for d, (name, device) in enumerate(devices.items()):
            html, charts = _device(host, str(name), _obj(device), _num(trace.get("duration_s")), f"{ident}-h{h}-d{d}")
            parts.append(html)
            drawn += charts
        parts.append(("" if devices else '<p class="note">no device traced on this host</p>') + "</div>")
    warnings = [str(w) for w in trace.get("warnings") or [] if isinstance(w, str)] \
        if isinstance(trace.get("warnings"), list) else []
    warned = "".join(f'<p class="note trace-warning">{escape(w)}</p>' for w in warnings)
    return (f'<section class="io-trace" data-leaf="{escape(leaf.path.name)}"><h3>I/O trace: {escape(leaf.path.name)}</h3>'
            f"{warned}{markup.pairs(about, 'trace-about', 'io_trace.json')}{''.join(parts)}{_unattributed(trace)}"
            f"{_streams(trace)}</section>"), drawn


def section(leaves: list[Leaf], ident: str) -> tuple[str, int]:
    """The I/O trace parts of a result's traced leaves and the charts drawn; ("", 0) when none was traced."""
    parts, drawn = [], 0
    for index, leaf in enumerate(leaves):
        trace = io_trace.read(leaf.path)
        if trace is not None:
            html, charts = _trace(leaf, trace, f"{ident}-t{index}")
            parts.append(html)
            drawn += charts
    return "".join(parts), drawn
