"""Deadlines for launched jobs, derived from the work unless the user gives --deadline."""

from __future__ import annotations

import functools
from typing import Any

import yaml

from mlpstorage_py.rules.configs import source_root

MIB = 2 ** 20


@functools.lru_cache(maxsize=1)
def settings() -> dict[str, float]:
    """configs/tool.yaml's deadline table (read from the source tree: launch sits below benchmarks)."""
    with open(source_root() / "configs" / "tool.yaml", encoding="utf-8") as fh:
        return {k: float(v) for k, v in yaml.safe_load(fh)["deadline"].items()}


def job_deadline(args: dict[str, Any], hosts: int, *, io_bytes: float = 0.0, busy_s: float = 0.0) -> float:
    """Seconds a job may run: --deadline when given, else start-up + per-host allowance +
    safety x (io_bytes at the floor throughput + busy_s of known time such as a fixed duration)."""
    if args.get("deadline"):
        return float(args["deadline"])
    s = settings()
    work = io_bytes / (s["floor_mib_per_s"] * MIB) + busy_s
    return s["startup_s"] + s["per_host_s"] * max(hosts, 1) + s["safety_factor"] * work


def host_facts_deadline(args: dict[str, Any], hosts: int) -> float:
    """Short MPI jobs (host facts, page-cache drops): fixed, not scaled by the benchmark's work."""
    return settings()["host_facts_s"] + settings()["per_host_s"] * max(hosts, 1)
