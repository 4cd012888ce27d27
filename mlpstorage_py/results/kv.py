"""The KV cache records: each rank's kvcache_results_<ts>.json and the aggregated summary.json,
and what the aggregate says went wrong. One reading for validate (Rules 6.3), reportgen (the
row, its Issues), `mlpstorage status` and the benchmark that writes the aggregate.

KvRank (option_<O>/trial_<T>/rank_<N>/kvcache_results_<ts>.json, written by kv-cache.py), key
"schema":
    none                     the reference tool's rank files (v3.0): run, summary/cache_stats
    mlps-kvcache-result/1    kv-cache.py's (kvcache_sim/report.py SCHEMA): status, model, host, ...
KvSummary (summary.json, written by benchmarks/kvcache.py), key "schema_version":
    none                     kvcache_run_summary[_<ts>].json of older tool versions
    "1.0"                    the reference's aggregate and ours: per-Option aggregates, TOTAL_RANKS,
                             trials_per_option, hosts; ours adds partial_failure, missing_files,
                             trial_failures, stopped and the aggregation notes
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any

from mlpstorage_py.results.schema import FLAG, LIST, NUMBER, OBJECT, TEXT, UNVERSIONED, Schema
from mlpstorage_py.results.tree.package import Leaf
from mlpstorage_py.results.tree.values import as_int, dig
from mlpstorage_py.rules import tables
from mlpstorage_py.rules.configs import source_root

FAMILY = "kv_cache"
TOTAL_RANKS = "total_ranks"  # the aggregate's, each Option's and the plan's (engine_parameters) rank count
RANK_COUNT, TRIAL_COUNT, TRIALS = "rank_count", "trial_count", "trials_per_option"
READ_BW, WRITE_BW = "aggregated_read_bandwidth_gbps", "aggregated_write_bandwidth_gbps"
THROUGHPUT = "aggregated_storage_throughput_tokens_per_sec"
DEVICE_READ, DEVICE_WRITE = "aggregated_device_read_p95_ms", "aggregated_device_write_p95_ms"
MISSING_RANK = re.compile(r"option_([^/\\\s]+)[/\\]trial_(\d+)[/\\]rank_(\d+)")
OLDER_NAME = "kvcache_run_summary"


class KvRank(Schema):
    KIND = "kvcache_results_*.json"
    VERSION_KEY = "schema"
    VERSION = "mlps-kvcache-result/1"
    FIELDS = {"run": OBJECT, "summary": OBJECT, "host": OBJECT, "status": TEXT}

    @property
    def run(self) -> dict[str, Any]:
        return self.object("run")

    @property
    def summary(self) -> dict[str, Any]:
        return dig(self.data, "summary") or {}

    @property
    def cache(self) -> dict[str, Any]:
        return dig(self.data, "summary", "cache_stats") or {}


class KvSummary(Schema):
    KIND = "summary.json"
    VERSION = "1.0"
    FIELDS = {TOTAL_RANKS: NUMBER, TRIALS: NUMBER, "options": OBJECT, "hosts": LIST, "host_count": NUMBER,
              "partial_failure": FLAG, "trial_failures": OBJECT}

    @property
    def options(self) -> dict[str, Any]:
        return self.object("options")

    def option(self, option: str) -> dict[str, Any] | None:
        value = self.options.get(option)
        return value if isinstance(value, dict) else None

    @property
    def total_ranks(self) -> int | None:
        return as_int(self.data.get(TOTAL_RANKS))


def summary_of(data: Any) -> KvSummary | None:
    """The aggregate as KvSummary, None when it is no object (every version is read: a KV
    summary's readers judge its fields, whatever it calls its version)."""
    return KvSummary.any_version(data) if isinstance(data, dict) else None


# --- what the aggregate says went wrong --------------------------------------------------------

def declared_missing(summary: Any) -> set[tuple[str, int, int]]:
    """(option, trial, rank) of every rank result the summary says its aggregation lacked."""
    found: set[tuple[str, int, int]] = set()
    options = dig(summary, "options")
    for option, block in (options.items() if isinstance(options, dict) else ()):
        listed = dig(block, "missing_files")
        for entry in listed if isinstance(listed, list) else ():
            match = MISSING_RANK.search(str(entry))
            if match and match.group(1) == str(option):
                found.add((str(option), int(match.group(2)), int(match.group(3))))
    return found


@dataclass
class PartialFailure:
    """Per Option: (rank results missing, rank results expected); per Option: failed trials."""

    missing: dict[str, tuple[int, int | None]] = field(default_factory=dict)
    failed_trials: dict[str, list[str]] = field(default_factory=dict)
    flagged: bool = False
    stopped: str | None = None

    @property
    def missing_ranks(self) -> int:
        return sum(n for n, _ in self.missing.values())

    @property
    def trials_failed(self) -> int:
        return sum(len(t) for t in self.failed_trials.values())

    def text(self) -> str:
        """One line naming the counts, e.g. 'Option 1: 24 of 48 rank results missing; ...'."""
        parts = [f"Option {o}: {n} of {total} rank results missing" if total else f"Option {o}: {n} rank result(s) missing"
                 for o, (n, total) in sorted(self.missing.items())]
        parts += [f"Option {o}: trial(s) {', '.join(trials)} failed (mpirun exited non-zero)"
                  for o, trials in sorted(self.failed_trials.items())]
        if self.stopped:
            parts.append(f"stopped: {self.stopped}")
        if not parts:
            parts.append("partial_failure is true, with no missing rank result or failed trial named")
        head = f"{self.missing_ranks} rank result(s) missing, {self.trials_failed} trial(s) failed"
        return f"{head} ({'; '.join(parts)})"


def partial_failure(summary: Any) -> PartialFailure | None:
    """What the aggregated summary records as lost (rank results the aggregation lacked, trials
    whose mpirun exited non-zero, a stop), or None when it records nothing: validate (6.3.4.1),
    reportgen and `mlpstorage status` all read it here, so they never disagree."""
    record = summary_of(summary)
    if record is None:
        return None
    data = record.data
    found = PartialFailure(flagged=data.get("partial_failure") is True)
    declared = declared_missing(data)
    for option, block in record.options.items():
        block = block if isinstance(block, dict) else {}
        listed = block.get("missing_files")
        count = len(listed) if isinstance(listed, list) else 0
        count = max(count, sum(1 for o, _, _ in declared if o == str(option)))
        if count or block.get("partial_failure") is True:
            found.flagged = True
        if count:
            ranks = as_int(block.get(RANK_COUNT, block.get(TOTAL_RANKS, data.get(TOTAL_RANKS))))
            trials = as_int(block.get(TRIAL_COUNT, data.get(TRIALS)))
            found.missing[str(option)] = (count, ranks * trials if ranks and trials else None)
    failures = data.get("trial_failures")
    for option, trials in (failures.items() if isinstance(failures, dict) else ()):
        named = sorted(str(t) for t in trials) if isinstance(trials, dict) else []
        if named:
            found.failed_trials[str(option)] = named
    stopped = data.get("stopped")
    found.stopped = str(stopped) if stopped else None
    if found.missing or found.failed_trials or found.stopped:
        found.flagged = True
    return found if found.flagged else None


# --- the aggregate under its older name -------------------------------------------------------

def older_aggregate(leaf: Leaf) -> str | None:
    """The name of the leaf's KV aggregate when it is not summary.json but kvcache_run_summary[_<ts>].json,
    the name older tool versions wrote; None otherwise. validate warns on it (6.3.4.5) and reportgen
    withholds the row, as the v3.0 review did: one test, one sentence (older_aggregate_text)."""
    found = leaf.record("summary").path if leaf.benchmark == FAMILY else None
    return found.name if found is not None and found.name.startswith(OLDER_NAME) else None


def older_aggregate_text(name: str) -> str:
    """What validate and reportgen both say of an aggregate under the older name, and the fix."""
    return (f"the aggregate is {name}, the name older tool versions wrote; the reference reads only summary.json, "
            f"so the v3.0 review withheld such a row and `reports reportgen` withholds it from results.csv/json: "
            f"rename {name} to summary.json")


@functools.cache
def option_table() -> dict[str, Any]:
    """Table KVCache-1 (configs/kvcache/options.yaml), keyed by Option as a string."""
    return tables.kvcache_options(source_root() / "configs")


__all__ = ["DEVICE_READ", "DEVICE_WRITE", "FAMILY", "READ_BW", "THROUGHPUT", "TOTAL_RANKS", "UNVERSIONED", "WRITE_BW",
           "KvRank", "KvSummary", "PartialFailure", "declared_missing", "older_aggregate", "older_aggregate_text",
           "option_table", "partial_failure", "summary_of"]
