"""Where benchmark bytes go: one small interface so a POSIX file system (posix.py) and an S3
object store through s3dlio (s3.py) are driven by the same engines, plus the page-cache control
every file read needs.
"""

from __future__ import annotations

import os
from typing import NamedTuple, Protocol, runtime_checkable

DROP_CACHES = "/proc/sys/vm/drop_caches"
PAGE = 4096


def check_block(block_size: int) -> None:
    """Stores move data in whole pages (aligned buffers, O_DIRECT-compatible sizes)."""
    if block_size < PAGE or block_size % PAGE:
        raise ValueError(f"block size {block_size} must be a positive multiple of {PAGE} bytes")


class WriteResult(NamedTuple):
    """What one write did: bytes that reached the store and how many fsync calls it made."""

    bytes: int
    fsync_calls: int


@runtime_checkable
class Store(Protocol):
    """Whole-object write and read of benchmark data; payload bytes are never kept.
    Paths are the store's own spelling: file paths, or s3:// URIs."""

    cached_locally: bool  # whether this host's page cache can serve a read (evict matters)

    def write(self, path: str, nbytes: int, *, block_size: int, fsync: bool) -> WriteResult:
        """Create or replace ``path`` with ``nbytes`` of incompressible data."""

    def read(self, path: str, *, block_size: int) -> int:
        """Read ``path`` to its end in ``block_size`` requests; returns the bytes read."""

    def size(self, path: str) -> int:
        """Stored size in bytes (raises FileNotFoundError when absent)."""

    def exists(self, path: str) -> bool:
        """Whether ``path`` is stored."""

    def remove(self, path: str) -> None:
        """Delete ``path``; absent is not an error."""

    def join(self, folder: str, *names: str) -> str:
        """``folder``/name/... in the store's spelling."""

    def make_dirs(self, path: str) -> None:
        """Make ``path`` a place objects can be written below (a no-op where prefixes are implicit)."""

    def subfolders(self, folder: str) -> list[str]:
        """Names of the folders (directories or common prefixes) directly below ``folder``."""

    def evict(self, path: str) -> None:
        """Make the next read of ``path`` come from storage, not from this host's cache."""


def drop_page_cache() -> bool:
    """Flush dirty pages and drop this host's page cache; False when not permitted (not root,
    read-only /proc, a container without the sysctl)."""
    if os.geteuid() != 0:
        return False
    os.sync()
    try:
        with open(DROP_CACHES, "w", encoding="ascii") as fh:
            fh.write("3\n")
    except OSError:
        return False
    return True


__all__ = ["PAGE", "Store", "WriteResult", "check_block", "drop_page_cache"]
