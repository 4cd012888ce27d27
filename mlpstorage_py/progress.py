"""Live progress of long phases, on stderr only (never in a leaf, a log file or stdout).

On a terminal: a rich bar with count, rate and ETA. Elsewhere (CI, a pipe, nohup): a plain
line every PLAIN_EVERY_S seconds while the phase runs, and one when it ends, so a short phase
stays silent and a long one shows it is alive. `polled` follows work another process does
(files DLIO writes, epochs it logs) by asking a counter; `Progress.update` is for work this
process does. `summary` prints a run's closing table.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

PLAIN_EVERY_S = 10.0
_OPEN: list[Progress] = []  # the phases shown now, innermost last (one live display at a time)


def active() -> Progress | None:
    """The innermost phase being shown now, if any: a job inside it shows its rates there."""
    return _OPEN[-1] if _OPEN else None


def _console(stream: TextIO) -> Any:
    from rich.console import Console

    return Console(file=stream, highlight=False, soft_wrap=False)


def _seconds(value: float) -> str:
    value = int(round(value))
    return f"{value // 3600}:{value // 60 % 60:02d}:{value % 60:02d}" if value >= 3600 else f"{value // 60}:{value % 60:02d}"


class Progress:
    """One phase with `total` units (None when unknown): update(done) or advance(n), then close()."""

    def __init__(self, label: str, total: float | None = None, unit: str = "", *, stream: TextIO | None = None,
                 console: Any = None, every_s: float | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.label, self.total, self.unit = label, total, unit
        self.stream = stream or sys.stderr
        self.every_s = PLAIN_EVERY_S if every_s is None else every_s
        self.clock = clock
        self.started = self.last_line = clock()
        self.done = 0.0
        self.note = ""  # a live detail beside the count (a job's rates: launch/watch.py)
        self.lines = 0
        self._lock = threading.Lock()
        self._bar: Any = None
        _OPEN.append(self)
        console = console if console is not None else (_console(self.stream) if _is_tty(self.stream) else None)
        if console is not None and console.is_terminal:
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
            from rich.progress import Progress as Bar

            self._bar = Bar(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TextColumn(unit), TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                            TextColumn("{task.fields[note]}"),
                            console=console, transient=False, refresh_per_second=4)  # light: ranks share the cores
            self._task = self._bar.add_task(label, total=total, note="")
            self._bar.start()

    def update(self, done: float) -> None:
        with self._lock:
            self.done = done
            if self._bar is not None:
                self._bar.update(self._task, completed=done)
            elif self.clock() - self.last_line >= self.every_s:
                self._line()

    def set_note(self, note: str) -> None:
        """The live detail shown beside the count: on a terminal at once, elsewhere on the next line."""
        with self._lock:
            self.note = note
            if self._bar is not None:
                self._bar.update(self._task, note=note)
            elif self.clock() - self.last_line >= self.every_s:
                self._line()

    def advance(self, amount: float = 1) -> None:
        self.update(self.done + amount)

    def eta_s(self) -> float | None:
        """Seconds left at the rate so far; None before any progress or without a total."""
        elapsed = self.clock() - self.started
        if not self.total or self.done <= 0 or elapsed <= 0:
            return None
        return max(self.total - self.done, 0) / (self.done / elapsed)

    def text(self) -> str:
        elapsed = self.clock() - self.started
        count = f"{self.done:g}/{self.total:g}" if self.total else f"{self.done:g}" if self.unit or self.done else ""
        share = f" ({100 * self.done / self.total:.0f}%)" if self.total else ""
        eta = self.eta_s()
        return (f"{self.label}: {count} {self.unit}{share}, {_seconds(elapsed)} elapsed"
                + (f", ETA {_seconds(eta)}" if eta is not None and self.done < (self.total or 0) else "")
                + (f" | {self.note}" if self.note else "")).replace("  ", " ").replace(": , ", ": ")

    def _line(self, suffix: str = "") -> None:
        print(self.text() + suffix, file=self.stream, flush=True)
        self.last_line, self.lines = self.clock(), self.lines + 1

    def close(self) -> None:
        if self in _OPEN:
            _OPEN.remove(self)
        with self._lock:
            if self._bar is not None:
                self._bar.update(self._task, completed=self.done)
                self._bar.stop()
                self._bar = None
            elif self.lines:  # a phase that printed while running says it ended
                self._line(" (done)" if not self.total or self.done >= self.total else " (stopped)")

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _is_tty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


@contextmanager
def polled(label: str, total: float | None, count: Callable[[], float], unit: str = "", *,
           poll_s: float = 2.0, **options: Any) -> Iterator[Progress]:
    """Progress of work another process does, sampled by count() every poll_s seconds in a
    thread while the block runs; a counter that fails (a listing error) skips that sample."""
    progress = Progress(label, total, unit, **options)
    stop = threading.Event()

    def sample() -> None:
        while True:
            try:
                progress.update(count())
            except Exception:  # a failed sample must not end the phase it watches
                pass
            if stop.wait(poll_s):
                return

    watcher = threading.Thread(target=sample, name=f"progress {label}", daemon=True)
    watcher.start()
    try:
        yield progress
    finally:
        stop.set()
        watcher.join(timeout=poll_s + 5)
        try:
            progress.update(count())
        except Exception:  # nor a failed last one the phase's end
            pass
        progress.close()


class LogMarks:
    """How many distinct marks (a pattern's first group, else its whole match) a growing log
    file holds, reading only what was added since the last call: epochs DLIO ended, checkpoints
    the engine finished. Distinct, so ranks that each log the same mark count once."""

    def __init__(self, path: Path, pattern: str) -> None:
        self.path, self.pattern = path, re.compile(pattern.encode())
        self.offset, self.tail = 0, b""
        self.seen: set[bytes] = set()

    def __call__(self) -> int:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                chunk = fh.read()
        except OSError:
            return len(self.seen)
        self.offset += len(chunk)
        lines = (self.tail + chunk).split(b"\n")
        self.tail = lines.pop()
        for line in lines:
            for match in self.pattern.finditer(line):
                self.seen.add(match.group(1) if match.groups() else match.group(0))
        return len(self.seen)


def summary(title: str, rows: list[tuple[str, str]], *, stream: TextIO | None = None, console: Any = None) -> None:
    """A run's closing table (two columns) on stderr: a rich table on a terminal, aligned plain
    lines elsewhere (nothing cut short, nothing to strip from a CI log)."""
    console = console or _console(stream or sys.stderr)
    if not console.is_terminal:
        width = max(len(key) for key, _ in rows)
        console.file.write("\n".join([title] + [f"  {key:<{width}}  {value}" for key, value in rows]) + "\n")
        return
    from rich import box
    from rich.table import Table

    table = Table(title=title, box=box.SIMPLE, show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    for key, value in rows:
        table.add_row(key, value)
    console.print(table)
