"""`mlpstorage validate`: check a package against the rules, one registered function per rule."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from mlpstorage_py.checker import calibrations, runner, workers

# Importing a rules module registers its rules: this order is the registry's, kept as written.
# isort: off
from mlpstorage_py.checker import rules_common, rules_training, rules_structure, rules_leaves, rules_checkpointing, rules_telemetry
from mlpstorage_py.checker import rules_checkpointing_run
from mlpstorage_py.checker import rules_vdb, rules_vdb_backends, rules_kvcache
from mlpstorage_py.checker import rules_kvcache_workload, rules_kvcache_aggregate, rules_kvcache_storage
from mlpstorage_py.checker import rules_endpoints
# isort: on

from mlpstorage_py.checker.registry import INVALID, NOT_APPLICABLE, RULES, Finding, Rule
from mlpstorage_py.results.tree import shares
from mlpstorage_py.results.tree.package import Package
from mlpstorage_py.results.tree.untrusted import shown
from mlpstorage_py.rules.tables import rule_index

# Importing a rules module registers its rules (sections 1-4, then 5 and 6).
RULE_MODULES = (rules_common, rules_training, rules_structure, rules_leaves, rules_checkpointing,
                rules_checkpointing_run, rules_vdb, rules_vdb_backends, rules_kvcache, rules_kvcache_workload,
                rules_kvcache_aggregate, rules_kvcache_storage, rules_telemetry, rules_endpoints)
calibrations.install(RULES)  # the table's `match` calibrations recalibrate those rules' findings as made


def validate(root: Path, submitters: set[str] | None = None, reference: str | None = None,
             letter: bool = False) -> tuple[Package, list[Finding]]:
    """Run every registered rule on the package at `root`; a check that crashes is itself a
    finding, never a silent pass. With `letter`, the sentences the v3.0 review did not enforce
    as written (rules/calibrations.yaml) are judged as written."""
    pkg = Package.load(root, submitters, manifests=True)
    pkg.reference_digest = reference
    pkg.letter = letter
    return pkg, in_order(pkg, check(pkg, list(RULES.values())))


def check(pkg: Package, rules: list[Rule]) -> runner.Found:
    """{rule number: findings} of some rules (a reader may add its own, as status does),
    walked system by system (checker.runner), on every core for a large package."""
    pool = shares.pool_for(pkg)
    return workers.check(pkg, rules, pool) if pool else runner.check_package(pkg, pkg.systems, rules)


def in_order(pkg: Package, found: dict[str, list[Finding]]) -> list[Finding]:
    """The registered rules' findings rule by rule; within a rule, those of the package as a
    whole first (by path), then result by result in the package's order, each result's in the
    order found."""
    position = {name: i for i, name in enumerate(pkg.result_names.values())}

    def place(f: Finding) -> tuple[int, str]:
        result = pkg.result_of(f.path)
        return (0, f.path) if result == "package" else (1 + position[result], "")

    return calibrations.settle(pkg, [f for number in RULES for f in sorted(found[number], key=place)])


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


def findings_text(pkg: Package, findings: list[Finding]) -> str:
    grouped: dict[str, list[Finding]] = defaultdict(list)
    for f in findings:
        grouped[pkg.result_of(f.path)].append(f)
    lines = []
    for result in ["package", *pkg.result_names.values()]:
        items = grouped.get(result, [])
        if result == "package" and not items:
            continue
        verdict = "INVALID" if any(f.severity == INVALID for f in items) else "valid"
        lines.append(f"{result}: {verdict}")
        for f in items:
            where = Path(f.path).name if f.path.startswith(str(pkg.root)) else f.path
            lines.append(f"  {f.severity:<7} {f.rule} {f.name}: {where}: {f.message}")
    invalid = sum(f.severity == INVALID for f in findings)
    lines.append(f"validated {pkg.root}: {len(pkg.result_names)} results, {len(pkg.leaves)} leaves, {len(RULES)} rules; "
                 f"{invalid} invalid, {len(findings) - invalid} warnings/information")
    return "\n".join(map(shown, lines))  # names and messages quote the package: never sent raw to a terminal


def findings_json(pkg: Package, findings: list[Finding]) -> str:
    return json.dumps({"package": str(pkg.root), "findings": [dict(f.as_dict(), result=pkg.result_of(f.path))
                                                             for f in findings]}, indent=2)
