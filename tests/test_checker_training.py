"""Training rules (section 3) and RPT-01 on a copy of the published data: the untouched copy draws
none of these findings; one mutation each draws exactly that rule's finding."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import REALDATA
from mlpstorage_py import checker
from mlpstorage_py.report import reportgen

pytestmark = pytest.mark.skipif(not REALDATA.is_dir(), reason="../shared/realdata is absent")
UNET = "closed/NewFW/results/Solidigm_D5-P5336_61TB_Gen4_NVMe_QLC/training/unet3d"
META_RUN = f"{UNET}/run/20260712_134711"
MEASURED = f"{UNET}/run/20260712_151401"
RULES = ("3.1.2", "3.2.1", "3.3.1", "3.3.2", "3.3.4", "3.3.6", "3.3.7", "3.3.8", "3.4.1", "3.4.2", "3.6.2", "3.6.3",
         "RPT-01")


@pytest.fixture
def pkg(realdata_copy) -> Path:
    return realdata_copy


def findings(root: Path, rule: str) -> list:
    return [f for f in checker.validate(root)[1] if f.rule == rule]


def edit(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def test_published_data_draws_none_of_these_findings(pkg):
    assert [f for f in checker.validate(pkg)[1] if f.rule in RULES] == []


@pytest.mark.parametrize("rule, mutate", [
    ("3.3.2", lambda r: edit(r / MEASURED / "summary.json", lambda d: d["metric"].update(train_au_mean_percentage=87.2))),
    ("3.3.2", lambda r: edit(r / MEASURED / "summary.json", lambda d: d["metric"].update(train_au_meet_expectation="fail"))),
    ("3.1.2", lambda r: edit(r / META_RUN / "training_20260712_134711_metadata.json",
                             lambda d: d["parameters"]["dataset"].update(num_files_train="100"))),
    ("3.4.2", lambda r: edit(r / MEASURED / "fs_separation.json", lambda d: d.update(same_filesystem=True))),
    ("3.4.2", lambda r: (r / MEASURED / "fs_separation.json").unlink()),
    ("3.4.1", lambda r: edit(r / META_RUN / "training_20260712_134711_metadata.json",
                             lambda d: d["args"].update(data_dir=d["args"]["results_dir"]))),
    ("3.6.2", lambda r: edit(r / META_RUN / "training_20260712_134711_metadata.json",
                             lambda d: d["override_parameters"].update({"reader.batch_size": "3"}))),
    ("3.3.8", lambda r: edit(r / MEASURED / "summary.json", lambda d: d["metric"].update(train_au_percentage=[]))),
    ("3.3.6", lambda r: edit(r / MEASURED / "summary.json", lambda d: d.update(num_hosts=2, num_accelerators=3))),
    ("3.3.4", lambda r: edit(r / MEASURED / "summary.json", lambda d: d.update(num_hosts=2, num_accelerators=2))),
])
def test_one_mutation_one_finding(pkg, rule, mutate):
    mutate(pkg)
    found = findings(pkg, rule)
    assert len(found) == 1, found
    assert found[0].severity == "INVALID"


def test_capability_mismatch_is_a_warning(pkg):
    def two_hosts(d):
        host = d["system_info"]["hosts"][0]
        small = json.loads(json.dumps(host))
        small["memory"]["total"] = host["memory"]["total"] // 2
        d["system_info"]["hosts"] = [host, small]
    edit(pkg / META_RUN / "training_20260712_134711_metadata.json", two_hosts)
    found = findings(pkg, "3.3.7")
    assert [f.severity for f in found] == ["WARNING"] and "2.00x" in found[0].message


def test_message_names_the_run_and_the_numbers(pkg):
    edit(pkg / MEASURED / "summary.json", lambda d: d["metric"].update(train_au_mean_percentage=87.2))
    (f,) = findings(pkg, "3.3.2")
    assert f.path.endswith("20260712_151401") and "87.20%" in f.message and "90%" in f.message


def test_rollup_and_workload_tables_must_agree(pkg):
    reportgen.generate(pkg)
    assert findings(pkg, "RPT-01") == []
    edit(pkg / "closed/NewFW/results/results.json", lambda d: d["rows"][0].update({"Public ID": "v3.0-0099"}))
    messages = sorted(f.message for f in findings(pkg, "RPT-01"))
    assert len(messages) == 2 and any("v3.0-0099 has no workload-level" in m for m in messages)


def test_malformed_files_are_findings_not_crashes(pkg):
    (pkg / MEASURED / "summary.json").write_text('{"metric": {"train_au_mean')
    (pkg / META_RUN / "training_20260712_134711_metadata.json").write_text("[1, 2]")
    _, found = checker.validate(pkg)
    assert not [f for f in found if "checker error" in f.message]
    assert any(f.rule == "3.3.2" and "20260712_151401" in f.path for f in found)
