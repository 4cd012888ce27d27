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

This module is the leaf model (Kv: recorded invocations, rank files, the option table) and 6.4.2;
the rules are in rules_kvcache_workload (6.3.1-6.3.3), rules_kvcache_aggregate (6.3.4) and
rules_kvcache_storage (6.4-6.6), registered in that order. Each judges one run leaf, read through
judged(); 6.5.2 judges a system's description.
"""

from __future__ import annotations

import functools
import math
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Generator, Iterable

from mlpstorage_py.checker.judging import checker_block, per_unit
from mlpstorage_py.checker.registry import Finding, Rule, not_applicable
from mlpstorage_py.rules.configs import source_root
from mlpstorage_py.results.tree.files import DIR, FILE, entries, load_json
from mlpstorage_py.results.tree.package import Leaf
from mlpstorage_py.results.tree.values import as_int, as_number, dig
from mlpstorage_py.rules import tables

FAMILY = "kv_cache"
OPTION_KEYS = ("model", "num_users", "duration", "gpu_mem_gb", "cpu_mem_gb", "max_concurrent_allocs", "generation_mode")
WRAPPER_FLAGS = {"rank-output-base", "rank-cache-base", "seed-base", "timestamp", "kv-cache", "config", "probe-shared",
                 "probe-token"}
# kv-cache.py flags a rank may receive from a run's global block (configs/kvcache/options.yaml global).
GLOBAL_FLAGS = {"performance-profile", "disable-multi-turn", "disable-prefix-caching", "enable-rag", "rag-num-docs"}
BOOLEAN_FLAGS = {"disable-multi-turn", "disable-prefix-caching", "enable-rag", "enable-autoscaling", "use-burst-trace",
                 "enable-latency-tracing", "prefill-only", "decode-only", "keep-cache-files"}
# 6.6.3: the OPEN features whose use requires the exact invocation to be recorded.
TRACED_FEATURES = {"enable-rag": "RAG", "use-burst-trace": "BurstGPT trace", "burst-trace-path": "BurstGPT trace",
                   "trace-path": "BurstGPT trace", "enable-latency-tracing": "latency tracing"}
BUNDLED_CONFIG = "kv_cache_benchmark/config.yaml"   # the benchmark's own defaults, passed by the v3.0 wrapper
GATEWAYS = ("s3fs", "rclone", "mountpoint", "mount-s3", "goofys", "geesefs")  # 6.5.1/6.5.2's examples and kin
RANK_DIR = re.compile(r"^rank_(\d+)$")
TRIAL_DIR = re.compile(r"^trial_(\d+)$")
OPTION_DIR = re.compile(r"^option_(\w+)$")
OPTION_TRIAL = re.compile(r"option_([^/\s]+)/trial_(\d+)")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
MAX_EXPECTED = 1 << 16  # rank files enumerated from the records; a corrupt count is not walked
READ_BW, WRITE_BW = "aggregated_read_bandwidth_gbps", "aggregated_write_bandwidth_gbps"
THROUGHPUT = "aggregated_storage_throughput_tokens_per_sec"
DEVICE_READ, DEVICE_WRITE = "aggregated_device_read_p95_ms", "aggregated_device_write_p95_ms"

not_applicable("6.4.2", "describes how kv-cache.py does its POSIX I/O (np.save + fsync, np.load after a page-cache drop); "
                        "a package holds nothing that could show otherwise")


# --- the recorded invocations -----------------------------------------------------------------

@dataclass
class Invocation:
    """One recorded mpirun of mlperf_wrapper.py (or of kv-cache.py directly)."""

    text: str
    ranks: int | None = None
    option: str | None = None
    trial: int | None = None
    wrapper: dict[str, Any] = field(default_factory=dict)   # the wrapper's own flags
    flags: dict[str, Any] = field(default_factory=dict)     # forwarded to kv-cache.py
    direct: bool = False                                     # kv-cache.py launched without the wrapper

    @property
    def config(self) -> str | None:
        value = self.wrapper.get("config", self.flags.get("config"))
        return value if isinstance(value, str) else None


def parse_invocation(command: Any) -> Invocation | None:
    if isinstance(command, list):
        tokens = [str(t) for t in command]
        text = " ".join(tokens)
    elif isinstance(command, str):
        text = command
        try:
            tokens = shlex.split(command)
        except ValueError:
            tokens = command.split()
    else:
        return None
    program = next((i for i, t in enumerate(tokens) if PurePosixPath(t).name in ("mlperf_wrapper.py", "kv-cache.py")), None)
    if program is None:
        return None
    inv = Invocation(text, direct=PurePosixPath(tokens[program]).name == "kv-cache.py")
    for i, token in enumerate(tokens[:program]):
        if token in ("-n", "-np", "--np", "-c") and i + 1 < program:
            inv.ranks = as_int(tokens[i + 1])
    i, forwarding = program + 1, inv.direct
    while i < len(tokens):
        token = tokens[i]
        if token == "--":
            forwarding, i = True, i + 1
            continue
        if not token.startswith("--"):
            i += 1
            continue
        name, _, inline = token[2:].partition("=")
        if inline:
            value, i = inline, i + 1
        elif name not in BOOLEAN_FLAGS and i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
            value, i = tokens[i + 1], i + 2
        else:
            value, i = True, i + 1
        if not forwarding and name in WRAPPER_FLAGS:
            inv.wrapper[name] = value
        else:
            inv.flags[name] = value
    match = OPTION_TRIAL.search(str(inv.wrapper.get("rank-output-base", "")))
    if match:
        inv.option, inv.trial = match.group(1), int(match.group(2))
    return inv


# --- the leaf as recorded ---------------------------------------------------------------------

@dataclass
class RankFile:
    option: str
    trial: int
    rank: int
    path: Path | None
    data: dict | None
    problem: str | None

    @property
    def where(self) -> str:
        return f"option_{self.option}/trial_{self.trial}/rank_{self.rank}"

    @property
    def run(self) -> dict:
        value = dig(self.data, "run")
        return value if isinstance(value, dict) else {}

    @property
    def summary(self) -> dict:
        return dig(self.data, "summary") or {}

    @property
    def cache(self) -> dict:
        return dig(self.data, "summary", "cache_stats") or {}


class Kv:
    """A KV cache run leaf as the section 6 rules and the results table read it: what its records
    say it ran (the invocations, the plan, the rank files), derived once for all of them."""

    def __init__(self, leaf: Leaf):
        self.leaf = leaf

    @property
    def path(self) -> Path:
        return self.leaf.path

    @property
    def closed(self) -> bool:
        return self.leaf.division == "closed"

    @property
    def metadata(self) -> dict | None:
        return self.leaf.metadata

    @property
    def summary(self) -> dict | None:
        return self.leaf.summary

    @property
    def args(self) -> dict:
        return self.leaf.args

    @functools.cached_property
    def checker(self) -> dict:
        """The checker block of the edition its submission is judged under (empty: not checkable,
        or a leaf read outside a package)."""
        return checker_block(self.leaf) if self.leaf.package else {}

    @functools.cached_property
    def parameters(self) -> dict | None:
        """Our tool's structured plan (options/sequence/global), or None (the v3.0 flat pins)."""
        block = dig(self.metadata, "parameters")
        return block if isinstance(block, dict) and isinstance(block.get("options"), dict) else None

    def planned(self, option: str) -> dict | None:
        value = dig(self.parameters, "options", option)
        return value if isinstance(value, dict) else None

    @functools.cached_property
    def invocations(self) -> list[Invocation]:
        commands: list[Any] = [c.get("command") for c in dig(self.metadata, "command_output_files") or [] if isinstance(c, dict)]
        if not commands:
            commands = list(dig(self.metadata, "executed_argv") or [])
        found = [parse_invocation(c) for c in commands]
        return [inv for inv in found if inv is not None]

    def invocations_of(self, option: str) -> list[Invocation]:
        return [inv for inv in self.invocations if inv.option == option]

    @functools.cached_property
    def options(self) -> list[str]:
        """The Options this run ran, as any record states them."""
        found = set((dig(self.summary, "options") or {}).keys()) if isinstance(dig(self.summary, "options"), dict) else set()
        found |= set((dig(self.parameters, "options") or {}).keys())
        found |= {inv.option for inv in self.invocations if inv.option}
        found |= {m.group(1) for n, k, _ in entries(self.path) if k == DIR for m in [OPTION_DIR.match(n)] if m}
        return sorted(str(o) for o in found)

    def option_summary(self, option: str) -> dict | None:
        value = dig(self.summary, "options", option)
        return value if isinstance(value, dict) else None

    @functools.cached_property
    def total_ranks(self) -> int | None:
        for value in (dig(self.summary, "total_ranks"), dig(self.metadata, "engine_parameters", "total_ranks"),
                      dig(self.metadata, "num_processes")):
            if as_int(value) is not None:
                return as_int(value)
        return None

    @functools.cached_property
    def trials(self) -> int | None:
        for value in (dig(self.summary, "trials_per_option"), dig(self.parameters, "sequence", "trials"), self.args.get("trials")):
            if as_int(value) is not None:
                return as_int(value)
        return None

    @functools.cached_property
    def hosts(self) -> list[str]:
        for value in (dig(self.summary, "hosts"), dig(self.metadata, "engine_parameters", "hosts"), self.args.get("hosts")):
            if isinstance(value, list) and value:
                return [str(h).split(":")[0] for h in value]
        return []

    @functools.cached_property
    def host_count(self) -> int | None:
        value = as_int(dig(self.summary, "host_count")) or as_int(dig(self.metadata, "engine_parameters", "host_count"))
        return value if value is not None else (len(set(self.hosts)) if self.hosts else None)

    @functools.cached_property
    def rank_dirs(self) -> dict[tuple[str, int], list[int]]:
        """(option, trial) -> the rank_<N> directories found, from the leaf's own tree."""
        found: dict[tuple[str, int], list[int]] = {}
        for oname, okind, opath in entries(self.path):
            omatch = OPTION_DIR.match(oname)
            if okind != DIR or not omatch:
                continue
            for tname, tkind, tpath in entries(opath):
                tmatch = TRIAL_DIR.match(tname)
                if tkind != DIR or not tmatch:
                    continue
                ranks = [int(m.group(1)) for n, k, _ in entries(tpath) if k == DIR for m in [RANK_DIR.match(n)] if m]
                found[(omatch.group(1), int(tmatch.group(1)))] = sorted(ranks)
        return found

    @functools.cached_property
    def rank_files(self) -> list[RankFile]:
        """Every expected (option x trial x rank) result, and any rank directory beyond them."""
        wanted: set[tuple[str, int, int]] = set()
        trials, ranks = self.trials, self.total_ranks
        if trials is not None and ranks is not None and 0 < trials * ranks * max(len(self.options), 1) <= MAX_EXPECTED:
            wanted = {(o, t, r) for o in self.options for t in range(trials) for r in range(ranks)}
        wanted |= {(o, t, r) for (o, t), ranks in self.rank_dirs.items() for r in ranks}
        return [self._rank_file(o, t, r) for o, t, r in sorted(wanted, key=lambda x: (x[0], x[1], x[2]))]

    def _rank_file(self, option: str, trial: int, rank: int) -> RankFile:
        directory = self.path / f"option_{option}" / f"trial_{trial}" / f"rank_{rank}"
        files = [(n, k, p) for n, k, p in entries(directory) if n.startswith("kvcache_results_") and n.endswith(".json")]
        if not files:
            return RankFile(option, trial, rank, None, None, f"{directory.relative_to(self.path)}/kvcache_results_*.json is missing")
        name, kind, path = files[0]
        if kind != FILE:
            return RankFile(option, trial, rank, path, None, f"{name} is a {kind}, not a file")
        data, problem = load_json(path)
        if problem is None and not (isinstance(data, dict) and isinstance(data.get("summary"), dict)
                                    and isinstance(data["summary"].get("cache_stats", {}), dict)):
            problem = f"{path.relative_to(self.path)} holds no summary/cache_stats object"
        return RankFile(option, trial, rank, path, data if problem is None else None, problem)

    def files_of(self, option: str) -> list[RankFile]:
        return [f for f in self.rank_files if f.option == option]


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


@functools.cache
def option_table() -> dict[str, Any]:
    """Table KVCache-1 (configs/kvcache/options.yaml), keyed by Option as a string."""
    return tables.kvcache_options(source_root() / "configs")


def _table(option: str) -> dict | None:
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


def _mismatches(recorded: dict, expected: dict, keys: Iterable[str], flags: bool = False) -> list[str]:
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
