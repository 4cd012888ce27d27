"""Issue 25 on the KV cache: a partial failure is a 6.3.4.1 finding naming the missing ranks, in
reportgen's Issues and in `mlpstorage status`; the row publishes the latest error-free run and
names the ones it drops, is withheld when blank or under the older kvcache_run_summary name; and an
Option's columns are those of the model and memory tiers it ran (FarmGPU's OPEN
llama3.1-70b-instruct run, v3.0-0178, is the published case these leaves are shaped on)."""

from __future__ import annotations

import csv
import json
import shutil
from datetime import timedelta
from pathlib import Path

import pytest

import synthetic_families
from mlpstorage_py import checker
from mlpstorage_py.benchmarks.kvcache_aggregate import aggregate_option, read_trial
from mlpstorage_py.results.kv import declared_missing, partial_failure
from mlpstorage_py.checker.registry import INFO, INVALID, WARNING
from mlpstorage_py.report import table
from synthetic import edit_json, fresh, later, leaves_of, metadata_file, regenerate  # noqa: F401

KV_ONLY = {"families": ("kv_cache",)}
CLOSED_READ = [f"KVCache {g} - Read B/W (GiB/s)" for g in table.KV_GROUPS.values()]


@pytest.fixture(autouse=True, scope="module")
def families():
    with synthetic_families.registered():
        yield


def kv_runs(root: Path, division: str = "closed") -> list[Path]:
    return leaves_of(root / division / "Acme" / "results" / "sys1" / "kv_cache" / "llama3.1-8b" / "run")


def published_shape(leaf: Path) -> None:
    """As the reference tool's leaves are: no exit_status (a partial failure of ours exits 6)."""
    edit_json(metadata_file(leaf), lambda d: (d.pop("exit_status"), d.pop("failure")))


def lose_ranks(leaf: Path, option: str, rank: int) -> None:
    """Rank `rank` of every trial of an Option never reported; the summary is aggregated, as the
    tool aggregates, over the ranks that did, and records the loss (partial_failure, missing_files)."""
    summary = json.loads((leaf / "summary.json").read_text())
    total = summary["total_ranks"]
    for trial_dir in sorted((leaf / f"option_{option}").iterdir()):
        shutil.rmtree(trial_dir / f"rank_{rank}")
    trials = [read_trial(d, total) for d in sorted((leaf / f"option_{option}").iterdir())]
    block = summary["options"][option]
    summary["options"][option] = {**aggregate_option(option, trials, total), "name": block["name"], "label": block["label"]}
    summary["partial_failure"] = True
    (leaf / "summary.json").write_text(json.dumps(summary))
    published_shape(leaf)


def findings(root: Path, number: str) -> list:
    _, found = checker.validate(root)
    return [f for f in found if f.rule == number]


def kv_row(root: Path, division: str = "closed") -> dict:
    rows = json.loads((root / division / "Acme" / "results" / "results.json").read_text())["rows"]
    [row] = [r for r in rows if r["Benchmark Type"] == "KVCache"]
    return row


# --- partial failures --------------------------------------------------------------------------

def test_lost_ranks_are_a_6_3_4_1_finding_naming_their_count(fresh):
    root = fresh(**KV_ONLY)
    [leaf] = kv_runs(root)
    lose_ranks(leaf, "1", 1)
    assert declared_missing(json.loads((leaf / "summary.json").read_text())) == {("1", t, 1) for t in range(3)}
    found = findings(root, "6.3.4.1")
    assert [(f.severity, Path(f.path).name) for f in found] == [(INVALID, "summary.json")]
    assert found[0].message.startswith("partial failure: 3 rank result(s) missing, 0 trial(s) failed "
                                       "(Option 1: 3 of 6 rank results missing)")
    # the ranks the summary names as lost are the partial failure, not files the package lacks; the
    # stated aggregates are still checked over the ranks they summed, and agree
    assert not [f for f in findings(root, "6.3.4.2") + findings(root, "6.3.4.3") if f.severity != INFO]


def test_a_summary_that_understates_its_losses_still_disagrees_with_the_ranks(fresh):
    """The files of lost ranks are gone, but the summary keeps the every-rank figure: its stated
    aggregate is not the sum over the ranks it names as summed."""
    root = fresh(**KV_ONLY)
    [leaf] = kv_runs(root)
    before = json.loads((leaf / "summary.json").read_text())["options"]["1"]["aggregated_read_bandwidth_gbps"]
    lose_ranks(leaf, "1", 1)
    edit_json(leaf / "summary.json", lambda d: d["options"]["1"].update(aggregated_read_bandwidth_gbps=before))
    messages = [f.message for f in findings(root, "6.3.4.1") if f.severity == INVALID]
    assert len(messages) == 2 and any("recomputed from 3 per-rank results" in m for m in messages)


def test_a_failed_trial_with_every_rank_present_is_a_warning(fresh):
    root = fresh(**KV_ONLY)
    [leaf] = kv_runs(root)
    edit_json(leaf / "summary.json", lambda d: d.update(partial_failure=True, trial_failures={"2": {"1": "mpirun exited 1"}}))
    [found] = findings(root, "6.3.4.1")
    assert found.severity == WARNING
    assert "0 rank result(s) missing, 1 trial(s) failed (Option 2: trial(s) 1 failed (mpirun exited non-zero))" in found.message


def test_the_partial_failure_is_in_the_rows_issues_and_in_status(cli, fresh):
    root = fresh(**KV_ONLY)
    [leaf] = kv_runs(root)
    lose_ranks(leaf, "2", 0)
    regenerate(root)
    row = kv_row(root)
    assert any(i.startswith(f"{leaf.name}: partial failure: 3 rank result(s) missing") and "6.3.4.1" in i
               for i in row["Issues"])
    assert row["KVCache llama3.1-8b Storage + Mem - Read B/W (GiB/s)"] is not None  # published, flagged
    result = cli("status", root, "--json")
    [status] = [r for r in json.loads(result.out)["results"] if r["benchmark"] == "kv_cache"]
    assert status["partial_failures"] == [f"{leaf.name}: {partial_failure(json.loads((leaf / 'summary.json').read_text())).text()}"]
    assert status["verdict"] == "invalid" and status["invalid"] >= 1
    text = cli("status", root).out
    assert f"partial failure {status['result']}/{leaf.name}: 3 rank result(s) missing" in text


def test_farmgpus_published_summary_reads_as_45_missing_ranks():
    """The shape of open/FarmGPU/.../llama3.1-70b-instruct/run/20260709_215001/summary.json: absolute
    rank directories under the lowercase org it was written as, 48 ranks, one trial per Option."""
    base = ("/mnt/mlperf-results/open/farmgpu/results/potato8-qlc-np6-open-tnf-70b/kv_cache/llama3.1-70b-instruct/run/"
            "20260709_215001")
    lost = {"1": [1, 2, 4, 6, 9, 12, 13, 14, 15, 16, 20, 24, 26, 27, 31, 33, 35, 37, 39, 40, 42, 43, 45, 46],
            "2": [9, 11, 12, 13, 14, 15, 16, 20, 21, 22, 23, 24, 30, 33, 34, 35, 36, 39, 42, 43, 45]}
    summary = {"total_ranks": 48, "trials_per_option": 1, "partial_failure": True, "options": {
        o: {"rank_count": 48, "trial_count": 1, "partial_failure": o in lost,
            "missing_files": [f"{base}/option_{o}/trial_0/rank_{r}" for r in lost.get(o, [])]} for o in ("1", "2", "3")}}
    found = partial_failure(summary)
    assert (found.missing_ranks, found.trials_failed) == (45, 0)
    assert found.text() == ("45 rank result(s) missing, 0 trial(s) failed (Option 1: 24 of 48 rank results missing; "
                            "Option 2: 21 of 48 rank results missing)")
    assert len(declared_missing(summary)) == 45 and ("2", 0, 45) in declared_missing(summary)


def test_a_clean_run_has_no_partial_failure():
    assert partial_failure({"options": {"1": {"partial_failure": False, "missing_files": []}},
                            "partial_failure": False, "trial_failures": {}}) is None


# --- which run the row publishes ---------------------------------------------------------------

def test_the_latest_error_free_run_is_published_and_the_other_named(fresh):
    root = fresh(**KV_ONLY)
    [first] = kv_runs(root)
    second = first.with_name(later(first.name, timedelta(hours=2)))
    shutil.copytree(first, second)
    regenerate(root)
    row = kv_row(root)
    detail = json.loads((first.parent / "results.json").read_text())
    assert detail["figures"]["published_run"] == second.name and detail["runs"] == [first.name, second.name]
    assert any(f"publishes {second.name} (the latest error-free run) and drops {first.name} (error-free, but earlier)" in i
               for i in row["Issues"])
    # the later run loses ranks: the earlier, error-free one is published and the later is named
    lose_ranks(second, "1", 0)
    regenerate(root)
    row = kv_row(root)
    assert json.loads((first.parent / "results.json").read_text())["figures"]["published_run"] == first.name
    [issue] = [i for i in row["Issues"] if "measured runs" in i]
    assert f"publishes {first.name} (the latest error-free run) and drops {second.name} (partial failure: 3 rank" in issue
    assert row["KVCache - Logs"]["href"].endswith("kv_cache/llama3.1-8b")


def test_a_run_without_summary_is_dropped_and_a_flagged_one_published(fresh):
    """FarmGPU's workload: one leaf holding only its code-image pointer, and one partial failure."""
    root = fresh(**KV_ONLY)
    [run] = kv_runs(root)
    empty = run.with_name(later(run.name, -timedelta(minutes=30)))
    empty.mkdir()
    shutil.copy(run / ".mlps-code-image", empty / ".mlps-code-image")
    lose_ranks(run, "1", 1)
    regenerate(root)
    [issue] = [i for i in kv_row(root)["Issues"] if "measured runs" in i]
    assert f"publishes {run.name} (no run is error-free: the latest with a summary) and drops {empty.name} (no metadata" in issue


def test_a_row_with_no_figure_is_withheld_and_says_why(fresh):
    root = fresh(**KV_ONLY)
    [leaf] = kv_runs(root)
    (leaf / "summary.json").unlink()
    published_shape(leaf)
    regenerate(root)
    org = json.loads((root / "closed/Acme/results/results.json").read_text())
    assert [r for r in org["rows"] if r["Benchmark Type"] == "KVCache"] == []
    [withheld] = org["withheld"]
    assert withheld["result"].endswith("kv_cache/llama3.1-8b") and f"{leaf.name} (no summary.json)" in withheld["why"]
    detail = json.loads((leaf.parent / "results.json").read_text())
    assert detail["rows"] == [] and detail["withheld"] == withheld["why"]
    # the ID minted when the row published stays pinned to the result, and no row carries it now
    ids = json.loads((root / "closed/Acme/results/public_ids.json").read_text())
    assert ids[withheld["result"]] not in [r["Public ID"] for r in org["rows"]] and "public_id" not in detail
    assert [f.severity for f in findings(root, "6.3.4.5")] == [INVALID]  # validate: no headline result


def test_the_older_summary_name_is_withheld_and_named(fresh):
    """ZettaLane's leaf: its aggregate under kvcache_run_summary_<ts>.json (the name Rules 6.3.4 uses),
    whose row the v3.0 review withheld: reportgen withholds it too, and validate says so."""
    root = fresh(**KV_ONLY)
    [leaf] = kv_runs(root)
    older = f"kvcache_run_summary_{leaf.name}.json"
    (leaf / "summary.json").rename(leaf / older)
    regenerate(root)
    org = json.loads((root / "closed/Acme/results/results.json").read_text())
    assert not [r for r in org["rows"] if r["Benchmark Type"] == "KVCache"]
    [withheld] = org["withheld"]
    assert older in withheld["why"] and f"rename {older} to summary.json" in withheld["why"]
    found = findings(root, "6.3.4.5")
    assert [(f.severity, Path(f.path).name) for f in found] == [(WARNING, older)]
    assert f"rename {older} to summary.json" in found[0].message and "withholds" in found[0].message
    assert not [f for f in findings(root, "6.3.4.1") if f.severity == INVALID]


# --- the columns of an Option ---------------------------------------------------------------------

def as_published_70b(leaf: Path, options: tuple[str, ...], cpu: str) -> None:
    """As FarmGPU's metadata records it: no plan of ours (the v3.0 flat pins), and invocations that
    ran llama3.1-70b-instruct with --cpu-mem-gb `cpu` in the given Options."""
    def edit(data: dict) -> None:
        data["parameters"] = {"model": "llama3.1-70b-instruct", "gpu_mem_gb": 1.0, "cpu_mem_gb": 1.0}
        for entry in data["command_output_files"]:
            if any(f"/option_{o}/" in entry["command"] for o in options):
                entry["command"] = (entry["command"].replace("--model llama3.1-8b", "--model llama3.1-70b-instruct")
                                    .replace("--cpu-mem-gb 4", f"--cpu-mem-gb {cpu}").replace("--cpu-mem-gb 0", f"--cpu-mem-gb {cpu}"))
    edit_json(metadata_file(leaf), edit)
    for rank_file in leaf.glob("option_*/trial_*/rank_*/kvcache_results_*.json"):
        edit_json(rank_file, lambda d: d.pop("run"))  # the published rank files have no run block


def test_an_open_70b_runs_options_land_in_columns_of_its_own_model(fresh):
    root = fresh(families=("kv_cache",), division="open")
    [leaf] = kv_runs(root, "open")
    as_published_70b(leaf, ("1", "2"), "0")
    regenerate(root)
    row = kv_row(root, "open")
    summary = json.loads((leaf / "summary.json").read_text())["options"]
    own = {o: f"KVCache llama3.1-70b-instruct Option {o} Storage Only - Read B/W (GiB/s)" for o in ("1", "2")}
    for option, column in own.items():
        assert row[column] == summary[option]["aggregated_read_bandwidth_gbps"]
    # never another model's: the 8b columns stay blank, and Option 1 (70b, storage only) is not put in
    # CLOSED's "llama3.1-70b Storage Only" columns, which hold Option 3's figures as the table's Option 3
    assert row[CLOSED_READ[0]] is None and row[CLOSED_READ[1]] is None
    assert row[CLOSED_READ[2]] == summary["3"]["aggregated_read_bandwidth_gbps"]
    with open(root / "open/Acme/results/results.csv", encoding="utf-8") as fh:
        header = next(csv.reader(fh))
    assert header[-1] == "Issues" and set(own.values()) <= set(header)
    assert header[:len(table.COLUMNS) - 1] == table.COLUMNS[:-1]
    assert json.loads((root / "open/Acme/results/results.json").read_text())["columns"] == header


def test_an_option_with_a_memory_tier_is_not_labelled_storage_only(fresh):
    """FarmGPU ran every Option with --gpu-mem-gb 1.0 --cpu-mem-gb 1.0: Option 3's model is the
    table's, but it is not the table's storage-only Option 3."""
    root = fresh(families=("kv_cache",), division="open")
    [leaf] = kv_runs(root, "open")
    as_published_70b(leaf, ("1", "2", "3"), "1.0")
    regenerate(root)
    row = kv_row(root, "open")
    assert all(row[c] is None for c in CLOSED_READ)
    assert {o: row[f"KVCache llama3.1-70b-instruct Option {o} Storage + Mem - Read B/W (GiB/s)"] is not None
            for o in ("1", "2", "3")} == {"1": True, "2": True, "3": True}


def test_a_closed_run_fills_the_published_columns_only(fresh):
    root = fresh(**KV_ONLY)
    regenerate(root)
    with open(root / "closed/Acme/results/results.csv", encoding="utf-8") as fh:
        assert next(csv.reader(fh)) == table.COLUMNS
    row = kv_row(root)
    assert all(row[c] is not None for c in CLOSED_READ)
