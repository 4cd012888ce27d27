"""The storage tier: a directory of .npy files (rule 6.4.2), written and read in chunks.

A write is the .npy header, then the entry's bytes chunk by chunk from a borrowed page-aligned
buffer (os.write), then fsync; a read opens the file, evicts it from the page cache
(POSIX_FADV_DONTNEED), parses the header and reads the data into a borrowed buffer, so every
read comes from the storage and neither direction allocates memory as large as the entry. The
files stay ordinary .npy files (np.load reads them).

Reads parse the header themselves (`read_npy_header`) rather than through numpy's readers,
which hand it to `ast.literal_eval`: CPython 3.11 builds ASTs thread-unsafely
(python/cpython#106905), and many reader threads at once crashed a run with "SystemError: AST
constructor recursion depth mismatch". The header is one fixed form (the one np.save writes for
a C-order array of a plain number type: entries are 2-D, an array demoted into the tier keeps
its shape), so a regular expression reads it exactly and anything else is refused. (The writer,
numpy's write_array_header_1_0, only uses repr.)
"""

from __future__ import annotations

import contextlib
import functools
import io
import itertools
import math
import os
import re
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
from numpy.lib import format as npy_format

from kvcache_sim.payload import ChunkBuffers, Content, byte_view, chunks
from kvcache_sim.tiers import IoTiming, Tier

FILE_PATTERN = re.compile(r"^kv_\d+_[A-Za-z0-9_.-]+\.npy$")
_FADVISE = getattr(os, "posix_fadvise", None)
_DONTNEED = getattr(os, "POSIX_FADV_DONTNEED", 4)
MEMORY_FILESYSTEMS = ("tmpfs", "ramfs")
NPY_MAGIC = b"\x93NUMPY"
# Version -> the header length's struct format: 1.0 and 2.0 only (3.0 is for utf-8 field names).
NPY_LENGTH = {(1, 0): "<H", (2, 0): "<I"}
NPY_MAX_HEADER = 4096  # the dict and its padding; ours are 118 bytes (numpy's own cap is 10,000)
# The dict np.save writes (keys sorted, repr'd values, a trailing ", "), space-padded, then "\n";
# the shape is a tuple's repr: (), (n,) or (n, m, ...).
NPY_DICT = re.compile(r"\{'descr': '([<>|][biufc][0-9]{1,2})', 'fortran_order': False, "
                      r"'shape': \(((?:[0-9]+,)?|[0-9]+(?:, [0-9]+)+)\), \} *\n")


class ShortFile(OSError):
    """A KV file holding fewer data bytes than its header promises."""


class BadHeader(ValueError):
    """A file whose .npy header is not the C-order, plain-number one this tool writes."""


def _write_all(fd: int, view: Any) -> None:
    data = memoryview(view).cast("B")
    while data:
        written = os.write(fd, data)
        data = data[written:]


def npy_header(shape: tuple[int, ...], dtype: np.dtype) -> bytes:
    """The .npy (version 1.0) header np.save would write for a C-ordered array (kept per shape:
    numpy's writer costs tens of microseconds a call, and a run writes few distinct shapes)."""
    return _npy_header(tuple(int(x) for x in shape), np.dtype(dtype).str)


@functools.lru_cache(maxsize=4096)
def _npy_header(shape: tuple[int, ...], descr: str) -> bytes:
    out = io.BytesIO()
    npy_format.write_array_header_1_0(out, {"descr": npy_format.dtype_to_descr(np.dtype(descr)),
                                            "fortran_order": False, "shape": shape})
    return out.getvalue()


def _read_exactly(fh: BinaryIO, count: int, name: Any, what: str) -> bytes:
    """count bytes of a regular file, whose short read means it ended there."""
    data = fh.read(count)
    if data is None or len(data) != count:
        raise BadHeader(f"{name}: the file ends inside the .npy {what}")
    return data


def read_npy_header(fh: BinaryIO, name: Any) -> tuple[tuple[int, ...], np.dtype]:
    """The shape and dtype in the .npy header at fh's position, leaving fh at the first data
    byte; no ast and no eval, so any number of threads may call it at once."""
    prefix = _read_exactly(fh, len(NPY_MAGIC) + 2, name, "magic string")
    if prefix[:len(NPY_MAGIC)] != NPY_MAGIC:
        raise BadHeader(f"{name}: not a .npy file (magic {prefix[:len(NPY_MAGIC)]!r})")
    version = (prefix[-2], prefix[-1])
    fmt = NPY_LENGTH.get(version)
    if fmt is None:
        raise BadHeader(f"{name}: .npy version {version[0]}.{version[1]}, expected 1.0 or 2.0")
    (length,) = struct.unpack(fmt, _read_exactly(fh, struct.calcsize(fmt), name, "header length"))
    if length > NPY_MAX_HEADER:
        raise BadHeader(f"{name}: .npy header of {length} bytes, more than {NPY_MAX_HEADER}")
    text = _read_exactly(fh, length, name, "header").decode("latin1")
    found = NPY_DICT.fullmatch(text)
    if found is None:
        raise BadHeader(f"{name}: not a C-order array of a plain number type: {text.rstrip()[:200]!r}")
    descr, shape = found.groups()
    try:
        dtype = np.dtype(descr)
    except TypeError:
        raise BadHeader(f"{name}: unknown dtype {descr!r} in the .npy header") from None
    return tuple(int(x) for x in shape.replace(",", " ").split()), dtype


def filesystem_type(path: Path) -> str:
    """The type of the file system holding path (longest mount point in /proc/self/mounts)."""
    target = os.path.realpath(path)
    best, kind = "", "unknown"
    try:
        with open("/proc/self/mounts", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                fields = line.split()
                if len(fields) < 3:
                    continue
                point = fields[1].replace("\\040", " ")
                inside = target == point or target.startswith(point.rstrip("/") + "/")
                if inside and len(point) >= len(best):
                    best, kind = point, fields[2]
    except OSError:
        pass
    return kind




class StorageTier(Tier):
    """A directory of .npy files (rule 6.4.2): written in chunks then fsync'd; evicted from the
    page cache (POSIX_FADV_DONTNEED) then read in chunks, so every read comes from the storage."""

    name = "storage"

    def __init__(self, capacity_bytes: int, directory: Path, buffers: ChunkBuffers | None = None) -> None:
        super().__init__(capacity_bytes, buffers)
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._serial = itertools.count()
        # Page-cache evictions before reads, counted so the result can say whether they happened.
        self._drop_lock = threading.Lock()
        self.reads = self.drops = self.drop_failures = 0
        self.drop_error = ""
        # Reads of one entry take turns: two at once would share the pages the first brings in
        # (its drop cannot evict pages the other is reading), so one would not come from storage.
        self._readers: dict[Any, list[Any]] = {}  # handle -> [lock, reads holding or waiting]
        self.reads_waited = 0

    @staticmethod
    def stale_files(directory: Path) -> list[Path]:
        """Files a previous kv-cache.py run left behind (only names this tool creates)."""
        if not directory.is_dir():
            return []
        return [p for p in directory.iterdir() if p.is_file() and FILE_PATTERN.match(p.name)]

    def path_for(self, key: str) -> Path:
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", key)[:120]
        return self.directory / f"kv_{next(self._serial)}_{safe}.npy"

    def write(self, key: str, content: Content) -> tuple[Any, IoTiming]:
        """Header and data chunks (host span: producing and handing them to the kernel), then
        fsync (device span); the clean pages are then dropped so they do not pile up in RAM."""
        path = self.path_for(key)
        start = time.perf_counter()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            _write_all(fd, npy_header(content.shape, content.dtype))
            with self.buffers.borrow() as buffer:
                for piece in chunks(content, buffer):
                    _write_all(fd, piece)
            synced = time.perf_counter()
            os.fsync(fd)
            done = time.perf_counter()
            if _FADVISE is not None:
                _FADVISE(fd, 0, 0, _DONTNEED)
        except BaseException:
            os.close(fd)
            path.unlink(missing_ok=True)
            raise
        os.close(fd)
        return path, IoTiming(done - start, device=done - synced, host=synced - start)

    def read(self, handle: Any) -> tuple[int, IoTiming]:
        """open(), the page-cache drop, the header and every data byte; the device span is the
        whole read except the drop (open() included, as the reference's read span is)."""
        with self._turn(handle):
            return self._read(handle)

    @contextlib.contextmanager
    def _turn(self, handle: Any) -> Iterator[None]:
        """Hold the entry's read lock (waiting for another read of it to finish, untimed)."""
        with self._drop_lock:
            slot = self._readers.setdefault(handle, [threading.Lock(), 0])
            slot[1] += 1
            if slot[1] > 1:  # another read of the entry holds it or waits for it
                self.reads_waited += 1
        try:
            with slot[0]:
                yield
        finally:
            with self._drop_lock:
                slot[1] -= 1
                if not slot[1]:
                    del self._readers[handle]

    def _read(self, handle: Any) -> tuple[int, IoTiming]:
        start = time.perf_counter()
        with open(handle, "rb", buffering=0) as fh:
            opened = time.perf_counter()
            self._drop(fh.fileno())
            dropped = time.perf_counter()
            shape, dtype = read_npy_header(fh, handle)
            expected = math.prod(shape) * dtype.itemsize
            got = 0
            with self.buffers.borrow() as buffer:
                while got < expected:
                    count = fh.readinto(buffer[:min(buffer.size, expected - got)])
                    if not count:
                        raise ShortFile(f"{handle}: {got} of {expected} data bytes")
                    got += count
            done = time.perf_counter()
        drop = dropped - opened
        return got, IoTiming(done - start, device=done - start - drop, host=drop)

    def _drop(self, fd: int) -> None:
        """POSIX_FADV_DONTNEED on the file before its data is read, so the read comes from the storage."""
        failed = ""
        if _FADVISE is not None:
            try:
                _FADVISE(fd, 0, 0, _DONTNEED)
            except OSError as exc:
                failed = exc.strerror or str(exc)
        with self._drop_lock:
            self.reads += 1
            if _FADVISE is None:
                return
            if failed:
                self.drop_failures += 1
                self.drop_error = failed
            else:
                self.drops += 1

    def page_cache_record(self) -> dict[str, Any]:
        """What this process did to keep storage reads out of the page cache, and whether it
        could work: DONTNEED evicts nothing on tmpfs/ramfs, where file data lives only in memory."""
        fs = filesystem_type(self.directory)
        with self._drop_lock:
            reads, drops, failures, error = self.reads, self.drops, self.drop_failures, self.drop_error
            waited = self.reads_waited
        if _FADVISE is None:
            status = "not dropped: posix_fadvise is not available on this platform"
        elif fs in MEMORY_FILESYSTEMS:
            status = f"not dropped: the cache directory is on {fs}, whose file data lives only in memory"
        elif not reads:
            status = "no storage reads"
        elif failures:
            status = f"not dropped before {failures} of {reads} reads: {error}"
        else:
            status = "dropped before every storage read"
        return {"method": "posix_fadvise(POSIX_FADV_DONTNEED) on each KV file before reading it; no drop_caches",
                "filesystem": fs, "storage_reads": reads, "fadvise_done": drops, "fadvise_failed": failures,
                "reads_waited_for_another_read_of_the_entry": waited,
                "status": status}

    def export(self, handle: Any) -> np.ndarray:  # pragma: no cover - storage is always the last tier
        """The entry as an array, through the same thread-safe header parser as read()."""
        with open(handle, "rb") as fh:
            shape, dtype = read_npy_header(fh, handle)
            out = np.empty(shape, dtype=dtype)
            got = fh.readinto(byte_view(out))
        if got != out.nbytes:
            raise ShortFile(f"{handle}: {got} of {out.nbytes} data bytes")
        return out

    def remove(self, handle: Any) -> None:
        try:
            os.unlink(handle)
        except FileNotFoundError:
            pass


