"""`--trace-io` on real runs (issue 27): a traced checkpoint run (its folder on a disk of its
own, a loop-mounted ext4: the block layer) and a traced KV run (its cache on tmpfs: the
read/write system calls), each leaf holding io_trace.json and a replay.fio that fio parses. The
bytes the run's ranks issued (their streams, told apart by the pids of their start-up lines)
equal what the run says it wrote and read, within 5 %. The disk of its own keeps the ranks'
interpreter and library reads (on the root disk) out of the count, and other processes of this
busy machine are other streams. CLOSED refuses the flag, and a host that cannot trace fails
the run before any work (exit 12)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from conftest import DATASIZE, MLPSTORAGE, REPO, all_leaves, subprocess_env
from faults import inject, leftover, mounted, pids_matching, wait_for, work_started
from test_faults_checkpointing import SMALL as SMALL_LLAMA
from test_kvcache_cli import SMALL as SMALL_KV
from test_trace import near, require_tracing

from mlpstorage_py.results import io_trace
from mlpstorage_py.trace import devices


def rank_bytes(trace: dict, op: str) -> dict[int, int]:
    """Bytes of `op` per rank, summed over the rank's work streams (one per device: what it did
    once it gave the run's mark) on every host."""
    found: dict[int, int] = {}
    for host in trace["hosts"].values():
        for stream in host["streams"]:
            if "rank" in stream and stream.get("work"):
                found[stream["rank"]] = found.get(stream["rank"], 0) + int(stream["ops"].get(op, {}).get("bytes", 0))
    return found


def fio_parses(path: Path) -> None:
    done = subprocess.run(["fio", "--parse-only", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def checkpoint(results: Path, folder: Path, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess:
    argv = [str(MLPSTORAGE), "open", "checkpointing", "llama3-8b", "run", "-np", "2", "-at", "b200", "-cm", "8",
            "-cf", str(folder), "-sn", "sys1", "-rd", str(results), "-ncw", "1", "-ncr", "1",
            "--skip-fs-separation-gate", *extra, "--params", *SMALL_LLAMA]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture
def own_disk(tmp_path) -> Iterator[Path]:
    """A 256 MiB ext4 on a loop device, mounted for the test: a block device only the run uses."""
    if not shutil.which("mkfs.ext4"):
        pytest.skip("a loop-mounted filesystem needs mkfs.ext4")
    image = tmp_path / "disk.img"
    with open(image, "wb") as fh:
        fh.truncate(256 << 20)
    subprocess.run(["mkfs.ext4", "-q", str(image)], check=True, capture_output=True)
    with mounted(tmp_path / "disk", "-o", "loop", str(image)) as mount:
        yield mount


def test_a_traced_checkpoint_run_counts_what_its_ranks_wrote_and_read(results, tmp_path, own_disk):
    require_tracing()
    folder = own_disk / "ckpt"
    folder.mkdir()
    assert devices.resolve(str(folder))["level"] == "block"
    env = subprocess_env(tmp_path)
    done = checkpoint(results, folder, env, "--trace-io")
    assert done.returncode == 0, done.stderr
    leaf = max(all_leaves(results))
    trace = io_trace.read(leaf)
    assert trace is not None and trace["level"] == "block" and trace["complete"], trace and trace.get("why")
    written, read = rank_bytes(trace, "write"), rank_bytes(trace, "read")
    assert sorted(written) == [0, 1], written
    for rank in (0, 1):  # what each rank says it moved (the engine's per-rank output)
        said = json.loads((leaf / f"{rank}_output.json").read_text())
        assert said["bytes_written"] > 0 and said["bytes_read"] > 0
        assert near(written[rank], said["bytes_written"]), (rank, written[rank], said["bytes_written"])
        assert near(read[rank], said["bytes_read"]), (rank, read[rank], said["bytes_read"])
    fio_parses(leaf / "replay.fio")
    text = (leaf / "replay.fio").read_text()
    # Per rank a write job, then (a phase behind a stonewall) a read job of the same file.
    names = [line[1:-1] for line in text.splitlines() if line.startswith("[h0-")]
    assert sorted(n.rsplit("-", 1)[1] for n in names) == ["read", "read", "write", "write"] and \
        names[2].endswith("-read") and names[1].endswith("-write"), text
    assert text.split(f"[{names[2]}]")[1].lstrip().startswith("stonewall"), text
    # The run's files (the tracer counted the shards the ranks closed) and its own writeback
    # starts (the engine's sync_file_range once a block) are in the jobs.
    assert text.count("\nnrfiles=") == 4 and text.count("\nsync_file_range=write:") == 2, text
    # Replayed once, on another directory of the same disk.
    target = tmp_path / "replay"
    target.mkdir()
    replay = subprocess.run([str(MLPSTORAGE), "replay", str(leaf), "--directory", str(target)], env=env,
                            capture_output=True, text=True, timeout=600)
    assert replay.returncode == 0, replay.stderr
    assert "read MiB/s" in replay.stdout and "write MiB/s" in replay.stdout, replay.stdout
    assert list(leaf.glob("replay_*.json"))


def test_a_traced_kv_run_counts_what_its_ranks_wrote_and_read(results, other_fs_dir, tmp_path):
    require_tracing()
    config = tmp_path / "small.yaml"
    config.write_text(yaml.safe_dump(SMALL_KV))
    argv = [str(MLPSTORAGE), "open", "kvcache", "run", "-np", "2", "--cache-dir", str(other_fs_dir / "kv"),
            "-rd", str(results), "-sn", "sys1", "--model", "tiny-1b", "--num-users", "3", "--duration", "3",
            "--trials", "1", "--inter-option-delay", "0", "--option", "1", "--config", str(config),
            "--enable-latency-tracing"]  # the reference's spelling of --trace-io
    done = subprocess.run(argv, env=subprocess_env(tmp_path), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    leaf = max(all_leaves(results))
    trace = io_trace.read(leaf)
    assert trace is not None and trace["level"] == "vfs" and "tmpfs" in trace["why"], trace and trace.get("why")
    assert trace["why"].endswith("(Rules 6.5.2)")  # the KV rule that describes this fallback
    written, read = rank_bytes(trace, "write"), rank_bytes(trace, "read")
    for result in leaf.rglob("kvcache_results_*.json"):
        rank = int(result.parent.name.split("_")[1])
        stats = json.loads(result.read_text())["summary"]["cache_stats"]
        assert near(written[rank], stats["total_write_bytes"]), (rank, written[rank], stats["total_write_bytes"])
        assert near(read[rank], stats["total_read_bytes"]), (rank, read[rank], stats["total_read_bytes"])
    fio_parses(leaf / "replay.fio")


def test_an_embedded_milvus_run_is_mlpstorages_own_work(results, other_fs_dir, tmp_path):
    """Milvus Lite runs inside mlpstorage: it marks itself once the work starts, so its stream
    from then on is the run's work (at least the vectors' bytes written), the one replay.fio
    replays."""
    require_tracing()
    store = other_fs_dir / "vdb"
    store.mkdir()
    argv = [str(MLPSTORAGE), "open", "vectordb", "FLAT", "datagen", "--num-vectors", "20000", "--dimension", "32",
            "--metric-type", "IP", "--storage-root", str(store), "-rd", str(results), "-sn", "sys1", "--trace-io"]
    run = subprocess.Popen(argv, env=subprocess_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = run.communicate(timeout=600)
    assert run.returncode == 0, err
    leaf = max(all_leaves(results))
    trace = io_trace.read(leaf)
    assert trace is not None and trace["level"] == "vfs", trace and trace.get("why")
    assert "Rules 6.5.2" not in trace["why"]  # a KV rule: not this benchmark's
    work = [s for h in trace["hosts"].values() for s in h["streams"] if s.get("work")]
    assert {s["pid"] for s in work} == {run.pid}, work
    assert sum(s["ops"]["write"]["bytes"] for s in work) >= 20000 * 32 * 4
    fio_parses(leaf / "replay.fio")
    jobs = [line for line in (leaf / "replay.fio").read_text().splitlines() if line.startswith("[h0-")]
    assert jobs and all(f"-{run.pid}-" in job for job in jobs), jobs


def test_closed_refuses_trace_io(cli, results):
    res = cli("closed", "kvcache", "run", "--cache-dir", "/dev/shm/x", "-rd", results, "-sn", "sys1", "--trace-io")
    assert res.rc == 2 and "--trace-io is not allowed in the closed division" in res.err
    assert not all_leaves(results)


def test_a_host_that_cannot_trace_fails_the_run_before_any_work(cli, results, tmp_path, monkeypatch):
    """No bpftrace here: exit 12, one line naming the host and why, a failed leaf, no engine run."""
    real = devices.shutil.which
    monkeypatch.setattr(devices.shutil, "which", lambda name: None if name == "bpftrace" else real(name))
    folder = tmp_path / "ckpt"
    folder.mkdir()
    res = cli("open", "checkpointing", "llama3-8b", "run", "-np", "2", "-at", "b200", "-cm", "8", "-cf", folder,
              "-sn", "sys1", "-rd", results, "-ncw", "1", "-ncr", "0", "--skip-fs-separation-gate", "--trace-io",
              "--params", *SMALL_LLAMA)
    assert res.rc == 12, res.err
    (error,) = [l for l in res.err.splitlines() if l.startswith("mlpstorage: error:")]
    assert "127.0.0.1: bpftrace is not on PATH" in error, error
    (leaf,) = all_leaves(results)
    meta = json.loads(next(leaf.glob("checkpointing_*_metadata.json")).read_text())
    assert meta["exit_status"] == 12 and not (leaf / "summary.json").exists() and not list(folder.rglob("*"))
    assert not (leaf / io_trace.FILE).exists()


def test_datasize_has_no_trace_flag(cli, results):
    """Only commands that do I/O take --trace-io."""
    res = cli("open", *DATASIZE[1:], "-sn", "sys1", "-rd", results, "--trace-io")
    assert res.rc == 2


def kv_argv(results: Path, cache: Path, config: Path, duration: int, *extra: str) -> list[str]:
    return [str(MLPSTORAGE), "open", "kvcache", "run", "-np", "2", "--cache-dir", str(cache), "-rd", str(results),
            "-sn", "sys1", "--model", "tiny-1b", "--num-users", "3", "--duration", str(duration), "--trials", "1",
            "--inter-option-delay", "0", "--option", "1", "--config", str(config), "--trace-io", *extra]


@pytest.mark.parametrize("fault, code", [("deadline", 7), ("SIGINT", 8), ("rank killed", 6)])
def test_the_tracer_ends_with_the_run_on_every_path(results, other_fs_dir, tmp_path, fault, code):
    """A deadline, Ctrl-C and a rank's death: the run exits with its code, the leaf still gets
    the trace of what happened, which says it is incomplete and why where the run was stopped
    (replay.fio's header too), and no bpftrace (nor rank) of the run is left."""
    require_tracing()
    config = tmp_path / "small.yaml"
    config.write_text(yaml.safe_dump(SMALL_KV))
    cache = other_fs_dir / "kv"
    env = subprocess_env(tmp_path)
    faults = {"SIGINT": lambda child: child.send_signal(signal.SIGINT),
              "rank killed": lambda child: os.kill(pids_matching("kv-cache.py", str(cache))[-1], signal.SIGKILL)}
    if fault == "deadline":
        done = subprocess.run(kv_argv(results, cache, config, 120, "--deadline", "3"), env=env, capture_output=True,
                              text=True, timeout=600)
        rc, err = done.returncode, done.stderr
        wait_for(lambda: not leftover(str(results)), 30, message=lambda: leftover(str(results)))
    else:
        rc, err, _ = inject(kv_argv(results, cache, config, 120), env, lambda: work_started(results), faults[fault],
                            str(results))  # the tracer's program lies in the results tree's scratch
    assert rc == code, err
    (leaf,) = all_leaves(results)
    trace = io_trace.read(leaf)
    assert trace is not None and trace["level"] == "vfs", trace
    # a rank killed in a trial stops the work where the kill ends the job inside the traced
    # block; where the trial had ended, the run goes on to its aggregates and fails after it
    stopped = {"deadline": "past its deadline", "SIGINT": "interrupted"}.get(fault, "stopped")
    if fault != "rank killed" or "stopped" in trace:
        assert trace["complete"] is False and stopped in trace["stopped"], trace.get("stopped")
    from mlpstorage_py.errors import UsageError
    from mlpstorage_py.trace import replay

    try:  # the job distilled from it says so too (where it caught any request of the work)
        assert "; INCOMPLETE: " in replay.distill(trace, None)
    except UsageError:
        pass
    assert json.loads(next(leaf.glob("kv_cache_*_metadata.json")).read_text())["exit_status"] == code


def test_kv_cache_py_on_its_own_traces_itself(other_fs_dir, tmp_path):
    """kv-cache.py --enable-latency-tracing (the reference's flag), run without mlpstorage: the
    record beside its result, this client's stream (rank 0) holding what it says it moved."""
    require_tracing()
    config = tmp_path / "small.yaml"
    config.write_text(yaml.safe_dump(SMALL_KV))
    output = tmp_path / "out" / "kv.json"
    argv = [sys.executable, str(REPO / "kv_cache_benchmark" / "kv-cache.py"), "--model", "tiny-1b", "--num-users", "2",
            "--duration", "2", "--gpu-mem-gb", "0", "--cpu-mem-gb", "0", "--cache-dir", str(other_fs_dir / "kv"),
            "--output", str(output), "--config", str(config), "--seed", "7", "--enable-latency-tracing"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=subprocess_env(tmp_path))
    assert done.returncode == 0, done.stderr
    trace = json.loads((tmp_path / "out" / "kv_io_trace.json").read_text())
    stats = json.loads(output.read_text())["summary"]["cache_stats"]
    assert trace["level"] == "vfs" and trace["complete"]
    assert stats["total_write_bytes"] > 0 and stats["total_read_bytes"] > 0
    assert near(rank_bytes(trace, "write")[0], stats["total_write_bytes"])
    assert near(rank_bytes(trace, "read")[0], stats["total_read_bytes"])
