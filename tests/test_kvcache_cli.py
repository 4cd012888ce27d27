"""`mlpstorage <mode> kvcache run`: CLOSED locks, rank layout, planning, aggregation (Rules 6.3.4),
and a real 2-rank OPEN run under mpirun."""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path
from statistics import fmean

import numpy as np
import pytest
import yaml

from conftest import all_leaves

from mlpstorage_py import progress
from mlpstorage_py.benchmarks import kvcache
from mlpstorage_py.benchmarks.options import KVCacheOptions
from mlpstorage_py.launch.options import LaunchOptions
from mlpstorage_py.errors import UsageError
from mlpstorage_py.launch import job

SMALL = {
    "user_templates": {
        "chatbot": {"context_tokens": [128, 512], "generation_tokens": [16, 128], "think_time_s": [0.0, 0.02], "weight": 1},
        "coding": {"weight": 0}, "document": {"weight": 0}},
    "prefix_cache": {"system_prompt_tokens": [32, 128, 64]},
}


@pytest.fixture
def cache_dir():
    shm = Path("/dev/shm")
    if not shm.is_dir():
        pytest.skip("needs /dev/shm (a file system apart from the results)")
    path = shm / f"mlps-kv-{uuid.uuid4().hex[:8]}"
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def small_config(tmp_path) -> Path:
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(SMALL))
    return path


def closed(*extra):
    return ("closed", "kvcache", "run", "-sn", "sys1", *extra)


# -- CLOSED --------------------------------------------------------------------------------
@pytest.mark.parametrize("flag", [("--seed", "1"), ("--trials", "1"), ("--inter-option-delay", "0"),
                                  ("--config", "x.yaml"), ("--model", "tiny-1b"), ("--duration", "5"),
                                  ("--cpu-mem-gb", "8"), ("--enable-rag",), ("--option", "1")])
def test_closed_refuses_changed_locks_and_workload(cli, results, cache_dir, flag):
    res = cli(*closed("--cache-dir", cache_dir, "-rd", results, *flag))
    assert res.rc == 2, res.err
    assert f"{flag[0]} is not allowed in the closed division" in res.err
    assert all_leaves(results) == [] and not cache_dir.exists()


def test_closed_refuses_params_and_needs_a_separate_cache_dir(cli, results, cache_dir, tmp_path):
    res = cli(*closed("--cache-dir", cache_dir, "-rd", results, "--params", "sequence.seed=1"))
    assert res.rc == 9 and "may not be overridden in the closed division" in res.err
    res = cli(*closed("-rd", results))
    assert res.rc == 5 and "--cache-dir" in res.err
    res = cli(*closed("--cache-dir", tmp_path / "same_fs", "-rd", results))
    assert res.rc == 9 and "same file system" in res.err and "6.4.1" in res.err
    res = cli(*closed("--cache-dir", results / "inside", "-rd", results))
    assert res.rc == 9 and "must be apart" in res.err
    assert all_leaves(results) == []


def test_closed_plan_is_table_kvcache_1(cli):
    res = cli("whatif", "kvcache", "run", "--hosts", "n1", "n2", "--npernode", "2")
    assert res.rc == 0, res.err
    table = kvcache.option_table()
    params = kvcache.resolve_parameters("closed", KVCacheOptions(seed=1, duration=5, kv_model="tiny-1b"), table)
    assert params["sequence"] == {"seed": 42, "trials": 3, "inter_option_delay_s": 90}
    assert params["options"]["1"] == {"model": "llama3.1-8b", "num_users": 200, "duration": 300, "gpu_mem_gb": 0,
                                      "cpu_mem_gb": 0, "max_concurrent_allocs": 16, "generation_mode": "none"}
    assert params["options"]["2"]["cpu_mem_gb"] == 4 and params["options"]["3"]["model"] == "llama3.1-70b-instruct"
    assert params["options"]["3"]["num_users"] == 70 and params["options"]["3"]["max_concurrent_allocs"] == 4
    commands = [line for line in res.out.splitlines() if line.strip().startswith("command:")]
    assert len(commands) == 9  # 3 Options x 3 trials
    assert "-n 4 --host n1:2,n2:2" in commands[0] and "--seed-base 42" in commands[0]
    assert "--max-concurrent-allocs 16" in commands[0] and "--cpu-mem-gb 4" in commands[3]
    assert "ranks: 4 = 2 per host x 2 host(s)" in res.out
    assert "estimated duration: 48.8 min" in res.out  # 9 x (300 + 5) s + 2 x 90 s


# -- OPEN: only flags the user set supersede the table ---------------------------------------
def test_open_supersedes_only_the_flags_given():
    table = kvcache.option_table()
    params = kvcache.resolve_parameters("open", KVCacheOptions(duration=5, seed=7), table)
    for key, option in params["options"].items():
        expected = dict(table["options"][key]["params"], duration=5)
        assert option == expected
    assert params["sequence"] == {"seed": 7, "trials": 3, "inter_option_delay_s": 90}
    picked = kvcache.resolve_parameters("open", KVCacheOptions(kv_options=(3,), cpu_mem_gb=1.5, enable_rag=True), table)
    assert list(picked["options"]) == ["3"] and picked["options"]["3"]["cpu_mem_gb"] == 1.5
    assert picked["global"]["rag"] is True
    args = kvcache.kv_cache_args(picked["options"]["3"], picked["global"], None)
    assert args[:4] == ["--model", "llama3.1-70b-instruct", "--num-users", "70"]
    assert "--enable-rag" in args and args[args.index("--cpu-mem-gb") + 1] == "1.5"


def test_whatif_validates_the_simulator_input_up_front(cli, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("decode: {batch: 3}\n")
    res = cli("whatif", "kvcache", "run", "--config", bad)
    assert res.rc == 2 and "decode.batch: unknown key" in res.err


def test_a_config_that_is_not_yaml_is_one_line_naming_the_file_and_the_place(cli, tmp_path):
    bad = tmp_path / "garbage.yaml"
    bad.write_text("decode: [\n")
    res = cli("whatif", "kvcache", "run", "--config", bad)
    assert res.rc == 2
    (line,) = res.err.strip().splitlines()
    assert f"config {bad} is not valid YAML at line 2, column 1: expected the node content" in line
    assert "kv-cache.py refused its input" in line


# -- rank layout (Rules 6.3.3.1) ---------------------------------------------------------------
@pytest.mark.parametrize("np_, ppn, hosts, expected", [
    (None, None, None, (1, 1)),
    (None, None, ["a", "b"], (1, 2)),
    (4, None, None, (4, 4)),
    (8, None, ["a", "b"], (4, 8)),
    (None, 3, ["a", "b"], (3, 6)),
    (6, 3, ["a", "b"], (3, 6)),
])
def test_rank_layout(np_, ppn, hosts, expected):
    layout = kvcache.resolve_layout(np_, ppn, hosts)
    assert (layout.npernode, layout.total_ranks) == expected


@pytest.mark.parametrize("np_, ppn, hosts, message", [
    (3, None, ["a", "b"], "does not divide evenly"),
    (4, 3, ["a", "b"], "does not equal --npernode 3 x 2"),
    (2, None, ["a:1", "b:1"], "without :slots"),
    (2, None, ["a", "a"], "twice"),
])
def test_rank_layout_errors(np_, ppn, hosts, message):
    with pytest.raises(UsageError, match=message):
        kvcache.resolve_layout(np_, ppn, hosts)


def test_shared_results_probe_runs_on_every_host(results, cache_dir):
    """Rules 6.3.3.4: one wrapper per host must see the probe file (run here on one host)."""
    from mlpstorage_py.benchmarks.base import Request

    bench = kvcache.KVCacheBenchmark(Request("open", "kvcache", "llama3.1-8b", "run", KVCacheOptions(),
                                             LaunchOptions(hosts=("127.0.0.1",))))
    bench.results_dir = results
    bench._probe_shared_results(kvcache.Layout(("127.0.0.1",), 1))
    assert not list((results / ".mlps").glob("kvcache-shared-probe-*"))
    assert kvcache.Layout(("127.0.0.1",), 4).multi_host is False
    assert kvcache.Layout(("n1",), 1).multi_host and kvcache.Layout(("127.0.0.1", "localhost"), 1).multi_host


# -- aggregation (Rules 6.3.4) -----------------------------------------------------------------
def rank(read, write, tput, dev_read, dev_write, entries=5, avg=100.0):
    return {"summary": {"storage_throughput_tokens_per_sec": tput, "avg_throughput_tokens_per_sec": avg,
                        "end_to_end_latency_ms": {"p95": 10.0},
                        "figures_reference_way": {"tier_storage_read_bandwidth_gbps": read / 2,
                                                  "tier_storage_write_bandwidth_gbps": write / 4,
                                                  "avg_throughput_tokens_per_sec": avg},
                        "cache_stats": {"tier_storage_read_bandwidth_gbps": read, "tier_storage_write_bandwidth_gbps": write,
                                        "storage_read_device_p95_ms": dev_read, "storage_write_device_p95_ms": dev_write,
                                        "storage_read_p95_ms": dev_read + 1, "storage_entries": entries}}}


def test_aggregation_formulas_missing_ranks_and_cpu_tier_ranks():
    trials = [
        {0: rank(1.0, 0.5, 10.0, 3.0, 1.0), 1: rank(2.0, 0.25, 20.0, 5.0, 2.0), 2: rank(0.0, 0.0, 7.0, 99.0, 99.0, entries=0)},
        {0: rank(3.0, 1.5, 30.0, 4.0, 6.0), 1: None, 2: rank(0.5, 0.5, 5.0, 2.0, 1.0)},
    ]
    agg = kvcache.aggregate_option("1", trials, 3)
    assert agg["aggregated_read_bandwidth_gbps"] == pytest.approx(fmean([1.0 + 2.0 + 0.0, 3.0 + 0.5]))
    assert agg["aggregated_write_bandwidth_gbps"] == pytest.approx(fmean([0.75, 2.0]))
    assert agg["aggregated_storage_throughput_tokens_per_sec"] == pytest.approx(fmean([37.0, 35.0]))
    assert agg["aggregated_device_read_p95_ms"] == 5.0  # the CPU-tier rank's 99 ms does not count
    assert agg["aggregated_device_write_p95_ms"] == 6.0
    assert agg["cpu_tier_ranks"] == [2] and agg["cpu_tier_rank_trials"] == [{"trial": 0, "rank": 2}]
    assert agg["missing_files"] == ["option_1/trial_1/rank_1"] and agg["partial_failure"]
    assert agg["headline"] == {"storage_read_bandwidth_gbps": agg["aggregated_read_bandwidth_gbps"],
                               "device_read_p95_ms": 5.0, "device_write_p95_ms": 6.0,
                               "storage_throughput_tokens_per_sec": agg["aggregated_storage_throughput_tokens_per_sec"],
                               "total_ranks": 3}
    assert not agg["all_ranks_cpu_tier"]
    assert agg["aggregated_reference_way"] == pytest.approx({  # the same reductions, the reference's figures
        "read_bandwidth_gbps": fmean([3.0 / 2, 3.5 / 2]), "write_bandwidth_gbps": fmean([0.75 / 4, 2.0 / 4]),
        "avg_throughput_tokens_per_sec": fmean([300.0, 200.0])})
    everything_in_memory = kvcache.aggregate_option("2", [{0: rank(0, 0, 1.0, 0, 0, entries=0)}], 1)
    assert everything_in_memory["all_ranks_cpu_tier"] and everything_in_memory["aggregated_device_read_p95_ms"] == 0


def test_failed_trials_still_write_the_summary(cli, results, cache_dir, small_config, monkeypatch):
    """Rank 1 never reports and mpirun exits 1: the leaf keeps a summary flagged partial_failure."""
    def fake_run(argv, *, stdout_path, stderr_path, **_):
        base = Path(argv[argv.index("--rank-output-base") + 1])
        stamp = argv[argv.index("--timestamp") + 1]
        (base / "rank_0").mkdir(parents=True)
        (base / "rank_0" / f"kvcache_results_{stamp}.json").write_text(json.dumps(rank(1.0, 1.0, 1.0, 1.0, 1.0)))
        stdout_path.write_text("")
        stderr_path.write_text("rank 1 died\n")
        return 1

    monkeypatch.setattr(job, "run_logged", fake_run)
    res = cli("open", "kvcache", "run", "-np", "2", "--cache-dir", cache_dir, "-rd", results, "-sn", "sys1",
              "--model", "tiny-1b", "--trials", "2", "--inter-option-delay", "0", "--option", "1", "--config", small_config)
    assert res.rc == 6 and "partial failure" in res.err
    (leaf,) = all_leaves(results)
    summary = json.loads((leaf / "summary.json").read_text())
    assert summary["partial_failure"] and summary["trial_failures"]["1"].keys() == {"0", "1"}
    assert summary["options"]["1"]["missing_files"] == ["option_1/trial_0/rank_1", "option_1/trial_1/rank_1"]
    assert summary["options"]["1"]["aggregated_read_bandwidth_gbps"] == 1.0
    metadata = json.loads(next(leaf.glob("kv_cache_*_metadata.json")).read_text())
    assert metadata["exit_status"] == 6 and "partial failure" in metadata["failure"]


# -- a real run ----------------------------------------------------------------------------------
def test_open_run_two_ranks_isolated_and_aggregated(cli, results, cache_dir, small_config, monkeypatch):
    monkeypatch.setattr(progress, "PLAIN_EVERY_S", 0.0)
    res = cli("open", "kvcache", "run", "-np", "2", "--cache-dir", cache_dir, "-rd", results, "-sn", "sys1",
              "--model", "tiny-1b", "--num-users", "3", "--duration", "2", "--trials", "1", "--inter-option-delay", "0",
              "--config", small_config)
    assert res.rc == 0, res.err
    assert "kvcache: 1/3 trials (33%)" in res.err and "kvcache: 3/3 trials (100%)" in res.err  # live, per trial
    assert res.err.count("(done)") == 1
    (leaf,) = all_leaves(results)
    assert leaf.parent == results / "open" / "Org" / "results" / "sys1" / "kv_cache" / "tiny-1b" / "run"
    stamp = leaf.name
    for name in ("summary.json", "results.json", "provenance.json", "fs_separation.json", f"kv_cache_{stamp}_metadata.json",
                 "option_1_results.json", "option_2_results.json", "option_3_results.json",
                 f"kvcache_opt1_trial0_{stamp}.stdout.log", "mlpstorage.log"):
        assert (leaf / name).is_file(), name
    assert len(list(leaf.glob("*_metadata.json"))) == 1
    summary = json.loads((leaf / "summary.json").read_text())
    assert (summary["total_ranks"], summary["npernode"], summary["host_count"], summary["trials_per_option"]) == (2, 2, 1, 1)
    assert not summary["partial_failure"] and set(summary["options"]) == {"1", "2", "3"}

    for option in ("1", "2", "3"):
        files = [leaf / f"option_{option}" / "trial_0" / f"rank_{r}" / f"kvcache_results_{stamp}.json" for r in (0, 1)]
        ranks = [json.loads(f.read_text()) for f in files]
        # per-rank isolation (6.3.3.3): own output, own cache dir, seed = 42 + rank
        assert [r["seed"] for r in ranks] == [42, 43]
        assert [r["run"]["cache_dir"] for r in ranks] == [str(cache_dir / "rank_0"), str(cache_dir / "rank_1")]
        assert all(r["run"]["model"] == "tiny-1b" and r["run"]["num_users"] == 3 for r in ranks)
        stats = [r["summary"]["cache_stats"] for r in ranks]
        agg = summary["options"][option]
        # hand computation from the rank files (one trial: the mean over trials is the trial's sum)
        assert agg["aggregated_read_bandwidth_gbps"] == pytest.approx(sum(s["tier_storage_read_bandwidth_gbps"] for s in stats))
        assert agg["aggregated_write_bandwidth_gbps"] == pytest.approx(sum(s["tier_storage_write_bandwidth_gbps"] for s in stats))
        assert agg["aggregated_storage_throughput_tokens_per_sec"] == pytest.approx(
            sum(r["summary"]["storage_throughput_tokens_per_sec"] for r in ranks))
        storage_ranks = [s for s in stats if s["storage_entries"] > 0]
        assert agg["aggregated_device_read_p95_ms"] == pytest.approx(max([s["storage_read_device_p95_ms"] for s in storage_ranks], default=0))
        assert agg["aggregated_device_write_p95_ms"] == pytest.approx(max([s["storage_write_device_p95_ms"] for s in storage_ranks], default=0))
        assert agg["cpu_tier_ranks"] == [i for i, s in enumerate(stats) if s["storage_entries"] == 0]
        assert agg["total_ranks"] == 2 and agg["headline"]["total_ranks"] == 2
    # Options 1 and 3 have no CPU tier: storage is exercised; Option 2's 4 GiB CPU tier holds
    # this small working set, so both ranks are CPU-tier ranks (6.3.4.4).
    for option in ("1", "3"):
        assert summary["options"][option]["aggregated_read_bandwidth_gbps"] > 0
        assert summary["options"][option]["aggregated_device_read_p95_ms"] > 0
        assert summary["options"][option]["cpu_tier_ranks"] == []
    assert summary["options"]["2"]["cpu_tier_ranks"] == [0, 1]
    assert summary["options"]["2"]["aggregated_device_read_p95_ms"] == 0

    metadata = json.loads((leaf / f"kv_cache_{stamp}_metadata.json").read_text())
    assert metadata["benchmark_type"] == "kv_cache" and metadata["verification"] == "OPEN"
    assert metadata["num_processes"] == 2 and metadata["exit_status"] == 0
    assert metadata["parameters"]["options"]["3"]["max_concurrent_allocs"] == 4  # never superseded in OPEN
    assert metadata["parameters"]["options"]["1"]["gpu_mem_gb"] == 0  # not set by the user: the table's value
    assert metadata["parameters"]["sequence"] == {"seed": 42, "trials": 1, "inter_option_delay_s": 0}
    assert len(metadata["executed_argv"]) == 3 and "{leaf}" not in metadata["executed_command"]
    stamp_file = json.loads((leaf / "provenance.json").read_text())
    assert stamp_file["core_config"]["allowlist"] == "kv_cache@1"
    assert stamp_file["dlio"]["source"] == "kv-cache.py"
    # every kv-cache.py rank (3 Options x 2 ranks, one host) recorded the numpy it imported
    (host,) = stamp_file["libraries"]["hosts"]
    assert host["ranks"] == [0, 1] and host["libraries"]["numpy"]["version"] == np.__version__
    assert stamp_file["engine"]["name"] == "kv-cache.py" and "through mlperf_wrapper.py" in stamp_file["engine"]["origin"]
    assert "engine: kv-cache.py " in res.err
    assert all(k.split(".")[0] in ("options", "sequence", "global") for k in stamp_file["core_config"]["keys"])
    assert not any(cache_dir.glob("rank_*/*.npy"))  # every rank removed its KV files


def test_datasize_bounds_the_storage_tier_per_option_without_a_leaf(cli, results):
    res = cli("closed", "kvcache", "datasize", "-np", "2", "-rd", results, "-sn", "sys1")
    assert res.rc == 0, res.err
    # option 1: 200 users x 1,250,000 live tokens (50 turns x 25,000) x 128 KiB per token (llama3.1-8b)
    assert "option 1: 30,517.6 GiB per rank, 61,035.2 GiB in all" in res.out
    assert "command:" not in res.out
    assert all_leaves(results) == []
