"""`vectordb run`: gates on the collection, exact ground truth, then the timed queries from MPI
ranks (vectordb.rank) launched like every job (launch/job.py: start-up allowance, stall
watchdog, telemetry, teardown and sweeps): local query workers on this host by default, or,
with --hosts, ranks spread over client hosts that all query one Milvus server; one summary
either way, in the shape each has always had.

Milvus Lite is a database embedded in this process, so query clients on other hosts need a
Milvus server (--host/--port) at an address they can route to: both are refused up front.
"""

from __future__ import annotations

import hashlib
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mlpstorage_py.benchmarks.base import Plan
from mlpstorage_py.errors import BenchmarkFailed, ConfigurationError, GateRefused, UsageError
from mlpstorage_py.launch.options import LaunchOptions
from mlpstorage_py.results.io import iso_from_epoch, write_json
from mlpstorage_py.results.logs import log
from mlpstorage_py.results.tree import untrusted
from mlpstorage_py.results.vdb import VdbSummary
from mlpstorage_py.rules.tables import checker
from mlpstorage_py.vectordb import VECTOR_FIELD, families

# The deadline of a query_count job assumes at most this long per batch per rank (times the
# deadline table's safety factor); a timed job's work is its --runtime. --deadline overrides.
ESTIMATED_BATCH_S = 0.1
SPEC_FILE = "query_clients.json"


# -- the MPI layout ----------------------------------------------------------------------------
def default_ranks(hosts: Sequence[str]) -> int:
    """Without -np: the slots given in --hosts, else one rank per host, else one local worker."""
    if not hosts:
        return 1
    if all(":" in h for h in hosts):
        return sum(int(h.split(":")[1]) for h in hosts)
    return len(hosts)


def check_clients(hosts: Sequence[str], database: dict[str, Any]) -> None:
    """Refuse query clients on `hosts` (--hosts) that could not reach the database (exit 2, before any work)."""
    from mlpstorage_py.launch.hostnames import is_local, is_loopback

    remote = [h.split(":")[0] for h in hosts if not is_local(h)]
    if not remote:
        return
    if not database.get("host"):
        raise UsageError(f"--hosts {' '.join(remote)}: query clients on other hosts need a Milvus server "
                         "(--host/--port); Milvus Lite is a database embedded in this process")
    host = str(database["host"])
    if is_loopback(host):
        raise UsageError(f"--host {host} is each client host's own loopback: the query clients on "
                         f"{', '.join(remote)} cannot reach the server there; give an address they can route to")


def layout(launch: LaunchOptions, processes: int) -> tuple[Any, int] | None:
    """(MpiOptions, ranks) of the query clients over client hosts (--hosts), or None when they
    are local workers (no host to probe or describe)."""
    if not launch.hosts:
        return None
    from mlpstorage_py.launch.mpi import MpiOptions

    return MpiOptions.of(launch), processes


def client_command(launch: LaunchOptions, processes: int) -> list[str]:
    """The query clients' command: ranks over --hosts reading their spec in the leaf, or local
    workers reading it in the scratch directory, started by mpirun unless --mpi-bin says
    otherwise (srun would place them on any node of the allocation, away from Milvus Lite)."""
    from mlpstorage_py.launch.mpi import LEAF, SAFE_PATH, SCRATCH, MpiOptions, mpi_command

    opts, where = MpiOptions.of(launch), LEAF
    if not launch.hosts:
        opts.mpi_bin, where = opts.mpi_bin or "mpirun", SCRATCH
    return mpi_command(opts, processes, [sys.executable, *SAFE_PATH, "-m", "mlpstorage_py.vectordb.rank",
                                         f"{where}/{SPEC_FILE}"])


def busy_seconds(run: dict[str, Any], processes: int) -> float:
    """The work a query job should take: --runtime, or the batches per rank at ESTIMATED_BATCH_S."""
    if run["mode"] == "timed":
        return float(run["runtime"])
    return math.ceil(run["queries"] / run["batch_size"] / processes) * ESTIMATED_BATCH_S


# -- the run -----------------------------------------------------------------------------------
class QueryRun:
    """One `vectordb run` invocation's execute step (bench is the VectorDBBenchmark)."""

    def __init__(self, bench: Any, plan: Plan, leaf: Path) -> None:
        self.bench, self.plan, self.leaf = bench, plan, leaf
        self.request = bench.request

    def execute(self) -> None:
        from mlpstorage_py.vectordb import generate, groundtruth
        from mlpstorage_py.vectordb.backend import reported_params
        from mlpstorage_py.vectordb.system import DiskIO

        bench, plan, leaf = self.bench, self.plan, self.leaf
        p = plan.parameters
        ds, index, run, search = p["dataset"], p["index"], p["run"], p["search"]
        index_type, k = index["index_type"], search["search_limit"]
        mpi = layout(self.request.launch, run["num_query_processes"])  # the lifecycle probed these hosts
        fs = bench._filesystems(plan)
        db = bench._backend(plan)
        timeouts, poll = db.timeouts, float(bench.config.get("poll_interval_s", 2))
        started = time.time()
        try:
            db.open()
            bench.engine = db.engine_label()
            plan.engine_parameters.update(engine=bench.engine, database=db.record())
            info, metric = self._gate_collection(db, ds, index, index_type)
            db.load()
            before = db.wait_served(index_type, stall_s=timeouts.index_stall, poll_s=poll, progress=bench._progress)
            if not before["served_by_named_index"]:
                raise BenchmarkFailed(f"{before['rows_brute_force']:,} of {before['rows_total']:,} rows would be searched by "
                                      f"brute force, not by {index_type}: the run cannot be served by the named index "
                                      "and reports no figures")
            rows = db.count()
            if rows != ds["num_vectors"]:
                raise GateRefused(f"collection {db.collection} holds {rows:,} vectors; the run asks for "
                                  f"{ds['num_vectors']:,} (Rules 5.2.1)")
            datagen_leaf = self.datagen_leaf(ds, index_type)
            queries = generate.queries(ds["seed"], ds["distribution"], ds["dimension"], search["num_query_vectors"])
            query_digest = hashlib.sha256(queries.tobytes()).hexdigest()
            log.info(f"ground truth: exact top-{k} of {len(queries):,} queries over {rows:,} vectors ({metric})")
            batch_rows = max(1, min(16384, int(bench.config.get("read_back_batch_bytes", 2**25)) // (4 * ds["dimension"])))
            source, chunks = db.read_back(ds["num_vectors"], batch_rows)
            truth, gt = groundtruth.compute(chunks, queries, k=k, metric=metric, rows_in_collection=rows,
                                            source=source, progress=bench._progress)
            gt["query_set_sha256"] = query_digest
            if gt["vectors_covered"] != rows or gt["duplicate_ids"]:
                raise BenchmarkFailed(f"the ground truth covers {gt['vectors_covered']:,} of {rows:,} vectors "
                                      f"(coverage {gt['coverage']:.6f}, {gt['duplicate_ids']} duplicate ids; "
                                      "Rules 5.3.5 needs every vector exactly once)")
            log.info(f"ground truth ready in {gt['seconds']:.1f} s (coverage {gt['coverage']:.3f})")
            amount = f"{run['runtime']} s" if run["mode"] == "timed" else f"{run['queries']:,} queries"
            where = f" over {', '.join(h.split(':')[0] for h in mpi[0].hosts)} (MPI ranks)" if mpi else ""
            log.info(f"queries: {run['num_query_processes']} process(es){where}, {amount}, batches of "
                     f"{run['batch_size']}, top-{k}, {search['search_params']}")
            disk = DiskIO()
            measured = self._query_clients(db, mpi, metric, query_digest, truth, timeouts)
            disk_io = disk.result()
            after = db.serving(index_type)
            if not after["served_by_named_index"]:
                raise BenchmarkFailed(f"during the run {after['rows_brute_force']:,} rows came to be served by brute force; "
                                      "the figures would not be the index's")
        finally:
            db.close()
        from mlpstorage_py.vectordb.query import write_hits

        write_hits(leaf / "recall_hits.jsonl", measured.pop("merged_hits"))
        rstats = measured["recall_stats"]
        summary = {
            "benchmark_phase": "run",
            "start": iso_from_epoch(started), "end": iso_from_epoch(time.time()),
            "num_vectors": ds["num_vectors"], "inserted_vectors": rows, "dimension": ds["dimension"],
            "index_type": index_type, "metric_type": metric, "index_params": reported_params(info),
            "collection_name": db.collection,
            "database": db.record(), "engine": bench.engine,
            "mode": run["mode"], "runtime_requested_seconds": run["runtime"], "queries_requested": run["queries"],
            "num_query_processes": run["num_query_processes"], "batch_size": run["batch_size"],
            "search_limit": k, "search_params": search["search_params"],
            **measured,
            "ground_truth": gt,
            "served_by": {"before": before, "after": after,
                          "verdict": f"every row was searched through the {index_type} index"},
            "disk_io": disk_io,
            "datagen_leaf": datagen_leaf,
            "filesystems": fs,
        }
        VdbSummary(summary).write(leaf / "summary.json")
        write_json(leaf / "recall_stats.json", rstats)
        write_json(leaf / "result_verdict.json", {
            "flat_setup": {"ok": True, "coverage": gt["coverage"], "reason": gt["method"]},
            "valid": True, "result": "recall measured against complete exact ground truth"})
        write_json(leaf / "config.json", {"parameters": p, "database": db.record(), "engine": bench.engine})
        self._print(summary, rstats)

    def _gate_collection(self, db: Any, ds: dict[str, Any], index: dict[str, Any], index_type: str) -> tuple[dict, str]:
        """The collection must exist with the run's dimension and named index (Rules 5.1.2, 5.2.2)."""
        from mlpstorage_py.vectordb.backend import reported_params

        if not db.exists():
            raise ConfigurationError(f"no collection {db.collection} on {db.describe()}; run datagen first "
                                     "(same --num-vectors/--dimension/--collection)")
        dim = db.dimension()
        if dim != ds["dimension"]:
            raise GateRefused(f"collection {db.collection} holds {dim}-dimensional vectors; the run asks for "
                              f"{ds['dimension']} (Rules 5.1.2)")
        info = db.describe_index()
        if not info:
            raise GateRefused(f"collection {db.collection} has no index; datagen builds it")
        if str(info.get("index_type")) != index_type:
            raise GateRefused(f"collection {db.collection} is indexed with {info.get('index_type')}, the run asks "
                              f"for {index_type} (Rules 5.2.2)")
        metric = str(info.get("metric_type"))
        index["metric_type"] = metric
        built = reported_params(info)
        for key, milvus in families.family(index_type).build.items():
            if milvus in built:
                index[key] = built[milvus]
        return info, metric

    def _query_clients(self, db: Any, mpi: tuple[Any, int] | None, metric: str, digest: str, truth: Any,
                       timeouts: Any) -> dict[str, Any]:
        """The query clients as one job (the plan's command): each rank writes its file, every
        file is checked, and the measurement is built from them; over client hosts as
        clients.aggregate does, for local workers as they always reported."""
        from mlpstorage_py.launch.job import LaunchSpec, Work
        from mlpstorage_py.launch.mpi import fill, host_slots, placement
        from mlpstorage_py.vectordb.clients import aggregate, read_ranks

        p, leaf = self.plan.parameters, self.leaf
        ds, run, search = p["dataset"], p["run"], p["search"]
        processes = run["num_query_processes"]
        spec = {"leaf": str(leaf), "world_size": processes, "uri": db.uri, "collection": db.collection,
                "seed": ds["seed"], "distribution": ds["distribution"], "dimension": ds["dimension"],
                "num_query_vectors": search["num_query_vectors"], "query_set_sha256": digest,
                "timeout": timeouts.search, "batch_size": run["batch_size"], "limit": search["search_limit"],
                "metric_type": metric, "search_params": search["search_params"], "anns_field": VECTOR_FIELD,
                "runtime": run["runtime"], "total_queries": run["queries"], "report_count": run["report_count"]}
        name, logs = ("vectordb query ranks", "vectordb_ranks") if mpi else ("vectordb query workers", "vectordb_workers")
        with self.bench.launcher(leaf) as launcher:
            home = leaf if mpi else launcher.scratch  # where the spec and the rank files go
            if mpi is None:  # local workers: their rank files stay in the scratch; the leaf gets their CSVs
                spec.update(rank_dir=str(home), worker_csv=True)
            write_json(home / SPEC_FILE, spec)
            argv = fill(self.plan.commands[0], leaf, launcher.scratch)
            self.plan.commands = [argv]
            job = launcher.job(LaunchSpec(argv, name, leaf / f"{logs}.stdout.log", leaf / f"{logs}.stderr.log", ranks=processes,
                                          hosts=None if mpi is None else mpi[0].hosts,
                                          work=Work(busy_s=busy_seconds(run, processes))))
            done = launcher.run(job)
            docs = read_ranks(home, processes)
        if mpi is None:
            return _local_measurement(docs, truth, search["search_limit"])
        measured = aggregate(docs, truth, search["search_limit"])
        slots = host_slots(mpi[0].hosts, processes)
        wanted = placement(slots)
        measured["workers"] = measured.pop("ranks")
        for rank in measured["workers"]:
            rank["placed_on"] = wanted[rank["rank"]]
        assert job.startup is not None  # the ranks report: the spec's default
        measured["query_clients"] = {
            "launcher": "mpi", "command": argv, "layout": [list(s) for s in slots], "ranks": processes,
            "hosts": measured.pop("hosts"), "deadline_s": job.deadline_s, "startup_allowance_s": job.startup.allowance_s,
            "startup_seconds": done.startup_s, "launch_wall_seconds": done.wall_s,
            "rank_files": [f"vectordb_rank_{r}.json" for r in range(processes)], "spec": SPEC_FILE,
            "aggregation": {
                "total_time_seconds": "max over ranks of the rank's timed seconds (start barrier to its last batch)",
                "throughput_qps": "sum over ranks of queries_r / total_time_seconds",
                "latency": "percentiles of all ranks' per-query latencies pooled",
                "recall": "mean recall@k over every (rank, query index) result list against exact ground truth"}}
        return measured

    def _print(self, summary: dict[str, Any], rstats: dict[str, Any]) -> None:
        index_type, k = summary["index_type"], summary["search_limit"]
        ef = summary["search_params"]
        clients = summary.get("query_clients")
        over = f" from {clients['ranks']} ranks on {len(clients['hosts'])} host(s)" if clients else ""
        print(f"{index_type} run: {summary['throughput_qps']:,.1f} queries/s over {summary['total_queries']:,} queries"
              f"{over} in {summary['total_time_seconds']:.1f} s, p99 {summary.get('p99_latency_ms', float('nan')):.2f} ms, "
              f"recall@{k} {summary['recall']:.4f} ({ef or 'exact'}, {rstats['num_queries_evaluated']} queries evaluated)")
        if self.request.mode == "closed":
            needed = checker()["runs_per_result"]["vector_database"]
            done = 1 + sum(1 for meta in untrusted.leaf_records(self.leaf.parent, "vector_database_*_metadata.json")
                           if meta.parent != self.leaf and _succeeded(meta))
            print(f"CLOSED result: {done} of {needed} successful runs in {self.leaf.parent} (Rules 5.3.1)")

    def datagen_leaf(self, ds: dict[str, Any], index_type: str) -> str | None:
        """The newest successful datagen leaf of this collection in the results tree (Rules 5.1.2)."""
        bench = self.bench
        if bench.workload_dir is None:
            return None
        for summary in reversed(untrusted.leaf_records(bench.workload_dir.parent / "datagen", "summary.json")):
            try:
                data = untrusted.read_record(summary)
            except (OSError, ValueError):
                continue
            if not isinstance(data, dict) or data.get("collection_name") != ds["collection_name"]:
                continue
            if data.get("dimension") != ds["dimension"] or data.get("index_type") != index_type:
                dims, index = untrusted.shown(data.get("dimension")), untrusted.shown(data.get("index_type"))
                raise GateRefused(f"datagen leaf {summary.parent} recorded {dims} dims / {index}; "
                                  f"the run asks for {ds['dimension']} / {index_type} (Rules 5.1.2)")
            return str(summary.parent.relative_to(bench.results_dir)) if bench.results_dir else str(summary.parent)
        log.warning(f"no datagen leaf for collection {ds['collection_name']} in this results tree; the checker "
                    "compares a run with its datagen leaf (Rules 5.1.2, 5.2.1)")
        return None


def _succeeded(meta: Path) -> bool:
    """Whether a sibling leaf's metadata records exit status 0; one that is not a readable
    regular JSON file (a link, a FIFO) counts as not."""
    try:
        data = untrusted.read_record(meta)
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("exit_status") == 0


def _local_measurement(docs: list[dict[str, Any]], truth: Any, k: int) -> dict[str, Any]:
    """The local workers' figures, as they have always been reported: throughput over the first
    worker's start to the last one's end (one host, one clock), latencies from every batch, the
    first result list of each query index for recall."""
    import numpy as np

    from mlpstorage_py.vectordb import groundtruth
    from mlpstorage_py.vectordb.query import latency_stats, recall_stats

    batches = np.array([row for d in docs for row in d["latencies"]], dtype=np.float64).reshape(-1, 2)
    hits: dict[int, list[int]] = {}
    for doc in docs:
        for q, ids in doc["hits"].items():
            hits.setdefault(int(q), ids)
    total = sum(d["queries"] for d in docs)
    seconds = max(d["end"] for d in docs) - min(d["start"] for d in docs)
    _, recalls = groundtruth.recall(hits, truth, k)
    rstats = recall_stats(recalls, k)
    return {"throughput_qps": total / seconds if seconds > 0 else 0.0,
            "total_queries": total, "query_count": total, "total_time_seconds": seconds,
            "batch_count": int(len(batches)), "successful_batches": int(len(batches)), "failed_batches": 0,
            **latency_stats(batches), "recall": rstats.get("mean_recall"), "recall_stats": rstats,
            "workers": [{key: d[key] for key in ("batches", "queries", "start", "end", "seconds")} for d in docs],
            "merged_hits": hits}
