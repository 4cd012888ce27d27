"""A bounded page cache for the replay's fio on this host: a memory cgroup of its own, which
mlpstorage enters just before it starts fio (fio inherits it) and leaves once fio is done.

Why: a run's engine that drops what it has read or written back behind it (our checkpoint
engine, kv-cache.py's DONTNEED) recycles a few MiB of pages, while a buffered fio keeps every
page it touched and takes each next one from the host's free memory. What that costs is the
host's state, not the storage's: measured here, on a VM whose balloon gets its free memory
reported back, a checkpoint replay's buffered writes ran at 0.37 of the run unbounded, 0.5-0.7
bounded at 1 GiB (its first GiB of pages fresh) and 0.95-1.1 at 128 MiB. With the cgroup's limit
the kernel reclaims fio's clean pages and hands them out again, as the run's did.

Where this host has no memory controller to use (not root, no cgroup with one), fio runs
unbounded and the record says why. fio on other hosts (`--hosts`) is not bounded.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from mlpstorage_py.trace.devices import mounts

CGROUP = Path("/proc/self/cgroup")
MIB = 2 ** 20
PREFIX = "mlpstorage-replay-"  # a group's name: this, then the pid of the mlpstorage that made it


def hierarchy() -> tuple[Path, str] | str:
    """(the memory controller's mount, "v1"|"v2") where this host has one to use, else why not."""
    if os.geteuid() != 0:
        return "not root (a memory cgroup needs root)"
    found = mounts()
    for _, point, fstype, _, _ in found:
        if fstype == "cgroup2":
            with contextlib.suppress(OSError):
                if "memory" in (Path(point) / "cgroup.controllers").read_text().split():
                    return Path(point), "v2"
    for _, point, fstype, _, options in found:
        if fstype == "cgroup" and "memory" in options:
            return Path(point), "v1"
    return "no cgroup with the memory controller is mounted"


def _own(root: Path, version: str) -> Path:
    """The cgroup this process is in, under `root`."""
    for line in CGROUP.read_text().splitlines():
        number, controllers, path = line.split(":", 2)
        if (version == "v2" and number == "0") or (version == "v1" and "memory" in controllers.split(",")):
            return root / path.lstrip("/")
    return root


def _remove_stale(parent: Path) -> None:
    """Remove the empty groups of replays whose mlpstorage is gone (killed inside the block)."""
    for group in parent.glob(f"{PREFIX}*"):
        pid = group.name[len(PREFIX):]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            with contextlib.suppress(OSError):
                group.rmdir()  # refused while a process is still in it


@contextlib.contextmanager
def bounded(limit_bytes: int) -> Iterator[str]:
    """Run the block inside a memory cgroup of `limit_bytes`; yields what was done, as one line
    for the record ("not bounded: why" when it could not be)."""
    found = hierarchy() if limit_bytes > 0 else "not bounded: --page-cache-mib 0"
    if isinstance(found, str):
        yield found if found.startswith("not bounded") else f"not bounded: {found}"
        return
    root, version = found
    home = _own(root, version)
    parent = home if version == "v2" else root
    _remove_stale(parent)
    group = parent / f"{PREFIX}{os.getpid()}"
    try:
        group.mkdir()
        (group / ("memory.max" if version == "v2" else "memory.limit_in_bytes")).write_text(str(limit_bytes))
        (group / "cgroup.procs").write_text(str(os.getpid()))
    except OSError as exc:
        with contextlib.suppress(OSError):
            group.rmdir()
        yield f"not bounded: {group}: {exc.strerror or exc}"
        return
    try:
        yield f"bounded: memory cgroup {version} {group}, {limit_bytes // MIB} MiB"
    finally:
        with contextlib.suppress(OSError):
            (home / "cgroup.procs").write_text(str(os.getpid()))
        with contextlib.suppress(OSError):
            group.rmdir()
