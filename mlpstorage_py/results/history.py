"""<results-dir>/.mlps/history: one JSON line per command, so any run can be repeated."""

from __future__ import annotations

import errno
import fcntl
import json
import os
from pathlib import Path
from typing import Any

from mlpstorage_py.errors import ConfigurationError, NotFoundError
from mlpstorage_py.results.io import utc_now, write_failed
from mlpstorage_py.results.links import make_dirs, private_path

HISTORY = Path(".mlps") / "history"


def record(results_dir: Path, argv: list[str]) -> int:
    """Append argv under the next ID; a lock keeps IDs unique across concurrent runs. The line is
    one write; if the disk cannot take all of it, the file is cut back to where it was, so no
    half line is ever left for a reader. Never through a link: .mlps or the file itself linked
    elsewhere is refused (the tree may come from someone else)."""
    path = private_path(results_dir, HISTORY.name)
    make_dirs(results_dir, path.parent)
    try:  # O_NOFOLLOW: a link planted as the history file would take the line to any file
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        raise ConfigurationError(f"{path} is a symbolic link; refusing to write the history through it") from None
    with os.fdopen(fd, "a+", encoding="utf-8") as fh:
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
