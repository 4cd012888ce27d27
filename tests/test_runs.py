"""`mlpstorage runs`: list/show leaves; rm, gc and purge move or delete only what was asked."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

from conftest import REALDATA
from mlpstorage_py.results.tree.package import TRASH_DIR
from mlpstorage_py.results import code_image
from synthetic import edit_json, fresh, leaves_of, metadata_file, workload  # noqa: F401


def tree(root: Path) -> set[str]:
    """Every path of the tree outside .mlps/."""
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if not p.relative_to(root).as_posix().startswith(".mlps")}


def listed(cli, root, *flags):
    result = cli("runs", "list", root, "--json", *flags)
    assert result.rc == 0, result.err
    return json.loads(result.out)


def test_list_and_show(cli, fresh):
    root = fresh()
    entries = listed(cli, root)
    assert len(entries) == 10 and {e["state"] for e in entries} == {"ok"}
    assert all(e["size"] > 0 and e["code_image"].startswith("code-") and e["code_image_dir"].startswith("code-images/")
               for e in entries)
    run = leaves_of(workload(root, "training") / "run")[0]
    edit_json(metadata_file(run), lambda m: m.update(exit_status=1, failure="boom"))
    assert [e["id"] for e in listed(cli, root, "--status", "failed")] == [run.relative_to(root).as_posix()]
    shown = cli("runs", "show", "--results-dir", root, run.name)
    assert shown.rc == 0 and "state:          failed" in shown.out and "failure:        boom" in shown.out
    assert "closed/Acme" in cli("runs", "list", root).out


def test_rm_by_status_is_a_dry_run_until_yes(cli, fresh):
    root = fresh()
    failed = leaves_of(workload(root, "training") / "run")[1]
    edit_json(metadata_file(failed), lambda m: m.update(exit_status=6, failure="interrupted"))
    before = tree(root)
    dry = cli("runs", "rm", "--results-dir", root, "--status", "failed")
    assert dry.rc == 0 and "would move" in dry.out and tree(root) == before
    assert cli("runs", "rm", "--results-dir", root, "--status", "failed", "--yes").rc == 0
    rel = failed.relative_to(root).as_posix()
    assert before - tree(root) == {p for p in before if p == rel or p.startswith(rel + "/")}
    [batch] = (root / TRASH_DIR).iterdir()
    assert (batch / rel / metadata_file(batch / rel).name).is_file()  # kept whole, at its path
    assert len(listed(cli, root)) == 9


def test_rm_keep_last_and_older_than(cli, fresh):
    root = fresh()
    runs = leaves_of(workload(root, "training") / "run")
    assert cli("runs", "rm", "--results-dir", root, "--keep-last", "4", "--yes").rc == 0
    assert leaves_of(workload(root, "training") / "run") == runs[2:]  # the two oldest of that directory only
    assert len(leaves_of(workload(root, "checkpointing"))) == 2
    nothing = cli("runs", "rm", "--results-dir", root, "--older-than", "100000d", "--yes")
    assert nothing.rc == 0 and "no leaves selected" in nothing.out
    assert cli("runs", "rm", "--results-dir", root, "--older-than", "1d", "--keep-last", "1", "--status", "failed").rc == 0
    assert cli("runs", "rm", "--results-dir", root, "--older-than", "soon").rc == 2


@pytest.mark.parametrize("bad", ["../../etc", "/etc", "closed/Acme/results", "20991231_000000"])
def test_rm_refuses_what_is_no_leaf(cli, fresh, bad):
    root = fresh()
    before = tree(root)
    result = cli("runs", "rm", "--results-dir", root, bad, "--yes")
    assert result.rc == 2 and "is no leaf of this tree" in result.err and tree(root) == before


def test_rm_by_id_then_purge(cli, fresh):
    root = fresh()
    leaf = leaves_of(workload(root, "checkpointing"))[0]
    assert cli("runs", "rm", "--results-dir", root, leaf.relative_to(root).as_posix(), "--yes").rc == 0
    assert not leaf.exists() and (root / TRASH_DIR).is_dir()
    assert "would delete" in cli("runs", "purge", "--results-dir", root).out and any((root / TRASH_DIR).iterdir())
    assert cli("runs", "purge", "--results-dir", root, "--yes").rc == 0
    assert not any((root / TRASH_DIR).iterdir())
    assert "the trash is empty" in cli("runs", "purge", "--results-dir", root).out


def test_gc_trashes_only_unreferenced_images(cli, fresh):
    root = fresh()
    [used] = [p for p in (root / code_image.POOL_DIR).iterdir() if p.is_dir()]
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "orphan.py").write_text("x = 1\n", encoding="utf-8")
        digest, orphan, _ = code_image.capture(root, root=Path(tmp))
    dry = cli("runs", "gc", "--results-dir", root)
    assert dry.rc == 0 and f"would move code-images/{orphan.name}" in dry.out and used.name not in dry.out
    assert cli("runs", "gc", "--results-dir", root, "--yes").rc == 0
    assert used.is_dir() and not orphan.exists()
    [batch] = (root / TRASH_DIR).iterdir()
    assert (batch / code_image.POOL_DIR / orphan.name / code_image.HASH_FILE).is_file()
    assert "no unreferenced code images selected" in cli("runs", "gc", "--results-dir", root).out


@pytest.mark.skipif(not REALDATA.is_dir(), reason="../shared/realdata is absent")
def test_runs_on_the_published_packages(cli, realdata_copy):
    entries = listed(cli, realdata_copy)
    assert len(entries) == 39
    # most published leaves kept no pointer (the corpus README); TTA's two resolve to no captured tree
    assert sum(e["code_image"] == "none" for e in entries) > 30
    result = cli("runs", "rm", "--results-dir", realdata_copy, "--status", "incomplete", "--yes")
    assert result.rc == 0 and result.out.count("moving ") == 1  # NewFW's configs-only datagen leaf
    assert len(listed(cli, realdata_copy)) == 38


def test_a_trash_that_leads_out_of_the_tree_is_refused(cli, fresh, tmp_path):
    root = fresh()
    (tmp_path / "elsewhere").mkdir()
    (root / ".mlps").symlink_to(tmp_path / "elsewhere")
    before = tree(root)
    result = cli("runs", "rm", "--results-dir", root, "--keep-last", "1", "--yes")
    assert result.rc == 5 and "symbolic link" in result.err
    assert tree(root) == before and not any((tmp_path / "elsewhere").iterdir())
    assert cli("submit", root).rc == 5 and not any((tmp_path / "elsewhere").iterdir())
