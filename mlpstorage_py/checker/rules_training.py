"""Section 3: training workloads."""

from __future__ import annotations

import math
import statistics
from typing import Iterable

from mlpstorage_py.checker.package import Leaf, Package
from mlpstorage_py.checker.registry import INVALID, Finding, finding, rule
from mlpstorage_py.rules import tables

GIB = 1024 ** 3


def _training(pkg: Package, command: str) -> list[Leaf]:
    return [leaf for leaf in pkg.leaves if leaf.benchmark == "training" and leaf.command == command]


def _checker_block(leaf: Leaf) -> dict:
    edition = leaf.stamped_edition if leaf.stamped_edition in tables.editions()["editions"] else tables.editions()["current_edition"]
    return tables.checker(edition)


@rule("3.1.1", "trainingVerifyDatasizeUsage")
def datasize_usage(pkg: Package) -> Iterable[Finding]:
    """A workload with runs has a datasize leaf; each run's metadata has args and parameters.dataset."""
    runs = _training(pkg, "run")
    datasize_dirs = {leaf.workload_dir for leaf in _training(pkg, "datasize") if leaf.metadata}
    for leaf in runs:
        if leaf.workload_dir not in datasize_dirs:
            yield finding("3.1.1", INVALID, leaf.path, "the workload has no datasize leaf with metadata")
        meta = leaf.metadata or {}
        if not isinstance(meta.get("args"), dict) or not isinstance((meta.get("parameters") or {}).get("dataset"), dict):
            yield finding("3.1.1", INVALID, leaf.path, "run metadata lacks an args block or a parameters.dataset block")


def min_total_files(batch_size: int, accelerators: int, host_memory_gb: list[float], record_length: int,
                    samples_per_file: int, steps: int, multiplier: int) -> int:
    """Rules 3.1.2 recomputed from a run's own records."""
    by_steps = steps * batch_size * accelerators
    by_memory = sum(host_memory_gb) * multiplier * GIB / record_length
    return math.ceil(max(by_steps, by_memory) / samples_per_file)


@rule("3.1.2", "trainingRecalculateDatasetSize")
def recalculate_datasize(pkg: Package) -> Iterable[Finding]:
    """A run's num_files_train is at least the minimum recomputed from its summary and metadata."""
    for leaf in _training(pkg, "run"):
        meta, summary = leaf.metadata, leaf.summary
        if not meta or not summary or "__unreadable__" in summary:
            continue
        params = meta.get("parameters") or {}
        dataset, reader = params.get("dataset") or {}, params.get("reader") or {}
        try:
            needed = min_total_files(
                batch_size=int(reader["batch_size"]), accelerators=int(summary["num_accelerators"]),
                host_memory_gb=[float(m) for m in summary["host_memory_GB"]],
                record_length=int(dataset["record_length_bytes"]),
                samples_per_file=int(dataset["num_samples_per_file"]),
                steps=int(_checker_block(leaf)["training_steps_per_epoch"]),
                multiplier=int(_checker_block(leaf)["training_host_memory_multiplier"]))
            used = int(dataset["num_files_train"])
        except (KeyError, TypeError, ValueError) as exc:
            yield finding("3.1.2", INVALID, leaf.path, f"cannot recompute the dataset size: missing or bad {exc}")
            continue
        if used < needed:
            yield finding("3.1.2", INVALID, leaf.path, f"num_files_train {used} < required minimum {needed}")


@rule("3.3.2", "trainingAcceleratorUtilizationCheck")
def accelerator_utilization(pkg: Package) -> Iterable[Finding]:
    """Each run's mean AU meets the model's minimum and DLIO judged it a success."""
    for leaf in _training(pkg, "run"):
        summary = leaf.summary
        if not summary or "__unreadable__" in summary:
            continue
        metric = summary.get("metric") or {}
        minimum = _checker_block(leaf)["training_au_thresholds"].get(leaf.model)
        au = metric.get("train_au_mean_percentage")
        if au is None and metric.get("train_au_percentage"):
            au = statistics.fmean(metric["train_au_percentage"])
        if minimum is None or au is None:
            yield finding("3.3.2", INVALID, leaf.path, "no AU minimum for this model or no AU in summary.json")
            continue
        if au < minimum * 100:
            yield finding("3.3.2", INVALID, leaf.path, f"mean AU {au:.2f}% is below the {minimum * 100:g}% minimum for {leaf.model}")
        if metric.get("train_au_meet_expectation") != "success":
            yield finding("3.3.2", INVALID, leaf.path, f"train_au_meet_expectation is {metric.get('train_au_meet_expectation')!r}, not 'success'")
