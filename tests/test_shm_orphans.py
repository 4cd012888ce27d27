"""launch/shm_orphans.py: the Open MPI segments killed ranks leave in /dev/shm are removed once
no process has them open or mapped; segments in use, other hosts' and users', links and other
files stay. Real files and real processes (a child that maps one segment and holds another
open), in a directory of the test's own standing in for /dev/shm."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from faults import pids_matching, shm_segments
from mlpstorage_py.launch import shm_orphans
from mlpstorage_py.launch.job import Job, run_job

HOLDER = """
import mmap, os, sys
mapped = open(sys.argv[1], "r+b")
view = mmap.mmap(mapped.fileno(), 0)
mapped.close()  # mapped only, as Open MPI leaves its own segment
held = open(sys.argv[2], "rb")  # open only
print("ready", flush=True)
sys.stdin.readline()
"""


def _segment(directory: Path, host: str, index: int, uid: int | None = None) -> Path:
    path = directory / f"sm_segment.{host}.{os.geteuid() if uid is None else uid}.5ad40001.{index}"
    path.write_bytes(b"\0" * 4096)
    return path


def test_only_orphans_of_this_host_and_user_go(tmp_path: Path) -> None:
    host = "client-01.example.org"  # a host name with dots, as Open MPI writes it into the name
    orphan = _segment(tmp_path, host, 0)
    mapped = _segment(tmp_path, host, 1)
    held = _segment(tmp_path, host, 2)
    other_host = _segment(tmp_path, "client-02", 0)
    other_user = _segment(tmp_path, host, 3, uid=os.geteuid() + 1)
    target = tmp_path / "elsewhere"
    target.write_bytes(b"keep")
    link = tmp_path / f"sm_segment.{host}.{os.geteuid()}.5ad40001.4"
    link.symlink_to(target)
    unrelated = tmp_path / "notes.txt"
    unrelated.write_text("keep")
    child = subprocess.Popen([sys.executable, "-c", HOLDER, str(mapped), str(held)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"  # the phase, not a delay
        removed = shm_orphans.sweep(hostname=host, shm_dir=str(tmp_path))
    finally:
        child.communicate("done\n", timeout=60)
    assert removed == [orphan.name]
    assert not orphan.exists()
    for kept in (mapped, held, other_host, other_user, unrelated, target):
        assert kept.exists(), kept.name
    assert link.is_symlink() and target.read_bytes() == b"keep"
    # once the holder is gone, what it held is orphaned too
    assert sorted(shm_orphans.sweep(hostname=host, shm_dir=str(tmp_path))) == sorted([mapped.name, held.name])


def test_nothing_to_do_without_the_directory(tmp_path: Path) -> None:
    assert shm_orphans.sweep(hostname="h", shm_dir=str(tmp_path / "absent")) == []


RANKS = """
import sys, time
from pathlib import Path
from mpi4py import MPI
comm = MPI.COMM_WORLD
comm.Barrier()  # both ranks are up, their shared-memory segments made
Path(sys.argv[1], f"ready.{comm.Get_rank()}").touch()
while True:
    time.sleep(1)
"""


def _kill_launcher_once_ready(marks: Path, script: Path, done: threading.Event) -> None:
    """SIGKILL the job's launcher (mpirun execs prterun) once both ranks are up, as when
    mlpstorage is killed or its deadline's teardown ends the job: nothing of Open MPI's
    removes the segments then."""
    while len(list(marks.glob("ready.*"))) < 2:
        if done.wait(0.05):
            return
    for pid in pids_matching("prterun", str(script)):
        os.kill(pid, signal.SIGKILL)


@pytest.mark.skipif(not Path(shm_orphans.SHM_DIR).is_dir(), reason="no /dev/shm here")
def test_a_job_whose_launcher_was_killed_leaves_no_segment(tmp_path: Path) -> None:
    """A real two-rank Open MPI job whose mpirun is SIGKILLed once both ranks are up: after
    run_job, none of the job's segments is left in /dev/shm."""
    mpirun = Path(sys.executable).parent / "mpirun"
    if not mpirun.exists():
        pytest.skip("no mpirun in this venv (make test installs it)")
    script = tmp_path / "ranks.py"
    script.write_text(RANKS, encoding="utf-8")
    before = shm_segments()
    job = Job([str(mpirun), "-n", "2", "--host", "127.0.0.1:2", "--allow-run-as-root", "--bind-to", "none",
               sys.executable, str(script), str(tmp_path)], "killed launcher", tmp_path / "out.log",
              tmp_path / "err.log", 120.0, check=False)
    done = threading.Event()
    killer = threading.Thread(target=_kill_launcher_once_ready, args=(tmp_path, script, done), daemon=True)
    killer.start()
    try:
        outcome = run_job(job, tmp_path, tmp_path)
    finally:
        done.set()
        killer.join(timeout=60)
    assert len(list(tmp_path.glob("ready.*"))) == 2, "the ranks never came up"
    assert outcome.code != 0
    # a segment some process still holds is another job's, running beside the suite (a busy head
    # node): only an orphan, which nothing holds, can be this job's leftover
    real = os.path.realpath(shm_orphans.SHM_DIR)
    new = {name: os.fsencode(os.path.join(real, name)) for name in shm_segments() - before}
    held = shm_orphans._in_use(set(new.values()))
    assert {name for name, path in new.items() if path not in held} == set()


def test_a_segment_in_use_through_a_linked_directory_stays(tmp_path: Path) -> None:
    """Where /dev/shm is a link (to /run/shm on some systems), /proc names the real path: a
    segment in use is still seen as in use."""
    real = tmp_path / "run-shm"
    real.mkdir()
    linked = tmp_path / "dev-shm"
    linked.symlink_to(real)
    mapped = _segment(real, "h", 1)
    held = _segment(real, "h", 2)
    child = subprocess.Popen([sys.executable, "-c", HOLDER, str(mapped), str(held)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        assert shm_orphans.sweep(hostname="h", shm_dir=str(linked)) == []
    finally:
        child.communicate("done\n", timeout=60)
    assert mapped.exists() and held.exists()
