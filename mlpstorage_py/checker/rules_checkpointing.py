"""Section 4: checkpointing workloads, the run options (Rules 4.3.1-4.3.6); 4.4-4.7 are rules_checkpointing_run's.

A checkpointing leaf records what it ran in several places: its *_metadata.json (args,
parameters), dlio_config/config.yaml (the workload block the engine actually ran) and its
summary.json. Where a rule names the metadata and a leaf lacks it (the v3.0 release's read
leaves, a partial corpus), the other records are read instead when they state the same fact;
a value recorded nowhere is a finding about the missing file.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from mlpstorage_py.checker.judging import judged, sanctioned
from mlpstorage_py.checker.registry import INVALID, LEAF, RESULT, WARNING, Finding, Rule, rule
from mlpstorage_py.results.summary import dlio_engine_note
from mlpstorage_py.results.summary import metric as _metric
from mlpstorage_py.results.tree.files import load_json
from mlpstorage_py.results.tree.package import Leaf, Result
from mlpstorage_py.results.tree.values import as_int, as_number, dig, parse_time
from mlpstorage_py.rules import predicates
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


# --- which workloads the checker judges (judging.judged) -----------------------------------

def invocations(result: Result) -> list[Leaf]:
    """A judged checkpointing result's leaves in name (time) order; none for any other result."""
    if not result.leaves or not judged(result):
        return []
    return sorted(result.leaves, key=lambda leaf: leaf.path.name)


# --- what a leaf records -----------------------------------------------------------------

def _size_gib(leaf: Leaf) -> float | None:
    value = as_number(_metric(leaf).get("checkpoint_size_GB"))
    return value if value is not None else as_number(dig(leaf.summary, "checkpoint_size_GB"))


def counts(leaf: Leaf) -> tuple[int | None, int | None, str]:
    """(writes, reads, where recorded): args first, then the resolved and the run configuration
    (each source looked at only when the ones before it lack the counts)."""
    sources = (("args", lambda: leaf.args), ("parameters.checkpoint", lambda: dig(leaf.metadata, "parameters", "checkpoint")),
               ("dlio_config/config.yaml", lambda: dig(leaf.workload_config, "checkpoint")), ("summary.json", lambda: leaf.summary))
    for where, source in sources:
        block = source()
        writes, reads = (as_int(dig(block, key)) for key in COUNT_KEYS)
        if writes is not None and reads is not None:
            return writes, reads, where
    return None, None, "nowhere"


def is_write(leaf: Leaf) -> bool:
    writes, _, _ = counts(leaf)
    return writes > 0 if writes is not None else "save_checkpoint_io_mean_GB_per_second" in _metric(leaf)


def is_read(leaf: Leaf) -> bool:
    _, reads, _ = counts(leaf)
    return reads > 0 if reads is not None else "load_checkpoint_io_mean_GB_per_second" in _metric(leaf)


def _model(leaf: Leaf, block: dict[str, Any]) -> str:
    """The run's model as recorded (args.model), else its workload directory's name."""
    for value in (leaf.args.get("model"), dig(leaf.metadata, "model")):
        if isinstance(value, str) and value in block["closed_mpi_processes"]:
            return value
    return leaf.model


def _processes(leaf: Leaf) -> dict[str, int]:
    """Every record of the run's MPI process count."""
    found = {"metadata num_processes": as_int(dig(leaf.metadata, "num_processes")),
             "args.num_processes": as_int(leaf.args.get("num_processes")),
             "summary.json num_accelerators": as_int(dig(leaf.summary, "num_accelerators"))}
    return {k: v for k, v in found.items() if v is not None}


def _configuration(leaf: Leaf) -> tuple[dict[str, Any] | None, str]:
    """The recorded workload configuration: yaml_params, parameters, else dlio_config/config.yaml."""
    for where, source in (("yaml_params", lambda: dig(leaf.metadata, "yaml_params")),
                          ("parameters", lambda: dig(leaf.metadata, "parameters")),
                          ("dlio_config/config.yaml", lambda: leaf.workload_config)):
        block = source()
        if isinstance(block, dict) and block:
            return block, where
    return None, "nowhere"


def _cannot(r: Rule, severity: str, leaf: Leaf, what: str, problem: str | None) -> Finding:
    """A fact the rule needs is recorded nowhere: the finding names the record that would hold it."""
    path = leaf.path_of("metadata") if "metadata" in (problem or "") else \
        (leaf.path_of("summary") if "summary" in (problem or "") else leaf.path)
    return r.finding(severity, path, f"cannot check {what}: {problem}")


def _met_path(leaf: Leaf) -> Path:
    """Where a finding about a recorded process layout points: the metadata, else the summary."""
    return leaf.path_of("metadata") if leaf.metadata is not None else leaf.path_of("summary")


def _interval(a: Leaf, a_time: datetime | None, b: Leaf, b_time: datetime | None) -> float | None:
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


def _write_end(leaf: Leaf) -> tuple[datetime | None, str]:
    """4.7.1: invocation_end_time, else the latest post-benchmark collection_timestamp, else summary end."""
    value = parse_time(dig(leaf.metadata, "invocation_end_time"))
    if value is not None:
        return value, "invocation_end_time"
    stamps = _collection_times(dig(leaf.metadata, "cluster_snapshots", "end"))
    aware = [t for t in (leaf.to_utc(s) for s in stamps) if t is not None]
    if aware:
        return max(aware), "the latest post-benchmark collection_timestamp"
    value = leaf.summary_time("end")
    return value, "summary.json end"


def _read_start(leaf: Leaf) -> tuple[datetime | None, str]:
    value = parse_time(dig(leaf.metadata, "invocation_start_time"))
    if value is not None:
        return value, "invocation_start_time"
    return leaf.summary_time("start"), "summary.json start"


def _two_invocations(leaves: list[Leaf]) -> tuple[Leaf, Leaf] | None:
    """The write-only invocation immediately followed by a read-only one, if the workload has them."""
    for first, second in itertools.pairwise(leaves):
        if is_write(first) and not is_read(first) and is_read(second) and not is_write(second):
            return first, second
    return None


# --- 4.3 run options ---------------------------------------------------------------------
_REFERENCES: dict[str, dict[str, Any] | None] = {}


def _reference(model: str) -> dict[str, Any] | None:
    if model not in _REFERENCES:
        from mlpstorage_py.rules import configs as workloads

        try:
            _REFERENCES[model] = workloads.checkpointing(model)
        except Exception:  # no configs/ (an installed wheel) or no file: reported, not fatal
            _REFERENCES[model] = None
    return _REFERENCES[model]


@rule("4.3.1", "checkpointDataSizeRatio").check(LEAF, benchmark="checkpointing")
def data_size_ratio(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """Checkpoint data per host is more than 3x one host's memory (else a warning)."""
    block = judged(leaf)
    if not block:
        return
    size, hosts = _size_gib(leaf), as_int(dig(leaf.summary, "num_hosts"))
    memory = dig(leaf.summary, "host_memory_GB")
    memory = [as_number(m) for m in memory] if isinstance(memory, list) else []
    if leaf.summary is None or size is None or not memory or None in memory:
        yield _cannot(r, WARNING, leaf, "the checkpoint-to-memory ratio",
                      leaf.problem("summary") or "summary.json lacks checkpoint_size_GB or host_memory_GB")
        return
    hosts = hosts or len(memory)
    per_host, host_memory = size / hosts, sum(memory) / hosts
    ratio = block["checkpoint_size_to_host_memory_ratio"]
    if not per_host > ratio * host_memory:
        yield r.warning(leaf.path_of("summary"), f"checkpoint per host {per_host:,.1f} GiB is not more than {ratio} x the "
                                                 f"{host_memory:,.1f} GiB of one client host: reads may be served from the page cache")


@rule("4.3.2", "checkpointFsyncVerification").check(LEAF, benchmark="checkpointing")
def fsync(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """Every run's recorded configuration has checkpoint.fsync true."""
    if not judged(leaf):
        return
    sources: tuple[tuple[str, Callable[[], Any]], ...] = (
        ("parameters", lambda: dig(leaf.metadata, "parameters", "checkpoint", "fsync")),
        ("yaml_params", lambda: dig(leaf.metadata, "yaml_params", "checkpoint", "fsync")),
        ("dlio_config/config.yaml", lambda: dig(leaf.workload_config, "checkpoint", "fsync")))
    recorded = next(((where, value) for where, source in sources if (value := source()) is not None), None)
    if recorded is None:
        yield _cannot(r, INVALID, leaf, "checkpoint.fsync", leaf.problem("metadata") or
                      "neither the metadata parameters nor dlio_config/config.yaml record checkpoint.fsync")
        return
    where, value = recorded
    if canonical(value) is not True:
        yield r.invalid(leaf.path_of("metadata") if where != "dlio_config/config.yaml" else leaf.path,
                        f"checkpoint.fsync is {value!r} in {where}: every checkpoint write must end with fsync")


@rule("4.3.3", "checkpointModelConfigurationReq").check(LEAF, benchmark="checkpointing")
def model_configuration(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """args.model names a Table 2 model the edition lists, and the run sits under that model."""
    if not judged(leaf):
        return
    allowed = sorted(sanctioned(leaf, "checkpointing"))
    meta, meta_path = leaf.metadata, leaf.path_of("metadata")
    if meta is None:
        # The engine's own record of the configuration it ran states the model too: the
        # Table 2 model whose reference configuration has the model.name it records.
        engine_name = dig(leaf.workload_config, "model", "name")
        named = [m for m in allowed if engine_name and dig(_reference(m), "model", "name") == engine_name
                 and leaf.record("metadata").missing]  # a broken metadata file is not read around
        if named:
            if named[0] != leaf.model:
                yield r.invalid(leaf.path / "dlio_config" / "config.yaml",
                                f"dlio_config/config.yaml runs model.name {engine_name!r} ({named[0]}), filed under checkpointing/{leaf.model}")
            return
        yield _cannot(r, INVALID, leaf, "args.model", f"{leaf.problem('metadata')}, and dlio_config/config.yaml names no "
                                                      "Table 2 model either")
        return
    model = leaf.args.get("model", meta.get("model"))
    if not isinstance(model, str) or not model:
        yield r.invalid(meta_path, "the metadata records no args.model")
    elif model not in allowed:
        yield r.invalid(meta_path, f"model {model!r} is not a Table 2 model of the edition ({', '.join(allowed)})")
    elif model != leaf.model:
        yield r.invalid(meta_path, f"a {model} run is filed under checkpointing/{leaf.model}")


def _accelerator(leaf: Leaf) -> str | None:
    for value in (dig(leaf.metadata, "accelerator"), leaf.args.get("accelerator_type"), leaf.args.get("accelerator")):
        if isinstance(value, str) and value:
            return value
    return None


@rule("4.3.4", "checkpointAggregateAcceleratorMemory").check(LEAF, benchmark="checkpointing")
def aggregate_memory(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """Table 3 memory of the run's accelerator x its accelerator count holds the checkpoint."""
    block = judged(leaf)
    if not block:
        return
    memory = block["accelerator_memory_gb"]
    count, size = as_int(dig(leaf.summary, "num_accelerators")), _size_gib(leaf)
    if count is None or size is None:
        yield _cannot(r, INVALID, leaf, "the aggregate accelerator memory",
                      leaf.problem("summary") or "summary.json lacks num_accelerators or checkpoint_size_GB")
        return
    allowed = list(sanctioned(leaf, "checkpointing").get(leaf.model) or [])
    accelerator, meta_path = _accelerator(leaf), leaf.path_of("metadata")
    if accelerator is not None:
        if accelerator not in memory:
            yield r.invalid(meta_path, f"accelerator {accelerator!r} is not in Table 3 ({', '.join(memory)})")
        elif allowed and accelerator not in allowed:
            yield r.invalid(meta_path, f"accelerator {accelerator} is not a {leaf.division} accelerator for "
                                       f"{leaf.model} (Table 3: {', '.join(allowed)})")
        elif predicates.checkpoint_accelerator_memory(block, accelerator, count) < size:
            yield r.invalid(leaf.path_of("summary"), f"{count} x {accelerator} ({memory[accelerator]} GiB) = "
                                                     f"{predicates.checkpoint_accelerator_memory(block, accelerator, count):,} "
                                                     f"GiB < checkpoint {size:,.1f} GiB")
        return
    # The rule is explicit: a run whose metadata records no accelerator is INVALID, even when
    # every accelerator the edition allows would hold the checkpoint (said in the message).
    candidates = [a for a in allowed if a in memory]
    worst = min((memory[a] for a in candidates), default=None)
    holds = worst is not None and worst * count >= size
    yield r.invalid(meta_path if leaf.metadata is not None else leaf.path,
                    f"the metadata records no accelerator ({leaf.problem('metadata') or 'accelerator is null'})"
                    + (f"; {count} x {worst} GiB would hold the {size:,.1f} GiB checkpoint for any allowed accelerator"
                       if holds else ""))


def _subset_declared(leaf: Leaf) -> bool:
    flag = leaf.args.get("checkpoint_subset")
    overrides = dig(leaf.metadata, "override_parameters")
    mode = overrides.get("checkpoint.mode", dig(overrides, "checkpoint", "mode")) if isinstance(overrides, dict) else None
    return canonical(flag) is True or mode == "subset"


@rule("4.3.5", "checkpointSubsetRunValidation").check(LEAF, benchmark="checkpointing")
def subset_runs(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """A CLOSED subset run is the 8B model on exactly 8 accelerators."""
    block = judged(leaf)
    if not block or leaf.division != "closed" or not _subset_declared(leaf):
        return
    subset_model, required = predicates.checkpoint_subset(block)
    model = leaf.args.get("model", leaf.model)
    count = as_int(dig(leaf.summary, "num_accelerators"))
    if model != subset_model:
        yield r.invalid(leaf.path_of("metadata"), f"a subset run must be {subset_model}, not {model}")
    if count is None:
        yield _cannot(r, INVALID, leaf, "the subset run's accelerators", leaf.problem("summary") or "summary.json lacks num_accelerators")
    elif count != required:
        yield r.invalid(leaf.path_of("summary"), f"a subset run uses exactly {required} accelerators, not {count}")


RESULT_AGGREGATION = rule("4.3.6", "checkpointResultAggregation")


@RESULT_AGGREGATION.check(RESULT, benchmark="checkpointing")
def result_aggregation(r: Rule, result: Result) -> Iterable[Finding]:
    """results.json's Write/Read B/W and Duration are the means over the write- and read-phase runs."""
    leaves = invocations(result)
    if not leaves:
        return
    path = result.path / "results.json"
    data, problem = load_json(path)
    if problem:
        return  # 2.1.22 reports a missing or unreadable results.json
    listed = data.get("rows") if isinstance(data, dict) else None
    rows = [row for row in (listed if isinstance(listed, list) else []) if isinstance(row, dict)]
    rows = [row for row in rows if any(column in row for column in FIGURES)]
    if not rows:
        yield r.info(path, "results.json holds no Checkpointing figures to compare with the runs")
        return
    phases = {"write": [leaf for leaf in leaves if is_write(leaf)], "read": [leaf for leaf in leaves if is_read(leaf)]}
    for column, (phase, key) in FIGURES.items():
        values = [as_number(_metric(leaf).get(key)) for leaf in phases[phase]]
        known = [value for value in values if value is not None]
        expected = statistics.fmean(known) if values and len(known) == len(values) else None
        for row in rows:
            if column not in row:
                continue
            published = as_number(row[column])
            if expected is None and published is not None:
                yield r.invalid(path, f"{column} is {published}, but a {phase}-phase run lacks metric.{key}: the cell must be blank")
            elif expected is not None and published is None:
                yield r.invalid(path, f"{column} is blank, but the {phase}-phase runs give {expected}")
            elif expected is not None and published is not None and not math.isclose(published, expected, rel_tol=1e-9, abs_tol=1e-12):
                yield r.invalid(path, f"{column} is {published}, but the mean over the {phase}-phase runs is {expected}")


@RESULT_AGGREGATION.check(LEAF, benchmark="checkpointing")
def engine_dlio_figures(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """An `--engine dlio` leaf's figures are not comparable with our engine's: said where they are read."""
    if not judged(leaf):
        return
    note = dlio_engine_note(leaf.summary, leaf.metadata)
    if note:
        yield r.warning(leaf.path_of("summary"), note)
