"""Checkpointing (combined and split) and object-storage training across simulated client hosts.

The object tests run a second S3 endpoint (moto's server) on the simulated cluster's bridge
address, the only address of the root namespace the namespace hosts can reach."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from conftest import S3_SECRET, all_leaves, assert_no_secret
from faults import work_phase_at
from test_checkpointing_cli import SMALL as SMALL_LLAMA

pytestmark = pytest.mark.heavy


def meta_of(leaf: Path, kind: str) -> dict:
    (path,) = leaf.glob(f"{kind}_*_metadata.json")
    return json.loads(path.read_text())


def ckpt(cli, results, folder, hosts, writes, reads, *extra, params=SMALL_LLAMA):
    return cli("open", "checkpointing", "llama3-8b", "run", "-np", str(2 * len(hosts)), "-at", "b200", "-cm", "8",
               "-cf", folder, "-sn", "sys1", "-rd", results, "-ncw", str(writes), "-ncr", str(reads),
               "--hosts", *hosts, *extra, "--params", *params)


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
        # each host's own configuration; none of what the launcher sets in a rank's environment
        assert all(r["sysctl"]["net.core.rmem_max"].isdigit() and isinstance(r["drives"], list) for r in records)
        assert [r["environment"] for r in records] == [{}, {}], records
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
    # 600 s between the two checkpoints: the work cannot end before the deadline however fast
    # the machine (the small checkpoints alone took 1.8 s once, inside the 2 s)
    paused = [p for p in SMALL_LLAMA if not p.startswith("checkpoint.time_between_checkpoints=")]
    res = ckpt(cli, results, other_fs_dir, hosts, 2, 2, "--deadline", "2",
               params=[*paused, "checkpoint.time_between_checkpoints=600"])
    assert res.rc == 7, res.err
    assert "deadline of 2 s" in res.err
    (leaf,) = all_leaves(results)
    assert time.time() - work_phase_at(leaf) < 2 + 30  # the deadline counts from the start of every rank
    meta = meta_of(leaf, "checkpointing")
    assert meta["exit_status"] == 7 and meta["deadline_s"] == 2
    # sim_hosts asserts on teardown that no rank, prted or ssh session survived on any host


def test_a_remote_shell_that_never_answers_at_launch_is_ended_by_the_start_up_allowance(cli, results, other_fs_dir,
                                                                                      sim_hosts, tmp_path, monkeypatch):
    """The ssh preflight passes (h2 answers `true`), but the ssh that is to start h2's daemon for
    the engine's job never returns: the start-up allowance ends the job, exit 11, naming h2."""
    hosts = sim_hosts.names[:2]
    agent = tmp_path / "ssh"
    agent.write_text(f"""#!/bin/sh
# The remote shell for {hosts[1]}, when prterun starts the checkpoint engine's daemons, hangs.
if grep -q checkpoint.engine /proc/$PPID/cmdline 2>/dev/null; then
    for arg in "$@"; do [ "$arg" = "{hosts[1]}" ] && exec sleep 3600; done
fi
exec {sim_hosts.ssh_wrapper} "$@"
""")
    agent.chmod(0o755)
    monkeypatch.setenv("PRTE_MCA_plm_ssh_agent", str(agent))
    res = ckpt(cli, results, other_fs_dir, hosts, 1, 0, "--startup-allowance", "5")
    assert res.rc == 11, res.err
    (error,) = [l for l in res.err.splitlines() if l.startswith("mlpstorage: error:")]
    # prterun starts no rank until every daemon is up: no rank anywhere reports, h2 among the hosts
    assert "start-up allowance of 5 s" in error and "4 of 4 rank(s) did not report" in error, error
    assert f"no rank on {hosts[0]}, {hosts[1]} started" in error, error
    (leaf,) = all_leaves(results)
    meta = meta_of(leaf, "checkpointing")
    assert meta["exit_status"] == 11 and meta["startup_allowance_s"] == 5 and meta["startup_seconds"] is None
    # sim_hosts asserts on teardown that no rank, prted or ssh session survived on any host


@pytest.fixture
def bridge_s3(sim_hosts):
    """moto's S3 server on the cluster's bridge address, and the AWS variables that point at it
    (for child processes only)."""
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
    yield env
    server.stop()


def test_object_training_across_hosts(results, sim_hosts, bridge_s3, tmp_path):
    """Through a child mlpstorage, with boto3 for the test's own S3 calls: s3dlio keeps its first
    endpoint for the life of a process, and this endpoint is not the rest of the suite's."""
    import subprocess
    import uuid

    import boto3

    from conftest import MLPSTORAGE, subprocess_env
    from test_object_storage import SMALL_DATA

    s3 = boto3.client("s3", endpoint_url=bridge_s3["AWS_ENDPOINT_URL"], region_name="us-east-1",
                      aws_access_key_id="mlpsTestKeyId", aws_secret_access_key=S3_SECRET)
    bucket = f"mlps-{uuid.uuid4().hex[:10]}"
    s3.create_bucket(Bucket=bucket)
    hosts = sim_hosts.names[:2]
    env = {**subprocess_env(tmp_path), **sim_hosts.env(), **bridge_s3}

    def mlps(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(MLPSTORAGE), *argv], env=env, capture_output=True, text=True, timeout=300)

    gen = mlps("open", "training", "unet3d", "datagen", "object", "-np", "2", "-dd", f"s3://{bucket}/data", "-sn", "sys1",
               "-rd", str(results), "--hosts", *hosts, "-aip", "--params", "dataset.num_files_train=4", *SMALL_DATA)
    assert gen.returncode == 0, gen.stderr
    listed = s3.list_objects_v2(Bucket=bucket, Prefix="data/unet3d/train/")
    assert len(listed.get("Contents", [])) == 4
    run = mlps("open", "training", "unet3d", "run", "object", "-at", "b200", "-na", "2", "-cm", "1", "-dd",
               f"s3://{bucket}/data", "-sn", "sys1", "-rd", str(results), "--hosts", *hosts, "-aip", "--params", *SMALL_DATA)
    assert run.returncode == 0, run.stderr
    (leaf,) = [p for p in all_leaves(results) if p.parent.name == "run"]
    meta = meta_of(leaf, "training")
    assert [r["hostname"] for r in meta["client_hosts"]] == hosts
    summary = json.loads((leaf / "summary.json").read_text())
    assert summary["num_hosts"] == 2 and summary["num_files_train"] == 4
    assert meta["page_cache"]["before_run"].startswith("not applicable")
    assert_no_secret(results)
