"""validate predicts the v3.0 review (issue 41): where the published release shows a sentence was
not enforced as written (rules/calibrations.yaml), the case is a WARNING that quotes the sentence,
says what the review published and how the letter differs; `validate --letter` makes it INVALID.
Also: 5.4.1 reads the storage root under every name published tool versions record it, and 3.3.1
judges its datagen half (files and subfolders) when a workload has no datasize leaf."""

from __future__ import annotations

import functools
import json
import re
import shutil
from pathlib import Path

import pytest

import synthetic_families
from conftest import REALDATA
from mlpstorage_py import checker
from mlpstorage_py.checker import calibrations
from mlpstorage_py.checker.registry import INFO, INVALID, RULES, WARNING
from synthetic import edit_json, fresh, leaves_of, metadata_file, workload  # noqa: F401

SPEC = Path(__file__).resolve().parents[2] / "shared" / "spec" / "Rules-edition-3.0.txt"
KV_REAL = ("closed/NewFW/results/Solidigm_D5-P5336_61TB_Gen4_NVMe_QLC/kv_cache/llama3.1-8b",
           "closed/SAMSUNG/results/MEMORY_AE/kv_cache/llama3.1-8b")
SAMSUNG_VDB = "closed/SAMSUNG/results/MEMORY_AE/vector_database/milvus/DISKANN"
needs_realdata = pytest.mark.skipif(not REALDATA.is_dir(), reason="../shared/realdata is absent")


def of(findings, number: str, severity: str | None = None) -> list:
    return [f for f in findings if f.rule == number and (severity is None or f.severity == severity)]


def both(root: Path) -> tuple[list, list]:
    """The findings by default and with --letter."""
    return checker.validate(root)[1], checker.validate(root, letter=True)[1]


def says_calibration(message: str, key: str) -> bool:
    """(a) the quoted sentence, (b) what the review published with the package's count, (c) the letter."""
    cal = calibrations.table()[key]
    return (f'"{cal.sentence}"' in message and "the v3.0 review published" in message
            and re.search(r"this package holds \d+ such result", message) is not None
            and ("read to the letter" in message))


# --- the table -------------------------------------------------------------------------------

def test_every_calibration_quotes_its_rule_and_names_its_severities():
    table = calibrations.table()
    assert set(table) >= {"4.6.2/exactly-4", "6.3.4.3/statement", "6.3.4.5/device-p95"}
    for cal in table.values():
        assert cal.rule in RULES and (cal.default, cal.letter) == (WARNING, INVALID)
        assert (cal.match is None) == (cal.when is None)


@pytest.mark.skipif(not SPEC.is_file(), reason="../shared/spec is absent")
def test_every_quoted_sentence_is_in_the_edition_verbatim():
    text = " ".join(SPEC.read_text(encoding="utf-8").split())
    for cal in calibrations.table().values():
        rule_text = text[text.index(f"{cal.rule}. "):]
        assert cal.sentence in rule_text[:4000], cal.key


def test_rules_md_has_one_calibrations_row_per_calibration():
    rules_md = (Path(__file__).resolve().parents[1] / "Rules.md").read_text(encoding="utf-8")
    section = rules_md[rules_md.index("## Calibrations"):]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith(("| rule", "|---"))]
    assert sorted(r.split("|")[1].strip() for r in rows) == sorted(c.rule for c in calibrations.table().values())


def test_the_wrapped_rules_keep_their_summary_and_module():
    for number in ("6.3.4.3", "6.3.4.5"):
        rule = RULES[number]
        assert all(getattr(c.func, "__calibrated__", False) for c in rule.checks)
        assert rule.module.endswith("rules_kvcache_aggregate") and rule.summary
    calibrations.install(RULES)  # idempotent: a second install wraps nothing twice
    assert all(c.func.__wrapped__.__module__.endswith("rules_kvcache_aggregate") for c in RULES["6.3.4.5"].checks)


# --- 4.6.2: exactly 4 simulated accelerators per host ------------------------------------------

def _hosts(root: Path, layout: str) -> None:
    leaf = leaves_of(workload(root, "checkpointing"))[0]
    edit_json(metadata_file(leaf), lambda d: d.update(
        executed_command=d["executed_command"].replace("--host client1:8", f"--host {layout}")))


def test_exactly_4_per_host_is_a_warning_by_default_and_invalid_to_the_letter(fresh):
    root = fresh()
    _hosts(root, "client1:4,client2:4")
    default, letter = both(root)
    [warning] = of(default, "4.6.2")
    assert warning.severity == WARNING and says_calibration(warning.message, "4.6.2/exactly-4")
    assert "2 of 2 host(s) run exactly 4" in warning.message and "16 hosts x 4" in warning.message
    assert "this package holds 1 such result(s)" in warning.message
    [invalid] = of(letter, "4.6.2")
    assert invalid.severity == INVALID and "read to the letter (mlpstorage validate --letter)" in invalid.message


@pytest.mark.parametrize("layout", ["client1:3,client2:5", "client1:4,client2:3,client3:1"])
def test_fewer_than_4_on_a_host_stays_invalid_in_both_modes(fresh, layout):
    root = fresh()
    _hosts(root, layout)
    for findings in both(root):
        assert [f.severity for f in of(findings, "4.6.2")] == [INVALID]
        assert "each must run more than 4" in of(findings, "4.6.2")[0].message


def test_more_than_4_per_host_draws_nothing_in_either_mode(fresh):
    root = fresh()
    for findings in both(root):  # one host running all 8
        assert of(findings, "4.6.2") == []


# --- 6.3.4.3 / 6.3.4.5: device latency, on a summary the v3.0 tool wrote ------------------------

@pytest.fixture
def kv_root(fresh):
    with synthetic_families.registered():
        yield fresh(families=("kv_cache",))


def _kv_leaf(root: Path) -> Path:
    [leaf] = leaves_of(root / "closed" / "Acme" / "results" / "sys1" / "kv_cache" / "llama3.1-8b" / "run")
    return leaf


def _v30_summary(leaf: Path) -> None:
    """The summary as the v3.0 tool wrote it: no device P95s, no aggregation statement."""
    def strip(d: dict) -> None:
        d.pop("aggregation")
        for block in d["options"].values():
            for key in ("aggregated_device_read_p95_ms", "aggregated_device_write_p95_ms"):
                block.pop(key)
    edit_json(leaf / "summary.json", strip)


def test_our_kv_runs_write_the_device_p95s_and_the_statement(kv_root):
    summary = json.loads((_kv_leaf(kv_root) / "summary.json").read_text())
    assert "max over ranks and trials" in summary["aggregation"]["device_latency"]
    assert all({"aggregated_device_read_p95_ms", "aggregated_device_write_p95_ms"} <= set(o) for o in summary["options"].values())
    assert [f for f in checker.validate(kv_root)[1] if f.rule in ("6.3.4.3", "6.3.4.5") and f.severity != INFO] == []


def test_a_summary_of_ours_without_them_stays_invalid(kv_root):
    _v30_summary(_kv_leaf(kv_root))
    for findings in both(kv_root):
        assert [f.severity for f in of(findings, "6.3.4.3") if f.severity != INFO] == [INVALID]
        assert [f.severity for f in of(findings, "6.3.4.5")] == [INVALID]
        assert "Rules 6.3.4" not in " ".join(f.message for f in findings if f.rule.startswith("6.3.4"))


def test_a_v30_summary_without_them_is_a_warning_by_default(kv_root):
    leaf = _kv_leaf(kv_root)
    _v30_summary(leaf)
    (leaf / "provenance.json").unlink()  # the v3.0 tool wrote no provenance.json: not our run
    default, letter = both(kv_root)
    [statement] = of(default, "6.3.4.3", WARNING)
    [headline] = of(default, "6.3.4.5")
    assert headline.severity == WARNING and "lacks aggregated_device_read_p95_ms, aggregated_device_write_p95_ms" in headline.message
    assert says_calibration(statement.message, "6.3.4.3/statement")
    assert says_calibration(headline.message, "6.3.4.5/device-p95") and "all 23 of its kv_cache results" in headline.message
    assert of(default, "6.3.4.3", INVALID) == []
    assert [f.severity for f in of(letter, "6.3.4.3") if f.severity != INFO] == [INVALID]
    assert [f.severity for f in of(letter, "6.3.4.5")] == [INVALID]


def test_a_v30_headline_lacking_more_than_the_device_p95s_stays_invalid(kv_root):
    leaf = _kv_leaf(kv_root)
    _v30_summary(leaf)
    edit_json(leaf / "summary.json", lambda d: d["options"]["1"].pop("aggregated_read_bandwidth_gbps"))
    (leaf / "provenance.json").unlink()
    default = checker.validate(kv_root)[1]
    lacking = [f for f in of(default, "6.3.4.5") if "aggregated_read_bandwidth_gbps" in f.message]
    assert [f.severity for f in lacking] == [INVALID]


@needs_realdata
def test_realdata_device_latency_is_a_warning_by_default_and_invalid_to_the_letter():
    pkg, default = checker.validate(REALDATA)
    _, letter = checker.validate(REALDATA, letter=True)
    for number, key in (("6.3.4.3", "6.3.4.3/statement"), ("6.3.4.5", "6.3.4.5/device-p95")):
        warned = of(default, number, WARNING)
        assert sorted(pkg.result_of(f.path) for f in warned) == sorted(KV_REAL)
        assert all(says_calibration(f.message, key) and "this package holds 2 such result(s)" in f.message for f in warned)
        assert of(default, number, INVALID) == []
        assert sorted(pkg.result_of(f.path) for f in of(letter, number, INVALID)) == sorted(KV_REAL)
    # --letter moves exactly these four findings, nothing else
    strip = lambda fs: sorted((f.rule, f.path) for f in fs if f.severity == INVALID)  # noqa: E731
    assert len(strip(letter)) - len(strip(default)) == 4


def test_the_letter_flag_reaches_validate(fresh, cli):
    root = fresh()
    _hosts(root, "client1:4,client2:4")
    default = cli("validate", root, "--json")
    letter = cli("validate", root, "--letter", "--json")
    assert default.rc == 0 and letter.rc == 1
    sev = lambda out: [f["severity"] for f in json.loads(out)["findings"] if f["rule"] == "4.6.2"]  # noqa: E731
    assert (sev(default.out), sev(letter.out)) == ([WARNING], [INVALID])


# --- 5.4.1: the storage root under the names published tool versions use -------------------------

@functools.cache
def _samsung_leaves() -> list[Path]:
    return sorted(REALDATA.joinpath(SAMSUNG_VDB).glob("*/*/vector_database_*_metadata.json"))


@needs_realdata
def test_a_published_storage_root_in_args_is_read(tmp_path):
    """Published vector-database metadata (SAMSUNG's DISKANN, copied) that records args.storage_root
    beside a different args.results_dir, as a published tool version writes it: no 5.4.1 INVALID."""
    root = tmp_path / "pkg"
    shutil.copytree(REALDATA / "closed" / "SAMSUNG", root / "closed" / "SAMSUNG")
    for path in root.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    metas = sorted(root.joinpath(SAMSUNG_VDB).glob("*/*/vector_database_*_metadata.json"))
    assert len(metas) == len(_samsung_leaves()) == 7
    before = of(checker.validate(root)[1], "5.4.1", INVALID)
    assert len(before) == 7 and all("no storage root recorded" in f.message for f in before)
    for path in metas:
        edit_json(path, lambda d: d["args"].update(storage_root="/mnt/glfs/milvus"))
        assert json.loads(path.read_text())["args"]["results_dir"] != "/mnt/glfs/milvus"
    assert of(checker.validate(root)[1], "5.4.1") == []
    # read, not merely present: the same root as the results directory is INVALID
    edit_json(metas[0], lambda d: d["args"].update(storage_root=d["args"]["results_dir"]))
    [same] = of(checker.validate(root)[1], "5.4.1")
    assert same.severity == INVALID and "are not different directories" in same.message


def test_a_top_level_query_mode_and_count_are_read(fresh):
    """5.3.3 reads --queries and the mode where the v3.0 tool records them (metadata top level)."""
    with synthetic_families.registered():
        root = fresh(families=("vector_database",))
    run = leaves_of(root / "closed/Acme/results/sys1/vector_database/milvus/HNSW/run")[0]
    for path, block in ((run / "config.json", ("parameters", "run")), (metadata_file(run), ("parameters", "run"))):
        edit_json(path, lambda d: [d[block[0]][block[1]].pop(k) for k in ("mode", "queries")])
    edit_json(run / "summary.json", lambda d: [d.pop(k) for k in ("mode", "queries_requested")])
    edit_json(metadata_file(run), lambda d: (d["args"].update(queries=None), d.update(benchmark_mode="query_count",
                                                                                       queries=200000)))
    [short] = of(checker.validate(root)[1], "5.3.3", INVALID)
    assert "--queries asked for 200,000" in short.message


# --- 3.3.1: the datagen half without a datasize leaf ------------------------------------------

def _no_datasize(root: Path) -> Path:
    unet = workload(root, "training")
    shutil.rmtree(unet / "datasize")
    return unet


def _runs(unet: Path, change) -> None:
    for run in leaves_of(unet / "run"):
        edit_json(run / "summary.json", change)


def test_without_datasize_a_run_using_more_files_than_datagen_made_is_invalid(fresh):
    unet = _no_datasize(root := fresh())
    _runs(unet, lambda d: d.update(num_files_train=d["num_files_train"] + 100))
    findings = checker.validate(root)[1]
    assert of(findings, "3.1.1", INVALID)
    over = [f for f in of(findings, "3.3.1", INVALID) if "datagen made only 14000" in f.message]
    assert len(over) == len(leaves_of(unet / "run"))


def test_without_datasize_a_run_within_what_datagen_made_draws_no_3_3_1(fresh):
    unet = _no_datasize(root := fresh())
    _runs(unet, lambda d: d.update(num_files_train=d["num_files_train"] - 100))  # a subset is allowed
    findings = checker.validate(root)[1]
    assert of(findings, "3.1.1", INVALID) and of(findings, "3.3.1") == []


def test_a_datagen_leaf_with_only_its_configs_still_bounds_the_run(fresh):
    """As NewFW's published datagen leaf: no metadata, dlio_config/config.yaml records the files."""
    unet = _no_datasize(root := fresh())
    [gen] = leaves_of(unet / "datagen")
    metadata_file(gen).unlink()
    _runs(unet, lambda d: d.update(num_files_train=d["num_files_train"] + 1))
    over = [f for f in of(checker.validate(root)[1], "3.3.1", INVALID) if "datagen made only 14000" in f.message]
    assert len(over) == len(leaves_of(unet / "run"))


def test_without_datasize_the_subfolders_must_be_those_datagen_made(fresh):
    unet = _no_datasize(root := fresh())
    run = leaves_of(unet / "run")[0]
    edit_json(metadata_file(run), lambda d: d["parameters"]["dataset"].update(num_subfolders_train=3))
    [wrong] = of(checker.validate(root)[1], "3.3.1")
    assert wrong.severity == INVALID and Path(wrong.path).name == run.name
    assert "num_subfolders_train 3" in wrong.message and "holds 2" in wrong.message


@needs_realdata
def test_realdata_training_draws_no_3_3_1():
    """NewFW (no datasize; its datagen kept only configs) and XSKY (4 subfolders) are within."""
    assert of(checker.validate(REALDATA)[1], "3.3.1") == []
