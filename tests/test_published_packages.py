"""reportgen and validate on a published package as it is (no `mlpstorage init`, no sentinel):
the organizations come from the tree, nothing is written outside it, and the recomputed figures
are the published ones (the corpus README's verified facts)."""

from __future__ import annotations

import csv
import json
import os
import shutil
import statistics
from pathlib import Path

import pytest

from conftest import REALDATA
from mlpstorage_py import checker

pytestmark = pytest.mark.skipif(not REALDATA.is_dir(), reason="../shared/realdata is absent")
ORGS = ["Alluxio", "NewFW", "SAMSUNG", "TTA", "UBIX", "XSKY"]
NEWFW = "closed/NewFW/results/Solidigm_D5-P5336_61TB_Gen4_NVMe_QLC"


@pytest.fixture
def published(tmp_path) -> Path:
    """The whole corpus (pools, README and all) copied as a reviewer would download it."""
    root = tmp_path / "published"
    shutil.copytree(REALDATA, root)
    for path in root.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return root


def snapshot(base: Path, skip: Path) -> dict[str, float]:
    """Every path below base outside `skip`, with its mtime."""
    out = {}
    for dirpath, dirs, names in os.walk(base):
        if Path(dirpath) == skip or skip in Path(dirpath).parents:
            continue
        for name in dirs + names:
            path = Path(dirpath) / name
            if path != skip:
                out[str(path)] = path.lstat().st_mtime
    return out


def row(root: Path, org: str, benchmark: str) -> dict:
    rows = list(csv.DictReader(open(root / "closed" / org / "results/results.csv", encoding="utf-8")))
    return next(r for r in rows if r["Benchmark Type"] == benchmark)


def test_reportgen_on_an_uninitialised_package_reproduces_the_published_figures(cli, published, tmp_path):
    outside = snapshot(tmp_path, published)
    result = cli("reports", "reportgen", "--results-dir", published)
    assert result.rc == 0, result.err
    assert f"organization(s) {', '.join(ORGS)}" in result.out
    assert snapshot(tmp_path, published) == outside  # not even the user config: nothing outside the tree
    assert not (published / "mlperf-results.yaml").exists()
    # training: Read B/W = mean over the five measured runs of train_io_mean_MB_per_second / 1024
    for workload, low, high in ((f"{NEWFW}/training/unet3d", 5892.43, 5908.61),
                                ("closed/Alluxio/results/aws_c7i48xlarge_i3en12xlarge_1c_1s_8a/training/retinanet", 1152.08, 1155.85)):
        runs = sorted(p for p in (published / workload / "run").iterdir() if p.is_dir())
        values = [json.loads((r / "summary.json").read_text())["metric"]["train_io_mean_MB_per_second"] for r in runs]
        assert all(low - 0.01 <= v <= high + 0.01 for v in values)
        figures = json.loads((published / workload / "run/results.json").read_text())["figures"]
        assert figures["read_bw_gib_s"] == pytest.approx(statistics.fmean(values[1:]) / 1024, abs=1e-9)
    xsky = json.loads((published / "closed/XSKY/results/XSKY_AIMesh_3StorageNode_1Client/training/unet3d/run/results.json")
                      .read_text())["figures"]
    assert xsky["read_bw_gib_s"] == pytest.approx(67.73118324220155, abs=1e-9)
    ckpt = json.loads((published / NEWFW / "checkpointing/llama3-8b/results.json").read_text())["figures"]
    assert (ckpt["write_bw_gib_s"], ckpt["read_bw_gib_s"]) == (3.076140817854296, 4.983509448925309)
    ubix = row(published, "UBIX", "Checkpointing")
    assert float(ubix["Checkpointing - Write B/W (GiB/s)"]) == 39.43581878409022
    assert float(ubix["Checkpointing - Read B/W (GiB/s)"]) == 45.815375362359205
    for org, expected, tolerance in (("NewFW", (7.98, 1.79, 7.41), 0.01), ("SAMSUNG", (13.54, 2.755, 14.11), 0.005)):
        kv = row(published, org, "KVCache")
        got = [float(kv[f"KVCache {g} - Read B/W (GiB/s)"]) for g in
               ("llama3.1-8b Storage Only", "llama3.1-8b Storage + Mem", "llama3.1-70b Storage Only")]
        assert got == pytest.approx(list(expected), abs=tolerance), org
    vdb = row(published, "TTA", "VDB")
    assert float(vdb["VDB - Queries per Sec"]) == pytest.approx(statistics.fmean([57922.4, 57619.8, 58009.7, 59245.4, 57669.3]), abs=0.1)
    assert float(vdb["VDB - Recall Percentage"]) == pytest.approx(20.9675)
    assert (vdb["VDB - Vector Count"], vdb["VDB - Vector Dimension"]) == ("1000000", "1536")


def test_validate_on_an_uninitialised_package(cli, published, tmp_path):
    """validate reads the copy as it is: the same findings as the corpus itself, and no file written."""
    outside, inside = snapshot(tmp_path, published), snapshot(published, published / "none")
    result = cli("validate", published, "--json")
    assert result.rc == 1  # the corpus lacks most files (its README): INVALID by artefact
    assert snapshot(tmp_path, published) == outside and snapshot(published, published / "none") == inside
    ours = sorted((f["rule"], f["severity"], os.path.relpath(f["path"], published)) for f in json.loads(result.out)["findings"])
    _, findings = checker.validate(REALDATA)
    assert ours == sorted((f.rule, f.severity, os.path.relpath(f.path, REALDATA)) for f in findings)
    assert cli("validate", "--results-dir", published).rc == 1  # either way of naming the tree


def test_a_sentinel_names_the_organization(cli, published):
    (published / "mlperf-results.yaml").write_text("orgname: NewFW\n", encoding="utf-8")
    result = cli("reports", "reportgen", "--results-dir", published)
    assert result.rc == 0 and "organization(s) NewFW\n" in result.out


def test_a_tree_with_no_organization_is_refused(cli, tmp_path):
    (tmp_path / "empty").mkdir()
    result = cli("reports", "reportgen", "--results-dir", tmp_path / "empty")
    assert result.rc == 5 and "no closed/<org>/ or open/<org>/" in result.err
