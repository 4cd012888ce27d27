"""A traced run's I/O as a fio job file (`replay.fio` in the leaf): one fio job per issuing
process (stream) per host, shaped by what the trace saw, so a storage engineer can replay the
run's load on an array with fio alone, without Python, DLIO or MPI (issue 27).

How each field is derived (ManPage.md, `replay`, says the same):
- bssplit: the stream's request-size histogram, percentages by count (log2 buckets' lower bounds);
- rw: read/write by the ops seen, sequential when at least half the requests started where the
  previous one ended, mixed (readwrite/randrw) with rwmixread by request count;
- numjobs: the threads that issued the stream's requests (at most MAX_JOBS), each clone a share
  of the bytes and the rate; iodepth: the mean in-flight requests per clone (at least 1) for
  O_DIRECT, 1 for psync (a synchronous engine; the comment gives the depth the kernel made);
  libaio with direct=1 when the run used O_DIRECT (its metadata says so), else psync buffered,
  so the kernel's readahead and writeback make the requests again as they made the run's; no
  access-pattern advice (fadvise_hint=0: fio's default would advise FADV_RANDOM, no readahead,
  for a random job); sync_file_range=write:N when the run started its writeback itself (N
  writes per call; never its waits: fio's would wait for the writes just made, where a writer
  that waits does so for a range well behind, so the replay's page-cache bound stands in);
- size: the stream's bytes; nrfiles and filesize: where the trace counted the files the work
  closed (io_trace.json `files`, `file_bytes`), files of their mean size, as many as the bytes
  need (the ceiling: fio stops at `size`, partway into the last file, so every byte is moved); fsync=N when it flushed (N writes per flush: fio counts an fsync inside a job's runtime,
  and not the one end_fsync=1 adds for the tail), fsync_on_close=1 when it flushed once a file;
- startdelay: how long after its phase's first job the part's first request came, so the
  jobs of a phase start staggered as the run's streams did (at least MIN_DELAY_MS);
- rate: for a run that paces its own I/O (configs/tool.yaml replay.paced: KV users, DLIO's
  emulated computation, query clients), each direction's bytes over its window, so the replay
  offers the run's load rather than the array's limit.
A stream is one process on one device. Only the run's work is kept: the streams of processes
that marked themselves as the run's (launch/heartbeat.mark_work: each rank once its imports are
done, and what it forks), in older traces the ranks' streams; kernel threads' streams
(writeback, a journal) and streams with under TRIVIAL_SHARE of the traced bytes are left out
too, and the header says so.

Phases: a stream whose writes all came before its reads (or after) is two jobs on the same
files, a write job and a read job. A stream whose writes and reads overlap is one mixed job, or,
where the trace counted its files, a write job making its files beside a read job reading its
own (fio lays those out before the jobs start), as a KV cache writes new entries while it reads
older ones: a mixed job would read back what it has just written, from the page cache. Jobs
whose first-to-last request windows overlap run together, and
each later group waits for the one before (`stonewall`), as a checkpoint's writes, cache drop
and reads did. fio invalidates a file's page cache before a job reads it (its default), so a
read job after a write job reads from the device.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mlpstorage_py.errors import NotFoundError, Refused, UsageError
from mlpstorage_py.results import io_trace
from mlpstorage_py.results.io import atomic_write_text, read_json
from mlpstorage_py.results.logs import log
from mlpstorage_py.rules.configs import source_root

FILE = "replay.fio"
LEVELS = {"block": "the block layer (requests as the device saw them)",
          "vfs": "the VFS (the run's read/write system calls: no block device behind the data directory)"}
TRIVIAL_SHARE = 0.01     # a stream with less of the traced bytes is not worth a job
SEQUENTIAL_SHARE = 0.5   # at least this share of sequential requests: a sequential job
MIN_BLOCK, DIRECT_MIN_BLOCK = 512, 4096
MAX_JOBS = 64            # clones of one stream's job at most (numjobs)
MIN_DELAY_MS = 50        # a later start within a phase that a job's startdelay keeps
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
    phase: int = 0


@dataclass
class Part:
    """What becomes one job: a stream, or one direction of it (`op`), and when its requests
    were issued (seconds of the trace; None in a trace without windows)."""

    index: int
    host: str
    record: dict[str, Any]
    stream: dict[str, Any]
    op: str | None = None
    start: float | None = None
    end: float | None = None
    phase: int = 0
    shared: bool = False  # a direction of a stream whose other direction's job uses the same files
    delay: float = 0.0    # seconds after its phase's first part that it started


def size_text(n: int) -> str:
    """A byte count in fio's spelling: 1m, 64k, or plain bytes when not whole KiB."""
    if n >= MIB and n % MIB == 0:
        return f"{n // MIB}m"
    if n >= KIB and n % KIB == 0:
        return f"{n // KIB}k"
    return str(n)


def fio_size(text: str) -> int:
    """A size in the spelling size_text writes (1m, 64k, 512) as bytes."""
    scale = {"k": KIB, "m": MIB}.get(text[-1:].lower(), 1)
    return int(text[:-1] if scale > 1 else text) * scale


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


def file_size(op: dict[str, Any] | None, floor: int) -> int:
    """The mean size of the files one direction touched, in whole `floor` blocks; 0 where the
    trace did not count them (or they hold less than a block each)."""
    files, total = int((op or {}).get("files") or 0), int((op or {}).get("file_bytes") or 0)
    if not files or total < files * floor:
        return 0
    return round(total / files / floor) * floor


def direct_io(metadata: dict[str, Any] | None) -> bool:
    """Whether the run used O_DIRECT, as its metadata records it: our checkpoint engine's
    --o-direct, DLIO's reader.odirect, or the fork's storage_type direct_fs."""
    if not metadata:
        return False
    params = metadata.get("parameters") or {}
    reader, storage = params.get("reader"), params.get("storage")
    reader = reader if isinstance(reader, dict) else {}
    storage = storage if isinstance(storage, dict) else {}
    return bool((metadata.get("args") or {}).get("o_direct") or reader.get("odirect")
                or storage.get("storage_type") == "direct_fs")


@functools.lru_cache(maxsize=1)
@functools.cache
def settings() -> dict[str, Any]:
    """configs/tool.yaml's replay section."""
    with open(source_root() / "configs" / "tool.yaml", encoding="utf-8") as fh:
        return dict(yaml.safe_load(fh)["replay"])


def paced_workloads() -> dict[str, list[str]]:
    """configs/tool.yaml's replay.paced: benchmark type -> the commands whose runs pace their I/O."""
    return {str(k): list(v) for k, v in settings()["paced"].items()}


def paced(metadata: dict[str, Any] | None) -> bool:
    """Whether the run paced its own I/O (its benchmark and command, as its metadata records them)."""
    if not metadata:
        return False
    return metadata.get("command") in paced_workloads().get(str(metadata.get("benchmark_type")), [])


def rates(part: Part, read: dict[str, Any] | None, write: dict[str, Any] | None) -> dict[str, int]:
    """Bytes per second each direction of a part was issued at over its own window (none for a
    direction without a window of some length)."""
    found = {}
    for direction, op in (("read", read), ("write", write)):
        first, last = (op or {}).get("first_s"), (op or {}).get("last_s")
        if _bytes(op) and first is not None and last is not None and last > first:
            found[direction] = round(_bytes(op) / (last - first))
    return found


def _requests(op: dict[str, Any] | None) -> int:
    return int((op or {}).get("requests") or 0)


def _bytes(op: dict[str, Any] | None) -> int:
    return int((op or {}).get("bytes") or 0)


def _sane(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]+", "_", text).strip("_")[:24] or "proc"


def _one_line(text: str) -> str:
    """A line of the job file with any control character (a newline from a process name or a
    leaf's path in io_trace.json) shown as `?`: what the trace names stays inside its comment."""
    return re.sub(r"[\x00-\x1f\x7f]", "?", text)


def _pid(stream: dict[str, Any]) -> int:
    """The stream's process id as a number (io_trace.json is data: anything else counts as 0)."""
    pid = stream.get("pid", 0)
    return pid if isinstance(pid, int) and not isinstance(pid, bool) else 0


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


def kept(trace: dict[str, Any]) -> Callable[[dict[str, Any]], bool]:
    """Which streams are the run's work: those marked so where any is, else the ranks' where
    any is known, else every process's; never a kernel thread's."""
    every = [s for *_, s in streams(trace)]
    if any(s.get("work") for s in every):
        return lambda s: bool(s.get("work")) and not s.get("kernel_thread")
    if any("rank" in s for s in every):
        return lambda s: "rank" in s and not s.get("kernel_thread")
    return lambda s: not s.get("kernel_thread")


def jobs(trace: dict[str, Any], metadata: dict[str, Any] | None) -> tuple[list[Job], list[dict[str, Any]]]:
    """The trace's jobs in phase order, and the streams left out: trivial ones, kernel threads'
    (writeback, a journal: the kernel's own I/O, which a buffered replay makes again by itself)
    and what is not the run's work (imports and start-up, launchers, mlpstorage's own I/O, other
    work on a busy head node)."""
    check_level(trace)
    direct, pace = direct_io(metadata), paced(metadata)
    wanted = kept(trace)
    every = [(i, h, r, s) for i, h, r, s in streams(trace) if wanted(s)]
    total = sum(stream_bytes(s) for *_, s in every)
    left = [s for *_, s in streams(trace) if not wanted(s)]
    parts: list[Part] = []
    for index, host, record, stream in every:
        if stream_bytes(stream) == 0 or stream_bytes(stream) < TRIVIAL_SHARE * total:
            left.append(stream)
            continue
        parts += split(Part(index, host, record, stream))
    set_phases(parts)
    made = [_job(part, direct, pace) for part in parts]
    return sorted(made, key=lambda job: job.phase), left


def split(part: Part) -> list[Part]:
    """A stream as one part, or as a write part and a read part: on the same files when the
    trace shows its writes and its reads at different times, on files of their own when they
    overlap and the trace counted the files of both."""
    ops = part.stream.get("ops") or {}
    moving = [d for d in ("write", "read") if _bytes(ops.get(d))]
    windows = {d: (ops[d].get("first_s"), ops[d].get("last_s")) for d in moving}
    if any(None in w for w in windows.values()):
        return [part]
    if len(moving) == 2:
        apart = windows["write"][1] < windows["read"][0] or windows["read"][1] < windows["write"][0]
        if apart or all(file_size(ops[d], MIN_BLOCK) for d in moving):
            return [Part(part.index, part.host, part.record, part.stream, d, *windows[d], shared=apart) for d in moving]
    part.start, part.end = min(w[0] for w in windows.values()), max(w[1] for w in windows.values())
    return [part]


def set_phases(parts: list[Part]) -> None:
    """Each part's phase: parts whose windows overlap (directly or through others) share one,
    numbered in time order, and how long after its phase's first part it started (`delay`);
    every part stays in phase 0, undelayed, when any has no window."""
    spans = [(p.start, p.end, p) for p in parts if p.start is not None and p.end is not None]
    if len(spans) < len(parts):
        return
    phase, until, first = -1, float("-inf"), 0.0
    for start, end, part in sorted(spans, key=lambda span: (span[0], span[1])):
        if start > until:
            phase, first = phase + 1, start
        until = max(until, end)
        part.phase, part.delay = phase, start - first


def _job(part: Part, direct: bool, pace: bool) -> Job:
    """One part's job: the rules of the module docstring."""
    stream, ops = part.stream, part.stream.get("ops") or {}
    # a direction that moved no bytes is absent: a reader whose write op counted 0 bytes still
    # gets the files it read
    read = ops.get("read") if part.op in (None, "read") and _bytes(ops.get("read")) else None
    write = ops.get("write") if part.op in (None, "write") and _bytes(ops.get("write")) else None
    flush = ops.get("flush") if part.op in (None, "write") else None
    pid, comm, device = _pid(stream), str(stream.get("comm") or ""), str(stream.get("device") or "")
    base = f"h{part.index}-{_sane(comm)}-{pid}" + (f"-{_sane(device)}" if device else "")  # a stream is per device
    job = Job(base + (f"-{part.op}" if part.op else ""), part.host, stream, read_bytes=_bytes(read),
              write_bytes=_bytes(write), phase=part.phase)
    floor = DIRECT_MIN_BLOCK if direct else MIN_BLOCK
    splits = {d: bssplit(op.get("size_hist") or {}, floor)
              for d, op in (("read", read), ("write", write)) if op is not None and _bytes(op)}
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
    depth = _depth(stream, part.op)
    clones = max(1, min(MAX_JOBS, max(int((op or {}).get("threads") or 0) for op in (read, write))))
    options += [("ioengine", "libaio" if direct else "psync"), ("direct", "1" if direct else "0"),
                ("iodepth", str(max(1, round(depth / clones)) if direct else 1)), ("numjobs", str(clones))]
    size = max(largest, round((job.read_bytes + job.write_bytes) / clones / smallest) * smallest)
    options.append(("size", size_text(size)))
    per_file = file_size(read or write, floor) if read is None or write is None else 0
    if per_file:  # whole blocks of the largest size: fio leaves a file's tail short of a block unmoved
        per_file = max(largest, round(per_file / largest) * largest)
    count = max(1, -(-size // per_file)) if per_file else 0
    if count:  # the run's files of their mean size, as many as the clone's bytes need (fio stops at
        # size, partway into the last: every byte moved, no more)
        options += [("nrfiles", str(count)), ("filesize", size_text(per_file)), ("file_service_type", "sequential")]
    if part.shared:  # the write job and the read job of one stream share its files, clone by clone
        options.append(("filename_format", f"{base}.$jobnum" + (".$filenum" if count else "")))
    offered = {d: max(1, round(v / clones)) for d, v in rates(part, read, write).items()} if pace else {}
    if offered:
        options.append(("rate", f"{offered.get('read', '')},{offered.get('write', '')}".rstrip(",")))
    if round(part.delay * 1000) >= MIN_DELAY_MS:  # it started that much later in the run's phase
        options.append(("startdelay", f"{round(part.delay * 1000)}ms"))
    flushes = max(_requests(flush), int(stream.get("fsyncs") or 0)) if write is not None else 0
    started = int(stream.get("writeback_starts") or 0) if write is not None and not direct else 0
    if writes and started:  # the writer started its own writeback as it wrote: so does each clone
        options.append(("sync_file_range", f"write:{max(1, round(writes / started))}"))
    written = int((write or {}).get("files") or 0) if count else 0
    if writes and flushes and written and abs(flushes - written) <= max(1, written // 10):
        options.append(("fsync_on_close", "1"))  # a flush per file, as it closes (inside the runtime)
    elif writes and flushes:  # fsyncs inside the job, so fio's runtime (the figure's time) holds them
        options += [("fsync", str(max(1, round(writes / flushes)))), ("end_fsync", "1")]  # per clone alike
    job.options = options
    hostname = part.record.get("hostname") or part.host
    engine = "O_DIRECT, libaio at that depth" if direct else \
        "buffered: psync issues one request at a time, the kernel's readahead/writeback made the depth"
    when = f", issued {part.start:.2f}-{part.end:.2f} s into the trace" if part.start is not None else ""
    job.comment = [f"host {part.host} ({hostname}), pid {pid} ({comm or '?'}) on {device or '?'}"
                   f"{f', its {part.op}s' if part.op else ''}: {reads} reads {job.read_bytes} B, "
                   f"{writes} writes {job.write_bytes} B, {flushes} flushes{when}",
                   f"sequential {100 * seq / max(reads + writes, 1):.0f} % of requests; "
                   f"in flight {depth:.2f} on average ({engine})"]
    if writes and started:
        job.comment.append(f"the process started its own writeback {started} times (sync_file_range), "
                           + "so each clone does after its share of the writes")
    if count:
        touched = (read if write is None else write) or {}
        job.comment.append(f"files: the process closed {touched.get('files')} it {'wrote' if write else 'read'}, "
                           f"{per_file} B each on average; {count} per clone"
                           + ("" if part.shared or not part.op or write else " (fio lays them out before the jobs start)"))
    if clones > 1:
        job.comment.append(f"{clones} threads issued its requests: {clones} clones (numjobs), each a share of the bytes"
                           + (" and of the rate" if offered else ""))
    if offered:
        job.comment.append("paced: the run issued " + " and ".join(f"{d}s at {v * clones / MIB:.2f} MiB/s"
                                                                  for d, v in offered.items())
                           + " over its window; rate= offers the replay that load (delete it to find the array's limit)")
    return job


def _depth(stream: dict[str, Any], op: str | None) -> float:
    """The mean requests in flight while the part was issuing them (the stream's over the whole
    trace in a trace without per-op figures)."""
    ops = stream.get("ops") or {}
    chosen = [ops.get(op)] if op else [ops.get("read"), ops.get("write")]
    figures = [(float(o["in_flight"]), _requests(o)) for o in chosen if o and o.get("in_flight") is not None and _requests(o)]
    if figures:
        return sum(v * n for v, n in figures) / sum(n for _, n in figures)
    return float(stream.get("in_flight_mean") or 1.0)


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
             f"; reproduces: {len(made)} job(s) of the run's streams, each on its own files: {reads} B read, "
             f"{writes} B written, in each stream's request sizes, mix, order, depth and flushes"]
    kernel = [s for s in left if s.get("kernel_thread")]
    if kernel:
        lines.append(f"; left out: {len(kernel)} kernel thread stream(s) ({sum(stream_bytes(s) for s in kernel)} B: "
                     "writeback, a journal; the replay's own I/O makes theirs)")
    wanted = kept(trace)
    others = [s for s in left if not s.get("kernel_thread") and not wanted(s)]
    if others:
        lines.append(f"; left out: {len(others)} stream(s) that are not the run's work "
                     f"({sum(stream_bytes(s) for s in others)} B: start-up and imports, launchers, mlpstorage itself, "
                     "other work on the hosts)")
    small = [s for s in left if not s.get("kernel_thread") and wanted(s)]
    if small:
        lines.append(f"; left out: {len(small)} stream(s) with under {TRIVIAL_SHARE:.0%} of the "
                     f"traced bytes ({sum(stream_bytes(s) for s in small)} B)")
    if trace.get("stopped"):
        lines.append(f"; INCOMPLETE: {trace['stopped']}; the trace, and these jobs, hold only the I/O "
                     "before that: a replay reproduces part of a run")
    elif trace.get("complete") is False:
        lines.append("; the trace is incomplete (a host's tracer did not print its maps): the jobs hold what it has")
    phases = max(job.phase for job in made) + 1
    if phases > 1:
        lines.append(f"; in {phases} phases, in the run's order: the jobs of a phase run together, each phase "
                     "once the one before has ended (stonewall)")
    lines += ["; run: fio --directory=DIR replay.fio  (or mlpstorage replay LEAF --directory DIR)",
              f"; mlpstorage replay bounds this host's page cache for fio (a memory cgroup of "
              f"{int(settings()['page_cache_mib'])} MiB beside fio's buffers and the files its writers hold dirty until they "
              "close them): buffered figures without it follow the "
              "host's free memory, not the storage; `mlpstorage replay LEAF --directory DIR --print-command` prints "
              "the exact commands, the cgroup included, for a shell without mlpstorage",
              "; on another array the request sizes, mix, order, depth, files, flushes and pacing stay the run's; "
              "the figures move with that array's latency and bandwidth, its filesystem, the host's readahead and "
              "writeback settings and memory (buffered jobs), and the fio version",
              "; a job's name starts with h<N>-, the trace's N-th host: fio --section=<name> runs it alone",
              "", "[global]", "; directory= is left to the command line (--directory)",
              "filename_format=$jobname.$jobnum.$filenum", "group_reporting=0",
              "; no access-pattern advice: the kernel's readahead as for a run that gave none", "fadvise_hint=0", ""]
    for i, job in enumerate(made):
        lines += [f"; {line}" for line in job.comment]
        lines.append(f"[{job.name}]")
        if i and job.phase != made[i - 1].phase:
            lines.append("stonewall")
        lines += [f"{key}={value}" for key, value in job.options]
        lines.append("")
    return "\n".join(_one_line(line) for line in lines)


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
    return checked_job(leaf)[1]


def checked_job(leaf: Path) -> tuple[str, Path, bool]:
    """The job that may run for `leaf`: the text of its replay.fio once every line passes
    job_check against what its io_trace.json distils to (a job file from a results tree is
    data), else the distillation, written to the leaf; with its path and whether it was written
    now. A leaf's own file that differs from the distillation (edited by hand, or by another
    version) is run only once checked, and the log says that it differs."""
    from mlpstorage_py.trace import job_check

    path = leaf / FILE
    if path.is_symlink():
        raise UsageError(f"{path} is a symlink: replay.fio is read and written only inside the leaf")
    trace, meta = load(leaf)
    try:
        fresh = distill(trace, meta, name=str(leaf))
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise UsageError(f"{leaf / io_trace.FILE} is malformed ({type(exc).__name__}: {exc}): nothing to replay") from exc
    budget = job_check.job_bytes(job_check.check(fresh, f"the job distilled from {io_trace.FILE}", 1 << 62))
    if not path.exists():
        atomic_write_text(path, fresh)
        return fresh, path, True
    if not path.is_file():
        raise UsageError(f"{path} is not a regular file: replay.fio is read only as a file inside the leaf")
    if path.stat().st_size > job_check.MAX_FILE_BYTES:
        raise Refused(f"{path} holds {path.stat().st_size} B, more than a job file this tool writes: refused")
    text = path.read_text(encoding="utf-8", errors="replace")
    job_check.check(text, str(path), budget)
    if text != fresh:
        log.warning(f"{path} differs from what {io_trace.FILE} distils to (edited by hand, or by another "
                    "version): replaying it, as checked (remove it to distil the trace again)")
    return text, path, False
