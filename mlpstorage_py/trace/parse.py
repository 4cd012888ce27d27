"""One tracer's `bpftrace -f json` output (the program of trace/bpf.py), read line by line as it
arrives, and turned into the io_trace.json parts for one host (results/io_trace.py).

Memory stays bounded for hours: the counters and histograms come once, at the end; the in-flight
samples (every bpf.SAMPLE_MS) go into series of at most MAX_POINTS points, neighbours merging
as they fill. bpftrace prints a map's key as its parts joined by commas; two keys can print alike
(string buffers that differ after their end), so repeated keys are summed, never overwritten.

Times are the tracer's own clock (ms since bpftrace started, from its printfs): first_s/last_s,
the queue-depth points and the span (the sampler's first tick to the END) are all counted from
the first tick, so every window lies within the span. Each op's latency histogram holds one
entry per request counted (`requests`) whose completion the tracer saw; the others are
`latency_unseen` (still in flight when it stopped: its completion came after, or never reached
the tracer, as when the kernel skips a completion's probe because another BPF program was running
on that CPU, which it does for a completion's interrupt), so latency_samples + latency_unseen ==
requests.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from mlpstorage_py.results.io_trace import OPS, percentile
from mlpstorage_py.trace.bpf import DRAIN_MARK, END_MARK, KTHREAD_BIT, PID_MASK, READY_MARK, WORK_BIT, Target

MAX_POINTS = 2000
U64 = (1 << 64) - 1


class Series:
    """A time series of at most `cap` points: once full, each pair of neighbours becomes one
    (the first's time, their mean) and each later point averages twice as many samples."""

    def __init__(self, cap: int = MAX_POINTS) -> None:
        self.cap, self.stride = cap, 1
        self.points: list[list[float]] = []
        self._open: list[float] | None = None  # [time, sum, samples]

    def add(self, t_s: float, value: float) -> None:
        if self._open is None:
            self._open = [t_s, 0.0, 0]
        self._open[1] += value
        self._open[2] += 1
        if self._open[2] >= self.stride:
            self.points.append([self._open[0], self._open[1] / self._open[2]])
            self._open = None
        if len(self.points) >= self.cap:
            pairs = zip(self.points[0::2], self.points[1::2], strict=False)  # an odd last point is dropped
            self.points = [[a[0], (a[1] + b[1]) / 2] for a, b in pairs]
            self.stride *= 2

    def values(self) -> list[list[float]]:
        tail = [[self._open[0], self._open[1] / self._open[2]]] if self._open else []
        return [[round(t, 3), round(v, 2)] for t, v in self.points + tail]


def _pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose repeated keys are summed (counts) or joined (histogram buckets)."""
    merged: dict[str, Any] = {}
    for key, value in items:
        if key in merged and isinstance(value, int) and isinstance(merged[key], int):
            merged[key] += value
        elif key in merged and isinstance(value, list) and isinstance(merged[key], list):
            merged[key] = merged[key] + value
        else:
            merged[key] = value
    return merged


def _ints(key: str, parts: int) -> tuple[int, ...]:
    return tuple(int(x) & U64 for x in key.split(",", parts - 1))


def _triple(key: str) -> tuple[int, int, int]:
    first, second, third = _ints(key, 3)
    return first, second, third


def _stream_key(key: str) -> tuple[int, int, int, str]:
    """(owner, dev, op, comm) from `owner,dev,op,comm`: the comm is last, and may itself hold commas."""
    owner, dev, op, comm = key.split(",", 3)
    return int(owner) & U64, int(dev), int(op), comm


def _hist(buckets: list[dict[str, int]]) -> dict[str, int]:
    """bpftrace's log2 buckets ([{min, max, count}]) as {lower bound: count}, empty ones left out."""
    out: dict[str, int] = {}
    for bucket in buckets:
        if bucket.get("count"):
            out[str(bucket["min"])] = out.get(str(bucket["min"]), 0) + bucket["count"]
    return out


def _low(bucket: tuple[str, int]) -> int:
    return int(bucket[0])


def _add_hist(into: dict[str, int], more: dict[str, int]) -> None:
    for low, count in more.items():
        into[low] = into.get(low, 0) + count


class Collector:
    """What one tracer printed. `own` is the host's hostname; `traced` the hostnames of every
    traced host: a namespace none of them carries is unattributed."""

    def __init__(self, own: str, traced: set[str]) -> None:
        self.own, self.traced = own, traced
        self.ready = False
        self.ready_at: float | None = None  # time.monotonic() when we read its first sample mark
        self.ended = False  # the program printed all its maps (END ran to its mark)
        self.ended_at: float | None = None
        self.end_ms: int | None = None  # the tracer's clock at its END
        self.draining = False  # a tick said the tracer counts nothing new
        self.drained = False  # ... and a sample after it had nothing in flight
        self.progress_at: float | None = None  # time.monotonic() when a drain tick last saw a completion
        self.skipped: int | None = None  # a remote agent's count of its probes' runs the kernel skipped
        self.agent_exit: int | None = None  # a remote agent's last line: bpftrace's exit status
        self.names: dict[int, str] = {}  # uts namespace inum -> hostname
        self.maps: dict[str, Any] = {}
        self.depth: dict[tuple[bool, int], Series] = {}  # (own host?, dev) -> in-flight series
        self._t0_ms = 0
        self._t_ms = 0
        self._issued: dict[tuple[int, ...], int] = {}
        self._done: dict[tuple[int, ...], int] = {}
        self._tick_drains = False
        self._drain_done = -1

    def feed(self, line: str) -> None:
        """One line of output; lines that are not bpftrace's JSON are ignored."""
        try:
            event = json.loads(line, object_pairs_hook=_pairs)
        except ValueError:
            return
        if not isinstance(event, dict):
            return
        kind, data = event.get("type"), event.get("data")
        if kind == "printf" and isinstance(data, str):
            self._printf(data.strip())
        elif kind in ("map", "hist") and isinstance(data, dict):
            for name, values in data.items():
                self._map(name, values if isinstance(values, dict) else {})
        elif kind == "agent_ended":
            self.agent_exit = int(event.get("exit", -1))
            skipped = event.get("skipped")
            self.skipped = skipped if isinstance(skipped, int) else None

    def _printf(self, text: str) -> None:
        if text.startswith(READY_MARK):
            self.ready, self.ready_at = True, time.monotonic()
            self._t0_ms = int(text.split()[-1])
        elif text.split()[:1] == [END_MARK]:
            self.ended, self.ended_at = True, time.monotonic()
            parts = text.split()
            self.end_ms = int(parts[1]) if len(parts) == 2 and parts[1].isdigit() else None
        elif text.split()[:1] and text.split()[0].isdigit():
            self._drained()  # the tick before: its maps are all here (an empty map prints nothing)
            parts = text.split()
            self._t_ms = int(parts[0])
            self._tick_drains = parts[1:] == [DRAIN_MARK]
            self.draining = self.draining or self._tick_drains
            self._issued, self._done = {}, {}

    def _drained(self) -> None:
        """A drain tick's counters: nothing in flight (every request or call it counted done),
        else when the last completion came (a completion the kernel did not let the tracer see
        leaves its request in flight for ever: session.DRAIN_STALL_S)."""
        if not self._tick_drains:
            return
        done = sum(self._done.values())
        if self.progress_at is None or done != self._drain_done:
            self.progress_at, self._drain_done = time.monotonic(), done
        if sum(self._issued.values()) <= done:
            self.drained = True

    def _map(self, name: str, values: dict[str, Any]) -> None:
        if name == "@uts":
            self.names.update({int(k): str(v) for k, v in values.items()})
        elif name == "@qi" and not self.ended:
            self._issued = {_ints(k, 2): int(v) for k, v in values.items()}
        elif name == "@qd" and not self.ended:
            self._done = {_ints(k, 2): int(v) for k, v in values.items()}
            self._sample(self._done)
            self._drained()
        else:
            self.maps[name] = values

    def _sample(self, done: dict[tuple[int, ...], int]) -> None:
        """In flight per device at this moment: the host's own, and the unattributed."""
        t_s = (self._t_ms - self._t0_ms) / 1000
        sums: dict[tuple[bool, int], float] = {}
        for (ns, dev), issued in self._issued.items():
            name = self.names.get(ns)
            if name == self.own or name not in self.traced:
                key = (name == self.own, dev)
                sums[key] = sums.get(key, 0) + max(issued - done.get((ns, dev), 0), 0)
        for key in set(sums) | set(self.depth):
            self.depth.setdefault(key, Series()).add(t_s, sums.get(key, 0))

    # -- the record --------------------------------------------------------------------
    def span_s(self) -> float:
        """How long this tracer counted, on its own clock: from its first tick to its END (and at
        least to the last request it counted); as we read them where it printed no END."""
        if self.ready_at is None:
            return 0.0
        if self.end_ms is None:
            return max((self.ended_at or time.monotonic()) - self.ready_at, 0.0)
        last = max(self._window("@slast").values(), default=0.0)
        return max(round((self.end_ms - self._t0_ms) / 1000, 3), last, 0.0)

    def part(self, own: bool, targets: list[Target], prefix: str = "") -> dict[str, Any]:
        """{"devices": ..., "streams": ...} for the host's own namespaces (own) or the
        unattributed ones; device names get `prefix` (a host, where kernels differ)."""
        pick: Callable[[int], bool] = (lambda ns: self.names.get(ns) == self.own) if own else \
            (lambda ns: self.names.get(ns) not in self.traced)
        devices = {}
        for target in targets:
            ops = {op: self._op(pick, target.dev, i) for i, op in enumerate(OPS)}
            moved = ops["read"]["bytes"] + ops["write"]["bytes"]
            devices[prefix + target.name] = {
                "level": target.level, **ops,
                "queue_depth": self.depth[(own, target.dev)].values() if (own, target.dev) in self.depth else [],
                "read_share_bytes": round(ops["read"]["bytes"] / moved, 4) if moved else None,
                **(self._others(target.dev) if own else {})}
        return {"devices": devices, "streams": self._streams(pick, targets, self.span_s(), prefix)}

    def _picked(self, name: str, pick: Callable[[int], bool], dev: int, op: int) -> list[Any]:
        """The values of a `ns,dev,op` map for this device and op, in the picked namespaces."""
        found = []
        for key, value in self.maps.get(name, {}).items():
            ns, d, o = _ints(key, 3)
            if pick(ns) and d == dev and o == op:
                found.append(value)
        return found

    def _op(self, pick: Callable[[int], bool], dev: int, op: int) -> dict[str, Any]:
        sizes: dict[str, int] = {}
        latency: dict[str, int] = {}
        for name, into in (("@sz", sizes), ("@lat", latency)):
            for buckets in self._picked(name, pick, dev, op):
                _add_hist(into, _hist(buckets))
        total = lambda name: sum(int(v) for v in self._picked(name, pick, dev, op))
        requests = total("@rq")
        return {"requests": requests, "bytes": total("@by"), "size_hist": dict(sorted(sizes.items(), key=_low)),
                "latency_us_hist": dict(sorted(latency.items(), key=_low)),
                "latency_samples": sum(latency.values()), "latency_unseen": total("@lost") + self._pending(pick, dev, op),
                "p50_us": percentile(latency, 0.50), "p95_us": percentile(latency, 0.95),
                "p99_us": percentile(latency, 0.99), "sequential_share": _share(total("@seq"), requests, op)}

    def _pending(self, pick: Callable[[int], bool], dev: int, op: int) -> int:
        """Requests of this device and op still in flight when the tracer stopped (the END's
        `@tow`, request -> owner, and `@top`, request -> op)."""
        ops = {_ints(key, 2): int(value) for key, value in self.maps.get("@top", {}).items()}
        found = 0
        for key, owner in self.maps.get("@tow", {}).items():
            where = _ints(key, 2)
            if where[0] == dev and ops.get(where) == op and pick((int(owner) & U64) >> 32):
                found += 1
        return found

    def _others(self, dev: int) -> dict[str, Any]:
        """How much of what the device moved (read and write bytes, every process on this kernel)
        was not the run's: not its work streams (what marked itself and what it forked, its
        writeback included); where nothing marked work, not the traced hosts' own namespaces."""
        seen = run = 0
        for key, value in self.maps.get("@by", {}).items():
            ns, d, o = _ints(key, 3)
            if d == dev and o < 2:
                seen += int(value)
                run += int(value) if self.names.get(ns) in self.traced else 0
        work = [(_stream_key(key), int(value)) for key, value in self.maps.get("@sby", {}).items()]
        basis = "work" if any(owner & WORK_BIT for (owner, _, _, _), _ in work) else "hostnames"
        if basis == "work":
            run = sum(v for (owner, d, o, _), v in work if owner & WORK_BIT and d == dev and o < 2)
        others = max(seen - run, 0)
        return {"others_bytes": others, "others_share_bytes": round(others / seen, 4) if seen else None,
                "others_basis": basis}

    def _streams(self, pick: Callable[[int], bool], targets: list[Target], span_s: float,
                 prefix: str) -> list[dict[str, Any]]:
        """One stream per issuing process (pid, comm) and device, biggest first."""
        devices = {t.dev: t for t in targets}
        found: dict[tuple[int, int, str], dict[str, Any]] = {}
        for name, field in (("@srq", "requests"), ("@sby", "bytes"), ("@sseq", "sequential"), ("@ssz", "size_hist")):
            for key, value in self.maps.get(name, {}).items():
                owner, dev, op, comm = _stream_key(key)
                if not pick(owner >> 32) or dev not in devices or not 0 <= op < len(OPS):
                    continue
                stream = found.setdefault((owner, dev, comm), _stream(owner, comm, prefix + devices[dev].name))
                entry = stream["ops"][OPS[op]]
                if field == "size_hist":
                    _add_hist(entry["size_hist"], _hist(value))
                else:
                    entry[field] += int(value)
        busy: dict[tuple[int, int, int, str], int] = {}
        for key, value in self.maps.get("@sbusy", {}).items():
            owner, dev, op, comm = _stream_key(key)
            busy[(owner, dev, op, comm)] = busy.get((owner, dev, op, comm), 0) + int(value)
        first, last = self._window("@sfirst"), self._window("@slast")
        fsyncs, writebacks = ({_ints(key, 1)[0]: int(value) for key, value in self.maps.get(name, {}).items()}
                              for name in ("@sfsync", "@ssfr"))
        files = {name: self._per_owner_op(name) for name in ("@sfiles", "@sfbytes")}
        threads: dict[tuple[int, int, int], int] = {}
        for key in self.maps.get("@stid", {}):
            owner, dev, op, _ = _ints(key, 4)
            threads[(owner, dev, op)] = threads.get((owner, dev, op), 0) + 1
        out = []
        for (owner, dev, comm), stream in found.items():
            for i, op_name in enumerate(OPS):
                entry = stream["ops"][op_name]
                entry["size_hist"] = dict(sorted(entry["size_hist"].items(), key=_low))
                entry["sequential_share"] = _share(entry.pop("sequential"), entry["requests"], i)
                window = (first.get((owner, dev, i)), last.get((owner, dev, i)))
                entry["first_s"], entry["last_s"] = window if entry["requests"] and None not in window else (None, None)
                active = entry["last_s"] - entry["first_s"] if entry["first_s"] is not None else 0.0
                busy_us = busy.get((owner, dev, i, comm), 0)
                entry["in_flight"] = round(busy_us / (active * 1e6), 4) if active > 0 else None
                entry["threads"] = threads.get((owner, dev, i), 0) if entry["requests"] else 0
                if op_name != "flush":  # the files the process closed (on any of its devices), and their bytes
                    entry["files"] = files["@sfiles"].get((owner, i), 0)
                    entry["file_bytes"] = files["@sfbytes"].get((owner, i), 0)
            stream["fsyncs"] = fsyncs.get(owner, 0)
            stream["writeback_starts"] = writebacks.get(owner, 0)
            total_us = sum(busy.get((owner, dev, i, comm), 0) for i in range(len(OPS)))
            stream["in_flight_mean"] = round(total_us / (span_s * 1e6), 4) if span_s > 0 else None
            out.append(stream)
        return sorted(out, key=lambda s: -sum(e["bytes"] for e in s["ops"].values()))

    def _per_owner_op(self, name: str) -> dict[tuple[int, int], int]:
        """(owner, op) -> the value of an `owner,op` map, repeated keys summed."""
        found: dict[tuple[int, int], int] = {}
        for key, value in self.maps.get(name, {}).items():
            owner, op = _ints(key, 2)
            found[(owner, op)] = found.get((owner, op), 0) + int(value)
        return found

    def _window(self, name: str) -> dict[tuple[int, int, int], float]:
        """(owner, dev, op) -> seconds since the tracer started counting, from a min/max map."""
        return {_triple(key): max(round((int(value) - self._t0_ms) / 1000, 3), 0.0)
                for key, value in self.maps.get(name, {}).items()}


def _stream(owner: int, comm: str, device: str) -> dict[str, Any]:
    return {"pid": owner & PID_MASK, "comm": comm, "device": device, "kernel_thread": bool(owner & KTHREAD_BIT),
            "work": bool(owner & WORK_BIT),
            "ops": {op: {"requests": 0, "bytes": 0, "size_hist": {}, "sequential": 0} for op in OPS}}


def _share(sequential: int, requests: int, op: int) -> float | None:
    """The share of requests that started where the one before ended; None for flushes (no
    position) and where there were no requests."""
    if OPS[op] == "flush" or not requests:
        return None
    return round(min(sequential, requests) / requests, 4)
