"""validate walks the package system by system (checker.runner), releasing each system's
readings once its checks are done, and a large package's systems in forked workers
(checker.workers, results.tree.shares). These tests hold both to what they promise: a system's readings are gone
before the next system is read, and workers (alive, dying, hanging or never started) find
exactly what one process finds, in the same order, on the real corpus and on a package of
three systems in two organizations, pristine and mutated by the fuzzer's mutations."""

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
from mlpstorage_py.checker import runner, workers
from mlpstorage_py.checker.registry import PACKAGE, PHASE, SYSTEM, Rule
from mlpstorage_py.results.tree import files, package, shares
from mlpstorage_py.results.tree.package import Package, Phase, System

FAMILIES = ("training", "checkpointing", "vector_database", "kv_cache")
LEAF_PATH = re.compile(r"/results/.*/\d{8}_\d{6}(/|$)")


def findings(root: Path, monkeypatch: pytest.MonkeyPatch, pooled: bool) -> list[dict]:
    """validate's findings in this process, or in two forked workers (even on one core), the
    submission.yaml files then parsed aside (their heads taken first, the whole at the end)."""
    monkeypatch.setattr(shares, "POOL_MIN_LEAVES", 0 if pooled else 10 ** 9)
    monkeypatch.setattr(package, "ASIDE_BYTES", 0 if pooled else 10 ** 12)
    monkeypatch.setattr(shares, "workers_here", lambda: 2)
    monkeypatch.setattr(shares, "MIN_SHARE_LEAVES", 1)  # several shares, even of a small package
    return [f.as_dict() for f in checker.validate(root)[1]]


@pytest.fixture(scope="module")
def three_systems(tmp_path_factory) -> Path:
    """closed/Acme with systems sys1 and sys2, open/Beta with sys3, all four families each."""
    with synthetic_families.registered():
        root = tmp_path_factory.mktemp("systems") / "pkg"
        shutil.copytree(synthetic.pristine(families=FAMILIES), root, symlinks=True)
        for division, org, system in (("closed", "Acme", "sys2"), ("open", "Beta", "sys3")):
            other = synthetic.pristine(families=FAMILIES, division=division, org=org, system=system)
            for part in ("results", "systems"):
                shutil.copytree(other / division / org / part, root / division / org / part, dirs_exist_ok=True)
        synthetic.regenerate(root)
    return root


def read_below_leaves() -> set[str]:
    return {key for cache in (files._contents, files._json, files._listings) for key in cache if LEAF_PATH.search(key)}


def test_shares_hold_whole_systems_in_order(three_systems, monkeypatch):
    pkg = Package.load(three_systems)
    assert [s.name for s in pkg.systems] == ["sys1", "sys2", "sys3"] and all(s.leaves for s in pkg.systems)
    for workers in (2, 3, 12):
        parts = shares.shares(pkg.systems, workers)
        assert [s for share in parts for s in share] == pkg.systems  # every system once, in order
        assert all(parts)
    assert len(shares.shares(pkg.systems, 2)) == 1  # fewer leaves than the smallest share: one share
    monkeypatch.setattr(shares, "MIN_SHARE_LEAVES", 1)
    # each share about a quarter (two workers) of the leaves left, at least one system
    assert [[s.name for s in share] for share in shares.shares(pkg.systems, 2)] == [["sys1"], ["sys2"], ["sys3"]]


def test_shares_shrink_towards_the_end(monkeypatch):
    """Large shares first, the smallest last: the workers run out of work together."""
    monkeypatch.setattr(shares, "MIN_SHARE_LEAVES", 10)
    systems = [System(Path(f"/p/sys{i}"), "closed", "Acme", f"sys{i}", None, leaves=[object()] * 10) for i in range(100)]
    sizes = [sum(len(s.leaves) for s in share) for share in shares.shares(systems, 2)]
    assert sum(sizes) == 1000 and sizes == sorted(sizes, reverse=True)
    assert sizes[0] == 250 and sizes[-1] == 10


def test_meanwhile_runs_once_beside_the_workers(three_systems, monkeypatch):
    """The caller's own work (shares.walk's meanwhile) is done once, with workers or without."""
    monkeypatch.setattr(shares, "MIN_SHARE_LEAVES", 1)
    pkg = Package.load(three_systems)
    ran: list[int] = []
    walked = shares.walk(pkg.systems, lambda share: [s.name for s in share], 2, lambda: ran.append(os.getpid()))
    assert [name for part in walked for name in part] == ["sys1", "sys2", "sys3"] and ran == [os.getpid()]
    assert shares.walk(pkg.systems, len, 1, lambda: ran.append(0)) == [3] and ran == [os.getpid(), 0]


def test_each_system_is_released_before_the_next_is_read(three_systems):
    """A system check sees only its own system's readings: the one before it released them."""
    pkg = Package.load(three_systems)
    seen: list[tuple[str, set[str]]] = []
    probe = Rule("TEST-1", "probe")

    @probe.check(SYSTEM)
    def held(r: Rule, system: System):
        list(checker.RULES["LEAF-01"].checks[0].func(checker.RULES["LEAF-01"], system.leaves[0]))  # read a leaf
        seen.append((str(system.path), read_below_leaves()))
        return ()

    runner.check_package(pkg, pkg.systems, [probe])
    assert [path.rsplit("/", 1)[1] for path, _ in seen] == ["sys1", "sys2", "sys3"]
    for path, held_now in seen:
        assert held_now and all(key.startswith(path + "/") for key in held_now), path
    assert read_below_leaves() == set()  # the last one too


def test_notes_reach_the_package_check_in_system_order(three_systems, monkeypatch):
    """What a rule's system checks note, its package check reads, in system order, in one
    process or from workers."""
    said: list[list[str]] = []
    probe = Rule("TEST-2", "notes")

    @probe.check(SYSTEM)
    def note(r: Rule, system: System):
        r.note(system.package, system.name)
        return ()

    @probe.check(PACKAGE)
    def read(r: Rule, pkg: Package):
        said.append(list(r.notes(pkg)))
        return ()

    pkg = Package.load(three_systems)
    runner.check_package(pkg, pkg.systems, [probe])
    pkg = Package.load(three_systems)
    workers.check(pkg, [probe], 2)
    assert said == [["sys1", "sys2", "sys3"]] * 2


def test_workers_find_what_one_process_finds(three_systems, monkeypatch):
    """A worker that dies, hangs past its deadline or cannot be started changes nothing: its
    share is walked in the validating process."""
    alone = findings(three_systems, monkeypatch, pooled=False)
    assert all(any(f"/results/{system}/" in f["path"] for f in alone) for system in ("sys1", "sys2", "sys3"))
    started = []
    start = shares._start
    monkeypatch.setattr(shares, "_start", lambda *a: started.append(a[2]) or start(*a))
    assert findings(three_systems, monkeypatch, pooled=True) == alone
    # the first system is checked in the validating process (it warms what the workers inherit)
    assert [s.name for share in started for s in share] == ["sys2", "sys3"]
    monkeypatch.setattr(shares, "_work", lambda *a: os._exit(1))
    assert findings(three_systems, monkeypatch, pooled=True) == alone
    monkeypatch.setattr(shares, "TASK_DEADLINE_S", 0.5)
    monkeypatch.setattr(shares, "_work", lambda *a: time.sleep(60))  # workers that hang
    began = time.monotonic()
    assert findings(three_systems, monkeypatch, pooled=True) == alone
    assert time.monotonic() - began < 45  # each ended at its deadline, two at a time
    monkeypatch.setattr(shares, "_start", lambda *a: None)
    assert findings(three_systems, monkeypatch, pooled=True) == alone


@pytest.mark.skipif(not REALDATA.is_dir(), reason="../shared/realdata is absent")
def test_workers_on_the_real_corpus(monkeypatch):
    alone = findings(REALDATA.resolve(), monkeypatch, pooled=False)
    assert len(alone) > 100 and findings(REALDATA.resolve(), monkeypatch, pooled=True) == alone


@settings(max_examples=25, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(cases=st.lists(st.tuples(st.sampled_from(KINDS), st.integers(0, 10 ** 6), st.integers(0, 2 ** 32)),
                      min_size=1, max_size=4))
def test_workers_on_mutated_packages(three_systems, tmp_path_factory, cases):
    work = tmp_path_factory.mktemp("mutated")
    root = work / "pkg"
    shutil.copytree(three_systems, root, symlinks=True)
    outside = make_outside(work)
    for kind, index, seed in cases:
        mutate(root, outside, kind, index, random.Random(seed))
    with pytest.MonkeyPatch.context() as monkeypatch:
        alone = findings(root, monkeypatch, pooled=False)
        pooled = findings(root, monkeypatch, pooled=True)
    shutil.rmtree(work, ignore_errors=True)
    assert pooled == alone, cases


def test_phase_checks_see_each_phase_once(three_systems):
    """A PHASE check is offered each phase of each result, with exactly its leaves, filtered by
    benchmark and command as a leaf check is."""
    pkg = Package.load(three_systems)
    seen: list[tuple[str, str, int]] = []
    probe = Rule("TEST-3", "phases")

    @probe.check(PHASE, benchmark="training")
    def phase(r: Rule, unit: Phase):
        assert all(leaf.command == unit.command and leaf.workload_dir == unit.result.path for leaf in unit.leaves)
        seen.append((unit.system.name, unit.command, len(unit.leaves)))
        return ()

    runner.check_package(pkg, pkg.systems, [probe])
    expected = sorted({(leaf.system, leaf.command) for leaf in pkg.leaves if leaf.benchmark == "training"})
    assert sorted((s, c) for s, c, _ in seen) == expected
    assert sum(n for *_, n in seen) == sum(leaf.benchmark == "training" for leaf in pkg.leaves)
