"""A vector database leaf as its records state it: summary.json (VdbSummary), and what section
5's rules and the results table read beside it: the files the reference tool writes (config.json,
statistics.json, result_verdict.json), each fact from whichever file records it under whatever
name a published tool version used, and the datagen (load) leaves a run pairs with in its result.

VdbSummary (summary.json, written by benchmarks/vectordb*.py), key "schema_version":
    none    the reference tool's (v3.0) and ours before it stamped one: the phase's figures
            (throughput_qps, latencies, recall), num_vectors, dimension, index_type, database, ...
    1       ours: the same fields, with benchmark_phase, ground_truth, served_by and datagen_leaf
VdbRank (vectordb_rank_<r>.json, one query rank's result, written by vectordb/rank.py and
vectordb/diskann_rank.py, read by vectordb/clients.read_ranks), key "schema_version":
    none    ours before it stamped one: rank, world_size, hostname, seconds, queries, batches,
            latencies ([batch size, ms] per batch), hits (query index -> first result ids), ...
    1       the same fields (DiskANN's add index_dir, o_direct, rss_bytes, host_leader, host_io)
"""

from __future__ import annotations

import math
import re
from pathlib import PurePosixPath
from typing import Any

from mlpstorage_py.results.schema import LIST, NUMBER, OBJECT, TEXT, Schema
from mlpstorage_py.results.tree.files import DIR, entries, kind_of, load_json, real_file
from mlpstorage_py.results.tree.package import Leaf
from mlpstorage_py.results.tree.values import as_int, as_number, dig

FAMILY = "vector_database"
METRIC_KEYS = ("throughput_qps", "mean_latency_ms", "p95_latency_ms", "p99_latency_ms", "p999_latency_ms")  # 5.3.4
LOG_LIMIT = 1 << 20
INDEX_DONE = re.compile(r"index(?:ing| build(?:ing)?)?\b.*\b(?:complete|completed|finished|done)\b", re.IGNORECASE)


class VdbSummary(Schema):
    KIND = "summary.json"
    VERSION = 1
    FIELDS = {"benchmark_phase": TEXT, "num_vectors": NUMBER, "dimension": NUMBER, "index_type": TEXT,
              "collection_name": TEXT, "database": OBJECT, "datagen_leaf": TEXT}


class VdbRank(Schema):
    KIND = "vectordb_rank_*.json"
    VERSION = 1
    FIELDS = {"rank": NUMBER, "world_size": NUMBER, "hostname": TEXT, "seconds": NUMBER, "queries": NUMBER,
              "batches": NUMBER, "latencies": LIST, "hits": OBJECT, "start": NUMBER, "end": NUMBER, "qps": NUMBER,
              "connect_and_warmup_seconds": NUMBER, "host_io": OBJECT}


def engine(leaf: Leaf) -> str:
    return leaf.parts[0]


# --- files beside the records --------------------------------------------------------------

def config(leaf: Leaf) -> tuple[dict[str, Any] | None, str | None]:
    """config.json: (object, None), (None, why) when broken, (None, None) when absent."""
    path = leaf.path / "config.json"
    if kind_of(path) is None:
        return None, None
    data, problem = load_json(path)
    if problem is None and not isinstance(data, dict):
        problem = "config.json is not a JSON object"
    return (data, None) if problem is None else (None, problem)


def resolved(leaf: Leaf) -> tuple[dict[str, Any] | None, str]:
    """The resolved workload parameters and where they were read: config.json's, else the metadata's."""
    for where, block in (("config.json", dig(config(leaf)[0], "parameters")), ("metadata", dig(leaf.metadata, "parameters"))):
        if isinstance(block, dict) and block:
            return block, where
    return None, "nowhere"


def param(leaf: Leaf, *keys: str) -> Any:
    return dig(resolved(leaf)[0], *keys)


def value(leaf: Leaf, summary_key: str, *param_keys: str) -> tuple[Any, str]:
    """A fact from summary.json, else from the resolved parameters."""
    found = dig(leaf.summary, summary_key)
    if found is not None:
        return found, "summary.json"
    found = param(leaf, *param_keys)
    return found, (resolved(leaf)[1] if found is not None else "nowhere")


def database(leaf: Leaf) -> tuple[str | None, str]:
    found = dig(leaf.summary, "database")
    if isinstance(found, dict):
        found = found.get("database")
    if isinstance(found, str) and found:
        return found, "summary.json"
    for where, found in (("config.json", dig(config(leaf)[0], "database", "database")),
                         (resolved(leaf)[1], param(leaf, "database", "database")),
                         ("metadata", dig(leaf.metadata, "args", "vdb_engine"))):
        if isinstance(found, str) and found:
            return found, where
    return None, "nowhere"


def native(leaf: Leaf) -> tuple[dict[str, Any] | None, str | None]:
    """The engine's native statistics.json (vdbbench writes it at the leaf root or under
    vectordb/<phase>/): (object, its path relative to the leaf), or (None, None)."""
    paths = [leaf.path / "statistics.json"]
    paths += [d / "statistics.json" for _, kind, d in entries(leaf.path / "vectordb") if kind == DIR]
    for path in paths:
        if real_file(path):
            data, problem = load_json(path)
            if problem is None and isinstance(data, dict):
                return data, path.relative_to(leaf.path).as_posix()
    return None, None


def verdict(leaf: Leaf) -> dict[str, Any] | None:
    """result_verdict.json when it is a readable JSON object."""
    path = leaf.path / "result_verdict.json"
    if not real_file(path):
        return None
    data, problem = load_json(path)
    return data if problem is None and isinstance(data, dict) else None


def fact(leaf: Leaf, name: str) -> tuple[Any, str]:
    """One recorded fact (dimension, num_vectors, index_type, collection, storage_root,
    results_dir, mode, queries) from the first file the tool writes it to, under every name a
    published tool version uses: summary.json, the resolved parameters, config.json's own keys,
    the metadata's args and top level; (None, "nowhere") when none records it."""
    summary, meta, (conf, _), (params, params_from) = leaf.summary, leaf.metadata, config(leaf), resolved(leaf)
    sources = {
        "dimension": [("summary.json", dig(summary, "dimension")),
                      (params_from, dig(params, "dataset", "dimension")),
                      ("config.json vector_dim", dig(conf, "vector_dim")),
                      ("config.json dimension", dig(conf, "dimension")),
                      ("metadata args.dimension", dig(meta, "args", "dimension")),
                      ("metadata args.vector_dim", dig(meta, "args", "vector_dim")),
                      ("metadata dimension", dig(meta, "dimension")),
                      ("metadata vector_dim", dig(meta, "vector_dim"))],
        "num_vectors": [("summary.json", dig(summary, "num_vectors")),
                        (params_from, dig(params, "dataset", "num_vectors")),
                        ("config.json num_vectors", dig(conf, "num_vectors")),
                        ("metadata args.num_vectors", dig(meta, "args", "num_vectors")),
                        ("metadata num_vectors", dig(meta, "num_vectors"))],
        "index_type": [("summary.json", dig(summary, "index_type")),
                       (params_from, dig(params, "index", "index_type")),
                       ("config.json index_type", dig(conf, "index_type")),
                       ("metadata args.index_type", dig(meta, "args", "index_type")),
                       ("metadata index_type", dig(meta, "index_type")),
                       ("metadata args.vdb_index", dig(meta, "args", "vdb_index")),
                       ("metadata vdb_index", dig(meta, "vdb_index"))],
        "collection": [("summary.json", dig(summary, "collection_name")),
                       (params_from, dig(params, "dataset", "collection_name")),
                       ("config.json collection_name", dig(conf, "collection_name")),
                       ("metadata args.collection", dig(meta, "args", "collection")),
                       ("metadata collection", dig(meta, "collection"))],
        # 5.4.1: our tool resolves --storage-root into storage.storage_root (args.data_dir, its dest);
        # published tool versions record args.storage_root, or only args.data_dir
        "storage_root": [(params_from, dig(params, "storage", "storage_root")),
                         ("metadata args.storage_root", dig(meta, "args", "storage_root")),
                         ("metadata args.data_dir", dig(meta, "args", "data_dir")),
                         ("metadata storage_root", dig(meta, "storage_root"))],
        "results_dir": [("metadata args.results_dir", dig(meta, "args", "results_dir")),
                        ("metadata result_dir", dig(meta, "result_dir"))],
        # 5.3.3: the query mode and --queries (run.mode/run.queries ours; benchmark_mode/queries the v3.0 tool's)
        "mode": [("summary.json", dig(summary, "mode")), (params_from, dig(params, "run", "mode")),
                 ("metadata args.benchmark_mode", dig(meta, "args", "benchmark_mode")),
                 ("metadata args.run_mode", dig(meta, "args", "run_mode")),
                 ("metadata benchmark_mode", dig(meta, "benchmark_mode"))],
        "queries": [("summary.json queries_requested", as_int(dig(summary, "queries_requested"))),
                    (params_from, as_int(dig(params, "run", "queries"))),
                    ("metadata args.queries", as_int(dig(meta, "args", "queries"))),
                    ("metadata queries", as_int(dig(meta, "queries")))],
    }[name]
    for where, found in sources:
        if found is not None and found != "":
            return found, where
    return None, "nowhere"


def index_type(leaf: Leaf) -> tuple[str | None, str]:
    found, where = fact(leaf, "index_type")
    return (str(found), where) if found is not None else (None, where)


def collection_size(leaf: Leaf) -> tuple[int | None, str]:
    """The vectors the queried collection held: summary inserted_vectors, else the ground-truth
    copy's total in result_verdict.json (vdbbench reads the collection's num_entities)."""
    if leaf.command == "run":
        found = as_int(dig(leaf.summary, "inserted_vectors"))
        if found is not None:
            return found, "summary.json inserted_vectors"
        found = as_int(dig(verdict(leaf), "flat_setup", "total_vectors"))
        if found is not None:
            return found, "result_verdict.json flat_setup.total_vectors"
    return None, "nowhere"


def missing_summary(leaf: Leaf) -> str:
    """Why summary.json gives nothing, with the rule that reports it (once)."""
    why = leaf.problem("summary") or "summary.json records nothing"
    return f"{why} (reported under 5.3.1)" if leaf.command == "run" else f"{why} in the datagen leaf"


def named_outputs(leaf: Leaf) -> list[tuple[str, bool]]:
    """(file name, present) of the stdout/stderr logs the metadata's command_output_files names."""
    found: list[tuple[str, bool]] = []
    listed = dig(leaf.metadata, "command_output_files")
    for item in listed if isinstance(listed, list) else []:
        for key in ("stdout", "stderr"):
            name = PurePosixPath(str(dig(item, key) or "")).name if isinstance(item, dict) else ""
            if name and name not in [n for n, _ in found]:
                found.append((name, real_file(leaf.path / name)))
    return found


def evidence_problem(leaf: Leaf) -> str:
    """Why neither config.json nor the metadata can be read, for 'cannot check' messages."""
    config_problem = config(leaf)[1] or "no config.json"
    return f"{config_problem}; {leaf.problem('metadata') or 'the metadata records no parameters'}"


def number(found: Any) -> float | None:
    result = as_number(found)
    return result if result is not None and math.isfinite(result) else None


# --- a run and its load --------------------------------------------------------------------

def datagen_for(gens: list[Leaf], run: Leaf) -> tuple[list[Leaf], str | None]:
    """Rules 5.1.2/5.2.2 pairing among the result's datagen leaves `gens`: the one the run names
    (summary.datagen_leaf), else those that loaded the same collection, else all of them."""
    named = dig(run.summary, "datagen_leaf")
    if isinstance(named, str) and named:
        wanted = PurePosixPath(named).name
        match = [g for g in gens if g.path.name == wanted]
        return match, None if match else f"the run names datagen leaf {wanted}, which {run.model}/datagen/ does not hold"
    if not gens:
        return [], f"{engine(run)}/{run.model}/datagen/ holds no datagen (load) leaf"
    collection, _ = fact(run, "collection")
    same = [g for g in gens if collection and fact(g, "collection")[0] == collection]
    return same or gens, None


def declared(gens: list[Leaf], leaf: Leaf) -> tuple[int | None, str]:
    """num_vectors: the leaf's own record, else (a run) its load leaf's when they agree."""
    n, where = fact(leaf, "num_vectors")
    if as_int(n) is not None or leaf.command != "run":
        return as_int(n), where
    paired, _ = datagen_for(gens, leaf)
    loaded = {as_int(fact(g, "num_vectors")[0]) for g in paired} - {None}
    if len(loaded) == 1:
        return loaded.pop(), f"datagen {', '.join(g.path.name for g in paired)} {fact(paired[0], 'num_vectors')[1]}"
    return None, "nowhere"
