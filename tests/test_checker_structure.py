"""Rules 1.1, 1.2 and 2.1.x/2.29 (package structure): a synthetic package validates clean, each
mutation draws exactly its rule's finding, hostile files never crash a rule, and the real
v3.0 corpus reads as it is."""

from __future__ import annotations

import functools
import json
import os
import shutil
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Callable

import pytest

from conftest import REALDATA
from mlpstorage_py import checker
from mlpstorage_py.checker import rules_checkpointing, rules_checkpointing_run, rules_leaves, rules_structure
from mlpstorage_py.checker.registry import INFO, INVALID, NOT_APPLICABLE, RULES, WARNING
from mlpstorage_py.results import code_image
from mlpstorage_py.results.tree import shares
from mlpstorage_py.rules.tables import rule_index
from synthetic import (edit_json, edit_yaml, fresh, leaves_of, make_package, metadata_file, pristine,  # noqa: F401
                       regenerate, scratch_dir, shift_leaf, duplicate_leaf, workload)

OURS = {n for n, r in RULES.items()
        if r.module in (rules_structure.__name__, rules_leaves.__name__, rules_checkpointing.__name__,
                                  rules_checkpointing_run.__name__)}


def validated(root: Path) -> tuple[set[tuple[str, str]], list]:
    """((rule, severity) of every INVALID and WARNING finding, all findings); no rule of ours may crash."""
    _, findings = checker.validate(root)
    crashed = [f for f in findings if f.message.startswith("checker error") and f.rule in OURS]
    assert not crashed, crashed
    return {(f.rule, f.severity) for f in findings if f.severity in (INVALID, WARNING)}, findings


def verdicts(root: Path) -> set[tuple[str, str]]:
    return validated(root)[0]


def findings_of(root: Path, *numbers: str):
    return [f for f in validated(root)[1] if f.rule in numbers]


@functools.cache
def validate_realdata():
    """The real corpus validated once per test session (it is read-only)."""
    return checker.validate(REALDATA)


# --- registration ----------------------------------------------------------------------

def test_rule_names_match_the_index_and_sections_1_2_4_are_covered():
    names = {e["number"]: e["name"] for e in rule_index()}
    for number in OURS:
        assert RULES[number].name == names[number], number
    mine = [n for n in names if n.split(".")[0] in ("1", "2", "4") and not n.startswith(("PROV", "LEAF", "RPT", "EDN"))]
    uncovered = [n for n in mine if n not in RULES and n not in NOT_APPLICABLE]
    assert uncovered == []
    assert {"1.3", "2.1.3", "2.1.18a", "2.1.24a", "2.1.27"} <= set(NOT_APPLICABLE)


# --- the generator ---------------------------------------------------------------------

@pytest.mark.parametrize("options", [
    {}, {"checkpoint_invocations": 1}, {"division": "open"}, {"families": ("training",)},
    {"families": ("checkpointing",), "org": "Other-Org", "system": "sys.2"},
], ids=["closed", "closed-combined", "open", "training-only", "checkpointing-only"])
def test_a_fresh_package_is_valid(options):
    root = pristine(**options)
    _, findings = checker.validate(root)
    crashes = [f for f in findings if "checker error" in f.message]
    assert crashes == []
    assert [f for f in findings if f.severity != INFO] == []
    assert [f for f in findings if f.rule in OURS] == []
    if options.get("division") == "open":  # open classes are not declared: information only
        assert {f.rule for f in findings} <= {"EDN-02"}


def test_the_package_holds_what_the_brief_asks_for():
    root = pristine()
    runs = leaves_of(workload(root, "training") / "run")
    assert len(runs) == 6 and len(leaves_of(workload(root, "training") / "datagen")) == 1
    assert len(leaves_of(workload(root, "training") / "datasize")) == 1
    for leaf in runs:
        names = {p.name for p in leaf.iterdir()}
        assert {"summary.json", "0_per_epoch_stats.json", "0_output.json", "dlio.log", "dlio_config", "fs_separation.json",
                "provenance.json", ".mlps-code-image", f"training_{leaf.name}_metadata.json"} <= names
    ckpt = leaves_of(workload(root, "checkpointing"))
    assert [json.loads(metadata_file(l).read_text())["args"]["num_checkpoints_read"] for l in ckpt] == [0, 10]
    image = next((root / "code-images").glob("code-*"))
    stamp = json.loads((image / ".code-hash.json").read_text())
    assert (runs[0] / ".mlps-code-image").read_text().strip() == f"md5-tree-v2:{stamp['hash']}"
    assert (root / "closed" / "Acme" / "submission.yaml").is_file()
    assert (root / "closed" / "Acme" / "systems" / "sys1.pdf").read_bytes().startswith(b"%PDF")


def _tree(root: Path) -> dict[str, bytes]:
    volatile = ("captured_at", "generated_at")
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            text = path.read_bytes()
            if path.name in (".code-hash.json", "submission.yaml"):
                text = b"\n".join(line for line in text.splitlines() if not any(v.encode() in line for v in volatile))
            out[path.relative_to(root).as_posix()] = text
    return out


def test_the_generator_is_deterministic():
    """(Its speed is bench/validate_speed.py's to measure, not a unit test's.)"""
    base = Path(tempfile.mkdtemp(dir=scratch_dir()))
    try:
        first = make_package(base / "a" / "pkg")
        second = make_package(base / "b" / "pkg")
        assert _tree(first) == _tree(second)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_family_writers_are_pluggable(tmp_path):
    import synthetic

    with pytest.raises(ValueError, match="vector_database"):
        make_package(tmp_path / "x", families=("vector_database",))
    assert set(synthetic.FAMILY_WRITERS) >= {"training", "checkpointing"}


# --- one mutation per rule -----------------------------------------------------------------

def org(root: Path) -> Path:
    return root / "closed" / "Acme"


def systems(root: Path) -> Path:
    return org(root) / "systems"


def runs(root: Path) -> list[Path]:
    return leaves_of(workload(root, "training") / "run")


def datagen(root: Path) -> Path:
    return leaves_of(workload(root, "training") / "datagen")[0]


def ckpt(root: Path) -> list[Path]:
    return leaves_of(workload(root, "checkpointing"))


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def truncate(path: Path, keep: int) -> None:
    path.write_bytes(path.read_bytes()[:keep])


def rename_run(root: Path) -> None:
    last = runs(root)[-1]
    last.rename(last.with_name(last.name[:-1] + str((int(last.name[-1]) + 1) % 10)))
    regenerate(root)


def add_symlink_leaf(root: Path) -> None:
    outside = Path(tempfile.mkdtemp(dir=scratch_dir()))
    shutil.copytree(runs(root)[-1], outside / "leaf")
    (workload(root, "training") / "run" / "20260701_235959").symlink_to(outside / "leaf")


def symlink_summary(root: Path) -> None:
    summary = runs(root)[2] / "summary.json"
    outside = Path(tempfile.mkdtemp(dir=scratch_dir())) / "summary.json"
    shutil.copy(summary, outside)
    summary.unlink()
    summary.symlink_to(outside)


def bad_timestamp(root: Path) -> None:
    last = runs(root)[-1]
    target = last.with_name("20261399_999999")
    last.rename(target)
    meta = metadata_file(target)
    edit_json(meta, lambda d: d.update(run_datetime=target.name))
    meta.rename(target / f"training_{target.name}_metadata.json")
    regenerate(root)


def drop_last_run(root: Path) -> None:
    shutil.rmtree(runs(root)[-1])
    regenerate(root)


def seventh_run(root: Path) -> None:
    duplicate_leaf(runs(root)[-1], timedelta(seconds=68))
    regenerate(root)


def late_run(root: Path) -> None:
    shift_leaf(runs(root)[-1], timedelta(days=1))
    regenerate(root)


def second_datagen(root: Path) -> None:
    duplicate_leaf(datagen(root), timedelta(hours=3))
    regenerate(root)


def late_read(root: Path) -> None:
    shift_leaf(ckpt(root)[1], timedelta(days=1), invocation=False)
    regenerate(root)


def third_invocation(root: Path) -> None:
    duplicate_leaf(ckpt(root)[1], timedelta(seconds=68))
    regenerate(root)


def backend_var(declared: bool) -> Callable[[Path], None]:
    def mutate(root: Path) -> None:
        def change(meta: dict) -> None:
            meta["executed_command"] += " -x S3DLIO_RT_THREADS -x AWS_REGION"
            if declared:
                meta["storage_backend_env"] = {"S3DLIO_RT_THREADS": "8"}
        edit_json(metadata_file(ckpt(root)[0]), change)
    return mutate


MUTATIONS: dict[str, tuple[Callable[[Path], None], set[tuple[str, str]], bool]] = {
    # name: (mutate, expected (rule, severity) findings, exact: nothing else may fire)
    "1.1 stray file beside results/": (lambda r: write(org(r) / "notes.txt", "x"), {("1.1", INVALID)}, True),
    "1.1 symlink leaf out of the package": (add_symlink_leaf, {("1.1", INVALID)}, True),
    "1.1 renamed leaf": (rename_run, {("1.1", INVALID)}, True),
    "1.1 symlinked summary.json": (symlink_summary, {("1.1", INVALID), ("2.1.19", INVALID)}, False),
    "1.1 metadata of the wrong shape": (lambda r: metadata_file(ckpt(r)[0]).write_text("[1, 2]"),
                                        {("1.1", INVALID), ("4.3.3", INVALID), ("4.4.1", INVALID)}, False),
    # an absent metadata file is no file mlpstorage did not write: 2.1.14 requires it, 1.1 says "not checked"
    "1.1 datagen without metadata": (lambda r: metadata_file(datagen(r)).unlink(), {("2.1.14", INVALID)}, False),
    "1.2 undeclared storage-backend variable": (backend_var(False), {("1.2", INVALID)}, True),
    "1.2 declared storage-backend variable": (backend_var(True), set(), True),
    "2.1.1 org name with a blank": (None, {("2.1.1", INVALID)}, True),
    "2.1.4 stray file in closed/": (lambda r: write(r / "closed" / "README.txt", "x"), {("2.1.4", INVALID)}, True),
    "2.1.5.a extra directory": (lambda r: (org(r) / "extra").mkdir(), {("2.1.5.a", INVALID)}, True),
    "2.1.5.b extra directory (open)": (None, {("2.1.5.b", INVALID)}, True),
    "2.1.7 stray file in systems/": (lambda r: write(systems(r) / "notes.txt", "x"), {("2.1.7", INVALID)}, True),
    "2.1.7 markdown and dot files are fine": (lambda r: (write(systems(r) / "README.md", "# hi"),
                                                         write(systems(r) / ".DS_Store", "")), set(), True),
    "2.1.7 pdf is not a PDF": (lambda r: write(systems(r) / "sys1.pdf", "hello"), {("2.1.7", INVALID)}, True),
    # one missing file, one finding: 2.1.7 names it; 2.1.8 reports only a system systems/ does not describe at all
    "2.1.7 pdf missing": (lambda r: (systems(r) / "sys1.pdf").unlink(), {("2.1.7", INVALID)}, True),
    "2.1.8 system not described at all": (lambda r: [(systems(r) / f"sys1.{e}").unlink() for e in ("pdf", "yaml")],
                                          {("2.1.8", INVALID), ("4.7.3", INVALID), ("4.7.4", INVALID)}, False),
    "2.1.7 system yaml malformed": (lambda r: write(systems(r) / "sys1.yaml", "system_under_test: {solution: [\n"),
                                    {("2.1.7", INVALID), ("4.7.3", INVALID), ("4.7.4", INVALID)}, True),
    # cut after "solution:" the YAML still parses; what it lacks is the capabilities block (4.7.x)
    # and the rest of the description's shape (2.1.7: required blocks absent, which the v3.0 review rejected)
    "4.7.4 system yaml truncated": (lambda r: truncate(systems(r) / "sys1.yaml", 30),
                                    {("2.1.7", INVALID), ("4.7.3", INVALID), ("4.7.4", INVALID)}, True),
    "2.1.8 stray file in results/": (lambda r: write(org(r) / "results" / "notes.txt", "x"), {("2.1.8", INVALID)}, True),
    "2.1.9 a host changed between runs": (lambda r: edit_json(runs(r)[3] / "summary.json",
                                                              lambda d: d.update(host_cpu_count=[64])), {("2.1.9", INVALID)}, True),
    "2.1.10 unknown benchmark directory": (lambda r: (org(r) / "results" / "sys1" / "storage_test").mkdir(),
                                           {("2.1.10", INVALID)}, True),
    "2.1.11 training model not in the edition": (lambda r: (workload(r, "training", "cosmoflow")).mkdir(),
                                                 {("2.1.11", INVALID)}, True),
    "2.1.12 extra phase directory": (lambda r: (workload(r, "training") / "extra").mkdir(), {("2.1.12", INVALID)}, True),
    "2.1.13 a second datagen leaf": (second_datagen, {("2.1.13", INVALID)}, True),
    "2.1.14 datagen log missing": (lambda r: (datagen(r) / "training_datagen.stdout.log").unlink(), {("2.1.14", INVALID)}, True),
    "2.1.15 datagen hydra.yaml missing": (lambda r: (datagen(r) / "dlio_config" / "hydra.yaml").unlink(),
                                          {("2.1.15", INVALID)}, True),
    "2.1.15 truncated config.yaml": (lambda r: truncate(datagen(r) / "dlio_config" / "config.yaml", 5), {("2.1.15", INVALID)}, True),
    "2.1.15 malformed overrides.yaml": (lambda r: write(datagen(r) / "dlio_config" / "overrides.yaml", "- [unclosed\n"),
                                        {("2.1.15", INVALID)}, True),
    "2.1.16 run results.json missing": (lambda r: (workload(r, "training") / "run" / "results.json").unlink(),
                                        {("2.1.16", INVALID), ("RPT-01", INVALID)}, True),
    "2.1.17 a run leaf dropped": (drop_last_run, {("2.1.17", INVALID)}, True),
    "2.1.17 a seventh run": (seventh_run, {("2.1.17", INVALID)}, True),
    "2.1.17 not a real timestamp": (bad_timestamp, {("2.1.17", INVALID)}, False),
    "2.1.18 a run shifted past the gap": (late_run, {("2.1.18", INVALID)}, True),
    "2.1.19 output json missing": (lambda r: (runs(r)[1] / "0_output.json").unlink(), {("2.1.19", INVALID)}, True),
    "2.1.19 truncated summary.json": (lambda r: truncate(runs(r)[1] / "summary.json", 40), {("2.1.19", INVALID)}, False),
    "2.1.20 overrides.yaml missing": (lambda r: (runs(r)[0] / "dlio_config" / "overrides.yaml").unlink(),
                                      {("2.1.20", INVALID)}, True),
    "2.1.20 extra file in dlio_config": (lambda r: write(runs(r)[0] / "dlio_config" / "notes.txt", "x"), {("2.1.20", INVALID)}, True),
    "2.1.21 checkpointing model not in the edition": (lambda r: workload(r, "checkpointing", "llama3-2b").mkdir(),
                                                      {("2.1.21", INVALID)}, True),
    "2.1.22 checkpointing results.json missing": (lambda r: (workload(r, "checkpointing") / "results.json").unlink(),
                                                  {("2.1.22", INVALID), ("RPT-01", INVALID)}, True),
    "2.1.23 a third invocation": (third_invocation, {("2.1.23", INVALID), ("4.7.1", INVALID)}, True),
    "2.1.24 the read invocation a day later": (late_read, {("2.1.24", INVALID)}, True),
    "2.1.25 stderr log missing": (lambda r: (ckpt(r)[0] / "checkpointing_run.stderr.log").unlink(), {("2.1.25", INVALID)}, True),
    "2.1.26 extra file in dlio_config": (lambda r: write(ckpt(r)[1] / "dlio_config" / "extra.yaml", "a: 1"),
                                         {("2.1.26", INVALID)}, True),
    "2.29 a 16-byte pruned dlio.log": (lambda r: write(runs(r)[2] / "dlio.log", "log pruned here\n"), {("2.29", INVALID)}, True),
    "2.29 an empty dlio.log": (lambda r: write(ckpt(r)[0] / "dlio.log", ""), {("2.29", INVALID)}, True),
    "PROV-02 a stale submission.yaml": (lambda r: shutil.rmtree(runs(r)[-1]), {("PROV-02", INVALID), ("2.1.17", INVALID)}, True),
}
SPECIAL = {"2.1.1 org name with a blank": {"org": "Ac me"}, "2.1.5.b extra directory (open)": {"division": "open"}}


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_each_mutation_draws_its_rule(fresh, name):
    mutate, expected, exact = MUTATIONS[name]
    options = SPECIAL.get(name, {})
    root = fresh(**options)
    if name == "2.1.5.b extra directory (open)":
        (root / "open" / "Acme" / "extra").mkdir()
    elif mutate is not None:
        mutate(root)
    found = verdicts(root)
    if exact:
        assert found == expected
    else:
        assert expected <= found, found


def test_a_leaf_without_metadata_still_says_where_it_was_written(fresh):
    """Alluxio's published 405b leaves: no metadata, but Hydra's run.dir says they were written as
    organization alluxio, system alluxio-405b; 2.1.4 and 2.1.8 warn, naming the file that says so."""
    root = fresh()
    leaf = ckpt(root)[1]
    written = f"/efs-results/r3/closed/alluxio/results/alluxio-405b/checkpointing/llama3-8b/{leaf.name}"
    edit_yaml(leaf / "dlio_config" / "hydra.yaml", lambda d: d["hydra"]["run"].update(dir=written))
    metadata_file(leaf).unlink()
    found = {f.rule: f for f in findings_of(root, "2.1.4", "2.1.8")}
    assert {(n, f.severity, Path(f.path).name) for n, f in found.items()} == {("2.1.4", WARNING, leaf.name),
                                                                            ("2.1.8", WARNING, leaf.name)}
    assert found["2.1.4"].message == ("the run was recorded for submitter 'alluxio' (dlio_config/hydra.yaml run.dir) "
                                      "but is filed under closed/Acme/")
    assert found["2.1.8"].message.startswith("the run was recorded as system 'alluxio-405b' (dlio_config/hydra.yaml run.dir)")
    # a run.dir that agrees with the filing, or names no results/<system>/ path, says nothing
    edit_yaml(leaf / "dlio_config" / "hydra.yaml", lambda d: d["hydra"]["run"].update(dir="outputs/2026-07-01"))
    assert findings_of(root, "2.1.4", "2.1.8") == []


def test_findings_name_the_file_at_fault(fresh):
    root = fresh()
    truncate(runs(root)[1] / "summary.json", 40)
    (datagen(root) / "dlio_config" / "hydra.yaml").write_text("hydra: [", encoding="utf-8")
    found = findings_of(root, "2.1.19", "2.1.15")
    assert {Path(f.path).name for f in found} == {"summary.json", "hydra.yaml"}
    assert any("not valid JSON" in f.message for f in found) and any("not valid YAML" in f.message for f in found)


def break_everything(root: Path) -> None:
    """Many problems at once: truncated and misshapen records, links out of the package."""
    for leaf in runs(root)[:3] + ckpt(root)[:1]:
        truncate(leaf / "summary.json", 17)
    metadata_file(runs(root)[3]).write_text('"just a string"', encoding="utf-8")
    metadata_file(ckpt(root)[1]).write_text('{"args": "not a mapping", "parameters": [1], "summary": null}', encoding="utf-8")
    (ckpt(root)[1] / "fs_separation.json").write_text('["same_filesystem"]', encoding="utf-8")
    write(runs(root)[4] / "dlio.log", "pruned\n")
    (runs(root)[4] / "dlio_config" / "config.yaml").write_text("workload: {model: [", encoding="utf-8")
    write(systems(root) / "sys1.yaml", "- a list, not a description\n")
    write(org(root) / "submission.yaml", "rules_edition: [3.0\n")
    write(workload(root, "checkpointing") / "results.json", "[]")
    os.symlink("/etc", workload(root, "training") / "run" / "20260701_235900")
    os.symlink("/nonexistent", runs(root)[5] / "0_output.json.link")
    (runs(root)[5] / "0_output.json").unlink()
    (runs(root)[5] / "0_output.json").symlink_to(runs(root)[5] / "summary.json")


def test_a_hostile_package_never_crashes_a_rule(fresh):
    """Everything broken at once: each problem is a finding about its file."""
    root = fresh()
    break_everything(root)
    found, findings = validated(root)
    assert {("1.1", INVALID), ("2.1.19", INVALID), ("2.1.20", INVALID), ("2.29", INVALID), ("2.1.7", INVALID),
            ("4.4.2", INVALID), ("4.7.4", INVALID)} <= found
    links = [f for f in findings if f.rule == "1.1" and "symbolic link" in f.message]
    assert len(links) == 3


def test_workers_change_no_finding(fresh, monkeypatch):
    """A large package is checked by forked workers: the findings, in order, are those of one process."""
    root = fresh()
    break_everything(root)
    monkeypatch.setattr(shares, "POOL_MIN_LEAVES", 10 ** 9)
    alone = checker.validate(root)[1]
    monkeypatch.setattr(shares, "POOL_MIN_LEAVES", 0)
    monkeypatch.setattr(shares, "workers_here", lambda: 2)
    monkeypatch.setattr(shares, "MIN_SHARE_LEAVES", 1)  # several shares, even of a small package
    assert checker.validate(root)[1] == alone
    monkeypatch.setattr(shares, "_work", lambda *a: os._exit(1))  # workers that die
    assert checker.validate(root)[1] == alone


def test_the_walk_does_not_follow_symlinked_directories(fresh):
    root = fresh()
    outside = Path(tempfile.mkdtemp(dir=scratch_dir()))
    (outside / "loop").symlink_to(outside)
    (workload(root, "training") / "run" / "20260701_235959").symlink_to(outside)
    (org(root) / "results" / "sys9").symlink_to(outside)
    _, findings = validated(root)
    assert all(str(outside) not in f.path for f in findings)
    assert sorted(f.rule for f in findings if f.rule in OURS) == ["1.1", "1.1"]


def test_2_1_2_and_2_1_6_read_the_tree_as_listed_never_through_a_link(fresh):
    """A linked directory at the top level is no image pool, and a linked image is no image:
    2.1.2 and 2.1.6 read the package as the tree reader lists it, like every rule (a walk by
    iterdir()/is_dir() follows both links, and found nothing wrong here)."""
    root = fresh()
    outside = Path(tempfile.mkdtemp(dir=scratch_dir()))
    (outside / "pool").mkdir()
    (outside / "pool" / code_image.POOL_MARKER).write_text("")
    (root / "Linked").symlink_to(outside / "pool")
    images = root / code_image.POOL_DIR
    [image] = [p for p in images.iterdir() if p.name.startswith("code-")]
    shutil.move(image, outside / image.name)
    image.symlink_to(outside / image.name)
    found = findings_of(root, "2.1.2", "2.1.6")
    assert [f.message for f in found if f.rule == "2.1.2"] == ["unexpected top-level entry 'Linked'"]
    unresolved = [f for f in found if f.rule == "2.1.6" and f"{image.name} is not in the pool" in f.message]
    assert unresolved  # every leaf points at the image, which the pool no longer holds
    assert all(str(outside) not in f.path for f in found)


# --- the real v3.0 corpus ----------------------------------------------------------------

needs_realdata = pytest.mark.skipif(not REALDATA.is_dir(), reason="../shared/realdata is not present")


@pytest.fixture
def real():
    return validate_realdata()


def at(findings, number: str, fragment: str = "", severity: str | None = None):
    return [f for f in findings if f.rule == number and fragment in f.path and (severity is None or f.severity == severity)]


@needs_realdata
def test_realdata_validates_without_crashing(real):
    pkg, findings = real
    assert [f for f in findings if f.rule in OURS and "checker error" in f.message] == []
    # no rule of any section crashes on the real packages either (each would be a "checker error" finding)
    assert [f for f in findings if f.message.startswith("checker error")] == []
    # 39 leaves = the first 22 (NewFW 7 unet3d + 2 llama3-8b + 1 kv_cache, Alluxio 6 retinanet, TTA 6 DISKANN)
    # + 17 added 2026-12-01 (XSKY 8 unet3d: datagen, datasize, 6 runs; UBIX 1 combined llama3-8b leaf;
    # SAMSUNG 1 kv_cache + 7 DISKANN: 2 datagen, 5 runs)
    assert len(pkg.leaves) == 39
    per_org = {org: sum(leaf.org == org for leaf in pkg.leaves) for org in ("NewFW", "Alluxio", "TTA", "XSKY", "UBIX", "SAMSUNG")}
    assert per_org == {"NewFW": 10, "Alluxio": 6, "TTA": 6, "XSKY": 8, "UBIX": 1, "SAMSUNG": 8}


@needs_realdata
def test_realdata_structure_findings_are_true_of_the_corpus(real):
    _, findings = real
    unet = "closed/NewFW/results/Solidigm_D5-P5336_61TB_Gen4_NVMe_QLC/training/unet3d"
    retina = "closed/Alluxio/results/aws_c7i48xlarge_i3en12xlarge_1c_1s_8a/training/retinanet"
    xsky = "closed/XSKY/results/XSKY_AIMesh_3StorageNode_1Client/training/unet3d"
    # every training result (NewFW and XSKY unet3d, Alluxio retinanet) holds 6 consecutive runs
    for number in ("2.1.17", "2.1.18", "2.1.9", "2.1.10", "2.1.11", "2.1.21", "2.1.5.a", "2.1.1", "2.1.24"):
        assert at(findings, number) == [], number
    # NewFW's leaves were written under closed/Solidigm/: the three that kept their metadata say so in its
    # result_dir, and every leaf whose dlio_config/hydra.yaml is in the corpus says so in Hydra's run.dir
    # (the read leaf, the datagen leaf and the five other runs have no metadata): a warning each, never
    # INVALID (no rule sentence binds the recorded name to the filing), in the order of their results
    newfw = [(f.severity, Path(f.path).name, f.message) for f in at(findings, "2.1.4")]
    assert [n for _, n, _ in newfw] == ["20260713_104840", "20260713_105538", "20260712_182110", "20260712_133654",
                                        "20260712_134711", "20260712_141606", "20260712_144505", "20260712_151401",
                                        "20260712_154257", "20260712_161152"]
    assert {s for s, _, _ in newfw} == {WARNING} and all("'Solidigm'" in m for _, _, m in newfw)
    by_leaf = {n: m for _, n, m in newfw}
    assert "(result_dir)" in by_leaf["20260712_182110"] and "hydra" not in by_leaf["20260712_182110"]  # no DLIO
    assert "(dlio_config/hydra.yaml run.dir)" in by_leaf["20260713_105538"] and "result_dir" not in by_leaf["20260713_105538"]
    # Alluxio's retinanet runs were written as system aws_c7i48xlarge_i3en12xlarge_1c_1s (no metadata: Hydra says so)
    alluxio = at(findings, "2.1.8", retina)
    assert len(alluxio) == 4 and all("'aws_c7i48xlarge_i3en12xlarge_1c_1s' (dlio_config/hydra.yaml run.dir)" in f.message
                                     for f in alluxio)
    # the corpus omits the PDFs (one per system: the first three organizations' and, since 2026-12-01,
    # XSKY's, UBIX's and SAMSUNG's), the published results.json tables and NewFW's unet3d datasize phase
    for org in ("Alluxio", "NewFW", "TTA"):
        assert len(at(findings, "2.1.7", f"closed/{org}/systems/")) == 1, org
    assert len(at(findings, "2.1.7", ".pdf")) == 6
    assert at(findings, "2.1.16", unet) and at(findings, "2.1.16", retina) and at(findings, "2.1.22", "NewFW/results")
    assert at(findings, "2.1.16", xsky) and at(findings, "2.1.22", "UBIX/results")
    assert [f.message for f in at(findings, "2.1.12", unet)] == ["training/unet3d has no datasize/ phase directory"]
    assert at(findings, "2.1.12", xsky) == []  # XSKY kept its datasize and datagen phases
    # the one run leaf that kept its metadata is recognisably mlpstorage's; the others lack the file,
    # which is no file mlpstorage did not write: 1.1 says "not checked" (3.1.1 reports the absent file)
    assert at(findings, "1.1", "20260712_134711") == []
    assert [f.severity for f in at(findings, "1.1", "20260712_141606")] == [INFO]
    # the llama3-8b leaves kept every rank's stats and dlio_config, but not their logs
    assert any("dlio" in f.message for f in at(findings, "2.1.25", "20260713_104840"))
    assert at(findings, "2.1.26", "llama3-8b") == []
    assert at(findings, "2.29") == []  # no dlio.log survives, so none is judged pruned


def test_linked_directories_inside_a_leaf_or_organization_are_not_read(fresh):
    root = fresh()
    outside = Path(tempfile.mkdtemp(dir=scratch_dir()))
    config = runs(root)[0] / "dlio_config"
    shutil.copytree(config, outside / "dlio_config")
    (outside / "dlio_config" / "config.yaml").write_text("workload: {model: [", encoding="utf-8")  # would be a finding if read
    shutil.rmtree(config)
    config.symlink_to(outside / "dlio_config")
    shutil.copytree(systems(root), outside / "systems")
    shutil.rmtree(systems(root))
    systems(root).symlink_to(outside / "systems")
    _, findings = validated(root)
    assert all(str(outside) not in f.path for f in findings)
    assert not [f for f in findings if "not valid YAML" in f.message]
    messages = {(f.rule, f.message) for f in findings if f.rule in ("2.1.19", "2.1.20", "2.1.5.a")}
    assert ("2.1.19", "no dlio_config/ subdirectory") in messages
    assert ("2.1.20", "not checked: no dlio_config/ subdirectory (reported under 2.1.19)") in messages
    assert ("2.1.5.a", "closed submitter Acme has no systems/ directory") in messages
    assert len([f for f in findings if f.rule == "1.1"]) == 2
