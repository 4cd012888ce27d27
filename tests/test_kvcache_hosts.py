"""`mlpstorage open kvcache run` across simulated client hosts (tests/simhosts.py): per-host
records, the shared results check (launch failure vs Rules 6.3.3.4), and the faults of issue 11
(unresolvable name, frozen host, trial deadline, SIGINT on remote ranks) with exit code, failed
leaf, elapsed-time bound and no surviving process. Real mpirun over ssh; nothing mocked.
Measured figures are printed (run with -s to see them)."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
import yaml

from conftest import MLPSTORAGE, all_leaves, signal_when_ready, subprocess_env
from faults import work_phase_at, work_started

from test_kvcache_cli import SMALL

from mlpstorage_py.benchmarks import kvcache, kvcache_hosts
from mlpstorage_py.benchmarks.base import Request
from mlpstorage_py.benchmarks.options import KVCacheOptions
from mlpstorage_py.launch.options import LaunchOptions
from mlpstorage_py.errors import BenchmarkFailed, GateRefused
from mlpstorage_py.launch import deadline

pytestmark = pytest.mark.heavy

UNRESOLVABLE = "mlps-no-such-host-x9"


@pytest.fixture
def small_config(tmp_path) -> Path:
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(SMALL))
    return path


def run_args(results: Path, cache: Path, config: Path, hosts: list[str], duration: int = 2, *extra: str,
             npernode: int = 1) -> list[str]:
    """One small OPEN run: Option 1 only, one trial, no inter-option delay, one rank per host."""
    return ["open", "kvcache", "run", "--hosts", *hosts, "--npernode", str(npernode), "--cache-dir", str(cache), "-rd", str(results),
            "-sn", "sys1", "--model", "tiny-1b", "--num-users", "3", "--duration", str(duration), "--trials", "1",
            "--inter-option-delay", "0", "--option", "1", "--config", str(config), *extra]


def leaf_of(results: Path) -> tuple[Path, dict]:
    (leaf,) = all_leaves(results)
    (meta,) = leaf.glob("kv_cache_*_metadata.json")
    return leaf, json.loads(meta.read_text())


def kv_processes(cluster) -> list[int]:
    """kv-cache.py ranks running on the cluster's hosts."""
    return [pid for pids in cluster.running(b"kv-cache.py").values() for pid in pids]


def ranks_gone(cluster, settle_s: float = 10.0) -> float:
    """Seconds until no kv-cache.py rank is left on the hosts (the remote daemons stop theirs once
    the launcher's lifeline is gone), failing after settle_s, the window stray_processes allows."""
    started = time.monotonic()
    while kv_processes(cluster):
        assert time.monotonic() - started < settle_s, f"ranks survived {settle_s:.0f} s: {kv_processes(cluster)}"
        time.sleep(0.1)
    return time.monotonic() - started


def disk_results(other_fs_dir: Path) -> Path:
    """An initialised results tree on tmpfs, so a cache directory on the disk is 'another file system'."""
    from mlpstorage_py.results.sentinel import init_results_dir

    root, _ = init_results_dir("Org", other_fs_dir / "R")
    return root


# -- a healthy run ---------------------------------------------------------------------------
def test_run_across_three_hosts_records_each_host(cli, sim_hosts, results, other_fs_dir, small_config):
    names = sim_hosts.names
    started = time.monotonic()
    res = cli(*run_args(results, other_fs_dir, small_config, names))
    wall = time.monotonic() - started
    assert res.rc == 0, res.err
    print(f"\nkvcache run: {len(names)} hosts x 1 rank, 2 s trial: {wall:.1f} s wall")
    leaf, meta = leaf_of(results)
    summary = json.loads((leaf / "summary.json").read_text())
    assert summary["hosts"] == names and summary["host_count"] == 3 and summary["total_ranks"] == 3
    d = deadline.settings()  # configs/tool.yaml: the work deadline, then the start-up allowance
    assert summary["trial_deadline_s"] == {"1": d["finish_s"] + d["per_host_s"] * 3 + d["safety_factor"] * (2 + kvcache.DRAIN_S)}
    assert summary["trial_startup_allowance_s"] == {"1": d["startup_s"] + d["startup_per_host_s"] * 3 + d["startup_per_rank_s"] * 3}
    records = summary["client_hosts"]
    assert json.loads((leaf / kvcache_hosts.HOSTS_FILE).read_text())["client_hosts"] == records
    assert meta["kvcache_client_hosts"] == records
    for index, (name, record) in enumerate(zip(names, records)):
        # identified by the --host entry MPI placed the rank on and the hostname the rank reported
        assert (record["host"], record["hostname"], record["ranks"]) == (name, name, [index])
        assert record["rank_hostnames"] == [name] and record["placement_consistent"]
        assert record["results_dir_check"]["visible"] is True
        assert record["results_dir_check"]["path"].startswith(str(results.resolve() / ".mlps"))
        # the cache is on tmpfs: DONTNEED evicts nothing there, and the record must not say dropped
        cache = record["page_cache"]
        assert cache["filesystems"] == ["tmpfs"] and cache["status"].startswith("not dropped: the cache directory is on tmpfs")
        assert "posix_fadvise(POSIX_FADV_DONTNEED)" in cache["method"] and cache["reports"] == 1
        rank = json.loads(next((leaf / "option_1" / "trial_0" / f"rank_{index}").glob("kvcache_results_*.json")).read_text())
        assert rank["host"]["hostname"] == name and rank["host"]["page_cache"]["filesystem"] == "tmpfs"
    probe = json.loads((leaf / kvcache_hosts.HOSTS_FILE).read_text())["shared_results_check"]
    assert [(p["host"], p["hostname"], p["visible"]) for p in probe] == [(n, n, True) for n in names]
    if meta.get("client_hosts"):  # the lifecycle's survey: the same hosts, and their facts in our records
        assert [h["host"] for h in meta["client_hosts"]] == names
        assert all(r.get("cpu_count") and r.get("kernel") for r in records)
    assert not list((results / ".mlps").glob("kvcache-shared-probe-*"))


def test_page_cache_dropped_per_host_on_a_disk_cache(cli, sim_hosts, other_fs_dir, tmp_path, small_config):
    """Cache on the ext4 disk, results on tmpfs: every host's ranks fadvise each file before its
    read. Two ranks per host: ranks 0-1 on the first --host entry, 2-3 on the second."""
    results = disk_results(other_fs_dir)
    names = sim_hosts.names[:2]
    res = cli(*run_args(results, tmp_path / "cache", small_config, names, npernode=2))
    assert res.rc == 0, res.err
    leaf, meta = leaf_of(results)
    for index, (name, record) in enumerate(zip(names, meta["kvcache_client_hosts"])):
        cache = record["page_cache"]
        assert record["ranks"] == [2 * index, 2 * index + 1] and record["rank_hostnames"] == [name]
        for rank in record["ranks"]:
            result = json.loads(next((leaf / "option_1" / "trial_0" / f"rank_{rank}").glob("kvcache_results_*.json")).read_text())
            assert result["host"]["hostname"] == name
        assert record["hostname"] == name and cache["reports"] == 2 and cache["filesystems"] != ["tmpfs"]
        assert cache["status"] == kvcache_hosts.DROPPED
        assert cache["storage_reads"] > 0 and cache["fadvise_done"] == cache["storage_reads"] and cache["fadvise_failed"] == 0


# -- the shared results check: a launch failure is not a rules violation ----------------------
def test_probe_tells_launch_failure_from_an_invisible_results_dir(sim_hosts, results):
    from mlpstorage_py.results.logs import setup_console

    setup_console()  # the console handler on this test's stderr, not an earlier test's captured one
    bench = kvcache.KVCacheBenchmark(Request("open", "kvcache", "llama3.1-8b", "run", KVCacheOptions()))
    bench.results_dir = results
    good = sim_hosts.names[0]
    with pytest.raises(BenchmarkFailed) as launch:
        bench._probe_shared_results(kvcache.Layout((good, UNRESOLVABLE), 1))
    assert launch.value.exit_code == 6 and "6.3.3.4" not in str(launch.value)
    # ssh's own message, wherever it is: on a busy head node PRRTE's setpgid warning comes first
    assert UNRESOLVABLE in str(launch.value) and "Could not resolve hostname" in str(launch.value)
    assert "Warning" not in str(launch.value)
    # the ranks run, but the path they look for is on no host: 6.3.3.4, every host named with its hostname
    with bench.scratch() as scratch:
        records, code = kvcache_hosts.run_probe(results, sim_hosts.names[:2], LaunchOptions(), bench.wrapper_path(), scratch,
                                                check_path=results / "absent")
        assert code == 0 and [r["visible"] for r in records] == [False, False]
        with pytest.raises(GateRefused) as refused:
            kvcache_hosts.judge_probe(results, records, code, scratch / "kvcache_shared_probe.stderr.log")
    message = str(refused.value)
    assert refused.value.exit_code == 9 and "6.3.3.4" in message and "2 of 2 host(s)" in message
    assert all(f"{n} (hostname {n})" in message for n in sim_hosts.names[:2])


def test_launch_error_is_the_real_message_behind_launcher_warnings(tmp_path):
    """The probe's launcher output as a busy head node gave it (captured with four busy loops
    beside the test above): PRRTE's ssh launcher lost the race to put its ssh child in a process
    group of its own and warned, ahead of ssh's real message. The warning is never the cause."""
    err = tmp_path / "kvcache_shared_probe.stderr.log"
    err.write_text("[vm:30546] plm:ssh: Warning: setpgid(30552,30552) failed in parent with errno=Permission denied(13)\n"
                   f"ssh: Could not resolve hostname {UNRESOLVABLE}: Name or service not known\n")
    assert kvcache_hosts.launch_error(err) == f"ssh: Could not resolve hostname {UNRESOLVABLE}: Name or service not known"
    err.write_text("ssh: Warning: setpgid(11498,11498) failed in parent with errno=Permission denied(13)\n"
                   "Warning: Permanently added 'h2' (ED25519) to the list of known hosts.\n"
                   "root@h2: Permission denied (publickey).\n")
    assert kvcache_hosts.launch_error(err) == "root@h2: Permission denied (publickey)."
    err.write_text("[vm:1] plm:ssh: Warning: setpgid(2,2) failed in parent with errno=Permission denied(13)\n")
    assert kvcache_hosts.launch_error(err) == ""  # only a warning: no cause named ('no launcher output')


def test_unresolvable_host_is_named_in_one_line(cli, sim_hosts, results, other_fs_dir, small_config):
    started = time.monotonic()
    res = cli(*run_args(results, other_fs_dir, small_config, [sim_hosts.names[0], UNRESOLVABLE]))
    elapsed = time.monotonic() - started
    assert res.rc in (10, 6) and res.rc != 9, res.err
    (line,) = [l for l in res.err_lines if l.startswith("mlpstorage: error:")]
    assert UNRESOLVABLE in line and "6.3.3.4" not in line
    print(f"\nunresolvable host: exit {res.rc} after {elapsed:.1f} s: {line}")
    for leaf in all_leaves(results):  # a failure inside the leaf leaves a failed leaf
        _, meta = leaf_of(results)
        assert meta["exit_status"] == res.rc and UNRESOLVABLE in meta["failure"]


# -- faults: bounded time, failed leaf, nothing left running ----------------------------------
def test_failing_remote_rank_is_a_failed_leaf_with_its_error(cli, sim_hosts, results, other_fs_dir, small_config):
    """Rank 1 (second host) cannot create its cache directory: mpirun ends the job (rank 0 too),
    exit 6, the trial's failure quotes the rank's error, and that host's record says it reported
    nothing, so nothing claims its page cache was dropped."""
    names = sim_hosts.names[:2]
    (other_fs_dir / "rank_1").write_text("in the way")
    started = time.monotonic()
    res = cli(*run_args(results, other_fs_dir, small_config, names))
    elapsed = time.monotonic() - started
    assert res.rc == 6 and "partial failure" in res.err and elapsed < 60, res.err
    leaf, meta = leaf_of(results)
    assert meta["exit_status"] == 6 and "partial failure" in meta["failure"]
    summary = json.loads((leaf / "summary.json").read_text())
    assert "cannot create --cache-dir" in summary["trial_failures"]["1"]["0"]
    assert "option_1/trial_0/rank_1" in summary["options"]["1"]["missing_files"]
    _, second = summary["client_hosts"]
    assert second["rank_hostnames"] == [] and second["page_cache"]["status"].startswith("not dropped: no rank")
    ranks_gone(sim_hosts)


def test_frozen_host_fails_within_bounds(cli, make_sim_cluster, results, other_fs_dir, small_config):
    cluster = make_sim_cluster(2)
    cluster.freeze(cluster.names[1])
    started = time.monotonic()
    res = cli(*run_args(results, other_fs_dir, small_config, cluster.names))
    elapsed = time.monotonic() - started
    print(f"\nfrozen host: exit {res.rc} after {elapsed:.1f} s: {res.err_lines[-1] if res.err_lines else ''}")
    assert elapsed < 60
    assert res.rc in (10, 7), res.err  # 10: the ssh preflight; 7: the check's deadline (no preflight)
    assert cluster.names[1] in res.err and cluster.names[0] not in res.err.split("mlpstorage: error:")[-1]
    leaf, meta = leaf_of(results)
    assert meta["exit_status"] == res.rc and meta["failure"]
    ranks_gone(cluster)
    cluster.thaw(cluster.names[1])
    assert not cluster.stray_processes()


def test_trial_deadline_stops_every_rank(cli, sim_hosts, results, other_fs_dir, small_config):
    names = sim_hosts.names[:2]
    res = cli(*run_args(results, other_fs_dir, small_config, names, 120, "--deadline", "8"))
    leaf, meta = leaf_of(results)
    elapsed = time.time() - work_phase_at(leaf)  # the deadline counts from the start of every rank
    print(f"\ntrial deadline 8 s on a 120 s trial: exit {res.rc} {elapsed:.1f} s after every rank started")
    assert res.rc == 7, res.err
    assert "deadline of 8 s" in res.err and elapsed < 8 + 30
    assert meta["exit_status"] == 7 and "deadline" in meta["failure"]
    summary = json.loads((leaf / "summary.json").read_text())
    assert summary["trial_deadline_s"] == {"1": 8.0}
    assert summary["partial_failure"] and "deadline" in summary["stopped"] and "deadline" in summary["trial_failures"]["1"]["0"]
    print(f"remote ranks gone {ranks_gone(sim_hosts):.1f} s after exit")
    assert not list(other_fs_dir.glob("rank_*/kv_*.npy"))


@pytest.mark.parametrize("sig, reason", [(signal.SIGINT, "interrupted"), (signal.SIGTERM, "terminated by SIGTERM")])
def test_signal_mid_run_on_remote_ranks(sim_hosts, results, other_fs_dir, small_config, tmp_path, sig, reason):
    names = sim_hosts.names[:2]
    argv = [str(MLPSTORAGE), *run_args(results, other_fs_dir, small_config, names, 120)]
    code, err, took = signal_when_ready(argv, subprocess_env(tmp_path), lambda: work_started(results), sig)
    print(f"\n{sig.name} with ranks on {', '.join(names)}: exit {code} {took:.1f} s after the signal")
    assert code == 8, err
    assert took < 30
    leaf, meta = leaf_of(results)
    assert meta["exit_status"] == 8 and reason in meta["failure"]
    assert json.loads((leaf / "summary.json").read_text())["stopped"] == reason
    print(f"remote ranks gone {ranks_gone(sim_hosts):.1f} s after exit")
    assert not list(other_fs_dir.glob("rank_*/kv_*.npy"))  # the killed ranks' KV files are removed
