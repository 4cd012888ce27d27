"""<results-dir>/.mlps/history: one JSON line per command, so any run can be repeated."""

from __future__ import annotations

import errno
import fcntl
import json
import os
from pathlib import Path
from typing import Any

from mlpstorage_py.errors import NotFoundError
from mlpstorage_py.results.io import utc_now, write_failed

HISTORY = Path(".mlps") / "history"


def record(results_dir: Path, argv: list[str]) -> int:
    """Append argv under the next ID; a lock keeps IDs unique across concurrent runs. The line is
    one write; if the disk cannot take all of it, the file is cut back to where it was, so no
    half line is ever left for a reader."""
    path = results_dir / HISTORY
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+", encoding="utf-8") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.seek(0)
        next_id = sum(1 for line in fh if line.strip()) + 1
        line = (json.dumps({"id": next_id, "at": utc_now(), "cwd": os.getcwd(), "argv": argv}) + "\n").encode("utf-8")
        end = os.fstat(fh.fileno()).st_size
        try:
            if os.write(fh.fileno(), line) != len(line):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        except OSError as exc:
            os.ftruncate(fh.fileno(), end)
            raise write_failed(path, exc) from exc
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
