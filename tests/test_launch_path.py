"""One launch path (launch/job.py): every job mlpstorage starts is built by a Launcher from a
LaunchSpec and run by run_job, so every job gets the same limits, teardown, shared-memory sweep
and, where its ranks report, the same start-up allowance, stall watchdog and telemetry."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from mlpstorage_py.launch import deadline, job, shm_orphans
from mlpstorage_py.launch.job import Launcher, LaunchSpec, Work
from mlpstorage_py.launch.options import LaunchOptions

PACKAGE = Path(__file__).resolve().parents[1] / "mlpstorage_py"
THE_PATH = PACKAGE / "launch" / "job.py"
# What runs a job or builds its limits: only the launch path may use them.
RUNNERS = {"mlpstorage_py.launch.job": {"Job", "run_job"}, "mlpstorage_py.launch.process": {"run_logged"},
           "mlpstorage_py.launch.deadline": {"job_deadline", "rank_startup", "startup", "host_facts_deadline",
                                             "stall_timeout"}}


def _uses(tree: ast.AST) -> list[str]:
    """The runners a module reaches: imported by name, or as an attribute of its module."""
    found = []
    modules: dict[str, str] = {}  # local name -> module imported as a whole
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in RUNNERS:
            found += [f"{node.module}.{a.name}" for a in node.names if a.name in RUNNERS[node.module]]
        elif isinstance(node, ast.ImportFrom) and node.module == "mlpstorage_py.launch":
            modules.update({a.asname or a.name: f"mlpstorage_py.launch.{a.name}" for a in node.names})
        elif isinstance(node, ast.Import):
            modules.update({a.asname: a.name for a in node.names if a.asname and a.name in RUNNERS})
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules:
            module = modules[node.value.id]
            if node.attr in RUNNERS.get(module, ()):
                found.append(f"{module}.{node.attr}")
    return found


def test_no_module_but_the_launch_path_runs_a_job_or_builds_its_limits():
    offenders = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path in (THE_PATH, PACKAGE / "launch" / "deadline.py", PACKAGE / "launch" / "process.py"):
            continue
        uses = _uses(ast.parse(path.read_text(encoding="utf-8"), str(path)))
        if uses:
            offenders[str(path.relative_to(PACKAGE))] = uses
    assert offenders == {}, f"these start jobs or build limits outside launch/job.py's Launcher: {offenders}"


def test_the_scan_sees_each_way_of_reaching_a_runner():
    """The scan above could fail: it finds a runner imported by name and one reached through its module."""
    text = ("from mlpstorage_py.launch.job import Job\nfrom mlpstorage_py.launch import process\n"
            "process.run_logged([])\nfrom mlpstorage_py.launch import deadline as d\nd.job_deadline(o, 1)\n")
    assert sorted(_uses(ast.parse(text))) == ["mlpstorage_py.launch.deadline.job_deadline",
                                              "mlpstorage_py.launch.job.Job", "mlpstorage_py.launch.process.run_logged"]


def test_no_engine_starts_workers_of_its_own():
    """The benchmarks and the engines start no process pool: their workers are ranks of a job."""
    for folder in ("benchmarks", "vectordb", "checkpoint"):
        for path in sorted((PACKAGE / folder).glob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
            imported |= {(n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
            assert "multiprocessing" not in imported, path


# -- the limits, built once ---------------------------------------------------------------------
def test_a_job_of_reporting_ranks_gets_the_allowance_the_watchdog_and_the_work_deadline(tmp_path):
    spec = LaunchSpec(["true"], "unit", tmp_path / "o", tmp_path / "e", ranks=3, hosts=["a:2", "b:1"],
                      work=Work(io_bytes=2 ** 30, busy_s=5, unit_bytes=2 ** 20))
    none = LaunchOptions()
    built = Launcher(none, tmp_path, tmp_path).job(spec)
    assert built.deadline_s == deadline.job_deadline(none, 2, io_bytes=2 ** 30, busy_s=5)
    assert built.startup is not None and built.startup.placement == ("a", "a", "b")
    assert built.startup.allowance_s == deadline.startup(none, ["a", "a", "b"]).allowance_s
    assert built.startup.watch is not None
    assert built.startup.watch.stall_s == deadline.stall_timeout(none, 2 ** 20)
    given = Launcher(LaunchOptions(deadline=42, startup_allowance=7, stall_timeout=9), tmp_path, tmp_path).job(spec)
    assert given.deadline_s == 42 and given.startup is not None and given.startup.allowance_s == 7
    assert given.startup.watch is not None and given.startup.watch.stall_s == 9


def test_a_short_job_and_a_capped_one(tmp_path):
    facts = Launcher(LaunchOptions(), tmp_path, tmp_path).job(LaunchSpec(["true"], "facts", tmp_path / "o",
                                                                         tmp_path / "e", ranks=4, reports=False))
    assert facts.startup is None and facts.deadline_s == deadline.host_facts_deadline(4)
    fio = Launcher(LaunchOptions(deadline=5), tmp_path, tmp_path).job(LaunchSpec(["true"], "fio", tmp_path / "o",
                                                                                 tmp_path / "e", work=Work(capped_s=30),
                                                                                 reports=False))
    assert fio.startup is None and fio.deadline_s == 5 + 30


def test_every_job_is_swept_after_it_ends(tmp_path, monkeypatch):
    """A job that is not MPI's (replay's fio) and one that fails both get the shared-memory sweep."""
    swept = []
    monkeypatch.setattr(shm_orphans, "sweep", lambda: swept.append(1) or [])
    with job.launching(LaunchOptions(), tmp_path, "unit", tmp_path) as launcher:
        ok = launcher.launch(LaunchSpec([sys.executable, "-c", "print('hi')"], "unit", tmp_path / "o", tmp_path / "e",
                                        work=Work(), reports=False))
        failed = launcher.launch(LaunchSpec([sys.executable, "-c", "raise SystemExit(3)"], "unit", tmp_path / "o",
                                            tmp_path / "e", work=Work(), reports=False, check=False))
        assert launcher.scratch.is_dir() and launcher.scratch.parent.name == "scratch"
    assert (ok.code, failed.code) == (0, 3) and swept == [1, 1]
    assert not launcher.scratch.exists()


def test_a_failed_job_raises_through_the_path(tmp_path):
    from mlpstorage_py.errors import BenchmarkFailed

    with job.launching(LaunchOptions(), tmp_path, "unit", tmp_path) as launcher, pytest.raises(BenchmarkFailed, match="exited with code 3"):
        launcher.launch(LaunchSpec([sys.executable, "-c", "raise SystemExit(3)"], "unit", tmp_path / "o",
                                   tmp_path / "e", work=Work(), reports=False))
