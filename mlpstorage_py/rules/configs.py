"""The tool's own configs/: the edition-spelled workload definitions a run starts from, and the
other tables there, read by the benchmarks and the checker alike."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from mlpstorage_py.errors import NotFoundError, UsageError


def source_root() -> Path:
    """The tool's own source tree: the checkout holding pyproject.toml, else the package."""
    package = Path(__file__).resolve().parent.parent
    checkout = package.parent
    return checkout if (checkout / "pyproject.toml").is_file() else package


def configs_dir() -> Path:
    path = source_root() / "configs"
    if not path.is_dir():
        raise NotFoundError(f"workload configs not found at {path}; install mlpstorage from its source checkout (pip install -e .)")
    return path


def load(name: str, what: str) -> dict[str, Any]:
    """configs/dlio/workload/<name>.yaml; `what` names it in the error when it is missing."""
    path = configs_dir() / "dlio" / "workload" / f"{name}.yaml"
    if not path.is_file():
        raise UsageError(f"no workload configuration for {what} ({path.name} is not in {path.parent})")
    with open(path, encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def training(model: str, accelerator: str) -> dict[str, Any]:
    return load(f"{model}_{accelerator}", f"training {model} on {accelerator}")


def datagen(model: str) -> dict[str, Any]:
    return load(f"{model}_datagen", f"generating the {model} dataset")


def checkpointing(model: str) -> dict[str, Any]:
    return load(model.replace("-", "_", 1), f"checkpointing {model}")


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
