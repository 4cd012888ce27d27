"""mlpstorage's side of the ranks' progress and the hosts' telemetry (telemetry/rank_progress.py):
each rank's figures as its lines arrive, the stall watchdog, the live view's text, and each
host's telemetry written into the leaf as it comes (telemetry/<host>.jsonl).

The watchdog judges a job by its progress, not by a clock (ManPage, Client hosts):
- a rank that has not finished its share and has sent no line for the stall timeout is stalled
  (a frozen process or host: its reporter thread stops with it);
- a job in which no rank has moved a byte or a unit for the stall timeout is stalled, and the
  ranks named are those that have not finished, the longest idle first (a rank that finished
  its share and waits for the others is never named);
- a job whose ranks have all finished and whose launcher has not ended within the stall
  timeout is stalled in its finish.
A rank that keeps moving bytes, however slowly, is never stalled.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from mlpstorage_py.results.bottleneck import Bottleneck, TelemetrySample
from mlpstorage_py.telemetry.rank_progress import PROGRESS_TAG, TELEMETRY_TAG

MIB = 2 ** 20
TELEMETRY_DIR = "telemetry"  # in the leaf: <host>.jsonl and bottleneck.json
WINDOW_S = 10.0  # the live view's rates are over the last this many seconds


@dataclass
class RankState:
    """One rank's last report and when (mlpstorage's monotonic clock) it last said anything and
    last moved anything."""

    rank: int
    host: str
    read: int = 0
    written: int = 0
    units: int = 0
    unit: str = ""
    phase: str = ""
    done: bool = False
    last_report: float = 0.0
    last_advance: float = 0.0
    history: deque[tuple[float, int, int]] = field(default_factory=lambda: deque(maxlen=64))  # (time, bytes, units)
    parts: dict[str, tuple[int, ...]] = field(default_factory=dict)  # pid -> its (read, written, units)
    # pid -> {endpoint URL: (read, written, requests, failed)}: an object run across several endpoints
    endpoint_parts: dict[str, dict[str, tuple[int, ...]]] = field(default_factory=dict)

    def moved(self) -> int:
        return self.read + self.written


def _endpoint_figures(value: Any) -> dict[str, tuple[int, ...]]:
    """A line's `endpoints` field: URL -> four whole numbers (anything else is dropped)."""
    if not isinstance(value, dict):
        return {}
    found = {}
    for url, figures in list(value.items())[:64]:
        if isinstance(url, str) and isinstance(figures, list) and len(figures) == 4 and \
                all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in figures):
            found[url[:256]] = tuple(figures)
    return found


def _host_file(host: str) -> str:
    """A host's telemetry file name: its name in safe characters (never a path)."""
    return (re.sub(r"[^A-Za-z0-9._-]", "_", host).lstrip(".") or "host")[:128] + ".jsonl"


class Watch:
    """The ranks' progress and the hosts' telemetry for one job."""

    def __init__(self, ranks: int, stall_s: float, *, progress_s: float = 2.0, telemetry_s: float = 0.0,
                 telemetry_dir: Path | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.ranks, self.stall_s, self.telemetry_dir, self.clock = ranks, stall_s, telemetry_dir, clock
        self.progress_s, self.telemetry_s = progress_s, telemetry_s
        self.states: dict[int, RankState] = {}
        self.work_from: float | None = None
        self.all_done_at: float | None = None
        self.phases: dict[str, list[float]] = {}  # phase -> [first, last] wall-clock second it moved bytes
        self.hosts_sampled: set[str] = set()
        self._files: dict[str, IO[str]] = {}
        self.on_view: Callable[[str], None] | None = None  # where the live view goes (a Progress's note)
        self._lock = threading.Lock()

    # -- lines from the pump threads ------------------------------------------------------------
    def take(self, line: str) -> bool:
        """Take a progress or telemetry line (anything after a launcher's tag); True if it was one."""
        for tag, handle in ((PROGRESS_TAG, self._progress), (TELEMETRY_TAG, self._telemetry)):
            at = line.find(tag + " ")
            if at >= 0:
                try:
                    record = json.loads(line[at + len(tag) + 1:])
                except ValueError:
                    return True
                if isinstance(record, dict):
                    handle(record)
                return True
        return False

    def _progress(self, record: dict[str, Any]) -> None:
        """A rank's line (or one of a process it forked: its own pid, added to the rank's figures)."""
        rank = record.get("rank")
        if not isinstance(rank, int) or isinstance(rank, bool):
            return
        now = self.clock()
        try:
            figures = tuple(max(0, int(record.get(k) or 0)) for k in ("read", "written", "units"))
        except (TypeError, ValueError):
            return
        with self._lock:
            state = self.states.get(rank)
            if state is None:
                state = self.states[rank] = RankState(rank, str(record.get("host") or "?"), last_advance=now)
            before = (state.read, state.written, state.units)
            state.parts[str(record.get("pid"))] = figures
            endpoints = _endpoint_figures(record.get("endpoints"))
            if endpoints:
                state.endpoint_parts[str(record.get("pid"))] = endpoints
            state.read, state.written, state.units = (sum(p[i] for p in state.parts.values()) for i in range(3))
            worker = bool(record.get("worker"))
            if not worker:
                state.unit, state.phase = str(record.get("unit") or ""), str(record.get("phase") or "")
            elif record.get("unit") and not state.unit:
                state.unit = str(record["unit"])
            finished = not worker and bool(record.get("done")) and not state.done
            advanced = any(now_ > was for now_, was in zip((state.read, state.written, state.units), before, strict=True))
            if advanced or finished or record.get("paused"):
                state.last_advance = now  # a planned pause counts as progress: the workload asked for it
            if advanced:
                span = self.phases.setdefault(state.phase, [time.time(), time.time()])
                span[1] = time.time()
            state.done = state.done or finished
            state.last_report = now
            state.history.append((now, state.moved(), state.units))
            if self.all_done_at is None and len(self.states) >= self.ranks and all(s.done for s in self.states.values()):
                self.all_done_at = now

    def _telemetry(self, record: dict[str, Any]) -> None:
        host = str(record.get("host") or "?")
        with self._lock:
            self.hosts_sampled.add(host)
            if self.telemetry_dir is None:
                return
            try:
                sample = TelemetrySample(record).to_json()
            except ValueError:
                return  # a sampler's bug: a field of the wrong type would break its readers
            out = self._files.get(host)
            if out is None:
                self.telemetry_dir.mkdir(parents=True, exist_ok=True)
                out = self._files[host] = open(self.telemetry_dir / _host_file(host), "a", encoding="utf-8")
            out.write(json.dumps(sample, separators=(",", ":")) + "\n")
            out.flush()

    def endpoint_totals(self) -> dict[str, dict[str, Any]]:
        """Per object endpoint, what the ranks' processes completed there: bytes read and
        written, requests, failed requests, and the ranks that used it."""
        totals: dict[str, dict[str, Any]] = {}
        with self._lock:
            for state in sorted(self.states.values(), key=lambda s: s.rank):
                for figures in state.endpoint_parts.values():
                    for url, values in figures.items():
                        entry = totals.setdefault(url, {"read_bytes": 0, "written_bytes": 0, "requests": 0,
                                                        "failed_requests": 0, "ranks": []})
                        for key, value in zip(("read_bytes", "written_bytes", "requests", "failed_requests"), values, strict=False):
                            entry[key] += value
                        if values[2] and state.rank not in entry["ranks"]:
                            entry["ranks"].append(state.rank)
        return totals

    def close(self) -> None:
        with self._lock:
            for out in self._files.values():
                out.close()
            self._files.clear()

    # -- the watchdog --------------------------------------------------------------------------
    def reporting(self) -> bool:
        """Whether the job's ranks report progress at all (an engine without a reporter does not:
        then only the deadline applies)."""
        return bool(self.states)

    def start_work(self, at: float) -> None:
        """Every rank has started: the stall clock of a rank that has not reported yet runs from here."""
        with self._lock:
            self.work_from = at
            for state in self.states.values():
                state.last_advance = max(state.last_advance, at)

    def stalled(self) -> str | None:
        """Why the job is stalled (the ranks and hosts, their last progress), or None."""
        if self.work_from is None or not self.reporting():
            return None
        now = self.clock()
        with self._lock:
            states = [self.states.get(r) or RankState(r, "?", last_report=self.work_from, last_advance=self.work_from)
                      for r in range(self.ranks)]
            if self.all_done_at is not None:
                if now - self.all_done_at >= self.stall_s:
                    return (f"every rank finished its share {now - self.all_done_at:.0f} s ago, "
                            "but the job has not ended")
                return None
            working = [s for s in states if not s.done]
            silent = [s for s in working if now - max(s.last_report, self.work_from) >= self.stall_s]
            if silent:
                return "no report from " + self._named(silent, now) + " (a frozen process or host)"
            last = max([s.last_advance for s in states] + [self.work_from])
            if now - last >= self.stall_s:
                idle = sorted(working, key=lambda s: s.last_advance)
                return f"no rank moved a byte for {now - last:.0f} s: " + self._named(idle, now)
        return None

    def _named(self, states: list[RankState], now: float) -> str:
        shown = []
        for s in states[:16]:
            unit = f", {s.units} {s.unit or 'units'}" if s.units else ""
            shown.append(f"rank {s.rank} on {s.host} (last progress {now - s.last_advance:.0f} s ago: "
                         f"{s.read / MIB:.1f} MiB read, {s.written / MIB:.1f} MiB written{unit})")
        more = f" and {len(states) - 16} more" if len(states) > 16 else ""
        return "; ".join(shown) + more

    # -- the live view --------------------------------------------------------------------------
    def view(self) -> str:
        """One line: the aggregate rate, each host's, and the slowest rank with its lag."""
        with self._lock:
            states = list(self.states.values())
        if not states:
            return ""
        rates: dict[int, tuple[float, float]] = {}
        for s in states:
            recent = [h for h in s.history if h[0] >= s.history[-1][0] - WINDOW_S] if s.history else []
            span = recent[-1][0] - recent[0][0] if len(recent) > 1 else 0.0
            rates[s.rank] = ((recent[-1][1] - recent[0][1]) / span, (recent[-1][2] - recent[0][2]) / span) if span else (0.0, 0.0)
        by_host: dict[str, float] = {}
        for s in states:
            by_host[s.host] = by_host.get(s.host, 0.0) + rates[s.rank][0]
        total = sum(r for r, _ in rates.values())
        units = sum(u for _, u in rates.values())
        unit = next((s.unit for s in states if s.unit), "units")
        text = f"{total / MIB:.1f} MiB/s" + (f", {units:.1f} {unit}/s" if units else "")
        if len(by_host) > 1:
            text += " | " + ", ".join(f"{h} {r / MIB:.1f}" for h, r in sorted(by_host.items())[:8]) + \
                (f" (+{len(by_host) - 8} hosts)" if len(by_host) > 8 else "")
        working = [s for s in states if not s.done]
        if len(states) > 1 and working:
            mean = sum(s.moved() for s in states) / len(states)
            slow = min(working, key=lambda s: s.moved())
            lag = 100 * (mean - slow.moved()) / mean if mean else 0.0
            text += f" | slowest rank {slow.rank} ({slow.host}) {lag:.0f} % behind"
        done = sum(1 for s in states if s.done)
        if done:
            text += f" | {done}/{self.ranks} ranks done"
        return text


def record_bottleneck(watch: Watch, leaf: Path, label: str, start: float, end: float) -> list[dict[str, Any]]:
    """The job's bottleneck records (results/bottleneck.py), one per phase its ranks reported
    (the whole job where they named none), appended to the leaf's telemetry/bottleneck.json and,
    where the leaf has one, to its summary.json's `bottleneck` list."""
    from mlpstorage_py.results import bottleneck
    from mlpstorage_py.results.io import atomic_write_text, read_json

    if watch.telemetry_dir is None or not watch.telemetry_dir.is_dir():
        return []
    samples = bottleneck.read_samples(watch.telemetry_dir)
    spans = {f"{label}: {phase}" if phase else label: span for phase, span in sorted(watch.phases.items(),
                                                                                    key=lambda kv: kv[1][0])}
    records = [Bottleneck({"job": label, **bottleneck.analyse(samples, name, *span)}).to_json()
               for name, span in (spans or {label: [start, end]}).items()]
    for path, key in ((watch.telemetry_dir / bottleneck.FILE, None), (leaf / "summary.json", "bottleneck")):
        if key is not None and not path.is_file():
            continue
        try:
            data = read_json(path) if path.is_file() and not path.is_symlink() else ([] if key is None else None)
        except (OSError, ValueError):
            continue
        if key is None and isinstance(data, list):
            atomic_write_text(path, json.dumps(data + records, indent=2) + "\n")
        elif key is not None and isinstance(data, dict):
            data[key] = list(data.get(key) or []) + records
            atomic_write_text(path, json.dumps(data, indent=4) + "\n")
    return records
