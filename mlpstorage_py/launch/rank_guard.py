"""What each of our MPI ranks does first and next: ask the kernel to end it with its launcher,
then, once it has started, say so to the launcher's watcher (launch/heartbeat.py).

A rank's parent is the process that started it (prterun or prted, Hydra's proxy, slurmstepd).
When mlpstorage is SIGKILLed its launcher gets SIGTERM (launch/process.py), but a launcher can
die without passing the signal on (prterun, writing the ranks' output into pipes whose reader
is gone), and its ranks would run on to the end with parent 1. With PR_SET_PDEATHSIG the
kernel sends the rank SIGTERM the moment its parent exits, whatever the launcher does. A
launcher that died before the request took effect is caught twice: the parent is no longer
the one the rank had when its interpreter started, and the start-up line finds no reader.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import sys
import traceback
from typing import Any

from mlpstorage_py.launch.heartbeat import mark_work, started_line
from mlpstorage_py.telemetry import rank_progress

PR_SET_PDEATHSIG = 1
LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" else None
RANK_VARIABLES = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "MV2_COMM_WORLD_RANK", "SLURM_PROCID")


def die_with_parent(parent: int | None = None) -> None:
    """SIGTERM this process when its parent exits, and now if it already has: `parent` is the
    parent the rank had when it started (read as early as the entry point can), else now's."""
    if LIBC is None:
        return
    parent = os.getppid() if parent is None else parent
    LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent or parent == 1:
        os.kill(os.getpid(), signal.SIGTERM)


def env_rank() -> int:
    """This rank's number from the launcher's environment."""
    return rank_progress.env_number(RANK_VARIABLES)


def report_started(rank: int | None = None) -> None:
    """One line on stdout: this rank has started (interpreter, imports, MPI). A launcher that is
    gone leaves the pipe without a reader: then the rank ends here instead of working for nobody.
    The rank's work starts here for an I/O tracer too (heartbeat.mark_work), and its progress
    lines (telemetry/rank_progress.py) from here on."""
    mark_work()
    rank = env_rank() if rank is None else rank
    try:
        print(started_line(rank, socket.gethostname(), os.getpid()), flush=True)
    except BrokenPipeError:
        os._exit(1)
    rank_progress.start(rank)


def abort_job(comm: Any, rank: int, exc: BaseException) -> None:
    """A rank's failure, then the whole MPI job stopped (`comm.Abort`): the one-line cause first,
    since the parent quotes the first exception line it finds, then the traceback for the log."""
    sys.stderr.write(f"{type(exc).__name__}: rank {rank} on {socket.gethostname()}: "
                     f"{' '.join(str(exc).split())[:400]}\n")
    sys.stderr.write(traceback.format_exc())
    sys.stderr.flush()
    comm.Abort(1)
