"""A results tree is someone else's data (issue 39): reading it never touches a path outside it,
never blocks, and never drives the terminal. Rule 3.4.1 compares recorded paths as written; a
benchmark reads its sibling leaves as regular files only and takes only bounded counts from them;
what runs show/list, status and validate print has its control characters escaped; the code-image
check (2.1.6) hashes no linked pool or image."""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

import pytest

from mlpstorage_py import checker
from mlpstorage_py.benchmarks.training import MAX_TRAIN_FILES, TrainingBenchmark
from mlpstorage_py.benchmarks.vectordb_run import QueryRun
from mlpstorage_py.errors import Refused
from mlpstorage_py.results import code_image
from mlpstorage_py.results.tree.untrusted import shown
from synthetic import edit_json, fresh, leaves_of, metadata_file, workload  # noqa: F401

OSC52 = "\x1b]52;c;cm0gLXJmIH4K\x07"  # writes "rm -rf ~" to the clipboard of a terminal that allows it
TITLE = "\x1b]0;pwned\x07\x9b2J"


def blocking(call: Callable[[], Any], fifos: list[Path], seconds: float = 20) -> Any:
    """call() in a thread; a call still blocked after `seconds` (opened a FIFO for reading) is
    released by opening the FIFOs for writing, and the test fails."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        for fifo in fifos:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(seconds)
        pytest.fail(f"blocked reading a FIFO of the tree ({', '.join(f.name for f in fifos)})")
    if "error" in box:
        raise box["error"]
    return box["value"]


# --- the helper ---------------------------------------------------------------------------

def test_shown_escapes_every_c0_and_c1_control_character():
    assert shown(OSC52) == "\\x1b]52;c;cm0gLXJmIH4K\\x07"
    assert shown("a\tb\nc\rd\x7f\x85\x9b\x9f") == "a\\x09b\\x0ac\\x0dd\\x7f\\x85\\x9b\\x9f"
    assert shown("plain é ü 漢 /x/y") == "plain é ü 漢 /x/y"
    assert shown({"k": 1}) == "{'k': 1}"


# --- rule 3.4.1: recorded paths compared as written -----------------------------------------

def _paths_of_run(root: Path, data: str, results: str) -> list:
    run = leaves_of(workload(root, "training") / "run")[2]
    edit_json(metadata_file(run), lambda m: m["args"].update(data_dir=data, results_dir=results))
    return [f for f in checker.validate(root)[1] if f.rule == "3.4.1"]


def test_3_4_1_does_not_resolve_recorded_paths_on_this_host(fresh, tmp_path):
    """The two paths name one directory of this host only through a link here: the system under
    test's paths are not this host's, and resolving them would touch the reviewer's mounts."""
    (tmp_path / "real" / "x").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert _paths_of_run(fresh(), str(tmp_path / "link" / "x"), str(tmp_path / "real" / "x")) == []


@pytest.mark.parametrize("data, results", [("/mnt/run/", "/mnt/./run"), ("/mnt/a/../run", "/mnt/run"),
                                           ("rel/dir", "./rel/dir")])
def test_3_4_1_still_finds_one_directory_written_two_ways(fresh, data, results):
    (finding,) = _paths_of_run(fresh(), data, results)
    assert finding.severity == "INVALID" and "same directory" in finding.message


# --- benchmarks read their sibling leaves as regular files only ------------------------------

def _datasize_leaf(workload_dir: Path, name: str, dataset: Any, exit_status: int = 0) -> Path:
    leaf = workload_dir / "datasize" / name
    leaf.mkdir(parents=True)
    meta = {"exit_status": exit_status, "parameters": {"dataset": dataset}}
    (leaf / f"training_{name}_metadata.json").write_text(json.dumps(meta))
    return leaf


def _sized(workload_dir: Path) -> dict[str, Any]:
    """What datagen takes from the datasize leaves of a workload directory."""
    bench = TrainingBenchmark.__new__(TrainingBenchmark)
    bench.workload_dir = workload_dir / "datagen"
    parameters = {"dataset": {"num_files_train": 7, "num_subfolders_train": 0}}
    bench._size_datagen(parameters, {})
    return parameters["dataset"]


def test_datagen_takes_a_valid_datasize_leafs_counts(tmp_path):
    _datasize_leaf(tmp_path, "20260101_000000", {"num_files_train": 4096, "num_subfolders_train": 2})
    assert _sized(tmp_path) == {"num_files_train": 4096, "num_subfolders_train": 2}


def test_datagen_does_not_block_on_a_fifo_named_as_metadata(tmp_path):
    _datasize_leaf(tmp_path, "20260101_000000", {"num_files_train": 64, "num_subfolders_train": 0})
    newest = tmp_path / "datasize" / "20260102_000000"
    newest.mkdir()
    fifo = newest / "training_20260102_000000_metadata.json"
    os.mkfifo(fifo)
    assert blocking(lambda: _sized(tmp_path), [fifo])["num_files_train"] == 64


def test_datagen_does_not_follow_a_linked_metadata_or_leaf(tmp_path):
    outside = tmp_path / "outside"
    _datasize_leaf(outside, "20260109_000000", {"num_files_train": 10 ** 9, "num_subfolders_train": 0})
    _datasize_leaf(tmp_path / "w", "20260101_000000", {"num_files_train": 64, "num_subfolders_train": 0})
    linked = tmp_path / "w" / "datasize" / "20260103_000000"
    linked.mkdir()
    (linked / "training_20260103_000000_metadata.json").symlink_to(
        outside / "datasize" / "20260109_000000" / "training_20260109_000000_metadata.json")
    (tmp_path / "w" / "datasize" / "20260104_000000").symlink_to(outside / "datasize" / "20260109_000000")
    assert _sized(tmp_path / "w")["num_files_train"] == 64


def test_datagen_does_not_list_a_linked_datasize_directory(tmp_path):
    _datasize_leaf(tmp_path / "outside", "20260101_000000", {"num_files_train": 64, "num_subfolders_train": 0})
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "datasize").symlink_to(tmp_path / "outside" / "datasize")
    assert _sized(tmp_path / "w")["num_files_train"] == 7  # the workload's default: no datasize leaf here


@pytest.mark.parametrize("dataset, field", [
    ({"num_files_train": MAX_TRAIN_FILES + 1, "num_subfolders_train": 0}, "num_files_train"),
    ({"num_files_train": 0, "num_subfolders_train": 0}, "num_files_train"),
    ({"num_files_train": -64, "num_subfolders_train": 0}, "num_files_train"),
    ({"num_files_train": "64", "num_subfolders_train": 0}, "num_files_train"),
    ({"num_files_train": 64.0, "num_subfolders_train": 0}, "num_files_train"),
    ({"num_files_train": True, "num_subfolders_train": 0}, "num_files_train"),
    ({"num_subfolders_train": 0}, "num_files_train"),
    ({"num_files_train": 64, "num_subfolders_train": 65}, "num_subfolders_train"),
    ({"num_files_train": 64, "num_subfolders_train": -1}, "num_subfolders_train"),
    ({"num_files_train": 64, "num_subfolders_train": [1]}, "num_subfolders_train"),
    ({"num_files_train": 64}, "num_subfolders_train"),
])
def test_datagen_refuses_a_count_that_is_no_bounded_whole_number(tmp_path, dataset, field):
    leaf = _datasize_leaf(tmp_path, "20260101_000000", dataset)
    with pytest.raises(Refused) as caught:
        _sized(tmp_path)
    message = str(caught.value)
    assert "\n" not in message and str(leaf) in message and f"parameters.dataset.{field}" in message


def test_datagen_refusal_shows_no_control_characters(tmp_path):
    _datasize_leaf(tmp_path, "20260101_000000", {"num_files_train": OSC52, "num_subfolders_train": 0})
    with pytest.raises(Refused) as caught:
        _sized(tmp_path)
    assert "\x1b" not in str(caught.value) and "\x07" not in str(caught.value)


def test_training_progress_count_does_not_block_on_a_fifo(tmp_path, capsys):
    runs = tmp_path / "run"
    for name, status in (("20260101_000000", 0), ("20260102_000000", 1)):
        (runs / name).mkdir(parents=True)
        (runs / name / f"training_{name}_metadata.json").write_text(json.dumps({"exit_status": status}))
    (runs / "20260103_000000").mkdir()
    fifo = runs / "20260103_000000" / "training_20260103_000000_metadata.json"
    os.mkfifo(fifo)
    current = runs / "20260104_000000"
    current.mkdir()
    bench = TrainingBenchmark.__new__(TrainingBenchmark)
    blocking(lambda: bench._report_result_progress(current), [fifo])
    assert "CLOSED result: 2 of" in capsys.readouterr().out


def _query_run(workload_dir: Path, leaf: Path | None = None) -> QueryRun:
    run = QueryRun.__new__(QueryRun)
    run.bench = SimpleNamespace(workload_dir=workload_dir / "run", results_dir=workload_dir)
    run.leaf = leaf
    return run


def test_vectordb_datagen_leaf_is_read_as_a_regular_file_only(tmp_path):
    """A FIFO or a linked summary.json in a datagen leaf is skipped, never opened or followed."""
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps({"collection_name": "c", "dimension": 3, "index_type": "HNSW"}))
    good = tmp_path / "datagen" / "20260101_000000"
    good.mkdir(parents=True)
    (good / "summary.json").write_text(json.dumps({"collection_name": "c", "dimension": 8, "index_type": "DISKANN"}))
    linked = tmp_path / "datagen" / "20260102_000000"
    linked.mkdir()
    (linked / "summary.json").symlink_to(outside)
    fifo_leaf = tmp_path / "datagen" / "20260103_000000"
    fifo_leaf.mkdir()
    os.mkfifo(fifo_leaf / "summary.json")
    found = blocking(lambda: _query_run(tmp_path).datagen_leaf({"collection_name": "c", "dimension": 8}, "DISKANN"),
                     [fifo_leaf / "summary.json"])
    assert found == "datagen/20260101_000000"


def test_vectordb_progress_count_does_not_block_on_a_fifo(tmp_path, capsys):
    runs = tmp_path / "run"
    (runs / "20260101_000000").mkdir(parents=True)
    (runs / "20260101_000000" / "vector_database_20260101_000000_metadata.json").write_text('{"exit_status": 0}')
    (runs / "20260102_000000").mkdir()
    fifo = runs / "20260102_000000" / "vector_database_20260102_000000_metadata.json"
    os.mkfifo(fifo)
    current = runs / "20260103_000000"
    current.mkdir()
    run = _query_run(tmp_path, current)
    run.request = SimpleNamespace(mode="closed")
    summary = {"index_type": "DISKANN", "search_limit": 10, "search_params": None, "throughput_qps": 1.0,
               "total_queries": 1, "total_time_seconds": 1.0, "recall": 1.0}
    blocking(lambda: run._print(summary, {"num_queries_evaluated": 1}), [fifo])
    assert "CLOSED result: 2 of" in capsys.readouterr().out


# --- what is printed of the tree --------------------------------------------------------------

def _no_controls(text: str) -> None:
    assert not [c for c in text if (ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) < 0xA0], repr(text[-400:])


def test_runs_show_and_status_escape_a_recorded_failure_and_command(cli, fresh):
    root = fresh()
    run = leaves_of(workload(root, "training") / "run")[1]
    edit_json(metadata_file(run), lambda m: m.update(exit_status=6, failure=f"boom{OSC52}",
                                                     executed_command=f"mpirun {TITLE} dlio"))
    show = cli("runs", "show", "--results-dir", root, run.name)
    assert show.rc == 0
    _no_controls(show.out)
    assert "boom\\x1b]52;c;" in show.out and "mpirun \\x1b]0;pwned\\x07\\x9b2J dlio" in show.out
    status = cli("status", root, "--runs")
    assert status.rc == 0
    _no_controls(status.out)
    assert "exit 6: boom\\x1b]52;c;cm0gLXJmIH4K\\x07" in status.out


def test_runs_list_validate_and_status_escape_directory_names(cli, fresh):
    root = fresh()
    system = root / "closed" / "Acme" / "results" / "sys1"
    odd = f"sys{TITLE}1"
    system.rename(system.with_name(odd))
    for suffix in (".yaml", ".pdf"):
        described = root / "closed" / "Acme" / "systems" / f"sys1{suffix}"
        described.rename(described.with_name(f"{odd}{suffix}"))
    listing = cli("runs", "list", root)
    assert listing.rc == 0 and "sys\\x1b]0;pwned\\x07\\x9b2J1/training" in listing.out
    _no_controls(listing.out)
    found = cli("validate", root)
    assert "sys\\x1b]0;pwned" in found.out
    _no_controls(found.out)
    status = cli("status", root, "--runs")
    assert status.rc == 0 and "sys\\x1b]0;pwned" in status.out
    _no_controls(status.out)


# --- rule 2.1.6: a linked pool or image is not hashed ----------------------------------------

def _link_pool(root: Path, outside: Path) -> Path:
    """code-images/ moved outside the package, a linked org pool in its place."""
    pool = outside / "pool"
    shutil.move(root / code_image.POOL_DIR, pool)
    (pool / code_image.POOL_MARKER).write_text("")
    (root / "Acme").symlink_to(pool)
    return root / "Acme"


def _link_tree_pool(root: Path, outside: Path) -> Path:
    shutil.move(root / code_image.POOL_DIR, outside / "pool")
    (root / code_image.POOL_DIR).symlink_to(outside / "pool")
    return root / code_image.POOL_DIR


def _link_image(root: Path, outside: Path) -> Path:
    (image,) = (root / code_image.POOL_DIR).glob("code-*")
    shutil.move(image, outside / image.name)
    image.symlink_to(outside / image.name)
    return image


@pytest.mark.parametrize("link", [_link_pool, _link_tree_pool, _link_image], ids=["org-pool", "tree-pool", "image"])
def test_code_image_check_hashes_no_linked_pool_or_image(fresh, tmp_path, monkeypatch, link):
    root = fresh()
    outside = tmp_path / "outside"
    outside.mkdir()
    linked = link(root, outside)
    hashed: list[Path] = []
    real_hash = code_image.tree_hash
    monkeypatch.setattr(code_image, "tree_hash", lambda where: hashed.append(Path(where)) or real_hash(where))
    found = checker.validate(root)[1]
    assert all(str(p.resolve()).startswith(str(root.resolve()) + "/") for p in hashed), hashed
    assert not [f for f in found if f.rule == "2.1.6" and f.path.startswith(str(linked))]
    (link_finding,) = [f for f in found if f.rule == "1.1" and f.path == str(linked)]
    assert link_finding.severity == "INVALID" and "symbolic link to" in link_finding.message


def test_an_error_naming_a_tree_path_prints_control_characters_as_escapes(cli, tmp_path):
    """The one-line error of every command: a name with an escape sequence (a leaf or org
    directory from someone's tree) cannot drive the terminal from stderr."""
    hostile = tmp_path / "leaf\x1b]52;c;cGF5bG9hZA==\x07"
    result = cli("replay", hostile, "--directory", tmp_path)
    assert result.rc == 3
    assert "\x1b" not in result.err and "\x07" not in result.err and "\\x1b]52" in result.err


def test_a_host_sidecar_with_yaml_aliases_is_no_sidecar():
    """systems/<system>.hosts.md travels in packages: an alias nest is refused, not expanded."""
    from mlpstorage_py.results import host_sidecar

    bomb = "```yaml\nschema: mlps-host-config/1\na: &a [x, x, x]\nb: &b [*a, *a, *a]\nhosts: {h: {drives: *b}}\n```\n"
    assert host_sidecar.parse(bomb) is None
