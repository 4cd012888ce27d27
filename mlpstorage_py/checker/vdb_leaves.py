"""The vector database leaves as section 5's rules read them (one Vdb per leaf) and the helpers the
rules share; the rules are rules_vdb (5.1-5.3) and rules_vdb_backends (5.4-5.6).
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from mlpstorage_py.results.tree.files import DIR, entries, kind_of, load_json, real_file
from mlpstorage_py.results.tree.package import Leaf, Package
from mlpstorage_py.checker.registry import INVALID, WARNING, Finding, finding
from mlpstorage_py.checker.structure_helpers import (
    LeafRecord, as_int, as_number, checker_of, dig, record)

FAMILY = "vector_database"
METRIC_KEYS = ("throughput_qps", "mean_latency_ms", "p95_latency_ms", "p99_latency_ms", "p999_latency_ms")  # 5.3.4
LOG_LIMIT = 1 << 20
INDEX_DONE = re.compile(r"index(?:ing| build(?:ing)?)?\b.*\b(?:complete|completed|finished|done)\b", re.IGNORECASE)


# --- the leaves as recorded ----------------------------------------------------------------

@dataclass
class Vdb:
    leaf: Leaf
    rec: LeafRecord
    checker: dict

    @property
    def path(self) -> Path:
        return self.leaf.path

    @property
    def division(self) -> str:
        return self.leaf.division

    @property
    def engine(self) -> str:
        return self.leaf.parts[0]

    @property
    def index_dir(self) -> str:
        return self.leaf.parts[1]

    @property
    def summary(self) -> dict | None:
        return self.rec.summary

    @property
    def summary_problem(self) -> str | None:
        return self.rec.summary_problem

    @property
    def meta(self) -> dict | None:
        return self.rec.meta

    @functools.cached_property
    def config(self) -> tuple[dict | None, str | None]:
        """config.json: (object, None), (None, why) when broken, (None, None) when absent."""
        path = self.path / "config.json"
        if kind_of(path) is None:
            return None, None
        data, problem = load_json(path)
        if problem is None and not isinstance(data, dict):
            problem = "config.json is not a JSON object"
        return (data, None) if problem is None else (None, problem)

    @functools.cached_property
    def parameters(self) -> tuple[dict | None, str]:
        """The resolved workload parameters: config.json's, else the metadata's."""
        config, _ = self.config
        for where, block in (("config.json", dig(config, "parameters")), ("metadata", dig(self.meta, "parameters"))):
            if isinstance(block, dict) and block:
                return block, where
        return None, "nowhere"

    def param(self, *keys: str) -> Any:
        return dig(self.parameters[0], *keys)

    def value(self, summary_key: str, *param_keys: str) -> tuple[Any, str]:
        """A fact from summary.json, else from the recorded parameters."""
        value = dig(self.summary, summary_key)
        if value is not None:
            return value, "summary.json"
        value = self.param(*param_keys)
        return value, (self.parameters[1] if value is not None else "nowhere")

    def database(self) -> tuple[str | None, str]:
        value = dig(self.summary, "database")
        if isinstance(value, dict):
            value = value.get("database")
        if isinstance(value, str) and value:
            return value, "summary.json"
        config, _ = self.config
        for where, found in (("config.json", dig(config, "database", "database")),
                             (self.parameters[1], self.param("database", "database")),
                             ("metadata", dig(self.meta, "args", "vdb_engine"))):
            if isinstance(found, str) and found:
                return found, where
        return None, "nowhere"

    @functools.cached_property
    def native(self) -> tuple[dict | None, str | None]:
        """The engine's native statistics.json (vdbbench writes it at the leaf root or under
        vectordb/<phase>/): (object, its path relative to the leaf), or (None, None)."""
        paths = [self.path / "statistics.json"]
        paths += [d / "statistics.json" for _, kind, d in entries(self.path / "vectordb") if kind == DIR]
        for path in paths:
            if real_file(path):
                data, problem = load_json(path)
                if problem is None and isinstance(data, dict):
                    return data, path.relative_to(self.path).as_posix()
        return None, None

    @functools.cached_property
    def verdict(self) -> dict | None:
        """result_verdict.json when it is a readable JSON object."""
        path = self.path / "result_verdict.json"
        if not real_file(path):
            return None
        data, problem = load_json(path)
        return data if problem is None and isinstance(data, dict) else None

    def fact(self, name: str) -> tuple[Any, str]:
        """One recorded fact (dimension, num_vectors, index_type, collection) from the first file
        the reference tool writes it to: summary.json, the resolved parameters, config.json's own
        keys, the metadata's args and top level; (None, "nowhere") when none records it."""
        config, _ = self.config
        params, params_from = self.parameters
        sources = {
            "dimension": [("summary.json", dig(self.summary, "dimension")),
                          (params_from, dig(params, "dataset", "dimension")),
                          ("config.json vector_dim", dig(config, "vector_dim")),
                          ("config.json dimension", dig(config, "dimension")),
                          ("metadata args.dimension", dig(self.meta, "args", "dimension")),
                          ("metadata args.vector_dim", dig(self.meta, "args", "vector_dim")),
                          ("metadata dimension", dig(self.meta, "dimension")),
                          ("metadata vector_dim", dig(self.meta, "vector_dim"))],
            "num_vectors": [("summary.json", dig(self.summary, "num_vectors")),
                            (params_from, dig(params, "dataset", "num_vectors")),
                            ("config.json num_vectors", dig(config, "num_vectors")),
                            ("metadata args.num_vectors", dig(self.meta, "args", "num_vectors")),
                            ("metadata num_vectors", dig(self.meta, "num_vectors"))],
            "index_type": [("summary.json", dig(self.summary, "index_type")),
                           (params_from, dig(params, "index", "index_type")),
                           ("config.json index_type", dig(config, "index_type")),
                           ("metadata args.index_type", dig(self.meta, "args", "index_type")),
                           ("metadata index_type", dig(self.meta, "index_type")),
                           ("metadata args.vdb_index", dig(self.meta, "args", "vdb_index")),
                           ("metadata vdb_index", dig(self.meta, "vdb_index"))],
            "collection": [("summary.json", dig(self.summary, "collection_name")),
                           (params_from, dig(params, "dataset", "collection_name")),
                           ("config.json collection_name", dig(config, "collection_name")),
                           ("metadata args.collection", dig(self.meta, "args", "collection")),
                           ("metadata collection", dig(self.meta, "collection"))],
        }[name]
        for where, value in sources:
            if value is not None and value != "":
                return value, where
        return None, "nowhere"

    def index_type(self) -> tuple[str | None, str]:
        value, where = self.fact("index_type")
        return (str(value), where) if value is not None else (None, where)

    def collection_size(self) -> tuple[int | None, str]:
        """The vectors the queried collection held: summary inserted_vectors, else the ground-truth
        copy's total in result_verdict.json (vdbbench reads the collection's num_entities)."""
        if self.leaf.command == "run":
            found = as_int(dig(self.summary, "inserted_vectors"))
            if found is not None:
                return found, "summary.json inserted_vectors"
            found = as_int(dig(self.verdict, "flat_setup", "total_vectors"))
            if found is not None:
                return found, "result_verdict.json flat_setup.total_vectors"
        return None, "nowhere"

    def missing_summary(self) -> str:
        """Why summary.json gives nothing, with the rule that reports it (once)."""
        why = self.summary_problem or "summary.json records nothing"
        return f"{why} (reported under 5.3.1)" if self.leaf.command == "run" else f"{why} in the datagen leaf"

    def named_outputs(self) -> list[tuple[str, bool]]:
        """(file name, present) of the stdout/stderr logs the metadata's command_output_files names."""
        found = []
        listed = dig(self.meta, "command_output_files")
        for item in listed if isinstance(listed, list) else []:
            for key in ("stdout", "stderr"):
                name = PurePosixPath(str(dig(item, key) or "")).name if isinstance(item, dict) else ""
                if name and name not in [n for n, _ in found]:
                    found.append((name, real_file(self.path / name)))
        return found

    def evidence_problem(self) -> str:
        """Why neither config.json nor the metadata can be read, for 'cannot check' messages."""
        config_problem = self.config[1] or "no config.json"
        return f"{config_problem}; {self.rec.meta_problem or 'the metadata records no parameters'}"


def _leaves(pkg: Package, command: str | None = None) -> list[Vdb]:
    cache = vars(pkg).setdefault("_vdb_leaves", {})
    if "all" not in cache:
        found = []
        for leaf in pkg.leaves:
            if leaf.benchmark != FAMILY:
                continue
            block = checker_of(pkg, leaf.division, leaf.org)
            if block:  # an edition without a checker block is reported by EDN-04
                found.append(Vdb(leaf, record(pkg, leaf.path), block))
        cache["all"] = found
    return [v for v in cache["all"] if command is None or v.leaf.command == command]


def _by_workload(items: list[Vdb]) -> dict[Path, list[Vdb]]:
    grouped: dict[Path, list[Vdb]] = {}
    for v in items:
        grouped.setdefault(v.leaf.workload_dir, []).append(v)
    return grouped


def _cannot(number: str, v: Vdb, what: str, why: str | None = None) -> Finding:
    why = why or v.summary_problem or "not recorded"
    path = v.rec.summary_path if "summary" in why else v.path
    return finding(number, INVALID, path, f"cannot check {what}: {why}")


def _not_checked(number: str, v: Vdb, what: str, why: str, path: Path | None = None) -> Finding:
    """Missing evidence is not evidence of failure: a WARNING that names what is absent."""
    return finding(number, WARNING, path or v.path, f"not checked: no file records {what} ({why})")


def _number(value: Any) -> float | None:
    number = as_number(value)
    return number if number is not None and math.isfinite(number) else None


def _datagen_for(pkg: Package, run: Vdb) -> tuple[list[Vdb], str | None]:
    """Rules 5.1.2/5.2.2 pairing: the datagen leaf the run names (summary.datagen_leaf), else
    those of its workload that loaded the same collection, else all of the workload's."""
    gens = [g for g in _leaves(pkg, "datagen") if g.leaf.workload_dir == run.leaf.workload_dir]
    named = dig(run.summary, "datagen_leaf")
    if isinstance(named, str) and named:
        wanted = PurePosixPath(named).name
        match = [g for g in gens if g.path.name == wanted]
        return match, None if match else f"the run names datagen leaf {wanted}, which {run.index_dir}/datagen/ does not hold"
    if not gens:
        return [], f"{run.engine}/{run.index_dir}/datagen/ holds no datagen (load) leaf"
    collection, _ = run.fact("collection")
    same = [g for g in gens if collection and g.fact("collection")[0] == collection]
    return same or gens, None


# --- 5.1 dataset ---------------------------------------------------------------------------

def scale_table(block: dict) -> tuple[list[tuple[int, int]] | None, str]:
    """(num_vectors, dimension) pairs of 5.1.1's table: the checker block's, else configs/vectordb's."""
    if block.get("vdb_scales"):
        return [tuple(map(int, s)) for s in block["vdb_scales"]], "the edition's checker block (vdb_scales)"
    try:
        from mlpstorage_py.benchmarks.workloads import configs_dir

        path = configs_dir() / "vectordb" / "default.yaml"
        scales = (yaml.safe_load(path.read_text(encoding="utf-8")) or {})[FAMILY].get("sanctioned_scales")
    except Exception:  # noqa: BLE001 - no source checkout, unreadable table: the table is then undefined
        scales = None
    if not scales:
        return None, "no table"
    return [(int(n), int(d)) for n, d in scales], "configs/vectordb/default.yaml sanctioned_scales"


def _declared(pkg: Package, v: Vdb) -> tuple[int | None, str]:
    """num_vectors: the leaf's own record, else (a run) its load leaf's when they agree."""
    n, where = v.fact("num_vectors")
    if as_int(n) is not None or v.leaf.command != "run":
        return as_int(n), where
    gens, _ = _datagen_for(pkg, v)
    loaded = {as_int(g.fact("num_vectors")[0]) for g in gens} - {None}
    if len(loaded) == 1:
        return loaded.pop(), f"datagen {', '.join(g.path.name for g in gens)} {gens[0].fact('num_vectors')[1]}"
    return None, "nowhere"
