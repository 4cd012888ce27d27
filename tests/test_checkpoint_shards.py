"""Checkpoint layout arithmetic: sizes against published data, sums over ranks, ZeRO placement."""

from __future__ import annotations

import copy
from collections import Counter

import pytest

from mlpstorage_py.checkpoint.shards import GIB, build_layout, split, stage_layers

PUBLISHED_8B_GIB = 104.70452117919922  # checkpoint_size_GB of the v3.0 llama3-8b results


def workload(layers: int, hidden: int, ffn: int, heads: int, kv: int, tp: int, pp: int, zero: int,
             data: int | None = None, vocab: int = 128256) -> dict:
    parallelism = {"tensor": tp, "pipeline": pp, "zero_stage": zero}
    if data is not None:
        parallelism["data"] = data
    return {"model": {"name": "t", "num_layers": layers, "model_datatype": "fp16", "optimizer_datatype": "fp32",
                      "parallelism": parallelism,
                      "transformer": {"vocab_size": vocab, "hidden_size": hidden, "ffn_hidden_size": ffn,
                                      "num_attention_heads": heads, "num_kv_heads": kv}},
            "checkpoint": {"time_between_checkpoints": 0, "fsync": True}}


# The CLOSED configurations and their rank counts (Table 2 sizes in GiB, measured 1t 15,427).
MODELS = {
    "llama3-8b": (workload(32, 4096, 14336, 32, 8, tp=1, pp=1, zero=3), 8, PUBLISHED_8B_GIB),
    "llama3-70b": (workload(80, 8192, 28672, 128, 8, tp=8, pp=1, zero=3), 64, 912),
    "llama3-405b": (workload(126, 16384, 53248, 128, 8, tp=8, pp=32, zero=1, data=2), 512, 5290),
    "llama3-1t": (workload(128, 25872, 98304, 192, 32, tp=8, pp=64, zero=1), 1024, 15427),
}


def file_sum(layout) -> int:
    return sum(layout.rank_bytes(r) for r in range(layout.world_size))


def test_llama3_8b_matches_published_size_exactly():
    layout = build_layout(MODELS["llama3-8b"][0], 8)
    assert layout.total_gib == PUBLISHED_8B_GIB
    assert layout.total_bytes == round(PUBLISHED_8B_GIB * GIB)


@pytest.mark.parametrize("name", MODELS)
def test_sizes_near_table_2(name):
    wl, ranks, expected = MODELS[name]
    assert build_layout(wl, ranks).total_gib == pytest.approx(expected, rel=0.002)


def test_70b_with_64_heads_would_miss_table_2():
    wl = copy.deepcopy(MODELS["llama3-70b"][0])
    wl["model"]["transformer"]["num_attention_heads"] = 64
    assert build_layout(wl, 64).total_gib == pytest.approx(919.9, abs=0.1)


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("subset", [False, True])
def test_files_sum_to_totals(name, subset):
    wl, ranks, _ = MODELS[name]
    world = 8 if subset else ranks
    layout = build_layout(wl, world)
    assert file_sum(layout) == layout.total_bytes == layout.model_bytes + layout.optimizer_bytes
    assert sum(f.nbytes for r in range(world) for f in layout.files(r) if f.kind == "model") == layout.model_bytes
    assert all(layout.files(r) for r in range(world)), "every rank writes something"
    names = [f.name for r in range(world) for f in layout.files(r)]
    assert len(names) == len(set(names)), "no file is written twice"


def test_model_bytes_are_two_per_parameter():
    layout = build_layout(MODELS["llama3-8b"][0], 8)
    assert layout.model_bytes == 2 * 8_030_261_248
    assert layout.optimizer_bytes == 12 * 8_030_261_248 + 8 * 3 * 5 * 4096 * 4


def test_zero3_partitions_model_and_optimizer_over_dp():
    layout = build_layout(MODELS["llama3-70b"][0], 64)  # TP 8, PP 1, DP 8
    assert layout.data == 8
    for rank in range(64):
        tp, dp = rank % 8, rank // 8
        assert [f.name for f in layout.files(rank)] == [f"model_tp{tp}_pp0_dp{dp}.pt", f"optim_tp{tp}_pp0_dp{dp}.pt"]
    sizes = Counter(f.nbytes for r in range(64) for f in layout.files(r) if f.kind == "model")
    assert max(sizes) - min(sizes) <= 2, "model partitions differ by at most one parameter"


def test_zero1_writes_model_once_per_shard_on_dp0():
    layout = build_layout(MODELS["llama3-405b"][0], 512)  # TP 8, PP 32, DP 2
    assert (layout.tensor, layout.pipeline, layout.data) == (8, 32, 2)
    for rank in range(512):
        kinds = [f.kind for f in layout.files(rank)]
        assert kinds == (["model", "optim"] if rank < 256 else ["optim"])
    assert layout.files(0)[0].name == "model_tp0_pp0.pt"
    assert layout.files(300)[0].name == f"optim_tp{300 % 8}_pp{300 // 8 % 32}_dp1.pt"


def test_pipeline_stages_are_contiguous_with_embedding_first_and_head_last():
    assert stage_layers(126, 32)[0] == range(0, 4) and stage_layers(126, 32)[-1] == range(123, 126)
    wl = workload(4, 64, 128, 4, 2, tp=1, pp=2, zero=0, vocab=1000)
    layout = build_layout(wl, 2)
    layer = 2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 128 + 2 * 64
    first, last = layout.files(0)[0], layout.files(1)[0]
    assert first.nbytes == 2 * (2 * layer + 1000 * 64)
    assert last.nbytes == 2 * (2 * layer + 1000 * 64 + 64)


def test_small_world_folds_shards_round_robin():
    layout = build_layout(MODELS["llama3-70b"][0], 3)  # 8 TP shards on 3 ranks
    assert layout.data == 1
    assert [len(layout.files(r)) for r in range(3)] == [6, 6, 4]
    assert file_sum(layout) == layout.total_bytes


def test_non_divisible_world_size_is_rejected():
    with pytest.raises(ValueError, match="not a multiple of TP\\*PP = 8\\*1 = 8"):
        build_layout(MODELS["llama3-70b"][0], 12)
    with pytest.raises(ValueError, match="exceeds the job's"):
        build_layout(MODELS["llama3-405b"][0], 1024)


def test_bad_model_is_rejected():
    wl = workload(2, 100, 128, 3, 1, tp=1, pp=1, zero=1)
    with pytest.raises(ValueError, match="num_attention_heads"):
        build_layout(wl, 1)
    with pytest.raises(ValueError, match="a stage would hold no layers"):
        build_layout(workload(2, 64, 128, 4, 2, tp=1, pp=4, zero=1), 4)


def test_split_gives_remainder_to_first_parts():
    assert split(10, 4) == [3, 3, 2, 2] and sum(split(7, 7)) == 7
