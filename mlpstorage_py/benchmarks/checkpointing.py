"""Checkpointing (llama3 8b/70b/405b/1t): our MPI checkpoint engine writes then reads
checkpoints shard by shard, because DLIO 2.0.0 has no checkpoint-only workflow. With `object`
storage the checkpoint folder is an s3:// URI and the engine's I/O goes through s3dlio.
OPEN `--engine dlio` runs the working group's DLIO 3.0.x instead, as a cross-check
(benchmarks/dlio_checkpointing.py)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import yaml

from mlpstorage_py import __version__, progress
from mlpstorage_py.benchmarks import dlio_checkpointing, object_endpoints
from mlpstorage_py.benchmarks.base import Benchmark, Plan, Request
from mlpstorage_py.benchmarks.options import CheckpointingOptions, given
from mlpstorage_py.checkpoint import engine as checkpoint_engine
from mlpstorage_py.checkpoint.engine import ENGINE_NAME
from mlpstorage_py.checkpoint.shards import build_layout
from mlpstorage_py.errors import BenchmarkFailed, ConfigurationError, GateRefused, UsageError, missing_directory
from mlpstorage_py.launch import hostinfo
from mlpstorage_py.launch.job import LaunchSpec, Work
from mlpstorage_py.launch.mpi import LEAF, SAFE_PATH, SCRATCH, MpiOptions, fill, mpi_command
from mlpstorage_py.results import libraries
from mlpstorage_py.results.logs import log
from mlpstorage_py.results.tree import layout
from mlpstorage_py.rules import configs as workloads
from mlpstorage_py.rules import predicates
from mlpstorage_py.rules.tables import checker
from mlpstorage_py.storage import s3
from mlpstorage_py.storage.endpoints import Endpoints

ENGINE = ENGINE_NAME
ENGINE_IDENTITY = {"name": ENGINE_NAME, "version": __version__, "path": checkpoint_engine.__file__,
                   "origin": "our checkpoint engine: python -m mlpstorage_py.checkpoint.engine, one per MPI rank"}
# Model-shape keys OPEN/whatif may scale down for tests and demos (Rules 4.6.3 forbids them in CLOSED).
SHAPE_KEYS = ("model.num_layers", "model.hidden_size", "model.ffn_hidden_size", "model.num_attention_heads",
              "model.num_kv_heads", "model.vocab_size")


class CheckpointingBenchmark(Benchmark):
    benchmark_type = "checkpointing"
    options_type = CheckpointingOptions
    request: Request[CheckpointingOptions]
    engine = ENGINE
    endpoints: Endpoints | None = None  # several S3 endpoints of an object run (benchmarks/object_endpoints.py)

    def leaf_tail(self) -> Path:
        return layout.leaf_tail(self.benchmark_type, model=self.request.model)

    def plan(self) -> Plan:
        req, opts = self.request, self.request.options
        overrides, verification = self.overrides()
        parameters = workloads.apply_overrides(workloads.checkpointing(req.model), _shape_paths(overrides))
        processes = given(opts.num_processes, "--num-processes")
        ckpt = parameters["checkpoint"]
        writes, reads = opts.num_checkpoints_write, opts.num_checkpoints_read
        if writes < 0 or reads < 0 or writes + reads == 0:
            raise UsageError("--num-checkpoints-write and --num-checkpoints-read must be >= 0 and not both 0")
        if writes and reads > writes:
            raise UsageError(f"a combined run reads back what it wrote: --num-checkpoints-read {reads} > --num-checkpoints-write {writes}")
        ckpt.update(num_checkpoints_write=writes, num_checkpoints_read=reads)
        folder = opts.checkpoint_folder
        if req.command == "run" and not folder:
            raise ConfigurationError("--checkpoint-folder (or MLPSTORAGE_CHECKPOINT_FOLDER) is required: where checkpoints go")
        if folder and req.storage == "object":
            ckpt["checkpoint_folder"] = str(s3.parse_uri(folder, "--checkpoint-folder").child(req.model))
        elif folder:
            if s3.is_object_uri(folder):
                raise UsageError("an s3:// --checkpoint-folder needs the `object` storage positional")
            ckpt["checkpoint_folder"] = str(Path(folder).expanduser().resolve() / req.model)
        try:
            layout = build_layout(parameters, processes)
        except ValueError as exc:
            raise UsageError(f"{req.model} cannot be laid out on {processes} processes: {exc}") from None
        plan = Plan(parameters=parameters, num_processes=processes, accelerator=opts.accelerator_type,
                    override_parameters=overrides, verification=verification,
                    data_dir=Path(ckpt["checkpoint_folder"]).parent if folder and req.storage == "file" else None,
                    storage_library=s3.library() if req.storage == "object" else None,
                    engine_identity=ENGINE_IDENTITY)
        plan.engine_parameters = {"engine": ENGINE, "checkpoint_bytes": layout.total_bytes,
                                  "checkpoint_size_GB": layout.total_gib,
                                  "bytes_per_rank": [layout.rank_bytes(r) for r in range(processes)]}
        program = [sys.executable, *SAFE_PATH, "-m", "mlpstorage_py.checkpoint.engine", "--workload", f"{SCRATCH}/workload.json",
                   "--checkpoint-folder", ckpt["checkpoint_folder"], "--output-dir", LEAF,
                   "--num-write", str(writes), "--num-read", str(reads), "--libraries", f"{LEAF}/{libraries.DIR_NAME}"]
        hosts = len(MpiOptions.of(req.launch).hosts)
        self.endpoints = object_endpoints.plan(
            req, plan, largest_object=max(f.nbytes for r in range(processes) for f in layout.files(r)),
            client_memory_gb=opts.client_host_memory_in_gb,
            ranks_per_host=object_endpoints.ranks_per_host(processes, hosts))
        if self.endpoints is not None:
            program += self.endpoints.rank_args()
        if opts.o_direct:
            if req.storage == "object":
                raise UsageError("--o-direct applies to files; an object run has no page cache to bypass")
            program.append("--o-direct")
        if req.command != "datasize":
            plan.commands = [mpi_command(MpiOptions.of(req.launch), processes, program)]
        largest = max(plan.engine_parameters["bytes_per_rank"])
        plan.report = [
            f"{req.model}: checkpoint {layout.total_gib:,.2f} GiB (model {layout.model_bytes / 2**30:,.2f} GiB + optimizer "
            f"{layout.optimizer_bytes / 2**30:,.2f} GiB), TP {layout.tensor} x PP {layout.pipeline} x DP {layout.data}, "
            f"ZeRO {layout.zero_stage}, on {processes} processes",
            f"  largest per-rank share {largest / 2**30:,.2f} GiB; {writes} write(s), {reads} read(s)",
            *object_endpoints.report(self.endpoints, processes),
        ]
        if req.command != "datasize" and self._through_dlio():
            dlio_checkpointing.plan_phases(req.options, req.launch, req.model, req.storage, plan)
        return plan

    def _through_dlio(self) -> bool:
        return self.request.options.engine == "dlio"

    def preflight(self, plan: Plan) -> None:
        """Rules 4.6.1, 4.3.5, 4.3.4, 4.6.4 and 4.4.1 before any byte is written."""
        req, rules = self.request, checker()
        model, processes = req.model, plan.num_processes
        size = plan.engine_parameters["checkpoint_size_GB"]
        closed = req.mode == "closed"
        subset = req.options.checkpoint_subset
        if closed:
            subset_model, subset_processes = predicates.checkpoint_subset(rules)
            if subset and (model != subset_model or processes != subset_processes):
                raise GateRefused(f"a CLOSED subset run must be {subset_model} on exactly {subset_processes} processes "
                                  "(Rules 4.3.5)")
            required = rules["closed_mpi_processes"][model]
            if processes != required:
                raise GateRefused(f"CLOSED {model} needs exactly {required} processes, not {processes} (Rules 4.6.1)")
            ckpt = plan.parameters["checkpoint"]
            if not predicates.checkpoint_invocation_ok(rules, ckpt["num_checkpoints_write"], ckpt["num_checkpoints_read"]):
                count = predicates.checkpoint_combined(rules)[0]
                raise GateRefused(f"CLOSED runs write and read {count} checkpoints, together or as a write then a "
                                  "read invocation (Rules 4.7.1)")
        else:
            par = plan.parameters["model"].get("parallelism") or {}
            unit = int(par.get("tensor", 1)) * int(par.get("pipeline", 1))
            if processes % unit and not subset and req.mode == "open":
                log.warning(f"OPEN scaling is in multiples of TP x PP = {unit} (Rules 4.6.4); {processes} is not one")
        accelerator = plan.accelerator
        if accelerator:
            memory = predicates.checkpoint_accelerator_memory(rules, accelerator, processes)
            if memory < size:
                message = (f"{processes} x {accelerator} ({rules['accelerator_memory_gb'][accelerator]} GiB each) = {memory:,} GiB "
                           f"cannot hold the {size:,.1f} GiB checkpoint (Rules 4.3.4)")
                if closed:
                    raise GateRefused(message)
                log.warning(message)
        if req.command == "run" and self.results_dir is not None and req.storage == "file":
            folder = Path(plan.parameters["checkpoint"]["checkpoint_folder"])
            if not folder.parent.is_dir():
                raise missing_directory("checkpoint folder", folder.parent)
            results = self.results_dir.resolve()
            if folder == results or results in folder.parents or folder in results.parents:
                raise GateRefused(f"the checkpoint folder {folder} and the results directory must be apart (Rules 4.4.1)")
            need = plan.engine_parameters["checkpoint_bytes"] * plan.parameters["checkpoint"]["num_checkpoints_write"]
            stat = os.statvfs(folder if folder.exists() else folder.parent)
            free = stat.f_bavail * stat.f_frsize
            if need > free:
                raise GateRefused(f"writing {plan.parameters['checkpoint']['num_checkpoints_write']} checkpoints needs "
                                  f"{need / 2**30:,.1f} GiB but {folder.parent} has {free / 2**30:,.1f} GiB free")

    def execute(self, plan: Plan, leaf: Path) -> None:
        folder = plan.parameters["checkpoint"]["checkpoint_folder"]
        if self.request.storage == "object":
            s3.check_reachable(s3.parse_uri(folder, "--checkpoint-folder"),
                               endpoints=self.endpoints.urls if self.endpoints else ())
        else:
            Path(folder).mkdir(parents=True, exist_ok=True)
        if self._through_dlio():
            dlio_checkpointing.execute(self, plan, leaf)
            _write_config_record(leaf, plan, self.request.launch.hosts, dlio_checkpointing.workload_record(plan),
                                 f"written by mlpstorage: {plan.engine_parameters['engine']} ran the "
                                 f"{' and '.join(plan.engine_parameters['phases'])} as separate invocations, "
                                 "each with its own Hydra record in dlio_<phase>/dlio_config")
            return
        ckpt = plan.parameters["checkpoint"]
        count = ckpt["num_checkpoints_write"] + ckpt["num_checkpoints_read"]
        stdout, stderr = leaf / "checkpointing_run.stdout.log", leaf / "checkpointing_run.stderr.log"
        # Progress: the engine's rank 0 prints a line per checkpoint done, after its timed span.
        marks = progress.LogMarks(stdout, r"\b((?:save|load)_ckpt\d+):")
        checkpoint_bytes = plan.engine_parameters["checkpoint_bytes"]
        with self.launcher(leaf) as launcher:
            (launcher.scratch / "workload.json").write_text(json.dumps(plan.parameters), encoding="utf-8")
            plan.commands = [fill(argv, leaf, launcher.scratch) for argv in plan.commands]
            with object_endpoints.watched(self.endpoints, plan):
                self.launch(launcher, LaunchSpec(  # one unit of work: a rank's share of a checkpoint
                    plan.commands[0], "checkpoint engine", stdout, stderr, ranks=plan.num_processes,
                    work=Work(io_bytes=checkpoint_bytes * count, unit_bytes=checkpoint_bytes / plan.num_processes),
                    progress=progress.polled("checkpoints", count, marks, "written/read")), plan)
        _write_config_record(leaf, plan, self.request.launch.hosts)

    def collect(self, plan: Plan, leaf: Path) -> dict[str, Any]:
        """The engine must leave every rank's stats and a summary with the phases it ran."""
        summary_path = leaf / "summary.json"
        if not summary_path.is_file() or not (leaf / "dlio.log").is_file():
            raise BenchmarkFailed(f"the checkpoint engine exited 0 but left no summary.json/dlio.log in {leaf}")
        summary = json.loads(summary_path.read_text(encoding="utf-8"))
        metric = summary.get("metric", {})
        ckpt = plan.parameters["checkpoint"]
        for phase, count in (("save", ckpt["num_checkpoints_write"]), ("load", ckpt["num_checkpoints_read"])):
            if count and f"{phase}_checkpoint_io_mean_GB_per_second" not in metric:
                raise BenchmarkFailed(f"summary.json has no {phase}_checkpoint_io_mean_GB_per_second although {count} were asked for")
        missing = [r for r in range(plan.num_processes) if not (leaf / f"{r}_per_epoch_stats.json").is_file()]
        if missing:
            raise BenchmarkFailed(f"ranks {missing} wrote no per_epoch_stats.json")
        if self._through_dlio():
            dlio_checkpointing.check_size(summary, plan.engine_parameters["checkpoint_size_GB"])
        elif abs(metric.get("checkpoint_size_GB", 0) - plan.engine_parameters["checkpoint_size_GB"]) > 1e-9:
            raise BenchmarkFailed("the engine's checkpoint_size_GB differs from the planned layout")
        parts = [f"{phase} {metric[f'{phase}_checkpoint_io_mean_GB_per_second']:.3f} GiB/s"
                 for phase in ("save", "load") if f"{phase}_checkpoint_io_mean_GB_per_second" in metric]
        print(f"{self.request.model}: checkpoint {metric['checkpoint_size_GB']:.3f} GiB, " + ", ".join(parts))
        extra: dict[str, Any] = {"engine": plan.engine_parameters["engine"]}
        if ckpt["num_checkpoints_read"]:
            extra["page_cache"] = _read_cache_record(summary, plan.client_hosts or [])
        return extra


def _read_cache_record(summary: dict[str, Any], client_hosts: list[dict[str, Any]]) -> dict[str, Any]:
    """Before the reads, per client host (as MPI placed the reporting rank): dropped, or why not."""
    placed = {rank: h["host"] for h in client_hosts for rank in h["ranks"]}
    hosts = [{"host": placed.get(r["rank"], r["hostname"]), "hostname": r["hostname"], "page_cache": r["page_cache"]}
             for r in summary.get("page_cache_hosts") or []]
    applied = (summary.get("checkpoint_engine") or {}).get("cache_policy_applied")
    if applied and applied.startswith("not applicable"):
        return {"before_read": applied, "hosts": hosts}
    return {"before_read": hostinfo.cache_summary(hosts) if hosts else "not recorded", "policy_applied": applied,
            "hosts": hosts}


def _shape_paths(overrides: dict[str, str]) -> dict[str, str]:
    """model.hidden_size etc. live under model.transformer in the workload file."""
    return {(f"model.transformer.{k.split('.', 1)[1]}" if k in SHAPE_KEYS and k != "model.num_layers" else k): v
            for k, v in overrides.items()}


def _write_config_record(leaf: Path, plan: Plan, hosts: tuple[str, ...], workload: dict[str, Any] | None = None,
                         note: str | None = None) -> None:
    """Rules 2.1.26 want dlio_config/{config,hydra,overrides}.yaml in every checkpointing leaf;
    our engine is not DLIO/Hydra (and --engine dlio runs two Hydra invocations), so they record
    what actually ran."""
    folder = leaf / "dlio_config"
    folder.mkdir(exist_ok=True)
    (folder / "config.yaml").write_text(yaml.safe_dump({"workload": workload or plan.parameters}, sort_keys=False),
                                        encoding="utf-8")
    (folder / "overrides.yaml").write_text(
        yaml.safe_dump([f"++workload.{k}={v}" for k, v in plan.override_parameters.items()]), encoding="utf-8")
    (folder / "hydra.yaml").write_text(yaml.safe_dump({
        "note": note or f"written by {ENGINE}; DLIO 2.0.0 has no checkpoint workflow, so no Hydra run took place",
        "engine": plan.engine_parameters["engine"] if plan.engine_parameters else ENGINE, "command": plan.commands, "num_processes": plan.num_processes,
        "hosts": list(hosts) or ["127.0.0.1"]}, sort_keys=False), encoding="utf-8")
