"""A leaf's `io_trace.json`: what reached the storage during the run (`--trace-io`, OPEN only,
Rules 6.5.2/6.6.2), read by `reports html`, `mlpstorage replay` and the checker alike.

Shape (schema 1); sizes in bytes, latencies in microseconds, histograms as {bucket lower
bound (a power of two, as a decimal string): count}:

    {"schema": 1,
     "level": "block" | "vfs" | "object" | "none",   # where it was traced
     "why": "...",                 # for vfs/object/none: why not at the block layer
     "duration_s": 12.3,           # how long the tracers counted, on their own clock (the longest host's:
                                   # first tick to END), the clock of first_s/last_s and queue_depth
     "data_paths": ["..."],        # the paths traced, as given
     "complete": true,             # every host's tracer printed its maps (else see its "error") and
                                   # the run's work ran to its end (else "stopped" says why)
     "stopped": "...",             # only for a run stopped early: interrupted, a deadline, a stall, a failure
     "hosts": {"<--hosts entry>": {
         "hostname": "...",
         "complete": true, "error": "...",          # error only when not complete
         "skipped_probe_runs": n,   # runs of its probes the kernel skipped (null: unknown), below
         "paths": [{"path": "...", "level": "...", "devices": [{"name", "dev", "level"}], "why": "..."}],
         "devices": {"<name, e.g. vda>": {
             "level": "block" | "vfs",  # vfs devices are named <fstype>:<mount point>
             "read"|"write"|"flush": {"requests": n, "bytes": n,
                                      "size_hist": {...}, "latency_us_hist": {...},
                                      "latency_samples": n,  # the histogram's total
                                      "latency_unseen": n,   # requests whose completion was not seen
                                      "p50_us": x, "p95_us": x, "p99_us": x,
                                      "sequential_share": 0.0-1.0},
             "queue_depth": [[t_s, in_flight], ...],
             "read_share_bytes": 0.0-1.0,
             "others_bytes": n,            # read+write bytes on the device that were not the run's
             "others_share_bytes": 0.0-1.0,   # ... their share of all it moved during the trace
             "others_basis": "work" | "hostnames"}},
         "streams": [{"pid": n, "comm": "...", "device": "<name>", "kernel_thread": false,
                      "work": true,           # issued after the process marked the run's work
                      "ops": {"read"|"write"|"flush": {same as above, no percentiles needed,
                                                       "first_s": t, "last_s": t,  # first/last issue
                                                       "in_flight": x,    # mean while issuing
                                                       "files": n, "file_bytes": n}},  # read/write: files closed, their sizes
                      "fsyncs": n,            # its fsync/fdatasync calls (block level, work only)
                      "writeback_starts": n,  # its sync_file_range(SYNC_FILE_RANGE_WRITE) calls (the same)
                      "in_flight_mean": x}]}},   # mean over the whole trace
     "unattributed": {"devices": {...}, "streams": [...], "hostnames": ["..."], "why": "..."},
                                   # I/O no client host issued (writeback)
     "rank_bytes": [{"rank": r, "op": "write", "traced": n, "said": n, "ratio": x}],
                                   # a rank's work streams against what the engine says it moved
     "warnings": ["..."]}          # what makes a figure above less than it seems (trace/honest.py)

Null where there is nothing to measure: sequential_share for flushes (no position) and without
requests, read_share_bytes and others_share_bytes without bytes, and a percentile from fewer than
MIN_SAMPLES (20) latencies: latency_samples says how many there were, and every reader shows that
count instead (reports html, `mlpstorage replay`). Each histogram holds every request counted
whose completion the tracer saw: latency_samples + latency_unseen == requests, where
latency_unseen counts what was still in flight when the tracer stopped (it drains first: it
counts nothing new and waits for what it counted, trace/session.DRAIN_S at most, or until no
completion came for DRAIN_STALL_S) and completions it never saw: the kernel skips a BPF probe
while another BPF program runs on that CPU (this tracer's or anyone's), which a completion's
interrupt often meets on a busy host; `skipped_probe_runs` is the kernel's count of those. Traces from before have neither field, nor the
others_* fields, rank_bytes or warnings. others_* is what the device moved that was not the
run's work streams (basis "work"), or, where nothing marked work, not the traced hosts' own
namespaces ("hostnames"); the kernel's journal and other processes on the disk are in it. A device's requests
at the block layer are the disk's requests, at the vfs level the system calls on files of that
filesystem. queue_depth is the mean in flight per point (a point merges neighbours once 2,000
are kept). A host's share is the I/O its hostname issued; `unattributed` is the rest of what the
same disks saw (the kernel's writeback threads, other namespaces), from one tracer per kernel,
its device names prefixed `<host entry>:` when the hosts run more than one kernel.

A stream is one issuing process on one device: what `replay.fio` turns into one fio job. A
kernel thread's stream (kernel_thread: kworker writeback, a journal) is the kernel's own I/O. A
process's I/O from the moment it marked the run's work (launch/heartbeat.mark_work: a rank once
its imports are done, mlpstorage itself for an embedded database; what either forks after) is a
stream of its own with `"work": true`; where any is, replay.fio keeps only those. A stream that
one of the run's ranks issued carries `"rank": r` (benchmarks/tracing.py, from the ranks'
start-up lines). first_s/last_s are seconds from the tracer's start (a process's window, shared
by its threads' streams), null without requests. `files` counts the regular files on a data
path's filesystem the process closed (work processes only), as written when it had them open
for writing, else as read, and `file_bytes` sums their sizes at close: replay.fio's file sizes.
They are the process's, shared by its streams on several devices; traces from before had none.

Versions (IoTrace, key "schema"): 1, the only one; the fields above that traces from before lack
are read as absent. There is no unversioned trace.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mlpstorage_py.results.schema import FLAG, LIST, NUMBER, OBJECT, TEXT, Schema

FILE = "io_trace.json"
SCHEMA = 1
OPS = ("read", "write", "flush")
MIN_SAMPLES = 20  # no percentile from fewer latencies: its count is shown instead


class IoTrace(Schema):
    KIND = FILE
    VERSION_KEY = "schema"
    VERSION = SCHEMA
    OLDER = ()
    FIELDS = {"level": TEXT, "why": TEXT, "duration_s": NUMBER, "data_paths": LIST, "complete": FLAG, "stopped": TEXT,
              "hosts": OBJECT, "unattributed": OBJECT, "rank_bytes": LIST, "warnings": LIST}


def read(leaf: Path) -> dict[str, Any] | None:
    """The leaf's trace, or None when the run was not traced (no file, or not a trace of a
    version this tool reads)."""
    path = leaf / FILE
    if not path.is_file() or path.is_symlink():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and IoTrace.unread(data) is None else None


def samples(hist: dict[str, Any]) -> int:
    """How many values a histogram holds (counts that are no number left out)."""
    return int(sum(v for v in hist.values() if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0))


def percentile(hist: Mapping[str, float], q: float, minimum: int = MIN_SAMPLES) -> float | None:
    """The q-quantile (0-1) of a log2 histogram, as the upper bound of the bucket it falls in
    (the bucket's lower bound doubled: a conservative estimate, never below the truth); None
    from fewer than `minimum` values (show samples() instead)."""
    counts = sorted((int(k), v) for k, v in hist.items() if v > 0)
    total = sum(v for _, v in counts)
    if not total or total < minimum:
        return None
    seen = 0.0
    for low, count in counts:
        seen += count
        if seen >= q * total:
            return float(max(low, 1) * 2)
    return float(max(counts[-1][0], 1) * 2)


def others(trace: dict[str, Any]) -> dict[str, float]:
    """"<host> <device>" -> the share of the device's bytes that were not the run's, for each
    device whose trace says (traces from before say nothing)."""
    found: dict[str, float] = {}
    for host, entry in (trace.get("hosts") or {}).items():
        for name, device in ((entry or {}).get("devices") or {}).items() if isinstance(entry, dict) else ():
            share = device.get("others_share_bytes") if isinstance(device, dict) else None
            if isinstance(share, (int, float)) and not isinstance(share, bool):
                found[f"{host} {name}"] = float(share)
    return found
