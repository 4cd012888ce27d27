"""The timed run, shaped like the MLCommons reference's: every user enqueues its requests into
one priority queue (QoS order) on its own clock, without waiting for the previous response,
and min(users, engine.max_workers) workers serve them against the cache; at most
--max-concurrent-allocs of them write at once (a semaphore on writes only). A single
dispatcher keeps each user's next enqueue time (one timer per user rather than one OS thread
per user: the same request stream, without 10^5 threads)."""

from __future__ import annotations

import heapq
import itertools
import json
import logging
import math
import os
import queue
import resource
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvcache_sim.cache import PAST_DEADLINE, Lookup, MultiTierCache
from kvcache_sim.models import ModelConfig
from kvcache_sim.payload import KVData
from kvcache_sim.stats import Counters, Series
from kvcache_sim.workload import Features, PrefixCatalog, RagCatalog, Request, TraceRow, make_users, trace_schedule

log = logging.getLogger("kvcache_sim")
MAX_FAILURE_NOTES = 20  # failed requests named in the result (all are counted)


class _Ended(Exception):
    """A request that stops before all its I/O happened: truncated by the deadline, or failed."""

    def __init__(self, status: str, why: str = "") -> None:
        super().__init__(why or status)
        self.status, self.why = status, why


@dataclass
class RunSettings:
    model: ModelConfig
    num_users: int
    duration: float
    generation_mode: str = "none"
    max_concurrent_allocs: int = 0
    max_requests: int = 0
    seed: int = 0
    features: Features = field(default_factory=Features)
    rag_num_docs: int = 0
    phase: str = "both"  # prefill: writes only; decode: reads of pre-populated KV only
    trace: list[TraceRow] | None = None
    trace_speedup: float = 1.0
    replay_cycles: int = 0
    request_log: Path | None = None
    request_trace: Path | None = None  # per request: the reads and writes it did (JSON lines)


@dataclass
class Outcome:
    """Everything the report needs from one run."""

    elapsed: float
    requests: int
    tokens: int
    pending_at_end: int
    workers: int
    end_to_end: Series
    service: Series
    storage_io: Series
    generation: Series
    queue_wait: Series
    qos_service: dict[str, Series]
    counters: Counters
    cpu_user_s: float
    cpu_system_s: float
    errors: list[str]
    failures: list[str]
    peak_in_flight: int
    peak_writes_in_flight: int = 0
    memory: dict[str, Any] = field(default_factory=dict)


def rss_bytes() -> int:
    """This process's resident set now (Linux /proc; 0 elsewhere)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def peak_rss_bytes() -> int:
    """This process's resident-set high-water mark: VmHWM (its own address space; ru_maxrss
    would carry the forking parent's peak across exec), else ru_maxrss."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # KiB on Linux


class Engine:
    def __init__(self, settings: RunSettings, config: dict[str, Any], cache: MultiTierCache, data: KVData) -> None:
        self.s = settings
        self.config = config
        self.cache = cache
        self.data = data
        self.prefixes = PrefixCatalog(config["prefix_cache"])
        self.rag = (RagCatalog(settings.seed, config["rag"], settings.rag_num_docs, settings.model.is_large)
                    if settings.features.rag and settings.rag_num_docs > 0 else None)
        self.users = make_users(settings.num_users, settings.seed, config, settings.features, self.prefixes, self.rag)
        self.workers = min(settings.num_users, int(config["engine"]["max_workers"]))
        allocs = settings.max_concurrent_allocs
        self._write_slots = threading.BoundedSemaphore(allocs) if allocs > 0 else None
        self.per_token_s = float(config["generation_timing"][settings.generation_mode])
        self.decode = config["decode"]
        self.counters = Counters()
        self.series = {name: Series() for name in ("end_to_end", "service", "storage_io", "generation", "queue_wait")}
        self.qos = {level: Series() for level in config["qos_profiles"]}
        self._queue: queue.PriorityQueue = queue.PriorityQueue(maxsize=int(config["engine"]["max_queued_requests"]))
        self._order = itertools.count()
        self._stop = threading.Event()
        self._dispatch_done = threading.Event()
        self._dispatched = 0
        self.started = time.perf_counter()  # reset when the run starts
        self._in_flight = self._peak = self._writing = self._peak_writing = 0
        self._inflight_lock = threading.Lock()
        self._outstanding = threading.Semaphore(settings.num_users)
        self.errors: list[str] = []
        self.failures: list[str] = []
        self._files: dict[str, Any] = {}
        self._log_lock = threading.Lock()

    # -- setup -------------------------------------------------------------------------------
    def prepare(self) -> None:
        """Untimed setup: RAG corpus ingestion and, for decode-only runs, every user's KV."""
        if self.rag is not None:
            for doc, tokens in enumerate(self.rag.tokens):
                self.cache.put(RagCatalog.key(doc), self.data.make(tokens), tokens)
        if self.s.phase == "decode":
            for user in self.users:
                tokens = user.context_tokens()
                self.cache.put(self._decode_key(user.user_id), self.data.make(tokens), tokens)
        self.cache.reset_stats()

    @staticmethod
    def _decode_key(user_id: int) -> str:
        return f"u{user_id}_ctx"

    # -- the run -----------------------------------------------------------------------------
    def run(self) -> Outcome:
        for name, path in (("log", self.s.request_log), ("trace", self.s.request_trace)):
            if path:
                self._files[name] = open(path, "w", encoding="utf-8")
        usage0 = resource.getrusage(resource.RUSAGE_SELF)
        rss_start = rss_bytes()
        start = self.started = time.perf_counter()
        self.deadline = start + self.s.duration
        workers = [threading.Thread(target=self._worker, name=f"kv-worker-{i}", daemon=True) for i in range(self.workers)]
        if self.s.trace is not None:
            dispatcher = threading.Thread(target=self._dispatch_trace, args=(start,), name="kv-dispatch", daemon=True)
        else:
            dispatcher = threading.Thread(target=self._dispatch_users, name="kv-dispatch", daemon=True)
        for thread in (dispatcher, *workers):
            thread.start()
        try:
            while not self._stop.is_set():
                remaining = self.deadline - time.perf_counter()
                if remaining <= 0:
                    break
                if self._dispatch_done.is_set() and self._queue.empty() and self._in_flight == 0:
                    break
                self._stop.wait(min(remaining, 0.05))
        finally:
            self._stop.set()
            for thread in workers:
                thread.join()
            dispatcher.join(timeout=5)
            for fh in self._files.values():
                fh.close()
        elapsed = time.perf_counter() - start
        usage1 = resource.getrusage(resource.RUSAGE_SELF)
        buffers = self.cache.tiers[-1].buffers
        memory = {"rss_at_start_bytes": rss_start, "peak_rss_bytes": peak_rss_bytes(),
                  "peak_rss_above_start_bytes": max(0, peak_rss_bytes() - rss_start),
                  "io_chunk_bytes": buffers.chunk_bytes, "io_buffers_allocated": buffers.allocated,
                  "io_buffer_bytes": buffers.allocated_bytes, "data_pool_bytes": int(self.data.pool.nbytes),
                  "basis": "peak_rss_bytes is the process's resident-set high-water mark (VmHWM); "
                           "the memory tiers' entries are part of it"}
        return Outcome(
            elapsed=elapsed, requests=int(self.counters.get("requests")), tokens=int(self.counters.get("tokens")),
            pending_at_end=self._queue.qsize() + int(self.counters.get("not_started")), workers=self.workers,
            end_to_end=self.series["end_to_end"], service=self.series["service"], storage_io=self.series["storage_io"],
            generation=self.series["generation"], queue_wait=self.series["queue_wait"], qos_service=self.qos,
            counters=self.counters, cpu_user_s=usage1.ru_utime - usage0.ru_utime,
            cpu_system_s=usage1.ru_stime - usage0.ru_stime, errors=list(self.errors), failures=list(self.failures), peak_in_flight=self._peak,
            peak_writes_in_flight=self._peak_writing, memory=memory)

    def _limit_reached(self) -> bool:
        return self.s.max_requests > 0 and self._dispatched >= self.s.max_requests

    def _write_line(self, name: str, record: dict[str, Any]) -> None:
        fh = self._files.get(name)
        if fh is not None:
            with self._log_lock:
                fh.write(json.dumps(record) + "\n")

    def _enqueue(self, request: Request) -> bool:
        """Queue a request (waiting while the queue is full); False if the run stopped first."""
        request.arrival = time.perf_counter()
        item = (-request.priority, next(self._order), request)
        while True:
            try:
                self._queue.put(item, timeout=0.05)
                break
            except queue.Full:
                if self._stop.is_set():
                    return False
        self._dispatched += 1
        if "log" in self._files:  # the seed-determined fields, and when the request was enqueued
            self._write_line("log", {**request.signature(), "enqueued_s": round(request.arrival - self.started, 6)})
        return True

    def _dispatch_users(self) -> None:
        """Open loop per user: a user pauses its think time, enqueues a request, pauses again,
        enqueues the next, whatever happened to the first (its own clock, kept in a heap). A
        request is drawn when it is scheduled, so its pause is known before it is due."""
        try:
            now = self.started
            ready = []
            for user in self.users:
                request = user.next_request()
                ready.append((now + request.think_time_s, next(self._order), request))
            heapq.heapify(ready)
            while ready and not self._stop.is_set() and not self._limit_reached():
                due, _, request = ready[0]
                wait = due - time.perf_counter()
                if wait > 0:
                    self._stop.wait(min(wait, 0.05))
                    continue
                heapq.heappop(ready)
                if not self._enqueue(request):
                    return
                following = self.users[request.user_id].next_request()
                heapq.heappush(ready, (max(due, request.arrival) + following.think_time_s, next(self._order), following))
        finally:
            self._dispatch_done.set()

    def _dispatch_trace(self, start: float) -> None:
        """Open loop from the trace's timestamps, at most num_users requests outstanding."""
        try:
            assert self.s.trace is not None
            schedule: Iterator = trace_schedule(self.s.trace, self.s.trace_speedup, self.s.replay_cycles)
            for offset, number, row in schedule:
                if self._stop.is_set() or self._limit_reached():
                    return
                delay = start + offset - time.perf_counter()
                if delay > 0 and self._stop.wait(delay):
                    return
                while not self._outstanding.acquire(timeout=0.05):
                    if self._stop.is_set():
                        return
                user = self.users[number % len(self.users)]
                if not self._enqueue(user.next_request((row.request_tokens, row.response_tokens), trace_row=number)):
                    return
        finally:
            self._dispatch_done.set()

    def _worker(self) -> None:
        while not self._stop.is_set():
            try:
                _, _, request = self._queue.get(timeout=0.05)
            except queue.Empty:
                continue
            if time.perf_counter() >= self.deadline:
                self.counters.add("not_started")  # dispatched but never started: counted as pending
                return
            with self._inflight_lock:
                self._in_flight += 1
                self._peak = max(self._peak, self._in_flight)
            try:
                self._serve(request)
            except MemoryError as exc:
                self._fail(request, f"out of memory serving a {request.context_tokens}-token request "
                                    f"({request.context_tokens * self.s.model.kv_bytes_per_token / (1 << 20):.0f} MiB "
                                    f"of KV): {exc or 'MemoryError'}")
            except Exception as exc:  # an I/O failure ends the run, reported in the output
                self._fail(request, f"{type(exc).__name__}: {exc}")
            finally:
                with self._inflight_lock:
                    self._in_flight -= 1

    def _fail(self, request: Request, message: str) -> None:
        log.error("request %s failed: %s", request.key, message)
        self.errors.append(message)
        self._stop.set()

    # -- one request -------------------------------------------------------------------------
    def _before_io(self) -> None:
        if time.perf_counter() >= self.deadline:  # the run ended mid-request: not a completed request
            raise _Ended("truncated")

    def _read(self, key: str, kind: str, ops: list[dict[str, Any]]) -> Lookup:
        self._before_io()
        result = self.cache.get(key)
        self.counters.add(f"{kind}_hits" if result.hit else f"{kind}_misses")
        self.counters.add("cache_hits" if result.hit else "cache_misses")
        if kind == "decode":
            self.counters.add("decode_reads")
        ops.append({"op": "read", "kind": kind, "key": key, "hit": result.hit, "tier": result.tier,
                    "tokens": result.tokens})
        return result

    def _write(self, key: str, tokens: int, kind: str, ops: list[dict[str, Any]]) -> float:
        """Store one entry, or end the request: truncated when the run ended while the write
        waited for one of the --max-concurrent-allocs slots (reads hold none) or for room in the
        last tier, failed when no tier can ever hold it. A write never counts unless stored."""
        self._before_io()
        slots = self._write_slots
        if slots is not None:
            while not slots.acquire(timeout=0.05):
                self._before_io()
            if time.perf_counter() >= self.deadline:
                slots.release()
                raise _Ended("truncated")
        with self._inflight_lock:
            self._writing += 1
            self._peak_writing = max(self._peak_writing, self._writing)
        try:
            result = self.cache.put(key, self.data.make(tokens), tokens, deadline=self.deadline)
        finally:
            with self._inflight_lock:
                self._writing -= 1
            if slots is not None:
                slots.release()
        ops.append({"op": "write", "kind": kind, "key": key, "tier": result.tier, "tokens": tokens})
        if result.tier is None:
            self.counters.add("rejected_writes")
            if result.refused == PAST_DEADLINE:
                raise _Ended("truncated")
            raise _Ended("failed", f"{kind} write of {tokens} tokens not stored: {result.refused}")
        self.counters.add(f"{kind}_writes")
        return result.timing.total

    def _system_prompt(self, request: Request, ops: list[dict[str, Any]]) -> float:
        """The reference's system prompt: its KV is never written, so the lookup misses, and
        its tokens are left out of the KV the request writes (bytes_saved)."""
        if request.prefix_id is None:
            self.counters.add("prefix_misses")
            return 0.0
        self.counters.add("prefix_hits")
        self.counters.add("prefix_bytes_saved", request.prefix_tokens * self.s.model.kv_bytes_per_token)
        return self._read(PrefixCatalog.key(request.prefix_id), "system_prompt", ops).timing.total

    def _io(self, request: Request, ops: list[dict[str, Any]]) -> float:
        """Every read and write the request needs, in the reference's order for this phase;
        returns the seconds they took (raises _Ended when the request cannot complete)."""
        io = self._system_prompt(request, ops) if self.s.features.prefix_caching else 0.0
        if self.s.phase == "decode":
            for _ in range(self.decode_reads(request)):
                io += self._read(self._decode_key(request.user_id), "decode", ops).timing.total
            return io
        if self.s.phase == "both":
            for key in request.previous_keys:
                io += self._read(key, "multi_turn", ops).timing.total
            for doc in request.rag_docs:
                io += self._read(RagCatalog.key(doc), "rag", ops).timing.total
        io += self._write(request.key, request.kv_tokens, "prefill", ops)
        if self.s.phase != "both" or request.context_tokens >= int(self.decode["prefill_only_context_tokens"]):
            return io
        first = self._read(request.key, "decode", ops)
        io += first.timing.total
        if not first.hit:  # evicted since its prefill: written again, as the reference does
            return io + self._write(request.key, request.kv_tokens, "decode_rewrite", ops)
        for _ in range(self.decode_reads(request) - 1):
            io += self._read(request.key, "decode", ops).timing.total
        return io

    def _serve(self, request: Request) -> None:
        begun = time.perf_counter()
        ops: list[dict[str, Any]] = []
        try:
            io = self._io(request, ops)
        except _Ended as ended:
            self._trace(request, ops, ended.status, ended.why)
            self._release_trace_slot()
            if ended.status == "truncated":
                self.counters.add("truncated_at_deadline")
                self.counters.add("tokens_truncated", request.generation_tokens)
            else:
                self.counters.add("requests_failed")
                self.counters.add("tokens_failed", request.generation_tokens)
                self.counters.add(f"qos_{request.qos}_failed")
                with self._log_lock:
                    if len(self.failures) < MAX_FAILURE_NOTES:
                        self.failures.append(f"{request.key}: {ended.why}")
            return
        self._trace(request, ops, "done", "")
        self._release_trace_slot()
        done = time.perf_counter()
        generation = request.generation_tokens * self.per_token_s
        service = done - request.arrival
        self.series["queue_wait"].add(begun - request.arrival)
        self.series["storage_io"].add(io)
        self.series["service"].add(service)
        self.series["generation"].add(generation)
        self.series["end_to_end"].add(service + generation)
        self.qos[request.qos].add(service)
        self.counters.add("requests")
        self.counters.add("tokens", request.generation_tokens)
        self.counters.add(f"qos_{request.qos}_requests")

    def _release_trace_slot(self) -> None:
        if self.s.trace is not None:
            self._outstanding.release()

    def _trace(self, request: Request, ops: list[dict[str, Any]], status: str, why: str) -> None:
        if "trace" in self._files:
            record = {k: v for k, v in request.signature().items() if k not in ("think_time_s", "priority")}
            record.update(status=status, ops=ops)
            if why:
                record["failure"] = why
            self._write_line("trace", record)

    def decode_reads(self, request: Request) -> int:
        """1 + ceil(generated tokens / decode.batch_tokens), capped by max_reads_per_request if set."""
        reads = 1 + math.ceil(request.generation_tokens / int(self.decode["batch_tokens"]))
        cap = int(self.decode["max_reads_per_request"])
        return min(reads, cap) if cap > 0 else reads
