"""`mlpstorage status`: how far each result is from submittable, read from the one results model
and the checker's own findings (nothing is judged twice).

Per result (division, organization, system, benchmark, model): run leaves present / required,
the checker's INVALID and WARNING counts for the result, the system paperwork still missing
(systems/<system>.yaml and .pdf, Rules 2.1.7; for checkpointing the 4.7.3 remap time and the
4.7.4 capability flags; FILL IN placeholders `systems describe` left), and one verdict, the first that applies:
  short      fewer ok runs than the edition requires (failed and incomplete leaves never count)
  invalid    the checker finds the result INVALID
  paperwork  the system description is missing or lacks the fields the rules require
  ready      nothing left to do
A KV cache run whose summary records a partial failure (rank results lost, a trial that failed)
is listed under its result with the counts, as results/kv.partial_failure reads them for 6.3.4.1.
Findings about the rollup tables reportgen writes (results.json and the like) count as the
checker reports them: run `mlpstorage reports reportgen` (submit does) to refresh them first.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mlpstorage_py import checker
from mlpstorage_py.checker.registry import INVALID, RESULT, RULES, WARNING, Finding, Rule
from mlpstorage_py.errors import ConfigurationError
from mlpstorage_py.results.kv import partial_failure
from mlpstorage_py.results.tree import package as tree
from mlpstorage_py.results.tree.package import Package
from mlpstorage_py.results.tree.run_state import Standing, standing_of
from mlpstorage_py.results.tree.untrusted import shown
from mlpstorage_py.submission.leaves import leaf_id, path_id, placeholders

SHORT, INVALID_VERDICT, PAPERWORK, READY = "short", "invalid", "paperwork", "ready"
SYSTEM_RULES = ("2.1.7",)  # systems/<system>.yaml and .pdf, for every result of the system
CHECKPOINT_SYSTEM_RULES = ("4.7.3", "4.7.4")  # the description's capability fields, for checkpointing
# Not registered: it rides along validate's walk (no finding, no entry in --list-rules) and notes
# each result's part of the table while validate holds its records, so the package is read once.
READING = Rule("status", "the status table's per-result reading")


@READING.check(RESULT)
def _note(rule: Rule, unit: tree.Result) -> Iterator[Finding]:
    """A result's row, findings aside, noted for the parent (a worker's records are released after)."""
    if unit.leaves:
        rule.note(unit.system.package, _reading(unit.system.package, standing_of(unit.leaves)))
    return iter(())


def _reading(pkg: Package, result: Standing) -> dict[str, Any]:
    return {"division": result.division, "organization": result.org, "system": result.system,
            "benchmark": result.benchmark, "model": result.model,
            "result": path_id(pkg, result.workload),
            "runs_present": result.present, "runs_required": result.required,
            "partial_failures": _partial_failures(result),
            "leaves": [{"id": leaf_id(pkg, leaf), "phase": leaf.command, "state": state, "detail": why}
                       for leaf, state, why in result.leaves]}


def table(root: Path) -> list[dict[str, Any]]:
    """One row per result, with its leaves (for --runs and --json): validate's walk (as
    checker.validate runs it) with READING alongside, then the findings counted per result."""
    pkg = Package.load(root, manifests=True)
    found = checker.check(pkg, [*RULES.values(), READING])
    crashed = found.pop(READING.number)  # Rule.run made a finding of it: never a row silently left out
    if crashed:
        raise ConfigurationError(f"status cannot read the result of {crashed[0].path}: {crashed[0].message}")
    return rows(pkg, checker.in_order(pkg, found), READING.notes(pkg))


def _paperwork(pkg: Package, row: dict[str, Any], described: dict[tuple[Path, str], list[Finding]]) -> list[str]:
    """The checker's INVALID findings on this system's description files that the result depends on."""
    systems = pkg.root / row["division"] / row["organization"] / "systems"
    rules = SYSTEM_RULES + (CHECKPOINT_SYSTEM_RULES if row["benchmark"] == "checkpointing" else ())
    found = [f"{f.rule}: {f.message}" for f in described.get((systems, row["system"]), []) if f.rule in rules]
    left = placeholders(pkg.root, row["division"], row["organization"], row["system"])
    if left:
        found.append(f"{row['system']}.yaml: {len(left)} FILL IN placeholder(s) left (first: {left[0]})")
    return sorted(set(found))


def _partial_failures(result: Standing) -> list[str]:
    """'<run>: <counts>' for each KV cache run whose summary records what its aggregation lost."""
    found = []
    for leaf, _, _ in result.runs if result.benchmark == "kv_cache" else ():
        lost = partial_failure(leaf.summary)
        if lost is not None:
            found.append(f"{leaf.path.name}: {lost.text()}")
    return found


def rows(pkg: Package, findings: list[Finding], readings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The noted readings in (division, org, system, benchmark, model) order, each with its
    result's INVALID and WARNING counts, its paperwork and its verdict."""
    per_result: dict[str, list[Finding]] = defaultdict(list)
    described: dict[tuple[Path, str], list[Finding]] = defaultdict(list)  # (systems/, system) -> its findings
    for f in findings:
        per_result[pkg.result_of(f.path)].append(f)
        if f.severity == INVALID and f.rule in SYSTEM_RULES + CHECKPOINT_SYSTEM_RULES:
            path = Path(f.path)
            described[(path.parent, path.stem)].append(f)
    out = []
    for reading in sorted(readings, key=lambda r: (r["division"], r["organization"], r["system"], r["benchmark"],
                                                     r["model"], r["result"])):
        mine = per_result.get(reading["result"], [])
        invalid = sum(f.severity == INVALID for f in mine)
        paperwork = _paperwork(pkg, reading, described)
        if reading["runs_present"] < reading["runs_required"]:
            verdict = SHORT
        elif invalid:
            verdict = INVALID_VERDICT
        elif paperwork:
            verdict = PAPERWORK
        else:
            verdict = READY
        row = {key: reading[key] for key in ("division", "organization", "system", "benchmark", "model", "result",
                                             "runs_present", "runs_required")}
        row.update({"invalid": invalid, "warnings": sum(f.severity == WARNING for f in mine), "paperwork": paperwork,
                    "verdict": verdict, "partial_failures": reading["partial_failures"], "leaves": reading["leaves"]})
        out.append(row)
    return out


def text(table: list[dict[str, Any]], runs: bool) -> str:
    header = ("DIVISION", "ORG", "SYSTEM", "BENCHMARK", "MODEL", "RUNS", "INVALID", "WARNING", "PAPERWORK", "VERDICT")
    lines = [tuple(map(shown, (r["division"], r["organization"], r["system"], r["benchmark"], r["model"],
                               f"{r['runs_present']}/{r['runs_required']}", str(r["invalid"]), str(r["warnings"]),
                               str(len(r["paperwork"])) if r["paperwork"] else "-", r["verdict"]))) for r in table]
    widths = [max(len(row[i]) for row in [header, *lines]) for i in range(len(header))]
    out = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in [header, *lines]]
    said = set()
    for r in table:
        for item in r["paperwork"]:
            if (r["system"], item) not in said:
                said.add((r["system"], item))
                out.append(f"paperwork {r['division']}/{r['organization']}/systems/{r['system']}: {item}")
    for r in table:
        out.extend(f"partial failure {r['result']}/{item}" for item in r["partial_failures"])
    for r in table if runs else ():
        out.append(f"{r['result']}:")
        out.extend(f"  {leaf['state']:<10} {leaf['phase']:<9} {leaf['id'].rsplit('/', 1)[-1]}  {leaf['detail']}"
                   for leaf in r["leaves"])
    if not table:
        out.append("no results in this tree")
    return "\n".join(map(shown, out))

