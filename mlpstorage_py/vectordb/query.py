"""Query worker processes and their orchestration.

Each worker is a spawned process with its own gRPC connection (to the server, or to the Milvus
Lite server this process hosts). Workers connect and warm up with one untimed batch, report
ready, and start together. Batch g (global numbering) holds queries g*B .. g*B+B-1 of the fixed
query set, cycling; worker w issues batches w, w+P, w+2P, ... so the same seed and settings
issue the same queries in the same batches every time. A worker times every search call
(perf_counter around the call), keeps the first result list of each query index for recall,
and writes its batch timings to the leaf, then records the libraries it imported
(results/libraries.py).
"""

from __future__ import annotations

import json
import queue as queue_mod
import time
from pathlib import Path
from typing import Any, Callable

from mlpstorage_py.errors import BenchmarkFailed, TimeoutExpired
from mlpstorage_py.results import libraries

CSV_HEADER = "batch,first_query,batch_size,start_s,latency_ms,ok\n"


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


def worker_main(spec: dict[str, Any], messages: Any, start: Any) -> None:  # pragma: no cover - runs in a child
    """Body of one query process (spawned): everything it learns goes back on `messages`."""
    w = spec["worker"]
    try:
        import numpy as np
        from pymilvus import MilvusClient

        queries = np.load(spec["queries_path"])
        nq = len(queries)
        client = MilvusClient(uri=spec["uri"], timeout=spec["timeout"])
        search_params = {"metric_type": spec["metric_type"], "params": spec["search_params"]}

        def search(first: int, size: int) -> list:
            rows = [(first + i) % nq for i in range(size)]
            return client.search(spec["collection"], data=queries[rows], limit=spec["limit"],
                                 search_params=search_params, anns_field=spec["anns_field"],
                                 timeout=spec["timeout"]), rows

        search(0, min(spec["batch_size"], nq))  # untimed warm-up: connection and first call
        messages.put(("ready", w, None))
        if not start.wait(spec["start_timeout"]):
            messages.put(("error", w, "no start signal"))
            return
        hits: dict[int, list[int]] = {}
        timings: list[tuple[int, int, int, float, float]] = []
        t0 = time.perf_counter()
        started_wall = time.time()
        deadline = t0 + spec["runtime"] if spec["runtime"] else None
        done_queries, next_report = 0, spec["report_count"]
        for g, size in batches_for(w, spec["workers"], spec["batch_size"], spec["total_queries"]):
            if deadline is not None and time.perf_counter() >= deadline:
                break
            first = g * spec["batch_size"]
            began = time.perf_counter()
            result, rows = search(first, size)
            elapsed = time.perf_counter() - began
            timings.append((g, first % nq, size, began - t0, elapsed * 1000.0))
            for q, found in zip(rows, result):
                if q not in hits:
                    hits[q] = [int(h["id"]) for h in found]
            done_queries += size
            if done_queries >= next_report:
                messages.put(("progress", w, done_queries))
                next_report = (done_queries // spec["report_count"] + 1) * spec["report_count"]
        ended_wall = time.time()
        elapsed_total = time.perf_counter() - t0
        out = Path(spec["output_csv"])
        with open(out, "w", encoding="utf-8") as fh:
            fh.write(CSV_HEADER)
            fh.writelines(f"{g},{first},{size},{start_s:.6f},{ms:.6f},1\n" for g, first, size, start_s, ms in timings)
        np.save(spec["latency_path"], np.array([(size, ms) for _, _, size, _, ms in timings], dtype=np.float64).reshape(-1, 2))
        client.close()
        libraries.report(spec["libraries_dir"], w)
        messages.put(("done", w, {"batches": len(timings), "queries": done_queries, "start": started_wall,
                                  "end": ended_wall, "seconds": elapsed_total, "hits": hits}))
    except BaseException as exc:  # noqa: BLE001 - report, never hang the parent
        text = " ".join(str(exc).split())[:400]
        try:
            messages.put(("error", w, f"{type(exc).__name__}: {text}"))
        except Exception:  # noqa: BLE001
            pass


def run_workers(specs: list[dict[str, Any]], *, start_timeout: float, stall_timeout: float,
                progress: Callable[[str], None]) -> dict[str, Any]:
    """Start the workers, release them together, and gather what they report. Fails (and stops
    them) on any worker error, a worker that dies, or no word from any worker for stall_timeout."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    messages = ctx.Queue()
    start = ctx.Event()
    procs = []
    for spec in specs:
        spec = dict(spec, start_timeout=start_timeout)
        proc = ctx.Process(target=worker_main, args=(spec, messages, start), name=f"vdb-query-{spec['worker']}", daemon=True)
        proc.start()
        procs.append(proc)
    done: dict[int, dict[str, Any]] = {}
    counts = [0] * len(specs)
    try:
        _wait_ready(procs, messages, start_timeout)
        started = time.time()
        start.set()
        last_word, said = time.monotonic(), time.monotonic()
        while len(done) < len(procs):
            try:
                kind, w, payload = messages.get(timeout=1.0)
            except queue_mod.Empty:
                dead = [p.name for i, p in enumerate(procs) if i not in done and p.exitcode not in (None,)]
                if dead:
                    raise BenchmarkFailed(f"query worker(s) {', '.join(dead)} exited without a result")
                if time.monotonic() - last_word > stall_timeout:
                    raise TimeoutExpired(f"no query worker reported anything for {stall_timeout:.0f} s")
                continue
            last_word = time.monotonic()
            if kind == "error":
                raise BenchmarkFailed(f"query worker {w} failed: {payload}")
            if kind == "progress":
                counts[w] = payload
                if time.monotonic() - said >= 1.0:
                    total = sum(counts)
                    progress(f"queries: {total:,} issued, {total / max(time.time() - started, 1e-9):,.1f} queries/s")
                    said = time.monotonic()
            elif kind == "done":
                done[w] = payload
                counts[w] = payload["queries"]
        for proc in procs:
            proc.join(timeout=30)
        return {"workers": [done[w] for w in sorted(done)], "released": started}
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=5)
        messages.close()


def _wait_ready(procs: list[Any], messages: Any, timeout: float) -> None:
    ready: set[int] = set()
    deadline = time.monotonic() + timeout
    while len(ready) < len(procs):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutExpired(f"{len(procs) - len(ready)} query worker(s) not ready after {timeout:.0f} s")
        try:
            kind, w, payload = messages.get(timeout=min(remaining, 1.0))
        except queue_mod.Empty:
            dead = [p.name for p in procs if p.exitcode is not None]
            if dead:
                raise BenchmarkFailed(f"query worker(s) {', '.join(dead)} exited while starting") from None
            continue
        if kind == "error":
            raise BenchmarkFailed(f"query worker {w} failed while starting: {payload}")
        if kind == "ready":
            ready.add(w)


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
