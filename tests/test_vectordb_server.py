"""The --host/--port path against a real Milvus standalone server: PyPI `milvus` 2.3.5, started
on 127.0.0.1 for this module (about 10 s); skipped where that package is not installed."""

from __future__ import annotations

import fcntl
import json
import shutil
import socket
import tempfile
from pathlib import Path

import pytest

milvus = pytest.importorskip("milvus", reason="the PyPI `milvus` server package is not installed")

pytestmark = pytest.mark.heavy


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# The package unpacks ~250 MB of binaries (about 9 s) into <base>/bin on every fresh base
# directory; a shared cache under the temp directory makes that once per machine.
BIN_CACHE = Path(tempfile.gettempdir()) / f"mlpstorage-test-milvus-{getattr(milvus, '__version__', 'x')}-bin"


def start_server(base: Path):
    """A Milvus 2.3.5 standalone server in `base` on a free port (its binaries unpacked once per
    machine into BIN_CACHE); skips the test where it cannot start."""
    BIN_CACHE.mkdir(exist_ok=True)
    (base / "bin").symlink_to(BIN_CACHE, target_is_directory=True)
    srv = milvus.MilvusServer()
    srv.set_base_dir(str(base))
    srv.listen_port = free_port()
    with open(BIN_CACHE.parent / f"{BIN_CACHE.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one unpacking at a time
        try:
            srv.start()
        except Exception as exc:  # noqa: BLE001 - a machine that cannot run it
            srv.stop()
            pytest.skip(f"the Milvus server did not start: {exc}")
    return srv


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    base = tmp_path_factory.mktemp("milvus-server")
    srv = start_server(base)
    yield srv
    srv.stop()
    shutil.rmtree(base, ignore_errors=True)  # etcd and segment data, a few hundred MB


def test_hnsw_on_a_milvus_server(cli, results, tmp_path, server):
    store = tmp_path / "vdb"
    store.mkdir()
    common = ("--host", "127.0.0.1", "--port", str(server.listen_port), "--num-vectors", "4000", "--dimension", "32",
              "--storage-root", store, "-rd", results, "-sn", "sys1")
    res = cli("open", "vectordb", "DISKANN", "datagen", *common)
    assert res.rc == 5 and "needs a Milvus 2.4+ server" in res.err and "v2.3.5" in res.err

    res = cli("open", "vectordb", "HNSW", "datagen", *common, "--metric-type", "COSINE", "--max-degree", "16",
              "--ef-construction", "64", "--batch-size", "500", "--compact")
    assert res.rc == 0, res.err
    base = results / "open" / "Org" / "results" / "sys1" / "vector_database" / "milvus" / "HNSW"
    [leaf] = sorted((base / "datagen").iterdir())
    load = json.loads((leaf / "summary.json").read_text())
    assert load["inserted_vectors"] == 4000 and load["index_type"] == "HNSW" and load["metric_type"] == "COSINE"
    assert load["index_params"] == {"M": 16, "efConstruction": 64}
    assert load["database"]["backend"] == "milvus-server" and load["database"]["version"].startswith("v2.3")
    assert load["compaction"]["requested"] and load["compaction"]["state"] == "Completed"
    served = load["served_by"]
    assert served["rows_served_by_index"] == 4000 and all(s["index_id"] for s in served["segments"])

    res = cli("open", "vectordb", "HNSW", "run", *common, "--queries", "200", "--num-query-vectors", "200",
              "--batch-size", "10", "--num-query-processes", "2", "--search-ef", "128")
    assert res.rc == 0, res.err
    [run] = sorted((base / "run").iterdir())
    summary = json.loads((run / "summary.json").read_text())
    assert summary["total_queries"] == 200 and summary["recall"] > 0.9
    assert summary["ground_truth"]["coverage"] == 1.0 and summary["metric_type"] == "COSINE"
    assert summary["served_by"]["before"]["describe_index"]["indexed_rows"] == 4000
    assert "Milvus server v2.3.5" in json.loads((run / "provenance.json").read_text())["dlio"]["source"]
