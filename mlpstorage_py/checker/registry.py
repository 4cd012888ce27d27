"""The rule registry: one function per numbered rule, tagged with its number and name."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable

if TYPE_CHECKING:
    from mlpstorage_py.results.tree.package import Package

INVALID, WARNING, INFO = "INVALID", "WARNING", "INFO"


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


RuleFunc = Callable[["Package"], Iterable[Finding]]


@dataclass(frozen=True)
class Rule:
    number: str
    name: str
    func: RuleFunc
    # True when the rule may run on each part of a large package in turn (Package.parts): what
    # it says of a system's runs comes from that system's files alone, and what it says of the
    # package as a whole it says only in the part that opens (pkg.opens) or closes (pkg.closes)
    # the package. tests/test_validate_parts.py holds every such rule to the same findings as
    # one run over the whole package.
    parts: bool = False

    @property
    def summary(self) -> str:
        return (self.func.__doc__ or "").strip().splitlines()[0] if self.func.__doc__ else ""

    def finding(self, severity: str, path: Path | str, message: str) -> Finding:
        return Finding(self.number, self.name, severity, str(path), message)


RULES: dict[str, Rule] = {}
# Rules that state definitions or permissions rather than checkable conditions: number -> why.
NOT_APPLICABLE: dict[str, str] = {}


def rule(number: str, name: str, parts: bool = False) -> Callable[[RuleFunc], RuleFunc]:
    """Register a checker function for Rules `number` (`name` must match the rule index);
    `parts`: see Rule.parts."""
    def register(func: RuleFunc) -> RuleFunc:
        if number in RULES:
            raise ValueError(f"rule {number} registered twice")
        RULES[number] = Rule(number, name, func, parts)
        return func
    return register


def run_rule(number: str, pkg: "Package") -> list[Finding]:
    """One rule's findings; a crash ends them with a finding that says so, never a silent pass."""
    entry, found = RULES[number], []
    try:
        found.extend(entry.func(pkg))
    except Exception as exc:  # noqa: BLE001 - report, do not hide
        found.append(entry.finding(INVALID, pkg.root, f"checker error: {type(exc).__name__}: {exc}"))
    return found


def finding(number: str, severity: str, path: Path | str, message: str) -> Finding:
    return RULES[number].finding(severity, path, message)


def not_applicable(number: str, why: str) -> None:
    """Record that a numbered rule has nothing a checker can decide, and why."""
    NOT_APPLICABLE[number] = why
