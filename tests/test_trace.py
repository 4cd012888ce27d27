"""The I/O tracer (mlpstorage_py/trace/, issue 27) on this machine: a real bpftrace around a real
workload, at the block layer and, where no disk is behind the data, at the system calls; its
refusal when a host cannot trace; and its teardown on every path.

The workload runs in a worker process started (and past its imports) before the trace, so its
stream holds only the I/O it is told to do; other processes of this busy machine do I/O on the
same disk at the same time, which is why the bytes are checked on the worker's stream."""

from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from faults import pids_matching

from mlpstorage_py.errors import TraceUnavailable
from mlpstorage_py.launch import heartbeat
from mlpstorage_py.results import io_trace
from mlpstorage_py.trace import devices
from mlpstorage_py.trace.session import TraceSession, check

MIB = 2 ** 20
# A worker told what to do on stdin, one line a command, that answers each with one line.
WORKER = r"""
import mmap, os, sys
MIB = 1 << 20
buf = mmap.mmap(-1, MIB)
buf.write(b"m" * MIB)
print("ready", flush=True)
for line in sys.stdin:
    cmd, *args = line.split()
    if cmd == "write":  # write PATH MIB DIRECT: sequential 1 MiB writes from the start, then fsync
        flags = os.O_CREAT | os.O_WRONLY | (os.O_DIRECT if args[2] == "1" else 0)
        fd = os.open(args[0], flags, 0o600)
        os.posix_fallocate(fd, 0, int(args[1]) * MIB)  # one allocation: as contiguous as the disk allows
        for _ in range(int(args[1])):
            os.write(fd, buf)
        os.fsync(fd)
        os.close(fd)
        print("done", int(args[1]) * MIB, flush=True)
    elif cmd == "read":  # read PATH: 1 MiB reads to the end
        fd, total = os.open(args[0], os.O_RDONLY), 0
        while True:
            got = len(os.read(fd, MIB))
            if not got:
                break
            total += got
        os.close(fd)
        print("done", total, flush=True)
    elif cmd == "bufwrite":  # bufwrite PATH MIB: buffered writes, no fsync (the kernel writes them back)
        fd = os.open(args[0], os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
        for _ in range(int(args[1])):
            os.write(fd, buf)
        os.close(fd)
        print("done", int(args[1]) * MIB, flush=True)
    elif cmd == "mark":  # the run's work starts here (launch/heartbeat.mark_work)
        try:
            os.getpgid(int(args[0]))
        except OSError:
            pass
        print("done", 0, flush=True)
    elif cmd == "fork":  # fork PATH MIB: a forked child writes (O_DIRECT) and says its pid
        child = os.fork()
        if child == 0:
            fd = os.open(args[0], os.O_CREAT | os.O_WRONLY | os.O_DIRECT, 0o600)
            for _ in range(int(args[1])):
                os.write(fd, buf)
            os.fsync(fd)
            os._exit(0)
        os.waitpid(child, 0)
        print("done", child, flush=True)
"""


@functools.cache
def unavailable() -> str | None:
    """Why bpftrace cannot trace here, or None; tracefs is mounted where it is not (as root)."""
    if os.geteuid() != 0:
        return "tracing needs root"
    found = devices.facts([])
    if not found["tracefs"]:
        subprocess.run(["mount", "-t", "tracefs", "nodev", devices.TRACEFS[0]], capture_output=True)
        found = devices.facts([])
    wrong = devices.problems({**found, "paths": [{"level": "block"}]})
    return "; ".join(wrong) or None


def require_tracing() -> None:
    """Skip, saying why, where this machine cannot trace (not root, no bpftrace, tracefs, BTF)."""
    if unavailable():
        pytest.skip(unavailable())


class Worker:
    def __init__(self) -> None:
        self.child = subprocess.Popen([sys.executable, "-c", WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      text=True)
        assert self.child.stdout.readline().strip() == "ready"
        self.pid = self.child.pid

    def do(self, *command: object) -> int:
        self.child.stdin.write(" ".join(str(c) for c in command) + "\n")
        self.child.stdin.flush()
        word, amount = self.child.stdout.readline().split()
        assert word == "done"
        return int(amount)

    def close(self) -> None:
        self.child.stdin.close()
        self.child.wait(timeout=60)


@pytest.fixture
def worker():
    made = Worker()
    yield made
    made.close()


def cold(path: Path) -> None:
    """Nothing of the file in the page cache: the next read goes to the device."""
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def ours(workdir: Path) -> list[int]:
    """Live bpftrace processes running one of this session's programs (they lie in workdir)."""
    return pids_matching("bpftrace", str(workdir))


def stream(host: dict, pid: int, device: str) -> dict:
    (found,) = [s for s in host["streams"] if s["pid"] == pid and s["device"] == device]
    return found


def near(traced: int, done: int) -> bool:
    return abs(traced - done) <= 0.05 * done


def block_dir(tmp_path: Path) -> tuple[Path, str]:
    """A directory on a disk (the repository's filesystem, not /dev/shm) and the disk's name."""
    where = devices.resolve(str(tmp_path))
    if where["level"] != "block":
        pytest.skip(f"{tmp_path} has no block device behind it ({where['why']})")
    return tmp_path, where["devices"][0]["name"]


def test_block_trace_of_a_direct_write_and_a_cold_read(tmp_path, worker):
    """16 MiB written with O_DIRECT and fsync, then read back cold: the worker's stream holds
    those bytes within 5 %, in sequential requests; the device's record has sizes, latency
    percentiles and a queue-depth series. The file is written once before the trace, so the
    traced write lands on allocated blocks: the filesystem's allocation (its metadata writes,
    and extents the busy disk scatters) is not what the sequential share is checked on."""
    require_tracing()
    folder, disk = block_dir(tmp_path)
    data = folder / "data.bin"
    worker.do("write", data, 16, 1)
    with TraceSession(["127.0.0.1"], [str(folder)], None, tmp_path) as session:
        written = worker.do("write", data, 16, 1)
        cold(data)
        read = worker.do("read", data)
    record = session.record()
    assert record["level"] == "block" and record["complete"], record.get("why")
    host = record["hosts"]["127.0.0.1"]
    assert host["hostname"] == os.uname().nodename and host["complete"]
    mine = stream(host, worker.pid, disk)
    write, got = mine["ops"]["write"], mine["ops"]["read"]
    print(f"traced write {write['bytes']} of {written}, read {got['bytes']} of {read}; "
          f"sequential {write['sequential_share']}/{got['sequential_share']}")
    assert near(write["bytes"], written) and near(got["bytes"], read), mine
    assert write["size_hist"] and got["size_hist"] and mine["ops"]["flush"]["requests"] >= 1
    assert write["sequential_share"] >= 0.7, mine
    device = host["devices"][disk]
    assert device["level"] == "block" and device["write"]["bytes"] >= 0.95 * written
    for op in ("read", "write"):
        assert device[op]["size_hist"] and device[op]["latency_us_hist"]
        assert device[op]["latency_samples"] < io_trace.MIN_SAMPLES and device[op]["p50_us"] is None or \
            0 < device[op]["p50_us"] <= device[op]["p95_us"] <= device[op]["p99_us"]
    assert device["queue_depth"] and 0 <= device["read_share_bytes"] <= 1
    assert not ours(tmp_path)


def test_the_work_mark_starts_a_stream_and_passes_to_forks(tmp_path, worker):
    """A process's I/O before it gives the run's mark (heartbeat.mark_work) and after are two
    streams, only the second the run's work (another run's mark is not this run's); a child it
    forks after the mark is the run's too. Each op of a stream says when its requests were first
    and last issued (the writes before the cold read) and which files the work closed."""
    require_tracing()
    folder, disk = block_dir(tmp_path)
    for name in ("before", "after"):
        worker.do("write", folder / name, 4, 1)  # allocated before the trace, as in the test above
    mark, other = heartbeat.new_mark(), heartbeat.new_mark()
    with TraceSession(["127.0.0.1"], [str(folder)], None, tmp_path, mark) as session:
        worker.do("mark", other)  # another traced run's mark (a second mlpstorage on the host)
        before = worker.do("write", folder / "before", 4, 1)
        worker.do("mark", mark)
        after = worker.do("write", folder / "after", 4, 1)
        child = worker.do("fork", folder / "child", 2)
        cold(folder / "after")
        read = worker.do("read", folder / "after")
    host = session.record()["hosts"]["127.0.0.1"]
    (start,) = [s for s in host["streams"] if s["pid"] == worker.pid and s["device"] == disk and not s["work"]]
    (work,) = [s for s in host["streams"] if s["pid"] == worker.pid and s["device"] == disk and s["work"]]
    (forked,) = [s for s in host["streams"] if s["pid"] == child and s["device"] == disk]
    assert near(start["ops"]["write"]["bytes"], before), start
    assert near(work["ops"]["write"]["bytes"], after) and near(work["ops"]["read"]["bytes"], read), work
    assert forked["work"] and near(forked["ops"]["write"]["bytes"], 2 * MIB), forked
    write, got = work["ops"]["write"], work["ops"]["read"]
    assert start["ops"]["write"]["last_s"] <= write["first_s"] <= write["last_s"] < got["first_s"] <= got["last_s"]
    assert write["in_flight"] > 0 and got["in_flight"] > 0
    # the files the work closed, with their sizes: one written, the same one read (the test's own
    # open of it for the cache drop is not the work's; the child exits without a close)
    assert (write["files"], write["file_bytes"], got["files"], got["file_bytes"]) == (1, 4 * MIB, 1, 4 * MIB), work
    assert start["ops"]["write"]["files"] == 0 and forked["ops"]["write"]["files"] == 0


def test_the_kernels_writeback_of_the_works_files_is_the_works(tmp_path, worker):
    """Buffered writes of a marked process with no fsync: the kernel's threads write them back
    (a `sync` from another process starts it), and those requests are the writer's stream, so
    its replay writes all it wrote."""
    require_tracing()
    folder, disk = block_dir(tmp_path)
    mark = heartbeat.new_mark()
    with TraceSession(["127.0.0.1"], [str(folder)], None, tmp_path, mark) as session:
        worker.do("mark", mark)
        written = worker.do("bufwrite", folder / "buffered", 16)
        subprocess.run(["sync"], check=True, timeout=120)
    host = session.record()["hosts"]["127.0.0.1"]
    (work,) = [s for s in host["streams"] if s["pid"] == worker.pid and s["device"] == disk and s["work"]]
    assert near(work["ops"]["write"]["bytes"], written), work


def test_vfs_fallback_on_tmpfs(other_fs_dir, tmp_path, worker):
    """A data path on tmpfs (no disk behind it) is traced at the system calls: level vfs, the
    record says why, and the worker's 4 MiB written and read back are there within 5 %."""
    require_tracing()
    data = other_fs_dir / "data.bin"
    with TraceSession(["127.0.0.1"], [str(other_fs_dir)], None, tmp_path) as session:
        written = worker.do("write", data, 4, 0)
        read = worker.do("read", data)
    record = session.record()
    assert record["level"] == "vfs" and "system calls" in record["why"] and "6.5.2" not in record["why"]  # the KV rule is added by a KV run
    host = record["hosts"]["127.0.0.1"]
    (name,) = host["devices"]
    assert name.startswith("tmpfs:") and host["devices"][name]["level"] == "vfs"
    mine = stream(host, worker.pid, name)
    print(f"traced write {mine['ops']['write']['bytes']} of {written}, read {mine['ops']['read']['bytes']} of {read}")
    assert near(mine["ops"]["write"]["bytes"], written) and near(mine["ops"]["read"]["bytes"], read), mine
    assert mine["ops"]["write"]["size_hist"] == {str(MIB): 4} and mine["ops"]["write"]["sequential_share"] >= 0.7
    assert mine["ops"]["flush"]["requests"] == 1
    assert host["devices"][name]["write"]["latency_samples"] == host["devices"][name]["write"]["requests"] >= 4


def test_object_store_path_is_not_traced(tmp_path):
    """An s3:// data path starts no tracer (no tools needed) and the record says why."""
    with TraceSession(["127.0.0.1"], ["s3://bucket/data"], None, tmp_path) as session:
        pass
    record = session.record()
    assert record["level"] == "object" and "object store" in record["why"]
    assert record["hosts"]["127.0.0.1"]["devices"] == {} and record["complete"]


def test_check_names_each_host_that_cannot_trace(tmp_path, monkeypatch):
    """No bpftrace on PATH, here (shutil.which) and on two remote hosts (a remote shell that
    runs the command here with PATH=/nonexistent), a host whose remote shell fails and one
    where we are not root (the command run as nobody): one TraceUnavailable (exit 12) naming
    each, and nothing started."""
    shell = tmp_path / "remote-shell"
    shell.write_text('#!/bin/sh\nhost=$1; shift\n'
                     'if [ "$host" = down-host ]; then echo "ssh: connect to host down-host: Connection refused" >&2; '
                     'exit 255; fi\n'
                     'if [ "$host" = user-host ]; then exec setpriv --reuid 65534 --regid 65534 --clear-groups "$@"; fi\n'
                     'exec env PATH=/nonexistent "$@"\n')
    shell.chmod(0o755)
    as_user = os.geteuid() == 0 and shutil.which("setpriv") is not None  # a host where we are not root
    hosts = ["far-host-a", "far-host-b", "down-host"] + (["user-host"] if as_user else [])
    with pytest.raises(TraceUnavailable) as refused:
        check(hosts, [str(tmp_path)], [str(shell)])
    text = str(refused.value)
    assert refused.value.exit_code == 12 and f"{len(hosts)} of {len(hosts)}" in text
    assert not as_user or "user-host: not root (euid 65534; bpftrace needs root)" in text
    assert "far-host-a: bpftrace is not on PATH" in text and "far-host-b: bpftrace is not on PATH" in text
    assert "down-host: cannot run the trace agent (ssh: connect to host down-host: Connection refused)" in text

    real = devices.shutil.which
    monkeypatch.setattr(devices.shutil, "which", lambda name: None if name == "bpftrace" else real(name))
    with pytest.raises(TraceUnavailable, match=r"127\.0\.0\.1: bpftrace is not on PATH"):
        with TraceSession(["127.0.0.1"], [str(tmp_path)], None, tmp_path):
            pytest.fail("the session started")
    assert not list(tmp_path.glob("*.bt")) and not ours(tmp_path)


def test_a_work_directory_a_host_cannot_see_is_named(tmp_path):
    """The program file lies in the session's work directory, which every host must share: a
    host that cannot see it (here: a remote shell that hides the directory in a mount namespace
    of its own) makes the session refuse, naming the host and the reason, with nothing left."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare (util-linux) for a private mount namespace")
    work = tmp_path / "work"
    work.mkdir()
    shell = tmp_path / "remote-shell"
    shell.write_text('#!/bin/sh\nshift\nexec unshare -m --propagation private '
                     'sh -c \'mount -t tmpfs none "$0" && exec "$@"\' ' f'{work} "$@"\n')
    shell.chmod(0o755)
    with pytest.raises(TraceUnavailable, match=r"far-host: bpftrace did not start: .* is not visible on this host"):
        with TraceSession(["far-host"], [str(tmp_path)], [str(shell)], work):
            pytest.fail("the session started")
    assert not ours(tmp_path) and not list(work.glob("*.bt"))


@pytest.mark.parametrize("raised", [RuntimeError, KeyboardInterrupt])
def test_stops_cleanly_when_the_run_fails(tmp_path, worker, raised):
    """An exception in the traced block, or Ctrl-C (SIGINT to us), stops bpftrace: none is
    left, and the record still holds what was traced."""
    require_tracing()
    folder, disk = block_dir(tmp_path)
    with pytest.raises(raised):
        with TraceSession(["127.0.0.1"], [str(folder)], None, tmp_path) as session:
            assert ours(tmp_path)
            written = worker.do("write", folder / "data.bin", 4, 1)
            if raised is KeyboardInterrupt:
                os.kill(os.getpid(), signal.SIGINT)
                pytest.fail("SIGINT did not interrupt")
            raise raised("the run failed")
    assert not ours(tmp_path)
    record = session.record()
    assert record["complete"]
    assert near(stream(record["hosts"]["127.0.0.1"], worker.pid, disk)["ops"]["write"]["bytes"], written)


def test_a_killed_session_takes_its_tracer_with_it(tmp_path):
    """mlpstorage killed outright (SIGKILL: no teardown of ours runs): the kernel ends its
    bpftrace (the death signal it asked for), so none is left."""
    require_tracing()
    folder, _ = block_dir(tmp_path)
    code = ("import sys\nfrom pathlib import Path\nfrom mlpstorage_py.trace.session import TraceSession\n"
            "with TraceSession(['127.0.0.1'], [sys.argv[1]], None, Path(sys.argv[1])):\n"
            "    print('traced', flush=True)\n    sys.stdin.read()\n")
    child = subprocess.Popen([sys.executable, "-c", code, str(folder)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    try:
        assert child.stdout.readline().strip() == "traced" and ours(tmp_path)
    finally:
        child.kill()
        child.wait()
    end = time.monotonic() + 60  # a cap on waiting for the kernel's signal, not a margin measured
    while ours(tmp_path) and time.monotonic() < end:
        time.sleep(0.1)
    assert not ours(tmp_path), "bpftrace outlived the session that started it"


def test_a_dead_tracer_is_marked_incomplete(tmp_path):
    """bpftrace killed under the session: the host's record says it is incomplete, and why."""
    require_tracing()
    folder, _ = block_dir(tmp_path)
    with TraceSession(["127.0.0.1"], [str(folder)], None, tmp_path) as session:
        (pid,) = ours(tmp_path)
        os.kill(pid, signal.SIGKILL)
    record = session.record()
    host = record["hosts"]["127.0.0.1"]
    assert not record["complete"] and not host["complete"]
    assert "did not print its maps" in host["error"]
    assert not ours(tmp_path)


def test_parse_sums_repeated_keys_and_splits_by_hostname():
    """The tracer's output read back without bpftrace: keys that print alike are summed, a
    host gets its own namespace's requests, the rest is unattributed, comm may hold commas."""
    from mlpstorage_py.trace.bpf import KTHREAD_BIT, Target
    from mlpstorage_py.trace.parse import Collector

    mine, theirs, dev = 4026532001, 4026531838, 254 << 20
    owner = (mine << 32) | 4242
    kworker = (theirs << 32) | KTHREAD_BIT | 77
    collector = Collector("h1", {"h1", "h2"})
    lines = ['{"type": "attached_probes", "data": {"probes": 9}}', '{"type": "printf", "data": "ready 100\\n"}',
             '{"type": "printf", "data": "200\\n"}',
             f'{{"type": "map", "data": {{"@uts": {{"{mine}": "h1", "{theirs}": "vm"}}}}}}',
             f'{{"type": "map", "data": {{"@qi": {{"{mine},{dev}": 5, "{theirs},{dev}": 2}}}}}}',
             f'{{"type": "map", "data": {{"@qd": {{"{mine},{dev}": 2}}}}}}',
             f'{{"type": "map", "data": {{"@rq": {{"{mine},{dev},1": 3, "{mine},{dev},1": 1, "{theirs},{dev},1": 9}}}}}}',
             f'{{"type": "map", "data": {{"@by": {{"{mine},{dev},1": {3 * MIB}, "{mine},{dev},1": {MIB}}}}}}}',
             f'{{"type": "hist", "data": {{"@lat": {{"{mine},{dev},1": [{{"min": 64, "max": 127, "count": 3}}], '
             f'"{mine},{dev},1": [{{"min": 1024, "max": 2047, "count": 1}}]}}}}}}',
             f'{{"type": "map", "data": {{"@seq": {{"{mine},{dev},1": 3}}}}}}',
             f'{{"type": "map", "data": {{"@sby": {{"{owner},{dev},1,a,b": {4 * MIB}, "{kworker},{dev},1,kworker/u8:1": 5}}}}}}',
             f'{{"type": "map", "data": {{"@srq": {{"{owner},{dev},1,a,b": 4, "{kworker},{dev},1,kworker/u8:1": 1}}}}}}',
             '{"type": "printf", "data": "end\\n"}', "not json", '{"type": "agent_ended", "exit": 0}']
    for line in lines:
        collector.feed(line)
    assert collector.ready and collector.ended and collector.agent_exit == 0
    targets = [Target("vda", dev, "block")]
    own = collector.part(True, targets)
    write = own["devices"]["vda"]["write"]
    assert write["requests"] == 4 and write["bytes"] == 4 * MIB and write["latency_us_hist"] == {"64": 3, "1024": 1}
    assert write["latency_samples"] == 4 and write["p50_us"] is None  # fewer than io_trace.MIN_SAMPLES
    assert write["sequential_share"] == 0.75
    assert own["devices"]["vda"]["queue_depth"] == [[0.1, 3.0]] and own["devices"]["vda"]["read_share_bytes"] == 0
    (stream,) = own["streams"]
    assert (stream["pid"], stream["comm"], stream["kernel_thread"]) == (4242, "a,b", False)
    assert stream["ops"]["write"]["bytes"] == 4 * MIB and stream["ops"]["read"]["sequential_share"] is None
    rest = collector.part(False, targets)
    assert rest["devices"]["vda"]["write"]["requests"] == 9 and rest["devices"]["vda"]["queue_depth"] == [[0.1, 2.0]]
    assert [(s["pid"], s["kernel_thread"]) for s in rest["streams"]] == [(77, True)]


def test_queue_depth_series_stays_bounded():
    """Hours of samples keep at most MAX_POINTS points, each the mean of its samples."""
    from mlpstorage_py.trace.parse import MAX_POINTS, Series

    series = Series()
    for i in range(10 * MAX_POINTS + 7):
        series.add(i / 10, i % 2 * 4)  # 0, 4, 0, 4...: every merged point means 2
    points = series.values()
    assert len(points) <= MAX_POINTS and points[0][0] == 0.0
    assert all(value == 2.0 for _, value in points[:-1]) and points[-1][0] > points[-2][0]
