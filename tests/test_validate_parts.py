"""validate part by part (Package.parts): a large package's rules that allow it run on one part
of its systems at a time, releasing what they read before the next part. These tests hold that
to the same findings, in the same order, as one run over the whole package: on the real
corpus, and on a package of three systems in two organizations, pristine and mutated by the
fuzzer's mutations (links, FIFOs, missing and broken files, odd names)."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import synthetic
import synthetic_families
from conftest import REALDATA
from test_fuzz_checker import KINDS, make_outside, mutate

from mlpstorage_py import checker
from mlpstorage_py.checker import files
from mlpstorage_py.checker.package import Package

FAMILIES = ("training", "checkpointing", "vector_database", "kv_cache")


def both_ways(root: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list[dict], list[dict]]:
    """(findings over the whole package, findings one system a part)."""
    monkeypatch.setattr(checker, "PART_LEAVES", 10 ** 9)
    whole = [f.as_dict() for f in checker.validate(root)[1]]
    monkeypatch.setattr(checker, "PART_LEAVES", 1)
    parted = [f.as_dict() for f in checker.validate(root)[1]]
    return whole, parted


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


def test_a_done_part_releases_what_it_read(three_systems, monkeypatch):
    monkeypatch.setattr(checker, "PART_LEAVES", 1)
    checker.validate(three_systems)
    below = [key for cache in (files._contents, files._json, files._yaml) for key in cache if "/results/sys" in key]
    assert below == []
    monkeypatch.setattr(checker, "PART_LEAVES", 10 ** 9)
    checker.validate(three_systems)  # a whole run keeps them until the next reading
    assert any("/results/sys" in key for key in files._contents)


def test_part_by_part_finds_what_the_whole_run_finds(three_systems, monkeypatch):
    whole, parted = both_ways(three_systems, monkeypatch)
    assert parted == whole
    # findings in every system, so the comparison has something to hold
    assert all(any(f"/results/{system}/" in f["path"] for f in whole) for system in ("sys1", "sys2", "sys3"))


@pytest.mark.skipif(not REALDATA.is_dir(), reason="../shared/realdata is absent")
def test_part_by_part_on_the_real_corpus(monkeypatch):
    whole, parted = both_ways(REALDATA.resolve(), monkeypatch)
    assert len(whole) > 100 and parted == whole  # six organizations' findings, the same either way


@settings(max_examples=40, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))
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
    shutil.rmtree(work, ignore_errors=True)
    assert parted == whole, cases
