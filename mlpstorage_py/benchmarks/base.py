"""The shared shape of a benchmark: a request in, a plan out, then execute and collect."""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from mlpstorage_py.errors import GateRefused, UsageError
from mlpstorage_py.rules.tables import param_allowlist, tool_injected_params


@dataclass
class Request:
    """One parsed invocation of `mlpstorage <mode> <benchmark> ...`."""

    mode: str
    benchmark: str
    model: str
    command: str
    args: dict[str, Any]
    storage: str = "file"

    def arg(self, name: str, default: Any = None) -> Any:
        value = self.args.get(name)
        return default if value is None else value


@dataclass
class Plan:
    """Everything decided before anything runs; whatif prints exactly this."""

    parameters: dict[str, Any]
    num_processes: int = 1
    accelerator: str | None = None
    override_parameters: dict[str, str] = field(default_factory=dict)
    engine_parameters: dict[str, Any] | None = None
    commands: list[list[str]] = field(default_factory=list)
    data_dir: Path | None = None
    verification: str = "CLOSED"
    report: list[str] = field(default_factory=list)


class Benchmark(abc.ABC):
    """A benchmark family. Subclasses decide the plan and run the engine; the lifecycle
    (benchmarks.lifecycle.run) owns leaves, metadata, provenance and failure handling."""

    benchmark_type: ClassVar[str]
    family: ClassVar[str]

    def __init__(self, request: Request) -> None:
        self.request = request

    @abc.abstractmethod
    def leaf_tail(self) -> Path:
        """Path below <system>/ of the directory that holds this command's timestamp leaves."""

    @abc.abstractmethod
    def plan(self) -> Plan:
        """Resolve the workload and the exact commands; no side effects."""

    def preflight(self, plan: Plan) -> None:
        """Run-time gates that must pass before a leaf is created."""
        check_overrides(self.family, self.request.mode, plan,
                        allow_invalid=bool(self.request.arg("allow_invalid_params", False)))

    @abc.abstractmethod
    def execute(self, plan: Plan, leaf: Path) -> None:
        """Do the work, writing the engine's outputs into the leaf."""

    def collect(self, plan: Plan, leaf: Path) -> dict[str, Any]:
        """Check that the outputs exist and parse; return what the metadata should add."""
        return {}


def check_overrides(family: str, mode: str, plan: Plan, allow_invalid: bool) -> None:
    """Rules 3.6.2/3.6.3/4.6.3: only tunables may be overridden; name the nearest legal key."""
    import difflib

    allowed = param_allowlist(family, mode) | tool_injected_params(family)
    for key in plan.override_parameters:
        if key in allowed:
            continue
        if mode != "closed" and allow_invalid:
            plan.verification = "INVALID"
            continue
        hint = difflib.get_close_matches(key, sorted(allowed), n=1, cutoff=0.85)
        suffix = f"; did you mean {hint[0]}?" if hint else ""
        raise GateRefused(f"parameter {key} may not be overridden in the {mode} division{suffix}")
    if plan.override_parameters and mode == "open" and plan.verification == "CLOSED":
        closed_ok = param_allowlist(family, "closed") | tool_injected_params(family)
        if any(k not in closed_ok for k in plan.override_parameters):
            plan.verification = "OPEN"


def parse_params(items: list[str] | None) -> dict[str, str]:
    """KEY=VALUE strings from --params; keys are dotted identifiers."""
    import re

    key_pattern = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
    result: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key_pattern.match(key) or not value.strip():
            raise UsageError(f"--params expects KEY=VALUE with a dotted key (e.g. reader.read_threads=8), got {item!r}")
        result[key] = value.strip()
    return result
