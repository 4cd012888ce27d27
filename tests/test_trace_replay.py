"""replay.fio distilled from hand-made io_trace.json records (mlpstorage_py/trace/replay.py) and
`mlpstorage replay` run for real with fio on a tmp directory (issue 27)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import MLPSTORAGE, signal_when_ready, subprocess_env

from mlpstorage_py.errors import UsageError
from mlpstorage_py.trace import replay

MIB = 2 ** 20
FIO = shutil.which("fio")
needs_fio = pytest.mark.skipif(FIO is None, reason="fio is not installed (make test installs it)")


def op(requests: int, size_hist: dict[int, int], sequential: float, latency: dict[int, int] | None = None,
       nbytes: int | None = None) -> dict[str, Any]:
    """One op's record as the tracer writes it (bytes from the histogram unless given)."""
    return {"requests": requests, "bytes": sum(k * v for k, v in size_hist.items()) if nbytes is None else nbytes,
            "size_hist": {str(k): v for k, v in size_hist.items()},
            "latency_us_hist": {str(k): v for k, v in (latency or {256: requests}).items()},
            "sequential_share": sequential}


def seq_write(pid: int = 100, mib: int = 64) -> dict[str, Any]:
    """A sequential 1 MiB write stream with one fsync at the end."""
    return {"pid": pid, "comm": "python3", "device": "vda", "kernel_thread": False, "in_flight_mean": 1.3,
            "ops": {"write": op(mib, {MIB: mib}, 0.98, {2048: mib}), "flush": op(1, {}, 0.0, {64: 1}, 0)}}


def rand_read(pid: int = 101) -> dict[str, Any]:
    """A random 4 KiB read stream, eight requests in flight on average."""
    return {"pid": pid, "comm": "python3", "device": "vda", "kernel_thread": False, "in_flight_mean": 7.6, "ops": {"read": op(2000, {4096: 2000}, 0.03)}}


def mixed(pid: int = 102) -> dict[str, Any]:
    """A mostly sequential stream: 300 reads of 64 KiB, 100 writes of 4 KiB and 64 KiB, flushed often."""
    return {"pid": pid, "comm": "kv worker", "device": "vda", "kernel_thread": False, "in_flight_mean": 0.4,
            "ops": {"read": op(300, {65536: 300}, 0.9), "write": op(100, {4096: 60, 65536: 40}, 0.7),
                    "flush": op(10, {}, 0.0, {64: 10}, 0)}}


def trace(*stream_lists: list[dict[str, Any]], level: str = "block", duration_s: float = 2.0) -> dict[str, Any]:
    """A trace with one host per list of streams."""
    return {"schema": 1, "level": level, "why": "" if level in ("block", "vfs") else "s3 run, not traced",
            "duration_s": duration_s,
            "hosts": {f"host{i}": {"hostname": f"host{i}", "devices": {}, "streams": streams}
                      for i, streams in enumerate(stream_lists)}}


def sections(text: str) -> dict[str, dict[str, str]]:
    """The job file's sections as {name: {key: value}}."""
    found: dict[str, dict[str, str]] = {}
    current: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("[") and line.endswith("]"):
            current = found.setdefault(line[1:-1], {})
        elif "=" in line and not line.startswith(";"):
            key, value = line.split("=", 1)
            current[key] = value
    return found


def fio_bytes(text: str) -> int:
    """A size in fio's spelling (1m, 64k, 512) as bytes."""
    number, unit = re.fullmatch(r"(\d+)([km]?)", text).groups()
    return int(number) * {"": 1, "k": 1024, "m": MIB}[unit]


def make_leaf(root: Path, record: dict[str, Any], metadata: dict[str, Any] | None = None) -> Path:
    """A run leaf with its metadata and io_trace.json."""
    leaf = root / "20261202_070000"
    leaf.mkdir(parents=True)
    (leaf / "checkpointing_20261202_070000_metadata.json").write_text(json.dumps(metadata or {"args": {}}))
    (leaf / "io_trace.json").write_text(json.dumps(record))
    return leaf


@needs_fio
def test_distilled_job_parses_and_follows_the_trace(tmp_path):
    """Three streams, three jobs: fio --parse-only accepts the file; bssplit, rw, rwmixread,
    iodepth, fsync/end_fsync and size are the trace's; sizes add up to the traced bytes."""
    record = trace([seq_write(), rand_read(), mixed()])
    text = replay.distill(record, {"args": {}}, name="/r/leaf")
    path = tmp_path / "replay.fio"
    path.write_text(text)
    done = subprocess.run([FIO, "--parse-only", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    jobs = sections(text)
    assert jobs.pop("global") == {"filename_format": "$jobname.$jobnum.$filenum", "group_reporting": "0",
                                  "fadvise_hint": "0"}
    write, read, mix = jobs["h0-python3-100-vda"], jobs["h0-python3-101-vda"], jobs["h0-kv_worker-102-vda"]
    assert (write["rw"], write["bssplit"], write["iodepth"], write["fsync"], write["end_fsync"], write["size"]) == \
        ("write", "1m/100", "1", "64", "1", "64m")
    assert (read["rw"], read["bssplit"], read["iodepth"], read["size"]) == ("randread", "4k/100", "1", "8000k")
    assert "in flight 7.60 on average (buffered: psync issues one request at a time" in text
    assert (mix["rw"], mix["rwmixread"], mix["bssplit"], mix["fsync"], mix["iodepth"]) == \
        ("readwrite", "75", "64k/100,4k/60:64k/40", "10", "1")
    for job in (write, read, mix):  # buffered as the run, so the kernel makes the requests again
        assert (job["ioengine"], job["direct"], job["numjobs"]) == ("psync", "0", "1")
        assert "sync_file_range" not in job
    traced = sum(replay.stream_bytes(s) for s in (seq_write(), rand_read(), mixed()))
    assert abs(sum(fio_bytes(j["size"]) for j in (write, read, mix)) - traced) < 4096 * 3
    assert "/r/leaf" in text.splitlines()[0] and "block layer" in text.splitlines()[1]


def test_bssplit_percentages_sum_to_100_by_count():
    """Percentages by count, rounded by largest remainder to exactly 100, sizes in k and m."""
    assert replay.bssplit({"4096": 1, "65536": 1, str(MIB): 1}, 512)[0] == "4k/34:64k/33:1m/33"
    assert replay.bssplit({"4096": 10, "65536": 50, str(MIB): 40}, 512)[0] == "4k/10:64k/50:1m/40"
    assert replay.bssplit({"512": 3, "2048": 1}, 4096)[0] == "4k/100"  # raised to the direct floor


def test_direct_run_gets_libaio_at_the_observed_depth():
    """A run whose metadata says O_DIRECT: libaio, direct=1, iodepth the rounded in-flight mean;
    traced at the system calls (no disk behind the data), a buffered run replays buffered (psync,
    the run's calls) and an O_DIRECT one direct."""
    text = replay.distill(trace([rand_read()]), {"args": {"o_direct": True}})
    job = sections(text)["h0-python3-101-vda"]
    assert (job["ioengine"], job["direct"], job["iodepth"]) == ("libaio", "1", "8")
    vfs = [{**rand_read(), "device": "tmpfs:/mnt"}]
    buffered = sections(replay.distill(trace(vfs, level="vfs"), {"args": {}}))["h0-python3-101-tmpfs_mnt"]
    direct = sections(replay.distill(trace(vfs, level="vfs"), {"args": {"o_direct": True}}))["h0-python3-101-tmpfs_mnt"]
    assert (buffered["ioengine"], buffered["direct"], direct["ioengine"], direct["direct"]) == ("psync", "0", "libaio", "1")


def test_each_host_gets_its_jobs_and_trivial_streams_are_left_out():
    """Job names carry the trace host's index (sections() maps them back) and the device (a
    stream is one process on one device); a stream with under 1 % of the bytes and a kernel
    thread's (writeback) are no job, and the header says so."""
    tiny = {"pid": 7, "comm": "python3", "device": "vda", "in_flight_mean": 1, "ops": {"write": op(1, {4096: 1}, 1.0)}}
    writeback = {"pid": 9, "comm": "kworker/u8:1", "device": "vda", "kernel_thread": True, "in_flight_mean": 4,
                 "ops": {"write": op(512, {MIB: 512}, 1.0)}}
    other_disk = {**seq_write(100), "device": "vdb"}
    text = replay.distill(trace([seq_write(100), tiny, writeback, other_disk], [seq_write(200)]), None)
    assert replay.sections(text) == {0: ["h0-python3-100-vda", "h0-python3-100-vdb"], 1: ["h1-python3-200-vda"]}
    assert "left out: 1 stream(s) with under 1%" in text and "left out: 1 kernel thread stream(s)" in text


@pytest.mark.parametrize("level", ["none", "object"])
def test_a_trace_without_requests_is_refused(level):
    with pytest.raises(UsageError, match=f"level is '{level}'"):
        replay.distill(trace([seq_write()], level=level), None)


def test_write_keeps_an_existing_job_file_and_refuses_a_symlink(tmp_path):
    leaf = make_leaf(tmp_path, trace([seq_write()]))
    path = replay.write(leaf)
    assert path == leaf / "replay.fio" and "[h0-python3-100-vda]" in path.read_text()
    path.write_text("; edited\n")
    assert replay.write(leaf).read_text() == "; edited\n"
    path.unlink()
    path.symlink_to(tmp_path / "elsewhere.fio")
    with pytest.raises(UsageError, match="symlink"):
        replay.write(leaf)
    assert not (tmp_path / "elsewhere.fio").exists()


def small_trace() -> dict[str, Any]:
    """8 MiB written in 1 MiB requests with an end fsync, 4 MiB read in 1 MiB requests, in 0.5 s;
    the reads' latency on the device only, as the tracer keeps it. Each latency histogram holds
    io_trace.MIN_SAMPLES latencies, the fewest a percentile is taken from."""
    reader = {"pid": 301, "comm": "python3", "device": "vda", "in_flight_mean": 1.0, "ops": {"read": op(4, {MIB: 4}, 1.0)}}
    del reader["ops"]["read"]["latency_us_hist"]
    writer = seq_write(300, 8)
    writer["ops"]["write"]["latency_us_hist"] = {"2048": 20}
    record = trace([writer, reader], duration_s=0.5)
    record["hosts"]["host0"]["devices"] = {"vda": {"read": op(6, {MIB: 6}, 1.0, {512: 20})}}
    return record


@needs_fio
def test_replay_runs_fio_and_prints_its_figures_beside_the_run(cli, tmp_path):
    """One real replay: exit 0, the table, replay.fio and one replay_<timestamp>.json written,
    fio's bytes equal the job's; nothing else enters the leaf. A second replay keeps replay.fio
    and writes a second result beside the first."""
    leaf = make_leaf(tmp_path / "leaf", small_trace())
    target = tmp_path / "target"
    target.mkdir()
    result = cli("replay", leaf, "--directory", target)
    assert result.rc == 0, result.err
    assert f"wrote {leaf / 'replay.fio'}" in result.out
    for label in ("read MiB/s", "write MiB/s", "read p99 us", "write p50 us"):
        assert re.search(rf"^{label}\s+\S+\s+\S+\s+\S+$", result.out, re.M), result.out
    assert re.search(r"^write MiB/s\s+16\s", result.out, re.M)  # the original: 8 MiB in 0.5 s
    results = sorted(leaf.glob("replay_*.json"))
    assert len(results) == 1 and f"wrote {results[0]}" in result.out
    record = json.loads(results[0].read_text())
    assert (record["replay"]["write"]["bytes"], record["replay"]["read"]["bytes"]) == (8 * MIB, 4 * MIB)
    assert record["original"]["write"]["bytes"] == 8 * MIB and record["original"]["write"]["mib_s"] == 16
    assert record["original"]["write"]["p50_us"] == 4096  # the stream's own latency: 2048-4095 us
    assert record["original"]["read"]["p99_us"] == 1024  # the device's, where the stream has none
    assert record["replay"]["write"]["mib_s"] > 0 and record["ratio"]["write_mib_s"] > 0
    writer = next(row for row in record["jobs"] if row["job"] == "h0-python3-300-vda")
    assert set(writer["write_clat_us"]) == {"p50", "p95", "p99"}
    from mlpstorage_py.trace import page_cache  # fio ran in a bounded page cache where the host has one
    found = page_cache.hierarchy()
    assert record["page_cache"].startswith("bounded: memory cgroup" if isinstance(found, tuple) else "not bounded: ")
    assert sorted(p.name for p in target.iterdir()) == ["h0-python3-300-vda.0.0", "h0-python3-301-vda.0.0"]
    again = cli("replay", leaf, "--directory", target, "--runtime-cap", "60")
    assert again.rc == 0 and f"using {leaf / 'replay.fio'}" in again.out
    assert len(list(leaf.glob("replay_*.json"))) == 2
    assert sorted(p.name for p in leaf.iterdir() if not p.name.startswith("replay_")) == \
        ["checkpointing_20261202_070000_metadata.json", "io_trace.json", "replay.fio"]


@needs_fio
def test_replay_on_named_hosts_runs_each_traced_hosts_jobs(cli, tmp_path):
    """--hosts: one host per traced host (this machine here), each fio running only its sections;
    a count that does not match the trace's hosts is a usage error."""
    leaf = make_leaf(tmp_path / "leaf", small_trace())
    target = tmp_path / "target"
    target.mkdir()
    result = cli("replay", leaf, "--directory", target, "--hosts", "127.0.0.1")
    assert result.rc == 0, result.err
    record = json.loads(next(leaf.glob("replay_*.json")).read_text())
    assert record["hosts"] == ["127.0.0.1"] and "--section=h0-python3-300-vda" in record["argv"][0]
    wrong = cli("replay", leaf, "--directory", target, "--hosts", "127.0.0.1,localhost")
    assert wrong.rc == 2 and "--hosts names 2 host(s)" in wrong.err


def windowed(stream: dict[str, Any], **windows: tuple[float, float]) -> dict[str, Any]:
    """The stream with first/last issue times (s) per op, and its ops' in-flight means."""
    for name, (first, last) in windows.items():
        stream["ops"][name].update(first_s=first, last_s=last, in_flight=2.0)
    return stream


def checkpoint_like() -> dict[str, Any]:
    """Two ranks that each wrote 16 MiB (0.1-2 s), then, after a cache drop, read it back
    (3-5 s); rank 1's interpreter read 2 MiB of imports before it marked its work; the
    launcher read 1 MiB."""
    def rank(pid: int) -> dict[str, Any]:
        stream = seq_write(pid, 16)
        stream["ops"]["read"] = op(16, {MIB: 16}, 1.0)
        stream["work"] = True
        return windowed(stream, write=(0.1, 2.0), flush=(2.0, 2.0), read=(3.0, 5.0))
    imports = windowed({"pid": 101, "comm": "python3", "device": "vda", "work": False, "in_flight_mean": 1.0,
                        "ops": {"read": op(2, {MIB: 2}, 0.5)}}, read=(0.0, 0.05))
    launcher = windowed({"pid": 99, "comm": "prterun", "device": "vda", "work": False, "in_flight_mean": 1.0,
                         "ops": {"read": op(1, {MIB: 1}, 1.0)}}, read=(0.0, 0.0))
    return trace([rank(100), rank(101), imports, launcher], duration_s=6.0)


@needs_fio
def test_a_write_then_read_run_replays_in_two_phases_on_one_file_per_stream(tmp_path):
    """Each rank's writes and reads came at different times: a write job and a read job per rank
    on one file, the reads a phase of their own behind a stonewall; the imports before the mark
    and the launcher's I/O are not the run's work and are left out, which the header says."""
    text = replay.distill(checkpoint_like(), {"args": {}})
    path = tmp_path / "replay.fio"
    path.write_text(text)
    done = subprocess.run([FIO, "--parse-only", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    names = [line[1:-1] for line in text.splitlines() if line.startswith("[") and line != "[global]"]
    assert names == ["h0-python3-100-vda-write", "h0-python3-101-vda-write", "h0-python3-100-vda-read",
                     "h0-python3-101-vda-read"]
    body = text.split("[h0-python3-100-vda-read]")[1].split("\n\n")[0]
    assert "stonewall" in body and "stonewall" not in text.split("[h0-python3-100-vda-read]")[0].split("[global]")[1]
    jobs = sections(text)
    write, read = jobs["h0-python3-100-vda-write"], jobs["h0-python3-100-vda-read"]
    assert write["filename_format"] == read["filename_format"] == "h0-python3-100-vda.$jobnum"
    assert (write["rw"], write["size"], write["fsync"], read["rw"], read["size"]) == ("write", "16m", "16", "read", "16m")
    assert "end_fsync" not in read and "fsync" not in read and (write["iodepth"], read["iodepth"]) == ("1", "1")
    assert "in 2 phases" in text
    assert "left out: 2 stream(s) that are not the run's work (3145728 B" in text


def test_each_thread_of_a_stream_is_a_clone_with_its_share():
    """A stream whose requests came from 4 threads: numjobs=4, each clone a quarter of the bytes,
    of the rate (a paced run) and of the depth."""
    stream = windowed({**rand_read(), "work": True}, read=(1.0, 3.0))
    stream["ops"]["read"].update(threads=4, in_flight=8.0)
    text = replay.distill(trace([stream]), {"benchmark_type": "kv_cache", "command": "run", "args": {"o_direct": True}})
    job = sections(text)["h0-python3-101-vda"]
    assert (job["numjobs"], job["size"], job["iodepth"]) == ("4", "2000k", "2")
    assert job["rate"] == str(round(2000 * 4096 / 2.0 / 4))
    assert "4 threads issued its requests" in text and "reads at 3.91 MiB/s" in text


@needs_fio
def test_a_paced_kv_run_is_one_mixed_job_at_the_runs_rate(tmp_path):
    """A KV run's stream reads and writes throughout its window: one readwrite job, one phase, no
    stonewall; a KV run paces its own I/O (its users), so the job offers each direction's bytes
    over its window (rate=read,write B/s); a checkpoint's stream goes flat out, no rate."""
    stream = windowed({**mixed(), "work": True}, read=(0.2, 9.0), write=(0.1, 9.5), flush=(0.5, 9.5))
    text = replay.distill(trace([stream]), {"benchmark_type": "kv_cache", "command": "run", "args": {}})
    assert [n for n in sections(text) if n != "global"] == ["h0-kv_worker-102-vda"]
    assert "stonewall" not in text and "phases" not in text
    job = sections(text)["h0-kv_worker-102-vda"]
    assert job["rw"] == "readwrite"
    assert job["rate"] == f"{round(300 * 65536 / 8.8)},{round((60 * 4096 + 40 * 65536) / 9.4)}"
    assert "paced: the run issued reads at 2.13 MiB/s and writes at 0.29 MiB/s" in text
    path = tmp_path / "replay.fio"
    path.write_text(text)
    done = subprocess.run([FIO, "--parse-only", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    flat = replay.distill(trace([stream]), {"benchmark_type": "checkpointing", "command": "run", "args": {}})
    assert "rate" not in sections(flat)["h0-kv_worker-102-vda"]
    reads_only = windowed({**rand_read(), "work": True}, read=(1.0, 3.0))
    text = replay.distill(trace([reads_only]), {"benchmark_type": "training", "command": "run", "args": {}})
    assert sections(text)["h0-python3-101-vda"]["rate"] == str(round(2000 * 4096 / 2.0))


def with_files(stream: dict[str, Any], **counted: tuple[int, int]) -> dict[str, Any]:
    """The stream with the files its process closed per op: (how many, their bytes)."""
    for name, (files, nbytes) in counted.items():
        stream["ops"][name].update(files=files, file_bytes=nbytes)
    return stream


def kv_like() -> dict[str, Any]:
    """A KV rank: 64 MiB of 1 MiB writes into 8 files of 8 MiB, each fsync'd once, while it read
    32 MiB out of 16 files of 2 MiB, by 2 threads, over overlapping windows."""
    stream = {"pid": 103, "comm": "python3", "device": "vda", "kernel_thread": False, "in_flight_mean": 1.0,
              "work": True, "fsyncs": 8,
              "ops": {"write": op(64, {MIB: 64}, 0.9), "read": op(32, {MIB: 32}, 0.8), "flush": op(0, {}, 0.0, {}, 0)}}
    stream = windowed(stream, write=(0.1, 2.1), read=(0.5, 1.5))
    stream["ops"]["write"]["threads"] = stream["ops"]["read"]["threads"] = 2
    return trace([with_files(stream, write=(8, 64 * MIB), read=(16, 32 * MIB))], duration_s=3.0)


@needs_fio
def test_a_kv_run_writes_new_files_beside_reading_its_own(cli, tmp_path):
    """Where the trace counted the files, a stream whose writes and reads overlap is a write job
    making files of the run's size, an fsync as each closes (one per file, as the run did), beside
    a read job reading files of its own size, at each direction's rate, starting as much later as
    the run's reads did; not one mixed job, which would read back what it had just written from
    the page cache. Run for real: each job made the files it says, and moved the stream's bytes;
    the reads' time runs from the phase's start."""
    text = replay.distill(kv_like(), {"benchmark_type": "kv_cache", "command": "run", "args": {}})
    jobs = sections(text)
    write, read = jobs["h0-python3-103-vda-write"], jobs["h0-python3-103-vda-read"]
    assert "stonewall" not in text and "filename_format" not in write and "filename_format" not in read
    assert (write["rw"], write["numjobs"], write["size"], write["nrfiles"], write["filesize"]) == ("write", "2", "32m", "4", "8m")
    assert write["fsync_on_close"] == "1" and "fsync" not in write and "end_fsync" not in write
    assert (read["rw"], read["size"], read["nrfiles"], read["filesize"]) == ("read", "16m", "8", "2m")
    assert write["rate"] == "," + str(round(64 * MIB / 2.0 / 2)) and read["rate"] == str(round(32 * MIB / 1.0 / 2))
    assert "the process closed 8 it wrote" in text and "closed 16 it read" in text
    assert read["startdelay"] == "400ms" and "startdelay" not in write  # the reads began 0.4 s after the writes
    leaf = make_leaf(tmp_path / "leaf", kv_like(), {"benchmark_type": "kv_cache", "command": "run", "args": {}})
    target = tmp_path / "target"
    target.mkdir()
    result = cli("replay", leaf, "--directory", target, "--runtime-cap", "60")
    assert result.rc == 0, result.err
    made = sorted(p.name for p in target.iterdir())
    assert made == sorted([f"h0-python3-103-vda-write.{j}.{f}" for j in range(2) for f in range(4)]
                          + [f"h0-python3-103-vda-read.{j}.{f}" for j in range(2) for f in range(8)]), made
    assert {(target / name).stat().st_size for name in made if "-write." in name} == {8 * MIB}
    record = json.loads(next(leaf.glob("replay_*.json")).read_text())
    assert (record["replay"]["write"]["bytes"], record["replay"]["read"]["bytes"]) == (64 * MIB, 32 * MIB)
    reads = max(row["runtime_s"] for row in record["jobs"] if row["job"].endswith("-read"))
    assert record["replay"]["read"]["mib_s"] == round(32 / (0.4 + reads), 2)  # from the phase's start


def test_a_checkpoints_read_job_reads_the_files_its_write_job_made():
    """Writes, then reads of the same files (a checkpoint): the two jobs of a rank share the
    files by name, file by file, each as large as the run's, and one fsync per file is
    fsync_on_close; without counted files a stream keeps one file per clone."""
    record = checkpoint_like()
    for stream in record["hosts"]["host0"]["streams"][:2]:
        stream["fsyncs"] = 2
        with_files(stream, write=(2, 16 * MIB), read=(2, 16 * MIB))
    jobs = sections(replay.distill(record, {"args": {}}))
    write, read = jobs["h0-python3-100-vda-write"], jobs["h0-python3-100-vda-read"]
    assert write["filename_format"] == read["filename_format"] == "h0-python3-100-vda.$jobnum.$filenum"
    assert (write["nrfiles"], write["filesize"], read["nrfiles"], read["filesize"]) == ("2", "8m", "2", "8m")
    assert write["fsync_on_close"] == "1"
    plain = sections(replay.distill(checkpoint_like(), {"args": {}}))["h0-python3-100-vda-write"]
    assert "nrfiles" not in plain and plain["fsync"] == "16"


def test_a_writer_that_started_its_own_writeback_gets_sync_file_range():
    """A stream whose process called sync_file_range(SYNC_FILE_RANGE_WRITE) as it wrote (our
    checkpoint engine, once a block): each clone does after the same share of its writes."""
    stream = seq_write(100, 64)
    stream["writeback_starts"] = 32
    job = sections(replay.distill(trace([stream]), {"args": {}}))["h0-python3-100-vda"]
    assert job["sync_file_range"] == "write:2"
    direct = sections(replay.distill(trace([stream]), {"args": {"o_direct": True}}))["h0-python3-100-vda"]
    assert "sync_file_range" not in direct  # O_DIRECT leaves nothing to write back


def test_the_replays_page_cache_is_bounded(tmp_path):
    """Inside page_cache.bounded this process (and what it starts) is in a memory cgroup of the
    limit: a child writing 256 MiB buffered never has more than the limit charged, and its file
    is whole; afterwards the process is back where it was and the group is gone, and so is the
    empty group a killed replay left. Where this host
    has no memory controller to use, the bound says so and the block runs unbounded."""
    from mlpstorage_py.trace import page_cache

    found = page_cache.hierarchy()
    if isinstance(found, str):
        with page_cache.bounded(64 * MIB) as bound:
            assert bound == f"not bounded: {found}"
        pytest.skip(found)
    root, version = found
    stale = (root if version == "v1" else page_cache._own(root, version)) / f"{page_cache.PREFIX}{2 ** 22 + 1}"
    stale.mkdir()  # a replay's group whose mlpstorage was killed (no pid reaches 2^22 + 1)
    before = Path("/proc/self/cgroup").read_text()
    with page_cache.bounded(64 * MIB) as bound:
        assert bound.startswith(f"bounded: memory cgroup {version} ") and bound.endswith(", 64 MiB"), bound
        group = Path(bound.split()[4].rstrip(","))
        assert str(os.getpid()) in (group / "cgroup.procs").read_text().split()
        writer = "import os,sys; fd=os.open(sys.argv[1], os.O_CREAT|os.O_WRONLY); b=os.urandom(1<<20)\n" \
                 "for _ in range(256): os.write(fd, b)\nos.fsync(fd); os.close(fd)"
        subprocess.run([sys.executable, "-c", writer, str(tmp_path / "big")], check=True, timeout=300)
        peak = int((group / ("memory.peak" if version == "v2" else "memory.max_usage_in_bytes")).read_text())
        assert peak <= 64 * MIB, peak
    assert (tmp_path / "big").stat().st_size == 256 * MIB
    assert not group.exists() and not stale.exists() and Path("/proc/self/cgroup").read_text() == before
    with page_cache.bounded(0) as bound:
        assert bound == "not bounded: --page-cache-mib 0"


def test_the_runs_figures_count_the_time_its_requests_were_issued():
    """The original's MiB/s: each direction's bytes over the union of the kept streams' windows
    of it (32 MiB written in 1.9 s, read in 2 s), not over the whole trace (6 s)."""
    from mlpstorage_py.trace.replay_run import busy_seconds, original

    assert busy_seconds([(0.0, 1.0), (0.5, 2.0), (3.0, 4.0), (3.5, 3.6)]) == 3.0
    figures = original(checkpoint_like(), {"args": {}})
    assert figures["write"]["bytes"] == 32 * MIB and figures["write"]["mib_s"] == round(32 / 1.9, 2)
    assert figures["read"]["mib_s"] == 16.0


@needs_fio
def test_a_phased_replay_reads_back_what_it_wrote(cli, tmp_path):
    """Run for real: the read jobs read the write jobs' files (no other file is made), and each
    direction's time is its own phase's."""
    leaf = make_leaf(tmp_path / "leaf", checkpoint_like())
    target = tmp_path / "target"
    target.mkdir()
    result = cli("replay", leaf, "--directory", target)
    assert result.rc == 0, result.err
    assert sorted(p.name for p in target.iterdir()) == ["h0-python3-100-vda.0", "h0-python3-101-vda.0"]
    record = json.loads(next(leaf.glob("replay_*.json")).read_text())
    assert (record["replay"]["write"]["bytes"], record["replay"]["read"]["bytes"]) == (32 * MIB, 32 * MIB)
    rows = {row["job"]: row for row in record["jobs"]}
    writes = max(rows[f"h0-python3-{p}-vda-write"]["runtime_s"] for p in (100, 101))
    reads = max(rows[f"h0-python3-{p}-vda-read"]["runtime_s"] for p in (100, 101))
    assert record["replay"]["write"]["mib_s"] == round(32 / writes, 2)
    assert record["replay"]["read"]["mib_s"] == round(32 / reads, 2)


def bad(root: Path, case: str) -> Path:
    """A leaf argument that is wrong in the named way."""
    if case == "missing":
        return root / "nowhere"
    if case == "no-metadata":
        (root / "plain").mkdir()
        return root / "plain"
    if case == "no-trace":
        leaf = make_leaf(root, trace([seq_write()]))
        (leaf / "io_trace.json").unlink()
        return leaf
    return make_leaf(root, trace([seq_write()], level="none"))


@pytest.mark.parametrize("case, code, message", [
    ("missing", 3, "is not a directory"),
    ("no-metadata", 2, "is not a run leaf"),
    ("no-trace", 3, "has no io_trace.json"),
    ("level-none", 2, "level is 'none'"),
])
def test_bad_leaf_is_one_line_with_its_exit_code(cli, tmp_path, case, code, message):
    result = cli("replay", bad(tmp_path, case), "--directory", tmp_path)
    assert result.rc == code
    lines = [l for l in result.err.splitlines() if l.startswith("mlpstorage: error:")]
    assert len(lines) == 1 and message in lines[0], result.err
    assert not list(tmp_path.rglob("replay*"))


def test_missing_directory_and_missing_fio(cli, tmp_path, monkeypatch):
    """DIR that does not exist: configuration error 5; no fio on PATH: not found, 3."""
    leaf = make_leaf(tmp_path / "leaf", small_trace())
    result = cli("replay", leaf, "--directory", tmp_path / "absent")
    assert result.rc == 5 and "does not exist" in result.err
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    result = cli("replay", leaf, "--directory", tmp_path)
    assert result.rc == 3 and "fio is not installed" in result.err
    assert not list(leaf.glob("replay*"))  # nothing written before the run could start


@needs_fio
def test_a_directory_that_refuses_o_direct_is_named_before_fio_starts(tmp_path, monkeypatch):
    """The replay of an O_DIRECT run issues O_DIRECT requests: a directory whose filesystem
    refuses O_DIRECT (tmpfs before Linux 6.6; refused here by a stand-in for that kernel's open)
    is a usage error that says so, and nothing is written; this machine's directory accepts it."""
    import errno
    from mlpstorage_py.trace import replay_run

    leaf = make_leaf(tmp_path / "leaf", small_trace(), {"args": {"o_direct": True}})
    target = tmp_path / "target"
    target.mkdir()
    assert replay_run.direct_refused(target) is None and not list(target.iterdir())
    real_open = os.open

    def refusing(path, flags, *args, **kwargs):
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(replay_run.os, "open", refusing)
    with pytest.raises(UsageError, match="refuses O_DIRECT .Invalid argument.: the run used O_DIRECT"):
        replay_run.replay(leaf, target, None, None)
    assert not list(leaf.glob("replay_*")) and not list(target.iterdir())


@needs_fio
def test_fio_failing_is_a_failed_benchmark(cli, tmp_path):
    """A checked job that fio cannot run (a directory stands where its file goes): exit 6 with
    fio's line; no result written."""
    leaf = make_leaf(tmp_path / "leaf", small_trace())
    (tmp_path / "h0-python3-300-vda.0.0").mkdir()
    result = cli("replay", leaf, "--directory", tmp_path)
    assert result.rc == 6 and "fio on localhost exited with code" in result.err, result.err
    assert not list(leaf.glob("replay_*.json"))
    assert os.listdir(leaf).count("replay.fio") == 1


def fio_processes(target: Path) -> list[int]:
    """fio processes whose command line names `target`."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "comm").read_text().strip() == "fio" and \
                    str(target).encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@needs_fio
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_replay_leaves_no_fio(tmp_path, sig):
    """SIGINT or SIGTERM while fio runs (a rate-limited job, within the trace's bytes, that cannot
    finish first: 8 MiB at 64 KiB/s): exit 8, no fio left, no result written."""
    leaf = make_leaf(tmp_path / "leaf", small_trace())
    (leaf / "replay.fio").write_text("[h0-slow]\nrw=write\nbssplit=4k/100\nsize=8m\nrate=64k\n")
    target = tmp_path / "target"
    target.mkdir()
    code, err, _ = signal_when_ready([str(MLPSTORAGE), "replay", str(leaf), "--directory", str(target)],
                                     subprocess_env(tmp_path), lambda: bool(fio_processes(target)), sig)
    assert code == 8, err
    assert not fio_processes(target)
    assert not list(leaf.glob("replay_*.json"))


@needs_fio
@pytest.mark.heavy
def test_replay_on_two_simulated_hosts_runs_one_fio_per_host(cli, tmp_path, sim_hosts):
    """Two traced hosts replayed on two simulated hosts: one fio per host over the remote shell,
    each running only its own host's job; the bytes add up and nothing is left on the hosts
    (sim_hosts asserts that)."""
    leaf = make_leaf(tmp_path / "leaf", trace([seq_write(400, 4)], [seq_write(500, 2)], duration_s=0.5))
    target = tmp_path / "target"
    target.mkdir()
    first, second = sim_hosts.names[:2]
    result = cli("replay", leaf, "--directory", target, "--hosts", first, second)
    assert result.rc == 0, result.err
    record = json.loads(next(leaf.glob("replay_*.json")).read_text())
    assert record["hosts"] == [first, second]
    assert [argv[-2] for argv in record["argv"]] == [first, second]  # over the remote shell
    assert "--section=h0-python3-400-vda" in record["argv"][0][-1] and "--section=h1-python3-500-vda" in record["argv"][1][-1]
    assert "--section=h1" not in record["argv"][0][-1]
    assert {(row["host"], row["job"], row["write_bytes"]) for row in record["jobs"]} == \
        {(first, "h0-python3-400-vda", 4 * MIB), (second, "h1-python3-500-vda", 2 * MIB)}
    assert record["replay"]["write"]["bytes"] == 6 * MIB


@needs_fio
@pytest.mark.heavy
def test_an_interrupted_replay_on_simulated_hosts_leaves_no_fio_on_them(tmp_path, sim_hosts):
    """SIGINT while each simulated host runs its fio over the remote shell: exit 8, and no fio
    (nor anything else of ours) is left on any host (sim_hosts asserts the rest)."""
    leaf = make_leaf(tmp_path / "leaf", trace([seq_write(400, 4)], [seq_write(500, 2)]))
    slow = "rw=write\nbssplit=4k/100\nsize=2m\nrate=16k\n"  # 128 s a host, within the trace's 6 MiB
    (leaf / "replay.fio").write_text(f"[h0-slow]\n{slow}\n[h1-slow]\n{slow}")
    target = tmp_path / "target"
    target.mkdir()
    names = sim_hosts.names[:2]
    env = {**subprocess_env(tmp_path), **sim_hosts.env()}

    def both_running() -> bool:
        found = sim_hosts.running(str(target).encode(), names)
        return all(found.get(name) for name in names)

    code, err, _ = signal_when_ready([str(MLPSTORAGE), "replay", str(leaf), "--directory", str(target),
                                      "--hosts", *names], env, both_running, signal.SIGINT)
    assert code == 8, err
    left = sim_hosts.stray_processes()
    assert not left, [Path(f"/proc/{pid}/cmdline").read_bytes() for pid in left if Path(f"/proc/{pid}").exists()]
    assert not list(leaf.glob("replay_*.json"))


def test_a_training_runs_table_says_what_dlio_measures(tmp_path):
    """Under a training run's table, one line says what DLIO's train_io_mean measures against the
    table's MiB/s (issue 42); another leaf's table has no such line."""
    from mlpstorage_py.trace import replay_run

    figures = {d: {"bytes": 4 * MIB, "mib_s": 8.0, "p50_us": 512, "p95_us": 1024, "p99_us": 2048}
               for d in ("read", "write")}
    for metadata, expected in (({"benchmark_type": "training", "command": "run"}, 1),
                               ({"benchmark_type": "checkpointing", "command": "run"}, 0)):
        leaf = make_leaf(tmp_path / metadata["benchmark_type"], small_trace(), metadata)
        record = {"leaf": str(leaf), "original": figures, "replay": figures, "ratio": {}}
        lines = replay_run.table(record).splitlines()
        notes = [line for line in lines if "train_io_mean_MB_per_second" in line]
        assert len(notes) == expected, lines
        assert not notes or ("first to last read" in notes[0] and "time between epochs left out" in notes[0])


def test_the_bound_leaves_writers_the_files_they_held_dirty():
    """A writer that flushed only as it closed a file (kv-cache.py) held a file per clone dirty:
    the page-cache bound grows by that, the largest phase's sum; a writer that started its own
    writeback as it went (sync_file_range, the checkpoint engine) and a reader add nothing."""
    from mlpstorage_py.trace import replay as distiller
    from mlpstorage_py.trace.replay_run import dirty_held

    def job(phase: int, write: int, **options: str) -> distiller.Job:
        return distiller.Job(name="j", host="h", stream={}, options=list(options.items()), write_bytes=write,
                             read_bytes=0 if write else 1, phase=phase)

    kv = [job(0, 1, rw="write", numjobs="3", filesize="624m", fsync_on_close="1"),
          job(0, 1, rw="write", numjobs="3", nrfiles="3", filesize="261m", fsync_on_close="1"),
          job(0, 0, rw="read", numjobs="3", filesize="275m")]
    assert dirty_held(kv) == 3 * 624 * MIB + 3 * 261 * MIB
    checkpoint = [job(0, 1, rw="write", numjobs="1", filesize="427m", fsync_on_close="1", sync_file_range="write:1"),
                  job(1, 0, rw="read", numjobs="1", filesize="427m")]
    assert dirty_held(checkpoint) == 0
    phased = [job(0, 1, rw="write", numjobs="2", size="100m"), job(1, 1, rw="write", numjobs="1", filesize="300m")]
    assert dirty_held(phased) == 300 * MIB
