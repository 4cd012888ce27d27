"""What status, submit and runs say about each leaf of the one results model (results.tree):
its state (results.tree.run_state), its image, the results it counts towards. Only `ok` leaves
count towards a result; `ok` leaves beyond the required number are `extra` (the earliest are
counted, as the rules count runs from the warm-up on).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from mlpstorage_py.results.tree import files
from mlpstorage_py.results.tree.package import Leaf, Package
from mlpstorage_py.errors import UsageError
from mlpstorage_py.results import code_image
from mlpstorage_py.results.tree.run_state import EXTRA, OK, state
from mlpstorage_py.rules.tables import checker

PHASES = {"datasize": 0, "datagen": 1, "run": 2}  # the order a result's leaves are listed in


def leaf_id(pkg: Package, leaf: Leaf) -> str:
    """A leaf's ID is its path relative to the tree root (unique, and what validate prints)."""
    return path_id(pkg, leaf.path)


def path_id(pkg: Package, path: Path) -> str:
    """A path below the tree root, relative to it: cut from the path's string where the root
    is absolute (status asks it of every leaf, and relative_to costs 20 us)."""
    return pkg.relative(path) if pkg.root.is_absolute() else path.relative_to(pkg.root).as_posix()


def size_of(path: Path) -> int:
    """Bytes of the regular files below path, never following a link."""
    total = 0
    for base, dirs, names in os.walk(path, followlinks=False):
        for name in names:
            st = os.lstat(os.path.join(base, name))
            if not os.path.islink(os.path.join(base, name)):
                total += st.st_size
    return total


def image_of(pkg: Package, leaf: Leaf) -> tuple[str, Path | None]:
    """The leaf's code-image pointer (or why there is none) and the pool image it resolves to."""
    if leaf.pointer is None:
        return "none", None
    digest = code_image.parse_pointer(leaf.pointer)
    if digest is None:
        return "malformed", None
    return f"code-{digest[:8]}", pkg.resolve_image(leaf, digest)


def _phases(leaf: Leaf) -> set[str]:
    """The checkpointing phases a leaf performed, from its summary metrics (save/load)."""
    summary = leaf.summary or {}
    metric = summary.get("metric") or {}
    return {phase for phase, key in (("write", "save_checkpoint_io_mean_GB_per_second"),
                                     ("read", "load_checkpoint_io_mean_GB_per_second")) if key in metric}


@dataclass
class Result:
    """One result (Rules 1.3): a workload directory and every leaf of it, each with its state."""

    division: str
    org: str
    system: str
    benchmark: str
    model: str
    workload: Path
    leaves: list[tuple[Leaf, str, str]] = field(default_factory=list)  # (leaf, state, why), in name order

    @property
    def runs(self) -> list[tuple[Leaf, str, str]]:
        return [entry for entry in self.leaves if entry[0].command == "run"]

    @property
    def required(self) -> int:
        """runs_per_result of the edition; a checkpointing result is one combined or two phase invocations."""
        needed = int(checker()["runs_per_result"][self.benchmark])
        if self.benchmark == "checkpointing" and any(_phases(leaf) == {"write", "read"} for leaf, s, _ in self.runs if s == OK):
            return 1
        return needed

    @property
    def present(self) -> int:
        return min(self.required, sum(s == OK for _, s, _ in self.runs))


def results(pkg: Package) -> list[Result]:
    """Every result of the tree with its leaves' states (result_of), in (division, org, system,
    benchmark, model) order."""
    grouped: dict[Path, list[Leaf]] = {}
    for leaf in pkg.leaves:
        grouped.setdefault(leaf.workload_dir, []).append(leaf)
    found = [result_of(leaves) for _, leaves in sorted(grouped.items(), key=lambda item: str(item[0]))]
    return sorted(found, key=lambda r: (r.division, r.org, r.system, r.benchmark, r.model))


def result_of(leaves: list[Leaf]) -> Result:
    """One result from its leaves (one workload directory, in listing order): each with its state,
    datasize, datagen then run, by name; ok run leaves past the required are extra."""
    ordered = sorted(leaves, key=lambda l: (PHASES.get(l.command, 0), l.path.name))
    first = ordered[0]
    result = Result(first.division, first.org, first.system, first.benchmark, first.model, first.workload_dir,
                    [(leaf, *state(leaf)) for leaf in ordered])
    required, counted = result.required, 0
    for i, (leaf, status, why) in enumerate(result.leaves):
        if leaf.command == "run" and status == OK:
            counted += 1
            if counted > required:
                result.leaves[i] = (leaf, EXTRA, f"ok, beyond the {required} run(s) a result counts")
    return result


def placeholders(root: Path, division: str, org: str, system: str) -> list[str]:
    """The FILL IN lines `systems describe` left in the system's description (read as the checker
    reads files: never through a link). The rules' typed fields left blank are the checker's
    4.7.3/4.7.4 findings; these are the free-text ones no rule can judge."""
    from mlpstorage_py.systems.describe import unfilled

    text, _ = files.read_text(root / division / org / "systems" / f"{system}.yaml")
    return unfilled(text) if text else []


def find_leaves(pkg: Package, ids: list[str]) -> list[Leaf]:
    """The leaves the user named, by ID (relative path) or by a unique timestamp; anything else is refused."""
    by_id = {leaf_id(pkg, leaf): leaf for leaf in pkg.leaves}
    found = []
    for given in ids:
        key = given.strip("/")
        if key in by_id:
            found.append(by_id[key])
            continue
        named = [leaf for leaf in pkg.leaves if leaf.path.name == key]
        if len(named) != 1:
            why = "names several leaves; give its full ID" if named else "is no leaf of this tree (see `mlpstorage runs list`)"
            raise UsageError(f"leaf {given!r} {why}")
        found.append(named[0])
    return found


def human(size: int) -> str:
    """Binary units, as the rules mean them."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"
