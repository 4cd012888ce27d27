"""Host facts a vector database leaf records: df of the data and results directories (Rules
5.4.2) and block-device I/O counters around the timed queries."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any


def df(path: Path) -> dict[str, Any]:
    """`df -P -T -k` of a path (falls back to statvfs), with its device number."""
    path = Path(path)
    record: dict[str, Any] = {"path": str(path), "realpath": os.path.realpath(path)}
    try:
        record["st_dev"] = os.stat(path).st_dev
    except OSError as exc:
        record["error"] = exc.strerror
        return record
    exe = shutil.which("df")
    if exe:
        try:
            out = subprocess.run([exe, "-P", "-T", "-k", str(path)], capture_output=True, text=True, timeout=20)
            lines = [line for line in out.stdout.splitlines() if line.strip()]
            if out.returncode == 0 and len(lines) >= 2:
                fields = lines[-1].split()
                record.update(df_output=lines, filesystem=fields[0], type=fields[1], size_kib=int(fields[2]),
                              used_kib=int(fields[3]), available_kib=int(fields[4]), mounted_on=" ".join(fields[6:]))
                return record
        except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
            pass
    st = os.statvfs(path)
    record.update(filesystem="unknown", size_kib=st.f_blocks * st.f_frsize // 1024,
                  available_kib=st.f_bavail * st.f_frsize // 1024,
                  used_kib=(st.f_blocks - st.f_bfree) * st.f_frsize // 1024)
    record["df_output"] = [f"statvfs {path}: size {record['size_kib']} KiB, used {record['used_kib']} KiB, "
                           f"available {record['available_kib']} KiB"]
    return record


def filesystems(data: Path | None, results: Path) -> dict[str, Any]:
    """Both listings and whether they share a filesystem (same device number)."""
    out: dict[str, Any] = {"results": df(results)}
    if data is not None:
        out["data"] = df(data)
        devs = (out["data"].get("st_dev"), out["results"].get("st_dev"))
        out["same_filesystem"] = None if None in devs else devs[0] == devs[1]
    return out


def _whole_devices() -> set[str]:
    try:
        return {name for name in os.listdir("/sys/block") if not name.startswith(("loop", "ram", "dm-", "zram"))}
    except OSError:
        return set()


def diskstats() -> dict[str, tuple[int, int, int, int]]:
    """{device: (reads, sectors read, writes, sectors written)} for whole block devices."""
    keep = _whole_devices()
    out: dict[str, tuple[int, int, int, int]] = {}
    try:
        with open("/proc/diskstats", encoding="utf-8") as fh:
            for line in fh:
                f = line.split()
                if len(f) >= 10 and f[2] in keep:
                    out[f[2]] = (int(f[3]), int(f[5]), int(f[7]), int(f[9]))
    except OSError:
        pass
    return out


class DiskIO:
    """Counter difference over an interval; covers this host's local block devices only."""

    def __init__(self) -> None:
        self.before = diskstats()
        self.t0 = time.monotonic()

    def result(self) -> dict[str, Any]:
        after, seconds = diskstats(), max(time.monotonic() - self.t0, 1e-9)
        reads = writes = rsec = wsec = 0
        for dev, (r, rs, w, ws) in after.items():
            b = self.before.get(dev, (0, 0, 0, 0))
            reads, rsec, writes, wsec = reads + r - b[0], rsec + rs - b[1], writes + w - b[2], wsec + ws - b[3]
        return {
            "scope": "/proc/diskstats of the benchmark client host, whole local block devices; "
                     "not the storage of a remote database server",
            "devices": sorted(after),
            "duration_seconds": seconds,
            "bytes_read": rsec * 512, "bytes_written": wsec * 512,
            "read_ios": reads, "write_ios": writes,
            "read_mbps": rsec * 512 / 2**20 / seconds, "write_mbps": wsec * 512 / 2**20 / seconds,
            "read_iops": reads / seconds, "write_iops": writes / seconds,
        }
