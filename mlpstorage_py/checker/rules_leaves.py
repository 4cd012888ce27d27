"""Section 2.1, the workload directories and their leaves: which models (2.1.11, 2.1.21), phase
and timestamp directories (2.1.12, 2.1.13, 2.1.17, 2.1.23), the gaps between runs (2.1.18,
2.1.24), results.json (2.1.16, 2.1.22), the files of each leaf and its dlio_config/ (2.1.14,
2.1.15, 2.1.19, 2.1.20, 2.1.25, 2.1.26) and its dlio.log (2.29).

Registered right after rules_structure (checker/__init__.py imports the two in that order), so
the order of the rules, and of their findings, is that of the one module they were split from.

These rules judge only the submissions the checker can judge (an edition with a checker block)
and only workload directories of a model the edition sanctions (a directory of any other name is
reported by 2.1.11/2.1.21 alone): judging.judged is that filter, for a result or a leaf.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Iterable
from pathlib import Path

from mlpstorage_py.checker.judging import judged, judged_system, sanctioned
from mlpstorage_py.checker.registry import LEAF, PHASE, RESULT, SYSTEM, Finding, Rule, rule
from mlpstorage_py.checker.rules_structure import only_sanctioned
from mlpstorage_py.results.tree.files import (
    DIR,
    FILE,
    LINK,
    MAPPING,
    SEQUENCE,
    child,
    kind_of,
    load_json,
    names,
    read_text,
    real_dir,
    visible,
    yaml_shape,
)
from mlpstorage_py.results.tree.layout import TIMESTAMP
from mlpstorage_py.results.tree.package import Leaf, Phase, Result, System
from mlpstorage_py.results.tree.values import leaf_time

PHASES = ("datasize", "datagen", "run")
# reportgen's identity/result tables may sit beside the timestamp directories of a phase or
# checkpointing workload directory.
PHASE_TABLES = frozenset({"results.json", "results.csv"})
LOG_READ_LIMIT = 1 << 16
# A log record carries a date-time; an empty, pruned or placeholder dlio.log has none (2.29).
LOG_RECORD = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}")


def _models(r: Rule, system: System, family: str) -> Iterable[Finding]:
    """2.1.11/2.1.21: a judged system's family directory, where there is one, holds only sanctioned models."""
    if not judged_system(system):
        return
    family_dir = system.path / family
    if real_dir(family_dir):
        yield from only_sanctioned(r, family_dir, sorted(sanctioned(system, family)),
                                   f"{family}/ holds no workload directory", f" in {family}/")


@rule("2.1.11", "trainingWorkloads").check(SYSTEM)
def training_workloads(r: Rule, system: System) -> Iterable[Finding]:
    """training/ holds only the edition's training models (unet3d, retinanet)."""
    yield from _models(r, system, "training")


@rule("2.1.21", "checkpointingWorkloads").check(SYSTEM)
def checkpointing_workloads(r: Rule, system: System) -> Iterable[Finding]:
    """checkpointing/ holds only the edition's checkpointing models (llama3-8b ... llama3-1t)."""
    yield from _models(r, system, "checkpointing")


@rule("2.1.12", "trainingPhases").check(RESULT, benchmark="training")
def training_phases(r: Rule, result: Result) -> Iterable[Finding]:
    """A training workload directory holds datasize/, datagen/ and run/, and nothing else."""
    if not judged(result):
        return
    content = {n: (k, p) for n, k, p in visible(result.path)}
    for phase in PHASES:
        if content.get(phase, (None,))[0] != DIR:
            yield r.invalid(result.path, f"training/{result.model} has no {phase}/ phase directory")
    for name, (kind, path) in sorted(content.items()):
        if name not in PHASES and kind != LINK:
            yield r.invalid(path, f"unexpected {kind} {name!r} in training/{result.model} (datasize, datagen and run only)")


def _timestamps(r: Rule, directory: Path, expected: tuple[int, int], what: str) -> Iterable[Finding]:
    """Exactly `expected` (lo, hi) valid timestamp directories and only results tables beside them."""
    stamps = []
    for name, kind, path in visible(directory):
        if kind == LINK:
            continue
        if kind == DIR and TIMESTAMP.match(name):
            if leaf_time(name) is None:
                yield r.invalid(path, f"{name} is not a real date and time (YYYYMMDD_HHmmss)")
            stamps.append(name)
        elif not (kind == FILE and name in PHASE_TABLES):
            yield r.invalid(path, f"unexpected {kind} {name!r} beside the timestamp directories")
    lo, hi = expected
    if not lo <= len(stamps) <= hi:
        count = str(lo) if lo == hi else f"{lo} to {hi}"
        yield r.invalid(directory, f"{what} holds {len(stamps)} timestamp directories; {count} required")


@rule("2.1.13", "datagenTimestamp").check(RESULT, benchmark="training")
def datagen_timestamp(r: Rule, result: Result) -> Iterable[Finding]:
    """datagen/ holds exactly one timestamp directory."""
    if judged(result) and real_dir(result.path / "datagen"):
        yield from _timestamps(r, result.path / "datagen", (1, 1), f"training/{result.model}/datagen")


@rule("2.1.17", "runTimestamps").check(RESULT, benchmark="training")
def run_timestamps(r: Rule, result: Result) -> Iterable[Finding]:
    """run/ holds exactly runs_per_result (edition 3.0: 6) timestamp directories."""
    block = judged(result)
    if block and real_dir(result.path / "run"):
        count = int(block["runs_per_result"]["training"])
        yield from _timestamps(r, result.path / "run", (count, count), f"training/{result.model}/run")


@rule("2.1.23", "checkpointingTimestamps").check(RESULT, benchmark="checkpointing")
def checkpointing_timestamps(r: Rule, result: Result) -> Iterable[Finding]:
    """A checkpointing workload holds one (combined) or two (write, then read) timestamp directories."""
    block = judged(result)
    if block:
        count = int(block["runs_per_result"]["checkpointing"])
        yield from _timestamps(r, result.path, (1, count), f"checkpointing/{result.model}")


def _gaps(r: Rule, leaves: list[Leaf]) -> Iterable[Finding]:
    """Neighbouring runs are separated by less than one run's duration (2.1.18, 2.1.24).

    The names state when each invocation began; the idle time between the end of one run and
    the name of the next must be shorter than a run: otherwise a run could have been removed
    from between them."""
    timed = sorted(((leaf.name_time, leaf.path), leaf) for leaf in leaves if leaf.name_time is not None)
    for ((t0, _), first), ((t1, _), second) in itertools.pairwise(timed):
        end0, end1 = first.end_local, second.end_local
        durations = [end - start for end, start in ((end0, t0), (end1, t1)) if end is not None and end >= start]
        if end0 is None or not durations:
            yield r.warning(second.path, f"cannot check the gap after {first.path.name}: no readable summary.json or "
                                         "metadata records when the runs ended")
            continue
        idle, longest = t1 - end0, max(durations)
        if idle >= longest:
            yield r.invalid(second.path, f"{second.path.name} starts {idle.total_seconds():,.0f} s after {first.path.name} "
                                         f"ended, not less than one run ({longest.total_seconds():,.0f} s): runs are not consecutive")


@rule("2.1.18", "runTimestampGap").check(PHASE, benchmark="training", command="run")
def run_gap(r: Rule, phase: Phase) -> Iterable[Finding]:
    """Consecutive training runs leave less than one run's duration between them."""
    if judged(phase.result):
        yield from _gaps(r, phase.leaves)


@rule("2.1.24", "checkpointingTimestampGap").check(RESULT, benchmark="checkpointing")
def checkpointing_gap(r: Rule, result: Result) -> Iterable[Finding]:
    """Consecutive checkpointing invocations leave less than one invocation's duration between them."""
    if judged(result):
        yield from _gaps(r, result.leaves)


class _Required:
    """A checker block's list of required-file patterns, compiled once, with the answer for
    each name already asked: leaves repeat the same few names, so most are looked up, not searched."""

    MEMO_LIMIT = 1 << 14  # names remembered; a name that embeds the leaf's time is seen once

    def __init__(self, patterns: tuple[str, ...]) -> None:
        self.patterns = patterns
        self.searches = [re.compile(p).search for p in patterns]
        self.memo: dict[str, tuple[int, ...]] = {}

    def matching(self, name: str) -> tuple[int, ...]:
        """The indices of the patterns the name matches."""
        found = self.memo.get(name)
        if found is None:
            if len(self.memo) >= self.MEMO_LIMIT:
                self.memo.clear()
            found = self.memo[name] = tuple(i for i, search in enumerate(self.searches) if search(name))
        return found


@functools.cache
def _required(patterns: tuple[str, ...]) -> _Required:
    return _Required(patterns)


def _leaf_files(r: Rule, unit: Leaf, kind: str) -> Iterable[Finding]:
    """The files and folders the checker block lists for a judged leaf of one kind (datagen, run,
    checkpoint): 2.1.14, 2.1.19 and 2.1.25 differ only in the lists they read."""
    block = judged(unit)
    if not block:
        return
    leaf, required, folders = unit.path, _required(tuple(block[f"{kind}_required_files"])), block[f"{kind}_required_folders"]
    listing = names(leaf)
    matched: list[list[tuple[str, str]]] = [[] for _ in required.patterns]
    for name, what in listing.items():
        for i in required.matching(name):
            matched[i].append((name, what))
    for pattern, hits in zip(required.patterns, matched, strict=True):
        files = [name for name, what in hits if what == FILE]
        if not files:
            why = f"{hits[0][0]} is a {hits[0][1]}, not a file" if hits else f"no file matching {pattern!r}"
            yield r.invalid(leaf, why)
            continue
        if pattern.endswith(r"json$"):
            for name in files:
                path = child(leaf, name)
                data, problem = load_json(path)
                if problem is None and not isinstance(data, dict):
                    problem = f"{name} is not a JSON object"
                if problem:
                    yield r.invalid(path, problem)
    for folder in folders:
        if listing.get(folder) != DIR:
            yield r.invalid(leaf, f"no {folder}/ subdirectory")


def _dlio_config(r: Rule, unit: Leaf, parent: str) -> Iterable[Finding]:
    """A judged leaf's dlio_config/ holds exactly the checker block's files, each readable; `parent`
    is the files rule that reports the folder missing."""
    block = judged(unit)
    if not block:
        return
    leaf, expected = unit.path, block["dlio_config_files"]
    if names(leaf).get("dlio_config") != DIR:
        # the missing folder is reported once, by the files rule that requires it (2.1.14, 2.1.19, 2.1.25)
        yield r.info(leaf, f"not checked: no dlio_config/ subdirectory (reported under {parent})")
        return
    folder = child(leaf, "dlio_config")
    content = {n: (k, p) for n, k, p in visible(folder)}
    for name in expected:
        kind, path = content[name] if name in content else (None, folder / name)
        if kind != FILE:
            yield r.invalid(path, f"dlio_config/{name} is {'missing' if kind is None else f'a {kind}'}")
            continue
        shape, problem = yaml_shape(path, "workload" if name == "config.yaml" else None)
        if problem is None and shape is not None:
            shape_ok = {"config.yaml": shape.value_kind == MAPPING, "overrides.yaml": shape.kind in (None, SEQUENCE)}.get(
                name, shape.kind == MAPPING and not shape.empty)
            if not shape_ok:
                problem = f"{name} does not hold a DLIO {name[:-5]} record (empty, truncated or of the wrong shape)"
        if problem:
            yield r.invalid(path, problem)
    for name, (kind, path) in sorted(content.items()):
        if name not in expected:
            yield r.invalid(path, f"unexpected {kind} {name!r} in dlio_config/ (only {', '.join(expected)})")


@rule("2.1.14", "datagenFiles").check(LEAF, benchmark="training", command="datagen")
def datagen_files(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """A datagen leaf holds the logs, metadata and dlio_config/ the edition's checker block lists."""
    yield from _leaf_files(r, leaf, "datagen")


@rule("2.1.15", "datagenDlioConfig").check(LEAF, benchmark="training", command="datagen")
def datagen_dlio_config(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """A datagen leaf's dlio_config/ holds exactly config.yaml, hydra.yaml and overrides.yaml, each readable."""
    yield from _dlio_config(r, leaf, "2.1.14")


def _results_json(r: Rule, directory: Path) -> Iterable[Finding]:
    path = directory / "results.json"
    data, problem = load_json(path)
    if problem is None and not isinstance(data, dict):
        problem = "results.json is not a JSON object"
    if problem:
        yield r.invalid(path if kind_of(path) is not None else directory, problem)


@rule("2.1.16", "runResultsJson").check(RESULT, benchmark="training")
def run_results_json(r: Rule, result: Result) -> Iterable[Finding]:
    """The training run/ directory holds a readable results.json."""
    if judged(result) and real_dir(result.path / "run"):
        yield from _results_json(r, result.path / "run")


@rule("2.1.22", "checkpointingResultsJson").check(RESULT, benchmark="checkpointing")
def checkpointing_results_json(r: Rule, result: Result) -> Iterable[Finding]:
    """A checkpointing workload directory holds a readable results.json."""
    if judged(result):
        yield from _results_json(r, result.path)


@rule("2.1.19", "runFiles").check(LEAF, benchmark="training", command="run")
def run_files(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """A training run leaf holds the logs, DLIO JSON outputs and dlio_config/ the checker block lists."""
    yield from _leaf_files(r, leaf, "run")


@rule("2.1.20", "runDlioConfig").check(LEAF, benchmark="training", command="run")
def run_dlio_config(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """A training run leaf's dlio_config/ holds exactly config.yaml, hydra.yaml and overrides.yaml, each readable."""
    yield from _dlio_config(r, leaf, "2.1.19")


@rule("2.1.25", "checkpointingFiles").check(LEAF, benchmark="checkpointing")
def checkpointing_files(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """A checkpointing leaf holds the logs, JSON outputs and dlio_config/ the checker block lists."""
    yield from _leaf_files(r, leaf, "checkpoint")


@rule("2.1.26", "checkpointingDlioConfig").check(LEAF, benchmark="checkpointing")
def checkpointing_dlio_config(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """A checkpointing leaf's dlio_config/ holds exactly config.yaml, hydra.yaml and overrides.yaml, each readable."""
    yield from _dlio_config(r, leaf, "2.1.25")


DLIO_LOG = rule("2.29", "dlioLog")


@DLIO_LOG.check(LEAF, benchmark="training")
def dlio_log(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """Every datagen, run and checkpointing leaf's dlio.log is a real log, not empty or pruned."""
    if leaf.command in ("datagen", "run") and judged(leaf):
        yield from _dlio_log(r, leaf)


@DLIO_LOG.check(LEAF, benchmark="checkpointing")
def checkpointing_dlio_log(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    if judged(leaf):
        yield from _dlio_log(r, leaf)


def _dlio_log(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    if "dlio.log" not in names(leaf.path):
        return  # reported as a missing file by 2.1.14, 2.1.19 or 2.1.25
    path = child(leaf.path, "dlio.log")
    text, problem = read_text(path, LOG_READ_LIMIT)
    if problem:
        yield r.invalid(path, problem)
    elif not LOG_RECORD.search(text or ""):
        size = path.stat().st_size
        yield r.invalid(path, f"dlio.log ({size} bytes) holds no timestamped log record: "
                              "empty, pruned or a placeholder")
