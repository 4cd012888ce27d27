"""The storage tier: a directory of .npy files (rule 6.4.2), written and read in chunks.

A write is the .npy header, then the entry's bytes chunk by chunk from a borrowed page-aligned
buffer (os.write), then fsync; a read opens the file, evicts it from the page cache
(POSIX_FADV_DONTNEED), parses the header and reads the data into a borrowed buffer, so every
read comes from the storage and neither direction allocates memory as large as the entry. The
files stay ordinary .npy files (np.load reads them).
"""

from __future__ import annotations

import itertools
import os
import re
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
from numpy.lib import format as npy_format

from kvcache_sim.payload import ChunkBuffers, Content, chunks
from kvcache_sim.tiers import IoTiming, Tier

FILE_PATTERN = re.compile(r"^kv_\d+_[A-Za-z0-9_.-]+\.npy$")
_FADVISE = getattr(os, "posix_fadvise", None)
_DONTNEED = getattr(os, "POSIX_FADV_DONTNEED", 4)
MEMORY_FILESYSTEMS = ("tmpfs", "ramfs")


class ShortFile(OSError):
    """A KV file holding fewer data bytes than its header promises."""


def _write_all(fd: int, view: Any) -> None:
    data = memoryview(view).cast("B")
    while data:
        written = os.write(fd, data)
        data = data[written:]


def npy_header(shape: tuple[int, ...], dtype: np.dtype) -> bytes:
    """The .npy (version 1.0) header np.save would write for a C-ordered array."""
    import io

    out = io.BytesIO()
    npy_format.write_array_header_1_0(out, {"descr": npy_format.dtype_to_descr(np.dtype(dtype)),
                                            "fortran_order": False, "shape": tuple(int(x) for x in shape)})
    return out.getvalue()


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
        start = time.perf_counter()
        with open(handle, "rb", buffering=0) as fh:
            opened = time.perf_counter()
            self._drop(fh.fileno())
            dropped = time.perf_counter()
            version = npy_format.read_magic(fh)
            shape, _, dtype = (npy_format.read_array_header_1_0(fh) if version == (1, 0)
                               else npy_format.read_array_header_2_0(fh))
            expected = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
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
                "status": status}

    def export(self, handle: Any) -> np.ndarray:  # pragma: no cover - storage is always the last tier
        return np.load(handle, allow_pickle=False)

    def remove(self, handle: Any) -> None:
        try:
            os.unlink(handle)
        except FileNotFoundError:
            pass


