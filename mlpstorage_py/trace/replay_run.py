"""`mlpstorage replay`: run a leaf's replay.fio with fio on a directory, on this machine or one fio
per host over the remote shell MPI uses, and set the replay's bandwidth and latency beside the
traced run's. The leaf gains replay.fio (when it had none) and one replay_<timestamp>.json.

Latency on both sides is a log2 bucket's upper bound (io_trace.percentile): the trace records
log2 histograms, and fio's completion latencies (json+ bins) are bucketed the same way, so the
two columns are read alike. The trace's latency is the device's (block) or the system call's
(vfs); fio's clat is from submission to completion, the page cache included when buffered.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlpstorage_py.errors import BenchmarkFailed, NotFoundError, UsageError, missing_directory
from mlpstorage_py.launch import process
from mlpstorage_py.launch.hostnames import host_name, is_local
from mlpstorage_py.launch.job import Launcher, LaunchSpec, Work
from mlpstorage_py.launch.options import LaunchOptions
from mlpstorage_py.launch.preflight import check_hosts, remote_shell
from mlpstorage_py.results import io_trace
from mlpstorage_py.results.io import write_failed
from mlpstorage_py.results.leaf import DATETIME_FORMAT
from mlpstorage_py.results.logs import log
from mlpstorage_py.trace import page_cache
from mlpstorage_py.trace import replay as distiller

MIB = 2 ** 20
QUANTILES = {"p50": 0.50, "p95": 0.95, "p99": 0.99}
DIRECTIONS = tuple(op for op in io_trace.OPS if op != "flush")  # what fio moves bytes in


@dataclass
class HostRun:
    """One fio: where it runs, its argv, its output files and what came of it."""

    host: str
    argv: list[str]
    stdout: Path
    stderr: Path
    code: int | None = None
    error: BaseException | None = None


def _log2_us(bins_ns: dict[str, int]) -> dict[str, int]:
    """fio's clat bins (ns: count) as the trace's log2 microsecond histogram."""
    hist: dict[str, int] = {}
    for ns, count in bins_ns.items():
        us = int(float(ns)) // 1000
        key = str(1 << (us.bit_length() - 1)) if us > 0 else "0"
        hist[key] = hist.get(key, 0) + int(count)
    return hist


def _merge(into: dict[str, int], hist: dict[str, Any]) -> None:
    for key, count in hist.items():
        into[key] = into.get(key, 0) + int(count)


def _figures(bytes_by: dict[str, int], seconds_by: dict[str, float], hists: dict[str, dict[str, int]]) -> dict[str, Any]:
    """Per direction: bytes, MiB/s, the latencies counted and their percentiles (µs; none from
    fewer than io_trace.MIN_SAMPLES)."""
    out: dict[str, Any] = {}
    for d in DIRECTIONS:
        seconds = seconds_by.get(d) or 0.0
        entry: dict[str, Any] = {"bytes": bytes_by.get(d, 0),
                                 "mib_s": round(bytes_by.get(d, 0) / MIB / seconds, 2) if seconds else None,
                                 "latency_samples": io_trace.samples(hists.get(d) or {})}
        for label, q in QUANTILES.items():
            entry[f"{label}_us"] = io_trace.percentile(hists.get(d) or {}, q)
        out[d] = entry
    return out


def busy_seconds(windows: list[tuple[float, float]]) -> float:
    """How long at least one of the windows was open (their union's length)."""
    total, until = 0.0, float("-inf")
    for start, end in sorted(windows):
        if end > until:
            total += end - max(start, until)
            until = end
    return total


def original(trace: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
    """The traced run's figures over the streams replay.fio replays: per direction, their bytes
    over the time some of them were issuing requests of it (the union of their first-to-last
    windows; the whole trace in one without windows), and the streams' latencies; where the
    tracer keeps latency per device only (streams carry none), the latencies of the devices
    those streams used (every process's requests on them)."""
    made, _ = distiller.jobs(trace, meta)
    hists: dict[str, dict[str, int]] = {d: {} for d in DIRECTIONS}
    for job in made:
        for d in DIRECTIONS:
            _merge(hists[d], ((job.stream.get("ops") or {}).get(d) or {}).get("latency_us_hist") or {})
    used = {(job.host, job.stream.get("device")) for job in made}
    for d in DIRECTIONS:
        if not hists[d]:
            for host, device in sorted(used, key=str):
                record = ((trace.get("hosts") or {}).get(host) or {}).get("devices", {}).get(device) or {}
                _merge(hists[d], (record.get(d) or {}).get("latency_us_hist") or {})
    duration = float(trace.get("duration_s") or 0.0)
    seconds = {}
    for d in DIRECTIONS:
        ops = [(job.stream.get("ops") or {}).get(d) or {} for job in made if (job.read_bytes if d == "read" else job.write_bytes)]
        windows = [(float(o["first_s"]), float(o["last_s"])) for o in ops if o.get("first_s") is not None]
        seconds[d] = busy_seconds(windows) if windows and len(windows) == len(ops) else duration
    return _figures({"read": sum(j.read_bytes for j in made), "write": sum(j.write_bytes for j in made)},
                    seconds, hists)


def fio_report(stdout: Path) -> dict[str, Any]:
    """fio's JSON from its stdout (anything it printed before the document skipped)."""
    text = stdout.read_text(encoding="utf-8", errors="replace")
    start = text.find("{")
    try:
        return json.loads(text[start:]) if start >= 0 else {}
    except ValueError:
        return {}


def measured(reports: list[dict[str, Any]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The replay's figures over every host's jobs: per direction, bytes over the time taken,
    in each phase (fio's group: the jobs of one ran at once, on every host) from its start to
    its last job's end (a job's startdelay, then its runtime), summed over the phases; and each
    job's summary."""
    bytes_by = {d: 0 for d in DIRECTIONS}
    longest: dict[tuple[str, int], float] = {}  # (direction, group): its last job's end, from the group's start
    hists: dict[str, dict[str, int]] = {d: {} for d in DIRECTIONS}
    summary = []
    for host_report in reports:
        for job in host_report.get("jobs") or []:
            runtime = float(job.get("job_runtime") or 0) / 1000
            delay = _seconds((job.get("job options") or {}).get("startdelay") or "0")
            row: dict[str, Any] = {"host": host_report.get("_host"), "job": job.get("jobname"), "runtime_s": runtime,
                                   "error": job.get("error", 0)}
            for d in DIRECTIONS:
                part = job.get(d) or {}
                moved = int(part.get("io_bytes") or 0)
                row[f"{d}_bytes"] = moved
                if moved:
                    bytes_by[d] += moved
                    group = (d, int(job.get("groupid") or 0))
                    longest[group] = max(longest.get(group, 0.0), delay + runtime)
                    clat = part.get("clat_ns") or {}
                    _merge(hists[d], _log2_us(clat.get("bins") or {}))
                    exact = clat.get("percentile") or {}  # fio's own, per job, for the record
                    row[f"{d}_clat_us"] = {label: round(exact[f"{100 * q:.6f}"] / 1000, 1)
                                           for label, q in QUANTILES.items() if f"{100 * q:.6f}" in exact}
            summary.append(row)
    seconds_by = {d: sum(t for (direction, _), t in longest.items() if direction == d) for d in DIRECTIONS}
    return _figures(bytes_by, seconds_by, hists), summary


def _seconds(text: str) -> float:
    """A fio time as replay.fio writes it ("250ms", or plain seconds) in seconds."""
    return float(text[:-2]) / 1000 if text.endswith("ms") else float(text.rstrip("s") or 0)


def _ratios(replayed: dict[str, Any], traced: dict[str, Any]) -> dict[str, Any]:
    """replay / original for every figure both sides have."""
    out: dict[str, Any] = {}
    for d in DIRECTIONS:
        for key in ("mib_s", *(f"{q}_us" for q in QUANTILES)):
            a, b = replayed[d].get(key), traced[d].get(key)
            out[f"{d}_{key}"] = round(a / b, 3) if a is not None and b else None
    return out


# The remote side of one host's fio. A session without a terminal gets no SIGHUP when its ssh
# client is stopped, so a watcher writes an empty line to the session's stderr each second
# (SIGPIPE ignored): once the session is gone the write fails, even when it was cut before the
# shell started. The watcher then stops fio: SIGTERM, up to five seconds (fio can miss it while
# it starts), then SIGKILL. fio runs with --thread, one process: its forked job processes would
# each lead a session of their own, out of reach of any signal but fio's own.
REMOTE = ("{fio} & f=$!; (trap '' PIPE; while kill -0 $f 2>/dev/null; do printf '\\n' >&2 || "
          "{{ kill -TERM $f; n=0; while kill -0 $f 2>/dev/null && [ $n -lt 5 ]; do sleep 1; n=$((n+1)); done; "
          "kill -KILL $f 2>/dev/null; exit; }}; sleep 1; done) </dev/null >/dev/null & wait $f")


def _host_argv(host: str | None, fio: str, args: list[str]) -> list[str]:
    """fio here, or over the remote shell MPI uses (one POSIX shell command line, with the
    watcher that ends fio when the session is cut: teardown on every host)."""
    if host is None or is_local(host):
        return [fio, *args]
    shell = remote_shell()
    options = ["-o", "BatchMode=yes"] if "ssh" in os.path.basename(shell[0]) else []
    return [*shell, *options, host_name(host), REMOTE.format(fio=shlex.join(["fio", *args]))]


def _run_all(runs: list[HostRun], launcher: Launcher, work: Work) -> None:
    """Every host's fio at once (threads over the launch path, launch/job.py: each its deadline,
    teardown and sweeps); an interrupt stops every fio tree before it propagates."""
    def one(run: HostRun) -> None:
        try:
            run.code = launcher.launch(LaunchSpec(run.argv, f"fio on {run.host}", run.stdout, run.stderr,
                                                  hosts=[host_name(run.host)], work=work, reports=False,
                                                  check=False)).code
        except BaseException as exc:  # carried to the caller's thread
            run.error = exc

    threads = [threading.Thread(target=one, args=(run,), daemon=True) for run in runs]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            while thread.is_alive():
                thread.join(timeout=0.5)
    except BaseException:
        for pid in process.tree(os.getpid()) - {os.getpid()}:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        for thread in threads:
            if thread.ident is not None:
                thread.join(timeout=process.GRACE_S * 3)
        raise
    for run in runs:
        if run.error is not None:
            raise run.error
    for run in runs:
        if run.code:
            detail = process.error_line(run.stderr) or run.stderr.read_text(errors="replace").strip()[-300:]
            raise BenchmarkFailed(f"fio on {run.host} exited with code {run.code}: {detail or 'no message'}")


def _result_path(leaf: Path, text: str) -> Path:
    """Write replay_<timestamp>.json into the leaf, never over an existing one (a taken name
    moves to the next second): a temp file linked to the free name, so a reader sees it whole."""
    tmp = leaf / f".replay.{os.getpid()}.tmp"
    try:
        tmp.write_text(text, encoding="utf-8")
        when = time.time()
        for bump in range(3600):
            path = leaf / f"replay_{time.strftime(DATETIME_FORMAT, time.gmtime(when + bump))}.json"
            try:
                os.link(tmp, path)
            except FileExistsError:
                continue
            return path
        raise UsageError(f"no free replay_<timestamp>.json name in {leaf} within an hour of now")
    except OSError as exc:
        raise write_failed(tmp, exc) from exc
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


@contextlib.contextmanager
def _checked_copy(job_file: Path, text: str) -> Iterator[Path]:
    """The checked job text in a file of its own beside replay.fio (where every host that reads
    the leaf reads it), removed afterwards: fio reads what was checked, not what replay.fio may
    hold by the time it starts."""
    copy = job_file.with_name(f".{job_file.name}.{os.getpid()}.checked")
    try:  # a new file: never through a link or over a file the leaf already holds
        fd = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    except OSError as exc:
        raise write_failed(copy, exc) from exc
    try:
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
        except OSError as exc:
            raise write_failed(copy, exc) from exc
        yield copy
    finally:
        with contextlib.suppress(OSError):
            copy.unlink()


def direct_refused(directory: Path) -> str | None:
    """Why `directory` refuses O_DIRECT (tmpfs did before Linux 6.6), or None: the replay of an
    O_DIRECT run issues its requests with O_DIRECT, as the run did."""
    probe = directory / f".mlps-direct-probe-{os.getpid()}"
    try:
        fd = os.open(probe, os.O_CREAT | os.O_WRONLY | os.O_EXCL | getattr(os, "O_DIRECT", 0), 0o600)
    except OSError as exc:
        return exc.strerror or str(exc)
    os.close(fd)
    with contextlib.suppress(OSError):
        probe.unlink()
    return None


def fio_buffers(jobs: list[distiller.Job]) -> int:
    """The bytes fio's I/O buffers take for these jobs: each clone's depth of its largest block."""
    total = 0
    for job in jobs:
        options = dict(job.options)
        sizes = [distiller.fio_size(part.split("/")[0]) for part in re.split("[:,]", options.get("bssplit", "")) if part]
        total += int(options.get("numjobs", 1)) * int(options.get("iodepth", 1)) * max(sizes or [MIB])
    return total


def dirty_held(jobs: list[distiller.Job]) -> int:
    """The dirty pages the run's writers held, which the bound must leave them: a writer that
    flushed only as it closed a file (fsync_on_close, no sync_file_range: kv-cache.py writes a
    file, then fsyncs it) held up to a file per clone; the jobs of one phase run at once, so the
    largest phase's sum. Bounded below that, fio's writers fill the group with dirty pages and
    its readers wait in reclaim for their writeback, which the run's readers never did (a KV
    replay's reads at 0.6 of the run's at 128 or 512 MiB, 0.98 at 2 GiB or unbounded, here)."""
    by_phase: dict[int, int] = {}
    for job in jobs:
        options = dict(job.options)
        if job.write_bytes and "sync_file_range" not in options:
            per_file = distiller.fio_size(options.get("filesize") or options.get("size") or "0")
            by_phase[job.phase] = by_phase.get(job.phase, 0) + int(options.get("numjobs", 1)) * per_file
    return max(by_phase.values(), default=0)


@dataclass
class Plan:
    """What a replay runs: the checked job, each host's fio arguments (less the job file), the
    page-cache bound of this host's fio in bytes (0: none), the jobs and the work each fio's
    deadline is derived from (the trace's bytes, and the runtime cap as it is)."""

    leaf: Path
    directory: Path
    trace: dict[str, Any]
    meta: dict[str, Any]
    fio: str
    text: str
    job_file: Path
    written: bool
    hosts: list[str] | None
    plan: list[tuple[str, list[str]]]
    limit: int
    made: list[distiller.Job]
    work: Work


def prepare(leaf: Path, directory: Path, hosts: list[str] | None, runtime_cap: float | None,
            page_cache_mib: int | None = None) -> Plan:
    """Everything replay() checks and decides before fio starts (replay.fio written when absent)."""
    directory = directory.expanduser().absolute()
    if not directory.is_dir():  # before the leaf: a bad argument is named whatever the other is
        raise missing_directory("--directory", directory)
    leaf = leaf.expanduser().absolute()
    trace, meta = distiller.load(leaf)
    fio = shutil.which("fio")
    if fio is None:
        raise NotFoundError("fio is not installed (apt-get install fio): replay runs the job with fio")
    text, job_file, written = distiller.checked_job(leaf)
    by_host = distiller.sections(text)
    if not by_host:
        raise UsageError(f"{job_file} has no job sections")
    refused = direct_refused(directory) if "\ndirect=1" in text else None
    if refused:
        raise UsageError(f"{directory} refuses O_DIRECT ({refused}): the run used O_DIRECT and so does its "
                         "replay; give a directory on the storage to replay on")
    common = ["--output-format=json+", "--thread", f"--directory={directory}"]
    if runtime_cap:
        common.append(f"--runtime={int(max(1, runtime_cap))}")
    if hosts:
        if len(hosts) != len(by_host):
            raise UsageError(f"--hosts names {len(hosts)} host(s); the trace's jobs came from {len(by_host)} "
                             "(give one host per traced host, in the trace's order, or none to replay all here)")
        check_hosts(hosts)
        plan = [(host, [*common, *(f"--section={s}" for s in by_host[i])]) for host, i in zip(hosts, sorted(by_host), strict=True)]
    else:
        plan = [("localhost", common)]
    made = distiller.jobs(trace, meta)[0]
    total = sum(j.read_bytes + j.write_bytes for j in made)
    mib = int(distiller.settings()["page_cache_mib"]) if page_cache_mib is None else page_cache_mib
    limit = mib * MIB + 2 * fio_buffers(made) + dirty_held(made) if mib else 0
    return Plan(leaf, directory, trace, meta, fio, text, job_file, written, hosts, plan, limit, made,
                Work(io_bytes=total, capped_s=runtime_cap or 0))


def command_text(p: Plan) -> str:
    """The exact commands replay() runs, for a shell on each host: fio on the leaf's replay.fio,
    and this host's page-cache bound as the memory cgroup it makes (without it, buffered figures
    follow the host's free memory, not the storage)."""
    lines = []
    for host, argv in p.plan:
        command = shlex.join(["fio", *argv, str(p.job_file)])
        if p.hosts and not is_local(host):
            lines.append(f"# on {host} (over ssh; fio's page cache there is not bounded)\n{command}")
            continue
        found = page_cache.hierarchy() if p.limit else "--page-cache-mib 0"
        if isinstance(found, str):
            lines.append(f"# on {host}: page cache not bounded ({found})\n{command}")
            continue
        root, version = found
        knob = "memory.max" if version == "v2" else "memory.limit_in_bytes"
        group = shlex.quote(str(root / "fio-replay"))
        lines.append(f"# on {host}: fio in a memory cgroup ({version}) of {p.limit // MIB} MiB, as mlpstorage replay "
                     f"runs it\nmkdir -p {group} && echo {p.limit} > {group}/{knob} && "
                     f"sh -c 'echo $$ > {group}/cgroup.procs && exec \"$@\"' sh {command}")
    return "\n".join(lines)


def replay(leaf: Path, directory: Path, hosts: list[str] | None, runtime_cap: float | None,
           echo: bool = False, page_cache_mib: int | None = None) -> tuple[dict[str, Any], Path, bool]:
    """Run the leaf's replay.fio on `directory` (writing it first when absent), this host's fio
    in a page cache of `page_cache_mib` (page_cache.bounded; 0: unbounded; None: configs/tool.yaml's
    replay.page_cache_mib) beside its buffers;
    returns the record written, its path, and whether replay.fio was written now."""
    p = prepare(leaf, directory, hosts, runtime_cap, page_cache_mib)
    leaf, directory, trace, meta, plan = p.leaf, p.directory, p.trace, p.meta, p.plan
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="mlps-replay-") as scratch, _checked_copy(p.job_file, p.text) as copy:
        runs = [HostRun(host, _host_argv(host if hosts else None, p.fio, [*argv, str(copy)]),
                        Path(scratch) / f"fio{i}.json", Path(scratch) / f"fio{i}.err") for i, (host, argv) in enumerate(plan)]
        with page_cache.bounded(p.limit) as bound:
            log.info(f"replay: this host's page cache {bound}")
            _run_all(runs, Launcher(LaunchOptions(), leaf, Path(scratch), echo=echo), p.work)
        reports = []
        for run in runs:
            report = fio_report(run.stdout)
            if not report.get("jobs"):
                raise BenchmarkFailed(f"fio on {run.host} printed no JSON report ({run.stdout.name} was empty or cut)")
            reports.append({**report, "_host": run.host})
    replayed, per_job = measured(reports)
    traced = original(trace, meta)
    record = {"leaf": str(leaf), "job_file": distiller.FILE, "directory": str(directory), "hosts": [h for h, _ in plan],
              "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
              "fio_version": reports[0].get("fio version"), "trace_level": trace.get("level"),
              "runtime_cap_s": runtime_cap, "page_cache": bound, "argv": [r.argv for r in runs],
              "original": traced, "replay": replayed, "ratio": _ratios(replayed, traced), "jobs": per_job,
              "others_share_bytes": io_trace.others(trace)}
    path = _result_path(leaf, json.dumps(record, indent=2) + "\n")
    return record, path, p.written


def _cell(value: Any, side: dict[str, Any], key: str) -> str:
    """A figure as printed; a percentile from too few latencies is their count (n=7)."""
    if value is not None:
        return f"{value:g}"
    samples = side.get("latency_samples")
    return f"n={samples}" if key.endswith("_us") and isinstance(samples, int) and samples > 0 else "-"


def shared(record: dict[str, Any]) -> list[str]:
    """The header's lines on the traced devices' other traffic (io_trace.json others_share_bytes)."""
    found = record.get("others_share_bytes") or {}
    return [f"{where}: {share:.1%} of its bytes were not the run's (other processes, the journal)"
            for where, share in found.items() if isinstance(share, (int, float)) and share > 0]


def table(record: dict[str, Any]) -> str:
    """The replay's figures beside the original's, one row per figure, after the traced devices'
    shares of other traffic. A percentile needs io_trace.MIN_SAMPLES latencies (n=7: fewer)."""
    rows = [("", "original", "replay", "ratio")]
    for d in DIRECTIONS:
        if not (record["original"][d]["bytes"] or record["replay"][d]["bytes"]):
            continue
        for key, label in (("mib_s", f"{d} MiB/s"), *((f"{q}_us", f"{d} {q} us") for q in QUANTILES)):
            cells = [record["original"][d].get(key), record["replay"][d].get(key), record["ratio"].get(f"{d}_{key}")]
            sides = [record["original"][d], record["replay"][d], {}]
            first, second, third = (_cell(v, side, key) for v, side in zip(cells, sides, strict=True))
            rows.append((label, first, second, third))
        rows.append((f"{d} bytes", str(record["original"][d]["bytes"]), str(record["replay"][d]["bytes"]), ""))
    meta = distiller.metadata(Path(record["leaf"])) or {}
    training = [] if (meta.get("benchmark_type"), meta.get("command")) != ("training", "run") else [
        "training: DLIO's train_io_mean_MB_per_second is the mean of its epochs' rates (each epoch's samples x record "
        "size over its training steps, compute included, the time between epochs left out); MiB/s here is all the "
        "traced bytes over the first to last read (that time included), which the replay offers (rate=)"]
    return "\n".join([*shared(record), *(f"{a:<16}{b:>14}{c:>14}{d:>9}".rstrip() for a, b, c, d in rows), *training])
