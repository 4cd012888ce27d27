"""The one way an engine job runs (DLIO, our checkpoint engine, kv-cache.py ranks, vectordb query
ranks): the planned command's {leaf} and {scratch} filled, a deadline, live progress, the output
logged into the leaf, the launcher's whole tree torn down (process.run_logged) with the shared
memory its ended ranks left (launch/shm_orphans.py), and a non-zero
exit made a failed run naming the child's own error line.

Benchmarks only say what to run (a Job). A job of ranks that report their start
(launch/heartbeat.py) runs under two deadlines: the start-up allowance until every rank has
reported, then the work deadline from that moment, so a slow start on a busy head node is not
taken for a hang of the work, and a hung start-up is still ended.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ContextManager, Iterator

from mlpstorage_py.launch import shm_orphans
from mlpstorage_py.launch.heartbeat import Startup
from mlpstorage_py.launch.mpi import fill
from mlpstorage_py.launch.process import require_success, run_logged
from mlpstorage_py.launch.watch import TELEMETRY_DIR, record_bottleneck
from mlpstorage_py import progress
from mlpstorage_py.results.links import make_dirs, private_path
from mlpstorage_py.results.logs import log


@contextlib.contextmanager
def scratch_dir(results_dir: Path | None, prefix: str) -> Iterator[Path]:
    """A fresh working directory for engine configs and the files engines drop in their current
    directory, on the results filesystem (which every client host shares) when there is one;
    removed afterwards. A linked .mlps or scratch is refused: the tree may come from someone else."""
    base = results_dir or Path(tempfile.gettempdir())
    root = make_dirs(base, private_path(base, "scratch"))
    path = Path(tempfile.mkdtemp(prefix=f"{prefix}-", dir=root))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@dataclass
class Job:
    """What to run: the planned argv ({leaf}/{scratch} placeholders allowed), the name it has in
    the log and in errors, where its stdout and stderr go, and the seconds it may run."""

    argv: list[str]
    label: str
    stdout: Path
    stderr: Path
    deadline_s: float
    echo: bool = False  # the child's output on the console too (--verbose)
    # Entered around the run (progress.polled over a counter of the work done); None: no bar.
    progress: ContextManager[Any] | None = None
    # A non-zero exit raises BenchmarkFailed; False: the caller judges Outcome.code itself.
    check: bool = True
    # The ranks' start-up reports to wait for (deadline.startup); None: deadline_s from the launch.
    startup: Startup | None = None


@dataclass(frozen=True)
class Outcome:
    """How a job that was not stopped ended: its exit code, how long the launcher ran and how
    long its ranks took to start (None: not watched, or it ended before every rank reported)."""

    code: int
    wall_s: float
    startup_s: float | None = None


def run_job(job: Job, leaf: Path, scratch: Path) -> Outcome:
    """Run `job` in `scratch` with its placeholders filled for `leaf` (a caller that records the
    command before it runs fills it with mpi.fill first; filling twice changes nothing).
    TimeoutExpired past the deadline and KeyboardInterrupt propagate once the job's tree is down."""
    argv = fill(job.argv, leaf, scratch)
    if job.startup is None:
        log.info(f"{job.label} deadline: {job.deadline_s:.0f} s")
    else:
        log.info(f"{job.label} start-up allowance: {job.startup.allowance_s:.0f} s for {job.startup.ranks} rank(s); "
                 f"work deadline: {job.deadline_s:.0f} s from then")
    watch = job.startup.watch if job.startup is not None else None
    outer = progress.active()  # a phase already shown (kvcache's trials): the job's rates go there
    view: ContextManager[Any] = job.progress or (progress.Progress(job.label) if watch is not None and outer is None
                                                 else contextlib.nullcontext())
    with view as bar:
        shown = bar if isinstance(bar, progress.Progress) else outer
        if watch is not None:
            watch.telemetry_dir = leaf / TELEMETRY_DIR if watch.telemetry_s > 0 else None
            watch.on_view = shown.set_note if shown is not None else None
        started, begun = time.monotonic(), time.time()
        try:
            code = run_logged(argv, stdout_path=job.stdout, stderr_path=job.stderr, cwd=scratch, label=job.label,
                              echo=job.echo, deadline_s=job.deadline_s, startup=job.startup)
        finally:  # the job's tree is down: what its killed ranks left in /dev/shm goes
            removed = shm_orphans.sweep()
            if removed:
                log.info(f"{job.label}: removed {len(removed)} shared-memory segment(s) its ended ranks left in "
                         f"{shm_orphans.SHM_DIR}")
            if watch is not None:
                watch.close()
                if shown is not None and shown is outer:
                    shown.set_note("")
                for record in record_bottleneck(watch, leaf, job.label, begun, time.time()):
                    log.info(f"{job.label}: bottleneck of {record['phase']}: {record['summary']}")
        wall = time.monotonic() - started
    if job.check:
        require_success(code, job.label, job.stderr)
    return Outcome(code, wall, None if job.startup is None else job.startup.took_s)
