"""A KV cache run leaf as its records state it (kv_cache/<model>/run/<timestamp>/): what it ran
and measured, read once for the section 6 rules (checker/rules_kvcache*), the results table's
KV row (report/kv_rows) and anyone else. What it ran is recorded in four places:
- each rank's option_<O>/trial_<T>/rank_<N>/kvcache_results_<ts>.json (results/kv.KvRank: its
  `run` block, what that kv-cache.py instance ran; its `summary`, what it measured);
- the *_metadata.json: parameters.options/sequence/global (what mlpstorage emitted; our tool),
  args (the mlpstorage command line) and the recorded invocations (command_output_files,
  executed_argv: every mpirun of mlperf_wrapper.py, one per Option and trial);
- summary.json (results/kv.KvSummary): the Rules 6.3.4 aggregates per Option.
"""

from __future__ import annotations

import functools
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from mlpstorage_py.results.kv import TOTAL_RANKS, TRIALS, KvRank, KvSummary
from mlpstorage_py.results.metadata import Metadata
from mlpstorage_py.results.tree.files import DIR, FILE, entries, load_json
from mlpstorage_py.results.tree.package import Leaf
from mlpstorage_py.results.tree.values import as_int, dig

WRAPPER_FLAGS = {"rank-output-base", "rank-cache-base", "seed-base", "timestamp", "kv-cache", "config", "probe-shared",
                 "probe-token"}
BOOLEAN_FLAGS = {"disable-multi-turn", "disable-prefix-caching", "enable-rag", "enable-autoscaling", "use-burst-trace",
                 "enable-latency-tracing", "prefill-only", "decode-only", "keep-cache-files"}
RANK_DIR = re.compile(r"^rank_(\d+)$")
TRIAL_DIR = re.compile(r"^trial_(\d+)$")
OPTION_DIR = re.compile(r"^option_(\w+)$")
OPTION_TRIAL = re.compile(r"option_([^/\s]+)/trial_(\d+)")
MAX_EXPECTED = 1 << 16  # rank files enumerated from the records; a corrupt count is not walked


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
        value: str | bool
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
    data: dict[str, Any] | None
    problem: str | None

    @property
    def where(self) -> str:
        return f"option_{self.option}/trial_{self.trial}/rank_{self.rank}"

    @functools.cached_property
    def record(self) -> KvRank | None:
        """The rank's record, typed (every version: the rules judge what it holds)."""
        return KvRank.any_version(self.data) if self.data is not None else None

    @property
    def run(self) -> dict[str, Any]:
        return self.record.run if self.record is not None else {}

    @property
    def summary(self) -> dict[str, Any]:
        return self.record.summary if self.record is not None else {}

    @property
    def cache(self) -> dict[str, Any]:
        return self.record.cache if self.record is not None else {}


class KvLeaf:
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
    def metadata(self) -> dict[str, Any] | None:
        return self.leaf.metadata

    @property
    def summary(self) -> dict[str, Any] | None:
        return self.leaf.summary

    @functools.cached_property
    def recorded(self) -> Metadata | None:
        """The metadata, typed (None: none, unreadable, or of a version this tool does not read)."""
        found = self.leaf.typed("metadata")
        return found if isinstance(found, Metadata) else None

    @functools.cached_property
    def aggregate(self) -> KvSummary | None:
        """summary.json, typed (None: none, unreadable, or of a version this tool does not read)."""
        found = self.leaf.typed("summary")
        return found if isinstance(found, KvSummary) else None

    @property
    def args(self) -> dict[str, Any]:
        return self.leaf.args

    @functools.cached_property
    def parameters(self) -> dict[str, Any] | None:
        """Our tool's structured plan (options/sequence/global), or None (the v3.0 flat pins)."""
        block = dig(self.metadata, "parameters")
        return block if isinstance(block, dict) and isinstance(block.get("options"), dict) else None

    def planned(self, option: str) -> dict[str, Any] | None:
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
        found = set(self.aggregate.options) if self.aggregate is not None else set()
        found |= set((dig(self.parameters, "options") or {}).keys())
        found |= {inv.option for inv in self.invocations if inv.option}
        found |= {m.group(1) for n, k, _ in entries(self.path) if k == DIR for m in [OPTION_DIR.match(n)] if m}
        return sorted(str(o) for o in found)

    def option_summary(self, option: str) -> dict[str, Any] | None:
        return self.aggregate.option(option) if self.aggregate is not None else None

    @functools.cached_property
    def total_ranks(self) -> int | None:
        stated = self.aggregate.total_ranks if self.aggregate is not None else None
        planned = as_int(self.recorded.engine_parameters.get(TOTAL_RANKS)) if self.recorded is not None else None
        for value in (stated, planned,
                      as_int(dig(self.metadata, "num_processes"))):
            if value is not None:
                return value
        return None

    @functools.cached_property
    def trials(self) -> int | None:
        for value in (dig(self.summary, TRIALS), dig(self.parameters, "sequence", "trials"), self.args.get("trials")):
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
