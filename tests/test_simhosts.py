"""The simulated client hosts themselves: own hostname, own sshd, MPI across them, clean teardown."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from simhosts import HOSTS_FILE

MPIRUN = Path(sys.executable).parent / "mpirun"


def alive(pid: int) -> bool:
    """Running or sleeping; a zombie waiting for init to reap it has stopped."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def test_hosts_have_their_own_names_and_mpi_reaches_them(sim_hosts):
    for name in sim_hosts.names:
        assert sim_hosts.ssh(name, "hostname").stdout.strip() == name
    assert all(name in HOSTS_FILE.read_text() for name in sim_hosts.names)
    argv = [str(MPIRUN), "--allow-run-as-root", "-n", "3", "--host", ",".join(f"{n}:1" for n in sim_hosts.names), "hostname"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=dict(os.environ))
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.split()) == sorted(sim_hosts.names)


def test_teardown_restores_hosts_file_and_stops_daemons(make_sim_cluster):
    before = HOSTS_FILE.read_text()
    cluster = make_sim_cluster(2)
    pids = [h.sshd_pid() for h in cluster.hosts]
    netns = [h.netns for h in cluster.hosts]
    assert HOSTS_FILE.read_text() != before
    cluster.stop()
    assert HOSTS_FILE.read_text() == before
    for pid in pids:
        assert not alive(pid), f"sshd {pid} survived the teardown"
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(ns in listed for ns in netns)
