"""What one host can trace, and where the run's data lands there: a disk (traced at the block
layer), a filesystem with no disk behind it (tmpfs, NFS, FUSE: traced at the system calls, Rules
6.5.2) or an object store (s3://, not traced by the kernel). Runs on the traced host itself:
in-process for this machine, through the trace agent (trace/agent.py) for a remote one, so
every path is resolved by the kernel that serves it.
"""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path
from typing import Any

TRACEFS = ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")
BTF = "/sys/kernel/btf/vmlinux"
SYS_DEV_BLOCK = Path("/sys/dev/block")
MOUNTINFO = Path("/proc/self/mountinfo")


def kernel_dev(major: int, minor: int) -> int:
    """A device number as the kernel's tracepoints show it (MAJOR << 20 | MINOR), not st_dev's."""
    return (major << 20) | minor


def _existing(path: str) -> Path:
    """The path, or its nearest existing parent: the benchmark may create the directory later."""
    here = Path(path).absolute()
    while here != here.parent:
        try:
            os.stat(here)
            break
        except FileNotFoundError:
            here = here.parent
        except OSError:  # there, but not ours to look at: the caller's stat says so
            break
    return here


def mounts() -> list[tuple[str, str, str, str, list[str]]]:
    """Every mount, from mountinfo: (major:minor, mount point, filesystem type, source, super
    options); none where mountinfo cannot be read."""
    found: list[tuple[str, str, str, str, list[str]]] = []
    try:
        lines = MOUNTINFO.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return found
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) >= 5 and len(tail) >= 2:
            options = tail[2].split(",") if len(tail) >= 3 else []
            found.append((fields[2], fields[4].replace("\\040", " "), tail[0], tail[1], options))
    return found


def _mount(path: Path, major: int, minor: int) -> tuple[str, str, str]:
    """(mount point, filesystem type, source) of the mount holding `path` (the longest mount
    point above it with that device), from mountinfo; ("?", "?", "?") when none is listed."""
    best = ("?", "?", "?")
    resolved = str(path.resolve())
    for device, point, fstype, source, _ in mounts():
        if device != f"{major}:{minor}":
            continue
        inside = resolved == point or resolved.startswith(point.rstrip("/") + "/")
        if inside and (best[0] == "?" or len(point) > len(best[0])):
            best = (point, fstype, source)
    return best


def _disks(sysfs: Path) -> list[tuple[str, int]]:
    """The whole disks under a block device: a partition's parent, a device-mapper or md
    device's members (recursively), else the disk itself; as (name, kernel dev)."""
    real = sysfs.resolve()
    if (real / "partition").exists():
        real = real.parent
    slaves = sorted((real / "slaves").iterdir()) if (real / "slaves").is_dir() else []
    if slaves:
        return [disk for slave in slaves for disk in _disks(slave)]
    try:
        major, minor = (int(x) for x in (real / "dev").read_text().strip().split(":"))
    except (OSError, ValueError):
        return []
    return [(real.name, kernel_dev(major, minor))]


def resolve(path: str) -> dict[str, Any]:
    """Where one data path lands: {"path", "level", "devices": [{"name", "dev", "level"}], "why",
    "fs_dev": its filesystem's superblock device (kernel form), whose files the tracer counts};
    level "unreadable" (a reason to refuse) where this host may not look at the path."""
    if path.startswith("s3://"):
        return {"path": path, "level": "object", "devices": [],
                "why": f"{path} is an object store: its requests leave as network traffic, not block I/O"}
    here = _existing(path)
    try:
        st = os.stat(here)
    except OSError as exc:
        return {"path": path, "level": "unreadable", "devices": [], "why": f"cannot read {here}: {exc.strerror}"}
    major, minor = os.major(st.st_dev), os.minor(st.st_dev)
    point, fstype, source = _mount(here, major, minor)
    sysfs = SYS_DEV_BLOCK / f"{major}:{minor}"
    if major == 0 and source.startswith("/dev/"):  # btrfs and the like: an anonymous st_dev over a disk
        name = Path(source).resolve().name
        sysfs = Path("/sys/class/block") / name
    disks = _disks(sysfs) if sysfs.exists() else []
    if disks:
        return {"path": path, "level": "block", "why": "", "fs_dev": kernel_dev(major, minor),
                "devices": [{"name": name, "dev": dev, "level": "block"} for name, dev in disks]}
    return {"path": path, "level": "vfs", "fs_dev": kernel_dev(major, minor),
            "devices": [{"name": f"{fstype}:{point}", "dev": kernel_dev(major, minor), "level": "vfs"}],
            "why": f"{path} is on {fstype} ({source}), with no block device behind it: traced at the "
                   "read/write/fsync system calls of the files on it"}


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _tracefs() -> str | None:
    """Where tracefs is mounted (its events listed there, or mountinfo naming it: a user who
    may not list it still learns it is there), or None."""
    mounted = {point for _, point, fstype, _, _ in mounts() if fstype == "tracefs"}
    return next((d for d in TRACEFS if d in mounted or os.path.isdir(os.path.join(d, "events"))), None)


def facts(paths: list[str]) -> dict[str, Any]:
    """This host's answer: its hostname and kernel (boot id: simulated hosts share one), whether
    it can trace, and where each data path lands."""
    tracefs = _tracefs()
    return {"hostname": socket.gethostname(), "boot_id": _boot_id(), "euid": os.geteuid(),
            "bpftrace": shutil.which("bpftrace"), "tracefs": tracefs, "btf": os.path.exists(BTF),
            "paths": [resolve(p) for p in paths]}


def problems(found: dict[str, Any]) -> list[str]:
    """Why a host cannot trace (empty when it can); a host whose paths are all object stores
    needs nothing."""
    if all(p["level"] == "object" for p in found["paths"]):
        return []
    wrong = []
    if found["euid"] != 0:
        wrong.append(f"not root (euid {found['euid']}; bpftrace needs root)")
    if not found["bpftrace"]:
        wrong.append("bpftrace is not on PATH (Debian: apt-get install bpftrace)")
    if not found["tracefs"]:
        wrong.append(f"tracefs is not mounted at {' or '.join(TRACEFS)} (mount -t tracefs nodev {TRACEFS[0]})")
    if not found["btf"]:
        wrong.append(f"the kernel has no BTF ({BTF} is missing: a kernel built without CONFIG_DEBUG_INFO_BTF)")
    return wrong + [p["why"] for p in found["paths"] if p["level"] == "unreadable"]
