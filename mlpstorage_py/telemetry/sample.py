"""One client host's activity over an interval, read from /proc and /sys: what a reviewer needs
to tell whether the storage, the clients' CPU, their memory or the network limited a run.

A sample holds counts over its interval (`dt` seconds) so rates are count / dt:
- cpu: percent of all cores' time in user, system, iowait, steal and idle (/proc/stat);
- mem: MiB used (total - available), page cache, dirty, writeback (/proc/meminfo);
- net: per interface, bytes and packets received and sent (/proc/net/dev: this network
  namespace's, so a simulated host sees its own), with the link speed in Mb/s where the driver
  reports one;
- disks: per whole block device (no partitions: they would count twice), bytes and requests
  read and written, busy milliseconds (utilisation) and the time-weighted queue (/proc/diskstats);
- nfs: per NFS mount, operations and bytes by operation (/proc/self/mountstats), only where there
  is an NFS mount.
Standard library only: a rank imports it beside the engine (telemetry/rank_progress.py). Every read
goes through `read_text`, which counts its bytes, so a rank's progress does not count the
sampler's own reads of /proc as the rank's I/O.
"""

from __future__ import annotations

import os
import time
from typing import Any

SECTOR = 512
CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
NFS_OPS = ("READ", "WRITE", "COMMIT", "GETATTR", "LOOKUP", "ACCESS", "OPEN", "CLOSE", "CREATE", "REMOVE")


class Counted:
    """Bytes this process has read from /proc and /sys for telemetry and progress."""

    read = 0


def read_text(path: str) -> str:
    """A small kernel file in one read (counted in Counted.read); '' when it cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return ""
    try:
        chunks = []
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
            Counted.read += len(chunk)
    except OSError:
        return ""
    finally:
        os.close(fd)
    return b"".join(chunks).decode("ascii", "replace")


def cpu_ticks() -> dict[str, int]:
    line = read_text("/proc/stat").split("\n", 1)[0].split()
    return {name: int(value) for name, value in zip(CPU_FIELDS, line[1:], strict=False)}  # a kernel may list fewer or more if line[:1] == ["cpu"] else {}


def memory() -> dict[str, float]:
    """MiB used, in the page cache, dirty and under writeback, and the total."""
    kib = {}
    for line in read_text("/proc/meminfo").splitlines():
        name, _, rest = line.partition(":")
        if rest.split():
            kib[name] = int(rest.split()[0])
    total = kib.get("MemTotal", 0)
    return {"total_mib": round(total / 1024, 1), "used_mib": round((total - kib.get("MemAvailable", 0)) / 1024, 1),
            "cache_mib": round(kib.get("Cached", 0) / 1024, 1), "dirty_mib": round(kib.get("Dirty", 0) / 1024, 1),
            "writeback_mib": round(kib.get("Writeback", 0) / 1024, 1)}


def net_counters() -> dict[str, tuple[int, int, int, int]]:
    """Interface -> (rx bytes, rx packets, tx bytes, tx packets), loopback left out."""
    found = {}
    for line in read_text("/proc/net/dev").splitlines()[2:]:
        name, _, rest = line.partition(":")
        fields = rest.split()
        if name.strip() and name.strip() != "lo" and len(fields) >= 10:
            found[name.strip()] = (int(fields[0]), int(fields[1]), int(fields[8]), int(fields[9]))
    return found


def link_speed(name: str) -> int | None:
    """The interface's speed in Mb/s, where its driver reports one."""
    text = read_text(f"/sys/class/net/{name}/speed").strip()
    return int(text) if text.isdigit() and int(text) > 0 else None


def whole_devices() -> set[str]:
    """Block devices that are not partitions (/sys/block lists only those), less RAM disks."""
    try:
        return {name for name in os.listdir("/sys/block") if not name.startswith(("ram", "zram"))}
    except OSError:
        return set()


def disk_counters(devices: set[str]) -> dict[str, tuple[int, ...]]:
    """Device -> (reads, sectors read, writes, sectors written, in flight, busy ms, weighted ms)."""
    found: dict[str, tuple[int, ...]] = {}
    for line in read_text("/proc/diskstats").splitlines():
        fields = line.split()
        if len(fields) >= 14 and fields[2] in devices:
            found[fields[2]] = (int(fields[3]), int(fields[5]), int(fields[7]), int(fields[9]), int(fields[11]),
                                int(fields[12]), int(fields[13]))
    return found


def nfs_counters(text: str | None = None) -> dict[str, dict[str, int]]:
    """Per NFS mount point: each operation's count and the bytes it sent and received
    (mountstats' per-op lines: `OP: ops trans timeouts bytes_sent bytes_recv ...`)."""
    found: dict[str, dict[str, int]] = {}
    mount = None
    for line in (read_text("/proc/self/mountstats") if text is None else text).splitlines():
        if line.startswith("device "):
            parts = line.split()
            mount = parts[4] if len(parts) > 7 and parts[7].startswith("nfs") else None
            if mount:
                found[mount] = {}
            continue
        name, _, rest = line.strip().partition(":")
        fields = rest.split()
        if mount and name in NFS_OPS and len(fields) >= 5 and all(f.isdigit() for f in fields[:5]):
            found[mount][name] = int(fields[0])
            found[mount][f"{name}_bytes"] = int(fields[3]) + int(fields[4])
    return found


def _delta(now: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    return {k: tuple(a - b for a, b in zip(v, before[k], strict=True)) if isinstance(v, tuple) else v - before[k]
            for k, v in now.items() if k in before}


class Sampler:
    """Samples over consecutive intervals: the first call starts the interval, each later call
    returns what happened since the one before."""

    def __init__(self) -> None:
        self.devices = whole_devices()
        self.speeds = {name: link_speed(name) for name in net_counters()}
        self.before = self._raw()

    def _raw(self) -> dict[str, Any]:
        return {"t": time.time(), "cpu": cpu_ticks(), "net": net_counters(), "disks": disk_counters(self.devices),
                "nfs": nfs_counters()}

    def sample(self) -> dict[str, Any]:
        """What happened since the last call (or since the Sampler was made)."""
        now, before = self._raw(), self.before
        self.before = now
        dt = max(now["t"] - before["t"], 1e-6)
        ticks = _delta(now["cpu"], before["cpu"])
        total = sum(ticks.values()) or 1
        cpu = {name: round(100 * ticks.get(name, 0) / total, 2) for name in ("user", "system", "iowait", "steal", "idle")}
        cpu["user"] = round(100 * (ticks.get("user", 0) + ticks.get("nice", 0)) / total, 2)
        cpu["system"] = round(100 * (ticks.get("system", 0) + ticks.get("irq", 0) + ticks.get("softirq", 0)) / total, 2)
        net = {}
        for name, (rxb, rxp, txb, txp) in _delta(now["net"], before["net"]).items():
            net[name] = {"rx_bytes": rxb, "rx_packets": rxp, "tx_bytes": txb, "tx_packets": txp,
                         "speed_mbps": self.speeds.get(name)}
        disks = {}
        for name, (r, rs, w, ws, _, busy, weighted) in _delta(now["disks"], before["disks"]).items():
            if r or w or busy:
                disks[name] = {"read_bytes": rs * SECTOR, "write_bytes": ws * SECTOR, "reads": r, "writes": w,
                               "util_pct": round(min(100.0, busy / (dt * 10)), 1),
                               "queue_depth": round(weighted / (dt * 1000), 2)}
        record: dict[str, Any] = {"t": round(now["t"], 3), "dt": round(dt, 3), "cpus": os.cpu_count() or 1,
                                  "cpu": cpu, "mem": memory(), "net": net, "disks": disks}
        nfs = {m: _delta(ops, before["nfs"].get(m, {})) for m, ops in now["nfs"].items() if m in before["nfs"]}
        if nfs:
            record["nfs"] = nfs
        return record
