"""Our vector database run against a direct pymilvus loop over the same collection and queries,
measured in the same session. Prints queries/s and recall@k of both and the ratio ours/direct
(1.0 = no harness overhead), plus our load throughput and a direct insert loop's.

    .venv/bin/python bench/vectordb_overhead.py [--backend lite|server] [--num-vectors 50000]
        [--dimension 128] [--queries 2000] [--batch-size 10] [--search-ef 128] [--processes 1]

lite: the embedded Milvus Lite under a temporary --storage-root. server: a Milvus 2.3.5
standalone (PyPI `milvus`) started on 127.0.0.1 for the bench.

Ours: `mlpstorage open vectordb HNSW datagen` then `... run` (query_count mode) as subprocesses;
figures from their summary.json (throughput = queries / wall time of the timed loop). Direct:
the same number of client processes (spawned, like our workers) each running a bare
`MilvusClient.search` loop over the same query set, batches and search parameters against the
same collection; recall from numpy brute force over the regenerated vectors. Direct load: the
same vectors inserted with `MilvusClient.insert` in the same batches into a second collection,
then flushed (no index).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def mlps(args: list[str], env: dict[str, str]) -> None:
    proc = subprocess.run([str(BIN / "mlpstorage"), *args], env=env, cwd=REPO, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.exit(f"mlpstorage {' '.join(args[:4])} exited {proc.returncode}: {proc.stderr.strip()[-1500:]}")


def newest_summary(results: Path, command: str) -> dict:
    leaves = sorted(results.glob(f"open/Org/results/bench/vector_database/milvus/HNSW/{command}/*/summary.json"))
    return json.loads(leaves[-1].read_text())


def direct_worker(uri: str, collection: str, queries: np.ndarray, worker: int, workers: int, total: int, batch: int,
                  params: dict, k: int, out) -> None:
    from pymilvus import MilvusClient

    client = MilvusClient(uri=uri, timeout=120)
    client.search(collection, data=queries[:batch], limit=k, search_params=params)  # warm-up, like ours
    hits, done = {}, 0
    t0 = time.perf_counter()
    for g in range(worker, -(-total // batch), workers):
        rows = [(g * batch + i) % len(queries) for i in range(min(batch, total - g * batch))]
        res = client.search(collection, data=queries[rows], limit=k, search_params=params)
        for q, found in zip(rows, res, strict=False):
            hits.setdefault(q, [h["id"] for h in found])
        done += len(rows)
    out.put((done, time.perf_counter() - t0, hits))
    client.close()


def direct_queries(uri: str, collection: str, queries: np.ndarray, processes: int, total: int, batch: int,
                   params: dict, k: int) -> tuple[float, dict]:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=direct_worker, args=(uri, collection, queries, w, processes, total, batch, params, k, out))
             for w in range(processes)]
    for p in procs:
        p.start()
    results = [out.get(timeout=1800) for _ in procs]
    for p in procs:
        p.join()
    hits: dict = {}
    for _, _, h in results:
        hits.update(h)
    return sum(r[0] for r in results) / max(r[1] for r in results), hits


def exact(vectors: np.ndarray, queries: np.ndarray, metric: str, k: int) -> np.ndarray:
    from mlpstorage_py.vectordb.groundtruth import scores

    return np.argsort(scores(queries, vectors, metric), axis=1)[:, :k]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=["lite", "server"], default="lite")
    ap.add_argument("--num-vectors", type=int, default=50_000)
    ap.add_argument("--dimension", type=int, default=128)
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument("--batch-size", type=int, default=10)
    ap.add_argument("--search-ef", type=int, default=128)
    ap.add_argument("--processes", type=int, default=1)
    ap.add_argument("--insert-batch", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3, help="alternating rounds of ours and direct (default 3)")
    ap.add_argument("--dir", help="work directory (default: a temporary one, removed afterwards)")
    opts = ap.parse_args()

    from pymilvus import DataType, MilvusClient

    from mlpstorage_py.vectordb import generate

    work = Path(opts.dir or tempfile.mkdtemp(prefix="vdb-bench-"))
    results, store = work / "results", work / "store"
    store.mkdir(parents=True, exist_ok=True)
    env = os.environ | {"XDG_CONFIG_HOME": str(work / "xdg"), "MLPSTORAGE_SYSTEMNAME": "bench"}
    server = None
    try:
        subprocess.run([str(BIN / "mlpstorage"), "init", "Org", str(results)], check=True, env=env,
                       stdout=subprocess.DEVNULL)
        target = ["--storage-root", str(store)]
        if opts.backend == "server":
            from milvus import MilvusServer

            server = MilvusServer()
            server.set_base_dir(str(work / "milvus-server"))
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                server.listen_port = sock.getsockname()[1]
            server.start()
            target += ["--host", "127.0.0.1", "--port", str(server.listen_port)]
        n, d, k, metric = opts.num_vectors, opts.dimension, 10, "L2"
        scale = ["--num-vectors", str(n), "--dimension", str(d)]
        common = [*scale, *target, "-rd", str(results)]
        mlps(["open", "vectordb", "HNSW", "datagen", *common, "--metric-type", metric, "--max-degree", "16",
              "--ef-construction", "100", "--batch-size", str(opts.insert_batch)], env)
        load = newest_summary(results, "datagen")
        uri = str(store / "milvus_lite.db") if server is None else f"http://127.0.0.1:{server.listen_port}"
        collection, seed, dist = load["collection_name"], load["seed"], load["distribution"]
        queries = generate.queries(seed, dist, d, opts.queries)
        truth = exact(generate.vectors(seed, dist, d, 0, n), queries, metric, k)
        params = {"metric_type": metric, "params": {"ef": opts.search_ef}}
        rounds = []
        for _ in range(opts.repeat):  # alternate, so drift (caches, a busy host) hits both alike
            mlps(["open", "vectordb", "HNSW", "run", *common, "--queries", str(opts.queries), "--num-query-vectors",
                  str(opts.queries), "--batch-size", str(opts.batch_size), "--num-query-processes", str(opts.processes),
                  "--search-ef", str(opts.search_ef)], env)
            ours = newest_summary(results, "run")
            client = MilvusClient(uri, timeout=120)
            if server is None:
                from milvus_lite.server_manager import server_manager_instance

                worker_uri = server_manager_instance.start_and_get_uri(uri)
            else:
                worker_uri = uri
            client.load_collection(collection)
            qps, hits = direct_queries(worker_uri, collection, queries, opts.processes, opts.queries, opts.batch_size,
                                       params, k)
            direct_recall = float(np.mean([len(set(hits[q]) & set(truth[q].tolist())) / k for q in hits]))
            rounds.append((ours, qps, direct_recall))
            client.close()
            if server is None:
                server_manager_instance.release_server(uri)  # our next run opens the database itself
        client = MilvusClient(uri, timeout=120)

        schema = client.create_schema(auto_id=False)
        schema.add_field("id", DataType.INT64, is_primary=True)
        schema.add_field("vector", DataType.FLOAT_VECTOR, dim=d)
        if client.has_collection("bench_direct_load"):
            client.drop_collection("bench_direct_load")
        client.create_collection("bench_direct_load", schema=schema)
        t0 = time.perf_counter()
        for lo in range(0, n, 10_000):
            rows = generate.vectors(seed, dist, d, lo, min(lo + 10_000, n))
            for b in range(0, len(rows), opts.insert_batch):
                chunk = rows[b:b + opts.insert_batch]
                client.insert("bench_direct_load", [{"id": lo + b + i, "vector": v} for i, v in enumerate(chunk)])
        client.flush("bench_direct_load")
        direct_load = n / (time.perf_counter() - t0)
        client.drop_collection("bench_direct_load")
        client.close()
        if server is None:
            server_manager_instance.release_server(uri)

        print(f"backend {opts.backend}: {load['database']['version']}, {n:,} x {d} vectors, HNSW M16 efC100, L2; "
              f"{opts.queries:,} queries, batch {opts.batch_size}, ef {opts.search_ef}, {opts.processes} process(es)")
        for i, (ours, qps, rec) in enumerate(rounds, 1):
            print(f"  round {i}: queries/s ours {ours['throughput_qps']:9,.1f}  direct {qps:9,.1f}  ratio "
                  f"{ours['throughput_qps'] / qps:.3f};  recall@{k} ours {ours['recall']:.4f}  direct {rec:.4f}")
        ratios = sorted(o["throughput_qps"] / q for o, q, _ in rounds)
        print(f"  median ratio ours/direct {ratios[len(ratios) // 2]:.3f} (1.0 = no harness overhead); p99 latency ours "
              f"{rounds[-1][0]['p99_latency_ms']:.2f} ms/query; ground truth {rounds[-1][0]['ground_truth']['seconds']:.1f} s "
              "outside the timed loop")
        print(f"  load: ours {load['load']['vectors_per_second']:,.0f} vectors/s (generate+insert+flush), direct "
              f"{direct_load:,.0f} vectors/s (insert+flush); index build {load['index_build']['seconds']:.1f} s")
    finally:
        if server is not None:
            server.stop()
        if not opts.dir:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
