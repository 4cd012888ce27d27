"""Deterministic vectors and query sets.

Vector i of a dataset is a function of (seed, distribution, dimension, i) only: rows are made in
fixed blocks of BLOCK rows, each from its own counter-based stream, so any range can be made on
its own and the chunk size never changes the data. The query set comes from a separate stream of
the same seed, so queries are never copies of dataset rows. Every row is L2-normalised.
"""

from __future__ import annotations

import numpy as np

BLOCK = 1000  # part of the dataset definition: changing it changes every dataset
DATA_STREAM = 0
QUERY_STREAM = 1
ZIPF_A = 1.5
ZIPF_CAP = 1000.0


def _rng(seed: int, *key: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(int(seed) & (2**63 - 1), spawn_key=key)))


def _draw(rng: np.random.Generator, distribution: str, rows: int, dim: int) -> np.ndarray:
    if distribution == "uniform":
        out = rng.random((rows, dim), dtype=np.float32)
    elif distribution == "normal":
        out = rng.standard_normal((rows, dim), dtype=np.float32)
    elif distribution == "zipfian":
        # uniform magnitudes scaled by a heavy-tailed (Zipf) factor per coordinate: a few large
        # coordinates dominate each row, so rows crowd around a few directions
        scale = np.minimum(rng.zipf(ZIPF_A, size=(rows, dim)), ZIPF_CAP).astype(np.float32)
        out = rng.random((rows, dim), dtype=np.float32) * scale
    else:
        raise ValueError(f"unknown distribution {distribution!r}")
    return normalise(out)


def normalise(rows: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (rows / norms).astype(np.float32, copy=False)


def vectors(seed: int, distribution: str, dim: int, start: int, stop: int) -> np.ndarray:
    """Rows [start, stop) of the dataset, float32, shape (stop - start, dim)."""
    if stop <= start:
        return np.empty((0, dim), dtype=np.float32)
    parts = []
    first, last = start // BLOCK, (stop - 1) // BLOCK
    for block in range(first, last + 1):
        rows = _draw(_rng(seed, DATA_STREAM, block), distribution, BLOCK, dim)
        lo = max(start - block * BLOCK, 0)
        hi = min(stop - block * BLOCK, BLOCK)
        parts.append(rows[lo:hi])
    return np.ascontiguousarray(np.concatenate(parts))


def queries(seed: int, distribution: str, dim: int, count: int) -> np.ndarray:
    """The fixed query set: `count` rows from the seed's query stream."""
    return _draw(_rng(seed, QUERY_STREAM), distribution, count, dim)
