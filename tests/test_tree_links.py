"""A results tree travels between people (issue 39): nothing read from it (the sentinel's orgname,
a symbolic link planted in it) may take a write outside the tree, and the scratch directory a rank
starts in is never on its sys.path. Real trees, real links, real launches."""

from __future__ import annotations

import logging
import os
import shlex
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from conftest import DATASIZE, all_leaves
from mlpstorage_py.benchmarks import kvcache_hosts
from mlpstorage_py.benchmarks.dlio_engine import Engine
from mlpstorage_py.launch.options import LaunchOptions
from mlpstorage_py.errors import ConfigurationError
from mlpstorage_py.launch import hostinfo
from mlpstorage_py.launch.job import scratch_dir
from mlpstorage_py.launch.mpi import MpiOptions
from mlpstorage_py.results import code_image, history
from mlpstorage_py.results.leaf import create_leaf
from mlpstorage_py.results.sentinel import SENTINEL, require_org

WHEN = datetime(2026, 7, 12, 13, 47, 59)


def _outside(tmp_path: Path) -> Path:
    """A directory beside the tree that nothing may write into."""
    path = tmp_path / "outside"
    path.mkdir()
    return path


def _set_org(results: Path, org: object) -> Path:
    sentinel = results / SENTINEL
    data = yaml.safe_load(sentinel.read_text(encoding="utf-8"))
    data["orgname"] = org
    sentinel.write_text(yaml.safe_dump(data), encoding="utf-8")
    return sentinel


def _timestamp_dirs(top: Path) -> list[Path]:
    return [p for p in top.rglob("2*_*") if p.is_dir()]


# --- 1. the sentinel's orgname --------------------------------------------------------------

@pytest.mark.parametrize("org", ["../../escaped", "ABS", "a/b", "..", "Org\n", 7])
def test_an_orgname_that_is_no_directory_name_is_refused_and_no_leaf_is_made(cli, results, tmp_path, org):
    escaped = tmp_path / "escaped"
    org = str(escaped) if org == "ABS" else org
    sentinel = _set_org(results, org)
    res = cli(*DATASIZE, "-sn", "sys1", "-rd", results)
    assert res.rc == 5, res.err
    assert len(res.err_lines) == 1 and str(sentinel) in res.err and "orgname" in res.err
    assert not escaped.exists() and _timestamp_dirs(tmp_path) == []
    with pytest.raises(ConfigurationError, match="is not an organization name"):
        require_org(results)


def test_a_leaf_parent_outside_the_tree_is_refused(tmp_path):
    root, outside = tmp_path / "R", _outside(tmp_path)
    root.mkdir()
    for parent in (outside / "w", root / "closed" / ".." / ".." / "outside" / "w"):
        with pytest.raises(ConfigurationError, match="refusing to write"):
            create_leaf(parent, WHEN, root)
    assert list(outside.iterdir()) == []


# --- 2. writes that would follow a link planted in the tree -----------------------------------

@pytest.mark.parametrize("linked", ["closed/Org/results", "closed/Org/results/sys1", "closed/Org/results/sys1/training"])
def test_a_run_never_makes_its_leaf_through_a_linked_directory(cli, results, tmp_path, linked):
    outside = _outside(tmp_path)
    link = results / linked
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(outside, target_is_directory=True)
    res = cli(*DATASIZE, "-sn", "sys1", "-rd", results)
    assert res.rc == 5 and len(res.err_lines) == 1 and "symbolic link" in res.err, res.err
    assert list(outside.iterdir()) == [] and all_leaves(results) == []


def test_history_is_never_written_through_a_linked_mlps(cli, results, tmp_path):
    outside = _outside(tmp_path)
    (results / ".mlps").symlink_to(outside, target_is_directory=True)
    res = cli(*DATASIZE, "-sn", "sys1", "-rd", results)
    assert res.rc == 5 and len(res.err_lines) == 1 and "symbolic link" in res.err, res.err
    assert list(outside.iterdir()) == []


def test_history_is_never_appended_to_a_linked_file(results, tmp_path):
    victim = _outside(tmp_path) / "victim"
    victim.write_text("keep\n", encoding="utf-8")
    (results / ".mlps").mkdir()
    (results / ".mlps" / "history").symlink_to(victim)
    with pytest.raises(ConfigurationError, match="symbolic link"):
        history.record(results, ["mlpstorage", "x"])
    assert victim.read_text(encoding="utf-8") == "keep\n"


def test_the_code_image_is_never_copied_through_a_linked_pool(results, tmp_path):
    outside, source = _outside(tmp_path), tmp_path / "src"
    source.mkdir()
    (source / "a.py").write_text("x = 1\n", encoding="utf-8")
    (results / code_image.POOL_DIR).symlink_to(outside, target_is_directory=True)
    with pytest.raises(ConfigurationError, match="symbolic link"):
        code_image.capture(results, source)
    assert list(outside.iterdir()) == []


def test_the_pool_marker_is_never_touched_through_a_link(results, tmp_path):
    outside, source = _outside(tmp_path), tmp_path / "src"
    source.mkdir()
    (source / "a.py").write_text("x = 1\n", encoding="utf-8")
    (results / code_image.POOL_DIR).mkdir()
    (results / code_image.POOL_DIR / code_image.POOL_MARKER).symlink_to(outside / "made")
    with pytest.raises(ConfigurationError, match="symbolic link"):
        code_image.capture(results, source)
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize("linked", [".mlps", ".mlps/scratch"])
def test_scratch_is_never_made_through_a_link(results, tmp_path, linked):
    outside = _outside(tmp_path)
    link = results / linked
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(outside, target_is_directory=True)
    with pytest.raises(ConfigurationError, match="symbolic link"):
        with scratch_dir(results, "job"):
            pass
    assert list(outside.iterdir()) == []


def test_the_kvcache_probe_marker_is_never_written_through_a_linked_mlps(results, tmp_path):
    outside = _outside(tmp_path)
    (results / ".mlps").symlink_to(outside, target_is_directory=True)
    with pytest.raises(ConfigurationError, match="symbolic link"):
        kvcache_hosts.run_probe(results, ["127.0.0.1"], LaunchOptions(mpi_bin=str(tmp_path / "no-launcher")),
                                tmp_path / "wrapper.py", tmp_path)
    assert list(outside.iterdir()) == []


def test_systems_describe_never_writes_through_a_linked_systems_directory(cli, results, tmp_path):
    assert cli(*DATASIZE, "-sn", "sys1", "-rd", results).rc == 0
    outside = _outside(tmp_path)
    (results / "closed" / "Org" / "systems").symlink_to(outside, target_is_directory=True)
    res = cli("systems", "describe", "sys1", "-rd", results)
    assert res.rc == 5 and len(res.err_lines) == 1 and "symbolic link" in res.err, res.err
    assert list(outside.iterdir()) == []


# --- 3. the scratch directory a rank starts in is never on its sys.path ------------------------

def _planted(tmp_path: Path) -> tuple[Path, Path]:
    """A directory holding modules a rank imports (our package, argparse, mpi4py): each, if
    imported, leaves a marker and exits, as hostile code in a scratch directory would run."""
    cwd, marker = tmp_path / "planted", tmp_path / "ran"
    body = f"open({str(marker)!r}, 'a').write(__name__ + '\\n'); raise SystemExit(0)\n"
    for package in ("mlpstorage_py", "mpi4py"):
        (cwd / package).mkdir(parents=True)
        (cwd / package / "__init__.py").write_text(body, encoding="utf-8")
    (cwd / "argparse.py").write_text(body, encoding="utf-8")
    return cwd, marker


@pytest.mark.parametrize("bin_dir", [None, "/another/env/bin"])
def test_a_dlio_rank_never_imports_from_its_working_directory(tmp_path, bin_dir):
    cwd, marker = _planted(tmp_path)
    program = Engine(sys.executable, "2.0.0", {}, "", bin_dir).rank_program()
    done = subprocess.run([*program, "--help"], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert not marker.exists(), marker.read_text()
    assert done.returncode == 0 and "dlio_rank" in done.stdout, done.stderr


def test_a_hostinfo_rank_never_imports_from_its_working_directory(results, tmp_path, caplog, monkeypatch):
    monkeypatch.setattr(logging.getLogger("mlpstorage"), "propagate", True)  # a cli call earlier turns it off
    launcher = str(Path(sys.executable).parent / "mpirun")
    opts = MpiOptions(hosts=["localhost:1"], mpi_bin=launcher, allow_run_as_root=os.geteuid() == 0)
    caplog.set_level("INFO", logger="mlpstorage")
    (facts,) = hostinfo._launch(opts, 1, results, False, "host facts")
    assert facts["hostname"]
    (line,) = {r.getMessage() for r in caplog.records if "launch.hostinfo" in r.getMessage()}
    argv = shlex.split(line.removeprefix("host facts: "))
    cwd, marker = _planted(tmp_path)
    out = tmp_path / "facts.json"
    argv[argv.index("-m") + 2] = str(out)  # the same launch, in a directory with planted modules
    subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert not marker.exists(), marker.read_text()
    assert out.is_file()
