"""kv-cache.py and its package, run for real at small size: tiers, storage I/O, seeds, inputs."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
import yaml

from conftest import REPO

KV_DIR = REPO / "kv_cache_benchmark"
sys.path.insert(0, str(KV_DIR))

from kvcache_sim import cli as kvcli  # noqa: E402
from kvcache_sim.config import ConfigError, build_config  # noqa: E402
from kvcache_sim.models import load_models  # noqa: E402
from kvcache_sim.cache import MultiTierCache  # noqa: E402
from kvcache_sim.payload import KVData  # noqa: E402
from kvcache_sim.storage import StorageTier  # noqa: E402
from kvcache_sim.tiers import CpuTier  # noqa: E402
from kvcache_sim.workload import Features, load_trace, preview  # noqa: E402

MIB = 1 << 20
# Short chats only, so a few seconds move tens of MiB, not GiB.
SMALL = {
    "user_templates": {
        "chatbot": {"context_tokens": [128, 512], "generation_tokens": [16, 128], "think_time_s": [0.0, 0.02], "weight": 1},
        "coding": {"weight": 0}, "document": {"weight": 0}},
    "prefix_cache": {"system_prompt_tokens": [32, 128, 64]},
    "rag": {"doc_tokens": [64, 256]},
}


@pytest.fixture
def small_config(tmp_path) -> Path:
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(SMALL))
    return path


def kv_args(cache: Path, config: Path, output: Path, *extra: str, users: int = 4, duration: float = 2,
            seed: int = 7) -> list[str]:
    return ["--model", "tiny-1b", "--num-users", str(users), "--duration", str(duration), "--gpu-mem-gb", "0",
            "--cpu-mem-gb", "0", "--generation-mode", "none", "--seed", str(seed), "--config", str(config),
            "--cache-dir", str(cache), "--output", str(output), "--log-level", "WARNING", *extra]


def run_in_process(argv: list[str]) -> dict:
    assert kvcli.main(argv) == 0
    output = Path(argv[argv.index("--output") + 1])
    return json.loads(output.read_text())


def per_user(log: Path) -> dict[int, list[dict]]:
    """Each user's requests in order, without their enqueue times (which the seed does not fix)."""
    users: dict[int, list[dict]] = defaultdict(list)
    for line in log.read_text().splitlines():
        record = json.loads(line)
        record.pop("enqueued_s")
        users[record["user_id"]].append(record)
    return users


# -- models and config ------------------------------------------------------------------------
def test_kv_bytes_per_token_from_the_model_table():
    models = load_models()
    assert models["tiny-1b"].kv_bytes_per_token == 12 * 4 * 128 * 2 * 2
    assert models["llama3.1-8b"].kv_bytes_per_token == 128 * 1024
    assert models["llama3.1-70b-instruct"].kv_bytes_per_token == 320 * 1024
    assert models["deepseek-v3"].kv_bytes_per_token == 61 * (512 + 64) * 2  # MLA
    assert models["qwen3-32b"].kv_bytes_per_token == 64 * 8 * 128 * 2 * 2  # explicit head_dim


@pytest.mark.parametrize("override, message", [
    ({"decode": {"batch": 3}}, "decode.batch: unknown key"),
    ({"bogus": {}}, "bogus: unknown key"),
    ({"decode": {"batch_tokens": "many"}}, "decode.batch_tokens: expected a number"),
    ({"decode": {"batch_tokens": 1.5}}, "expected a whole number"),
    ({"prefix_cache": {"probability": 1.5}}, "probability must be between 0 and 1"),
    ({"user_templates": {"chat2": {"weight": 1}}}, "a new entry must set exactly"),
    ({"users": {"think_time_jitter": [1.2, 0.8]}}, "range low 1.2 is above high 0.8"),
    ({"prefix_cache": {"system_prompt_tokens": []}}, "a non-empty list of whole token counts"),
    ({"prefix_cache": {"system_prompt_tokens": [5, 0.5]}}, "a non-empty list of whole token counts"),
    ({"conversation": {"max_context_tokens": 10}}, "conversation.max_context_tokens: unknown key"),
])
def test_config_is_validated_strictly(override, message):
    with pytest.raises(ConfigError, match=message):
        build_config(override)


def test_config_adds_templates_and_models():
    config = build_config({"user_templates": {"tiny": {"context_tokens": [1, 2], "generation_tokens": [1, 1],
                                                        "think_time_s": [0, 0], "weight": 2}},
                           "model_configs": {"toy": {"num_layers": 2, "hidden_size": 64, "num_heads": 4, "kv_heads": 2}}})
    assert config["user_templates"]["tiny"]["weight"] == 2 and "chatbot" in config["user_templates"]
    assert load_models(extra=config["model_configs"])["toy"].kv_bytes_per_token == 2 * 2 * 16 * 2 * 2


@pytest.mark.parametrize("extra, message", [
    (["--cache-dir", "/etc/kvcache"], "inside the system directory /etc"),
    (["--cache-dir", "/proc/self"], "inside the system directory"),
    (["--cache-dir", "/"], "may not be the root directory"),
    (["--cpu-mem-gb", "-1"], "--cpu-mem-gb must not be negative"),
    (["--num-users", "0"], "--num-users must be at least 1"),
    (["--duration", "90000"], "more than a day"),
    (["--model", "gpt-9"], "unknown --model"),
    (["--enable-rag", "--rag-num-docs", "0"], "--enable-rag needs"),
])
def test_refuses_dangerous_or_absurd_input(capsys, shm, extra, message):
    argv = ["--cache-dir", str(shm), "--duration", "1", *extra]
    assert kvcli.main(argv) == 2
    assert message in capsys.readouterr().err
    assert list(shm.iterdir()) == []


def test_a_config_with_an_unknown_key_is_refused(capsys, shm, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("eviction:\n  target_usage_ratio: 0.5\n")
    assert kvcli.main(["--cache-dir", str(shm), "--config", str(bad)]) == 2
    assert "eviction: unknown key" in capsys.readouterr().err


# -- the request sequence -----------------------------------------------------------------------
def test_same_seed_same_requests_without_running():
    config = build_config(SMALL)
    features = Features(multi_turn=True, prefix_caching=True, rag=True)
    first = preview(5, 20, 42, config, features, rag_docs=4)
    assert first == preview(5, 20, 42, config, features, rag_docs=4)
    assert first != preview(5, 20, 43, config, features, rag_docs=4)
    flat = [r for user in first for r in user]
    assert {r["qos"] for r in flat} <= {"interactive", "responsive", "batch"}
    assert any(r["turn"] > 1 for r in flat) and any(r["prefix_id"] is not None for r in flat)
    assert any(r["rag_docs"] for r in flat)
    for user in first:  # a later turn continues the previous request's conversation
        for before, after in zip(user, user[1:]):
            if after["turn"] > 1:
                assert (after["conversation"], after["turn"]) == (before["conversation"], before["turn"] + 1)


# -- real runs --------------------------------------------------------------------------------
def test_storage_only_run_writes_npy_files_and_reports_consistent_numbers(shm, small_config, tmp_path):
    out = tmp_path / "run.json"
    log = tmp_path / "requests.jsonl"
    cache = shm / "a"
    done = subprocess.run([sys.executable, str(KV_DIR / "kv-cache.py"),
                           *kv_args(cache, small_config, out, "--keep-cache-files", "--request-log", str(log))],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    summary, stats = result["summary"], result["summary"]["cache_stats"]
    files = sorted(cache.glob("*.npy"))
    assert files and stats["storage_entries"] == len(files)
    assert stats["cpu_entries"] == stats["gpu_entries"] == 0
    sample = np.load(files[0])
    assert sample.dtype == np.float16 and sample.shape[1] == 12 * 4 * 128 * 2  # (tokens, K+V elements)
    elapsed = summary["elapsed_time"]
    assert 2 <= elapsed < 10
    for op, key in (("read", "tier_storage_read_bandwidth_gbps"), ("write", "tier_storage_write_bandwidth_gbps")):
        assert stats[key] > 0
        assert stats[key] == pytest.approx(stats[f"tier_storage_kv_bytes_{'read' if op == 'read' else 'written'}_gb"] / elapsed)
        assert stats[f"storage_{op}_device_p95_ms"] > 0
        assert stats[f"storage_{op}_device_p50_ms"] <= stats[f"storage_{op}_device_p95_ms"] <= stats[f"storage_{op}_device_p99_ms"]
        assert stats[f"storage_{op}_device_p999_ms"] >= stats[f"storage_{op}_device_p99_ms"]
    assert stats["read_iops"] == pytest.approx(stats["storage_read_ops"] / elapsed)
    assert summary["storage_throughput_tokens_per_sec"] == pytest.approx(summary["total_tokens"] / summary["total_storage_io_time"])
    assert summary["total_requests"] > 0 and summary["total_tokens"] > 0
    assert stats["cache_hits"] > 0 and 0 < stats["cache_hit_rate"] <= 1
    qos = summary["qos_metrics"]
    assert sum(qos[level]["total_requests"] for level in ("interactive", "responsive", "batch")) == summary["total_requests"]
    assert summary["cpu_overhead"]["user_ms_per_request"] > 0
    assert "kv-cache.py:" in done.stdout

    # The same seed gives every user the same request sequence; another seed does not.
    again_log = tmp_path / "again.jsonl"
    run_in_process(kv_args(shm / "b", small_config, tmp_path / "again.json", "--request-log", str(again_log)))
    assert list((shm / "b").iterdir()) == []  # cleaned up without --keep-cache-files
    first, second = per_user(log), per_user(again_log)
    assert set(first) == set(second) == set(range(4))
    for user in first:
        n = min(len(first[user]), len(second[user]))
        assert n > 0 and first[user][:n] == second[user][:n]
    other_log = tmp_path / "other.jsonl"
    run_in_process(kv_args(shm / "c", small_config, tmp_path / "other.json", "--request-log", str(other_log),
                           "--max-requests", "8", seed=8))
    other = per_user(other_log)
    assert any(other[u][0] != first[u][0] for u in other)


def test_small_cpu_tier_spills_to_storage_and_large_one_does_not(shm, small_config, tmp_path):
    result = run_in_process(kv_args(shm / "s", small_config, tmp_path / "small.json", "--cpu-mem-gb", "0.02",
                                    "--keep-cache-files", "--max-concurrent-allocs", "2"))
    concurrency = result["summary"]["concurrency"]  # the allocation bound is on writes only, not workers
    assert concurrency["workers"] == 4 and 1 <= concurrency["peak_writes_in_flight"] <= 2
    small = result["summary"]["cache_stats"]
    assert small["tiers_enabled"] == {"gpu": False, "cpu": True, "storage": True}
    assert small["offloads_storage"] > 0 and small["storage_entries"] > 0 and small["cpu_entries"] > 0
    assert small["cpu_memory_used_gb"] <= 0.02 + 1e-9
    assert small["tier_storage_write_bandwidth_gbps"] > 0
    large = run_in_process(kv_args(shm / "l", small_config, tmp_path / "large.json", "--cpu-mem-gb", "4",
                                   "--keep-cache-files"))["summary"]["cache_stats"]
    assert large["storage_entries"] == 0 and large["cpu_entries"] > 0
    assert large["tier_storage_read_bandwidth_gbps"] == large["tier_storage_write_bandwidth_gbps"] == 0
    assert large["storage_read_device_p95_ms"] == 0 and large["cpu_read_p95_ms"] > 0
    assert list((shm / "l").iterdir()) == []


def test_lru_waterfall_order(tmp_path):
    """A full CPU tier demotes its least recently used entry; a read refreshes recency."""
    cache = MultiTierCache([CpuTier(int(2.5 * MIB)), StorageTier(3 * MIB, tmp_path / "store")])
    cache.keep_demotion_log = True
    block = np.zeros(MIB // 2, dtype=np.float16)  # 1 MiB
    for key in ("a", "b", "c"):
        assert cache.put(key, block, 1).tier in ("cpu", "storage")
    assert cache.entries("cpu") == ["b", "c"] and cache.entries("storage") == ["a"]
    assert cache.get("b").tier == "cpu"  # b is now the most recent
    cache.put("d", block, 1)
    assert cache.entries("cpu") == ["b", "d"] and cache.entries("storage") == ["a", "c"]
    assert [k for k, _, _ in cache.demotion_log] == ["a", "c"]
    assert cache.get("a").tier == "storage"  # read back from its .npy file
    for key in ("e", "f"):
        cache.put(key, block, 1)
    # storage holds at most 3 MiB: its least recently used entry (c) was deleted
    assert cache.entries("storage") == ["a", "b", "d"]
    assert not cache.get("c").hit
    assert len(list((tmp_path / "store").glob("*.npy"))) == 3
    cache.put("big", np.zeros(2 * MIB, dtype=np.float16), 1)  # 4 MiB: too large for every tier
    assert cache.rejected == 1 and "big" not in cache
    cache.clear()
    assert list((tmp_path / "store").iterdir()) == []
    stats = {s.name: s for s in cache.stats}
    assert stats["storage"].offloads_in == 4 and stats["storage"].evictions == 1  # a, c, b, d; c deleted
    assert stats["storage"].read_device.samples and all(x >= 0 for x in stats["storage"].read_device.samples)


def test_trace_replay_and_rag(shm, small_config, tmp_path):
    trace = tmp_path / "trace.csv"
    trace.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                     "0.0,x,100,20,120,c\n0.5,x,0,0,0,c\n1.0,x,300,40,340,c\n1.5,x,50,10,60,c\n")
    rows = load_trace(str(trace))
    assert [(r.request_tokens, r.response_tokens) for r in rows] == [(100, 20), (300, 40), (50, 10)]
    log = tmp_path / "trace.jsonl"
    result = run_in_process(kv_args(shm / "t", small_config, tmp_path / "trace.json", "--trace-path", str(trace),
                                    "--trace-speedup", "0", "--max-requests", "6", "--disable-prefix-caching",
                                    "--request-log", str(log), duration=10))
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["context_tokens"] for r in records] == [100, 300, 50, 100, 300, 50]
    assert all(r["template"] == "trace" and r["turn"] == 1 for r in records)
    assert result["summary"]["total_requests"] == 6
    rag = run_in_process(kv_args(shm / "r", small_config, tmp_path / "rag.json", "--enable-rag", "--rag-num-docs", "3",
                                 duration=1.5))["summary"]
    assert rag["rag_stats"]["enabled"] and rag["rag_stats"]["retrievals_hit"] > 0
    assert rag["cache_stats"]["rag_hits"] == rag["rag_stats"]["retrievals_hit"]


# -- the per-rank wrapper --------------------------------------------------------------------
def test_wrapper_rank_seed_and_paths(tmp_path):
    import mlperf_wrapper as wrapper

    assert wrapper.detect_rank({"OMPI_COMM_WORLD_RANK": "3"}) == 3
    assert wrapper.detect_rank({"PMI_RANK": "5"}) == 5
    assert wrapper.detect_rank({"PMIX_RANK": "2", "PMI_RANK": "7"}) == 2
    assert wrapper.detect_rank({}) == 0
    args, forwarded = wrapper.parse(["--rank-output-base", str(tmp_path / "out"), "--rank-cache-base", "/dev/shm/c",
                                     "--seed-base", "42", "--timestamp", "20260101_000000", "--", "--model", "tiny-1b"])
    argv = wrapper.kv_cache_argv(args, forwarded, 3)
    assert argv[argv.index("--seed") + 1] == "45"
    assert argv[argv.index("--output") + 1] == str(tmp_path / "out" / "rank_3" / "kvcache_results_20260101_000000.json")
    assert argv[argv.index("--cache-dir") + 1] == "/dev/shm/c/rank_3"
    assert argv[2:4] == ["--model", "tiny-1b"] and (tmp_path / "out" / "rank_3").is_dir()
    with pytest.raises(SystemExit, match="set by the wrapper"):
        wrapper.kv_cache_argv(args, ["--seed", "1"], 0)
    marker = tmp_path / "probe"
    marker.write_text("token")
    assert wrapper.probe(str(marker), "token", 0) == 0
    assert wrapper.probe(str(marker), "other", 0) == 1
    assert wrapper.probe(str(tmp_path / "absent"), "token", 0) == 1


def test_gpu_tier_code_path_on_a_torch_device(tmp_path):
    """The GPU tier needs CUDA to be used by kv-cache.py; its code runs the same on torch's CPU device."""
    pytest.importorskip("torch")
    from kvcache_sim.tiers import GpuTier

    cache = MultiTierCache([GpuTier(MIB, device="cpu"), CpuTier(MIB), StorageTier(4 * MIB, tmp_path / "s")])
    data = np.arange(MIB // 4, dtype=np.float16).reshape(256, 1024)  # 512 KiB
    for key in ("a", "b", "c"):
        cache.put(key, data, 256)
    assert cache.entries("gpu") == ["b", "c"] and cache.entries("cpu") == ["a"]
    cache.put("d", data, 256)
    cache.put("e", data, 256)
    assert cache.entries("storage") == ["a"] and cache.where("a") == "storage"
    stored = np.load(next((tmp_path / "s").glob("*.npy")))
    assert stored.shape == (256, 1024) and np.array_equal(stored, data)  # demoted intact through both tiers
    assert cache.get("e").tier == "gpu"


def test_priority_queue_serves_higher_qos_first(tmp_path):
    from kvcache_sim.engine import Engine, RunSettings

    config = build_config(SMALL)
    model = load_models()["tiny-1b"]
    engine = Engine(RunSettings(model=model, num_users=30, duration=1, seed=3), config,
                    MultiTierCache([StorageTier(MIB, tmp_path)]), KVData(model.elements_per_token, np.dtype(np.float16), 1, 3))
    for user in engine.users:
        engine._enqueue(user.next_request())
    served = []
    while not engine._queue.empty():
        served.append(engine._queue.get()[2])
    priorities = [r.priority for r in served]
    assert priorities == sorted(priorities, reverse=True) and len(set(priorities)) > 1
    for level in set(priorities):  # first come, first served within a class
        arrivals = [r.arrival for r in served if r.priority == level]
        assert arrivals == sorted(arrivals)


def test_kv_payload_is_stamped_per_512_bytes_and_streamed_to_a_npy_file(tmp_path):
    data = KVData(elements_per_token=12288, dtype=np.dtype(np.float16), pool_mib=1, seed=5)
    payload = data.make(100)  # 2.3 MiB: larger than the pool and than the 64 KiB chunks below
    assert payload.nbytes == 100 * 12288 * 2 and payload.shape == (100, 12288)
    first, second = payload.materialize(), data.make(100).materialize()
    raw = first.tobytes() + second.tobytes()
    blocks = [raw[i:i + 512] for i in range(0, len(raw), 512)]
    assert len(set(blocks)) == len(blocks)  # two entries of the same size share no 512 B block
    stamps = np.frombuffer(raw, dtype="<u8")[::64]
    assert np.all(np.diff(stamps.astype(np.int64)) == 1)  # one counter, one step per block

    from kvcache_sim.payload import ChunkBuffers

    buffers = ChunkBuffers(64 << 10)
    store = StorageTier(8 * MIB, tmp_path, buffers=buffers)
    path, timing = store.write("big", payload)
    loaded = np.load(path)  # an ordinary .npy file
    assert loaded.shape == (100, 12288) and loaded.dtype == np.float16
    assert path.stat().st_size == payload.nbytes + 128 and timing.device >= 0 and timing.host > 0
    nbytes, read_timing = store.read(path)
    assert nbytes == payload.nbytes and read_timing.device > 0 and buffers.allocated == 1  # one buffer, reused
    path.write_bytes(path.read_bytes()[:-1000])
    with pytest.raises(OSError, match="data bytes"):
        store.read(path)
