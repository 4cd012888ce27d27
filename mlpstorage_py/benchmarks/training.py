"""Training (unet3d, retinanet): datasize by Rules 3.1.2; datagen and run through DLIO."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from mlpstorage_py.benchmarks import workloads
from mlpstorage_py.benchmarks.base import Benchmark, Plan
from mlpstorage_py.errors import NotAvailable, UsageError
from mlpstorage_py.results.host import meminfo_bytes
from mlpstorage_py.results.logs import log
from mlpstorage_py.rules.tables import checker

GIB = 1024 ** 3


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


def compute_datasize(*, batch_size: int, samples_per_file: int, record_length: int,
                     accelerators: int, hosts: int, memory_gb: float, steps_per_epoch: int,
                     memory_multiplier: int, max_files_per_subfolder: int) -> Datasize:
    """Rules 3.1.2: enough samples for `steps_per_epoch` steps on every accelerator and
    `memory_multiplier` times the clients' total memory, whichever is larger."""
    steps = steps_per_epoch * batch_size * accelerators
    memory = hosts * memory_gb * memory_multiplier * GIB / record_length
    min_samples = max(steps, math.ceil(memory))
    files = math.ceil(min_samples / samples_per_file)
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


class TrainingBenchmark(Benchmark):
    benchmark_type = "training"
    family = "training"

    def leaf_tail(self) -> Path:
        return Path("training") / self.request.model / self.request.command

    def plan(self) -> Plan:
        if self.request.command == "datasize":
            return self._plan_datasize()
        raise NotAvailable(f"training {self.request.command} needs the DLIO engine, which is not part of this build yet")

    def _workload(self) -> tuple[dict[str, Any], dict[str, str], str]:
        req = self.request
        base = workloads.load("training", req.model, req.arg("accelerator_type"))
        overrides, verification = self.overrides()
        return workloads.apply_overrides(base, overrides), overrides, verification

    def _plan_datasize(self) -> Plan:
        req = self.request
        parameters, overrides, verification = self._workload()
        dataset, reader = parameters["dataset"], parameters["reader"]
        rules = checker()
        hosts = int(req.arg("num_client_hosts") or len(req.arg("hosts", [])) or 1)
        memory_gb = float(req.arg("client_host_memory_in_gb"))
        accelerators = int(req.arg("max_accelerators"))
        if hosts < 1 or accelerators < 1 or memory_gb <= 0:
            raise UsageError("--num-client-hosts and --max-accelerators must be >= 1 and --client-host-memory-in-gb > 0")
        size = compute_datasize(
            batch_size=int(reader["batch_size"]),
            samples_per_file=int(dataset["num_samples_per_file"]),
            record_length=int(dataset["record_length_bytes"]),
            accelerators=accelerators, hosts=hosts, memory_gb=memory_gb,
            steps_per_epoch=int(rules["training_steps_per_epoch"]),
            memory_multiplier=int(rules["training_host_memory_multiplier"]),
            max_files_per_subfolder=int(_tool_defaults()["max_files_per_subfolder"]),
        )
        dataset.update(num_files_train=size.num_files_train, num_subfolders_train=size.num_subfolders_train,
                       total_disk_bytes=size.total_disk_bytes)
        data_dir = req.arg("data_dir")
        plan = Plan(parameters=parameters, num_processes=accelerators, accelerator=req.arg("accelerator_type"),
                    override_parameters=overrides, verification=verification,
                    data_dir=Path(data_dir) if data_dir else None)
        plan.report = self._datasize_report(size, parameters, hosts, memory_gb, accelerators, rules)
        return plan

    def _datasize_report(self, size: Datasize, parameters: dict[str, Any], hosts: int, memory_gb: float,
                         accelerators: int, rules: dict[str, Any]) -> list[str]:
        ds, batch = parameters["dataset"], parameters["reader"]["batch_size"]
        steps, mult = rules["training_steps_per_epoch"], rules["training_host_memory_multiplier"]
        lines = [
            f"Dataset size for {self.request.model} on up to {accelerators} simulated {self.request.arg('accelerator_type')} "
            f"across {hosts} client host(s) with {memory_gb:g} GiB each (Rules 3.1.2):",
            f"  steps constraint : {steps} steps x batch {batch} x {accelerators} accelerators = {size.min_samples_steps:,} samples",
            f"  memory constraint: {hosts} hosts x {memory_gb:g} GiB x {mult} / {ds['record_length_bytes']:,} B per sample "
            f"= {size.min_samples_memory:,.1f} samples",
            f"  the {size.bound} constraint binds: {size.min_samples:,} samples",
            f"  num_files_train      = {size.num_files_train:,} ({ds['num_samples_per_file']} sample(s) per file)",
            f"  num_subfolders_train = {size.num_subfolders_train}",
            f"  total_disk_bytes     = {size.total_disk_bytes:,} ({size.total_disk_bytes / GIB:,.2f} GiB)",
        ]
        local = meminfo_bytes()
        if local and local / GIB > memory_gb * 1.02:
            log.warning(f"this host has {local / GIB:.1f} GiB of memory, more than the declared {memory_gb:g} GiB; "
                        "if it is a client, validate recomputes the size from the measured memory and this dataset will be too small")
        return lines

    def execute(self, plan: Plan, leaf: Path) -> None:
        for line in plan.report:
            print(line)
            log.debug(line)
