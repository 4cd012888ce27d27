"""Rules 6.x (KV cache): each mutation of a valid synthetic package draws exactly its rule's
finding, the 6.3.4 aggregates are recomputed from the per-rank files, broken or missing rank
files are findings, a leaf of our own `mlpstorage open kvcache run` passes, and the real v3.0
llama3.1-8b leaf reads as what it is."""

from __future__ import annotations

import functools
import json
import shutil
import uuid
from pathlib import Path
from typing import Callable

import pytest
import yaml

import synthetic_families
from conftest import REALDATA, all_leaves
from mlpstorage_py import checker
from mlpstorage_py.benchmarks import kvcache
from mlpstorage_py.benchmarks.options import KVCacheOptions
from mlpstorage_py.checker import rules_kvcache as rk
from mlpstorage_py.results.kv import FAMILY as KV_FAMILY
from mlpstorage_py.checker import rules_kvcache_aggregate as rka
from mlpstorage_py.results.tree.package import Package
from mlpstorage_py.checker.registry import INFO, INVALID, NOT_APPLICABLE, RULES, WARNING
from mlpstorage_py.rules.tables import rule_index
from synthetic import edit_json, edit_yaml, fresh, leaves_of, metadata_file, pristine  # noqa: F401
from test_checker_vdb import OURS, validated, verdicts

REAL_KV = REALDATA / "closed/NewFW/results/Solidigm_D5-P5336_61TB_Gen4_NVMe_QLC/kv_cache/llama3.1-8b/run/20260712_182110"
# SAMSUNG's llama3.1-8b leaf (added to the corpus 2026-12-01): summary.json and metadata, no per-rank files.
REAL_KV_SAMSUNG = REALDATA / "closed/SAMSUNG/results/MEMORY_AE/kv_cache/llama3.1-8b/run/20260721_002332"
# per-Option aggregated_read_bandwidth_gbps as published (the corpus README)
REAL_KV_READ = {REAL_KV: {"1": 7.98, "2": 1.79, "3": 7.41}, REAL_KV_SAMSUNG: {"1": 13.54, "2": 2.755, "3": 14.11}}


@pytest.fixture(autouse=True, scope="module")
def families():
    with synthetic_families.registered():
        yield


def kv_leaf(root: Path, division: str = "closed") -> Path:
    [leaf] = leaves_of(root / division / "Acme" / "results" / "sys1" / "kv_cache" / "llama3.1-8b" / "run")
    return leaf


def kv_runs(pkg: Package) -> list[rk.Kv]:
    """The package's KV cache run leaves the section 6 checks judge, as they read them."""
    return [kv for leaf in pkg.leaves if leaf.benchmark == KV_FAMILY and leaf.command == "run"
            for kv in [rk.judged(leaf)] if kv is not None]


def rank_path(leaf: Path, option: str, trial: int, rank: int) -> Path:
    return next((leaf / f"option_{option}" / f"trial_{trial}" / f"rank_{rank}").glob("kvcache_results_*.json"))


# --- registration and the fresh package ----------------------------------------------------

def test_every_rule_of_section_6_is_registered_or_not_applicable():
    names = {e["number"]: e["name"] for e in rule_index()}
    section = [n for n in names if n.startswith("6.")]
    assert [n for n in section if n not in RULES and n not in NOT_APPLICABLE] == []
    assert [n for n in section if n in NOT_APPLICABLE] == ["6.4.2"]
    for number in section:
        if number in RULES:
            assert RULES[number].name == names[number], number


def test_the_fresh_kv_leaf_holds_every_rank_file_and_agrees_with_the_tool():
    root = pristine(families=("vector_database", "kv_cache"))
    leaf = kv_leaf(root)
    pkg = Package.load(root)
    [kv] = kv_runs(pkg)
    assert (kv.total_ranks, kv.trials, kv.options) == (2, 3, ["1", "2", "3"])
    assert len(kv.rank_files) == 18 and all(f.data is not None for f in kv.rank_files)
    assert len(kv.invocations) == 9 and {inv.ranks for inv in kv.invocations} == {2}
    summary = json.loads((leaf / "summary.json").read_text())
    for option in kv.options:
        values = rka.recompute(kv.files_of(option))
        assert summary["options"][option]["aggregated_read_bandwidth_gbps"] == values.read_bw
        assert summary["options"][option]["aggregated_device_write_p95_ms"] == values.device_write
    # the plan is the tool's own CLOSED plan (Table KVCache-1 and the sequence locks)
    planned = json.loads(metadata_file(leaf).read_text())["parameters"]
    assert planned == kvcache.resolve_parameters("closed", KVCacheOptions(), kvcache.option_table())


# --- one mutation per rule -----------------------------------------------------------------

def meta(change: Callable[[dict], object], division: str = "closed") -> Callable[[Path], None]:
    return lambda r: edit_json(metadata_file(kv_leaf(r, division)), change)


def summary(change: Callable[[dict], object], division: str = "closed") -> Callable[[Path], None]:
    return lambda r: edit_json(kv_leaf(r, division) / "summary.json", change)


def rank(option: str, trial: int, n: int, change: Callable[[dict], object], division: str = "closed") -> Callable[[Path], None]:
    return lambda r: edit_json(rank_path(kv_leaf(r, division), option, trial, n), change)


def commands(change: Callable[[str], str], division: str = "closed") -> Callable[[Path], None]:
    def edit(data: dict) -> None:
        for entry in data["command_output_files"]:
            entry["command"] = change(entry["command"])
    return meta(edit, division)


def several(*mutations: Callable[[Path], None]) -> Callable[[Path], None]:
    def mutate(root: Path) -> None:
        for m in mutations:
            m(root)
    return mutate


def run_field(key: str, value) -> Callable[[dict], None]:
    return lambda d: d["run"].update({key: value})


def cache_field(key: str, value) -> Callable[[dict], None]:
    return lambda d: d["summary"]["cache_stats"].update({key: value})


def reaggregate(division: str = "closed") -> Callable[[Path], None]:
    """Rewrite summary.json's Options from the rank files with the tool's own aggregation."""
    def mutate(root: Path) -> None:
        leaf = kv_leaf(root, division)
        data = json.loads((leaf / "summary.json").read_text())
        for option in data["options"]:
            trials = [kvcache.read_trial(leaf / f"option_{option}" / f"trial_{t}", data["total_ranks"])
                      for t in range(data["trials_per_option"])]
            data["options"][option].update(kvcache.aggregate_option(option, trials, data["total_ranks"]))
        (leaf / "summary.json").write_text(json.dumps(data))
    return mutate


def all_cpu_tier(option: str, division: str = "closed") -> Callable[[Path], None]:
    def mutate(root: Path) -> None:
        for path in (kv_leaf(root, division) / f"option_{option}").glob("trial_*/rank_*/kvcache_results_*.json"):
            edit_json(path, cache_field("storage_entries", 0))
        reaggregate(division)(root)
    return mutate


def two_hosts(root: Path) -> None:
    """The run recorded two client hosts, one rank each (the system still describes one)."""
    hosts = ["client1", "client2"]
    summary(lambda d: d.update(hosts=hosts, host_count=2, npernode=1))(root)
    meta(lambda d: d["engine_parameters"].update(hosts=hosts, host_count=2, npernode=1))(root)


def multi_host(root: Path) -> None:
    """Two described hosts, one rank each; rank 1 of one trial writes outside the shared results path."""
    two_hosts(root)
    edit_yaml(root / "closed" / "Acme" / "systems" / "sys1.yaml",
              lambda d: [c.update(quantity=2) for c in d["system_under_test"]["clients"]])
    rank("1", 0, 1, lambda d: d["run"].update(output="/scratch/client2" + d["run"]["output"]))(root)


def system(change: Callable[[dict], object]) -> Callable[[Path], None]:
    return lambda r: edit_yaml(r / "closed" / "Acme" / "systems" / "sys1.yaml", lambda d: change(d["system_under_test"]["solution"]))


def open_max_allocs(root: Path) -> None:
    """An OPEN run that changed Option 3's max-concurrent-allocs everywhere it is recorded."""
    leaf = kv_leaf(root, "open")
    meta(lambda d: d["parameters"]["options"]["3"].update(max_concurrent_allocs=8), "open")(root)
    commands(lambda c: c.replace("--max-concurrent-allocs 4", "--max-concurrent-allocs 8"), "open")(root)
    for path in (leaf / "option_3").glob("trial_*/rank_*/kvcache_results_*.json"):
        edit_json(path, run_field("max_concurrent_allocs", 8))


def drop_invocations(division: str = "open") -> Callable[[Path], None]:
    return meta(lambda d: (d.pop("command_output_files"), d.pop("executed_argv")), division)


TWO = {"families": ("vector_database", "kv_cache")}
OPEN = dict(TWO, division="open")
KV_ONLY = {"families": ("kv_cache",)}

MUTATIONS: dict[str, tuple[dict, Callable[[Path], None], set[tuple[str, str]]]] = {
    "6.3.1.1 a planned num_users": (TWO, meta(lambda d: d["parameters"]["options"]["1"].update(num_users=100)), {("6.3.1.1", INVALID)}),
    "6.3.1.1 an invocation's max-concurrent-allocs": (TWO, commands(lambda c: c.replace("--max-concurrent-allocs 4", "--max-concurrent-allocs 8")),
                                                      {("6.3.1.1", INVALID)}),
    "6.3.2.1 seed 7": (TWO, meta(lambda d: d["args"].update(seed=7)), {("6.3.2.1", INVALID)}),
    "6.3.2.1 a user --config": (TWO, meta(lambda d: d["args"].update(kv_config="/home/me/kv.yaml")), {("6.3.2.1", INVALID)}),
    "6.3.2.1 a rank's seed is not 42 + rank": (TWO, rank("2", 1, 1, run_field("seed", 42)), {("6.3.2.1", INVALID)}),
    "6.3.2.2 --enable-autoscaling reaches a rank": (TWO, commands(lambda c: c + " --enable-autoscaling"), {("6.3.2.2", INVALID)}),
    "6.3.3.1 npernode x hosts is not total_ranks": (TWO, summary(lambda d: d.update(npernode=3)), {("6.3.3.1", INVALID)}),
    "6.3.3.1 mpirun started 4 ranks of a 2-rank run": (TWO, commands(lambda c: c.replace("mpirun -n 2", "mpirun -n 4")),
                                                       {("6.3.3.1", INVALID)}),
    "6.3.3.2 a client with fewer users (OPEN)": (OPEN, rank("1", 0, 1, run_field("num_users", 50), "open"), {("6.3.3.2", INVALID)}),
    "6.3.3.3 two ranks share a cache directory": (TWO, rank("1", 2, 1, run_field("cache_dir", "/mnt/kvcache/rank_0")), {("6.3.3.3", INVALID)}),
    "6.3.3.3 two result files in one rank": (TWO, lambda r: shutil.copy(rank_path(kv_leaf(r), "3", 0, 0),
                                                                        rank_path(kv_leaf(r), "3", 0, 0).with_name("kvcache_results_x.json")),
                                             {("6.3.3.3", INVALID)}),
    "6.3.3.4 a multi-host rank wrote outside the shared path": (TWO, multi_host, {("6.3.3.4", INVALID)}),
    "6.3.4.1 a rank's read bandwidth": (TWO, rank("1", 1, 0, cache_field("tier_storage_read_bandwidth_gbps", 9.0)), {("6.3.4.1", INVALID)}),
    "6.3.4.1 a summary bandwidth off by 1e-6": (TWO, summary(lambda d: d["options"]["2"].update(
        aggregated_write_bandwidth_gbps=d["options"]["2"]["aggregated_write_bandwidth_gbps"] * (1 + 1e-6))), {("6.3.4.1", INVALID)}),
    "6.3.4.1 1e-12 is within the tolerance": (TWO, summary(lambda d: d["options"]["2"].update(
        aggregated_write_bandwidth_gbps=d["options"]["2"]["aggregated_write_bandwidth_gbps"] * (1 + 1e-12))), set()),
    "6.3.4.2 a rank's storage throughput": (TWO, rank("3", 2, 1, lambda d: d["summary"].update(storage_throughput_tokens_per_sec=1.0)),
                                            {("6.3.4.2", INVALID)}),
    "6.3.4.3 a rank's device read P95": (TWO, rank("2", 0, 0, cache_field("storage_read_device_p95_ms", 999.0)), {("6.3.4.3", INVALID)}),
    "6.3.4.3 the latency statement is missing": (TWO, summary(lambda d: d["aggregation"].pop("device_latency")), {("6.3.4.3", INVALID)}),
    "6.3.4.4 every CLOSED rank of Option 2 in the CPU tier": (TWO, all_cpu_tier("2"), {("6.3.4.4", INVALID)}),
    "6.3.4.4 every OPEN rank of Option 2 in the CPU tier": (OPEN, all_cpu_tier("2", "open"), {("6.3.4.4", WARNING)}),
    "6.3.4.4 a wrong cpu_tier_ranks": (TWO, summary(lambda d: d["options"]["1"].update(cpu_tier_ranks=[1])), {("6.3.4.4", INVALID)}),
    "6.3.4.5 a headline that differs from its aggregate": (TWO, summary(lambda d: d["options"]["1"]["headline"].update(
        storage_read_bandwidth_gbps=123.0)), {("6.3.4.5", INVALID)}),
    "6.4.1 one filesystem": (TWO, lambda r: edit_json(kv_leaf(r) / "fs_separation.json", lambda d: d.update(same_filesystem=True)),
                             {("6.4.1", INVALID)}),
    "6.4.1 the cache inside the results directory": (TWO, meta(lambda d: d["args"].update(cache_dir="/results/kvcache")), {("6.4.1", INVALID)}),
    "6.5.1 an s3:// cache directory": (TWO, meta(lambda d: d["args"].update(cache_dir="s3://bucket/kv")), {("6.5.1", INVALID)}),
    "6.5.2 an object-API system without its gateway": (KV_ONLY, system(lambda s: s["architecture"].update(benchmark_API="object")),
                                                       {("6.5.2", INVALID)}),
    "6.5.2 an object-API system naming s3fs": (KV_ONLY, system(lambda s: (s["architecture"].update(benchmark_API="object"),
                                                                          s.update(friendly_description="s3fs 1.93 mount, -o use_cache")))
                                               , set()),
    "6.6.1 a CLOSED --params": (TWO, meta(lambda d: d.update(override_parameters={"options.1.max_concurrent_allocs": "8"})),
                                {("6.6.1", INVALID)}),
    "6.6.1 RAG reaches a CLOSED rank": (TWO, commands(lambda c: c + " --enable-rag"), {("6.6.1", INVALID)}),
    "6.6.1 a CLOSED rank ran a trace": (TWO, rank("1", 0, 0, run_field("use_burst_trace", True)), {("6.6.1", INVALID)}),
    "6.6.2 OPEN changed max-concurrent-allocs": (OPEN, open_max_allocs, {("6.6.2", INVALID)}),
    "6.6.2 an OPEN --params outside the allowances": (OPEN, meta(lambda d: d.update(override_parameters={"options.1.num_users": "5"}), "open"),
                                                      {("6.6.2", INVALID)}),
    "6.6.3 OPEN RAG without its invocation": (OPEN, several(rank("1", 0, 0, run_field("enable_rag", True), "open"), drop_invocations()),
                                              {("6.6.3", INVALID)}),
    "6.6.3 OPEN RAG with its invocation": (OPEN, rank("1", 0, 0, run_field("enable_rag", True), "open"), set()),
}


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_each_mutation_draws_its_rule(fresh, name):
    options, mutate, expected = MUTATIONS[name]
    root = fresh(**options)
    mutate(root)
    assert verdicts(root) == expected


def test_a_run_on_other_client_hosts_than_its_system_describes_is_a_filing_warning(fresh):
    """The recorded hosts disagree with the system the leaf is filed under (2.1.8, like a
    recorded system name that differs from the directory)."""
    root = fresh(**TWO)
    two_hosts(root)
    assert verdicts(root) == {("2.1.8", WARNING)}


def test_every_rule_of_section_6_has_a_mutation():
    assert {n.split()[0] for n in MUTATIONS} == {n for n in OURS if n.startswith("6.")}


# --- broken and missing rank files ---------------------------------------------------------------

AGGREGATES = {"6.3.4.1", "6.3.4.2", "6.3.4.3"}
# a missing or broken per-rank file is reported once, by 6.3.4.1; 6.3.4.2 and 6.3.4.3 say "not checked" (INFO)
RANKS = {"6.3.4.1"}
BROKEN: dict[str, tuple[Callable[[Path], None], set[str]]] = {
    "a rank file is missing": (lambda r: rank_path(kv_leaf(r), "2", 1, 0).unlink(), RANKS),
    "a rank file is not JSON": (lambda r: rank_path(kv_leaf(r), "2", 1, 0).write_text("{"), RANKS),
    "a rank file has no summary": (lambda r: rank_path(kv_leaf(r), "2", 1, 0).write_text('{"run": {}}'), RANKS),
    "a whole trial is missing": (lambda r: shutil.rmtree(kv_leaf(r) / "option_3" / "trial_2"), RANKS | {"6.3.2.1"}),
    "summary.json is not JSON": (lambda r: (kv_leaf(r) / "summary.json").write_text("{"), AGGREGATES | {"6.3.4.5"}),
    "summary.json is a list": (lambda r: (kv_leaf(r) / "summary.json").write_text("[]"), AGGREGATES | {"6.3.4.5"}),
    "summary.json options is a list": (summary(lambda d: d.update(options=[1, 2])), AGGREGATES),
    "the metadata is not JSON": (lambda r: metadata_file(kv_leaf(r)).write_text("{"), {"6.4.1"}),
}


@pytest.mark.parametrize("name", list(BROKEN))
def test_a_broken_file_is_a_finding_about_it(fresh, name):
    mutate, rules = BROKEN[name]
    root = fresh(**TWO)
    mutate(root)
    found, findings = validated(root)
    assert rules <= {rule for rule, severity in found if severity == INVALID}, found
    assert {rule for rule, _ in found} - rules <= {"1.1", "LEAF-01", "PROV-01", "EDN-02"}, found


def test_a_rank_beyond_total_ranks_is_an_extra_client(fresh):
    """A copied rank_1 as rank_2: one client too many, which also shares rank 1's paths and seed
    and enters the recomputed sums."""
    root = fresh(**TWO)
    shutil.copytree(kv_leaf(root) / "option_1/trial_0/rank_1", kv_leaf(root) / "option_1/trial_0/rank_2")
    found = verdicts(root)
    assert ("6.3.3.1", INVALID) in found and ("6.3.3.3", INVALID) in found


def test_a_missing_rank_file_is_named(fresh):
    root = fresh(**TWO)
    rank_path(kv_leaf(root), "2", 1, 0).unlink()
    [missing] = [f for f in validated(root)[1] if f.rule == "6.3.4.1"]
    assert "option_2/trial_1/rank_0/kvcache_results_*.json is missing" in missing.message


# --- a leaf of our own tool ----------------------------------------------------------------------

def test_our_own_open_kvcache_run_passes_section_6(cli, results, tmp_path):
    cache = Path("/dev/shm") / f"mlps-kv-{uuid.uuid4().hex[:8]}"
    if not cache.parent.is_dir():
        pytest.skip("needs /dev/shm (a file system apart from the results)")
    config = tmp_path / "small.yaml"
    config.write_text(yaml.safe_dump({
        "user_templates": {"chatbot": {"context_tokens": [128, 512], "generation_tokens": [16, 64], "think_time_s": [0.0, 0.02],
                                       "weight": 1}, "coding": {"weight": 0}, "document": {"weight": 0}},
        "prefix_cache": {"system_prompt_tokens": [32, 128, 64]}}))
    try:
        res = cli("open", "kvcache", "run", "-np", "2", "--cache-dir", cache, "-rd", results, "-sn", "sys1", "--model", "tiny-1b",
                  "--num-users", "2", "--duration", "1", "--trials", "2", "--inter-option-delay", "0", "--option", "1",
                  "--config", config)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    assert res.rc == 0, res.err
    (leaf,) = all_leaves(results)
    _, findings = checker.validate(results)
    mine = [f for f in findings if f.rule.startswith("6.")]
    assert [f for f in mine if f.severity != INFO] == [], mine
    [kv] = kv_runs(Package.load(results))
    assert len(kv.rank_files) == 4 and all(f.data is not None for f in kv.rank_files)
    assert kv.options == ["1"] and len(kv.invocations) == 2


# --- the real v3.0 corpus -----------------------------------------------------------------------

needs_realdata = pytest.mark.skipif(not REALDATA.is_dir(), reason="../shared/realdata is not present")


@functools.cache
def real_findings():
    return checker.validate(REALDATA)[1]


def of(number: str, leaf: Path | None = None) -> list:
    """The corpus's findings of a rule; with leaf, only those on that leaf or a file inside it."""
    return [f for f in real_findings() if f.rule == number
            and (leaf is None or f.path == str(leaf) or f.path.startswith(f"{leaf}/"))]


real_kv_leaves = pytest.mark.parametrize("leaf", [REAL_KV, REAL_KV_SAMSUNG], ids=["NewFW", "SAMSUNG"])


@needs_realdata
def test_realdata_holds_two_kv_cache_leaves():
    assert [kv.path for kv in kv_runs(Package.load(REALDATA))] == [REAL_KV, REAL_KV_SAMSUNG]


@needs_realdata
@real_kv_leaves
def test_realdata_kv_cache_reads_as_published(leaf):
    [kv] = [kv for kv in kv_runs(Package.load(REALDATA)) if kv.path == leaf]
    stated = {o: kv.option_summary(o)["aggregated_read_bandwidth_gbps"] for o in kv.options}
    assert stated == pytest.approx(REAL_KV_READ[leaf], abs=0.005)
    assert {(kv.option_summary(o)["rank_count"], kv.option_summary(o)["trial_count"]) for o in kv.options} == {(1, 3)}
    # the nine mpirun invocations: Table KVCache-1's values, seed base 42, one rank each
    assert len(kv.invocations) == 9 and {inv.ranks for inv in kv.invocations} == {1}
    assert {inv.option: inv.flags["max-concurrent-allocs"] for inv in kv.invocations} == {"1": "16", "2": "16", "3": "4"}
    # what the invocations show passes: the Options, the locks, the layout, isolation, no all-CPU Option
    for number in ("6.3.2.1", "6.3.3.1", "6.3.3.2", "6.3.3.3", "6.3.3.4", "6.3.4.4", "6.5.1", "6.5.2", "6.6.1"):
        assert of(number) == [], number
    # the metadata's CLI pins (gpu 16, cpu 32, duration 60, autoscaling) never reached kv-cache.py: information
    assert [f.severity for f in of("6.3.1.1", leaf)] == [INFO] and "gpu_mem_gb=16.0" in of("6.3.1.1", leaf)[0].message
    assert [f.severity for f in of("6.3.2.2", leaf)] == [INFO] and "none of the 9 recorded invocations" in of("6.3.2.2", leaf)[0].message
    assert [f.severity for f in of("6.4.1", leaf)] == [INFO]


@needs_realdata
@real_kv_leaves
def test_realdata_kv_cache_lacks_rank_files_and_device_latency(leaf):
    # no per-rank file is in the corpus: the aggregates cannot be recomputed (9 = 3 Options x 3 trials x 1 rank)
    # reported once, by 6.3.4.1; 6.3.4.2 and 6.3.4.3 are "not checked" without them
    [f] = of("6.3.4.1", leaf)
    assert f.severity == INVALID and "9 per-rank result file(s) missing" in f.message
    [f] = of("6.3.4.2", leaf)
    assert f.severity == INFO and "reported under 6.3.4.1" in f.message
    # the v3.0 summary states no device-latency aggregates nor how they were formed: the absent fields
    # are reported once, by the headline rule (6.3.4.5), the missing statement by 6.3.4.3; the v3.0
    # tool wrote neither and the review published them, so both are calibrated WARNINGs
    # (tests/test_calibrations.py: INVALID with --letter)
    latency = of("6.3.4.3", leaf)
    assert [f.severity for f in latency if f.severity != INFO] == [WARNING]
    assert "does not state that the device P95 is the max" in [f for f in latency if f.severity == WARNING][0].message
    assert sum(f.severity == INFO for f in latency) == 2
    [headline] = of("6.3.4.5", leaf)
    assert headline.severity == WARNING and "Options 1, 2, 3 lacks aggregated_device_read_p95_ms" in headline.message
    # every 6.x finding of the corpus is on one of its two kv_cache leaves
    assert all(f.path.startswith((f"{REAL_KV}", f"{REAL_KV_SAMSUNG}"))
               for number in ("6.3.1.1", "6.3.2.2", "6.3.4.1", "6.3.4.2", "6.3.4.3", "6.3.4.5", "6.4.1")
               for f in of(number))
