"""Section 2.1, the workload directories and their leaves: which models (2.1.11, 2.1.21), phase
and timestamp directories (2.1.12, 2.1.13, 2.1.17, 2.1.23), the gaps between runs (2.1.18,
2.1.24), results.json (2.1.16, 2.1.22), the files of each leaf and its dlio_config/ (2.1.14,
2.1.15, 2.1.19, 2.1.20, 2.1.25, 2.1.26) and its dlio.log (2.29).

Registered right after rules_structure (checker/__init__.py imports the two in that order), so
the order of the rules, and of their findings, is that of the one module they were split from.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable

from mlpstorage_py.results.tree.files import (
    DIR, FILE, LINK, MAPPING, SEQUENCE, child, kind_of, load_json, names, read_text, real_dir, visible, yaml_shape)
from mlpstorage_py.results.tree.package import Package
from mlpstorage_py.checker.registry import INFO, INVALID, WARNING, Finding, finding, rule
from mlpstorage_py.checker.structure_helpers import (
    TIMESTAMP, checker_of, checkpointing_leaves, leaf_time, record, sanctioned, timestamp_dirs, training_leaves,
    workloads)

PHASES = ("datasize", "datagen", "run")
# reportgen's identity/result tables may sit beside the timestamp directories of a phase or
# checkpointing workload directory.
PHASE_TABLES = frozenset({"results.json", "results.csv"})
LOG_READ_LIMIT = 1 << 16
# A log record carries a date-time; an empty, pruned or placeholder dlio.log has none (2.29).
LOG_RECORD = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}")


def _models(pkg: Package, family: str, number: str) -> Iterable[Finding]:
    for division, org, org_dir in pkg.orgs:
        if not checker_of(pkg, division, org):
            continue
        allowed = sorted(sanctioned(pkg, division, org, family))
        for system, kind, system_dir in visible(org_dir / "results"):
            family_dir = system_dir / family
            if kind != DIR or not real_dir(family_dir):
                continue
            content = visible(family_dir)
            if not [n for n, k, _ in content if k == DIR]:
                yield finding(number, INVALID, family_dir, f"{family}/ holds no workload directory")
            for name, ekind, path in content:
                if ekind == LINK:
                    continue
                if ekind != DIR or name not in allowed:
                    yield finding(number, INVALID, path, f"unexpected {ekind} {name!r} in {family}/ (allowed: {', '.join(allowed)})")


@rule("2.1.11", "trainingWorkloads")
def training_workloads(pkg: Package) -> Iterable[Finding]:
    """training/ holds only the edition's training models (unet3d, retinanet)."""
    yield from _models(pkg, "training", "2.1.11")


@rule("2.1.21", "checkpointingWorkloads")
def checkpointing_workloads(pkg: Package) -> Iterable[Finding]:
    """checkpointing/ holds only the edition's checkpointing models (llama3-8b ... llama3-1t)."""
    yield from _models(pkg, "checkpointing", "2.1.21")


@rule("2.1.12", "trainingPhases", parts=True)
def training_phases(pkg: Package) -> Iterable[Finding]:
    """A training workload directory holds datasize/, datagen/ and run/, and nothing else."""
    for wl in workloads(pkg, "training"):
        content = {n: (k, p) for n, k, p in visible(wl.path)}
        for phase in PHASES:
            if content.get(phase, (None,))[0] != DIR:
                yield finding("2.1.12", INVALID, wl.path, f"training/{wl.model} has no {phase}/ phase directory")
        for name, (kind, path) in sorted(content.items()):
            if name not in PHASES and kind != LINK:
                yield finding("2.1.12", INVALID, path, f"unexpected {kind} {name!r} in training/{wl.model} (datasize, datagen and run only)")


def _timestamps(directory: Path, number: str, expected: tuple[int, int], what: str) -> Iterable[Finding]:
    """Exactly `expected` (lo, hi) valid timestamp directories and only results tables beside them."""
    stamps = []
    for name, kind, path in visible(directory):
        if kind == LINK:
            continue
        if kind == DIR and TIMESTAMP.match(name):
            if leaf_time(name) is None:
                yield finding(number, INVALID, path, f"{name} is not a real date and time (YYYYMMDD_HHmmss)")
            stamps.append(name)
        elif not (kind == FILE and name in PHASE_TABLES):
            yield finding(number, INVALID, path, f"unexpected {kind} {name!r} beside the timestamp directories")
    lo, hi = expected
    if not lo <= len(stamps) <= hi:
        count = str(lo) if lo == hi else f"{lo} to {hi}"
        yield finding(number, INVALID, directory, f"{what} holds {len(stamps)} timestamp directories; {count} required")


@rule("2.1.13", "datagenTimestamp", parts=True)
def datagen_timestamp(pkg: Package) -> Iterable[Finding]:
    """datagen/ holds exactly one timestamp directory."""
    for wl in workloads(pkg, "training"):
        if real_dir(wl.path / "datagen"):
            yield from _timestamps(wl.path / "datagen", "2.1.13", (1, 1), f"training/{wl.model}/datagen")


@rule("2.1.17", "runTimestamps", parts=True)
def run_timestamps(pkg: Package) -> Iterable[Finding]:
    """run/ holds exactly runs_per_result (edition 3.0: 6) timestamp directories."""
    for wl in workloads(pkg, "training"):
        if real_dir(wl.path / "run"):
            count = int(wl.checker["runs_per_result"]["training"])
            yield from _timestamps(wl.path / "run", "2.1.17", (count, count), f"training/{wl.model}/run")


@rule("2.1.23", "checkpointingTimestamps", parts=True)
def checkpointing_timestamps(pkg: Package) -> Iterable[Finding]:
    """A checkpointing workload holds one (combined) or two (write, then read) timestamp directories."""
    for wl in workloads(pkg, "checkpointing"):
        count = int(wl.checker["runs_per_result"]["checkpointing"])
        yield from _timestamps(wl.path, "2.1.23", (1, count), f"checkpointing/{wl.model}")


def _gaps(pkg: Package, directory: Path, number: str) -> Iterable[Finding]:
    """Neighbouring runs are separated by less than one run's duration (2.1.18, 2.1.24).

    The names state when each invocation began; the idle time between the end of one run and
    the name of the next must be shorter than a run: otherwise a run could have been removed
    from between them."""
    leaves = sorted((leaf_time(p.name), p) for p in timestamp_dirs(directory) if leaf_time(p.name) is not None)
    for (t0, first), (t1, second) in zip(leaves, leaves[1:]):
        end0, end1 = record(pkg, first).end_local, record(pkg, second).end_local
        durations = [end - start for end, start in ((end0, t0), (end1, t1)) if end is not None and end >= start]
        if end0 is None or not durations:
            yield finding(number, WARNING, second, f"cannot check the gap after {first.name}: no readable summary.json or "
                                                   "metadata records when the runs ended")
            continue
        idle, longest = t1 - end0, max(durations)
        if idle >= longest:
            yield finding(number, INVALID, second, f"{second.name} starts {idle.total_seconds():,.0f} s after {first.name} ended, "
                                                   f"not less than one run ({longest.total_seconds():,.0f} s): runs are not consecutive")


@rule("2.1.18", "runTimestampGap", parts=True)
def run_gap(pkg: Package) -> Iterable[Finding]:
    """Consecutive training runs leave less than one run's duration between them."""
    for wl in workloads(pkg, "training"):
        yield from _gaps(pkg, wl.path / "run", "2.1.18")


@rule("2.1.24", "checkpointingTimestampGap", parts=True)
def checkpointing_gap(pkg: Package) -> Iterable[Finding]:
    """Consecutive checkpointing invocations leave less than one invocation's duration between them."""
    for wl in workloads(pkg, "checkpointing"):
        yield from _gaps(pkg, wl.path, "2.1.24")


def _leaf_files(leaf: Path, number: str, patterns: list[str], folders: list[str]) -> Iterable[Finding]:
    listing = names(leaf)
    for pattern in patterns:
        search = re.compile(pattern).search
        matched = [(n, k) for n, k in listing.items() if search(n)]
        files = [(n, child(leaf, n)) for n, k in matched if k == FILE]
        if not files:
            why = f"{matched[0][0]} is a {matched[0][1]}, not a file" if matched else f"no file matching {pattern!r}"
            yield finding(number, INVALID, leaf, why)
            continue
        if pattern.endswith(r"json$"):
            for name, path in files:
                data, problem = load_json(path)
                if problem is None and not isinstance(data, dict):
                    problem = f"{name} is not a JSON object"
                if problem:
                    yield finding(number, INVALID, path, problem)
    for folder in folders:
        if not real_dir(leaf / folder):
            yield finding(number, INVALID, leaf, f"no {folder}/ subdirectory")


def _dlio_config(leaf: Path, number: str, expected: list[str], parent: str = "") -> Iterable[Finding]:
    folder = leaf / "dlio_config"
    if not real_dir(folder):
        # the missing folder is reported once, by the files rule that requires it (2.1.14, 2.1.19, 2.1.25)
        yield finding(number, INFO, leaf, f"not checked: no dlio_config/ subdirectory (reported under {parent})")
        return
    content = {n: (k, p) for n, k, p in visible(folder)}
    for name in expected:
        kind, path = content[name] if name in content else (None, folder / name)
        if kind != FILE:
            yield finding(number, INVALID, path, f"dlio_config/{name} is {'missing' if kind is None else f'a {kind}'}")
            continue
        shape, problem = yaml_shape(path, "workload" if name == "config.yaml" else None)
        if problem is None:
            shape_ok = {"config.yaml": shape.value_kind == MAPPING, "overrides.yaml": shape.kind in (None, SEQUENCE)}.get(
                name, shape.kind == MAPPING and not shape.empty)
            if not shape_ok:
                problem = f"{name} does not hold a DLIO {name[:-5]} record (empty, truncated or of the wrong shape)"
        if problem:
            yield finding(number, INVALID, path, problem)
    for name, (kind, path) in sorted(content.items()):
        if name not in expected:
            yield finding(number, INVALID, path, f"unexpected {kind} {name!r} in dlio_config/ (only {', '.join(expected)})")


@rule("2.1.14", "datagenFiles", parts=True)
def datagen_files(pkg: Package) -> Iterable[Finding]:
    """A datagen leaf holds the logs, metadata and dlio_config/ the edition's checker block lists."""
    for wl, leaf in training_leaves(pkg, "datagen"):
        yield from _leaf_files(leaf, "2.1.14", wl.checker["datagen_required_files"], wl.checker["datagen_required_folders"])


@rule("2.1.15", "datagenDlioConfig", parts=True)
def datagen_dlio_config(pkg: Package) -> Iterable[Finding]:
    """A datagen leaf's dlio_config/ holds exactly config.yaml, hydra.yaml and overrides.yaml, each readable."""
    for wl, leaf in training_leaves(pkg, "datagen"):
        yield from _dlio_config(leaf, "2.1.15", wl.checker["dlio_config_files"], "2.1.14")


def _results_json(directory: Path, number: str) -> Iterable[Finding]:
    path = directory / "results.json"
    data, problem = load_json(path)
    if problem is None and not isinstance(data, dict):
        problem = "results.json is not a JSON object"
    if problem:
        yield finding(number, INVALID, path if kind_of(path) is not None else directory, problem)


@rule("2.1.16", "runResultsJson", parts=True)
def run_results_json(pkg: Package) -> Iterable[Finding]:
    """The training run/ directory holds a readable results.json."""
    for wl in workloads(pkg, "training"):
        if real_dir(wl.path / "run"):
            yield from _results_json(wl.path / "run", "2.1.16")


@rule("2.1.22", "checkpointingResultsJson", parts=True)
def checkpointing_results_json(pkg: Package) -> Iterable[Finding]:
    """A checkpointing workload directory holds a readable results.json."""
    for wl in workloads(pkg, "checkpointing"):
        yield from _results_json(wl.path, "2.1.22")


@rule("2.1.19", "runFiles", parts=True)
def run_files(pkg: Package) -> Iterable[Finding]:
    """A training run leaf holds the logs, DLIO JSON outputs and dlio_config/ the checker block lists."""
    for wl, leaf in training_leaves(pkg, "run"):
        yield from _leaf_files(leaf, "2.1.19", wl.checker["run_required_files"], wl.checker["run_required_folders"])


@rule("2.1.20", "runDlioConfig", parts=True)
def run_dlio_config(pkg: Package) -> Iterable[Finding]:
    """A training run leaf's dlio_config/ holds exactly config.yaml, hydra.yaml and overrides.yaml, each readable."""
    for wl, leaf in training_leaves(pkg, "run"):
        yield from _dlio_config(leaf, "2.1.20", wl.checker["dlio_config_files"], "2.1.19")


@rule("2.1.25", "checkpointingFiles", parts=True)
def checkpointing_files(pkg: Package) -> Iterable[Finding]:
    """A checkpointing leaf holds the logs, JSON outputs and dlio_config/ the checker block lists."""
    for wl, leaf in checkpointing_leaves(pkg):
        yield from _leaf_files(leaf, "2.1.25", wl.checker["checkpoint_required_files"], wl.checker["checkpoint_required_folders"])


@rule("2.1.26", "checkpointingDlioConfig", parts=True)
def checkpointing_dlio_config(pkg: Package) -> Iterable[Finding]:
    """A checkpointing leaf's dlio_config/ holds exactly config.yaml, hydra.yaml and overrides.yaml, each readable."""
    for wl, leaf in checkpointing_leaves(pkg):
        yield from _dlio_config(leaf, "2.1.26", wl.checker["dlio_config_files"], "2.1.25")


@rule("2.29", "dlioLog", parts=True)
def dlio_log(pkg: Package) -> Iterable[Finding]:
    """Every datagen, run and checkpointing leaf's dlio.log is a real log, not empty or pruned."""
    leaves = [leaf for phase in ("datagen", "run") for _, leaf in training_leaves(pkg, phase)]
    leaves += [leaf for _, leaf in checkpointing_leaves(pkg)]
    for leaf in leaves:
        path = leaf / "dlio.log"
        if kind_of(path) is None:
            continue  # reported as a missing file by 2.1.14, 2.1.19 or 2.1.25
        text, problem = read_text(path, LOG_READ_LIMIT)
        if problem:
            yield finding("2.29", INVALID, path, problem)
        elif not LOG_RECORD.search(text):
            size = path.stat().st_size
            yield finding("2.29", INVALID, path, f"dlio.log ({size} bytes) holds no timestamped log record: "
                                                 "empty, pruned or a placeholder")
