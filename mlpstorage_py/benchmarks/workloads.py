"""Workload definitions from configs/: the edition-spelled parameters a run starts from."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from mlpstorage_py.errors import NotFoundError, UsageError
from mlpstorage_py.results.code_image import source_root


def configs_dir() -> Path:
    path = source_root() / "configs"
    if not path.is_dir():
        raise NotFoundError(f"workload configs not found at {path}; install mlpstorage from its source checkout (pip install -e .)")
    return path


def available(family: str) -> dict[str, list[str]]:
    """{model: [accelerators with a workload file]} for a family directory under configs/."""
    found: dict[str, list[str]] = {}
    for path in sorted((configs_dir() / family).glob("*_*.yaml")):
        model, _, accel = path.stem.rpartition("_")
        found.setdefault(model, []).append(accel)
    return found


def load(family: str, model: str, accelerator: str) -> dict[str, Any]:
    path = configs_dir() / family / f"{model}_{accelerator}.yaml"
    if not path.is_file():
        supported = ", ".join(available(family).get(model, [])) or "none"
        raise UsageError(f"{family} workload {model} has no configuration for accelerator {accelerator} (supported: {supported})")
    with open(path, encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def apply_overrides(parameters: dict[str, Any], overrides: dict[str, str]) -> dict[str, Any]:
    """Fold KEY=VALUE overrides into a copy of nested parameters, typed as YAML would read them."""
    result = copy.deepcopy(parameters)
    for dotted, text in overrides.items():
        node = result
        *parents, leaf = dotted.split(".")
        for part in parents:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise UsageError(f"--params {dotted}: {part} is a value, not a section")
            node = child
        if isinstance(node.get(leaf), dict):
            raise UsageError(f"--params {dotted}: {dotted} is a section, not a value")
        try:
            node[leaf] = yaml.safe_load(text)
        except yaml.YAMLError:
            raise UsageError(f"--params {dotted}: {text!r} is not a valid value (quote it or fix its brackets)") from None
    return result
