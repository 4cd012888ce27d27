"""A leaf's replay.fio and io_trace.json are data from someone else's tree (issue 39): hostile job
files are refused before fio starts (exit 13, one line naming the option and its line), run
nothing and write nothing; hostile trace fields never leave their comment; a well-formed job,
distilled or edited within the allowlist, still replays with real fio."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from test_trace_replay import FIO, MIB, make_leaf, needs_fio, seq_write, small_trace, trace

from mlpstorage_py.errors import Refused
from mlpstorage_py.trace import job_check, replay


def hostile_cases(marker: Path, outside: Path) -> dict[str, tuple[str, str]]:
    """name -> (the job file's text, what the refusal must name); each would run a program,
    write outside --directory or move 100x the trace's bytes if fio were given it."""
    job = "[h0-python3-300-vda]\nrw=write\nbssplit=1m/100\nsize=1m\n"
    return {
        "exec_prerun": (job + f"exec_prerun=touch {marker}\n", "line 5: option 'exec_prerun' (a command hook)"),
        "exec_postrun": (job + f"exec_postrun=touch {marker}\n", "line 5: option 'exec_postrun' (a command hook)"),
        "ioengine_exec": (job.replace("size=1m\n", f"size=1m\nioengine=exec\nprogram=/usr/bin/touch\nparameters={marker}\n"),
                          "line 5: ioengine='exec' (an engine outside"),
        "ioengine_external": (job + "ioengine=external:/tmp/evil.so\n", "line 5: ioengine='external:/tmp/evil.so'"),
        "filename_device": (job + "filename=/dev/null\n", "line 5: option 'filename' (a path or device outside --directory)"),
        "filename_outside": (job + f"filename={outside / 'written'}\n", "line 5: option 'filename'"),
        "directory": (job + f"directory={outside}\n", "line 5: option 'directory' (a path outside --directory)"),
        "opendir": (job + f"opendir={outside}\n", "line 5: option 'opendir'"),
        "filename_format": (job + "filename_format=../../escaped.$jobnum\n", "line 5: filename_format="),
        "include": (f"include {outside / 'more.fio'}\n" + job, "line 1: option 'include' (another job file)"),
        "environment": (job + "size=${HUGE}\n", "line 5: 'size=${HUGE}' reads an environment variable"),
        "trigger": (job + f"trigger-remote-cmd=touch {marker}\n", "line 5: option 'trigger-remote-cmd' (a command hook)"),
        "global_hook": (f"[global]\nexec_prerun=touch {marker}\n" + job, "line 2: option 'exec_prerun'"),
        "size_100x": ("[h0-python3-300-vda]\nrw=write\nbssplit=1m/100\nsize=1200m\n",
                      "lay out or move 1258291200 B, beyond the trace's 12582912 B"),
        "files_100x": ("[h0-python3-300-vda]\nrw=write\nbssplit=1m/100\nsize=1m\nnrfiles=1200\nfilesize=1m\n",
                       "beyond the trace's 12582912 B"),
        "clones_100x": ("[h0-python3-300-vda]\nrw=write\nbssplit=1m/100\nsize=8m\nnumjobs=150\n",
                        "beyond the trace's 12582912 B"),
        "section_name": ("[../../h0]\nrw=write\n", "line 1: '[../../h0]' is not a job name"),
    }


@needs_fio
@pytest.mark.parametrize("case", sorted(hostile_cases(Path("m"), Path("o"))))
def test_a_hostile_job_file_runs_nothing_and_writes_nothing(cli, tmp_path, case):
    """Real fio on PATH, a real leaf: exit 13, one line naming the option and its line, no marker,
    nothing in --directory or outside it, no result in the leaf, the leaf's file left as it was."""
    marker, outside = tmp_path / "marker", tmp_path / "outside"
    outside.mkdir()
    text, named = hostile_cases(marker, outside)[case]
    leaf = make_leaf(tmp_path / "leaf", small_trace())  # 8 MiB written, 4 MiB read
    (leaf / "replay.fio").write_text(text)
    target = tmp_path / "target"
    target.mkdir()
    result = cli("replay", leaf, "--directory", target)
    assert result.rc == 13, result.err
    errors = [line for line in result.err.splitlines() if line.startswith("mlpstorage: error:")]
    assert len(errors) == 1 and named in errors[0] and "refused" in errors[0], result.err
    assert not marker.exists() and not list(target.iterdir()) and not list(outside.iterdir())
    assert sorted(p.name for p in leaf.iterdir()) == \
        ["checkpointing_20261202_070000_metadata.json", "io_trace.json", "replay.fio"]
    assert (leaf / "replay.fio").read_text() == text


@needs_fio
def test_the_check_runs_before_a_job_goes_to_another_host(cli, tmp_path):
    """--hosts: the same refusal before any remote shell is started."""
    marker = tmp_path / "marker"
    leaf = make_leaf(tmp_path / "leaf", small_trace())
    (leaf / "replay.fio").write_text(f"[h0-python3-300-vda]\nrw=write\nbssplit=1m/100\nsize=1m\nexec_prerun=touch {marker}\n")
    result = cli("replay", leaf, "--directory", tmp_path, "--hosts", "127.0.0.1")
    assert result.rc == 13 and "exec_prerun" in result.err and not marker.exists()


def hostile_trace(marker: Path) -> dict:
    """A trace whose names try to leave their comment and whose pid tries to leave its job name."""
    stream = seq_write(300, 8)
    stream["comm"] = f"x\nexec_prerun=touch {marker}\n[global]"
    stream["device"] = f"vda\rexec_postrun=touch {marker}"
    stream["pid"] = f"1]\nexec_prerun=touch {marker}\n[h0"
    record = trace([stream], duration_s=0.5)
    record["hosts"]["host0"]["hostname"] = f"h\nfilename=/dev/null"
    return record


@needs_fio
def test_names_from_io_trace_never_leave_their_comment(cli, tmp_path):
    """io_trace.json is data too: newlines in a process, device or host name and a pid that is no
    number end up inside comments and a job name of safe characters; the replay runs, moves the
    trace's bytes, and runs nothing it names."""
    marker = tmp_path / "marker"
    leaf = make_leaf(tmp_path / "leaf", hostile_trace(marker))
    target = tmp_path / "target"
    target.mkdir()
    result = cli("replay", leaf, "--directory", target)
    assert result.rc == 0, result.err
    text = (leaf / "replay.fio").read_text()
    keys = [line.split("=")[0] for line in text.splitlines() if line and not line.startswith((";", "["))]
    assert keys and not [k for k in keys if k.startswith("exec") or k in ("filename", "directory", "opendir")], keys
    job_check.parse(text, "replay.fio")  # every line is one the distiller may write
    assert not marker.exists()
    record = json.loads(next(leaf.glob("replay_*.json")).read_text())
    assert record["replay"]["write"]["bytes"] == 8 * MIB
    assert all(p.parent == target for p in target.rglob("*"))


@needs_fio
def test_an_edit_within_the_allowlist_replays_and_the_log_says_it_differs(cli, tmp_path):
    """A replay.fio edited by hand (its rate= deleted, a size lowered) is the leaf's own: checked,
    then run, with a warning that it is not what the trace distils to."""
    leaf = make_leaf(tmp_path / "leaf", small_trace())
    distilled = replay.write(leaf).read_text()
    edited = distilled.replace("size=8m", "size=4m")
    assert edited != distilled
    (leaf / "replay.fio").write_text(edited)
    target = tmp_path / "target"
    target.mkdir()
    result = cli("replay", leaf, "--directory", target)
    assert result.rc == 0, result.err
    assert "differs from what io_trace.json distils to" in result.err
    record = json.loads(next(leaf.glob("replay_*.json")).read_text())
    assert record["replay"]["write"]["bytes"] == 4 * MIB
    assert not list(leaf.glob(".replay.fio.*"))  # the checked copy fio read is gone


def test_a_fifo_or_a_huge_file_is_refused_unread(tmp_path):
    """Neither a FIFO (a read would wait for a writer) nor a file larger than any job the
    distiller writes is read."""
    import os

    leaf = make_leaf(tmp_path / "leaf", small_trace())
    os.mkfifo(leaf / "replay.fio")
    with pytest.raises(Exception, match="not a regular file"):
        replay.checked_job(leaf)
    (leaf / "replay.fio").unlink()
    with open(leaf / "replay.fio", "wb") as fh:
        fh.truncate(job_check.MAX_FILE_BYTES + 1)
    with pytest.raises(Refused, match="more than a job file this tool writes"):
        replay.checked_job(leaf)


def test_every_distilled_job_passes_the_check():
    """The allowlist covers all the distiller writes: traces of each shape the replay suite uses."""
    from test_trace_replay import checkpoint_like, kv_like, mixed, rand_read

    for record, meta in ((trace([seq_write(), rand_read(), mixed()]), {"args": {}}),
                         (checkpoint_like(), {"args": {}}),
                         (kv_like(), {"benchmark_type": "kv_cache", "command": "run", "args": {}}),
                         (trace([seq_write()], [rand_read()]), {"args": {"o_direct": True}})):
        text = replay.distill(record, meta, name="/r/leaf")
        sections = job_check.check(text, "distilled", job_check.job_bytes(job_check.parse(text, "distilled")))
        assert [s.name for s in sections][0] == "global" and len(sections) > 1
