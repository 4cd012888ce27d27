"""Section 3: training workloads."""

from __future__ import annotations

import functools
import math
import statistics
from pathlib import Path
from typing import Iterable

from mlpstorage_py.results.tree import files
from mlpstorage_py.results.tree.package import Leaf, Package
from mlpstorage_py.checker.registry import INVALID, WARNING, Finding, finding, not_applicable, rule
from mlpstorage_py.checker.structure_helpers import dig
from mlpstorage_py.rules import tables

GIB = 1024 ** 3

not_applicable("3.3.5", "dataset reachability from every client host leaves no evidence in the package to check")


def _training(pkg: Package, command: str) -> list[Leaf]:
    return [leaf for leaf in pkg.leaves if leaf.benchmark == "training" and leaf.command == command]


def _checker_block(leaf: Leaf) -> dict:
    edition = leaf.stamped_edition if leaf.stamped_edition in tables.editions()["editions"] else tables.editions()["current_edition"]
    return tables.checker(edition)


@rule("3.1.1", "trainingVerifyDatasizeUsage", parts=True)
def datasize_usage(pkg: Package) -> Iterable[Finding]:
    """A workload with runs has a datasize leaf; each run's metadata has args and parameters.dataset."""
    runs = _training(pkg, "run")
    datasize_dirs = {leaf.workload_dir for leaf in _training(pkg, "datasize") if leaf.metadata}
    reported: set[Path] = set()
    for leaf in runs:
        workload = leaf.workload_dir
        if workload not in datasize_dirs and workload not in reported:
            reported.add(workload)  # one finding per workload, not one per run
            if files.real_dir(workload / "datasize"):
                yield finding("3.1.1", INVALID, workload / "datasize",
                              "no datasize timestamp directory carries a *_metadata.json: the datasize record is missing")
            else:
                yield finding("3.1.1", INVALID, workload, "the workload has no datasize/ phase directory, so no datasize record")
        if not leaf.metadata_files:
            yield finding("3.1.1", INVALID, leaf.path, "no *_metadata.json: the file that carries the run's args and "
                                                       "parameters.dataset blocks is absent")
            continue
        meta = leaf.metadata or {}
        if leaf.broken("metadata"):
            yield finding("3.1.1", INVALID, leaf.path, f"the run's metadata cannot be read: {leaf.broken('metadata')}")
            continue
        params = meta.get("parameters")
        missing = [name for name, ok in (("args", isinstance(meta.get("args"), dict)),
                                         ("parameters.dataset", isinstance(params, dict) and isinstance(params.get("dataset"), dict)))
                   if not ok]
        if missing:
            yield finding("3.1.1", INVALID, leaf.path, f"run metadata lacks the {' and '.join(missing)} block(s)")


def min_total_files(batch_size: int, accelerators: int, host_memory_gb: list[float], record_length: int,
                    samples_per_file: int, steps: int, multiplier: int) -> int:
    """Rules 3.1.2 recomputed from a run's own records."""
    by_steps = steps * batch_size * accelerators
    by_memory = sum(host_memory_gb) * multiplier * GIB / record_length
    return math.ceil(max(by_steps, by_memory) / samples_per_file)


@rule("3.1.2", "trainingRecalculateDatasetSize", parts=True)
def recalculate_datasize(pkg: Package) -> Iterable[Finding]:
    """A run's num_files_train is at least the minimum recomputed from its summary and metadata."""
    for leaf in _training(pkg, "run"):
        meta, summary = leaf.metadata, leaf.summary
        for what in ("metadata", "summary"):
            if leaf.broken(what):
                yield finding("3.1.2", INVALID, leaf.path, f"cannot recompute the dataset size: {leaf.broken(what)}")
        if not meta or not summary or leaf.broken("metadata") or leaf.broken("summary"):
            continue
        try:
            params = meta.get("parameters") or {}
            dataset, reader = params.get("dataset") or {}, params.get("reader") or {}
            needed = min_total_files(
                batch_size=int(reader["batch_size"]), accelerators=int(summary["num_accelerators"]),
                host_memory_gb=[float(m) for m in summary["host_memory_GB"]],
                record_length=int(dataset["record_length_bytes"]),
                samples_per_file=int(dataset["num_samples_per_file"]),
                steps=int(_checker_block(leaf)["training_steps_per_epoch"]),
                multiplier=int(_checker_block(leaf)["training_host_memory_multiplier"]))
            used = int(dataset["num_files_train"])
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError, ZeroDivisionError) as exc:
            yield finding("3.1.2", INVALID, leaf.path, f"cannot recompute the dataset size: missing or bad {exc}")
            continue
        if used < needed:
            yield finding("3.1.2", INVALID, leaf.path, f"num_files_train {used} < required minimum {needed}")


@rule("3.3.2", "trainingAcceleratorUtilizationCheck", parts=True)
def accelerator_utilization(pkg: Package) -> Iterable[Finding]:
    """Each run's mean AU meets the model's minimum and DLIO judged it a success."""
    for leaf in _training(pkg, "run"):
        summary = leaf.summary
        if summary is None:
            continue
        if leaf.broken("summary"):
            yield finding("3.3.2", INVALID, leaf.path, f"no AU to check: {leaf.broken('summary')}")
            continue
        metric = summary.get("metric") if isinstance(summary.get("metric"), dict) else {}
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


def _dataset(leaf: Leaf) -> dict:
    dataset = dig(leaf.metadata, "parameters", "dataset")
    return dataset if isinstance(dataset, dict) else {}


def _int(value: object) -> int | None:
    try:
        return int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return None


def _datasize_for(pkg: Package, run: Leaf) -> tuple[Leaf | None, str | None]:
    """Rules 3.3.1 pairing: the datasize leaf whose data_dir equals the run's (or the only one)."""
    sized = [l for l in pkg.in_workload(run.workload_dir, "datasize") if l.metadata]
    if len(sized) == 1:
        return sized[0], None
    data_dir = dig(run.metadata, "args", "data_dir")
    matching = [l for l in sized if dig(l.metadata, "args", "data_dir") == data_dir]
    if len(matching) == 1:
        return matching[0], None
    if not matching:
        return None, f"no datasize leaf records data_dir {data_dir!r}"
    return None, f"{len(matching)} datasize leaves record data_dir {data_dir!r}"


@rule("3.2.1", "trainingDatagenMinimumSize", parts=True)
def datagen_minimum(pkg: Package) -> Iterable[Finding]:
    """Datagen generated at least as many files as datasize calculated."""
    for gen in _training(pkg, "datagen"):
        generated = _int(_dataset(gen).get("num_files_train"))
        for sized in pkg.in_workload(gen.workload_dir, "datasize"):
            needed = _int(_dataset(sized).get("num_files_train"))
            if generated is not None and needed is not None and generated < needed:
                yield finding("3.2.1", INVALID, gen.path, f"datagen made {generated} files, datasize {sized.path.name} asked for {needed}")


@rule("3.3.1", "trainingRunDataMatchesDatasize", parts=True)
def run_matches_datasize(pkg: Package) -> Iterable[Finding]:
    """datasize.num_files_train <= run's num_files_train <= datagen's; manifests agree."""
    for run in _training(pkg, "run"):
        used = _int((run.summary or {}).get("num_files_train"))
        if used is None:
            continue
        sized, problem = _datasize_for(pkg, run)
        if problem and pkg.in_workload(run.workload_dir, "datasize"):
            yield finding("3.3.1", INVALID, run.path, problem)
        if sized is not None:
            needed = _int(_dataset(sized).get("num_files_train"))
            if needed is not None and used < needed:
                yield finding("3.3.1", INVALID, run.path, f"run used {used} files, datasize {sized.path.name} recorded {needed}")
        generated = [_int(_dataset(g).get("num_files_train")) for g in pkg.in_workload(run.workload_dir, "datagen")]
        if generated and all(g is not None for g in generated) and used > max(generated):
            yield finding("3.3.1", INVALID, run.path, f"run used {used} files, datagen made only {max(generated)}")
        declared = (run.metadata or {}).get("datagen_manifest_file")
        if declared and not isinstance(declared, str):
            yield finding("3.3.1", INVALID, run.path, f"metadata's datagen_manifest_file is a {type(declared).__name__}, not a file name")
        elif declared:
            path = run.path / declared
            manifest = read_json_file(path)
            if manifest is None:
                yield finding("3.3.1", INVALID, run.path, f"metadata declares {declared} but it is missing or unreadable")
                continue
            source = Path(str(manifest.get("source_datagen_result_dir", ""))).name
            gens = {g.path.name: g for g in pkg.in_workload(run.workload_dir, "datagen")}
            if source not in gens:
                yield finding("3.3.1", INVALID, run.path, f"{declared} names datagen {source!r}, not a datagen leaf of this workload")
            elif _int(_dataset(gens[source]).get("num_files_train")) != _int(manifest.get("num_files_train")):
                yield finding("3.3.1", INVALID, run.path, f"{declared} num_files_train differs from datagen {source}")
            elif used > (_int(manifest.get("num_files_train")) or 0):
                yield finding("3.3.1", INVALID, run.path, f"run used {used} files, more than the manifest's {manifest.get('num_files_train')}")


def read_json_file(path: Path) -> dict | None:
    data = files.json_or_unreadable(path) if files.real_file(path) else None
    return None if not isinstance(data, dict) or files.UNREADABLE in data else data


def _hosts(leaf: Leaf) -> int:
    return _int((leaf.summary or {}).get("num_hosts")) or 1


def _system(pkg: Package, leaf: Leaf) -> dict:
    """systems/<system>.yaml's system_under_test block, looked up once per system."""
    cache = vars(pkg).setdefault("_system_blocks", {})
    key = (leaf.division, leaf.org, leaf.system)
    if key not in cache:
        path = pkg.root / leaf.division / leaf.org / "systems" / f"{leaf.system}.yaml"
        data = files.yaml_or_unreadable(path) if files.real_file(path) else {}
        block = data.get("system_under_test") if isinstance(data, dict) else None
        cache[key] = block if isinstance(block, dict) else {}
    return cache[key]


@rule("3.3.3", "trainingSingleHostSimulatedAccelerators", parts=True)
def single_host_accelerators(pkg: Package) -> Iterable[Finding]:
    """A single-host run simulating fewer than 4 accelerators draws a warning."""
    for run in _training(pkg, "run"):
        count = _int((run.summary or {}).get("num_accelerators"))
        if _hosts(run) == 1 and count is not None and count < 4:
            yield finding("3.3.3", WARNING, run.path, f"single-host run simulates {count} accelerator(s), fewer than 4")


@rule("3.3.4", "trainingSingleHostClientLimit", parts=True)
def single_host_client_limit(pkg: Package) -> Iterable[Finding]:
    """A system declared single-host (capabilities.multi_host false) has no multi-client run."""
    for run in _training(pkg, "run"):
        if dig(_system(pkg, run), "solution", "capabilities", "multi_host") is False and _hosts(run) > 1:
            yield finding("3.3.4", INVALID, run.path, f"single-host system but the run used {_hosts(run)} client hosts")


@rule("3.3.6", "trainingIdenticalAcceleratorsPerNode", parts=True)
def identical_accelerators(pkg: Package) -> Iterable[Finding]:
    """A distributed run spreads its accelerators evenly over its hosts."""
    for run in _training(pkg, "run"):
        count, hosts = _int((run.summary or {}).get("num_accelerators")), _hosts(run)
        if hosts > 1 and count is not None and count % hosts:
            yield finding("3.3.6", INVALID, run.path, f"{count} accelerators cannot be identical across {hosts} hosts")


def _host_records(leaf: Leaf) -> list[dict]:
    meta = leaf.metadata or {}
    for block in (meta.get("cluster_information"), meta.get("system_info")):
        if isinstance(block, dict) and isinstance(block.get("hosts"), list):
            return [h for h in block["hosts"] if isinstance(h, dict)]
    return []


@rule("3.3.7", "trainingNodeCapabilityConsistency", parts=True)
def node_capability(pkg: Package) -> Iterable[Finding]:
    """Hosts of a distributed run differ by at most 1.5x in memory and cores (else a warning)."""
    for run in _training(pkg, "run"):
        hosts = _host_records(run)
        memory = [h.get("memory_total_bytes") or dig(h, "memory", "total") for h in hosts]
        cores = [h.get("cpu_count") or dig(h, "cpu", "num_cores") for h in hosts]
        for label, values in (("memory", memory), ("CPU cores", cores)):
            values = [v for v in values if isinstance(v, (int, float)) and v > 0]
            if len(values) > 1 and max(values) / min(values) > 1.5:
                yield finding("3.3.7", WARNING, run.path, f"client {label} differ by {max(values) / min(values):.2f}x (> 1.5)")
        info = (run.metadata or {}).get("system_info")
        issues = info.get("host_consistency_issues") if isinstance(info, dict) else None
        if issues:
            yield finding("3.3.7", WARNING, run.path, f"host consistency issues recorded: {issues}")


@rule("3.3.8", "trainingResultAggregation", parts=True)
def result_aggregation(pkg: Package) -> Iterable[Finding]:
    """No measured run of a workload has an empty per-epoch metric list."""
    from mlpstorage_py.report.figures import training as training_figures

    by_workload: dict[Path, list[Leaf]] = {}
    for run in _training(pkg, "run"):
        by_workload.setdefault(run.workload_dir, []).append(run)
    for workload, runs in by_workload.items():
        _, issues = training_figures(runs)
        for issue in issues:
            if "is empty" in issue:
                yield finding("3.3.8", INVALID, workload, issue)


@rule("3.4.1", "trainingMlpstoragePathArgs", parts=True)
def path_args(pkg: Package) -> Iterable[Finding]:
    """A run records both a data directory and a results directory, and they differ."""
    resolved = functools.cache(lambda path: Path(path).resolve())  # the runs of a workload share their directories
    for run in _training(pkg, "run"):
        args = (run.metadata or {}).get("args")
        if not isinstance(args, dict):
            continue
        data, results = args.get("data_dir"), args.get("results_dir")
        if not data or not results:
            yield finding("3.4.1", INVALID, run.path, "args lacks data_dir or results_dir")
        elif resolved(str(data)) == resolved(str(results)):
            yield finding("3.4.1", INVALID, run.path, "data_dir and results_dir are the same directory")


@rule("3.4.2", "trainingMlpstorageFilesystemCheck", parts=True)
def filesystem_check(pkg: Package) -> Iterable[Finding]:
    """Each run carries fs_separation.json with same_filesystem false (or a df listing); object-API systems are exempt."""
    for run in _training(pkg, "run"):
        api = dig(_system(pkg, run), "solution", "architecture", "benchmark_API")
        if api == "object":
            continue
        record = read_json_file(run.path / "fs_separation.json")
        if record is not None:
            if record.get("same_filesystem") is not False:
                yield finding("3.4.2", INVALID, run.path, "fs_separation.json shows the data and results on one filesystem")
            continue
        text = files.read_text(run.path / "training_run.stdout.log")[0] or ""
        if "Filesystem" not in text or "Mounted on" not in text:
            yield finding("3.4.2", INVALID, run.path, "no fs_separation.json and no df listing in training_run.stdout.log")


def _overrides_outside(leaf: Leaf, division: str) -> list[str]:
    allowed = tables.param_allowlist("training", division) | tables.tool_injected_params("training")
    overrides = (leaf.metadata or {}).get("override_parameters") or {}
    return sorted(k for k in overrides if k not in allowed) if isinstance(overrides, dict) else []


@rule("3.6.2", "trainingClosedSubmissionParameters", parts=True)
def closed_parameters(pkg: Package) -> Iterable[Finding]:
    """CLOSED training leaves override only the CLOSED tunables."""
    for leaf in pkg.leaves:
        if leaf.benchmark == "training" and leaf.division == "closed":
            for key in _overrides_outside(leaf, "closed"):
                yield finding("3.6.2", INVALID, leaf.path, f"{key} is not a CLOSED tunable")


@rule("3.6.3", "trainingOpenSubmissionParameters", parts=True)
def open_parameters(pkg: Package) -> Iterable[Finding]:
    """OPEN training leaves override only the CLOSED and OPEN tunables."""
    for leaf in pkg.leaves:
        if leaf.benchmark == "training" and leaf.division == "open":
            for key in _overrides_outside(leaf, "open"):
                yield finding("3.6.3", INVALID, leaf.path, f"{key} is not an OPEN tunable")
