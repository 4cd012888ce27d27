"""Section 6.3.1-6.3.3: the KV cache workload per Option, the CLOSED sequence, and the clients
(moved out of rules_kvcache.py, which holds the leaf model these rules read)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import PurePosixPath
from typing import Any

from mlpstorage_py.checker.registry import LEAF, Finding, Rule, rule
from mlpstorage_py.checker.rules_kvcache import BUNDLED_CONFIG, OPTION_KEYS, _flag, _mismatches, _same, _table, judged
from mlpstorage_py.results.kv import FAMILY, RANK_COUNT, TOTAL_RANKS, TRIALS, option_table
from mlpstorage_py.results.kv_leaf import RankFile
from mlpstorage_py.results.tree.files import entries
from mlpstorage_py.results.tree.package import Leaf
from mlpstorage_py.results.tree.values import as_int, dig

# --- 6.3.1 / 6.3.2 the workload and the sequence ----------------------------------------------

@rule("6.3.1.1", "kvcacheFixedWorkloadPerOption").check(LEAF, benchmark=FAMILY, command="run")
def fixed_workload(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """A CLOSED run runs Options 1-3 with exactly Table KVCache-1's per-Option values."""
    kv = judged(leaf)
    if kv is None or not kv.closed:
        return
    table = option_table()["options"]
    for option in sorted(set(table) - set(kv.options)):
        yield r.invalid(kv.path, f"Option {option} ({table[option]['name']}) of Table KVCache-1 was not run")
    for option in kv.options:
        expected = _table(option)
        if expected is None:
            yield r.invalid(kv.path, f"Option {option} is not an Option of Table KVCache-1")
            continue
        evidence = 0
        planned = kv.planned(option)
        if planned is not None:
            evidence += 1
            bad = _mismatches(planned, expected, OPTION_KEYS)
            if bad:
                yield r.invalid(leaf.path_of("metadata"), f"Option {option} planned {'; '.join(bad)}")
        for inv in kv.invocations_of(option):
            evidence += 1
            bad = _mismatches(inv.flags, expected, OPTION_KEYS, flags=True)
            if bad:
                yield r.invalid(leaf.path_of("metadata"),
                                f"Option {option} trial {inv.trial} invoked kv-cache.py with {'; '.join(bad)}")
        for rf in kv.files_of(option):
            if rf.data is None:
                continue
            evidence += 1
            bad = _mismatches(rf.run, expected, OPTION_KEYS)
            if bad:
                yield r.invalid(rf.path or rf.where, f"{rf.where} ran {'; '.join(bad)}")
        if not evidence:
            yield r.invalid(kv.path,
                            f"cannot check Option {option}: no plan, invocation or per-rank result records its parameters")
    pins = dig(kv.metadata, "parameters")
    if kv.parameters is None and isinstance(pins, dict) and kv.invocations:
        shown = ", ".join(f"{k}={pins[k]}" for k in OPTION_KEYS if k in pins)
        if shown:
            yield r.info(leaf.path_of("metadata"),
                         f"the metadata's parameters record mlpstorage's CLI pins ({shown}); in CLOSED they do not "
                         "reach kv-cache.py, and the recorded invocations are judged instead")


def _bundled(path: object) -> bool:
    """The bundled config (or none named); a config that is not a path string is not the bundled one."""
    return path is None or (isinstance(path, str) and path.replace("\\", "/").endswith(BUNDLED_CONFIG))


@rule("6.3.2.1", "kvcacheClosedSequenceLocks").check(LEAF, benchmark=FAMILY, command="run")
def sequence_locks(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """A CLOSED run records seed 42, 3 trials, a 90 s inter-option delay and no --config."""
    kv = judged(leaf)
    if kv is None or not kv.closed:
        return
    locks = kv.checker["kvcache_closed_sequence"]
    expected = {"seed": int(locks["seed"]), "trials": int(locks["trials"]), "inter_option_delay_s": int(locks["inter_option_delay_s"])}
    sources = {
        "parameters.sequence": dig(kv.parameters, "sequence") or {},
        "args": {"seed": kv.args.get("seed"), "trials": kv.args.get("trials"), "inter_option_delay_s": kv.args.get("inter_option_delay")},
        "summary.json": {"seed": dig(kv.summary, "seed"), "trials": dig(kv.summary, TRIALS),
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
                yield r.invalid(leaf.path_of("summary") if where == "summary.json" else leaf.path_of("metadata"),
                                f"{where} records {key} {value}; CLOSED locks it to {want}")
    if not seen:
        yield r.invalid(kv.path,
                        "cannot confirm the sequence locks: neither the metadata nor summary.json records seed, trials or the inter-option delay")
    for option in kv.options:
        block = kv.option_summary(option) or {}
        if as_int(block.get("trial_count")) not in (None, expected["trials"]):
            yield r.invalid(leaf.path_of("summary"),
                            f"Option {option} aggregates {block.get('trial_count')} trials, not {expected['trials']}")
        invs = kv.invocations_of(option)
        if invs and len(invs) != expected["trials"]:
            yield r.invalid(leaf.path_of("metadata"),
                            f"Option {option} was invoked {len(invs)} times, not {expected['trials']} trials")
        for inv in invs:
            if "seed-base" in inv.wrapper and not _same(inv.wrapper["seed-base"], expected["seed"]):
                yield r.invalid(leaf.path_of("metadata"),
                                f"Option {option} trial {inv.trial} ran with --seed-base {inv.wrapper['seed-base']}")
            if not _bundled(inv.config):
                yield r.invalid(leaf.path_of("metadata"), f"Option {option} trial {inv.trial} passed --config {inv.config}")
        for rf in kv.files_of(option):
            seed = as_int(rf.run.get("seed", dig(rf.data, "seed")))
            if seed is not None and seed != expected["seed"] + rf.rank:
                yield r.invalid(rf.path or rf.where,
                                f"{rf.where} ran seed {seed}, not {expected['seed']} + rank = {expected['seed'] + rf.rank}")
            if rf.data is not None and not _bundled(rf.run.get("config")):
                yield r.invalid(rf.path or rf.where, f"{rf.where} ran with --config {rf.run.get('config')}")
        trials = sorted({t for (o, t) in kv.rank_dirs if o == option})
        if trials and len(trials) != expected["trials"]:
            yield r.invalid(kv.path / f"option_{option}", f"{len(trials)} trial directories, not {expected['trials']}")
    user_config = kv.args.get("config_file") or kv.args.get("kv_config") or dig(kv.parameters, "global", "config_sha256")
    if user_config:
        yield r.invalid(leaf.path_of("metadata"), f"--config {user_config} is not permitted in CLOSED")


def _autoscaling(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.lower() in ("true", "1", "yes"))


@rule("6.3.2.2", "kvcacheAutoscalingProhibited").check(LEAF, benchmark=FAMILY, command="run")
def autoscaling(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """No CLOSED rank ran with --enable-autoscaling."""
    kv = judged(leaf)
    if kv is None or not kv.closed:
        return
    hits = [f"Option {inv.option} trial {inv.trial}" for inv in kv.invocations if "enable-autoscaling" in inv.flags]
    if hits:
        yield r.invalid(leaf.path_of("metadata"), f"--enable-autoscaling passed to kv-cache.py in {', '.join(hits[:3])}")
    for rf in kv.rank_files:
        if _autoscaling(rf.run.get("enable_autoscaling")) or (as_int(dig(rf.summary, "autoscaling_summary", "total_scale_events")) or 0) > 0:
            yield r.invalid(rf.path or rf.where, f"{rf.where} ran with autoscaling")
    planned = dig(kv.parameters, "global") or {}
    if _autoscaling(planned.get("enable_autoscaling")) or _autoscaling(planned.get("autoscaling")):
        yield r.invalid(leaf.path_of("metadata"), "parameters.global enables autoscaling")
    if _autoscaling(kv.args.get("enable_autoscaling")) and not hits:
        if kv.invocations:
            yield r.info(leaf.path_of("metadata"),
                         "args record enable_autoscaling true (the v3.0 tool's CLOSED pin), but none of the "
                         f"{len(kv.invocations)} recorded invocations passed --enable-autoscaling to kv-cache.py")
        else:
            yield r.invalid(leaf.path_of("metadata"),
                            "args record enable_autoscaling true and no invocation is recorded to show it did not reach kv-cache.py")


# --- 6.3.3 clients ---------------------------------------------------------------------------

@rule("6.3.3.1", "kvcacheClientDefinition").check(LEAF, benchmark=FAMILY, command="run")
def client_definition(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """The rank layout is consistent: the total ranks = npernode x hosts, one rank directory per client."""
    kv = judged(leaf)
    if kv is None:
        return
    total = kv.total_ranks
    if total is None:
        yield r.invalid(leaf.path_of("summary"),
                        f"cannot check the rank layout: no {TOTAL_RANKS}, engine_parameters.{TOTAL_RANKS} or num_processes recorded")
        return
    npernode = as_int(dig(kv.summary, "npernode")) or as_int(dig(kv.metadata, "engine_parameters", "npernode"))
    hosts = kv.host_count
    if npernode is not None and hosts is not None and npernode * hosts != total:
        yield r.invalid(leaf.path_of("summary"), f"{TOTAL_RANKS} {total} is not npernode {npernode} x {hosts} host(s)")
    if kv.hosts and hosts is not None and len(set(kv.hosts)) != hosts:
        yield r.invalid(leaf.path_of("summary"), f"{len(set(kv.hosts))} hosts listed, host_count {hosts}")
    for where, value in (("metadata num_processes", dig(kv.metadata, "num_processes")),
                         (f"engine_parameters.{TOTAL_RANKS}", dig(kv.metadata, "engine_parameters", TOTAL_RANKS)),
                         (f"summary.json {TOTAL_RANKS}", dig(kv.summary, TOTAL_RANKS))):
        if as_int(value) is not None and as_int(value) != total:
            yield r.invalid(leaf.path_of("metadata"), f"{where} is {value}, the run's {TOTAL_RANKS} {total}")
    np_, ppn = as_int(kv.args.get("num_processes")), as_int(kv.args.get("npernode"))
    count = len(kv.args.get("hosts") or []) or 1
    if np_ is not None and ppn is not None and np_ != ppn * count:
        yield r.invalid(leaf.path_of("metadata"), f"--num-processes {np_} and --npernode {ppn} x {count} host(s) disagree")
    elif np_ is not None and ppn is None and np_ % count:
        yield r.invalid(leaf.path_of("metadata"), f"--num-processes {np_} does not divide over {count} hosts")
    for inv in kv.invocations:
        if inv.ranks is not None and inv.ranks != total:
            yield r.invalid(leaf.path_of("metadata"),
                            f"Option {inv.option} trial {inv.trial} ran mpirun -n {inv.ranks}, not {total} ranks")
    for option in kv.options:
        block = kv.option_summary(option) or {}
        for key in (RANK_COUNT, TOTAL_RANKS):
            if as_int(block.get(key)) not in (None, total):
                yield r.invalid(leaf.path_of("summary"), f"Option {option} records {key} {block.get(key)}, not {total}")
    for (option, trial), ranks in sorted(kv.rank_dirs.items()):
        extra = [n for n in ranks if n >= total]
        if extra:
            yield r.invalid(kv.path / f"option_{option}" / f"trial_{trial}",
                            f"rank directories {', '.join(f'rank_{n}' for n in extra)} beyond the run's {total} ranks")


@rule("6.3.3.2", "kvcacheScaleUpModel").check(LEAF, benchmark=FAMILY, command="run")
def scale_up(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """Every client runs its Option's full num-users and max-concurrent-allocs (no per-client reduction)."""
    keys = ("num_users", "max_concurrent_allocs")
    kv = judged(leaf)
    if kv is None:
        return
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
                yield r.invalid(leaf.path_of("metadata"), f"Option {option} trial {inv.trial} gave each client {', '.join(bad)}, "
                                                          f"not the Option's {', '.join(f'{k}={expected[k]}' for k in keys)}")
        for rf in kv.files_of(option):
            if rf.data is None:
                continue
            bad = [f"{k} {rf.run.get(k)}" for k in keys if not _same(rf.run.get(k), expected[k])]
            if bad:
                yield r.invalid(rf.path or rf.where, f"{rf.where} ran {', '.join(bad)}; every client runs the Option's "
                                         f"{', '.join(f'{k}={expected[k]}' for k in keys)}")


@rule("6.3.3.3", "kvcachePerClientIsolation").check(LEAF, benchmark=FAMILY, command="run")
def client_isolation(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """No two clients share a result file or a cache directory."""
    kv = judged(leaf)
    if kv is None:
        return
    total = kv.total_ranks or 0
    for (option, trial), ranks in sorted(kv.rank_dirs.items()):
        for rank in ranks:
            directory = kv.path / f"option_{option}" / f"trial_{trial}" / f"rank_{rank}"
            files = [n for n, k, _ in entries(directory) if n.startswith("kvcache_results_") and n.endswith(".json")]
            if len(files) > 1:
                yield r.invalid(directory, f"{len(files)} result files in one rank directory ({', '.join(files)})")
    by_trial: dict[tuple[str, int], list[RankFile]] = {}
    for rf in kv.rank_files:
        if rf.data is not None:
            by_trial.setdefault((rf.option, rf.trial), []).append(rf)
    for (option, trial), trial_files in sorted(by_trial.items()):
        for key, label in (("output", "result file"), ("cache_dir", "cache directory")):
            owners: dict[str, list[int]] = {}
            for rf in trial_files:
                value = rf.run.get(key)
                if isinstance(value, str) and value:
                    owners.setdefault(str(PurePosixPath(value)), []).append(rf.rank)
                    tail = PurePosixPath(value).parent.name if key == "output" else PurePosixPath(value).name
                    if tail != f"rank_{rf.rank}":
                        yield r.invalid(rf.path or rf.where, f"{rf.where}'s {label} {value} is not its own rank_{rf.rank}/ directory")
            for value, ranks in sorted(owners.items()):
                if len(ranks) > 1:
                    yield r.invalid(kv.path / f"option_{option}" / f"trial_{trial}",
                                    f"ranks {', '.join(map(str, ranks))} share the {label} {value}")
    if total > 1:
        for inv in kv.invocations:
            if inv.direct or "rank-output-base" not in inv.wrapper or "rank-cache-base" not in inv.wrapper:
                yield r.invalid(leaf.path_of("metadata"),
                                f"Option {inv.option} trial {inv.trial} started {total} clients without the wrapper's "
                                "per-rank --rank-output-base/--rank-cache-base: they share one output and cache")


@rule("6.3.3.4", "kvcacheSharedResultsDir").check(LEAF, benchmark=FAMILY, command="run")
def shared_results(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """In a multi-host run every rank wrote its result under the leaf's one, shared, results path."""
    kv = judged(leaf)
    if kv is None or (kv.host_count or 1) <= 1:
        return
    recorded = dig(kv.metadata, "result_dir")
    if not isinstance(recorded, str) or not recorded:
        yield r.invalid(leaf.path_of("metadata"),
                        f"a {kv.host_count}-host run records no result_dir to show its results directory is shared")
        return
    base = PurePosixPath(recorded)
    for rf in kv.rank_files:
        output = rf.run.get("output")
        if isinstance(output, str) and base not in PurePosixPath(output).parents:
            yield r.invalid(rf.path or rf.where,
                            f"{rf.where} wrote {output}, outside the results path {recorded} every host must share")


