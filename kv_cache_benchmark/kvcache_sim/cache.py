"""The tiered KV cache: GPU memory, CPU memory and a storage directory, with LRU waterfall.

A new entry goes to the fastest tier it fits in; when that tier is full its least recently
used entries are demoted to the next tier (and so on down); the last tier deletes its LRU
entries. When the last tier's room is held by writes still in flight (nothing left to evict),
a new entry waits for them, up to its deadline, rather than being dropped or written past the
capacity (the reference does the latter). Bookkeeping happens under one short lock; data moves outside it. An entry's old copy
stays readable until its move completes, so a reader never sees a half-moved entry, and a
storage file deleted under a reader is reported as a miss.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from kvcache_sim.payload import Content
from kvcache_sim.stats import Series
from kvcache_sim.tiers import IoTiming, Tier


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
    offload_bytes_in: int = 0   # bytes written here by demotions from a faster tier
    evictions: int = 0
    read_latency: Series = field(default_factory=Series)
    write_latency: Series = field(default_factory=Series)
    read_device: Series = field(default_factory=Series)
    write_device: Series = field(default_factory=Series)
    read_host: Series = field(default_factory=Series)
    write_host: Series = field(default_factory=Series)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record_read(self, nbytes: int, tokens: int, timing: IoTiming) -> None:
        self._record("read", nbytes, tokens, timing)

    def record_write(self, nbytes: int, tokens: int, timing: IoTiming) -> None:
        self._record("write", nbytes, tokens, timing)

    def _record(self, op: str, nbytes: int, tokens: int, timing: IoTiming) -> None:
        """One operation's counters (under the lock) and its three latency spans."""
        done = "read" if op == "read" else "written"
        with self.lock:
            setattr(self, f"bytes_{done}", getattr(self, f"bytes_{done}") + nbytes)
            setattr(self, f"{op}_ops", getattr(self, f"{op}_ops") + 1)
            setattr(self, f"tokens_{done}", getattr(self, f"tokens_{done}") + tokens)
        getattr(self, f"{op}_latency").add(timing.total)
        getattr(self, f"{op}_device").add(timing.device)
        getattr(self, f"{op}_host").add(timing.host)

    def reset(self) -> None:
        fresh = TierStats(self.name)
        for name in ("bytes_read", "bytes_written", "read_ops", "write_ops", "tokens_read", "tokens_written",
                     "offloads_in", "offload_bytes_in", "evictions", "read_latency", "write_latency", "read_device", "write_device",
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
    tokens: int = 0
    refused: str = ""  # why a put stored nothing: TOO_LARGE or PAST_DEADLINE


TOO_LARGE = "larger than every tier"
PAST_DEADLINE = "no room before the deadline"


class MultiTierCache:
    """Tiers fastest first; the last one deletes its LRU entries when full."""

    def __init__(self, tiers: list[Tier]) -> None:
        if not tiers:
            raise ValueError("at least one tier is needed")
        self.tiers = tiers
        self.stats = [TierStats(t.name) for t in tiers]
        self._lock = threading.Lock()
        self._room = threading.Condition(self._lock)  # notified whenever room may have appeared
        self._waiting = 0  # writers waiting on _room (no notification is needed without one)
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
    def put(self, key: str, content: Content, tokens: int, deadline: float | None = None) -> Lookup:
        """Store (or replace) an entry in the fastest tier it fits in; returns where it went.
        With a deadline (time.perf_counter), a full last tier is waited on until then."""
        nbytes = int(content.nbytes)
        with self._lock:
            old = self._detach_locked(key)
        if old is not None:
            self._discard(old)
        index, victims = self._place(nbytes, 0, deadline)
        for victim in victims:
            self._demote(victim)
        if index is None:
            with self._lock:
                self.rejected += 1
            fits = any(nbytes <= tier.capacity for tier in self.tiers)
            return Lookup(False, None, IoTiming(0.0), refused=PAST_DEADLINE if fits else TOO_LARGE)
        try:
            handle, timing = self.tiers[index].write(key, content)
        except BaseException:
            with self._lock:
                self._used[index] -= nbytes
                self._notify_room()
            raise
        entry = Entry(key, nbytes, tokens, index, handle)
        with self._lock:
            stale = self._detach_locked(key)  # a concurrent put of the same key lost the race
            self._index[key] = entry
            self._lru[index][key] = entry
            self._notify_room()
        if stale is not None:
            self._discard(stale)
        self.stats[index].record_write(nbytes, tokens, timing)
        return Lookup(True, self.tiers[index].name, timing, tokens)

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
            _, timing = self.tiers[index].read(handle)
        except FileNotFoundError:  # deleted by an eviction after we looked it up
            return Lookup(False, None, IoTiming(0.0))
        self.stats[index].record_read(entry.nbytes, entry.tokens, timing)
        return Lookup(True, self.tiers[index].name, timing, entry.tokens)

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
    def _notify_room(self) -> None:
        """Wake writers waiting for room (the caller holds the lock)."""
        if self._waiting:
            self._room.notify_all()

    def _detach_locked(self, key: str) -> Entry | None:
        """Forget an entry; returns it when its data should be deleted by the caller."""
        entry = self._index.pop(key, None)
        if entry is None:
            return None
        if entry.moving:  # its demoter sees it is gone and cleans up both copies
            return None
        self._lru[entry.tier].pop(key, None)
        self._used[entry.tier] -= entry.nbytes
        self._notify_room()
        return entry

    def _discard(self, entry: Entry) -> None:
        self.tiers[entry.tier].remove(entry.handle)

    def _place(self, nbytes: int, start: int, deadline: float | None = None) -> tuple[int | None, list[Entry]]:
        """Reserve room for nbytes in the first tier from `start` that can hold it, popping
        that tier's LRU entries as needed; returns the tier and the entries to demote. With a
        deadline, room in the last tier held by writes in flight is waited for until then (a
        waiter holds no reservation there, so the writes it waits on always finish)."""
        victims: list[Entry] = []
        last = len(self.tiers) - 1
        with self._lock:
            for index in range(start, len(self.tiers)):
                capacity = self.tiers[index].capacity
                if nbytes > capacity:
                    continue
                lru = self._lru[index]
                while True:
                    while self._used[index] + nbytes > capacity and lru:
                        _, victim = lru.popitem(last=False)
                        self._used[index] -= victim.nbytes
                        victim.moving = True
                        victims.append(victim)
                    if self._used[index] + nbytes <= capacity:
                        self._used[index] += nbytes
                        return index, victims
                    remaining = None if deadline is None else deadline - time.perf_counter()
                    if index != last or remaining is None or remaining <= 0:
                        break
                    self._waiting += 1
                    try:
                        self._room.wait(min(remaining, 0.5))
                    finally:
                        self._waiting -= 1
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
                self._notify_room()
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
                self._notify_room()
                if self._index.get(entry.key) is entry:
                    del self._index[entry.key]
            self.tiers[source].remove(old_handle)
            raise
        with self._lock:
            current = self._index.get(entry.key) is entry
            self._notify_room()
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
            self.stats[target].offload_bytes_in += entry.nbytes
        self.stats[target].record_write(entry.nbytes, entry.tokens, timing)

    def close(self) -> None:
        for tier in self.tiers:
            tier.close()

