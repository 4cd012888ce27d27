"""KV entry contents and the I/O buffers they move through, bounded by design.

An entry is never materialised just to be written: `KVData.make(tokens)` returns a `KVPayload`
(shape, dtype, size) whose bytes are produced chunk by chunk into a reused, page-aligned buffer
(`ChunkBuffers`), so a storage write of a 3 GiB entry holds one chunk, not 3 GiB.

The bytes are incompressible, not only unique. A chunk is cut into pieces of at most half the
pool (one piece for the default 64 MiB pool and 4 MiB chunks); each piece is a random
8-byte-aligned slice of one random pool (`engine.data_pool_mib`) XORed, word by word, with a
fresh random 64-bit key, and the first 8 bytes of every 512 B block are then a stamp no other
block of this process had (a counter from a random 56-bit base). Copying the pool as it is left
the files unique at 512 B but let an LZ compressor with a long window find the pool again (zstd
-1 --long=27 shrank a run's files 2.7x, --long=31 1.25 GiB of them 6x): two slices of the same
pool region under different keys differ in nearly every byte, so they share no run of equal
bytes to match, and the stamps still rule out any duplicate 512 B block for a deduplicating
store. The cost is that of the plain copy it replaces: one vectorised XOR pass from the pool
slice into the buffer (numpy releases the GIL for it) plus one 8-byte store per 512 B; an
entry's later chunks are that buffer XORed in place with a fresh key (refresh), so a write reads
the pool once, not once per chunk.
(The checkpoint engine's mlpstorage_py/storage/buffers.py stamps each 4 KiB page the same way;
this package does not import mlpstorage, so the idea is repeated here at 512 B.)
"""

from __future__ import annotations

import mmap
import os
import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

BLOCK = 512                      # the granularity at which every written byte is unique
WORD = 8                         # bytes per pool word, stamp and key
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
    """The source of every entry's bytes: a random pool, a fresh key per piece, per-512 B stamps."""

    def __init__(self, elements_per_token: int, dtype: np.dtype, pool_mib: int, seed: int) -> None:
        self.elements_per_token = elements_per_token
        self.dtype = np.dtype(dtype)
        words = max(1 << 20, int(pool_mib) << 20) // WORD
        self.pool = np.random.default_rng(seed).integers(0, 1 << 64, size=words, dtype=np.uint64)
        # A piece is at most half the pool, so its slice can start at many places; a multiple of
        # BLOCK, so every piece but an entry's last starts and ends on a block boundary.
        self._piece = self.pool.nbytes // 2
        self._rng = random.Random(seed + 1)  # offsets and keys: a numpy Generator call costs ~5 us
        self._lock = threading.Lock()
        self._stamp = int.from_bytes(os.urandom(7), "little")  # 2**56 blocks of headroom below 2**64
        self.stamps_issued = 0

    def make(self, tokens: int) -> KVPayload:
        return KVPayload(self, (int(tokens), self.elements_per_token), self.dtype)

    def _take(self, blocks: int, high: int) -> tuple[int, int, np.uint64]:
        """A range of fresh stamps, a random pool word index below high and a fresh piece key."""
        with self._lock:
            first = self._stamp
            self._stamp += blocks
            self.stamps_issued += blocks
            start = self._rng.randrange(high)
            key = np.uint64(self._rng.getrandbits(64))
        return first, start, key

    def refresh(self, out: np.ndarray) -> None:
        """Turn a chunk that fill() produced (or an earlier refresh) into the next chunk of the
        same entry: XOR it in place with a fresh key, then stamp it anew. It is keyed pool words
        again, two chunks sharing no run of equal bytes, at the cost of one pass over a buffer
        still in the CPU's cache instead of a read of the pool from memory."""
        blocks = -(-out.size // BLOCK)
        words, partial = divmod(out.size, WORD)
        first, _, key = self._take(blocks, 1)
        head = out[:words * WORD].view(np.uint64)
        np.bitwise_xor(head, key, out=head)
        marks = head[::BLOCK // WORD]
        np.copyto(marks, np.arange(first, first + marks.size, dtype=np.uint64))
        if partial:
            last = np.zeros(1, dtype=np.uint64)
            last.view(np.uint8)[:partial] = out[words * WORD:]
            last ^= key
            if words % (BLOCK // WORD) == 0:
                last[0] = first + blocks - 1
            out[words * WORD:] = last.view(np.uint8)[:partial]

    def fill(self, out: np.ndarray) -> None:
        """Fill a uint8 array with keyed pool words, then stamp the first 8 bytes of each 512 B
        block (out's length is a multiple of 512 except for an entry's last chunk, whose short
        last block gets its stamp too, as many bytes of it as fit)."""
        for done in range(0, out.size, self._piece):
            piece = out[done:done + self._piece]
            blocks = -(-piece.size // BLOCK)
            words, partial = divmod(piece.size, WORD)
            first, start, key = self._take(blocks, self.pool.size - words - bool(partial) + 1)
            source = self.pool[start:start + words + bool(partial)]
            head = piece[:words * WORD].view(np.uint64)
            np.bitwise_xor(source[:words], key, out=head)
            stamps = np.arange(first, first + blocks, dtype=np.uint64)
            marks = head[::BLOCK // WORD]
            np.copyto(marks, stamps[:marks.size])
            if partial:  # the bytes after the last whole word
                last = source[words:] ^ key
                if words % (BLOCK // WORD) == 0:  # they begin a block: its stamp
                    last[0] = stamps[-1]
                piece[words * WORD:] = last.view(np.uint8)[:partial]


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


Content = KVPayload | np.ndarray


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
            if start:  # the buffer holds the entry's previous chunk, at least as long as this one
                content.source.refresh(piece)
            else:
                content.source.fill(piece)
            yield piece
    else:
        flat = byte_view(content)
        for start in range(0, flat.size, step):
            yield flat[start:start + step]
