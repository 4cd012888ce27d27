"""Section 5: vector database workloads (Rules 5.1.1-5.6.5; 5.6.1 is checked in rules_common).

A leaf is vector_database/<engine>/<INDEX>/<datagen|run>/<timestamp>/. What it ran is recorded
in its summary.json (both phases), config.json, result_verdict.json and recall_stats.json (run),
its *_metadata.json (args, parameters, override_parameters) and its log (the df records of
5.4.2), and the engine's native statistics.json (of which summary.json is a copy). A fact
is read from whichever of these files records it. A missing file is INVALID once, under the
rule that requires it (5.3.1 a run's summary.json; 5.2.2 the load's index-build record; 5.4.2
the df records); a rule that only reads a value no file records says "not checked" (WARNING),
never passes silently and never fails a run for evidence it was not given.

Numbers come from the edition's checker block (runs_per_result, vdb_closed_fixed,
vdb_open_backends), rules/params.yaml, rules/workloads.yaml and configs/vectordb/default.yaml
(the scale table of 5.1.1). Rules 5.3.2 and 5.3.3 name a minimum recall and a minimum query
count that no table defines: they are reported as INFO, never invented.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Iterable

import yaml

from mlpstorage_py.checker.files import DIR, FILE, entries, kind_of, load_json, read_text, real_file
from mlpstorage_py.checker.package import Leaf, Package
from mlpstorage_py.checker.registry import INFO, INVALID, WARNING, Finding, finding, rule
from mlpstorage_py.checker.structure_helpers import (
    LeafRecord, as_int, as_number, checker_of, dig, record, sanctioned, system_description)
from mlpstorage_py.rules import tables
from mlpstorage_py.rules.core_config import canonical, flatten

FAMILY = "vector_database"
METRIC_KEYS = ("throughput_qps", "mean_latency_ms", "p95_latency_ms", "p99_latency_ms", "p999_latency_ms")  # 5.3.4
LOG_LIMIT = 1 << 20
DF_LINE = re.compile(r"\bdf (?P<label>.+?): (?P<path>\S.*)$")
DF_HEADER = re.compile(r"\bFilesystem\b.*\bMounted on\s*$")
INDEX_DONE = re.compile(r"index(?:ing| build(?:ing)?)?\b.*\b(?:complete|completed|finished|done)\b", re.IGNORECASE)
OBJECT_TYPES = ("s3", "object", "minio", "gcs", "azure")


# --- the leaves as recorded ----------------------------------------------------------------

@dataclass
class Vdb:
    leaf: Leaf
    rec: LeafRecord
    checker: dict

    @property
    def path(self) -> Path:
        return self.leaf.path

    @property
    def division(self) -> str:
        return self.leaf.division

    @property
    def engine(self) -> str:
        return self.leaf.parts[0]

    @property
    def index_dir(self) -> str:
        return self.leaf.parts[1]

    @property
    def summary(self) -> dict | None:
        return self.rec.summary

    @property
    def summary_problem(self) -> str | None:
        return self.rec.summary_problem

    @property
    def meta(self) -> dict | None:
        return self.rec.meta

    @functools.cached_property
    def config(self) -> tuple[dict | None, str | None]:
        """config.json: (object, None), (None, why) when broken, (None, None) when absent."""
        path = self.path / "config.json"
        if kind_of(path) is None:
            return None, None
        data, problem = load_json(path)
        if problem is None and not isinstance(data, dict):
            problem = "config.json is not a JSON object"
        return (data, None) if problem is None else (None, problem)

    @functools.cached_property
    def parameters(self) -> tuple[dict | None, str]:
        """The resolved workload parameters: config.json's, else the metadata's."""
        config, _ = self.config
        for where, block in (("config.json", dig(config, "parameters")), ("metadata", dig(self.meta, "parameters"))):
            if isinstance(block, dict) and block:
                return block, where
        return None, "nowhere"

    def param(self, *keys: str) -> Any:
        return dig(self.parameters[0], *keys)

    def value(self, summary_key: str, *param_keys: str) -> tuple[Any, str]:
        """A fact from summary.json, else from the recorded parameters."""
        value = dig(self.summary, summary_key)
        if value is not None:
            return value, "summary.json"
        value = self.param(*param_keys)
        return value, (self.parameters[1] if value is not None else "nowhere")

    def database(self) -> tuple[str | None, str]:
        value = dig(self.summary, "database")
        if isinstance(value, dict):
            value = value.get("database")
        if isinstance(value, str) and value:
            return value, "summary.json"
        config, _ = self.config
        for where, found in (("config.json", dig(config, "database", "database")),
                             (self.parameters[1], self.param("database", "database")),
                             ("metadata", dig(self.meta, "args", "vdb_engine"))):
            if isinstance(found, str) and found:
                return found, where
        return None, "nowhere"

    @functools.cached_property
    def native(self) -> tuple[dict | None, str | None]:
        """The engine's native statistics.json (vdbbench writes it at the leaf root or under
        vectordb/<phase>/): (object, its path relative to the leaf), or (None, None)."""
        paths = [self.path / "statistics.json"]
        paths += [d / "statistics.json" for _, kind, d in entries(self.path / "vectordb") if kind == DIR]
        for path in paths:
            if real_file(path):
                data, problem = load_json(path)
                if problem is None and isinstance(data, dict):
                    return data, path.relative_to(self.path).as_posix()
        return None, None

    @functools.cached_property
    def verdict(self) -> dict | None:
        """result_verdict.json when it is a readable JSON object."""
        path = self.path / "result_verdict.json"
        if not real_file(path):
            return None
        data, problem = load_json(path)
        return data if problem is None and isinstance(data, dict) else None

    def fact(self, name: str) -> tuple[Any, str]:
        """One recorded fact (dimension, num_vectors, index_type, collection) from the first file
        the reference tool writes it to: summary.json, the resolved parameters, config.json's own
        keys, the metadata's args and top level; (None, "nowhere") when none records it."""
        config, _ = self.config
        params, params_from = self.parameters
        sources = {
            "dimension": [("summary.json", dig(self.summary, "dimension")),
                          (params_from, dig(params, "dataset", "dimension")),
                          ("config.json vector_dim", dig(config, "vector_dim")),
                          ("config.json dimension", dig(config, "dimension")),
                          ("metadata args.dimension", dig(self.meta, "args", "dimension")),
                          ("metadata args.vector_dim", dig(self.meta, "args", "vector_dim")),
                          ("metadata dimension", dig(self.meta, "dimension")),
                          ("metadata vector_dim", dig(self.meta, "vector_dim"))],
            "num_vectors": [("summary.json", dig(self.summary, "num_vectors")),
                            (params_from, dig(params, "dataset", "num_vectors")),
                            ("config.json num_vectors", dig(config, "num_vectors")),
                            ("metadata args.num_vectors", dig(self.meta, "args", "num_vectors")),
                            ("metadata num_vectors", dig(self.meta, "num_vectors"))],
            "index_type": [("summary.json", dig(self.summary, "index_type")),
                           (params_from, dig(params, "index", "index_type")),
                           ("config.json index_type", dig(config, "index_type")),
                           ("metadata args.index_type", dig(self.meta, "args", "index_type")),
                           ("metadata index_type", dig(self.meta, "index_type")),
                           ("metadata args.vdb_index", dig(self.meta, "args", "vdb_index")),
                           ("metadata vdb_index", dig(self.meta, "vdb_index"))],
            "collection": [("summary.json", dig(self.summary, "collection_name")),
                           (params_from, dig(params, "dataset", "collection_name")),
                           ("config.json collection_name", dig(config, "collection_name")),
                           ("metadata args.collection", dig(self.meta, "args", "collection")),
                           ("metadata collection", dig(self.meta, "collection"))],
        }[name]
        for where, value in sources:
            if value is not None and value != "":
                return value, where
        return None, "nowhere"

    def index_type(self) -> tuple[str | None, str]:
        value, where = self.fact("index_type")
        return (str(value), where) if value is not None else (None, where)

    def collection_size(self) -> tuple[int | None, str]:
        """The vectors the queried collection held: summary inserted_vectors, else the ground-truth
        copy's total in result_verdict.json (vdbbench reads the collection's num_entities)."""
        if self.leaf.command == "run":
            found = as_int(dig(self.summary, "inserted_vectors"))
            if found is not None:
                return found, "summary.json inserted_vectors"
            found = as_int(dig(self.verdict, "flat_setup", "total_vectors"))
            if found is not None:
                return found, "result_verdict.json flat_setup.total_vectors"
        return None, "nowhere"

    def missing_summary(self) -> str:
        """Why summary.json gives nothing, with the rule that reports it (once)."""
        why = self.summary_problem or "summary.json records nothing"
        return f"{why} (reported under 5.3.1)" if self.leaf.command == "run" else f"{why} in the datagen leaf"

    def named_outputs(self) -> list[tuple[str, bool]]:
        """(file name, present) of the stdout/stderr logs the metadata's command_output_files names."""
        found = []
        for item in dig(self.meta, "command_output_files") or []:
            for key in ("stdout", "stderr"):
                name = PurePosixPath(str(dig(item, key) or "")).name if isinstance(item, dict) else ""
                if name and name not in [n for n, _ in found]:
                    found.append((name, real_file(self.path / name)))
        return found

    def evidence_problem(self) -> str:
        """Why neither config.json nor the metadata can be read, for 'cannot check' messages."""
        config_problem = self.config[1] or "no config.json"
        return f"{config_problem}; {self.rec.meta_problem or 'the metadata records no parameters'}"


def _leaves(pkg: Package, command: str | None = None) -> list[Vdb]:
    cache = vars(pkg).setdefault("_vdb_leaves", {})
    if "all" not in cache:
        found = []
        for leaf in pkg.leaves:
            if leaf.benchmark != FAMILY:
                continue
            block = checker_of(pkg, leaf.division, leaf.org)
            if block:  # an edition without a checker block is reported by EDN-04
                found.append(Vdb(leaf, record(pkg, leaf.path), block))
        cache["all"] = found
    return [v for v in cache["all"] if command is None or v.leaf.command == command]


def _by_workload(items: list[Vdb]) -> dict[Path, list[Vdb]]:
    grouped: dict[Path, list[Vdb]] = {}
    for v in items:
        grouped.setdefault(v.leaf.workload_dir, []).append(v)
    return grouped


def _cannot(number: str, v: Vdb, what: str, why: str | None = None) -> Finding:
    why = why or v.summary_problem or "not recorded"
    path = v.rec.summary_path if "summary" in why else v.path
    return finding(number, INVALID, path, f"cannot check {what}: {why}")


def _not_checked(number: str, v: Vdb, what: str, why: str, path: Path | None = None) -> Finding:
    """Missing evidence is not evidence of failure: a WARNING that names what is absent."""
    return finding(number, WARNING, path or v.path, f"not checked: no file records {what} ({why})")


def _number(value: Any) -> float | None:
    number = as_number(value)
    return number if number is not None and math.isfinite(number) else None


def _datagen_for(pkg: Package, run: Vdb) -> tuple[list[Vdb], str | None]:
    """Rules 5.1.2/5.2.2 pairing: the datagen leaf the run names (summary.datagen_leaf), else
    those of its workload that loaded the same collection, else all of the workload's."""
    gens = [g for g in _leaves(pkg, "datagen") if g.leaf.workload_dir == run.leaf.workload_dir]
    named = dig(run.summary, "datagen_leaf")
    if isinstance(named, str) and named:
        wanted = PurePosixPath(named).name
        match = [g for g in gens if g.path.name == wanted]
        return match, None if match else f"the run names datagen leaf {wanted}, which {run.index_dir}/datagen/ does not hold"
    if not gens:
        return [], f"{run.engine}/{run.index_dir}/datagen/ holds no datagen (load) leaf"
    collection, _ = run.fact("collection")
    same = [g for g in gens if collection and g.fact("collection")[0] == collection]
    return same or gens, None


# --- 5.1 dataset ---------------------------------------------------------------------------

def scale_table(block: dict) -> tuple[list[tuple[int, int]] | None, str]:
    """(num_vectors, dimension) pairs of 5.1.1's table: the checker block's, else configs/vectordb's."""
    if block.get("vdb_scales"):
        return [tuple(map(int, s)) for s in block["vdb_scales"]], "the edition's checker block (vdb_scales)"
    try:
        from mlpstorage_py.benchmarks.workloads import configs_dir

        path = configs_dir() / "vectordb" / "default.yaml"
        scales = (yaml.safe_load(path.read_text(encoding="utf-8")) or {})[FAMILY].get("sanctioned_scales")
    except Exception:  # noqa: BLE001 - no source checkout, unreadable table: the table is then undefined
        scales = None
    if not scales:
        return None, "no table"
    return [(int(n), int(d)) for n, d in scales], "configs/vectordb/default.yaml sanctioned_scales"


def _declared(pkg: Package, v: Vdb) -> tuple[int | None, str]:
    """num_vectors: the leaf's own record, else (a run) its load leaf's when they agree."""
    n, where = v.fact("num_vectors")
    if as_int(n) is not None or v.leaf.command != "run":
        return as_int(n), where
    gens, _ = _datagen_for(pkg, v)
    loaded = {as_int(g.fact("num_vectors")[0]) for g in gens} - {None}
    if len(loaded) == 1:
        return loaded.pop(), f"datagen {', '.join(g.path.name for g in gens)} {gens[0].fact('num_vectors')[1]}"
    return None, "nowhere"


@rule("5.1.1", "vdbDatasetScale")
def dataset_scale(pkg: Package) -> Iterable[Finding]:
    """Each run's num_vectors x dimension is one of the defined scales (read from summary.json,
    config.json, the metadata, result_verdict.json's collection total or the paired load)."""
    told: set[Path] = set()
    for v in _leaves(pkg, "run"):
        n, n_from = _declared(pkg, v)
        if n is None:
            n, n_from = v.collection_size()
        dim, dim_from = v.fact("dimension")
        dim = as_int(dim)
        if n is None or dim is None:
            what = " and ".join(w for w, x in (("num_vectors", n), ("dimension", dim)) if x is None)
            yield _not_checked("5.1.1", v, f"the dataset scale ({what})",
                               f"{v.missing_summary() if v.summary is None else 'summary.json records none'}; "
                               "config.json, the metadata, result_verdict.json and the load leaf record none either")
            continue
        scales, source = scale_table(v.checker)
        if scales is None:
            if v.leaf.workload_dir not in told:
                told.add(v.leaf.workload_dir)
                yield finding("5.1.1", INFO, v.leaf.workload_dir, f"the VDB scale table is not defined; {n:,} x {dim} not judged")
            continue
        if (n, dim) not in scales:
            named = ", ".join(f"{a:,} x {b}" for a, b in scales)
            yield finding("5.1.1", INVALID, v.rec.summary_path if v.summary is not None else v.path,
                          f"{n:,} vectors ({n_from}) x {dim} dimensions ({dim_from}) is not a defined scale ({named}; {source})")


@rule("5.1.2", "vdbDimensionConsistency")
def dimension_consistency(pkg: Package) -> Iterable[Finding]:
    """Each run's dimension equals the dimension its datagen (load) leaf recorded."""
    for run in _leaves(pkg, "run"):
        dim, dim_from = run.fact("dimension")
        dim = as_int(dim)
        if dim is None:
            yield _not_checked("5.1.2", run, "the run's dimension",
                               f"{run.missing_summary() if run.summary is None else 'summary.json records none'}; "
                               "config.json and the metadata record none either")
            continue
        gens, problem = _datagen_for(pkg, run)
        if problem:
            yield finding("5.1.2", INVALID, run.path, f"no load summary to compare the dimension with: {problem}")
            continue
        loaded = {}
        for gen in gens:
            value, where = gen.fact("dimension")
            if as_int(value) is None:
                yield _not_checked("5.1.2", gen, "the load dimension",
                                   f"{gen.missing_summary() if gen.summary is None else 'summary.json records none'}; "
                                   "the metadata records none either")
                continue
            loaded[gen.path.name] = (as_int(value), where)
        if loaded and dim not in {d for d, _ in loaded.values()}:
            shown = ", ".join(f"{name}: {d} ({w})" for name, (d, w) in sorted(loaded.items()))
            yield finding("5.1.2", INVALID, run.rec.summary_path if run.summary is not None else run.path,
                          f"the run queried {dim}-dimensional vectors ({dim_from}); the load recorded {shown}")


# --- 5.2 load ------------------------------------------------------------------------------

@rule("5.2.1", "vdbCollectionPopulated")
def collection_populated(pkg: Package) -> Iterable[Finding]:
    """Datagen inserted exactly num_vectors vectors (and a run's collection held them). Only a
    recorded shortfall fails (the rule fails "on a shortfall"); an unrecorded count is a WARNING."""
    for v in _leaves(pkg):
        summary = v.summary
        if v.leaf.command == "datagen":
            inserted, declared = as_int(dig(summary, "inserted_vectors")), as_int(dig(summary, "num_vectors"))
            if declared is None:
                declared = as_int(v.fact("num_vectors")[0])
            if inserted is None or declared is None:
                why = v.missing_summary() if summary is None else "the load summary records no inserted_vectors or no num_vectors"
                yield _not_checked("5.2.1", v, "the inserted vector count", why)
                continue
            what, path = "inserted", v.rec.summary_path
        else:
            inserted, held_from = v.collection_size()
            declared, _ = _declared(pkg, v)
            if inserted is None or declared is None:
                continue  # a run need not restate the load; the datagen leaf is judged above
            what = "the collection the run queried held" + ("" if held_from.startswith("summary") else f" ({held_from})")
            path = v.rec.summary_path if held_from.startswith("summary") else v.path / "result_verdict.json"
        if inserted != declared:
            short = "a shortfall" if inserted < declared else "more than declared"
            yield finding("5.2.1", INVALID, path, f"{what} {inserted:,} vectors; num_vectors is {declared:,} ({short})")


LOAD_LINE = re.compile(r"\b(?:insert(?:ed|ing)?|flush(?:ed|ing)?|load(?:ed|ing)?)\b.*\bvectors?\b|\bvectors?\b.*\b(?:insert(?:ed)?|flush(?:ed)?)\b",
                       re.IGNORECASE)
NOT_DONE = re.compile(r"\b(?:wait(?:ing)?|until|request(?:ed|ing)?|issu(?:ed|ing)|creat(?:e|ed|ing)|start(?:ed|ing)?|begin|will)\b",
                      re.IGNORECASE)


def _log_build_done(text: str) -> bool:
    """A completion line of the index build that comes after the last load record: a line
    printed when the build was requested (upstream creates the index on the empty collection
    first) or one followed by more inserts is no evidence that the loaded data was indexed."""
    last_load, done = -1, -1
    for number, line in enumerate(text.splitlines()):
        if INDEX_DONE.search(line) and not NOT_DONE.search(line):
            done = number
        elif LOAD_LINE.search(line):
            last_load = number
    return done > last_load


def _when(value: Any):
    from datetime import datetime

    try:
        return datetime.fromisoformat(str(value)) if value else None
    except ValueError:
        return None


def _build_record(gen: Vdb) -> str | None:
    """Why the load output shows no completed index build of the loaded data, or None."""
    build = dig(gen.summary, "index_build")
    if isinstance(build, dict):
        state = str(build.get("state", "")).lower()
        indexed, total = as_int(build.get("indexed_rows")), as_int(build.get("total_rows"))
        pending = as_int(build.get("pending_index_rows"))
        inserted = as_int(dig(gen.summary, "inserted_vectors"))
        if state and state not in ("finished", "completed", "done"):
            return f"the index build ended in state {build.get('state')!r}"
        if pending:
            return f"{pending:,} rows were still pending indexing"
        if indexed is not None and total is not None and indexed < total:
            return f"{indexed:,} of {total:,} rows were indexed"
        if inserted is not None and (indexed if indexed is not None else total) is not None \
                and (indexed if indexed is not None else total) < inserted:
            return (f"the index-build record covers {(indexed if indexed is not None else total):,} rows but {inserted:,} "
                    "were loaded: it predates the load and shows no build of the loaded data")
        load_end, build_end = _when(dig(gen.summary, "load", "end")), _when(build.get("end") or build.get("served_ready"))
        if load_end and build_end and build_end < load_end:
            return f"the index build ended ({build_end.isoformat()}) before the load did ({load_end.isoformat()})"
        return None
    read, absent = [], []
    for name, kind, path in entries(gen.path):
        if kind == FILE and name.endswith(".log"):
            text, _ = read_text(path, LOG_LIMIT)
            if text and _log_build_done(text):
                return None
            read.append(name)
    absent = [name for name, present in gen.named_outputs() if not present]
    where = "no summary.json index_build" if gen.summary is None else "summary.json has no index_build"
    logs = f"{', '.join(read)} hold{'s' if len(read) == 1 else ''} no completion line after the load" if read else "no log in the leaf"
    gone = f"; {', '.join(absent)}, named in the metadata, {'is' if len(absent) == 1 else 'are'} absent" if absent else ""
    return f"the load output holds no index-build record of the loaded data ({where}; {logs}{gone})"


def _compaction(gen: Vdb) -> str | None:
    configured = gen.param("workflow", "compact")
    recorded = dig(gen.summary, "compaction")
    requested = configured is True or (isinstance(recorded, dict) and recorded.get("requested") is True)
    if not requested:
        return None
    state = str(dig(recorded, "state") or "").lower()
    if state not in ("completed", "finished", "done"):
        return f"compaction was configured but the load records it as {dig(recorded, 'state')!r}"
    return None


@rule("5.2.2", "vdbIndexBuildCompleted")
def index_build(pkg: Package) -> Iterable[Finding]:
    """The load output records a completed index build of the loaded data (and compaction when
    configured), of the run's index type. The rule makes the record itself mandatory ("must
    confirm an index-build / compaction record is present in the load output"): none is INVALID."""
    for gen in _leaves(pkg, "datagen"):
        for problem in (_build_record(gen), _compaction(gen)):
            if problem:
                yield finding("5.2.2", INVALID, gen.rec.summary_path if gen.summary is not None else gen.path, problem)
    for run in _leaves(pkg, "run"):
        kind, _ = run.index_type()
        before = dig(run.summary, "served_by", "before")
        if isinstance(before, dict) and before.get("served_by_named_index") is False:
            yield finding("5.2.2", INVALID, run.rec.summary_path, f"{before.get('rows_brute_force')} rows were not served by the "
                                                                 "index when the queries began: the collection was not fully indexed")
        if kind is None:
            continue  # 5.6.3 reports a run that records no index type
        gens, problem = _datagen_for(pkg, run)
        if problem:
            continue  # 5.1.2 reports the missing pairing
        loaded = {g.path.name: g.index_type() for g in gens}
        loaded = {name: found for name, found in loaded.items() if found[0] is not None}
        if loaded and kind not in {t for t, _ in loaded.values()}:
            shown = ", ".join(f"{n}: {t} ({w})" for n, (t, w) in sorted(loaded.items()))
            yield finding("5.2.2", INVALID, run.rec.summary_path if run.summary is not None else run.path,
                          f"the run used index type {kind}; the load built {shown}")


# --- 5.3 runs ------------------------------------------------------------------------------

@rule("5.3.1", "vdbRunCount")
def run_count(pkg: Package) -> Iterable[Finding]:
    """Each <INDEX>/run/ holds exactly five timestamp directories, each with a summary.json."""
    for workload, runs in sorted(_by_workload(_leaves(pkg, "run")).items()):
        expected = int(runs[0].checker["runs_per_result"][FAMILY])
        if len(runs) != expected:
            yield finding("5.3.1", INVALID, workload / "run", f"{len(runs)} run timestamp directories; exactly {expected} required")
        for v in runs:
            summaries = [(n, k) for n, k, _ in entries(v.path) if n == "summary.json"]
            if not summaries:
                yield finding("5.3.1", INVALID, v.path, "no summary.json")
            elif summaries[0][1] != FILE:
                yield finding("5.3.1", INVALID, v.path / "summary.json", f"summary.json is a {summaries[0][1]}, not a file")
            elif v.summary is None:
                yield finding("5.3.1", INVALID, v.path / "summary.json", f"the run's summary cannot be read: {v.summary_problem}")


def _recall(v: Vdb) -> tuple[Any, str]:
    for key in ("recall", "mean_recall"):
        if dig(v.summary, key) is not None and not isinstance(dig(v.summary, key), dict):
            return dig(v.summary, key), f"summary.json {key}"
    for key in ("recall_stats", "recall"):
        if dig(v.summary, key, "mean_recall") is not None:
            return dig(v.summary, key, "mean_recall"), f"summary.json {key}.mean_recall"
    per_backend = [d / "recall_stats.json" for _, kind, d in entries(v.path / "vectordb") if kind == DIR]
    for path in [v.path / "recall_stats.json", *per_backend]:
        if real_file(path):
            data, problem = load_json(path)
            if problem:
                return None, problem
            value = dig(data, "mean_recall")
            if value is not None:
                return value, f"{path.relative_to(v.path)} mean_recall"
    native, native_from = v.native
    if v.summary is None and dig(native, "recall", "mean_recall") is not None:
        return dig(native, "recall", "mean_recall"), f"{native_from} recall.mean_recall"
    return None, "nowhere"


@rule("5.3.2", "vdbRecallReported")
def recall_reported(pkg: Package) -> Iterable[Finding]:
    """Each run reports a recall in [0, 1] above zero; the minimum-recall table is not defined (INFO)."""
    for workload, runs in sorted(_by_workload(_leaves(pkg, "run")).items()):
        seen = []
        target = runs[0].checker.get("vdb_min_recall")
        for v in runs:
            value, where = _recall(v)
            recall = _number(value)
            if recall is None:
                if v.summary is None and where == "nowhere":
                    yield _not_checked("5.3.2", v, "the recall", f"{v.missing_summary()}; no recall_stats.json or statistics.json")
                    continue
                why = where if where != "nowhere" else (v.summary_problem or "summary.json and recall_stats.json report no recall")
                yield finding("5.3.2", INVALID, v.rec.summary_path, f"no recall reported: {why}")
                continue
            if not 0.0 < recall <= 1.0:
                yield finding("5.3.2", INVALID, v.rec.summary_path, f"recall {recall:g} ({where}) is not in (0, 1]: "
                                                                   "the measurement failed (a zero recall meets no target)")
                continue
            seen.append(recall)
            if isinstance(target, (int, float)) and recall < target:
                yield finding("5.3.2", INVALID, v.rec.summary_path, f"recall {recall:.4f} is below the minimum {target}")
        if seen and not isinstance(target, (int, float)):
            yield finding("5.3.2", INFO, workload, f"the minimum-recall target table is not defined for this edition; "
                                                   f"recall {min(seen):.6g} to {max(seen):.6g} reported, not judged")


def _run_record(v: Vdb) -> tuple[dict | None, str]:
    """The run's query figures: summary.json, else (no readable summary, reported under 5.3.1)
    the engine's native statistics.json that summary.json is a copy of."""
    if v.summary is not None:
        return v.summary, "summary.json"
    native, native_from = v.native
    return (native, native_from) if native is not None else (None, "nowhere")


def _issued(v: Vdb) -> tuple[int | None, str]:
    record, source = _run_record(v)
    for key in ("query_count", "total_queries"):
        count = as_int(dig(record, key))
        if count is not None:
            return count, f"{source} {key}"
    qps, seconds = _number(dig(record, "throughput_qps")), _number(dig(record, "total_time_seconds"))
    if qps is not None and seconds is not None:
        return round(qps * seconds), f"{source} throughput_qps x total_time_seconds"
    return None, "nowhere"


@rule("5.3.3", "vdbQueryCountMinimum")
def query_count(pkg: Package) -> Iterable[Finding]:
    """Each run issued its queries (all of --queries in query_count mode); the benchmark minimum is not defined (INFO)."""
    for workload, runs in sorted(_by_workload(_leaves(pkg, "run")).items()):
        minimum = as_int(runs[0].checker.get("vdb_min_queries"))
        counts = []
        for v in runs:
            issued, where = _issued(v)
            if issued is None:
                if v.summary is None:
                    yield _not_checked("5.3.3", v, "the issued queries", f"{v.missing_summary()}; no statistics.json")
                else:
                    yield finding("5.3.3", INVALID, v.rec.summary_path, "cannot check the issued queries: summary.json records "
                                  "no query_count, total_queries or throughput_qps x total_time_seconds")
                continue
            counts.append(issued)
            path = v.rec.summary_path if v.summary is not None else v.path
            mode = dig(v.summary, "mode") or v.param("run", "mode") or dig(v.meta, "args", "benchmark_mode")
            requested = as_int(dig(v.summary, "queries_requested")) or as_int(v.param("run", "queries")) \
                or as_int(dig(v.meta, "args", "queries"))
            if mode == "query_count" and requested is not None and issued < requested:
                yield finding("5.3.3", INVALID, path, f"{issued:,} queries issued ({where}); --queries asked for {requested:,}")
            if minimum is not None and issued < minimum:
                yield finding("5.3.3", INVALID, path, f"{issued:,} queries issued, fewer than the minimum {minimum:,}")
        if counts and minimum is None:
            yield finding("5.3.3", INFO, workload, f"the minimum-query table is not defined for this edition; "
                                                   f"{min(counts):,} to {max(counts):,} queries issued, not judged")


@rule("5.3.4", "vdbMetricsReported")
def metrics_reported(pkg: Package) -> Iterable[Finding]:
    """Each run's summary.json reports throughput_qps and the mean/p95/p99/p999 latencies; a run
    whose summary.json is missing (5.3.1) is read from its native statistics.json."""
    for v in _leaves(pkg, "run"):
        record, source = _run_record(v)
        if record is None:
            yield _not_checked("5.3.4", v, "the reported metrics", f"{v.missing_summary()}; no statistics.json")
            continue
        missing = [k for k in METRIC_KEYS if _number(record.get(k)) is None]
        if missing:
            path = v.rec.summary_path if v.summary is not None else v.path / source
            yield finding("5.3.4", INVALID, path, f"{source} does not report {', '.join(missing)}")


@rule("5.3.5", "vdbGroundTruthIntegrity")
def ground_truth(pkg: Package) -> Iterable[Finding]:
    """Each run's recall was scored against ground truth covering every vector of the dataset.
    A failed or partial ground truth is INVALID; a run that records none is a WARNING (the rule
    fails "a run whose ground truth failed to build, or that covers fewer than all" vectors)."""
    for v in _leaves(pkg, "run"):
        evidence = False
        verdict_path = v.path / "result_verdict.json"
        if kind_of(verdict_path) is not None:
            verdict, problem = load_json(verdict_path)
            flat = dig(verdict, "flat_setup")
            if problem or not isinstance(flat, dict):
                yield finding("5.3.5", INVALID, verdict_path, problem or "result_verdict.json has no flat_setup record")
            else:
                evidence = True
                coverage = _number(flat.get("coverage"))
                if flat.get("ok") is not True:
                    yield finding("5.3.5", INVALID, verdict_path, f"the ground truth failed to build: {flat.get('reason')!r}")
                elif coverage is None or coverage < 1.0:
                    yield finding("5.3.5", INVALID, verdict_path, f"the ground truth covers {coverage!r} of the dataset, not all of it")
        gt = dig(v.summary, "ground_truth")
        if isinstance(gt, dict):
            evidence = True
            n = as_int(dig(v.summary, "num_vectors"))
            covered = as_int(gt.get("vectors_covered"))
            coverage = _number(gt.get("coverage"))
            duplicates = as_int(gt.get("duplicate_ids")) or 0
            problems = []
            if coverage is not None and coverage < 1.0:
                problems.append(f"coverage {coverage:g}")
            if covered is not None and n is not None and covered < n:
                problems.append(f"{covered:,} of {n:,} vectors")
            if duplicates:
                problems.append(f"{duplicates:,} duplicate ids")
            if problems:
                yield finding("5.3.5", INVALID, v.rec.summary_path,
                    f"the ground truth does not cover the dataset exactly: {', '.join(problems)}")
        if not evidence:
            yield _not_checked("5.3.5", v, "the ground truth's coverage",
                               "no result_verdict.json flat_setup and no summary.json ground_truth")


# --- 5.4 / 5.5 storage ----------------------------------------------------------------------

def _api(pkg: Package, v: Vdb) -> str | None:
    sut, problem, _ = system_description(pkg, v.division, v.leaf.org, v.leaf.system)
    return None if problem else dig(sut, "solution", "architecture", "benchmark_API")


def _apart(a: str, b: str) -> bool:
    pa, pb = PurePosixPath(a), PurePosixPath(b)
    return not (pa == pb or pa in pb.parents or pb in pa.parents)


@rule("5.4.1", "vdbPathArgs")
def path_args(pkg: Package) -> Iterable[Finding]:
    """File-API leaves record a storage root and a results directory, and they are apart."""
    for v in _leaves(pkg):
        if _api(pkg, v) == "object":
            continue  # 5.5.1 validates the backend instead
        if v.parameters[0] is None and v.meta is None:
            # the missing metadata is reported once, under LEAF-01 / 1.1
            yield _not_checked("5.4.1", v, "the storage root and results directory", v.evidence_problem())
            continue
        root = v.param("storage", "storage_root") or dig(v.meta, "args", "data_dir")
        results = dig(v.meta, "args", "results_dir") or dig(v.meta, "result_dir")
        if not root:
            yield finding("5.4.1", INVALID, v.path, "no storage root recorded (--storage-root, storage.storage_root)")
        if not results:
            yield finding("5.4.1", INVALID, v.rec.meta_path, "no results directory recorded (--results-dir)")
        if root and results and not _apart(str(root), str(results)):
            yield finding("5.4.1", INVALID, v.path, f"the storage root {root} and the results directory {results} are not different directories")


def _df_entries(text: str) -> dict[str, dict[str, str]]:
    """{label: {path, filesystem, mount}} from the tool's 'df <label>: <path>' log records, each
    followed by df's header and one data row (with or without the Type column)."""
    found: dict[str, dict[str, str]] = {}
    current, typed = None, False
    for line in text.splitlines():
        match = DF_LINE.search(line)
        if match:
            current = match.group("label").strip()
            found[current] = {"path": match.group("path").strip()}
            continue
        if current is None:
            continue
        if DF_HEADER.search(line):
            typed = " Type " in line
            continue
        fields = line.split()
        use = next((i for i, f in enumerate(fields) if re.fullmatch(r"\d+%|-", f) and i >= 4
                    and all(x.isdigit() for x in fields[i - 3:i])), None)
        if use is not None and use + 1 < len(fields):
            found[current].update(filesystem=fields[use - (5 if typed else 4)], mount=" ".join(fields[use + 1:]))
            current = None
    return found


def _df_from_log(v: Vdb) -> tuple[tuple[dict, dict] | None, str]:
    for name, kind, path in entries(v.path):
        if kind != FILE or not (name.endswith(".log")):
            continue
        text, _ = read_text(path, LOG_LIMIT)
        records = _df_entries(text or "")
        data = next((r for label, r in records.items() if "data" in label or "storage" in label), None)
        logs = next((r for label, r in records.items() if "result" in label or "log" in label), None)
        if data and logs and "mount" in data and "mount" in logs:
            return (data, logs), name
    return None, ""


@rule("5.4.2", "vdbFilesystemCheck")
def filesystem_check(pkg: Package) -> Iterable[Finding]:
    """The leaf's log holds a df of the data directory and of the results directory, on different filesystems."""
    for v in _leaves(pkg):
        if _api(pkg, v) == "object":
            continue
        found, log = _df_from_log(v)
        if found:
            data, logs = found
            if (data.get("filesystem"), data["mount"]) == (logs.get("filesystem"), logs["mount"]):
                yield finding("5.4.2", INVALID, v.path / log, f"the data directory {data['path']} and the results directory "
                                                              f"{logs['path']} are on one filesystem ({data['mount']})")
            continue
        fs = dig(v.summary, "filesystems")
        if isinstance(fs, dict) and isinstance(fs.get("data"), dict) and isinstance(fs.get("results"), dict):
            if fs.get("same_filesystem") is not False:
                yield finding("5.4.2", INVALID, v.rec.summary_path, "summary.json's df records put the data and the results on one filesystem")
            continue
        recorded, problem = v.rec.fs_separation
        if recorded is not None:
            if recorded.get("same_filesystem") is not False:
                yield finding("5.4.2", INVALID, v.path / "fs_separation.json", "fs_separation.json shows the data and results on one filesystem")
            continue
        why = "" if problem == "missing" else f": {problem}"
        logs = [n for n, k, _ in entries(v.path) if k == FILE and n.endswith(".log")]
        absent = [n for n, present in v.named_outputs() if not present]
        read = f"read {', '.join(logs)}" if logs else "the leaf holds no log"
        gone = f"; {', '.join(absent)}, named in the metadata, {'is' if len(absent) == 1 else 'are'} absent" if absent else ""
        yield finding("5.4.2", INVALID, v.path, "no df of the data directory and the results directory in the leaf's log "
                                                f"(nor a filesystem record in summary.json or fs_separation.json{why}; {read}{gone})")


def _is_object(value: Any) -> bool:
    return isinstance(value, str) and any(t in value.lower() for t in OBJECT_TYPES)


@rule("5.5.1", "vdbObjectStorageBackend")
def object_backend(pkg: Package) -> Iterable[Finding]:
    """An object-API system records an S3-compatible backend; each leaf's storage type agrees with the declared API."""
    told: set[tuple[str, str, str]] = set()
    for v in _leaves(pkg):
        sut, problem, sys_path = system_description(pkg, v.division, v.leaf.org, v.leaf.system)
        if problem:
            continue  # 2.1.7 / 2.1.8 report the description
        api = dig(sut, "solution", "architecture", "benchmark_API")
        storage_type, _ = v.value("storage_type", "storage", "storage_type")
        key = (v.division, v.leaf.org, v.leaf.system)
        if api == "object":
            architecture = dig(sut, "solution", "architecture") or {}
            backend = dig(sut, "solution", "storage_backend") or architecture.get("storage_backend")
            product = architecture.get("product_API")
            if key not in told and not (_is_object(backend) or product == "object"):
                told.add(key)
                yield finding("5.5.1", INVALID, sys_path, f"the object-API system records no S3-compatible storage backend "
                                                          f"(solution.architecture.product_API is {product!r}, no storage_backend)")
            if storage_type is not None and not _is_object(storage_type):
                yield finding("5.5.1", INVALID, v.path, f"storage.storage_type {storage_type!r} is not object storage, "
                                                        "but the system declares the object API")
        elif api == "file" and _is_object(storage_type):
            yield finding("5.5.1", INVALID, v.path, f"storage.storage_type {storage_type!r} is object storage, but the system "
                                                    "declares the file API")


# --- 5.6 CLOSED / OPEN --------------------------------------------------------------------

@rule("5.6.2", "vdbClosedDatabaseBackend")
def closed_backend(pkg: Package) -> Iterable[Finding]:
    """CLOSED leaves record database.database milvus, under vector_database/milvus/."""
    for v in _leaves(pkg):
        if v.division != "closed":
            continue
        allowed = sorted(sanctioned(pkg, v.division, v.leaf.org, FAMILY))
        database, where = v.database()
        if database is None:
            yield _cannot("5.6.2", v, "the database backend", v.summary_problem or "summary.json and config.json record no database.database")
            continue
        if database not in allowed:
            yield finding("5.6.2", INVALID, v.rec.summary_path, f"database {database!r} ({where}); CLOSED runs {', '.join(allowed)}")
        elif v.engine != database:
            yield finding("5.6.2", INVALID, v.path, f"the leaf is under vector_database/{v.engine}/ but records database {database!r}")


@rule("5.6.3", "vdbClosedIndexTypes")
def closed_index_types(pkg: Package) -> Iterable[Finding]:
    """CLOSED leaves record, and sit under, one of the CLOSED index types (DISKANN, HNSW, AISAQ)."""
    allowed = tables.workloads()[FAMILY]["index_types"]["closed"]
    for v in _leaves(pkg):
        if v.division != "closed":
            continue
        if v.index_dir not in allowed:
            yield finding("5.6.3", INVALID, v.leaf.workload_dir,
                f"index directory {v.index_dir!r} is not a CLOSED index type ({', '.join(allowed)})")
        kind, where = v.index_type()
        if kind is None:
            why = v.missing_summary() if v.summary is None else "summary.json records no index_type"
            yield _not_checked("5.6.3", v, "the index type", f"{why}; config.json and the metadata record none either")
        elif kind not in allowed:
            yield finding("5.6.3", INVALID, v.rec.summary_path,
                f"index_type {kind!r} ({where}) is not a CLOSED index type ({', '.join(allowed)})")
        elif kind != v.index_dir:
            yield finding("5.6.3", INVALID, v.rec.summary_path, f"index_type {kind!r} ({where}) differs from its directory {v.index_dir!r}")


def _overrides(v: Vdb) -> dict:
    value = dig(v.meta, "override_parameters")
    return value if isinstance(value, dict) else {}


@rule("5.6.4", "vdbClosedSubmissionParameters")
def closed_parameters(pkg: Package) -> Iterable[Finding]:
    """CLOSED leaves change only the CLOSED tunables; the OPEN-only settings keep their CLOSED values."""
    allowed = tables.param_allowlist(FAMILY, "closed") | tables.tool_injected_params(FAMILY)
    for v in _leaves(pkg):
        if v.division != "closed":
            continue
        params, where = v.parameters
        if v.config[1]:
            yield finding("5.6.4", INVALID, v.path / "config.json", f"cannot read the run's parameters: {v.config[1]}")
        if params is None and v.meta is None:
            if not v.config[1]:  # a broken config.json is reported above; a missing metadata under LEAF-01 / 1.1
                yield _not_checked("5.6.4", v, "the parameters", v.evidence_problem())
            continue
        for key in sorted(k for k in _overrides(v) if k not in allowed):
            yield finding("5.6.4", INVALID, v.rec.meta_path, f"{key} is not a CLOSED tunable (--params {key}={_overrides(v)[key]})")
        flat = flatten(params) if params else {}
        for key, fixed in sorted(v.checker.get("vdb_closed_fixed", {}).items()):
            value = flat.get(key)
            if value is not None and canonical(value) != canonical(fixed):
                yield finding("5.6.4", INVALID, v.path, f"{key} = {value!r} ({where}) is an OPEN setting; CLOSED runs with {fixed!r}")
        verdict = dig(v.meta, "verification")
        if isinstance(verdict, str) and verdict.upper() not in ("CLOSED",):
            yield finding("5.6.4", INVALID, v.rec.meta_path, f"the tool judged this run {verdict}, not CLOSED")


@rule("5.6.5", "vdbOpenSubmissionParameters")
def open_parameters(pkg: Package) -> Iterable[Finding]:
    """OPEN leaves record a supported backend and change only CLOSED, OPEN or backend-native index parameters."""
    allowed = tables.param_allowlist(FAMILY, "open") | tables.tool_injected_params(FAMILY)
    milvus_types = tables.workloads()[FAMILY]["index_types"]["open"]
    for v in _leaves(pkg):
        if v.division != "open":
            continue
        backends = v.checker.get("vdb_open_backends") or sorted(sanctioned(pkg, v.division, v.leaf.org, FAMILY))
        database, where = v.database()
        if database is None:
            yield _cannot("5.6.5", v, "the database backend", v.summary_problem or "summary.json and config.json record no database.database")
        elif database not in backends:
            yield finding("5.6.5", INVALID, v.rec.summary_path,
                f"database {database!r} ({where}) is not a supported backend ({', '.join(backends)})")
        elif v.engine != database:
            yield finding("5.6.5", INVALID, v.path, f"the leaf is under vector_database/{v.engine}/ but records database {database!r}")
        kind, _ = v.index_type()
        if database == "milvus" and kind is not None and kind not in milvus_types:
            yield finding("5.6.5", INVALID, v.rec.summary_path, f"index_type {kind!r} is not a Milvus index type ({', '.join(milvus_types)})")
        for key in sorted(k for k in _overrides(v) if k not in allowed and not k.startswith("index.")):
            yield finding("5.6.5", INVALID, v.rec.meta_path,
                f"{key} is neither a CLOSED nor an OPEN tunable (--params {key}={_overrides(v)[key]})")
