"""POSIX file-system store: buffered sequential I/O in large blocks, as a framework's save/load does.
Reads go into a reusable buffer with readinto and are discarded."""

from __future__ import annotations

import os

from mlpstorage_py.storage import WriteResult, check_block
from mlpstorage_py.storage.buffers import BlockBuffers


class PosixStore:
    """Store implementation over local or network-mounted POSIX paths."""

    cached_locally = True  # reads can be served by this host's page cache

    def __init__(self) -> None:
        self._buffers = BlockBuffers()

    def write(self, path: str, nbytes: int, *, block_size: int, fsync: bool) -> WriteResult:
        """Create or truncate ``path`` and write ``nbytes`` sequentially; fsync once at the end."""
        check_block(block_size)
        if nbytes < 0:
            raise ValueError(f"cannot write a negative size ({nbytes}) to {path}")
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
        try:
            fd = os.open(path, flags, 0o644)
        except FileNotFoundError:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            fd = os.open(path, flags, 0o644)
        done = 0
        try:
            while done < nbytes:
                chunk = min(block_size, nbytes - done)
                view = self._buffers.next_block(block_size)
                sent = 0
                while sent < chunk:
                    sent += os.write(fd, view[sent:chunk])
                done += chunk
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        return WriteResult(done, 1 if fsync else 0)

    def read(self, path: str, *, block_size: int) -> int:
        """Read ``path`` to its end; returns the byte count, keeps nothing."""
        view = self._buffers.read_buffer(block_size)
        total = 0
        with open(path, "rb", buffering=0) as fh:
            while count := fh.readinto(view):
                total += count
        return total

    def size(self, path: str) -> int:
        return os.stat(path).st_size

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def remove(self, path: str) -> None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass

    def join(self, folder: str, *names: str) -> str:
        return os.path.join(folder, *names)

    def make_dirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def subfolders(self, folder: str) -> list[str]:
        with os.scandir(folder) as scan:
            return [entry.name for entry in scan if entry.is_dir()]

    def evict(self, path: str) -> None:
        """fsync (DONTNEED skips dirty pages), then drop the file's pages from the page cache."""
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
