"""validate part by part (Package.parts): a large package's rules that allow it run on one part
of its systems at a time, releasing what they read before the next part. These tests hold that
to the same findings, in the same order, as one run over the whole package: on the real
corpus, and on a package of three systems in two organizations, pristine and mutated by the
fuzzer's mutations (links, FIFOs, missing and broken files, odd names)."""

from __future__ import annotations

import os
import random
import re
import shutil
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import synthetic
import synthetic_families
from conftest import REALDATA
from test_fuzz_checker import KINDS, make_outside, mutate

from mlpstorage_py import checker
from mlpstorage_py.results.tree import files
from mlpstorage_py.checker import workers
from mlpstorage_py.results.tree.package import Package
from mlpstorage_py.checker.registry import RULES

FAMILIES = ("training", "checkpointing", "vector_database", "kv_cache")
LEAF_PATH = re.compile(r"/results/.*/\d{8}_\d{6}(/|$)")


def findings(root: Path, monkeypatch: pytest.MonkeyPatch, part_leaves: int, pooled: bool = False) -> list[dict]:
    """validate's findings with parts of at most `part_leaves` leaves, checked here or by
    forked workers (two of them, even on one core)."""
    monkeypatch.setattr(checker, "PART_LEAVES", part_leaves)
    monkeypatch.setattr(checker, "POOL_MIN_LEAVES", 0 if pooled else 10 ** 9)
    monkeypatch.setattr(workers, "workers_here", lambda: 2)
    return [f.as_dict() for f in checker.validate(root)[1]]


def both_ways(root: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list[dict], list[dict]]:
    """(findings over the whole package, findings one system a part)."""
    return findings(root, monkeypatch, 10 ** 9), findings(root, monkeypatch, 1)


@pytest.fixture(scope="module")
def three_systems(tmp_path_factory) -> Path:
    """closed/Acme with systems sys1 and sys2, open/Beta with sys3, all four families each."""
    with synthetic_families.registered():
        root = tmp_path_factory.mktemp("parts") / "pkg"
        shutil.copytree(synthetic.pristine(families=FAMILIES), root, symlinks=True)
        for division, org, system in (("closed", "Acme", "sys2"), ("open", "Beta", "sys3")):
            other = synthetic.pristine(families=FAMILIES, division=division, org=org, system=system)
            for part in ("results", "systems"):
                shutil.copytree(other / division / org / part, root / division / org / part, dirs_exist_ok=True)
        synthetic.regenerate(root)
    return root


def test_parts_hold_whole_systems_in_order(three_systems):
    pkg = Package.load(three_systems)
    counts = [n for _, n in pkg.system_dirs]
    assert len(counts) == 3 and all(counts)
    assert pkg.parts(len(pkg.leaves)) == [pkg]  # a package that fits one part is not cut
    parts = pkg.parts(counts[0] + counts[1])  # the first two systems fit together, the third alone
    assert [len(p.leaves) for p in parts] == [counts[0] + counts[1], counts[2]]
    assert [(p.opens, p.closes) for p in parts] == [(True, False), (False, True)]
    one_each = pkg.parts(1)  # a system bigger than a part is a part of its own
    assert [leaf for p in one_each for leaf in p.leaves] == pkg.leaves
    assert [{leaf.system for leaf in p.leaves} for p in one_each] == [{"sys1"}, {"sys2"}, {"sys3"}]
    assert all(p.whole is pkg and p.manifest("closed", "Acme") == pkg.manifest("closed", "Acme") for p in one_each)


def in_leaves(cache: dict) -> list[str]:
    return [key for key in cache if LEAF_PATH.search(key)]


def test_a_done_part_releases_what_it_read(three_systems, monkeypatch):
    monkeypatch.setattr(checker, "PART_LEAVES", 1)
    checker.validate(three_systems)
    assert in_leaves(files._contents) == in_leaves(files._json) == in_leaves(files._listings) == []
    monkeypatch.setattr(checker, "PART_LEAVES", 10 ** 9)
    checker.validate(three_systems)  # a whole run keeps them until the next reading
    assert in_leaves(files._contents) and in_leaves(files._json)


def test_part_by_part_finds_what_the_whole_run_finds(three_systems, monkeypatch):
    whole, parted = both_ways(three_systems, monkeypatch)
    assert parted == whole
    # findings in every system, so the comparison has something to hold
    assert all(any(f"/results/{system}/" in f["path"] for f in whole) for system in ("sys1", "sys2", "sys3"))


def test_workers_find_what_one_process_finds(three_systems, monkeypatch):
    """A large package is checked by forked workers, a task each: the whole-package rules, then
    each part. A worker that dies, or one that cannot be started, changes nothing: its task is
    checked in the validating process."""
    alone = findings(three_systems, monkeypatch, 10 ** 9)
    started = []
    start = workers._start
    monkeypatch.setattr(workers, "_start", lambda context, task: started.append(task) or start(context, task))
    assert findings(three_systems, monkeypatch, 1, pooled=True) == alone
    counts = [n for _, n in Package.load(three_systems).system_dirs]
    last = started[-2 - len(counts):]  # this validation's (MLPS_CHECK_PARTS=1 validates twice)
    assert [len(part.leaves) for part, _ in last[2:]] == counts
    # first the whole-package rules, those that need no submission.yaml (started before it is parsed) apart
    assert [task[0].whole for task in last[:2]] == [None, None]
    assert set(last[0][1]) == workers.BEFORE_MANIFESTS and set(last[0][1]).isdisjoint(last[1][1])
    assert not any(RULES[n].parts for n in last[0][1] + last[1][1])
    monkeypatch.setattr(workers, "_work", lambda task, send: os._exit(1))
    assert findings(three_systems, monkeypatch, 1, pooled=True) == alone
    monkeypatch.setattr(workers, "TASK_DEADLINE_S", 0.5)
    monkeypatch.setattr(workers, "_work", lambda task, send: time.sleep(60))  # workers that hang
    began = time.monotonic()
    assert findings(three_systems, monkeypatch, 1, pooled=True) == alone
    assert time.monotonic() - began < 30  # each ended at its deadline, two at a time
    monkeypatch.setattr(workers, "_start", lambda context, task: None)
    assert findings(three_systems, monkeypatch, 1, pooled=True) == alone


@pytest.mark.skipif(not REALDATA.is_dir(), reason="../shared/realdata is absent")
def test_part_by_part_on_the_real_corpus(monkeypatch):
    whole, parted = both_ways(REALDATA.resolve(), monkeypatch)
    assert len(whole) > 100 and parted == whole  # six organizations' findings, the same either way


@settings(max_examples=25, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(cases=st.lists(st.tuples(st.sampled_from(KINDS), st.integers(0, 10 ** 6), st.integers(0, 2 ** 32)),
                      min_size=1, max_size=4))
def test_part_by_part_on_mutated_packages(three_systems, tmp_path_factory, cases):
    work = tmp_path_factory.mktemp("mutated")
    root = work / "pkg"
    shutil.copytree(three_systems, root, symlinks=True)
    outside = make_outside(work)
    for kind, index, seed in cases:
        mutate(root, outside, kind, index, random.Random(seed))
    with pytest.MonkeyPatch.context() as monkeypatch:
        whole, parted = both_ways(root, monkeypatch)
        pooled = findings(root, monkeypatch, 1, pooled=True)
    shutil.rmtree(work, ignore_errors=True)
    assert parted == whole, cases
    assert pooled == whole, cases


def test_rules_checked_before_the_manifests_never_ask_for_them(three_systems, monkeypatch):
    """workers.BEFORE_MANIFESTS run while submission.yaml is parsed: none of them reads it."""
    pkg = Package.load(three_systems)
    monkeypatch.setattr(Package, "manifest", lambda *_: pytest.fail("asked for submission.yaml"))
    for number in sorted(workers.BEFORE_MANIFESTS):
        list(RULES[number].func(pkg))
