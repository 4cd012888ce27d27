"""`--trace-io` around a benchmark's work (OPEN only, Rules 6.5.2/6.6.2): every client host is
asked first whether it can trace (exit 12 before any work when one cannot), one tracer per host
runs for the length of the work, and the leaf gets `io_trace.json` and the distilled
`replay.fio` on every path (a failed or interrupted run's trace says how far it got). The
replay is distilled once the leaf's metadata is written (it reads whether the run used O_DIRECT).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mlpstorage_py.errors import MlpsError
from mlpstorage_py.launch import heartbeat
from mlpstorage_py.results import io_trace
from mlpstorage_py.results.logs import log


@contextlib.contextmanager
def prepared(bench: Any) -> Iterator[None]:
    """With --trace-io, the run's work mark in the environment from before the plan builds any
    command line, so the launcher forwards it to every rank on every host (MLPSTORAGE_ variables
    go by name), until the run is over."""
    if not bench.request.trace_io:
        yield
        return
    with heartbeat.marked(heartbeat.new_mark()):
        yield


def traced_hosts(bench: Any, plan: Any) -> list[str]:
    """The client hosts the engine's ranks run on (their --hosts entries, no slots)."""
    layout = bench.launch_layout(plan)
    hosts = layout[0].hosts if layout is not None else ["127.0.0.1"]
    return [h.split(":")[0] if h.count(":") == 1 else h for h in hosts]


@contextlib.contextmanager
def traced(bench: Any, plan: Any, leaf: Path) -> Iterator[None]:
    """Trace the block (or VFS) I/O of the work inside the block, when --trace-io was given."""
    if not bench.request.trace_io:
        yield
        return
    from mlpstorage_py.trace import honest, session

    hosts, paths = traced_hosts(bench, plan), bench.traced_paths(plan)
    session.check(hosts, paths, None)
    def keep(record: dict[str, Any]) -> None:
        record = honest.check(mark_ranks(record, leaf), leaf)  # others' share, ranks against their own counts
        rule = bench.vfs_trace_rule()
        if record.get("level") == "vfs" and rule:  # the fallback the benchmark's rules describe
            record["why"] = f"{record.get('why') or ''} (Rules {rule})".strip()
        io_trace.IoTrace(record).write(leaf / io_trace.FILE)
        log.info(f"trace-io: {io_trace.FILE} written ({record.get('level')} level, "
                 f"{len(record.get('hosts', {}))} host(s))")

    with bench.scratch() as work, session.tracing(hosts, paths, None, work, keep):
        if bench.works_in_process(plan):
            heartbeat.mark_work()
        yield


def rank_processes(leaf: Path) -> dict[tuple[str, int], int]:
    """(hostname, pid) -> rank of every rank the leaf's jobs launched, from the start-up lines
    the ranks printed into the leaf's output logs (launch/heartbeat.py)."""
    found: dict[tuple[str, int], int] = {}
    for log_file in leaf.rglob("*.log"):
        if log_file.is_symlink() or not log_file.is_file():
            continue
        with open(log_file, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                report = heartbeat.parse(line) if heartbeat.TAG in line else None
                if report is not None and isinstance(report.get("pid"), int):
                    found[(str(report.get("host")), report["pid"])] = report["rank"]
    return found


def mark_ranks(record: dict[str, Any], leaf: Path) -> dict[str, Any]:
    """Each stream a rank of the run issued gets its `rank`: what replay.fio keeps, apart from
    mlpstorage's own I/O and whatever else ran on the hosts."""
    ranks = rank_processes(leaf)
    for host in (record.get("hosts") or {}).values():
        for stream in host.get("streams") or []:
            rank = ranks.get((str(host.get("hostname")), stream.get("pid")))
            if rank is not None:
                stream["rank"] = rank
    return record


def distil(leaf: Path) -> None:
    """replay.fio beside a traced leaf's io_trace.json (after the metadata is written)."""
    if not (leaf / io_trace.FILE).is_file():
        return
    from mlpstorage_py.trace import replay

    try:
        log.info(f"trace-io: {replay.write(leaf)} written")
    except MlpsError as exc:  # a trace with nothing to replay (object storage, no I/O)
        log.warning(f"trace-io: no replay.fio: {exc}")
