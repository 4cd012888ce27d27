"""Training (unet3d, retinanet): datasize by Rules 3.1.2; datagen, run and configview through DLIO
(this environment's, or another's with --dlio-bin-path: benchmarks/dlio_engine.py), on a directory
(file) or an s3:// prefix (object: DLIO 2.0.0 with the s3dlio plug-ins of storage/dlio_s3dlio.py,
the fork's 3.0.x through its own s3dlio path)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from mlpstorage_py import __version__, progress
from mlpstorage_py.benchmarks import datasets, dlio, dlio_engine, object_endpoints
from mlpstorage_py.benchmarks.base import Benchmark, Plan, Request
from mlpstorage_py.benchmarks.options import TrainingOptions, given
from mlpstorage_py.errors import BenchmarkFailed, ConfigurationError, GateRefused, Refused, missing_directory
from mlpstorage_py.launch import hostinfo
from mlpstorage_py.launch.job import LaunchSpec, Work
from mlpstorage_py.launch.mpi import MpiOptions, fill
from mlpstorage_py.results.io import utc_now, write_json
from mlpstorage_py.results.logs import log
from mlpstorage_py.results.tree import layout, untrusted
from mlpstorage_py.results.tree.values import dig
from mlpstorage_py.rules import configs as workloads
from mlpstorage_py.rules import predicates
from mlpstorage_py.rules.tables import checker
from mlpstorage_py.storage import s3
from mlpstorage_py.storage.endpoints import Endpoints

GIB = 1024 ** 3
LEAF_MANIFEST = "datagen-manifest.json"
# The most training files datagen takes from a datasize leaf: far beyond what Rules 3.1.2 asks
# of any real cluster; the datagen gate then checks the disk has room for the count.
MAX_TRAIN_FILES = 10 ** 11


@dataclass(frozen=True)
class Datasize:
    """Every number of the Rules 3.1.2 calculation, so the report can show its reasoning."""

    min_samples_steps: int
    min_samples_memory: float
    min_samples: int
    num_files_train: int
    num_subfolders_train: int
    total_disk_bytes: int
    bound: str


def compute_datasize(rules: dict[str, Any], *, batch_size: int, samples_per_file: int, record_length: int,
                     accelerators: int, hosts: int, memory_gb: float, max_files_per_subfolder: int) -> Datasize:
    """Rules 3.1.2 by the edition's checker block `rules` (the bounds the checker recomputes,
    rules/predicates.training_min_samples): enough samples for its steps per epoch on every
    accelerator and its multiple of the clients' total memory, whichever is larger; the file
    count is rounded up to a multiple of the accelerators (ranks), because DLIO gives every rank
    the same share and a count that does not divide leaves the last rank reading past the list."""
    steps, memory = predicates.training_min_samples(rules, batch_size=batch_size, accelerators=accelerators,
                                                    host_memory_gib=hosts * memory_gb, record_length=record_length)
    min_samples = max(steps, math.ceil(memory))
    files = math.ceil(math.ceil(min_samples / samples_per_file) / accelerators) * accelerators
    subfolders = 0 if files <= max_files_per_subfolder else math.ceil(files / max_files_per_subfolder)
    return Datasize(
        min_samples_steps=steps,
        min_samples_memory=memory,
        min_samples=min_samples,
        num_files_train=files,
        num_subfolders_train=subfolders,
        total_disk_bytes=files * samples_per_file * record_length,
        bound="steps" if steps >= memory else "memory",
    )


def _tool_defaults() -> dict[str, Any]:
    with open(workloads.configs_dir() / "tool.yaml", encoding="utf-8") as fh:
        return yaml.safe_load(fh)["training"]


def sizing(parameters: dict[str, Any], accelerators: int, hosts: int, memory_gb: float) -> Datasize:
    """Rules 3.1.2 for a resolved workload, with the edition's numbers."""
    return compute_datasize(
        checker(),
        batch_size=int(parameters["reader"]["batch_size"]),
        samples_per_file=int(parameters["dataset"]["num_samples_per_file"]),
        record_length=int(parameters["dataset"]["record_length_bytes"]),
        accelerators=accelerators, hosts=hosts, memory_gb=memory_gb,
        max_files_per_subfolder=int(_tool_defaults()["max_files_per_subfolder"]),
    )


def _sibling_metadata(path: Path) -> dict[str, Any]:
    """Another leaf's metadata, or {} (with a warning) when it is not a readable JSON object:
    the tree is data, and a leaf that cannot be read is one this run does not build on."""
    try:
        meta = untrusted.read_record(path)
    except (OSError, ValueError) as exc:
        log.warning(f"skipping {untrusted.shown(path)}: {untrusted.shown(exc)}")
        return {}
    return meta if isinstance(meta, dict) else {}


def _recorded_count(path: Path, meta: dict[str, Any], name: str, least: int, most: int) -> int:
    """A count datagen takes from a datasize leaf: a whole number from `least` to `most`, else
    refused in one line naming the leaf and the field (it sizes what is written to disk)."""
    value = dig(meta, "parameters", "dataset", name)
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most:
        raise Refused(f"datasize leaf {untrusted.shown(path.parent)}: parameters.dataset.{name} is "
                      f"{untrusted.shown(repr(value))[:60]}, not a whole number from {least} to {most:,}")
    return value


class TrainingBenchmark(Benchmark):
    benchmark_type = "training"
    options_type = TrainingOptions
    request: Request[TrainingOptions]
    endpoints: Endpoints | None = None  # several S3 endpoints of an object run (benchmarks/object_endpoints.py)

    def leaf_tail(self) -> Path:
        return layout.leaf_tail(self.benchmark_type, model=self.request.model, command=self.request.command)

    # -- plan ---------------------------------------------------------------------------
    def plan(self) -> Plan:
        if self.request.command == "datasize":
            return self._plan_datasize()
        opts = self.request.options
        if self.request.command == "datagen":
            return self._plan_dlio(workloads.datagen(self.request.model), given(opts.num_processes, "--num-processes"))
        return self._plan_dlio(workloads.training(self.request.model, given(opts.accelerator_type, "--accelerator-type")),
                               given(opts.num_accelerators, "--num-accelerators"))

    def _dataset(self) -> datasets.FileDataset | datasets.ObjectDataset:
        data_dir = self.request.options.data_dir
        if not data_dir:
            raise ConfigurationError("--data-dir (or MLPSTORAGE_DATA_DIR) is required: where the dataset lives")
        return datasets.locate(data_dir, self.request.storage, self.request.model)

    def _plan_datasize(self) -> Plan:
        req, opts = self.request, self.request.options
        overrides, verification = self.overrides()
        parameters = workloads.apply_overrides(
            workloads.training(req.model, given(opts.accelerator_type, "--accelerator-type")), overrides)
        data_dir = opts.data_dir
        plan = Plan(parameters=parameters, num_processes=given(opts.max_accelerators, "--max-accelerators"),
                    accelerator=opts.accelerator_type, override_parameters=overrides, verification=verification,
                    data_dir=Path(data_dir) if data_dir else None,
                    engine_identity={"name": "mlpstorage", "version": __version__, "path": __file__,
                                     "origin": "the Rules 3.1.2 calculation in mlpstorage itself; datasize runs no DLIO"})
        if req.mode == "whatif":  # plan only: size for this host, measured here
            plan.client_hosts = [{"host": "localhost", **hostinfo.local_facts(), "ranks": [0], "collection_method": "local"}]
            self._size(plan)
        return plan

    def _size(self, plan: Plan) -> None:
        """Rules 3.1.2 for the measured client hosts: the datasize figures and their report."""
        opts = self.request.options
        hosts = int(opts.num_client_hosts or len(plan.client_hosts or []) or 1)
        plan.cluster = self._cluster(plan)
        memory_gb = self._sizing_memory(given(opts.client_host_memory_in_gb, "--client-host-memory-in-gb"), plan.cluster)
        size = sizing(plan.parameters, plan.num_processes, hosts, memory_gb)
        plan.parameters["dataset"].update(num_files_train=size.num_files_train,
                                          num_subfolders_train=size.num_subfolders_train,
                                          total_disk_bytes=size.total_disk_bytes)
        plan.report = self._datasize_report(size, plan.parameters, hosts, memory_gb, plan.num_processes)

    @staticmethod
    def _cluster(plan: Plan) -> dict[str, Any]:
        hosts = plan.client_hosts or []
        method = "mpi" if any(h.get("collection_method") == "mpi" for h in hosts) else "local"
        return {"hosts": hosts, "collection_method": method}

    def launch_layout(self, plan: Plan) -> tuple[MpiOptions, int] | None:
        """datasize measures the hosts the run will use, with its accelerator count."""
        return MpiOptions.of(self.request.launch), plan.num_processes

    def gate_hosts(self, plan: Plan) -> None:
        if self.request.command == "datasize":
            self._size(plan)
        elif self.request.command == "run" and self.dataset.storage == "file":
            self._gate_memory(plan)

    @staticmethod
    def _sizing_memory(declared: float, cluster: dict[str, Any]) -> float:
        """The larger of the declared and the measured per-host memory, warning when they differ:
        validate recomputes Rules 3.1.2 from the memory DLIO measures, so under-declaring fails later."""
        measured = max((h["memory_total_bytes"] or 0) for h in cluster["hosts"]) / GIB
        cluster.update(declared_memory_gb=declared, measured_memory_gb=measured)
        if abs(measured - declared) > 0.05 * declared:
            log.warning(f"declared client memory {declared:g} GiB differs from the measured {measured:.1f} GiB; "
                        "sizing uses the larger")
        return max(declared, measured)

    def _datasize_report(self, size: Datasize, parameters: dict[str, Any], hosts: int, memory_gb: float,
                         accelerators: int) -> list[str]:
        ds, batch = parameters["dataset"], parameters["reader"]["batch_size"]
        steps, mult = predicates.training_sizing(checker())
        return [
            f"Dataset size for {self.request.model} on up to {accelerators} simulated {self.request.options.accelerator_type} "
            f"across {hosts} client host(s) with {memory_gb:g} GiB each (Rules 3.1.2):",
            f"  steps constraint : {steps} steps x batch {batch} x {accelerators} accelerators = {size.min_samples_steps:,} samples",
            f"  memory constraint: {hosts} hosts x {memory_gb:g} GiB x {mult} / {ds['record_length_bytes']:,} B per sample "
            f"= {size.min_samples_memory:,.1f} samples",
            f"  the {size.bound} constraint binds: {size.min_samples:,} samples",
            f"  num_files_train      = {size.num_files_train:,} ({ds['num_samples_per_file']} sample(s) per file, "
            f"rounded up to a multiple of the {accelerators} accelerators)",
            f"  num_subfolders_train = {size.num_subfolders_train}",
            f"  total_disk_bytes     = {size.total_disk_bytes:,} ({size.total_disk_bytes / GIB:,.2f} GiB)",
        ]

    def _plan_dlio(self, base: dict[str, Any], processes: int) -> Plan:
        req = self.request
        overrides, verification = self.overrides()
        self.dataset = data = self._dataset()
        for section, values in data.engine_location().items():
            for key, value in values.items():
                overrides.setdefault(f"{section}.{key}", str(value))
        runner = dlio_engine.detect(req.options.dlio_bin_path, req.options.dlio_bin_path_origin)
        if data.storage == "object" and runner.native_object_storage:
            for key, value in runner.table["object_storage"].items():
                overrides.setdefault(f"storage.{key}", str(value))
        parameters = workloads.apply_overrides(base, overrides)
        if req.command == "datagen":
            self._size_datagen(parameters, overrides)
        engine, dropped = dlio.translate(parameters, runner.table)
        plugin = data.storage == "object" and not runner.native_object_storage
        if plugin and req.command == "run":
            engine.setdefault("reader", {}).update(datasets.OBJECT_READER)
        for key in dropped:
            log.warning(f"DLIO {runner.version} does not read {key}; it is recorded but not passed to DLIO")
        plan = Plan(parameters=parameters, num_processes=int(processes), accelerator=req.options.accelerator_type,
                    override_parameters=overrides, verification=verification,
                    data_dir=data.folder.parent if isinstance(data, datasets.FileDataset) else None,
                    engine_parameters={"engine": runner.name, "dlio": runner.record(), "workload": engine,
                                       "not_passed": dropped},
                    storage_library=s3.library() if data.storage == "object" else None,
                    dlio_engine=(runner.stamp, runner.stamp_tag), engine_identity=runner.identity())
        self.endpoints = object_endpoints.plan(req, plan, native_fork=runner.native_object_storage)
        plan.commands = [dlio.command(MpiOptions.of(req.launch), int(processes), self._workload_name(),
                                      engine=runner, s3dlio=plugin,
                                      epoch_cache=req.command == "run" and data.storage == "file",
                                      endpoint_args=self.endpoints.rank_args() if self.endpoints else None)]
        plan.report = [f"{req.model} {req.command}: {processes} MPI ranks, dataset {data}",
                       *object_endpoints.report(self.endpoints, int(processes)),
                       "resolved DLIO workload:", *("  " + line for line in yaml.safe_dump(engine, sort_keys=False).splitlines())]
        return plan

    def _workload_name(self) -> str:
        return dlio.workload_name(self.request.model, "datagen" if self.request.command == "datagen" else "run")

    def _size_datagen(self, parameters: dict[str, Any], overrides: dict[str, str]) -> None:
        """Generate what datasize asked for unless the user says otherwise (Rules 3.2.1)."""
        if "dataset.num_files_train" in overrides or self.workload_dir is None:
            return
        for path in reversed(untrusted.leaf_records(self.workload_dir.parent / "datasize", "training_*_metadata.json")):
            meta = _sibling_metadata(path)
            if meta.get("exit_status") == 0:
                files = _recorded_count(path, meta, "num_files_train", 1, MAX_TRAIN_FILES)
                subfolders = _recorded_count(path, meta, "num_subfolders_train", 0, files)
                parameters["dataset"].update(num_files_train=files, num_subfolders_train=subfolders)
                log.info(f"dataset size from datasize leaf {path.parent.name}: {files:,} files")
                return
        log.warning("no datasize leaf for this workload; generating the configuration's default "
                    f"{parameters['dataset']['num_files_train']:,} files (run datasize first for a valid submission)")

    # -- gates --------------------------------------------------------------------------
    def preflight(self, plan: Plan) -> None:
        req = self.request
        if req.command == "datasize" or self.results_dir is None or not isinstance(self.dataset, datasets.FileDataset):
            return  # an object dataset is gated once the leaf exists, after the endpoint answered
        folder = self.dataset.folder
        if not folder.parent.is_dir():
            raise missing_directory("data directory", folder.parent)
        if folder.resolve() == self.results_dir.resolve() or self.results_dir.resolve() in folder.resolve().parents:
            raise GateRefused(f"the dataset ({folder}) must not be inside the results directory (Rules 3.4.1)")
        self._gate_dataset(plan)

    def _gate_dataset(self, plan: Plan) -> None:
        if self.request.command == "datagen":
            self._gate_datagen(plan)
        elif self.request.command == "run":
            self._gate_run(plan)

    def _gate_datagen(self, plan: Plan) -> None:
        data = self.dataset
        if not data.is_empty() and not self.request.options.overwrite:
            raise GateRefused(f"{data} is not empty; datagen never overwrites a dataset (use --overwrite to replace it)")
        if isinstance(data, datasets.FileDataset):
            ds = plan.parameters["dataset"]
            need = int(ds["num_files_train"]) * int(ds["num_samples_per_file"]) * int(ds["record_length_bytes"])
            probe = data.folder if data.folder.exists() else data.folder.parent
            free = os.statvfs(probe).f_bavail * os.statvfs(probe).f_frsize
            if need > free:
                raise GateRefused(f"datagen needs {need / GIB:,.2f} GiB but {probe} has {free / GIB:,.2f} GiB free")

    def _gate_run(self, plan: Plan) -> None:
        """Rules 3.3.1 and 3.1.2 against the generated dataset and the measured clients."""
        manifest = self.dataset.read_manifest()
        if manifest is None:
            raise ConfigurationError(f"no generated dataset at {self.dataset} (no {datasets.MANIFEST}); run datagen first")
        self.manifest = manifest
        ds = plan.parameters["dataset"]
        if "dataset.num_files_train" not in plan.override_parameters:
            ds["num_files_train"] = manifest["num_files_train"]
        ds["num_subfolders_train"] = manifest.get("num_subfolders_train", 0)
        if int(ds["num_files_train"]) > int(manifest["num_files_train"]):
            raise GateRefused(f"the run asks for {ds['num_files_train']} files but datagen made {manifest['num_files_train']} (Rules 3.3.1)")
        self._gate_divisible(plan, int(manifest["num_files_train"]))
        if int(ds["record_length_bytes"]) != int(manifest["record_length_bytes"]):
            raise GateRefused(f"the dataset was generated with records of {manifest['record_length_bytes']} B, "
                              f"the workload reads {ds['record_length_bytes']} B")
        plan.engine_parameters["workload"]["dataset"].update(num_files_train=ds["num_files_train"],
                                                             num_subfolders_train=ds["num_subfolders_train"])

    def _gate_divisible(self, plan: Plan, generated: int) -> None:
        """DLIO 2.0.0 gives each rank ceil(files / ranks) files; when that does not divide, the last
        rank indexes past the file list and the job hangs. CLOSED refuses; OPEN rounds the count up
        to a multiple of the ranks if the dataset has the files, else down, and says so."""
        ds, ranks = plan.parameters["dataset"], plan.num_processes
        files = int(ds["num_files_train"])
        if files % ranks == 0:
            return
        message = f"num_files_train {files} does not divide by the {ranks} ranks"
        if self.request.mode == "closed":
            raise GateRefused(message + "; generate a dataset whose file count is a multiple of the accelerators "
                              "(datasize rounds up), or change -na")
        up, down = math.ceil(files / ranks) * ranks, files // ranks * ranks
        use = up if up <= generated else down
        if use == 0:
            raise GateRefused(message + f" and the dataset has only {generated} files")
        log.warning(f"{message}; using {use} files (a multiple of the ranks)")
        ds["num_files_train"] = use
        plan.override_parameters.setdefault("dataset.num_files_train", str(use))

    def _gate_memory(self, plan: Plan) -> None:
        """Rules 3.1.2 against the measured client hosts."""
        ds, manifest = plan.parameters["dataset"], self.manifest
        plan.cluster = self._cluster(plan)
        hosts = plan.cluster["hosts"]
        memory_gb = self._sizing_memory(given(self.request.options.client_host_memory_in_gb, "--client-host-memory-in-gb"),
                                        plan.cluster)
        size = sizing(plan.parameters, plan.num_processes, len(hosts), memory_gb)
        if int(ds["num_files_train"]) < size.num_files_train:
            message = (f"{ds['num_files_train']} training files is below the Rules 3.1.2 minimum of {size.num_files_train} "
                       f"for {plan.num_processes} accelerators on {len(hosts)} host(s) with {memory_gb:.1f} GiB")
            if self.request.mode == "closed":
                raise GateRefused(message)
            log.warning(message + "; the result cannot be CLOSED")
        dataset_bytes = int(manifest["num_files_train"]) * int(manifest["num_samples_per_file"]) * int(manifest["record_length_bytes"])
        client_bytes = sum(h["memory_total_bytes"] or 0 for h in hosts)
        plan.page_cache.update(dataset_bytes=dataset_bytes, client_memory_bytes=client_bytes,
                               dataset_fits_in_client_memory=dataset_bytes <= client_bytes)

    # -- execute and collect ------------------------------------------------------------
    def execute(self, plan: Plan, leaf: Path) -> None:
        if self.request.command == "datasize":
            for line in plan.report:
                print(line)
                log.debug(line)
            return
        data = self.dataset
        if data.storage == "object":
            data.check(self.endpoints.urls if self.endpoints else ())
            self._gate_dataset(plan)
            if self.request.command == "run":
                self._gate_memory(plan)
        if self.request.command == "datagen":
            if not data.is_empty() and self.request.options.overwrite:
                log.warning(f"--overwrite: removing the existing dataset at {data}")
                data.clear()
            data.prepare()
        else:
            if data.storage == "object":
                plan.page_cache["before_run"] = "not applicable (object storage: reads do not pass through the page cache)"
            else:
                self._drop_caches(plan)
            write_json(leaf / LEAF_MANIFEST, self.manifest)
        stdout, stderr = (leaf / f"training_{self.request.command}.{kind}.log" for kind in ("stdout", "stderr"))
        with self.launcher(leaf) as launcher:
            dlio.write_workload(launcher.scratch, self._workload_name(), plan.engine_parameters["workload"])
            plan.commands = [fill(argv, leaf, launcher.scratch) for argv in plan.commands]
            with object_endpoints.watched(self.endpoints, plan):
                self.launch(launcher, LaunchSpec(plan.commands[0], "DLIO", stdout, stderr, ranks=plan.num_processes,
                                                 work=self._work(plan), progress=self._progress(plan, stderr)), plan)

    def _progress(self, plan: Plan, stderr_log: Path) -> Any:
        """Datagen: the training files in the data directory; run: the epochs DLIO logged ending."""
        if self.request.command == "datagen":
            total = int(plan.parameters["dataset"]["num_files_train"])
            return progress.polled("datagen", total, self.dataset.count_train, "files",
                                   poll_s=2.0 if self.dataset.storage == "file" else 10.0)
        epochs = int(plan.parameters.get("train", {}).get("epochs", 1))
        return progress.polled("training", epochs, progress.LogMarks(stderr_log, r"Ending epoch (\d+)"), "epochs")

    def drops_cache_with_facts(self, plan: Plan) -> bool:
        """A file run's drop rides on the host-facts launch: after it, only the gates run and the
        leaf is written (the results filesystem), nothing reads the dataset (one launch per run saved)."""
        return self.request.command == "run" and self.dataset.storage == "file"

    def _drop_caches(self, plan: Plan) -> None:
        """Drop the page cache on every client host the run uses (not only this one) and record
        each host's outcome; 'dropped' only when every host dropped. The host-facts launch did it
        (drops_cache_with_facts) where its records say so, else a launch of its own does."""
        assert self.results_dir is not None
        records = plan.client_hosts or []
        if not records or any("page_cache" not in r for r in records):
            records = hostinfo.survey(MpiOptions.of(self.request.launch), plan.num_processes, self.results_dir,
                                      drop_cache=True, label="page-cache drop")
        plan.page_cache["before_run"] = hostinfo.cache_summary(records)
        plan.page_cache["before_run_hosts"] = [{"host": r["host"], "hostname": r["hostname"], "page_cache": r["page_cache"]}
                                               for r in records]
        if plan.page_cache["before_run"] != "dropped":
            log.warning(f"page cache {plan.page_cache['before_run']}: the first epoch may read from memory")

    def _work(self, plan: Plan) -> Work:
        """Every epoch reads the dataset once (datagen writes it once), plus the emulated compute
        time of every step."""
        ds, train = plan.parameters["dataset"], plan.parameters.get("train", {})
        data_bytes = int(ds["num_files_train"]) * int(ds["num_samples_per_file"]) * int(ds["record_length_bytes"])
        if self.request.command == "datagen":
            return Work(io_bytes=data_bytes)
        epochs = int(train.get("epochs", 1))
        steps = int(ds["num_files_train"]) * int(ds["num_samples_per_file"]) / max(
            1, int(plan.parameters["reader"]["batch_size"]) * plan.num_processes)
        busy = epochs * steps * float(train.get("computation_time", 0) or 0)
        return Work(io_bytes=epochs * data_bytes, busy_s=busy)

    def collect(self, plan: Plan, leaf: Path) -> dict[str, Any]:
        command = self.request.command
        if command == "datasize":
            return {"cluster_information": plan.cluster}
        summary = dlio.read_outputs(leaf, expect_training=command == "run")
        extra: dict[str, Any] = {"engine": plan.engine_parameters["engine"]}
        if command == "datagen":
            extra["datagen_manifest"] = self._write_manifest(plan, leaf)
            return extra
        metric = summary["metric"]
        record = int(plan.parameters["dataset"]["record_length_bytes"])
        expected = metric["train_throughput_mean_samples_per_second"] * record / 2 ** 20
        if not math.isclose(expected, metric["train_io_mean_MB_per_second"], rel_tol=1e-6):
            log.warning(f"DLIO's train_io_mean_MB_per_second {metric['train_io_mean_MB_per_second']:.3f} != "
                        f"samples/s x record length / 2^20 = {expected:.3f}")
        print(f"{self.request.model} run: AU {metric['train_au_mean_percentage']:.2f}% "
              f"({metric['train_au_meet_expectation']}), {metric['train_throughput_mean_samples_per_second']:.1f} samples/s, "
              f"{metric['train_io_mean_MB_per_second']:.1f} MiB/s")
        self._epoch_caches(plan, leaf)
        extra.update(datagen_manifest_file=LEAF_MANIFEST, page_cache=plan.page_cache,
                     cluster_information=plan.cluster)
        if self.request.mode == "closed":
            self._report_result_progress(leaf)
        return extra

    def _epoch_caches(self, plan: Plan, leaf: Path) -> None:
        """Per epoch boundary, each host's drop as dlio_rank recorded it, by the host MPI placed
        the reporting rank on; a boundary with a host missing or not dropped says so."""
        if self.dataset.storage != "file":
            return
        by_rank = {rank: h["host"] for h in plan.client_hosts or [] for rank in h["ranks"]}
        boundaries = []
        epochs = int(plan.parameters.get("train", {}).get("epochs", 1))
        recorded = {b["before_epoch"]: b for b in dlio.epoch_cache_record(leaf)}
        for epoch in range(2, epochs + 1):
            entry = recorded.get(epoch)
            hosts = [{"host": by_rank.get(h["rank"], h["hostname"]), "hostname": h["hostname"], "page_cache": h["page_cache"]}
                     for h in (entry or {}).get("hosts", [])]
            missing = sorted(set(by_rank.values()) - {h["host"] for h in hosts})
            hosts += [{"host": m, "hostname": None, "page_cache": "not dropped: no report from this host"} for m in missing]
            boundaries.append({"before_epoch": epoch, "summary": hostinfo.cache_summary(hosts), "hosts": hosts})
        plan.page_cache["between_epochs"] = boundaries
        bad = [b for b in boundaries if b["summary"] != "dropped"]
        if bad:
            log.warning(f"page cache between epochs: {bad[0]['summary']} (before epoch {bad[0]['before_epoch']})")

    def _report_result_progress(self, leaf: Path) -> None:
        """A CLOSED result is runs_per_result runs (Rules 2.1.17: 1 warm-up + 5); say where we are."""
        needed = checker()["runs_per_result"]["training"]
        done = 1 + sum(1 for meta in untrusted.leaf_records(leaf.parent, "training_*_metadata.json")
                       if meta.parent != leaf and _sibling_metadata(meta).get("exit_status") == 0)
        print(f"CLOSED result: {done} of {needed} successful runs in {leaf.parent} (the earliest is the warm-up)")

    def _write_manifest(self, plan: Plan, leaf: Path) -> dict[str, Any]:
        """Count what DLIO generated and record it next to the data (Rules 3.2.1, 3.3.1)."""
        ds = plan.parameters["dataset"]
        generated = self.dataset.count_train()
        if generated < int(ds["num_files_train"]):
            raise BenchmarkFailed(f"DLIO generated {generated} training files in {self.dataset}/train, "
                                  f"{ds['num_files_train']} were asked for")
        manifest = {
            "schema_version": 1,
            "model": self.request.model,
            "num_files_train": int(ds["num_files_train"]),
            "num_subfolders_train": int(ds.get("num_subfolders_train") or 0),
            "num_samples_per_file": int(ds["num_samples_per_file"]),
            "record_length_bytes": int(ds["record_length_bytes"]),
            "created_at": utc_now(),
            "mlpstorage_version": __version__,
            "source_datagen_result_dir": str(leaf.relative_to(self.results_dir)) if self.results_dir else str(leaf),
        }
        self.dataset.write_manifest(manifest)
        return manifest
