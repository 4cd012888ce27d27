"""KV cache (Rules section 6): the Options of Table KVCache-1, each run `trials` times as one
`mpirun ... mlperf_wrapper.py` (one kv-cache.py per rank), aggregated per Rules 6.3.4.

Plan parameters (hashed by core-config allowlist kv_cache@1):
  options.<O>.*   what each Option emits to kv-cache.py (Table KVCache-1, OPEN flags on top)
  sequence.*      seed, trials, inter_option_delay_s (the CLOSED locks of 6.3.2.1)
  global.*        flags every rank gets in every Option
Leaf: kv_cache/<model>/run/<ts>/ with summary.json, results.json, option_<O>_results.json,
option_<O>/trial_<T>/rank_<N>/kvcache_results_<ts>.json and one log pair per trial.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from statistics import fmean
from typing import Any

import yaml

from mlpstorage_py.benchmarks import workloads
from mlpstorage_py.benchmarks.base import Benchmark, Plan
from mlpstorage_py.errors import BenchmarkFailed, ConfigurationError, GateRefused, NotFoundError, PermissionDenied, UsageError
from mlpstorage_py.launch.mpi import LEAF, MpiOptions, fill, mpi_command
from mlpstorage_py.launch.process import run_logged
from mlpstorage_py.results import fs_probe
from mlpstorage_py.results.code_image import source_root
from mlpstorage_py.results.io import write_json
from mlpstorage_py.results.logs import log
from mlpstorage_py.rules.tables import checker

ENGINE = "kv-cache.py"
SCHEMA_VERSION = "1.0"
STAMP = "{stamp}"
# Per-Option keys of Table KVCache-1, in the order they are emitted to kv-cache.py.
OPTION_KEYS = ("model", "num_users", "duration", "gpu_mem_gb", "cpu_mem_gb", "max_concurrent_allocs", "generation_mode")
# OPEN flags (argparse dest) -> the Option key they supersede. max-concurrent-allocs is not
# exposed (Rules 6.6.2).
OPEN_OPTION_FLAGS = {"kv_model": "model", "num_users": "num_users", "duration": "duration", "gpu_mem_gb": "gpu_mem_gb",
                     "cpu_mem_gb": "cpu_mem_gb", "generation_mode": "generation_mode"}
OPEN_GLOBAL_FLAGS = {"performance_profile": ("performance_profile", lambda v: v),
                     "disable_multi_turn": ("multi_turn", lambda v: not v),
                     "disable_prefix_caching": ("prefix_caching", lambda v: not v),
                     "enable_rag": ("rag", bool), "rag_num_docs": ("rag_num_docs", int)}
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}
STARTUP_ESTIMATE_S = 5  # mpirun + interpreter start + the last requests finishing, per trial
DEVICE_LATENCY_NOTE = ("max over ranks and trials of each rank's P95 (a worst-client bound, not a pooled percentile); "
                       "device = the np.load span on a page-cache-dropped file (read) and the fsync span (write) "
                       "at the POSIX boundary, storage tier only")


# -- tables ---------------------------------------------------------------------------------
def option_table() -> dict[str, Any]:
    """configs/kvcache/options.yaml: Table KVCache-1 and the global flags."""
    path = workloads.configs_dir() / "kvcache" / "options.yaml"
    with open(path, encoding="utf-8") as fh:
        table = yaml.safe_load(fh)
    table["options"] = {str(k): v for k, v in table["options"].items()}
    return table


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
        return len(self.hosts) > 1 or any(h not in LOCAL_HOSTS for h in self.hosts)


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
def resolve_parameters(mode: str, args: dict[str, Any], table: dict[str, Any]) -> dict[str, Any]:
    """{options, sequence, global}: CLOSED straight from the table and the locks; OPEN/whatif
    apply only the flags the user gave (they default to None), one key at a time."""
    open_mode = mode != "closed"
    selected = [str(o) for o in (args.get("kv_options") or [])] if open_mode else []
    options: dict[str, dict[str, Any]] = {}
    for key, spec in table["options"].items():
        if selected and key not in selected:
            continue
        params = {k: spec["params"][k] for k in OPTION_KEYS}
        if open_mode:
            for flag, name in OPEN_OPTION_FLAGS.items():
                if args.get(flag) is not None:
                    params[name] = args[flag]
        options[key] = params
    sequence = closed_sequence()
    glob = dict(table["global"])
    if open_mode:
        for flag, name in (("seed", "seed"), ("trials", "trials"), ("inter_option_delay", "inter_option_delay_s")):
            if args.get(flag) is not None:
                sequence[name] = int(args[flag])
        for flag, (name, convert) in OPEN_GLOBAL_FLAGS.items():
            if args.get(flag) is not None:
                glob[name] = convert(args[flag])
        if args.get("kv_config"):
            path = Path(args["kv_config"]).expanduser()
            if not path.is_file():
                raise NotFoundError(f"--config {path} not found")
            glob["config_sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    return {"options": options, "sequence": sequence, "global": glob}


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


# -- aggregation (Rules 6.3.4) --------------------------------------------------------------
def rank_file(trial_dir: Path, rank: int) -> Path | None:
    """The one result file of a rank; None when absent. Two files is an isolation failure."""
    files = sorted((trial_dir / f"rank_{rank}").glob("kvcache_results_*.json"))
    if len(files) > 1:
        raise BenchmarkFailed(f"{trial_dir / f'rank_{rank}'} holds {len(files)} result files; each rank must write one (Rules 6.3.3.3)")
    return files[0] if files else None


def read_trial(trial_dir: Path, total_ranks: int) -> dict[int, dict[str, Any] | None]:
    """rank -> its parsed result, or None when missing or unreadable."""
    results: dict[int, dict[str, Any] | None] = {}
    for rank in range(total_ranks):
        path = rank_file(trial_dir, rank)
        data = None
        if path is not None:
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
                if not isinstance(data.get("summary"), dict):
                    log.warning(f"{path} has no summary; counted as missing")
                    data = None
            except (OSError, json.JSONDecodeError) as exc:
                log.warning(f"cannot read {path}: {exc}; counted as missing")
        results[rank] = data
    return results


def _stats(result: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    summary = result.get("summary") or {}
    return summary, summary.get("cache_stats") or {}


def aggregate_option(option: str, trials: list[dict[int, dict[str, Any] | None]], total_ranks: int) -> dict[str, Any]:
    """One Option's aggregate over trials x ranks:
    bandwidth and storage throughput: sum over a trial's ranks, fmean over trials (6.3.4.1/2);
    device P95s: max over all ranks and trials (6.3.4.3); ranks with storage_entries == 0
    contribute 0.0 to the device latencies and are listed in cpu_tier_ranks (6.3.4.4)."""
    per_trial: list[dict[str, Any]] = []
    missing: list[str] = []
    cpu_tier: list[dict[str, int]] = []
    for trial, ranks in enumerate(trials):
        present: dict[int, dict[str, Any]] = {}
        for rank in range(total_ranks):
            result = ranks.get(rank)
            if result is None:
                missing.append(f"option_{option}/trial_{trial}/rank_{rank}")
            else:
                present[rank] = result
        sums = {"read_bandwidth_gbps": 0.0, "write_bandwidth_gbps": 0.0, "storage_throughput_tokens_per_sec": 0.0,
                "avg_throughput_tokens_per_sec": 0.0}
        maxima = {"device_read_p95_ms": 0.0, "device_write_p95_ms": 0.0, "storage_read_p95_ms": 0.0, "p95_latency_ms": 0.0}
        trial_cpu: list[int] = []
        for rank, result in sorted(present.items()):
            summary, cache = _stats(result)
            storage_rank = cache.get("storage_entries", 0) > 0
            if not storage_rank:
                trial_cpu.append(rank)
                cpu_tier.append({"trial": trial, "rank": rank})
            sums["read_bandwidth_gbps"] += float(cache.get("tier_storage_read_bandwidth_gbps", 0.0))
            sums["write_bandwidth_gbps"] += float(cache.get("tier_storage_write_bandwidth_gbps", 0.0))
            sums["storage_throughput_tokens_per_sec"] += float(summary.get("storage_throughput_tokens_per_sec", 0.0))
            sums["avg_throughput_tokens_per_sec"] += float(summary.get("avg_throughput_tokens_per_sec", 0.0))
            if storage_rank:
                maxima["device_read_p95_ms"] = max(maxima["device_read_p95_ms"], float(cache.get("storage_read_device_p95_ms", 0.0)))
                maxima["device_write_p95_ms"] = max(maxima["device_write_p95_ms"], float(cache.get("storage_write_device_p95_ms", 0.0)))
                maxima["storage_read_p95_ms"] = max(maxima["storage_read_p95_ms"], float(cache.get("storage_read_p95_ms", 0.0)))
            maxima["p95_latency_ms"] = max(maxima["p95_latency_ms"], float((summary.get("end_to_end_latency_ms") or {}).get("p95", 0.0)))
        per_trial.append({"trial": trial, "ranks_reported": len(present), "cpu_tier_ranks": trial_cpu, **sums, **maxima})
    counted = [t for t in per_trial if t["ranks_reported"]]

    def mean(key: str) -> float:
        return fmean(t[key] for t in counted) if counted else 0.0

    def peak(key: str) -> float:
        return max((t[key] for t in counted), default=0.0)

    partial = bool(missing)
    return {
        "option": int(option),
        "aggregated_read_bandwidth_gbps": mean("read_bandwidth_gbps"),
        "aggregated_write_bandwidth_gbps": mean("write_bandwidth_gbps"),
        "aggregated_avg_throughput_tokens_per_sec": mean("avg_throughput_tokens_per_sec"),
        "aggregated_storage_throughput_tokens_per_sec": mean("storage_throughput_tokens_per_sec"),
        "aggregated_p95_latency_ms": peak("p95_latency_ms"),
        "aggregated_device_read_p95_ms": peak("device_read_p95_ms"),
        "aggregated_device_write_p95_ms": peak("device_write_p95_ms"),
        "aggregated_storage_read_p95_ms": peak("storage_read_p95_ms"),
        "rank_count": total_ranks,
        "trial_count": len(trials),
        "total_ranks": total_ranks,
        "partial_failure": partial,
        "missing_files": missing,
        "cpu_tier_ranks": sorted({c["rank"] for c in cpu_tier}),
        "cpu_tier_rank_trials": cpu_tier,
        "all_ranks_cpu_tier": bool(counted) and all(len(t["cpu_tier_ranks"]) == t["ranks_reported"] for t in counted),
        "per_trial": per_trial,
        "headline": {"storage_read_bandwidth_gbps": mean("read_bandwidth_gbps"),
                     "device_read_p95_ms": peak("device_read_p95_ms"),
                     "device_write_p95_ms": peak("device_write_p95_ms"),
                     "storage_throughput_tokens_per_sec": mean("storage_throughput_tokens_per_sec"),
                     "total_ranks": total_ranks},
    }


# -- the benchmark --------------------------------------------------------------------------
class KVCacheBenchmark(Benchmark):
    benchmark_type = "kv_cache"
    family = "kv_cache"
    engine = ENGINE

    def __init__(self, request: Any) -> None:
        super().__init__(request)
        if request.args.get("kv_model"):
            request.model = request.args["kv_model"]
        self.table = option_table()

    def leaf_tail(self) -> Path:
        return Path("kv_cache") / self.request.model / self.request.command

    def wrapper_path(self) -> Path:
        path = source_root() / "kv_cache_benchmark" / "mlperf_wrapper.py"
        if not path.is_file():
            raise NotFoundError(f"{path} not found: the KV cache benchmark ships in the mlpstorage source checkout")
        return path

    def plan(self) -> Plan:
        req = self.request
        overrides, verification = self.overrides()
        parameters = resolve_parameters(req.mode, req.args, self.table)
        if overrides:  # only reachable with --allow-invalid-params (no key is allowlisted)
            parameters = workloads.apply_overrides(parameters, overrides)
        closed_reference = resolve_parameters("closed", {}, self.table)
        if verification == "CLOSED" and parameters != closed_reference:
            verification = "OPEN"
        layout = resolve_layout(req.arg("num_processes"), req.arg("npernode"), req.arg("hosts"))
        cache_dir = req.arg("cache_dir")
        cache = str(Path(cache_dir).expanduser().resolve()) if cache_dir else "<cache-dir>"
        config_path = str(Path(req.args["kv_config"]).expanduser().resolve()) if req.arg("kv_config") else None
        sequence, glob = parameters["sequence"], parameters["global"]
        mpi = MpiOptions.from_args(req.args)
        mpi.hosts = [f"{h}:{layout.npernode}" for h in layout.hosts]
        wrapper = self.wrapper_path()
        commands, per_option = [], {}
        for key, option in parameters["options"].items():
            args = kv_cache_args(option, glob, config_path)
            per_option[key] = args
            for trial in range(sequence["trials"]):
                program = [sys.executable, str(wrapper), "--rank-output-base", f"{LEAF}/option_{key}/trial_{trial}",
                           "--rank-cache-base", cache, "--seed-base", str(sequence["seed"]), "--timestamp", STAMP,
                           "--", *args]
                commands.append(mpi_command(mpi, layout.total_ranks, program))
        plan = Plan(parameters=parameters, num_processes=layout.total_ranks, override_parameters=overrides,
                    verification=verification, commands=commands,
                    data_dir=Path(cache) if cache_dir else None)
        plan.engine_parameters = {"engine": ENGINE, "wrapper": str(wrapper), "cache_dir": cache,
                                  "config_file": config_path, "hosts": list(layout.hosts), "npernode": layout.npernode,
                                  "host_count": len(layout.hosts), "total_ranks": layout.total_ranks,
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
        """Upper bound of the storage tier each Option can fill: every user's conversation at the
        simulator's context cap, on every rank (the CPU tier would hold part of it)."""
        cap = int(self.table["sizing"]["max_context_tokens"])
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
            reference = resolve_parameters("closed", {}, self.table)
            if plan.parameters != reference:
                raise GateRefused("CLOSED runs Table KVCache-1 with seed 42, 3 trials and a 90 s inter-option delay, "
                                  "unchanged (Rules 6.3.1.1, 6.3.2.1, 6.6.1)")
        self._validate_inputs(plan)
        if req.mode == "whatif" or self.results_dir is None:
            return
        if not req.arg("cache_dir"):
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
        layout = Layout(tuple(plan.engine_parameters["hosts"]), plan.engine_parameters["npernode"])
        if layout.multi_host:
            self._probe_shared_results(layout)

    def _validate_inputs(self, plan: Plan) -> None:
        """Let kv-cache.py refuse bad input (a --config key, a size) now, not in every rank later."""
        ep = plan.engine_parameters
        script = Path(ep["wrapper"]).with_name("kv-cache.py")
        cache = ep["cache_dir"] if self.request.arg("cache_dir") else str(Path(tempfile.gettempdir()) / "kvcache-validate")
        checks = {}
        for key, args in ep["kv_cache_args"].items():  # one check per Option, all at once
            argv = [sys.executable, str(script), "--validate-only", *args, "--cache-dir", cache,
                    "--seed", str(plan.parameters["sequence"]["seed"])]
            checks[key] = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        failures = []
        for key, child in checks.items():
            _, err = child.communicate(timeout=120)
            if child.returncode != 0:
                failures.append(f"option {key}: " + (err.strip().splitlines() or [f"exit {child.returncode}"])[-1])
        if failures:
            raise UsageError(failures[0])

    def _probe_shared_results(self, layout: Layout) -> None:
        """Rules 6.3.3.4: every host must see the results directory at the same path."""
        assert self.results_dir is not None
        probe_dir = self.results_dir / ".mlps"
        probe_dir.mkdir(parents=True, exist_ok=True)
        token = uuid.uuid4().hex
        marker = probe_dir / f"kvcache-shared-probe-{token}"
        marker.write_text(token, encoding="utf-8")
        mpi = MpiOptions.from_args(self.request.args)
        mpi.hosts = [f"{h}:1" for h in layout.hosts]
        argv = mpi_command(mpi, len(layout.hosts), [sys.executable, str(self.wrapper_path()), "--probe-shared", str(marker),
                                                    "--probe-token", token])
        log.info(f"checking that {self.results_dir} is shared by {', '.join(layout.hosts)}")
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        except subprocess.TimeoutExpired:
            raise GateRefused("the shared results directory check timed out (Rules 6.3.3.4)") from None
        finally:
            marker.unlink(missing_ok=True)
        if done.returncode != 0:
            detail = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise GateRefused(f"--results-dir {self.results_dir} is not visible at the same path on every host "
                              f"(Rules 6.3.3.4): {detail}")

    def execute(self, plan: Plan, leaf: Path) -> None:
        req = self.request
        params, ep = plan.parameters, plan.engine_parameters
        total = ep["total_ranks"]
        seq = params["sequence"]
        stamp = leaf.name
        Path(ep["cache_dir"]).mkdir(parents=True, exist_ok=True)
        filled: list[list[str]] = []
        outputs: list[dict[str, str]] = []
        failures: dict[str, dict[str, str]] = {}
        aggregates: dict[str, dict[str, Any]] = {}
        commands = iter(plan.commands)
        with self.scratch() as scratch:
            for index, (key, option) in enumerate(params["options"].items()):
                if index and seq["inter_option_delay_s"]:
                    log.info(f"waiting {seq['inter_option_delay_s']} s before option {key} (inter-option delay)")
                    time.sleep(seq["inter_option_delay_s"])
                trials: list[dict[int, dict[str, Any] | None]] = []
                for trial in range(seq["trials"]):
                    argv = [a.replace(STAMP, stamp) for a in fill(next(commands), leaf, scratch)]
                    filled.append(argv)
                    trial_dir = leaf / f"option_{key}" / f"trial_{trial}"
                    trial_dir.mkdir(parents=True, exist_ok=True)
                    out = leaf / f"kvcache_opt{key}_trial{trial}_{stamp}.stdout.log"
                    err = leaf / f"kvcache_opt{key}_trial{trial}_{stamp}.stderr.log"
                    outputs.append({"command": " ".join(argv), "stdout": str(out), "stderr": str(err)})
                    log.info(f"option {key} trial {trial + 1}/{seq['trials']}: {total} rank(s), {option['duration']} s")
                    code = run_logged(argv, stdout_path=out, stderr_path=err, cwd=scratch,
                                      label=f"kvcache option {key} trial {trial}", echo=bool(req.arg("verbose")))
                    if code != 0:
                        failures.setdefault(key, {})[str(trial)] = f"mpirun exited with code {code} (see {err.name})"
                        log.error(f"option {key} trial {trial}: mpirun exited with code {code}; see {err}")
                    trials.append(read_trial(trial_dir, total))
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
        partial = any(a["partial_failure"] for a in aggregates.values()) or bool(failures)
        summary = {
            "schema_version": SCHEMA_VERSION,
            "run_datetime": stamp,
            "model": req.model,
            "npernode": ep["npernode"],
            "host_count": ep["host_count"],
            "hosts": ep["hosts"],
            "total_ranks": total,
            "trials_per_option": seq["trials"],
            "seed": seq["seed"],
            "inter_option_delay_s": seq["inter_option_delay_s"],
            "performance_profile": params["global"]["performance_profile"],
            "options": aggregates,
            "partial_failure": partial,
            "trial_failures": failures,
            "aggregation": {
                "bandwidth_and_throughput": "per trial: sum over ranks; over trials: arithmetic mean (fmean)",
                "device_latency": DEVICE_LATENCY_NOTE,
                "cpu_tier_ranks": "ranks with cache_stats.storage_entries == 0 contribute 0.0 to the device latencies",
            },
        }
        write_json(leaf / "summary.json", summary)
        write_json(leaf / "results.json", {"benchmark": "kv_cache", "model": req.model, "run_datetime": stamp,
                                           "total_ranks": total, "partial_failure": partial,
                                           "options": {k: {"name": a["name"], "label": a["label"], **a["headline"]}
                                                       for k, a in aggregates.items()}})
        _tidy_cache(Path(ep["cache_dir"]), total)
        if partial:
            missing = sum(len(a["missing_files"]) for a in aggregates.values())
            raise BenchmarkFailed(f"partial failure: {missing} rank result(s) missing, {sum(map(len, failures.values()))} "
                                  "trial(s) failed; summary.json records which")
        for key, aggregate in aggregates.items():
            if aggregate["all_ranks_cpu_tier"]:
                log.warning(f"option {key}: every rank served its KV from memory (storage_entries == 0); its device "
                            "latency is not a storage measurement (Rules 6.3.4.4)")

    @staticmethod
    def _print_option(key: str, a: dict[str, Any]) -> None:
        print(f"option {key}: read {a['aggregated_read_bandwidth_gbps']:.3f} GiB/s, write "
              f"{a['aggregated_write_bandwidth_gbps']:.3f} GiB/s, device P95 read {a['aggregated_device_read_p95_ms']:.2f} ms "
              f"/ write {a['aggregated_device_write_p95_ms']:.2f} ms, storage throughput "
              f"{a['aggregated_storage_throughput_tokens_per_sec']:.1f} tok/s ({a['total_ranks']} ranks)", flush=True)

    def collect(self, plan: Plan, leaf: Path) -> dict[str, Any]:
        summary = json.loads((leaf / "summary.json").read_text(encoding="utf-8"))
        return {"engine": ENGINE, "command_output_files": getattr(self, "outputs", []),
                "kvcache_headline": {k: o["headline"] for k, o in summary["options"].items()},
                "cache_dir": plan.engine_parameters["cache_dir"], "hostname": socket.gethostname()}


def _rank_index(leaf: Path, option: str, trials: list[dict[int, dict[str, Any] | None]]) -> dict[str, Any]:
    """Where each rank's file is and the numbers aggregation used from it."""
    index: dict[str, Any] = {}
    for trial, ranks in enumerate(trials):
        entry: dict[str, Any] = {}
        for rank, result in ranks.items():
            path = rank_file(leaf / f"option_{option}" / f"trial_{trial}", rank)
            if result is None:
                entry[f"rank_{rank}"] = {"file": None, "status": "missing"}
                continue
            summary, cache = _stats(result)
            entry[f"rank_{rank}"] = {
                "file": os.path.relpath(path, leaf) if path else None, "status": result.get("status", "ok"),
                "seed": result.get("seed"), "storage_entries": cache.get("storage_entries", 0),
                "tier_storage_read_bandwidth_gbps": cache.get("tier_storage_read_bandwidth_gbps", 0.0),
                "tier_storage_write_bandwidth_gbps": cache.get("tier_storage_write_bandwidth_gbps", 0.0),
                "storage_throughput_tokens_per_sec": summary.get("storage_throughput_tokens_per_sec", 0.0),
                "storage_read_device_p95_ms": cache.get("storage_read_device_p95_ms", 0.0),
                "storage_write_device_p95_ms": cache.get("storage_write_device_p95_ms", 0.0)}
        index[f"trial_{trial}"] = entry
    return index


def _tidy_cache(cache_dir: Path, total_ranks: int) -> None:
    """Remove the ranks' cache directories when kv-cache.py left them empty."""
    for rank in range(total_ranks):
        try:
            (cache_dir / f"rank_{rank}").rmdir()
        except OSError:
            pass
