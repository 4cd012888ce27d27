"""Exact nearest neighbours of the query set over every vector in the collection (Rules 5.3.5).

The vectors are read back from the collection itself (backend.Milvus.read_back) and scored
with numpy, chunk by chunk, keeping a running top-k per query; nothing of this is inside the
timed query loop. Coverage is the number of distinct vectors scored over the number of rows
the collection holds; anything below 1.0, or an id met twice, fails the run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from mlpstorage_py.vectordb.generate import normalise


def scores(queries: np.ndarray, rows: np.ndarray, metric: str) -> np.ndarray:
    """Smaller is nearer, for every (query, row) pair."""
    if metric == "L2":
        return (rows * rows).sum(axis=1)[None, :] - 2.0 * (queries @ rows.T)  # + |q|^2, constant per query
    if metric == "IP":
        return -(queries @ rows.T)
    if metric == "COSINE":
        return -(normalise(queries) @ normalise(rows).T)
    raise ValueError(f"unknown metric {metric!r}")


class TopK:
    """Running exact top-k per query over chunks of (ids, vectors)."""

    def __init__(self, queries: np.ndarray, k: int, metric: str) -> None:
        self.queries = np.ascontiguousarray(queries, dtype=np.float32)
        self.k, self.metric = int(k), metric
        n = len(self.queries)
        self.best_d = np.full((n, 0), np.inf, dtype=np.float64)
        self.best_i = np.full((n, 0), -1, dtype=np.int64)

    def add(self, ids: np.ndarray, rows: np.ndarray) -> None:
        if len(ids) == 0:
            return
        d = scores(self.queries, rows, self.metric).astype(np.float64)
        cand_d = np.concatenate([self.best_d, d], axis=1)
        cand_i = np.concatenate([self.best_i, np.broadcast_to(ids, d.shape)], axis=1)
        if cand_d.shape[1] > self.k:
            keep = np.argpartition(cand_d, self.k - 1, axis=1)[:, : self.k]
            cand_d = np.take_along_axis(cand_d, keep, axis=1)
            cand_i = np.take_along_axis(cand_i, keep, axis=1)
        self.best_d, self.best_i = cand_d, cand_i

    def result(self) -> np.ndarray:
        """(num_queries, k) ids, nearest first (ties broken by id)."""
        order = np.lexsort((self.best_i, self.best_d), axis=1)
        return np.take_along_axis(self.best_i, order, axis=1)


def compute(chunks: Iterable[tuple[np.ndarray, np.ndarray]], queries: np.ndarray, *, k: int, metric: str,
            rows_in_collection: int, source: str, progress: Callable[[str], None]) -> tuple[np.ndarray, dict[str, Any]]:
    """Score every (ids, vectors) chunk the collection yields and describe the coverage."""
    started = time.time()
    top = TopK(queries, k, metric)
    seen, said = 0, time.monotonic()
    id_parts = []
    for ids, rows in chunks:
        top.add(ids, rows)
        id_parts.append(np.asarray(ids, dtype=np.int64))
        seen += len(ids)
        if time.monotonic() - said >= 5.0:
            progress(f"ground truth: {seen:,} of {rows_in_collection:,} vectors scored")
            said = time.monotonic()
    distinct = int(len(np.unique(np.concatenate(id_parts)))) if id_parts else 0
    duplicates = seen - distinct
    coverage = distinct / rows_in_collection if rows_in_collection else 0.0
    record = {
        "method": f"exact brute force (numpy) over every vector read back from the collection ({source})",
        "metric_type": metric,
        "k": int(k),
        "num_queries": int(len(queries)),
        "vectors_covered": int(distinct),
        "vectors_in_collection": int(rows_in_collection),
        "duplicate_ids": int(duplicates),
        "coverage": coverage,
        "seconds": time.time() - started,
    }
    return top.result(), record


def recall(returned: dict[int, list[int]], truth: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-query recall@k = |returned top-k ∩ true top-k| / k for the queries that were issued;
    returns (query indices, recalls)."""
    indices = np.array(sorted(returned), dtype=np.int64)
    values = np.array([len(set(returned[int(q)][:k]) & set(truth[q, :k].tolist())) / k for q in indices],
                      dtype=np.float64)
    return indices, values
