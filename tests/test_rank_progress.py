"""A rank's progress lines (telemetry/rank_progress.py) in real processes, and the watchdog's rules
(launch/watch.py) on the lines, with a clock the test moves (issue 40)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from mlpstorage_py.telemetry.rank_progress import PROGRESS_TAG, TELEMETRY_TAG
from mlpstorage_py.launch.watch import Watch

MIB = 2 ** 20


def rank_lines(tmp_path: Path, body: str, env: dict[str, str] | None = None) -> list[dict]:
    """Run a process that starts a reporter (every 0.2 s) and then `body`; its progress lines."""
    program = textwrap.dedent(f"""
        import os, subprocess, sys, time
        from mlpstorage_py.telemetry import rank_progress
        reporter = rank_progress.start(3)
        time.sleep(0.5)
    """) + textwrap.dedent(body) + "\nreporter.finish()\n"
    import os

    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={**os.environ, "MLPSTORAGE_PROGRESS_S": "0.2", **(env or {})})
    assert done.returncode == 0, done.stderr
    return [json.loads(l.split(" ", 1)[1]) for l in done.stdout.splitlines() if l.startswith(PROGRESS_TAG)]


def test_an_idle_rank_reports_no_bytes_of_its_own_reporting(tmp_path):
    """A rank that does nothing for 2 s: ten lines, and its reporter's own reads of /proc and its
    own lines never count as the rank's I/O."""
    lines = rank_lines(tmp_path, "time.sleep(2)")
    assert len(lines) >= 8
    moving = [l for l in lines[1:] if (l["read"], l["written"]) != (lines[0]["read"], lines[0]["written"])]
    assert moving == [], moving
    assert lines[-1]["done"] and not any(l["done"] for l in lines[:-1])


def test_the_bytes_of_the_rank_and_of_the_processes_it_started_count(tmp_path):
    """4 MiB written by the rank, 8 MiB read by a child it started: both in its figures."""
    body = """
        with open("data", "wb") as fh:
            fh.write(os.urandom(4 * 2 ** 20))
        subprocess.run([sys.executable, "-c", "open('data','rb').read(); open('data','rb').read(); import time; time.sleep(0.5)"])
        time.sleep(0.5)
    """
    lines = rank_lines(tmp_path, body)
    first, last = lines[0], lines[-1]
    assert last["written"] - first["written"] >= 4 * MIB
    assert last["read"] - first["read"] >= 8 * MIB


def test_the_hosts_first_rank_sends_telemetry(tmp_path):
    program = textwrap.dedent("""
        import time
        from mlpstorage_py.telemetry import rank_progress
        reporter = rank_progress.start(0)
        time.sleep(1.2)
        reporter.finish()
    """)
    import os

    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "MLPSTORAGE_TELEMETRY_S": "0.3", "OMPI_COMM_WORLD_LOCAL_RANK": "0"})
    samples = [json.loads(l.split(" ", 1)[1]) for l in done.stdout.splitlines() if l.startswith(TELEMETRY_TAG)]
    assert len(samples) >= 3 and all(s["dt"] > 0.2 for s in samples)
    assert {"cpu", "mem", "net", "disks", "host"} <= set(samples[0])
    assert 99 <= sum(samples[-1]["cpu"].values()) <= 101
    other = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "MLPSTORAGE_TELEMETRY_S": "0.3", "OMPI_COMM_WORLD_LOCAL_RANK": "1"})
    assert TELEMETRY_TAG not in other.stdout  # only the host's first rank samples it


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def line(rank: int, read: int = 0, *, host: str = "h1", done: bool = False, paused: bool = False,
         pid: int | None = None, worker: bool = False) -> str:
    record = {"rank": rank, "host": host, "pid": pid or 100 + rank, "read": read, "written": 0, "units": 0,
              "done": done, "paused": paused, **({"worker": True} if worker else {})}
    return f"[1,{rank}]<stdout>:{PROGRESS_TAG} {json.dumps(record)}"


def watched(ranks: int = 2, stall_s: float = 10) -> tuple[Watch, Clock]:
    clock = Clock()
    watch = Watch(ranks, stall_s, clock=clock)
    for r in range(ranks):
        assert watch.take(line(r, host=f"h{r + 1}"))
    watch.start_work(0.0)
    return watch, clock


def test_a_slow_rank_that_keeps_moving_is_never_stalled():
    watch, clock = watched()
    for step in range(1, 100):  # a byte every 9 s, for 900 s: slow, never stopped
        clock.now = 9.0 * step
        watch.take(line(0, read=step, host="h1"))
        watch.take(line(1, read=step, host="h2"))
        assert watch.stalled() is None


def test_a_silent_rank_is_named_with_its_host():
    watch, clock = watched()
    for step in range(1, 4):
        clock.now = 4.0 * step
        watch.take(line(0, read=step * MIB, host="h1"))
    clock.now = 12.0  # rank 1 said nothing since 0 s
    why = watch.stalled()
    assert why and why.startswith("no report from rank 1 on h2") and "h1" not in why


def test_an_idle_job_names_the_longest_idle_rank_first_and_never_a_finished_one():
    watch, clock = watched(3)
    clock.now = 2.0
    watch.take(line(0, read=MIB, host="h1"))
    watch.take(line(2, read=MIB, done=True, host="h3"))  # finished its share: waits for the others
    for t in range(3, 13):
        clock.now = float(t)
        for r in (0, 1):  # both still report, neither moves: one blocked, one waiting for it
            watch.take(line(r, read=MIB if r == 0 else 0, host=f"h{r + 1}"))
    why = watch.stalled()
    assert why and why.startswith("no rank moved a byte for 10 s: rank 1 on h2")
    assert "rank 2" not in why


def test_a_planned_pause_counts_as_progress_and_a_forked_workers_bytes_add_up():
    watch, clock = watched(1)
    for t in range(1, 30):
        clock.now = float(t)
        watch.take(line(0, read=MIB, paused=True))
        assert watch.stalled() is None
    watch.take(line(0, read=2 * MIB, pid=999, worker=True))  # a reader worker's own line
    assert watch.states[0].read == 3 * MIB


def test_every_rank_done_but_no_exit_is_a_stall_in_the_finish():
    watch, clock = watched()
    watch.take(line(0, done=True, host="h1"))
    watch.take(line(1, done=True, host="h2"))
    clock.now = 5.0
    assert watch.stalled() is None
    clock.now = 11.0
    assert "every rank finished its share" in (watch.stalled() or "")


def test_the_live_view_names_rates_hosts_and_the_slowest_rank():
    watch, clock = watched()
    for t in range(1, 6):
        clock.now = float(t)
        watch.take(line(0, read=t * 10 * MIB, host="h1"))
        watch.take(line(1, read=t * 5 * MIB, host="h2"))
    view = watch.view()
    assert view.startswith("15.0 MiB/s") and "h1 10.0, h2 5.0" in view
    assert "slowest rank 1 (h2) 33 % behind" in view
