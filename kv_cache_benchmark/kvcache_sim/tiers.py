"""The tiered KV cache: GPU memory, CPU memory and a storage directory, with LRU waterfall.

A new entry goes to the fastest tier it fits in; when that tier is full its least recently
used entries are demoted to the next tier (and so on down); the last tier deletes its LRU
entries. Bookkeeping happens under one short lock; data moves outside it. An entry's old copy
stays readable until its move completes, so a reader never sees a half-moved entry, and a
storage file deleted under a reader is reported as a miss.
"""

from __future__ import annotations

import itertools
import os
import re
import threading
import time
import warnings
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from kvcache_sim.stats import Series

GIB = 1 << 30
FILE_PATTERN = re.compile(r"^kv_\d+_[A-Za-z0-9_.-]+\.npy$")
_FADVISE = getattr(os, "posix_fadvise", None)
_DONTNEED = getattr(os, "POSIX_FADV_DONTNEED", 4)
MEMORY_FILESYSTEMS = ("tmpfs", "ramfs")


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


class IoTiming(NamedTuple):
    """Seconds one tier operation took; for storage, `device` is the fsync span (write) or the
    np.load span on a page-cache-dropped file (read), and `host` the rest."""

    total: float
    device: float = 0.0
    host: float = 0.0


def numpy_dtype(dtype_name: str) -> np.dtype:
    """The numpy type KV data is stored as (bfloat16 has none: stored as 16-bit words)."""
    return np.dtype({"float32": np.float32, "float16": np.float16, "bfloat16": np.uint16, "int8": np.int8}[dtype_name])


class KVData:
    """KV arrays of shape (tokens, elements per token) made from one random pool: no per-entry
    random generation, incompressible content, and different offsets for different entries.
    An entry that fits the pool is a zero-copy view of it; a larger one is assembled from
    pool pieces taken at random, element-aligned offsets (one memcpy per byte, GIL released),
    so equal file blocks are rare and block-level deduplication gains little. Assembly reuses
    a per-thread buffer (fresh memory costs a page fault per 4 KiB): an array from make() is
    valid until the same thread calls make() again, which every tier's write respects (the
    memory tiers copy it, the storage tier writes it out before returning)."""

    def __init__(self, elements_per_token: int, dtype: np.dtype, pool_mib: int, seed: int) -> None:
        self.elements_per_token = elements_per_token
        self.dtype = dtype
        count = max(2 * elements_per_token, (pool_mib << 20) // dtype.itemsize)
        raw = np.random.default_rng(seed).bytes(count * dtype.itemsize)
        self.pool = np.frombuffer(raw, dtype=dtype)
        self._offsets = np.random.default_rng(seed + 1)
        self._lock = threading.Lock()
        self._local = threading.local()

    def _buffer(self, count: int) -> np.ndarray:
        buffer = getattr(self._local, "buffer", None)
        if buffer is None or buffer.size < count:
            buffer = np.empty(max(count, int(buffer.size * 1.25) if buffer is not None else 0), dtype=self.dtype)
            self._local.buffer = buffer
        return buffer[:count]

    def _offset(self, high: int) -> int:
        with self._lock:
            return int(self._offsets.integers(0, max(1, high)))

    def make(self, tokens: int) -> np.ndarray:
        width = self.elements_per_token
        needed = tokens * width
        size = self.pool.size
        if needed <= size:
            start = self._offset(size - needed + 1)
            return self.pool[start:start + needed].reshape(tokens, width)
        out = self._buffer(needed)
        piece = size // 2
        for begin in range(0, needed, piece):
            length = min(piece, needed - begin)
            start = self._offset(size - length + 1)
            out[begin:begin + length] = self.pool[start:start + length]
        return out.reshape(tokens, width)


class Tier:
    """One level of the cache. Handles are whatever the tier needs to find the data again."""

    name = "tier"

    def __init__(self, capacity_bytes: int) -> None:
        self.capacity = int(capacity_bytes)

    def write(self, key: str, array: np.ndarray) -> tuple[Any, IoTiming]:
        raise NotImplementedError

    def read(self, handle: Any) -> tuple[Any, IoTiming]:
        raise NotImplementedError

    def export(self, handle: Any) -> np.ndarray:
        """The entry's data as a host array, for demotion to the next tier (not timed as a read)."""
        raise NotImplementedError

    def remove(self, handle: Any) -> None:
        pass

    def close(self) -> None:
        pass


class CpuTier(Tier):
    """Host memory: a private contiguous copy per entry; a read copies it out (the transfer a
    server makes to bring KV back to the accelerator)."""

    name = "cpu"

    def write(self, key: str, array: np.ndarray) -> tuple[Any, IoTiming]:
        start = time.perf_counter()
        copy = np.array(array, copy=True, order="C")
        return copy, IoTiming(time.perf_counter() - start)

    def read(self, handle: Any) -> tuple[Any, IoTiming]:
        start = time.perf_counter()
        out = handle.copy()
        return out, IoTiming(time.perf_counter() - start)

    def export(self, handle: Any) -> np.ndarray:
        return handle


class GpuTier(Tier):
    """Accelerator memory through torch (CUDA); present only when a device is."""

    name = "gpu"

    def __init__(self, capacity_bytes: int, device: str = "cuda:0") -> None:
        super().__init__(capacity_bytes)
        import torch

        self.torch = torch
        self.device = torch.device(device)

    def _sync(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def write(self, key: str, array: np.ndarray) -> tuple[Any, IoTiming]:
        torch = self.torch
        start = time.perf_counter()
        host = np.ascontiguousarray(array)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # read-only pool views are fine: the copy below owns its data
            tensor = torch.from_numpy(host.view(np.uint8).reshape(-1)).to(self.device, copy=True)
        self._sync()
        return (tensor, array.dtype, array.shape), IoTiming(time.perf_counter() - start)

    def read(self, handle: Any) -> tuple[Any, IoTiming]:
        start = time.perf_counter()
        out = handle[0].clone()
        self._sync()
        return out, IoTiming(time.perf_counter() - start)

    def export(self, handle: Any) -> np.ndarray:
        tensor, dtype, shape = handle
        return tensor.cpu().numpy().view(dtype).reshape(shape)


def gpu_available() -> bool:
    try:
        import torch
    except Exception:  # noqa: BLE001 - any import failure means no GPU tier
        return False
    try:
        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001
        return False


class StorageTier(Tier):
    """A directory of .npy files (rule 6.4.2): np.save + fsync to write; POSIX_FADV_DONTNEED then
    np.load to read, so every read comes from the storage, not the page cache."""

    name = "storage"

    def __init__(self, capacity_bytes: int, directory: Path) -> None:
        super().__init__(capacity_bytes)
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

    def write(self, key: str, array: np.ndarray) -> tuple[Any, IoTiming]:
        path = self.path_for(key)
        start = time.perf_counter()
        with open(path, "wb") as fh:
            np.save(fh, array, allow_pickle=False)
            fh.flush()
            synced = time.perf_counter()
            os.fsync(fh.fileno())
            done = time.perf_counter()
            if _FADVISE is not None:  # the pages are clean now; do not let them pile up in RAM
                _FADVISE(fh.fileno(), 0, 0, _DONTNEED)
        return path, IoTiming(done - start, device=done - synced, host=synced - start)

    def read(self, handle: Any) -> tuple[Any, IoTiming]:
        start = time.perf_counter()
        with open(handle, "rb") as fh:
            self._drop(fh.fileno())
            dropped = time.perf_counter()
            array = np.load(fh, allow_pickle=False)
            done = time.perf_counter()
        return array, IoTiming(done - start, device=done - dropped, host=dropped - start)

    def _drop(self, fd: int) -> None:
        """POSIX_FADV_DONTNEED on the file before np.load, so the read comes from the storage."""
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
        return {"method": "posix_fadvise(POSIX_FADV_DONTNEED) on each KV file before np.load; no drop_caches",
                "filesystem": fs, "storage_reads": reads, "fadvise_done": drops, "fadvise_failed": failures,
                "status": status}

    def export(self, handle: Any) -> np.ndarray:  # pragma: no cover - storage is always the last tier
        return np.load(handle, allow_pickle=False)

    def remove(self, handle: Any) -> None:
        try:
            os.unlink(handle)
        except FileNotFoundError:
            pass


@dataclass
class TierStats:
    """What one tier did: bytes, operations and latencies (storage also device/host spans)."""

    name: str
    bytes_read: int = 0
    bytes_written: int = 0
    read_ops: int = 0
    write_ops: int = 0
    tokens_read: int = 0
    tokens_written: int = 0
    offloads_in: int = 0
    evictions: int = 0
    read_latency: Series = field(default_factory=Series)
    write_latency: Series = field(default_factory=Series)
    read_device: Series = field(default_factory=Series)
    write_device: Series = field(default_factory=Series)
    read_host: Series = field(default_factory=Series)
    write_host: Series = field(default_factory=Series)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record_read(self, nbytes: int, tokens: int, timing: IoTiming) -> None:
        with self.lock:
            self.bytes_read += nbytes
            self.read_ops += 1
            self.tokens_read += tokens
        self.read_latency.add(timing.total)
        self.read_device.add(timing.device)
        self.read_host.add(timing.host)

    def record_write(self, nbytes: int, tokens: int, timing: IoTiming) -> None:
        with self.lock:
            self.bytes_written += nbytes
            self.write_ops += 1
            self.tokens_written += tokens
        self.write_latency.add(timing.total)
        self.write_device.add(timing.device)
        self.write_host.add(timing.host)

    def reset(self) -> None:
        fresh = TierStats(self.name)
        for name in ("bytes_read", "bytes_written", "read_ops", "write_ops", "tokens_read", "tokens_written",
                     "offloads_in", "evictions", "read_latency", "write_latency", "read_device", "write_device",
                     "read_host", "write_host"):
            setattr(self, name, getattr(fresh, name))


@dataclass
class Entry:
    key: str
    nbytes: int
    tokens: int
    tier: int
    handle: Any
    moving: bool = False


class Lookup(NamedTuple):
    hit: bool
    tier: str | None
    timing: IoTiming


class MultiTierCache:
    """Tiers fastest first; the last one deletes its LRU entries when full."""

    def __init__(self, tiers: list[Tier]) -> None:
        if not tiers:
            raise ValueError("at least one tier is needed")
        self.tiers = tiers
        self.stats = [TierStats(t.name) for t in tiers]
        self._lock = threading.Lock()
        self._index: dict[str, Entry] = {}
        self._lru: list[OrderedDict[str, Entry]] = [OrderedDict() for _ in tiers]
        self._used = [0 for _ in tiers]
        self.rejected = 0
        self.demotion_log: list[tuple[str, str, str]] = []  # (key, from tier, to tier), in order
        self.keep_demotion_log = False

    # -- queries -------------------------------------------------------------------------
    def tier_index(self, name: str) -> int | None:
        return next((i for i, t in enumerate(self.tiers) if t.name == name), None)

    def entries(self, tier_name: str) -> list[str]:
        """Keys resident in a tier, least recently used first."""
        index = self.tier_index(tier_name)
        with self._lock:
            return [] if index is None else list(self._lru[index])

    def entry_counts(self) -> dict[str, int]:
        with self._lock:
            return {t.name: len(self._lru[i]) for i, t in enumerate(self.tiers)}

    def used_bytes(self) -> dict[str, int]:
        with self._lock:
            return {t.name: self._used[i] for i, t in enumerate(self.tiers)}

    def __contains__(self, key: str) -> bool:
        with self._lock:
            return key in self._index

    def where(self, key: str) -> str | None:
        with self._lock:
            entry = self._index.get(key)
            return None if entry is None else self.tiers[entry.tier].name

    # -- operations ----------------------------------------------------------------------
    def put(self, key: str, array: np.ndarray, tokens: int) -> Lookup:
        """Store (or replace) an entry in the fastest tier it fits in; returns where it went."""
        nbytes = int(array.nbytes)
        with self._lock:
            old = self._detach_locked(key)
        if old is not None:
            self._discard(old)
        index, victims = self._place(nbytes, 0)
        for victim in victims:
            self._demote(victim)
        if index is None:
            with self._lock:
                self.rejected += 1
            return Lookup(False, None, IoTiming(0.0))
        try:
            handle, timing = self.tiers[index].write(key, array)
        except BaseException:
            with self._lock:
                self._used[index] -= nbytes
            raise
        entry = Entry(key, nbytes, tokens, index, handle)
        with self._lock:
            stale = self._detach_locked(key)  # a concurrent put of the same key lost the race
            self._index[key] = entry
            self._lru[index][key] = entry
        if stale is not None:
            self._discard(stale)
        self.stats[index].record_write(nbytes, tokens, timing)
        return Lookup(True, self.tiers[index].name, timing)

    def get(self, key: str) -> Lookup:
        """Read an entry from wherever it lives (a hit), or report a miss."""
        with self._lock:
            entry = self._index.get(key)
            if entry is None:
                return Lookup(False, None, IoTiming(0.0))
            index, handle = entry.tier, entry.handle
            if key in self._lru[index]:
                self._lru[index].move_to_end(key)
        try:
            data, timing = self.tiers[index].read(handle)
        except FileNotFoundError:  # deleted by an eviction after we looked it up
            return Lookup(False, None, IoTiming(0.0))
        del data
        self.stats[index].record_read(entry.nbytes, entry.tokens, timing)
        return Lookup(True, self.tiers[index].name, timing)

    def remove(self, key: str) -> None:
        with self._lock:
            entry = self._detach_locked(key)
        if entry is not None:
            self._discard(entry)

    def clear(self) -> None:
        """Delete every entry (the storage tier's files included)."""
        with self._lock:
            keys = list(self._index)
        for key in keys:
            self.remove(key)

    def reset_stats(self) -> None:
        for stats in self.stats:
            stats.reset()
        with self._lock:
            self.rejected = 0

    # -- internals -----------------------------------------------------------------------
    def _detach_locked(self, key: str) -> Entry | None:
        """Forget an entry; returns it when its data should be deleted by the caller."""
        entry = self._index.pop(key, None)
        if entry is None:
            return None
        if entry.moving:  # its demoter sees it is gone and cleans up both copies
            return None
        self._lru[entry.tier].pop(key, None)
        self._used[entry.tier] -= entry.nbytes
        return entry

    def _discard(self, entry: Entry) -> None:
        self.tiers[entry.tier].remove(entry.handle)

    def _place(self, nbytes: int, start: int) -> tuple[int | None, list[Entry]]:
        """Reserve room for nbytes in the first tier from `start` that can hold it, popping
        that tier's LRU entries as needed; returns the tier and the entries to demote."""
        victims: list[Entry] = []
        with self._lock:
            for index in range(start, len(self.tiers)):
                capacity = self.tiers[index].capacity
                if nbytes > capacity:
                    continue
                lru = self._lru[index]
                while self._used[index] + nbytes > capacity and lru:
                    _, victim = lru.popitem(last=False)
                    self._used[index] -= victim.nbytes
                    victim.moving = True
                    victims.append(victim)
                if self._used[index] + nbytes <= capacity:
                    self._used[index] += nbytes
                    return index, victims
        return None, victims

    def _demote(self, entry: Entry) -> None:
        """Move a popped LRU entry to the next tier that takes it, or delete it from the last."""
        source, old_handle = entry.tier, entry.handle
        if source + 1 < len(self.tiers):
            target, victims = self._place(entry.nbytes, source + 1)
        else:
            target, victims = None, []
        for victim in victims:
            self._demote(victim)
        if target is None:
            with self._lock:
                if self._index.get(entry.key) is entry:
                    del self._index[entry.key]
            with self.stats[source].lock:
                self.stats[source].evictions += 1
            self.tiers[source].remove(old_handle)
            return
        try:
            data = self.tiers[source].export(old_handle)
            handle, timing = self.tiers[target].write(entry.key, data)
            del data
        except BaseException:
            with self._lock:
                self._used[target] -= entry.nbytes
                if self._index.get(entry.key) is entry:
                    del self._index[entry.key]
            self.tiers[source].remove(old_handle)
            raise
        with self._lock:
            current = self._index.get(entry.key) is entry
            if current:
                entry.tier, entry.handle, entry.moving = target, handle, False
                self._lru[target][entry.key] = entry
                if self.keep_demotion_log:
                    self.demotion_log.append((entry.key, self.tiers[source].name, self.tiers[target].name))
            else:
                self._used[target] -= entry.nbytes
        self.tiers[source].remove(old_handle)
        if not current:
            self.tiers[target].remove(handle)
        with self.stats[target].lock:
            self.stats[target].offloads_in += 1
        self.stats[target].record_write(entry.nbytes, entry.tokens, timing)

    def close(self) -> None:
        for tier in self.tiers:
            tier.close()

