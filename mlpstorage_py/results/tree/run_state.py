"""Whether a leaf's run finished, from its own records: what status, submit, runs and reportgen
all go by.

The metadata is written last (benchmarks/lifecycle.py), with exit_status and failure, so a
leaf without its end record was cut short (SIGKILL, power loss) and is `incomplete`; one that
records a failure is `failed`. Leaves made by the reference tool (published packages) carry no
exit_status: their metadata's end time or runtime, or, where the metadata is not kept, the
engine's summary.json, says they finished; a leaf of this tool's (it holds mlpstorage.log)
with a summary.json but no metadata is `incomplete`: the engine finished, the tool was stopped
before it checked what the engine wrote.

A result's standing (Standing) is its leaves with their states, and how many of its runs count.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from mlpstorage_py.results.logs import LOG_FILE
from mlpstorage_py.results.summary import metric
from mlpstorage_py.results.tree import files
from mlpstorage_py.results.tree.package import Leaf, Package
from mlpstorage_py.rules.tables import checker

OK, FAILED, INCOMPLETE, EXTRA = "ok", "failed", "incomplete", "extra"
RUNNING = ("running", "started")
PHASES = {"datasize": 0, "datagen": 1, "run": 2}  # the order a result's leaves are listed in


def state(leaf: Leaf) -> tuple[str, str]:
    """(ok | failed | incomplete, why) from the leaf's own records."""
    meta = leaf.metadata
    if leaf.broken("metadata"):
        return INCOMPLETE, f"metadata unreadable: {leaf.broken('metadata')}"
    if isinstance(meta, dict):
        if str(meta.get("status", "")).lower() in RUNNING:
            return INCOMPLETE, "metadata says the run is still running and records no end"
        if "exit_status" in meta:
            code, failure = meta.get("exit_status"), meta.get("failure")
            if code == 0 and not failure:
                return OK, "exit 0"
            return FAILED, f"exit {code}: {failure or 'failed'}"
        if meta.get("invocation_end_time") or isinstance(meta.get("runtime"), (int, float)):
            return OK, "finished (end time recorded)"
        return INCOMPLETE, "metadata records no end time"
    if isinstance(leaf.summary, dict):
        if files.names(leaf.path).get(LOG_FILE) == files.FILE:
            # mlpstorage's own leaf (its log is written from the start, the metadata in any
            # case at the end): the tool was stopped after its engine finished, before it
            # checked the engine's outputs, so the run counts nowhere.
            return INCOMPLETE, "no metadata: mlpstorage was stopped before it checked the engine's outputs"
        return OK, "no metadata; the engine's summary.json is present"
    return INCOMPLETE, "no metadata (the run never finished writing its leaf)"


def _phases(leaf: Leaf) -> set[str]:
    """The checkpointing phases a leaf performed, from its summary metrics (save/load)."""
    found = metric(leaf)
    return {phase for phase, key in (("write", "save_checkpoint_io_mean_GB_per_second"),
                                     ("read", "load_checkpoint_io_mean_GB_per_second")) if key in found}


@dataclass
class Standing:
    """One result (Rules 1.3) as status, submit and runs count it: a workload directory and every
    leaf of it, each with its state. Only `ok` leaves count towards it; `ok` leaves beyond the
    required number are `extra` (the earliest are counted, as the rules count runs from the
    warm-up on)."""

    division: str
    org: str
    system: str
    benchmark: str
    model: str
    workload: Path
    leaves: list[tuple[Leaf, str, str]] = field(default_factory=list)  # (leaf, state, why), in name order

    @property
    def runs(self) -> list[tuple[Leaf, str, str]]:
        return [entry for entry in self.leaves if entry[0].command == "run"]

    @property
    def required(self) -> int:
        """runs_per_result of the edition; a checkpointing result is one combined or two phase invocations."""
        needed = int(checker()["runs_per_result"][self.benchmark])
        if self.benchmark == "checkpointing" and any(_phases(leaf) == {"write", "read"} for leaf, s, _ in self.runs if s == OK):
            return 1
        return needed

    @property
    def present(self) -> int:
        return min(self.required, sum(s == OK for _, s, _ in self.runs))


def standings(pkg: Package) -> list[Standing]:
    """Every result of the tree with its leaves' states (standing_of), in (division, org, system,
    benchmark, model) order."""
    grouped: dict[Path, list[Leaf]] = {}
    for leaf in pkg.leaves:
        grouped.setdefault(leaf.workload_dir, []).append(leaf)
    found = [standing_of(leaves) for _, leaves in sorted(grouped.items(), key=lambda item: str(item[0]))]
    return sorted(found, key=lambda r: (r.division, r.org, r.system, r.benchmark, r.model))


def standing_of(leaves: list[Leaf]) -> Standing:
    """One result from its leaves (one workload directory, in listing order): each with its state,
    datasize, datagen then run, by name; ok run leaves past the required are extra."""
    ordered = sorted(leaves, key=lambda l: (PHASES.get(l.command, 0), l.path.name))
    first = ordered[0]
    result = Standing(first.division, first.org, first.system, first.benchmark, first.model, first.workload_dir,
                      [(leaf, *state(leaf)) for leaf in ordered])
    required, counted = result.required, 0
    for i, (leaf, status, _) in enumerate(result.leaves):
        if leaf.command == "run" and status == OK:
            counted += 1
            if counted > required:
                result.leaves[i] = (leaf, EXTRA, f"ok, beyond the {required} run(s) a result counts")
    return result
