"""What each of our MPI ranks does first: ask the kernel to end it with its launcher.

A rank's parent is the process that started it (prterun or prted, Hydra's proxy, slurmstepd).
When mlpstorage is SIGKILLed its launcher gets SIGTERM (launch/process.py), but a launcher can
die without passing the signal on (prterun, writing the ranks' output into pipes whose reader
is gone), and its ranks would run on to the end with parent 1. With PR_SET_PDEATHSIG the
kernel sends the rank SIGTERM the moment its parent exits, whatever the launcher does.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1
LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" else None


def die_with_parent() -> None:
    """SIGTERM this process when its parent exits (and now, if it already has)."""
    if LIBC is None:
        return
    parent = os.getppid()
    LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGTERM)
