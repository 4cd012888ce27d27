"""`mlpstorage validate`: check a package against the rules, one registered function per rule."""

from __future__ import annotations

import gc
import json
from collections import defaultdict
from pathlib import Path

from mlpstorage_py.checker import rules_common, rules_training, rules_structure, rules_checkpointing
from mlpstorage_py.checker import rules_vdb, rules_kvcache
from mlpstorage_py.checker.package import Package
from mlpstorage_py.checker.registry import INVALID, NOT_APPLICABLE, RULES, Finding
from mlpstorage_py.rules.tables import rule_index

# Importing a rules module registers its rules (sections 1-4, then 5 and 6).
RULE_MODULES = (rules_common, rules_training, rules_structure, rules_checkpointing, rules_vdb, rules_kvcache)


def validate(root: Path, submitters: set[str] | None = None,
             reference: str | None = None) -> tuple[Package, list[Finding]]:
    """Run every registered rule; a rule that crashes is itself a finding, never a silent pass.

    Package.load starts a new reading: each file is read and parsed once, however many rules
    ask, and kept until the next. The cyclic garbage collector is paused meanwhile: the parsed
    package is millions of long-lived objects without cycles, which it would otherwise traverse
    again and again as they accumulate (a third of the time of a large package)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        pkg = Package.load(root, submitters)
        pkg.reference_digest = reference
        findings: list[Finding] = []
        for number, entry in RULES.items():
            try:
                findings.extend(entry.func(pkg))
            except Exception as exc:  # noqa: BLE001 - report, do not hide
                findings.append(entry.finding(INVALID, root, f"checker error: {type(exc).__name__}: {exc}"))
    finally:
        if collecting:
            gc.enable()
    return pkg, findings


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


def result_of(pkg: Package, path: str) -> str:
    """The result (workload directory, Rules 1.3) a finding belongs to, or 'package'."""
    for result in pkg.results():
        if path == str(result) or path.startswith(str(result) + "/"):
            return str(result.relative_to(pkg.root))
    return "package"


def findings_text(pkg: Package, findings: list[Finding]) -> str:
    grouped: dict[str, list[Finding]] = defaultdict(list)
    for f in findings:
        grouped[result_of(pkg, f.path)].append(f)
    lines = []
    for result in ["package"] + [str(r.relative_to(pkg.root)) for r in pkg.results()]:
        items = grouped.get(result, [])
        if result == "package" and not items:
            continue
        verdict = "INVALID" if any(f.severity == INVALID for f in items) else "valid"
        lines.append(f"{result}: {verdict}")
        for f in items:
            where = Path(f.path).name if f.path.startswith(str(pkg.root)) else f.path
            lines.append(f"  {f.severity:<7} {f.rule} {f.name}: {where}: {f.message}")
    invalid = sum(f.severity == INVALID for f in findings)
    lines.append(f"validated {pkg.root}: {len(pkg.results())} results, {len(pkg.leaves)} leaves, {len(RULES)} rules; "
                 f"{invalid} invalid, {len(findings) - invalid} warnings/information")
    return "\n".join(lines)


def findings_json(pkg: Package, findings: list[Finding]) -> str:
    return json.dumps({"package": str(pkg.root), "findings": [dict(f.as_dict(), result=result_of(pkg, f.path))
                                                             for f in findings]}, indent=2)
