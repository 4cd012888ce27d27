"""Faults injected into a real local kvcache run (kv-cache.py per rank under mpirun -np 2):
SIGKILL to one rank, SIGKILL to mlpstorage, and a cache directory that fills up (SIGINT and
SIGTERM on remote ranks are tests/test_kvcache_hosts.py's). Each case bounds its time and
asserts the exit code, the leaf's state and that no rank is left."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from conftest import MLPSTORAGE, all_leaves, subprocess_env
from fault_figures import record
from faults import assert_failed_leaf, assert_incomplete_everywhere, inject, pids_matching, small_fs, work_started
from test_kvcache_cli import SMALL

pytestmark = pytest.mark.heavy


@pytest.fixture
def small_config(tmp_path) -> Path:
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(SMALL))
    return path


def argv(results: Path, cache: Path, config: Path, duration: int, *extra: str) -> list[str]:
    return [str(MLPSTORAGE), "open", "kvcache", "run", "-np", "2", "--cache-dir", str(cache), "-rd", str(results),
            "-sn", "sys1", "--model", "tiny-1b", "--num-users", "3", "--duration", str(duration), "--trials", "1",
            "--inter-option-delay", "0", "--option", "1", "--config", str(config), *extra]


def ranks(cache: Path) -> list[int]:
    return pids_matching("kv-cache.py", str(cache))


@pytest.mark.parametrize("fault", ["SIGKILL rank", "SIGKILL mlpstorage"])
def test_sigkill_mid_run(results, other_fs_dir, small_config, tmp_path, fault):
    env = subprocess_env(tmp_path)
    cache = other_fs_dir / "kv"
    kill = (lambda child: os.kill(ranks(cache)[-1], signal.SIGKILL)) if fault == "SIGKILL rank" else \
        (lambda child: child.kill())
    rc, err, took = inject(argv(results, cache, small_config, 30), env, lambda: work_started(results), kill, str(cache))
    assert took < 60, f"{took:.1f} s to stop"
    (leaf,) = all_leaves(results)
    if fault == "SIGKILL rank":
        assert rc == 6, err
        assert_failed_leaf(leaf, 6, "")
    else:
        assert rc == -signal.SIGKILL
        assert not list(leaf.glob("*_metadata.json"))
        assert_incomplete_everywhere(results, leaf, env)
    record("fault", 1, 1, benchmark="kvcache", fault=fault, seconds=round(took, 1))


def test_cache_directory_fills_up(results, small_config, tmp_path):
    env = subprocess_env(tmp_path)
    with small_fs(tmp_path / "small", "64m", inodes=6) as mount:
        cache = mount / "kv"
        started = time.monotonic()
        res = subprocess.run(argv(results, cache, small_config, 3), env=env,
                             capture_output=True, text=True, timeout=180)
        took = time.monotonic() - started
    errors = [l for l in res.stderr.splitlines() if l.startswith("mlpstorage: error:")]
    assert res.returncode == 6, res.stderr
    assert len(errors) == 1 and "No space left on device" in errors[0] and str(cache) in errors[0], res.stderr
    (leaf,) = all_leaves(results)
    assert_failed_leaf(leaf, res.returncode, "partial failure")
    record("fault", 1, 1, benchmark="kvcache", fault="cache directory full", exit=res.returncode,
           message=errors[0][:160], seconds=round(took, 1))
