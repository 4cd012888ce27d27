"""The checkpoint engine for real: 2 MPI ranks, a scaled-down llama (~43 MiB per checkpoint)."""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
import subprocess
import zlib
from pathlib import Path

import pytest

from conftest import VENV_BIN, subprocess_env
from mlpstorage_py.checkpoint.shards import build_layout

MPIRUN = VENV_BIN / "mpirun"
pytestmark = [
    pytest.mark.heavy,
    pytest.mark.skipif(not MPIRUN.exists() or importlib.util.find_spec("mpi4py") is None,
                       reason="needs mpirun and mpi4py in the venv"),
]

WORKLOAD = {
    "model": {"name": "llama_tiny", "num_layers": 2, "model_datatype": "fp16", "optimizer_datatype": "fp32",
              "parallelism": {"tensor": 1, "pipeline": 1, "zero_stage": 3},
              "transformer": {"vocab_size": 4096, "hidden_size": 256, "ffn_hidden_size": 512,
                              "num_attention_heads": 8, "num_kv_heads": 2}},
    "checkpoint": {"time_between_checkpoints": 0, "fsync": True},
}
LAYOUT = build_layout(WORKLOAD, 2)


def engine(tmp_path: Path, ckpt: Path, out: Path, writes: int, reads: int, *extra: str) -> subprocess.CompletedProcess:
    spec = tmp_path / "workload.json"
    spec.write_text(json.dumps(WORKLOAD), encoding="utf-8")
    env = subprocess_env(tmp_path) | {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    cmd = [str(MPIRUN), "-np", "2", str(VENV_BIN / "python"), "-m", "mlpstorage_py.checkpoint.engine",
           "--workload", str(spec), "--checkpoint-folder", str(ckpt), "--output-dir", str(out),
           "--num-write", str(writes), "--num-read", str(reads), "--block-size", str(1 << 20), *extra]
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def check_metric(out: Path, phase: str, count: int) -> None:
    """summary.json's metric is mean and population stdev over rank 0's per-checkpoint values."""
    stats = load(out / "0_per_epoch_stats.json")["1"]
    entries = [stats[f"{phase}_ckpt{i}"] for i in range(1, count + 1)]
    metric = load(out / "summary.json")["metric"]
    rates = [e["throughput"] for e in entries]
    durations = [e["duration"] for e in entries]
    assert metric[f"{phase}_checkpoint_io_mean_GB_per_second"] == statistics.mean(rates)
    assert metric[f"{phase}_checkpoint_io_stdev_GB_per_second"] == statistics.pstdev(rates)
    assert metric[f"{phase}_checkpoint_duration_mean_seconds"] == statistics.mean(durations)
    assert metric[f"{phase}_checkpoint_duration_stdev_seconds"] == statistics.pstdev(durations)
    for e in entries:
        assert e["throughput"] == pytest.approx(LAYOUT.total_gib / e["duration"])


def test_write_and_read_in_one_invocation(tmp_path):
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    run = engine(tmp_path, ckpt, out, 2, 2)
    assert run.returncode == 0, run.stderr
    assert len([line for line in run.stdout.splitlines() if "_ckpt" in line]) == 4

    for number in (1, 2):
        for rank in (0, 1):
            for f in LAYOUT.files(rank):
                assert (ckpt / f"ckpt_{number}" / f.name).stat().st_size == f.nbytes
    assert sum(p.stat().st_size for p in ckpt.rglob("*.pt")) == 2 * LAYOUT.total_bytes

    summary = load(out / "summary.json")
    assert summary["num_accelerators"] == 2 and summary["num_hosts"] == 1
    assert len(summary["host_memory_GB"]) == len(summary["host_cpu_count"]) == 1
    assert summary["metric"]["checkpoint_size_GB"] == LAYOUT.total_gib
    check_metric(out, "save", 2)
    check_metric(out, "load", 2)
    expected_policy = "drop_caches" if os.geteuid() == 0 else "fadvise_dontneed"
    assert summary["checkpoint_engine"]["cache_policy_applied"] == expected_policy
    assert summary["checkpoint_engine"]["block_size"] == 1 << 20

    for rank in (0, 1):
        output = load(out / f"{rank}_output.json")
        written = 2 * len(LAYOUT.files(rank))
        assert output["fsync_calls"] == written
        assert output["bytes_written"] == output["bytes_read"] == 2 * LAYOUT.rank_bytes(rank)
        assert output["cache_policy_applied"] == expected_policy
        stats = load(out / f"{rank}_per_epoch_stats.json")["1"]
        assert list(stats) == ["start", "save_ckpt1", "save_ckpt2", "load_ckpt1", "load_ckpt2", "end"]
    assert (out / "dlio.log").read_text(encoding="utf-8").startswith("mlpstorage checkpoint engine log")


def test_split_write_then_read_and_missing_file(tmp_path):
    ckpt = tmp_path / "ckpt"
    write = engine(tmp_path, ckpt, tmp_path / "w", 2, 0, "--cache-policy", "fadvise")
    assert write.returncode == 0, write.stderr
    metric = load(tmp_path / "w" / "summary.json")["metric"]
    assert "save_checkpoint_io_mean_GB_per_second" in metric
    assert not any(key.startswith("load_") for key in metric)
    assert load(tmp_path / "w" / "0_output.json")["cache_policy_applied"] == "none"

    read = engine(tmp_path, ckpt, tmp_path / "r", 0, 2, "--cache-policy", "fadvise")
    assert read.returncode == 0, read.stderr
    summary = load(tmp_path / "r" / "summary.json")
    assert not any(key.startswith("save_") for key in summary["metric"])
    check_metric(tmp_path / "r", "load", 2)
    assert summary["checkpoint_engine"]["cache_policy_applied"] == "fadvise_dontneed"
    assert load(tmp_path / "r" / "1_output.json")["checkpoints_read"] == ["ckpt_1", "ckpt_2"]

    victim = ckpt / "ckpt_2" / LAYOUT.files(1)[-1].name
    victim.unlink()
    broken = engine(tmp_path, ckpt, tmp_path / "x", 0, 2, "--cache-policy", "fadvise")
    assert broken.returncode != 0
    ours = [line for line in broken.stderr.splitlines() if line.startswith("checkpoint engine: error:")]
    assert len(ours) == 1 and "missing" in ours[0] and str(victim) in ours[0]
    assert not (tmp_path / "x" / "summary.json").exists()


def unique_512(path: Path) -> tuple[int, int]:
    """(512-byte chunks in the file, distinct ones): equal means nothing to deduplicate."""
    data = path.read_bytes()
    chunks = [data[i:i + 512] for i in range(0, len(data) - len(data) % 512, 512)]
    return len(chunks), len(set(chunks))


def test_o_direct_write_and_read_are_whole_durable_and_recorded(tmp_path):
    """O_DIRECT (OPEN): files of unaligned size written and read in full, fsync'd per file,
    still incompressible and non-dedupable at 512 B, and the leaf says which I/O was used."""
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    run = engine(tmp_path, ckpt, out, 1, 1, "--o-direct")
    assert run.returncode == 0, run.stderr
    engine_info = load(out / "summary.json")["checkpoint_engine"]
    assert engine_info["direct_io"] is True and "O_DIRECT" in engine_info["durability"]
    assert "fsync per file" in engine_info["durability"]
    for rank in (0, 1):
        output = load(out / f"{rank}_output.json")
        assert output["fsync_calls"] == len(LAYOUT.files(rank))
        assert output["bytes_written"] == output["bytes_read"] == LAYOUT.rank_bytes(rank)
        for f in LAYOUT.files(rank):
            path = ckpt / "ckpt_1" / f.name
            assert f.nbytes % 4096 and path.stat().st_size == f.nbytes  # an unaligned tail was written
            count, distinct = unique_512(path)
            assert count == distinct
            assert len(zlib.compress(path.read_bytes(), 1)) > 0.99 * f.nbytes


def test_default_buffered_write_records_its_durability(tmp_path):
    """Without --block-size, files move in 1 MiB requests; the leaf says how bytes became durable."""
    spec = tmp_path / "workload.json"
    spec.write_text(json.dumps(WORKLOAD), encoding="utf-8")
    env = subprocess_env(tmp_path) | {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    run = subprocess.run([str(MPIRUN), "-np", "2", str(VENV_BIN / "python"), "-m", "mlpstorage_py.checkpoint.engine",
                          "--workload", str(spec), "--checkpoint-folder", str(tmp_path / "ckpt"), "--output-dir",
                          str(tmp_path / "out"), "--num-write", "1", "--num-read", "0"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    info = load(tmp_path / "out" / "summary.json")["checkpoint_engine"]
    assert info["block_size"] == 1 << 20 and info["direct_io"] is False
    assert info["durability"].endswith("fsync per file, then of its directory, before the rank reports done")
    count, distinct = unique_512(tmp_path / "ckpt" / "ckpt_1" / LAYOUT.files(1)[-1].name)
    assert count == distinct


def test_closed_refuses_o_direct(tmp_path):
    proc = subprocess.run([str(VENV_BIN / "mlpstorage"), "closed", "checkpointing", "llama3-8b", "run", "-np", "8",
                           "-at", "b200", "-cm", "64", "--checkpoint-folder", str(tmp_path), "--o-direct"],
                          env=subprocess_env(tmp_path), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--o-direct is not allowed in the closed division" in proc.stderr
