"""`mlpstorage validate`: check a package against the rules, one registered function per rule."""

from __future__ import annotations

from pathlib import Path

from mlpstorage_py.checker import rules_common, rules_training  # noqa: F401 - registers the rules
from mlpstorage_py.checker.package import Package
from mlpstorage_py.checker.registry import FAIL, RULES, Finding
from mlpstorage_py.rules.tables import rule_index


def validate(root: Path) -> list[Finding]:
    """Run every registered rule; a rule that crashes is itself a failure, never a silent pass."""
    pkg = Package.load(root)
    findings: list[Finding] = []
    for number, entry in RULES.items():
        try:
            findings.extend(entry.func(pkg))
        except Exception as exc:  # noqa: BLE001 - report, do not hide
            findings.append(Finding(number, FAIL, str(root), f"checker error: {type(exc).__name__}: {exc}"))
    return findings


def coverage_text() -> str:
    lines, section = [], None
    for entry in rule_index():
        if entry["section"] != section:
            section = entry["section"]
            lines.append(f"{section}:")
        implemented = RULES.get(entry["number"])
        mark = "checked" if implemented else "-      "
        detail = f"  {implemented.summary}" if implemented else ""
        lines.append(f"  [{mark}] {entry['number']:<9} {entry['name']}{detail}")
    lines.append(f"{len(RULES)} of {len(rule_index())} rules checked by validate")
    return "\n".join(lines)


def findings_text(root: Path, findings: list[Finding]) -> str:
    pkg_leaves = len(Package.load(root).leaves)
    lines = [f"{f.severity:<4} {f.rule:<8} {f.path}: {f.message}" for f in findings]
    fails = sum(f.severity == FAIL for f in findings)
    lines.append(f"validated {root}: {pkg_leaves} leaves, {len(RULES)} rules, {fails} failures, "
                 f"{len(findings) - fails} warnings/information")
    return "\n".join(lines)
