"""Who asks for what: users, their QoS class, conversations, shared prefixes, RAG, traces.

The request stream is the MLCommons reference's, rule by rule (ManPage, KV cache workload): a
user draws a context budget, a generation budget and a think time once; each request's context
and generated tokens are uniform between a quarter of their budget and the budget; each request
comes one jittered think time after the previous one; a conversation ends with a fixed
probability before each later turn (at most max_turns turns) and a later turn re-reads every
earlier one; a fifth of requests carry a short system prompt whose KV is never written.

Every user draws from its own random.Random seeded from (seed, user id), so the sequence of
requests each user makes is fixed by the seed, whatever the threads' timing.
"""

from __future__ import annotations

import bisect
import csv
import glob
import itertools
import random
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Request:
    user_id: int
    seq: int
    qos: str
    priority: int
    template: str
    conversation: int
    turn: int
    context_tokens: int       # the drawn context; 10,000 or more makes the request prefill only
    generation_tokens: int
    think_time_s: float       # the user's pause before enqueuing this request
    prefix_id: int | None = None
    prefix_tokens: int = 0    # the system prompt's tokens: not part of the KV this request writes
    rag_docs: tuple[int, ...] = ()
    arrival: float = 0.0
    trace_row: int | None = None

    @property
    def kv_tokens(self) -> int:
        """What prefill writes and decode re-reads: the context less the system prompt."""
        return max(1, self.context_tokens - self.prefix_tokens) if self.prefix_tokens else self.context_tokens

    @property
    def key(self) -> str:
        return self.turn_key(self.turn)

    def turn_key(self, turn: int) -> str:
        return f"u{self.user_id}_c{self.conversation}_t{turn}"

    @property
    def previous_keys(self) -> list[str]:
        """Every earlier turn of the conversation: a multi-turn request re-reads them all."""
        return [self.turn_key(t) for t in range(1, self.turn)]

    def signature(self) -> dict[str, Any]:
        """The seed-determined part of the request (no timing)."""
        record = asdict(self)
        record.pop("arrival")
        record["rag_docs"] = list(self.rag_docs)
        return record


class PrefixCatalog:
    """The system prompts: a fixed token count per prompt id, and how often a request has one."""

    def __init__(self, settings: dict[str, Any]) -> None:
        self.tokens = [int(t) for t in settings["system_prompt_tokens"]]
        self.probability = float(settings["probability"])

    @staticmethod
    def key(prefix_id: int) -> str:
        return f"prefix_{prefix_id}"


class RagCatalog:
    """A document corpus; retrieval favours low document ids (Zipf weights)."""

    def __init__(self, seed: int, settings: dict[str, Any], num_docs: int, large_model: bool) -> None:
        rng = random.Random(f"{seed}:rag")
        low, high = settings["doc_tokens_large_model" if large_model else "doc_tokens"]
        self.tokens = [rng.randint(int(low), int(high)) for _ in range(num_docs)]
        self.top_k = min(int(settings["top_k"]), num_docs)
        self.probability = float(settings["request_probability"])
        weights = [1.0 / (i + 1) ** float(settings["zipf_exponent"]) for i in range(num_docs)]
        self._cumulative = list(itertools.accumulate(weights))

    @staticmethod
    def key(doc_id: int) -> str:
        return f"rag_doc_{doc_id}"

    def sample(self, rng: random.Random) -> tuple[int, ...]:
        chosen: list[int] = []
        while len(chosen) < self.top_k:
            pick = bisect.bisect_left(self._cumulative, rng.random() * self._cumulative[-1])
            pick = min(pick, len(self.tokens) - 1)
            if pick not in chosen:
                chosen.append(pick)
        return tuple(chosen)


@dataclass
class Features:
    multi_turn: bool = True
    prefix_caching: bool = True
    rag: bool = False


@dataclass
class User:
    """One simulated user: a QoS class, a template, and its context budget, generation budget
    and think time (each drawn once from the template's range), plus its conversation's state."""

    user_id: int
    seed: int
    config: dict[str, Any]
    features: Features
    prefixes: PrefixCatalog
    rag: RagCatalog | None
    rng: random.Random = field(init=False)
    qos: str = field(init=False)
    template: str = field(init=False)
    context_budget: int = field(init=False)
    generation_budget: int = field(init=False)
    think_time_s: float = field(init=False)
    seq: int = 0
    conversation: int = 0
    turn: int = 0

    def __post_init__(self) -> None:
        self.rng = random.Random(f"{self.seed}:user:{self.user_id}")
        dist = self.config["qos_distribution"]
        draw = self.rng.random()
        if draw < dist["interactive_probability"]:
            self.qos = "interactive"
        elif draw < dist["responsive_threshold"]:
            self.qos = "responsive"
        else:
            self.qos = "batch"
        templates = sorted(self.config["user_templates"].items())
        names = [name for name, _ in templates]
        weights = [spec["weight"] for _, spec in templates]
        self.template = self.rng.choices(names, weights=weights)[0]
        spec = self.config["user_templates"][self.template]
        self.context_budget = self._randint(spec["context_tokens"])
        self.generation_budget = self._randint(spec["generation_tokens"])
        self.think_time_s = self.rng.uniform(*spec["think_time_s"])

    @property
    def priority(self) -> int:
        return int(self.config["qos_profiles"][self.qos]["priority"])

    def _randint(self, bounds: list[float]) -> int:
        return self.rng.randint(int(bounds[0]), int(bounds[1]))

    def _quarter_to_budget(self, budget: int) -> int:
        """The reference's per-request draw: uniform between a quarter of the budget and the budget."""
        return self.rng.randint(max(1, budget // 4), budget)

    def context_tokens(self) -> int:
        return self._quarter_to_budget(self.context_budget)

    def next_request(self, trace: tuple[int, int] | None = None, trace_row: int | None = None) -> Request:
        """The user's next request; `trace` = (request tokens, response tokens) replaces the
        drawn lengths, the think time and always starts a new conversation."""
        conv = self.config["conversation"]
        new = (trace is not None or self.turn == 0 or not self.features.multi_turn
               or self.rng.random() < conv["new_conversation_probability"] or self.turn >= conv["max_turns"])
        if new:
            self.conversation += 1
            self.turn = 1
        else:
            self.turn += 1
        if trace is not None:
            context, generation, think = max(1, trace[0]), max(1, trace[1]), 0.0
        else:
            context = self.context_tokens()
            generation = self._quarter_to_budget(self.generation_budget)
            think = self.think_time_s * self.rng.uniform(*self.config["users"]["think_time_jitter"])
        prefix_id = None
        if self.features.prefix_caching and self.prefixes.tokens and self.rng.random() < self.prefixes.probability:
            prefix_id = self.rng.randrange(len(self.prefixes.tokens))
        docs: tuple[int, ...] = ()
        if self.rag is not None and self.features.rag and self.rng.random() < self.rag.probability:
            docs = self.rag.sample(self.rng)
        self.seq += 1
        prefix_tokens = self.prefixes.tokens[prefix_id] if prefix_id is not None else 0
        return Request(user_id=self.user_id, seq=self.seq, qos=self.qos, priority=self.priority,
                       template="trace" if trace is not None else self.template, conversation=self.conversation,
                       turn=self.turn, context_tokens=context, generation_tokens=generation, think_time_s=think,
                       prefix_id=prefix_id, prefix_tokens=prefix_tokens, rag_docs=docs, trace_row=trace_row)


def make_users(count: int, seed: int, config: dict[str, Any], features: Features, prefixes: PrefixCatalog,
               rag: RagCatalog | None) -> list[User]:
    return [User(i, seed, config, features, prefixes, rag) for i in range(count)]


def preview(count: int, per_user: int, seed: int, config: dict[str, Any], features: Features,
            rag_docs: int = 0, large_model: bool = False) -> list[list[dict[str, Any]]]:
    """The first `per_user` request signatures of each user, without running anything."""
    prefixes = PrefixCatalog(config["prefix_cache"])
    rag = RagCatalog(seed, config["rag"], rag_docs, large_model) if features.rag and rag_docs else None
    users = make_users(count, seed, config, features, prefixes, rag)
    return [[u.next_request().signature() for _ in range(per_user)] for u in users]


# -- trace replay ---------------------------------------------------------------------------
TRACE_COLUMNS = {"timestamp": ("timestamp", "time"), "request": ("request tokens", "request_tokens", "input_tokens"),
                 "response": ("response tokens", "response_tokens", "output_tokens")}


class TraceError(ValueError):
    """A trace that cannot be replayed."""


@dataclass(frozen=True)
class TraceRow:
    timestamp: float
    request_tokens: int
    response_tokens: int


def trace_files(spec: str) -> list[Path]:
    """A file, a directory of *.csv, or a glob."""
    path = Path(spec)
    if path.is_dir():
        files = sorted(path.glob("*.csv"))
    elif path.is_file():
        files = [path]
    else:
        files = sorted(Path(p) for p in glob.glob(spec))
    if not files:
        raise TraceError(f"no trace CSV found at {spec}")
    return files


def load_trace(spec: str) -> list[TraceRow]:
    """Rows with request and response token counts (BurstGPT-style columns); rows with no
    request tokens (failed requests in the trace) are skipped."""
    rows: list[TraceRow] = []
    for file in trace_files(spec):
        with open(file, newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            header = {name.strip().lower(): name for name in reader.fieldnames or []}
            columns = {}
            for role, names in TRACE_COLUMNS.items():
                found = next((header[n] for n in names if n in header), None)
                if found is None and role != "timestamp":
                    raise TraceError(f"{file}: no {role} tokens column (expected one of {', '.join(names)})")
                columns[role] = found
            for number, record in enumerate(reader, start=2):
                try:
                    request = int(float(record[columns["request"]]))
                    response = int(float(record[columns["response"]]))
                    stamp = float(record[columns["timestamp"]]) if columns["timestamp"] else float(len(rows))
                except (TypeError, ValueError):
                    raise TraceError(f"{file}:{number}: token counts must be numbers") from None
                if request > 0:
                    rows.append(TraceRow(stamp, request, max(1, response)))
    if not rows:
        raise TraceError(f"trace {spec} has no usable rows")
    return rows


def trace_schedule(rows: list[TraceRow], speedup: float, cycles: int) -> Iterator[tuple[float, int, TraceRow]]:
    """(seconds after start, row number, row): timestamps relative to the first row, divided by
    speedup (0 = as fast as possible); the trace repeats `cycles` times (0 = forever)."""
    base = rows[0].timestamp
    span = max(row.timestamp for row in rows) - base
    gap = span / max(1, len(rows) - 1)
    counter = itertools.count() if cycles == 0 else range(cycles)
    number = 0
    for cycle in counter:
        for row in rows:
            offset = (row.timestamp - base) + cycle * (span + gap)
            yield (offset / speedup if speedup > 0 else 0.0), number, row
            number += 1
