"""The checks run as the package is walked: system after system, each result's leaves, then
its phases, then the result, then the system; a system's records are released once its checks
are done, so a validation holds one system's records however large the package. The package's
own checks come last; they read what the listing, the manifests and the rules' notes hold."""

from __future__ import annotations

from mlpstorage_py.checker.registry import LEAF, PACKAGE, PHASE, RESULT, SCOPES, SYSTEM, Check, CheckFunc, Finding, Rule
from mlpstorage_py.results.tree import files
from mlpstorage_py.results.tree.package import Package, System

Found = dict[str, list[Finding]]
Checks = dict[str, list[tuple[Rule, Check]]]


def by_scope(rules: list[Rule]) -> Checks:
    return {scope: [(r, c) for r in rules for c in r.checks if c.scope == scope] for scope in SCOPES}


# (benchmark, command): the leaf checks that phase wants, each with its function and the list
# its findings join (Rule.run inline: a leaf is offered some twenty checks)
Offered = dict[tuple[str, str], list[tuple[Rule, Check, CheckFunc, list[Finding]]]]


def check_system(system: System, checks: Checks, found: Found, offered: Offered) -> None:
    """Every leaf, phase, result and system check on one system, its readings released after."""
    since = files.mark()
    for result in system.results:
        for leaf in result.leaves:
            wanted = offered.get((leaf.benchmark, leaf.command))
            if wanted is None:
                wanted = offered[(leaf.benchmark, leaf.command)] = [
                    (rule, check, check.func, found[rule.number]) for rule, check in checks[LEAF] if check.wants(leaf)]
            for rule, check, func, into in wanted:
                try:
                    into += list(func(rule, leaf))  # whole or not at all, as Rule.run
                except Exception as exc:  # report, do not hide
                    into.append(rule.crashed(check, leaf, exc))
        if checks[PHASE]:
            for phase in result.phases:
                for rule, check in checks[PHASE]:
                    if check.wants(phase):
                        found[rule.number].extend(rule.run(check, phase))
        for rule, check in checks[RESULT]:
            if check.benchmark is None or check.benchmark == result.benchmark:
                found[rule.number].extend(rule.run(check, result))
    for rule, check in checks[SYSTEM]:
        found[rule.number].extend(rule.run(check, system))
    system.release(since)


def check_package(pkg: Package, systems: list[System], rules: list[Rule], package_checks: bool = True) -> Found:
    """{rule number: findings} of `rules` on some of the package's systems, and with
    `package_checks` the package's own checks."""
    checks = by_scope(rules)
    found: Found = {r.number: [] for r in rules}
    offered: Offered = {}
    for system in systems:
        check_system(system, checks, found, offered)
    for rule, check in checks[PACKAGE] if package_checks else ():
        found[rule.number].extend(rule.run(check, pkg))
    return found
