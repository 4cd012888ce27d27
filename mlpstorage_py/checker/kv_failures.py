"""What a KV cache run's summary.json says went wrong: rank results the aggregation lacked
(`missing_files`, `partial_failure`) and trials whose mpirun exited non-zero (`trial_failures`).

One reading, used by validate (Rules 6.3.4.1: the aggregate sums every rank of a trial, so a
summary over fewer ranks is not that aggregate), by reportgen (the row's Issues, and which of
several runs a row publishes) and by `mlpstorage status`, so the three never disagree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from mlpstorage_py.results.tree.values import as_int, dig

MISSING_RANK = re.compile(r"option_([^/\\\s]+)[/\\]trial_(\d+)[/\\]rank_(\d+)")


def declared_missing(summary: Any) -> set[tuple[str, int, int]]:
    """(option, trial, rank) of every rank result the summary says its aggregation lacked."""
    found: set[tuple[str, int, int]] = set()
    options = dig(summary, "options")
    for option, block in (options.items() if isinstance(options, dict) else ()):
        listed = dig(block, "missing_files")
        for entry in listed if isinstance(listed, list) else ():
            match = MISSING_RANK.search(str(entry))
            if match and match.group(1) == str(option):
                found.add((str(option), int(match.group(2)), int(match.group(3))))
    return found


@dataclass
class PartialFailure:
    """Per Option: (rank results missing, rank results expected); per Option: failed trials."""

    missing: dict[str, tuple[int, int | None]] = field(default_factory=dict)
    failed_trials: dict[str, list[str]] = field(default_factory=dict)
    flagged: bool = False
    stopped: str | None = None

    @property
    def missing_ranks(self) -> int:
        return sum(n for n, _ in self.missing.values())

    @property
    def trials_failed(self) -> int:
        return sum(len(t) for t in self.failed_trials.values())

    def text(self) -> str:
        """One line naming the counts, e.g. 'Option 1: 24 of 48 rank results missing; ...'."""
        parts = [f"Option {o}: {n} of {total} rank results missing" if total else f"Option {o}: {n} rank result(s) missing"
                 for o, (n, total) in sorted(self.missing.items())]
        parts += [f"Option {o}: trial(s) {', '.join(trials)} failed (mpirun exited non-zero)"
                  for o, trials in sorted(self.failed_trials.items())]
        if self.stopped:
            parts.append(f"stopped: {self.stopped}")
        if not parts:
            parts.append("partial_failure is true, with no missing rank result or failed trial named")
        head = f"{self.missing_ranks} rank result(s) missing, {self.trials_failed} trial(s) failed"
        return f"{head} ({'; '.join(parts)})"


def partial_failure(summary: Any) -> PartialFailure | None:
    """What the aggregated summary records as lost, or None when it records nothing."""
    if not isinstance(summary, dict):
        return None
    found = PartialFailure(flagged=summary.get("partial_failure") is True)
    options = summary.get("options") if isinstance(summary.get("options"), dict) else {}
    declared = declared_missing(summary)
    for option, block in options.items():
        block = block if isinstance(block, dict) else {}
        listed = block.get("missing_files")
        count = len(listed) if isinstance(listed, list) else 0
        count = max(count, sum(1 for o, _, _ in declared if o == str(option)))
        if count or block.get("partial_failure") is True:
            found.flagged = True
        if count:
            ranks = as_int(block.get("rank_count", block.get("total_ranks", summary.get("total_ranks"))))
            trials = as_int(block.get("trial_count", summary.get("trials_per_option")))
            found.missing[str(option)] = (count, ranks * trials if ranks and trials else None)
    failures = summary.get("trial_failures")
    for option, trials in (failures.items() if isinstance(failures, dict) else ()):
        named = sorted(str(t) for t in trials) if isinstance(trials, dict) else []
        if named:
            found.failed_trials[str(option)] = named
    stopped = summary.get("stopped")
    found.stopped = str(stopped) if stopped else None
    if found.missing or found.failed_trials or found.stopped:
        found.flagged = True
    return found if found.flagged else None
