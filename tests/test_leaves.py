"""Leaves: exclusive creation, and a complete leaf whatever way the run ends."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from conftest import DATASIZE, all_leaves, leaf_metadata, subprocess_env, workload_leaves
from mlpstorage_py.benchmarks.training import TrainingBenchmark
from mlpstorage_py.errors import Interrupted, UsageError
from mlpstorage_py.results.code_image import parse_pointer
from mlpstorage_py.results.leaf import check_name, create_leaf, workload_dir

WHEN = datetime(2026, 7, 12, 13, 47, 59)


def test_create_leaf_twice_moves_to_the_next_second(tmp_path):
    parent = tmp_path / "a" / "b"
    first, stamp1 = create_leaf(parent, WHEN, tmp_path)
    second, stamp2 = create_leaf(parent, WHEN, tmp_path)
    assert (stamp1, stamp2) == ("20260712_134759", "20260712_134800")
    assert first == parent / stamp1 and second == parent / stamp2
    assert first.is_dir() and second.is_dir()
    third, stamp3 = create_leaf(parent, WHEN, tmp_path)
    assert stamp3 == "20260712_134801"
    assert len({first, second, third}) == 3


def test_create_leaf_never_reuses_an_existing_directory(tmp_path):
    parent = tmp_path / "p"
    taken = parent / "20260712_134759"
    taken.mkdir(parents=True)
    (taken / "keep.txt").write_text("old run", encoding="utf-8")
    leaf, stamp = create_leaf(parent, WHEN, tmp_path)
    assert stamp == "20260712_134800"
    assert leaf != taken
    assert list(leaf.iterdir()) == []
    assert (taken / "keep.txt").read_text(encoding="utf-8") == "old run"
    assert sorted(p.name for p in parent.iterdir()) == ["20260712_134759", "20260712_134800"]


def test_create_leaf_refuses_a_file_in_the_way(tmp_path):
    parent = tmp_path / "p"
    parent.mkdir()
    (parent / "20260712_134759").write_text("a file, not a leaf", encoding="utf-8")
    leaf, stamp = create_leaf(parent, WHEN, tmp_path)
    assert stamp == "20260712_134800"
    assert (parent / "20260712_134759").read_text(encoding="utf-8") == "a file, not a leaf"


def test_workload_dir_layout_and_name_checks(tmp_path):
    assert workload_dir(tmp_path, "closed", "Org", "sys-1.a_b+c", Path("training/unet3d/run")) \
        == tmp_path / "closed" / "Org" / "results" / "sys-1.a_b+c" / "training" / "unet3d" / "run"
    for bad in ("", "..", "../x", "a/b", " a", "a b"):
        with pytest.raises(UsageError):
            check_name("system name", bad)


# --- a leaf is completed whatever happens during execute --------------------------------

def assert_complete_failed_leaf(results, status: int, failure_part: str) -> dict:
    leaves = workload_leaves(results)
    assert len(leaves) == 1
    leaf = leaves[0]
    meta = leaf_metadata(leaf)
    assert meta["exit_status"] == status
    assert meta["failure"] and failure_part in meta["failure"]
    assert "invocation_end_time" in meta
    prov = json.loads((leaf / "provenance.json").read_text(encoding="utf-8"))
    assert prov["schema"] == "mlps-run-provenance/1"
    pointer = (leaf / ".mlps-code-image").read_text(encoding="utf-8").strip()
    digest = parse_pointer(pointer)
    assert digest and prov["tool"]["code_image"] == pointer
    assert (results / "code-images" / f"code-{digest[:8]}").is_dir()
    assert "failed" in (leaf / "mlpstorage.errors.log").read_text(encoding="utf-8")
    return meta


@pytest.mark.parametrize("exc, status, failure", [
    (RuntimeError("disk on fire"), 1, "RuntimeError: disk on fire"),
    (KeyboardInterrupt(), 8, "interrupted"),
    (Interrupted("terminated by SIGTERM"), 8, "SIGTERM"),
])
def test_failure_in_execute_still_completes_the_leaf(cli, results, monkeypatch, exc, status, failure):
    def fail(self, plan, leaf):
        raise exc
    monkeypatch.setattr(TrainingBenchmark, "execute", fail)
    res = cli(*DATASIZE, "-sn", "sys1", "-rd", results)
    assert res.rc == status
    assert "Traceback" not in res.err
    assert_complete_failed_leaf(results, status, failure)


def test_interrupt_between_leaf_creation_and_execute_still_completes_the_leaf(cli, results, monkeypatch):
    from mlpstorage_py.benchmarks import lifecycle

    def sigterm_now():
        raise Interrupted("terminated by SIGTERM")
    monkeypatch.setattr(lifecycle, "host_info", sigterm_now)
    res = cli(*DATASIZE, "-sn", "sys1", "-rd", results)
    assert res.rc == 8
    assert len(workload_leaves(results)) == 1
    assert_complete_failed_leaf(results, 8, "SIGTERM")


SLOW_RUN = """
import sys, time
from mlpstorage_py.benchmarks.training import TrainingBenchmark

def slow(self, plan, leaf):
    (leaf / "started").write_text("x")
    time.sleep(30)

TrainingBenchmark.execute = slow
from mlpstorage_py.main import main
sys.exit(main(sys.argv[1:]))
"""


def test_real_sigterm_completes_the_leaf(cli, results, tmp_path):
    env = subprocess_env(tmp_path)
    proc = subprocess.Popen([sys.executable, "-c", SLOW_RUN, *DATASIZE, "-sn", "sys1", "-rd", str(results)],
                            env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        parent = results / "closed" / "Org" / "results" / "sys1" / "training" / "unet3d" / "datasize"
        while time.monotonic() < deadline and not list(parent.glob("*/started")):
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        assert list(parent.glob("*/started")), "the run never reached execute"
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 8, err
    assert "SIGTERM" in err
    meta = assert_complete_failed_leaf(results, 8, "SIGTERM")
    assert meta["runtime"] < 25


def test_successful_leaf_has_no_failure(cli, results):
    assert cli(*DATASIZE, "-sn", "sys1", "-rd", results).rc == 0
    meta = leaf_metadata(workload_leaves(results)[0])
    assert meta["exit_status"] == 0 and meta["failure"] is None
    assert meta["verification"] == "CLOSED"
    assert meta["provenance_file"] == "provenance.json"


def test_two_runs_in_the_same_second_get_two_leaves(cli, results, monkeypatch):
    from mlpstorage_py.benchmarks import lifecycle

    class Frozen(datetime):
        @classmethod
        def now(cls, tz=None):
            return WHEN
    monkeypatch.setattr(lifecycle, "datetime", Frozen)
    assert cli(*DATASIZE, "-sn", "sys1", "-rd", results).rc == 0
    assert cli(*DATASIZE, "-sn", "sys1", "-rd", results).rc == 0
    leaves = workload_leaves(results)
    assert [p.name for p in leaves] == ["20260712_134759", "20260712_134800"]
    assert [leaf_metadata(p)["run_datetime"] for p in leaves] == ["20260712_134759", "20260712_134800"]
    assert len(all_leaves(results)) == 2


# --- filesystem separation probe (Rules 3.4.2/4.4.2) -------------------------------------

def probe_leftovers(*dirs):
    return [p for d in dirs for p in d.iterdir() if p.name.startswith(".mlpstorage-fs-sep-probe-")]


def test_fs_probe_same_filesystem(tmp_path):
    from mlpstorage_py.results import fs_probe

    data, res = tmp_path / "data", tmp_path / "res"
    data.mkdir()
    res.mkdir()
    record = fs_probe.probe(data, res)
    assert record["same_filesystem"] is True
    assert record["method"] == "link_exdev"
    assert record["data_or_chkpt_realpath"] == os.path.realpath(data)
    assert record["results_realpath"] == os.path.realpath(res)
    assert probe_leftovers(data, res) == []


def test_fs_probe_different_filesystems(tmp_path):
    import tempfile

    from mlpstorage_py.results import fs_probe

    shm = "/dev/shm"
    if not os.path.isdir(shm) or not os.access(shm, os.W_OK):
        pytest.skip("/dev/shm is not available")
    if os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("/dev/shm and tmp_path are on the same filesystem")
    data = Path(tempfile.mkdtemp(prefix="mlps-test-", dir=shm))
    try:
        record = fs_probe.probe(data, tmp_path)
        assert record["same_filesystem"] is False
        assert probe_leftovers(data, tmp_path) == []
    finally:
        import shutil
        shutil.rmtree(data, ignore_errors=True)


def test_datasize_records_the_probe_when_data_dir_exists(cli, results, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    res = cli(*DATASIZE, "-sn", "sys1", "-rd", results, "--data-dir", data)
    assert res.rc == 0, res.err
    leaf = workload_leaves(results)[0]
    record = json.loads((leaf / "fs_separation.json").read_text(encoding="utf-8"))
    assert record["same_filesystem"] is True  # datasize only records; it does not refuse
    assert probe_leftovers(data, results) == []


def test_datasize_without_existing_data_dir_records_no_probe(cli, results, tmp_path):
    res = cli(*DATASIZE, "-sn", "sys1", "-rd", results, "--data-dir", tmp_path / "not-yet")
    assert res.rc == 0, res.err
    assert not (workload_leaves(results)[0] / "fs_separation.json").exists()
    assert not (tmp_path / "not-yet").exists()
