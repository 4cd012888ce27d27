"""One lifecycle for every benchmark: plan, gates, leaf, execute, collect, write the leaf.

Whatever happens after the leaf exists (success, an error, SIGINT or SIGTERM), the leaf
gets its metadata, provenance and code-image pointer, with the failure recorded.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import time
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from mlpstorage_py.benchmarks import table, tracing
from mlpstorage_py.benchmarks.base import Benchmark, Plan, engine_line
from mlpstorage_py.errors import ConfigurationError, GateRefused, Interrupted, MlpsError, missing_directory
from mlpstorage_py.launch import hostinfo, mpi, preflight
from mlpstorage_py.launch.deadline import reporting
from mlpstorage_py.results import code_image, fs_probe, libraries, provenance
from mlpstorage_py.results.host import host_info
from mlpstorage_py.results.io import atomic_write_text, iso_from_epoch, write_json
from mlpstorage_py.results.leaf import check_name, create_leaf, workload_dir
from mlpstorage_py.results.logs import attach_leaf, detach, log
from mlpstorage_py.results.metadata import Metadata
from mlpstorage_py.results.sentinel import require_org, resolve_results_dir
from mlpstorage_py.storage import datalock
from mlpstorage_py.storage.s3 import environment_record


def print_plan(bench: Benchmark, plan: Plan) -> None:
    """whatif: show what would run, execute nothing."""
    req = bench.request
    print(f"{req.mode} {req.benchmark} {req.model} {req.command} ({req.storage}): plan only, nothing is executed")
    if plan.engine_identity:
        print(engine_line(plan.engine_identity))
    for line in plan.report:
        print(line)
    for argv in plan.commands:
        print("  command: " + shlex.join(argv))
    if any("{leaf}" in a or "{scratch}" in a for argv in plan.commands for a in argv):
        print("  ({leaf} is the run's results leaf and {scratch} its scratch directory, created when it runs)")


def systemname(bench: Benchmark) -> str:
    name = bench.request.systemname or os.environ.get("MLPSTORAGE_SYSTEMNAME")
    if not name:
        raise ConfigurationError("--systemname (or MLPSTORAGE_SYSTEMNAME) is required: it names the system under test in the results tree")
    return check_name("system name", name)


def run(bench: Benchmark) -> int:
    req = bench.request
    # whatif, and the commands the benchmark table marks (configview; a datasize with no phase
    # directory in the rules), only print.
    plan_only = req.mode == "whatif" or req.command in table.row(req.benchmark).plan_only
    if not plan_only:
        system = systemname(bench)
        results_dir, source = resolve_results_dir(req.results_dir)
        log.debug(f"results-dir: {results_dir} (from {source})")
        org = require_org(results_dir)
        bench.results_dir = results_dir
        bench.workload_dir = workload_dir(results_dir, req.mode, org, system, bench.leaf_tail())
    with tracing.prepared(bench) if not plan_only else contextlib.nullcontext(), reporting(req.launch):
        plan = bench.plan()
        locked = plan.data_dir if not plan_only and req.command == "datagen" and req.storage == "file" else None
        with datalock.held(locked):
            return _gated_run(bench, plan, plan_only, results_dir if not plan_only else None)


def _gated_run(bench: Benchmark, plan: Plan, plan_only: bool, results_dir: Path | None) -> int:
    """Preflight, gates, then the leaf: whatever happens once it exists, it is completed."""
    req = bench.request
    bench.preflight(plan)
    if plan_only:
        print_plan(bench, plan)
        return 0
    assert results_dir is not None and bench.workload_dir is not None, "a run that writes a leaf has resolved where"
    fs_record = _fs_gate(bench, plan, results_dir)
    storage_env = _storage_env_gate(bench)
    digest, image, created = code_image.capture(results_dir)
    log.debug(f"code image {image} ({'captured' if created else 'reused'})")
    leaf, stamp = create_leaf(bench.workload_dir, datetime.now(), results_dir)
    handlers: list = []
    metadata: dict[str, Any] = {"benchmark_type": bench.benchmark_type, "model": req.model,
                                "command": req.command, "run_datetime": stamp}
    failure: str | None
    status, failure = 6, "did not finish"
    try:
        handlers = attach_leaf(leaf)
        log.info(f"leaf: {leaf}")
        if plan.engine_identity:
            log.info(engine_line(plan.engine_identity))
        metadata.update(_metadata(bench, plan, leaf, stamp))
        metadata.update(storage_env)
        if fs_record is not None:
            write_json(leaf / fs_probe.FILE_NAME, fs_record)
        _survey_hosts(bench, plan, metadata, results_dir)
        bench.gate_hosts(plan)
        with tracing.traced(bench, plan, leaf):
            bench.execute(plan, leaf)
        metadata.update(bench.collect(plan, leaf))
        status, failure = 0, None
        return 0
    except KeyboardInterrupt as exc:
        status, failure = Interrupted.exit_code, "interrupted"
        raise Interrupted("interrupted; the leaf records the failure") from exc
    except MlpsError as exc:
        status, failure = exc.exit_code, str(exc)
        raise
    except Exception as exc:
        status, failure = 1, f"{type(exc).__name__}: {exc}"
        raise
    finally:
        _write_leaf(bench, plan, leaf, metadata, digest, status, failure)
        tracing.distil(leaf)
        if failure:
            log.error(f"{req.benchmark} {req.command} failed (exit {status}): {failure}; leaf {leaf}")
        detach(handlers)
        _summary(bench, plan, leaf, metadata, status)


def _summary(bench: Benchmark, plan: Plan, leaf: Path, metadata: dict[str, Any], status: int) -> None:
    """The run's closing table on stderr (after the leaf's log is detached: never in a result file)."""
    from mlpstorage_py import progress

    req = bench.request
    rows = [("status", "ok" if status == 0 else f"failed (exit {status})"), ("leaf", str(leaf)),
            ("duration", f"{metadata.get('runtime', 0):.1f} s"), ("processes", str(plan.num_processes or "-")),
            ("client hosts", str(metadata.get("num_client_hosts", "-")))]
    progress.summary(f"{req.mode} {req.benchmark} {req.model} {req.command}", rows)


def _survey_hosts(bench: Benchmark, plan: Plan, metadata: dict[str, Any], results_dir: Path) -> None:
    """Every client host answers ssh (in parallel, one deadline) and is described once, over the
    launch layout the engine will use; a host that fails either leaves a failed leaf naming it."""
    layout = bench.launch_layout(plan)
    if layout is None:
        return
    opts, processes = layout
    metadata["launcher"] = mpi.launcher_record(opts)
    if mpi.uses_remote_shell(opts):  # srun reaches nodes through Slurm's daemons, not ssh
        probes = preflight.check_hosts(opts.hosts)
        metadata["host_preflight"] = [{"host": p.host, "ok": p.ok, "detail": p.detail, "seconds": round(p.seconds, 3)}
                                      for p in probes]
    plan.client_hosts = hostinfo.survey(opts, processes, results_dir, drop_cache=bench.drops_cache_with_facts(plan))
    metadata["client_hosts"] = plan.client_hosts
    metadata["num_client_hosts"] = len(plan.client_hosts)


def _fs_gate(bench: Benchmark, plan: Plan, results_dir: Path) -> dict[str, Any] | None:
    """Rules 3.4.2/4.4.2: probe data vs results filesystems; CLOSED refuses a shared one."""
    req = bench.request
    if plan.data_dir is None or req.storage != "file":
        return None
    if not plan.data_dir.is_dir():
        if req.command == "datasize":
            log.info(f"data directory {plan.data_dir} does not exist yet; no filesystem probe recorded")
            return None
        raise missing_directory("data directory", plan.data_dir)
    record = fs_probe.probe(plan.data_dir, results_dir)
    if record["same_filesystem"] and req.mode == "closed" and req.command != "datasize" \
            and not req.skip_fs_separation_gate:
        rule = table.row(req.benchmark).fs_rule
        raise GateRefused(f"data directory {plan.data_dir} and results directory {results_dir} are on the same filesystem "
                          f"(Rules {rule}); put them on different filesystems")
    return record


def _storage_env_gate(bench: Benchmark) -> dict[str, Any]:
    """Rules 1.2: the storage-backend variables set for this run are declared in its metadata;
    a backend variable the table does not list cannot be declared, so CLOSED refuses it."""
    record = environment_record(os.environ)
    unknown = record["undeclared_storage_env"]
    if unknown:
        message = (f"storage-backend variable(s) {', '.join(unknown)} are set but not in the Storage-backend table "
                   "(ManPage.md, ENVIRONMENT), so the run cannot declare them (Rules 1.2)")
        if bench.request.mode == "closed":
            raise GateRefused(message + "; unset them, or run in open")
        log.warning(message + "; the result is valid only as OPEN")
    return record


def _published_args(args: Mapping[str, Any], results_dir: Path | None) -> dict[str, Any]:
    """The parsed command line (Request.recorded_args) with the results directory the run
    resolved (Rules 3.4.1, 4.4.1) and the published metadata's list fields never null (readers
    take len() of them): `hosts` is the host list the launcher was given, its default without
    --hosts, as the reference writes; `params` is [] without --params."""
    shown = dict(args)
    if results_dir is not None:
        shown["results_dir"] = str(results_dir)
    if "hosts" in shown and not shown["hosts"]:
        shown["hosts"] = list(mpi.DEFAULT_HOSTS)
    if "params" in shown and shown["params"] is None:
        shown["params"] = []
    return shown


def _metadata(bench: Benchmark, plan: Plan, leaf: Path, stamp: str) -> dict[str, Any]:
    req = bench.request
    return {
        "benchmark_type": bench.benchmark_type,
        "model": req.model,
        "command": req.command,
        "run_datetime": stamp,
        "num_processes": plan.num_processes,
        "accelerator": plan.accelerator,
        "storage": req.storage,
        "result_dir": str(leaf),
        "args": _published_args(req.recorded_args, bench.results_dir),
        "parameters": plan.parameters,
        "override_parameters": plan.override_parameters,
        "engine_parameters": plan.engine_parameters,
        "verification": plan.verification,
        "system_info": host_info(),
        "invocation_start_time": iso_from_epoch(req.started_at),
        "provenance_file": provenance.FILE_NAME,
    }


def _write_leaf(bench: Benchmark, plan: Plan, leaf: Path, metadata: dict[str, Any], digest: str,
                status: int, failure: str | None) -> None:
    """Pointer, provenance and metadata; written last so they describe the outcome."""
    atomic_write_text(leaf / code_image.POINTER_FILE, code_image.pointer_text(digest) + "\n")
    hosts = libraries.collect(leaf / libraries.DIR_NAME)
    for module, by_version in libraries.disagreements(hosts):
        log.warning(libraries.describe(module, by_version))
    provenance.write(leaf, provenance.build(bench.benchmark_type, plan.parameters, digest, bench.engine, plan.storage_library,
                                            plan.dlio_engine, plan.engine_identity, hosts))
    end = time.time()
    metadata.update(
        executed_command="; ".join(shlex.join(argv) for argv in plan.commands),
        executed_argv=plan.commands,
        invocation_end_time=iso_from_epoch(end),
        runtime=end - bench.request.started_at,
        exit_status=status,
        failure=failure,
        deadline_s=plan.deadline_s,
        startup_allowance_s=None if plan.startup is None else plan.startup.allowance_s,
        startup_seconds=None if plan.startup is None else plan.startup.took_s,
        engine_identity=plan.engine_identity,
        libraries_by_host=hosts,
    )
    Metadata(metadata).write(leaf / f"{bench.benchmark_type}_{metadata['run_datetime']}_metadata.json")
