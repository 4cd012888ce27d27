"""reportgen: figures exactly as the rules define them, on the published data and on our own leaves."""

from __future__ import annotations

import csv
import json
import shutil
import statistics
from pathlib import Path

import pytest

from conftest import REALDATA
from mlpstorage_py.report import reportgen, table

needs_realdata = pytest.mark.skipif(not REALDATA.is_dir(), reason="../shared/realdata is absent")
NEWFW = "closed/NewFW/results/Solidigm_D5-P5336_61TB_Gen4_NVMe_QLC"
ALLUXIO = "closed/Alluxio/results/aws_c7i48xlarge_i3en12xlarge_1c_1s_8a"
# added to the corpus 2026-12-01
XSKY = "closed/XSKY/results/XSKY_AIMesh_3StorageNode_1Client"
UBIX = "closed/UBIX/results/UbiPower18000_16x15.36TB_NVMe_4xNDR400_3xStorageNode_1hosts256GBMem"
SAMSUNG = "closed/SAMSUNG/results/MEMORY_AE"




def expected_read_bw(run_dir: Path) -> float:
    """Rules 3.3.8 by hand: drop the earliest run (warm-up), mean the rest, MiB -> GiB."""
    runs = sorted(p for p in run_dir.iterdir() if p.is_dir())
    assert len(runs) == 6
    values = [json.loads((r / "summary.json").read_text())["metric"]["train_io_mean_MB_per_second"] for r in runs[1:]]
    return sum(values) / len(values) / 1024


@needs_realdata
@pytest.mark.parametrize("workload", [f"{NEWFW}/training/unet3d", f"{ALLUXIO}/training/retinanet", f"{XSKY}/training/unet3d"])
def test_training_read_bandwidth_on_published_runs(realdata_copy, workload):
    reportgen.generate(realdata_copy)
    result = json.loads((realdata_copy / workload / "run" / "results.json").read_text())
    assert result["figures"]["read_bw_gib_s"] == pytest.approx(expected_read_bw(realdata_copy / workload / "run"), abs=1e-9)
    # no issue but the notes of cells taken from a fallback in the leaf's own files (leaf_cells)
    assert [i for i in result["issues"] if not i.startswith(("Code from", "Accelerator Type"))] == []
    runs = sorted(p.name for p in (realdata_copy / workload / "run").iterdir() if p.is_dir())
    assert result["figures"]["warmup_run"] == runs[0] and result["figures"]["measured_runs"] == runs[1:]
    au = [statistics.fmean(json.loads((realdata_copy / workload / "run" / r / "summary.json").read_text())
                           ["metric"]["train_au_percentage"]) for r in runs[1:]]
    assert result["figures"]["train_mean_of_au_percentage"] == pytest.approx(statistics.fmean(au), abs=1e-9)


@needs_realdata
def test_checkpointing_and_kv_figures_on_published_leaves(realdata_copy):
    reportgen.generate(realdata_copy)
    ckpt = json.loads((realdata_copy / NEWFW / "checkpointing/llama3-8b/results.json").read_text())["figures"]
    assert ckpt["write_bw_gib_s"] == 3.076140817854296
    assert ckpt["read_bw_gib_s"] == 4.983509448925309
    rows = list(csv.DictReader(open(realdata_copy / "closed/NewFW/results/results.csv")))
    kv = next(r for r in rows if r["Benchmark Type"] == "KVCache")
    assert float(kv["KVCache llama3.1-8b Storage Only - Read B/W (GiB/s)"]) == pytest.approx(7.98, abs=0.01)
    assert float(kv["KVCache llama3.1-8b Storage + Mem - Read B/W (GiB/s)"]) == pytest.approx(1.79, abs=0.01)
    assert float(kv["KVCache llama3.1-70b Storage Only - Read B/W (GiB/s)"]) == pytest.approx(7.41, abs=0.01)
    assert kv["KVCache llama3.1-8b Storage Only - P95 Read Latency (ms)"] == ""  # not in the published summary
    vdb = next(r for r in csv.DictReader(open(realdata_copy / "closed/TTA/results/results.csv")))
    qps = [57922.4, 57619.8, 58009.7, 59245.4, 57669.3]
    assert float(vdb["VDB - Queries per Sec"]) == pytest.approx(sum(qps) / 5, abs=0.1)
    assert float(vdb["VDB - Recall Percentage"]) == pytest.approx(20.9675)


@needs_realdata
def test_figures_of_the_added_results_are_the_published_ones(realdata_copy):
    """The corpus README's verified figures of XSKY unet3d, UBIX's combined llama3-8b leaf and
    SAMSUNG kv_cache; every organization gets its tables, SAMSUNG's summary-less VDB result included."""
    written = reportgen.generate(realdata_copy)
    xsky = json.loads((realdata_copy / XSKY / "training/unet3d/run/results.json").read_text())["figures"]
    assert xsky["read_bw_gib_s"] == pytest.approx(67.73118324220155, abs=1e-9)
    ubix = json.loads((realdata_copy / UBIX / "checkpointing/llama3-8b/results.json").read_text())["figures"]
    assert ubix["write_bw_gib_s"] == 39.43581878409022 and ubix["read_bw_gib_s"] == 45.815375362359205
    rows = list(csv.DictReader(open(realdata_copy / "closed/SAMSUNG/results/results.csv")))
    kv = next(r for r in rows if r["Benchmark Type"] == "KVCache")
    assert float(kv["KVCache llama3.1-8b Storage Only - Read B/W (GiB/s)"]) == pytest.approx(13.54, abs=0.005)
    assert float(kv["KVCache llama3.1-8b Storage + Mem - Read B/W (GiB/s)"]) == pytest.approx(2.755, abs=0.005)
    assert float(kv["KVCache llama3.1-70b Storage Only - Read B/W (GiB/s)"]) == pytest.approx(14.11, abs=0.005)
    assert realdata_copy / SAMSUNG / "vector_database/milvus/DISKANN/run/results.json" in written
    for org in ("Alluxio", "NewFW", "TTA", "XSKY", "UBIX", "SAMSUNG"):
        assert realdata_copy / "closed" / org / "results/results.csv" in written, org
        assert realdata_copy / "closed" / org / "submission.yaml" in written, org


@needs_realdata
def test_csv_keeps_the_fixed_column_order_and_blank_cells(realdata_copy):
    reportgen.generate(realdata_copy)
    with open(realdata_copy / "closed/NewFW/results/results.csv") as fh:
        reader = csv.reader(fh)
        header = next(reader)
        rows = list(reader)
    assert header == table.COLUMNS
    assert all(len(r) == len(header) for r in rows)
    training = next(r for r in rows if r[header.index("Benchmark Type")] == "Training")
    assert training[header.index("Checkpointing - Write B/W (GiB/s)")] == ""
    assert training[header.index("Model")] == "Unet3D"


@needs_realdata
def test_public_ids_are_pinned_and_never_reused(realdata_copy):
    reportgen.generate(realdata_copy)
    ids_path = realdata_copy / "closed/NewFW/results/public_ids.json"
    first = json.loads(ids_path.read_text())
    assert sorted(first.values()) == ["v3.0-0001", "v3.0-0002", "v3.0-0003"]
    shutil.rmtree(realdata_copy / NEWFW / "kv_cache")
    reportgen.generate(realdata_copy)
    second = json.loads(ids_path.read_text())
    assert second == first  # the retired ID stays recorded
    rows = json.loads((realdata_copy / "closed/NewFW/results/results.json").read_text())["rows"]
    assert sorted(r["Public ID"] for r in rows) == sorted(v for k, v in first.items() if "kv_cache" not in k)


def test_training_result_with_the_wrong_run_count_is_flagged(tmp_path):
    from mlpstorage_py.results.summary import training
    from mlpstorage_py.results.tree.package import Leaf

    leaves = []
    for i in range(5):
        leaf = tmp_path / f"2026010{i + 1}_000000"
        leaf.mkdir()
        (leaf / "summary.json").write_text(json.dumps({"metric": {"train_io_mean_MB_per_second": 1024.0 * (i + 1),
                                                                   "train_au_percentage": [90.0, 92.0]}}))
        leaves.append(Leaf(leaf, "closed", "O", "s", "training", ("m", "run")))
    values, issues = training(leaves)
    assert any("expected 6 training runs" in i for i in issues)
    assert values["read_bw_gib_s"] == pytest.approx((2 + 3 + 4 + 5) / 4)  # the earliest is still the warm-up
    assert values["train_mean_of_au_percentage"] == pytest.approx(91.0)


SAMSUNG_VDB = "vector_database/milvus/DISKANN/run"
VDB_CELLS = {"VDB - # Client Nodes": "# Client Nodes", "VDB - Vector Count": "Vector Count",
             "VDB - Vector Dimension": "Vector Dimension", "VDB - Index Type": "Index Type",
             "VDB - Queries per Sec": "Queries per Sec", "VDB - Query Latency (ms)": "Query Latency",
             "VDB - Recall Percentage": "Recall Percentage", "VDB - Storage IOPs": "Storage IOPs",
             "VDB - Read B/W (GiB/s)": "Read B/W"}


def vdb_row(root: Path, org: str) -> dict:
    return next(r for r in json.loads((root / "closed" / org / "results/results.json").read_text())["rows"]
                if r["Benchmark Type"] == "VDB")


@needs_realdata
@pytest.mark.parametrize("org", ["TTA", "SAMSUNG"])
def test_every_blank_vdb_cell_carries_its_reason(realdata_copy, org):
    reportgen.generate(realdata_copy)
    row = vdb_row(realdata_copy, org)
    for column, label in VDB_CELLS.items():
        if row[column] in (None, ""):
            assert any(issue.startswith(f"{label} is blank: ") for issue in row["Issues"]), (column, row["Issues"])


@needs_realdata
def test_samsung_vdb_row_fills_what_its_files_record(realdata_copy):
    """No run has a summary.json: the scale and index come from config.json / the metadata /
    result_verdict.json, run 20260721_102236's figures from its native statistics.json (the row
    says so), and the four runs that kept neither file leave QPS and latency blank, with the reason."""
    reportgen.generate(realdata_copy)
    row = vdb_row(realdata_copy, "SAMSUNG")
    assert (row["VDB - Vector Count"], row["VDB - Vector Dimension"], row["VDB - Index Type"]) == (1_000_000, 1536, "DISKANN")
    assert row["VDB - # Client Nodes"] == 1  # args.distributed false
    assert "figures of run(s) 20260721_102236 read from their native statistics.json (no summary.json)" in row["Issues"]
    assert row["VDB - Queries per Sec"] is None
    assert any(i.startswith("Queries per Sec is blank: 4 of 5 runs record no throughput_qps") for i in row["Issues"])
    detail = json.loads((realdata_copy / SAMSUNG / SAMSUNG_VDB / "results.json").read_text())
    assert detail["figures"]["sources"]["20260721_102236"] == "statistics.json"


@needs_realdata
def test_vdb_figures_come_from_native_statistics_when_every_run_has_them(realdata_copy):
    """Give every SAMSUNG run the one published statistics.json: the row's figures are its figures."""
    runs = realdata_copy / SAMSUNG / SAMSUNG_VDB
    native = runs / "20260721_102236" / "statistics.json"
    for run in runs.iterdir():
        if run.is_dir() and not (run / "statistics.json").exists():
            shutil.copy(native, run / "statistics.json")
    reportgen.generate(realdata_copy)
    row = vdb_row(realdata_copy, "SAMSUNG")
    stats = json.loads(native.read_text())
    assert row["VDB - Queries per Sec"] == pytest.approx(stats["throughput_qps"]) == pytest.approx(142.02592384674477)
    assert row["VDB - Query Latency (ms)"] == pytest.approx(stats["p99_latency_ms"])
    assert row["VDB - Recall Percentage"] == pytest.approx(51.66)
    assert "figures of run(s) 20260721_102236, 20260721_102716, 20260721_102834, 20260721_102951, 20260721_103108 " \
           "read from their native statistics.json (no summary.json)" in row["Issues"]
