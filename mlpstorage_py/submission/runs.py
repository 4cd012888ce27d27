"""`mlpstorage runs list|show|rm|purge|gc`: look after the leaves of a results tree.

rm and gc never delete: they move what was selected into <results-dir>/.mlps/trash/<stamp>/,
keeping each path relative to the tree, where Package (and so validate, status, reportgen and
submit) never looks; `runs purge` deletes the trash. Every acting command is a dry run unless
--yes is given. Leaves are named by ID (their path in the tree) or a unique timestamp, and only
leaves of the results model are ever moved: a path that is not a leaf of the tree is refused.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from mlpstorage_py.results.tree.package import TIMESTAMP, TRASH_DIR, Leaf, Package
from mlpstorage_py.errors import UsageError
from mlpstorage_py.results import code_image
from mlpstorage_py.results.leaf import DATETIME_FORMAT, create_leaf
from mlpstorage_py.submission.leaves import (EXTRA, find_leaves, human, image_of, leaf_id, private_path, results,
                                             size_of, tree_root)

AGE = re.compile(r"^(\d+)([dhm])$")
UNITS = {"d": "days", "h": "hours", "m": "minutes"}


def _entries(pkg: Package) -> list[dict[str, Any]]:
    """Every leaf with its state, size and code image, in tree order."""
    out = []
    for result in results(pkg):
        for leaf, state, why in result.leaves:
            image, resolved = image_of(pkg, leaf)
            out.append({"id": leaf_id(pkg, leaf), "phase": leaf.command, "state": state, "detail": why,
                        "size": size_of(leaf.path), "code_image": image,
                        "code_image_dir": resolved.relative_to(pkg.root).as_posix() if resolved else None,
                        "_leaf": leaf})
    return out


def _public(entry: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in entry.items() if not k.startswith("_")}


def list_command(args: dict[str, Any], argv: list[str]) -> int:
    pkg = Package.load(tree_root(args))
    entries = [e for e in _entries(pkg) if not args.get("status") or e["state"] == args["status"]]
    if args.get("json"):
        print(json.dumps([_public(e) for e in entries], indent=2))
        return 0
    for e in entries:
        image = e["code_image"] + ("" if e["code_image_dir"] or e["code_image"] == "none" else " (not in the pool)")
        print(f"{e['state']:<10} {human(e['size']):>10}  {image:<26} {e['id']}")
    print(f"{len(entries)} leaves, {human(sum(e['size'] for e in entries))}")
    return 0


def show_command(args: dict[str, Any], argv: list[str]) -> int:
    pkg = Package.load(tree_root(args))
    [leaf] = find_leaves(pkg, [args["id"]])
    entry = next(e for e in _entries(pkg) if e["_leaf"].path == leaf.path)
    meta = leaf.metadata if isinstance(leaf.metadata, dict) else {}
    facts = dict(_public(entry), size=f"{entry['size']} bytes ({human(entry['size'])})",
                 files=sum(len(names) for _, _, names in os.walk(leaf.path)),
                 started=meta.get("invocation_start_time"), ended=meta.get("invocation_end_time"),
                 exit_status=meta.get("exit_status"), failure=meta.get("failure"),
                 command=meta.get("executed_command"))
    for key, value in facts.items():
        if value not in (None, ""):
            print(f"{key + ':':<16}{value}")
    return 0


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


def select(pkg: Package, args: dict[str, Any]) -> list[Leaf]:
    """The leaves rm acts on: those named, else those every given filter selects."""
    ids, status, age, keep = args.get("ids") or [], args.get("status"), args.get("older_than"), args.get("keep_last")
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
        print(f"{'moving' if yes else 'would move'} {path.relative_to(root).as_posix()} ({human(size_of(path))})")
    if not paths:
        print(f"no {what} selected")
        return 0
    if not yes:
        print(f"dry run: {len(paths)} {what} would move to {root / TRASH_DIR}/<stamp>/; pass --yes to move them")
        return 0
    batch, _ = create_leaf(private_path(root, TRASH_DIR.name), datetime.now())
    for path in paths:
        target = batch / path.relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.rename(path, target)  # same filesystem: a move, never a copy; the batch is new, so nothing is overwritten
    print(f"moved {len(paths)} {what} to {batch} (`mlpstorage runs purge --yes` deletes the trash)")
    return 0


def rm_command(args: dict[str, Any], argv: list[str]) -> int:
    root = tree_root(args)
    pkg = Package.load(root)
    chosen = select(pkg, args)
    if args.get("status") == EXTRA and not args.get("yes"):
        print("note: extra leaves are ok runs beyond the count a result needs; the earliest are the counted ones")
    return _to_trash(pkg.root, [leaf.path for leaf in chosen], bool(args.get("yes")), "leaves")


def purge_command(args: dict[str, Any], argv: list[str]) -> int:
    root = tree_root(args)
    trash = private_path(root, TRASH_DIR.name)
    batches = sorted(p for p in trash.iterdir() if TIMESTAMP.match(p.name) and not p.is_symlink()) if trash.is_dir() else []
    for batch in batches:
        print(f"{'deleting' if args.get('yes') else 'would delete'} {batch.relative_to(root).as_posix()} ({human(size_of(batch))})")
        if args.get("yes"):
            shutil.rmtree(batch)  # removes links themselves, never what they point to
    if not batches:
        print("the trash is empty")
    elif not args.get("yes"):
        print(f"dry run: {len(batches)} trash batch(es) would be deleted; pass --yes to delete them")
    return 0


def unreferenced_images(pkg: Package) -> list[Path]:
    """Pool images (code-<hash8>) no leaf of the tree points to."""
    used = {path for leaf in pkg.leaves for path in [image_of(pkg, leaf)[1]] if path is not None}
    return [image for image in pkg.image_dirs() if image not in used and not image.is_symlink()
            and image.name.startswith("code-") and (image / code_image.HASH_FILE).is_file()]


def gc_command(args: dict[str, Any], argv: list[str]) -> int:
    root = tree_root(args)
    pkg = Package.load(root)
    return _to_trash(pkg.root, unreferenced_images(pkg), bool(args.get("yes")), "unreferenced code images")
