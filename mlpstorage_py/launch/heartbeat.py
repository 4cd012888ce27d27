"""A launched job's two phases: start-up, until every rank has said it started, and the work.

Each of our ranks prints one line once its interpreter, imports and MPI wire-up are done
(rank_guard.report_started; kv_cache_benchmark/mlperf_wrapper.py prints the same line):

    MLPS-RANK-STARTED {"rank": 3, "host": "client-2", "pid": 4711}

on stdout, which every launcher (prterun, Hydra, srun) forwards to mlpstorage, so no shared
filesystem is needed. The launcher-side watcher (process.run_logged) reads those lines as the
output is pumped: a start-up that does not finish within its allowance is ended naming the
ranks and hosts that never reported, and the work deadline counts from the moment the last
rank reported. A slow start-up on a busy head node therefore no longer eats into the work's
deadline, and a hung one (an ssh that never answers, a rank stuck in an import) is still ended.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mlpstorage_py.launch.watch import Watch

TAG = "MLPS-RANK-STARTED"
# A run's work mark (trace/bpf.py): getpgid() of a number no pid reaches (pid_max is at most
# 2**22) fails at once with ESRCH, and a tracer that knows the run's number sees who called it.
# Each traced run draws its own, so another mlpstorage on the same host is not this run's work;
# it reaches every rank as MLPSTORAGE_WORK_MARK (forwarded by name like every MLPSTORAGE_ variable).
WORK_MARK_ENV = "MLPSTORAGE_WORK_MARK"
MARK_RANGE = (1 << 22, 1 << 31)


def new_mark() -> int:
    """A traced run's own mark."""
    return MARK_RANGE[0] + secrets.randbelow(MARK_RANGE[1] - MARK_RANGE[0])


@contextlib.contextmanager
def exported(values: dict[str, str]) -> Iterator[None]:
    """These variables in this process's environment for the block (what it starts inherits
    them; MLPSTORAGE_ ones reach every rank on every host by name once a command line is built
    inside it), what was there before restored after."""
    before = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def marked(mark: int) -> contextlib.AbstractContextManager[None]:
    """The work mark in this process's environment for the block."""
    return exported({WORK_MARK_ENV: str(mark)})


def mark_work() -> None:
    """Tell the run's I/O tracer that from here on this process, and what it forks, does the
    run's work: its imports and start-up before the mark are kept apart from the workload that
    replay.fio reproduces. Nothing happens when the run is not traced (no mark in the environment)."""
    value = os.environ.get(WORK_MARK_ENV, "")
    if not value.isdigit():
        return
    try:
        os.getpgid(int(value))
    except (OSError, OverflowError):
        pass


def started_line(rank: int, host: str, pid: int) -> str:
    """The one line a rank prints once it has started."""
    return f"{TAG} {json.dumps({'rank': rank, 'host': host, 'pid': pid})}"


def parse(line: str) -> dict[str, Any] | None:
    """The report in a line of the job's output (a launcher may put a tag such as
    `[1,0]<stdout>:` before it), or None."""
    at = line.find(TAG + " ")
    if at < 0:
        return None
    try:
        report = json.loads(line[at + len(TAG) + 1:])
    except ValueError:
        return None
    return report if isinstance(report, dict) and isinstance(report.get("rank"), int) else None


@dataclass
class Startup:
    """What the watcher waits for: `ranks` reports within `allowance_s` seconds of the launch.
    `placement` is the host entry each rank was asked for (rank order), to name the hosts
    whose ranks never reported."""

    ranks: int
    allowance_s: float
    placement: Sequence[str] = ()
    took_s: float | None = None  # seconds from the launch to the last report, once all came
    watch: Watch | None = None  # the ranks' progress and the hosts' telemetry (launch/watch.py)
    completed_at: float | None = None  # time.monotonic() when the last rank reported
    _seen: dict[int, str] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def seen(self, line: str) -> bool:
        """Take one line of output (called from the output pump threads); True if it was a report."""
        report = parse(line)
        if report is None:
            return False
        with self._lock:
            self._seen.setdefault(report["rank"], str(report.get("host", "?")))
            if self.completed_at is None and len(self._seen) >= self.ranks:
                self.completed_at = time.monotonic()
        return True

    def complete(self) -> bool:
        with self._lock:
            return len(self._seen) >= self.ranks

    def hosts(self) -> list[str]:
        """The host names the ranks reported, in rank order."""
        with self._lock:
            return [self._seen[r] for r in sorted(self._seen)]

    def missing(self, waiting: bool = False) -> str:
        """Which ranks (and on which hosts) have not reported: for the start-up error, or for a
        progress line while `waiting`."""
        with self._lock:
            absent = [r for r in range(self.ranks) if r not in self._seen]
        shown = ", ".join(str(r) for r in absent[:16]) + (f" and {len(absent) - 16} more" if len(absent) > 16 else "")
        verb = "not reported yet" if waiting else "did not report"
        text = f"{len(absent)} of {self.ranks} rank(s) {verb}: rank {shown}"
        if len(self.placement) == self.ranks:
            silent = sorted({self.placement[r] for r in absent} - {self.placement[r] for r in range(self.ranks)
                                                                    if r not in absent})
            if silent and not waiting:
                text += f"; no rank on {', '.join(silent)} started"
            else:
                text += f" (on {', '.join(sorted({self.placement[r] for r in absent}))})"
        return text
