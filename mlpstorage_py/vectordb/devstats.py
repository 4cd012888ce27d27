"""The block device under a path and its read counters, for per-query device reads.

The counters are the kernel's for that one device (/sys/dev/block/MAJ:MIN/stat, the line
/proc/diskstats shows for it): a partition's, a loop device's or a disk's. Another process's I/O
to the same device counts too, which is why the tests give the index a loop device of its own.
A path on tmpfs, overlay, NFS or FUSE has no block device here (major 0): None, with the reason.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

SECTOR_BYTES = 512  # the unit of the sector fields, whatever the device's own sector size


def device_of(path: str | Path) -> dict[str, Any]:
    """{"device", "major", "minor", "stat"} of the block device holding path, or {"device": None,
    "reason"} where there is none."""
    st = os.stat(path)
    major, minor = os.major(st.st_dev), os.minor(st.st_dev)
    sysfs = Path(f"/sys/dev/block/{major}:{minor}")
    if major == 0 or not (sysfs / "stat").is_file():
        return {"device": None, "major": major, "minor": minor,
                "reason": f"{path} is on a filesystem with no block device here (st_dev {major}:{minor}: tmpfs, "
                          "overlay, NFS or FUSE); device reads cannot be counted"}
    return {"device": os.path.basename(os.path.realpath(sysfs)), "major": major, "minor": minor,
            "stat": str(sysfs / "stat")}


def read_counters(stat: str) -> dict[str, int]:
    """Reads and bytes read, writes and bytes written so far on one device."""
    fields = [int(v) for v in Path(stat).read_text(encoding="ascii").split()]
    return {"read_ios": fields[0], "read_bytes": fields[2] * SECTOR_BYTES,
            "write_ios": fields[4], "write_bytes": fields[6] * SECTOR_BYTES}


def difference(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {key: after[key] - before[key] for key in before}


def boot_id() -> str:
    """One kernel's identity: hosts simulated on one machine share its block devices and counters."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip()
    except OSError:
        return "unknown"
