"""The per-run series a result's pictures show, read from its leaves, and their SVG drawings.

Series come from the same records the published figures do (summary.json metrics, rank 0's
per-checkpoint stats, the KV Options' per-trial aggregates, the vector runs' records as
figures.py reads them), so a picture never disagrees with the table beside it. matplotlib is
imported only when a chart is drawn: no other command pays for it.
"""

from __future__ import annotations

import io
import math
import re
from dataclasses import dataclass, field
from typing import Any

from mlpstorage_py.checker.files import UNREADABLE
from mlpstorage_py.checker.package import Leaf
from mlpstorage_py.errors import NotAvailable
from mlpstorage_py.report import figures

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

    def drawable(self) -> bool:
        return any(v is not None for values in self.series.values() for v in values)


def _number(value: Any) -> Value:
    """A finite number, else None (a gap: NaN or infinity from a file would break the axes)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def _metric(leaf: Leaf) -> dict[str, Any]:
    summary = leaf.summary or {}
    metric = summary.get("metric") if UNREADABLE not in summary else None
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
    stats = leaf.json_object("0_per_epoch_stats.json") or {}
    rates: dict[str, dict[int, Value]] = {"save": {}, "load": {}}
    for epoch in sorted((k for k in stats if k != UNREADABLE), key=lambda k: (not k.isdigit(), int(k) if k.isdigit() else 0, k)):
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
    options = (leaf.summary or {}).get("options") if UNREADABLE not in (leaf.summary or {}) else None
    options = options if isinstance(options, dict) else {}
    for option in KV_OPTIONS:
        aggregate = (leaf.json_object(f"option_{option}_results.json") or {}).get("aggregate")
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
        found = _kv_points(leaf, f"{leaf.path.name} " if len(ordered) > 1 else "")
        for into, part in zip((categories, records, kinds, notes), found):
            into.extend(part)
    charts = []
    for key, fields, title, ylabel in (("kv-bandwidth", KV_BANDWIDTH, "KV cache storage bandwidth per Option and trial",
                                        "GiB/s"),
                                       ("kv-p95", KV_P95, "KV cache P95 latency per Option and trial", "ms")):
        series = {label: [_number(r.get(trial if kind == "trial" else option)) for r, kind in zip(records, kinds)]
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
            Chart("vdb-recall", "Vector database recall per run", "recall %", "run", "bar", names, {"Recall %": recall})]


SERIES = {"training": training, "checkpointing": checkpointing, "kv_cache": kv_cache, "vector_database": vector_database}


def charts_of(benchmark: str, leaves: list[Leaf]) -> list[Chart]:
    return SERIES[benchmark](leaves) if benchmark in SERIES else []


def require_matplotlib() -> None:
    """Fail before any work, in one line, where matplotlib is not installed."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        raise NotAvailable("reports html needs matplotlib: pip install matplotlib==3.11.2 "
                           "(requirements.txt, or the package's [report] extra)")


def svg(chart: Chart) -> str:
    """The chart as an inline <svg> element: text drawn as paths (no fonts to fetch), no XML
    prologue, ids stable across runs; matplotlib escapes the text it keeps in comments."""
    import matplotlib
    from matplotlib.figure import Figure

    style = {"svg.fonttype": "path", "svg.hashsalt": f"mlps-{chart.key}", "font.size": 9}
    with matplotlib.rc_context(style):
        fig = Figure(figsize=(7.6, 3.2), layout="constrained")
        ax = fig.add_subplot()
        positions = range(len(chart.categories))
        if chart.kind == "bar":
            width = 0.8 / max(1, len(chart.series))
            for i, (label, values) in enumerate(chart.series.items()):
                shift = (i - (len(chart.series) - 1) / 2) * width
                shown = [(p + shift, v) for p, v in zip(positions, values) if v is not None]  # a gap, never a 0
                ax.bar([x for x, _ in shown], [v for _, v in shown], width, label=label)
        else:
            for label, values in chart.series.items():
                ax.plot(list(positions), [v if v is not None else float("nan") for v in values], marker="o",
                        markersize=3, linestyle="--" if label in chart.dashed else "-", label=label)
        ax.set_xticks(list(positions), chart.categories, rotation=30 if len(chart.categories) > 8 else 0, fontsize=7)
        ax.set_title(chart.title)
        ax.set_xlabel(chart.xlabel)
        ax.set_ylabel(chart.ylabel)
        ax.grid(True, alpha=0.3)
        if len(chart.series) > 1:
            fig.legend(fontsize=7, loc="outside right upper")  # beside the axes, never over the lines
        out = io.StringIO()
        fig.savefig(out, format="svg", metadata={"Date": None, "Creator": None})
    text = out.getvalue()
    return text[text.index("<svg"):]
