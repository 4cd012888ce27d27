"""Checkpoint layout of a llama-style transformer: which rank writes which file, to the byte.

Pure arithmetic, no I/O, so the layout can be tested for every CLOSED model at its full rank
count without touching storage.

Model. Parameters of a llama transformer with untied embeddings: input embedding and output head
(vocab x hidden each); per layer attention q and o (hidden x hidden), k and v
(hidden x kv_dim, kv_dim = hidden*kv_heads/heads, which need not make head_dim an integer:
llama3-1t has hidden 25872 and 192 heads), a SwiGLU MLP (3 x hidden x ffn) and two RMSNorm
vectors; a final RMSNorm. Model state is one value per parameter in ``model_datatype``;
optimizer state is Adam in ``optimizer_datatype``: master weights and two moments, three values
per parameter.

Optimizer partition overhead. Each optimizer partition (one per data-parallel rank with ZeRO
>= 1, one per model shard without ZeRO) also carries, for each of its three Adam tensors,
5 x hidden values of per-partition state. The MLPerf reference sizes its optimizer shards that
way, and without the term llama3-8b on 8 ranks misses the published checkpoint_size_GB
(104.70452117919922 GiB) by exactly 8 x 3 x 5 x 4096 x 4 bytes.

Parallelism. Tensor parallelism (TP) splits every tensor of a layer across tensor ranks (vectors
too, so each byte is stored once); pipeline parallelism (PP) gives each stage a contiguous run
of layers, the first ``num_layers % PP`` stages one more, the embedding to the first stage and
the head and final norm to the last. Data parallelism DP is ``parallelism.data`` when given,
else world_size / (TP*PP), which must divide exactly (DP is 1 on fewer than TP*PP ranks). ZeRO-3 partitions both model and
optimizer state of each (tp, pp) shard across DP; ZeRO-1/2 partition only the optimizer state
and the model state of each shard is written once, by dp rank 0; ZeRO-0 writes both once per
shard. Integer remainders go to the lowest-numbered partitions.

Ranks. The job has V = TP*PP*DP virtual ranks, numbered with tp fastest, then pp, then dp.
When the MPI world is smaller than V (the 8-process subset of a large model, or a small test
run), virtual rank v is folded onto MPI rank v % world_size, so the whole checkpoint is still
written, by fewer processes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

GIB = 1 << 30
DTYPE_BYTES = {"fp16": 2, "bf16": 2, "fp32": 4, "fp64": 8, "int8": 1, "uint8": 1}
ADAM_TENSORS = 3
PARTITION_EXTRA_PER_HIDDEN = 5


@dataclass(frozen=True)
class Transformer:
    """The model dimensions the checkpoint size depends on."""

    num_layers: int
    vocab_size: int
    hidden_size: int
    ffn_hidden_size: int
    num_attention_heads: int
    num_kv_heads: int

    @property
    def kv_dim(self) -> int:
        return self.hidden_size * self.num_kv_heads // self.num_attention_heads

    def layer_tensors(self) -> tuple[int, ...]:
        """Element counts of one decoder layer's tensors: q, k, v, o, gate, up, down, two norms."""
        h, f, kv = self.hidden_size, self.ffn_hidden_size, self.kv_dim
        return (h * h, h * kv, h * kv, h * h, h * f, h * f, f * h, h, h)

    def param_count(self) -> int:
        h = self.hidden_size
        return 2 * self.vocab_size * h + self.num_layers * sum(self.layer_tensors()) + h


@dataclass(frozen=True)
class ShardFile:
    """One file of a checkpoint: its name inside the checkpoint directory and its exact size."""

    name: str
    nbytes: int
    kind: str  # "model" or "optim"


@dataclass(frozen=True)
class Layout:
    """Who writes what for one checkpoint, and the totals the summary reports."""

    world_size: int
    tensor: int
    pipeline: int
    data: int
    zero_stage: int
    model_bytes: int
    optimizer_bytes: int
    rank_files: tuple[tuple[ShardFile, ...], ...]

    @property
    def total_bytes(self) -> int:
        return self.model_bytes + self.optimizer_bytes

    @property
    def total_gib(self) -> float:
        return self.total_bytes / GIB

    def files(self, rank: int) -> tuple[ShardFile, ...]:
        return self.rank_files[rank]

    def rank_bytes(self, rank: int) -> int:
        return sum(f.nbytes for f in self.rank_files[rank])


def split(total: int, parts: int) -> list[int]:
    """Split an integer as evenly as possible, remainder to the first parts."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def _dtype(name: str, what: str) -> int:
    try:
        return DTYPE_BYTES[str(name).lower()]
    except KeyError:
        raise ValueError(f"unsupported {what} {name!r} (known: {', '.join(DTYPE_BYTES)})") from None


def _positive(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{what} must be a positive integer, got {value!r}")
    return value


def transformer_from(model: Mapping[str, Any]) -> Transformer:
    """Read the edition-3.0 ``workload.model`` spelling into a Transformer."""
    t = model.get("transformer") or {}
    try:
        dims = Transformer(
            num_layers=_positive(model["num_layers"], "model.num_layers"),
            vocab_size=_positive(t["vocab_size"], "transformer.vocab_size"),
            hidden_size=_positive(t["hidden_size"], "transformer.hidden_size"),
            ffn_hidden_size=_positive(t["ffn_hidden_size"], "transformer.ffn_hidden_size"),
            num_attention_heads=_positive(t["num_attention_heads"], "transformer.num_attention_heads"),
            num_kv_heads=_positive(t.get("num_kv_heads", t["num_attention_heads"]), "transformer.num_kv_heads"),
        )
    except KeyError as missing:
        raise ValueError(f"workload model lacks {missing.args[0]!r}") from None
    if dims.hidden_size * dims.num_kv_heads % dims.num_attention_heads:
        raise ValueError(f"hidden_size x num_kv_heads ({dims.hidden_size} x {dims.num_kv_heads}) is not a "
                         f"multiple of num_attention_heads {dims.num_attention_heads}")
    return dims


def stage_layers(num_layers: int, pipeline: int) -> list[range]:
    """Contiguous layer ranges per pipeline stage; the first num_layers % pipeline get one more."""
    if pipeline > num_layers:
        raise ValueError(f"pipeline parallelism {pipeline} exceeds num_layers {num_layers}: "
                         "a stage would hold no layers")
    ranges, start = [], 0
    for count in split(num_layers, pipeline):
        ranges.append(range(start, start + count))
        start += count
    return ranges


def shard_params(dims: Transformer, tensor: int, pipeline: int) -> list[list[int]]:
    """Parameters of each (pp, tp) model shard: ``result[pp][tp]``."""
    per_layer = [0] * tensor
    for count in dims.layer_tensors():
        for t, part in enumerate(split(count, tensor)):
            per_layer[t] += part
    embedding = split(dims.vocab_size * dims.hidden_size, tensor)
    final_norm = split(dims.hidden_size, tensor)
    shards = []
    for p, layers in enumerate(stage_layers(dims.num_layers, pipeline)):
        row = [len(layers) * per_layer[t] for t in range(tensor)]
        for t in range(tensor):
            if p == 0:
                row[t] += embedding[t]
            if p == pipeline - 1:
                row[t] += embedding[t] + final_norm[t]
        shards.append(row)
    return shards


def data_parallel(parallelism: Mapping[str, Any], world_size: int) -> int:
    """DP degree: ``parallelism.data`` if given, else world_size / (TP*PP), which must divide."""
    tensor = _positive(parallelism.get("tensor", 1), "parallelism.tensor")
    pipeline = _positive(parallelism.get("pipeline", 1), "parallelism.pipeline")
    shards = tensor * pipeline
    if parallelism.get("data") is not None:
        data = _positive(parallelism["data"], "parallelism.data")
        if world_size > shards * data:
            raise ValueError(f"world size {world_size} exceeds the job's TP*PP*DP = "
                             f"{tensor}*{pipeline}*{data} = {shards * data} ranks")
        return data
    if world_size < shards:
        return 1
    if world_size % shards:
        raise ValueError(f"world size {world_size} is not a multiple of TP*PP = {tensor}*{pipeline} = {shards}; "
                         f"use a multiple of {shards} or fewer than {shards} ranks")
    return world_size // shards


def build_layout(workload: Mapping[str, Any], world_size: int) -> Layout:
    """The checkpoint layout of ``workload`` (the edition-3.0 ``workload:`` dict) on ``world_size`` ranks."""
    _positive(world_size, "world size")
    if not isinstance(workload.get("model"), Mapping):
        raise ValueError("workload has no 'model' section")
    model = workload["model"]
    dims = transformer_from(model)
    par = model.get("parallelism") or {}
    tensor = _positive(par.get("tensor", 1), "parallelism.tensor")
    pipeline = _positive(par.get("pipeline", 1), "parallelism.pipeline")
    zero = par.get("zero_stage", 0)
    if zero not in (0, 1, 2, 3):
        raise ValueError(f"parallelism.zero_stage must be 0, 1, 2 or 3, got {zero!r}")
    data = data_parallel(par, world_size)
    model_width = _dtype(model.get("model_datatype", "fp16"), "model_datatype")
    optim_width = ADAM_TENSORS * _dtype(model.get("optimizer_datatype", "fp32"), "optimizer_datatype")
    partition_extra = PARTITION_EXTRA_PER_HIDDEN * dims.hidden_size * optim_width

    per_rank: list[list[ShardFile]] = [[] for _ in range(world_size)]
    params = shard_params(dims, tensor, pipeline)
    for dp in range(data):
        for pp in range(pipeline):
            for tp in range(tensor):
                shard = params[pp][tp]
                part = split(shard, data)[dp]
                tag = f"tp{tp}_pp{pp}"
                files = per_rank[(tp + tensor * (pp + pipeline * dp)) % world_size]
                if zero == 3:
                    files.append(ShardFile(f"model_{tag}_dp{dp}.pt", part * model_width, "model"))
                elif dp == 0:
                    files.append(ShardFile(f"model_{tag}.pt", shard * model_width, "model"))
                if zero >= 1:
                    files.append(ShardFile(f"optim_{tag}_dp{dp}.pt", part * optim_width + partition_extra, "optim"))
                elif dp == 0:
                    files.append(ShardFile(f"optim_{tag}.pt", shard * optim_width + partition_extra, "optim"))
    partitions = tensor * pipeline * (data if zero >= 1 else 1)
    params_total = dims.param_count()
    return Layout(world_size=world_size, tensor=tensor, pipeline=pipeline, data=data, zero_stage=zero,
                  model_bytes=params_total * model_width,
                  optimizer_bytes=params_total * optim_width + partitions * partition_extra,
                  rank_files=tuple(tuple(files) for files in per_rank))
