"""Run a child process with its output captured into the leaf, progress on the console, a
deadline, and a teardown that leaves nothing of ours running.

An MPI launcher is not one process: PRRTE starts each ssh in its own process group and remote
daemons behind them, so stopping only the child's process group leaves ssh children running
with parent 1. The teardown therefore signals every process in the child's session and every
descendant found in /proc, SIGTERM first and SIGKILL after a grace period (prterun ignores
SIGTERM while it waits on a host).
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

from mlpstorage_py.errors import BenchmarkFailed, Stalled, StartupExpired, TimeoutExpired
from mlpstorage_py.launch.heartbeat import Startup
from mlpstorage_py.launch.rank_guard import PR_SET_PDEATHSIG
from mlpstorage_py.launch.session_dirs import remove_stale
from mlpstorage_py.results.logs import log
from mlpstorage_py.results.redact import redact_bytes, secret_values

PROGRESS_EVERY_S = 15.0
STARTUP_POLL_S = 0.25  # how soon the work's clock starts after the last rank reported
WATCH_POLL_S = 1.0     # how often a job whose ranks report progress is looked at (stall, live view)
GRACE_S = 5.0
# A Python exception line, possibly behind an MPI output tag such as `[1,2]<stderr>:`.
EXCEPTION_LINE = re.compile(r"^(?:\[[^\]]*\][^:]*:\s*)?([A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit)\b.*)$")
# The line after an exception that re-raises a worker's: the worker's own traceback follows.
REWRAPPED = re.compile(r"^(?:\[[^\]]*\][^:]*:\s*)?Original Traceback \(most recent call last\):")
# A tool's own one-line error (`kv-cache.py: error: ...`), possibly behind the same tag.
TOOL_ERROR_LINE = re.compile(r"^(?:\[[^\]]*\][^:]*:\s*)?([\w.-]+: error: .*)$")


def _pump(stream: IO[bytes], sink: IO[bytes], echo: IO[str] | None, last: list[str], secrets: list[bytes],
          startup: Startup | None) -> None:
    """Copy a child's output line by line, masking secret values before anything is written;
    a rank's start-up report goes to the watcher (and the log file), not to the console."""
    watch = startup.watch if startup is not None else None
    for raw in iter(stream.readline, b""):
        raw = redact_bytes(raw, secrets)
        line = raw.decode("utf-8", "replace").rstrip()
        if watch is not None and watch.take(line):  # progress and telemetry: the watcher's, not the log's
            at = min(raw.find(b"MLPS-"), len(raw))
            if at > 0:  # what the engine had printed before the reporter's whole-line write
                sink.write(raw[:at])
                sink.flush()
            continue
        sink.write(raw)
        sink.flush()
        if startup is not None and startup.seen(line):
            continue
        if line:
            last[0] = line
        if echo is not None:
            echo.write(line + "\n")
            echo.flush()


# What a launcher runs first, in a small interpreter of its own that then execs the launcher:
# SIGTERM it when mlpstorage dies, even by SIGKILL (no teardown of ours runs then), so it stops
# its ranks instead of running on with parent 1; SIGPIPE ignored (with mlpstorage gone its
# output pipes have no reader, and prterun's first line about the signal would otherwise kill it
# before it forwards SIGTERM to the ranks); ended at once if mlpstorage died before the request
# took effect. Not a preexec_fn: Python code between fork and exec is unsafe in a process with
# threads, and a fork that is not a vfork runs every library's fork handlers in mlpstorage (gRPC's
# aborted a vectordb run: tests/test_vectordb_fork.py); without one, subprocess uses vfork.
GUARD = (  # %-formatted: the program's own f-string braces stay as written
    "import ctypes, os, signal, sys\n"  # noqa: UP031
    "ctypes.CDLL(None, use_errno=True).prctl(%d, signal.SIGTERM, 0, 0, 0)\n"
    "signal.signal(signal.SIGPIPE, signal.SIG_IGN)\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    os._exit(1)\n"
    "try:\n"
    "    os.execvp(sys.argv[2], sys.argv[2:])\n"
    "except OSError as exc:\n"
    "    sys.stderr.write(f'mlpstorage: cannot start {sys.argv[2]}: {exc.strerror}\\n')\n"
    "    os._exit(127)\n" % PR_SET_PDEATHSIG)


def guarded(argv: list[str], parent: int) -> list[str]:
    """argv run through GUARD, for a child of `parent` (this process)."""
    return [sys.executable, "-I", "-S", "-c", GUARD, str(parent), *argv]


def run_logged(argv: list[str], *, stdout_path: Path, stderr_path: Path, cwd: Path,
               env: dict[str, str] | None = None, label: str = "child", echo: bool = False,
               deadline_s: float | None = None, startup: Startup | None = None) -> int:
    """Run argv (a list, never a shell string) in cwd; stream stdout/stderr into the two files
    (and to the console when echo), print a progress line every PROGRESS_EVERY_S seconds, and
    stop the whole process tree if we are interrupted or a deadline passes. With `startup`, the
    ranks must all report within its allowance (else StartupExpired) and `deadline_s` counts
    from then; without, from the launch (then TimeoutExpired). Returns the exit code."""
    log.info(f"{label}: {shlex.join(argv)}")
    remove_stale(env)  # a dead launcher's session directory would stop one given its PID
    with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
        child = subprocess.Popen(guarded(argv, os.getpid()), cwd=cwd, env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, start_new_session=True)
        last = [""]
        secrets = [s.encode() for s in secret_values(env)]
        pumps = [threading.Thread(target=_pump, args=(child.stdout, out, sys.stdout if echo else None, last, secrets,
                                                      startup), daemon=True),
                 threading.Thread(target=_pump, args=(child.stderr, err, sys.stderr if echo else None, last, secrets,
                                                      startup), daemon=True)]
        for pump in pumps:
            pump.start()
        clock = _Clock(label, time.monotonic(), deadline_s, startup)
        try:
            while True:
                wait = clock.check(last[0])
                try:
                    code = child.wait(timeout=max(wait, 0.05))
                    break
                except subprocess.TimeoutExpired:
                    if not echo:
                        clock.progress(last[0])
        except BaseException:
            _reap(child, env)
            raise
        finally:
            for pump in pumps:
                pump.join(timeout=5)
    clock.finish()
    _reap(child, env)  # a launcher can exit while children it started in their own groups live on
    log.info(f"{label}: exit {code} after {time.monotonic() - clock.launched:.1f} s")
    return code


class _Clock:
    """Which phase a job is in and which deadline applies: the start-up allowance from the
    launch until every rank reported, then the work deadline from that moment."""

    def __init__(self, label: str, launched: float, deadline_s: float | None, startup: Startup | None) -> None:
        self.label, self.launched, self.deadline_s, self.startup = label, launched, deadline_s, startup
        self.work_from: float | None = launched if startup is None else None
        self.next_progress = launched + PROGRESS_EVERY_S

    def check(self, last: str) -> float:
        """Raise if the current phase is over its time; else the seconds until the next look."""
        now = time.monotonic()
        if self.work_from is None:
            assert self.startup is not None
            if self.startup.complete():
                self.work_from = self.finish()
                log.info(f"{self.label}: all {self.startup.ranks} rank(s) started after {self.startup.took_s:.1f} s"
                         f"{'' if self.deadline_s is None else f'; work deadline {self.deadline_s:.0f} s from then'}")
            elif now - self.launched >= self.startup.allowance_s:
                raise StartupExpired(f"{self.label} did not start within its start-up allowance of "
                                     f"{self.startup.allowance_s:.0f} s and was stopped: {self.startup.missing()}; "
                                     "--startup-allowance changes the allowance")
            else:
                return min(STARTUP_POLL_S, self.launched + self.startup.allowance_s - now)
        assert self.work_from is not None, "the start-up phase returned above until it ended"
        watch = self.startup.watch if self.startup is not None else None
        if watch is not None:
            if watch.work_from is None:
                watch.start_work(self.work_from)
            why = watch.stalled()
            if why:
                raise Stalled(f"{self.label} made no progress for {watch.stall_s:.0f} s and was stopped: {why}; "
                              "--stall-timeout changes the limit")
        poll = WATCH_POLL_S if watch is not None else PROGRESS_EVERY_S
        if self.deadline_s is None:
            return poll
        left = self.work_from + self.deadline_s - now
        if left <= 0:
            counted = "" if self.startup is None else " (counted from the start of every rank)"
            raise TimeoutExpired(f"{self.label} ran past its deadline of {self.deadline_s:.0f} s{counted} and was "
                                 f"stopped (last output: {last[:160] or 'none'}); --deadline changes the limit")
        return min(poll, left)

    def finish(self) -> float | None:
        """Once every rank has reported: the moment the last did, with the start-up's seconds
        recorded in the Startup (also for a job that ended before the watcher looked)."""
        if self.startup is None or self.startup.completed_at is None:
            return None
        self.startup.took_s = round(self.startup.completed_at - self.launched, 3)
        return self.startup.completed_at

    def progress(self, last: str) -> None:
        """A line every PROGRESS_EVERY_S: how long it has run, and the phase it is in."""
        now = time.monotonic()
        watch = self.startup.watch if self.startup is not None else None
        if watch is not None and watch.on_view is not None and self.work_from is not None:
            watch.on_view(watch.view())
        if now < self.next_progress:
            return
        self.next_progress = now + PROGRESS_EVERY_S
        if self.work_from is None and self.startup is not None:
            log.info(f"{self.label}: starting {now - self.launched:.0f} s; {self.startup.missing(waiting=True)}")
        else:
            log.info(f"{self.label}: running {now - self.launched:.0f} s; last output: {last[:160]}")


def _reap(child: subprocess.Popen[bytes], env: dict[str, str] | None) -> None:
    """Stop what is left of the child's tree, then remove its launcher's session directory."""
    stop_tree(child)
    remove_stale(env, {child.pid})


def _proc_table() -> dict[int, tuple[int, int, str]]:
    """pid -> (parent pid, session id, state) for every process in /proc."""
    table = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", encoding="ascii", errors="replace") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        table[int(entry.name)] = (int(fields[1]), int(fields[3]), fields[0])
    return table


def tree(root: int) -> set[int]:
    """Live processes in root's session (it leads one: start_new_session) and all its descendants."""
    table = _proc_table()
    found = {pid for pid, (_, session, state) in table.items() if session == root and state not in "ZX"}
    found.add(root)
    grew = True
    while grew:
        more = {pid for pid, (parent, _, state) in table.items() if parent in found and state not in "ZX"} - found
        found |= more
        grew = bool(more)
    return {pid for pid in found if pid in table and table[pid][2] not in "ZX"}


def stop_tree(child: subprocess.Popen[bytes]) -> None:
    """Stop the child's whole tree. The launcher alone gets SIGTERM first, so an MPI launcher can
    stop its ranks and remote daemons in order (they would otherwise outlive it by seconds, until
    they notice their ssh session is gone); after GRACE_S (prterun ignores SIGTERM while it waits
    on a hung host) the rest of the tree gets SIGTERM, then SIGKILL."""
    if child.poll() is None:
        _signal({child.pid}, signal.SIGTERM)
        _wait_gone(child, {child.pid}, GRACE_S)
    for sig, grace in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 5.0)):
        pids = tree(child.pid) if child.poll() is None else tree(child.pid) - {child.pid}
        if not pids:
            return
        _signal(pids, sig)
        if _wait_gone(child, pids, grace):
            return


def _signal(pids: set[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _wait_gone(child: subprocess.Popen[bytes], pids: set[int], grace: float) -> bool:
    """Wait up to `grace` seconds for all of `pids` to end; reaps the child."""
    end = time.monotonic() + grace
    while time.monotonic() < end:
        child.poll()
        if not (tree(child.pid) & pids) and (child.pid not in pids or child.returncode is not None):
            return True
        time.sleep(0.1)
    child.poll()
    return False


def require_success(code: int, label: str, stderr_path: Path) -> None:
    """A non-zero exit is a failed run; quote the child's last error line."""
    if code == 0:
        return
    detail = error_line(stderr_path)
    raise BenchmarkFailed(f"{label} exited with code {code}{': ' + detail if detail else ''} (see {stderr_path})")


def error_line(stderr_path: Path) -> str:
    """The line that explains a failure: a rank's Python exception (the first, which is the
    cause; MPI's abort chatter follows it), else the launcher's first line naming a cause.
    An exception that only re-raises a worker's (PyTorch's DataLoader: `Caught RuntimeError in
    DataLoader worker process 0.` over the worker's `Original Traceback`) gives way to the worker's."""
    from mlpstorage_py.launch.launchers import first_error_line

    text = stderr_path.read_text(encoding="utf-8", errors="replace")
    lines = [l.strip() for l in text.splitlines()]
    for at, line in enumerate(lines):
        match = EXCEPTION_LINE.match(line)
        if match and not match.group(1).startswith(("KeyboardInterrupt", "SystemExit")):
            if at + 1 < len(lines) and REWRAPPED.match(lines[at + 1]):
                continue
            return match.group(1)[:300]
    for line in lines:
        match = TOOL_ERROR_LINE.match(line)
        if match:
            return match.group(1)[:300]
    return first_error_line(text)
