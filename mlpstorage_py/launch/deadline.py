"""Deadlines for launched jobs: a start-up allowance until every rank has reported, and a work
deadline from then, derived from the work unless the user gives --deadline (configs/tool.yaml)."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Sequence

import yaml

from mlpstorage_py.launch import heartbeat
from mlpstorage_py.launch.heartbeat import Startup
from mlpstorage_py.launch.mpi import MpiOptions, host_slots, placement
from mlpstorage_py.launch.options import LaunchOptions
from mlpstorage_py.rules.configs import source_root
from mlpstorage_py.telemetry import rank_progress

MIB = 2 ** 20


@functools.lru_cache(maxsize=1)
def settings() -> dict[str, float]:
    """configs/tool.yaml's deadline table (read from the source tree: launch sits below benchmarks)."""
    with open(source_root() / "configs" / "tool.yaml", encoding="utf-8") as fh:
        return {k: float(v) for k, v in yaml.safe_load(fh)["deadline"].items()}


def job_deadline(launch: LaunchOptions, hosts: int, *, io_bytes: float = 0.0, busy_s: float = 0.0) -> float:
    """Seconds the work may take once every rank has started: --deadline when given, else
    finish + per-host allowance + safety x (io_bytes at the floor throughput + busy_s of known
    time such as a fixed duration)."""
    if launch.deadline:
        return float(launch.deadline)
    s = settings()
    work = io_bytes / (s["floor_mib_per_s"] * MIB) + busy_s
    return s["finish_s"] + s["per_host_s"] * max(hosts, 1) + s["safety_factor"] * work


def rank_startup(launch: LaunchOptions, processes: int, hosts: Sequence[str] | None = None, *,
                 unit_bytes: float = 0.0) -> Startup:
    """The start-up of `processes` ranks placed over `hosts` (default: --hosts) as MPI maps them."""
    chosen = list(MpiOptions.of(launch).hosts if hosts is None else hosts)
    return startup(launch, placement(host_slots(chosen, processes)), unit_bytes=unit_bytes)


def stall_timeout(launch: LaunchOptions, unit_bytes: float = 0.0) -> float:
    """Seconds without progress that stop a job: --stall-timeout, else one unit of work
    (`unit_bytes`: a file, a checkpoint shard, a request) at the floor throughput, times the
    unit factor, and at least the floor."""
    if launch.stall_timeout:
        return float(launch.stall_timeout)
    s = settings()
    return max(s["stall_floor_s"], s["stall_unit_factor"] * unit_bytes / (s["floor_mib_per_s"] * MIB))


def telemetry_interval(launch: LaunchOptions) -> float:
    """Seconds between each client host's telemetry samples; 0: none."""
    value = launch.telemetry_interval
    return float(settings()["telemetry_s"] if value is None else value)


def reporting(launch: LaunchOptions) -> contextlib.AbstractContextManager[None]:
    """The ranks' reporter settings (telemetry/rank_progress.py) in the environment for the block:
    entered before a benchmark plans its commands, so the launcher forwards them to every rank
    on every host by name."""
    return heartbeat.exported({rank_progress.PROGRESS_ENV: f"{settings()['progress_s']:g}",
                               rank_progress.TELEMETRY_ENV: f"{telemetry_interval(launch):g}"})


def startup(launch: LaunchOptions, placement: Sequence[str], *, unit_bytes: float = 0.0) -> Startup:
    """What the job's start-up must reach: one report per rank of `placement` (the host entry
    of each rank, in rank order) within --startup-allowance, else start-up + per host + per rank;
    and the watcher of its ranks' progress once they have."""
    from mlpstorage_py.launch.watch import Watch

    if launch.startup_allowance:
        allowance = float(launch.startup_allowance)
    else:
        s = settings()
        allowance = s["startup_s"] + s["startup_per_host_s"] * max(len(set(placement)), 1) + \
            s["startup_per_rank_s"] * len(placement)
    watch = Watch(len(placement), stall_timeout(launch, unit_bytes), progress_s=settings()["progress_s"],
                  telemetry_s=telemetry_interval(launch))
    return Startup(len(placement), allowance, tuple(placement), watch=watch)


def host_facts_deadline(hosts: int) -> float:
    """Short MPI jobs (host facts, page-cache drops): fixed, not scaled by the benchmark's work."""
    return settings()["host_facts_s"] + settings()["per_host_s"] * max(hosts, 1)
