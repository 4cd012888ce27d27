"""Stale MPI session directories on the head.

Open MPI's launcher (PRRTE's prterun) keeps its PMIx rendezvous files in a directory named for
its PID, ``<tmpdir>/ompi.<pid>`` (``prte.``, ``prterun.``, ``prted.`` for the other personalities).
A launcher killed by SIGKILL (a deadline, Ctrl-C twice, the OOM killer) leaves it behind, and the
next launcher the kernel gives that PID exits at once with "The PMIx server's listener thread
failed to start" (exit 213) having started nothing. With PIDs wrapping at 32768, a head node that
runs for hours meets that. So the directory of every launcher we ran is removed once it is dead,
and before a launch any left by a dead launcher of this host and this user is removed too.

A directory is only ever removed when it is a real directory (never a link), owned by us, holds
the rendezvous file ``pmix.<this hostname>.tool.<pid>`` of its own PID, and that PID is not running.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import stat
from collections.abc import Mapping
from pathlib import Path

from mlpstorage_py.launch.pids import alive
from mlpstorage_py.results.logs import log

SESSION_DIR = re.compile(r"^(?:ompi|prte|prterun|prted)\.(\d+)$")


def session_base(env: Mapping[str, str] | None = None) -> Path:
    """Where PRRTE puts session directories: its MCA setting, else TMPDIR, TEMP, TMP, else /tmp."""
    env = os.environ if env is None else env
    for name in ("PRTE_MCA_prte_tmpdir_base", "TMPDIR", "TEMP", "TMP"):
        if env.get(name, "").strip():
            return Path(env[name])
    return Path("/tmp")


def stale(path: Path, pid: int, hostname: str) -> bool:
    """Whether `path` is the session directory of launcher `pid` on `hostname`, left by it dead."""
    try:
        info = path.lstat()
    except OSError:
        return False
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        return False
    marker = path / f"pmix.{hostname}.tool.{pid}"
    return marker.is_file() and not marker.is_symlink() and not alive(pid)


def remove_stale(env: dict[str, str] | None = None, pids: set[int] | None = None,
                 hostname: str | None = None) -> list[Path]:
    """Remove the stale session directories in the session base (only those of `pids` when
    given); returns what was removed. Never raises: a directory we cannot read is left alone."""
    base = session_base(env)
    hostname = hostname or socket.gethostname()
    removed: list[Path] = []
    try:
        entries = list(os.scandir(base))
    except OSError:
        return removed
    for entry in entries:
        match = SESSION_DIR.match(entry.name)
        pid = int(match.group(1)) if match else None
        if pid is None or (pids is not None and pid not in pids):
            continue
        path = Path(entry.path)
        if stale(path, pid, hostname):
            shutil.rmtree(path, ignore_errors=True)
            if not path.exists():
                removed.append(path)
                log.info(f"removed {path}: the session directory of MPI launcher PID {pid}, "
                         f"which is gone (a new launcher given that PID would fail to start)")
    return removed
