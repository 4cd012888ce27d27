"""64 simulated client hosts (issue 44), one rank each: the rules' tables go that far, and the
suite otherwise never runs more than 3. Opt-in: MLPS_TEST_64_HOSTS=1. It takes minutes on a
2-core machine, where every host's rank imports Python on the same cores (bench/cluster_flows.py
--hosts 3,16,64 says where the time goes). It checks that the run finishes, records every host,
and leaves nothing behind: no process in any host's namespace or ssh client on this host, no new
segment in /dev/shm, no new entry in the temporary directory, and, after the teardown, no network
namespace of the cluster."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile

import pytest
from conftest import all_leaves
from test_checkpointing_cli import SMALL as SMALL_LLAMA

HOSTS = 64
pytestmark = [pytest.mark.heavy,
              pytest.mark.skipif(os.environ.get("MLPS_TEST_64_HOSTS") != "1",
                                 reason="64 simulated hosts take minutes on this machine: set MLPS_TEST_64_HOSTS=1")]


def test_checkpointing_on_64_hosts_records_every_host_and_leaves_nothing(cli, results, other_fs_dir, make_sim_cluster):
    cluster = make_sim_cluster(HOSTS)
    shm_before, tmp_before = set(os.listdir("/dev/shm")), set(os.listdir(tempfile.gettempdir()))
    res = cli("open", "checkpointing", "llama3-8b", "run", "-np", str(HOSTS), "-at", "b200", "-cm", "8",
              "-cf", other_fs_dir, "-sn", "sys1", "-rd", results, "-ncw", "1", "-ncr", "1",
              "--hosts", *cluster.names, "--params", *SMALL_LLAMA)
    assert res.rc == 0, res.err
    (leaf,) = all_leaves(results)
    meta = json.loads(next(leaf.glob("checkpointing_*_metadata.json")).read_text())
    assert [h["host"] for h in meta["client_hosts"]] == cluster.names
    assert sorted(h["hostname"] for h in meta["client_hosts"]) == sorted(cluster.names)
    assert json.loads((leaf / "summary.json").read_text())["num_hosts"] == HOSTS
    assert cluster.stray_processes() == []
    assert set(os.listdir("/dev/shm")) - shm_before - {other_fs_dir.name} == set()
    assert set(os.listdir(tempfile.gettempdir())) - tmp_before == set()
    tag = cluster.tag
    cluster.stop()
    assert tag not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
