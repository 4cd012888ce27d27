"""Checkpointing (combined and split) and object-storage training across simulated client hosts.

The object tests run a second S3 endpoint (moto's server) on the simulated cluster's bridge
address, the only address of the root namespace the namespace hosts can reach."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from conftest import S3_SECRET, all_leaves, assert_no_secret
from test_checkpointing_cli import SMALL as SMALL_LLAMA

pytestmark = pytest.mark.heavy


def meta_of(leaf: Path, kind: str) -> dict:
    (path,) = leaf.glob(f"{kind}_*_metadata.json")
    return json.loads(path.read_text())


def ckpt(cli, results, folder, hosts, writes, reads, *extra):
    return cli("open", "checkpointing", "llama3-8b", "run", "-np", str(2 * len(hosts)), "-at", "b200", "-cm", "8",
               "-cf", folder, "-sn", "sys1", "-rd", results, "-ncw", str(writes), "-ncr", str(reads),
               "--hosts", *hosts, *extra, "--params", *SMALL_LLAMA)


def test_checkpointing_combined_and_split_across_hosts(cli, results, other_fs_dir, sim_hosts):
    hosts = sim_hosts.names[:2]
    timings = {}
    for writes, reads in ((2, 2), (2, 0), (0, 2)):
        started = time.monotonic()
        res = ckpt(cli, results, other_fs_dir, hosts, writes, reads)
        assert res.rc == 0, res.err
        timings[(writes, reads)] = time.monotonic() - started
    leaves = sorted(p for p in all_leaves(results) if p.parent.name == "llama3-8b")
    assert len(leaves) == 3
    for leaf, (writes, reads) in zip(leaves, ((2, 2), (2, 0), (0, 2))):
        meta = meta_of(leaf, "checkpointing")
        records = meta["client_hosts"]
        assert [r["host"] for r in records] == hosts and [r["hostname"] for r in records] == hosts
        assert [r["ranks"] for r in records] == [[0, 1], [2, 3]]
        summary = json.loads((leaf / "summary.json").read_text())
        assert summary["num_hosts"] == 2
        assert summary["rank_hostnames"] == [hosts[0], hosts[0], hosts[1], hosts[1]]
        if reads:
            cache = meta["page_cache"]
            assert cache["before_read"] == "dropped"
            assert [h["host"] for h in cache["hosts"]] == hosts
        else:
            assert "page_cache" not in meta
        assert meta["deadline_s"] > 0
    print(f"\ncheckpointing on {hosts}: " + ", ".join(f"w{w}/r{r} {t:.1f} s" for (w, r), t in timings.items()))


def test_checkpointing_deadline_stops_the_job_everywhere(cli, results, other_fs_dir, sim_hosts):
    hosts = sim_hosts.names[:2]
    started = time.monotonic()
    res = ckpt(cli, results, other_fs_dir, hosts, 2, 2, "--deadline", "2")
    elapsed = time.monotonic() - started
    assert res.rc == 7, res.err
    assert "deadline of 2 s" in res.err
    assert elapsed < 40
    (leaf,) = all_leaves(results)
    meta = meta_of(leaf, "checkpointing")
    assert meta["exit_status"] == 7 and meta["deadline_s"] == 2
    # sim_hosts asserts on teardown that no rank, prted or ssh session survived on any host


@pytest.fixture
def bridge_s3(sim_hosts, monkeypatch):
    """moto's S3 server on the cluster's bridge address, with the AWS variables pointing at it."""
    import socket

    from moto.server import ThreadedMotoServer

    from simhosts import SUBNET

    address = f"{SUBNET.format(slot=sim_hosts.slot)}.1"
    with socket.socket() as sock:
        sock.bind((address, 0))
        port = sock.getsockname()[1]
    server = ThreadedMotoServer(ip_address=address, port=port, verbose=False)
    server.start()
    env = {"AWS_ENDPOINT_URL": f"http://{address}:{port}", "AWS_ACCESS_KEY_ID": "mlpsTestKeyId",
           "AWS_SECRET_ACCESS_KEY": S3_SECRET, "AWS_REGION": "us-east-1"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    yield env
    server.stop()


def test_object_training_across_hosts(cli, results, sim_hosts, bridge_s3):
    import uuid

    import s3dlio

    from test_object_storage import SMALL_DATA

    bucket = f"mlps-{uuid.uuid4().hex[:10]}"
    s3dlio.create_bucket(bucket)
    hosts = sim_hosts.names[:2]
    gen = cli("open", "training", "unet3d", "datagen", "object", "-np", "2", "-dd", f"s3://{bucket}/data", "-sn", "sys1",
              "-rd", results, "--hosts", *hosts, "-aip", "--params", "dataset.num_files_train=4", *SMALL_DATA)
    assert gen.rc == 0, gen.err
    assert len(s3dlio.list(f"s3://{bucket}/data/unet3d/train/", True)) == 4
    run = cli("open", "training", "unet3d", "run", "object", "-at", "b200", "-na", "2", "-cm", "1", "-dd",
              f"s3://{bucket}/data", "-sn", "sys1", "-rd", results, "--hosts", *hosts, "-aip", "--params", *SMALL_DATA)
    assert run.rc == 0, run.err
    (leaf,) = [p for p in all_leaves(results) if p.parent.name == "run"]
    meta = meta_of(leaf, "training")
    assert [r["hostname"] for r in meta["client_hosts"]] == hosts
    summary = json.loads((leaf / "summary.json").read_text())
    assert summary["num_hosts"] == 2 and summary["num_files_train"] == 4
    assert meta["page_cache"]["before_run"].startswith("not applicable")
    assert_no_secret(results)


def test_a_host_that_hangs_mid_run_is_ended_by_the_deadline(results, other_fs_dir, make_sim_cluster, tmp_path):
    """After the preflight passed: the host stops answering while the engine runs on it."""
    import subprocess

    from conftest import MLPSTORAGE, subprocess_env

    cluster = make_sim_cluster(2)
    slow = [p for p in SMALL_LLAMA if not p.startswith("checkpoint.time_between")] + ["checkpoint.time_between_checkpoints=2"]
    argv = [str(MLPSTORAGE), "open", "checkpointing", "llama3-8b", "run", "-np", "2", "-at", "b200", "-cm", "8",
            "-cf", str(other_fs_dir), "-sn", "sys1", "-rd", str(results), "-ncw", "10", "-ncr", "0",
            "--hosts", *cluster.names, "--deadline", "15", "--params", *slow]
    env = {**subprocess_env(tmp_path), **cluster.env()}
    started = time.monotonic()
    child = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    victim = cluster.names[1]
    while time.monotonic() - started < 60 and not cluster.running(b"mlpstorage_py.checkpoint.engine", [victim])[victim]:
        time.sleep(0.3)
    stopped = cluster.hang(victim)
    try:
        _, err = child.communicate(timeout=90)
    finally:
        cluster.resume(stopped)
    elapsed = time.monotonic() - started
    assert child.returncode == 7, err
    assert "deadline of 15 s" in err and elapsed < 60
    (leaf,) = all_leaves(results)
    assert meta_of(leaf, "checkpointing")["exit_status"] == 7
    assert not cluster.stray_processes(), "a daemon or rank survived once the host came back"

