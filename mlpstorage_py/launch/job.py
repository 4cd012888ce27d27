"""The one way every job mlpstorage starts runs: engine ranks (DLIO, our checkpoint engine,
kv-cache.py, vectordb query clients, local or over hosts), the short MPI jobs (host facts,
page-cache drops, kvcache's shared results check) and replay's fio on each host.

A caller states the job (a LaunchSpec: what to run, over how many ranks on which hosts, and the
work it does); a Launcher, one per command with its launch options, leaf and one scratch
directory (launching()), builds its limits once (launch/deadline.py: the start-up allowance,
the work deadline, the stall watchdog and the telemetry of ranks that report, a fixed short
deadline for those that do not) and runs it: the planned command's {leaf} and {scratch}
filled, live progress, the output logged, the launcher's whole tree torn down
(process.run_logged) with the shared memory its ended ranks left (launch/shm_orphans.py), and a
non-zero exit made a failed run naming the child's own error line. Nothing else starts a job
(tests/test_launch_path.py).

A job of ranks that report their start (launch/heartbeat.py) runs under two deadlines: the
start-up allowance until every rank has reported, then the work deadline from that moment, so
a slow start on a busy head node is not taken for a hang of the work, and a hung start-up is
still ended.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlpstorage_py import progress
from mlpstorage_py.launch import deadline, shm_orphans
from mlpstorage_py.launch.heartbeat import Startup
from mlpstorage_py.launch.mpi import MpiOptions, fill, host_slots
from mlpstorage_py.launch.options import LaunchOptions
from mlpstorage_py.launch.process import require_success, run_logged
from mlpstorage_py.launch.watch import TELEMETRY_DIR, record_bottleneck
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
    progress: contextlib.AbstractContextManager[Any] | None = None
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
    view: contextlib.AbstractContextManager[Any] = job.progress or (progress.Progress(job.label) if watch is not None and outer is None
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


@dataclass(frozen=True)
class Work:
    """What a job's limits are derived from (launch/deadline.py): the bytes it moves at the floor
    throughput and known seconds such as a fixed duration (both times the safety factor), one
    unit of work for the stall watchdog (a file, a checkpoint shard), and seconds the job bounds
    by itself (fio's --runtime), added as they are."""

    io_bytes: float = 0.0
    busy_s: float = 0.0
    unit_bytes: float = 0.0
    capped_s: float = 0.0


@dataclass
class LaunchSpec:
    """One job as its caller states it: the planned argv ({leaf}/{scratch} placeholders allowed),
    its name in the log and in errors, where its output goes, its ranks and the host entries MPI
    places them over (None: --hosts), and the work it does. `work` None: a short job (host facts,
    a page-cache drop, a probe) under the fixed host-facts deadline. `reports`: its ranks say
    when they started and what they moved (rank_guard.report_started), so the job gets the
    start-up allowance, the stall watchdog and the hosts' telemetry."""

    argv: list[str]
    label: str
    stdout: Path
    stderr: Path
    ranks: int = 1
    hosts: Sequence[str] | None = None
    work: Work | None = None
    reports: bool = True
    progress: contextlib.AbstractContextManager[Any] | None = None
    check: bool = True


class Launcher:
    """Every job of one command: its launch options (--hosts, --deadline, --startup-allowance,
    --stall-timeout, --telemetry-interval), its leaf (where telemetry goes) and its scratch
    directory (each job's working directory)."""

    def __init__(self, options: LaunchOptions, leaf: Path, scratch: Path, *, echo: bool = False) -> None:
        self.options, self.leaf, self.scratch, self.echo = options, leaf, scratch, echo

    def job(self, spec: LaunchSpec) -> Job:
        """The job with its limits, built once: a caller that records them (the metadata's
        deadline and start-up allowance) reads them here, before the job can fail."""
        work = spec.work or Work()
        if spec.work is None:  # by rank: one per host in a facts layout, every rank where srun places them
            deadline_s = deadline.host_facts_deadline(spec.ranks)
        else:
            hosts = MpiOptions.of(self.options).hosts if spec.hosts is None else list(spec.hosts)
            deadline_s = deadline.job_deadline(self.options, len(host_slots(hosts, spec.ranks)), io_bytes=work.io_bytes,
                                               busy_s=work.busy_s) + work.capped_s
        startup = deadline.rank_startup(self.options, spec.ranks, spec.hosts, unit_bytes=work.unit_bytes) \
            if spec.reports else None
        return Job(spec.argv, spec.label, spec.stdout, spec.stderr, deadline_s, echo=self.echo,
                   progress=spec.progress, check=spec.check, startup=startup)

    def run(self, job: Job) -> Outcome:
        """Run a job this launcher built, in its scratch directory."""
        return run_job(job, self.leaf, self.scratch)

    def launch(self, spec: LaunchSpec) -> Outcome:
        """Build and run one job."""
        return self.run(self.job(spec))


@contextlib.contextmanager
def launching(options: LaunchOptions, results_dir: Path | None, prefix: str, leaf: Path | None = None, *,
              echo: bool = False) -> Iterator[Launcher]:
    """A Launcher over one scratch directory (scratch_dir) for the block; without a leaf, the
    jobs' telemetry goes to the scratch directory and is removed with it."""
    with scratch_dir(results_dir, prefix) as scratch:
        yield Launcher(options, scratch if leaf is None else leaf, scratch, echo=echo)
