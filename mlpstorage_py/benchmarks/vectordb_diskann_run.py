"""`vectordb DISKANN run --vdb-engine diskann`: gates on the built index, exact ground truth over
the vectors read back from the storage root, then the query ranks (vectordb/diskann_rank.py)
through the launch path, and one summary with the device reads per query.

The summary holds what a Milvus run's does (clients.aggregate: QPS over the common window,
pooled latencies, recall@k against exact ground truth) plus p50_latency_ms, recall_at_<k>,
device_reads_per_query and device_read_bytes_per_query (diskann_clients.device_reads), what the
graph implies a query reads (diskann_engine.expected_reads), the in-memory part, and how the
index was read: O_DIRECT as each rank found it in /proc/self/fdinfo, and the page-cache drop.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any

from mlpstorage_py.benchmarks.base import Plan
from mlpstorage_py.benchmarks.vectordb_run import QueryRun, busy_seconds
from mlpstorage_py.errors import BenchmarkFailed, GateRefused, NotFoundError
from mlpstorage_py.launch.job import LaunchSpec, Work
from mlpstorage_py.results.io import iso_from_epoch, read_json, write_json
from mlpstorage_py.results.logs import log
from mlpstorage_py.vectordb import diskann_engine as engine

SPEC_FILE = "query_clients.json"


class DiskANNRun:
    """One run's execute step (bench is the DiskANNBenchmark)."""

    def __init__(self, bench: Any, plan: Plan, leaf: Path) -> None:
        self.bench, self.plan, self.leaf = bench, plan, leaf

    def gate(self, directory: Path, ds: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """The index must be datagen's, whole, of the run's scale (Rules 5.1.2, 5.2.1)."""
        desc = engine.describe(directory)
        record_path = directory / engine.BUILD_RECORD
        if not record_path.is_file():
            raise NotFoundError(f"no {engine.BUILD_RECORD} beside the index at {directory}: its build did not "
                                "finish; run datagen again (--force)")
        record = read_json(record_path)
        if engine.fingerprint(directory) != record.get("fingerprint"):
            raise GateRefused(f"the index at {directory} changed since datagen built it (its files differ "
                              f"from {engine.BUILD_RECORD}'s fingerprint); run datagen again (--force)")
        if desc["dimension"] != ds["dimension"]:
            raise GateRefused(f"the index at {directory} holds {desc['dimension']}-dimensional vectors; the run "
                              f"asks for {ds['dimension']} (Rules 5.1.2)")
        if desc["num_vectors"] != ds["num_vectors"]:
            raise GateRefused(f"the index at {directory} holds {desc['num_vectors']:,} vectors; the run asks for "
                              f"{ds['num_vectors']:,} (Rules 5.2.1)")
        return desc, record

    def execute(self) -> None:
        from mlpstorage_py.vectordb import generate, groundtruth
        from mlpstorage_py.vectordb.clients import aggregate, read_ranks
        from mlpstorage_py.vectordb.diskann_clients import device_reads, engine_facts
        from mlpstorage_py.vectordb.query import write_hits

        bench, plan, leaf = self.bench, self.plan, self.leaf
        p = plan.parameters
        ds, run, search, eng = p["dataset"], p["run"], p["search"], p["engine"]
        k, processes = search["search_limit"], run["num_query_processes"]
        started = time.time()
        fs = bench._filesystems(plan)
        directory = Path(eng["index_dir"])
        desc, record = self.gate(directory, ds)
        metric = record["metric_type"]
        p["index"].update(index_type="DISKANN", metric_type=metric, **record["index_params"])
        datagen_leaf = QueryRun(bench, plan, leaf).datagen_leaf(ds, "DISKANN")
        queries = generate.queries(ds["seed"], ds["distribution"], ds["dimension"], search["num_query_vectors"])
        digest = hashlib.sha256(queries.tobytes()).hexdigest()
        log.info(f"ground truth: exact top-{k} of {len(queries):,} queries over {desc['num_vectors']:,} vectors "
                 f"read back from {directory / engine.VECTORS} ({metric})")
        rows = max(1, min(16384, int(bench.config.get("read_back_batch_bytes", 2**25)) // (4 * ds["dimension"])))
        truth, gt = groundtruth.compute(engine.read_vectors(directory / engine.VECTORS, rows), queries, k=k,
                                        metric=metric, rows_in_collection=desc["num_vectors"],
                                        source=f"{engine.VECTORS} on the storage root", progress=bench._progress)
        gt["query_set_sha256"] = digest
        if gt["vectors_covered"] != desc["num_vectors"] or gt["duplicate_ids"]:
            raise BenchmarkFailed(f"the ground truth covers {gt['vectors_covered']:,} of {desc['num_vectors']:,} "
                                  "vectors (Rules 5.3.5 needs every vector exactly once)")
        memory = eng["memory"]
        spec = {"leaf": str(leaf), "world_size": processes, "index_dir": str(directory),
                "copy_dir": str(Path(eng["index_copy_dir"]) / ds["collection_name"]) if eng["index_copy_dir"] else None,
                "fingerprint": record["fingerprint"], "seed": ds["seed"], "distribution": ds["distribution"],
                "dimension": ds["dimension"], "num_query_vectors": search["num_query_vectors"],
                "query_set_sha256": digest, "limit": k, "search_list": search["search_ef"],
                "beam_width": search["search_params"]["beam_width"], "cache_nodes": memory["cache_nodes"],
                "batch_size": run["batch_size"], "runtime": run["runtime"], "total_queries": run["queries"],
                "report_count": run["report_count"]}
        write_json(leaf / SPEC_FILE, spec)
        log.info(f"queries: {processes} MPI rank(s), search_list {spec['search_list']}, beam width "
                 f"{spec['beam_width']}, {memory['cache_nodes']:,} cached nodes per client, index {eng['index_placement']}")
        with bench.launcher(leaf) as launcher:
            outcome = bench.launch(launcher, LaunchSpec(
                plan.commands[0], "vectordb query ranks", leaf / "vectordb_ranks.stdout.log",
                leaf / "vectordb_ranks.stderr.log", ranks=processes,
                work=Work(busy_s=busy_seconds(run, processes))), plan)
        docs = read_ranks(leaf, processes)
        measured = aggregate(docs, truth, k)
        hits = measured.pop("merged_hits")
        measured["workers"] = measured.pop("ranks")
        measured["query_clients"] = {"launcher": "mpi", "command": plan.commands[0], "ranks": processes,
                                     "hosts": measured.pop("hosts"), "spec": SPEC_FILE,
                                     "launch_wall_seconds": outcome.wall_s,
                                     "rank_files": [f"vectordb_rank_{r}.json" for r in range(processes)]}
        io = device_reads(docs, measured["total_queries"], measured["total_time_seconds"])
        facts = engine_facts(docs)
        if not facts["o_direct_all_ranks"]:
            log.warning(f"ann_disk.index was not open with O_DIRECT in every rank ({facts['o_direct_by_rank']}): "
                        "reads may be served from the page cache")
        write_hits(leaf / "recall_hits.jsonl", hits)
        rstats = measured["recall_stats"]
        summary = {
            "benchmark_phase": "run", "start": iso_from_epoch(started), "end": iso_from_epoch(time.time()),
            "num_vectors": ds["num_vectors"], "inserted_vectors": desc["num_vectors"], "dimension": ds["dimension"],
            "index_type": "DISKANN", "metric_type": metric, "index_params": record["index_params"],
            "collection_name": ds["collection_name"], "database": p["database"], "engine": bench.engine,
            "engine_version": engine.version(),
            "mode": run["mode"], "runtime_requested_seconds": run["runtime"], "queries_requested": run["queries"],
            "num_query_processes": processes, "batch_size": run["batch_size"],
            "search_limit": k, "search_params": search["search_params"],
            "search_list": search["search_ef"], "beam_width": search["search_params"]["beam_width"],
            **measured,
            "p50_latency_ms": measured.get("median_latency_ms"), f"recall_at_{k}": measured["recall"],
            "device_reads_per_query": io["device_reads_per_query"],
            "device_read_bytes_per_query": io["device_read_bytes_per_query"],
            "expected_reads": eng["expected_reads"], "disk_io": io["device_io"],
            "memory": {**memory, "rss_bytes_max": facts["rss_bytes_max"]},
            "index_reads": {"o_direct": facts["o_direct_all_ranks"], "o_direct_by_rank": facts["o_direct_by_rank"],
                            "page_cache": facts["page_cache"],
                            "how": "DiskANN reads ann_disk.index sectors with O_DIRECT through libaio (checked in each "
                                   "rank's /proc/self/fdinfo); the page cache is also dropped before the timed queries "
                                   "(as root), for the PQ files loaded with buffered reads"},
            "index_dir": str(directory), "index_placement": eng["index_placement"],
            "index_dirs_searched": facts["index_dirs"], "index_copies": facts["index_copies"],
            "ground_truth": gt, "datagen_leaf": datagen_leaf, "filesystems": fs,
        }
        write_json(leaf / "summary.json", summary)
        write_json(leaf / "recall_stats.json", rstats)
        write_json(leaf / "result_verdict.json", {
            "flat_setup": {"ok": True, "coverage": gt["coverage"], "reason": gt["method"]},
            "valid": True, "result": "recall measured against complete exact ground truth"})
        write_json(leaf / "config.json", {"parameters": p, "database": p["database"], "engine": bench.engine})
        reads = summary["device_reads_per_query"]
        print(f"DISKANN run ({bench.engine}): {summary['throughput_qps']:,.1f} queries/s over "
              f"{summary['total_queries']:,} queries from {processes} rank(s), p50 {summary['p50_latency_ms']:.2f} ms, "
              f"p99 {summary['p99_latency_ms']:.2f} ms, recall@{k} {summary['recall']:.4f} at search_list "
              f"{summary['search_list']} / beam width {summary['beam_width']}, device reads per query "
              + (f"{reads:.1f} ({summary['device_read_bytes_per_query'] / 1024:.0f} KiB)" if reads is not None
                 else f"not counted ({'; '.join(io['device_io']['missing']) or 'no device'})")
              + f" ({rstats['num_queries_evaluated']} queries evaluated)")

