"""mlpstorage holding a live Milvus client while it starts children: grpcio's fork handlers
(grpc/grpc#43055) aborted some children started through a plain fork, and a vectordb run under
load died with SIGABRT on it. Two guards, each tested on its own: launch/process.py starts
launchers without a preexec_fn (subprocess then uses vfork, which runs no fork handlers), and
the vectordb package turns gRPC's fork support off before pymilvus loads grpcio."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("pymilvus")

FORKS = 200
# Searches run in a thread while the main thread starts FORKS children, as argv[3] says.
SCRIPT = r"""
import os, random, subprocess, sys, threading
import mlpstorage_py.vectordb  # first, as every mlpstorage command that reaches pymilvus does
from mlpstorage_py.launch.process import guarded
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
def start():
    if sys.argv[3] == "guarded":  # the launcher's way (launch/process.run_logged)
        return subprocess.Popen(guarded(["/bin/true"], os.getpid()), start_new_session=True)
    return subprocess.Popen(["/bin/true"], preexec_fn=lambda: None, start_new_session=True)
failed = sum(start().wait() != 0 for _ in range(int(sys.argv[2])))
stop.set()
worker.join()
print("fork support", os.environ["GRPC_ENABLE_FORK_SUPPORT"], "failed", failed)
"""


@pytest.mark.parametrize("fork_support, how", [(None, "preexec"), ("true", "guarded")],
                         ids=["fork support off by our package, plain fork", "fork support on, our launcher's way"])
def test_children_started_beside_a_live_milvus_client_all_run(tmp_path, fork_support, how):
    env = {k: v for k, v in os.environ.items() if k != "GRPC_ENABLE_FORK_SUPPORT"}
    if fork_support:
        env["GRPC_ENABLE_FORK_SUPPORT"] = fork_support
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path), str(FORKS), how], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith(f"fork support {fork_support or 'false'} failed 0"), done.stdout + done.stderr[-2000:]
    assert "epoll_wait error" not in done.stderr, done.stderr[-2000:]
