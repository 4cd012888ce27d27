"""Vector database benchmark: the pieces (generation, estimates, exact top-k, statistics,
deadlines) and the CLI end to end on the embedded Milvus Lite."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import all_leaves

from mlpstorage_py import progress

HNSW = "HNSW"
SCALE = ["--num-vectors", "20000", "--dimension", "128"]


def vdb_leaves(results: Path, command: str, index: str = HNSW, mode: str = "open") -> list[Path]:
    parent = results / mode / "Org" / "results" / "sys1" / "vector_database" / "milvus" / index / command
    return sorted(p for p in parent.iterdir() if p.is_dir()) if parent.is_dir() else []


def summary(leaf: Path) -> dict:
    return json.loads((leaf / "summary.json").read_text(encoding="utf-8"))


def metadata(leaf: Path) -> dict:
    files = list(leaf.glob("vector_database_*_metadata.json"))
    assert len(files) == 1, files  # LEAF-01
    return json.loads(files[0].read_text(encoding="utf-8"))


# -- pieces ------------------------------------------------------------------------------------
def test_vectors_are_deterministic_and_independent_of_chunking():
    from mlpstorage_py.vectordb import generate

    for dist in ("uniform", "normal", "zipfian"):
        whole = generate.vectors(7, dist, 16, 0, 2500)
        parts = np.concatenate([generate.vectors(7, dist, 16, a, min(a + 333, 2500)) for a in range(0, 2500, 333)])
        assert whole.dtype == np.float32 and whole.shape == (2500, 16)
        assert np.array_equal(whole, parts)
        assert np.allclose(np.linalg.norm(whole, axis=1), 1.0, atol=1e-5)
        assert not np.array_equal(whole, generate.vectors(8, dist, 16, 0, 2500))
    q = generate.queries(7, "uniform", 16, 50)
    assert np.array_equal(q, generate.queries(7, "uniform", 16, 50))
    assert not np.isin(q[:, 0], generate.vectors(7, "uniform", 16, 0, 2500)[:, 0]).any()


@pytest.mark.parametrize("metric", ["L2", "IP", "COSINE"])
def test_running_topk_equals_a_full_sort(metric):
    from mlpstorage_py.vectordb.groundtruth import TopK, scores

    rng = np.random.default_rng(0)
    data = rng.standard_normal((3000, 24)).astype(np.float32)
    queries = rng.standard_normal((40, 24)).astype(np.float32)
    top = TopK(queries, 10, metric)
    for lo in range(0, 3000, 700):
        top.add(np.arange(lo, min(lo + 700, 3000)), data[lo:lo + 700])
    full = np.argsort(scores(queries, data, metric), axis=1, kind="stable")[:, :10]
    assert np.array_equal(top.result(), full)


def test_recall_and_latency_statistics():
    from mlpstorage_py.vectordb.groundtruth import recall
    from mlpstorage_py.vectordb.query import batches_for, latency_stats, recall_stats

    truth = np.array([[1, 2, 3, 4], [5, 6, 7, 8]])
    idx, values = recall({0: [1, 2, 9, 9], 1: [8, 7, 6, 5]}, truth, 4)
    assert idx.tolist() == [0, 1] and values.tolist() == [0.5, 1.0]
    assert recall_stats(values, 4)["mean_recall"] == 0.75
    stats = latency_stats(np.array([[2, 10.0], [1, 4.0]]))  # a 2-query batch of 10 ms, a 1-query batch of 4 ms
    assert stats["mean_latency_ms"] == pytest.approx((5 + 5 + 4) / 3)
    assert stats["max_batch_time_ms"] == 10.0 and stats["min_latency_ms"] == 4.0
    assert list(batches_for(1, 2, 3, 10)) == [(1, 3), (3, 1)]  # queries 3-5 and 9
    assert sorted(g for w in range(3) for g, _ in batches_for(w, 3, 4, 40)) == list(range(10))


def test_datasize_estimates_per_family():
    from mlpstorage_py.vectordb.families import datasize

    size = datasize("DISKANN", 1_000_000, 1536, 2, {"max_degree": 64, "search_list_size": 200})
    assert size["raw_vector_bytes"] == 1_000_000 * 1536 * 4
    assert size["row_bytes"] == 1_000_000 * (1536 * 4 + 8)
    assert size["total_bytes"] == size["row_bytes"] + size["index_bytes"]
    assert size["total_bytes_per_shard"] * 2 >= size["total_bytes"]
    fams = size["families"]
    assert fams["IVF_SQ8"]["index_bytes"] < fams["FLAT"]["index_bytes"] < fams["HNSW"]["index_bytes"]
    assert fams["FLAT"]["index_bytes"] == size["raw_vector_bytes"]


def test_every_database_call_has_a_deadline():
    from mlpstorage_py.errors import BenchmarkFailed, TimeoutExpired
    from mlpstorage_py.vectordb import backend

    db = backend.Milvus(collection="c", host="127.0.0.1", port=1)
    release = threading.Event()
    saved = backend.GRACE_S
    backend.GRACE_S = 0.1
    try:
        t = time.monotonic()
        with pytest.raises(TimeoutExpired, match="did not answer within"):
            db.call("create_index", lambda timeout: release.wait(30), timeout=0.3)
        assert time.monotonic() - t < 5
    finally:
        release.set()
        backend.GRACE_S = saved
    with pytest.raises(BenchmarkFailed, match="flush failed .*ValueError: boom"):
        db.call("flush", lambda timeout: (_ for _ in ()).throw(ValueError("boom")))


def test_a_stalled_index_build_fails_with_the_server_state():
    from mlpstorage_py.errors import TimeoutExpired
    from mlpstorage_py.vectordb import backend

    class Stuck(backend.Milvus):
        def describe_index(self):
            return {"index_type": "DISKANN", "state": "InProgress", "indexed_rows": 0, "total_rows": 5000,
                    "pending_index_rows": 5000}

    db = Stuck(collection="c", host="127.0.0.1", port=1)
    said = []
    with pytest.raises(TimeoutExpired, match="no progress for 1 s.*state=InProgress.*pending_index_rows=5000"):
        db.wait_index(stall_s=0.6, poll_s=0.1, progress=said.append)


# -- CLI ---------------------------------------------------------------------------------------
def test_diskann_and_aisaq_on_milvus_lite_fail_fast(cli, results, tmp_path):
    for index, version in (("DISKANN", "2.4+"), ("AISAQ", "2.6+")):
        t = time.monotonic()
        res = cli("open", "vectordb", index, "datagen", *SCALE, "--storage-root", tmp_path, "-rd", results, "-sn", "sys1")
        assert res.rc == 5, res.err
        assert f"{index} is not implemented by Milvus Lite" in res.err and f"Milvus {version} server" in res.err
        assert "--host" in res.err and "No other index is substituted" in res.err
        assert time.monotonic() - t < 10
    assert all_leaves(results) == []
    assert not (tmp_path / "milvus_lite.db").exists()


def test_closed_refuses_open_only_flags_and_datasize_writes_a_leaf(cli, results):
    res = cli("closed", "vectordb", HNSW, "run", "--seed", "7", "-rd", results, "-sn", "sys1")
    assert res.rc == 2 and "--seed is not allowed in the closed division" in res.err
    res = cli("closed", "vectordb", "IVF_FLAT", "datasize", "-rd", results, "-sn", "sys1")
    assert res.rc == 2  # OPEN-only index family
    res = cli("closed", "vectordb", "DISKANN", "datasize", "--num-vectors", "1000000", "--dimension", "1536",
              "-rd", results, "-sn", "sys1")
    assert res.rc == 0, res.err
    assert "raw vectors      : 6,144,000,000 B" in res.out and "estimated total" in res.out
    [leaf] = vdb_leaves(results, "datasize", "DISKANN", "closed")
    size = summary(leaf)
    assert size["raw_vector_bytes"] == 6_144_000_000 and size["index_type"] == "DISKANN"
    meta = metadata(leaf)
    assert meta["parameters"]["dataset"]["total_disk_bytes"] == size["total_bytes"]
    assert meta["exit_status"] == 0


def test_usage_errors(cli, results, tmp_path):
    base = ("open", "vectordb", HNSW, "run", "--storage-root", tmp_path, "-rd", results, "-sn", "sys1")
    assert "below the top-K" in cli(*base, "--search-ef", "5").err
    assert cli(*base, "--dimension", "40000").rc == 2
    assert cli(*base, "--queries", "10", "--runtime", "5").rc == 2  # mutually exclusive
    assert "query_count mode takes --queries" in cli(*base, "--mode", "query_count", "--runtime", "5").err
    assert "differs from the <INDEX>" in cli(*base, "--index-type", "FLAT").err
    assert all_leaves(results) == []


def test_force_is_needed_to_replace_a_collection(cli, results, tmp_path):
    store = tmp_path / "vdb"
    store.mkdir()
    args = ("open", "vectordb", "FLAT", "datagen", "--num-vectors", "2000", "--dimension", "8", "--metric-type", "IP",
            "--storage-root", store, "-rd", results, "-sn", "sys1")
    first = cli(*args)
    assert first.rc == 0, first.err
    again = cli(*args)
    assert again.rc == 9 and "already exists" in again.err and "--force" in again.err
    forced = cli(*args, "--force")
    assert forced.rc == 0, forced.err
    assert "--force: dropping the existing collection" in forced.err
    leaves = vdb_leaves(results, "datagen", "FLAT")
    assert [metadata(leaf)["exit_status"] for leaf in leaves] == [0, 9, 0]
    done = summary(leaves[-1])
    assert done["inserted_vectors"] == 2000 and done["index_type"] == "FLAT" and done["metric_type"] == "IP"
    assert done["served_by"]["served_by_named_index"]


@pytest.mark.heavy
def test_hnsw_on_milvus_lite_end_to_end(cli, results, tmp_path, monkeypatch):
    monkeypatch.setattr(progress, "PLAIN_EVERY_S", 0.0)
    store = tmp_path / "vdb"
    store.mkdir()
    common = ("--storage-root", store, "-rd", results, "-sn", "sys1")
    res = cli("open", "vectordb", HNSW, "datagen", *SCALE, "--metric-type", "L2", "--max-degree", "16",
              "--ef-construction", "100", *common)
    assert res.rc == 0, res.err
    assert "vector load: 20000/20000 vectors (100%)" in res.err and "index build: 20000/20000 rows (100%)" in res.err
    assert res.err.count("(done)") == 2  # each live phase says it ended
    [leaf] = vdb_leaves(results, "datagen")
    load = summary(leaf)
    assert load["inserted_vectors"] == load["num_vectors"] == 20000 and load["dimension"] == 128
    assert load["index_type"] == HNSW and load["metric_type"] == "L2"
    assert load["index_params"] == {"M": 16, "efConstruction": 100}  # what Milvus Lite reports it built with
    assert load["index_build"]["state"] == "Finished" and load["index_build"]["seconds"] > 0
    assert load["compaction"]["state"] == "not requested" and load["load"]["vectors_per_second"] > 0
    served = load["served_by"]
    assert served["rows_served_by_index"] == 20000 and served["rows_brute_force"] == 0 and served["memtable_rows"] == 0
    assert {s["index_class"] for s in served["segments"]} == {"FaissHnswIndex"}
    meta = metadata(leaf)
    assert meta["parameters"]["index"] == {"index_type": HNSW, "metric_type": "L2", "M": 16, "ef_construction": 100}
    provenance = json.loads((leaf / "provenance.json").read_text(encoding="utf-8"))
    assert provenance["dlio"]["version"] == "n/a" and "Milvus Lite" in provenance["dlio"]["source"]
    assert "df vector database data (--storage-root)" in (leaf / "mlpstorage.log").read_text(encoding="utf-8")

    def run(ef: int) -> dict:
        res = cli("open", "vectordb", HNSW, "run", *SCALE, "--queries", "300", "--num-query-vectors", "300",
                  "--batch-size", "25", "--num-query-processes", "2", "--search-ef", str(ef), *common)
        assert res.rc == 0, res.err
        return summary(vdb_leaves(results, "run")[-1])

    low, high, again = run(10), run(1024), run(10)
    assert high["recall"] > 0.95
    assert low["recall"] < 0.5 < high["recall"]
    assert again["recall"] == low["recall"] and again["recall_stats"] == low["recall_stats"]
    for s in (low, high):
        assert s["total_queries"] == s["query_count"] == 300 and s["recall_stats"]["num_queries_evaluated"] == 300
        assert s["throughput_qps"] > 0 and s["total_time_seconds"] > 0
        for key in ("mean_latency_ms", "median_latency_ms", "p95_latency_ms", "p99_latency_ms", "p999_latency_ms"):
            assert s[key] > 0
        assert s["mean_latency_ms"] <= s["p999_latency_ms"] + 1e-9
        assert s["ground_truth"]["coverage"] == 1.0 and s["ground_truth"]["vectors_covered"] == 20000
        assert s["index_type"] == HNSW and s["num_vectors"] == 20000 and s["dimension"] == 128
        assert s["database"]["database"] == "milvus" and s["database"]["backend"] == "milvus-lite"
        assert s["served_by"]["before"]["served_by_named_index"] and s["served_by"]["after"]["served_by_named_index"]
        assert s["batch_count"] == 12 and s["datagen_leaf"].endswith(leaf.name)
    assert low["search_params"] == {"ef": 10} and high["search_params"] == {"ef": 1024}
    run_leaf = vdb_leaves(results, "run")[-1]
    assert len((run_leaf / "vectordb_worker_0.csv").read_text().splitlines()) == 1 + 6
    # the local workers are one job of the launch path (launch/job.py): MPI ranks of vectordb.rank, its logs in the leaf
    assert "mlpstorage_py.vectordb.rank" in metadata(run_leaf)["executed_command"]
    assert "rank 0: " in (run_leaf / "vectordb_workers.stdout.log").read_text()
    (host,) = metadata(run_leaf)["libraries_by_host"]  # the two query workers, as they imported numpy
    assert host["ranks"] == [0, 1] and host["libraries"]["numpy"]["version"] == np.__version__
    assert metadata(run_leaf)["engine_identity"]["name"] == "pymilvus"
    assert json.loads((run_leaf / "result_verdict.json").read_text())["flat_setup"]["coverage"] == 1.0

    # a run whose dimension or index differs from the collection is refused (Rules 5.1.2, 5.2.2)
    name = load["collection_name"]
    res = cli("open", "vectordb", HNSW, "run", "--num-vectors", "20000", "--dimension", "64", "--collection", name,
              "--queries", "10", *common)
    assert res.rc == 9 and "holds 128-dimensional vectors" in res.err and "5.1.2" in res.err
    res = cli("open", "vectordb", "FLAT", "run", *SCALE, "--collection", name, "--queries", "10", *common)
    assert res.rc == 9 and f"indexed with {HNSW}" in res.err
