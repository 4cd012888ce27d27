"""Section 6.3.4: the KV cache aggregates recomputed from the rank files (moved out of
rules_kvcache.py, which holds the leaf model these rules read)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from statistics import fmean
from typing import Any

from mlpstorage_py.checker.registry import INVALID, LEAF, WARNING, Finding, Rule, rule
from mlpstorage_py.checker.rules_kvcache import Kv, _close, _missing_text, judged, judged_with
from mlpstorage_py.results.kv import (
    DEVICE_READ,
    DEVICE_WRITE,
    FAMILY,
    RANK_COUNT,
    READ_BW,
    THROUGHPUT,
    TOTAL_RANKS,
    TRIALS,
    WRITE_BW,
    declared_missing,
    older_aggregate,
    older_aggregate_text,
    partial_failure,
)
from mlpstorage_py.results.kv_leaf import RankFile
from mlpstorage_py.results.tree.package import Leaf
from mlpstorage_py.results.tree.values import as_int, as_number, dig

# --- 6.3.4 aggregation -----------------------------------------------------------------------------

@dataclass
class Recomputed:
    read_bw: float
    write_bw: float
    throughput: float
    device_read: float
    device_write: float
    cpu_tier: set[int]
    all_cpu_tier: bool


def recompute(files: list[RankFile]) -> Recomputed | None:
    """Rules 6.3.4 from the per-rank results of one Option (None when any is missing)."""
    if not files or any(f.data is None for f in files):
        return None
    trials: dict[int, list[RankFile]] = {}
    for f in sorted(files, key=lambda f: (f.trial, f.rank)):
        trials.setdefault(f.trial, []).append(f)
    sums: dict[str, list[float]] = {"read": [], "write": [], "tokens": []}
    device_read = device_write = 0.0
    cpu_tier: set[int] = set()
    storage_ranks = 0
    for trial in sorted(trials):
        read = write = tokens = 0.0
        for f in trials[trial]:
            cache = f.cache
            read += float(as_number(cache.get("tier_storage_read_bandwidth_gbps")) or 0.0)
            write += float(as_number(cache.get("tier_storage_write_bandwidth_gbps")) or 0.0)
            tokens += float(as_number(f.summary.get("storage_throughput_tokens_per_sec")) or 0.0)
            if (as_number(cache.get("storage_entries")) or 0) > 0:
                storage_ranks += 1
                device_read = max(device_read, float(as_number(cache.get("storage_read_device_p95_ms")) or 0.0))
                device_write = max(device_write, float(as_number(cache.get("storage_write_device_p95_ms")) or 0.0))
            else:
                cpu_tier.add(f.rank)
        sums["read"].append(read)
        sums["write"].append(write)
        sums["tokens"].append(tokens)
    return Recomputed(fmean(sums["read"]), fmean(sums["write"]), fmean(sums["tokens"]), device_read, device_write,
                      cpu_tier, storage_ranks == 0)


def _check_aggregate(r: Rule, kv: Kv, what: str, pick: dict[str, Any], files_rule: str | None = None,
                     fields_rule: str | None = None) -> Iterable[Finding]:
    """Recompute the stated aggregates. A missing per-rank file is reported once, by the first rule
    that reads them (files_rule None); the others say they were not checked. An absent field is
    INVALID here unless fields_rule names the rule that requires it stated (then: not checked)."""
    summary_path = kv.leaf.path_of("summary")
    unstated: list[str] = []
    if kv.summary is None:
        yield r.invalid(summary_path, f"cannot check {what}: {kv.leaf.problem('summary')}")
        return
    tol = float(kv.checker.get("kvcache_aggregate_rel_tol", 1e-9))
    declared = declared_missing(kv.summary)
    missing_files: list[RankFile] = []
    for option in kv.options:
        block = kv.option_summary(option)
        if block is None:
            yield r.invalid(summary_path, f"summary.json has no aggregate for Option {option}")
            continue
        absent = [k for k in pick if as_number(block.get(k)) is None]
        if absent and fields_rule:
            unstated.append(f"Option {option} states no {', '.join(absent)}")
        elif absent:
            yield r.invalid(summary_path, f"Option {option} states no {', '.join(absent)}")
        # a rank result the summary itself names as lost is the partial failure 6.3.4.1 reports,
        # not a file the package lacks; the stated aggregate is checked over the ranks it summed
        files = kv.files_of(option)
        bad = [f for f in files if f.data is None and (f.option, f.trial, f.rank) not in declared]
        present = [f for f in files if f.data is not None]
        if bad or not present:
            missing_files += bad
            continue
        values = recompute(present)
        for key, get in pick.items():
            stated = as_number(block.get(key))
            if stated is not None and not _close(stated, get(values), tol):
                yield r.invalid(summary_path, f"Option {option} {key} {stated!r} != {get(values)!r} "
                                              f"recomputed from {len(present)} per-rank results")
    if unstated:
        yield r.info(summary_path, f"not checked: {'; '.join(unstated)} (the headline requires them: "
                                   f"reported under {fields_rule})")
    if missing_files and files_rule:
        yield r.info(kv.path, f"not checked: {what} cannot be recomputed without the per-rank results "
                              f"(reported under {files_rule})")
    elif missing_files:
        yield r.invalid(kv.path, f"cannot recompute {what}: {_missing_text(missing_files)}")
    elif not kv.rank_files and kv.options and not declared:
        yield r.invalid(kv.path, f"cannot recompute {what}: no per-rank result is expected or found "
                                 f"({TOTAL_RANKS} and {TRIALS} unrecorded or implausible)")


@rule("6.3.4.1", "kvcacheAggregateBandwidth").check(LEAF, benchmark=FAMILY, command="run")
def aggregate_bandwidth(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """aggregated_read/write_bandwidth_gbps = fmean over trials of the sum over every rank (a partial failure is not).

    Recomputed from the rank files; a summary that records lost ranks states sums over the survivors."""
    kv = judged(leaf)
    if kv is None:
        return
    lost = partial_failure(kv.summary)
    if lost is not None and lost.missing_ranks:
        yield r.invalid(leaf.path_of("summary"),
                        f"partial failure: {lost.text()}; the aggregates sum every rank of a trial, so figures "
                        "summed over the surviving ranks are not this result's (the same holds for 6.3.4.2's "
                        "throughput and 6.3.4.3's latency of those Options)")
    elif lost is not None:
        yield r.warning(leaf.path_of("summary"),
                        f"partial failure: {lost.text()}; every rank result is present, but the run did not "
                        "end cleanly")
    yield from _check_aggregate(r, kv, "the aggregate bandwidth",
                                {READ_BW: lambda v: v.read_bw, WRITE_BW: lambda v: v.write_bw})


@rule("6.3.4.2", "kvcacheAggregateThroughput").check(LEAF, benchmark=FAMILY, command="run")
def aggregate_throughput(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """aggregated_storage_throughput_tokens_per_sec = fmean over trials of the sum over ranks, recomputed."""
    kv = judged(leaf)
    if kv is not None:
        yield from _check_aggregate(r, kv, "the aggregate storage throughput", {THROUGHPUT: lambda v: v.throughput},
                                    files_rule="6.3.4.1")


@rule("6.3.4.3", "kvcacheAggregateDeviceLatency").check(LEAF, benchmark=FAMILY, command="run")
def aggregate_latency(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """aggregated_device_read/write_p95_ms = max over ranks and trials, recomputed; the result states how."""
    kv = judged(leaf)
    if kv is None:
        return
    yield from _check_aggregate(r, kv, "the aggregate device latency",
                                {DEVICE_READ: lambda v: v.device_read, DEVICE_WRITE: lambda v: v.device_write},
                                files_rule="6.3.4.1", fields_rule="6.3.4.5")
    if kv.summary is None:
        return
    note = dig(kv.summary, "aggregation", "device_latency")
    if not (isinstance(note, str) and "max" in note.lower() and "p95" in note.lower()):
        yield r.invalid(leaf.path_of("summary"), "the result does not state that the device P95 is the max of per-rank P95s "
                                                 "over the storage-tier I/O span (summary.json aggregation.device_latency)")


def lists_every_rank(stated: Any, ranks: int | None) -> bool:
    """Whether a cpu_tier_ranks list names every rank 0..ranks-1 (a corrupt rank count of 2**63
    is answered by the list's length, never by building its range)."""
    return isinstance(stated, list) and ranks is not None and 0 < ranks <= len(stated) and \
        {as_int(r) for r in stated} >= set(range(ranks))


@rule("6.3.4.4", "kvcacheLatencyValidity").check(LEAF, benchmark=FAMILY, command="run")
def latency_validity(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """No Option's ranks are all CPU-tier (INVALID in CLOSED, a warning in OPEN); cpu_tier_ranks is right."""
    kv = judged(leaf)
    if kv is None:
        return
    for option in kv.options:
        block = kv.option_summary(option) or {}
        files = kv.files_of(option)
        values = recompute(files)
        stated = block.get("cpu_tier_ranks")
        if values is not None:
            all_cpu, cpu = values.all_cpu_tier, values.cpu_tier
            if isinstance(stated, list) and {as_int(r) for r in stated} != cpu:
                yield r.invalid(leaf.path_of("summary"), f"Option {option} lists cpu_tier_ranks {stated}; the per-rank "
                                                         f"results have storage_entries == 0 on {sorted(cpu)}")
        else:
            ranks = as_int(block.get(RANK_COUNT)) or kv.total_ranks
            all_cpu = block.get("all_ranks_cpu_tier") is True or lists_every_rank(stated, ranks)
        if all_cpu:
            severity = INVALID if kv.closed else WARNING
            yield r.finding(severity, leaf.path_of("summary"),
                                      f"every rank of Option {option} served its KV from the CPU tier (storage_entries == 0): "
                                      "its device latency is not a storage measurement")


@rule("6.3.4.5", "kvcacheHeadlineResult").check(LEAF, benchmark=FAMILY, command="run")
def headline(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """Each Option states read bandwidth, device read/write P95 and storage throughput with its rank count."""
    parts = {"storage_read_bandwidth_gbps": READ_BW, "device_read_p95_ms": DEVICE_READ,
             "device_write_p95_ms": DEVICE_WRITE, "storage_throughput_tokens_per_sec": THROUGHPUT}
    kv = yield from judged_with(r, leaf, "summary", "no headline result")
    if kv is None:
        return
    older = older_aggregate(leaf)
    if older:
        yield r.warning(leaf.path_of("summary"), older_aggregate_text(older))
    total = kv.aggregate.total_ranks if kv.aggregate is not None else None
    if total is None:
        yield r.invalid(leaf.path_of("summary"), f"summary.json states no {TOTAL_RANKS} for the headline")
    lacking: dict[str, list[str]] = {}  # what is absent -> the Options it is absent from: one finding per leaf
    for option in kv.options:
        block = kv.option_summary(option)
        if block is None:
            continue  # 6.3.4.1 reports an Option without an aggregate
        absent = [key for key in parts.values() if as_number(block.get(key)) is None]
        if absent:
            lacking.setdefault(", ".join(absent), []).append(option)
        stated = as_int(block.get(TOTAL_RANKS, total))
        if total is not None and stated != total:
            yield r.invalid(leaf.path_of("summary"),
                            f"Option {option} reports {TOTAL_RANKS} {block.get(TOTAL_RANKS)}, the run {total}")
        line = block.get("headline")
        if isinstance(line, dict):
            for name, key in [*parts.items(), (TOTAL_RANKS, TOTAL_RANKS)]:
                want = block.get(key, total) if key == TOTAL_RANKS else block.get(key)
                if name in line and as_number(line[name]) is not None and as_number(want) is not None and line[name] != want:
                    yield r.invalid(leaf.path_of("summary"),
                                    f"Option {option}'s headline {name} {line[name]!r} differs from {key} {want!r}")
    for names, options in lacking.items():
        label = f"Option {options[0]}'s headline" if len(options) == 1 else f"the headline of Options {', '.join(options)}"
        yield r.invalid(leaf.path_of("summary"), f"{label} lacks {names}")


