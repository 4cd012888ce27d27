"""Section 3: training workloads."""

from __future__ import annotations

import math
import posixpath
import statistics
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from mlpstorage_py.checker.judging import stamped_checker_block
from mlpstorage_py.checker.registry import LEAF, RESULT, SYSTEM, Finding, Rule, not_applicable, rule
from mlpstorage_py.results.summary import training as training_figures
from mlpstorage_py.results.tree import files
from mlpstorage_py.results.tree.package import Leaf, Result, System
from mlpstorage_py.results.tree.values import dig
from mlpstorage_py.rules import predicates, tables

not_applicable("3.3.5", "dataset reachability from every client host leaves no evidence in the package to check")


@rule("3.1.1", "trainingVerifyDatasizeUsage").check(RESULT, benchmark="training")
def datasize_usage(r: Rule, result: Result) -> Iterable[Finding]:
    """A workload with runs has a datasize leaf; each run's metadata has args and parameters.dataset."""
    runs = result.phase("run")
    if runs and not any(leaf.has("metadata") for leaf in result.phase("datasize")):
        # one finding per workload, not one per run
        if files.real_dir(result.path / "datasize"):
            yield r.invalid(result.path / "datasize",
                            "no datasize timestamp directory carries a *_metadata.json: the datasize record is missing")
        else:
            yield r.invalid(result.path, "the workload has no datasize/ phase directory, so no datasize record")
    for leaf in runs:
        if not leaf.metadata_files:
            yield r.invalid(leaf.path, "no *_metadata.json: the file that carries the run's args and "
                                       "parameters.dataset blocks is absent")
            continue
        if leaf.broken("metadata"):
            yield r.invalid(leaf.path, f"the run's metadata cannot be read: {leaf.broken('metadata')}")
            continue
        meta = leaf.metadata or {}
        params = meta.get("parameters")
        missing = [name for name, ok in (("args", isinstance(meta.get("args"), dict)),
                                         ("parameters.dataset", isinstance(params, dict) and isinstance(params.get("dataset"), dict)))
                   if not ok]
        if missing:
            yield r.invalid(leaf.path, f"run metadata lacks the {' and '.join(missing)} block(s)")


def min_total_files(block: dict[str, Any], batch_size: int, accelerators: int, host_memory_gb: list[float], record_length: int,
                    samples_per_file: int) -> int:
    """Rules 3.1.2 recomputed from a run's own records, by the bounds the run's gate sized it by
    (rules/predicates.training_min_samples)."""
    by_steps, by_memory = predicates.training_min_samples(block, batch_size=batch_size, accelerators=accelerators,
                                                          host_memory_gib=sum(host_memory_gb),
                                                          record_length=record_length)
    return math.ceil(max(by_steps, by_memory) / samples_per_file)


@rule("3.1.2", "trainingRecalculateDatasetSize").check(LEAF, benchmark="training", command="run")
def recalculate_datasize(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """A run's num_files_train is at least the minimum recomputed from its summary and metadata."""
    meta, summary = leaf.metadata, leaf.summary
    for what in ("metadata", "summary"):
        if leaf.broken(what):
            yield r.invalid(leaf.path, f"cannot recompute the dataset size: {leaf.broken(what)}")
    if not meta or not summary:
        return
    try:
        params = meta.get("parameters") or {}
        dataset, reader = params.get("dataset") or {}, params.get("reader") or {}
        needed = min_total_files(
            stamped_checker_block(leaf),
            batch_size=int(reader["batch_size"]), accelerators=int(summary["num_accelerators"]),
            host_memory_gb=[float(m) for m in summary["host_memory_GB"]],
            record_length=int(dataset["record_length_bytes"]),
            samples_per_file=int(dataset["num_samples_per_file"]))
        used = int(dataset["num_files_train"])
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError, ZeroDivisionError) as exc:
        yield r.invalid(leaf.path, f"cannot recompute the dataset size: missing or bad {exc}")
        return
    if used < needed:
        yield r.invalid(leaf.path, f"num_files_train {used} < required minimum {needed}")


@rule("3.3.2", "trainingAcceleratorUtilizationCheck").check(LEAF, benchmark="training", command="run")
def accelerator_utilization(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """Each run's mean AU meets the model's minimum and DLIO judged it a success."""
    if not leaf.has("summary"):
        return
    if leaf.broken("summary"):
        yield r.invalid(leaf.path, f"no AU to check: {leaf.broken('summary')}")
        return
    summary = leaf.summary or {}
    metric = summary.get("metric")
    metric = metric if isinstance(metric, dict) else {}
    minimum = stamped_checker_block(leaf)["training_au_thresholds"].get(leaf.model)
    au = metric.get("train_au_mean_percentage")
    if au is None and metric.get("train_au_percentage"):
        au = statistics.fmean(metric["train_au_percentage"])
    if minimum is None or au is None:
        yield r.invalid(leaf.path, "no AU minimum for this model or no AU in summary.json")
        return
    if au < minimum * 100:
        yield r.invalid(leaf.path, f"mean AU {au:.2f}% is below the {minimum * 100:g}% minimum for {leaf.model}")
    if metric.get("train_au_meet_expectation") != "success":
        yield r.invalid(leaf.path, f"train_au_meet_expectation is {metric.get('train_au_meet_expectation')!r}, not 'success'")


def _dataset(leaf: Leaf) -> dict[str, Any]:
    dataset = dig(leaf.metadata, "parameters", "dataset")
    return dataset if isinstance(dataset, dict) else {}


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return None


def _datasize_for(result: Result, run: Leaf) -> tuple[Leaf | None, str | None]:
    """Rules 3.3.1 pairing: the datasize leaf whose data_dir equals the run's (or the only one)."""
    sized = [l for l in result.phase("datasize") if l.has("metadata")]
    if len(sized) == 1:
        return sized[0], None
    data_dir = dig(run.metadata, "args", "data_dir")
    matching = [l for l in sized if dig(l.metadata, "args", "data_dir") == data_dir]
    if len(matching) == 1:
        return matching[0], None
    if not matching:
        return None, f"no datasize leaf records data_dir {data_dir!r}"
    return None, f"{len(matching)} datasize leaves record data_dir {data_dir!r}"


@rule("3.2.1", "trainingDatagenMinimumSize").check(RESULT, benchmark="training")
def datagen_minimum(r: Rule, result: Result) -> Iterable[Finding]:
    """Datagen generated at least as many files as datasize calculated."""
    for gen in result.phase("datagen"):
        generated = _int(_dataset(gen).get("num_files_train"))
        for sized in result.phase("datasize"):
            needed = _int(_dataset(sized).get("num_files_train"))
            if generated is not None and needed is not None and generated < needed:
                yield r.invalid(gen.path, f"datagen made {generated} files, datasize {sized.path.name} asked for {needed}")


def _recorded_dataset(leaf: Leaf) -> tuple[dict[str, Any] | None, str]:
    """The dataset block a leaf ran with: its metadata's parameters.dataset, else its
    dlio_config/config.yaml (a published datagen leaf may keep only its configs)."""
    for where, block in (("metadata parameters.dataset", dig(leaf.metadata, "parameters", "dataset")),
                         ("dlio_config/config.yaml", dig(leaf.workload_config, "dataset"))):
        if isinstance(block, dict) and block:
            return block, where
    return None, "nowhere"


def _files_used(run: Leaf) -> int | None:
    """num_files_train the run read: its *summary.json's, else the dataset block it ran with."""
    used = _int((run.summary or {}).get("num_files_train"))
    return used if used is not None else _int((_recorded_dataset(run)[0] or {}).get("num_files_train"))


def _subfolders(run: Leaf, datagen: list[Leaf]) -> Iterable[str]:
    """Rules 3.3.1: a run's num_subfolders_train/eval equal the subfolders its dataset holds, which
    the datagen leaves of its data folder made (DLIO's default is 0; a leaf that records no dataset
    block is not judged). Needs no datasize leaf."""
    block, where = _recorded_dataset(run)
    if block is None:
        return
    folder = block.get("data_folder")
    made: list[tuple[Leaf, dict[str, Any], str]] = []
    for g in datagen:
        found, at = _recorded_dataset(g)
        if found is not None:
            made.append((g, found, at))
    same = [m for m in made if folder is not None and m[1].get("data_folder") == folder] or made
    for key in ("num_subfolders_train", "num_subfolders_eval"):
        want = {n for m in same if (n := _int(m[1].get(key, 0))) is not None}
        used = _int(block.get(key, 0))
        if want and used is not None and used not in want:
            names = ", ".join(f"{g.path.name} ({w})" for g, _, w in same)
            yield f"run reads {key} {used} ({where}); the dataset holds {' or '.join(map(str, sorted(want)))}, as datagen {names} made it"


@rule("3.3.1", "trainingRunDataMatchesDatasize").check(RESULT, benchmark="training")
def run_matches_datasize(r: Rule, result: Result) -> Iterable[Finding]:
    """datasize.num_files_train <= run's num_files_train <= datagen's; subfolders as datagen made them; manifests agree.

    The datagen half needs no datasize leaf: a workload without one (3.1.1) is still judged on it."""
    datagen = result.phase("datagen")
    for run in result.phase("run"):
        for mismatch in _subfolders(run, datagen):
            yield r.invalid(run.path, mismatch)
        used = _files_used(run)
        if used is None:
            continue
        sized, problem = _datasize_for(result, run)
        if problem and result.phase("datasize"):
            yield r.invalid(run.path, problem)
        if sized is not None:
            needed = _int(_dataset(sized).get("num_files_train"))
            if needed is not None and used < needed:
                yield r.invalid(run.path, f"run used {used} files, datasize {sized.path.name} recorded {needed}")
        generated = [_int((_recorded_dataset(g)[0] or {}).get("num_files_train")) for g in datagen]
        counted = [g for g in generated if g is not None]
        if generated and len(counted) == len(generated) and used > max(counted):
            yield r.invalid(run.path, f"run used {used} files, datagen made only {max(counted)}")
        declared = (run.metadata or {}).get("datagen_manifest_file")
        if declared and not isinstance(declared, str):
            yield r.invalid(run.path, f"metadata's datagen_manifest_file is a {type(declared).__name__}, not a file name")
        elif declared:
            manifest = run.json_object(declared).value
            if manifest is None:
                yield r.invalid(run.path, f"metadata declares {declared} but it is missing or unreadable")
                continue
            source = Path(str(manifest.get("source_datagen_result_dir", ""))).name
            gens = {g.path.name: g for g in datagen}
            if source not in gens:
                yield r.invalid(run.path, f"{declared} names datagen {source!r}, not a datagen leaf of this workload")
            elif _int(_dataset(gens[source]).get("num_files_train")) != _int(manifest.get("num_files_train")):
                yield r.invalid(run.path, f"{declared} num_files_train differs from datagen {source}")
            elif used > (_int(manifest.get("num_files_train")) or 0):
                yield r.invalid(run.path, f"run used {used} files, more than the manifest's {manifest.get('num_files_train')}")


def _hosts(leaf: Leaf) -> int:
    return _int((leaf.summary or {}).get("num_hosts")) or 1


def _system_under_test(system: System) -> dict[str, Any]:
    """systems/<system>.yaml's system_under_test block, {} when it is missing or unreadable."""
    return system.package.system_description(system.division, system.org, system.name)[0] or {}


def _runs(system: System) -> list[Leaf]:
    return [leaf for leaf in system.leaves if leaf.benchmark == "training" and leaf.command == "run"]


@rule("3.3.3", "trainingSingleHostSimulatedAccelerators").check(LEAF, benchmark="training", command="run")
def single_host_accelerators(r: Rule, run: Leaf) -> Iterable[Finding]:
    """A single-host run simulating fewer than 4 accelerators draws a warning."""
    count = _int((run.summary or {}).get("num_accelerators"))
    if _hosts(run) == 1 and count is not None and count < 4:
        yield r.warning(run.path, f"single-host run simulates {count} accelerator(s), fewer than 4")


@rule("3.3.4", "trainingSingleHostClientLimit").check(SYSTEM)
def single_host_client_limit(r: Rule, system: System) -> Iterable[Finding]:
    """A system declared single-host (capabilities.multi_host false) has no multi-client run."""
    if dig(_system_under_test(system), "solution", "capabilities", "multi_host") is not False:
        return
    for run in _runs(system):
        if _hosts(run) > 1:
            yield r.invalid(run.path, f"single-host system but the run used {_hosts(run)} client hosts")


@rule("3.3.6", "trainingIdenticalAcceleratorsPerNode").check(LEAF, benchmark="training", command="run")
def identical_accelerators(r: Rule, run: Leaf) -> Iterable[Finding]:
    """A distributed run spreads its accelerators evenly over its hosts."""
    count, hosts = _int((run.summary or {}).get("num_accelerators")), _hosts(run)
    if hosts > 1 and count is not None and count % hosts:
        yield r.invalid(run.path, f"{count} accelerators cannot be identical across {hosts} hosts")


def _host_records(leaf: Leaf) -> list[dict[str, Any]]:
    meta = leaf.metadata or {}
    for block in (meta.get("cluster_information"), meta.get("system_info")):
        if isinstance(block, dict) and isinstance(block.get("hosts"), list):
            return [h for h in block["hosts"] if isinstance(h, dict)]
    return []


@rule("3.3.7", "trainingNodeCapabilityConsistency").check(LEAF, benchmark="training", command="run")
def node_capability(r: Rule, run: Leaf) -> Iterable[Finding]:
    """Hosts of a distributed run differ by at most 1.5x in memory and cores (else a warning)."""
    hosts = _host_records(run)
    memory = [h.get("memory_total_bytes") or dig(h, "memory", "total") for h in hosts]
    cores = [h.get("cpu_count") or dig(h, "cpu", "num_cores") for h in hosts]
    for label, values in (("memory", memory), ("CPU cores", cores)):
        values = [v for v in values if isinstance(v, (int, float)) and v > 0]
        if len(values) > 1 and max(values) / min(values) > 1.5:
            yield r.warning(run.path, f"client {label} differ by {max(values) / min(values):.2f}x (> 1.5)")
    info = (run.metadata or {}).get("system_info")
    issues = info.get("host_consistency_issues") if isinstance(info, dict) else None
    if issues:
        yield r.warning(run.path, f"host consistency issues recorded: {issues}")


@rule("3.3.8", "trainingResultAggregation").check(RESULT, benchmark="training")
def result_aggregation(r: Rule, result: Result) -> Iterable[Finding]:
    """No measured run of a workload has an empty per-epoch metric list."""
    runs = result.phase("run")
    if not runs:
        return
    _, issues = training_figures(runs)
    for issue in issues:
        if "is empty" in issue:
            yield r.invalid(result.path, issue)


@rule("3.4.1", "trainingMlpstoragePathArgs").check(RESULT, benchmark="training")
def path_args(r: Rule, result: Result) -> Iterable[Finding]:
    """A run records both a data directory and a results directory, and they differ. Compared
    as written (posixpath.normpath): the paths are the system under test's, and resolving them
    here would touch the reviewer's filesystem where a package says (a hung mount)."""
    for run in result.phase("run"):
        args = (run.metadata or {}).get("args")
        if not isinstance(args, dict):
            continue
        data, results = args.get("data_dir"), args.get("results_dir")
        if not data or not results:
            yield r.invalid(run.path, "args lacks data_dir or results_dir")
        elif posixpath.normpath(str(data)) == posixpath.normpath(str(results)):
            yield r.invalid(run.path, "data_dir and results_dir are the same directory")


@rule("3.4.2", "trainingMlpstorageFilesystemCheck").check(SYSTEM)
def filesystem_check(r: Rule, system: System) -> Iterable[Finding]:
    """Each run carries fs_separation.json with same_filesystem false (or a df listing); object-API systems are exempt."""
    if dig(_system_under_test(system), "solution", "architecture", "benchmark_API") == "object":
        return
    for run in _runs(system):
        record = run.record("fs_separation").value
        if record is not None:
            if record.get("same_filesystem") is not False:
                yield r.invalid(run.path, "fs_separation.json shows the data and results on one filesystem")
            continue
        text = files.read_text(run.path / "training_run.stdout.log")[0] or ""
        if "Filesystem" not in text or "Mounted on" not in text:
            yield r.invalid(run.path, "no fs_separation.json and no df listing in training_run.stdout.log")


def _overrides_outside(leaf: Leaf, division: str) -> list[str]:
    allowed = tables.param_allowlist("training", division) | tables.tool_injected_params("training")
    overrides = (leaf.metadata or {}).get("override_parameters") or {}
    return sorted(k for k in overrides if k not in allowed) if isinstance(overrides, dict) else []


@rule("3.6.2", "trainingClosedSubmissionParameters").check(LEAF, benchmark="training")
def closed_parameters(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """CLOSED training leaves override only the CLOSED tunables."""
    if leaf.division == "closed":
        for key in _overrides_outside(leaf, "closed"):
            yield r.invalid(leaf.path, f"{key} is not a CLOSED tunable")


@rule("3.6.3", "trainingOpenSubmissionParameters").check(LEAF, benchmark="training")
def open_parameters(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """OPEN training leaves override only the CLOSED and OPEN tunables."""
    if leaf.division == "open":
        for key in _overrides_outside(leaf, "open"):
            yield r.invalid(leaf.path, f"{key} is not an OPEN tunable")
