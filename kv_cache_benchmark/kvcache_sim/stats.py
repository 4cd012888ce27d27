"""Thread-safe latency series and counters, reduced to percentiles once at the end."""

from __future__ import annotations

import threading

# Percentile keys of every latency block: name -> percentile.
PERCENTILES = {"p50": 50.0, "p95": 95.0, "p99": 99.0, "p999": 99.9, "p9999": 99.99}


class Series:
    """Samples in seconds; list.append is atomic under the GIL, so recording takes no lock."""

    def __init__(self) -> None:
        self.samples: list[float] = []

    def add(self, seconds: float) -> None:
        self.samples.append(seconds)

    def __len__(self) -> int:
        return len(self.samples)

    def total(self) -> float:
        return float(sum(self.samples))

    def clear(self) -> None:
        self.samples = []

    def summary_ms(self) -> dict[str, float]:
        """{mean, p50, p95, p99, p999, p9999} in milliseconds; zeros when empty."""
        return summarize_ms(self.samples)


def summarize_ms(samples: list[float]) -> dict[str, float]:
    import numpy as np

    data = np.asarray(samples, dtype=float)
    if not data.size:
        return {"mean": 0.0, **{k: 0.0 for k in PERCENTILES}}
    values = np.percentile(data, list(PERCENTILES.values())) * 1000.0
    return {"mean": float(data.mean() * 1000.0), **{k: float(v) for k, v in zip(PERCENTILES, values, strict=True)}}


class Counters:
    """Named integer/float counters behind one lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.values: dict[str, float] = {}

    def add(self, name: str, amount: float = 1) -> None:
        with self._lock:
            self.values[name] = self.values.get(name, 0) + amount

    def get(self, name: str) -> float:
        return self.values.get(name, 0)

    def clear(self) -> None:
        with self._lock:
            self.values = {}
