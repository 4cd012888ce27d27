"""Simulation settings: built-in defaults, overridable by a --config YAML validated strictly.

Every key a config file may set exists in DEFAULTS (unknown keys are errors naming their
dotted path); values must have the default's type. Two sections are open-ended:
`model_configs` (new or replacement model shapes) and `user_templates` (new templates must
give every template field).
"""

from __future__ import annotations

import copy
from typing import Any

DEFAULTS: dict[str, Any] = {
    # Request shapes (the MLCommons reference's rules). A user picks one template (equal
    # weights: the reference's uniform choice) and, when created, draws from it once: a context
    # budget C, a generation budget G and a think time T. Each request then has a context of
    # uniform(C/4, C) tokens, generates uniform(G/4, G) tokens and is enqueued T x
    # uniform(think_time_jitter) seconds after the user's previous request (the first one
    # after one such pause). A user does not wait for its responses. Ranges are [low, high].
    "user_templates": {
        "chatbot": {"context_tokens": [512, 4096], "generation_tokens": [50, 200], "think_time_s": [0.1, 0.5], "weight": 1.0},
        "coding": {"context_tokens": [4096, 25000], "generation_tokens": [100, 500], "think_time_s": [0.2, 1.0], "weight": 1.0},
        "document": {"context_tokens": [4096, 16384], "generation_tokens": [200, 800], "think_time_s": [0.3, 1.5], "weight": 1.0},
    },
    "users": {"think_time_jitter": [0.8, 1.2]},
    # Simulated decode time per generated token, seconds, per --generation-mode.
    "generation_timing": {"none": 0.0, "fast": 0.002, "realistic": 0.030},
    # Priority (higher is served first) and latency targets of each QoS class.
    "qos_profiles": {
        "interactive": {"priority": 3, "sla_ms": {"p95": 50.0, "p99": 100.0, "p999": 150.0, "p9999": 200.0}},
        "responsive": {"priority": 2, "sla_ms": {"p95": 100.0, "p99": 200.0, "p999": 350.0, "p9999": 500.0}},
        "batch": {"priority": 1, "sla_ms": {"p95": 1000.0, "p99": 5000.0, "p999": 7500.0, "p9999": 10000.0}},
    },
    # A user is interactive with this probability, responsive up to the threshold, else batch.
    "qos_distribution": {"interactive_probability": 0.15, "responsive_threshold": 0.50},
    # System prompts: each request carries one with this probability, picked uniformly from
    # system_prompt_tokens (the reference's three prompts: 5, 9 and 6 words, counted as tokens).
    # Its KV is never written: the lookup misses, and the prompt's tokens are taken off the
    # KV the request writes.
    "prefix_cache": {"system_prompt_tokens": [5, 9, 6], "probability": 0.2},
    # Multi-turn: a conversation's turn n re-reads the KV of turns 1..n-1 before writing its own;
    # before each later request the conversation ends with new_conversation_probability, and
    # always after max_turns turns.
    "conversation": {"max_turns": 50, "new_conversation_probability": 0.2},
    # RAG: a corpus of documents whose KV is ingested up front; requests retrieve top_k of them.
    "rag": {"top_k": 3, "request_probability": 0.3, "doc_tokens": [4000, 12000],
            "doc_tokens_large_model": [1024, 4096], "zipf_exponent": 1.1},
    # Decode re-reads the request's KV 1 + ceil(generated / batch_tokens) times (max_reads_per_request
    # caps that when above 0); a context of prefill_only_context_tokens or more is prefill only.
    "decode": {"batch_tokens": 32, "max_reads_per_request": 0, "prefill_only_context_tokens": 10000},
    # Worker threads: min(users, max_workers); the random pool KV bytes are copied from; the I/O
    # chunk every read and write moves through; requests queued at most (a user waits beyond it).
    "engine": {"max_workers": 500, "data_pool_mib": 64, "io_chunk_kib": 4096, "max_queued_requests": 100000},
    # Storage tier: share of free space used when --storage-capacity-gb is 0 (auto).
    "storage": {"auto_capacity_fraction": 0.8},
}
PROBABILITIES = ("qos_distribution.interactive_probability", "qos_distribution.responsive_threshold",
                 "prefix_cache.probability", "conversation.new_conversation_probability", "rag.request_probability",
                 "storage.auto_capacity_fraction")
AT_LEAST_ONE = ("conversation.max_turns", "rag.top_k", "decode.batch_tokens",
                "decode.prefill_only_context_tokens", "engine.max_workers", "engine.data_pool_mib",
                "engine.io_chunk_kib", "engine.max_queued_requests")
TOKEN_RANGES = ("context_tokens", "generation_tokens", "doc_tokens", "doc_tokens_large_model")
# Settings that are a list of token counts (any length, at least one), not a [low, high] range.
COUNT_LISTS = ("prefix_cache.system_prompt_tokens",)


class ConfigError(ValueError):
    """A --config file that does not describe a valid simulation."""


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_value(path: str, default: Any, value: Any) -> Any:
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ConfigError(f"{path}: expected true or false, got {value!r}")
        return value
    if _is_number(default):
        if not _is_number(value) or value < 0:
            raise ConfigError(f"{path}: expected a number >= 0, got {value!r}")
        if isinstance(default, int):
            if not float(value).is_integer():
                raise ConfigError(f"{path}: expected a whole number, got {value!r}")
            return int(value)
        return float(value)
    if path in COUNT_LISTS:
        if not (isinstance(value, list) and value and all(_is_number(v) and v >= 1 and float(v).is_integer()
                                                           for v in value)):
            raise ConfigError(f"{path}: expected a non-empty list of whole token counts >= 1, got {value!r}")
        return [int(v) for v in value]
    if isinstance(default, list):
        if not (isinstance(value, list) and len(value) == 2 and all(_is_number(v) and v >= 0 for v in value)):
            raise ConfigError(f"{path}: expected a range [low, high] of numbers >= 0, got {value!r}")
        if value[0] > value[1]:
            raise ConfigError(f"{path}: range low {value[0]} is above high {value[1]}")
        return list(value)
    raise ConfigError(f"{path}: unsupported setting")  # pragma: no cover - DEFAULTS holds no other types


def _merge(path: str, default: dict[str, Any], override: Any, open_keys: bool = False,
           template: dict[str, Any] | None = None) -> dict[str, Any]:
    if not isinstance(override, dict):
        raise ConfigError(f"{path or 'config'}: expected a mapping, got {type(override).__name__}")
    merged = copy.deepcopy(default)
    for key, value in override.items():
        dotted = f"{path}.{key}" if path else str(key)
        if key in default:
            base = default[key]
            merged[key] = _merge(dotted, base, value) if isinstance(base, dict) else _check_value(dotted, base, value)
        elif open_keys and template is not None:
            if not isinstance(value, dict) or set(value) != set(template):
                raise ConfigError(f"{dotted}: a new entry must set exactly {', '.join(sorted(template))}")
            merged[key] = _merge(dotted, template, value)
        else:
            allowed = ", ".join(sorted(default)) or "nothing"
            raise ConfigError(f"{dotted}: unknown key (allowed here: {allowed})")
    return merged


def build_config(override: dict[str, Any] | None = None) -> dict[str, Any]:
    """DEFAULTS with a parsed --config mapping applied; raises ConfigError on any bad key or value."""
    if override is not None and not isinstance(override, dict):
        raise ConfigError(f"expected a mapping of sections at the top, found a {type(override).__name__}")
    override = dict(override or {})
    models = override.pop("model_configs", None)
    templates = override.pop("user_templates", None)
    config = _merge("", {k: v for k, v in DEFAULTS.items() if k != "user_templates"}, override)
    config["user_templates"] = copy.deepcopy(DEFAULTS["user_templates"])
    if templates is not None:
        config["user_templates"] = _merge("user_templates", DEFAULTS["user_templates"], templates, open_keys=True,
                                          template=DEFAULTS["user_templates"]["chatbot"])
    if models is not None and not isinstance(models, dict):
        raise ConfigError("model_configs: expected a mapping of model name to its shape")
    config["model_configs"] = copy.deepcopy(models or {})
    _semantic_checks(config)
    return config


def _get(config: dict[str, Any], dotted: str) -> Any:
    node: Any = config
    for part in dotted.split("."):
        node = node[part]
    return node


def _semantic_checks(config: dict[str, Any]) -> None:
    for dotted in PROBABILITIES:
        if _get(config, dotted) > 1:
            raise ConfigError(f"{dotted}: a probability must be between 0 and 1")
    if config["qos_distribution"]["interactive_probability"] > config["qos_distribution"]["responsive_threshold"]:
        raise ConfigError("qos_distribution: interactive_probability must not exceed responsive_threshold")
    for dotted in AT_LEAST_ONE:
        if _get(config, dotted) < 1:
            raise ConfigError(f"{dotted}: must be at least 1")
    for name, spec in config["user_templates"].items():
        if spec["context_tokens"][0] < 1 or spec["generation_tokens"][0] < 1:
            raise ConfigError(f"user_templates.{name}: token ranges must start at 1 or more")
    if sum(t["weight"] for t in config["user_templates"].values()) <= 0:
        raise ConfigError("user_templates: at least one template needs a weight above 0")
    for section in ("prefix_cache", "conversation", "rag"):
        for key, value in config[section].items():
            if key in TOKEN_RANGES and value[0] < 1:
                raise ConfigError(f"{section}.{key}: token ranges must start at 1 or more")


def load_config_file(path: str) -> dict[str, Any]:
    """Parse and validate a --config YAML file."""
    import yaml

    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:  # one line: where and what, not PyYAML's three-line report
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"config {path} is not valid YAML{where}: {getattr(exc, 'problem', None) or exc}") from None
    if data is None:
        data = {}
    try:
        return build_config(data)
    except ConfigError as exc:
        raise ConfigError(f"config {path}: {exc}") from None
