"""Every byte and file of the run (issue 42): a replay moves the trace's bytes within 1 % where the
files' mean size does not divide them (the last file partway), and a stream that only read gets
the files it read even where its write op counted 0 bytes. Real fio, fio's own byte counts."""

from __future__ import annotations

import json

from test_trace_replay import MIB, make_leaf, needs_fio, op, sections, trace, windowed, with_files

from mlpstorage_py.trace import replay

KV_META = {"benchmark_type": "kv_cache", "command": "run", "args": {}}


def kv_uneven() -> dict:
    """A KV rank: 21 MiB written into 5 files (4.2 MiB each, not a whole number of 1 MiB blocks
    per file), 9 MiB read out of 4 files, over overlapping windows."""
    stream = {"pid": 103, "comm": "python3", "device": "vda", "work": True, "in_flight_mean": 1.0, "fsyncs": 5,
              "ops": {"write": op(21, {MIB: 21}, 0.9), "read": op(9, {MIB: 9}, 0.8), "flush": op(0, {}, 0.0, {}, 0)}}
    stream = windowed(stream, write=(0.1, 2.1), read=(0.5, 1.5))
    return trace([with_files(stream, write=(5, 21 * MIB), read=(4, 9 * MIB))], duration_s=3.0)


def training_reader() -> dict:
    """A DLIO reader: 16 files of 1 MiB read, its write op present with 0 bytes."""
    stream = {"pid": 200, "comm": "python3", "device": "vda", "work": True, "in_flight_mean": 1.0,
              "ops": {"read": op(64, {256 * 1024: 64}, 1.0), "write": op(0, {}, 0.0, {}, 0)}}
    stream = windowed(stream, read=(0.1, 1.1))
    stream["ops"]["write"].update(first_s=None, last_s=None)
    return trace([with_files(stream, read=(16, 16 * MIB))], duration_s=1.5)


def replayed(cli, tmp_path, record: dict, meta: dict) -> dict:
    leaf = make_leaf(tmp_path / "leaf", record, meta)
    target = tmp_path / "target"
    target.mkdir()
    result = cli("replay", leaf, "--directory", target, "--page-cache-mib", "0")
    assert result.rc == 0, result.err
    return json.loads(next(leaf.glob("replay_*.json")).read_text())


@needs_fio
def test_a_kv_replay_moves_every_byte_when_files_do_not_divide_them(cli, tmp_path):
    jobs = sections(replay.distill(kv_uneven(), KV_META))
    write = jobs["h0-python3-103-vda-write"]
    assert int(write["nrfiles"]) * replay.fio_size(write["filesize"]) >= replay.fio_size(write["size"])
    record = replayed(cli, tmp_path, kv_uneven(), KV_META)
    for direction, traced in (("write", 21 * MIB), ("read", 9 * MIB)):
        moved = record["replay"][direction]["bytes"]
        assert abs(moved - traced) <= 0.01 * traced, (direction, moved, traced)


@needs_fio
def test_a_read_only_stream_replays_the_files_it_read(cli, tmp_path):
    jobs = sections(replay.distill(training_reader(), {"args": {}}))
    (job,) = [j for name, j in jobs.items() if name != "global"]
    assert (job["nrfiles"], job["filesize"]) == ("16", "1m")
    record = replayed(cli, tmp_path, training_reader(), {"args": {}})
    assert abs(record["replay"]["read"]["bytes"] - 16 * MIB) <= 0.01 * 16 * MIB
    assert len(list((tmp_path / "target").iterdir())) == 16


@needs_fio
def test_print_command_is_what_replay_runs_and_plain_fio_moves_the_same(cli, tmp_path):
    """--print-command runs nothing and prints a command a shell runs as it is; fio run from it
    moves the bytes mlpstorage replay does, and the job's header says how and why."""
    import subprocess

    leaf = make_leaf(tmp_path / "leaf", kv_uneven(), KV_META)
    target = tmp_path / "target"
    target.mkdir()
    printed = cli("replay", leaf, "--directory", target, "--print-command", "--page-cache-mib", "0")
    assert printed.rc == 0, printed.err
    assert not list(target.iterdir()) and not list(leaf.glob("replay_*.json"))
    header = (leaf / "replay.fio").read_text()
    assert "--print-command" in header and "on another array" in header
    command = printed.out.strip().splitlines()[-1]
    done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout[done.stdout.find("{"):])
    moved = {d: sum(j[d]["io_bytes"] for j in report["jobs"]) for d in ("read", "write")}
    assert abs(moved["write"] - 21 * MIB) <= 0.01 * 21 * MIB and abs(moved["read"] - 9 * MIB) <= 0.01 * 9 * MIB
