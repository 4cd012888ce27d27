"""Reusable page-aligned I/O buffers shared by every store.

Writes come from one buffer of random bytes per block size, so no payload is generated per call
and no content is kept. Every 4 KiB page of a block gets a fresh 8-byte stamp before it is sent:
a deduplicating or compressing store cannot shrink the data, and the cost is one store per page.
"""

from __future__ import annotations

import mmap
import os

import numpy as np

from mlpstorage_py.storage import PAGE, check_block

_WORDS_PER_PAGE = PAGE // 8


class BlockBuffers:
    """Write buffers (stamped per block) and read buffers (reused), one of each per block size."""

    def __init__(self) -> None:
        self._write: dict[int, tuple[mmap.mmap, np.ndarray]] = {}
        self._read: dict[int, mmap.mmap] = {}
        self._stamp = int.from_bytes(os.urandom(7), "little")  # 2**56 pages of headroom before 2**64

    def next_block(self, block_size: int) -> memoryview:
        """The write buffer, every page restamped with a value no earlier page of this process had."""
        check_block(block_size)
        if block_size not in self._write:
            buf = mmap.mmap(-1, block_size)  # anonymous mappings are page-aligned
            buf[:] = os.urandom(block_size)
            self._write[block_size] = (buf, np.frombuffer(buf, dtype=np.uint64)[::_WORDS_PER_PAGE])
        buf, words = self._write[block_size]
        words[:] = np.arange(self._stamp, self._stamp + len(words), dtype=np.uint64)
        self._stamp += len(words)
        return memoryview(buf)

    def read_buffer(self, block_size: int) -> memoryview:
        check_block(block_size)
        if block_size not in self._read:
            self._read[block_size] = mmap.mmap(-1, block_size)
        return memoryview(self._read[block_size])
