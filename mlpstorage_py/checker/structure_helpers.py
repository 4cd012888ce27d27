"""Helpers shared by the section 1-6 rules: leaf records, names and values, timestamps, the
edition a submission is judged under, system descriptions and the workload directories and
leaves of the judged submissions. Registers no rule.

Listing and reading are files.py's, made once per validation; what is derived here is kept on
the package, once per validation, too.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path, PurePosixPath
from typing import Any, Iterator

from mlpstorage_py.results.tree.files import DIR, FILE, child, entries, load_json, load_yaml, names, real_dir, visible
from mlpstorage_py.results.tree.package import Leaf, Package
from mlpstorage_py.results.tree.values import apart, as_int, as_number, dig, leaf_time, parse_time  # noqa: F401 - TRANSITION
from mlpstorage_py.results.tree.layout import TIMESTAMP  # noqa: F401 - TRANSITION
from mlpstorage_py.results.leaf import DATETIME_FORMAT
from mlpstorage_py.rules import tables



# --- the leaf as recorded ------------------------------------------------------------------

def LeafRecord(path: Path) -> Leaf:  # noqa: N802 - TRANSITION (issue 26): goes with the rules not yet scoped
    return Leaf.at(path)


def record(pkg: Package, path: Path) -> Leaf:
    """TRANSITION (issue 26): the package's leaf at a path."""
    return pkg.leaf_at(path)


# --- which edition judges a submission -----------------------------------------------------

def edition_of(pkg: Package, division: str, org: str) -> str:
    """The edition a submission declares in submission.yaml, else the current edition."""
    cache = vars(pkg).setdefault("_editions", {})
    if (division, org) not in cache:
        known = tables.editions()["editions"]
        chosen = tables.editions()["current_edition"]
        found = pkg.manifest(division, org)
        if found and isinstance(found[1], dict) and str(found[1].get("rules_edition")) in known:
            chosen = str(found[1].get("rules_edition"))
        cache[(division, org)] = chosen
    return cache[(division, org)]


def checker_of(pkg: Package, division: str, org: str) -> dict:
    """The edition's checker block; empty when the edition is not checkable (EDN-04 skips it)."""
    return tables.checker(edition_of(pkg, division, org))


def sanctioned(pkg: Package, division: str, org: str, family: str | None = None) -> dict:
    """{family: {model: [accelerators]}} the edition sanctions for a division (or one family's)."""
    table = tables.edition(edition_of(pkg, division, org)).get(division) or {}
    return table if family is None else (table.get(family) or {})


def system_description(pkg: Package, division: str, org: str, system: str) -> tuple[dict | None, str | None, Path]:
    """(system_under_test, problem, path) of systems/<system>.yaml, looked up once per system."""
    cache = vars(pkg).setdefault("_systems", {})
    if (division, org, system) not in cache:
        path = pkg.root / division / org / "systems" / f"{system}.yaml"
        data, problem = load_yaml(path) if real_dir(path.parent) else (None, "systems/ is not a directory")
        if problem is None:
            sut = dig(data, "system_under_test")
            if not isinstance(sut, dict):
                data, problem = None, f"{path.name} has no system_under_test mapping"
            else:
                data = sut
        cache[(division, org, system)] = (data, problem, path)
    return cache[(division, org, system)]


@dataclass(frozen=True)
class Workload:
    division: str
    org: str
    system: str
    family: str
    model: str
    path: Path
    checker: dict


def workloads(pkg: Package, family: str) -> list[Workload]:
    """Every real workload directory of a family the edition sanctions, in the submissions the
    checker can judge (a directory of any other name is reported by 2.1.11/2.1.21 alone), and
    in a part of the package, its systems'.
    Listed once per validation: many rules ask."""
    cache = vars(pkg).setdefault("_workloads", {})
    if family not in cache:
        cache[family] = list(_find_workloads(pkg, family))
    return cache[family]


def _find_workloads(pkg: Package, family: str) -> Iterator[Workload]:
    for division, org, org_dir in pkg.orgs:
        block = checker_of(pkg, division, org)
        if not block:
            continue
        models = sanctioned(pkg, division, org, family)
        for system, kind, system_dir in visible(org_dir / "results"):
            family_dir = system_dir / family
            if kind != DIR or not pkg.includes(system_dir) or not real_dir(family_dir):
                continue
            for model, mkind, path in visible(family_dir):
                if mkind == DIR and model in models:
                    yield Workload(division, org, system, family, model, path, block)


def timestamp_dirs(directory: Path) -> list[Path]:
    return [p for n, k, p in entries(directory) if k == DIR and TIMESTAMP.match(n)]


def training_leaves(pkg: Package, phase: str) -> list[tuple[Workload, Path]]:
    """The timestamp directories of one phase of every training workload (listed once)."""
    cache = vars(pkg).setdefault("_leaves", {})
    if phase not in cache:
        cache[phase] = [(wl, leaf) for wl in workloads(pkg, "training") for leaf in timestamp_dirs(wl.path / phase)]
    return cache[phase]


def checkpointing_leaves(pkg: Package) -> list[tuple[Workload, Path]]:
    """The timestamp directories of every checkpointing workload (listed once)."""
    cache = vars(pkg).setdefault("_leaves", {})
    if "checkpointing" not in cache:
        cache["checkpointing"] = [(wl, leaf) for wl in workloads(pkg, "checkpointing") for leaf in timestamp_dirs(wl.path)]
    return cache["checkpointing"]
