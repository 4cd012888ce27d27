"""One query client as an MPI rank: over client hosts for `vectordb run --hosts`, on this host
(the default's local query workers) otherwise, so every query job runs through the one launch
path (launch/job.py). A rank may run on another host, so it takes everything from a spec file
in the (shared) leaf, or in the scratch directory for local workers, and rebuilds the query set
from the seed rather than reading the parent's memory.

Run as: <mpirun> -n P --host h1:s1,... python -m mlpstorage_py.vectordb.rank LEAF/query_clients.json

Rank r of P issues global batches r, r+P, r+2P, ... (the same partition the local workers use,
query.batches_for), so every rank has a distinct, deterministic slice of the query stream. All
ranks connect and run one untimed warm-up batch, then meet at a barrier; each times its loop
from the barrier on its own monotonic clock (no cross-host clock comparison). Each writes
vectordb_rank_<r>.json into the leaf with its hostname, its raw per-batch latencies and the
first result list of each query index it issued; the parent aggregates (clients.aggregate).
It then records the libraries it imported (results/libraries.py) in the leaf's rank_libraries/.
A local worker's rank file goes to the spec's `rank_dir` (the scratch directory) instead, and it
writes its batch timings to the leaf (vectordb_worker_<r>.csv), as the local workers always did.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from mlpstorage_py.results import libraries
from mlpstorage_py.results.vdb import VdbRank
from mlpstorage_py.telemetry import rank_progress

RANK_FILE = "vectordb_rank_{rank}.json"
WORKER_CSV = "vectordb_worker_{rank}.csv"
CSV_HEADER = "batch,first_query,batch_size,start_s,latency_ms,ok\n"

# The launcher that started this rank, read before anything can outlive it (rank_guard).
_PARENT = os.getppid()


def rank_path(leaf: Path, rank: int) -> Path:
    return Path(leaf) / RANK_FILE.format(rank=rank)


def run_rank(spec: dict[str, Any], rank: int, size: int, barrier: Any, processor: str,
             timings: list[tuple[int, int, int, float, float]] | None = None) -> VdbRank:
    """The body of one rank; returns its record (the caller writes it). `barrier` releases all
    ranks together once every one of them is connected and warmed up. `timings` gets each
    batch's (global batch, first query index, size, start and latency in ms)."""
    from pymilvus import MilvusClient

    from mlpstorage_py.vectordb import generate
    from mlpstorage_py.vectordb.query import batches_for

    # pymilvus logs every failed call with its own traceback; a rank's failure is reported once,
    # by main(), whose first line names the rank and host (the line the parent quotes).
    for name in ("pymilvus", "pymilvus.milvus_client"):
        logging.getLogger(name).setLevel(logging.CRITICAL)

    if size != spec["world_size"]:
        raise RuntimeError(f"MPI world has {size} ranks, the spec planned {spec['world_size']}")
    queries = generate.queries(spec["seed"], spec["distribution"], spec["dimension"], spec["num_query_vectors"])
    digest = hashlib.sha256(queries.tobytes()).hexdigest()
    if digest != spec["query_set_sha256"]:
        raise RuntimeError(f"rank {rank} rebuilt a different query set (sha256 {digest[:12]}, "
                           f"parent {spec['query_set_sha256'][:12]}): a different numpy on this host?")
    nq = len(queries)
    connect_start = time.perf_counter()
    client = MilvusClient(uri=spec["uri"], timeout=spec["timeout"])
    search_params = {"metric_type": spec["metric_type"], "params": spec["search_params"]}
    batch = spec["batch_size"]

    def search(first: int, count: int) -> tuple[list, list[int]]:
        rows = [(first + i) % nq for i in range(count)]
        found = client.search(spec["collection"], data=queries[rows], limit=spec["limit"], search_params=search_params,
                              anns_field=spec["anns_field"], timeout=spec["timeout"])
        return found, rows

    search(0, min(batch, nq))  # untimed warm-up: the connection and the first call
    connect_s = time.perf_counter() - connect_start
    barrier()
    t0 = time.perf_counter()
    started_wall = time.time()
    deadline = t0 + spec["runtime"] if spec["runtime"] else None
    latencies: list[list[float]] = []
    hits: dict[str, list[int]] = {}
    done, next_report = 0, spec["report_count"]
    for g, count in batches_for(rank, size, batch, spec["total_queries"]):
        if deadline is not None and time.perf_counter() >= deadline:
            break
        first = g * batch
        began = time.perf_counter()
        result, rows = search(first, count)
        latencies.append([count, (time.perf_counter() - began) * 1000.0])
        if timings is not None:
            timings.append((g, first % nq, count, began - t0, latencies[-1][1]))
        for q, found in zip(rows, result, strict=False):
            hits.setdefault(str(q), [int(h["id"]) for h in found])
        done += count
        rank_progress.count(count, "queries")  # a database's socket I/O: /proc/<pid>/io does not see it
        if done >= next_report:
            print(f"rank {rank}: {done:,} queries", flush=True)
            next_report = (done // spec["report_count"] + 1) * spec["report_count"]
    seconds = time.perf_counter() - t0
    ended_wall = time.time()
    client.close()
    return VdbRank({"rank": rank, "world_size": size, "hostname": socket.gethostname(), "mpi_processor_name": processor,
                    "pmix_hostname": os.environ.get("PMIX_HOSTNAME"), "pid": os.getpid(),
                    "connect_and_warmup_seconds": connect_s, "start": started_wall, "end": ended_wall,
                    "seconds": seconds, "batches": len(latencies), "queries": done,
                    "qps": done / seconds if seconds > 0 else 0.0, "latencies": latencies, "hits": hits})


def write_worker_csv(path: Path, timings: list[tuple[int, int, int, float, float]]) -> None:
    """A local worker's batch timings, one line per batch."""
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(CSV_HEADER)
        fh.writelines(f"{g},{first},{size},{start_s:.6f},{ms:.6f},1\n" for g, first, size, start_s, ms in timings)


def write_atomic(path: Path, data: dict[str, Any]) -> None:
    """A reader never sees half a file: a rank killed mid-write leaves no rank file at all."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    os.replace(tmp, path)


def main(spec_path: str) -> int:  # pragma: no cover - runs under mpirun
    from mpi4py import MPI

    from mlpstorage_py.launch.rank_guard import abort_job, report_started

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    report_started(rank)
    try:
        spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
        timings: list[tuple[int, int, int, float, float]] | None = [] if spec.get("worker_csv") else None
        record = run_rank(spec, rank, size, comm.Barrier, MPI.Get_processor_name(), timings)
        if timings is not None:
            write_worker_csv(Path(spec["leaf"]) / WORKER_CSV.format(rank=rank), timings)
        write_atomic(rank_path(Path(spec.get("rank_dir") or spec["leaf"]), rank), record.to_json())
        libraries.report(Path(spec["leaf"]) / libraries.DIR_NAME, rank)
    except BaseException as exc:  # one line for the parent, then stop the whole job
        abort_job(comm, rank, exc)
    return 0


if __name__ == "__main__":
    from mlpstorage_py.launch.rank_guard import die_with_parent

    die_with_parent(_PARENT)
    sys.exit(main(sys.argv[1]))
