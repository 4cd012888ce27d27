"""A killed MPI launcher's session directory must not stop the next launcher the kernel gives its
PID: the real failure (prterun exit 213, "listener thread failed to start") is reproduced with
Open MPI by handing a new launcher the dead one's PID, and then avoided by run_logged's sweep."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mlpstorage_py.launch.process import _proc_table, run_logged, tree
from mlpstorage_py.launch.session_dirs import remove_stale

MPIRUN = Path(sys.executable).parent / "mpirun"
NS_LAST_PID = Path("/proc/sys/kernel/ns_last_pid")
HOST = socket.gethostname()


def dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def session_dir(base: Path, pid: int, hostname: str = HOST, prefix: str = "ompi") -> Path:
    path = base / f"{prefix}.{pid}"
    path.mkdir()
    (path / f"pmix.{hostname}.tool.{pid}").write_text("stale\n")
    (path / "0").mkdir()
    return path


def test_only_a_dead_launchers_own_directory_of_this_host_is_removed(tmp_path):
    env = {"TMPDIR": str(tmp_path)}
    gone = dead_pid()
    stale = session_dir(tmp_path, gone)
    daemon = session_dir(tmp_path, gone + 100000, prefix="prted")
    live = session_dir(tmp_path, os.getpid())
    foreign = session_dir(tmp_path, gone + 200000, hostname="another-host")
    unmarked = tmp_path / f"ompi.{gone + 300000}"
    unmarked.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / f"pmix.{HOST}.tool.{gone + 500000}").write_text("not ours to delete\n")
    link = tmp_path / f"ompi.{gone + 500000}"
    link.symlink_to(outside)

    assert remove_stale(env, pids={gone + 100000}) == [daemon]
    assert stale.exists()
    assert sorted(remove_stale(env)) == [stale]
    assert live.exists() and foreign.exists() and unmarked.exists()
    assert link.is_symlink() and (outside / f"pmix.{HOST}.tool.{gone + 500000}").exists()


def test_a_missing_session_base_is_not_an_error(tmp_path):
    assert remove_stale({"TMPDIR": str(tmp_path / "absent")}) == []


def _free_pid_next(pid: int) -> bool:
    """Make `pid` the next PID handed out (root: ns_last_pid), once its session is gone."""
    for _ in range(40):  # until the killed session's last member (a zombie too) is reaped the PID is not free
        if not any(p == pid or session == pid for p, (_, session, _) in _proc_table().items()):
            NS_LAST_PID.write_text(str(pid - 1))
            return True
        time.sleep(0.25)
    return False


def _sigkilled_launcher(env: dict[str, str], tmp_path: Path) -> int:
    """Start mpirun, SIGKILL it and its rank; its session directory stays behind. Returns its PID."""
    victim = subprocess.Popen([str(MPIRUN), "-n", "1", "sleep", "60"], env=env, start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    marker = tmp_path / f"ompi.{victim.pid}" / f"pmix.{HOST}.tool.{victim.pid}"
    deadline = time.monotonic() + 30
    while not marker.exists():
        assert time.monotonic() < deadline, "the launcher never wrote its rendezvous file"
        time.sleep(0.05)
    for pid in tree(victim.pid):  # the launcher and its rank (which has a process group of its own)
        os.kill(pid, signal.SIGKILL)
    victim.wait()
    assert marker.exists()  # SIGKILL left it behind
    return victim.pid


class RecordingPopen(subprocess.Popen):
    """subprocess.Popen that remembers the PIDs it started."""

    pids: list[int] = []

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        RecordingPopen.pids.append(self.pid)


@pytest.mark.skipif(os.geteuid() != 0, reason="choosing a child's PID (ns_last_pid) needs root")
@pytest.mark.skipif(not MPIRUN.exists(), reason="needs the Open MPI launcher beside this Python")
def test_a_sigkilled_launchers_pid_reused_fails_without_the_sweep_and_runs_with_it(tmp_path, monkeypatch):
    env = {**os.environ, "TMPDIR": str(tmp_path), "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    argv = [str(MPIRUN), "-n", "1", "true"]
    for _ in range(5):  # another process may take the chosen PID first; then try again
        pid = _sigkilled_launcher(env, tmp_path)
        if not _free_pid_next(pid):
            continue
        bare = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        out, _ = bare.communicate(timeout=60)
        if bare.pid == pid:
            break
    else:
        pytest.skip("the machine is too busy to hand a child a chosen PID")
    assert bare.returncode == 213 and "listener thread failed to start" in out

    monkeypatch.setattr(subprocess, "Popen", RecordingPopen)
    for _ in range(5):
        pid = _sigkilled_launcher(env, tmp_path)
        if not _free_pid_next(pid):
            continue
        RecordingPopen.pids = []
        code = run_logged(argv, stdout_path=tmp_path / "out.log", stderr_path=tmp_path / "err.log",
                          cwd=tmp_path, env=env, label="mpirun")
        if RecordingPopen.pids == [pid]:
            break
    else:
        pytest.skip("the machine is too busy to hand a child a chosen PID")
    assert code == 0, (tmp_path / "err.log").read_text()
    assert not list(tmp_path.glob("ompi.*"))  # the stale one is gone and the launcher that ran left nothing
