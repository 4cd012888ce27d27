"""Each rank says what it has done, every few seconds, on the channel that carries its start-up
line (stdout, which every launcher forwards: no shared filesystem), and the first rank on each
host says what the host is doing (telemetry/sample.py):

    MLPS-RANK-PROGRESS {"rank": 3, "host": "client-2", "read": 1048576, "written": 0, "units": 12, ...}
    MLPS-HOST-TELEMETRY {"host": "client-2", "t": ..., "cpu": {...}, "disks": {...}, ...}

Bytes are the characters the rank's processes (it and every process it started: DLIO's reader
workers) passed to read and write calls (/proc/<pid>/io rchar and wchar), less what this
reporter itself read from /proc and wrote as its lines: I/O the engine did, from storage or the
page cache, and nothing else. `units` counts what an engine of ours says it finished (files,
checkpoint shards, requests, queries). An object run across several endpoints adds `endpoints`:
per endpoint URL, [bytes read, bytes written, requests, failed requests] its processes completed
there (storage/multi.py sets them), so the leaf's per-endpoint figures are what the ranks did. The watcher (launch/watch.py) judges the job by these
figures: a job that keeps moving bytes or units is never stopped for being slow.

A thread of the rank, so it starts and ends with the rank on every path, on every host; it uses
the standard library only (a DLIO rank and kv-cache.py's wrapper load it beside their engine).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

from mlpstorage_py.telemetry.sample import Counted, Sampler, read_text

PROGRESS_TAG = "MLPS-RANK-PROGRESS"
TELEMETRY_TAG = "MLPS-HOST-TELEMETRY"
PROGRESS_ENV = "MLPSTORAGE_PROGRESS_S"    # seconds between a rank's progress lines (mlpstorage sets it)
TELEMETRY_ENV = "MLPSTORAGE_TELEMETRY_S"  # seconds between a host's telemetry samples; 0: none
DEFAULT_PROGRESS_S = 2.0
LOCAL_RANK_VARIABLES = ("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "PMI_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_RANK",
                        "SLURM_LOCALID")


def env_number(names: tuple[str, ...]) -> int:
    """The first of these launcher variables that holds a number (Open MPI, PMIx, MPICH,
    MVAPICH, Slurm each set their own), else 0."""
    for name in names:
        value = os.environ.get(name, "").strip()
        if value.isdigit():
            return int(value)
    return 0


def local_rank() -> int:
    """This rank's number on its host."""
    return env_number(LOCAL_RANK_VARIABLES)


def _seconds(name: str, default: float) -> float:
    try:
        return max(0.0, float(os.environ.get(name, default)))
    except ValueError:
        return default


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tasks:
        found += [int(c) for c in read_text(f"/proc/{pid}/task/{tid}/children").split()]
    return found


def _io(pid: int) -> tuple[int, int] | None:
    fields = dict(line.split(": ", 1) for line in read_text(f"/proc/{pid}/io").splitlines() if ": " in line)
    try:
        return int(fields["rchar"]), int(fields["wchar"])
    except (KeyError, ValueError):
        return None


class Reporter:
    """One rank's reporter thread: progress lines every `every_s`, and telemetry every
    `telemetry_s` on the host's first rank."""

    def __init__(self, rank: int, every_s: float, telemetry_s: float) -> None:
        self.rank, self.every_s, self.telemetry_s = rank, every_s, telemetry_s
        self.host, self.pid = socket.gethostname(), os.getpid()
        self.units, self.unit, self.phase, self.paused = 0, "", "", False
        self.extra_read = self.extra_written = 0
        self.seen: dict[int, tuple[int, int]] = {}  # pid -> its last rchar, wchar (a process gone keeps its share)
        self.written = 0  # bytes of our own lines (in wchar)
        self.done = False
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._sampler = Sampler() if telemetry_s > 0 and local_rank() == 0 else None
        self._thread = threading.Thread(target=self._run, name="mlps-progress", daemon=True)

    def add(self, units: int = 1, unit: str | None = None, *, read: int = 0, written: int = 0) -> None:
        """An engine of ours finished `units` more (files, shards, requests, queries), and moved
        bytes that /proc/<pid>/io does not count (a socket's: object storage, a database)."""
        with self._lock:
            self.units += units
            self.extra_read += read
            self.extra_written += written
            if unit:
                self.unit = unit

    @contextlib.contextmanager
    def pausing(self) -> Iterator[None]:
        """A pause the workload asks for (time between checkpoints): the rank's lines say so, and
        the watcher counts them as progress, so a planned wait is never taken for a stall."""
        self.paused = True
        try:
            yield
        finally:
            self.paused = False

    def set_phase(self, phase: str) -> None:
        """The phase the rank is in now (write, read, ...), carried on its lines."""
        self.phase = phase

    def io(self) -> tuple[int, int]:
        """Bytes the rank's processes read and wrote, less this reporter's own."""
        pids, todo = set(), [self.pid]
        while todo:
            pid = todo.pop()
            if pid not in pids:
                pids.add(pid)
                todo += _children(pid)
        own = 0
        for pid in sorted(pids - {self.pid}) + [self.pid]:  # this process last: its rchar then holds
            own = Counted.read                              # every read of ours but the one that reads it
            now = _io(pid)
            if now is not None:
                self.seen[pid] = (max(now[0], self.seen.get(pid, (0, 0))[0]), max(now[1], self.seen.get(pid, (0, 0))[1]))
        read = sum(r for r, _ in self.seen.values()) - own + self.extra_read
        return max(0, read), max(0, sum(w for _, w in self.seen.values()) - self.written + self.extra_written)

    def line(self) -> dict[str, Any]:
        read, written = self.io()
        with self._lock:
            return {"rank": self.rank, "host": self.host, "pid": self.pid, "read": read, "written": written,
                    "units": self.units, "unit": self.unit, "phase": self.phase, "done": self.done,
                    "paused": self.paused, **_endpoint_field()}

    def _emit(self, tag: str, record: dict[str, Any]) -> None:
        data = f"{tag} {json.dumps(record, separators=(',', ':'))}\n".encode()
        try:  # one write: a whole line, never split by the engine's own buffered output
            os.write(1, data)
        except OSError:  # the launcher is gone; the rank's own teardown follows
            self._stop.set()
            return
        self.written += len(data)

    def _run(self) -> None:
        next_progress = time.monotonic()
        next_sample = next_progress + self.telemetry_s  # the first sample's interval starts with the Sampler
        while not self._stop.is_set():
            now = time.monotonic()
            if now >= next_progress:
                self._emit(PROGRESS_TAG, self.line())
                next_progress = now + self.every_s
            if self._sampler is not None and now >= next_sample:
                self._emit(TELEMETRY_TAG, {"host": self.host, **self._sampler.sample()})
                next_sample = now + self.telemetry_s
            due = next_progress if self._sampler is None else min(next_progress, next_sample)
            self._stop.wait(max(0.01, due - time.monotonic()))

    def start(self) -> Reporter:
        self._thread.start()
        atexit.register(self.finish)
        return self

    def finish(self) -> None:
        """The rank's share is done: a last line that says so (and a last telemetry sample), once."""
        if self.done:
            return
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        self.done = True
        self._emit(PROGRESS_TAG, self.line())
        if self._sampler is not None:
            self._emit(TELEMETRY_TAG, {"host": self.host, **self._sampler.sample()})


_REPORTER: Reporter | None = None


def start(rank: int) -> Reporter:
    """This rank's reporter, started once (every rank program calls it as it reports its start)."""
    global _REPORTER
    if _REPORTER is None:
        every = _seconds(PROGRESS_ENV, DEFAULT_PROGRESS_S) or DEFAULT_PROGRESS_S
        _REPORTER = Reporter(rank, every, _seconds(TELEMETRY_ENV, 0.0)).start()
    return _REPORTER


def current() -> Reporter | None:
    """The rank's reporter, where one was started in this process: engines count their units
    through it (None in a process forked from the rank: see count)."""
    return _REPORTER if _REPORTER is not None and _REPORTER.pid == os.getpid() else None


class _Forked:
    """What a process forked from a rank (a DLIO reader worker) has counted, and when it last said so."""

    read = written = units = 0
    said = 0.0


def count(units: int = 0, unit: str | None = None, *, read: int = 0, written: int = 0) -> None:
    """Work an engine of ours did that /proc/<pid>/io does not see (socket I/O, units): added to
    the rank's reporter in the rank's process; in a process forked from it, sent as that
    process's own progress line (its pid, the rank's number) every few seconds, which the
    watcher adds to the rank's."""
    reporter = current()
    if reporter is not None:
        reporter.add(units, unit, read=read, written=written)
        return
    if _REPORTER is None:  # not a rank of ours
        return
    _Forked.read, _Forked.written, _Forked.units = _Forked.read + read, _Forked.written + written, _Forked.units + units
    now = time.monotonic()
    if now - _Forked.said >= _REPORTER.every_s:
        _Forked.said = now
        record = {"rank": _REPORTER.rank, "host": _REPORTER.host, "pid": os.getpid(), "read": _Forked.read,
                  "written": _Forked.written, "units": _Forked.units, "unit": unit or "", "worker": True,
                  **_endpoint_field()}
        try:
            os.write(1, f"{PROGRESS_TAG} {json.dumps(record, separators=(',', ':'))}\n".encode())
        except OSError:
            pass


# This process's figures per object endpoint: URL -> [read, written, requests, failed requests],
# each the running total of what completed (set whole by storage/multi.py after every request).
_ENDPOINTS: dict[str, list[int]] = {}
_ENDPOINTS_PID = 0


def set_endpoints(figures: dict[str, list[int]]) -> None:
    """This process's running totals per endpoint; its next progress line carries them. In a
    process forked from a rank, a line goes out as count() sends one (every few seconds)."""
    global _ENDPOINTS, _ENDPOINTS_PID
    first = _ENDPOINTS_PID != os.getpid()
    _ENDPOINTS, _ENDPOINTS_PID = {url: list(v) for url, v in figures.items()}, os.getpid()
    if current() is None and _REPORTER is not None:
        if first:
            _flush_at_end()
        count(0)


def _flush_at_end() -> None:
    """A reader worker's last figures go out however it ends: through multiprocessing's
    finalizers when it returns, or at the SIGTERM that ends a daemonic worker (a persistent
    PyTorch worker when its rank exits), then the signal's own course."""
    import multiprocessing.util
    import signal

    multiprocessing.util.Finalize(None, flush_forked, exitpriority=10)
    if threading.current_thread() is not threading.main_thread():
        return
    before = signal.getsignal(signal.SIGTERM)

    def on_term(signum: int, frame: Any) -> None:
        flush_forked()
        signal.signal(signal.SIGTERM, before if before is not None else signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_term)


def _endpoint_field() -> dict[str, Any]:
    """The `endpoints` field of this process's line (none before an object endpoint was used;
    a forked process does not send its parent's)."""
    return {"endpoints": _ENDPOINTS} if _ENDPOINTS and _ENDPOINTS_PID == os.getpid() else {}


def flush_forked() -> None:
    """A process forked from a rank says its figures now (it is about to end)."""
    if _REPORTER is not None and current() is None:
        _Forked.said = 0.0
        count(0)
