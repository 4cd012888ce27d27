"""The MPI launcher builds argv lists: host layout, flags, and environment by name only."""

from __future__ import annotations

import socket

import pytest

from mlpstorage_py.errors import UsageError
from mlpstorage_py.launch.hostnames import is_local, is_loopback
from mlpstorage_py.launch.mpi import MpiOptions, host_slots, mpi_command
from mlpstorage_py.launch.options import LaunchOptions


def test_ranks_spread_round_robin_with_remainder_first():
    assert host_slots(["a", "b", "c"], 8) == [("a", 3), ("b", 3), ("c", 2)]
    assert host_slots(["a", "b"], 1) == [("a", 1)]


def test_explicit_slots_must_match_the_process_count():
    assert host_slots(["a:4", "b:2"], 6) == [("a", 4), ("b", 2)]
    with pytest.raises(UsageError, match="add up to 6"):
        host_slots(["a:4", "b:2"], 8)
    with pytest.raises(UsageError, match="every host"):
        host_slots(["a:4", "b"], 6)
    with pytest.raises(UsageError, match="twice"):
        host_slots(["a", "a"], 2)


def test_command_is_an_argv_list_with_env_names_not_values(monkeypatch):
    opts = MpiOptions(hosts=["h1", "h2"], oversubscribe=True, allow_run_as_root=True,
                      extra=["--map-by", "node"])
    env = {"AWS_SECRET_ACCESS_KEY": "s3cr3t-value", "DLIO_DROP_CACHES_TIMEOUT": "30", "HOME": "/root"}
    argv = mpi_command(opts, 4, ["prog", "arg with space"], env=env)
    assert argv[1:5] == ["-n", "4", "--host", "h1:2,h2:2"]
    assert "--oversubscribe" in argv and "--allow-run-as-root" in argv
    assert argv[argv.index("--bind-to") + 1] == "none"
    pairs = [argv[i + 1] for i, a in enumerate(argv) if a == "-x"]
    assert pairs == ["AWS_SECRET_ACCESS_KEY", "DLIO_DROP_CACHES_TIMEOUT"]
    assert not any("s3cr3t" in a for a in argv)
    assert argv[-2:] == ["prog", "arg with space"]
    assert argv[-4:-2] == ["--map-by", "node"]


def test_user_binding_is_honoured():
    argv = mpi_command(MpiOptions(hosts=["h"], extra=["--bind-to", "core"]), 1, ["p"], env={})
    assert argv.count("--bind-to") == 1 and argv[argv.index("--bind-to") + 1] == "core"


def test_mpi_params_are_split_like_a_shell():
    opts = MpiOptions.of(LaunchOptions(mpi_params=("--mca btl tcp,self", "--map-by 'ppr:1:node'")))
    assert opts.extra == ["--mca", "btl", "tcp,self", "--map-by", "ppr:1:node"]
    assert opts.hosts == ["127.0.0.1"]


@pytest.mark.parametrize("bad", ["h;rm -rf /", "-oops", "a:b", "x_y"])
def test_cli_rejects_bad_host_names(cli, results, bad):
    res = cli("open", "training", "unet3d", "datagen", "-np", "1", "-dd", str(results.parent), "-sn", "s",
              "--hosts", bad)
    assert res.rc == 2
    assert "valid host" in res.err or "expected" in res.err


def test_loopback_and_local_names(monkeypatch):
    """One definition for every caller: loopback names are local everywhere; this host's own
    name is local (no ssh, no MPI daemon) but not loopback (srun names it, other hosts reach it)."""
    monkeypatch.setattr(socket, "gethostname", lambda: "head1")
    monkeypatch.setattr(socket, "getfqdn", lambda: "head1.example")
    for name in ("127.0.0.1", "127.0.1.1", "127.0.0.1:4", "::1", "localhost", "LOCALHOST", "localhost:2",
                 "localhost.localdomain", "localhost6", "ip6-localhost"):
        assert is_loopback(name) and is_local(name), name
    for name in ("head1", "head1:8", "head1.example"):
        assert is_local(name) and not is_loopback(name), name
    for name in ("n1", "n1:2", "10.0.0.1", "128.0.0.1", "::2", "localhost.example.com", "head2"):
        assert not is_local(name) and not is_loopback(name), name
