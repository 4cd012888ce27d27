"""The S3 endpoint dying mid-run: a checkpointing run, a training datagen and a training run on
object storage (s3dlio), each against its own moto server process, which is killed while the
ranks do their I/O. The run must fail within a bound, with a failed leaf and the storage error
in its one-line message, leaving no rank."""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Callable, Iterator

import pytest

from conftest import MLPSTORAGE, S3_SECRET, all_leaves, subprocess_env
from fault_figures import record
from faults import assert_failed_leaf, leftover, wait_for, work_started
from test_faults_checkpointing import SMALL

pytestmark = pytest.mark.heavy


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def own_endpoint(tmp_path: Path) -> Iterator[tuple[subprocess.Popen, dict[str, str], str]]:
    """A moto server process of the test's own (so it can be killed) with one bucket: yields the
    server, the environment pointing at it and the bucket's name."""
    boto3 = pytest.importorskip("boto3")
    port = free_port()
    server = subprocess.Popen([str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    env = subprocess_env(tmp_path)
    env.update(AWS_ENDPOINT_URL=url, AWS_ACCESS_KEY_ID="mlpsTestKeyId", AWS_SECRET_ACCESS_KEY=S3_SECRET,
               AWS_REGION="us-east-1")
    bucket = f"mlps-{uuid.uuid4().hex[:10]}"
    try:
        def up() -> bool:
            with socket.socket() as sock:
                return sock.connect_ex(("127.0.0.1", port)) == 0
        wait_for(up, 30, server)
        boto3.client("s3", endpoint_url=url, aws_access_key_id="x", aws_secret_access_key="x",
                     region_name="us-east-1").create_bucket(Bucket=bucket)
        yield server, env, bucket
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()


def fault_endpoint_mid_run(argv: list[str], env: dict[str, str], server: subprocess.Popen,
                           ready: Callable[[], bool], sig: int = signal.SIGKILL) -> tuple[int, str, float]:
    """Run argv; once ready(), send the endpoint sig (SIGKILL: it is gone; SIGSTOP: it accepts
    connections and never answers). Returns (exit code, stderr, seconds from the fault until the
    run ended). The run never outlives the call."""
    child = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(ready, 120, child)
        server.send_signal(sig)
        if sig == signal.SIGKILL:
            server.wait(timeout=10)
        faulted = time.monotonic()
        _, err = child.communicate(timeout=150)
        return child.returncode, err, time.monotonic() - faulted
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()


def assert_failed_run(code: int, err: str, results: Path, parent: str, marker: str) -> str:
    """Exit 6 (the job failed) or 7 (its deadline), one error line, a failed leaf in a directory
    named parent, no process naming marker left. Returns the error line."""
    errors = [l for l in err.splitlines() if l.startswith("mlpstorage: error:")]
    assert code in (6, 7), err
    assert len(errors) == 1, err
    (leaf,) = [leaf for leaf in all_leaves(results) if leaf.parent.name == parent]
    assert_failed_leaf(leaf, code, "")
    wait_for(lambda: not leftover(marker), 30, message=lambda: leftover(marker))
    return errors[0]


def names_storage(message: str) -> bool:
    said = message.split(" (see ")[0].lower()  # the log's path may hold any word
    return any(word in said for word in ("s3", "connect", "endpoint", "bucket", "http", "object"))


def test_s3_endpoint_dies_mid_checkpoint(results, tmp_path):
    with own_endpoint(tmp_path) as (server, env, bucket):
        argv = [str(MLPSTORAGE), "open", "checkpointing", "llama3-8b", "run", "object", "-np", "2", "-at", "b200", "-cm",
                "8", "-cf", f"s3://{bucket}/ckpts", "-sn", "sys1", "-rd", str(results), "-ncw", "10", "-ncr", "10",
                "--deadline", "60", "--params", *SMALL]
        code, err, took = fault_endpoint_mid_run(argv, env, server, lambda: work_started(results))
    message = assert_failed_run(code, err, results, "llama3-8b", bucket)
    assert names_storage(message), message
    assert took < 90, f"{took:.1f} s to fail"
    record("fault", 1, 1, benchmark="checkpointing (object)", fault="S3 endpoint killed", exit=code,
           message=message[:160], seconds=round(took, 1))


# Training on 64 KiB samples, one per object: the endpoint dies while the ranks write the
# dataset (datagen) or read it for many epochs (run).
TRAIN = ["dataset.record_length_bytes=65536", "dataset.record_length_bytes_stdev=0", "dataset.record_length_bytes_resize=0",
         "train.computation_time=0.001", "reader.batch_size=1", "reader.read_threads=1"]


def training(command: str, data: str, results: Path, *params: str, deadline: int = 120) -> list[str]:
    hosts = ["-np", "2"] if command == "datagen" else ["-at", "b200", "-na", "2", "-cm", "1"]
    return [str(MLPSTORAGE), "open", "training", "unet3d", command, "object", *hosts, "-dd", data, "-sn", "sys1",
            "-rd", str(results), "-aip", "--deadline", str(deadline), "--params", *params, *TRAIN]


def working(results: Path, command: str) -> Callable[[], bool]:
    """Every rank started (the work phase), and the files being written, or epoch 1 read (the
    listing before it is behind them)."""
    def ready() -> bool:
        if not work_started(results):
            return False
        logs = list(results.glob(f"open/*/results/*/training/*/{command}/*/dlio.log"))
        return bool(logs) and (command == "datagen" or "Ending epoch 1" in logs[0].read_text(errors="replace"))
    return ready


def dataset(results: Path, env: dict[str, str], data: str) -> None:
    gen = subprocess.run(training("datagen", data, results, "dataset.num_files_train=16"), env=env,
                         capture_output=True, text=True, timeout=300)
    assert gen.returncode == 0, gen.stderr


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> dict[str, bytes]:
    """The objects (key: bytes) of one 16-file dataset under data/, generated once for the
    module by a real datagen on an endpoint of its own: the runs below read a copy of it."""
    import boto3

    from mlpstorage_py.results.sentinel import init_results_dir

    base = tmp_path_factory.mktemp("s3-dataset")
    results, _ = init_results_dir("Org", base / "R")
    with own_endpoint(base) as (server, env, bucket):
        dataset(results, env, f"s3://{bucket}/data")
        s3 = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], aws_access_key_id="x", aws_secret_access_key="x",
                          region_name="us-east-1")
        keys = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="data/")
                for o in page.get("Contents", [])]
        objects = {key: s3.get_object(Bucket=bucket, Key=key)["Body"].read() for key in keys}
    assert len([k for k in objects if k.startswith("data/unet3d/train/")]) == 16, sorted(objects)
    return objects


def copy_dataset(env: dict[str, str], bucket: str, objects: dict[str, bytes]) -> None:
    """The module's generated dataset put into this endpoint's bucket (what dataset() would write)."""
    import boto3

    s3 = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], aws_access_key_id="x", aws_secret_access_key="x",
                      region_name="us-east-1")
    for key, body in objects.items():
        s3.put_object(Bucket=bucket, Key=key, Body=body)


@pytest.mark.parametrize("command", ["datagen", "run"])
def test_s3_endpoint_dies_mid_training(results, tmp_path, command, request):
    with own_endpoint(tmp_path) as (server, env, bucket):
        data = f"s3://{bucket}/data"
        if command == "run":
            copy_dataset(env, bucket, request.getfixturevalue("generated"))
        params = ["dataset.num_files_train=20000"] if command == "datagen" else ["train.epochs=1000"]
        code, err, took = fault_endpoint_mid_run(training(command, data, results, *params), env, server,
                                                 working(results, command))
    message = assert_failed_run(code, err, results, command, str(results))
    assert code == 6 and names_storage(message), message
    assert took < 60, f"{took:.1f} s to fail"
    record("fault", 1, 1, benchmark=f"training {command} (object)", fault="S3 endpoint killed", exit=code,
           message=message[:160], seconds=round(took, 1))


# The stopped endpoint's run waits out its whole deadline. The fault comes once epoch 1 has been
# read, about 1.5 s after every rank started (the deadline's start) on a quiet machine.
STOPPED_DEADLINE_S = 20


def test_s3_endpoint_that_stops_answering_is_ended_by_the_deadline(results, tmp_path, generated):
    """A stopped server still accepts connections: nothing fails, so the run's deadline ends it."""
    with own_endpoint(tmp_path) as (server, env, bucket):
        data = f"s3://{bucket}/data"
        copy_dataset(env, bucket, generated)
        argv = training("run", data, results, "train.epochs=1000", deadline=STOPPED_DEADLINE_S)
        code, err, took = fault_endpoint_mid_run(argv, env, server, working(results, "run"), signal.SIGSTOP)
    message = assert_failed_run(code, err, results, "run", str(results))
    assert code == 7 and f"deadline of {STOPPED_DEADLINE_S} s (counted from the start of every rank)" in message, message
    # The work deadline began before the fault (every rank had started): ended within it, plus the teardown.
    assert took < STOPPED_DEADLINE_S + 30, f"{took:.1f} s from the fault"
    record("fault", 1, 1, benchmark="training run (object)", fault="S3 endpoint stopped (SIGSTOP)", exit=code,
           message=message[:160], seconds=round(took, 1))
