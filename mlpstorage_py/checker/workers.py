"""A large package checked on every core (results.tree.shares): each share of its systems walked
by a forked worker (checker.runner), which sends its findings and the notes its checks left
(Rule.note); the package's own checks run here once every share is in, with the notes merged in
share order."""

from __future__ import annotations

from typing import Any

from mlpstorage_py.checker.registry import PACKAGE, Rule
from mlpstorage_py.checker.runner import Found, by_scope, check_package
from mlpstorage_py.results.tree import shares
from mlpstorage_py.results.tree.package import Package, uncollected


@uncollected()
def check(pkg: Package, rules: list[Rule], workers: int) -> Found:
    """{rule number: findings} on the package, its systems walked by `workers` forked processes.
    The collector is paused throughout: here the checks make few objects, and its first full
    pass over a large package's listing held the first system by 0.3 s at
    100,000 leaves."""
    for division, org, _ in pkg.orgs:  # worked out once, here: every share asks for them
        pkg.manifest_head(division, org)
        pkg.edition_of(division, org)
    found: Found = {r.number: [] for r in rules}
    # The first system is checked here: its checks load the tables, schemas and listings that
    # every check reads (70 ms), which the workers then inherit instead of each loading them.
    first, rest = pkg.systems[:1], pkg.systems[1:]
    walked = [_walk(pkg, first, rules)]
    if rest:
        walked += shares.walk(rest, lambda share: _walk(pkg, share, rules), workers, lambda: _ahead(pkg))
    for share_found, notes in walked:
        for number, findings in share_found.items():
            found[number].extend(findings)
        for number, items in notes.items():
            pkg.notes.setdefault(number, []).extend(items)
    for rule, check_ in by_scope(rules)[PACKAGE]:
        found[rule.number].extend(rule.run(check_, pkg))
    return found


def _ahead(pkg: Package) -> None:
    """What the package's checks and the report ask for at the end, taken in while the workers
    run: the whole manifests (from the process that parsed them) and the result names."""
    for division, org, _ in pkg.orgs:
        pkg.manifest(division, org)
    pkg.result_names  # noqa: B018 - a kept property, worked out now


def _walk(pkg: Package, share: shares.Share, rules: list[Rule]) -> tuple[Found, dict[str, list[Any]]]:
    """A share's findings and the notes its checks left, taken off the package (the caller
    merges them in share order, whichever process walked the share)."""
    before = {number: len(items) for number, items in pkg.notes.items()}
    found = check_package(pkg, share, rules, package_checks=False)
    notes = {number: items[before.get(number, 0):] for number, items in pkg.notes.items()}
    for number, count in before.items():
        del pkg.notes[number][count:]
    for number in [n for n in pkg.notes if n not in before]:
        del pkg.notes[number]
    return found, notes
