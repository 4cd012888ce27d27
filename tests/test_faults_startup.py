"""A start-up that hangs, on real runs: one rank stuck in an import (a sitecustomize on the
ranks' PYTHONPATH that blocks rank 1 of the engine before any of our code runs) is ended within
the start-up allowance, exit 11, naming the rank; nothing of the run is left and the leaf
records the failure. For kv-cache.py ranks, our checkpoint engine and DLIO 2.0.0 (training
datagen). A remote host whose ssh never answers at launch is tests/test_cluster_storage.py's."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
import yaml

from conftest import MLPSTORAGE, all_leaves, subprocess_env
from faults import assert_failed_leaf, leftover, pids_matching, wait_for
from test_faults_checkpointing import argv as checkpoint_argv
from test_faults_training import datagen
from test_kvcache_cli import SMALL

pytestmark = pytest.mark.heavy

ALLOWANCE_S = 8
# Stopping the launcher's tree once the allowance is over: SIGTERM, 5 s grace, SIGTERM, SIGKILL
# (process.stop_tree), and the exit of mlpstorage after it: a property of the product.
TEARDOWN_S = 30

HANG = '''
import os, time
if os.environ.get("OMPI_COMM_WORLD_RANK") == "1":
    with open("/proc/self/cmdline", "rb") as fh:
        line = fh.read().replace(b"\\0", b" ").decode()
    if os.environ["MLPS_TEST_HANG_IN"] in line:
        time.sleep(3600)
'''


def hung_rank_env(tmp_path: Path, program: str) -> dict[str, str]:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(HANG)
    env = subprocess_env(tmp_path)
    env.update(PYTHONPATH=str(site), MLPS_TEST_HANG_IN=program)
    return env


def kvcache(results: Path, cache: Path, tmp_path: Path) -> list[str]:
    config = tmp_path / "small.yaml"
    config.write_text(yaml.safe_dump(SMALL))
    return [str(MLPSTORAGE), "open", "kvcache", "run", "-np", "2", "--cache-dir", str(cache), "-rd", str(results),
            "-sn", "sys1", "--model", "tiny-1b", "--num-users", "3", "--duration", "5", "--trials", "1",
            "--inter-option-delay", "0", "--option", "1", "--config", str(config)]


# What the error names: kv-cache.py ranks report before MPI is wired up, so rank 0 reports; our
# engine reports once MPI_Init is done, and DLIO 2.0.0's imports initialize MPI (the fork's do
# not), which rank 0 cannot finish without rank 1.
BOTH = "2 of 2 rank(s) did not report: rank 0, 1; no rank on 127.0.0.1 started"
CASES = {
    "kv-cache.py": ("mlperf_wrapper.py", lambda r, d, t: kvcache(r, d / "kv", t), "1 of 2 rank(s) did not report: rank 1 (on 127.0.0.1)"),
    "checkpoint engine": ("mlpstorage_py.checkpoint.engine", lambda r, d, t: checkpoint_argv(r, d, 1, 1), BOTH),
    "DLIO": ("dlio_rank", lambda r, d, t: datagen(r, d, 4), BOTH),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_rank_stuck_in_an_import_is_ended_by_the_start_up_allowance(results, other_fs_dir, tmp_path, case):
    program, make, named = CASES[case]
    env = hung_rank_env(tmp_path, program)
    argv = make(results, other_fs_dir, tmp_path) + ["--startup-allowance", str(ALLOWANCE_S)]
    child = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        # The hung rank exists: from here the allowance (counted from the launch) has at most
        # ALLOWANCE_S to go. Waiting for that is waiting for a phase, however busy the machine.
        wait_for(lambda: len(pids_matching(program, str(results))) + len(pids_matching(program, str(other_fs_dir))) > 0,
                 300, child)
        seen = time.monotonic()
        _, err = child.communicate(timeout=ALLOWANCE_S + TEARDOWN_S + 60)
        took = time.monotonic() - seen
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    errors = [l for l in err.splitlines() if l.startswith("mlpstorage: error:")]
    assert child.returncode == 11, err
    assert len(errors) == 1, err
    assert f"did not start within its start-up allowance of {ALLOWANCE_S} s" in errors[0], errors[0]
    assert named in errors[0], errors[0]
    assert took < ALLOWANCE_S + TEARDOWN_S, f"{took:.1f} s from the hung rank to the exit"
    wait_for(lambda: not leftover(str(results)) and not leftover(str(other_fs_dir)), 30,
             message=lambda: leftover(str(results)) + leftover(str(other_fs_dir)))
    leaf = max(all_leaves(results))
    assert_failed_leaf(leaf, 11, "start-up allowance")
