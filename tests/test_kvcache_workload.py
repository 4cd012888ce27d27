"""kv-cache.py's request shape (the MLCommons reference's rules), its data (unique at 512 B),
its memory bound and its out-of-memory behaviour, each measured on a small real run."""

from __future__ import annotations

import hashlib
import json
import math
import os
import resource
import subprocess
import sys
import threading
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest
import yaml

from conftest import REPO

KV_DIR = REPO / "kv_cache_benchmark"
KV = str(KV_DIR / "kv-cache.py")
sys.path.insert(0, str(KV_DIR))

from kvcache_sim.cache import MultiTierCache  # noqa: E402
from kvcache_sim.config import build_config  # noqa: E402
from kvcache_sim.engine import Engine, RunSettings  # noqa: E402
from kvcache_sim.models import load_models  # noqa: E402
from kvcache_sim.payload import KVData  # noqa: E402
from kvcache_sim.storage import StorageTier  # noqa: E402

MIB = 1 << 20
# 64 KV bytes per token: contexts on both sides of the 10K-token prefill-only line stay small.
TOY_MODEL = {"toy": {"num_layers": 1, "hidden_size": 64, "num_heads": 4, "kv_heads": 1}}
SHAPE = {
    "model_configs": TOY_MODEL,
    "user_templates": {
        "chatbot": {"context_tokens": [2000, 20000], "generation_tokens": [1, 100], "think_time_s": [0.0, 0.01],
                    "weight": 1}, "coding": {"weight": 0}, "document": {"weight": 0}},
    "conversation": {"max_turns": 4, "new_conversation_probability": 0.3},
}


def write_config(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def kv(cache: Path, config: Path, output: Path, *extra: str, model: str = "tiny-1b", users: int = 4,
       duration: float = 20, timeout: float = 90, env: dict | None = None, preexec=None) -> subprocess.CompletedProcess:
    argv = [sys.executable, KV, "--model", model, "--num-users", str(users), "--duration", str(duration),
            "--gpu-mem-gb", "0", "--generation-mode", "none", "--seed", "11", "--config", str(config),
            "--cache-dir", str(cache), "--output", str(output), "--log-level", "WARNING", *extra]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, preexec_fn=preexec)


# -- the request shape ---------------------------------------------------------------------------
def test_a_seeded_runs_trace_follows_the_reference_request_shape(shm, tmp_path):
    config = write_config(tmp_path, SHAPE)
    out, trace = tmp_path / "run.json", tmp_path / "trace.jsonl"
    done = kv(shm, config, out, "--model", "toy", "--cpu-mem-gb", "0", "--max-requests", "80",
              "--max-concurrent-allocs", "2", "--request-trace", str(trace), model="toy", users=6)
    assert done.returncode == 0, done.stderr
    summary = json.loads(out.read_text())["summary"]
    records = [json.loads(line) for line in trace.read_text().splitlines()]
    assert len(records) == 80 and all(r["status"] == "done" for r in records)
    written: dict[str, int] = {}
    contexts: dict[int, list[int]] = defaultdict(list)
    hits = 0
    for r in sorted(records, key=lambda r: (r["user_id"], r["seq"])):
        key = f"u{r['user_id']}_c{r['conversation']}_t{r['turn']}"
        ops = [(o["op"], o["kind"], o["key"]) for o in r["ops"]]
        earlier = [("read", "multi_turn", f"u{r['user_id']}_c{r['conversation']}_t{t}") for t in range(1, r["turn"])]
        reads = 0 if r["context_tokens"] >= 10000 else 1 + math.ceil(r["generation_tokens"] / 32)
        # the system prompt's lookup (if any), every earlier turn re-read, then this turn's write,
        # then its decode reads (none at >= 10K)
        prompt = [("read", "system_prompt", f"prefix_{r['prefix_id']}")] if r["prefix_id"] is not None else []
        assert ops == [*prompt, *earlier, ("write", "prefill", key), *[("read", "decode", key)] * reads], r
        assert not prompt or not r["ops"][0]["hit"]  # a system prompt's KV is never written
        earlier = prompt + earlier
        for o in r["ops"]:
            # an earlier turn is read back at the size it was written; it may still be queued (a
            # user does not wait for its responses), and then the read is a miss
            if o["kind"] == "multi_turn" and o["hit"]:
                assert o["tokens"] == written[o["key"]]
                hits += 1
        kv_tokens = r["context_tokens"] - r["prefix_tokens"]  # the prompt's tokens are not written
        assert r["ops"][len(earlier)]["tokens"] == kv_tokens
        written[key] = kv_tokens
        contexts[r["user_id"]].append(r["context_tokens"])
        assert not any(o["key"].startswith("prefix") and o["hit"] for o in r["ops"])  # system-prompt KV: no I/O
    for values in contexts.values():  # uniform(budget/4, budget): never a spread above 4x
        assert max(values) <= 4 * min(values) + 3
    flat = [r["context_tokens"] for r in records]
    assert min(flat) < 10000 <= max(flat) and any(r["turn"] > 2 for r in records) and hits > 0
    stats = summary["cache_stats"]
    assert stats["storage_write_ops"] == sum(o["op"] == "write" for r in records for o in r["ops"])
    assert stats["tier_storage_kv_bytes_written_gb"] * (1 << 30) == sum(written.values()) * 64
    assert summary["prefix_cache_stats"]["prefix_hits"] > 0
    assert summary["concurrency"]["workers"] == 6 and 1 <= summary["concurrency"]["peak_writes_in_flight"] <= 2


def test_users_enqueue_without_waiting_for_responses(tmp_path):
    """No worker runs here: the users still enqueue request after request on their own clocks."""
    config = build_config({**SHAPE, "user_templates": {**SHAPE["user_templates"], "chatbot": {
        **SHAPE["user_templates"]["chatbot"], "think_time_s": [0.0, 0.0]}}})
    model = load_models(extra=config["model_configs"])["toy"]
    engine = Engine(RunSettings(model=model, num_users=3, duration=5, max_requests=30, seed=1), config,
                    MultiTierCache([StorageTier(MIB, tmp_path)]), KVData(model.elements_per_token, np.dtype(np.float16), 1, 1))
    dispatcher = threading.Thread(target=engine._dispatch_users, daemon=True)
    dispatcher.start()
    dispatcher.join(timeout=10)
    assert engine._queue.qsize() == 30
    per_user = Counter(engine._queue.get()[2].user_id for _ in range(30))
    assert per_user == {0: 10, 1: 10, 2: 10}
    assert engine.workers == 3 and build_config()["engine"]["max_workers"] == 500


def test_summary_reconciles_with_the_reference_accounting(shm, tmp_path):
    """Demotion writes and the real elapsed time are ours; the reference's figures ride along."""
    config = write_config(tmp_path, {**SHAPE, "user_templates": {**SHAPE["user_templates"], "chatbot": {
        **SHAPE["user_templates"]["chatbot"], "context_tokens": [2000, 8000]}}})
    out = tmp_path / "run.json"
    done = kv(shm, config, out, "--cpu-mem-gb", "0.001", "--duration", "2", model="toy", duration=2)
    assert done.returncode == 0, done.stderr
    summary = json.loads(out.read_text())["summary"]
    stats, ref = summary["cache_stats"], summary["figures_reference_way"]
    diffs = {d["aspect"]: d for d in summary["differences_from_reference"]}
    assert set(diffs) == {"elapsed_time", "storage_demotion_writes", "request_counting", "work_after_deadline",
                          "storage_capacity"}
    elapsed, demotion, counting = diffs["elapsed_time"], diffs["storage_demotion_writes"], diffs["request_counting"]
    every = summary["total_requests"] + summary["requests_failed"] + summary["requests_truncated_at_deadline"]
    assert counting["requests_counted_reference_way"] == every
    assert ref["requests_per_second"] == pytest.approx(every / 2)
    assert diffs["storage_capacity"]["storage_capacity_bytes"] > 0
    assert elapsed["aspect"] == "elapsed_time" and elapsed["nominal_duration_s"] == 2
    assert elapsed["elapsed_time_s"] == summary["elapsed_time"] >= 2
    assert demotion["aspect"] == "storage_demotion_writes" and demotion["storage_demotion_bytes_written"] > 0
    written = stats["tier_storage_kv_bytes_written_gb"] * (1 << 30)
    assert demotion["storage_bytes_written"] == written == stats["storage_demotion_bytes_written"] + \
        demotion["storage_bytes_written_reference_way"]
    assert ref["tier_storage_write_bandwidth_gbps"] == pytest.approx(
        demotion["storage_bytes_written_reference_way"] / (1 << 30) / 2)
    assert stats["tier_storage_write_bandwidth_gbps"] == pytest.approx(written / (1 << 30) / summary["elapsed_time"])
    assert ref["tier_storage_read_bandwidth_gbps"] == pytest.approx(stats["tier_storage_kv_bytes_read_gb"] / 2)


# -- the data ------------------------------------------------------------------------------------
def duplicate_share(files: list[Path], block: int) -> float:
    hashes = Counter()
    for path in files:
        data = path.read_bytes()
        hashes.update(hashlib.blake2b(data[i:i + block], digest_size=16).digest() for i in range(0, len(data), block))
    total = sum(hashes.values())
    return (total - len(hashes)) / total


def test_written_cache_files_do_not_dedup_at_512_bytes_or_4_kib(shm, tmp_path):
    config = write_config(tmp_path, {
        "user_templates": {"chatbot": {"context_tokens": [64, 400], "generation_tokens": [1, 8], "think_time_s": [0.0, 0.01],
                                       "weight": 1}, "coding": {"weight": 0}, "document": {"weight": 0}},
        "engine": {"data_pool_mib": 1}})  # a pool far smaller than what is written: reuse would show
    out = tmp_path / "run.json"
    # a small CPU tier: the files hold both direct writes and demoted entries
    done = kv(shm, config, out, "--cpu-mem-gb", "0.01", "--keep-cache-files", "--max-requests", "60")
    assert done.returncode == 0, done.stderr
    stats = json.loads(out.read_text())["summary"]["cache_stats"]
    files = sorted(shm.glob("*.npy"))
    size = sum(p.stat().st_size for p in files)
    assert stats["storage_demotion_writes"] > 0 and size > 8 * MIB
    for block in (512, 4096):
        assert duplicate_share(files, block) <= 0.001, block


# -- memory --------------------------------------------------------------------------------------
def test_memory_stays_bounded_with_entries_larger_than_every_buffer(shm, tmp_path):
    """48 MiB entries through 256 KiB chunks: the peak RSS above the start stays below one entry
    (the old code held an entry-sized buffer per thread plus a copy per read)."""
    config = write_config(tmp_path, {
        "user_templates": {"chatbot": {"context_tokens": [2048, 2048], "generation_tokens": [1, 1],
                                       "think_time_s": [0.0, 0.0], "weight": 1},
                           "coding": {"weight": 0}, "document": {"weight": 0}},
        "conversation": {"max_turns": 1}, "engine": {"data_pool_mib": 8, "io_chunk_kib": 256}})
    out = tmp_path / "run.json"
    done = kv(shm, config, out, "--cpu-mem-gb", "0", "--max-requests", "12")
    assert done.returncode == 0, done.stderr
    summary = json.loads(out.read_text())["summary"]
    memory, entry = summary["memory"], 2048 * 24576
    assert summary["total_requests"] == 12 and summary["cache_stats"]["storage_read_ops"] >= 24
    assert memory["io_buffers_allocated"] <= 8 and memory["io_chunk_bytes"] == 256 << 10
    assert memory["peak_rss_above_start_bytes"] < entry, memory


def test_out_of_memory_is_one_line_and_a_failed_result(shm, tmp_path):
    """A CPU tier entry that cannot be allocated under an address-space limit ends the run with a
    one-line error, exit 1 and a result file that says failed; no traceback."""
    config = write_config(tmp_path, {
        "user_templates": {"chatbot": {"context_tokens": [40000, 40000], "generation_tokens": [1, 1],
                                       "think_time_s": [0.0, 0.0], "weight": 1},
                           "coding": {"weight": 0}, "document": {"weight": 0}},
        "engine": {"data_pool_mib": 4}})  # 940 MiB entries for tiny-1b

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1536 * MIB, 1536 * MIB))

    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    out = tmp_path / "run.json"
    done = kv(shm, config, out, "--cpu-mem-gb", "4", "--max-requests", "4", users=2, env=env, preexec=limit)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    (line,) = [x for x in done.stderr.splitlines() if x.startswith("kv-cache.py: error:")]
    assert "out of memory" in line
    result = json.loads(out.read_text())
    assert result["status"] == "failed" and "out of memory" in result["summary"]["errors"][0]
