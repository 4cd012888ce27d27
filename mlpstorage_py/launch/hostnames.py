"""Which host names mean this machine: one definition for every launch decision that depends on it.

Two questions, answered apart because they differ for this host's own name:
- `is_loopback`: a name every host resolves to itself (127.0.0.0/8, ::1, localhost and its usual
  /etc/hosts aliases). srun is given no --nodelist for these (they are no Slurm node), and a
  database at such an address cannot be reached from another host.
- `is_local`: this machine, by a loopback name or by its own hostname. The ssh preflight, the
  host survey and the KV shared-results check skip it (MPI starts no daemon here).
"""

from __future__ import annotations

import ipaddress
import socket

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "localhost6", "localhost6.localdomain6",
                            "ip6-localhost", "ip6-loopback"})


def host_name(entry: str) -> str:
    """A --hosts entry without its `:slots`; an IP literal (::1) is kept whole."""
    try:
        ipaddress.ip_address(entry)
    except ValueError:
        return entry.split(":")[0]
    return entry


def is_loopback(host: str) -> bool:
    """Whether `host` (optionally with :slots) names the loopback interface of whichever host reads it."""
    name = host_name(host).lower().rstrip(".")
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return name in LOOPBACK_NAMES


def is_local(host: str) -> bool:
    """Whether `host` (optionally with :slots) is this machine: a loopback name or our own hostname."""
    name = host_name(host)
    return is_loopback(name) or name in (socket.gethostname(), socket.getfqdn())
