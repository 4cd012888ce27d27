"""Small file helpers shared by everything that writes into the results tree."""

from __future__ import annotations

import contextlib
import errno
import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from mlpstorage_py.errors import MlpsError


class WriteFailed(MlpsError, OSError):
    """A file of the results tree could not be written (disk full, read-only, a directory in the
    way): one line naming the file and the errno; still an OSError for callers that expect one."""

    exit_code = 1

    def __str__(self) -> str:
        return str(self.strerror)


def utc_now() -> str:
    """ISO-8601 UTC with a Z suffix, the stamp format every tree file uses."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def iso_from_epoch(epoch: float) -> str:
    """A moment as ISO-8601 UTC with microseconds and a Z suffix (the leaves' start/end times)."""
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def atomic_write_text(path: Path, text: str) -> None:
    """Write via a temp file and rename, so a reader never sees half a file: on any failure the
    old file stays as it was and the temp file is removed. A name that is not UTF-8 (surrogate
    escapes from the filesystem) is written backslash-escaped rather than failing the write."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8", errors="backslashreplace") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise write_failed(path, exc) from exc


def write_failed(path: Path, exc: OSError) -> WriteFailed:
    """The one-line error for a failed write of `path`: where, why, and the errno's name."""
    code = errno.errorcode.get(exc.errno or 0)
    return WriteFailed(exc.errno, f"cannot write {path}: {exc.strerror or exc}" + (f" ({code})" if code else ""))


def write_json(path: Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, default=str) + "\n")


def read_json(path: Path) -> Any:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)
