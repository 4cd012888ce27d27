"""`mlpstorage validate`: check a package against the rules, one registered function per rule."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from mlpstorage_py import collector
from mlpstorage_py.results.tree import files
from mlpstorage_py.checker import workers
from mlpstorage_py.checker import rules_common, rules_training, rules_structure, rules_leaves, rules_checkpointing
from mlpstorage_py.checker import rules_checkpointing_run
from mlpstorage_py.checker import rules_vdb, rules_vdb_backends, rules_kvcache
from mlpstorage_py.checker import rules_kvcache_workload, rules_kvcache_aggregate, rules_kvcache_storage
from mlpstorage_py.results.tree.package import Package
from mlpstorage_py.checker.registry import INVALID, NOT_APPLICABLE, RULES, Finding, run_rule
from mlpstorage_py.rules.tables import rule_index

# Importing a rules module registers its rules (sections 1-4, then 5 and 6).
RULE_MODULES = (rules_common, rules_training, rules_structure, rules_leaves, rules_checkpointing,
                rules_checkpointing_run, rules_vdb, rules_vdb_backends, rules_kvcache, rules_kvcache_workload,
                rules_kvcache_aggregate, rules_kvcache_storage)
# A package of POOL_MIN_LEAVES leaves or more is checked in forked workers where two cores are
# free (checker.workers); a smaller one is not worth the forks.
POOL_MIN_LEAVES = 1000
# Leaves per part of a large package (Package.parts), at most: a part's readings go when its
# worker exits (or, checked here, are released before the next part), so memory stays that of
# a few parts (at 100,000 leaves, holding everything cost each process 4 GiB and a fifth of its
# time in page faults).
PART_LEAVES = 2000


def validate(root: Path, submitters: set[str] | None = None,
             reference: str | None = None) -> tuple[Package, list[Finding]]:
    """Run every registered rule; a rule that crashes is itself a finding, never a silent pass.

    Package.load starts a new reading: each file is read and parsed once, however many rules
    ask, and kept until the next, or, in a large package, until its part is done (Package.parts).
    The cyclic garbage collector is paused meanwhile (collector.py)."""
    with collector.paused():
        pkg = Package.load(root, submitters)
        pkg.reference_digest = reference
        numbers = list(RULES)
        pool = workers.workers_here() if len(pkg.leaves) >= POOL_MIN_LEAVES else 0
        if pool > 1:
            found = workers.check(pkg, numbers, PART_LEAVES, pool)
        else:
            found = _run_rules(pkg, pkg.parts(PART_LEAVES), numbers)
    return pkg, _in_order(pkg, found)


def _run_rules(pkg: Package, parts: list[Package], numbers: list[str]) -> dict[str, list[Finding]]:
    """{rule: findings} in this process: the rules that allow it part after part (each part's
    readings released once its rules are done), then the others over the whole package."""
    found: dict[str, list[Finding]] = {number: [] for number in numbers}
    by_part = [number for number in numbers if RULES[number].parts]
    for part in parts if by_part else []:
        since = files.mark()
        for number in by_part:
            found[number].extend(run_rule(number, part))
        part.release(since)
    for number in numbers:
        if not RULES[number].parts:
            found[number] = run_rule(number, pkg)
    return found


def _in_order(pkg: Package, found: dict[str, list[Finding]]) -> list[Finding]:
    """The findings rule by rule; within a rule, those of the package as a whole first (by
    path), then result by result in the package's order, each result's in the rule's own order.
    Whether a rule ran over the whole package or part by part, this order is the same."""
    position = {name: i for i, name in enumerate(result_names(pkg).values())}

    def place(f: Finding) -> tuple[int, str]:
        result = result_of(pkg, f.path)
        return (0, f.path) if result == "package" else (1 + position[result], "")

    return [f for number in RULES for f in sorted(found[number], key=place)]


def coverage_text() -> str:
    lines, section = [], None
    counts = {"implemented": 0, "not applicable": 0, "not yet": 0}
    for entry in rule_index():
        if entry["section"] != section:
            section = entry["section"]
            lines.append(f"{section}:")
        number = entry["number"]
        if number in RULES:
            status, detail = "implemented", RULES[number].summary
        elif number in NOT_APPLICABLE:
            status, detail = "not applicable", NOT_APPLICABLE[number]
        else:
            status, detail = "not yet", ""
        counts[status] += 1
        lines.append(f"  {number:<9} {entry['name']:<40} {status:<15} {detail}".rstrip())
    lines.append(", ".join(f"{n} {k}" for k, n in counts.items()) + f" (of {len(rule_index())} rules)")
    return "\n".join(lines)


def result_names(pkg: Package) -> dict[str, str]:
    """{path: name relative to the root} of the package's results in order, indexed once per
    package (asking pkg.results() per finding made validate quadratic: 80 s for 10,000 leaves
    with 3,861 findings)."""
    cached = getattr(pkg, "_result_names", None)  # (leaf count it was built for, {path: name})
    if cached is None or cached[0] != len(pkg.leaves):
        cached = (len(pkg.leaves), {str(r): pkg.relative(r) for r in pkg.results()})
        pkg._result_names = cached  # type: ignore[attr-defined]
    return cached[1]


def result_of(pkg: Package, path: str) -> str:
    """The result (workload directory, Rules 1.3) a finding belongs to, or 'package': the
    outermost result directory among the path and its parents."""
    names, found, probe = result_names(pkg), "package", path
    while probe:
        found = names.get(probe, found)
        parent = probe.rpartition("/")[0]
        probe = parent if parent != probe else ""
    return found


def findings_text(pkg: Package, findings: list[Finding]) -> str:
    grouped: dict[str, list[Finding]] = defaultdict(list)
    for f in findings:
        grouped[result_of(pkg, f.path)].append(f)
    lines = []
    for result in ["package", *result_names(pkg).values()]:
        items = grouped.get(result, [])
        if result == "package" and not items:
            continue
        verdict = "INVALID" if any(f.severity == INVALID for f in items) else "valid"
        lines.append(f"{result}: {verdict}")
        for f in items:
            where = Path(f.path).name if f.path.startswith(str(pkg.root)) else f.path
            lines.append(f"  {f.severity:<7} {f.rule} {f.name}: {where}: {f.message}")
    invalid = sum(f.severity == INVALID for f in findings)
    lines.append(f"validated {pkg.root}: {len(result_names(pkg))} results, {len(pkg.leaves)} leaves, {len(RULES)} rules; "
                 f"{invalid} invalid, {len(findings) - invalid} warnings/information")
    return "\n".join(lines)


def findings_json(pkg: Package, findings: list[Finding]) -> str:
    return json.dumps({"package": str(pkg.root), "findings": [dict(f.as_dict(), result=result_of(pkg, f.path))
                                                             for f in findings]}, indent=2)
