"""Run leaves: where they go in the tree and their exclusive, never-reused creation."""

from __future__ import annotations

import os
import re
from datetime import datetime, timedelta
from pathlib import Path

from mlpstorage_py.errors import UsageError
from mlpstorage_py.results.links import make_dirs

DATETIME_FORMAT = "%Y%m%d_%H%M%S"
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
MAX_BUMPS = 3600


def check_name(kind: str, value: str) -> str:
    """System and model names become directory names: refuse anything that could escape."""
    if not NAME_PATTERN.match(value or ""):
        raise UsageError(f"{kind} {value!r} must start with a letter or digit and use only letters, digits and . _ + -")
    return value


def workload_dir(results_dir: Path, mode: str, org: str, system: str, tail: Path) -> Path:
    """<results>/<mode>/<org>/results/<system>/<tail>: the directory that holds timestamp leaves."""
    return results_dir / mode / org / "results" / check_name("system name", system) / tail


def create_leaf(parent: Path, when: datetime, root: Path) -> tuple[Path, str]:
    """Create a new timestamp directory with mkdir (atomic, exclusive); a name already taken
    moves to the next second, so an existing leaf is never reused or overwritten. parent must
    stay inside the results tree root: a symbolic link on its way is refused (links.make_dirs)."""
    make_dirs(root, parent)
    for bump in range(MAX_BUMPS):
        stamp = (when + timedelta(seconds=bump)).strftime(DATETIME_FORMAT)
        try:
            os.mkdir(parent / stamp)
        except FileExistsError:
            continue
        return parent / stamp, stamp
    raise UsageError(f"no free timestamp directory under {parent} within {MAX_BUMPS} s of {when}")
