"""The query stream's partition and the statistics of a query run.

Batch g (global numbering) holds queries g*B .. g*B+B-1 of the fixed query set, cycling; query
client w of P issues batches w, w+P, w+2P, ... so the same seed and settings issue the same
queries in the same batches every time. The clients are MPI ranks (vectordb/rank.py), on this
host by default or over --hosts, launched like every job (launch/job.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def batches_for(worker: int, workers: int, batch: int, total_queries: int | None):
    """(global batch number, size) of a worker's batches; endless when total_queries is None."""
    g = worker
    while True:
        if total_queries is not None:
            first = g * batch
            if first >= total_queries:
                return
            yield g, min(batch, total_queries - first)
        else:
            yield g, batch
        g += workers


# -- statistics --------------------------------------------------------------------------------
PERCENTILES = {"p95": 95.0, "p99": 99.0, "p999": 99.9, "p9999": 99.99}


def latency_stats(batches: Any) -> dict[str, Any]:
    """From rows of (batch size, batch ms): per-query latency is each batch's time over its size,
    counted once per query; batch times are reported as they are."""
    import numpy as np

    sizes = batches[:, 0].astype(np.int64)
    batch_ms = batches[:, 1]
    per_query = np.repeat(batch_ms / sizes, sizes)
    out: dict[str, Any] = {}
    for name, values in (("latency_ms", per_query), ("batch_time_ms", batch_ms)):
        if len(values) == 0:
            continue
        out[f"min_{name}"] = float(values.min())
        out[f"max_{name}"] = float(values.max())
        out[f"mean_{name}"] = float(values.mean())
        out[f"median_{name}"] = float(np.median(values))
        for label, pct in PERCENTILES.items():
            out[f"{label}_{name}"] = float(np.percentile(values, pct))
    return out


def recall_stats(values: Any, k: int) -> dict[str, Any]:
    import numpy as np

    if len(values) == 0:
        return {"k": k, "num_queries_evaluated": 0}
    return {"k": k, "mean_recall": float(values.mean()), "median_recall": float(np.median(values)),
            "min_recall": float(values.min()), "max_recall": float(values.max()),
            "p5_recall": float(np.percentile(values, 5)), "p95_recall": float(np.percentile(values, 95)),
            "p99_recall": float(np.percentile(values, 99)), "num_queries_evaluated": int(len(values))}


def write_hits(path: Path, hits: dict[int, list[int]]) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for q in sorted(hits):
            fh.write(json.dumps({"q": q, "ids": hits[q]}) + "\n")
