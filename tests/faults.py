"""Helpers of the fault-injection suites (tests/test_faults_*.py): finding a run's processes,
small filesystems that fill up, and what a failed or incomplete leaf must look like to the
leaf itself, validate, reportgen and (where it exists) status."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest

from conftest import MLPSTORAGE


def _cmdlines() -> Iterator[tuple[int, str]]:
    me = os.getpid()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            raw = Path(f"/proc/{entry.name}/cmdline").read_bytes()
            state = Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if raw and state not in "ZX":
            yield int(entry.name), raw.replace(b"\0", b" ").decode("utf-8", "replace")


def pids_matching(*parts: str) -> list[int]:
    """Live processes whose command line holds every one of parts, in pid order."""
    return sorted(pid for pid, line in _cmdlines() if all(p in line for p in parts))


def children_of(pid: int) -> list[int]:
    """Live direct children of pid (multiprocessing workers carry no telling command line)."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                fields = Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] not in "ZX":
                found.append(int(entry.name))
    return sorted(found)


def alive(pids: list[int]) -> list[int]:
    return [pid for pid in pids if Path(f"/proc/{pid}").exists() and
            Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in "ZX"]


def leftover(marker: str) -> list[str]:
    """Command lines of live processes naming marker (a path unique to the test)."""
    return [line[:200] for _, line in _cmdlines() if marker in line]


def wait_for(ready: Callable[[], bool], seconds: float, child: subprocess.Popen | None = None,
             message: Callable[[], object] = lambda: "") -> None:
    end = time.monotonic() + seconds
    while not ready():
        if child is not None and child.poll() is not None:
            out, err = child.communicate()
            raise AssertionError(f"the run ended (exit {child.returncode}) before the fault: {err}")
        assert time.monotonic() < end, f"timed out waiting {message()}"
        time.sleep(0.1)


def inject(argv: list[str], env: dict[str, str], ready: Callable[[], bool], fault: Callable[[subprocess.Popen], None],
           marker: str, start_s: float = 120, stop_s: float = 120) -> tuple[int, str, float]:
    """Run argv as a child; once ready() (its work is under way) apply fault(child); wait for the
    child to end and for no process naming marker to be left. Returns (exit code, stderr,
    seconds from the fault until all of it was gone). The child never outlives the call."""
    child = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(ready, start_s, child)
        fault(child)
        injected = time.monotonic()
        _, err = child.communicate(timeout=stop_s)
        wait_for(lambda: not leftover(marker), 30, message=lambda: leftover(marker))
        return child.returncode, err, time.monotonic() - injected
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()


@contextlib.contextmanager
def small_fs(path: Path, size: str, inodes: int | None = None) -> Iterator[Path]:
    """A tmpfs of `size` (and `inodes`) mounted at path for the block: a disk that fills up."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small filesystem needs root")
    path.mkdir(parents=True, exist_ok=True)
    options = f"size={size}" + (f",nr_inodes={inodes}" if inodes else "")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "mlps-fault", str(path)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def metadata_of(leaf: Path) -> dict:
    (found,) = leaf.glob("*_metadata.json")
    return json.loads(found.read_text(encoding="utf-8"))


def assert_failed_leaf(leaf: Path, code: int, failure_part: str) -> dict:
    """A complete leaf that records the failure: metadata with the exit status and reason,
    provenance and the code-image pointer."""
    meta = metadata_of(leaf)
    assert meta["exit_status"] == code, meta["exit_status"]
    assert meta["failure"] and failure_part in meta["failure"], meta["failure"]
    assert (leaf / "provenance.json").is_file() and (leaf / ".mlps-code-image").is_file()
    return meta


def status_available() -> bool:
    """`mlpstorage status` is being built by another helper: asserted when it exists."""
    res = subprocess.run([str(MLPSTORAGE), "status", "--help"], capture_output=True, text=True, timeout=60)
    return res.returncode == 0


def assert_incomplete_everywhere(results: Path, leaf: Path, env: dict[str, str]) -> None:
    """A leaf whose run was killed before it finished: validate names it, reportgen counts it
    in no result, status (when present) says it is incomplete."""
    res = subprocess.run([str(MLPSTORAGE), "validate", str(results), "--json"], env=env, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode in (0, 1) and "internal error" not in res.stderr, res.stderr
    findings = json.loads(res.stdout)["findings"]
    about = [f for f in findings if f["path"].startswith(str(leaf)) and "metadata" in f["message"]]
    assert about, f"validate says nothing about the incomplete leaf {leaf.name}"
    assert any(f["severity"] == "INVALID" for f in about)
    res = subprocess.run([str(MLPSTORAGE), "reports", "reportgen", "-rd", str(results)], env=env, capture_output=True,
                         text=True, timeout=120)
    assert "internal error" not in res.stderr and "Traceback" not in res.stderr, res.stderr
    for table in results.rglob("results.json"):
        text = table.read_text(encoding="utf-8")
        data = json.loads(text)
        assert leaf.name not in data.get("runs", []), f"{table} counts the incomplete leaf {leaf.name}"
    if status_available():
        res = subprocess.run([str(MLPSTORAGE), "status", "--runs", "-rd", str(results)], env=env, capture_output=True,
                             text=True, timeout=120)
        assert "internal error" not in res.stderr and "Traceback" not in res.stderr, res.stderr
        lines = [l for l in res.stdout.splitlines() if leaf.name in l]
        assert lines and all("incomplete" in l for l in lines), res.stdout
