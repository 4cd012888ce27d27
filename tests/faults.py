"""Helpers of the fault-injection suites (tests/test_faults_*.py): finding a run's processes,
small filesystems that fill up, and what a failed or incomplete leaf must look like to the
leaf itself, validate, reportgen and (where it exists) status."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest

from conftest import MLPSTORAGE, interruptible
from mlpstorage_py.launch import shm_orphans


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


def shm_segments() -> set[str]:
    """This host's Open MPI shared-memory segments of this user (launch/shm_orphans.py)."""
    prefix = f"sm_segment.{socket.gethostname()}.{os.geteuid()}."
    shm = Path(shm_orphans.SHM_DIR)
    return {p.name for p in shm.glob(prefix + "*")} if shm.is_dir() else set()


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


# What the job runner logs once every rank of a launched job has reported (launch/process.py).
WORK_PHASE = r": all \d+ rank\(s\) started after "


def count_logged(results: Path, pattern: str) -> int:
    """Lines matching pattern in the mlpstorage.log of every leaf under results. os.walk, not
    rglob: the run creates and removes directories meanwhile (a code-image capture), and a
    directory that vanishes under os.walk is skipped, where rglob raises."""
    found = 0
    for root, dirs, files in os.walk(results):
        dirs[:] = [d for d in dirs if d not in ("code-images", ".mlps")]
        if "mlpstorage.log" in files:
            try:
                text = (Path(root) / "mlpstorage.log").read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            found += len(re.findall(pattern, text))
    return found


def logged(results: Path, pattern: str, times: int = 1) -> bool:
    """The leaves' logs under results have `times` lines matching pattern: a phase the run has
    reached, as the run itself says (never a time a test guessed)."""
    return count_logged(results, pattern) >= times


def startup_guard(ranks: int = 2, hosts: int = 1) -> float:
    """How long a test waits for a run's work phase before giving up: the product's own start-up
    allowance for that many ranks and hosts (past which the run fails by itself, exit 11), and a
    minute for mlpstorage's own start and gates before the launch."""
    from mlpstorage_py.launch import deadline
    from mlpstorage_py.launch.options import LaunchOptions

    return deadline.startup(LaunchOptions(), [f"h{i % hosts}" for i in range(ranks)]).allowance_s + 60


def work_phase_at(leaf: Path) -> float:
    """When (epoch seconds) the leaf's job logged that every rank had started: where a bound on
    the work's own time (a deadline, a crash) is measured from."""
    for line in (leaf / "mlpstorage.log").read_text(encoding="utf-8", errors="replace").splitlines():
        if re.search(WORK_PHASE, line):
            stamp = line[:23]  # logging's asctime: 2026-12-02 06:08:33,729 (local time)
            return time.mktime(time.strptime(stamp[:19], "%Y-%m-%d %H:%M:%S")) + int(stamp[20:23]) / 1000
    raise AssertionError(f"{leaf}: the job never reached its work phase")


def work_started(results: Path, before: int = 0) -> bool:
    """A launched job under results is in its work phase (every rank has started), beyond the
    `before` jobs that had been (count_logged(results, WORK_PHASE) before the run)."""
    return logged(results, WORK_PHASE, before + 1)


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
           marker: str, start_s: float | None = None, stop_s: float = 120) -> tuple[int, str, float]:
    """Run argv as a child; once ready() (its work is under way) apply fault(child); wait for the
    child to end and for no process naming marker to be left. Returns (exit code, stderr,
    seconds from the fault until all of it was gone). The child never outlives the call."""
    child = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                             preexec_fn=interruptible)
    try:
        wait_for(ready, startup_guard() if start_s is None else start_s, child)
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
def mounted(path: Path, *mount_args: str) -> Iterator[Path]:
    """A filesystem mounted at path for the block (`mount *mount_args path`); skips, saying why,
    where it cannot be (not root, no mount, a refusal)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a filesystem needs root")
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", *mount_args, str(path)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount here ({' '.join(mount_args)}): {done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


@contextlib.contextmanager
def small_fs(path: Path, size: str, inodes: int | None = None) -> Iterator[Path]:
    """A tmpfs of `size` (and `inodes`) mounted at path for the block: a disk that fills up."""
    options = f"size={size}" + (f",nr_inodes={inodes}" if inodes else "")
    with mounted(path, "-t", "tmpfs", "-o", options, "mlps-fault") as mount:
        yield mount


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
