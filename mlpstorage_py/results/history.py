"""<results-dir>/.mlps/history: one JSON line per command, so any run can be repeated."""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path
from typing import Any

from mlpstorage_py.errors import NotFoundError
from mlpstorage_py.results.io import utc_now

HISTORY = Path(".mlps") / "history"


def record(results_dir: Path, argv: list[str]) -> int:
    """Append argv under the next ID; a lock keeps IDs unique across concurrent runs."""
    path = results_dir / HISTORY
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+", encoding="utf-8") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.seek(0)
        next_id = sum(1 for line in fh if line.strip()) + 1
        fh.write(json.dumps({"id": next_id, "at": utc_now(), "cwd": os.getcwd(), "argv": argv}) + "\n")
        fh.flush()
    return next_id


def entries(results_dir: Path) -> list[dict[str, Any]]:
    path = results_dir / HISTORY
    if not path.is_file():
        return []
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def find(results_dir: Path, entry_id: int) -> dict[str, Any]:
    for entry in entries(results_dir):
        if entry["id"] == entry_id:
            return entry
    raise NotFoundError(f"no history entry {entry_id} in {results_dir / HISTORY}")
