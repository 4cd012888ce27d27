"""The DLIO rank's own exits (benchmarks/dlio_rank.py): a rank must end when told to, wherever
it is waiting, and never wait on a launcher that is gone."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from mlpstorage_py.benchmarks import dlio_rank

# DLIO's import installs dftracer's Python handler on SIGTERM; load_dlio gives the default back.
# The rank then blocks in a C call, as one does in an MPI collective.
BLOCKED_RANK = """
import ctypes, signal, sys
import dlio_benchmark.main
print("handler" if signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None) else "default", flush=True)
from mlpstorage_py.benchmarks.dlio_rank import load_dlio
load_dlio()
print("ready", flush=True)
ctypes.CDLL(None).sleep(60)
"""


def test_sigterm_ends_a_rank_blocked_in_c():
    child = subprocess.Popen([sys.executable, "-c", BLOCKED_RANK], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             text=True)
    try:
        assert child.stdout.readline().strip() == "handler"  # what the rank has to undo
        assert child.stdout.readline().strip() == "ready"
        time.sleep(0.2)
        sent = time.monotonic()
        child.send_signal(signal.SIGTERM)
        code = child.wait(timeout=10)
    finally:
        child.kill()
        child.wait()
    # dftracer's handler would have turned the signal into SystemExit(15) -> MPI_Abort
    assert code == -signal.SIGTERM
    assert time.monotonic() - sent < 5


def test_abort_without_a_launcher_exits_without_mpi(monkeypatch):
    class Exited(Exception):
        pass

    def exit_now(code: int) -> None:
        raise Exited(code)

    monkeypatch.setattr(dlio_rank, "_LAUNCHER", -1)  # the rank's parent is no longer the launcher
    monkeypatch.setattr(dlio_rank.os, "_exit", exit_now)
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # MPI_Abort would need it (and wait forever)
    with pytest.raises(Exited) as exited:
        dlio_rank._abort(3)
    assert exited.value.args == (3,)
