"""The I/O tracer on simulated client hosts (tests/simhosts.py): namespaces on one kernel and one
disk, so every host's tracer sees every host's I/O, and each host's record must hold only what
that host issued. The remote side is the trace agent over the cluster's ssh wrapper."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
import yaml

from conftest import all_leaves
from test_kvcache_cli import SMALL
from test_kvcache_hosts import run_args
from test_trace import Worker, near, ours, require_tracing

from mlpstorage_py.results import io_trace
from mlpstorage_py.trace import replay
from mlpstorage_py.trace.session import TraceSession

MIB = 2 ** 20
GONE_WITHIN_S = 60.0  # a generous cap on waiting for a condition, never a margin being measured


@pytest.fixture(scope="module")
def _tracefs_on_hosts(_sim_cluster) -> None:
    """tracefs mounted in each of the session's simulated hosts, once for the module (a host's
    sshd runs in a mount namespace of its own, with a fresh /sys: `ip netns exec` remounts it;
    the mount stays for the host's life)."""
    require_tracing()
    for host in _sim_cluster.names:
        done = _sim_cluster.ssh(host, "test -d /sys/kernel/tracing/events || mount -t tracefs nodev /sys/kernel/tracing")
        if done.returncode != 0:
            pytest.skip(f"cannot mount tracefs on {host}: {done.stderr.strip()}")


@pytest.fixture
def traced_hosts(_tracefs_on_hosts, sim_hosts):
    """The simulated hosts with tracefs mounted in each."""
    return sim_hosts


def dd(cluster, host: str, path, mib: int) -> None:
    done = cluster.ssh(host, "dd", "if=/dev/zero", f"of={path}", "bs=1M", f"count={mib}", "oflag=direct", "conv=fsync",
                       timeout=60)
    assert done.returncode == 0, done.stderr


def test_each_host_gets_what_it_issued(traced_hosts, tmp_path):
    """8 MiB written on h1 and 24 MiB on h2 (O_DIRECT), 4 MiB by a process of the root namespace
    (no traced host's): each host's device record holds its own bytes within 5 %, its dd is
    its stream, and the root namespace's write is unattributed. 8 MiB more written on h1
    through the page cache (and synced from here) reach the disk from the kernel's writeback
    threads: unattributed too, not h1's. No tracer is left anywhere."""
    h1, h2 = traced_hosts.names[:2]
    writer = Worker()
    try:
        with TraceSession([h1, h2], [str(tmp_path)], [str(traced_hosts.ssh_wrapper)], tmp_path) as session:
            assert all(traced_hosts.running(b"bpftrace", [h1, h2]).values())
            dd(traced_hosts, h1, tmp_path / "h1.bin", 8)
            dd(traced_hosts, h2, tmp_path / "h2.bin", 24)
            here = writer.do("write", tmp_path / "root.bin", 4, 1)
            buffered = traced_hosts.ssh(h1, "dd", "if=/dev/zero", f"of={tmp_path / 'h1-buffered.bin'}", "bs=1M",
                                        "count=8", timeout=60)
            assert buffered.returncode == 0
            os.sync()  # from the root namespace: what sync itself writes (all the disk's metadata) is not h1's
    finally:
        writer.close()
    record = session.record()
    assert record["level"] == "block" and record["complete"]
    for host, mib in ((h1, 8), (h2, 24)):
        mine = record["hosts"][host]
        assert mine["hostname"] == host and mine["complete"]
        (disk,) = mine["devices"].values()
        print(f"{host}: traced write {disk['write']['bytes']} of {mib * MIB}")
        assert near(disk["write"]["bytes"], mib * MIB), (host, disk["write"])
        streams = [s for s in mine["streams"] if s["comm"] == "dd"]
        assert len(streams) == 1 and near(streams[0]["ops"]["write"]["bytes"], mib * MIB)
        assert not [s for s in mine["streams"] if s["pid"] == writer.pid]
    rest = record["unattributed"]
    assert os.uname().nodename in rest["hostnames"] and h1 not in rest["hostnames"] and h2 not in rest["hostnames"]
    (theirs,) = [s for s in rest["streams"] if s["pid"] == writer.pid]
    print(f"unattributed: the root namespace's write {theirs['ops']['write']['bytes']} of {here}")
    assert near(theirs["ops"]["write"]["bytes"], here)
    writeback = sum(s["ops"]["write"]["bytes"] for s in rest["streams"] if s["kernel_thread"])
    print(f"unattributed: kernel threads wrote {writeback} (h1's 8 MiB through the page cache among it)")
    assert writeback >= 8 * MIB and "writeback" in rest["why"]
    assert not any(traced_hosts.running(str(tmp_path).encode()).values()) and not ours(tmp_path)


def test_interrupted_run_leaves_no_tracer_on_any_host(traced_hosts, tmp_path):
    """Ctrl-C during a traced run on two hosts: the agents stop their bpftrace (their stdin is
    closed), the record is complete, and nothing of ours runs on either host."""
    hosts = traced_hosts.names[:2]
    with pytest.raises(KeyboardInterrupt):
        with TraceSession(hosts, [str(tmp_path)], [str(traced_hosts.ssh_wrapper)], tmp_path) as session:
            dd(traced_hosts, hosts[0], tmp_path / "h1.bin", 2)
            os.kill(os.getpid(), signal.SIGINT)
            pytest.fail("SIGINT did not interrupt")
    assert not any(traced_hosts.running(str(tmp_path).encode()).values())
    record = session.record()
    (disk,) = record["hosts"][hosts[0]]["devices"].values()
    assert record["complete"] and near(disk["write"]["bytes"], 2 * MIB)


def test_a_cut_remote_shell_stops_the_remote_tracer(traced_hosts, tmp_path):
    """The remote shell of a host's tracer dies (as when mlpstorage is killed outright): the
    agent sees its stdin end and stops bpftrace on the host; the record marks the host
    incomplete, saying why."""
    host = traced_hosts.names[0]
    marker = str(tmp_path).encode()
    with TraceSession([host], [str(tmp_path)], [str(traced_hosts.ssh_wrapper)], tmp_path) as session:
        (tracer,) = session.tracers
        tracer.child.kill()
        end = time.monotonic() + GONE_WITHIN_S
        while any(traced_hosts.running(marker, [host]).values()) and time.monotonic() < end:
            time.sleep(0.1)
        assert not any(traced_hosts.running(marker, [host]).values()), "bpftrace outlived its remote shell"
    mine = session.record()["hosts"][host]
    assert not mine["complete"] and "did not print its maps" in mine["error"]


def test_a_traced_kv_run_on_two_hosts_keeps_each_ranks_work_on_its_host(cli, traced_hosts, results, other_fs_dir,
                                                                         tmp_path):
    """`--trace-io` on a KV run over two simulated hosts, end to end: one tracer per host, each
    host's record holding its own rank's work stream (marked, tagged with its rank) with what that
    rank says it wrote and read, within 5 %, and replay.fio has each host's job under its prefix."""
    config = tmp_path / "small.yaml"
    config.write_text(yaml.safe_dump(SMALL))
    hosts = traced_hosts.names[:2]
    res = cli(*run_args(results, other_fs_dir / "kv", config, hosts, 3, "--trace-io"))
    assert res.rc == 0, res.err
    (leaf,) = all_leaves(results)
    trace = io_trace.read(leaf)
    assert trace is not None and trace["complete"] and trace["level"] == "vfs", trace and trace.get("why")
    assert list(trace["hosts"]) == hosts
    for rank, host in enumerate(hosts):
        said = json.loads(next((leaf / "option_1" / "trial_0" / f"rank_{rank}").glob("kvcache_results_*.json"))
                          .read_text())["summary"]["cache_stats"]
        work = [s for s in trace["hosts"][host]["streams"] if s.get("work")]
        assert work and {s.get("rank") for s in work} == {rank}, work
        for op, key in (("write", "total_write_bytes"), ("read", "total_read_bytes")):
            traced = sum(s["ops"][op]["bytes"] for s in work)
            print(f"{host} rank {rank}: traced {op} {traced} of {said[key]}")
            assert near(traced, said[key]), (host, op, traced, said[key])
    assert sorted(replay.sections((leaf / "replay.fio").read_text())) == [0, 1]
    assert not any(traced_hosts.running(b"bpftrace", hosts).values())
