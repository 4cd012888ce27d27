"""The Milvus server (PyPI `milvus` 2.3.5, as tests/test_vectordb_server.py starts it) killed
mid-load and mid-query: the run fails within a bound, with a failed leaf, the database error
in its one-line message, and no query rank left."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import MLPSTORAGE, all_leaves, subprocess_env
from fault_figures import record
from faults import alive, assert_failed_leaf, children_of, logged, wait_for

pytest.importorskip("milvus", reason="the PyPI `milvus` server package is not installed")
from test_vectordb_server import start_server  # noqa: E402 - after the skip

pytestmark = pytest.mark.heavy


def vdb(command: str, results: Path, store: Path, port: int, *extra: str) -> list[str]:
    return [str(MLPSTORAGE), "open", "vectordb", "HNSW", command, "--host", "127.0.0.1", "--port", str(port),
            "--dimension", "32", "--storage-root", str(store), "-rd", str(results), "-sn", "sys1", *extra]


def answered(results: Path) -> bool:
    """A query worker has said it answered queries: its line in the job's log in the leaf (os.walk,
    as faults.count_logged reads: the run adds and removes directories meanwhile)."""
    for root, dirs, files in os.walk(results):
        dirs[:] = [d for d in dirs if d not in ("code-images", ".mlps")]
        if "vectordb_workers.stdout.log" in files:
            text = (Path(root) / "vectordb_workers.stdout.log").read_text(encoding="utf-8", errors="replace")
            if re.search(r"rank \d+: [1-9][\d,]* queries", text):
                return True
    return False


def kill_and_wait(srv, child: subprocess.Popen) -> tuple[str, float]:
    srv.server_proc.send_signal(signal.SIGKILL)
    srv.server_proc.wait(timeout=10)
    killed = time.monotonic()
    _, err = child.communicate(timeout=180)
    return err, time.monotonic() - killed


def assert_database_failure(results: Path, command: str, code: int, err: str) -> str:
    errors = [l for l in err.splitlines() if l.startswith("mlpstorage: error:")]
    assert code in (6, 7), err
    assert len(errors) == 1, err
    assert any(w in errors[0].lower() for w in ("milvus", "database", "connect", "server", "grpc", "rank")), errors[0]
    leaves = [p for p in all_leaves(results) if p.parent.name == command]
    assert_failed_leaf(leaves[-1], code, "")
    return errors[0]


@pytest.mark.parametrize("phase", ["load", "query"])
def test_milvus_server_killed(results, tmp_path, phase):
    (tmp_path / "milvus").mkdir()
    srv = start_server(tmp_path / "milvus")
    store = tmp_path / "vdb"
    store.mkdir()
    env = subprocess_env(tmp_path)
    child = None
    try:
        port = srv.listen_port
        if phase == "load":
            child = subprocess.Popen(vdb("datagen", results, store, port, "--num-vectors", "2000000", "--batch-size", "2000"),
                                     env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            wait_for(lambda: logged(results, r"load: [1-9][\d,]* of "), 300, child)  # the load is under way
            workers = children_of(child.pid)
        else:
            done = subprocess.run(vdb("datagen", results, store, port, "--num-vectors", "4000", "--batch-size", "1000"),
                                  env=env, capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, done.stderr
            child = subprocess.Popen(vdb("run", results, store, port, "--num-vectors", "4000", "--runtime", "120",
                                         "--num-query-processes", "2", "--batch-size", "10"),
                                     env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            wait_for(lambda: answered(results), 300, child)  # queries are being answered
            workers = children_of(child.pid)
        err, took = kill_and_wait(srv, child)
    finally:
        if child is not None and child.poll() is None:
            child.kill()
            child.communicate()
        srv.stop()
    message = assert_database_failure(results, "datagen" if phase == "load" else "run", child.returncode, err)
    assert took < 120, f"{took:.1f} s to fail"
    wait_for(lambda: not alive(workers), 20, message=lambda: alive(workers))
    record("fault", 1, 1, benchmark="vectordb", fault=f"Milvus killed mid-{phase}", exit=child.returncode,
           message=message[:160], seconds=round(took, 1))
