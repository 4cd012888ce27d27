"""The rule registry: one Rule per numbered rule, holding the checks that decide it.

A check declares the unit it judges (a leaf, a result, a system or the package) and receives
that unit with its rule; the findings it yields are made by the rule object, so a rule's number
is typed once, where it is registered. The runner (checker.runner) hands each unit to the checks
of its scope as it walks the package, system after system.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

INVALID, WARNING, INFO = "INVALID", "WARNING", "INFO"
LEAF, PHASE, RESULT, SYSTEM, PACKAGE = "leaf", "phase", "result", "system", "package"
SCOPES = (LEAF, PHASE, RESULT, SYSTEM, PACKAGE)


@dataclass(frozen=True)
class Finding:
    rule: str
    name: str
    severity: str
    path: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"rule": self.rule, "name": self.name, "severity": self.severity, "path": self.path,
                "message": self.message}


CheckFunc = Callable[["Rule", Any], Iterable[Finding]]


@dataclass(frozen=True)
class Check:
    """One function of a rule, run on every unit of its scope (a leaf, phase or result check
    may name the benchmark, and a leaf or phase check the phase, it is about: the others are
    not offered)."""
    scope: str
    func: CheckFunc
    benchmark: str | None = None
    command: str | None = None

    def wants(self, unit: Any) -> bool:
        return ((self.benchmark is None or unit.benchmark == self.benchmark)
                and (self.command is None or unit.command == self.command))


@dataclass(eq=False)
class Rule:
    number: str
    name: str
    checks: list[Check] = field(default_factory=list)

    @property
    def summary(self) -> str:
        doc = next((c.func.__doc__ for c in self.checks if c.func.__doc__), None)
        return doc.strip().splitlines()[0] if doc else ""

    @property
    def module(self) -> str:
        """The module that defines the rule's checks."""
        return self.checks[0].func.__module__ if self.checks else ""

    def check(self, scope: str, benchmark: str | None = None,
              command: str | None = None) -> Callable[[CheckFunc], CheckFunc]:
        """Add a check of `scope` to this rule (see Check)."""
        if scope not in SCOPES:
            raise ValueError(f"rule {self.number}: unknown scope {scope!r}")

        def add(func: CheckFunc) -> CheckFunc:
            self.checks.append(Check(scope, func, benchmark, command))
            return func
        return add

    def finding(self, severity: str, path: Path | str, message: str) -> Finding:
        return Finding(self.number, self.name, severity, str(path), message)

    def invalid(self, path: Path | str, message: str) -> Finding:
        return self.finding(INVALID, path, message)

    def warning(self, path: Path | str, message: str) -> Finding:
        return self.finding(WARNING, path, message)

    def info(self, path: Path | str, message: str) -> Finding:
        return self.finding(INFO, path, message)

    def note(self, pkg: Any, item: Any) -> None:
        """Leave a small fact for this rule's package check (which runs after every system):
        a rule that compares systems collects what it compares, never the records."""
        pkg.notes.setdefault(self.number, []).append(item)

    def notes(self, pkg: Any) -> list[Any]:
        left: list[Any] = pkg.notes.get(self.number, [])
        return left

    def run(self, check: Check, unit: Any) -> list[Finding]:
        """One check's findings on one unit; a crash is itself a finding, never a silent pass."""
        try:
            return list(check.func(self, unit))
        except Exception as exc:  # report, do not hide
            return [self.crashed(check, unit, exc)]

    def crashed(self, check: Check, unit: Any, exc: Exception) -> Finding:
        """The finding a check that raised makes of itself."""
        return self.invalid(unit.root if check.scope == PACKAGE else unit.path, f"checker error: {type(exc).__name__}: {exc}")


RULES: dict[str, Rule] = {}
# Rules that state definitions or permissions rather than checkable conditions: number -> why.
NOT_APPLICABLE: dict[str, str] = {}


def rule(number: str, name: str) -> Rule:
    """Register Rules `number` (`name` must match the rule index) and return it; its checks are
    added with Rule.check."""
    if number in RULES:
        raise ValueError(f"rule {number} registered twice")
    RULES[number] = Rule(number, name)
    return RULES[number]


def not_applicable(number: str, why: str) -> None:
    """Record that a numbered rule has nothing a checker can decide, and why."""
    NOT_APPLICABLE[number] = why
