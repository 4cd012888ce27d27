"""Which units the checker judges, and by which edition's numbers: one reading for every rule file.

A submission is judged under the edition its submission.yaml declares (Package.edition_of); an
edition without a checker block is not checkable (EDN-04 reports it, and no workload rule judges
anything there). Within a checkable edition the workload rules judge a result or leaf only under
a system directory that is not dot-prefixed (clutter, not listed) and a model the edition
sanctions for its benchmark: a directory of any other name is reported by 2.1.10, 2.1.11 and
2.1.21 alone, so it is not reported again rule by rule. A rule file that filters otherwise builds
its filter from these functions and says why.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar, cast

from mlpstorage_py.results.tree.package import Leaf, Package, Result, System
from mlpstorage_py.rules import tables

Unit = Leaf | Result | System
U = TypeVar("U")
T = TypeVar("T")


def per_unit(func: Callable[[U], T]) -> Callable[[U], T]:
    """Remember func's answer for the last unit asked: a unit's checks run one after another,
    and several ask the same fixed fact of it, so it is worked out once. The unit is held (one
    object, whose records its system's release drops), so no other can take its identity."""
    last: list[Any] = [None, None]  # the unit, its answer

    @functools.wraps(func)
    def asked(unit: U) -> T:
        if last[0] is not unit:
            last[1] = func(unit)
            last[0] = unit
        return cast(T, last[1])
    return asked


def package_of(unit: Unit) -> Package:
    """The unit's package: a leaf and a system hold it, a result reaches it through its system."""
    package = unit.system.package if isinstance(unit, Result) else unit.package
    assert package is not None, "the checker reads a leaf within its package"
    return package


def system_name(unit: Unit) -> str:
    """The name of the system directory a unit is filed under (a leaf holds it as a string)."""
    if isinstance(unit, System):
        return unit.name
    return unit.system.name if isinstance(unit, Result) else unit.system


def checker_block(unit: Unit) -> dict[str, Any]:
    """The checker block of the edition the unit's submission declares; {} when it is not checkable."""
    return tables.checker(package_of(unit).edition_of(unit.division, unit.org))


def families(unit: Unit) -> dict[str, Any]:
    """{family: {model: [accelerators]}} the unit's edition sanctions in its division."""
    return tables.edition(package_of(unit).edition_of(unit.division, unit.org)).get(unit.division) or {}


def sanctioned(unit: Unit, family: str) -> dict[str, Any]:
    """{model: [accelerators]} the unit's edition sanctions for one family in its division."""
    return families(unit).get(family) or {}


def judged_system(system: System) -> bool:
    """Whether the listing rules (2.1.10, 2.1.11, 2.1.21) judge a system directory: checkable
    edition, name not dot-prefixed."""
    return not system.name.startswith(".") and bool(checker_block(system))


@per_unit
def judged(unit: Leaf | Result) -> dict[str, Any]:
    """The checker block that judges a leaf or result, {} when the rules pass it by: its
    edition is not checkable, its system directory is dot-prefixed or its model is not one the
    edition sanctions for its benchmark."""
    block = checker_block(unit)
    if not block or system_name(unit).startswith(".") or unit.model not in sanctioned(unit, unit.benchmark):
        return {}
    return block


def stamped_checker_block(leaf: Leaf) -> dict[str, Any]:
    """The checker block of the edition the leaf's provenance stamp names (the current edition
    for an unknown stamp): section 3 reads its numbers from the edition the run was made under,
    not from the one the package declares."""
    known = tables.editions()["editions"]
    return tables.checker(leaf.stamped_edition if leaf.stamped_edition in known else tables.editions()["current_edition"])
