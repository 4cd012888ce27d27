"""A launched job's two deadlines (launch/heartbeat.py, process.run_logged): the start-up allowance
until every rank has reported, the work deadline from then. The "ranks" here are small Python
programs that print the report line the way our ranks do; each waits for what the test
controls (a file, a report) rather than for a time, except where a test is about the time."""

from __future__ import annotations

import sys
import time

import pytest

from mlpstorage_py.errors import StartupExpired, TimeoutExpired
from mlpstorage_py.launch import deadline, heartbeat, rank_guard
from mlpstorage_py.launch.job import Job, run_job
from mlpstorage_py.launch.options import LaunchOptions

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] / "kv_cache_benchmark"))


def ranks_program(reports: list[tuple[int, str]], before_s: float = 0.0, after_s: float = 0.0) -> list[str]:
    """One process standing for a job: sleeps before_s, prints a report per (rank, host), sleeps after_s."""
    lines = "; ".join(f"print({heartbeat.started_line(r, h, 1)!r}, flush=True)" for r, h in reports)
    return [sys.executable, "-c", f"import time; time.sleep({before_s}); {lines or 'pass'}; time.sleep({after_s})"]


def job(tmp_path, argv, deadline_s, startup):
    return Job(argv, "unit job", tmp_path / "o.log", tmp_path / "e.log", deadline_s, startup=startup)


def test_the_report_line_is_parsed_behind_a_launcher_tag_and_refused_when_malformed():
    line = heartbeat.started_line(3, "client-2", 4711)
    assert heartbeat.parse(line) == {"rank": 3, "host": "client-2", "pid": 4711}
    assert heartbeat.parse(f"[1,3]<stdout>: {line}") == {"rank": 3, "host": "client-2", "pid": 4711}
    for bad in ("", "MLPS-RANK-STARTED", "MLPS-RANK-STARTED {", 'MLPS-RANK-STARTED {"rank": "3"}', "rank 3 started"):
        assert heartbeat.parse(bad) is None


def test_the_kv_wrapper_prints_the_launchers_line():
    """mlperf_wrapper.py runs without mlpstorage installed, so it spells the tag and the
    tracer's work mark itself."""
    import mlperf_wrapper

    assert mlperf_wrapper.STARTED_TAG == heartbeat.TAG
    assert mlperf_wrapper.WORK_MARK_ENV == heartbeat.WORK_MARK_ENV


def test_a_rank_prints_its_report_with_rank_host_and_pid(capfd, monkeypatch):
    """The start-up line, then the rank's progress reporter is started for that rank (here a
    stand-in: a real one would report this test process's I/O for the rest of the session)."""
    from mlpstorage_py.telemetry import rank_progress

    started: list[int] = []
    monkeypatch.setattr(rank_progress, "start", started.append)
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "5")
    rank_guard.report_started()
    report = heartbeat.parse(capfd.readouterr().out.strip())
    assert report["rank"] == 5 and report["host"] and report["pid"] > 0
    assert started == [5]


def test_work_deadline_counts_from_the_last_report_not_from_the_launch(tmp_path):
    """Start-up takes 5 s, the work nothing, the work deadline is 4 s: counted from the launch
    it would have passed; counted from the reports the job ends well within it."""
    startup = heartbeat.Startup(2, 120, ("h1", "h1"))
    done = run_job(job(tmp_path, ranks_program([(0, "a"), (1, "a")], before_s=5), 4, startup), tmp_path, tmp_path)
    assert done.code == 0 and done.startup_s is not None and done.startup_s >= 5
    assert (tmp_path / "o.log").read_text().count(heartbeat.TAG) == 2  # the reports stay in the log


def test_the_work_deadline_still_ends_a_job_that_hangs_after_starting(tmp_path):
    startup = heartbeat.Startup(1, 120, ("h1",))
    with pytest.raises(TimeoutExpired, match=r"ran past its deadline of 1 s \(counted from the start of every rank\)") as info:
        run_job(job(tmp_path, ranks_program([(0, "a")], after_s=600), 1, startup), tmp_path, tmp_path)
    assert not isinstance(info.value, StartupExpired) and info.value.exit_code == 7


def test_a_start_up_that_never_completes_is_ended_within_its_allowance_naming_the_silent_ranks(tmp_path):
    """Ranks 0 and 1 on h1 report; 2 (h1) and 3 (h2) never do: h2 is named as a host with no rank."""
    startup = heartbeat.Startup(4, 2, ("h1", "h1", "h1", "h2"))
    began = time.monotonic()
    with pytest.raises(StartupExpired) as info:
        run_job(job(tmp_path, ranks_program([(0, "x"), (1, "x")], after_s=600), 600, startup), tmp_path, tmp_path)
    assert time.monotonic() - began < 60  # ended by the 2 s allowance, not the 600 s deadline
    message = str(info.value)
    assert info.value.exit_code == 11
    assert "start-up allowance of 2 s" in message and "2 of 4 rank(s) did not report: rank 2, 3" in message
    assert "no rank on h2 started" in message and "--startup-allowance" in message


def test_a_silent_rank_on_a_host_whose_other_ranks_started_is_named_with_its_host(tmp_path):
    startup = heartbeat.Startup(2, 1, ("h1", "h2"))
    startup.seen(heartbeat.started_line(1, "h2", 9))
    assert startup.missing() == "1 of 2 rank(s) did not report: rank 0; no rank on h1 started"
    other = heartbeat.Startup(2, 1, ("h1", "h1"))
    other.seen(heartbeat.started_line(1, "h1", 9))
    assert other.missing() == "1 of 2 rank(s) did not report: rank 0 (on h1)"
    assert not other.complete()
    other.seen(heartbeat.started_line(1, "h1", 9))  # the same rank twice counts once
    assert not other.complete()


def test_a_job_that_fails_before_every_rank_started_is_a_failure_not_a_start_up_timeout(tmp_path):
    argv = [sys.executable, "-c", "raise SystemExit('rank 1: no such file')"]
    done = run_job(Job(argv, "unit job", tmp_path / "o.log", tmp_path / "e.log", 600, check=False,
                       startup=heartbeat.Startup(2, 600)), tmp_path, tmp_path)
    assert done.code == 1 and done.startup_s is None


def test_the_allowance_grows_with_hosts_and_ranks_and_the_flag_replaces_it():
    s = deadline.settings()
    none = LaunchOptions()
    one = deadline.startup(none, ["h1", "h1"])
    many = deadline.startup(none, [f"h{i // 8}" for i in range(64 * 8)])
    assert one.allowance_s == s["startup_s"] + s["startup_per_host_s"] + 2 * s["startup_per_rank_s"]
    assert many.allowance_s == s["startup_s"] + 64 * s["startup_per_host_s"] + 512 * s["startup_per_rank_s"]
    assert deadline.startup(LaunchOptions(startup_allowance=7.5), ["h1"] * 4).allowance_s == 7.5
    assert deadline.rank_startup(LaunchOptions(hosts=("a", "b")), 3).placement == ("a", "a", "b")
    # The work deadline no longer holds the start-up: finish + per host + safety x work.
    assert deadline.job_deadline(none, 2, busy_s=10) == s["finish_s"] + 2 * s["per_host_s"] + s["safety_factor"] * 10
    assert deadline.job_deadline(LaunchOptions(deadline=9), 2, busy_s=10) == 9
