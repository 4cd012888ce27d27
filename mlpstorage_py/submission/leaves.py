"""What status, submit and runs say about each leaf of the one results model (results.tree):
its ID, its size and its image; the results it counts towards, each leaf with its state, are
the model's (results.tree.run_state.Standing).
"""

from __future__ import annotations

import os
from pathlib import Path

from mlpstorage_py.errors import UsageError
from mlpstorage_py.results import code_image
from mlpstorage_py.results.tree import files
from mlpstorage_py.results.tree.package import Leaf, Package


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
    for base, _dirs, names in os.walk(path, followlinks=False):
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
