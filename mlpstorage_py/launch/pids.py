"""Whether a process still runs, for everything that removes or waits on what a process left."""

from __future__ import annotations


def alive(pid: int) -> bool:
    """Whether process `pid` runs on this host. A zombie (ended, its parent has yet to reap it)
    does not: what it left can go. A number no process can have (0 or less, which signals would
    read as a process group) counts as running, so nothing is removed on its account."""
    if pid <= 0:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            state = stat.read().rpartition(b")")[2].split()[:1]
    except FileNotFoundError:
        return False
    except OSError:
        return True  # unreadable: leave what it may own
    return state not in ([b"Z"], [b"X"])
