"""POSIX file-system store: buffered sequential I/O in large blocks, as a framework's save/load does.

Writes come from one reusable page-aligned buffer of random bytes, so no payload is generated per
call and no file content is kept in memory. Every 4 KiB page of each block gets a fresh 8-byte
stamp before it is written: a deduplicating or compressing store cannot shrink the data, and the
cost is one store per page. Reads go into a reusable buffer with readinto and are discarded.
"""

from __future__ import annotations

import mmap
import os

import numpy as np

from mlpstorage_py.storage import WriteResult

PAGE = 4096
_WORDS_PER_PAGE = PAGE // 8


class PosixStore:
    """Store implementation over local or network-mounted POSIX paths."""

    def __init__(self) -> None:
        self._write_buffers: dict[int, tuple[mmap.mmap, np.ndarray]] = {}
        self._read_buffers: dict[int, mmap.mmap] = {}
        self._stamp = int.from_bytes(os.urandom(7), "little")  # 2**56 pages of headroom before 2**64

    @staticmethod
    def _check_block(block_size: int) -> None:
        if block_size < PAGE or block_size % PAGE:
            raise ValueError(f"block size {block_size} must be a positive multiple of {PAGE} bytes")

    def _write_buffer(self, block_size: int) -> tuple[mmap.mmap, np.ndarray]:
        if block_size not in self._write_buffers:
            buf = mmap.mmap(-1, block_size)  # anonymous mappings are page-aligned
            buf[:] = os.urandom(block_size)
            words = np.frombuffer(buf, dtype=np.uint64)[::_WORDS_PER_PAGE]
            self._write_buffers[block_size] = (buf, words)
        return self._write_buffers[block_size]

    def _next_stamps(self, words: np.ndarray) -> None:
        """Give every page of the write buffer a value no earlier page of this process had."""
        words[:] = np.arange(self._stamp, self._stamp + len(words), dtype=np.uint64)
        self._stamp += len(words)

    def write(self, path: str, nbytes: int, *, block_size: int, fsync: bool) -> WriteResult:
        """Create or truncate ``path`` and write ``nbytes`` sequentially; fsync once at the end."""
        self._check_block(block_size)
        if nbytes < 0:
            raise ValueError(f"cannot write a negative size ({nbytes}) to {path}")
        buf, words = self._write_buffer(block_size)
        view = memoryview(buf)
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
                self._next_stamps(words)
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
        self._check_block(block_size)
        if block_size not in self._read_buffers:
            self._read_buffers[block_size] = mmap.mmap(-1, block_size)
        view = memoryview(self._read_buffers[block_size])
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

    def evict(self, path: str) -> None:
        """fsync (DONTNEED skips dirty pages), then drop the file's pages from the page cache."""
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
