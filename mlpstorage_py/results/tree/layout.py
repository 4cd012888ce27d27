"""The layout table (rules/layout.yaml) as the writers and the reader use it."""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any, cast

import yaml

TABLE_PATH = Path(__file__).resolve().parents[2] / "rules" / "layout.yaml"
TIMESTAMP = re.compile(r"^\d{8}_\d{6}$")


@functools.cache
def table() -> dict[str, Any]:
    return cast(dict[str, Any], yaml.safe_load(TABLE_PATH.read_text()))


def benchmarks() -> dict[str, dict[str, Any]]:
    return cast(dict[str, dict[str, Any]], table()["benchmarks"])


def leaf_tail(benchmark: str, **names: str) -> Path:
    """The path below <system>/ of the directory that holds a run's timestamp leaves."""
    return Path(*(part.format(**names) for part in benchmarks()[benchmark]["tail"]))


@functools.cache
def leaf_depth(benchmark: str) -> int:
    """Path segments between the benchmark directory and the timestamp directory."""
    return len(benchmarks()[benchmark]["tail"]) - 1


def record_kinds() -> dict[str, dict[str, Any]]:
    return cast(dict[str, dict[str, Any]], table()["records"])


DIVISIONS: tuple[str, ...] = tuple(table()["divisions"])
PRIVATE_DIR: str = table()["private_dir"]
TRASH_DIR = Path(PRIVATE_DIR) / table()["trash_dir"]
RESULTS_TABLE: str = table()["results_table"]
