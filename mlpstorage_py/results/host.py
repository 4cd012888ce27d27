"""What the metadata records about the host that ran the command."""

from __future__ import annotations

import os
import platform
import socket
import sys
from typing import Any


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
    return {
        "hostname": socket.gethostname(),
        "os": f"{platform.system()} {platform.release()}",
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "memory_total_bytes": meminfo_bytes(),
        "python": sys.version.split()[0],
    }
