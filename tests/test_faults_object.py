"""The S3 endpoint dying mid-run: a checkpointing run on object storage (s3dlio) against its own
moto server process, which is killed while the engine writes. The run must fail within a
bound, with a failed leaf and the storage error in its one-line message, leaving no rank."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from conftest import MLPSTORAGE, S3_SECRET, all_leaves, subprocess_env
from fault_figures import record
from faults import assert_failed_leaf, leftover, pids_matching, wait_for
from test_faults_checkpointing import ENGINE, SMALL

pytestmark = pytest.mark.heavy


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_s3_endpoint_dies_mid_run(results, tmp_path):
    boto3 = pytest.importorskip("boto3")
    port = free_port()
    server = subprocess.Popen([str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    env = subprocess_env(tmp_path)
    env.update(AWS_ENDPOINT_URL=url, AWS_ACCESS_KEY_ID="mlpsTestKeyId", AWS_SECRET_ACCESS_KEY=S3_SECRET,
               AWS_REGION="us-east-1")
    bucket = f"mlps-{uuid.uuid4().hex[:10]}"
    child = None
    try:
        def up() -> bool:
            with socket.socket() as sock:
                return sock.connect_ex(("127.0.0.1", port)) == 0
        wait_for(up, 30, server)
        boto3.client("s3", endpoint_url=url, aws_access_key_id="x", aws_secret_access_key="x",
                     region_name="us-east-1").create_bucket(Bucket=bucket)
        argv = [str(MLPSTORAGE), "open", "checkpointing", "llama3-8b", "run", "object", "-np", "2", "-at", "b200", "-cm",
                "8", "-cf", f"s3://{bucket}/ckpts", "-sn", "sys1", "-rd", str(results), "-ncw", "10", "-ncr", "10",
                "--deadline", "60", "--params", *SMALL]
        child = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        wait_for(lambda: len(pids_matching(ENGINE, bucket)) >= 2, 90, child)
        server.send_signal(signal.SIGKILL)
        server.wait(timeout=10)
        killed = time.monotonic()
        _, err = child.communicate(timeout=120)
        took = time.monotonic() - killed
    finally:
        for proc in (child, server):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.communicate()
    errors = [l for l in err.splitlines() if l.startswith("mlpstorage: error:")]
    assert child.returncode in (6, 7), err
    assert len(errors) == 1, err
    assert any(word in errors[0].lower() for word in ("s3", "connect", "endpoint", "bucket", "http", "object")), errors[0]
    assert took < 90, f"{took:.1f} s to fail"
    (leaf,) = all_leaves(results)
    assert_failed_leaf(leaf, child.returncode, "")
    assert leftover(bucket) == []
    record("fault", 1, 1, benchmark="checkpointing (object)", fault="S3 endpoint killed", exit=child.returncode,
           message=errors[0][:160], seconds=round(took, 1))
