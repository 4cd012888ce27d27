"""Model shapes and the KV-cache bytes one token occupies."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "int8": 1}
MODELS_ENV = "KVCACHE_MODELS_FILE"
# configs/kvcache/models.yaml of the checkout this package sits in (kv_cache_benchmark/kvcache_sim/..).
DEFAULT_MODELS_FILE = Path(__file__).resolve().parents[2] / "configs" / "kvcache" / "models.yaml"
_FIELDS = {"name", "num_layers", "hidden_size", "num_heads", "kv_heads", "head_dim", "dtype", "attention",
           "kv_lora_rank", "qk_rope_head_dim"}


class ModelError(ValueError):
    """A model table entry that cannot describe a KV cache."""


@dataclass(frozen=True)
class ModelConfig:
    key: str
    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    kv_heads: int
    dtype: str = "float16"
    head_dim: int | None = None
    attention: str = "gqa"  # mha/gqa share one formula; mla is DeepSeek's latent attention
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def effective_head_dim(self) -> int:
        return self.head_dim or self.hidden_size // self.num_heads

    @property
    def kv_bytes_per_token(self) -> int:
        if self.attention == "mla":
            return self.num_layers * (self.kv_lora_rank + self.qk_rope_head_dim) * self.dtype_bytes
        return self.num_layers * self.kv_heads * self.effective_head_dim * 2 * self.dtype_bytes

    @property
    def elements_per_token(self) -> int:
        return self.kv_bytes_per_token // self.dtype_bytes

    @property
    def is_large(self) -> bool:
        """Large models get shorter RAG documents (their KV per token is large)."""
        return self.hidden_size >= 8192 or self.num_layers >= 64

    def as_dict(self) -> dict[str, Any]:
        return {"key": self.key, "name": self.name, "num_layers": self.num_layers, "hidden_size": self.hidden_size,
                "num_heads": self.num_heads, "kv_heads": self.kv_heads, "head_dim": self.effective_head_dim,
                "dtype": self.dtype, "attention": self.attention, "kv_bytes_per_token": self.kv_bytes_per_token}


def _positive_int(key: str, field: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ModelError(f"model {key}: {field} must be a positive integer, not {value!r}")
    return value


def model_from_dict(key: str, spec: Mapping[str, Any]) -> ModelConfig:
    unknown = set(spec) - _FIELDS
    if unknown:
        raise ModelError(f"model {key}: unknown field(s) {', '.join(sorted(unknown))} (allowed: {', '.join(sorted(_FIELDS))})")
    missing = {"num_layers", "hidden_size", "num_heads", "kv_heads"} - set(spec)
    if missing:
        raise ModelError(f"model {key}: missing {', '.join(sorted(missing))}")
    dtype = spec.get("dtype", "float16")
    if dtype not in DTYPE_BYTES:
        raise ModelError(f"model {key}: dtype must be one of {', '.join(DTYPE_BYTES)}, not {dtype!r}")
    attention = spec.get("attention", "gqa")
    if attention not in ("mha", "gqa", "mla"):
        raise ModelError(f"model {key}: attention must be mha, gqa or mla, not {attention!r}")
    model = ModelConfig(
        key=key, name=str(spec.get("name", key)), dtype=dtype, attention=attention,
        num_layers=_positive_int(key, "num_layers", spec["num_layers"]),
        hidden_size=_positive_int(key, "hidden_size", spec["hidden_size"]),
        num_heads=_positive_int(key, "num_heads", spec["num_heads"]),
        kv_heads=_positive_int(key, "kv_heads", spec["kv_heads"]),
        head_dim=_positive_int(key, "head_dim", spec["head_dim"]) if spec.get("head_dim") is not None else None,
        kv_lora_rank=_positive_int(key, "kv_lora_rank", spec["kv_lora_rank"]) if attention == "mla" else 0,
        qk_rope_head_dim=_positive_int(key, "qk_rope_head_dim", spec["qk_rope_head_dim"]) if attention == "mla" else 0,
    )
    if attention != "mla" and model.head_dim is None and model.hidden_size % model.num_heads:
        raise ModelError(f"model {key}: hidden_size {model.hidden_size} is not a multiple of num_heads {model.num_heads}; give head_dim")
    return model


def models_file(explicit: str | os.PathLike[str] | None = None) -> Path:
    path = Path(explicit or os.environ.get(MODELS_ENV) or DEFAULT_MODELS_FILE)
    if not path.is_file():
        raise ModelError(f"model table {path} not found (pass --models-file or set {MODELS_ENV})")
    return path


def load_models(path: str | os.PathLike[str] | None = None,
                extra: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, ModelConfig]:
    """The model table from YAML, with `extra` entries (a --config `model_configs`) on top."""
    import yaml

    with open(models_file(path), encoding="utf-8") as fh:
        table = yaml.safe_load(fh) or {}
    entries = dict(table.get("models") or {})
    entries.update(extra or {})
    return {key: model_from_dict(key, spec or {}) for key, spec in entries.items()}
