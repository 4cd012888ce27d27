"""One datagen at a time per data directory: a lock file in the directory, held (flock) for the
whole invocation, so a second datagen into the same directory is refused at once instead of
writing, or with --overwrite deleting, files the first one is generating."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from mlpstorage_py.errors import GateRefused

LOCK_NAME = ".mlps-datagen.lock"


@contextlib.contextmanager
def held(directory: Path | None) -> Iterator[None]:
    """Hold the data directory's datagen lock for the block (nothing when directory is None or
    does not exist yet: the run's own gates report that). The kernel drops the lock when the
    process dies, however it dies, so a killed datagen never leaves the directory locked."""
    if directory is None or not directory.is_dir():
        yield
        return
    path = directory / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip() or "unknown"
            raise GateRefused(f"data directory {directory} is in use by another datagen (pid {holder}, lock {path}); "
                              "wait for it to finish or use another --data-dir") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        yield
    finally:
        os.close(fd)
