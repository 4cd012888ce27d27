"""core-config-v1: a short hash naming the workload a leaf executed (Rules 2.1.6)."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from mlpstorage_py.rules.tables import core_config_allowlist

ALGORITHM = "core-config-v1"
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dict -> {dotted.key: leaf value}; lists are leaves."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, dotted + "."))
        else:
            flat[dotted] = value
    return flat


def canonical(value: Any) -> Any:
    """Spelling-independent value: "true"/"1.0"/1.0 all mean what the engine reads."""
    if isinstance(value, bool):
        return value
    if isinstance(value, list):
        return [canonical(v) for v in value]
    if isinstance(value, str):
        text = value.strip()
        if text.lower() in ("true", "false"):
            return text.lower() == "true"
        if _NUMBER.match(text):
            value = float(text) if any(c in text for c in ".eE") else int(text)
        else:
            return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _selected(key: str, include: list[str], exclude: list[str]) -> bool:
    if key in exclude:
        return False
    for pattern in include:
        if pattern.endswith(".*"):
            if key.startswith(pattern[:-1]):
                return True
        elif key == pattern:
            return True
    return False


def core_config(family: str, parameters: dict[str, Any]) -> dict[str, Any]:
    """The provenance core_config block for resolved workload parameters of a family."""
    entry = core_config_allowlist(family)
    if entry is None:
        return {"algorithm": ALGORITHM, "allowlist": "unknown", "hash": "unknown", "keys": []}
    allowlist_id, spec = entry
    flat = flatten(parameters)
    kept = {k: canonical(v) for k, v in flat.items() if _selected(k, spec["include"], spec.get("exclude") or [])}
    if not kept:
        digest = "unknown"
    else:
        text = json.dumps(kept, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        digest = hashlib.sha256(text.encode("ascii")).hexdigest()[:16]
    return {"algorithm": ALGORITHM, "allowlist": allowlist_id, "hash": digest, "keys": sorted(kept)}
