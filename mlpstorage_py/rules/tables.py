"""Read the YAML tables under rules/ once; every rule number in code comes from here."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from mlpstorage_py import RULES_EDITION

RULES_DIR = Path(__file__).resolve().parent


@functools.cache
def _load(name: str) -> dict[str, Any]:
    import yaml  # loaded with the first table, so commands that read none (--help, version) skip it

    with open(RULES_DIR / name, encoding="utf-8") as fh:
        return yaml.load(fh, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def editions() -> dict[str, Any]:
    """The whole editions table (schema mlps-rules-editions/1)."""
    return _load("editions.yaml")


@functools.cache  # the checker asks some twenty times a leaf
def edition(name: str = RULES_EDITION) -> dict[str, Any]:
    """One edition's entry; KeyError for an edition the table does not know."""
    return editions()["editions"][name]


@functools.cache
def checker(name: str = RULES_EDITION) -> dict[str, Any]:
    """The checker block of an edition (empty when the edition is not checkable)."""
    return edition(name).get("checker") or {}


def kvcache_options(configs: Path) -> dict[str, Any]:
    """<configs>/kvcache/options.yaml: Table KVCache-1 (its Options keyed as strings) and the global
    flags; read here so the benchmark that emits from it and the checker that judges by it share one reading."""
    import yaml

    with open(configs / "kvcache" / "options.yaml", encoding="utf-8") as fh:
        table = yaml.safe_load(fh)
    table["options"] = {str(k): v for k, v in table["options"].items()}
    return table


def comparability_classes() -> list[dict[str, Any]]:
    return editions()["comparability_classes"]


def core_config_allowlist(family: str) -> tuple[str, dict[str, list[str]]] | None:
    """(allowlist id, {include, exclude}) for a benchmark family, or None if it has none."""
    table = _load("core_config_keys.yaml")
    allowlist_id = table["families"].get(family)
    if allowlist_id is None:
        return None
    return allowlist_id, table["allowlists"][allowlist_id]


@functools.cache  # the checker asks of every leaf
def param_allowlist(family: str, mode: str) -> frozenset[str]:
    """Keys a user may override with --params in a division (open includes closed's)."""
    table = _load("params.yaml")[family]
    allowed = set(table["closed"])
    if mode != "closed":
        allowed |= set(table["open_extra"])
    return frozenset(allowed)


@functools.cache
def tool_injected_params(family: str) -> frozenset[str]:
    return frozenset(_load("params.yaml")[family]["tool_injected"])


def workloads() -> dict[str, Any]:
    """Names accepted per division where no workload file decides it (index types, kv models)."""
    return _load("workloads.yaml")


def rule_index() -> list[dict[str, str]]:
    """Every numbered rule of the edition, in the rules' order (rule_index.yaml)."""
    return _load("rule_index.yaml")["rules"]


def calibrations() -> dict[str, Any]:
    """Where the v3.0 review did not enforce a sentence as written (schema mlps-calibrations/1)."""
    return _load("calibrations.yaml")


def storage_env() -> dict[str, Any]:
    """The object-storage environment table (connection variables and Rules 1.2's backend table)."""
    return _load("storage_env.yaml")


def host_survey() -> dict[str, Any]:
    """The host survey's tunables and environment variables (schema mlps-host-survey/1)."""
    return _load("host_survey.yaml")


def system_description() -> dict[str, Any]:
    """The system description's shape and the results table's SUT vocabulary (schema mlps-system-description/1)."""
    return _load("system_description.yaml")
