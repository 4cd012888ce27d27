"""Faults in the results tree and the data directory themselves: a results filesystem that is
full, several invocations writing into one tree at once, and two datagens sharing a data
directory. Nothing that existed may change, nothing half-written may stay, and every error
is one line saying where."""

from __future__ import annotations

import errno
import hashlib
import json
import subprocess
import time
from pathlib import Path


from conftest import DATASIZE, MLPSTORAGE, all_leaves, subprocess_env
from fault_figures import record
from faults import small_fs, startup_guard, wait_for
from mlpstorage_py.results import history
from mlpstorage_py.storage import datalock

HISTORY = str(history.HISTORY)


def snapshot(root: Path) -> dict[str, str]:
    """Every regular file below root and its digest."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()}


def fill(directory: Path) -> None:
    """Write until the filesystem says ENOSPC (a filesystem already full refuses the file itself)."""
    try:
        with open(directory / "filler", "wb") as fh:
            while True:
                fh.write(b"\0" * (1 << 16))
                fh.flush()
    except OSError as exc:
        assert exc.errno == errno.ENOSPC, exc


def test_a_full_results_filesystem_corrupts_nothing(cli, tmp_path):
    from mlpstorage_py.results.sentinel import init_results_dir

    with small_fs(tmp_path / "full", "4m") as results:
        init_results_dir("Org", results)
        assert cli(*DATASIZE, "-sn", "sys1", "-rd", results).rc == 0
        assert cli("reports", "reportgen", "-rd", results).rc == 0
        before = snapshot(results)
        first_history = (results / HISTORY).read_bytes()
        fill(results)
        started = time.monotonic()
        tried = clean = 0
        for argv in ([*DATASIZE, "-sn", "sys1", "-rd", results], ["reports", "reportgen", "-rd", results]):
            res = cli(*argv)
            tried += 1
            errors = [l for l in res.err_lines if l.startswith("mlpstorage: error:")]
            assert res.rc == 1, res.err
            assert "Traceback" not in res.err and "internal error" not in res.err
            assert len(errors) == 1 and "ENOSPC" in errors[0] and str(results) in errors[0], res.err
            after = snapshot(results)
            changed = [name for name, digest in before.items() if after.get(name) != digest and name != HISTORY]
            assert changed == [], f"{changed} changed on a full disk"
            assert not [p for p in results.rglob("*.tmp")], "a temp file was left behind"
            # the history may take the invocation's line (or refuse it whole), never a half line
            assert (results / HISTORY).read_bytes().startswith(first_history)
            assert [e["id"] for e in history.entries(results)] == list(range(1, len(history.entries(results)) + 1))
            clean += 1
        took = time.monotonic() - started
    record("fault", tried, clean, benchmark="results tree", fault="results filesystem full", seconds=round(took, 1))


def test_concurrent_invocations_get_distinct_leaves_and_an_intact_history(results, tmp_path):
    env = subprocess_env(tmp_path)
    count = 4
    started = time.monotonic()
    children = [subprocess.Popen([str(MLPSTORAGE), *DATASIZE, "-sn", "sys1", "-rd", str(results)], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(count)]
    outcomes = [(child.wait(timeout=120), child.communicate()[1]) for child in children]
    took = time.monotonic() - started
    assert [code for code, _ in outcomes] == [0] * count, outcomes
    leaves = all_leaves(results)
    assert len(leaves) == count and len({p.name for p in leaves}) == count
    for leaf in leaves:
        (meta,) = leaf.glob("*_metadata.json")
        assert json.loads(meta.read_text())["exit_status"] == 0
        assert json.loads(meta.read_text())["result_dir"] == str(leaf)
    assert sorted(e["id"] for e in history.entries(results)) == list(range(1, count + 1))
    record("fault", 1, 1, benchmark="results tree", fault=f"{count} concurrent invocations", seconds=round(took, 1))


def test_datagen_refuses_a_data_directory_another_datagen_holds(cli, results, other_fs_dir, tmp_path):
    """A real training datagen holds the lock while DLIO writes; a second one is refused at once."""
    env = subprocess_env(tmp_path)
    gen = ["open", "training", "unet3d", "datagen", "-np", "1", "-dd", str(other_fs_dir), "-sn", "sys1", "-rd",
           str(results), "-aip", "--params", "dataset.num_files_train=64", "dataset.record_length_bytes=65536",
           "dataset.record_length_bytes_stdev=0"]
    first = subprocess.Popen([str(MLPSTORAGE), *gen], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lock = other_fs_dir / datalock.LOCK_NAME
    try:
        wait_for(lambda: lock.is_file() and lock.read_text().strip() == str(first.pid), startup_guard(1), first)
        started = time.monotonic()
        second = cli(*gen, "--overwrite")
        took = time.monotonic() - started  # for the fault figures; the refusal naming the holder is the test
        _, err = first.communicate(timeout=300)
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
    assert second.rc == 9, second.err
    errors = [l for l in second.err_lines if l.startswith("mlpstorage: error:")]
    assert len(errors) == 1 and "in use by another datagen" in errors[0] and f"pid {first.pid}" in errors[0]
    assert first.returncode == 0, err
    assert len(all_leaves(results)) == 1, "the refused datagen left a leaf"
    # the lock dies with its holder: the directory is free again, and the dataset is whole
    with datalock.held(other_fs_dir):
        pass
    assert len(list((other_fs_dir / "unet3d" / "train").rglob("*.npz"))) == 64
    record("fault", 1, 1, benchmark="training", fault="two datagens, one data directory", seconds=round(took, 1))
