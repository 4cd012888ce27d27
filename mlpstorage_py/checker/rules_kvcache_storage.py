"""Sections 6.4-6.6: the KV cache storage, and CLOSED/OPEN (moved out of rules_kvcache.py,
which holds the leaf model these rules read)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from mlpstorage_py.checker.judging import checker_block
from mlpstorage_py.checker.registry import LEAF, SYSTEM, Finding, Rule, rule
from mlpstorage_py.checker.rules_kvcache import (
    GATEWAYS,
    GLOBAL_FLAGS,
    OPTION_KEYS,
    SCHEME,
    TRACED_FEATURES,
    Kv,
    _flag,
    _same,
    _table,
    judged,
    judged_with,
)
from mlpstorage_py.checker.rules_kvcache_workload import _autoscaling
from mlpstorage_py.results.kv import FAMILY, option_table
from mlpstorage_py.results.tree.package import Leaf, System
from mlpstorage_py.results.tree.values import apart, dig
from mlpstorage_py.rules import tables

# --- 6.4 / 6.5 storage -------------------------------------------------------------------------

def _cache_dirs(kv: Kv) -> list[tuple[str, str]]:
    found = [("args.cache_dir", kv.args.get("cache_dir")), ("engine_parameters.cache_dir", dig(kv.metadata, "engine_parameters", "cache_dir"))]
    found += [(f"Option {inv.option} trial {inv.trial} --rank-cache-base", inv.wrapper.get("rank-cache-base")) for inv in kv.invocations]
    found += [(f"Option {inv.option} trial {inv.trial} --cache-dir", inv.flags.get("cache-dir")) for inv in kv.invocations]
    found += [(f"{rf.where} cache_dir", rf.run.get("cache_dir")) for rf in kv.rank_files]
    return [(where, value) for where, value in found if isinstance(value, str) and value]


@rule("6.4.1", "kvcachePosixCacheDir").check(LEAF, benchmark=FAMILY, command="run")
def posix_cache_dir(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """--cache-dir and --results-dir are both set, apart, and (where probed) on different filesystems."""
    kv = yield from judged_with(r, leaf, "metadata", "cannot check --cache-dir and --results-dir")
    if kv is None:
        return
    cache = kv.args.get("cache_dir") or dig(kv.metadata, "engine_parameters", "cache_dir") or dig(kv.metadata, "cache_dir")
    results = kv.args.get("results_dir") or dig(kv.metadata, "result_dir")
    if not cache:
        yield r.invalid(leaf.path_of("metadata"), "no --cache-dir recorded")
    if not results:
        yield r.invalid(leaf.path_of("metadata"), "no --results-dir recorded")
    if cache and results and not apart(str(cache), str(results)):
        yield r.invalid(leaf.path_of("metadata"), f"--cache-dir {cache} and --results-dir {results} are not apart")
        return
    probe = leaf.record("fs_separation")
    if probe.value is not None:
        if probe.value.get("same_filesystem") is not False:
            yield r.invalid(kv.path / "fs_separation.json",
                            "fs_separation.json shows --cache-dir and --results-dir on one filesystem")
    elif not probe.missing:
        yield r.invalid(kv.path / "fs_separation.json", f"fs_separation.json cannot be read: {probe.problem}")
    elif cache and results:
        yield r.info(kv.path, "no fs_separation.json: the paths are apart, their filesystems are not recorded")


@rule("6.5.1", "kvcacheObjectViaGateway").check(LEAF, benchmark=FAMILY, command="run")
def object_via_gateway(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """Every cache directory is a POSIX path (object storage reaches kv-cache.py only through a mount)."""
    kv = judged(leaf)
    if kv is None:
        return
    for where, value in _cache_dirs(kv):
        if SCHEME.match(value):
            yield r.invalid(leaf.path_of("metadata"), f"{where} is {value}: kv-cache.py has no object backend; "
                                                      "present the bucket through a POSIX gateway mount and point --cache-dir at it")
            break


def _mentions_gateway(data: Any) -> bool:
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str) and any(g in item.lower() for g in GATEWAYS):
            return True
    return False


@rule("6.5.2", "kvcacheObjectLatencyScope").check(SYSTEM)
def object_latency_scope(r: Rule, system: System) -> Iterable[Finding]:
    """An object-API system with KV cache runs records the POSIX gateway software it mounted."""
    if not any(leaf.benchmark == FAMILY and leaf.command == "run" for leaf in system.leaves) or \
            not checker_block(system):
        return
    sut, problem, path = system.package.system_description(system.division, system.org, system.name)
    if problem or dig(sut, "solution", "architecture", "benchmark_API") != "object":
        return
    if not _mentions_gateway(sut):
        yield r.invalid(path, "an object-API system with KV cache results records no POSIX gateway "
                              f"({', '.join(GATEWAYS[:3])}, ...) and its configuration")


# --- 6.6 CLOSED / OPEN -------------------------------------------------------------------------

def _overrides(kv: Kv) -> dict[str, Any]:
    value = dig(kv.metadata, "override_parameters")
    return value if isinstance(value, dict) else {}


@rule("6.6.1", "kvcacheClosedImmutable").check(LEAF, benchmark=FAMILY, command="run")
def closed_immutable(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """A CLOSED run sets nothing beyond systemname, cache/results dirs and the topology."""
    table_global = option_table()["global"]
    allowed_flags = {_flag(k) for k in OPTION_KEYS} | GLOBAL_FLAGS
    expected_flags = {"performance-profile": table_global["performance_profile"], "disable-multi-turn": not table_global["multi_turn"],
                      "disable-prefix-caching": not table_global["prefix_caching"], "enable-rag": table_global["rag"]}
    kv = judged(leaf)
    if kv is None or not kv.closed:
        return
    for key, value in sorted(_overrides(kv).items()):
        yield r.invalid(leaf.path_of("metadata"), f"--params {key}={value}: CLOSED may not set it")
    planned = dig(kv.parameters, "global")
    if isinstance(planned, dict):
        for key, want in table_global.items():
            if key in planned and not _same(planned[key], want):
                yield r.invalid(leaf.path_of("metadata"), f"parameters.global.{key} is {planned[key]!r}; CLOSED runs {want!r}")
    verdict = dig(kv.metadata, "verification")
    if isinstance(verdict, str) and verdict.upper() != "CLOSED":
        yield r.invalid(leaf.path_of("metadata"), f"the tool judged this run {verdict}, not CLOSED")
    for inv in kv.invocations:
        extra = sorted(f for f in inv.flags if f not in allowed_flags and f != "enable-autoscaling" and f != "config")
        if extra:
            yield r.invalid(leaf.path_of("metadata"),
                            f"Option {inv.option} trial {inv.trial} passed {', '.join('--' + f for f in extra)}")
        for name, want in expected_flags.items():
            value = inv.flags.get(name, False if name != "performance-profile" else None)
            if value is not None and not _same(value, want):
                yield r.invalid(leaf.path_of("metadata"),
                                f"Option {inv.option} trial {inv.trial} passed --{name} {value} (CLOSED: {want})")
    for rf in kv.rank_files:
        if rf.data is None:
            continue
        run = rf.run
        bad = [f"{k} {run[k]!r}" for k, want in (("performance_profile", table_global["performance_profile"]),
                                                 ("disable_multi_turn", not table_global["multi_turn"]),
                                                 ("disable_prefix_caching", not table_global["prefix_caching"]),
                                                 ("enable_rag", table_global["rag"]), ("use_burst_trace", False),
                                                 ("trace_path", None), ("prefill_only", False), ("decode_only", False))
               if k in run and not (run[k] == want or (want is None and not run[k]))]
        if bad:
            yield r.invalid(rf.path or rf.where, f"{rf.where} ran {', '.join(bad)}")


@rule("6.6.2", "kvcacheOpenAllowances").check(LEAF, benchmark=FAMILY, command="run")
def open_allowances(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """An OPEN run keeps each Option's max-concurrent-allocs and sets no --params outside the allowlist."""
    allowed = tables.param_allowlist(FAMILY, "open") | tables.tool_injected_params(FAMILY)
    kv = judged(leaf)
    if kv is None or kv.closed:
        return
    for key in sorted(k for k in _overrides(kv) if k not in allowed):
        yield r.invalid(leaf.path_of("metadata"), f"--params {key}={_overrides(kv)[key]} is not an OPEN allowance")
    for option in kv.options:
        table = _table(option)
        if table is None:
            yield r.invalid(kv.path, f"Option {option} is not an Option of Table KVCache-1")
            continue
        want = table["max_concurrent_allocs"]
        seen: list[tuple[str, Any, Path | str]] = [("parameters.options", (kv.planned(option) or {}).get("max_concurrent_allocs"), leaf.path_of("metadata"))]
        seen += [(f"trial {inv.trial} --max-concurrent-allocs", inv.flags.get("max-concurrent-allocs"), leaf.path_of("metadata"))
                 for inv in kv.invocations_of(option)]
        seen += [(rf.where, rf.run.get("max_concurrent_allocs"), rf.path or rf.where) for rf in kv.files_of(option)
                 if rf.data is not None]
        for where, value, path in seen:
            if value is not None and not _same(value, want):
                yield r.invalid(path, f"Option {option} {where} is {value}; max-concurrent-allocs is not an OPEN "
                                      f"allowance and stays {want}")
                break


@rule("6.6.3", "kvcacheOpenInvocationNote").check(LEAF, benchmark=FAMILY, command="run")
def open_invocation(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """An OPEN run using RAG, a BurstGPT trace or latency tracing records its exact invocation."""
    kv = judged(leaf)
    if kv is None or kv.closed:
        return
    used = set()
    if _autoscaling(dig(kv.parameters, "global", "rag")):
        used.add("RAG")
    for inv in kv.invocations:
        used |= {label for flag, label in TRACED_FEATURES.items() if inv.flags.get(flag) not in (None, False)}
    for rf in kv.rank_files:
        run = rf.run
        if run.get("enable_rag") is True:
            used.add("RAG")
        if run.get("use_burst_trace") is True or run.get("trace_path"):
            used.add("BurstGPT trace")
        if dig(rf.data, "device_latency_tracing"):
            used.add("latency tracing")
    if used and not kv.invocations:
        yield r.invalid(leaf.path_of("metadata"), f"the run uses {', '.join(sorted(used))} but records no exact invocation "
                                                  "(command_output_files / executed_argv)")
