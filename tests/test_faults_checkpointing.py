"""Faults injected into a real checkpointing run (the MPI engine, -np 2, a scaled-down model):
SIGTERM and SIGKILL to mlpstorage, SIGKILL to one engine rank, and a checkpoint folder that
fills up. Every case bounds its time and asserts the exit code (ManPage EXIT STATUS), the
leaf's state, that no process of the run is left, and that the next run is unaffected."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import MLPSTORAGE, all_leaves, subprocess_env
from fault_figures import record
from faults import (assert_failed_leaf, assert_incomplete_everywhere, inject, pids_matching, shm_segments, small_fs,
                    work_started)

SMALL = ["model.num_layers=2", "model.hidden_size=256", "model.ffn_hidden_size=512", "model.vocab_size=4096",
         "model.num_attention_heads=8", "model.num_kv_heads=2", "checkpoint.time_between_checkpoints=0"]
ENGINE = "mlpstorage_py.checkpoint.engine"


def argv(results: Path, folder: Path, writes: int = 2, reads: int = 2, *extra: str) -> list[str]:
    return [str(MLPSTORAGE), "open", "checkpointing", "llama3-8b", "run", "-np", "2", "-at", "b200", "-cm", "8",
            "-cf", str(folder), "-sn", "sys1", "-rd", str(results), "-ncw", str(writes), "-ncr", str(reads),
            *extra, "--params", *SMALL]


def leaves(results: Path) -> list[Path]:
    return sorted(p for p in all_leaves(results) if p.parent.name == "llama3-8b")


def slow_run(results: Path, folder: Path) -> list[str]:
    """A run long enough to be caught mid-way: many checkpoints of the small model."""
    return argv(results, folder, 10, 10)


def engine_ranks(folder: Path) -> list[int]:
    return pids_matching(ENGINE, str(folder))


# SIGINT mid-run is also covered across hosts (tests/test_cluster_training.py): CI sends SIGTERM,
# MLPS_FAULTS_FULL=1 (bench/faults.py) both.
SIGNALS = [(signal.SIGTERM, 8, "SIGTERM")] + ([(signal.SIGINT, 8, "interrupted")] if os.environ.get("MLPS_FAULTS_FULL") == "1"
                                             else [])


@pytest.mark.parametrize("sig, code, failure", SIGNALS)
def test_signal_to_mlpstorage_mid_run(results, other_fs_dir, tmp_path, sig, code, failure):
    env = subprocess_env(tmp_path)
    rc, err, took = inject(slow_run(results, other_fs_dir), env, lambda: work_started(results),
                           lambda child: child.send_signal(sig), str(other_fs_dir))
    assert rc == code, err
    assert took < 30, f"took {took:.1f} s to stop"
    (leaf,) = leaves(results)
    assert_failed_leaf(leaf, code, failure)
    # the next run is unaffected
    res = subprocess.run(argv(results, other_fs_dir, 1, 1), env=env, capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stderr
    record("fault", 1, 1, benchmark="checkpointing", fault=signal.Signals(sig).name, seconds=round(took, 1))


def test_sigkill_to_one_engine_rank(results, other_fs_dir, tmp_path):
    before = shm_segments()
    rc, err, took = inject(slow_run(results, other_fs_dir), subprocess_env(tmp_path),
                           lambda: work_started(results),
                           lambda child: os.kill(engine_ranks(other_fs_dir)[-1], signal.SIGKILL), str(other_fs_dir))
    assert rc == 6, err
    assert took < 60
    (leaf,) = leaves(results)
    assert_failed_leaf(leaf, 6, "checkpoint engine")
    # the killed rank's segment (and those of the ranks ended after it) did not outlive the run
    assert shm_segments() - before == set()
    record("fault", 1, 1, benchmark="checkpointing", fault="SIGKILL rank", seconds=round(took, 1))


def test_sigkill_to_mlpstorage_leaves_an_incomplete_leaf(results, other_fs_dir, tmp_path):
    """The engine dies with mlpstorage (its launcher gets SIGTERM when its parent dies)."""
    env = subprocess_env(tmp_path)
    rc, _, took = inject(slow_run(results, other_fs_dir), env, lambda: work_started(results),
                         lambda child: child.kill(), str(other_fs_dir))
    assert rc == -signal.SIGKILL
    assert took < 30
    (leaf,) = leaves(results)
    assert not list(leaf.glob("*_metadata.json")), "a killed run cannot have written its metadata"
    assert_incomplete_everywhere(results, leaf, env)
    res = subprocess.run(argv(results, other_fs_dir, 1, 1), env=env, capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stderr
    record("fault", 1, 1, benchmark="checkpointing", fault="SIGKILL mlpstorage", seconds=round(took, 1))


def test_checkpoint_folder_fills_up(results, tmp_path):
    env = subprocess_env(tmp_path)
    with small_fs(tmp_path / "small", "64m", inodes=4) as folder:  # room by bytes (the gate passes), not by files
        started = time.monotonic()
        res = subprocess.run(argv(results, folder, 1, 0, "--skip-fs-separation-gate"), env=env, capture_output=True,
                             text=True, timeout=180)
        took = time.monotonic() - started
        remaining = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    errors = [l for l in res.stderr.splitlines() if l.startswith("mlpstorage: error:")]
    assert res.returncode == 6, res.stderr
    assert len(errors) == 1 and "No space left on device" in errors[0] and str(folder) in errors[0], res.stderr
    (leaf,) = leaves(results)
    assert_failed_leaf(leaf, 6, "No space left on device")
    assert not (leaf / "summary.json").exists(), "a run that could not write its checkpoint has no result"
    assert took < 120
    record("fault", 1, 1, benchmark="checkpointing", fault="checkpoint folder full", exit=res.returncode,
           message=errors[0][:160], left=len(remaining), seconds=round(took, 1))
