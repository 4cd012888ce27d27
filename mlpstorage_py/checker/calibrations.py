"""Calibrations: where the v3.0 review did not enforce a sentence as written (rules/calibrations.yaml).

validate predicts that review: a case a calibration covers is reported at the calibration's
default severity (WARNING) with a message that quotes the sentence, says what the review published
and how the letter differs; `validate --letter` (Package.letter) reports it at the letter's
severity (INVALID). A rule reaches a calibration one of two ways:
- it calls finding(r, unit, id, path, detail) where it would have yielded the INVALID;
- or, for a rule whose module is not ours to edit, the table gives a `match` on the message of its
  INVALID finding and a `when` condition on the unit: install() wraps the rule's checks so that such
  a finding is recalibrated as it is made (with the unit at hand, in whichever process walks it).
settle() then adds to each calibrated finding how many results of the package it covers.
"""

from __future__ import annotations

import functools
import re
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlpstorage_py.checker.registry import INFO, INVALID, WARNING, Check, CheckFunc, Finding, Rule
from mlpstorage_py.results.tree.values import dig
from mlpstorage_py.rules import tables

LETTER_FLAG = "mlpstorage validate --letter"
TOOL_NAME = "mlpstorage"  # provenance.json tool.name: the marker our runs carry (results/provenance.py)


@dataclass(frozen=True)
class Calibration:
    """One row of rules/calibrations.yaml."""

    key: str
    rule: str
    sentence: str
    published: str
    strict: str
    default: str
    letter: str
    match: re.Pattern[str] | None = None
    when: str | None = None

    def severity(self, letter: bool) -> str:
        return self.letter if letter else self.default

    def quote(self) -> str:
        """The phrase every message of this calibration carries (settle() finds them by it)."""
        return f'Rules {self.rule} says "{self.sentence}"'

    def message(self, detail: str, letter: bool) -> str:
        if letter:
            return (f"{detail}. {self.quote()}, read to the letter ({LETTER_FLAG}); the v3.0 review "
                    f"published {self.published}")
        return (f"{detail}. {self.quote()}; the v3.0 review published {self.published}; {self.strict} "
                f"({LETTER_FLAG} reports it {self.letter})")


def _clean(text: Any) -> str:
    return " ".join(str(text).split())


@functools.cache
def table() -> dict[str, Calibration]:
    """The calibrations by id, read once and checked: a malformed row is an error, never skipped."""
    found: dict[str, Calibration] = {}
    for key, row in (tables.calibrations().get("calibrations") or {}).items():
        missing = [f for f in ("rule", "sentence", "published", "strict", "default", "letter") if not row.get(f)]
        if missing or bool(row.get("match")) != bool(row.get("when")):
            raise ValueError(f"calibration {key}: needs {', '.join(missing) or 'match and when together'}")
        if row.get("when") and row["when"] not in WHEN:
            raise ValueError(f"calibration {key}: unknown condition {row['when']!r}")
        for field in ("default", "letter"):
            if row[field] not in (INVALID, WARNING, INFO):
                raise ValueError(f"calibration {key}: {field} {row[field]!r} is not a severity")
        found[key] = Calibration(key, str(row["rule"]), _clean(row["sentence"]), _clean(row["published"]),
                                 _clean(row["strict"]), row["default"], row["letter"],
                                 re.compile(row["match"]) if row.get("match") else None, row.get("when"))
    return found


def letter_of(unit: Any) -> bool:
    """Whether the package `unit` belongs to is judged to the letter (validate --letter)."""
    for path in ((), ("package",), ("system", "package"), ("result", "system", "package")):
        pkg = functools.reduce(lambda obj, name: getattr(obj, name, None), path, unit)
        if pkg is not None and hasattr(pkg, "letter"):
            return bool(pkg.letter)
    return False


def finding(r: Rule, unit: Any, key: str, path: Path | str, detail: str) -> Finding:
    """`detail` under calibration `key`: WARNING with the evidence by default, INVALID with --letter."""
    cal = table()[key]
    if cal.rule != r.number:
        raise ValueError(f"calibration {key} belongs to rule {cal.rule}, not {r.number}")
    letter = letter_of(unit)
    return r.finding(cal.severity(letter), path, cal.message(detail, letter))


# --- conditions on a unit, named by `when` --------------------------------------------------------

def ours(leaf: Any) -> bool:
    """Whether our tool wrote the leaf: its provenance.json names mlpstorage (the v3.0 tool wrote none)."""
    stamp = leaf.record("provenance").value if hasattr(leaf, "record") else None
    return isinstance(stamp, dict) and dig(stamp, "tool", "name") == TOOL_NAME


def written_before_device_latency(leaf: Any) -> bool:
    """A kv_cache summary written by a tool that did not write the device P95s or their statement:
    any leaf without our marker (our kvcache runs write both, so ours without them stay INVALID)."""
    return not ours(leaf)


WHEN: dict[str, Callable[[Any], bool]] = {"written-before-device-latency": written_before_device_latency}


# --- recalibrating a rule's own findings (rules/calibrations.yaml match + when) --------------------

def recalibrate(f: Finding, unit: Any, rows: list[Calibration]) -> Finding:
    """The finding as a matching calibration reports it, else unchanged."""
    if f.severity != INVALID:
        return f
    for cal in rows:
        if cal.match is not None and cal.when is not None and cal.match.search(f.message) and WHEN[cal.when](unit):
            letter = letter_of(unit)
            return Finding(f.rule, f.name, cal.severity(letter), f.path, cal.message(f.message, letter))
    return f


def _wrapped(func: CheckFunc, rows: list[Calibration]) -> CheckFunc:
    @functools.wraps(func)
    def calibrated(rule: Rule, unit: Any) -> Iterable[Finding]:
        return [recalibrate(f, unit, rows) for f in func(rule, unit)]
    calibrated.__calibrated__ = True  # type: ignore[attr-defined]  # a mark install() reads off the wrapper
    return calibrated


def install(rules: dict[str, Rule]) -> None:
    """Wrap the checks of every rule a `match` calibration names (once; before any walk)."""
    by_rule: dict[str, list[Calibration]] = defaultdict(list)
    for cal in table().values():
        if cal.rule not in rules:
            raise ValueError(f"calibration {cal.key}: rule {cal.rule} is not registered")
        if cal.match is not None:
            by_rule[cal.rule].append(cal)
    for number, rows in by_rule.items():
        rule = rules[number]
        rule.checks[:] = [c if getattr(c.func, "__calibrated__", False)
                          else Check(c.scope, _wrapped(c.func, rows), c.benchmark, c.command) for c in rule.checks]


# --- the package's count --------------------------------------------------------------------------

def settle(pkg: Any, findings: list[Finding]) -> list[Finding]:
    """Each calibrated finding with the number of the package's results the calibration covers,
    computed from what validate saw."""
    rows = [(cal, cal.quote()) for cal in table().values()]
    covered: dict[str, set[str]] = defaultdict(set)
    keyed: list[tuple[Finding, str | None]] = []
    for f in findings:
        key = next((cal.key for cal, quote in rows if f.rule == cal.rule and quote in f.message), None)
        if key is not None:
            covered[key].add(pkg.result_of(f.path))
        keyed.append((f, key))
    return [f if key is None else
            Finding(f.rule, f.name, f.severity, f.path,
                    f"{f.message}; this package holds {len(covered[key])} such result(s)")
            for f, key in keyed]
