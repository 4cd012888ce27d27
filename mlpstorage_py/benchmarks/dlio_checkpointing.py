"""Checkpointing through the working group's DLIO (3.0.x) instead of our engine: `--engine dlio`,
OPEN only, a cross-check of our engine on the same storage.

Why it is not the default: without the reference tool's `mlpstorage_py.checkpointing` module
(which our package does not provide) the fork writes zero-filled buffers, fsyncs every file
whatever checkpoint.fsync says, times rank 0 only, and reads the *first* N checkpoints right
after writing them, from the page cache. Here the write and the read are two DLIO invocations
with a page-cache drop on every client host between, so the reads come from storage.

The leaf keeps each invocation's own outputs (dlio_write/, dlio_read/: DLIO's summary.json,
per-rank stats, dlio.log, Hydra's dlio_config/) and, at its top, the files every checkpointing
leaf has: summary.json (the write's save_* and the read's load_* metrics as DLIO reported them,
start of the write to end of the read), <rank>_per_epoch_stats.json and <rank>_output.json
(both phases), dlio.log and the run logs (the two invocations in order), dlio_config/."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlpstorage_py.benchmarks import dlio, dlio_engine
from mlpstorage_py.benchmarks.base import Plan
from mlpstorage_py.benchmarks.options import CheckpointingOptions
from mlpstorage_py.errors import BenchmarkFailed, NotAvailable, UsageError
from mlpstorage_py.launch import hostinfo
from mlpstorage_py.launch.job import LaunchSpec, Work
from mlpstorage_py.launch.mpi import LEAF, MpiOptions, fill
from mlpstorage_py.launch.options import LaunchOptions
from mlpstorage_py.results.io import read_json, write_json
from mlpstorage_py.results.logs import log

PHASES = (("write", "num_checkpoints_write", "save"), ("read", "num_checkpoints_read", "load"))
WRITER_FILE = "checkpoint_writer.json"
LOGS = ("checkpointing_run.stdout.log", "checkpointing_run.stderr.log")


def phase_dir(phase: str) -> str:
    return f"dlio_{phase}"


def plan_phases(options: CheckpointingOptions, launch: LaunchOptions, model: str, storage: str, plan: Plan) -> None:
    """Replace our engine's command by one DLIO invocation per phase that has checkpoints."""
    if storage == "object":
        raise UsageError("--engine dlio runs file storage only: the fork's object checkpointing needs the reference "
                         "tool's mlpstorage_py.checkpointing module, which this tool does not provide")
    if options.o_direct:
        raise UsageError("--o-direct is our engine's; the fork chooses O_DIRECT through storage.storage_type direct_fs")
    runner = dlio_engine.detect(options.dlio_bin_path, options.dlio_bin_path_origin)
    if not runner.table.get("checkpoint_workflow"):
        raise NotAvailable(f"DLIO {runner.version} has no checkpoint-only workflow; --engine dlio needs the working "
                           "group's DLIO 3.0.x (install it in another environment and name it with --dlio-bin-path)")
    config, dropped = dlio.translate(plan.parameters, runner.table)
    config["workflow"] = {"generate_data": False, "train": False, "checkpoint": True}
    for key in dropped:
        log.warning(f"DLIO {runner.version} does not read {key}; it is recorded but not passed to DLIO")
    workloads, commands = {}, []
    ckpt = plan.parameters["checkpoint"]
    for phase, key, _ in PHASES:
        if not ckpt[key]:
            continue
        counts = {k: (ckpt[k] if k == key else 0) for _, k, _ in PHASES}
        workloads[phase] = {**config, "checkpoint": {**config.get("checkpoint", {}), **counts}}
        out = f"{LEAF}/{phase_dir(phase)}"
        commands.append(dlio.command(MpiOptions.of(launch), plan.num_processes,
                                     dlio.workload_name(model, f"checkpoint_{phase}"), engine=runner, output=out,
                                     writer_record=f"{out}/{WRITER_FILE}"))
    plan.commands = commands
    plan.dlio_engine = (runner.stamp, runner.stamp_tag)
    plan.engine_identity = runner.identity()
    plan.engine_parameters.update(engine=runner.name, dlio=runner.record(), workloads=workloads, not_passed=dropped,
                                  phases=list(workloads))
    plan.report.append(f"  engine {runner.name} ({runner.python}): " + ", then a page-cache drop, then ".join(
        f"a {p} invocation" for p in workloads))


def execute(bench: Any, plan: Plan, leaf: Path) -> None:
    """Each phase as its own DLIO job; a page-cache drop on every client host before the read."""
    params = plan.engine_parameters
    ckpt = plan.parameters["checkpoint"]
    drops: list[dict[str, Any]] = []
    with bench.launcher(leaf) as launcher:
        commands = [fill(argv, leaf, launcher.scratch) for argv in plan.commands]
        for phase, argv in zip(params["phases"], commands, strict=True):
            out = leaf / phase_dir(phase)
            out.mkdir()
            dlio.write_workload(launcher.scratch, dlio.workload_name(bench.request.model, f"checkpoint_{phase}"),
                                params["workloads"][phase])
            if phase == "read":
                drops = _drop_caches(bench, plan)
            count = ckpt["num_checkpoints_write" if phase == "write" else "num_checkpoints_read"]
            bench.launch(launcher, LaunchSpec(argv, f"DLIO checkpoint {phase}", out / LOGS[0], out / LOGS[1],
                                              ranks=plan.num_processes,
                                              work=Work(io_bytes=params["checkpoint_bytes"] * count)), plan)
        plan.commands = commands
    merge(leaf, params["phases"], plan.num_processes, drops, params["engine"])


def _drop_caches(bench: Any, plan: Plan) -> list[dict[str, Any]]:
    """Every client host drops its page cache (as training does before a run)."""
    records = hostinfo.survey(MpiOptions.of(bench.request.launch), plan.num_processes, bench.results_dir,
                              drop_cache=True, label="page-cache drop before the reads")
    hosts = [{"rank": min(r.get("ranks") or [0]), "hostname": r["hostname"], "page_cache": r["page_cache"]}
             for r in records]
    if hostinfo.cache_summary(records) != "dropped":
        log.warning(f"page cache before the reads: {hostinfo.cache_summary(records)}")
    return hosts


def _phase_outputs(leaf: Path, phase: str, ranks: int) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """(summary, per-rank stats, per-rank output) of one invocation; DLIO can exit 0 having done nothing."""
    out = leaf / phase_dir(phase)
    dlio.read_outputs(out, expect_training=False)
    try:
        summary = read_json(out / "summary.json")
        stats = [read_json(out / f"{r}_per_epoch_stats.json") for r in range(ranks)]
        outputs = [read_json(out / f"{r}_output.json") for r in range(ranks)]
    except (OSError, ValueError) as exc:
        raise BenchmarkFailed(f"DLIO's {phase} invocation left incomplete outputs in {out}: {exc}") from exc
    return summary, stats, outputs


def _writer(leaf: Path, phases: list[str]) -> str:
    loaded = []
    for phase in phases:
        path = leaf / phase_dir(phase) / WRITER_FILE
        loaded += [w["writer"] for w in read_json(path)["writers_loaded"]] if path.is_file() else []
    return "; ".join(sorted(set(loaded))) or "not recorded"


def merge(leaf: Path, phases: list[str], ranks: int, drops: list[dict[str, Any]], engine: str) -> None:
    """The leaf's top-level files from the phases' own (DLIO's figures, never recomputed)."""
    done = {phase: _phase_outputs(leaf, phase, ranks) for phase in phases}
    first, last = done[phases[0]][0], done[phases[-1]][0]
    metric: dict[str, Any] = {}
    for summary, _, _ in done.values():
        metric.update(summary.get("metric") or {})
    writer = _writer(leaf, phases)
    summary = {**first, "start": first["start"], "end": last["end"], "metric": metric,
               "phases": {p: {"folder": phase_dir(p), "start": s["start"], "end": s["end"]} for p, (s, _, _) in done.items()},
               "checkpoint_engine": {"name": engine, "writer": writer, "timed_ranks": "rank 0 (DLIO's metric)",
                                     "cache_policy_applied": "page cache dropped on every client host between the "
                                                             "write and the read invocation" if drops else
                                                             "no read invocation"},
               "page_cache_hosts": drops}
    write_json(leaf / "summary.json", summary)
    for rank in range(ranks):
        epoch: dict[str, Any] = {}
        for _, stats, _ in done.values():
            epoch.update({k: v for k, v in stats[rank].get("1", {}).items() if k not in ("start", "end")})
        write_json(leaf / f"{rank}_per_epoch_stats.json",
                   {"1": {"start": done[phases[0]][1][rank]["1"]["start"], **epoch,
                          "end": done[phases[-1]][1][rank]["1"]["end"]}})
        write_json(leaf / f"{rank}_output.json", {p: outs[rank] for p, (_, _, outs) in done.items()})
    for name in ("dlio.log", *LOGS):
        with open(leaf / name, "w", encoding="utf-8") as fh:
            for phase in phases:
                fh.write(f"===== DLIO {phase} invocation ({phase_dir(phase)}/{name}) =====\n")
                fh.write((leaf / phase_dir(phase) / name).read_text(encoding="utf-8", errors="replace"))
    log.info(f"DLIO's checkpoint writer: {writer}")


def workload_record(plan: Plan) -> dict[str, Any]:
    """What dlio_config/config.yaml records: the workload as DLIO read it over both invocations."""
    params = plan.engine_parameters
    config = dict(next(iter(params["workloads"].values())))
    ckpt = plan.parameters["checkpoint"]
    config["checkpoint"] = {**config["checkpoint"], "num_checkpoints_write": ckpt["num_checkpoints_write"],
                            "num_checkpoints_read": ckpt["num_checkpoints_read"]}
    return config


def check_size(summary: dict[str, Any], planned_gib: float) -> None:
    """The fork computes the checkpoint size itself; it must be the layout we planned."""
    got = (summary.get("metric") or {}).get("checkpoint_size_GB", 0)
    if abs(got - planned_gib) > 1e-6 * max(1.0, planned_gib):
        raise BenchmarkFailed(f"DLIO's checkpoint_size_GB {got} differs from the planned layout's {planned_gib}")
