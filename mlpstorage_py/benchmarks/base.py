"""The shared shape of a benchmark: a request in, a plan out, then execute and collect."""

from __future__ import annotations

import abc
import time
from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from mlpstorage_py.benchmarks.options import BenchmarkOptions
from mlpstorage_py.errors import GateRefused, UsageError
from mlpstorage_py.launch.heartbeat import Startup
from mlpstorage_py.launch.job import Launcher, LaunchSpec, Outcome, launching, scratch_dir
from mlpstorage_py.launch.mpi import MpiOptions
from mlpstorage_py.launch.options import LaunchOptions
from mlpstorage_py.rules.tables import param_allowlist, tool_injected_params

O = TypeVar("O", bound=BenchmarkOptions)


@dataclass(frozen=True)
class Request(Generic[O]):
    """One invocation of `mlpstorage <mode> <benchmark> ...`, typed (cli/requests.py builds it):
    the benchmark's options, the launch options and the flags every benchmark has
    (benchmarks/options.py says how to add one)."""

    mode: str
    benchmark: str                    # its command-line name (benchmarks/table.py)
    model: str
    command: str
    options: O
    launch: LaunchOptions = field(default_factory=LaunchOptions)
    storage: str = "file"             # the storage positional: file or object
    s3_endpoints: tuple[str, ...] = ()  # an `object` run's endpoints (cli/common.add_endpoints)
    s3_endpoints_file: str | None = None
    s3_endpoint_strategy: str | None = None
    results_dir: str | None = None    # --results-dir as given; the lifecycle resolves it
    systemname: str | None = None     # --systemname (else MLPSTORAGE_SYSTEMNAME)
    verbose: bool = False
    params: tuple[str, ...] = ()      # --params KEY=VALUE
    allow_invalid_params: bool = False
    trace_io: bool = False
    skip_fs_separation_gate: bool = False
    loops: int = 1
    started_at: float = field(default_factory=time.time)  # when the command started, for the metadata
    # The parsed command line as the metadata's `args` record shows it, and only for that:
    # never read for behaviour (the fields above are).
    recorded_args: Mapping[str, Any] = field(default_factory=dict, compare=False)


@dataclass
class Plan:
    """Everything decided before anything runs; whatif prints exactly this."""

    parameters: dict[str, Any]
    num_processes: int = 1
    accelerator: str | None = None
    override_parameters: dict[str, str] = field(default_factory=dict)
    engine_parameters: dict[str, Any] = field(default_factory=dict)  # what the engine is given: each plan() fills it
    commands: list[list[str]] = field(default_factory=list)
    data_dir: Path | None = None
    verification: str = "CLOSED"
    report: list[str] = field(default_factory=list)
    cluster: dict[str, Any] | None = None
    page_cache: dict[str, Any] = field(default_factory=dict)
    # The client library that does object I/O (provenance.json's storage_library); None for file runs.
    storage_library: dict[str, str] | None = None
    # One record per client host the engine's ranks run on (launch.hostinfo), set by the lifecycle.
    client_hosts: list[dict[str, Any]] | None = None
    # The engine job's work deadline in seconds, once known, and the start-up it waited for
    # (launch.heartbeat.Startup: allowance and measured seconds), both recorded in the metadata.
    deadline_s: float | None = None
    startup: Startup | None = None
    # (stamp, provenance tag) of the DLIO that runs the work, when the benchmark detected one
    # (benchmarks.dlio_engine); None: provenance reads this environment's.
    dlio_engine: tuple[dict[str, str], str] | None = None
    # What runs the work, as the run and whatif print it: name, version, path and origin (where
    # it came from: the PyPI default, --dlio-bin-path, MLPSTORAGE_DLIO_BIN_PATH, our engine, ...).
    engine_identity: dict[str, str] | None = None


def engine_line(identity: dict[str, str]) -> str:
    """The one line naming the engine: `engine: dlio_benchmark 3.0.2 at PATH (from --dlio-bin-path DIR)`."""
    return f"engine: {identity['name']} {identity['version']} at {identity['path']} ({identity['origin']})"


class Benchmark(abc.ABC):
    """A benchmark family. Subclasses decide the plan and run the engine; the lifecycle
    (benchmarks.lifecycle.run) owns leaves, metadata, provenance and failure handling."""

    benchmark_type: ClassVar[str]  # its results-tree name, as its row of benchmarks/table.py says
    options_type: ClassVar[type[BenchmarkOptions]]  # what its Request's options are (benchmarks/options.py)
    # What runs the workload when it is not DLIO (recorded in provenance.json's dlio block); a
    # benchmark may name it per instance once it knows the version (vectordb's Milvus).
    engine: str | None = None

    def __init__(self, request: Request[Any]) -> None:
        self.request = request
        # Set by the lifecycle once the results tree is resolved (None under whatif).
        self.results_dir: Path | None = None
        self.workload_dir: Path | None = None

    def scratch(self) -> AbstractContextManager[Path]:
        """This benchmark's scratch directory (launch.job.scratch_dir), removed afterwards."""
        return scratch_dir(self.results_dir, self.benchmark_type)

    def launcher(self, leaf: Path) -> AbstractContextManager[Launcher]:
        """The one launch path for this command's jobs (launch.job.Launcher): its launch options,
        the leaf, and one scratch directory for all of them, removed afterwards."""
        return launching(self.request.launch, self.results_dir, self.benchmark_type, leaf,
                         echo=self.request.verbose)

    def launch(self, launcher: Launcher, spec: LaunchSpec, plan: Plan) -> Outcome:
        """Run one engine job, its work deadline and start-up recorded in the plan (and so in
        the metadata) before it starts, so a job that fails keeps them too."""
        job = launcher.job(spec)
        plan.deadline_s, plan.startup = job.deadline_s, job.startup
        return launcher.run(job)

    @abc.abstractmethod
    def leaf_tail(self) -> Path:
        """Path below <system>/ of the directory that holds this command's timestamp leaves."""

    @abc.abstractmethod
    def plan(self) -> Plan:
        """Resolve the workload and the exact commands; no side effects."""

    def overrides(self) -> tuple[dict[str, str], str]:
        """The user's --params, gated (Rules 3.6.2/3.6.3/4.6.3) before anything uses them;
        returns them with the verification state they give the run."""
        params = parse_params(list(self.request.params))
        verification = check_overrides(self.benchmark_type, self.request.mode, params,
                                       allow_invalid=self.request.allow_invalid_params)
        return params, verification

    def preflight(self, plan: Plan) -> None:  # noqa: B027 - a hook a benchmark may fill, empty by default
        """Run-time gates that must pass before a leaf is created (none by default)."""

    def launch_layout(self, plan: Plan) -> tuple[MpiOptions, int] | None:
        """The MPI layout the engine runs with, so the lifecycle can probe and describe every
        client host before the work starts; None when nothing is launched."""
        if not plan.commands:
            return None
        return MpiOptions.of(self.request.launch), plan.num_processes

    def drops_cache_with_facts(self, plan: Plan) -> bool:
        """Whether the host-facts launch also drops every host's page cache (each host's outcome
        in its record's page_cache): one MPI launch instead of two where the work needs a drop and
        nothing between the survey and the work reads its data."""
        return False

    def traced_paths(self, plan: Plan) -> list[str]:
        """Where the work's data lives, for --trace-io: the data directory, or the s3:// location
        of an object-storage run (traced at no block device; its record says so)."""
        if plan.data_dir is not None:
            return [str(plan.data_dir)]
        uri = self.request.options.location
        return [str(uri)] if uri else []

    def vfs_trace_rule(self) -> str | None:
        """The rule that allows a VFS-level trace where the block level cannot see the work
        (--trace-io names it in the trace record); None: no such allowance."""
        return None

    def works_in_process(self, plan: Plan) -> bool:
        """Whether mlpstorage's own process does the work's I/O (an embedded database): --trace-io
        then marks it as the run's work (launch/heartbeat.mark_work), as each rank marks itself."""
        return False

    def gate_hosts(self, plan: Plan) -> None:  # noqa: B027 - a hook a benchmark may fill, empty by default
        """Gates that need the measured client hosts (plan.client_hosts); run inside the leaf."""

    @abc.abstractmethod
    def execute(self, plan: Plan, leaf: Path) -> None:
        """Do the work, writing the engine's outputs into the leaf."""

    def collect(self, plan: Plan, leaf: Path) -> dict[str, Any]:
        """Check that the outputs exist and parse; return what the metadata should add."""
        return {}


def check_overrides(family: str, mode: str, keys: dict[str, str], allow_invalid: bool) -> str:
    """Only tunables may be overridden; returns CLOSED, OPEN or INVALID for the run, or
    refuses naming the nearest legal key."""
    import difflib

    allowed = param_allowlist(family, mode) | tool_injected_params(family)
    closed_ok = param_allowlist(family, "closed") | tool_injected_params(family)
    verification = "CLOSED"
    for key in keys:
        if key not in allowed:
            if mode == "closed" or not allow_invalid:
                hint = difflib.get_close_matches(key, sorted(allowed), n=1, cutoff=0.85)
                suffix = f"; did you mean {hint[0]}?" if hint else ""
                raise GateRefused(f"parameter {key} may not be overridden in the {mode} division{suffix}")
            verification = "INVALID"
        elif key not in closed_ok and verification == "CLOSED":
            verification = "OPEN"
    return verification


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
