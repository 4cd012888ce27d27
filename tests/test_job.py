"""launch/job.py: the one way an engine job runs (placeholders, logs, progress, deadline, success check)."""

from __future__ import annotations

import contextlib
import sys

import pytest

from mlpstorage_py.errors import BenchmarkFailed, TimeoutExpired
from mlpstorage_py.launch.job import Job, run_job, scratch_dir
from mlpstorage_py.launch.mpi import LEAF, SCRATCH


def test_a_job_runs_in_its_scratch_with_the_leaf_filled_in(tmp_path):
    leaf = tmp_path / "leaf"
    leaf.mkdir()
    entered = []

    @contextlib.contextmanager
    def watch():
        entered.append("in")
        yield
        entered.append("out")

    program = "import os, sys; print(os.getcwd()); print(*sys.argv[1:], sep=chr(10))"
    with scratch_dir(tmp_path / "results", "unit") as scratch:
        assert scratch.parent == tmp_path / "results" / ".mlps" / "scratch" and scratch.name.startswith("unit-")
        done = run_job(Job([sys.executable, "-c", program, f"{LEAF}/x", SCRATCH], "unit job", leaf / "o.log", leaf / "e.log", 60,
                           progress=watch()), leaf, scratch)
    assert not scratch.exists()
    assert done.code == 0 and done.wall_s > 0 and entered == ["in", "out"]
    assert (leaf / "o.log").read_text().splitlines() == [str(scratch), f"{leaf}/x", str(scratch)]


def test_a_failed_job_names_its_error_unless_the_caller_judges_it(tmp_path):
    fail = [sys.executable, "-c", "raise ValueError('no such shard')"]
    with pytest.raises(BenchmarkFailed, match=r"^unit job exited with code 1: ValueError: no such shard \(see "):
        run_job(Job(fail, "unit job", tmp_path / "o.log", tmp_path / "e.log", 60), tmp_path, tmp_path)
    assert run_job(Job(fail, "unit job", tmp_path / "o.log", tmp_path / "e.log", 60, check=False), tmp_path, tmp_path).code == 1


def test_a_job_past_its_deadline_is_stopped(tmp_path):
    with pytest.raises(TimeoutExpired, match="unit job ran past its deadline of 1 s"):
        run_job(Job([sys.executable, "-c", "import time; time.sleep(60)"], "unit job", tmp_path / "o.log",
                    tmp_path / "e.log", 1), tmp_path, tmp_path)
