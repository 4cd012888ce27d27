"""What a results tree holds is someone else's data (issue 39): the few readers outside the
tree model (a benchmark reading its sibling leaves) read it without following a link or
blocking on a FIFO, and every reader shows its strings without letting them drive the terminal.
"""

from __future__ import annotations

import fnmatch
import json
import os
import stat
from pathlib import Path
from typing import Any

# A sibling leaf's record is read whole into memory: a metadata file is a few MiB at most.
MAX_RECORD_BYTES = 64 * 1024 * 1024

# Every C0 and C1 control character (and DEL) written as its \xNN escape: an ESC or CSI from a
# tree could otherwise move the cursor, set the window title or write the clipboard (OSC 52).
_ESCAPES = {code: f"\\x{code:02x}" for code in (*range(0x20), *range(0x7F, 0xA0))}


def shown(text: object) -> str:
    """A value from the tree as it may be printed: control characters made visible escapes."""
    return str(text).translate(_ESCAPES)


def leaf_records(directory: Path, pattern: str) -> list[Path]:
    """The regular files matching `pattern` in the real subdirectories of `directory` (its
    leaves), in path order; a symbolic link is never followed, a FIFO or device never listed."""
    found: list[Path] = []
    for leaf in _entries(directory):
        if leaf.is_dir(follow_symlinks=False):
            found.extend(Path(entry.path) for entry in _entries(Path(leaf.path))
                         if entry.is_file(follow_symlinks=False) and fnmatch.fnmatchcase(entry.name, pattern))
    return sorted(found)


def _entries(directory: Path) -> list[os.DirEntry[str]]:
    """A directory's entries; none when it is a link (never listed through), missing or not a
    directory."""
    try:
        if not stat.S_ISDIR(os.lstat(directory).st_mode):
            return []
        with os.scandir(directory) as scan:
            return list(scan)
    except OSError:
        return []


def read_record(path: Path) -> Any:
    """A JSON file of the tree, read only when it is a regular file (opened without following a
    link or waiting on a FIFO's writer). Raises OSError or ValueError for anything else."""
    if not stat.S_ISREG(os.lstat(path).st_mode):
        raise OSError(f"{path} is not a regular file")
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # replaced since the lstat
            raise OSError(f"{path} is not a regular file")
        chunks, size = [], 0
        while size <= MAX_RECORD_BYTES:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > MAX_RECORD_BYTES:
        raise ValueError(f"{path} is larger than {MAX_RECORD_BYTES} bytes")
    try:
        return json.loads(b"".join(chunks))
    except RecursionError:
        raise ValueError(f"{path} is nested too deeply to parse") from None
