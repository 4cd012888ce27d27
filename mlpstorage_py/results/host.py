"""What the metadata records about the host that ran the command (its system_info).

HostInfo has no version of its own: it is read as the version of the metadata that holds it
(results/metadata.Metadata).
    none/1  hostname, os, machine, cpu_count, memory_total_bytes (null off Linux), python
"""

from __future__ import annotations

import os
import platform
import socket
import sys
from typing import Any

from mlpstorage_py.results.schema import NUMBER, TEXT, Schema


class HostInfo(Schema):
    KIND = "system_info"
    VERSION_KEY = None
    VERSION = 1
    FIELDS = {"hostname": TEXT, "os": TEXT, "machine": TEXT, "cpu_count": NUMBER, "memory_total_bytes": NUMBER,
              "python": TEXT}


def meminfo_bytes(field: str = "MemTotal") -> int | None:
    """A /proc/meminfo field in bytes (None off Linux)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def host_info() -> dict[str, Any]:
    return HostInfo({
        "hostname": socket.gethostname(),
        "os": f"{platform.system()} {platform.release()}",
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "memory_total_bytes": meminfo_bytes(),
        "python": sys.version.split()[0],
    }).to_json()
