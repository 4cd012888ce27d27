"""Section 5: vector database workloads, the data and the runs (Rules 5.1.1-5.3.5; 5.4-5.6 are in
rules_vdb_backends, 5.6.1 in rules_common).

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

import re
from pathlib import Path
from typing import Any, Iterable

from mlpstorage_py.results.tree.files import DIR, FILE, entries, kind_of, load_json, read_text, real_file
from mlpstorage_py.results.tree.package import Package
from mlpstorage_py.checker.registry import INFO, INVALID, Finding, finding, rule
from mlpstorage_py.checker.structure_helpers import as_int, dig
from mlpstorage_py.checker.vdb_leaves import (
    FAMILY, INDEX_DONE, LOG_LIMIT, METRIC_KEYS, Vdb, scale_table, _by_workload, _datagen_for, _declared,
    _leaves, _not_checked, _number)


@rule("5.1.1", "vdbDatasetScale", parts=True)
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


@rule("5.1.2", "vdbDimensionConsistency", parts=True)
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

@rule("5.2.1", "vdbCollectionPopulated", parts=True)
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


@rule("5.2.2", "vdbIndexBuildCompleted", parts=True)
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

@rule("5.3.1", "vdbRunCount", parts=True)
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


@rule("5.3.2", "vdbRecallReported", parts=True)
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


@rule("5.3.3", "vdbQueryCountMinimum", parts=True)
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


@rule("5.3.4", "vdbMetricsReported", parts=True)
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


@rule("5.3.5", "vdbGroundTruthIntegrity", parts=True)
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

