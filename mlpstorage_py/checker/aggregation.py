"""How a training result's runs aggregate (Rules 3.3.8): the one computation that both rule
3.3.8 and reportgen's results table need. It lives on the checker side because the checker
must not import report/ (report is above it); report/figures.py imports it from here.
"""

from __future__ import annotations

import statistics
from typing import Any

from mlpstorage_py.results.tree.package import Leaf
from mlpstorage_py.rules.tables import checker

Figures = dict[str, Any]


def metric(leaf: Leaf) -> dict[str, Any]:
    """The summary's metric block, {} when the summary or the block is missing or unreadable."""
    found = (leaf.summary or {}).get("metric")
    return found if isinstance(found, dict) else {}


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def mean_of(leaves: list[Leaf], key: str) -> float | None:
    """Arithmetic mean of one metric over leaves; None (blank) when any leaf lacks it."""
    values = [metric(leaf).get(key) for leaf in leaves]
    if not values or any(not isinstance(v, (int, float)) for v in values):
        return None
    return statistics.fmean(values)


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
        figures[f"train_mean_of_{name}"] = statistics.fmean(statistics.fmean(v) for v in per_run)
    if figures["read_bw_gib_s"] is None:
        issues.append("a measured run lacks metric.train_io_mean_MB_per_second: Read B/W is blank")
    return figures, issues
