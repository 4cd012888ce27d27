"""A rank's own temporary directory, so that what the rank and the processes it forks leave in
the client's temporary directory goes when the rank does.

torch's reader workers share data through multiprocessing, which makes a pymp-* directory
holding a listener socket in each worker; a worker that is stopped rather than returning never
removes it, and every DLIO run left one a rank in /tmp on every client. The rank removes its
own directory when its work is done. A rank killed outright cannot: its directory is named for
its host and process, and the next rank started on that host removes those whose process is
gone.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import socket
import tempfile

from mlpstorage_py.launch.pids import alive

PREFIX = "mlps-rank-"
# A listener socket's path must fit AF_UNIX's 107 bytes: multiprocessing's is
# <temp>/pymp-XXXXXXXX/listener-XXXXXXXX, and the rank's own directory adds a level above it.
SOCKET_PATH_MAX = 107
_NAME = re.compile(re.escape(PREFIX) + r"([0-9a-f]{8})-([0-9]+)-")


def host_tag(hostname: str | None = None) -> str:
    """Eight hex digits for the host: a hostname may be 64 characters, the socket's path allows
    few, and a temporary directory on a shared filesystem must not tell one host's ranks from
    another's by process number alone."""
    return hashlib.sha256((hostname or socket.gethostname()).encode()).hexdigest()[:8]


def make(base: str | None = None) -> str | None:
    """Make the rank's directory under `base` (the temporary directory) and Python's temporary
    directory for this process and what it forks; first remove this host's left by ranks that
    are gone. None, with nothing changed, where `base` is too long for one more level or no
    directory can be made there: the rank then runs as it would have, never fails for this."""
    base = base or tempfile.gettempdir()
    prefix = f"{PREFIX}{host_tag()}-{os.getpid()}-"
    if len(os.fsencode(f"{base}/{prefix}XXXXXXXX/pymp-XXXXXXXX/listener-XXXXXXXX")) > SOCKET_PATH_MAX:
        return None
    sweep(base)
    try:
        tempfile.tempdir = tempfile.mkdtemp(prefix=prefix, dir=base)
    except OSError:
        return None
    return tempfile.tempdir


def remove(path: str | None) -> None:
    """The rank's work is done: its directory goes, with whatever its workers left in it."""
    if path is not None:
        shutil.rmtree(path, ignore_errors=True)


def sweep(base: str, hostname: str | None = None) -> list[str]:
    """Remove the rank directories of this host (or `hostname`, one whose processes share this
    host's process table) under `base` whose process is gone (a rank killed outright); returns
    their names. Only real directories of this user; a link is never followed."""
    tag = host_tag(hostname)
    removed: list[str] = []
    try:
        entries = list(os.scandir(base))
    except OSError:
        return removed
    for entry in entries:
        found = _NAME.match(entry.name)
        if found is None or found.group(1) != tag or not entry.is_dir(follow_symlinks=False):
            continue
        try:
            if entry.stat(follow_symlinks=False).st_uid != os.geteuid() or alive(int(found.group(2))):
                continue
        except OSError:
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(entry.name)
    return removed
