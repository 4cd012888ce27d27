"""A training or checkpointing leaf's summary.json, in DLIO's format (written by DLIO for
training, by checkpoint/engine.py for checkpointing), and the figures the rules and the results
table take from it: Rules 3.3.8's aggregation over a result's runs, shared by rule 3.3.8 and
reportgen, and what an `--engine dlio` leaf's figures mean.

DlioSummary (summary.json), no version key: DLIO's format carries none, and the reference's
readers take the file as DLIO writes it, so this tool adds none either.
    none    DLIO's: metric (train_* lists and means, save_/load_checkpoint_* figures), start, end,
            num_accelerators, ...; ours adds checkpoint_engine (name, writer) for --engine dlio
"""

from __future__ import annotations

import statistics
from typing import Any

from mlpstorage_py.results.schema import NUMBER, OBJECT, TEXT, UNVERSIONED, Schema
from mlpstorage_py.results.tree.package import Leaf
from mlpstorage_py.results.tree.values import dig
from mlpstorage_py.rules.tables import checker

Figures = dict[str, Any]
# summary.json checkpoint_engine.name of a leaf made by `--engine dlio` (benchmarks/dlio_engine.Engine.name).
DLIO_ENGINE = "dlio_benchmark "


class DlioSummary(Schema):
    KIND = "summary.json"
    VERSION_KEY = None  # DLIO's format: a stray version key in it is not this tool's to judge
    VERSION = UNVERSIONED
    OLDER = ()
    FIELDS = {"metric": OBJECT, "checkpoint_engine": OBJECT, "start": TEXT, "end": TEXT, "num_accelerators": NUMBER}

    @staticmethod
    def metric_of(data: dict[str, Any] | None) -> dict[str, Any]:
        """The metric block of a summary as read (every version: DLIO's format carries none),
        {} without one; asked of every leaf many times, so no record is built for it."""
        found = data.get("metric") if data is not None else None
        return found if isinstance(found, dict) else {}


def metric(leaf: Leaf) -> dict[str, Any]:
    """The summary's metric block, {} when the summary or the block is missing or unreadable."""
    return DlioSummary.metric_of(leaf.summary)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def mean_of(leaves: list[Leaf], key: str) -> float | None:
    """Arithmetic mean of one metric over leaves; None (blank) when any leaf lacks it."""
    values = [metric(leaf).get(key) for leaf in leaves]
    numbers = [v for v in values if isinstance(v, (int, float))]
    if not values or len(numbers) != len(values):
        return None
    return statistics.fmean(numbers)


def training(runs: list[Leaf]) -> tuple[Figures, list[str]]:
    """Rules 3.3.8: the earliest of the run leaves is the warm-up; the other five are measured."""
    issues: list[str] = []
    expected = checker()["runs_per_result"]["training"]
    ordered = sorted(runs, key=lambda leaf: leaf.path.name)
    if len(ordered) != expected:
        issues.append(f"expected {expected} training runs (1 warm-up + {expected - 1}), found {len(ordered)}")
    measured = ordered[1:]
    io = mean_of(measured, "train_io_mean_MB_per_second")
    figures: Figures = {"read_bw_gib_s": io / 1024 if io is not None else None, "measured_runs": [l.path.name for l in measured],
                        "warmup_run": ordered[0].path.name if ordered else None}
    names = sorted({k[len("train_"):] for leaf in measured for k, v in metric(leaf).items()
                    if k.startswith("train_") and isinstance(v, list)})
    for name in names:
        per_run = [metric(leaf).get(f"train_{name}") for leaf in measured]
        if any(not isinstance(v, list) or not v or not all(is_number(x) for x in v) for v in per_run):
            issues.append(f"metric train_{name} is empty (or not a list of numbers) in a measured run; cannot aggregate")
            figures[f"train_mean_of_{name}"] = None
            continue
        figures[f"train_mean_of_{name}"] = statistics.fmean(statistics.fmean(v) for v in per_run if isinstance(v, list))
    if figures["read_bw_gib_s"] is None:
        issues.append("a measured run lacks metric.train_io_mean_MB_per_second: Read B/W is blank")
    return figures, issues


def dlio_engine(summary: Any, meta: Any) -> str | None:
    """The DLIO that `--engine dlio` ran the checkpoints through (the summary's checkpoint_engine,
    else the metadata's engine), or None: our engine and the reference tool's leaves name none."""
    for value in (dig(summary, "checkpoint_engine", "name"), dig(meta, "engine"), dig(meta, "engine_parameters", "engine")):
        if isinstance(value, str) and value.startswith(DLIO_ENGINE):
            return value
    return None


def dlio_engine_note(summary: Any, meta: Any) -> str | None:
    """What a reader of an `--engine dlio` leaf's figures must know (ManPage: `--engine dlio`), or None."""
    name = dlio_engine(summary, meta)
    if name is None:
        return None
    writer = dig(summary, "checkpoint_engine", "writer")
    return (f"checkpoints written through --engine dlio ({name}, writer {writer or 'not recorded'}): the data is "
            "zero-filled, so it compresses and dedups, and the figures are rank 0's timing only: a cross-check, "
            "not comparable with incompressible data timed on every rank")
