"""Open MPI's shared-memory segments that killed ranks leave in /dev/shm.

Each rank of a job makes `sm_segment.<host>.<uid>.<job id>.<node rank>` (16 MiB) for its
on-node peers, removed at MPI_Finalize or, for a rank that dies, by the launcher; a launcher
killed outright (mlpstorage SIGKILLed, a deadline's teardown) removes none (open-mpi/ompi#7394),
so every such run left 16 MiB a local rank on each host until reboot. A segment is orphaned when no process has it open or mapped: its
maker keeps it one or the other from creating it until it removes it. After each engine job
(launch/job.py), this host's orphans of this user are removed; those of other users or hosts,
links and anything else are left alone. A process in another PID namespace that shares this
/dev/shm is not seen, which is why only segments named for this host are considered.
"""

from __future__ import annotations

import os
import re
import socket
import stat

SHM_DIR = "/dev/shm"
_NAME = re.compile(r"sm_segment\.(?P<host>.+)\.(?P<uid>[0-9]+)\.[0-9a-f]+\.[0-9]+")


def sweep(hostname: str | None = None, shm_dir: str = SHM_DIR) -> list[str]:
    """Remove the orphaned segments of this host (or `hostname`, one whose processes share this
    process table) and of this user from `shm_dir`; returns their names."""
    host, uid = hostname or socket.gethostname(), os.geteuid()
    candidates: dict[bytes, str] = {}  # path -> name: regular files of this user named for the host
    real = os.path.realpath(shm_dir)  # as /proc names them (/dev/shm is a link to /run/shm on some systems)
    try:
        entries = list(os.scandir(shm_dir))
    except OSError:
        return []
    for entry in entries:
        found = _NAME.fullmatch(entry.name)
        if found is None or found.group("host") != host or int(found.group("uid")) != uid:
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISREG(info.st_mode) and info.st_uid == uid:
            candidates[os.fsencode(os.path.join(real, entry.name))] = entry.name
    if not candidates:
        return []
    for path in _in_use(set(candidates)):
        candidates.pop(path, None)
    removed = []
    for name in candidates.values():
        try:
            os.unlink(os.path.join(shm_dir, name))
        except OSError:
            continue
        removed.append(name)
    return removed


def _in_use(paths: set[bytes]) -> set[bytes]:
    """Which of the paths some process has mapped or open, read from /proc alone: the link of an
    open descriptor is read, never followed, so a process with a file open on a hung network
    mount cannot hold this up. A process that cannot be read (another user's, or one that just
    ended) is passed over: only this user's segments are candidates."""
    used: set[bytes] = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/maps", "rb") as maps:
                for line in maps:
                    fields = line.rstrip(b"\n").split(None, 5)
                    if len(fields) > 5 and fields[5] in paths:
                        used.add(fields[5])
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    target = os.readlink(os.fsencode(f"/proc/{pid}/fd/{fd}"))
                except OSError:
                    continue
                if target in paths:
                    used.add(target)
        except OSError:
            continue
    return used
