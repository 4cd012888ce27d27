"""Sections 6.4-6.6: the KV cache storage, and CLOSED/OPEN (moved out of rules_kvcache.py,
which holds the leaf model these rules read)."""

from __future__ import annotations

from typing import Any, Iterable

from mlpstorage_py.results.tree.package import Package
from mlpstorage_py.checker.registry import INFO, INVALID, Finding, finding, rule
from mlpstorage_py.checker.rules_kvcache import (
    FAMILY, GATEWAYS, GLOBAL_FLAGS, OPTION_KEYS, SCHEME, TRACED_FEATURES, Kv, _flag, _leaves, _same, _table,
    option_table)
from mlpstorage_py.checker.rules_kvcache_workload import _autoscaling
from mlpstorage_py.checker.structure_helpers import apart, dig, system_description
from mlpstorage_py.rules import tables


# --- 6.4 / 6.5 storage -------------------------------------------------------------------------

def _cache_dirs(kv: Kv) -> list[tuple[str, str]]:
    found = [("args.cache_dir", kv.args.get("cache_dir")), ("engine_parameters.cache_dir", dig(kv.meta, "engine_parameters", "cache_dir"))]
    found += [(f"Option {inv.option} trial {inv.trial} --rank-cache-base", inv.wrapper.get("rank-cache-base")) for inv in kv.invocations]
    found += [(f"Option {inv.option} trial {inv.trial} --cache-dir", inv.flags.get("cache-dir")) for inv in kv.invocations]
    found += [(f"{rf.where} cache_dir", rf.run.get("cache_dir")) for rf in kv.rank_files]
    return [(where, value) for where, value in found if isinstance(value, str) and value]


@rule("6.4.1", "kvcachePosixCacheDir", parts=True)
def posix_cache_dir(pkg: Package) -> Iterable[Finding]:
    """--cache-dir and --results-dir are both set, apart, and (where probed) on different filesystems."""
    for kv in _leaves(pkg):
        if kv.meta is None:
            yield finding("6.4.1", INVALID, kv.rec.meta_path, f"cannot check --cache-dir and --results-dir: {kv.rec.meta_problem}")
            continue
        cache = kv.args.get("cache_dir") or dig(kv.meta, "engine_parameters", "cache_dir") or dig(kv.meta, "cache_dir")
        results = kv.args.get("results_dir") or dig(kv.meta, "result_dir")
        if not cache:
            yield finding("6.4.1", INVALID, kv.rec.meta_path, "no --cache-dir recorded")
        if not results:
            yield finding("6.4.1", INVALID, kv.rec.meta_path, "no --results-dir recorded")
        if cache and results and not apart(str(cache), str(results)):
            yield finding("6.4.1", INVALID, kv.rec.meta_path, f"--cache-dir {cache} and --results-dir {results} are not apart")
            continue
        probe, problem = kv.rec.fs_separation
        if probe is not None:
            if probe.get("same_filesystem") is not False:
                yield finding("6.4.1", INVALID, kv.path / "fs_separation.json",
                    "fs_separation.json shows --cache-dir and --results-dir on one filesystem")
        elif problem != "missing":
            yield finding("6.4.1", INVALID, kv.path / "fs_separation.json", f"fs_separation.json cannot be read: {problem}")
        elif cache and results:
            yield finding("6.4.1", INFO, kv.path, "no fs_separation.json: the paths are apart, their filesystems are not recorded")


@rule("6.5.1", "kvcacheObjectViaGateway", parts=True)
def object_via_gateway(pkg: Package) -> Iterable[Finding]:
    """Every cache directory is a POSIX path (object storage reaches kv-cache.py only through a mount)."""
    for kv in _leaves(pkg):
        for where, value in _cache_dirs(kv):
            if SCHEME.match(value):
                yield finding("6.5.1", INVALID, kv.rec.meta_path, f"{where} is {value}: kv-cache.py has no object backend; "
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


@rule("6.5.2", "kvcacheObjectLatencyScope", parts=True)
def object_latency_scope(pkg: Package) -> Iterable[Finding]:
    """An object-API system with KV cache runs records the POSIX gateway software it mounted."""
    told: set[tuple[str, str, str]] = set()
    for kv in _leaves(pkg):
        key = (kv.leaf.division, kv.leaf.org, kv.leaf.system)
        if key in told:
            continue
        sut, problem, path = system_description(pkg, *key)
        if problem or dig(sut, "solution", "architecture", "benchmark_API") != "object":
            continue
        told.add(key)
        if not _mentions_gateway(sut):
            yield finding("6.5.2", INVALID, path, "an object-API system with KV cache results records no POSIX gateway "
                                                  f"({', '.join(GATEWAYS[:3])}, ...) and its configuration")


# --- 6.6 CLOSED / OPEN -------------------------------------------------------------------------

def _overrides(kv: Kv) -> dict:
    value = dig(kv.meta, "override_parameters")
    return value if isinstance(value, dict) else {}


@rule("6.6.1", "kvcacheClosedImmutable", parts=True)
def closed_immutable(pkg: Package) -> Iterable[Finding]:
    """A CLOSED run sets nothing beyond systemname, cache/results dirs and the topology."""
    table_global = option_table()["global"]
    allowed_flags = {_flag(k) for k in OPTION_KEYS} | GLOBAL_FLAGS
    expected_flags = {"performance-profile": table_global["performance_profile"], "disable-multi-turn": not table_global["multi_turn"],
                      "disable-prefix-caching": not table_global["prefix_caching"], "enable-rag": table_global["rag"]}
    for kv in _leaves(pkg):
        if not kv.closed:
            continue
        for key, value in sorted(_overrides(kv).items()):
            yield finding("6.6.1", INVALID, kv.rec.meta_path, f"--params {key}={value}: CLOSED may not set it")
        planned = dig(kv.parameters, "global")
        if isinstance(planned, dict):
            for key, want in table_global.items():
                if key in planned and not _same(planned[key], want):
                    yield finding("6.6.1", INVALID, kv.rec.meta_path, f"parameters.global.{key} is {planned[key]!r}; CLOSED runs {want!r}")
        verdict = dig(kv.meta, "verification")
        if isinstance(verdict, str) and verdict.upper() != "CLOSED":
            yield finding("6.6.1", INVALID, kv.rec.meta_path, f"the tool judged this run {verdict}, not CLOSED")
        for inv in kv.invocations:
            extra = sorted(f for f in inv.flags if f not in allowed_flags and f != "enable-autoscaling" and f != "config")
            if extra:
                yield finding("6.6.1", INVALID, kv.rec.meta_path,
                    f"Option {inv.option} trial {inv.trial} passed {', '.join('--' + f for f in extra)}")
            for name, want in expected_flags.items():
                value = inv.flags.get(name, False if name != "performance-profile" else None)
                if value is not None and not _same(value, want):
                    yield finding("6.6.1", INVALID, kv.rec.meta_path,
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
                yield finding("6.6.1", INVALID, rf.path, f"{rf.where} ran {', '.join(bad)}")


@rule("6.6.2", "kvcacheOpenAllowances", parts=True)
def open_allowances(pkg: Package) -> Iterable[Finding]:
    """An OPEN run keeps each Option's max-concurrent-allocs and sets no --params outside the allowlist."""
    allowed = tables.param_allowlist(FAMILY, "open") | tables.tool_injected_params(FAMILY)
    for kv in _leaves(pkg):
        if kv.closed:
            continue
        for key in sorted(k for k in _overrides(kv) if k not in allowed):
            yield finding("6.6.2", INVALID, kv.rec.meta_path, f"--params {key}={_overrides(kv)[key]} is not an OPEN allowance")
        for option in kv.options:
            table = _table(option)
            if table is None:
                yield finding("6.6.2", INVALID, kv.path, f"Option {option} is not an Option of Table KVCache-1")
                continue
            want = table["max_concurrent_allocs"]
            seen = [("parameters.options", (kv.planned(option) or {}).get("max_concurrent_allocs"), kv.rec.meta_path)]
            seen += [(f"trial {inv.trial} --max-concurrent-allocs", inv.flags.get("max-concurrent-allocs"), kv.rec.meta_path)
                     for inv in kv.invocations_of(option)]
            seen += [(rf.where, rf.run.get("max_concurrent_allocs"), rf.path) for rf in kv.files_of(option) if rf.data is not None]
            for where, value, path in seen:
                if value is not None and not _same(value, want):
                    yield finding("6.6.2", INVALID, path, f"Option {option} {where} is {value}; max-concurrent-allocs is not an OPEN "
                                                          f"allowance and stays {want}")
                    break


@rule("6.6.3", "kvcacheOpenInvocationNote", parts=True)
def open_invocation(pkg: Package) -> Iterable[Finding]:
    """An OPEN run using RAG, a BurstGPT trace or latency tracing records its exact invocation."""
    for kv in _leaves(pkg):
        if kv.closed:
            continue
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
            yield finding("6.6.3", INVALID, kv.rec.meta_path, f"the run uses {', '.join(sorted(used))} but records no exact invocation "
                                                              "(command_output_files / executed_argv)")
