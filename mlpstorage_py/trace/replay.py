"""A traced run's I/O as a fio job file (`replay.fio` in the leaf): one fio job per issuing
process (stream) per host, shaped by what the trace saw, so a storage engineer can replay the
run's load on an array with fio alone, without Python, DLIO or MPI (issue 27).

How each field is derived (ManPage.md, `replay`, says the same):
- bssplit: the stream's request-size histogram, percentages by count (log2 buckets' lower bounds);
- rw: read/write by the ops seen, sequential when at least half the requests started where the
  previous one ended, mixed (readwrite/randrw) with rwmixread by request count;
- iodepth: the stream's mean in-flight requests (at least 1); libaio with direct=1 when the run
  used O_DIRECT (its metadata says so), else psync buffered;
- size: the stream's bytes; fsync=N when flushes were frequent (N writes per flush), else
  end_fsync=1 when any flush was seen.
A stream is one process on one device. Kernel threads' streams (writeback, a journal) and
streams with under TRIVIAL_SHARE of the traced bytes are left out, and the header says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlpstorage_py.errors import NotFoundError, UsageError
from mlpstorage_py.results import io_trace
from mlpstorage_py.results.io import atomic_write_text, read_json
from mlpstorage_py.results.logs import log

FILE = "replay.fio"
LEVELS = {"block": "the block layer (requests as the device saw them)",
          "vfs": "the VFS (the run's read/write system calls: no block device behind the data directory)"}
TRIVIAL_SHARE = 0.01     # a stream with less of the traced bytes is not worth a job
SEQUENTIAL_SHARE = 0.5   # at least this share of sequential requests: a sequential job
FREQUENT_FLUSHES = 3     # this many flushes or more: fsync=N; fewer: one fsync at the end
MIN_BLOCK, DIRECT_MIN_BLOCK = 512, 4096
KIB, MIB = 1024, 1024 ** 2
HOST_PREFIX = re.compile(r"^h(\d+)-")


@dataclass
class Job:
    """One fio job: its section name, the trace host and stream it came from, its options in
    file order, the bytes it moves per direction and the comment that says what was observed."""

    name: str
    host: str
    stream: dict[str, Any]
    options: list[tuple[str, str]] = field(default_factory=list)
    read_bytes: int = 0
    write_bytes: int = 0
    comment: list[str] = field(default_factory=list)


def size_text(n: int) -> str:
    """A byte count in fio's spelling: 1m, 64k, or plain bytes when not whole KiB."""
    if n >= MIB and n % MIB == 0:
        return f"{n // MIB}m"
    if n >= KIB and n % KIB == 0:
        return f"{n // KIB}k"
    return str(n)


def bssplit(hist: dict[str, int], floor: int) -> tuple[str, int, int]:
    """fio's bssplit for a log2 size histogram (percentages by count summing to 100, by largest
    remainder), with its smallest and largest block size; buckets below `floor` are raised to it."""
    counts: dict[int, int] = {}
    for key, count in hist.items():
        if int(count) > 0:
            size = max(int(key), floor)
            counts[size] = counts.get(size, 0) + int(count)
    if not counts:
        raise UsageError("a stream with I/O has an empty request-size histogram")
    total = sum(counts.values())
    exact = {size: 100 * count / total for size, count in counts.items()}
    shares = {size: int(value) for size, value in exact.items()}
    by_remainder = sorted(exact, key=lambda s: (exact[s] - shares[s], counts[s]), reverse=True)
    for size in by_remainder[:100 - sum(shares.values())]:
        shares[size] += 1
    kept = sorted(s for s, pct in shares.items() if pct > 0)
    return ":".join(f"{size_text(s)}/{shares[s]}" for s in kept), kept[0], kept[-1]


def direct_io(metadata: dict[str, Any] | None) -> bool:
    """Whether the run used O_DIRECT, as its metadata records it: our checkpoint engine's
    --o-direct, DLIO's reader.odirect, or the fork's storage_type direct_fs."""
    if not metadata:
        return False
    params = metadata.get("parameters") or {}
    reader = params.get("reader") if isinstance(params.get("reader"), dict) else {}
    storage = params.get("storage") if isinstance(params.get("storage"), dict) else {}
    return bool((metadata.get("args") or {}).get("o_direct") or reader.get("odirect")
                or storage.get("storage_type") == "direct_fs")


def _requests(op: dict[str, Any] | None) -> int:
    return int((op or {}).get("requests") or 0)


def _bytes(op: dict[str, Any] | None) -> int:
    return int((op or {}).get("bytes") or 0)


def _sane(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]+", "_", text).strip("_")[:24] or "proc"


def check_level(trace: dict[str, Any]) -> str:
    """The trace's level when a job can be distilled from it; else a UsageError saying why not."""
    level = trace.get("level")
    if level not in LEVELS:
        why = trace.get("why") or "no request-level record"
        raise UsageError(f"the trace's level is {level!r} ({why}): there are no requests to distil into fio jobs")
    return str(level)


def streams(trace: dict[str, Any]) -> list[tuple[int, str, dict[str, Any], dict[str, Any]]]:
    """(host index, host entry, host record, stream) for every stream, hosts in their order."""
    found = []
    for index, (host, record) in enumerate((trace.get("hosts") or {}).items()):
        for stream in record.get("streams") or []:
            found.append((index, host, record, stream))
    return found


def stream_bytes(stream: dict[str, Any]) -> int:
    ops = stream.get("ops") or {}
    return _bytes(ops.get("read")) + _bytes(ops.get("write"))


def jobs(trace: dict[str, Any], metadata: dict[str, Any] | None) -> tuple[list[Job], list[dict[str, Any]]]:
    """The trace's jobs and the streams left out: trivial ones, kernel threads' (writeback, a
    journal: the kernel's own I/O, which a buffered replay makes again by itself) and, where the
    run's ranks are known (a stream's `rank`), every other process's (mlpstorage itself, other
    work on a busy head node)."""
    check_level(trace)
    direct = direct_io(metadata)
    ranked = any("rank" in s for *_, s in streams(trace))
    every = [(i, h, r, s) for i, h, r, s in streams(trace) if not s.get("kernel_thread") and (not ranked or "rank" in s)]
    total = sum(stream_bytes(s) for *_, s in every)
    made: list[Job] = []
    left = [s for *_, s in streams(trace) if s.get("kernel_thread") or (ranked and "rank" not in s)]
    for index, host, record, stream in every:
        if stream_bytes(stream) == 0 or stream_bytes(stream) < TRIVIAL_SHARE * total:
            left.append(stream)
            continue
        made.append(_job(index, host, record, stream, direct))
    return made, left


def _job(index: int, host: str, record: dict[str, Any], stream: dict[str, Any], direct: bool) -> Job:
    """One stream's job: the rules of the module docstring."""
    ops = stream.get("ops") or {}
    read, write, flush = ops.get("read"), ops.get("write"), ops.get("flush")
    pid, comm, device = stream.get("pid", 0), str(stream.get("comm") or ""), str(stream.get("device") or "")
    name = f"h{index}-{_sane(comm)}-{pid}" + (f"-{_sane(device)}" if device else "")  # a stream is per device
    job = Job(name, host, stream, read_bytes=_bytes(read), write_bytes=_bytes(write))
    floor = DIRECT_MIN_BLOCK if direct else MIN_BLOCK
    splits = {d: bssplit(op.get("size_hist") or {}, floor) for d, op in (("read", read), ("write", write)) if _bytes(op)}
    reads, writes = _requests(read), _requests(write)
    seq = sum(_requests(op) * float((op or {}).get("sequential_share") or 0) for op in (read, write))
    sequential = seq >= SEQUENTIAL_SHARE * max(reads + writes, 1)
    if len(splits) == 2:
        rw = "readwrite" if sequential else "randrw"
        options = [("rw", rw), ("rwmixread", str(min(99, max(1, round(100 * reads / max(reads + writes, 1))))))]
        options.append(("bssplit", f"{splits['read'][0]},{splits['write'][0]}"))
    else:
        direction = next(iter(splits))
        rw = direction if sequential else f"rand{direction}"
        options = [("rw", rw), ("bssplit", splits[direction][0])]
    smallest = min(s[1] for s in splits.values())
    largest = max(s[2] for s in splits.values())
    depth = float(stream.get("in_flight_mean") or 1.0)
    options += [("ioengine", "libaio" if direct else "psync"), ("direct", "1" if direct else "0"),
                ("iodepth", str(max(1, round(depth)))), ("numjobs", "1")]
    size = max(largest, round((job.read_bytes + job.write_bytes) / smallest) * smallest)
    options.append(("size", size_text(size)))
    flushes = _requests(flush)
    if writes and flushes >= FREQUENT_FLUSHES:
        options.append(("fsync", str(max(1, round(writes / flushes)))))
    elif writes and flushes:
        options.append(("end_fsync", "1"))
    job.options = options
    hostname = record.get("hostname") or host
    engine = "O_DIRECT, libaio at that depth" if direct else \
        "buffered: psync issues one request at a time, the kernel's readahead/writeback made the depth"
    job.comment = [f"host {host} ({hostname}), pid {pid} ({comm or '?'}) on {device or '?'}: {reads} reads {job.read_bytes} B, "
                   f"{writes} writes {job.write_bytes} B, {flushes} flushes",
                   f"sequential {100 * seq / max(reads + writes, 1):.0f} % of requests; "
                   f"in flight {depth:.2f} on average ({engine})"]
    return job


def distill(trace: dict[str, Any], leaf_metadata: dict[str, Any] | None, *, name: str | None = None) -> str:
    """The text of replay.fio for `trace` (an io_trace.json record); `name` is the leaf it names
    (default: the metadata's result_dir). A trace with no request-level record is refused."""
    level = check_level(trace)
    made, left = jobs(trace, leaf_metadata)
    if not made:
        raise UsageError("the trace records no stream with I/O: nothing to replay")
    leaf = name or (leaf_metadata or {}).get("result_dir") or "the traced leaf"
    reads = sum(j.read_bytes for j in made)
    writes = sum(j.write_bytes for j in made)
    lines = [f"; replay.fio: the I/O of {leaf}, as fio jobs (written by mlpstorage replay)",
             f"; traced at {LEVELS[level]} over {float(trace.get('duration_s') or 0):.1f} s "
             f"on {len(trace.get('hosts') or {})} host(s)",
             f"; reproduces: {len(made)} stream(s), each its own job on its own file: {reads} B read, "
             f"{writes} B written, in each stream's request sizes, mix, order, depth and flushes"]
    kernel = [s for s in left if s.get("kernel_thread")]
    if kernel:
        lines.append(f"; left out: {len(kernel)} kernel thread stream(s) ({sum(stream_bytes(s) for s in kernel)} B: "
                     "writeback, a journal; the replay's own I/O makes theirs)")
    ranked = any("rank" in t for *_, t in streams(trace))
    others = [s for s in left if ranked and not s.get("kernel_thread") and "rank" not in s]
    if others:
        lines.append(f"; left out: {len(others)} stream(s) of processes that are not the run's ranks "
                     f"({sum(stream_bytes(s) for s in others)} B: mlpstorage itself, other work on the hosts)")
    small = [s for s in left if not s.get("kernel_thread") and s not in others]
    if small:
        lines.append(f"; left out: {len(small)} stream(s) with under {TRIVIAL_SHARE:.0%} of the "
                     f"traced bytes ({sum(stream_bytes(s) for s in small)} B)")
    if trace.get("complete") is False:
        lines.append("; the trace is incomplete (a host's tracer did not print its maps): the jobs hold what it has")
    lines += ["; run: fio --directory=DIR replay.fio  (or mlpstorage replay LEAF --directory DIR)",
              "; a job's name starts with h<N>-, the trace's N-th host: fio --section=<name> runs it alone",
              "", "[global]", "; directory= is left to the command line (--directory)",
              "filename_format=$jobname.$jobnum.$filenum", "group_reporting=0", ""]
    for job in made:
        lines += [f"; {line}" for line in job.comment]
        lines.append(f"[{job.name}]")
        lines += [f"{key}={value}" for key, value in job.options]
        lines.append("")
    return "\n".join(lines)


def sections(text: str) -> dict[int, list[str]]:
    """A job file's job sections by the trace host they replay (the h<N>- prefix of their name)."""
    found: dict[int, list[str]] = {}
    for line in text.splitlines():
        match = re.fullmatch(r"\[([^\]]+)\]\s*", line)
        if match and match.group(1) != "global":
            host = HOST_PREFIX.match(match.group(1))
            found.setdefault(int(host.group(1)) if host else 0, []).append(match.group(1))
    return found


def metadata(leaf: Path) -> dict[str, Any] | None:
    """The leaf's *_metadata.json (not a symlink), or None when it has none."""
    found = sorted(p for p in leaf.glob("*_metadata.json") if p.is_file() and not p.is_symlink())
    if not found:
        return None
    try:
        data = read_json(found[0])
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def load(leaf: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The leaf's trace and metadata, or the one-line error for a path that is not a traced run leaf."""
    if not leaf.is_dir():
        raise NotFoundError(f"{leaf} is not a directory: give a run leaf (a timestamp directory)")
    meta = metadata(leaf)
    if meta is None:
        raise UsageError(f"{leaf} is not a run leaf: it has no *_metadata.json")
    trace = io_trace.read(leaf)
    if trace is None:
        raise NotFoundError(f"{leaf} has no {io_trace.FILE}: the run was not traced (run it with --trace-io)")
    return trace, meta


def write(leaf: Path) -> Path:
    """Write <leaf>/replay.fio from the leaf's trace; an existing one is kept, and the log says so."""
    path = leaf / FILE
    if path.is_symlink():
        raise UsageError(f"{path} is a symlink: replay.fio is read and written only inside the leaf")
    trace, meta = load(leaf)
    if path.exists():
        log.info(f"{path} is already there: kept (remove it to distil the trace again)")
        return path
    atomic_write_text(path, distill(trace, meta, name=str(leaf)))
    return path
