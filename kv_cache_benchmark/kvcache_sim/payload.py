"""KV entry contents and the I/O buffers they move through, bounded by design.

An entry is never materialised just to be written: `KVData.make(tokens)` returns a `KVPayload`
(shape, dtype, size) whose bytes are produced chunk by chunk into a reused, page-aligned buffer
(`ChunkBuffers`), so a storage write of a 3 GiB entry holds one chunk, not 3 GiB. Each chunk is
a copy of a random, 8-byte-aligned piece of one random pool, and the first 8 bytes of every
512 B block get a stamp no other block of this process had (a counter from a random 56-bit
base): a deduplicating or compressing store cannot shrink what was written, at the cost of one
8-byte store per 512 B on top of the memcpy the old assembly already paid. (The checkpoint
engine's mlpstorage_py/storage/buffers.py stamps each 4 KiB page the same way; this package
does not import mlpstorage, so the idea is repeated here at 512 B.)
"""

from __future__ import annotations

import mmap
import os
import threading
from contextlib import contextmanager
from typing import Iterator, Union

import numpy as np

BLOCK = 512                      # the granularity at which every written byte is unique
PAGE = mmap.PAGESIZE
DEFAULT_CHUNK = 4 << 20          # bytes per I/O chunk


def aligned_bytes(nbytes: int) -> np.ndarray:
    """A page-aligned uint8 array (anonymous mapping), not zero-filled by us."""
    return np.frombuffer(mmap.mmap(-1, max(nbytes, PAGE)), dtype=np.uint8)[:nbytes]


class ChunkBuffers:
    """A free list of page-aligned chunk buffers: a thread borrows one for one operation, so
    the buffers in existence never exceed the operations in flight at once."""

    def __init__(self, chunk_bytes: int = DEFAULT_CHUNK) -> None:
        if chunk_bytes < BLOCK or chunk_bytes % BLOCK:
            raise ValueError(f"chunk size {chunk_bytes} must be a positive multiple of {BLOCK}")
        self.chunk_bytes = int(chunk_bytes)
        self._free: list[np.ndarray] = []
        self._lock = threading.Lock()
        self.allocated = 0

    @contextmanager
    def borrow(self) -> Iterator[np.ndarray]:
        with self._lock:
            buffer = self._free.pop() if self._free else None
            if buffer is None:
                self.allocated += 1
        if buffer is None:
            buffer = aligned_bytes(self.chunk_bytes)
        try:
            yield buffer
        finally:
            with self._lock:
                self._free.append(buffer)

    @property
    def allocated_bytes(self) -> int:
        return self.allocated * self.chunk_bytes


SHARED_BUFFERS = ChunkBuffers()


class KVData:
    """The source of every entry's bytes: a random pool plus per-512 B stamps."""

    def __init__(self, elements_per_token: int, dtype: np.dtype, pool_mib: int, seed: int) -> None:
        self.elements_per_token = elements_per_token
        self.dtype = np.dtype(dtype)
        size = max(1 << 20, int(pool_mib) << 20)
        self.pool = np.frombuffer(np.random.default_rng(seed).bytes(size), dtype=np.uint8)
        self._offsets = np.random.default_rng(seed + 1)
        self._lock = threading.Lock()
        self._stamp = int.from_bytes(os.urandom(7), "little")  # 2**56 blocks of headroom below 2**64
        self.stamps_issued = 0

    def make(self, tokens: int) -> KVPayload:
        return KVPayload(self, (int(tokens), self.elements_per_token), self.dtype)

    def _take(self, blocks: int, high: int) -> tuple[int, int]:
        """A range of fresh stamps and a random 8-byte-aligned pool offset below high."""
        with self._lock:
            first = self._stamp
            self._stamp += blocks
            self.stamps_issued += blocks
            offset = int(self._offsets.integers(0, max(1, high // 8))) * 8
        return first, offset

    def fill(self, out: np.ndarray) -> None:
        """Fill a uint8 array with pool bytes, stamping the first 8 bytes of each 512 B block
        (out's length is a multiple of 512 except for an entry's last chunk)."""
        total = out.size
        pool = self.pool.size
        done = 0
        while done < total:
            length = min(total - done, pool // 2)
            blocks = -(-length // BLOCK)
            first, offset = self._take(blocks, pool - length + 1)
            piece = out[done:done + length]
            np.copyto(piece, self.pool[offset:offset + length])
            whole = length // BLOCK
            if whole:
                words = piece[:whole * BLOCK].view(np.uint64)[::BLOCK // 8]
                np.add(np.arange(whole, dtype=np.uint64), np.uint64(first), out=words)
            if blocks > whole:  # a short last block still gets its own stamp (as many bytes as fit)
                tail = np.array([first + whole], dtype="<u8").view(np.uint8)
                rest = piece[whole * BLOCK:]
                rest[:min(8, rest.size)] = tail[:min(8, rest.size)]
            done += length


class KVPayload:
    """An entry to be written: its shape and dtype, and its bytes on demand."""

    def __init__(self, source: KVData, shape: tuple[int, int], dtype: np.dtype) -> None:
        self.source = source
        self.shape = shape
        self.dtype = dtype
        self.nbytes = int(shape[0] * shape[1] * dtype.itemsize)

    def materialize(self) -> np.ndarray:
        """A private array of the entry (what a memory tier keeps)."""
        out = np.empty(self.nbytes, dtype=np.uint8)
        self.source.fill(out)
        return out.view(self.dtype).reshape(self.shape)


Content = Union[KVPayload, np.ndarray]


def byte_view(array: np.ndarray) -> np.ndarray:
    """An array's bytes, without a copy."""
    return np.ascontiguousarray(array).reshape(-1).view(np.uint8)


def chunks(content: Content, buffer: np.ndarray) -> Iterator[np.ndarray]:
    """The content's bytes in order, at most len(buffer) at a time: a payload is produced into
    the buffer; an array (a demoted entry) is sliced without a copy."""
    step = buffer.size
    if isinstance(content, KVPayload):
        for start in range(0, content.nbytes, step):
            piece = buffer[:min(step, content.nbytes - start)]
            content.source.fill(piece)
            yield piece
    else:
        flat = byte_view(content)
        for start in range(0, flat.size, step):
            yield flat[start:start + step]
