"""Training for real: DLIO 2.0.0 under mpirun -np 2 on a few MiB, plus the run-time gates."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from pathlib import Path

import pytest

from conftest import all_leaves, leaf_metadata

pytestmark = pytest.mark.skipif(shutil.which("mpirun") is None and not (Path(os.sys.executable).parent / "mpirun").exists(),
                                reason="no MPI launcher")
RECORD = 262144
SMALL = [f"dataset.record_length_bytes={RECORD}", "dataset.record_length_bytes_stdev=0",
         "dataset.record_length_bytes_resize=0", "train.epochs=2", "train.computation_time=0.01",
         "reader.batch_size=2", "reader.read_threads=1"]


@pytest.fixture
def data_dir(other_fs_dir):
    return other_fs_dir


def leaves_of(results, command):
    return [p for p in all_leaves(results) if p.parent.name == command]


@pytest.fixture
def rank_temp(monkeypatch):
    """A temporary directory of the test's own for the launcher and its ranks (TMPDIR), short
    enough for the sockets MPI and multiprocessing make in it."""
    path = Path(tempfile.mkdtemp(prefix="mlps-t-", dir="/tmp" if os.path.isdir("/tmp") else None))
    monkeypatch.setenv("TMPDIR", str(path))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.heavy
def test_datagen_then_run_through_dlio(cli, results, data_dir, rank_temp):
    gen = cli("open", "training", "unet3d", "datagen", "-np", "2", "-dd", data_dir, "-sn", "sys1", "-rd", results,
              "-aip", "--params", "dataset.num_files_train=16", *SMALL)
    assert gen.rc == 0, gen.err
    (gen_leaf,) = leaves_of(results, "datagen")
    files = sorted((data_dir / "unet3d" / "train").rglob("*.npz"))
    assert len(files) == 16
    manifest = json.loads((data_dir / "unet3d" / ".mlps-datagen-manifest.json").read_text())
    assert manifest["num_files_train"] == 16 and manifest["record_length_bytes"] == RECORD
    assert manifest["source_datagen_result_dir"] == str(gen_leaf.relative_to(results.resolve()))
    for name in ("training_datagen.stdout.log", "training_datagen.stderr.log", "dlio.log", "fs_separation.json",
                 "dlio_config/config.yaml", "dlio_config/hydra.yaml", "dlio_config/overrides.yaml"):
        assert (gen_leaf / name).is_file(), name
    meta = leaf_metadata(gen_leaf)
    assert meta["exit_status"] == 0 and meta["verification"] == "INVALID"
    assert meta["parameters"]["dataset"]["record_length_bytes"] == RECORD
    assert meta["engine_parameters"]["workload"]["dataset"]["record_length"] == RECORD
    assert "record_length_bytes" not in meta["engine_parameters"]["workload"]["dataset"]
    assert json.loads((gen_leaf / "fs_separation.json").read_text())["same_filesystem"] is False

    again = cli("open", "training", "unet3d", "datagen", "-np", "1", "-dd", data_dir, "-sn", "sys1", "-rd", results,
                "-aip", "--params", "dataset.num_files_train=16", *SMALL)
    assert again.rc == 9 and "not empty" in again.err

    run = cli("open", "training", "unet3d", "run", "-at", "b200", "-na", "2", "-cm", "1", "-dd", data_dir,
              "-sn", "sys1", "-rd", results, "-aip", "--params", *SMALL)
    assert run.rc == 0, run.err
    (run_leaf,) = leaves_of(results, "run")
    for name in ("training_run.stdout.log", "training_run.stderr.log", "summary.json", "per_epoch_stats.json",
                 "0_output.json", "1_output.json", "dlio.log", "datagen-manifest.json", "provenance.json"):
        assert (run_leaf / name).is_file(), name
    summary = json.loads((run_leaf / "summary.json").read_text())
    metric = summary["metric"]
    assert summary["num_accelerators"] == 2 and summary["num_files_train"] == 16
    assert len(metric["train_au_percentage"]) == 2
    assert metric["train_io_mean_MB_per_second"] == pytest.approx(
        metric["train_throughput_mean_samples_per_second"] * RECORD / 2 ** 20, rel=1e-9)
    meta = leaf_metadata(run_leaf)
    assert meta["exit_status"] == 0
    assert meta["datagen_manifest_file"] == "datagen-manifest.json"
    assert meta["parameters"]["dataset"]["num_files_train"] == 16
    assert meta["cluster_information"]["hosts"][0]["memory_total_bytes"] > 0
    assert meta["page_cache"]["dataset_fits_in_client_memory"] is True
    assert "mlpstorage_py.benchmarks.dlio_rank" in meta["executed_command"] and "{leaf}" not in meta["executed_command"]
    # DLIO's ranks recorded what they imported: DLIO 2.0.0 and torch from this environment
    (host,) = meta["libraries_by_host"]
    assert host["ranks"] == [0, 1] and host["libraries"]["dlio_benchmark"]["version"] == "2.0.0"
    assert host["libraries"]["torch"]["file"].startswith(str(Path(os.sys.executable).parent.parent))
    assert "engine: dlio_benchmark 2.0.0 at " in run.err and "(PyPI default" in run.err
    # the page cache is dropped before the run and between the two epochs, on every host (here one)
    assert meta["page_cache"]["before_run"] == "dropped"
    (boundary,) = meta["page_cache"]["between_epochs"]
    assert boundary["before_epoch"] == 2 and boundary["summary"] == "dropped"
    assert [h["page_cache"] for h in boundary["hosts"]] == ["dropped"]
    assert not list(Path.cwd().iterdir()), "nothing may be left in the user's working directory"
    # torch's reader workers made their multiprocessing directories in the ranks' own, now gone
    assert not [p.name for p in rank_temp.iterdir() if p.name.startswith(("pymp-", "mlps-rank-"))]

    noop = cli("open", "training", "unet3d", "run", "-at", "b200", "-na", "1", "-cm", "1", "-dd", data_dir,
               "-sn", "sys1", "-rd", results, "-aip", "--params", "workflow.train=False", *SMALL)
    assert noop.rc == 6 and ("did no training" in noop.err or "summary.json" in noop.err)
    failed = [p for p in leaves_of(results, "run") if p != run_leaf]
    assert len(failed) == 1 and leaf_metadata(failed[0])["exit_status"] == 6


def test_run_without_a_dataset_is_refused(cli, results, data_dir):
    res = cli("open", "training", "unet3d", "run", "-at", "b200", "-na", "1", "-cm", "1", "-dd", data_dir,
              "-sn", "sys1", "-rd", results)
    assert res.rc == 5 and "datagen first" in res.err
    assert all_leaves(results) == []


def write_manifest(data_dir: Path, files: int, record: int = 146600628) -> None:
    folder = data_dir / "unet3d"
    (folder / "train").mkdir(parents=True)
    (folder / ".mlps-datagen-manifest.json").write_text(json.dumps({
        "schema_version": 1, "model": "unet3d", "num_files_train": files, "num_subfolders_train": 0,
        "num_samples_per_file": 1, "record_length_bytes": record}))


def test_closed_run_below_the_datasize_minimum_is_refused(cli, results, data_dir):
    write_manifest(data_dir, 100)
    res = cli("closed", "training", "unet3d", "run", "-at", "b200", "-na", "2", "-cm", "1", "-dd", data_dir,
              "-sn", "sys1", "-rd", results)
    assert res.rc == 9 and "3.1.2" in res.err and "7000" in res.err  # 500 steps x batch 7 x 2
    # the gate needs the measured client hosts, so it runs inside the leaf, which records the refusal
    (leaf,) = all_leaves(results)
    meta = leaf_metadata(leaf)
    assert meta["exit_status"] == 9 and "3.1.2" in meta["failure"] and meta["client_hosts"][0]["ranks"] == [0, 1]


def test_run_asking_for_more_files_than_generated_is_refused(cli, results, data_dir):
    write_manifest(data_dir, 100)
    res = cli("closed", "training", "unet3d", "run", "-at", "b200", "-na", "2", "-cm", "1", "-dd", data_dir,
              "-sn", "sys1", "-rd", results, "--params", "dataset.num_files_train=200")
    assert res.rc == 9 and "3.3.1" in res.err


def test_closed_run_on_the_results_filesystem_is_refused(cli, results, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    write_manifest(data, 10_000_000)
    res = cli("closed", "training", "unet3d", "run", "-at", "b200", "-na", "1", "-cm", "1", "-dd", data,
              "-sn", "sys1", "-rd", results)
    assert res.rc == 9 and "same filesystem" in res.err
    assert all_leaves(results) == []


def test_datagen_capacity_gate(cli, results, data_dir):
    res = cli("closed", "training", "unet3d", "datagen", "-np", "1", "-dd", data_dir, "-sn", "sys1", "-rd", results,
              "--params", "dataset.num_files_train=10000000")
    assert res.rc == 9 and "GiB free" in res.err


def test_configview_prints_the_resolved_dlio_config_and_writes_nothing(cli, results, data_dir):
    res = cli("closed", "training", "retinanet", "configview", "-at", "b200", "-na", "4", "-cm", "64",
              "-dd", data_dir, "-sn", "sys1", "-rd", results)
    assert res.rc == 0, res.err
    assert "record_length: 322957" in res.out and "record_length_bytes" not in res.out
    assert "mlpstorage_py.benchmarks.dlio_rank" in res.out and "-n 4" in res.out
    assert all_leaves(results) == []
