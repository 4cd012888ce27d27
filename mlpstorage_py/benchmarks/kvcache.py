"""KV cache (Rules section 6): the Options of Table KVCache-1, each run `trials` times as one
`mpirun ... mlperf_wrapper.py` (one kv-cache.py per rank), aggregated per Rules 6.3.4.

Plan parameters (hashed by core-config allowlist kv_cache@1):
  options.<O>.*   what each Option emits to kv-cache.py (Table KVCache-1, OPEN flags on top)
  sequence.*      seed, trials, inter_option_delay_s (the CLOSED locks of 6.3.2.1)
  global.*        flags every rank gets in every Option
Leaf: kv_cache/<model>/run/<ts>/ with summary.json, results.json, option_<O>_results.json,
option_<O>/trial_<T>/rank_<N>/kvcache_results_<ts>.json (each naming its host and what it did
about the page cache), kvcache_hosts.json (one record per client host) and one log pair per trial.
Across hosts: the lifecycle's ssh preflight and host survey (launch_layout), then the shared
results directory check (kvcache_hosts), then every trial under a deadline.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from mlpstorage_py import __version__, progress
from mlpstorage_py.benchmarks import kvcache_hosts
from mlpstorage_py.benchmarks.base import Benchmark, Plan, Request
from mlpstorage_py.benchmarks.kvcache_aggregate import _rank_index, aggregate_option, read_trial
from mlpstorage_py.benchmarks.options import KVCacheOptions
from mlpstorage_py.errors import (
    BenchmarkFailed,
    ConfigurationError,
    GateRefused,
    Interrupted,
    NotFoundError,
    PermissionDenied,
    TimeoutExpired,
    UsageError,
)
from mlpstorage_py.launch.hostnames import is_local
from mlpstorage_py.launch.job import LaunchSpec, Work
from mlpstorage_py.launch.mpi import LEAF, MpiOptions, fill, mpi_command
from mlpstorage_py.launch.process import error_line
from mlpstorage_py.results import fs_probe, libraries
from mlpstorage_py.results.io import write_json
from mlpstorage_py.results.kv import TOTAL_RANKS, TRIALS, KvSummary
from mlpstorage_py.results.logs import log
from mlpstorage_py.results.tree import layout
from mlpstorage_py.rules import configs as workloads
from mlpstorage_py.rules.configs import source_root
from mlpstorage_py.rules.tables import checker, kvcache_options

ENGINE = "kv-cache.py"
STAMP = "{stamp}"
# Per-Option keys of Table KVCache-1, in the order they are emitted to kv-cache.py.
OPTION_KEYS = ("model", "num_users", "duration", "gpu_mem_gb", "cpu_mem_gb", "max_concurrent_allocs", "generation_mode")
STARTUP_ESTIMATE_S = 5  # mpirun + interpreter start + the last requests finishing, per trial
DRAIN_S = 30  # past --duration: in-flight requests finish, KV files are removed, the result is written
DEVICE_LATENCY_NOTE = ("max over ranks and trials of each rank's P95 (a worst-client bound, not a pooled percentile); "
                       "device = the np.load span on a page-cache-dropped file (read) and the fsync span (write) "
                       "at the POSIX boundary, storage tier only")


# -- tables ---------------------------------------------------------------------------------
def option_table() -> dict[str, Any]:
    """configs/kvcache/options.yaml: Table KVCache-1 and the global flags."""
    return kvcache_options(workloads.configs_dir())


def kv_bytes_per_token(model: str) -> int:
    """From configs/kvcache/models.yaml, the table the simulator reads (same formula)."""
    with open(workloads.configs_dir() / "kvcache" / "models.yaml", encoding="utf-8") as fh:
        spec = yaml.safe_load(fh)["models"][model]
    dtype = {"float32": 4, "float16": 2, "bfloat16": 2, "int8": 1}[spec.get("dtype", "float16")]
    if spec.get("attention") == "mla":
        return spec["num_layers"] * (spec["kv_lora_rank"] + spec["qk_rope_head_dim"]) * dtype
    head_dim = spec.get("head_dim") or spec["hidden_size"] // spec["num_heads"]
    return spec["num_layers"] * spec["kv_heads"] * head_dim * 2 * dtype


def closed_sequence() -> dict[str, int]:
    locks = checker()["kvcache_closed_sequence"]
    return {"seed": int(locks["seed"]), "trials": int(locks["trials"]),
            "inter_option_delay_s": int(locks["inter_option_delay_s"])}


# -- rank layout (Rules 6.3.3.1) ------------------------------------------------------------
@dataclass(frozen=True)
class Layout:
    hosts: tuple[str, ...]
    npernode: int

    @property
    def total_ranks(self) -> int:
        return self.npernode * len(self.hosts)

    @property
    def multi_host(self) -> bool:
        """More than one host, or one that is not this machine: the results directory must be shown shared."""
        return len(self.hosts) > 1 or not all(is_local(h) for h in self.hosts)


def resolve_layout(num_processes: int | None, npernode: int | None, hosts: list[str] | None) -> Layout:
    """-np only: npernode = np / hosts (must divide); --npernode only: np = npernode x hosts;
    both: they must agree; neither: one rank per host."""
    hosts = list(hosts or ["127.0.0.1"])
    if any(":" in h for h in hosts):
        raise UsageError("kvcache places ranks with --num-processes/--npernode; give --hosts without :slots")
    if len(set(hosts)) != len(hosts):
        raise UsageError(f"--hosts lists a host twice: {', '.join(hosts)}")
    count = len(hosts)
    if num_processes is not None and npernode is not None:
        if num_processes != npernode * count:
            raise UsageError(f"--num-processes {num_processes} does not equal --npernode {npernode} x {count} host(s) "
                             f"= {npernode * count} (Rules 6.3.3.1)")
    elif num_processes is not None:
        if num_processes % count:
            raise UsageError(f"--num-processes {num_processes} does not divide evenly over {count} hosts (Rules 6.3.3.1); "
                             "use a multiple of the host count or give --npernode")
        npernode = num_processes // count
    elif npernode is None:
        npernode = 1
    return Layout(tuple(hosts), int(npernode))


# -- the workload ---------------------------------------------------------------------------
def _given(values: dict[str, Any]) -> dict[str, Any]:
    """The entries of flags the user gave (an OPEN flag not given is None)."""
    return {name: value for name, value in values.items() if value is not None}


def resolve_parameters(mode: str, opts: KVCacheOptions, table: dict[str, Any]) -> dict[str, Any]:
    """{options, sequence, global}: CLOSED straight from the table and the locks; OPEN/whatif
    apply only the flags the user gave (they default to None), one key at a time.
    max-concurrent-allocs is not exposed (Rules 6.6.2)."""
    open_mode = mode != "closed"
    selected = [str(o) for o in opts.kv_options] if open_mode else []
    # each OPEN flag given supersedes that key of every Option
    superseding = _given({"model": opts.kv_model, "num_users": opts.num_users, "duration": opts.duration,
                          "gpu_mem_gb": opts.gpu_mem_gb, "cpu_mem_gb": opts.cpu_mem_gb,
                          "generation_mode": opts.generation_mode})
    options: dict[str, dict[str, Any]] = {}
    for key, spec in table["options"].items():
        if selected and key not in selected:
            continue
        params = {k: spec["params"][k] for k in OPTION_KEYS}
        if open_mode:
            params.update(superseding)
        options[key] = params
    sequence = closed_sequence()
    glob = dict(table["global"])
    if open_mode:
        sequence.update({name: int(value) for name, value in _given(
            {"seed": opts.seed, "trials": opts.trials, "inter_option_delay_s": opts.inter_option_delay}).items()})
        glob.update(_given({"performance_profile": opts.performance_profile,
                            "multi_turn": _negated(opts.disable_multi_turn),
                            "prefix_caching": _negated(opts.disable_prefix_caching),
                            "rag": opts.enable_rag, "rag_num_docs": opts.rag_num_docs}))
        if opts.kv_config:
            path = Path(opts.kv_config).expanduser()
            if not path.is_file():
                raise NotFoundError(f"--config {path} not found")
            glob["config_sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    return {"options": options, "sequence": sequence, "global": glob}


def _negated(flag: bool | None) -> bool | None:
    """The global key a --disable-* flag turns off (None: not given)."""
    return None if flag is None else not flag


def kv_cache_args(option: dict[str, Any], glob: dict[str, Any], config_path: str | None) -> list[str]:
    """The arguments one Option gives kv-cache.py (through the wrapper, identical on every rank)."""
    argv: list[str] = []
    for key in OPTION_KEYS:
        argv += [f"--{key.replace('_', '-')}", _text(option[key])]
    argv += ["--performance-profile", str(glob["performance_profile"])]
    if not glob["multi_turn"]:
        argv.append("--disable-multi-turn")
    if not glob["prefix_caching"]:
        argv.append("--disable-prefix-caching")
    if glob["rag"]:
        argv += ["--enable-rag", "--rag-num-docs", str(glob["rag_num_docs"])]
    if config_path:
        argv += ["--config", config_path]
    return argv


def _text(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


# -- the benchmark --------------------------------------------------------------------------
class KVCacheBenchmark(Benchmark):
    benchmark_type = "kv_cache"
    options_type = KVCacheOptions
    engine = ENGINE
    request: Request[KVCacheOptions]

    def __init__(self, request: Request[KVCacheOptions]) -> None:
        if request.options.kv_model:  # OPEN --model: the simulated model names the leaf and the metadata
            request = dataclasses.replace(request, model=request.options.kv_model)
        super().__init__(request)
        self.table = option_table()

    def leaf_tail(self) -> Path:
        return layout.leaf_tail(self.benchmark_type, model=self.request.model, command=self.request.command)

    def wrapper_path(self) -> Path:
        path = source_root() / "kv_cache_benchmark" / "mlperf_wrapper.py"
        if not path.is_file():
            raise NotFoundError(f"{path} not found: the KV cache benchmark ships in the mlpstorage source checkout")
        return path

    def plan(self) -> Plan:
        req = self.request
        overrides, verification = self.overrides()
        parameters = resolve_parameters(req.mode, req.options, self.table)
        if overrides:  # only reachable with --allow-invalid-params (no key is allowlisted)
            parameters = workloads.apply_overrides(parameters, overrides)
        closed_reference = resolve_parameters("closed", KVCacheOptions(), self.table)
        if verification == "CLOSED" and parameters != closed_reference:
            verification = "OPEN"
        opts = req.options
        layout = resolve_layout(opts.num_processes, opts.npernode, list(req.launch.hosts))
        cache_dir = opts.cache_dir
        cache = str(Path(cache_dir).expanduser().resolve()) if cache_dir else "<cache-dir>"
        config_path = str(Path(opts.kv_config).expanduser().resolve()) if opts.kv_config else None
        sequence, glob = parameters["sequence"], parameters["global"]
        mpi = MpiOptions.of(req.launch)
        mpi.hosts = [f"{h}:{layout.npernode}" for h in layout.hosts]
        wrapper = self.wrapper_path()
        commands, per_option = [], {}
        for key, option in parameters["options"].items():
            args = kv_cache_args(option, glob, config_path)
            per_option[key] = args
            for trial in range(sequence["trials"]):
                program = [sys.executable, str(wrapper), "--rank-output-base", f"{LEAF}/option_{key}/trial_{trial}",
                           "--rank-cache-base", cache, "--seed-base", str(sequence["seed"]), "--timestamp", STAMP,
                           "--libraries", f"{LEAF}/{libraries.DIR_NAME}", "--kv-cache", str(wrapper.parent / ENGINE),
                           "--", *args]
                commands.append(mpi_command(mpi, layout.total_ranks, program))
        plan = Plan(parameters=parameters, num_processes=layout.total_ranks, override_parameters=overrides,
                    verification=verification, commands=commands,
                    data_dir=Path(cache) if cache_dir else None,
                    engine_identity={"name": ENGINE, "version": __version__, "path": str(wrapper.parent / ENGINE),
                                     "origin": "kv-cache.py of this source tree, one per MPI rank through mlperf_wrapper.py"})
        plan.engine_parameters = {"engine": ENGINE, "wrapper": str(wrapper), "cache_dir": cache,
                                  "config_file": config_path, "hosts": list(layout.hosts), "npernode": layout.npernode,
                                  "host_count": len(layout.hosts), TOTAL_RANKS: layout.total_ranks,
                                  "kv_cache_args": per_option}
        plan.report = self._report(parameters, layout)
        if req.command == "datasize":
            plan.commands = []
        return plan

    def _report(self, parameters: dict[str, Any], layout: Layout) -> list[str]:
        seq = parameters["sequence"]
        options = parameters["options"]
        lines = [f"ranks: {layout.total_ranks} = {layout.npernode} per host x {len(layout.hosts)} host(s) "
                 f"({', '.join(layout.hosts)}); each rank runs the Option's full num_users (Rules 6.3.3.2)",
                 f"sequence: Options {', '.join(options)}, {seq['trials']} trial(s) each, seed {seq['seed']} (+ rank), "
                 f"{seq['inter_option_delay_s']} s between Options",
                 "global: " + ", ".join(f"{k}={v}" for k, v in parameters["global"].items())]
        total = 0.0
        for key, option in options.items():
            spec = self.table["options"].get(key, {})
            per_token = kv_bytes_per_token(option["model"])
            lines.append(f"option {key} ({spec.get('name', 'custom')}): "
                         + ", ".join(f"{k}={_text(v)}" for k, v in option.items())
                         + f"; {per_token / 1024:g} KiB of KV per token")
            total += seq["trials"] * (option["duration"] + STARTUP_ESTIMATE_S)
        total += max(0, len(options) - 1) * seq["inter_option_delay_s"]
        lines.append(f"estimated duration: {total / 60:.1f} min ({total:.0f} s)")
        if self.request.command == "datasize":
            lines += self._footprint(options, layout)
        if self.request.command != "datasize":
            lines.append("  ({stamp} in the commands is the leaf's timestamp, named in every rank's result file)")
        return lines

    def _footprint(self, options: dict[str, Any], layout: Layout) -> list[str]:
        """Upper bound of the working set each Option keeps: every user's live conversation at
        its largest (max turns x the largest context), on every rank (the CPU tier would hold
        part of it; older conversations are evicted as the storage tier fills)."""
        cap = int(self.table["sizing"]["live_tokens_per_user"])
        lines = [f"storage tier upper bound (users x {cap:,} tokens x KV bytes per token, per rank and for "
                 f"{layout.total_ranks} rank(s)):"]
        for key, option in options.items():
            per_rank = int(option["num_users"]) * cap * kv_bytes_per_token(option["model"])
            lines.append(f"  option {key}: {per_rank / 2**30:,.1f} GiB per rank, "
                         f"{per_rank * layout.total_ranks / 2**30:,.1f} GiB in all")
        return lines

    def preflight(self, plan: Plan) -> None:
        req = self.request
        if req.mode == "closed":
            reference = resolve_parameters("closed", KVCacheOptions(), self.table)
            if plan.parameters != reference:
                seq = reference["sequence"]
                raise GateRefused(f"CLOSED runs Table KVCache-1 with seed {seq['seed']}, {seq['trials']} trials and a "
                                  f"{seq['inter_option_delay_s']} s inter-option delay, unchanged (Rules 6.3.1.1, 6.3.2.1, 6.6.1)")
        self._validate_inputs(plan)
        if req.mode == "whatif" or self.results_dir is None:
            return
        if not req.options.cache_dir:
            raise ConfigurationError("--cache-dir is required: the storage tier under test (Rules 6.4.1)")
        cache = Path(plan.engine_parameters["cache_dir"])
        results = self.results_dir.resolve()
        if cache == results or results in cache.parents or cache in results.parents:
            raise GateRefused(f"--cache-dir {cache} and --results-dir {results} must be apart, on different file systems (Rules 6.4.1)")
        try:
            cache.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise PermissionDenied(f"cannot create --cache-dir {cache}: {exc.strerror}") from None
        record = fs_probe.probe(cache, results)
        if record["same_filesystem"]:
            raise GateRefused(f"--cache-dir {cache} and --results-dir {results} are on the same file system; result and "
                              "log I/O would perturb the storage under test (Rules 6.4.1)")
        # The shared results check (6.3.3.4) runs in execute, inside the leaf, after the
        # lifecycle's ssh preflight: a dead host is exit 10 and every failure leaves a leaf.

    def launch_layout(self, plan: Plan) -> tuple[MpiOptions, int] | None:
        """The trials' layout (npernode slots on every host), for the lifecycle's ssh preflight
        and per-host survey; None when nothing is launched (datasize, whatif)."""
        if not plan.commands or self.request.command != "run":
            return None
        ep = plan.engine_parameters
        mpi = MpiOptions.of(self.request.launch)
        mpi.hosts = [f"{h}:{ep['npernode']}" for h in ep["hosts"]]
        return mpi, ep[TOTAL_RANKS]

    def vfs_trace_rule(self) -> str | None:
        """Rules 6.5.2 describes the VFS-level fallback for the KV cache's storage tier."""
        return "6.5.2"

    def _validate_inputs(self, plan: Plan) -> None:
        """Let kv-cache.py refuse bad input (a --config key, a size) now, not in every rank later."""
        ep = plan.engine_parameters
        script = Path(ep["wrapper"]).with_name("kv-cache.py")
        cache = ep["cache_dir"] if self.request.options.cache_dir else str(Path(tempfile.gettempdir()) / "kvcache-validate")
        checks = {}
        for key, args in ep["kv_cache_args"].items():  # one check per Option, all at once
            argv = [sys.executable, str(script), "--validate-only", *args, "--cache-dir", cache,
                    "--seed", str(plan.parameters["sequence"]["seed"])]
            checks[key] = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        failures = []
        for key, child in checks.items():
            try:
                _, err = child.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                for other in checks.values():
                    other.kill()
                    other.communicate()
                raise TimeoutExpired(f"kv-cache.py --validate-only for option {key} took more than 120 s") from None
            if child.returncode != 0:
                lines = err.strip().splitlines() or [f"exit {child.returncode}"]
                said = next((line.split(": error: ", 1)[1] for line in lines if ": error: " in line), lines[-1])
                failures.append(f"option {key}: kv-cache.py refused its input: {said}")
        if failures:
            raise UsageError(failures[0])

    def _probe_shared_results(self, layout: Layout, leaf: Path | None = None) -> list[dict[str, Any]]:
        """Rules 6.3.3.4: every host must see the results directory at the same path. The per-host
        answers go to <leaf>/kvcache_hosts.json before any failure is raised (without a leaf, the
        logs go to a scratch directory)."""
        assert self.results_dir is not None
        hosts = list(layout.hosts)
        with contextlib.ExitStack() as stack:
            log_dir = leaf if leaf is not None else stack.enter_context(self.scratch())
            records: list[dict[str, Any]] = []
            try:
                records, code = kvcache_hosts.run_probe(self.results_dir, hosts, self.request.launch, self.wrapper_path(), log_dir)
            finally:
                if leaf is not None:
                    stdout = log_dir / "kvcache_shared_probe.stdout.log"
                    write_json(leaf / kvcache_hosts.HOSTS_FILE,
                               {"shared_results_check": records or kvcache_hosts.probe_records(hosts, stdout)})
            kvcache_hosts.judge_probe(self.results_dir, records, code, log_dir / "kvcache_shared_probe.stderr.log")
        for r in records:
            log.info(f"shared results check: {r['host']} (hostname {r['hostname']}) sees {r['path']}")
        return records

    def execute(self, plan: Plan, leaf: Path) -> None:
        req = self.request
        params, ep = plan.parameters, plan.engine_parameters
        total = ep[TOTAL_RANKS]
        seq = params["sequence"]
        stamp = leaf.name
        layout = Layout(tuple(ep["hosts"]), ep["npernode"])
        mpi_hosts = [f"{h}:{layout.npernode}" for h in layout.hosts]
        probe = self._probe_shared_results(layout, leaf) if layout.multi_host else kvcache_hosts.local_records(list(layout.hosts))
        Path(ep["cache_dir"]).mkdir(parents=True, exist_ok=True)
        stopped: BaseException | None = None
        all_trials: dict[str, list[dict[int, dict[str, Any] | None]]] = {}
        deadlines: dict[str, float] = {}
        allowances: dict[str, float] = {}
        filled: list[list[str]] = []
        outputs: list[dict[str, str]] = []
        failures: dict[str, dict[str, str]] = {}
        aggregates: dict[str, dict[str, Any]] = {}
        commands = iter(plan.commands)
        with self.launcher(leaf) as launcher, \
                progress.Progress("kvcache", len(params["options"]) * seq["trials"], "trials") as bar:
            for index, (key, option) in enumerate(params["options"].items()):
                if stopped is not None:
                    break
                if index and seq["inter_option_delay_s"]:
                    log.info(f"waiting {seq['inter_option_delay_s']} s before option {key} (inter-option delay)")
                    time.sleep(seq["inter_option_delay_s"])
                trials: list[dict[int, dict[str, Any] | None]] = all_trials.setdefault(key, [])
                for trial in range(seq["trials"]):
                    if stopped is not None:
                        break
                    argv = [a.replace(STAMP, stamp) for a in fill(next(commands), leaf, launcher.scratch)]
                    filled.append(argv)
                    trial_dir = leaf / f"option_{key}" / f"trial_{trial}"
                    trial_dir.mkdir(parents=True, exist_ok=True)
                    out = leaf / f"kvcache_opt{key}_trial{trial}_{stamp}.stdout.log"
                    err = leaf / f"kvcache_opt{key}_trial{trial}_{stamp}.stderr.log"
                    outputs.append({"command": " ".join(argv), "stdout": str(out), "stderr": str(err)})
                    log.info(f"option {key} trial {trial + 1}/{seq['trials']}: {total} rank(s), {option['duration']} s")
                    try:
                        job = launcher.job(LaunchSpec(argv, f"kvcache option {key} trial {trial}", out, err, ranks=total,
                                                      hosts=mpi_hosts, work=Work(busy_s=float(option["duration"]) + DRAIN_S),
                                                      check=False))
                        deadlines[key] = job.deadline_s
                        assert job.startup is not None  # its ranks report: the spec's default
                        allowances[key] = job.startup.allowance_s
                        code = launcher.run(job).code
                    except (TimeoutExpired, Interrupted, KeyboardInterrupt) as exc:  # tree is down; record, re-raise
                        stopped = exc
                        failures.setdefault(key, {})[str(trial)] = str(exc) or "interrupted"
                        trials.append(read_trial(trial_dir, total))
                        break
                    if code != 0:
                        detail = error_line(err)
                        failures.setdefault(key, {})[str(trial)] = (f"mpirun exited with code {code}"
                                                                    f"{': ' + detail if detail else ''} (see {err.name})")
                        log.error(f"option {key} trial {trial}: mpirun exited with code {code}{': ' + detail if detail else ''}; "
                                  f"see {err}")
                    trials.append(read_trial(trial_dir, total))
                    bar.advance()
                aggregate = aggregate_option(key, trials, total)
                aggregate["name"] = self.table["options"].get(key, {}).get("name", "custom")
                aggregate["label"] = self.table["options"].get(key, {}).get("label", "")
                aggregates[key] = aggregate
                write_json(leaf / f"option_{key}_results.json",
                           {"option": int(key), "parameters": option, "kv_cache_args": ep["kv_cache_args"][key],
                            "aggregate": aggregate, "ranks": _rank_index(leaf, key, trials)})
                self._print_option(key, aggregate)
        plan.commands = filled
        self.outputs = outputs
        partial = any(a["partial_failure"] for a in aggregates.values()) or bool(failures) or stopped is not None
        hosts = kvcache_hosts.host_records(list(layout.hosts), layout.npernode, probe, all_trials, plan.client_hosts)
        write_json(leaf / kvcache_hosts.HOSTS_FILE, {"shared_results_check": probe, "client_hosts": hosts})
        summary = {
            "run_datetime": stamp,
            "model": req.model,
            "npernode": ep["npernode"],
            "host_count": ep["host_count"],
            "hosts": ep["hosts"],
            "client_hosts": hosts,
            TOTAL_RANKS: total,
            TRIALS: seq["trials"],
            "seed": seq["seed"],
            "inter_option_delay_s": seq["inter_option_delay_s"],
            "performance_profile": params["global"]["performance_profile"],
            "options": aggregates,
            "partial_failure": partial,
            "trial_failures": failures,
            "stopped": None if stopped is None else (str(stopped) or "interrupted"),
            "trial_deadline_s": deadlines,
            "trial_startup_allowance_s": allowances,
            "aggregation": {
                "bandwidth_and_throughput": "per trial: sum over ranks; over trials: arithmetic mean (fmean)",
                "device_latency": DEVICE_LATENCY_NOTE,
                "cpu_tier_ranks": "ranks with cache_stats.storage_entries == 0 contribute 0.0 to the device latencies",
            },
        }
        KvSummary(summary).write(leaf / "summary.json")
        write_json(leaf / "results.json", {"benchmark": "kv_cache", "model": req.model, "run_datetime": stamp,
                                           TOTAL_RANKS: total, "partial_failure": partial,
                                           "options": {k: {"name": a["name"], "label": a["label"], **a["headline"]}
                                                       for k, a in aggregates.items()}})
        _tidy_cache(Path(ep["cache_dir"]), total, stale=stopped is not None)
        if stopped is not None:
            raise stopped
        if partial:
            missing = sum(len(a["missing_files"]) for a in aggregates.values())
            first = next((why for failed in failures.values() for why in failed.values()), None)
            raise BenchmarkFailed(f"partial failure: {missing} rank result(s) missing, {sum(map(len, failures.values()))} "
                                  "trial(s) failed; summary.json records which" + (f"; first: {first}" if first else ""))
        for key, aggregate in aggregates.items():
            if aggregate["requests_failed"]:
                log.warning(f"option {key}: {aggregate['requests_failed']} request(s) could not store their KV "
                            "(larger than the storage tier) and are not counted; the rank files' "
                            "summary.failed_requests name them")
            if aggregate["all_ranks_cpu_tier"]:
                log.warning(f"option {key}: every rank served its KV from memory (storage_entries == 0); its device "
                            "latency is not a storage measurement (Rules 6.3.4.4)")

    @staticmethod
    def _print_option(key: str, a: dict[str, Any]) -> None:
        print(f"option {key}: read {a['aggregated_read_bandwidth_gbps']:.3f} GiB/s, write "
              f"{a['aggregated_write_bandwidth_gbps']:.3f} GiB/s, device P95 read {a['aggregated_device_read_p95_ms']:.2f} ms "
              f"/ write {a['aggregated_device_write_p95_ms']:.2f} ms, storage throughput "
              f"{a['aggregated_storage_throughput_tokens_per_sec']:.1f} tok/s ({a[TOTAL_RANKS]} ranks; "
              f"{a['requests_completed']} requests done, {a['requests_failed']} failed)", flush=True)

    def collect(self, plan: Plan, leaf: Path) -> dict[str, Any]:
        summary = json.loads((leaf / "summary.json").read_text(encoding="utf-8"))
        return {"engine": ENGINE, "command_output_files": getattr(self, "outputs", []),
                "kvcache_headline": {k: o["headline"] for k, o in summary["options"].items()},
                "cache_dir": plan.engine_parameters["cache_dir"], "hostname": socket.gethostname(),
                "kvcache_client_hosts": summary.get("client_hosts", [])}


def _tidy_cache(cache_dir: Path, total_ranks: int, stale: bool = False) -> None:
    """Remove the ranks' cache directories when kv-cache.py left them empty; after a stopped
    trial (`stale`) first the KV files its killed ranks could not remove (our names only)."""
    if stale:
        _remove_stale(cache_dir, total_ranks)
    for rank in range(total_ranks):
        try:
            (cache_dir / f"rank_{rank}").rmdir()
        except OSError:
            pass


def _remove_stale(cache_dir: Path, total_ranks: int, quiet_s: float = 2.0, limit_s: float = 10.0) -> None:
    """Remote ranks can outlive the launcher's teardown by a moment (their daemon stops them
    once it notices the lost lifeline) and write a few more files: delete until none appear
    for quiet_s, at most limit_s."""
    end = time.monotonic() + limit_s
    quiet_since = time.monotonic()
    while time.monotonic() < end:
        found = [p for r in range(total_ranks) for p in (cache_dir / f"rank_{r}").glob("kv_*.npy")]
        for path in found:
            path.unlink(missing_ok=True)
        if found:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= quiet_s:
            return
        time.sleep(0.2)
