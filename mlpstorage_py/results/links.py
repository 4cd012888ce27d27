"""Paths written inside a results tree. A tree travels between people, so a symbolic link planted
in it (or a name read from it) must never take a write outside the directory the user named."""

from __future__ import annotations

from pathlib import Path

from mlpstorage_py.errors import ConfigurationError
from mlpstorage_py.results.tree.layout import PRIVATE_DIR


def no_links(root: Path, path: Path) -> Path:
    """path, which must lie below root with no step below root a symbolic link: refused in one
    line otherwise (root itself is where the user asked, link or not)."""
    try:
        rel = path.relative_to(root)
    except ValueError:
        raise ConfigurationError(f"refusing to write {path}: it is not inside the results tree {root}") from None
    if ".." in rel.parts:
        raise ConfigurationError(f"refusing to write {path}: '..' would lead out of the results tree {root}")
    step = root
    for name in rel.parts:
        step = step / name
        if step.is_symlink():
            raise ConfigurationError(f"{step} is a symbolic link; refusing to go through it "
                                     "(it could lead out of the tree)")
    return path


def private_path(root: Path, *parts: str) -> Path:
    """A path below the tree's .mlps/ (history, scratch, trash, submissions), no step of it a link."""
    return no_links(root, root.joinpath(PRIVATE_DIR, *parts))


def make_dirs(root: Path, path: Path) -> Path:
    """Create the directory path below root (no_links first, so nothing is made elsewhere), then
    check that it resolves under root.resolve(): the last word on where the writes below it go."""
    no_links(root, path).mkdir(parents=True, exist_ok=True)
    real, top = path.resolve(), root.resolve()
    if not real.is_relative_to(top):
        raise ConfigurationError(f"refusing to write below {path}: it resolves to {real}, "
                                 f"outside the results tree {top}")
    return path
