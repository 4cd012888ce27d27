"""`kv-cache.py --enable-latency-tracing` (the reference's flag; Rules 6.5.2, OPEN only): trace
this client's I/O on its cache directory with mlpstorage's tracer (bpftrace, as root) and write
the record beside the result (`<output>_io_trace.json`, the shape of io_trace.json).

Under mlpstorage the flag belongs to `mlpstorage open kvcache run`, which traces every client
host at once and never passes it to the ranks; this is for kv-cache.py run on its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


class TracingUnavailable(Exception):
    """The tracer cannot run here; the message says why."""


def record_path(output: Path) -> Path:
    return output.with_name(f"{output.stem}_io_trace.json")


@contextlib.contextmanager
def traced(enabled: bool, cache_dir: Path, output: Path) -> Iterator[None]:
    """Trace the block inside (or do nothing when not enabled); the record is written on every path."""
    if not enabled:
        yield
        return
    if str(HERE.parent) not in sys.path:  # mlpstorage's source tree, beside kv_cache_benchmark/
        sys.path.append(str(HERE.parent))
    try:
        from mlpstorage_py.errors import TraceUnavailable
        from mlpstorage_py.trace import session
    except ImportError as exc:
        raise TracingUnavailable(f"--enable-latency-tracing needs mlpstorage's tracer ({exc})") from None
    try:
        session.check(["127.0.0.1"], [str(cache_dir)], None)
    except TraceUnavailable as exc:
        raise TracingUnavailable(str(exc)) from None
    output.parent.mkdir(parents=True, exist_ok=True)

    def keep(record: dict) -> None:
        for host in record.get("hosts", {}).values():
            for stream in host.get("streams") or []:
                if stream.get("pid") == os.getpid():
                    stream["rank"] = 0  # this client
        path = record_path(output)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, path)

    from mlpstorage_py.launch.heartbeat import mark_work

    with session.tracing(["127.0.0.1"], [str(cache_dir)], None, output.parent, keep):
        mark_work()  # this process does the work from here (its streams before are its start-up)
        yield
