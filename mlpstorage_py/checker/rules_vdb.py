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

A rule that pairs a run with its load, or counts a result's runs, judges the result
(<engine>/<INDEX>/); the others judge one leaf.

Numbers come from the edition's checker block (runs_per_result, vdb_closed_fixed,
vdb_open_backends), rules/params.yaml, rules/workloads.yaml and configs/vectordb/default.yaml
(the scale table of 5.1.1). Rules 5.3.2 and 5.3.3 name a minimum recall and a minimum query
count that no table defines: they are reported as INFO, never invented.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from mlpstorage_py.checker.judging import checker_block
from mlpstorage_py.checker.registry import LEAF, RESULT, Finding, Rule, rule
from mlpstorage_py.results.tree.files import DIR, FILE, entries, kind_of, load_json, read_text, real_file
from mlpstorage_py.results.tree.package import Leaf, Result
from mlpstorage_py.results.tree.values import as_int, dig
from mlpstorage_py.results.vdb import (
    FAMILY,
    INDEX_DONE,
    LOG_LIMIT,
    METRIC_KEYS,
    collection_size,
    datagen_for,
    declared,
    fact,
    index_type,
    missing_summary,
    named_outputs,
    native,
    number,
    param,
)
from mlpstorage_py.rules import predicates

# --- which leaves are judged, and the findings the rules share (the leaf model is results/vdb) ---

def phase(result: Result, command: str) -> list[Leaf]:
    """A result's leaves of one phase, none when its edition is not checkable. Section 5 filters on
    the edition alone: a result's model is its index type, which 5.6.3 judges, and its engine
    directory is 5.6.2's and 5.6.5's to judge."""
    return result.phase(command) if checker_block(result) else []


def cannot(r: Rule, leaf: Leaf, what: str, why: str | None = None) -> Finding:
    why = why or leaf.problem("summary") or "not recorded"
    path = leaf.path_of("summary") if "summary" in why else leaf.path
    return r.invalid(path, f"cannot check {what}: {why}")


def not_checked(r: Rule, leaf: Leaf, what: str, why: str, path: Path | None = None) -> Finding:
    """Missing evidence is not evidence of failure: a WARNING that names what is absent."""
    return r.warning(path or leaf.path, f"not checked: no file records {what} ({why})")


def scale_table(block: dict[str, Any]) -> tuple[list[tuple[int, int]] | None, str]:
    """(num_vectors, dimension) pairs of 5.1.1's table, as the CLOSED run's gate reads them."""
    return predicates.vdb_scales(block)


@rule("5.1.1", "vdbDatasetScale").check(RESULT, benchmark=FAMILY)
def dataset_scale(r: Rule, result: Result) -> Iterable[Finding]:
    """Each run's num_vectors x dimension is one of the defined scales (read from summary.json,
    config.json, the metadata, result_verdict.json's collection total or the paired load)."""
    told = False
    gens = phase(result, "datagen")
    for run in phase(result, "run"):
        n, n_from = declared(gens, run)
        if n is None:
            n, n_from = collection_size(run)
        dim, dim_from = fact(run, "dimension")
        dim = as_int(dim)
        if n is None or dim is None:
            what = " and ".join(w for w, x in (("num_vectors", n), ("dimension", dim)) if x is None)
            yield not_checked(r, run, f"the dataset scale ({what})",
                              f"{missing_summary(run) if run.summary is None else 'summary.json records none'}; "
                              "config.json, the metadata, result_verdict.json and the load leaf record none either")
            continue
        scales, source = scale_table(checker_block(run))
        if scales is None:
            if not told:
                told = True
                yield r.info(result.path, f"the VDB scale table is not defined; {n:,} x {dim} not judged")
            continue
        if (n, dim) not in scales:
            named = ", ".join(f"{a:,} x {b}" for a, b in scales)
            yield r.invalid(run.path_of("summary") if run.summary is not None else run.path,
                            f"{n:,} vectors ({n_from}) x {dim} dimensions ({dim_from}) is not a defined scale ({named}; {source})")


@rule("5.1.2", "vdbDimensionConsistency").check(RESULT, benchmark=FAMILY)
def dimension_consistency(r: Rule, result: Result) -> Iterable[Finding]:
    """Each run's dimension equals the dimension its datagen (load) leaf recorded."""
    all_gens = phase(result, "datagen")
    for run in phase(result, "run"):
        dim, dim_from = fact(run, "dimension")
        dim = as_int(dim)
        if dim is None:
            yield not_checked(r, run, "the run's dimension",
                              f"{missing_summary(run) if run.summary is None else 'summary.json records none'}; "
                              "config.json and the metadata record none either")
            continue
        gens, problem = datagen_for(all_gens, run)
        if problem:
            yield r.invalid(run.path, f"no load summary to compare the dimension with: {problem}")
            continue
        loaded = {}
        for gen in gens:
            found, where = fact(gen, "dimension")
            if as_int(found) is None:
                yield not_checked(r, gen, "the load dimension",
                                  f"{missing_summary(gen) if gen.summary is None else 'summary.json records none'}; "
                                  "the metadata records none either")
                continue
            loaded[gen.path.name] = (as_int(found), where)
        if loaded and dim not in {d for d, _ in loaded.values()}:
            shown = ", ".join(f"{name}: {d} ({w})" for name, (d, w) in sorted(loaded.items()))
            yield r.invalid(run.path_of("summary") if run.summary is not None else run.path,
                            f"the run queried {dim}-dimensional vectors ({dim_from}); the load recorded {shown}")


# --- 5.2 load ------------------------------------------------------------------------------

@rule("5.2.1", "vdbCollectionPopulated").check(RESULT, benchmark=FAMILY)
def collection_populated(r: Rule, result: Result) -> Iterable[Finding]:
    """Datagen inserted exactly num_vectors vectors (and a run's collection held them). Only a
    recorded shortfall fails (the rule fails "on a shortfall"); an unrecorded count is a WARNING."""
    gens = phase(result, "datagen")
    for leaf in phase(result, "datagen") + phase(result, "run"):
        summary = leaf.summary
        if leaf.command == "datagen":
            inserted, want = as_int(dig(summary, "inserted_vectors")), as_int(dig(summary, "num_vectors"))
            if want is None:
                want = as_int(fact(leaf, "num_vectors")[0])
            if inserted is None or want is None:
                why = missing_summary(leaf) if summary is None else "the load summary records no inserted_vectors or no num_vectors"
                yield not_checked(r, leaf, "the inserted vector count", why)
                continue
            what, path = "inserted", leaf.path_of("summary")
        else:
            inserted, held_from = collection_size(leaf)
            want, _ = declared(gens, leaf)
            if inserted is None or want is None:
                continue  # a run need not restate the load; the datagen leaf is judged above
            what = "the collection the run queried held" + ("" if held_from.startswith("summary") else f" ({held_from})")
            path = leaf.path_of("summary") if held_from.startswith("summary") else leaf.path / "result_verdict.json"
        if inserted != want:
            short = "a shortfall" if inserted < want else "more than declared"
            yield r.invalid(path, f"{what} {inserted:,} vectors; num_vectors is {want:,} ({short})")


LOAD_LINE = re.compile(r"\b(?:insert(?:ed|ing)?|flush(?:ed|ing)?|load(?:ed|ing)?)\b.*\bvectors?\b|\bvectors?\b.*\b(?:insert(?:ed)?|flush(?:ed)?)\b",
                       re.IGNORECASE)
NOT_DONE = re.compile(r"\b(?:wait(?:ing)?|until|request(?:ed|ing)?|issu(?:ed|ing)|creat(?:e|ed|ing)|start(?:ed|ing)?|begin|will)\b",
                      re.IGNORECASE)


def _log_build_done(text: str) -> bool:
    """A completion line of the index build that comes after the last load record: a line
    printed when the build was requested (upstream creates the index on the empty collection
    first) or one followed by more inserts is no evidence that the loaded data was indexed."""
    last_load, done = -1, -1
    for line_number, line in enumerate(text.splitlines()):
        if INDEX_DONE.search(line) and not NOT_DONE.search(line):
            done = line_number
        elif LOAD_LINE.search(line):
            last_load = line_number
    return done > last_load


def _when(found: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(str(found)) if found else None
    except ValueError:
        return None


def _build_record(gen: Leaf) -> str | None:
    """Why the load output shows no completed index build of the loaded data, or None."""
    summary = gen.summary
    build = dig(summary, "index_build")
    if isinstance(build, dict):
        state = str(build.get("state", "")).lower()
        indexed, total = as_int(build.get("indexed_rows")), as_int(build.get("total_rows"))
        pending = as_int(build.get("pending_index_rows"))
        inserted = as_int(dig(summary, "inserted_vectors"))
        covered = indexed if indexed is not None else total
        if state and state not in ("finished", "completed", "done"):
            return f"the index build ended in state {build.get('state')!r}"
        if pending:
            return f"{pending:,} rows were still pending indexing"
        if indexed is not None and total is not None and indexed < total:
            return f"{indexed:,} of {total:,} rows were indexed"
        if inserted is not None and covered is not None and covered < inserted:
            return (f"the index-build record covers {covered:,} rows but {inserted:,} "
                    "were loaded: it predates the load and shows no build of the loaded data")
        load_end, build_end = _when(dig(summary, "load", "end")), _when(build.get("end") or build.get("served_ready"))
        if load_end and build_end and build_end < load_end:
            return f"the index build ended ({build_end.isoformat()}) before the load did ({load_end.isoformat()})"
        return None
    read = []
    for name, kind, path in entries(gen.path):
        if kind == FILE and name.endswith(".log"):
            text, _ = read_text(path, LOG_LIMIT)
            if text and _log_build_done(text):
                return None
            read.append(name)
    absent = [name for name, present in named_outputs(gen) if not present]
    where = "no summary.json index_build" if summary is None else "summary.json has no index_build"
    logs = f"{', '.join(read)} hold{'s' if len(read) == 1 else ''} no completion line after the load" if read else "no log in the leaf"
    gone = f"; {', '.join(absent)}, named in the metadata, {'is' if len(absent) == 1 else 'are'} absent" if absent else ""
    return f"the load output holds no index-build record of the loaded data ({where}; {logs}{gone})"


def _compaction(gen: Leaf) -> str | None:
    configured = param(gen, "workflow", "compact")
    recorded = dig(gen.summary, "compaction")
    requested = configured is True or (isinstance(recorded, dict) and recorded.get("requested") is True)
    if not requested:
        return None
    state = str(dig(recorded, "state") or "").lower()
    if state not in ("completed", "finished", "done"):
        return f"compaction was configured but the load records it as {dig(recorded, 'state')!r}"
    return None


INDEX_BUILD = rule("5.2.2", "vdbIndexBuildCompleted")


@INDEX_BUILD.check(LEAF, benchmark=FAMILY, command="datagen")
def index_build(r: Rule, gen: Leaf) -> Iterable[Finding]:
    """The load output records a completed index build of the loaded data (and compaction when
    configured), of the run's index type. The rule makes the record itself mandatory ("must
    confirm an index-build / compaction record is present in the load output"): none is INVALID."""
    if not checker_block(gen):
        return
    for problem in (_build_record(gen), _compaction(gen)):
        if problem:
            yield r.invalid(gen.path_of("summary") if gen.summary is not None else gen.path, problem)


@INDEX_BUILD.check(RESULT, benchmark=FAMILY)
def index_build_of_runs(r: Rule, result: Result) -> Iterable[Finding]:
    """A run's queries were served by the index its load built, of the type the load built."""
    all_gens = phase(result, "datagen")
    for run in phase(result, "run"):
        kind, _ = index_type(run)
        before = dig(run.summary, "served_by", "before")
        if isinstance(before, dict) and before.get("served_by_named_index") is False:
            yield r.invalid(run.path_of("summary"), f"{before.get('rows_brute_force')} rows were not served by the "
                                                    "index when the queries began: the collection was not fully indexed")
        if kind is None:
            continue  # 5.6.3 reports a run that records no index type
        gens, problem = datagen_for(all_gens, run)
        if problem:
            continue  # 5.1.2 reports the missing pairing
        loaded = {g.path.name: index_type(g) for g in gens}
        loaded = {name: found for name, found in loaded.items() if found[0] is not None}
        if loaded and kind not in {t for t, _ in loaded.values()}:
            shown = ", ".join(f"{n}: {t} ({w})" for n, (t, w) in sorted(loaded.items()))
            yield r.invalid(run.path_of("summary") if run.summary is not None else run.path,
                            f"the run used index type {kind}; the load built {shown}")


# --- 5.3 runs ------------------------------------------------------------------------------

@rule("5.3.1", "vdbRunCount").check(RESULT, benchmark=FAMILY)
def run_count(r: Rule, result: Result) -> Iterable[Finding]:
    """Each <INDEX>/run/ holds exactly five timestamp directories, each with a summary.json."""
    runs = phase(result, "run")
    if not runs:
        return
    expected = int(checker_block(result)["runs_per_result"][FAMILY])
    if len(runs) != expected:
        yield r.invalid(result.path / "run", f"{len(runs)} run timestamp directories; exactly {expected} required")
    for run in runs:
        summaries = [(n, k) for n, k, _ in entries(run.path) if n == "summary.json"]
        if not summaries:
            yield r.invalid(run.path, "no summary.json")
        elif summaries[0][1] != FILE:
            yield r.invalid(run.path / "summary.json", f"summary.json is a {summaries[0][1]}, not a file")
        elif run.summary is None:
            yield r.invalid(run.path / "summary.json", f"the run's summary cannot be read: {run.problem('summary')}")


def _recall(run: Leaf) -> tuple[Any, str]:
    summary = run.summary
    for key in ("recall", "mean_recall"):
        if dig(summary, key) is not None and not isinstance(dig(summary, key), dict):
            return dig(summary, key), f"summary.json {key}"
    for key in ("recall_stats", "recall"):
        if dig(summary, key, "mean_recall") is not None:
            return dig(summary, key, "mean_recall"), f"summary.json {key}.mean_recall"
    per_backend = [d / "recall_stats.json" for _, kind, d in entries(run.path / "vectordb") if kind == DIR]
    for path in [run.path / "recall_stats.json", *per_backend]:
        if real_file(path):
            data, problem = load_json(path)
            if problem:
                return None, problem
            found = dig(data, "mean_recall")
            if found is not None:
                return found, f"{path.relative_to(run.path)} mean_recall"
    stats, stats_from = native(run)
    if summary is None and dig(stats, "recall", "mean_recall") is not None:
        return dig(stats, "recall", "mean_recall"), f"{stats_from} recall.mean_recall"
    return None, "nowhere"


@rule("5.3.2", "vdbRecallReported").check(RESULT, benchmark=FAMILY)
def recall_reported(r: Rule, result: Result) -> Iterable[Finding]:
    """Each run reports a recall in [0, 1] above zero; the minimum-recall table is not defined (INFO)."""
    runs = phase(result, "run")
    if not runs:
        return
    seen = []
    target = checker_block(result).get("vdb_min_recall")
    for run in runs:
        found, where = _recall(run)
        recall = number(found)
        if recall is None:
            if run.summary is None and where == "nowhere":
                yield not_checked(r, run, "the recall", f"{missing_summary(run)}; no recall_stats.json or statistics.json")
                continue
            why = where if where != "nowhere" else (run.problem("summary") or "summary.json and recall_stats.json report no recall")
            yield r.invalid(run.path_of("summary"), f"no recall reported: {why}")
            continue
        if not 0.0 < recall <= 1.0:
            yield r.invalid(run.path_of("summary"), f"recall {recall:g} ({where}) is not in (0, 1]: "
                                                    "the measurement failed (a zero recall meets no target)")
            continue
        seen.append(recall)
        if isinstance(target, (int, float)) and recall < target:
            yield r.invalid(run.path_of("summary"), f"recall {recall:.4f} is below the minimum {target}")
    if seen and not isinstance(target, (int, float)):
        yield r.info(result.path, f"the minimum-recall target table is not defined for this edition; "
                                  f"recall {min(seen):.6g} to {max(seen):.6g} reported, not judged")


def _run_record(run: Leaf) -> tuple[dict[str, Any] | None, str]:
    """The run's query figures: summary.json, else (no readable summary, reported under 5.3.1)
    the engine's native statistics.json that summary.json is a copy of."""
    if run.summary is not None:
        return run.summary, "summary.json"
    stats, stats_from = native(run)
    return (stats, stats_from) if stats is not None and stats_from is not None else (None, "nowhere")


def _issued(run: Leaf) -> tuple[int | None, str]:
    record, source = _run_record(run)
    for key in ("query_count", "total_queries"):
        count = as_int(dig(record, key))
        if count is not None:
            return count, f"{source} {key}"
    qps, seconds = number(dig(record, "throughput_qps")), number(dig(record, "total_time_seconds"))
    if qps is not None and seconds is not None:
        return round(qps * seconds), f"{source} throughput_qps x total_time_seconds"
    return None, "nowhere"


@rule("5.3.3", "vdbQueryCountMinimum").check(RESULT, benchmark=FAMILY)
def query_count(r: Rule, result: Result) -> Iterable[Finding]:
    """Each run issued its queries (all of --queries in query_count mode); the benchmark minimum is not defined (INFO)."""
    runs = phase(result, "run")
    if not runs:
        return
    minimum = as_int(checker_block(result).get("vdb_min_queries"))
    counts = []
    for run in runs:
        issued, where = _issued(run)
        if issued is None:
            if run.summary is None:
                yield not_checked(r, run, "the issued queries", f"{missing_summary(run)}; no statistics.json")
            else:
                yield r.invalid(run.path_of("summary"), "cannot check the issued queries: summary.json records "
                                "no query_count, total_queries or throughput_qps x total_time_seconds")
            continue
        counts.append(issued)
        path = run.path_of("summary") if run.summary is not None else run.path
        mode, _ = fact(run, "mode")
        requested, _ = fact(run, "queries")
        if mode == "query_count" and requested is not None and issued < requested:
            yield r.invalid(path, f"{issued:,} queries issued ({where}); --queries asked for {requested:,}")
        if minimum is not None and issued < minimum:
            yield r.invalid(path, f"{issued:,} queries issued, fewer than the minimum {minimum:,}")
    if counts and minimum is None:
        yield r.info(result.path, f"the minimum-query table is not defined for this edition; "
                                  f"{min(counts):,} to {max(counts):,} queries issued, not judged")


@rule("5.3.4", "vdbMetricsReported").check(LEAF, benchmark=FAMILY, command="run")
def metrics_reported(r: Rule, run: Leaf) -> Iterable[Finding]:
    """Each run's summary.json reports throughput_qps and the mean/p95/p99/p999 latencies; a run
    whose summary.json is missing (5.3.1) is read from its native statistics.json."""
    if not checker_block(run):
        return
    record, source = _run_record(run)
    if record is None:
        yield not_checked(r, run, "the reported metrics", f"{missing_summary(run)}; no statistics.json")
        return
    missing = [k for k in METRIC_KEYS if number(record.get(k)) is None]
    if missing:
        path = run.path_of("summary") if run.summary is not None else run.path / source
        yield r.invalid(path, f"{source} does not report {', '.join(missing)}")


@rule("5.3.5", "vdbGroundTruthIntegrity").check(LEAF, benchmark=FAMILY, command="run")
def ground_truth(r: Rule, run: Leaf) -> Iterable[Finding]:
    """Each run's recall was scored against ground truth covering every vector of the dataset.
    A failed or partial ground truth is INVALID; a run that records none is a WARNING (the rule
    fails "a run whose ground truth failed to build, or that covers fewer than all" vectors)."""
    if not checker_block(run):
        return
    evidence = False
    verdict_path = run.path / "result_verdict.json"
    if kind_of(verdict_path) is not None:
        verdict, problem = load_json(verdict_path)
        flat = dig(verdict, "flat_setup")
        if problem or not isinstance(flat, dict):
            yield r.invalid(verdict_path, problem or "result_verdict.json has no flat_setup record")
        else:
            evidence = True
            coverage = number(flat.get("coverage"))
            if flat.get("ok") is not True:
                yield r.invalid(verdict_path, f"the ground truth failed to build: {flat.get('reason')!r}")
            elif coverage is None or coverage < 1.0:
                yield r.invalid(verdict_path, f"the ground truth covers {coverage!r} of the dataset, not all of it")
    gt = dig(run.summary, "ground_truth")
    if isinstance(gt, dict):
        evidence = True
        n = as_int(dig(run.summary, "num_vectors"))
        covered = as_int(gt.get("vectors_covered"))
        coverage = number(gt.get("coverage"))
        duplicates = as_int(gt.get("duplicate_ids")) or 0
        problems = []
        if coverage is not None and coverage < 1.0:
            problems.append(f"coverage {coverage:g}")
        if covered is not None and n is not None and covered < n:
            problems.append(f"{covered:,} of {n:,} vectors")
        if duplicates:
            problems.append(f"{duplicates:,} duplicate ids")
        if problems:
            yield r.invalid(run.path_of("summary"),
                            f"the ground truth does not cover the dataset exactly: {', '.join(problems)}")
    if not evidence:
        yield not_checked(r, run, "the ground truth's coverage",
                          "no result_verdict.json flat_setup and no summary.json ground_truth")
