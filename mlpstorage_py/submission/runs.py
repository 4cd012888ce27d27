"""`mlpstorage runs list|show|rm|purge|gc`: look after the leaves of a results tree.

rm and gc never delete: they move what was selected into <results-dir>/.mlps/trash/<stamp>/,
keeping each path relative to the tree, where Package (and so validate, status, reportgen and
submit) never looks; `runs purge` deletes the trash. Every acting command is a dry run unless
--yes is given. Leaves are named by ID (their path in the tree) or a unique timestamp, and only
leaves of the results model are ever moved: a path that is not a leaf of the tree is refused.
"""

from __future__ import annotations

import os
import re
import shutil
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from mlpstorage_py.errors import UsageError
from mlpstorage_py.results import code_image
from mlpstorage_py.results.leaf import DATETIME_FORMAT, create_leaf
from mlpstorage_py.results.links import private_path
from mlpstorage_py.results.tree.package import TIMESTAMP, TRASH_DIR, Leaf, Package
from mlpstorage_py.results.tree.run_state import EXTRA, standings
from mlpstorage_py.results.tree.untrusted import shown
from mlpstorage_py.submission.leaves import find_leaves, human, image_of, leaf_id, size_of

AGE = re.compile(r"^(\d+)([dhm])$")
UNITS = {"d": "days", "h": "hours", "m": "minutes"}


def _entries(pkg: Package) -> list[dict[str, Any]]:
    """Every leaf with its state, size and code image, in tree order."""
    out = []
    for result in standings(pkg):
        for leaf, state, why in result.leaves:
            image, resolved = image_of(pkg, leaf)
            out.append({"id": leaf_id(pkg, leaf), "phase": leaf.command, "state": state, "detail": why,
                        "size": size_of(leaf.path), "code_image": image,
                        "code_image_dir": resolved.relative_to(pkg.root).as_posix() if resolved else None,
                        "_leaf": leaf})
    return out


def _public(entry: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in entry.items() if not k.startswith("_")}


def listing(root: Path, status: str | None) -> list[dict[str, Any]]:
    """`runs list`: every leaf of the tree (or those in one state) with its state, size and code image."""
    return [_public(e) for e in _entries(Package.load(root)) if not status or e["state"] == status]


def facts(root: Path, ident: str) -> dict[str, Any]:
    """`runs show`: one leaf's listing, with its size spelled out, file count, times and command."""
    pkg = Package.load(root)
    [leaf] = find_leaves(pkg, [ident])
    entry = next(e for e in _entries(pkg) if e["_leaf"].path == leaf.path)
    meta = leaf.metadata if isinstance(leaf.metadata, dict) else {}
    return dict(_public(entry), size=f"{entry['size']} bytes ({human(entry['size'])})",
                files=sum(len(names) for _, _, names in os.walk(leaf.path)),
                started=meta.get("invocation_start_time"), ended=meta.get("invocation_end_time"),
                exit_status=meta.get("exit_status"), failure=meta.get("failure"),
                command=meta.get("executed_command"))


def _older_than(text: str) -> datetime:
    match = AGE.match(text or "")
    if not match:
        raise UsageError(f"--older-than {text!r} must be a number and a unit: 7d, 12h or 30m")
    return datetime.now() - timedelta(**{UNITS[match.group(2)]: int(match.group(1))})


def _before(name: str, cutoff: datetime) -> bool:
    """Whether a leaf's timestamp is before cutoff; a name that is no real date is never old."""
    try:
        return datetime.strptime(name, DATETIME_FORMAT) < cutoff
    except ValueError:
        return False


def select(pkg: Package, ids: list[str], status: str | None, age: str | None, keep: int | None) -> list[Leaf]:
    """The leaves rm acts on: those named, else those every given filter selects."""
    if ids and (status or age or keep):
        raise UsageError("name leaves by ID or select them with --status/--older-than/--keep-last, not both")
    if ids:
        return find_leaves(pkg, ids)
    if not (status or age or keep):
        raise UsageError("say which leaves: IDs, --status, --older-than or --keep-last")
    cutoff = _older_than(age) if age else None
    entries = _entries(pkg)
    newest: dict[Path, list[str]] = {}
    for e in entries:
        newest.setdefault(e["_leaf"].path.parent, []).append(e["_leaf"].path.name)
    chosen = []
    for e in entries:
        leaf = e["_leaf"]
        if status and e["state"] != status:
            continue
        if cutoff and not _before(leaf.path.name, cutoff):
            continue
        if keep and leaf.path.name in sorted(newest[leaf.path.parent])[-keep:]:
            continue
        chosen.append(leaf)
    return chosen


def _inside(root: Path, path: Path) -> Path:
    """path, refused unless it is a real directory below root reached without a link."""
    if path.is_symlink() or not path.is_dir() or root.resolve() not in path.resolve().parents:
        raise UsageError(f"{path} is not a directory inside {root}; refusing to move it")
    return path


def _to_trash(root: Path, paths: list[Path], yes: bool, what: str) -> int:
    """Move each path under one new trash batch, keeping its path relative to the tree."""
    for path in paths:
        _inside(root, path)
        print(f"{'moving' if yes else 'would move'} {shown(path.relative_to(root).as_posix())} ({human(size_of(path))})")
    if not paths:
        print(f"no {what} selected")
        return 0
    if not yes:
        print(f"dry run: {len(paths)} {what} would move to {root / TRASH_DIR}/<stamp>/; pass --yes to move them")
        return 0
    batch, _ = create_leaf(private_path(root, TRASH_DIR.name), datetime.now(), root)
    for path in paths:
        target = batch / path.relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.rename(path, target)  # same filesystem: a move, never a copy; the batch is new, so nothing is overwritten
    print(f"moved {len(paths)} {what} to {batch} (`mlpstorage runs purge --yes` deletes the trash)")
    return 0


def rm(root: Path, ids: list[str], status: str | None, age: str | None, keep: int | None, yes: bool) -> int:
    """`runs rm`: move the selected leaves to a new trash batch (with yes), else say what would move."""
    pkg = Package.load(root)
    chosen = select(pkg, ids, status, age, keep)
    if status == EXTRA and not yes:
        print("note: extra leaves are ok runs beyond the count a result needs; the earliest are the counted ones")
    return _to_trash(pkg.root, [leaf.path for leaf in chosen], yes, "leaves")


def purge(root: Path, yes: bool) -> int:
    """`runs purge`: delete the trash batches (with yes), else say what would go."""
    trash = private_path(root, TRASH_DIR.name)
    batches = sorted(p for p in trash.iterdir() if TIMESTAMP.match(p.name) and not p.is_symlink()) if trash.is_dir() else []
    for batch in batches:
        print(f"{'deleting' if yes else 'would delete'} {shown(batch.relative_to(root).as_posix())} ({human(size_of(batch))})")
        if yes:
            shutil.rmtree(batch)  # removes links themselves, never what they point to
    if not batches:
        print("the trash is empty")
    elif not yes:
        print(f"dry run: {len(batches)} trash batch(es) would be deleted; pass --yes to delete them")
    return 0


def unreferenced_images(pkg: Package) -> list[Path]:
    """Pool images (code-<hash8>) no leaf of the tree points to."""
    used = {path for leaf in pkg.leaves for path in [image_of(pkg, leaf)[1]] if path is not None}
    return [image for image in pkg.image_dirs() if image not in used and not image.is_symlink()
            and image.name.startswith("code-") and (image / code_image.HASH_FILE).is_file()]


def gc(root: Path, yes: bool) -> int:
    """`runs gc`: move the code images no leaf points to into the trash (with yes)."""
    pkg = Package.load(root)
    return _to_trash(pkg.root, unreferenced_images(pkg), yes, "unreferenced code images")
