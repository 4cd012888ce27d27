"""Honest trace records (issue 42), on real traced I/O: every latency histogram holds every request
it summarises (or the record counts apart what it could not see), no percentile from fewer than
io_trace.MIN_SAMPLES latencies anywhere it is shown, stream windows within the trace's duration,
the share of a device's bytes that were not the run's, and a rank whose traced bytes exceed what
it says it moved is said in the leaf.

The data lies on an ext4 of its own (a loop-mounted image) so no other test's I/O is on it; a
request held in flight is a write to a filesystem whose image lies on a frozen one (fsfreeze):
the loop device's write to its backing file waits until the outer filesystem is thawed. The
kernel skips a BPF probe while another BPF program runs on the same CPU (other tests' tracers
run beside these), so a completion may go unseen however long the tracer waits: the record
counts those apart, and the kernel's count of skipped runs bounds them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Iterator

import pytest

import synthetic
from faults import mounted, wait_for
from test_report_html import dom, sections
from test_trace import Worker, near, require_tracing, stream, worker  # noqa: F401 (a fixture)

from mlpstorage_py.launch import heartbeat
from mlpstorage_py.report import html
from mlpstorage_py.results import io_trace
from mlpstorage_py.trace import devices, honest, replay_run, session as trace_session
from mlpstorage_py.trace.session import TraceSession

MIB = 2 ** 20
CAP_S = 120.0  # a cap on waiting for a phase, never a margin being measured
CKPT = "closed/Acme/results/sys1/checkpointing/llama3-8b"
# Writes 1 MiB with O_DIRECT to a file, over and over, until its stdin ends; says "go" first.
WRITER = r"""
import mmap, os, select, sys
buf = mmap.mmap(-1, 1 << 20); buf.write(b"w" * (1 << 20))
fd = os.open(sys.argv[1], os.O_CREAT | os.O_WRONLY | os.O_DIRECT, 0o600)
print("go", flush=True)
while not select.select([sys.stdin], [], [], 0)[0]:
    os.pwrite(fd, buf, 0)
"""


def _image(path: Path, mib: int) -> Path:
    if not shutil.which("mkfs.ext4"):
        pytest.skip("a loop-mounted filesystem needs mkfs.ext4")
    with open(path, "wb") as fh:
        fh.truncate(mib * MIB)
    subprocess.run(["mkfs.ext4", "-q", str(path)], check=True, capture_output=True)
    return path


@pytest.fixture
def own_disk(tmp_path) -> Iterator[Path]:
    """An ext4 on a loop device of its own, mounted for the test."""
    with mounted(tmp_path / "disk", "-o", "loop", str(_image(tmp_path / "disk.img", 256))) as mount:
        yield mount


@pytest.fixture
def frozen_below(tmp_path) -> Iterator[tuple[Path, Path]]:
    """(outer, inner): an ext4 whose image lies on another (outer) ext4; freezing the outer one
    holds the inner disk's writes in flight."""
    if not shutil.which("fsfreeze"):
        pytest.skip("needs fsfreeze (util-linux)")
    with mounted(tmp_path / "outer", "-o", "loop", str(_image(tmp_path / "outer.img", 200))) as outer:
        with mounted(tmp_path / "inner", "-o", "loop", str(_image(outer / "inner.img", 64))) as inner:
            try:
                yield outer, inner
            finally:
                subprocess.run(["fsfreeze", "-u", str(outer)], capture_output=True)


def disk_of(path: Path) -> str:
    where = devices.resolve(str(path))
    assert where["level"] == "block", where
    return where["devices"][0]["name"]


def writes_in_flight(disk: str) -> int:
    return int(Path(f"/sys/block/{disk}/inflight").read_text().split()[1])


def every_op(record: dict) -> Iterator[tuple[str, str, dict]]:
    for part, entry in [*record["hosts"].items(), ("unattributed", record["unattributed"])]:
        for name, device in entry["devices"].items():
            for op in io_trace.OPS:
                yield f"{part} {name}", op, device[op]


def assert_histograms_hold_their_requests(record: dict) -> None:
    """Each histogram's total is its requests less those whose completion was counted apart."""
    for where, op, entry in every_op(record):
        total = sum(entry["latency_us_hist"].values())
        assert total == entry["latency_samples"] == entry["requests"] - entry["latency_unseen"], (where, op, entry)


def skipped(record: dict) -> int:
    """Probe runs the kernel skipped on this host (a BPF probe does not run while another BPF
    program runs on its CPU: other tests' tracers here too); a completion among them is unseen."""
    return record["hosts"]["127.0.0.1"].get("skipped_probe_runs") or 0


def seen_all_but_skipped(entry: dict, record: dict) -> None:
    """Every request in the histogram but those whose completion the kernel did not let the
    tracer see (counted apart)."""
    assert sum(entry["latency_us_hist"].values()) >= entry["requests"] - skipped(record), (entry, skipped(record))
    assert entry["latency_unseen"] <= skipped(record), (entry, skipped(record))


def test_every_flush_and_write_is_in_its_latency_histogram(tmp_path, own_disk, worker):
    """New files written and fsynced on ext4: the journal's commits make the block layer build
    flush requests of its own, which complete at another position than they were issued at (an
    unset one); each of them, and each write, is in its op's latency histogram (but for a
    completion the kernel did not let the tracer see, counted apart)."""
    require_tracing()
    disk = disk_of(own_disk)
    with TraceSession(["127.0.0.1"], [str(own_disk)], None, tmp_path) as session:
        for i in range(6):
            worker.do("write", own_disk / f"new{i}", 1, 0)
    record = session.record()
    device = record["hosts"]["127.0.0.1"]["devices"][disk]
    flush, write = device["flush"], device["write"]
    print(f"flushes {flush['requests']}, in the histogram {sum(flush['latency_us_hist'].values())}; "
          f"writes {write['requests']}, {sum(write['latency_us_hist'].values())}")
    assert flush["requests"] >= 6 and write["requests"] >= 6
    for entry in (flush, write):
        seen_all_but_skipped(entry, record)
    assert_histograms_hold_their_requests(record)


def test_a_request_in_flight_at_the_stop_completes_into_its_histogram(tmp_path, frozen_below, worker, monkeypatch):
    """A write held in flight when the traced work ends: the tracer drains (counts nothing new,
    waits for what it counted), the write completes meanwhile (the outer disk is thawed once the
    tracer says it drains), and its latency is in the histogram."""
    require_tracing()
    outer, inner = frozen_below
    disk = disk_of(inner)
    monkeypatch.setattr(trace_session, "DRAIN_S", CAP_S)  # the drain ends on its phase, not a time
    monkeypatch.setattr(trace_session, "DRAIN_STALL_S", CAP_S)
    worker.do("write", inner / "held", 1, 1)  # allocated before: the traced write is the data alone
    writes: list[int] = []
    with TraceSession(["127.0.0.1"], [str(inner)], None, tmp_path) as session:
        (tracer,) = session.tracers
        subprocess.run(["fsfreeze", "-f", str(outer)], check=True)
        writer = threading.Thread(target=lambda: writes.append(worker.do("write", inner / "held", 1, 1)))
        writer.start()
        wait_for(lambda: writes_in_flight(disk) > 0, CAP_S, message=lambda: f"a write in flight on {disk}")

        def thaw() -> None:  # once the tracer drains (or, without a drain, once it stopped)
            wait_for(lambda: getattr(tracer.collector, "draining", False) or tracer.finished(), CAP_S)
            subprocess.run(["fsfreeze", "-u", str(outer)], check=True)

        thawer = threading.Thread(target=thaw)
        thawer.start()
    thawer.join()
    writer.join()
    assert writes == [MIB]
    record = session.record()
    write = record["hosts"]["127.0.0.1"]["devices"][disk]["write"]
    print(f"writes {write['requests']}, in the histogram {sum(write['latency_us_hist'].values())}")
    assert write["requests"] >= 1 and stream(record["hosts"]["127.0.0.1"], worker.pid, disk)["ops"]["write"]["bytes"] == MIB
    seen_all_but_skipped(write, record)  # the held write's latency among them
    assert_histograms_hold_their_requests(record)


def test_a_request_that_never_completes_is_counted_apart(tmp_path, frozen_below, worker, monkeypatch):
    """A write still held when the tracer must stop (its drain given up): the record says so
    (latency_unseen), and the histogram holds the rest."""
    require_tracing()
    outer, inner = frozen_below
    disk = disk_of(inner)
    monkeypatch.setattr(trace_session, "DRAIN_S", 0.5)  # the write is held however long it waits
    worker.do("write", inner / "held", 1, 1)
    with TraceSession(["127.0.0.1"], [str(inner)], None, tmp_path) as session:
        subprocess.run(["fsfreeze", "-f", str(outer)], check=True)
        writer = threading.Thread(target=lambda: worker.do("write", inner / "held", 1, 1))
        writer.start()
        wait_for(lambda: writes_in_flight(disk) > 0, CAP_S, message=lambda: f"a write in flight on {disk}")
    try:
        record = session.record()
        write = record["hosts"]["127.0.0.1"]["devices"][disk]["write"]
        assert write["latency_unseen"] >= 1, write
        assert_histograms_hold_their_requests(record)
    finally:
        subprocess.run(["fsfreeze", "-u", str(outer)], check=True)
        writer.join()


def test_stream_windows_lie_within_the_duration(tmp_path, own_disk):
    """A process writing on the traced disk through the tracer's stop: its window, and every
    queue-depth point, lie within the trace's duration (one clock: the tracer's)."""
    require_tracing()
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(own_disk / "busy")], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline().strip() == "go"
        with TraceSession(["127.0.0.1"], [str(own_disk)], None, tmp_path) as session:
            wait_for(lambda: session.tracers[0].collector.depth, CAP_S)  # a sample of it writing
    finally:
        writer.stdin.close()
        writer.wait(timeout=CAP_S)
    record = session.record()
    duration = record["duration_s"]
    host = record["hosts"]["127.0.0.1"]
    busy = stream(host, writer.pid, disk_of(own_disk))["ops"]["write"]
    print(f"duration {duration}; the writer's window {busy['first_s']} .. {busy['last_s']}")
    assert busy["requests"] > 0
    for part in (host, record["unattributed"]):
        for s in part["streams"]:
            for entry in s["ops"].values():
                if entry["first_s"] is not None:  # none where its requests were all metadata (bpf.py)
                    assert 0 <= entry["first_s"] <= entry["last_s"] <= duration, (s["comm"], entry)
        for device in part["devices"].values():
            assert all(0 <= t <= duration for t, _ in device["queue_depth"])


def run_leaf(root: Path, record: dict) -> Path:
    """The record as the io_trace.json of a synthetic package's checkpointing leaf."""
    leaf = synthetic.leaves_of(root / CKPT)[0]
    (leaf / io_trace.FILE).write_text(json.dumps(record), encoding="utf-8")
    return leaf


def op_cells(page: str) -> dict[str, list]:
    (div,) = sections(dom(page))[CKPT].all("div", **{"class": "trace-device"})
    (table,) = div.all("table", **{"class": "trace-ops"})
    return {tr.all("td")[0].text: [(json.loads(td.attrs["data-value"]), td.text) for td in tr.all("td")[5:8]]
            for tr in table.all("tr")[1:]}, div


@pytest.fixture
def own_tmpfs(tmp_path) -> Iterator[Path]:
    """A tmpfs of its own (traced at the system calls; no other test's files on it)."""
    with mounted(tmp_path / "tmpfs", "-t", "tmpfs", "-o", "size=128m", "mlps-honest") as mount:
        yield mount


def test_no_percentile_from_too_few_latencies(tmp_path, own_tmpfs, worker):
    """Two fsyncs traced (at the system calls, a tmpfs), 36 writes and 32 reads: the flushes'
    percentiles are null in io_trace.json, `n=2` in reports html; the reads' are there; and
    replay's table shows a direction's count where it has too few latencies."""
    require_tracing()
    mark = heartbeat.new_mark()
    with TraceSession(["127.0.0.1"], [str(own_tmpfs)], None, tmp_path, mark) as session:
        worker.do("mark", mark)
        worker.do("write", own_tmpfs / "few", 4, 0)
        worker.do("write", own_tmpfs / "many", 32, 0)
        worker.do("read", own_tmpfs / "many")
    record = session.record()
    work = [s for s in record["hosts"]["127.0.0.1"]["streams"] if s["work"]]
    (device,) = record["hosts"]["127.0.0.1"]["devices"].values()
    assert device["flush"]["latency_samples"] == 2 and device["read"]["latency_samples"] == 32
    assert [device["flush"][p] for p in ("p50_us", "p95_us", "p99_us")] == [None] * 3
    assert None not in [device["read"][p] for p in ("p50_us", "p95_us", "p99_us")]
    root = synthetic.copy_package(tmp_path / "pkg", families=("checkpointing",))
    run_leaf(root, record)
    cells, div = op_cells(html.build(root)[0])
    assert cells["flush"] == [(None, "n=2")] * 3 and all(v is not None for v, _ in cells["read"]), cells
    assert "2 latencies: fewer than 20, no percentile" in div.text
    # replay's table: the traced run's figures beside a replay's, a direction with too few latencies
    traced = replay_run.original(record, None)
    assert work and traced["write"]["latency_samples"] == 36 and traced["write"]["p50_us"] is not None
    few = {**traced, "read": {**traced["read"], "latency_samples": 7, "p50_us": None, "p95_us": None, "p99_us": None}}
    text = replay_run.table({"leaf": str(tmp_path), "original": traced, "replay": few,
                             "ratio": replay_run._ratios(few, traced)})
    (p50,) = [line.split() for line in text.splitlines() if line.startswith("read p50 us")]
    assert p50[4] == "n=7" and p50[3] != "-", text


def test_the_share_of_a_device_that_was_not_the_runs(tmp_path, own_disk, worker):
    """The run's work (marked) writes 8 MiB, another process 4 MiB on the same disk: the device's
    record says a third of its bytes were not the run's, reports html shows it beside the figures
    and replay's header says it."""
    require_tracing()
    disk = disk_of(own_disk)
    for name, mib in (("ours", 8), ("theirs", 4)):
        worker.do("write", own_disk / name, mib, 1)  # allocated before: the traced writes are the data
    other = Worker()
    mark = heartbeat.new_mark()
    try:
        with TraceSession(["127.0.0.1"], [str(own_disk)], None, tmp_path, mark) as session:
            worker.do("mark", mark)
            ours = worker.do("write", own_disk / "ours", 8, 1)
            theirs = other.do("write", own_disk / "theirs", 4, 1)
    finally:
        other.close()
    record = session.record()
    device = record["hosts"]["127.0.0.1"]["devices"][disk]
    print(f"others {device['others_bytes']} of {device['write']['bytes'] + device['read']['bytes']}: "
          f"{device['others_share_bytes']}")
    assert device["others_basis"] == "work" and near(device["others_bytes"], theirs)
    assert device["others_share_bytes"] == pytest.approx(theirs / (ours + theirs), abs=0.03)
    assert io_trace.others(record) == {f"127.0.0.1 {disk}": device["others_share_bytes"]}
    root = synthetic.copy_package(tmp_path / "pkg", families=("checkpointing",))
    run_leaf(root, record)
    _, div = op_cells(html.build(root)[0])
    facts = {tr.attrs["data-key"]: json.loads(tr.all("td")[0].attrs["data-value"])
             for tr in div.all("table", **{"class": "trace-device-facts"})[0].all("tr")}
    assert facts["others_share_bytes"] == device["others_share_bytes"]
    assert f"{device['others_share_bytes']:.1%} of the bytes this device moved" in div.text
    traced = replay_run.original(record, None)
    text = replay_run.table({"leaf": str(tmp_path), "original": traced, "replay": traced,
                             "ratio": replay_run._ratios(traced, traced), "others_share_bytes": io_trace.others(record)})
    assert f"127.0.0.1 {disk}: {device['others_share_bytes']:.1%} of its bytes were not the run's" in text, text


def test_a_rank_traced_beyond_what_it_says_it_did_is_said(tmp_path, own_disk, worker):
    """Rank 0 writes its 8 MiB of data and 1 MiB of something else (a log) on the traced disk,
    and says it wrote 8 MiB (the checkpoint engine's <rank>_output.json): the leaf's trace sets
    the two side by side and warns; a rank whose count matches is not warned about."""
    require_tracing()
    for name, mib in (("data", 8), ("log", 1), ("data1", 2)):
        worker.do("write", own_disk / name, mib, 1)
    other = Worker()
    mark = heartbeat.new_mark()
    try:
        with TraceSession(["127.0.0.1"], [str(own_disk)], None, tmp_path, mark) as session:
            worker.do("mark", mark)
            other.do("mark", mark)
            data = worker.do("write", own_disk / "data", 8, 1)
            worker.do("write", own_disk / "log", 1, 1)
            data1 = other.do("write", own_disk / "data1", 2, 1)
    finally:
        other.close()
    record = session.record()
    for s in record["hosts"]["127.0.0.1"]["streams"]:
        s.update({worker.pid: {"rank": 0}, other.pid: {"rank": 1}}.get(s["pid"], {}))
    leaf = tmp_path / "leaf"
    leaf.mkdir()
    for rank, wrote in ((0, data), (1, data1)):
        (leaf / f"{rank}_output.json").write_text(json.dumps({"bytes_written": wrote, "bytes_read": 0}))
    checked = honest.check(record, leaf)
    ratios = {(r["rank"], r["op"]): r["ratio"] for r in checked["rank_bytes"]}
    print(f"traced / said: {ratios}; warnings {checked['warnings']}")
    assert ratios[(0, "write")] == pytest.approx(9 / 8, abs=0.03) and ratios[(1, "write")] == pytest.approx(1, abs=0.03)
    (warning,) = [w for w in checked["warnings"] if w.startswith("rank ")]
    assert warning.startswith("rank 0: its traced write bytes are 1.1") and f"of {data} B" in warning
    root = synthetic.copy_package(tmp_path / "pkg", families=("checkpointing",))
    run_leaf(root, checked)
    (section,) = sections(dom(html.build(root)[0]))[CKPT].all("section", **{"class": "io-trace"})
    assert warning in section.text


def test_metadata_requests_are_told_apart_by_their_rwbs(tmp_path, own_disk):
    """bpf._metadata, the condition that keeps a filesystem's metadata requests out of a
    stream's windows, run by bpftrace on real requests: new files and directories made and
    synced (inode tables, bitmaps, directories: REQ_META) are metadata, O_DIRECT data writes
    and readahead are not, and every request it calls metadata has an M in its rwbs."""
    require_tracing()
    from mlpstorage_py.trace import bpf

    dev = devices.resolve(str(own_disk))["devices"][0]["dev"]
    program = (f"tracepoint:block:block_rq_issue /args->dev == {dev}/ {{ $m = 0; "
               f"if ({bpf._metadata('args->rwbs')}) {{ $m = 1; }} @n[$m, args->rwbs] = count(); }}\n"
               'interval:ms:50 /@go == 0/ { @go = 1; printf("ready\\n"); }\n'
               "END { clear(@go); }\n")
    (tmp_path / "meta.bt").write_text(program)
    tracer = subprocess.Popen(["bpftrace", str(tmp_path / "meta.bt")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    try:
        for line in tracer.stdout:  # "Attaching 2 probes...", then the first tick once both are attached
            if line.strip() == "ready":
                break
        for i in range(64):
            (own_disk / f"d{i}").mkdir()
            (own_disk / f"d{i}" / "f").write_bytes(b"x")
        fd = os.open(own_disk / "data", os.O_CREAT | os.O_WRONLY | os.O_DIRECT, 0o600)
        try:
            import mmap
            buf = mmap.mmap(-1, MIB)
            for i in range(8):
                os.pwrite(fd, buf, i * MIB)
        finally:
            os.close(fd)
        os.sync()
    finally:
        tracer.send_signal(2)
        out, err = tracer.communicate(timeout=CAP_S)
    counts: dict[tuple[int, str], int] = {}
    for line in out.splitlines():
        if line.startswith("@n["):
            key, _, n = line.partition("]: ")
            meta, _, rwbs = key[3:].partition(", ")
            counts[(int(meta), rwbs)] = int(n)
    assert counts, (out, err)
    assert any(meta and rwbs.startswith("W") for meta, rwbs in counts), counts
    assert all("M" in rwbs for meta, rwbs in counts if meta), counts
    assert all("M" not in rwbs for meta, rwbs in counts if not meta), counts
    assert any(not meta and rwbs.startswith("W") for meta, rwbs in counts), counts
