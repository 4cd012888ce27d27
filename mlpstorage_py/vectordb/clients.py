"""Query clients as MPI ranks over client hosts (`vectordb run --hosts`): reading back every
rank's result file and turning them into one measurement.

Aggregation (ManPage, vectordb):
  window_s      = max over ranks of the rank's timed seconds (each from the start barrier to its
                  last answered batch, on its own monotonic clock, so no host clocks are compared)
  throughput    = sum over ranks of queries_r / window_s  (= all queries / window_s)
  latency       = percentiles of the pooled per-query latencies of all ranks (batch ms / batch
                  size, once per query), never an average of per-rank percentiles
  recall@k      = mean over every (rank, query index) result list the ranks kept, against the
                  exact ground truth
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mlpstorage_py.errors import BenchmarkFailed
from mlpstorage_py.results.vdb import VdbRank
from mlpstorage_py.vectordb.rank import rank_path

RANK_KEYS = ("rank", "world_size", "hostname", "seconds", "queries", "batches", "latencies", "hits")


def read_ranks(leaf: Path, world_size: int) -> list[dict[str, Any]]:
    """Every rank's file must exist and parse with the expected shape; the launcher's exit code
    alone proves nothing (a rank can exit 0 having written nothing)."""
    docs, problems = [], []
    for rank in range(world_size):
        path = rank_path(leaf, rank)
        if not path.is_file():
            problems.append(f"rank {rank}: no {path.name}")
            continue
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            problems.append(f"rank {rank}: {path.name} does not parse ({exc})")
            continue
        record = VdbRank.from_json(doc) if isinstance(doc, dict) else None
        if not isinstance(record, VdbRank):
            problems.append(f"rank {rank}: " + (record.text() if record else f"{path.name} is not a JSON object"))
            continue
        doc = record.data
        missing = [k for k in RANK_KEYS if k not in doc]
        if missing:
            problems.append(f"rank {rank}: {path.name} lacks {missing}")
        elif doc["rank"] != rank or doc["world_size"] != world_size:
            problems.append(f"rank {rank}: {path.name} says rank {doc['rank']} of {doc['world_size']}")
        elif len(doc["latencies"]) != doc["batches"] or sum(int(b[0]) for b in doc["latencies"]) != doc["queries"]:
            problems.append(f"rank {rank}: {path.name} counts {doc['queries']} queries in {doc['batches']} batches "
                            f"but lists {len(doc['latencies'])} batch latencies")
        else:
            docs.append(doc)
    if problems:
        raise BenchmarkFailed(f"{len(problems)} of {world_size} query rank(s) left no usable result: "
                              + "; ".join(problems[:8]))
    return docs


def aggregate(docs: list[dict[str, Any]], truth: Any, k: int) -> dict[str, Any]:
    """One measurement from all ranks: see the module docstring for the formulas."""
    import numpy as np

    from mlpstorage_py.vectordb.groundtruth import recall
    from mlpstorage_py.vectordb.query import latency_stats, recall_stats

    window = max(float(d["seconds"]) for d in docs)
    total = sum(int(d["queries"]) for d in docs)
    rows = [b for d in docs for b in d["latencies"]]
    batches = np.asarray(rows, dtype=np.float64).reshape(-1, 2)
    values = []
    for d in docs:
        hits = {int(q): ids for q, ids in d["hits"].items()}
        if hits:
            values.append(recall(hits, truth, k)[1])
    recalls = np.concatenate(values) if values else np.empty(0)
    rstats = recall_stats(recalls, k)
    ranks = [{"rank": d["rank"], "hostname": d["hostname"], "queries": d["queries"], "batches": d["batches"],
              "seconds": d["seconds"], "qps_own_window": d["queries"] / d["seconds"] if d["seconds"] > 0 else 0.0,
              "qps_common_window": d["queries"] / window if window > 0 else 0.0,
              "queries_recall_evaluated": len(d["hits"]),
              **{key: d.get(key) for key in ("mpi_processor_name", "pmix_hostname", "pid", "start", "end",
                                             "connect_and_warmup_seconds")}} for d in docs]
    hosts: dict[str, list[int]] = {}
    for d in docs:
        hosts.setdefault(d["hostname"], []).append(d["rank"])
    return {
        "throughput_qps": sum(r["qps_common_window"] for r in ranks),
        "total_queries": total, "query_count": total, "total_time_seconds": window,
        "batch_count": int(len(batches)), "successful_batches": int(len(batches)), "failed_batches": 0,
        **(latency_stats(batches) if len(batches) else {}),
        "recall": rstats.get("mean_recall"), "recall_stats": rstats,
        "ranks": ranks, "hosts": hosts,
        "merged_hits": _first_hits(docs),
    }


def _first_hits(docs: list[dict[str, Any]]) -> dict[int, list[int]]:
    """recall_hits.jsonl keeps one result list per query index, the lowest rank's."""
    merged: dict[int, list[int]] = {}
    for d in sorted(docs, key=lambda d: d["rank"]):
        for q, ids in d["hits"].items():
            merged.setdefault(int(q), ids)
    return merged
