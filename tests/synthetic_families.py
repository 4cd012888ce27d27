"""Family writers for the synthetic package: vector_database and kv_cache (Rules sections 5, 6).

    import synthetic_families
    with synthetic_families.registered():      # or synthetic_families.register_all()
        make_package(root, families=("vector_database", "kv_cache"))

Each writer lays its leaves out as our own `mlpstorage <mode> vectordb|kvcache` writes them
(benchmarks/vectordb.py, benchmarks/kvcache.py), with every record agreeing with every other:

- vector_database/milvus/HNSW/: one datagen leaf and 5 run leaves (Rules 5.3.1) on the
  embedded Milvus Lite (the only backend a CLOSED HNSW run can use), 1,000,000 x 1536 vectors
  (a scale of configs/vectordb/default.yaml), summary.json / config.json / result_verdict.json /
  recall_stats.json / the df log lines and fs_separation.json of the run;
- kv_cache/llama3.1-8b/run/<ts>/: Table KVCache-1's three Options x 3 trials x 2 ranks, each
  rank's kvcache_results_<ts>.json, and summary.json aggregated by the tool's own
  aggregate_option (Rules 6.3.4), the metadata's parameters.options/sequence/global and the
  recorded mpirun command of every trial.

Values are fixed and derived from BASE, so packages are deterministic.
"""

from __future__ import annotations

import contextlib
import copy
import json
from datetime import timedelta
from pathlib import Path
from typing import Any, Iterator

from synthetic import (FAMILY_WRITERS, HOST, RESULTS_DIR, RUN_SECONDS, Context, iso, metadata, register, write_json)

VDB_ENGINE, VDB_INDEX = "milvus", "HNSW"
VDB_SCALE = (1_000_000, 1536)
VDB_ROOT = "/mnt/vdb"                 # --storage-root: Milvus Lite's database lives here
VDB_RUNS = 5
KV_MODEL = "llama3.1-8b"
KV_CACHE_DIR = "/mnt/kvcache"
KV_RANKS = 2                          # one host, --npernode 2
WRAPPER = "/opt/mlpstorage/kv_cache_benchmark/mlperf_wrapper.py"
PYTHON = "/opt/mlpstorage/.venv/bin/python"
MILVUS_LITE = {"database": "milvus", "backend": "milvus-lite", "version": "milvus_lite-3.2.2", "client": "pymilvus 3.0.2",
               "path": f"{VDB_ROOT}/milvus_lite.db", "milvus_lite": "3.2.2"}
ENGINE = "pymilvus 3.0.2 / Milvus Lite 3.2.2"


def _stamp(ctx: Context, leaf: Path, family: str, parameters: dict[str, Any], when, source: str) -> None:
    ctx.stamp(leaf, family, parameters, when, dlio=False)
    path = leaf / "provenance.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["dlio"]["source"] = source
    write_json(path, data)


def _fs_separation(leaf: Path, data_path: str, when) -> None:
    write_json(leaf / "fs_separation.json", {
        "version": 1, "method": "link_exdev", "data_or_chkpt_path": data_path, "results_path": RESULTS_DIR,
        "data_or_chkpt_realpath": data_path, "results_realpath": RESULTS_DIR, "same_filesystem": False,
        "probed_at": iso(when), "probed_by_rank": 0, "probed_by_host": HOST})


# --- vector database -----------------------------------------------------------------------

def _df(path: str, device: str, fstype: str, mount: str) -> dict[str, Any]:
    return {"path": path, "realpath": path, "df_output": [
        "Filesystem     Type 1024-blocks     Used Available Capacity Mounted on",
        f"{device:<14} {fstype:<5} 1000000000 10000000 990000000       1% {mount}"],
        "filesystem": device, "type": fstype, "size_kib": 1000000000, "used_kib": 10000000,
        "available_kib": 990000000, "mounted_on": mount}


def _filesystems() -> dict[str, Any]:
    return {"results": _df(RESULTS_DIR, "/dev/sda1", "ext4", "/results"),
            "data": _df(VDB_ROOT, "/dev/nvme0n1", "xfs", "/mnt/vdb"), "same_filesystem": False}


def _vdb_log(leaf: Path, start) -> None:
    """mlpstorage.log with the two df records of Rules 5.4.2, as the tool logs them."""
    fs = _filesystems()
    stamp = start.strftime("%Y-%m-%d %H:%M:%S,000")
    lines = [f"{stamp} INFO lifecycle:77 leaf: {leaf.name}"]
    for label, key in (("vector database data (--storage-root)", "data"), ("results directory", "results")):
        lines.append(f"{stamp} INFO vectordb:345 df {label}: {fs[key]['path']}")
        lines += [f"{stamp} INFO vectordb:347   {row}" for row in fs[key]["df_output"]]
    (leaf / "mlpstorage.log").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (leaf / "mlpstorage.errors.log").write_text("", encoding="utf-8")


def _vdb_args(ctx: Context, command: str) -> dict[str, Any]:
    n, dim = VDB_SCALE
    args = {"model": VDB_INDEX, "command": command, "benchmark": "vectordb", "num_vectors": n, "dimension": dim,
            "num_shards": 1, "vector_dtype": "FLOAT_VECTOR", "index_type": None, "vdb_engine": VDB_ENGINE, "host": None,
            "port": None, "collection": None, "data_dir": VDB_ROOT, "storage_type": "local_fs", "seed": 42,
            "distribution": "uniform", "storage": "file", "params": [], "allow_invalid_params": False}
    if command == "datagen":
        args.update(metric_type="COSINE", max_degree=64, ef_construction=200, batch_size=1000, chunk_size=10000,
                    force=False, compact=False)
    else:
        args.update(run_mode=None, runtime=None, queries=100000, num_query_processes=4, batch_size=10, report_count=100,
                    search_ef=None, search_limit=10, num_query_vectors=1000)
    return args


def vdb_parameters(command: str) -> dict[str, Any]:
    n, dim = VDB_SCALE
    collection = f"mlps_1m_1shards_{dim}dim_uniform_{VDB_INDEX.lower()}"
    p: dict[str, Any] = {
        "database": {"database": VDB_ENGINE},
        "dataset": {"num_vectors": n, "dimension": dim, "num_shards": 1, "vector_dtype": "FLOAT_VECTOR",
                    "collection_name": collection, "distribution": "uniform", "seed": 42},
        "index": {"index_type": VDB_INDEX, "metric_type": "COSINE", "M": 64, "ef_construction": 200},
        "storage": {"storage_root": VDB_ROOT, "storage_type": "local_fs"},
    }
    if command == "datagen":
        p["dataset"].update(batch_size=1000, chunk_size=10000)
        p["workflow"] = {"compact": False, "force": False}
    else:
        p["run"] = {"mode": "query_count", "runtime": None, "queries": 100000, "num_query_processes": 4, "batch_size": 10,
                    "report_count": 100}
        p["search"] = {"search_limit": 10, "recall_k": 10, "search_ef": 200, "num_query_vectors": 1000,
                       "search_params": {"ef": 200}}
    return p


def _served(rows: int) -> dict[str, Any]:
    return {"method": "Milvus Lite engine state, read in-process", "segments": [
        {"rows": rows, "index": VDB_INDEX, "index_class": "FaissHnswIndex"}], "memtable_rows": 0, "rows_total": rows,
        "rows_served_by_index": rows, "rows_brute_force": 0,
        "index_spec": {"index_type": VDB_INDEX, "metric_type": "COSINE", "params": {"M": 64, "efConstruction": 200}},
        "served_by_named_index": True}


def write_vector_database(ctx: Context) -> None:
    n, dim = VDB_SCALE
    workload = ctx.results / "vector_database" / VDB_ENGINE / VDB_INDEX
    params = vdb_parameters("datagen")
    collection = params["dataset"]["collection_name"]
    leaf, start, end = ctx.next_leaf(workload / "datagen", 600)
    build_start = start + timedelta(seconds=300)
    write_json(leaf / "summary.json", {
        "benchmark_phase": "datagen", "start": iso(start), "end": iso(end), "num_vectors": n, "inserted_vectors": n,
        "dimension": dim, "index_type": VDB_INDEX, "requested_index_type": VDB_INDEX, "metric_type": "COSINE",
        "index_params": {"M": 64, "efConstruction": 200}, "collection_name": collection, "num_shards": 1,
        "vector_dtype": "FLOAT_VECTOR", "distribution": "uniform", "seed": 42, "batch_size": 1000, "chunk_size": 10000,
        "database": MILVUS_LITE, "engine": ENGINE,
        "load": {"start": iso(start), "end": iso(build_start), "seconds": 300.0, "acknowledged_vectors": n,
                 "vectors_per_second": n / 300.0},
        "load_time_seconds": 300.0,
        "index_build": {"start": iso(build_start), "end": iso(end), "seconds": 290.0, "state": "Finished",
                        "indexed_rows": n, "total_rows": n, "pending_index_rows": 0,
                        "requested_params": {"M": 64, "efConstruction": 200}, "index_type": VDB_INDEX, "metric_type": "COSINE",
                        "params": {"M": 64, "efConstruction": 200}, "served_ready": iso(end)},
        "index_build_time_seconds": 290.0,
        "compaction": {"requested": False, "state": "not requested"},
        "served_by": _served(n), "filesystems": _filesystems()})
    _vdb_log(leaf, start)
    _fs_separation(leaf, VDB_ROOT, start)
    metadata(ctx, leaf, "vector_database", VDB_INDEX, "datagen", start, end, 1, None, _vdb_args(ctx, "datagen"), params, {}, "",
             engine_parameters={"engine": ENGINE, "backend": "milvus-lite", "database": MILVUS_LITE}, engine=ENGINE)
    _stamp(ctx, leaf, "vector_database", params, end, ENGINE)
    datagen_rel = leaf.relative_to(ctx.root).as_posix()

    params = vdb_parameters("run")
    queries = params["run"]["queries"]
    for index in range(VDB_RUNS):
        leaf, start, end = ctx.next_leaf(workload / "run", RUN_SECONDS)
        seconds = 40.0 + index
        recall = 0.95 + 0.001 * index
        rstats = {"k": 10, "mean_recall": recall, "median_recall": recall, "min_recall": recall - 0.1,
                  "max_recall": 1.0, "p5_recall": recall - 0.05, "p95_recall": 1.0, "p99_recall": 1.0,
                  "num_queries_evaluated": 1000}
        latency = {f"{stat}_latency_ms": value for stat, value in (
            ("min", 0.5), ("max", 40.0), ("mean", 4.0 + index * 0.1), ("median", 3.5), ("p95", 9.0), ("p99", 15.0),
            ("p999", 30.0), ("p9999", 39.0))}
        gt = {"method": "exact brute force (numpy) over every vector read back from the collection", "metric_type": "COSINE",
              "k": 10, "num_queries": 1000, "vectors_covered": n, "vectors_in_collection": n, "duplicate_ids": 0,
              "coverage": 1.0, "seconds": 20.0, "query_set_sha256": "0" * 64}
        summary = {
            "benchmark_phase": "run", "start": iso(start), "end": iso(end), "num_vectors": n, "inserted_vectors": n,
            "dimension": dim, "index_type": VDB_INDEX, "metric_type": "COSINE", "index_params": {"M": 64, "efConstruction": 200},
            "collection_name": collection, "database": MILVUS_LITE, "engine": ENGINE, "mode": "query_count",
            "runtime_requested_seconds": None, "queries_requested": queries, "num_query_processes": 4, "batch_size": 10,
            "search_limit": 10, "search_params": {"ef": 200}, "throughput_qps": queries / seconds,
            "total_queries": queries, "query_count": queries, "total_time_seconds": seconds, "batch_count": queries // 10,
            "successful_batches": queries // 10, "failed_batches": 0, **latency, "recall": recall, "recall_stats": rstats,
            "ground_truth": gt,
            "served_by": {"before": _served(n), "after": _served(n), "verdict": f"every row was searched through the {VDB_INDEX} index"},
            "disk_io": {"devices": ["nvme0n1"], "duration_seconds": seconds, "bytes_read": 4096 * queries, "read_ios": queries,
                        "read_mbps": 4096 * queries / seconds / 2 ** 20, "read_iops": queries / seconds},
            "datagen_leaf": datagen_rel, "filesystems": _filesystems()}
        write_json(leaf / "summary.json", summary)
        write_json(leaf / "recall_stats.json", rstats)
        write_json(leaf / "result_verdict.json", {"flat_setup": {"ok": True, "coverage": 1.0, "reason": gt["method"]},
                                                  "valid": True, "result": "recall measured against complete exact ground truth"})
        write_json(leaf / "config.json", {"parameters": params, "database": MILVUS_LITE, "engine": ENGINE})
        (leaf / "vectordb_worker_0.csv").write_text("batch,first_query,batch_size,start_s,latency_ms,ok\n0,0,10,0.0,40.0,1\n",
                                                     encoding="utf-8")
        (leaf / "recall_hits.jsonl").write_text('{"q": 0, "ids": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]}\n', encoding="utf-8")
        _vdb_log(leaf, start)
        _fs_separation(leaf, VDB_ROOT, start)
        metadata(ctx, leaf, "vector_database", VDB_INDEX, "run", start, end, 4, None, _vdb_args(ctx, "run"), params, {}, "",
                 engine_parameters={"engine": ENGINE, "backend": "milvus-lite", "database": MILVUS_LITE}, engine=ENGINE)
        _stamp(ctx, leaf, "vector_database", params, end, ENGINE)


# --- kv cache ----------------------------------------------------------------------------------

def _rank_result(option: str, params: dict[str, Any], glob: dict[str, Any], trial: int, rank: int, seed: int,
                 output: str) -> dict[str, Any]:
    """One kv-cache.py result (the fields aggregation and the checker read, as kvcache_sim writes them)."""
    o = int(option)
    read_bw = 0.5 * o + 0.125 * rank + 0.0625 * trial
    write_bw = 0.25 * o + 0.03125 * rank + 0.015625 * trial
    tokens = 1000.0 * o + 10.0 * rank + trial
    duration = float(params["duration"])
    return {
        "schema": "mlps-kvcache-result/1", "status": "ok",
        "run": {"model": params["model"], "num_users": params["num_users"], "duration": duration,
                "generation_mode": params["generation_mode"], "performance_profile": glob["performance_profile"],
                "disable_multi_turn": not glob["multi_turn"], "disable_prefix_caching": not glob["prefix_caching"],
                "enable_rag": glob["rag"], "rag_num_docs": glob["rag_num_docs"],
                "max_concurrent_allocs": params["max_concurrent_allocs"], "max_requests": 0, "seed": seed, "config": None,
                "prefill_only": False, "decode_only": False, "trace_path": None, "use_burst_trace": False,
                "gpu_mem_gb": float(params["gpu_mem_gb"]), "cpu_mem_gb": float(params["cpu_mem_gb"]),
                "cache_dir": f"{KV_CACHE_DIR}/rank_{rank}", "output": output, "phase": "both", "kv_cache_version": "1.0.0"},
        "seed": seed,
        "summary": {
            "total_requests": 500 + rank, "total_tokens": int(tokens * duration), "elapsed_time": duration,
            "avg_throughput_tokens_per_sec": 2 * tokens, "storage_throughput_tokens_per_sec": tokens,
            "end_to_end_latency_ms": {"mean": 50.0, "p50": 40.0, "p95": 120.0 + rank + trial, "p99": 150.0},
            "cache_stats": {"storage_entries": 100 + rank, "tier_storage_read_bandwidth_gbps": read_bw,
                            "tier_storage_write_bandwidth_gbps": write_bw,
                            "storage_read_device_p95_ms": 10.0 + o + 0.5 * rank + 0.25 * trial,
                            "storage_write_device_p95_ms": 2.0 + o + 0.25 * rank + 0.125 * trial,
                            "storage_read_p95_ms": 11.0 + o + rank}}}


def kv_command(leaf_dir: str, stamp: str, option: str, trial: int, args: list[str], seed: int, ranks: int) -> str:
    program = [PYTHON, WRAPPER, "--rank-output-base", f"{leaf_dir}/option_{option}/trial_{trial}", "--rank-cache-base",
               KV_CACHE_DIR, "--seed-base", str(seed), "--timestamp", stamp, "--", *args]
    return " ".join(["mpirun", "-n", str(ranks), "--host", f"{HOST}:{ranks}", "--bind-to", "none", *program])


def write_kv_cache(ctx: Context) -> None:
    from mlpstorage_py.benchmarks import kvcache
    from mlpstorage_py.benchmarks.options import KVCacheOptions
    from mlpstorage_py.results.kv import KvSummary

    table = kvcache.option_table()
    parameters = kvcache.resolve_parameters(ctx.division, KVCacheOptions(), table)
    sequence, glob = parameters["sequence"], parameters["global"]
    trials, total = sequence["trials"], KV_RANKS
    per_option = {key: kvcache.kv_cache_args(option, glob, None) for key, option in parameters["options"].items()}
    seconds = sum(trials * (int(o["duration"]) + kvcache.STARTUP_ESTIMATE_S) for o in parameters["options"].values())
    seconds += (len(parameters["options"]) - 1) * sequence["inter_option_delay_s"]
    leaf, start, end = ctx.next_leaf(ctx.results / "kv_cache" / KV_MODEL / "run", seconds)
    stamp, leaf_dir = leaf.name, ctx.leaf_dir(leaf)
    commands: list[str] = []
    outputs: list[dict[str, str]] = []
    aggregates: dict[str, Any] = {}
    for key, option in parameters["options"].items():
        trial_results = []
        for trial in range(trials):
            command = kv_command(leaf_dir, stamp, key, trial, per_option[key], sequence["seed"], total)
            commands.append(command)
            logs = {s: f"{leaf_dir}/kvcache_opt{key}_trial{trial}_{stamp}.{s}.log" for s in ("stdout", "stderr")}
            outputs.append({"command": command, **logs})
            for s in ("stdout", "stderr"):
                (leaf / f"kvcache_opt{key}_trial{trial}_{stamp}.{s}.log").write_text("", encoding="utf-8")
            ranks = {}
            for rank in range(total):
                rank_dir = leaf / f"option_{key}" / f"trial_{trial}" / f"rank_{rank}"
                rank_dir.mkdir(parents=True)
                name = f"kvcache_results_{stamp}.json"
                output = f"{leaf_dir}/option_{key}/trial_{trial}/rank_{rank}/{name}"
                ranks[rank] = _rank_result(key, option, glob, trial, rank, sequence["seed"] + rank, output)
                write_json(rank_dir / name, ranks[rank])
            trial_results.append(ranks)
        aggregate = kvcache.aggregate_option(key, trial_results, total)
        aggregate["name"] = table["options"][key]["name"]
        aggregate["label"] = table["options"][key]["label"]
        aggregates[key] = aggregate
        write_json(leaf / f"option_{key}_results.json", {
            "option": int(key), "parameters": option, "kv_cache_args": per_option[key], "aggregate": aggregate,
            "ranks": kvcache._rank_index(leaf, key, trial_results)})
    summary = {
        "schema_version": KvSummary.VERSION, "run_datetime": stamp, "model": KV_MODEL, "npernode": total,
        "host_count": 1, "hosts": [HOST], "total_ranks": total, "trials_per_option": trials, "seed": sequence["seed"],
        "inter_option_delay_s": sequence["inter_option_delay_s"], "performance_profile": glob["performance_profile"],
        "options": aggregates, "partial_failure": False, "trial_failures": {},
        "aggregation": {"bandwidth_and_throughput": "per trial: sum over ranks; over trials: arithmetic mean (fmean)",
                        "device_latency": kvcache.DEVICE_LATENCY_NOTE,
                        "cpu_tier_ranks": "ranks with cache_stats.storage_entries == 0 contribute 0.0 to the device latencies"}}
    write_json(leaf / "summary.json", summary)
    write_json(leaf / "results.json", {"benchmark": "kv_cache", "model": KV_MODEL, "run_datetime": stamp, "total_ranks": total,
                                       "partial_failure": False,
                                       "options": {k: {"name": a["name"], "label": a["label"], **a["headline"]}
                                                   for k, a in aggregates.items()}})
    _fs_separation(leaf, KV_CACHE_DIR, start)
    (leaf / "mlpstorage.log").write_text(f"{start.isoformat()} INFO leaf: {leaf.name}\n", encoding="utf-8")
    args = {"benchmark": "kvcache", "model": KV_MODEL, "cache_dir": KV_CACHE_DIR, "num_processes": total, "npernode": None,
            "hosts": [HOST], "kv_options": None, "kv_model": None, "num_users": None, "duration": None, "gpu_mem_gb": None,
            "cpu_mem_gb": None, "generation_mode": None, "performance_profile": None, "disable_multi_turn": None,
            "disable_prefix_caching": None, "enable_rag": None, "rag_num_docs": None, "kv_config": None, "seed": None,
            "trials": None, "inter_option_delay": None, "params": [], "allow_invalid_params": False}
    engine = {"engine": kvcache.ENGINE, "wrapper": WRAPPER, "cache_dir": KV_CACHE_DIR, "config_file": None, "hosts": [HOST],
              "npernode": total, "host_count": 1, "total_ranks": total, "kv_cache_args": per_option}
    metadata(ctx, leaf, "kv_cache", KV_MODEL, "run", start, end, total, None, args, copy.deepcopy(parameters), {},
             commands[-1], engine_parameters=engine, engine=kvcache.ENGINE, command_output_files=outputs,
             kvcache_headline={k: a["headline"] for k, a in aggregates.items()}, cache_dir=KV_CACHE_DIR,
             executed_argv=[c.split() for c in commands])
    _stamp(ctx, leaf, "kv_cache", parameters, end, kvcache.ENGINE)


WRITERS = {"vector_database": write_vector_database, "kv_cache": write_kv_cache}


def register_all() -> None:
    """Register both writers with synthetic.FAMILY_WRITERS (idempotent)."""
    for family, writer in WRITERS.items():
        register(family, writer)


@contextlib.contextmanager
def registered() -> Iterator[None]:
    """Both writers registered for the duration; the registry is left as it was found
    (tests/test_checker_structure.py expects an unregistered vector_database by default)."""
    before = {family: FAMILY_WRITERS.get(family) for family in WRITERS}
    register_all()
    try:
        yield
    finally:
        for family, writer in before.items():
            if writer is None:
                FAMILY_WRITERS.pop(family, None)
            else:
                FAMILY_WRITERS[family] = writer
