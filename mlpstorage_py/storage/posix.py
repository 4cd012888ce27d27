"""POSIX file-system store: sequential I/O in large blocks, as a framework's save/load does.

Writes are buffered by default. While a file is written, writeback of each block already sent is
started at once (``sync_file_range(SYNC_FILE_RANGE_WRITE)``), so the device works while the next
blocks are copied, instead of idling until the fsync at the file's end; that fsync (data and
metadata) still decides when the file is durable. ``direct=True`` (O_DIRECT, an OPEN option)
bypasses the page cache for whole pages; a file's unaligned tail goes through the cache and the
fsync covers both. Reads go into a reusable aligned buffer and are discarded.

Buffered reads and durable writes drop their pages behind them (``DROP_BEHIND``): a range
already read, or written back, is evicted with ``posix_fadvise(DONTNEED)``, so a rank holds at
most a few ranges of page cache and the pages it frees are the ones the kernel hands it for the
next range. Without that, every page of a checkpoint is a page the kernel takes from free
memory, and what that costs depends on the host's state, not on storage: on a VM whose balloon
reports free memory to its host (free page reporting returns 2 MiB blocks about 2 s after they
are freed), each such page is a host fault on first touch. Measured there (bench/
checkpoint_vs_fio.py, block traces, kernel stack samples in the page-cache copy): touching
reported pages ran at ~0.3 GiB/s per core against ~10 GiB/s for pages freed a moment before, so
cold reads kept the disk busy 40 % of the time and
reached 0.6x of an fio that happened to start right after another process freed a GiB; with the
pages recycled, the disk is busy ~90 % of the read. Every byte still comes from or goes to the
device (eviction only drops what was already consumed or written back), the page cache is still
dropped before reads, and a later read of the same file cannot be served from cache either.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import fcntl
import os

from mlpstorage_py.storage import PAGE, WriteResult, check_block
from mlpstorage_py.storage.buffers import BlockBuffers

# <linux/fs.h>: start writeback of the range's dirty pages; wait for writeback before and after
SYNC_FILE_RANGE_WAIT_BEFORE, SYNC_FILE_RANGE_WRITE, SYNC_FILE_RANGE_WAIT_AFTER = 1, 2, 4
# Bytes per evicted range. A range is dropped once the reader or writer is two ranges past it:
# far enough behind the read-ahead window (16 MiB with POSIX_FADV_SEQUENTIAL and the common
# 8 MiB read_ahead_kb) and behind the writeback still in flight to keep the device busy.
DROP_BEHIND = 16 << 20
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_sync_file_range = getattr(_libc, "sync_file_range", None)
if _sync_file_range is not None:
    _sync_file_range.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)


def start_writeback(fd: int, offset: int, nbytes: int) -> None:
    """Ask the kernel to start writing the range to the device now (a hint: durability is the
    fsync's job; where the call is missing or refused, writeback starts later on its own)."""
    if _sync_file_range is not None:
        _sync_file_range(fd, offset, nbytes, SYNC_FILE_RANGE_WRITE)


def drop_written(fd: int, offset: int, nbytes: int) -> None:
    """Wait until the range is written back, then evict it (DONTNEED skips dirty pages). Not a
    durability point: the fsync at the file's end is; where sync_file_range is missing, the
    eviction only drops what writeback already finished."""
    if _sync_file_range is not None:
        _sync_file_range(fd, offset, nbytes,
                         SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER)
    os.posix_fadvise(fd, offset, nbytes, os.POSIX_FADV_DONTNEED)


def _write_all(fd: int, view: memoryview) -> None:
    sent = 0
    while sent < len(view):
        sent += os.write(fd, view[sent:])


class PosixStore:
    """Store implementation over local or network-mounted POSIX paths."""

    cached_locally = True  # reads can be served by this host's page cache

    def __init__(self, direct: bool = False) -> None:
        self._buffers = BlockBuffers()
        self.direct = direct  # O_DIRECT for every write and read of this store

    def write(self, path: str, nbytes: int, *, block_size: int, fsync: bool) -> WriteResult:
        """Create or truncate ``path`` and write ``nbytes`` sequentially; fsync once at the end."""
        check_block(block_size)
        if nbytes < 0:
            raise ValueError(f"cannot write a negative size ({nbytes}) to {path}")
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | (os.O_DIRECT if self.direct else 0)
        try:
            fd = os.open(path, flags, 0o644)
        except FileNotFoundError:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            fd = os.open(path, flags, 0o644)
        done = dropped = 0
        # Durable buffered writes drop what writeback finished (see the module's docstring).
        behind = max(DROP_BEHIND, block_size) if fsync and not self.direct else 0
        try:
            while done < nbytes:
                chunk = min(block_size, nbytes - done)
                view = self._buffers.next_block(block_size)
                if self.direct and chunk % PAGE:
                    # O_DIRECT moves whole pages: the aligned part directly, the tail through the cache.
                    aligned = chunk - chunk % PAGE
                    _write_all(fd, view[:aligned])
                    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_DIRECT)
                    _write_all(fd, view[aligned:chunk])
                else:
                    _write_all(fd, view[:chunk])
                    if not self.direct:
                        start_writeback(fd, done, chunk)
                done += chunk
                while behind and done - dropped >= 2 * behind:
                    drop_written(fd, dropped, behind)
                    dropped += behind
            if fsync:
                os.fsync(fd)
                if behind:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # clean now: free the rest
        finally:
            os.close(fd)
        return WriteResult(done, 1 if fsync else 0)

    def read(self, path: str, *, block_size: int) -> int:
        """Read ``path`` to its end; returns the byte count, keeps nothing (not even in the cache)."""
        view = self._buffers.read_buffer(block_size)
        total = dropped = 0
        # Buffered reads drop what they consumed (see the module's docstring).
        behind = 0 if self.direct else max(DROP_BEHIND, block_size)
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | (os.O_DIRECT if self.direct else 0))
        try:
            if behind:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)  # a larger read-ahead window
            while count := os.readv(fd, [view]):
                total += count
                while behind and total - dropped >= 2 * behind:
                    os.posix_fadvise(fd, dropped, behind, os.POSIX_FADV_DONTNEED)
                    dropped += behind
            if behind:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
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
