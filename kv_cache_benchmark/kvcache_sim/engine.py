"""The timed run: a dispatcher releases users' requests into a priority queue (QoS order) and
a fixed pool of workers (the in-flight allocation bound) serves them against the cache."""

from __future__ import annotations

import heapq
import itertools
import json
import logging
import math
import queue
import resource
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from kvcache_sim.models import ModelConfig
from kvcache_sim.stats import Counters, Series
from kvcache_sim.tiers import KVData, MultiTierCache
from kvcache_sim.workload import (Features, PrefixCatalog, RagCatalog, Request, TraceRow, make_users,
                                  trace_schedule)

log = logging.getLogger("kvcache_sim")
PHASES = ("both", "prefill", "decode")


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
    peak_in_flight: int


class Engine:
    def __init__(self, settings: RunSettings, config: dict[str, Any], cache: MultiTierCache, data: KVData) -> None:
        self.s = settings
        self.config = config
        self.cache = cache
        self.data = data
        self.prefixes = PrefixCatalog(settings.seed, config["prefix_cache"])
        self.rag = (RagCatalog(settings.seed, config["rag"], settings.rag_num_docs, settings.model.is_large)
                    if settings.features.rag and settings.rag_num_docs > 0 else None)
        self.users = make_users(settings.num_users, settings.seed, config, settings.features, self.prefixes, self.rag)
        if settings.max_concurrent_allocs > 0:
            self.workers = min(settings.max_concurrent_allocs, settings.num_users)
        else:
            self.workers = min(settings.num_users, int(config["engine"]["max_workers"]))
        self.per_token_s = float(config["generation_timing"][settings.generation_mode])
        self.decode = config["decode"]
        self.counters = Counters()
        self.series = {name: Series() for name in ("end_to_end", "service", "storage_io", "generation", "queue_wait")}
        self.qos = {level: Series() for level in config["qos_profiles"]}
        self._queue: queue.PriorityQueue = queue.PriorityQueue()
        self._order = itertools.count()
        self._ready: list[tuple[float, int, int]] = []
        self._ready_cv = threading.Condition()
        self._stop = threading.Event()
        self._dispatch_done = threading.Event()
        self._dispatched = 0
        self._in_flight = 0
        self._peak = 0
        self._inflight_lock = threading.Lock()
        self._outstanding = threading.Semaphore(settings.num_users)
        self.errors: list[str] = []
        self._log_fh = None
        self._log_lock = threading.Lock()

    # -- setup -------------------------------------------------------------------------------
    def prepare(self) -> None:
        """Untimed setup: RAG corpus ingestion and, for decode-only runs, every user's KV."""
        if self.rag is not None:
            for doc, tokens in enumerate(self.rag.tokens):
                self.cache.put(RagCatalog.key(doc), self.data.make(tokens), tokens)
        if self.s.phase == "decode":
            for user in self.users:
                spec = self.config["user_templates"][user.template]
                tokens = user.rng.randint(int(spec["context_tokens"][0]), int(spec["context_tokens"][1]))
                self.cache.put(self._decode_key(user.user_id), self.data.make(tokens), tokens)
        self.cache.reset_stats()

    @staticmethod
    def _decode_key(user_id: int) -> str:
        return f"u{user_id}_ctx"

    # -- the run -----------------------------------------------------------------------------
    def run(self) -> Outcome:
        if self.s.request_log:
            self._log_fh = open(self.s.request_log, "w", encoding="utf-8")
        usage0 = resource.getrusage(resource.RUSAGE_SELF)
        start = time.perf_counter()
        self.deadline = start + self.s.duration
        workers = [threading.Thread(target=self._worker, name=f"kv-worker-{i}", daemon=True) for i in range(self.workers)]
        if self.s.trace is not None:
            dispatcher = threading.Thread(target=self._dispatch_trace, args=(start,), name="kv-dispatch", daemon=True)
        else:
            now = time.perf_counter()
            self._ready = [(now, i, u.user_id) for i, u in enumerate(self.users)]
            heapq.heapify(self._ready)
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
            with self._ready_cv:
                self._ready_cv.notify_all()
            for thread in workers:
                thread.join()
            dispatcher.join(timeout=5)
            if self._log_fh:
                self._log_fh.close()
        elapsed = time.perf_counter() - start
        usage1 = resource.getrusage(resource.RUSAGE_SELF)
        return Outcome(
            elapsed=elapsed, requests=int(self.counters.get("requests")), tokens=int(self.counters.get("tokens")),
            pending_at_end=self._queue.qsize() + int(self.counters.get("not_started")), workers=self.workers, end_to_end=self.series["end_to_end"],
            service=self.series["service"], storage_io=self.series["storage_io"], generation=self.series["generation"],
            queue_wait=self.series["queue_wait"], qos_service=self.qos, counters=self.counters,
            cpu_user_s=usage1.ru_utime - usage0.ru_utime, cpu_system_s=usage1.ru_stime - usage0.ru_stime,
            errors=list(self.errors), peak_in_flight=self._peak)

    def _limit_reached(self) -> bool:
        return self.s.max_requests > 0 and self._dispatched >= self.s.max_requests

    def _enqueue(self, request: Request) -> None:
        request.arrival = time.perf_counter()
        self._dispatched += 1
        if self._log_fh is not None:
            with self._log_lock:
                self._log_fh.write(json.dumps(request.signature()) + "\n")
        self._queue.put((-request.priority, next(self._order), request))

    def _dispatch_users(self) -> None:
        """Closed loop: a user becomes ready again after its response and think time."""
        try:
            while not self._stop.is_set() and not self._limit_reached():
                with self._ready_cv:
                    while not self._stop.is_set():
                        now = time.perf_counter()
                        if self._ready and self._ready[0][0] <= now:
                            break
                        wait = (self._ready[0][0] - now) if self._ready else 0.05
                        self._ready_cv.wait(min(max(wait, 0.0), 0.05))
                    if self._stop.is_set():
                        return
                    _, _, user_id = heapq.heappop(self._ready)
                self._enqueue(self.users[user_id].next_request())
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
                self._enqueue(user.next_request((row.request_tokens, row.response_tokens), trace_row=number))
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
            except Exception as exc:  # noqa: BLE001 - an I/O failure ends the run, reported in the output
                log.error("request %s failed: %s", request.key, exc)
                self.errors.append(f"{type(exc).__name__}: {exc}")
                self._stop.set()
            finally:
                with self._inflight_lock:
                    self._in_flight -= 1

    # -- one request -------------------------------------------------------------------------
    def _lookup(self, key: str, kind: str) -> tuple[bool, float]:
        result = self.cache.get(key)
        self.counters.add(f"{kind}_hits" if result.hit else f"{kind}_misses")
        self.counters.add("cache_hits" if result.hit else "cache_misses")
        return result.hit, result.timing.total

    def _store(self, key: str, tokens: int, kind: str) -> float:
        result = self.cache.put(key, self.data.make(tokens), tokens)
        self.counters.add(f"{kind}_writes")
        if result.tier is None:
            self.counters.add("rejected_writes")
        return result.timing.total

    def _serve(self, request: Request) -> None:
        begun = time.perf_counter()
        io = 0.0
        phase = self.s.phase
        decoded: float | None = 0.0
        if phase == "decode":
            decoded = self._decode(request, self._decode_key(request.user_id))
        else:
            if phase == "both":
                if request.prefix_id is not None:
                    key = PrefixCatalog.key(request.prefix_id)
                    hit, spent = self._lookup(key, "prefix")
                    io += spent
                    if hit:
                        self.counters.add("prefix_bytes_saved", request.prefix_tokens * self.s.model.kv_bytes_per_token)
                    else:
                        io += self._store(key, request.prefix_tokens, "prefix")
                if request.previous_key is not None:
                    io += self._lookup(request.previous_key, "multi_turn")[1]
                for doc in request.rag_docs:
                    key = RagCatalog.key(doc)
                    hit, spent = self._lookup(key, "rag")
                    io += spent
                    if not hit and self.rag is not None:
                        io += self._store(key, self.rag.tokens[doc], "rag")
            io += self._store(request.key, request.history_tokens, "prefill")
            if request.previous_key is not None and phase == "both":
                self.cache.remove(request.previous_key)  # the new turn's KV supersedes it
            if phase == "both":
                decoded = self._decode(request, request.key)
        if decoded is None:  # the run ended during its decode reads: not a completed request
            self.counters.add("truncated_at_deadline")
            return
        io += decoded
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
        if self.s.trace is not None:
            self._outstanding.release()
        else:
            ready = done + generation + request.think_time_s
            with self._ready_cv:
                heapq.heappush(self._ready, (ready, next(self._order), request.user_id))
                self._ready_cv.notify()

    def _decode(self, request: Request, key: str) -> float | None:
        """The decode re-reads; returns their I/O time, or None if the run ended before they did."""
        spent = 0.0
        for _ in range(self._decode_reads(request)):
            if time.perf_counter() >= self.deadline:
                return None
            spent += self._lookup(key, "decode")[1]
            self.counters.add("decode_reads")
        return spent

    def _decode_reads(self, request: Request) -> int:
        return max(1, min(int(self.decode["max_reads_per_request"]),
                          math.ceil(request.generation_tokens / int(self.decode["batch_tokens"]))))
