"""Rules 5.x (vector database): a fresh synthetic package draws nothing INVALID, each mutation
draws exactly its rule's finding, broken files are findings (never crashes), and the real v3.0
DISKANN leaves read as what they are."""

from __future__ import annotations

import functools
import shutil
from pathlib import Path
from typing import Callable

import pytest

import synthetic_families
from conftest import REALDATA
from mlpstorage_py import checker
from mlpstorage_py.checker import rules_kvcache, rules_vdb
from mlpstorage_py.results.tree.package import Leaf, Package
from mlpstorage_py.checker.registry import INFO, INVALID, NOT_APPLICABLE, RULES, WARNING
from mlpstorage_py.rules import tables
from mlpstorage_py.rules.tables import rule_index
from synthetic import edit_json, edit_yaml, fresh, leaves_of, metadata_file, pristine, regenerate  # noqa: F401

FAMILIES = ("vector_database", "kv_cache")
OURS = {n for n, r in RULES.items()  # every module of section 5 (rules_vdb*) and section 6 (rules_kvcache*)
        if r.module.startswith((rules_vdb.__name__, rules_kvcache.__name__))}
REAL_VDB = REALDATA / "closed/TTA/results/seahorse-storage/vector_database/milvus/DISKANN"
# SAMSUNG's DISKANN result (added to the corpus 2026-12-01): 2 datagen and 5 run leaves with metadata,
# some config.json / result_verdict.json / recall_stats.json, one native statistics.json; no summary.json.
REAL_VDB_SAMSUNG = REALDATA / "closed/SAMSUNG/results/MEMORY_AE/vector_database/milvus/DISKANN"


@pytest.fixture(autouse=True, scope="module")
def families():
    with synthetic_families.registered():
        yield


def known_gaps() -> set[tuple[str, str]]:
    """EDN-02 is left to its own tests: the synthetic package's HNSW workload is in no class
    (the rules name DISKANN classes only), and mutating a workload moves it out of its class."""
    return {("EDN-02", INVALID)}


def validated(root: Path) -> tuple[set[tuple[str, str]], list]:
    """((rule, severity) of every INVALID and WARNING finding but the known gaps, all findings)."""
    _, findings = checker.validate(root)
    crashed = [f for f in findings if f.message.startswith("checker error")]
    assert not crashed, crashed
    return {(f.rule, f.severity) for f in findings if f.severity in (INVALID, WARNING)} - known_gaps(), findings


def verdicts(root: Path) -> set[tuple[str, str]]:
    return validated(root)[0]


def vdb(root: Path, command: str, division: str = "closed", index: str = "HNSW") -> list[Path]:
    return leaves_of(root / division / "Acme" / "results" / "sys1" / "vector_database" / "milvus" / index / command)


# --- registration and the fresh package ----------------------------------------------------

def test_every_rule_of_section_5_is_registered_or_not_applicable():
    names = {e["number"]: e["name"] for e in rule_index()}
    for number in OURS:
        assert RULES[number].name == names[number], number
    section = [n for n in names if n.startswith("5.")]
    assert [n for n in section if n not in RULES and n not in NOT_APPLICABLE] == []
    assert RULES["5.6.1"].module.endswith("rules_common")  # the shared code-image check


def test_closed_fixed_values_name_the_open_only_flags():
    """editions.yaml vdb_closed_fixed names, by their last part, the OPEN-only flags the vectordb
    benchmark reads it for (rules/predicates.vdb_closed_values): each is a VectorDBOptions field."""
    from mlpstorage_py.benchmarks.options import VectorDBOptions
    from mlpstorage_py.rules.predicates import vdb_closed_values

    names = set(vdb_closed_values(tables.checker()))
    assert names == {"seed", "distribution", "search_limit", "num_query_vectors", "compact", "nlist"}
    assert names <= {f.name for f in __import__("dataclasses").fields(VectorDBOptions)}


@pytest.mark.parametrize("division", ["closed", "open"])
def test_a_fresh_package_with_every_family_is_valid(division):
    root = pristine(division=division, families=("training", "checkpointing", *FAMILIES))
    found, findings = validated(root)
    assert found == set()
    assert {f.rule for f in findings if f.rule in OURS and f.severity == INFO} <= {"5.3.2", "5.3.3"}
    assert len(vdb(root, "run", division)) == 5 and len(vdb(root, "datagen", division)) == 1


# --- one mutation per rule -------------------------------------------------------------------

def summary(command: str, index: int, change: Callable[[dict], object], division: str = "closed") -> Callable[[Path], None]:
    return lambda r: edit_json(vdb(r, command, division)[index] / "summary.json", change)


def leaf_file(command: str, index: int, name: str, change: Callable[[dict], object], division: str = "closed"):
    return lambda r: edit_json(vdb(r, command, division)[index] / name, change)


def meta(command: str, index: int, change: Callable[[dict], object], division: str = "closed"):
    return lambda r: edit_json(metadata_file(vdb(r, command, division)[index]), change)


def several(*mutations: Callable[[Path], None]) -> Callable[[Path], None]:
    def mutate(root: Path) -> None:
        for m in mutations:
            m(root)
    return mutate


def set_in(path: str, value) -> Callable[[dict], None]:
    def change(data: dict) -> None:
        *parents, last = path.split(".")
        for key in parents:
            data = data[key]
        if value is DELETE:
            data.pop(last)
        else:
            data[last] = value
    return change


DELETE = object()


def bigger_scale(data: dict) -> None:
    data.update(num_vectors=2_000_000, inserted_vectors=2_000_000)
    data["ground_truth"].update(vectors_covered=2_000_000, vectors_in_collection=2_000_000)


def remove_run(root: Path) -> None:
    shutil.rmtree(vdb(root, "run")[-1])
    regenerate(root)


def rename_index(root: Path) -> None:
    base = root / "closed/Acme/results/sys1/vector_database/milvus"
    (base / "HNSW").rename(base / "IVF_FLAT")
    regenerate(root)


def same_filesystem_log(root: Path) -> None:
    log = vdb(root, "run")[0] / "mlpstorage.log"
    log.write_text(log.read_text().replace("/dev/nvme0n1   xfs  ", "/dev/sda1      ext4 ").replace("% /mnt/vdb", "% /results"))


def system(change: Callable[[dict], object], division: str = "closed") -> Callable[[Path], None]:
    return lambda r: edit_yaml(r / division / "Acme" / "systems" / "sys1.yaml", lambda d: change(d["system_under_test"]["solution"]))


TWO = {"families": FAMILIES}
OPEN = {"families": FAMILIES, "division": "open"}
VDB_ONLY = {"families": ("vector_database",)}

MUTATIONS: dict[str, tuple[dict, Callable[[Path], None], set[tuple[str, str]]]] = {
    "5.1.1 a scale outside the table": (TWO, summary("run", 0, bigger_scale), {("5.1.1", INVALID)}),
    "5.1.2 load and run dimensions differ": (TWO, summary("datagen", 0, set_in("dimension", 768)), {("5.1.2", INVALID)}),
    "5.1.2 the named datagen leaf is absent": (TWO, summary("run", 2, set_in("datagen_leaf", "x/datagen/20990101_000000")),
                                               {("5.1.2", INVALID)}),
    "5.2.1 a load shortfall": (TWO, summary("datagen", 0, set_in("inserted_vectors", 999_000)), {("5.2.1", INVALID)}),
    "5.2.2 the index build did not finish": (TWO, summary("datagen", 0, set_in("index_build.pending_index_rows", 10)),
                                             {("5.2.2", INVALID)}),
    "5.2.2 no index-build record": (TWO, summary("datagen", 0, set_in("index_build", DELETE)), {("5.2.2", INVALID)}),
    # no false passes: a build record of the empty collection (upstream creates the index before the insert)
    # or one that ended before the load did is no evidence that the loaded data was indexed
    "5.2.2 the build record predates the load": (TWO, summary("datagen", 0, lambda d: d["index_build"].update(
        indexed_rows=0, total_rows=0)), {("5.2.2", INVALID)}),
    "5.2.2 the build ended before the load did": (TWO, summary("datagen", 0, lambda d: d["index_build"].update(
        end=d["start"], served_ready=d["start"])), {("5.2.2", INVALID)}),
    "5.2.2 a log line printed when the build was issued": (TWO, several(
        summary("datagen", 0, set_in("index_build", DELETE)),
        lambda r: (vdb(r, "datagen")[0] / "mlpstorage.log").write_text(
            "INFO index build requested; waiting until it is complete\nINFO inserted 1000000 vectors\n"
            "INFO index build completed\nINFO inserted 1000 more vectors\n")), {("5.2.2", INVALID)}),
    "5.2.2 a completion line after the load is a record": (TWO, several(
        summary("datagen", 0, set_in("index_build", DELETE)),
        lambda r: (vdb(r, "datagen")[0] / "mlpstorage.log").write_text(
            "INFO inserted 1000000 vectors\nINFO flushed 1000000 vectors\nINFO index build completed: 1000000 rows\n")), set()),
    "5.2.2 compaction configured, not done": (OPEN, meta("datagen", 0, set_in("parameters.workflow.compact", True), "open"),
                                              {("5.2.2", INVALID)}),
    "5.2.2 the load built another index": (OPEN, summary("datagen", 0, set_in("index_type", "IVF_FLAT"), "open"),
                                           {("5.2.2", INVALID)}),
    "5.3.1 four runs": (TWO, remove_run, {("5.3.1", INVALID)}),
    "5.3.2 zero recall": (TWO, summary("run", 0, set_in("recall", 0.0)), {("5.3.2", INVALID)}),
    "5.3.2 no recall anywhere": (TWO, several(summary("run", 1, set_in("recall", DELETE)), summary("run", 1, set_in("recall_stats", DELETE)),
                                              lambda r: (vdb(r, "run")[1] / "recall_stats.json").unlink()), {("5.3.2", INVALID)}),
    "5.3.2 recall only in recall_stats.json is enough": (TWO, several(summary("run", 1, set_in("recall", DELETE)),
                                                                      summary("run", 1, set_in("recall_stats", DELETE))), set()),
    "5.3.3 fewer queries than --queries": (TWO, summary("run", 0, lambda d: d.update(query_count=50_000, total_queries=50_000)),
                                           {("5.3.3", INVALID)}),
    "5.3.4 no p999 latency": (TWO, summary("run", 3, set_in("p999_latency_ms", DELETE)), {("5.3.4", INVALID)}),
    "5.3.4 a null throughput": (TWO, summary("run", 3, set_in("throughput_qps", None)), {("5.3.4", INVALID)}),
    "5.3.5 the ground truth failed": (TWO, leaf_file("run", 0, "result_verdict.json", set_in("flat_setup.ok", False)),
                                      {("5.3.5", INVALID)}),
    "5.3.5 partial coverage": (TWO, summary("run", 1, lambda d: d["ground_truth"].update(vectors_covered=10_000, coverage=0.01)),
                               {("5.3.5", INVALID)}),
    "5.3.5 no ground-truth record": (TWO, several(summary("run", 2, set_in("ground_truth", DELETE)),
                                                  lambda r: (vdb(r, "run")[2] / "result_verdict.json").unlink()),
                                     # missing evidence, not a failed ground truth: the rule fails "a run whose ground
                                     # truth failed to build, or that covers fewer than all of the dataset's vectors"
                                     {("5.3.5", WARNING)}),
    "5.4.1 results inside the storage root": (TWO, meta("run", 0, set_in("args.results_dir", "/mnt/vdb/results")), {("5.4.1", INVALID)}),
    "5.4.1 no storage root": (TWO, several(meta("run", 0, lambda d: (d["parameters"]["storage"].pop("storage_root"), d["args"].pop("data_dir"))),
                                           leaf_file("run", 0, "config.json", lambda d: d["parameters"]["storage"].pop("storage_root"))),
                              {("5.4.1", INVALID)}),
    "5.4.2 df shows one filesystem": (TWO, same_filesystem_log, {("5.4.2", INVALID)}),
    "5.4.2 no df anywhere": (TWO, several(lambda r: (vdb(r, "run")[4] / "mlpstorage.log").unlink(),
                                          lambda r: (vdb(r, "run")[4] / "fs_separation.json").unlink(),
                                          summary("run", 4, set_in("filesystems", DELETE))), {("5.4.2", INVALID)}),
    "5.5.1 object API without an object backend": (VDB_ONLY, system(lambda s: s["architecture"].update(benchmark_API="object")),
                                                   {("5.5.1", INVALID)}),
    "5.5.1 object storage under the file API": (TWO, leaf_file("run", 0, "config.json", set_in("parameters.storage.storage_type", "s3")),
                                                {("5.5.1", INVALID)}),
    "5.6.2 a CLOSED run on elasticsearch": (TWO, summary("run", 0, set_in("database.database", "elasticsearch")), {("5.6.2", INVALID)}),
    "5.6.3 a CLOSED index directory IVF_FLAT": (TWO, rename_index, {("5.6.3", INVALID)}),
    "5.6.4 a --params key outside the CLOSED table": (TWO, meta("run", 0, set_in("override_parameters", {"search.search_limit": "20"})),
                                                      {("5.6.4", INVALID)}),
    "5.6.4 an OPEN-only seed": (TWO, leaf_file("run", 1, "config.json", set_in("parameters.dataset.seed", 7)), {("5.6.4", INVALID)}),
    "5.6.4 an OPEN-only compaction": (TWO, several(meta("datagen", 0, set_in("parameters.workflow.compact", True)),
                                                   summary("datagen", 0, set_in("compaction", {"requested": True, "state": "Completed"}))),
                                      {("5.6.4", INVALID)}),
    "5.6.5 an unsupported OPEN backend": (OPEN, summary("run", 0, set_in("database.database", "redis"), "open"), {("5.6.5", INVALID)}),
    "5.6.5 a --params key outside both tables": (OPEN, meta("run", 0, set_in("override_parameters", {"run.warmup": "5"}), "open"),
                                                 {("5.6.5", INVALID)}),
    "5.6.5 backend-native index parameters are OPEN": (OPEN, meta("run", 0, set_in("override_parameters", {"index.nprobe": "8"}), "open"),
                                                       set()),
}


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_each_mutation_draws_its_rule(fresh, name):
    options, mutate, expected = MUTATIONS[name]
    root = fresh(**options)
    mutate(root)
    assert verdicts(root) == expected


def test_every_rule_of_section_5_has_a_mutation():
    assert {n.split()[0] for n in MUTATIONS} == {n for n in OURS if n.startswith("5.")}


# --- broken files are findings, never crashes ------------------------------------------------

# A broken or missing file is reported once, INVALID, under the rule that requires it (5.3.1 a run's
# summary.json; 5.2.2 the load's index-build record, which the rule makes mandatory); the rules that
# only read the same value read it from the other files the tool writes (config.json, the metadata)
# or say "not checked" as a WARNING.
BROKEN: dict[str, tuple[Callable[[Path], None], set[str], set[str]]] = {
    "summary.json is not JSON": (lambda r: (vdb(r, "run")[0] / "summary.json").write_text("{not json"),
                                 {"5.3.1"}, {"5.3.3", "5.3.4"}),
    "summary.json is a list": (lambda r: (vdb(r, "run")[0] / "summary.json").write_text("[1, 2]"),
                               {"5.3.1"}, {"5.3.3", "5.3.4"}),
    "config.json is not JSON": (lambda r: (vdb(r, "run")[0] / "config.json").write_text("{"), {"5.6.4"}, set()),
    "result_verdict.json is a string": (lambda r: (vdb(r, "run")[0] / "result_verdict.json").write_text('"ok"'), {"5.3.5"}, set()),
    "the datagen summary is missing": (lambda r: (vdb(r, "datagen")[0] / "summary.json").unlink(), {"5.2.2"}, {"5.2.1"}),
}


@pytest.mark.parametrize("name", list(BROKEN))
def test_a_broken_file_is_a_finding_about_it(fresh, name):
    mutate, invalid, warned = BROKEN[name]
    root = fresh(**TWO)
    mutate(root)
    found, findings = validated(root)
    assert {rule for rule, severity in found if severity == INVALID} - {"1.1", "LEAF-01"} == invalid, found
    assert {rule for rule, severity in found if severity == WARNING} == warned, found
    assert not [f for f in findings if f.severity == INVALID and f.rule.startswith("5.") and "cannot check" in f.message]


# --- the real v3.0 corpus -----------------------------------------------------------------------

needs_realdata = pytest.mark.skipif(not REALDATA.is_dir(), reason="../shared/realdata is not present")


@functools.cache
def real_findings():
    return checker.validate(REALDATA)[1]


def of(number: str, result: Path = REAL_VDB) -> list:
    """The corpus's findings of a rule on one DISKANN result (TTA's unless told)."""
    return [f for f in real_findings() if f.rule == number and (f.path == str(result) or f.path.startswith(f"{result}/"))]


def vdb_leaves(pkg: Package) -> list[Leaf]:
    return [leaf for leaf in pkg.leaves if leaf.benchmark == "vector_database"]


def real_runs(pkg: Package, result: Path) -> list[Leaf]:
    return sorted((leaf for leaf in vdb_leaves(pkg) if leaf.command == "run" and leaf.workload_dir == result),
                  key=lambda leaf: leaf.path.name)


@needs_realdata
def test_realdata_holds_two_diskann_results():
    pkg = Package.load(REALDATA)
    assert {leaf.workload_dir for leaf in vdb_leaves(pkg)} == {REAL_VDB, REAL_VDB_SAMSUNG}
    assert [len(real_runs(pkg, result)) for result in (REAL_VDB, REAL_VDB_SAMSUNG)] == [5, 5]
    assert all("/vector_database/" not in f.path or f.path.startswith((str(REAL_VDB), str(REAL_VDB_SAMSUNG)))
               for f in real_findings())


@needs_realdata
def test_realdata_diskann_passes_the_rules_its_summaries_can_show():
    pkg = Package.load(REALDATA)
    runs = real_runs(pkg, REAL_VDB)
    assert [round(v.summary["throughput_qps"], 1) for v in runs] == [57922.4, 57619.8, 58009.7, 59245.4, 57669.3]
    assert {v.summary["recall"] for v in runs} == {0.209675}
    assert {(v.summary["num_vectors"], v.summary["dimension"]) for v in runs} == {(1_000_000, 1536)}
    # 1M x 1536 is a defined scale; load and run agree; 1,000,000 inserted; 5 runs; all metrics;
    # milvus; DISKANN under DISKANN/; the system declares the file API
    for number in ("5.1.1", "5.1.2", "5.2.1", "5.3.1", "5.3.4", "5.5.1", "5.6.2", "5.6.3", "5.6.5"):
        assert of(number) == [], number
    # the recall and query minimums are not defined: information, with the recall stated
    [recall] = of("5.3.2")
    assert recall.severity == INFO and "0.209675" in recall.message
    assert [f.severity for f in of("5.3.3")] == [INFO]


@needs_realdata
def test_realdata_reports_what_the_published_leaves_lack():
    # the datagen summary holds no index-build record (and its log is not in the corpus)
    assert [(f.severity, Path(f.path).parent.name) for f in of("5.2.2")] == [(INVALID, "20260715_202501")]
    # no result_verdict.json and no ground_truth block: unproven, not failed (5.3.5 fails a failed or partial one)
    assert [f.severity for f in of("5.3.5")] == [WARNING] * 5
    # no metadata or config.json (reported under LEAF-01 / 1.1): paths and parameters are not checked (6 leaves)
    for number in ("5.4.1", "5.6.4"):
        assert [f.severity for f in of(number)] == [WARNING] * 6, number
    assert all("no *_metadata.json" in f.message for f in of("5.4.1") + of("5.6.4"))
    # no log: the df records 5.4.2 makes mandatory are absent (6 leaves)
    assert [f.severity for f in of("5.4.2")] == [INVALID] * 6


@needs_realdata
def test_realdata_samsung_diskann_reads_as_published():
    """SAMSUNG's runs kept no summary.json (the reviewers' finding too), so 5.3.1 fails each of the
    five; their metadata records a results directory but no storage root (5.4.1, as the reviewers
    found); the two runs that kept result_verdict.json show full-coverage ground truth (5.3.5)."""
    pkg = Package.load(REALDATA)
    runs = real_runs(pkg, REAL_VDB_SAMSUNG)
    assert [v.path.name for v in runs] == ["20260721_102236", "20260721_102716", "20260721_102834",
                                           "20260721_102951", "20260721_103108"]
    assert all(v.summary is None and v.metadata is not None for v in runs)
    assert [(f.severity, Path(f.path).name, f.message) for f in of("5.3.1", REAL_VDB_SAMSUNG)] == [
        (INVALID, v.path.name, "no summary.json") for v in runs]
    paths = [f for f in of("5.4.1", REAL_VDB_SAMSUNG) if "/run/" in f.path]
    assert [(f.severity, Path(f.path).name) for f in paths] == [(INVALID, v.path.name) for v in runs]
    assert all("no storage root recorded" in f.message for f in paths)
    assert {Path(f.path).name for f in of("5.3.5", REAL_VDB_SAMSUNG)} == {"20260721_102834", "20260721_102951", "20260721_103108"}
    # milvus, recorded in the metadata's args, under milvus/: 5.6.2 passes; the tool judged every leaf CLOSED
    assert of("5.6.2", REAL_VDB_SAMSUNG) == [] and of("5.6.4", REAL_VDB_SAMSUNG) == []
