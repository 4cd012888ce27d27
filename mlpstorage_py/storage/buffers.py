"""Reusable page-aligned I/O buffers shared by every store.

Writes come from one buffer of random bytes per block size, so no payload is generated per call
and no content is kept. Every 512-byte sector of a block (so every 4 KiB page, eight times) gets a
fresh 8-byte stamp before it is sent: a store deduplicating at 512 B or coarser, or compressing,
cannot shrink the data, and the cost is one vectorised store per sector.
"""

from __future__ import annotations

import mmap
import os

import numpy as np

from mlpstorage_py.storage import check_block

SECTOR = 512  # the finest deduplication grain a store uses
_WORDS_PER_SECTOR = SECTOR // 8


class BlockBuffers:
    """Write buffers (stamped per block) and read buffers (reused), one of each per block size."""

    def __init__(self) -> None:
        self._write: dict[int, tuple[mmap.mmap, np.ndarray]] = {}
        self._read: dict[int, mmap.mmap] = {}
        self._stamp = int.from_bytes(os.urandom(7), "little")  # 2**56 sectors of headroom before 2**64

    def next_block(self, block_size: int) -> memoryview:
        """The write buffer, every sector restamped with a value no earlier sector of this process had."""
        check_block(block_size)
        if block_size not in self._write:
            buf = mmap.mmap(-1, block_size)  # anonymous mappings are page-aligned
            buf[:] = os.urandom(block_size)
            self._write[block_size] = (buf, np.frombuffer(buf, dtype=np.uint64)[::_WORDS_PER_SECTOR])
        buf, words = self._write[block_size]
        words[:] = np.arange(self._stamp, self._stamp + len(words), dtype=np.uint64)
        self._stamp += len(words)
        return memoryview(buf)

    def read_buffer(self, block_size: int) -> memoryview:
        check_block(block_size)
        if block_size not in self._read:
            self._read[block_size] = mmap.mmap(-1, block_size)
        return memoryview(self._read[block_size])
