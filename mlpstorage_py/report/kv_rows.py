"""The KV cache row of the results table (Rules 6.3.4): which run it publishes, which columns each
Option's figures go to, and when it is withheld.

- Run: the latest error-free run of the workload (a summary present, no partial_failure, no
  failed trial); lacking one, the latest finished run with a summary, flagged. Every other run
  is named, with why it was dropped, as the reviewers' report generator does.
- Columns: an Option lands in CLOSED's published columns ("KVCache llama3.1-8b Storage Only - ...")
  only when the model and memory tiers it ran are that Option's of Table KVCache-1; otherwise in
  columns of its own, labelled by the model it ran and its Option, never another model's.
- Withheld: a row whose every KV figure would be blank is not published (the fixed layout has no
  cell to say why); reportgen records why instead. So is a row whose run holds its aggregate only
  under the older name kvcache_run_summary[_<ts>].json: the reference reads only summary.json and
  the v3.0 review withheld that row (ZettaLane's); validate's 6.3.4.5 warning says the same.
- Units: the *_bandwidth_gbps figures are GiB/s (2^30 bytes per second of the trial's elapsed
  time, kv-cache.py's tier_storage_*_bandwidth_gbps summed over ranks), the unit of the
  "Read/Write B/W (GiB/s)" columns: copied unchanged, no conversion.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mlpstorage_py.report.table import KV_GROUPS, KV_METRICS
from mlpstorage_py.results.kv import older_aggregate, older_aggregate_text, option_table, partial_failure
from mlpstorage_py.results.kv_leaf import KvLeaf
from mlpstorage_py.results.tree.package import Leaf
from mlpstorage_py.results.tree.values import as_number

KV_FIELDS = {"throughput_tok_s": "aggregated_storage_throughput_tokens_per_sec",
             "read_bw_gib_s": "aggregated_read_bandwidth_gbps",
             "write_bw_gib_s": "aggregated_write_bandwidth_gbps",
             "p95_read_latency_ms": "aggregated_device_read_p95_ms"}
STORAGE_ONLY, WITH_MEMORY = "Storage Only", "Storage + Mem"


@dataclass
class KvRow:
    """What the row publishes: its cells, the issues beside them, and why it is withheld (if it is)."""

    cells: dict[str, Any] = field(default_factory=dict)
    figures: dict[str, Any] = field(default_factory=dict)
    issues: list[str] = field(default_factory=list)
    withheld: str | None = None


def _figure(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def run_problem(leaf: Leaf) -> str | None:
    """Why a run is not error-free (no summary, a partial failure, a failed trial), or None."""
    summary = leaf.summary
    if summary is None:
        return f"summary.json unreadable: {leaf.broken('summary')}" if leaf.broken("summary") else "no summary.json"
    if older_aggregate(leaf):
        return f"no summary.json: the aggregate is {older_aggregate(leaf)}"
    lost = partial_failure(summary)
    return f"partial failure: {lost.text()}" if lost is not None else None


def _problem(leaf: Leaf, finished: bool, state: str) -> str | None:
    """Why a run cannot be the row's error-free run: it did not finish (its state), or run_problem."""
    return run_problem(leaf) if finished else state


def choose(runs: list[tuple[Leaf, bool, str]]) -> tuple[Leaf | None, list[str]]:
    """(the run the row publishes, issues naming every dropped run); runs are (leaf, finished, state)."""
    ordered = sorted(runs, key=lambda r: r[0].path.name)
    problems = {leaf.path.name: _problem(leaf, finished, state) for leaf, finished, state in ordered}
    clean = [leaf for leaf, finished, _ in ordered if finished and problems[leaf.path.name] is None]
    summed = [leaf for leaf, finished, _ in ordered if finished and leaf.summary is not None]
    flagged = [leaf for leaf in summed if not older_aggregate(leaf)] or summed  # an older name is withheld (kv_row)
    chosen = clean[-1] if clean else (flagged[-1] if flagged else None)
    issues = []
    if chosen is not None and problems[chosen.path.name]:
        lost = partial_failure(chosen.summary)
        note = " (Rules 6.3.4.1: the aggregate sums every rank of a trial; validate finds the result INVALID)" \
            if lost is not None and lost.missing_ranks else ""
        issues.append(f"{chosen.path.name}: {problems[chosen.path.name]}{note}")
    dropped = [leaf for leaf, _, _ in ordered if leaf is not chosen]
    if dropped and chosen is not None:
        why = "; ".join(f"{leaf.path.name} ({problems[leaf.path.name] or 'error-free, but earlier'})" for leaf in dropped)
        rule = "the latest error-free run" if clean else "no run is error-free: the latest with a summary"
        issues.append(f"{len(ordered)} measured runs in one workload; the row publishes {chosen.path.name} ({rule}) "
                      f"and drops {why}: confirm which run is the submission")
    return chosen, issues


def _tier(gpu: Any, cpu: Any) -> str | None:
    gpu, cpu = as_number(gpu), as_number(cpu)
    if gpu is None or cpu is None:
        return None
    return STORAGE_ONLY if gpu == 0 and cpu == 0 else WITH_MEMORY


def ran(kv: KvLeaf, option: str, division: str) -> tuple[str | None, str | None]:
    """(model, memory tier) an Option ran: our plan, else the recorded invocations, else the rank
    files' run block; a CLOSED run that records none ran Table KVCache-1 (its values are locked)."""
    planned = kv.planned(option)
    if planned and planned.get("model"):
        return str(planned["model"]), _tier(planned.get("gpu_mem_gb"), planned.get("cpu_mem_gb"))
    for inv in kv.invocations_of(option):
        if inv.flags.get("model"):
            return str(inv.flags["model"]), _tier(inv.flags.get("gpu-mem-gb"), inv.flags.get("cpu-mem-gb"))
    for rf in kv.files_of(option):
        if rf.data is not None and rf.run.get("model"):
            return str(rf.run["model"]), _tier(rf.run.get("gpu_mem_gb"), rf.run.get("cpu_mem_gb"))
    spec = option_table()["options"].get(option)
    if division == "closed" and spec:
        params = spec["params"]
        return str(params["model"]), _tier(params["gpu_mem_gb"], params["cpu_mem_gb"])
    return None, None


def group(option: str, model: str | None, tier: str | None) -> str:
    """The column group of an Option: CLOSED's published one when it ran that Option's model and
    tiers, else its own, named by the model it ran (or the leaf's) and its Option."""
    spec = option_table()["options"].get(option)
    if spec and option in KV_GROUPS and (model, tier) == (spec["params"]["model"],
                                                         _tier(spec["params"]["gpu_mem_gb"], spec["params"]["cpu_mem_gb"])):
        return KV_GROUPS[option]
    return " ".join(part for part in (model or "unrecorded model", f"Option {option}", tier) if part)


def kv_row(runs: list[tuple[Leaf, bool, str]]) -> KvRow:
    """The row of one KV cache workload from all its run leaves (leaf, finished, state detail)."""
    out = KvRow()
    chosen, out.issues = choose(runs)
    for option in KV_GROUPS:  # CLOSED's columns are in every row, blank where nothing lands
        for label in KV_METRICS.values():
            out.cells[f"KVCache {KV_GROUPS[option]} - {label}"] = None
    if chosen is None:
        out.withheld = ("no run of this workload is finished with a summary: "
                        + "; ".join(f"{leaf.path.name} ({_problem(leaf, finished, state)})" for leaf, finished, state in runs))
        return out
    older = older_aggregate(chosen)
    if older:
        out.withheld = f"{chosen.path.name}: {older_aggregate_text(older)}"
        return out
    kv = KvLeaf(chosen)
    options = (chosen.summary or {}).get("options")
    options = options if isinstance(options, dict) else {}
    out.figures = {"published_run": chosen.path.name, "columns": {}}
    for option in sorted(set(map(str, options)) | set(KV_GROUPS)):
        block = options.get(option)
        block = block if isinstance(block, dict) else {}
        values = {name: block.get(key) if _figure(block.get(key)) else None for name, key in KV_FIELDS.items()}
        out.figures.update({f"option{option}_{name}": value for name, value in values.items()})
        if not block:
            continue
        label = group(option, *ran(kv, option, chosen.division))
        out.figures["columns"][option] = label
        out.cells.update({f"KVCache {label} - {metric}": values[name] for name, metric in KV_METRICS.items()})
    if all(value is None for value in out.cells.values()):
        out.withheld = f"{chosen.path.name}'s summary states no KV figure for any Option"
    return out
