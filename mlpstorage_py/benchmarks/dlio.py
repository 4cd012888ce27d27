"""DLIO as an engine: translate the edition spelling for the DLIO that runs (2.0.0 or the fork's
3.0.x, benchmarks.dlio_engine), build its command, and check what it wrote (either layout). DLIO silently ignores keys it does not know, so nothing is passed
that the installed version does not read, and anything dropped is recorded and reported."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import yaml

from mlpstorage_py.benchmarks import dlio_engine
from mlpstorage_py.errors import BenchmarkFailed
from mlpstorage_py.launch.mpi import LEAF, SCRATCH, MpiOptions, mpi_command
from mlpstorage_py.results import libraries

HYDRA_SUBDIR = "dlio_config"
NAME_PREFIX = "mlps_"


def engine_table() -> dict[str, Any]:
    """The translation table for the DLIO installed beside this Python."""
    return dlio_engine.detect().table


def workload_name(model: str, command: str) -> str:
    """Our generated workload's name: Hydra loads the engine's packaged file instead of ours for
    a name it ships (the fork ships unet3d_h100 etc.), so ours carry a prefix no DLIO uses."""
    return f"{NAME_PREFIX}{model.replace('-', '_')}_{command}"


def _flat(tree: dict[str, Any], whole: set[str], prefix: str = "") -> dict[str, Any]:
    """Nested dict -> {dotted.key: value}, keeping the mappings named in `whole` as values."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and dotted not in whole:
            flat.update(_flat(value, whole, dotted + "."))
        else:
            flat[dotted] = value
    return flat


def _put(engine: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    node = engine
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = copy.deepcopy(value)


def translate(parameters: dict[str, Any], table: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Edition-spelled workload -> what the DLIO of `table` reads; returns (engine config, dropped keys)."""
    engine: dict[str, Any] = {}
    dropped: list[str] = []
    whole_sections = table.get("whole_sections") or []
    for section in whole_sections:
        if section in parameters:
            engine[section] = copy.deepcopy(parameters[section])
    rest = {k: v for k, v in parameters.items() if k not in whole_sections}
    for key, value in _flat(rest, set(table.get("whole_keys") or [])).items():
        key = table["rename"].get(key, key)
        section, _, name = key.partition(".")
        if (name or section) in table["known"].get(section, []):
            _put(engine, key, value)
        else:
            dropped.append(key)
    for key, value in (table.get("defaults") or {}).items():
        section, _, name = key.partition(".")
        if section in engine and name not in engine[section]:
            _put(engine, key, value)
    return engine, dropped


EPOCH_CACHE_FILE = "page_cache_epochs.jsonl"


def command(opts: MpiOptions, processes: int, workload_name: str, *, engine: dlio_engine.Engine,
            s3dlio: bool = False, epoch_cache: bool = False, output: str = LEAF,
            writer_record: str | None = None, endpoint_args: list[str] | None = None) -> list[str]:
    """The mpirun + DLIO argv, with {leaf}/{scratch} placeholders. Every rank runs the engine's
    DLIO main through benchmarks/dlio_rank.py (abort the job on a rank's exception; record the
    libraries each rank imported in the leaf; optionally the s3dlio plug-ins, a page-cache drop
    on every host between epochs, and a record of the checkpoint writer the fork chose)."""
    rank = engine.rank_program() + ["--libraries", f"{LEAF}/{libraries.DIR_NAME}"]
    if s3dlio:
        rank.append("--s3dlio")
    rank += endpoint_args or []
    if epoch_cache:
        rank += ["--epoch-cache", f"{output}/{EPOCH_CACHE_FILE}"]
    if writer_record:
        rank += ["--writer-record", writer_record]
    program = rank + ["--", "--config-dir", f"{SCRATCH}/config", f"workload={workload_name}",
                      f"++hydra.run.dir={output}", f"++hydra.output_subdir={HYDRA_SUBDIR}",
                      f"++workload.output.folder={output}"]
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
