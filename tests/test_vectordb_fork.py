"""mlpstorage holding a live Milvus Lite client while it starts children the way
launch/process.py starts mpirun (subprocess with a preexec_fn): grpcio's fork support aborted
some of them (grpc/grpc#43055; a vectordb run under load died with SIGABRT on it), so the
vectordb package turns it off before pymilvus loads grpcio."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("pymilvus")

FORKS = 200
# Searches run in a thread while the main thread starts FORKS children with a preexec_fn.
SCRIPT = r"""
import os, random, subprocess, sys, threading
import mlpstorage_py.vectordb  # first, as every mlpstorage command that reaches pymilvus does
from pymilvus import MilvusClient
client = MilvusClient(os.path.join(sys.argv[1], "fork.db"))
client.create_collection("c", dimension=8)
client.insert("c", [{"id": i, "vector": [random.random() for _ in range(8)]} for i in range(200)])
stop = threading.Event()
def search():
    while not stop.is_set():
        client.search("c", data=[[random.random() for _ in range(8)]], limit=3)
worker = threading.Thread(target=search, daemon=True)
worker.start()
failed = sum(subprocess.Popen(["/bin/true"], preexec_fn=lambda: None, start_new_session=True).wait() != 0
             for _ in range(int(sys.argv[2])))
stop.set()
worker.join()
print("fork support", os.environ["GRPC_ENABLE_FORK_SUPPORT"], "failed", failed)
"""


def test_children_started_beside_a_live_milvus_client_all_run(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "GRPC_ENABLE_FORK_SUPPORT"}
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path), str(FORKS)], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith("fork support false failed 0"), done.stdout + done.stderr[-2000:]
    assert "epoll_wait error" not in done.stderr, done.stderr[-2000:]
