"""Section 6: KV cache (Rules 6.3.1.1-6.6.3).

A leaf is kv_cache/<model>/run/<timestamp>/. What it ran is recorded in four places:
- each rank's option_<O>/trial_<T>/rank_<N>/kvcache_results_<ts>.json (its `run` block: what
  that kv-cache.py instance ran; its `summary`: what it measured);
- the *_metadata.json: parameters.options/sequence/global (what mlpstorage emitted; our tool),
  args (the mlpstorage command line) and the recorded invocations (command_output_files,
  executed_argv: every mpirun of mlperf_wrapper.py, one per Option and trial);
- summary.json: the Rules 6.3.4 aggregates per Option.
The v3.0 release's metadata records, in args and a flat parameters block, mlpstorage's CLI pins
(gpu 16, cpu 32, duration 60, autoscaling on), which in CLOSED never reach kv-cache.py: what
the ranks ran is in the recorded invocations, and those are what the rules judge.

Table KVCache-1 is configs/kvcache/options.yaml (the table the tool emits from); the sequence
locks and the 1e-9 tolerance of the recomputation are the edition's checker block.

The leaf model (recorded invocations, rank files) is results/kv_leaf.KvLeaf, the records
results/kv; this module adds the edition a leaf is judged under (Kv) and 6.4.2;
the rules are in rules_kvcache_workload (6.3.1-6.3.3), rules_kvcache_aggregate (6.3.4) and
rules_kvcache_storage (6.4-6.6), registered in that order. Each judges one run leaf, read through
judged(); 6.5.2 judges a system's description.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Generator, Iterable
from typing import Any

from mlpstorage_py.checker.judging import checker_block, per_unit
from mlpstorage_py.checker.registry import Finding, Rule, not_applicable
from mlpstorage_py.results.kv import option_table
from mlpstorage_py.results.kv_leaf import KvLeaf, RankFile
from mlpstorage_py.results.tree.package import Leaf
from mlpstorage_py.results.tree.values import as_number

OPTION_KEYS = ("model", "num_users", "duration", "gpu_mem_gb", "cpu_mem_gb", "max_concurrent_allocs", "generation_mode")
# kv-cache.py flags a rank may receive from a run's global block (configs/kvcache/options.yaml global).
GLOBAL_FLAGS = {"performance-profile", "disable-multi-turn", "disable-prefix-caching", "enable-rag", "rag-num-docs"}
# 6.6.3: the OPEN features whose use requires the exact invocation to be recorded.
TRACED_FEATURES = {"enable-rag": "RAG", "use-burst-trace": "BurstGPT trace", "burst-trace-path": "BurstGPT trace",
                   "trace-path": "BurstGPT trace", "enable-latency-tracing": "latency tracing"}
BUNDLED_CONFIG = "kv_cache_benchmark/config.yaml"   # the benchmark's own defaults, passed by the v3.0 wrapper
GATEWAYS = ("s3fs", "rclone", "mountpoint", "mount-s3", "goofys", "geesefs")  # 6.5.1/6.5.2's examples and kin
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")

not_applicable("6.4.2", "describes how kv-cache.py does its POSIX I/O (np.save + fsync, np.load after a page-cache drop); "
                        "a package holds nothing that could show otherwise")


class Kv(KvLeaf):
    """The leaf model's KV run leaf (results/kv_leaf), with the edition it is judged under."""

    @functools.cached_property
    def checker(self) -> dict[str, Any]:
        """The checker block of the edition its submission is judged under (empty: not checkable,
        or a leaf read outside a package)."""
        return checker_block(self.leaf) if self.leaf.package else {}


@per_unit
def judged(leaf: Leaf) -> Kv | None:
    """The run leaf as the rules read it, or None when its edition is not checkable (EDN-04 skips it).
    Section 6 filters on the edition alone, as it always has: a run under a model directory the
    edition does not sanction, or under a dot-named system, is still judged (judging.judged would
    pass it by and drop its findings).
    The runner offers one leaf to all its checks in turn: the last leaf's reading is kept, and only it,
    so the rules share one parse of its invocations and rank files."""
    kv = Kv(leaf)
    return kv if kv.checker else None


def judged_with(r: Rule, leaf: Leaf, kind: str, unread: str) -> Generator[Finding, None, Kv | None]:
    """The judged run leaf of a rule that needs its `kind` record (metadata, summary): None when
    the leaf is not judged, or, after an INVALID on the record that begins with `unread`, when the
    record cannot be read."""
    kv = judged(leaf)
    if kv is None:
        return None
    if leaf.record(kind).value is None:
        yield r.invalid(leaf.path_of(kind), f"{unread}: {leaf.problem(kind)}")
        return None
    return kv


def _table(option: str) -> dict[str, Any] | None:
    spec = option_table()["options"].get(option)
    return dict(spec["params"]) if spec else None


def _same(a: Any, b: Any) -> bool:
    """Recorded and expected values agree (numbers numerically, text exactly)."""
    if isinstance(b, bool) or isinstance(a, bool):
        return a is b or str(a).lower() == str(b).lower()
    x, y = as_number(a), as_number(b)
    if x is not None and y is not None:
        return x == y
    return str(a) == str(b)


def _flag(key: str) -> str:
    return key.replace("_", "-")


def _mismatches(recorded: dict[str, Any], expected: dict[str, Any], keys: Iterable[str], flags: bool = False) -> list[str]:
    out = []
    for key in keys:
        name = _flag(key) if flags else key
        if name not in recorded:
            out.append(f"no {'--' + name if flags else name}")
        elif not _same(recorded[name], expected[key]):
            out.append(f"{'--' + name if flags else name} {recorded[name]} (table: {expected[key]})")
    return out


def _close(a: float, b: float, tol: float) -> bool:
    return math.isclose(a, b, rel_tol=tol, abs_tol=1e-12)


def _missing_text(files: list[RankFile]) -> str:
    shown = ", ".join(f.problem or f.where for f in files[:3])
    return f"{len(files)} per-rank result file(s) missing or unreadable ({shown}{', ...' if len(files) > 3 else ''})"
