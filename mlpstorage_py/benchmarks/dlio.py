"""DLIO as an engine: translate the edition spelling for the installed DLIO, build its command,
and check what it wrote. DLIO silently ignores keys it does not know, so nothing is passed
that the installed version does not read, and anything dropped is recorded and reported."""

from __future__ import annotations

import copy
import json
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml

from mlpstorage_py.benchmarks import workloads
from mlpstorage_py.errors import BenchmarkFailed, NotAvailable
from mlpstorage_py.launch.mpi import LEAF, SCRATCH, MpiOptions, mpi_command
from mlpstorage_py.rules.core_config import flatten

HYDRA_SUBDIR = "dlio_config"


def engine_table() -> dict[str, Any]:
    """The translation table for the installed DLIO version."""
    try:
        version = metadata.version("dlio-benchmark")
    except metadata.PackageNotFoundError:
        raise NotAvailable("DLIO (dlio-benchmark) is not installed; run `make install`") from None
    path = workloads.configs_dir() / "dlio" / "engines" / f"dlio-{version}.yaml"
    if not path.is_file():
        raise NotAvailable(f"no translation table for DLIO {version} ({path}); this build knows how to drive DLIO 2.0.0")
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def translate(parameters: dict[str, Any], table: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Edition-spelled workload -> what the installed DLIO reads; returns (engine config, dropped keys)."""
    engine: dict[str, Any] = {}
    dropped: list[str] = []
    for section in table["whole_sections"]:
        if section in parameters:
            engine[section] = copy.deepcopy(parameters[section])
    for key, value in flatten({k: v for k, v in parameters.items() if k not in table["whole_sections"]}).items():
        key = table["rename"].get(key, key)
        section, _, name = key.partition(".")
        known = table["known"].get(section, [])
        if (name and name in known) or (not name and section in known):
            if name:
                engine.setdefault(section, {})[name] = value
            else:
                engine[section] = value
        else:
            dropped.append(key)
    return engine, dropped


EPOCH_CACHE_FILE = "page_cache_epochs.jsonl"


def command(opts: MpiOptions, processes: int, workload_name: str, *, s3dlio: bool = False,
            epoch_cache: bool = False) -> list[str]:
    """The mpirun + DLIO argv, with {leaf}/{scratch} placeholders. Every rank runs DLIO's main
    through benchmarks/dlio_rank.py (abort the job on a rank's exception; optionally the s3dlio
    plug-ins and a page-cache drop on every host between epochs)."""
    rank = [sys.executable, "-m", "mlpstorage_py.benchmarks.dlio_rank"]
    if s3dlio:
        rank.append("--s3dlio")
    if epoch_cache:
        rank += ["--epoch-cache", f"{LEAF}/{EPOCH_CACHE_FILE}"]
    program = rank + ["--", "--config-dir", f"{SCRATCH}/config", f"workload={workload_name}",
                      f"++hydra.run.dir={LEAF}", f"++hydra.output_subdir={HYDRA_SUBDIR}",
                      f"++workload.output.folder={LEAF}"]
    return mpi_command(opts, processes, program)


def epoch_cache_record(leaf: Path) -> list[dict[str, Any]]:
    """What dlio_rank recorded at each epoch boundary (absent when there was one epoch)."""
    path = leaf / EPOCH_CACHE_FILE
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def write_workload(scratch: Path, name: str, engine_config: dict[str, Any]) -> None:
    target = scratch / "config" / "workload"
    target.mkdir(parents=True, exist_ok=True)
    (target / f"{name}.yaml").write_text(yaml.safe_dump(engine_config, sort_keys=False), encoding="utf-8")


def read_outputs(leaf: Path, expect_training: bool) -> dict[str, Any]:
    """DLIO can exit 0 having done nothing: insist on the files and metrics a run must leave."""
    if not (leaf / "dlio.log").is_file():
        raise BenchmarkFailed(f"DLIO wrote no dlio.log into {leaf}")
    config_dir = leaf / HYDRA_SUBDIR
    missing = [n for n in ("config.yaml", "hydra.yaml", "overrides.yaml") if not (config_dir / n).is_file()]
    if missing:
        raise BenchmarkFailed(f"DLIO left no {HYDRA_SUBDIR}/{', '.join(missing)} in {leaf}")
    if not expect_training:
        return {}
    summary_path = leaf / "summary.json"
    if not summary_path.is_file() or not list(leaf.glob("*per_epoch_stats.json")) or not list(leaf.glob("*output.json")):
        raise BenchmarkFailed(f"DLIO exited 0 but left no summary.json / per_epoch_stats.json / *_output.json in {leaf}")
    try:
        summary = json.loads(summary_path.read_text(encoding="utf-8"))
        metric = summary["metric"]
        needed = ("train_au_mean_percentage", "train_throughput_mean_samples_per_second", "train_io_mean_MB_per_second")
        missing = [k for k in needed if k not in metric]
    except (ValueError, KeyError) as exc:
        raise BenchmarkFailed(f"DLIO's summary.json does not parse as a training summary: {exc}") from exc
    if missing or not metric.get("train_au_percentage"):
        raise BenchmarkFailed(f"DLIO's summary.json lacks {', '.join(missing) or 'per-epoch AU'}: the run did no training")
    return summary
