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
"""

from __future__ import annotations

import functools
import math
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from statistics import fmean
from typing import Any, Iterable

from mlpstorage_py.checker.package import Leaf, Package
from mlpstorage_py.checker.registry import INFO, INVALID, WARNING, Finding, finding, not_applicable, rule
from mlpstorage_py.checker.files import DIR, FILE, entries, load_json
from mlpstorage_py.checker.structure_helpers import (
    LeafRecord, as_int, as_number, checker_of, dig, record, system_description)
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
    def __init__(self, leaf: Leaf, rec: LeafRecord, checker: dict):
        self.leaf, self.rec, self.checker = leaf, rec, checker

    @property
    def path(self) -> Path:
        return self.leaf.path

    @property
    def closed(self) -> bool:
        return self.leaf.division == "closed"

    @property
    def meta(self) -> dict | None:
        return self.rec.meta

    @property
    def summary(self) -> dict | None:
        return self.rec.summary

    @property
    def args(self) -> dict:
        return self.rec.args

    @functools.cached_property
    def parameters(self) -> dict | None:
        """Our tool's structured plan (options/sequence/global), or None (the v3.0 flat pins)."""
        block = dig(self.meta, "parameters")
        return block if isinstance(block, dict) and isinstance(block.get("options"), dict) else None

    def planned(self, option: str) -> dict | None:
        value = dig(self.parameters, "options", option)
        return value if isinstance(value, dict) else None

    @functools.cached_property
    def invocations(self) -> list[Invocation]:
        commands: list[Any] = [c.get("command") for c in dig(self.meta, "command_output_files") or [] if isinstance(c, dict)]
        if not commands:
            commands = list(dig(self.meta, "executed_argv") or [])
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
        for value in (dig(self.summary, "total_ranks"), dig(self.meta, "engine_parameters", "total_ranks"),
                      dig(self.meta, "num_processes")):
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
        for value in (dig(self.summary, "hosts"), dig(self.meta, "engine_parameters", "hosts"), self.args.get("hosts")):
            if isinstance(value, list) and value:
                return [str(h).split(":")[0] for h in value]
        return []

    @functools.cached_property
    def host_count(self) -> int | None:
        value = as_int(dig(self.summary, "host_count")) or as_int(dig(self.meta, "engine_parameters", "host_count"))
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


def _leaves(pkg: Package) -> list[Kv]:
    cache = vars(pkg).setdefault("_kv_leaves", {})
    if "all" not in cache:
        found = []
        for leaf in pkg.leaves:
            if leaf.benchmark != FAMILY or leaf.command != "run":
                continue
            block = checker_of(pkg, leaf.division, leaf.org)
            if block:
                found.append(Kv(leaf, record(pkg, leaf.path), block))
        cache["all"] = found
    return cache["all"]


@functools.cache
def option_table() -> dict[str, Any]:
    """Table KVCache-1 (configs/kvcache/options.yaml), keyed by Option as a string."""
    from mlpstorage_py.benchmarks.kvcache import option_table as load

    return load()


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


# --- 6.3.1 / 6.3.2 the workload and the sequence ----------------------------------------------

@rule("6.3.1.1", "kvcacheFixedWorkloadPerOption")
def fixed_workload(pkg: Package) -> Iterable[Finding]:
    """A CLOSED run runs Options 1-3 with exactly Table KVCache-1's per-Option values."""
    for kv in _leaves(pkg):
        if not kv.closed:
            continue
        table = option_table()["options"]
        for option in sorted(set(table) - set(kv.options)):
            yield finding("6.3.1.1", INVALID, kv.path, f"Option {option} ({table[option]['name']}) of Table KVCache-1 was not run")
        for option in kv.options:
            expected = _table(option)
            if expected is None:
                yield finding("6.3.1.1", INVALID, kv.path, f"Option {option} is not an Option of Table KVCache-1")
                continue
            evidence = 0
            planned = kv.planned(option)
            if planned is not None:
                evidence += 1
                bad = _mismatches(planned, expected, OPTION_KEYS)
                if bad:
                    yield finding("6.3.1.1", INVALID, kv.rec.meta_path, f"Option {option} planned {'; '.join(bad)}")
            for inv in kv.invocations_of(option):
                evidence += 1
                bad = _mismatches(inv.flags, expected, OPTION_KEYS, flags=True)
                if bad:
                    yield finding("6.3.1.1", INVALID, kv.rec.meta_path,
                        f"Option {option} trial {inv.trial} invoked kv-cache.py with {'; '.join(bad)}")
            for rf in kv.files_of(option):
                if rf.data is None:
                    continue
                evidence += 1
                bad = _mismatches(rf.run, expected, OPTION_KEYS)
                if bad:
                    yield finding("6.3.1.1", INVALID, rf.path, f"{rf.where} ran {'; '.join(bad)}")
            if not evidence:
                yield finding("6.3.1.1", INVALID, kv.path,
                    f"cannot check Option {option}: no plan, invocation or per-rank result records its parameters")
        pins = dig(kv.meta, "parameters")
        if kv.parameters is None and isinstance(pins, dict) and kv.invocations:
            shown = ", ".join(f"{k}={pins[k]}" for k in OPTION_KEYS if k in pins)
            if shown:
                yield finding("6.3.1.1", INFO, kv.rec.meta_path,
                              f"the metadata's parameters record mlpstorage's CLI pins ({shown}); in CLOSED they do not "
                              "reach kv-cache.py, and the recorded invocations are judged instead")


def _bundled(path: str | None) -> bool:
    return path is None or path.replace("\\", "/").endswith(BUNDLED_CONFIG)


@rule("6.3.2.1", "kvcacheClosedSequenceLocks")
def sequence_locks(pkg: Package) -> Iterable[Finding]:
    """A CLOSED run records seed 42, 3 trials, a 90 s inter-option delay and no --config."""
    for kv in _leaves(pkg):
        if not kv.closed:
            continue
        locks = kv.checker["kvcache_closed_sequence"]
        expected = {"seed": int(locks["seed"]), "trials": int(locks["trials"]), "inter_option_delay_s": int(locks["inter_option_delay_s"])}
        sources = {
            "parameters.sequence": dig(kv.parameters, "sequence") or {},
            "args": {"seed": kv.args.get("seed"), "trials": kv.args.get("trials"), "inter_option_delay_s": kv.args.get("inter_option_delay")},
            "summary.json": {"seed": dig(kv.summary, "seed"), "trials": dig(kv.summary, "trials_per_option"),
                             "inter_option_delay_s": dig(kv.summary, "inter_option_delay_s")},
        }
        seen = 0
        for where, block in sources.items():
            for key, want in expected.items():
                value = block.get(key)
                if value is None:
                    continue
                seen += 1
                if not _same(value, want):
                    yield finding("6.3.2.1", INVALID, kv.rec.summary_path if where == "summary.json" else kv.rec.meta_path,
                                  f"{where} records {key} {value}; CLOSED locks it to {want}")
        if not seen:
            yield finding("6.3.2.1", INVALID, kv.path,
                "cannot confirm the sequence locks: neither the metadata nor summary.json records seed, trials or the inter-option delay")
        for option in kv.options:
            block = kv.option_summary(option) or {}
            if as_int(block.get("trial_count")) not in (None, expected["trials"]):
                yield finding("6.3.2.1", INVALID, kv.rec.summary_path,
                    f"Option {option} aggregates {block.get('trial_count')} trials, not {expected['trials']}")
            invs = kv.invocations_of(option)
            if invs and len(invs) != expected["trials"]:
                yield finding("6.3.2.1", INVALID, kv.rec.meta_path,
                    f"Option {option} was invoked {len(invs)} times, not {expected['trials']} trials")
            for inv in invs:
                if "seed-base" in inv.wrapper and not _same(inv.wrapper["seed-base"], expected["seed"]):
                    yield finding("6.3.2.1", INVALID, kv.rec.meta_path,
                        f"Option {option} trial {inv.trial} ran with --seed-base {inv.wrapper['seed-base']}")
                if not _bundled(inv.config):
                    yield finding("6.3.2.1", INVALID, kv.rec.meta_path, f"Option {option} trial {inv.trial} passed --config {inv.config}")
            for rf in kv.files_of(option):
                seed = as_int(rf.run.get("seed", dig(rf.data, "seed")))
                if seed is not None and seed != expected["seed"] + rf.rank:
                    yield finding("6.3.2.1", INVALID, rf.path,
                        f"{rf.where} ran seed {seed}, not {expected['seed']} + rank = {expected['seed'] + rf.rank}")
                if rf.data is not None and not _bundled(rf.run.get("config")):
                    yield finding("6.3.2.1", INVALID, rf.path, f"{rf.where} ran with --config {rf.run.get('config')}")
            trials = sorted({t for (o, t) in kv.rank_dirs if o == option})
            if trials and len(trials) != expected["trials"]:
                yield finding("6.3.2.1", INVALID, kv.path / f"option_{option}", f"{len(trials)} trial directories, not {expected['trials']}")
        user_config = kv.args.get("config_file") or kv.args.get("kv_config") or dig(kv.parameters, "global", "config_sha256")
        if user_config:
            yield finding("6.3.2.1", INVALID, kv.rec.meta_path, f"--config {user_config} is not permitted in CLOSED")


def _autoscaling(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.lower() in ("true", "1", "yes"))


@rule("6.3.2.2", "kvcacheAutoscalingProhibited")
def autoscaling(pkg: Package) -> Iterable[Finding]:
    """No CLOSED rank ran with --enable-autoscaling."""
    for kv in _leaves(pkg):
        if not kv.closed:
            continue
        hits = [f"Option {inv.option} trial {inv.trial}" for inv in kv.invocations if "enable-autoscaling" in inv.flags]
        if hits:
            yield finding("6.3.2.2", INVALID, kv.rec.meta_path, f"--enable-autoscaling passed to kv-cache.py in {', '.join(hits[:3])}")
        for rf in kv.rank_files:
            if _autoscaling(rf.run.get("enable_autoscaling")) or (as_int(dig(rf.summary, "autoscaling_summary", "total_scale_events")) or 0) > 0:
                yield finding("6.3.2.2", INVALID, rf.path, f"{rf.where} ran with autoscaling")
        planned = dig(kv.parameters, "global") or {}
        if _autoscaling(planned.get("enable_autoscaling")) or _autoscaling(planned.get("autoscaling")):
            yield finding("6.3.2.2", INVALID, kv.rec.meta_path, "parameters.global enables autoscaling")
        if _autoscaling(kv.args.get("enable_autoscaling")) and not hits:
            if kv.invocations:
                yield finding("6.3.2.2", INFO, kv.rec.meta_path,
                              "args record enable_autoscaling true (the v3.0 tool's CLOSED pin), but none of the "
                              f"{len(kv.invocations)} recorded invocations passed --enable-autoscaling to kv-cache.py")
            else:
                yield finding("6.3.2.2", INVALID, kv.rec.meta_path,
                    "args record enable_autoscaling true and no invocation is recorded to show it did not reach kv-cache.py")


# --- 6.3.3 clients ---------------------------------------------------------------------------

@rule("6.3.3.1", "kvcacheClientDefinition")
def client_definition(pkg: Package) -> Iterable[Finding]:
    """The rank layout is consistent: total_ranks = npernode x hosts, one rank directory per client."""
    for kv in _leaves(pkg):
        total = kv.total_ranks
        if total is None:
            yield finding("6.3.3.1", INVALID, kv.rec.summary_path,
                "cannot check the rank layout: no total_ranks, engine_parameters.total_ranks or num_processes recorded")
            continue
        npernode = as_int(dig(kv.summary, "npernode")) or as_int(dig(kv.meta, "engine_parameters", "npernode"))
        hosts = kv.host_count
        if npernode is not None and hosts is not None and npernode * hosts != total:
            yield finding("6.3.3.1", INVALID, kv.rec.summary_path, f"total_ranks {total} is not npernode {npernode} x {hosts} host(s)")
        if kv.hosts and hosts is not None and len(set(kv.hosts)) != hosts:
            yield finding("6.3.3.1", INVALID, kv.rec.summary_path, f"{len(set(kv.hosts))} hosts listed, host_count {hosts}")
        for where, value in (("metadata num_processes", dig(kv.meta, "num_processes")),
                             ("engine_parameters.total_ranks", dig(kv.meta, "engine_parameters", "total_ranks")),
                             ("summary.json total_ranks", dig(kv.summary, "total_ranks"))):
            if as_int(value) is not None and as_int(value) != total:
                yield finding("6.3.3.1", INVALID, kv.rec.meta_path, f"{where} is {value}, the run's total_ranks {total}")
        np_, ppn = as_int(kv.args.get("num_processes")), as_int(kv.args.get("npernode"))
        count = len(kv.args.get("hosts") or []) or 1
        if np_ is not None and ppn is not None and np_ != ppn * count:
            yield finding("6.3.3.1", INVALID, kv.rec.meta_path, f"--num-processes {np_} and --npernode {ppn} x {count} host(s) disagree")
        elif np_ is not None and ppn is None and np_ % count:
            yield finding("6.3.3.1", INVALID, kv.rec.meta_path, f"--num-processes {np_} does not divide over {count} hosts")
        for inv in kv.invocations:
            if inv.ranks is not None and inv.ranks != total:
                yield finding("6.3.3.1", INVALID, kv.rec.meta_path,
                    f"Option {inv.option} trial {inv.trial} ran mpirun -n {inv.ranks}, not {total} ranks")
        for option in kv.options:
            block = kv.option_summary(option) or {}
            for key in ("rank_count", "total_ranks"):
                if as_int(block.get(key)) not in (None, total):
                    yield finding("6.3.3.1", INVALID, kv.rec.summary_path, f"Option {option} records {key} {block.get(key)}, not {total}")
        for (option, trial), ranks in sorted(kv.rank_dirs.items()):
            extra = [r for r in ranks if r >= total]
            if extra:
                yield finding("6.3.3.1", INVALID, kv.path / f"option_{option}" / f"trial_{trial}",
                              f"rank directories {', '.join(f'rank_{r}' for r in extra)} beyond the run's {total} ranks")


@rule("6.3.3.2", "kvcacheScaleUpModel")
def scale_up(pkg: Package) -> Iterable[Finding]:
    """Every client runs its Option's full num-users and max-concurrent-allocs (no per-client reduction)."""
    keys = ("num_users", "max_concurrent_allocs")
    for kv in _leaves(pkg):
        for option in kv.options:
            # CLOSED: the table's immutable values (6.3.1.1 judges the plan); OPEN: the run's own plan
            expected = _table(option) if kv.closed else kv.planned(option)
            invs = kv.invocations_of(option)
            if expected is None and invs:
                expected = {k: invs[0].flags.get(_flag(k)) for k in keys}
            if expected is None or any(expected.get(k) is None for k in keys):
                continue
            for inv in invs:
                bad = [f"--{_flag(k)} {inv.flags.get(_flag(k))}" for k in keys if not _same(inv.flags.get(_flag(k)), expected[k])]
                if bad and not kv.closed:
                    yield finding("6.3.3.2", INVALID, kv.rec.meta_path, f"Option {option} trial {inv.trial} gave each client {', '.join(bad)}, "
                                                                        f"not the Option's {', '.join(f'{k}={expected[k]}' for k in keys)}")
            for rf in kv.files_of(option):
                if rf.data is None:
                    continue
                bad = [f"{k} {rf.run.get(k)}" for k in keys if not _same(rf.run.get(k), expected[k])]
                if bad:
                    yield finding("6.3.3.2", INVALID, rf.path, f"{rf.where} ran {', '.join(bad)}; every client runs the Option's "
                                                               f"{', '.join(f'{k}={expected[k]}' for k in keys)}")


@rule("6.3.3.3", "kvcachePerClientIsolation")
def client_isolation(pkg: Package) -> Iterable[Finding]:
    """No two clients share a result file or a cache directory."""
    for kv in _leaves(pkg):
        total = kv.total_ranks or 0
        for (option, trial), ranks in sorted(kv.rank_dirs.items()):
            for rank in ranks:
                directory = kv.path / f"option_{option}" / f"trial_{trial}" / f"rank_{rank}"
                files = [n for n, k, _ in entries(directory) if n.startswith("kvcache_results_") and n.endswith(".json")]
                if len(files) > 1:
                    yield finding("6.3.3.3", INVALID, directory, f"{len(files)} result files in one rank directory ({', '.join(files)})")
        by_trial: dict[tuple[str, int], list[RankFile]] = {}
        for rf in kv.rank_files:
            if rf.data is not None:
                by_trial.setdefault((rf.option, rf.trial), []).append(rf)
        for (option, trial), files in sorted(by_trial.items()):
            for key, label in (("output", "result file"), ("cache_dir", "cache directory")):
                owners: dict[str, list[int]] = {}
                for rf in files:
                    value = rf.run.get(key)
                    if isinstance(value, str) and value:
                        owners.setdefault(str(PurePosixPath(value)), []).append(rf.rank)
                        tail = PurePosixPath(value).parent.name if key == "output" else PurePosixPath(value).name
                        if tail != f"rank_{rf.rank}":
                            yield finding("6.3.3.3", INVALID, rf.path, f"{rf.where}'s {label} {value} is not its own rank_{rf.rank}/ directory")
                for value, ranks in sorted(owners.items()):
                    if len(ranks) > 1:
                        yield finding("6.3.3.3", INVALID, kv.path / f"option_{option}" / f"trial_{trial}",
                                      f"ranks {', '.join(map(str, ranks))} share the {label} {value}")
        if total > 1:
            for inv in kv.invocations:
                if inv.direct or "rank-output-base" not in inv.wrapper or "rank-cache-base" not in inv.wrapper:
                    yield finding("6.3.3.3", INVALID, kv.rec.meta_path,
                                  f"Option {inv.option} trial {inv.trial} started {total} clients without the wrapper's "
                                  "per-rank --rank-output-base/--rank-cache-base: they share one output and cache")


@rule("6.3.3.4", "kvcacheSharedResultsDir")
def shared_results(pkg: Package) -> Iterable[Finding]:
    """In a multi-host run every rank wrote its result under the leaf's one, shared, results path."""
    for kv in _leaves(pkg):
        if (kv.host_count or 1) <= 1:
            continue
        recorded = dig(kv.meta, "result_dir")
        if not isinstance(recorded, str) or not recorded:
            yield finding("6.3.3.4", INVALID, kv.rec.meta_path,
                f"a {kv.host_count}-host run records no result_dir to show its results directory is shared")
            continue
        base = PurePosixPath(recorded)
        for rf in kv.rank_files:
            output = rf.run.get("output")
            if isinstance(output, str) and base not in PurePosixPath(output).parents:
                yield finding("6.3.3.4", INVALID, rf.path,
                    f"{rf.where} wrote {output}, outside the results path {recorded} every host must share")


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
    sums = {"read": [], "write": [], "tokens": []}
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


def _check_aggregate(pkg: Package, number: str, what: str, pick: dict[str, Any], files_rule: str | None = None,
                     fields_rule: str | None = None) -> Iterable[Finding]:
    """Recompute the stated aggregates. A missing per-rank file is reported once, by the first rule
    that reads them (files_rule None); the others say they were not checked. An absent field is
    INVALID here unless fields_rule names the rule that requires it stated (then: not checked)."""
    for kv in _leaves(pkg):
        unstated: list[str] = []
        if kv.summary is None:
            yield finding(number, INVALID, kv.rec.summary_path, f"cannot check {what}: {kv.rec.summary_problem}")
            continue
        tol = float(kv.checker.get("kvcache_aggregate_rel_tol", 1e-9))
        missing_files: list[RankFile] = []
        for option in kv.options:
            block = kv.option_summary(option)
            if block is None:
                yield finding(number, INVALID, kv.rec.summary_path, f"summary.json has no aggregate for Option {option}")
                continue
            absent = [k for k in pick if as_number(block.get(k)) is None]
            if absent and fields_rule:
                unstated.append(f"Option {option} states no {', '.join(absent)}")
            elif absent:
                yield finding(number, INVALID, kv.rec.summary_path, f"Option {option} states no {', '.join(absent)}")
            files = kv.files_of(option)
            bad = [f for f in files if f.data is None]
            if bad or not files:
                missing_files += bad
                continue
            values = recompute(files)
            for key, get in pick.items():
                stated = as_number(block.get(key))
                if stated is not None and not _close(stated, get(values), tol):
                    yield finding(number, INVALID, kv.rec.summary_path, f"Option {option} {key} {stated!r} != {get(values)!r} "
                                                                        f"recomputed from {len(files)} per-rank results")
        if unstated:
            yield finding(number, INFO, kv.rec.summary_path, f"not checked: {'; '.join(unstated)} (the headline requires them: "
                                                             f"reported under {fields_rule})")
        if missing_files and files_rule:
            yield finding(number, INFO, kv.path, f"not checked: {what} cannot be recomputed without the per-rank results "
                                                 f"(reported under {files_rule})")
        elif missing_files:
            yield finding(number, INVALID, kv.path, f"cannot recompute {what}: {_missing_text(missing_files)}")
        elif not kv.rank_files and kv.options:
            yield finding(number, INVALID, kv.path, f"cannot recompute {what}: no per-rank result is expected or found "
                                                    "(total_ranks and trials_per_option unrecorded or implausible)")


@rule("6.3.4.1", "kvcacheAggregateBandwidth")
def aggregate_bandwidth(pkg: Package) -> Iterable[Finding]:
    """aggregated_read/write_bandwidth_gbps = fmean over trials of the sum over ranks, recomputed."""
    yield from _check_aggregate(pkg, "6.3.4.1", "the aggregate bandwidth",
                                {READ_BW: lambda r: r.read_bw, WRITE_BW: lambda r: r.write_bw})


@rule("6.3.4.2", "kvcacheAggregateThroughput")
def aggregate_throughput(pkg: Package) -> Iterable[Finding]:
    """aggregated_storage_throughput_tokens_per_sec = fmean over trials of the sum over ranks, recomputed."""
    yield from _check_aggregate(pkg, "6.3.4.2", "the aggregate storage throughput", {THROUGHPUT: lambda r: r.throughput},
                                files_rule="6.3.4.1")


@rule("6.3.4.3", "kvcacheAggregateDeviceLatency")
def aggregate_latency(pkg: Package) -> Iterable[Finding]:
    """aggregated_device_read/write_p95_ms = max over ranks and trials, recomputed; the result states how."""
    yield from _check_aggregate(pkg, "6.3.4.3", "the aggregate device latency",
                                {DEVICE_READ: lambda r: r.device_read, DEVICE_WRITE: lambda r: r.device_write},
                                files_rule="6.3.4.1", fields_rule="6.3.4.5")
    for kv in _leaves(pkg):
        if kv.summary is None:
            continue
        note = dig(kv.summary, "aggregation", "device_latency")
        if not (isinstance(note, str) and "max" in note.lower() and "p95" in note.lower()):
            yield finding("6.3.4.3", INVALID, kv.rec.summary_path, "the result does not state that the device P95 is the max of per-rank P95s "
                                                                   "over the storage-tier I/O span (summary.json aggregation.device_latency)")


@rule("6.3.4.4", "kvcacheLatencyValidity")
def latency_validity(pkg: Package) -> Iterable[Finding]:
    """No Option's ranks are all CPU-tier (INVALID in CLOSED, a warning in OPEN); cpu_tier_ranks is right."""
    for kv in _leaves(pkg):
        for option in kv.options:
            block = kv.option_summary(option) or {}
            files = kv.files_of(option)
            values = recompute(files)
            stated = block.get("cpu_tier_ranks")
            if values is not None:
                all_cpu, cpu = values.all_cpu_tier, values.cpu_tier
                if isinstance(stated, list) and {as_int(r) for r in stated} != cpu:
                    yield finding("6.3.4.4", INVALID, kv.rec.summary_path, f"Option {option} lists cpu_tier_ranks {stated}; the per-rank "
                                                                           f"results have storage_entries == 0 on {sorted(cpu)}")
            else:
                ranks = as_int(block.get("rank_count")) or kv.total_ranks
                all_cpu = block.get("all_ranks_cpu_tier") is True or (
                    isinstance(stated, list) and ranks is not None and ranks > 0 and {as_int(r) for r in stated} >= set(range(ranks)))
            if all_cpu:
                severity = INVALID if kv.closed else WARNING
                yield finding("6.3.4.4", severity, kv.rec.summary_path,
                              f"every rank of Option {option} served its KV from the CPU tier (storage_entries == 0): "
                              "its device latency is not a storage measurement")


@rule("6.3.4.5", "kvcacheHeadlineResult")
def headline(pkg: Package) -> Iterable[Finding]:
    """Each Option states read bandwidth, device read/write P95 and storage throughput with total_ranks."""
    parts = {"storage_read_bandwidth_gbps": READ_BW, "device_read_p95_ms": DEVICE_READ,
             "device_write_p95_ms": DEVICE_WRITE, "storage_throughput_tokens_per_sec": THROUGHPUT}
    for kv in _leaves(pkg):
        if kv.summary is None:
            yield finding("6.3.4.5", INVALID, kv.rec.summary_path, f"no headline result: {kv.rec.summary_problem}")
            continue
        total = as_int(dig(kv.summary, "total_ranks"))
        if total is None:
            yield finding("6.3.4.5", INVALID, kv.rec.summary_path, "summary.json states no total_ranks for the headline")
        lacking: dict[str, list[str]] = {}  # what is absent -> the Options it is absent from: one finding per leaf
        for option in kv.options:
            block = kv.option_summary(option)
            if block is None:
                continue  # 6.3.4.1 reports an Option without an aggregate
            absent = [key for key in parts.values() if as_number(block.get(key)) is None]
            if absent:
                lacking.setdefault(", ".join(absent), []).append(option)
            stated = as_int(block.get("total_ranks", total))
            if total is not None and stated != total:
                yield finding("6.3.4.5", INVALID, kv.rec.summary_path,
                    f"Option {option} reports total_ranks {block.get('total_ranks')}, the run {total}")
            line = block.get("headline")
            if isinstance(line, dict):
                for name, key in [*parts.items(), ("total_ranks", "total_ranks")]:
                    want = block.get(key, total) if key == "total_ranks" else block.get(key)
                    if name in line and as_number(line[name]) is not None and as_number(want) is not None and line[name] != want:
                        yield finding("6.3.4.5", INVALID, kv.rec.summary_path,
                            f"Option {option}'s headline {name} {line[name]!r} differs from {key} {want!r}")
        for absent, options in lacking.items():
            label = f"Option {options[0]}'s headline" if len(options) == 1 else f"the headline of Options {', '.join(options)}"
            yield finding("6.3.4.5", INVALID, kv.rec.summary_path, f"{label} lacks {absent}")


# --- 6.4 / 6.5 storage -------------------------------------------------------------------------

def _cache_dirs(kv: Kv) -> list[tuple[str, str]]:
    found = [("args.cache_dir", kv.args.get("cache_dir")), ("engine_parameters.cache_dir", dig(kv.meta, "engine_parameters", "cache_dir"))]
    found += [(f"Option {inv.option} trial {inv.trial} --rank-cache-base", inv.wrapper.get("rank-cache-base")) for inv in kv.invocations]
    found += [(f"Option {inv.option} trial {inv.trial} --cache-dir", inv.flags.get("cache-dir")) for inv in kv.invocations]
    found += [(f"{rf.where} cache_dir", rf.run.get("cache_dir")) for rf in kv.rank_files]
    return [(where, value) for where, value in found if isinstance(value, str) and value]


def _apart(a: str, b: str) -> bool:
    pa, pb = PurePosixPath(a), PurePosixPath(b)
    return not (pa == pb or pa in pb.parents or pb in pa.parents)


@rule("6.4.1", "kvcachePosixCacheDir")
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
        if cache and results and not _apart(str(cache), str(results)):
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


@rule("6.5.1", "kvcacheObjectViaGateway")
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


@rule("6.5.2", "kvcacheObjectLatencyScope")
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


@rule("6.6.1", "kvcacheClosedImmutable")
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


@rule("6.6.2", "kvcacheOpenAllowances")
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


@rule("6.6.3", "kvcacheOpenInvocationNote")
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
