"""Checkpointing through the CLI: the CLOSED gates, and a scaled-down model under mpirun -np 2."""

from __future__ import annotations

import json
import shutil
import socket
import sys
import uuid
from importlib import metadata
from pathlib import Path

import numpy
import pytest

from conftest import all_leaves

SMALL = ["model.num_layers=2", "model.hidden_size=256", "model.ffn_hidden_size=512", "model.vocab_size=4096",
         "model.num_attention_heads=8", "model.num_kv_heads=2", "checkpoint.time_between_checkpoints=0"]


@pytest.fixture
def ckpt_dir(other_fs_dir):
    return other_fs_dir


def closed(*extra):
    return ("closed", "checkpointing", "llama3-70b", "run", "-cm", "64", "-sn", "sys1", *extra)


@pytest.mark.parametrize("argv, code, message", [
    (closed("-np", "8", "-at", "b200"), 9, "needs exactly 64 processes"),
    (("closed", "checkpointing", "llama3-405b", "run", "-np", "512", "-at", "b200", "-cm", "64", "-sn", "s"), 9, "GiB free"),
    (closed("-np", "64", "-at", "b200", "--params", "model.num_layers=2"), 9, "may not be overridden"),
    (closed("-np", "64", "-at", "b200", "-ncw", "5"), 2, "invalid choice"),
    (closed("-np", "64", "-at", "b200", "-ncw", "0", "-ncr", "0"), 2, "not both 0"),
    (("closed", "checkpointing", "llama3-70b", "run", "-np", "8", "-at", "b200", "-cm", "64", "-sn", "s", "--subset"), 9, "4.3.5"),
])
def test_closed_gates_refuse_before_any_leaf(cli, results, ckpt_dir, argv, code, message):
    res = cli(*argv, "-cf", ckpt_dir, "-rd", results)
    assert res.rc == code, res.err
    assert message in res.err
    assert all_leaves(results) == []
    assert list(ckpt_dir.iterdir()) == []


def test_too_little_accelerator_memory_is_reported(cli, results):
    res = cli("open", "checkpointing", "llama3-405b", "datasize", "-np", "8", "-at", "b200", "-cm", "64", "-rd", results)
    assert res.rc == 0 and "4.3.4" in res.err and "1,440 GiB" in res.err


def test_datasize_prints_the_layout_without_a_leaf(cli, results):
    res = cli("closed", "checkpointing", "llama3-8b", "datasize", "-np", "8", "-cm", "64", "-rd", results, "-sn", "s")
    assert res.rc == 0, res.err
    assert "104.70 GiB" in res.out and "TP 1 x PP 1 x DP 8" in res.out
    assert all_leaves(results) == []


def run(cli, results, ckpt_dir, writes, reads):
    return cli("open", "checkpointing", "llama3-8b", "run", "-np", "2", "-at", "b200", "-cm", "8", "-cf", ckpt_dir,
               "-sn", "sys1", "-rd", results, "-ncw", str(writes), "-ncr", str(reads), "--params", *SMALL)


def leaves(results):
    return sorted(p for p in all_leaves(results) if p.parent.name == "llama3-8b")


def test_combined_and_split_flows(cli, results, ckpt_dir):
    res = run(cli, results, ckpt_dir, 2, 2)
    assert res.rc == 0, res.err
    (leaf,) = leaves(results)
    summary = json.loads((leaf / "summary.json").read_text())
    metric = summary["metric"]
    rank0 = json.loads((leaf / "0_per_epoch_stats.json").read_text())["1"]
    saves = [rank0[f"save_ckpt{i}"]["throughput"] for i in (1, 2)]
    assert metric["save_checkpoint_io_mean_GB_per_second"] == pytest.approx(sum(saves) / 2)
    assert metric["save_checkpoint_io_stdev_GB_per_second"] == pytest.approx(abs(saves[0] - saves[1]) / 2)
    layout_bytes = summary["checkpoint_layout"]["total_bytes"]
    on_disk = sum(p.stat().st_size for p in (ckpt_dir / "llama3-8b" / "ckpt_1").rglob("*") if p.is_file())
    assert on_disk == layout_bytes
    assert metric["checkpoint_size_GB"] == pytest.approx(layout_bytes / 2 ** 30)
    for name in ("checkpointing_run.stdout.log", "checkpointing_run.stderr.log", "dlio.log", "1_per_epoch_stats.json",
                 "0_output.json", "dlio_config/config.yaml", "dlio_config/hydra.yaml", "dlio_config/overrides.yaml"):
        assert (leaf / name).is_file(), name
    meta = json.loads(next(leaf.glob("checkpointing_*_metadata.json")).read_text())
    assert meta["exit_status"] == 0 and meta["args"]["num_checkpoints_write"] == 2
    assert meta["parameters"]["model"]["transformer"]["hidden_size"] == 256
    assert meta["engine"] == summary["checkpoint_engine"]["name"] == "mlpstorage-checkpoint-engine"
    prov = json.loads((leaf / "provenance.json").read_text())
    assert prov["dlio"] == {"version": "n/a", "source": "mlpstorage-checkpoint-engine", "commit": "n/a"}
    assert prov["provenance"]["dlio"] == "n/a" and prov["core_config"]["allowlist"] == "checkpointing@1"
    # the engine is named on the console and in the leaf; each rank recorded what it imported
    engine = prov["engine"]
    assert engine["name"] == "mlpstorage-checkpoint-engine" and engine["path"].endswith("checkpoint/engine.py")
    assert f"engine: mlpstorage-checkpoint-engine {engine['version']} at {engine['path']} (our checkpoint engine: " in res.err
    (host,) = prov["libraries"]["hosts"]
    assert host["hostname"] == socket.gethostname() and host["ranks"] == [0, 1] and host["python"] == sys.executable
    assert host["libraries"]["mpi4py"]["version"] == metadata.version("mpi4py")
    assert host["libraries"]["numpy"]["file"] == numpy.__file__
    assert host["libraries"]["dlio_benchmark"] == host["libraries"]["torch"] == "not imported"
    assert meta["libraries_by_host"] == prov["libraries"]["hosts"] and meta["engine_identity"] == engine
    assert not (leaf / "rank_libraries").exists()

    write = run(cli, results, ckpt_dir, 2, 0)
    read = run(cli, results, ckpt_dir, 0, 2)
    assert write.rc == 0 and read.rc == 0, write.err + read.err
    _, write_leaf, read_leaf = leaves(results)
    write_metric = json.loads((write_leaf / "summary.json").read_text())["metric"]
    read_metric = json.loads((read_leaf / "summary.json").read_text())["metric"]
    assert "load_checkpoint_io_mean_GB_per_second" not in write_metric
    assert "save_checkpoint_io_mean_GB_per_second" not in read_metric
    assert read_metric["load_checkpoint_io_mean_GB_per_second"] > 0
    write_meta = json.loads(next(write_leaf.glob("*_metadata.json")).read_text())
    read_meta = json.loads(next(read_leaf.glob("*_metadata.json")).read_text())
    assert write_meta["invocation_end_time"] <= read_meta["invocation_start_time"]


def test_read_only_run_without_checkpoints_fails_with_a_leaf(cli, results, ckpt_dir):
    res = run(cli, results, ckpt_dir, 0, 2)
    assert res.rc == 6
    (leaf,) = leaves(results)
    meta = json.loads(next(leaf.glob("*_metadata.json")).read_text())
    assert meta["exit_status"] == 6 and "checkpoint engine" in meta["failure"]
