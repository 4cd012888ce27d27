"""The per-run series a result's pictures show, read from its leaves, and their SVG drawings.

Series come from the same records the published figures do (summary.json metrics, rank 0's
per-checkpoint stats, the KV Options' per-trial aggregates, the vector runs' records as
figures.py reads them), so a picture never disagrees with the table beside it. The SVG is
written directly (svg()); matplotlib supplies only the font's outlines, imported when a chart
is first drawn, so no other command pays for it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any

from mlpstorage_py.errors import NotAvailable
from mlpstorage_py.report import figures, vdb_plots
from mlpstorage_py.results.tree.package import Leaf

Value = float | None
CHECKPOINT_KEY = re.compile(r"^(save|load)_ckpt(\d+)$")
# The KV per-trial fields (option_<k>_results.json aggregate.per_trial) and, for a run that
# kept only the aggregated summary.json (published packages), the Option-level field instead.
KV_BANDWIDTH = {"Read GiB/s": ("read_bandwidth_gbps", "aggregated_read_bandwidth_gbps"),
                "Write GiB/s": ("write_bandwidth_gbps", "aggregated_write_bandwidth_gbps")}
KV_P95 = {"Device read P95 ms": ("device_read_p95_ms", "aggregated_device_read_p95_ms"),
          "Device write P95 ms": ("device_write_p95_ms", "aggregated_device_write_p95_ms"),
          "End-to-end P95 ms": ("p95_latency_ms", "aggregated_p95_latency_ms")}
KV_OPTIONS = ("1", "2", "3")


@dataclass
class Chart:
    """One picture: values per category (x) for each named series, and notes on what is missing."""

    key: str
    title: str
    ylabel: str
    xlabel: str
    kind: str  # "line" or "bar"
    categories: list[str]
    series: dict[str, list[Value]] = field(default_factory=dict)
    dashed: set[str] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)
    marks: dict[str, float] = field(default_factory=dict)  # label -> x position (in categories): a dashed rule
    # A numeric x value per category (an x-y chart, e.g. recall against QPS): points sit at their
    # values on a value axis; None: categories evenly spaced, labelled by name.
    x_values: list[float] | None = None

    def drawable(self) -> bool:
        return any(v is not None for values in self.series.values() for v in values)


def _number(value: Any) -> Value:
    """A finite number, else None (a gap: NaN or infinity from a file would break the axes)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def _metric(leaf: Leaf) -> dict[str, Any]:
    summary = leaf.summary or {}
    metric = summary.get("metric")
    return metric if isinstance(metric, dict) else {}


def _aligned(per_run: dict[str, dict[int, Value]]) -> tuple[list[str], dict[str, list[Value]]]:
    """Series keyed by 1-based index -> one category per index any series has."""
    indices = sorted({i for values in per_run.values() for i in values})
    return [str(i) for i in indices], {name: [values.get(i) for i in indices] for name, values in per_run.items()}


def training(leaves: list[Leaf]) -> list[Chart]:
    """Throughput and AU per epoch of every run (Rules 3.3.8: the earliest run is the warm-up)."""
    ordered = sorted(leaves, key=lambda leaf: leaf.path.name)
    charts = []
    for key, metric, title, ylabel in (("throughput", "train_throughput_samples_per_second", "Training throughput per epoch",
                                        "samples/s"),
                                       ("au", "train_au_percentage", "Accelerator utilisation (AU) per epoch", "AU %")):
        per_run: dict[str, dict[int, Value]] = {}
        notes, dashed = [], set()
        for index, leaf in enumerate(ordered):
            name = leaf.path.name + (" (warm-up)" if index == 0 and len(ordered) > 1 else "")
            values = _metric(leaf).get(metric)
            if not isinstance(values, list) or not values:
                notes.append(f"{leaf.path.name}: summary.json has no metric.{metric} list")
                continue
            per_run[name] = {epoch: _number(v) for epoch, v in enumerate(values, 1)}
            if index == 0 and len(ordered) > 1:
                dashed.add(name)
        categories, series = _aligned(per_run)
        charts.append(Chart(f"training-{key}", title, ylabel, "epoch", "line", categories, series, dashed, notes))
    return charts


def _checkpoint_rates(leaf: Leaf) -> dict[str, dict[int, Value]]:
    """Rank 0's per-checkpoint throughput (GiB/s) by phase, from 0_per_epoch_stats.json: the
    values whose mean is the published save/load_checkpoint_io_mean_GB_per_second."""
    stats = leaf.json_object("0_per_epoch_stats.json").value or {}
    rates: dict[str, dict[int, Value]] = {"save": {}, "load": {}}
    for epoch in sorted(stats, key=lambda k: (not k.isdigit(), int(k) if k.isdigit() else 0, k)):
        block = stats[epoch]
        for name, entry in (block.items() if isinstance(block, dict) else ()):
            match = CHECKPOINT_KEY.match(name)
            if match and isinstance(entry, dict):
                rates[match[1]][int(match[2])] = _number(entry.get("throughput"))
    return rates


def checkpointing(leaves: list[Leaf]) -> list[Chart]:
    """Write and read GiB/s per checkpoint of every invocation."""
    ordered = sorted(leaves, key=lambda leaf: leaf.path.name)
    rates = {leaf.path.name: _checkpoint_rates(leaf) for leaf in ordered}
    charts = []
    for phase, word in (("save", "write"), ("load", "read")):
        per_run = {name: found[phase] for name, found in rates.items() if found[phase]}
        notes = [] if per_run else [f"no leaf's 0_per_epoch_stats.json records a {phase}_ckpt<N> throughput"]
        categories, series = _aligned(per_run)
        charts.append(Chart(f"checkpoint-{word}", f"Checkpoint {word} bandwidth per checkpoint (rank 0)", "GiB/s",
                            "checkpoint", "line", categories, series, notes=notes))
    return charts


def _kv_points(leaf: Leaf, prefix: str) -> tuple[list[str], list[dict[str, Any]], list[str], list[str]]:
    """(categories, records, which field set each record uses, notes) of one KV run: one record
    per Option and trial, or per Option where only the aggregated summary.json was kept."""
    categories, records, kinds, notes = [], [], [], []
    options = (leaf.summary or {}).get("options")
    options = options if isinstance(options, dict) else {}
    for option in KV_OPTIONS:
        aggregate = (leaf.json_object(f"option_{option}_results.json").value or {}).get("aggregate")
        trials = aggregate.get("per_trial") if isinstance(aggregate, dict) else None
        if isinstance(trials, list) and trials:
            for index, trial in enumerate(trials):
                if isinstance(trial, dict):
                    number = trial.get("trial")  # a label from a file is never text matplotlib would parse
                    categories.append(f"{prefix}O{option} T{number if isinstance(number, int) else index}")
                    records.append(trial)
                    kinds.append("trial")
        elif isinstance(options.get(option), dict):
            categories.append(f"{prefix}O{option} mean")
            records.append(options[option])
            kinds.append("option")
            notes.append(f"{leaf.path.name}: Option {option} per-trial results absent; "
                         f"the aggregated mean of summary.json is shown")
    return categories, records, kinds, notes


def kv_cache(leaves: list[Leaf]) -> list[Chart]:
    """Read/write bandwidth and device P95 per Option and trial (Rules 6.3.4)."""
    ordered = sorted(leaves, key=lambda leaf: leaf.path.name)
    categories: list[str] = []
    records: list[dict[str, Any]] = []
    kinds: list[str] = []
    notes: list[str] = []
    for leaf in ordered:
        prefix = f"{leaf.path.name} " if len(ordered) > 1 else ""
        its_categories, its_records, its_kinds, its_notes = _kv_points(leaf, prefix)
        categories += its_categories
        records += its_records
        kinds += its_kinds
        notes += its_notes
    charts = []
    for key, fields, title, ylabel in (("kv-bandwidth", KV_BANDWIDTH, "KV cache storage bandwidth per Option and trial",
                                        "GiB/s"),
                                       ("kv-p95", KV_P95, "KV cache P95 latency per Option and trial", "ms")):
        series = {label: [_number(r.get(trial if kind == "trial" else option)) for r, kind in zip(records, kinds, strict=True)]
                  for label, (trial, option) in fields.items()}
        series = {label: values for label, values in series.items() if any(v is not None for v in values)}
        chart_notes = list(notes) if key == "kv-bandwidth" else []
        if not series:
            chart_notes.append("no run records these values")
        charts.append(Chart(key, title, ylabel, "Option / trial", "bar", categories, series, notes=chart_notes))
    return charts


def vector_database(leaves: list[Leaf]) -> list[Chart]:
    """Queries per second and recall of every query run, read as the published figures are."""
    ordered = sorted(leaves, key=lambda leaf: leaf.path.name)
    names = [leaf.path.name for leaf in ordered]
    qps, recall, notes = [], [], []
    for leaf in ordered:
        record, source = figures._vdb_record(leaf)
        qps.append(_number((record or {}).get("throughput_qps")))
        value, _ = figures._vdb_recall(leaf, record, source)
        recall.append(value * 100 if value is not None else None)
        if record is None:
            notes.append(f"{leaf.path.name}: {source}")
    return [Chart("vdb-qps", "Vector database queries per second per run", "QPS", "run", "bar", names, {"QPS": qps},
                  notes=notes),
            Chart("vdb-recall", "Vector database recall per run", "recall %", "run", "bar", names, {"Recall %": recall}),
            *vdb_plots.sweep_charts(ordered)]


SERIES = {"training": training, "checkpointing": checkpointing, "kv_cache": kv_cache, "vector_database": vector_database}


def charts_of(benchmark: str, leaves: list[Leaf]) -> list[Chart]:
    return SERIES[benchmark](leaves) if benchmark in SERIES else []


def require_matplotlib() -> None:
    """Fail before any work, in one line, where matplotlib (the font and its outlines) is not installed."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        raise NotAvailable("reports html needs matplotlib: pip install matplotlib==3.11.2 "
                           "(requirements.txt, or the package's [report] extra)")


# --- drawing: the SVG is written directly, text as outlines of matplotlib's DejaVu Sans ---------
# matplotlib drew each chart through its whole figure machinery (layout passes, tick objects):
# 0.15-0.3 s a chart, minutes for a large tree. Here a chart is a few hundred string pieces and
# each glyph's outline is read once per process.

WIDTH, HEIGHT = 547.2, 230.4          # pt: the 7.6 x 3.2 in figure the page has always shown
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
TITLE, LABEL, TICK, SMALL = 10.8, 9.0, 9.0, 7.0   # font sizes (pt), as matplotlib's at font.size 9
EM = 100.0                             # the size outlines are read at
ASCENT = 0.73                          # DejaVu Sans cap height per em: where a baseline goes for centred text
PAD, TICK_LEN = 4.0, 3.5
STEPS = (1.0, 2.0, 2.5, 5.0, 10.0)
PATH_LETTERS = {1: ("M", 1), 2: ("L", 1), 3: ("Q", 2), 4: ("C", 3)}  # matplotlib Path codes; 79 closes


def _outline(vertices: Any, codes: Any) -> str:
    """A glyph's outline as SVG path data, y flipped (font units grow upward)."""
    out, i = [], 0
    while i < len(codes):
        code = int(codes[i])
        if code not in PATH_LETTERS:
            out.append("Z" if code == 79 else "")
            i += 1
            continue
        letter, count = PATH_LETTERS[code]
        out.append(letter + " ".join(f"{x:.1f} {-y:.1f}" for x, y in vertices[i:i + count]))
        i += count
    return "".join(out)


class _Font:
    """DejaVu Sans, matplotlib's bundled font: each glyph's advance and outline, read once."""

    def __init__(self) -> None:
        import matplotlib
        from matplotlib import ft2font

        # the bundled file itself: no font manager (its cache of the system's fonts costs seconds once)
        self._face = ft2font.FT2Font(str(Path(matplotlib.get_data_path()) / "fonts" / "ttf" / "DejaVuSans.ttf"))
        self._face.set_size(EM, 72)
        self._flags = ft2font.LoadFlags.NO_HINTING
        self._glyphs: dict[str, tuple[float, str]] = {}

    def glyph(self, char: str) -> tuple[float, str]:
        """(advance, outline); a character the font lacks, or a control character, is drawn as "?"."""
        if char not in self._glyphs:
            if char != "?" and (not char.isprintable() or self._face.get_char_index(ord(char)) == 0):
                self._glyphs[char] = self.glyph("?")
            else:
                advance = self._face.load_char(ord(char), flags=self._flags).linearHoriAdvance / 65536
                self._glyphs[char] = (advance, _outline(*self._face.get_path()))
        return self._glyphs[char]

    def width(self, text: str, size: float) -> float:
        return sum(self.glyph(c)[0] for c in text) * size / EM


_FONT: list[_Font] = []


def _font() -> _Font:
    if not _FONT:
        _FONT.append(_Font())
    return _FONT[0]


class _Canvas:
    """One chart's SVG pieces; text is <use> of glyph outlines defined once per chart."""

    def __init__(self, ident: str) -> None:
        self.ident, self.font = ident, _font()
        self.parts: list[str] = []
        self.used: dict[str, str] = {}  # a character -> the id of its outline in <defs>

    def text(self, text: str, x: float, y: float, size: float, anchor: str = "start", rotate: float = 0,
             fill: str = "#000") -> None:
        """text with its baseline at y; anchor start, middle or end of its width, before rotation."""
        shift = {"start": 0.0, "middle": -0.5, "end": -1.0}[anchor] * self.font.width(text, size)
        uses, at = [], 0.0
        for char in text:
            advance, outline = self.font.glyph(char)
            if outline:
                ref = self.used.setdefault(char, f"{self.ident}-g{len(self.used)}")
                uses.append(f'<use href="#{ref}" x="{at:.1f}"/>')
            at += advance
        turn = f" rotate({rotate:g})" if rotate else ""
        self.parts.append(f'<g fill="{fill}" transform="translate({x:.2f} {y:.2f}){turn} translate({shift:.2f} 0) '
                          f'scale({size / EM:.4f})">{"".join(uses)}</g>')

    def line(self, x1: float, y1: float, x2: float, y2: float, stroke: str = "#000", width: float = 0.8,
             extra: str = "") -> None:
        self.parts.append(f'<line x1="{x1:.2f}" y1="{y1:.2f}" x2="{x2:.2f}" y2="{y2:.2f}" stroke="{stroke}" '
                          f'stroke-width="{width:g}"{extra}/>')

    def svg(self, title: str) -> str:
        defs = "".join(f'<path id="{ref}" d="{self.font.glyph(char)[1]}"/>' for char, ref in self.used.items())
        return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}pt" height="{HEIGHT}pt" '
                f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img"><title>{escape(title)}</title><defs>{defs}</defs>'
                f'<rect width="{WIDTH}" height="{HEIGHT}" fill="#fff"/>{"".join(self.parts)}</svg>')


def _ticks(low: float, high: float) -> tuple[list[float], int]:
    """About seven round ticks across [low, high], and the decimals their labels need."""
    raw = (high - low) / 7
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(s * power for s in STEPS if s * power >= raw * 0.999)
    first = math.ceil(low / step - 1e-9)
    ticks = [(first + i) * step for i in range(int(math.floor(high / step + 1e-9)) - first + 1)]
    decimals = max(0, -math.floor(math.log10(step) + 1e-9) + (1 if round(step / power, 6) == 2.5 else 0))
    return ticks, decimals


def _axis(low: float, high: float) -> tuple[list[float], list[str]]:
    """The value axis's ticks and their labels: fixed decimals, or for very large or very small
    values as many mantissa decimals as the step needs (2.52e+09), so no two labels read alike."""
    ticks, decimals = _ticks(low, high)
    largest, step = max(abs(low), abs(high)), (ticks[1] - ticks[0]) if len(ticks) > 1 else 1.0
    digits = max(0, math.floor(math.log10(largest)) - math.floor(math.log10(step)) + 1) \
        if largest >= 1e6 or largest < 1e-3 else None
    labels = []
    for value in ticks:
        text = f"{value:.{digits}e}" if digits is not None else f"{value:.{decimals}f}"
        labels.append("0" if abs(value) < step * 1e-9 or text.strip("-0.") == "" else text)
    return ticks, labels


def _limits(chart: Chart) -> tuple[float, float]:
    """The value axis: the data with a 5 % margin (and room above for the marks' labels); bars always stand on zero."""
    values = [v for series in chart.series.values() for v in series if v is not None]
    low, high = min(values), max(values)
    if chart.kind == "bar":
        low, high = min(low, 0.0), max(high, 0.0)
    if high == low:
        spread = abs(high) * 0.05 or 1.0
        return low - spread, high + spread
    margin = (high - low) * 0.05
    high += (high - low) * 0.08 * len(chart.marks)  # headroom for the marks' labels, one row each
    if chart.kind == "bar":  # no margin below (or above) the zero a bar stands on
        return (low - margin if low < 0 else low), (high + margin if high > 0 else high)
    return low - margin, high + margin


def svg(chart: Chart, ident: str) -> str:
    """The chart as an inline <svg> element: no script, no font to fetch (text is outlines), ids
    prefixed by ident so that no two charts of a page share one; deterministic for a given chart."""
    canvas = _Canvas(ident)
    font = canvas.font
    low, high = _limits(chart)
    ticks, labels = _axis(low, high)
    names = list(chart.series)
    legend_w = (max(font.width(n, SMALL) for n in names) + 30) if len(names) > 1 else 0.0
    rotated = len(chart.categories) > 8 and not chart.x_values
    cat_w = [font.width(c, SMALL) for c in chart.categories]
    x_band = min(max(cat_w, default=0) * 0.5 + SMALL * 0.9, HEIGHT / 4) if rotated else SMALL * 1.2
    left = PAD + LABEL * 1.3 + max(font.width(l, TICK) for l in labels) + TICK_LEN + 3
    right = WIDTH - PAD - (legend_w + PAD if legend_w else max(cat_w[-1:] or [0]) / 2 + PAD)
    top, bottom = PAD + TITLE * 1.5, HEIGHT - PAD - LABEL * 1.3 - x_band - TICK_LEN - 2
    count = len(chart.categories)
    x_low, x_high = (-0.6, count - 0.4) if chart.kind == "bar" else (-0.3, max(count - 1, 0) + 0.3)
    xs = chart.x_values
    if xs:
        x_low, x_high = min(xs), max(xs)
        margin = (x_high - x_low) * 0.05 or abs(x_high) * 0.05 or 1.0
        x_low, x_high = x_low - margin, x_high + margin

    def x_of(position: float) -> float:
        value = xs[int(position)] if xs else position
        return left + (value - x_low) / (x_high - x_low) * (right - left)

    def x_at(value: float) -> float:
        return left + (value - x_low) / (x_high - x_low) * (right - left)

    def y_of(value: float) -> float:
        return bottom - (value - low) / (high - low) * (bottom - top)

    grid = ' stroke-opacity="0.3"'
    for tick, label in zip(ticks, labels, strict=True):
        y = y_of(tick)
        canvas.line(left, y, right, y, "#b0b0b0", 0.8, grid)
        canvas.line(left - TICK_LEN, y, left, y)
        canvas.text(label, left - TICK_LEN - 2, y + TICK * ASCENT / 2, TICK, "end")
    x_ticks = list(zip(*_axis(x_low, x_high), strict=True)) if xs else None
    for position, label in (x_ticks or enumerate(chart.categories)):
        x = x_at(position) if xs else x_of(position)
        canvas.line(x, top, x, bottom, "#b0b0b0", 0.8, grid)
        canvas.line(x, bottom, x, bottom + TICK_LEN)
        if rotated:
            canvas.text(label, x + 2, bottom + TICK_LEN + SMALL * 0.8, SMALL, "end", -30)
        else:
            canvas.text(label, x, bottom + TICK_LEN + 2 + SMALL * ASCENT, SMALL, "middle")
    _marks(canvas, chart, x_of, y_of)
    for row, (label, position) in enumerate(chart.marks.items()):
        x, width, baseline = x_of(position), font.width(label, SMALL), top + SMALL * (1.3 * row + 1.2)
        start = x + 2 if x + 2 + width < right else x - 2 - width  # right of the rule, else left of it
        canvas.line(x, top, x, bottom, "#333", 1.0, f' stroke-dasharray="3 2" data-mark="{escape(label)}"')
        canvas.parts.append(f'<rect x="{start - 1:.2f}" y="{baseline - SMALL:.2f}" width="{width + 2:.2f}" '
                            f'height="{SMALL * 1.25:.2f}" fill="#fff" fill-opacity="0.85"/>')  # legible over a bar
        canvas.text(label, start, baseline, SMALL)
    canvas.parts.append(f'<rect x="{left:.2f}" y="{top:.2f}" width="{right - left:.2f}" height="{bottom - top:.2f}" '
                        'fill="none" stroke="#000" stroke-width="0.8"/>')
    canvas.text(chart.title, (left + right) / 2, PAD + TITLE * ASCENT + 2, TITLE, "middle")
    canvas.text(chart.xlabel, (left + right) / 2, HEIGHT - PAD - 1, LABEL, "middle")
    canvas.text(chart.ylabel, PAD + LABEL * ASCENT + 1, (top + bottom) / 2, LABEL, "middle", -90)
    if legend_w:
        _legend(canvas, chart, WIDTH - PAD - legend_w, top, legend_w)
    return canvas.svg(chart.title)


def _marks(canvas: _Canvas, chart: Chart, x_of: Callable[[float], float], y_of: Callable[[float], float]) -> None:
    """Lines with a marker per value (a gap where a value is missing) or grouped bars (none for a gap)."""
    width = 0.8 / max(1, len(chart.series))
    base = y_of(0.0)
    for index, (label, values) in enumerate(chart.series.items()):
        colour = COLOURS[index % len(COLOURS)]
        if chart.kind == "bar":
            shift = (index - (len(chart.series) - 1) / 2) * width
            for position, value in enumerate(values):
                if value is not None:
                    x0, x1, y = x_of(position + shift - width / 2), x_of(position + shift + width / 2), y_of(value)
                    canvas.parts.append(f'<rect x="{x0:.2f}" y="{min(y, base):.2f}" width="{x1 - x0:.2f}" '
                                        f'height="{abs(base - y):.2f}" fill="{colour}"/>')
            continue
        dash = ' stroke-dasharray="5.55 2.4"' if label in chart.dashed else ""
        runs: list[list[tuple[str, str]]] = [[]]
        for position, value in enumerate(values):
            if value is None:
                runs.append([])
            else:
                runs[-1].append((f"{x_of(position):.2f}", f"{y_of(value):.2f}"))
        for points in (r for r in runs if r):
            canvas.parts.append(f'<polyline points="{" ".join(f"{x},{y}" for x, y in points)}" fill="none" '
                                f'stroke="{colour}" stroke-width="1.5" stroke-linejoin="round"{dash}/>')
            canvas.parts.append("".join(f'<circle cx="{x}" cy="{y}" r="2" fill="{colour}"/>' for x, y in points))


def _legend(canvas: _Canvas, chart: Chart, x: float, y: float, width: float) -> None:
    """Beside the axes, top right, never over the lines: a handle and the name of each series."""
    row = SMALL * 1.45
    canvas.parts.append(f'<rect x="{x:.2f}" y="{y:.2f}" width="{width:.2f}" height="{row * len(chart.series) + 4:.2f}" '
                        'fill="#fff" stroke="#ccc" stroke-width="0.8" rx="2"/>')
    for index, label in enumerate(chart.series):
        colour, middle = COLOURS[index % len(COLOURS)], y + 2 + row * (index + 0.5)
        if chart.kind == "bar":
            canvas.parts.append(f'<rect x="{x + 5:.2f}" y="{middle - 3:.2f}" width="14" height="6" fill="{colour}"/>')
        else:
            dash = ' stroke-dasharray="5.55 2.4"' if label in chart.dashed else ""
            canvas.line(x + 5, middle, x + 19, middle, colour, 1.5, dash)
            canvas.parts.append(f'<circle cx="{x + 12:.2f}" cy="{middle:.2f}" r="2" fill="{colour}"/>')
        canvas.text(label, x + 24, middle + SMALL * ASCENT / 2, SMALL, "start")
