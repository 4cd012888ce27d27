"""A small, valid, deterministic submission package for checker tests.

    make_package(root, division="closed", org="Acme", system="sys1",
                 families=("training", "checkpointing")) -> root

writes what `mlpstorage validate` expects of a complete submission:

- code-images/ with one real captured image (code_image.capture of a tiny source tree, so its
  hash is real) that every leaf's .mlps-code-image and provenance.json name;
- <division>/<org>/systems/<system>.yaml (solution.capabilities per Rules 4.7.4) and .pdf;
- training/unet3d: one datasize, one datagen and 6 run leaves on a simulated b200, sized by
  the tool's own Rules 3.1.2 calculation from the host memory recorded in the summaries;
- checkpointing/llama3-8b: a write-phase then a read-phase invocation (or one combined
  invocation with checkpoint_invocations=1), 8 processes, fsync, a 7 s failover gap;
- the results tables and submission.yaml, written by reportgen (manifest.build).

Every leaf's JSON agrees with every other record of the same fact. Values are fixed (times
start at BASE), so two packages differ only in the capture and manifest generation stamps.

Other families plug in through FAMILY_WRITERS: a writer takes the Context and writes its
workload directories below ctx.results; register("vector_database", writer) adds one.

For tests: pristine(**options) builds each distinct package once per process (never modify
it); the `fresh` fixture hands out private copies to mutate; regenerate(), shift_leaf(),
duplicate_leaf(), edit_json() and edit_yaml() make consistent mutations (a leaf moved in time
keeps its metadata's run_datetime and file name in step, so only the rule under test fires).
"""

from __future__ import annotations

import atexit
import copy
import functools
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Callable, Iterator
from unittest import mock

import pytest
import yaml

from mlpstorage_py.rules import configs as workloads
from mlpstorage_py.benchmarks.training import sizing
from mlpstorage_py.checkpoint.shards import build_layout
from mlpstorage_py.report import reportgen
from mlpstorage_py.results import code_image
from mlpstorage_py.rules import tables
from mlpstorage_py.rules.core_config import core_config

BASE = datetime(2026, 7, 1, 9, 0, 0)
STAMP = "%Y%m%d_%H%M%S"
HOST = "client1"
HOST_MEMORY_GIB = 32.0
HOST_CPUS = 32
RESULTS_DIR = "/results"           # the results directory the runs were launched with
DATA_DIR = "/mnt/data"             # on another filesystem (fs_separation.json says so)
CHECKPOINT_DIR = "/mnt/ckpt"
ACCELERATOR = "b200"
TRAINING_MODEL, TRAINING_ACCELERATORS, EPOCHS = "unet3d", 4, 5
CHECKPOINT_MODEL = "llama3-8b"
RUN_SECONDS, IDLE_SECONDS = 60, 8   # each run lasts a minute; the next starts 8 s after it ends
DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
PDF = b"%PDF-1.4\n% synthetic system description\n%%EOF\n"


@dataclass
class Context:
    """Where a family writer puts its leaves, and the shared records they must agree with."""

    root: Path
    division: str
    org: str
    system: str
    pointer: str
    options: dict[str, Any] = field(default_factory=dict)
    now: datetime = BASE

    @property
    def org_dir(self) -> Path:
        return self.root / self.division / self.org

    @property
    def results(self) -> Path:
        return self.org_dir / "results" / self.system

    def next_leaf(self, parent: Path, seconds: int = RUN_SECONDS) -> tuple[Path, datetime, datetime]:
        """A new timestamp directory under parent: (path, start, end); the clock moves on."""
        start = self.now
        end = start + timedelta(seconds=seconds)
        self.now = end + timedelta(seconds=IDLE_SECONDS)
        path = parent / start.strftime(STAMP)
        path.mkdir(parents=True)
        return path, start, end

    def leaf_dir(self, leaf: Path) -> str:
        """The absolute leaf path as the run recorded it (results_dir + the tree path)."""
        return f"{RESULTS_DIR}/{leaf.relative_to(self.root).as_posix()}"

    def stamp(self, leaf: Path, family: str, parameters: dict[str, Any], when: datetime, dlio: bool) -> None:
        """The code-image pointer and provenance.json, as lifecycle._write_leaf writes them."""
        (leaf / code_image.POINTER_FILE).write_text(self.pointer + "\n", encoding="utf-8")
        commit = tables.edition()["dlio_revisions"][0]
        engine = {"version": "2.0.0", "source": "pypi", "commit": commit} if dlio else \
            {"version": "n/a", "source": "mlpstorage-checkpoint-engine", "commit": "n/a"}
        write_json(leaf / "provenance.json", {
            "schema": "mlps-run-provenance/1", "rules_edition": tables.editions()["current_edition"], "layout_version": 3,
            "tool": {"name": "mlpstorage", "version": "3.0.0", "git_sha": "unknown", "code_image": self.pointer},
            "dlio": engine, "storage_library": {"name": "none"}, "core_config": core_config(family, parameters),
            "stamped_at": iso(when), "stamped_by": "mlpstorage 3.0.0",
            "provenance": {"rules_edition": "tool-constant", "layout_version": "tool-constant", "tool": "package-metadata",
                           "dlio": "direct-url" if dlio else "n/a", "storage_library": "n/a", "core_config": "runtime"}})


Writer = Callable[[Context], None]


def iso(when: datetime, utc: bool = True) -> str:
    """Leaf names and DLIO times are the host's local time; this host runs on UTC."""
    return when.strftime("%Y-%m-%dT%H:%M:%S") + ("Z" if utc else ".000000")


def write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data) + "\n", encoding="utf-8")  # compact: the C encoder, fast


def write_yaml(path: Path, data: Any) -> None:
    path.write_text(yaml.dump(data, Dumper=DUMPER, sort_keys=False), encoding="utf-8")


def dlio_config(ctx: Context, leaf: Path, parameters: dict[str, Any], overrides: list[str]) -> None:
    folder = leaf / "dlio_config"
    folder.mkdir()
    write_yaml(folder / "config.yaml", {"workload": parameters})
    write_yaml(folder / "hydra.yaml", {"hydra": {"run": {"dir": ctx.leaf_dir(leaf)}, "output_subdir": "dlio_config",
                                                 "overrides": {"task": overrides}}})
    write_yaml(folder / "overrides.yaml", overrides)


def fs_separation(leaf: Path, data_path: str, when: datetime) -> None:
    write_json(leaf / "fs_separation.json", {
        "version": 1, "method": "link_exdev", "data_or_chkpt_path": data_path, "results_path": RESULTS_DIR,
        "data_or_chkpt_realpath": data_path, "results_realpath": RESULTS_DIR, "same_filesystem": False,
        "probed_at": iso(when), "probed_by_rank": 0, "probed_by_host": HOST})


def dlio_log(leaf: Path, start: datetime, end: datetime, what: str) -> None:
    (leaf / "dlio.log").write_text(
        f"[INFO] {start.isoformat()} Running DLIO ({what})\n[INFO] {end.isoformat()} Finished {what}\n", encoding="utf-8")


def host_records() -> dict[str, Any]:
    host = {"hostname": HOST, "memory_total_bytes": int(HOST_MEMORY_GIB * 2 ** 30), "cpu_count": HOST_CPUS}
    return {"system_info": dict(host, os="Linux 6.8.0", machine="x86_64"),
            "cluster_information": {"hosts": [host], "collection_method": "mpi", "declared_memory_gb": HOST_MEMORY_GIB,
                                    "measured_memory_gb": HOST_MEMORY_GIB}}


def summary_base(start: datetime, end: datetime, accelerators: int) -> dict[str, Any]:
    return {"start": start.isoformat(), "end": end.isoformat(), "num_accelerators": accelerators, "num_hosts": 1,
            "hostname": HOST, "host_memory_GB": [HOST_MEMORY_GIB], "host_cpu_count": [HOST_CPUS]}


def metadata(ctx: Context, leaf: Path, benchmark: str, model: str, command: str, start: datetime, end: datetime,
             processes: int, accelerator: str | None, args: dict[str, Any], parameters: dict[str, Any],
             overrides: dict[str, str], command_line: str, **extra: Any) -> None:
    record = {
        "benchmark_type": benchmark, "model": model, "command": command, "run_datetime": leaf.name,
        "num_processes": processes, "accelerator": accelerator, "storage": "file", "result_dir": ctx.leaf_dir(leaf),
        "args": dict({"mode": ctx.division, "benchmark": benchmark, "model": model, "command": command,
                      "results_dir": RESULTS_DIR, "systemname": ctx.system, "hosts": [HOST], "storage": "file"}, **args),
        "parameters": parameters, "override_parameters": overrides, "verification": ctx.division.upper(),
        **host_records(), "invocation_start_time": iso(start), "provenance_file": "provenance.json", **extra,
        "executed_command": command_line, "invocation_end_time": iso(end + timedelta(seconds=1)),
        "runtime": (end - start).total_seconds() + 1, "exit_status": 0, "failure": None,
    }
    write_json(leaf / f"{benchmark}_{leaf.name}_metadata.json", record)


def mpirun(processes: int, program: str) -> str:
    return f"mpirun -n {processes} --host {HOST}:{processes} --bind-to none {program}"


# --- training ----------------------------------------------------------------------------

@functools.cache
def _training_reference() -> tuple[dict[str, Any], Any]:
    reference = workloads.training(TRAINING_MODEL, ACCELERATOR)
    return reference, sizing(reference, TRAINING_ACCELERATORS, 1, HOST_MEMORY_GIB)


@functools.cache
def _checkpoint_reference() -> tuple[dict[str, Any], float]:
    reference = workloads.checkpointing(CHECKPOINT_MODEL)
    processes = tables.checker()["closed_mpi_processes"][CHECKPOINT_MODEL]
    return reference, build_layout(reference, processes).total_gib


def write_training(ctx: Context) -> None:
    reference, size = _training_reference()
    workload = ctx.results / "training" / TRAINING_MODEL
    folder = f"{DATA_DIR}/{TRAINING_MODEL}"
    dataset = {"data_folder": folder, "num_files_train": size.num_files_train, "num_subfolders_train": size.num_subfolders_train}
    params = copy.deepcopy(reference)
    params["dataset"].update(dataset)
    overrides = {f"dataset.{k}": str(v) for k, v in dataset.items()}
    common_args = {"accelerator_type": ACCELERATOR, "client_host_memory_in_gb": HOST_MEMORY_GIB, "num_client_hosts": 1,
                   "data_dir": DATA_DIR}

    leaf, start, end = ctx.next_leaf(workload / "datasize", 2)
    sized = copy.deepcopy(params)
    sized["dataset"]["total_disk_bytes"] = size.total_disk_bytes
    metadata(ctx, leaf, "training", TRAINING_MODEL, "datasize", start, end, TRAINING_ACCELERATORS, ACCELERATOR,
             dict(common_args, max_accelerators=TRAINING_ACCELERATORS), sized, overrides, "")
    ctx.stamp(leaf, "training", sized, end, dlio=True)

    leaf, start, end = ctx.next_leaf(workload / "datagen")
    generate = copy.deepcopy(params)
    generate["workflow"].update(generate_data=True, train=False)
    task = ["workload=unet3d_datagen"] + [f"++workload.dataset.{k}={v}" for k, v in dataset.items()]
    metadata(ctx, leaf, "training", TRAINING_MODEL, "datagen", start, end, TRAINING_ACCELERATORS, None,
             dict(common_args, num_processes=TRAINING_ACCELERATORS), generate, overrides,
             mpirun(TRAINING_ACCELERATORS, "dlio_benchmark workload=unet3d_datagen"))
    for name in ("training_datagen.stdout.log", "training_datagen.stderr.log"):
        (leaf / name).write_text("", encoding="utf-8")
    dlio_log(leaf, start, end, "datagen")
    dlio_config(ctx, leaf, generate, task)
    fs_separation(leaf, DATA_DIR, start)
    ctx.stamp(leaf, "training", generate, end, dlio=True)
    datagen_manifest = {"schema_version": 1, "model": TRAINING_MODEL, "num_files_train": size.num_files_train,
                        "num_subfolders_train": size.num_subfolders_train, "num_samples_per_file": 1,
                        "record_length_bytes": reference["dataset"]["record_length_bytes"], "created_at": iso(end),
                        "mlpstorage_version": "3.0.0", "source_datagen_result_dir": leaf.relative_to(ctx.root).as_posix()}

    record_length = reference["dataset"]["record_length_bytes"]
    runs = tables.checker()["runs_per_result"]["training"]
    task = ["workload=unet3d_b200"] + [f"++workload.dataset.{k}={v}" for k, v in dataset.items()]
    for index in range(runs):
        leaf, start, end = ctx.next_leaf(workload / "run")
        au = [97.0 + 0.1 * (index + epoch) for epoch in range(EPOCHS)]
        throughput = [40.0 + 0.05 * (index + epoch) for epoch in range(EPOCHS)]
        mean_tp = sum(throughput) / EPOCHS
        summary = summary_base(start + timedelta(seconds=2), end, TRAINING_ACCELERATORS)
        summary.update(metric={
            "train_au_percentage": au, "train_au_mean_percentage": sum(au) / EPOCHS, "train_au_meet_expectation": "success",
            "train_throughput_samples_per_second": throughput, "train_throughput_mean_samples_per_second": mean_tp,
            "train_io_mean_MB_per_second": mean_tp * record_length / 2 ** 20},
            num_files_train=size.num_files_train, num_files_eval=0, num_samples_per_file=1, epochs=EPOCHS)
        write_json(leaf / "summary.json", summary)
        write_json(leaf / "0_per_epoch_stats.json", {str(e + 1): {"start": (start + timedelta(seconds=2 + 11 * e)).isoformat(),
                                                                 "end": (start + timedelta(seconds=12 + 11 * e)).isoformat(),
                                                                 "au": au[e], "throughput": throughput[e]}
                                                    for e in range(EPOCHS)})
        write_json(leaf / "0_output.json", {str(e + 1): {"throughput": throughput[e]} for e in range(EPOCHS)})
        for name in ("training_run.stdout.log", "training_run.stderr.log"):
            (leaf / name).write_text("", encoding="utf-8")
        dlio_log(leaf, start, end, "training")
        dlio_config(ctx, leaf, params, task)
        fs_separation(leaf, DATA_DIR, start)
        write_json(leaf / "datagen-manifest.json", datagen_manifest)
        metadata(ctx, leaf, "training", TRAINING_MODEL, "run", start, end, TRAINING_ACCELERATORS, ACCELERATOR,
                 dict(common_args, num_accelerators=TRAINING_ACCELERATORS), params, overrides,
                 mpirun(TRAINING_ACCELERATORS, "dlio_benchmark workload=unet3d_b200"),
                 datagen_manifest_file="datagen-manifest.json")
        ctx.stamp(leaf, "training", params, end, dlio=True)


# --- checkpointing -------------------------------------------------------------------------

def write_checkpointing(ctx: Context) -> None:
    rules = tables.checker()
    processes = rules["closed_mpi_processes"][CHECKPOINT_MODEL]
    count = 10  # Rules 4.7.1 / Table 4
    reference, gib = _checkpoint_reference()
    workload = ctx.results / "checkpointing" / CHECKPOINT_MODEL
    folder = f"{CHECKPOINT_DIR}/{CHECKPOINT_MODEL}"
    phases = [(count, count)] if ctx.options.get("checkpoint_invocations", 2) == 1 else [(count, 0), (0, count)]
    for writes, reads in phases:
        leaf, start, end = ctx.next_leaf(workload)
        params = copy.deepcopy(reference)
        params["checkpoint"].update(checkpoint_folder=folder, num_checkpoints_write=writes, num_checkpoints_read=reads)
        overrides = {"checkpoint.checkpoint_folder": folder}
        metric: dict[str, Any] = {}
        per_rank: dict[str, Any] = {"1": {"start": (start + timedelta(seconds=2)).isoformat()}}
        for phase, n, rate in (("save", writes, 3.0), ("load", reads, 5.0)):
            if not n:
                continue
            metric.update({f"{phase}_checkpoint_io_mean_GB_per_second": rate, f"{phase}_checkpoint_io_stdev_GB_per_second": 0.0,
                           f"{phase}_checkpoint_duration_mean_seconds": gib / rate,
                           f"{phase}_checkpoint_duration_stdev_seconds": 0.0})
            for i in range(n):
                per_rank["1"][f"{phase}_ckpt{i + 1}"] = {"duration": gib / rate, "throughput": rate}
        metric["checkpoint_size_GB"] = gib
        summary = summary_base(start + timedelta(seconds=2), end, processes)
        summary.update(metric=metric, num_checkpoints_write=writes, num_checkpoints_read=reads, checkpoint_folder=folder, fsync=True)
        write_json(leaf / "summary.json", summary)
        write_json(leaf / "0_per_epoch_stats.json", per_rank)  # rank 0's, which the published figures use
        write_json(leaf / "0_output.json", {"metric": metric})
        (leaf / "checkpointing_run.stdout.log").write_text(f"{CHECKPOINT_MODEL}: checkpoint {gib:.3f} GiB\n", encoding="utf-8")
        (leaf / "checkpointing_run.stderr.log").write_text("", encoding="utf-8")
        dlio_log(leaf, start, end, "checkpointing")
        dlio_config(ctx, leaf, params, [f"++workload.{k}={v}" for k, v in overrides.items()])
        fs_separation(leaf, CHECKPOINT_DIR, start)
        engine = f"python -m mlpstorage_py.checkpoint.engine --num-write {writes} --num-read {reads}"
        metadata(ctx, leaf, "checkpointing", CHECKPOINT_MODEL, "run", start, end, processes, ACCELERATOR,
                 {"num_processes": processes, "accelerator_type": ACCELERATOR, "num_checkpoints_write": writes,
                  "num_checkpoints_read": reads, "checkpoint_folder": CHECKPOINT_DIR, "checkpoint_subset": False,
                  "client_host_memory_in_gb": HOST_MEMORY_GIB},
                 params, overrides, mpirun(processes, engine),
                 engine_parameters={"engine": "mlpstorage-checkpoint-engine", "checkpoint_size_GB": gib})
        ctx.stamp(leaf, "checkpointing", params, end, dlio=False)


FAMILY_WRITERS: dict[str, Writer] = {"training": write_training, "checkpointing": write_checkpointing}


def register(family: str, writer: Writer) -> None:
    """Add a family writer (e.g. vector_database, kv_cache) for make_package(families=...)."""
    FAMILY_WRITERS[family] = writer


# --- the package -------------------------------------------------------------------------

def _psus() -> dict[str, Any]:
    """A node's power block in the published schema (Rules 2.1.7): 2 x 800 W; a new dict each, so no YAML alias."""
    return {"min_psus_active": 1, "psus_configured": [{"unit_count": 2, "inlet_voltage": 230, "nameplate_power_watts": 800,
                                                       "efficiency": "Platinum"}]}


def _nic() -> dict[str, Any]:
    return {"unit_count": 1, "type": "ethernet", "state": "up", "speed": 100, "traffic": ["data"]}


def system_description(system: str) -> dict[str, Any]:
    return {"system_under_test": {
        "solution": {
            "submission_name": system, "friendly_description": "Synthetic shared-filesystem test system",
            "architecture": {"storage_location": "remote", "benchmark_API": "file", "product_API": "file",
                             "client_footprint": "open_source", "client_installation": "in_box"},
            "capabilities": {"multi_host": True, "simultaneous_write": True, "simultaneous_read": True,
                             "remap_time_in_seconds": 0},
            "usable_capacity_tib": 100, "availability": "available"},
        "deployment": "onprem",
        "clients": [{"friendly_description": "test client", "quantity": 1,
                     "chassis": {"model_name": "generic", "rack_units": 1, "cpu_model": "x86_64", "cpu_qty": 1,
                                 "cpu_cores": HOST_CPUS, "memory_capacity": HOST_MEMORY_GIB, "power": _psus()},
                     "networking": [_nic()], "operating_system": {"name": "Linux", "version": "6.8.0"}}],
        "product_nodes": [{"friendly_description": "storage node", "quantity": 2,
                           "chassis": {"model_name": "generic", "rack_units": 1, "cpu_model": "x86_64", "cpu_qty": 1,
                                       "cpu_cores": 16, "memory_capacity": 64, "power": _psus()},
                           "networking": [_nic()], "operating_system": {"name": "Linux", "version": "6.8.0"}}],
        "total_rack_units": 2}}


def capture_image(root: Path) -> str:
    """One real image in root/code-images, of a tiny source tree; returns the leaf pointer."""
    with tempfile.TemporaryDirectory(prefix="mlps-src-") as tmp:
        source = Path(tmp)
        (source / "mlpstorage_py").mkdir()
        (source / "mlpstorage_py" / "__init__.py").write_text('__version__ = "3.0.0"\n', encoding="utf-8")
        (source / "pyproject.toml").write_text('[project]\nname = "mlpstorage"\nversion = "3.0.0"\n', encoding="utf-8")
        digest, _, _ = code_image.capture(root, root=source)
    return code_image.pointer_text(digest)


def make_package(root: Path, *, division: str = "closed", org: str = "Acme", system: str = "sys1",
                 families: tuple[str, ...] = ("training", "checkpointing"), **options: Any) -> Path:
    """Write a valid package at root (created if needed) and return root.

    options: checkpoint_invocations=1 writes one combined checkpointing invocation instead of a
    write-phase and a read-phase invocation."""
    unknown = [f for f in families if f not in FAMILY_WRITERS]
    if unknown:
        raise ValueError(f"no writer for {', '.join(unknown)} (known: {', '.join(FAMILY_WRITERS)}); register() one")
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    ctx = Context(root, division, org, system, capture_image(root), options)
    systems = ctx.org_dir / "systems"
    systems.mkdir(parents=True)
    write_yaml(systems / f"{system}.yaml", system_description(system))
    (systems / f"{system}.pdf").write_bytes(PDF)
    for family in families:
        FAMILY_WRITERS[family](ctx)
    with mock.patch.object(os, "fsync", lambda fd: None):  # a throwaway tree needs no durability
        reportgen.generate(root)
    return root


# --- copies and mutations for tests -------------------------------------------------------

_PRISTINE: dict[tuple, Path] = {}
_SCRATCH: list[Path] = []


def scratch_dir() -> Path:
    """A per-process scratch directory, in memory (/dev/shm) where there is one: the packages
    are many small files, and a disk-backed /tmp makes each copy cost tenths of a second."""
    if not _SCRATCH:
        shm = Path("/dev/shm")
        base = str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None
        _SCRATCH.append(Path(tempfile.mkdtemp(prefix="mlps-synthetic-", dir=base)))
        atexit.register(shutil.rmtree, _SCRATCH[0], True)
    return _SCRATCH[0]


def pristine(**kwargs: Any) -> Path:
    """One make_package(...) per distinct arguments per process; never modify it (copy_package)."""
    key = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in kwargs.items()))
    if key not in _PRISTINE:
        _PRISTINE[key] = make_package(scratch_dir() / f"pristine-{len(_PRISTINE)}" / "pkg", **kwargs)
    return _PRISTINE[key]


def copy_package(target: Path, **kwargs: Any) -> Path:
    """A private copy of the pristine package for these arguments, at target."""
    shutil.copytree(pristine(**kwargs), target, symlinks=True)
    return target


@pytest.fixture
def fresh() -> Iterator[Callable[..., Path]]:
    """fresh(**make_package options) -> a private, valid package to mutate; removed afterwards."""
    made: list[Path] = []

    def make(**kwargs: Any) -> Path:
        parent = Path(tempfile.mkdtemp(dir=scratch_dir()))
        made.append(parent)
        return copy_package(parent / "pkg", **kwargs)

    yield make
    for parent in made:
        shutil.rmtree(parent, ignore_errors=True)


def regenerate(root: Path) -> None:
    """Rewrite the results tables and submission.yaml after a mutation that changes leaves."""
    with mock.patch.object(os, "fsync", lambda fd: None):
        reportgen.generate(root)


def workload(root: Path, family: str, model: str | None = None, division: str = "closed", org: str = "Acme",
             system: str = "sys1") -> Path:
    model = model or {"training": TRAINING_MODEL, "checkpointing": CHECKPOINT_MODEL}[family]
    return root / division / org / "results" / system / family / model


def leaves_of(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.is_dir() and not p.is_symlink() and p.name[:1].isdigit())


def metadata_file(leaf: Path) -> Path:
    return next(leaf.glob("*_metadata.json"))


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def edit_json(path: Path, change: Callable[[Any], Any]) -> None:
    """Rewrite a JSON file after change(data) edited it in place (its return value is ignored)."""
    data = read_json(path)
    change(data)
    write_json(path, data)


def edit_yaml(path: Path, change: Callable[[Any], Any]) -> None:
    """Rewrite a YAML file after change(data) edited it in place (its return value is ignored)."""
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    change(data)
    write_yaml(path, data)


def _shifted(value: Any, delta: timedelta) -> Any:
    if not isinstance(value, str):
        return value
    utc = value.endswith("Z")
    when = datetime.fromisoformat(value[:-1] if utc else value) + delta
    return when.strftime("%Y-%m-%dT%H:%M:%S") + ("Z" if utc else "") if utc else when.isoformat()


def _rename_records(leaf: Path, old: str) -> None:
    meta = metadata_file(leaf)
    edit_json(meta, lambda d: d.update(run_datetime=leaf.name))
    meta.rename(leaf / meta.name.replace(old, leaf.name))


def _shift_records(leaf: Path, delta: timedelta, invocation: bool) -> None:
    if (leaf / "summary.json").is_file():
        edit_json(leaf / "summary.json", lambda d: d.update(start=_shifted(d["start"], delta), end=_shifted(d["end"], delta)))
    if invocation:
        edit_json(metadata_file(leaf), lambda d: d.update(
            invocation_start_time=_shifted(d["invocation_start_time"], delta),
            invocation_end_time=_shifted(d["invocation_end_time"], delta)))
        if (leaf / "fs_separation.json").is_file():
            edit_json(leaf / "fs_separation.json", lambda d: d.update(probed_at=_shifted(d["probed_at"], delta)))


def later(name: str, delta: timedelta) -> str:
    return (datetime.strptime(name, STAMP) + delta).strftime(STAMP)


def shift_leaf(leaf: Path, delta: timedelta, *, invocation: bool = True) -> Path:
    """Move a leaf in time: its name (and its metadata's run_datetime), summary start/end and,
    unless invocation=False, the metadata's invocation times and the filesystem probe time."""
    target = leaf.with_name(later(leaf.name, delta))
    leaf.rename(target)
    _rename_records(target, leaf.name)
    _shift_records(target, delta, invocation)
    return target


def duplicate_leaf(leaf: Path, delta: timedelta) -> Path:
    """A copy of a leaf, delta later in name and records."""
    target = leaf.with_name(later(leaf.name, delta))
    shutil.copytree(leaf, target, symlinks=True)
    _rename_records(target, leaf.name)
    _shift_records(target, delta, True)
    return target
