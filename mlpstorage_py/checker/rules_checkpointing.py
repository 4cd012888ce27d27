"""Section 4: checkpointing workloads, the run options (Rules 4.3.1-4.3.6); 4.4-4.7 are rules_checkpointing_run's.

A checkpointing leaf records what it ran in several places: its *_metadata.json (args,
parameters), dlio_config/config.yaml (the workload block the engine actually ran) and its
summary.json. Where a rule names the metadata and a leaf lacks it (the v3.0 release's read
leaves, a partial corpus), the other records are read instead when they state the same fact;
a value recorded nowhere is a finding about the missing file.
"""

from __future__ import annotations

import math
import statistics
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable

from mlpstorage_py.results.tree.files import load_json
from mlpstorage_py.results.tree.package import Package
from mlpstorage_py.checker.registry import INFO, INVALID, WARNING, Finding, finding, rule
from mlpstorage_py.checker.structure_helpers import (
    LeafRecord, Workload, as_int, as_number, checkpointing_leaves, dig, parse_time, record, sanctioned)
from mlpstorage_py.rules.core_config import canonical

# Numbers the rules text states that the editions checker block does not (yet) carry.
COUNT_KEYS = ("num_checkpoints_write", "num_checkpoints_read")
# Table 4: the counts may be 10 or 0 in CLOSED (4.7.1 checks them), so 4.6.3 does not compare them.
COUNTED_ELSEWHERE = frozenset(f"checkpoint.{k}" for k in COUNT_KEYS)
FIGURES = {  # results.csv column -> (phase, summary metric)  (4.3.6)
    "Checkpointing - Write B/W (GiB/s)": ("write", "save_checkpoint_io_mean_GB_per_second"),
    "Checkpointing - Write Duration (secs)": ("write", "save_checkpoint_duration_mean_seconds"),
    "Checkpointing - Read B/W (GiB/s)": ("read", "load_checkpoint_io_mean_GB_per_second"),
    "Checkpointing - Read Duration (secs)": ("read", "load_checkpoint_duration_mean_seconds"),
}


# summary.json checkpoint_engine.name of a leaf made by `--engine dlio` (benchmarks/dlio_engine.Engine.name).
DLIO_ENGINE = "dlio_benchmark "


# --- what a leaf records -----------------------------------------------------------------

def _runs(pkg: Package) -> list[tuple[Workload, LeafRecord]]:
    return [(wl, record(pkg, leaf)) for wl, leaf in checkpointing_leaves(pkg)]


def _by_workload(pkg: Package) -> list[tuple[Workload, list[LeafRecord]]]:
    grouped: dict[Path, tuple[Workload, list[LeafRecord]]] = {}
    for wl, rec in _runs(pkg):
        grouped.setdefault(wl.path, (wl, []))[1].append(rec)
    return [(wl, sorted(recs, key=lambda r: r.path.name)) for wl, recs in grouped.values()]


def _metric(rec: LeafRecord) -> dict:
    value = dig(rec.summary, "metric")
    return value if isinstance(value, dict) else {}


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


def _size_gib(rec: LeafRecord) -> float | None:
    value = as_number(_metric(rec).get("checkpoint_size_GB"))
    return value if value is not None else as_number(dig(rec.summary, "checkpoint_size_GB"))


def counts(rec: LeafRecord) -> tuple[int | None, int | None, str]:
    """(writes, reads, where recorded): args first, then the resolved and the run configuration
    (each source looked at only when the ones before it lack the counts)."""
    sources = (("args", lambda: rec.args), ("parameters.checkpoint", lambda: dig(rec.meta, "parameters", "checkpoint")),
               ("dlio_config/config.yaml", lambda: dig(rec.workload_config, "checkpoint")), ("summary.json", lambda: rec.summary))
    for where, source in sources:
        block = source()
        writes, reads = (as_int(dig(block, key)) for key in COUNT_KEYS)
        if writes is not None and reads is not None:
            return writes, reads, where
    return None, None, "nowhere"


def is_write(rec: LeafRecord) -> bool:
    writes, _, _ = counts(rec)
    return writes > 0 if writes is not None else "save_checkpoint_io_mean_GB_per_second" in _metric(rec)


def is_read(rec: LeafRecord) -> bool:
    _, reads, _ = counts(rec)
    return reads > 0 if reads is not None else "load_checkpoint_io_mean_GB_per_second" in _metric(rec)


def _model(rec: LeafRecord, wl: Workload) -> str:
    """The run's model as recorded (args.model), else its workload directory's name."""
    for value in (rec.args.get("model"), dig(rec.meta, "model")):
        if isinstance(value, str) and value in wl.checker["closed_mpi_processes"]:
            return value
    return wl.model


def _processes(rec: LeafRecord) -> dict[str, int]:
    """Every record of the run's MPI process count."""
    found = {"metadata num_processes": as_int(dig(rec.meta, "num_processes")),
             "args.num_processes": as_int(rec.args.get("num_processes")),
             "summary.json num_accelerators": as_int(dig(rec.summary, "num_accelerators"))}
    return {k: v for k, v in found.items() if v is not None}


def _configuration(rec: LeafRecord) -> tuple[dict | None, str]:
    """The recorded workload configuration: yaml_params, parameters, else dlio_config/config.yaml."""
    for where, source in (("yaml_params", lambda: dig(rec.meta, "yaml_params")), ("parameters", lambda: dig(rec.meta, "parameters")),
                          ("dlio_config/config.yaml", lambda: rec.workload_config)):
        block = source()
        if isinstance(block, dict) and block:
            return block, where
    return None, "nowhere"


def _cannot(number: str, severity: str, rec: LeafRecord, what: str, problem: str | None) -> Finding:
    path = rec.meta_path if "metadata" in (problem or "") else (rec.summary_path if "summary" in (problem or "") else rec.path)
    return finding(number, severity, path, f"cannot check {what}: {problem}")


def _interval(a: LeafRecord, a_time: datetime | None, b: LeafRecord, b_time: datetime | None) -> float | None:
    """Seconds from a_time (on a's clock) to b_time (on b's clock); None when they cannot be related."""
    if a_time is None or b_time is None:
        return None
    if a_time.tzinfo is None and b_time.tzinfo is None:
        return (b_time - a_time).total_seconds()
    first, second = a.to_utc(a_time, b.utc_offset), b.to_utc(b_time, a.utc_offset)
    return None if first is None or second is None else (second - first).total_seconds()


def _collection_times(block: Any) -> list[datetime]:
    """Every collection_timestamp below a metadata block."""
    found: list[datetime] = []
    stack = [block]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, value in item.items():
                if key == "collection_timestamp":
                    parsed = parse_time(value)
                    if parsed is not None:
                        found.append(parsed)
                else:
                    stack.append(value)
        elif isinstance(item, list):
            stack.extend(item)
    return found


def _write_end(rec: LeafRecord) -> tuple[datetime | None, str]:
    """4.7.1: invocation_end_time, else the latest post-benchmark collection_timestamp, else summary end."""
    value = parse_time(dig(rec.meta, "invocation_end_time"))
    if value is not None:
        return value, "invocation_end_time"
    stamps = _collection_times(dig(rec.meta, "cluster_snapshots", "end"))
    aware = [rec.to_utc(t) for t in stamps]
    aware = [t for t in aware if t is not None]
    if aware:
        return max(aware), "the latest post-benchmark collection_timestamp"
    value = rec.summary_time("end")
    return value, "summary.json end"


def _read_start(rec: LeafRecord) -> tuple[datetime | None, str]:
    value = parse_time(dig(rec.meta, "invocation_start_time"))
    if value is not None:
        return value, "invocation_start_time"
    return rec.summary_time("start"), "summary.json start"


def _two_invocations(recs: list[LeafRecord]) -> tuple[LeafRecord, LeafRecord] | None:
    """The write-only invocation immediately followed by a read-only one, if the workload has them."""
    for first, second in zip(recs, recs[1:]):
        if is_write(first) and not is_read(first) and is_read(second) and not is_write(second):
            return first, second
    return None


# --- 4.3 run options ---------------------------------------------------------------------
_REFERENCES: dict[str, dict | None] = {}


def _reference(model: str) -> dict | None:
    if model not in _REFERENCES:
        from mlpstorage_py.benchmarks import workloads

        try:
            _REFERENCES[model] = workloads.checkpointing(model)
        except Exception:  # noqa: BLE001 - no configs/ (an installed wheel) or no file: reported, not fatal
            _REFERENCES[model] = None
    return _REFERENCES[model]


@rule("4.3.1", "checkpointDataSizeRatio", parts=True)
def data_size_ratio(pkg: Package) -> Iterable[Finding]:
    """Checkpoint data per host is more than 3x one host's memory (else a warning)."""
    for wl, rec in _runs(pkg):
        size, hosts = _size_gib(rec), as_int(dig(rec.summary, "num_hosts"))
        memory = dig(rec.summary, "host_memory_GB")
        memory = [as_number(m) for m in memory] if isinstance(memory, list) else []
        if rec.summary is None or size is None or not memory or None in memory:
            yield _cannot("4.3.1", WARNING, rec, "the checkpoint-to-memory ratio",
                          rec.summary_problem or "summary.json lacks checkpoint_size_GB or host_memory_GB")
            continue
        hosts = hosts or len(memory)
        per_host, host_memory = size / hosts, sum(memory) / hosts
        if not per_host > wl.checker["checkpoint_size_to_host_memory_ratio"] * host_memory:
            yield finding("4.3.1", WARNING, rec.summary_path,
                          f"checkpoint per host {per_host:,.1f} GiB is not more than {wl.checker['checkpoint_size_to_host_memory_ratio']} x the "
                          f"{host_memory:,.1f} GiB of one client host: reads may be served from the page cache")


@rule("4.3.2", "checkpointFsyncVerification", parts=True)
def fsync(pkg: Package) -> Iterable[Finding]:
    """Every run's recorded configuration has checkpoint.fsync true."""
    for wl, rec in _runs(pkg):
        sources = (("parameters", lambda: dig(rec.meta, "parameters", "checkpoint", "fsync")),
                   ("yaml_params", lambda: dig(rec.meta, "yaml_params", "checkpoint", "fsync")),
                   ("dlio_config/config.yaml", lambda: dig(rec.workload_config, "checkpoint", "fsync")))
        recorded = next(((where, value) for where, source in sources if (value := source()) is not None), None)
        if recorded is None:
            yield _cannot("4.3.2", INVALID, rec, "checkpoint.fsync", rec.meta_problem or
                          "neither the metadata parameters nor dlio_config/config.yaml record checkpoint.fsync")
            continue
        where, value = recorded
        if canonical(value) is not True:
            yield finding("4.3.2", INVALID, rec.meta_path if where != "dlio_config/config.yaml" else rec.path,
                          f"checkpoint.fsync is {value!r} in {where}: every checkpoint write must end with fsync")


@rule("4.3.3", "checkpointModelConfigurationReq", parts=True)
def model_configuration(pkg: Package) -> Iterable[Finding]:
    """args.model names a Table 2 model the edition lists, and the run sits under that model."""
    for wl, rec in _runs(pkg):
        allowed = sorted(sanctioned(pkg, wl.division, wl.org, "checkpointing"))
        if rec.meta is None:
            # The engine's own record of the configuration it ran states the model too: the
            # Table 2 model whose reference configuration has the model.name it records.
            engine_name = dig(rec.workload_config, "model", "name")
            named = [m for m in allowed if engine_name and dig(_reference(m), "model", "name") == engine_name
                     and rec.meta_problem == "no *_metadata.json"]  # a broken metadata file is not read around
            if named:
                if named[0] != wl.model:
                    yield finding("4.3.3", INVALID, rec.path / "dlio_config" / "config.yaml",
                                  f"dlio_config/config.yaml runs model.name {engine_name!r} ({named[0]}), filed under checkpointing/{wl.model}")
                continue
            yield _cannot("4.3.3", INVALID, rec, "args.model", f"{rec.meta_problem}, and dlio_config/config.yaml names no "
                                                             "Table 2 model either")
            continue
        model = rec.args.get("model", rec.meta.get("model"))
        if not isinstance(model, str) or not model:
            yield finding("4.3.3", INVALID, rec.meta_path, "the metadata records no args.model")
        elif model not in allowed:
            yield finding("4.3.3", INVALID, rec.meta_path, f"model {model!r} is not a Table 2 model of the edition ({', '.join(allowed)})")
        elif model != wl.model:
            yield finding("4.3.3", INVALID, rec.meta_path, f"a {model} run is filed under checkpointing/{wl.model}")


def _accelerator(rec: LeafRecord) -> str | None:
    for value in (dig(rec.meta, "accelerator"), rec.args.get("accelerator_type"), rec.args.get("accelerator")):
        if isinstance(value, str) and value:
            return value
    return None


@rule("4.3.4", "checkpointAggregateAcceleratorMemory", parts=True)
def aggregate_memory(pkg: Package) -> Iterable[Finding]:
    """Table 3 memory of the run's accelerator x its accelerator count holds the checkpoint."""
    for wl, rec in _runs(pkg):
        memory = wl.checker["accelerator_memory_gb"]
        count, size = as_int(dig(rec.summary, "num_accelerators")), _size_gib(rec)
        if count is None or size is None:
            yield _cannot("4.3.4", INVALID, rec, "the aggregate accelerator memory",
                          rec.summary_problem or "summary.json lacks num_accelerators or checkpoint_size_GB")
            continue
        allowed = [a for a in sanctioned(pkg, wl.division, wl.org, "checkpointing").get(wl.model) or []]
        accelerator = _accelerator(rec)
        if accelerator is not None:
            if accelerator not in memory:
                yield finding("4.3.4", INVALID, rec.meta_path, f"accelerator {accelerator!r} is not in Table 3 ({', '.join(memory)})")
            elif allowed and accelerator not in allowed:
                yield finding("4.3.4", INVALID, rec.meta_path, f"accelerator {accelerator} is not a {wl.division} accelerator for "
                                                               f"{wl.model} (Table 3: {', '.join(allowed)})")
            elif memory[accelerator] * count < size:
                yield finding("4.3.4", INVALID, rec.summary_path, f"{count} x {accelerator} ({memory[accelerator]} GiB) = "
                                                                  f"{memory[accelerator] * count:,} GiB < checkpoint {size:,.1f} GiB")
            continue
        # The rule is explicit: a run whose metadata records no accelerator is INVALID, even when
        # every accelerator the edition allows would hold the checkpoint (said in the message).
        candidates = [a for a in allowed if a in memory]
        worst = min((memory[a] for a in candidates), default=None)
        holds = worst is not None and worst * count >= size
        yield finding("4.3.4", INVALID, rec.meta_path if rec.meta is not None else rec.path,
                      f"the metadata records no accelerator ({rec.meta_problem or 'accelerator is null'})"
                      + (f"; {count} x {worst} GiB would hold the {size:,.1f} GiB checkpoint for any allowed accelerator"
                         if holds else ""))


def _subset_declared(rec: LeafRecord) -> bool:
    flag = rec.args.get("checkpoint_subset")
    overrides = dig(rec.meta, "override_parameters")
    mode = overrides.get("checkpoint.mode", dig(overrides, "checkpoint", "mode")) if isinstance(overrides, dict) else None
    return canonical(flag) is True or mode == "subset"


@rule("4.3.5", "checkpointSubsetRunValidation", parts=True)
def subset_runs(pkg: Package) -> Iterable[Finding]:
    """A CLOSED subset run is the 8B model on exactly 8 accelerators."""
    for wl, rec in _runs(pkg):
        if wl.division != "closed" or not _subset_declared(rec):
            continue
        required = wl.checker["closed_mpi_processes"][wl.checker["checkpoint_subset_model"]]
        model = rec.args.get("model", wl.model)
        count = as_int(dig(rec.summary, "num_accelerators"))
        if model != wl.checker["checkpoint_subset_model"]:
            yield finding("4.3.5", INVALID, rec.meta_path, f"a subset run must be {wl.checker['checkpoint_subset_model']}, not {model}")
        if count is None:
            yield _cannot("4.3.5", INVALID, rec, "the subset run's accelerators", rec.summary_problem or "summary.json lacks num_accelerators")
        elif count != required:
            yield finding("4.3.5", INVALID, rec.summary_path, f"a subset run uses exactly {required} accelerators, not {count}")


@rule("4.3.6", "checkpointResultAggregation", parts=True)
def result_aggregation(pkg: Package) -> Iterable[Finding]:
    """results.json's Write/Read B/W and Duration are the means over the write- and read-phase runs."""
    for _, rec in _runs(pkg):
        note = dlio_engine_note(rec.summary, rec.meta)
        if note:
            yield finding("4.3.6", WARNING, rec.summary_path, note)
    for wl, recs in _by_workload(pkg):
        path = wl.path / "results.json"
        data, problem = load_json(path)
        if problem:
            continue  # 2.1.22 reports a missing or unreadable results.json
        listed = data.get("rows") if isinstance(data, dict) else None
        rows = [r for r in (listed if isinstance(listed, list) else []) if isinstance(r, dict)]
        rows = [r for r in rows if any(column in r for column in FIGURES)]
        if not rows:
            yield finding("4.3.6", INFO, path, "results.json holds no Checkpointing figures to compare with the runs")
            continue
        phases = {"write": [r for r in recs if is_write(r)], "read": [r for r in recs if is_read(r)]}
        for column, (phase, key) in FIGURES.items():
            values = [as_number(_metric(r).get(key)) for r in phases[phase]]
            expected = statistics.fmean(values) if values and None not in values else None
            for row in rows:
                if column not in row:
                    continue
                published = as_number(row[column])
                if expected is None and published is not None:
                    yield finding("4.3.6", INVALID, path, f"{column} is {published}, but a {phase}-phase run lacks "
                                                          f"metric.{key}: the cell must be blank")
                elif expected is not None and published is None:
                    yield finding("4.3.6", INVALID, path, f"{column} is blank, but the {phase}-phase runs give {expected}")
                elif expected is not None and not math.isclose(published, expected, rel_tol=1e-9, abs_tol=1e-12):
                    yield finding("4.3.6", INVALID, path, f"{column} is {published}, but the mean over the {phase}-phase "
                                                          f"runs is {expected}")


# --- 4.4 paths and filesystems -------------------------------------------------------------

