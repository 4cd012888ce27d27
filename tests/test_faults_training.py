"""Faults injected into a real training datagen (DLIO 2.0.0 under mpirun -np 2): SIGTERM and
SIGKILL to mlpstorage, SIGKILL to one DLIO rank, and a data directory that fills up (SIGINT
mid-run across hosts is tests/test_cluster_training.py's). Each case bounds its time and
asserts the exit code, the leaf's state, that no rank is left, and a clean next datagen."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import MLPSTORAGE, all_leaves, subprocess_env
from fault_figures import record
from faults import assert_failed_leaf, assert_incomplete_everywhere, inject, leftover, pids_matching, small_fs, work_started

pytestmark = pytest.mark.heavy


def datagen(results: Path, data: Path, files: int, *extra: str) -> list[str]:
    return [str(MLPSTORAGE), "open", "training", "unet3d", "datagen", "-np", "2", "-dd", str(data), "-sn", "sys1",
            "-rd", str(results), "-aip", "--params", f"dataset.num_files_train={files}",
            "dataset.record_length_bytes=65536", "dataset.record_length_bytes_stdev=0", *extra]


def dlio_ranks(results: Path) -> list[int]:
    return pids_matching("dlio_rank", str(results))


def generated(data: Path) -> int:
    return len(list((data / "unet3d" / "train").rglob("*.npz"))) if (data / "unet3d").is_dir() else 0


# CI injects one fault per kind of process (the other two under MLPS_FAULTS_FULL=1, bench/faults.py):
# each real datagen costs DLIO's start-up, about 15 s here.
FAULTS = ["SIGTERM", "SIGKILL rank", "SIGKILL mlpstorage"] if os.environ.get("MLPS_FAULTS_FULL") == "1" \
    else ["SIGKILL mlpstorage"]


@pytest.mark.parametrize("fault", FAULTS)
def test_fault_mid_datagen(results, other_fs_dir, tmp_path, fault):
    env = subprocess_env(tmp_path)
    faults = {"SIGTERM": lambda child: child.send_signal(signal.SIGTERM),
              "SIGKILL rank": lambda child: os.kill(dlio_ranks(results)[-1], signal.SIGKILL),
              "SIGKILL mlpstorage": lambda child: child.kill()}
    # the fault lands once the ranks are writing: DLIO's start-up is most of a datagen this small
    rc, err, took = inject(datagen(results, other_fs_dir, 8000), env,
                           lambda: work_started(results) and generated(other_fs_dir) > 0, faults[fault], str(results))
    assert took < 60, f"{took:.1f} s to stop"
    (leaf,) = all_leaves(results)
    if fault == "SIGKILL mlpstorage":
        assert rc == -signal.SIGKILL
        assert_incomplete_everywhere(results, leaf, env)
    else:
        code = 8 if fault == "SIGTERM" else 6
        assert rc == code, err
        assert_failed_leaf(leaf, code, "SIGTERM" if fault == "SIGTERM" else "")
    assert generated(other_fs_dir) < 8000
    # the next datagen (with --overwrite: the interrupted one left files) is unaffected
    res = subprocess.run(datagen(results, other_fs_dir, 8, "--overwrite"), env=env, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr
    assert generated(other_fs_dir) == 8
    record("fault", 1, 1, benchmark="training", fault=fault, seconds=round(took, 1))


def test_data_directory_fills_up(results, tmp_path):
    env = subprocess_env(tmp_path)
    with small_fs(tmp_path / "small", "64m", inodes=12) as data:
        started = time.monotonic()
        res = subprocess.run(datagen(results, data, 64, "--skip-fs-separation-gate"), env=env, capture_output=True,
                             text=True, timeout=300)
        took = time.monotonic() - started
    errors = [l for l in res.stderr.splitlines() if l.startswith("mlpstorage: error:")]
    assert res.returncode == 6, res.stderr
    assert len(errors) == 1 and ("ENOSPC" in errors[0] or "No space left" in errors[0]), res.stderr
    (leaf,) = all_leaves(results)
    assert_failed_leaf(leaf, 6, "")
    assert leftover(str(data)) == []
    record("fault", 1, 1, benchmark="training", fault="data directory full", seconds=round(took, 1),
           message=errors[0][:160])
