"""A large package checked on every core: its systems cut into consecutive shares, each share
walked by a forked worker (checker.runner), the package's own checks run here once every share
is in. A worker sends its findings and the notes its checks left (Rule.note), and exits
without tearing its readings down (a process's exit returns its memory at once). A worker
that dies, cannot be started or runs past TASK_DEADLINE_S costs nothing: its share is walked
here instead.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from multiprocessing.connection import Connection, wait
from typing import Any

from mlpstorage_py.checker.registry import PACKAGE, Rule
from mlpstorage_py.checker.runner import Found, by_scope, check_package
from mlpstorage_py.results.tree.package import Package, System

MOST_WORKERS = 4
# Shares per worker: smaller shares even out the workers' loads.
SHARES_PER_WORKER = 4
# A worker still at its share after this long is ended and the share walked here (a share of
# 2,500 leaves takes about a second on a local disk).
TASK_DEADLINE_S = 600.0
Share = list[System]


def workers_here() -> int:
    """Worker processes this process may run at once: its cores, at most MOST_WORKERS; none
    where fork is not the way (not Linux) or in a daemonic process (which may not start one)."""
    if os.name != "posix" or not hasattr(os, "sched_getaffinity") or multiprocessing.current_process().daemon:
        return 0
    return min(len(os.sched_getaffinity(0)), MOST_WORKERS)


def shares(systems: list[System], count: int) -> list[Share]:
    """The systems as `count` consecutive shares of about equal leaf counts (none empty)."""
    total = sum(len(s.leaves) for s in systems) or 1
    found: list[Share] = [[]]
    held = 0
    for system in systems:
        if found[-1] and held >= total * len(found) / count:
            found.append([])
        found[-1].append(system)
        held += len(system.leaves)
    return found


def check(pkg: Package, rules: list[Rule], workers: int) -> Found:
    """{rule number: findings} on the package, its systems walked by `workers` forked processes."""
    for division, org, _ in pkg.orgs:  # parsed once, here: every share asks for them
        pkg.manifest(division, org)
        pkg.edition_of(division, org)
    parts = shares(pkg.systems, workers * SHARES_PER_WORKER)
    done = _walk(pkg, parts, rules, workers)
    found: Found = {r.number: [] for r in rules}
    for share_found, notes in done:
        for number, findings in share_found.items():
            found[number].extend(findings)
        for number, items in notes.items():
            pkg.notes.setdefault(number, []).extend(items)
    for rule, check_ in by_scope(rules)[PACKAGE]:
        found[rule.number].extend(rule.run(check_, pkg))
    return found


def _walk(pkg: Package, parts: list[Share], rules: list[Rule], workers: int) -> list[tuple[Found, dict]]:
    """(findings, notes) of each share, in share order."""
    context = multiprocessing.get_context("fork")
    done: list[tuple[Found, dict] | None] = [None] * len(parts)
    waiting = list(range(len(parts)))
    running: dict[Connection, tuple[int, Any, float]] = {}
    try:
        while waiting or running:
            while waiting and len(running) < workers:
                index = waiting.pop(0)
                started = _start(context, pkg, parts[index], rules)
                if started is None:
                    done[index] = _here(pkg, parts[index], rules)
                else:
                    running[started[0]] = (index, started[1], time.monotonic() + TASK_DEADLINE_S)
            if not running:
                continue
            soonest = min(d for _, _, d in running.values())
            ready = wait(list(running), timeout=max(0.0, soonest - time.monotonic()))
            overdue = [r for r, (_, _, d) in running.items() if r not in ready and d <= time.monotonic()]
            for receive in ready + overdue:
                index, process, _ = running.pop(receive)
                try:
                    done[index] = receive.recv() if receive in ready else None
                except (EOFError, OSError):  # it died
                    done[index] = None
                receive.close()
                if done[index] is None:
                    process.terminate()
                process.join()
                if done[index] is None:
                    done[index] = _here(pkg, parts[index], rules)
    finally:
        for receive, (_, process, _) in running.items():  # interrupted: end the workers still running
            receive.close()
            process.terminate()
            process.join()
    return [result for result in done if result is not None]


def _start(context: Any, pkg: Package, share: Share, rules: list[Rule]) -> tuple[Connection, Any] | None:
    """A worker walking the share, with the end of its pipe; None when no process is to be had."""
    try:
        receive, send = context.Pipe(duplex=False)
    except OSError:
        return None
    try:
        process = context.Process(target=_work, args=(pkg, share, rules, send), daemon=True)
        process.start()
    except OSError:
        receive.close()
        return None
    finally:
        send.close()
    return receive, process


def _work(pkg: Package, share: Share, rules: list[Rule], send: Connection) -> None:
    send.send(_here(pkg, share, rules))


def _here(pkg: Package, share: Share, rules: list[Rule]) -> tuple[Found, dict]:
    """A share walked in this process: its findings and the notes its checks left."""
    before = {number: len(items) for number, items in pkg.notes.items()}
    found = check_package(pkg, share, rules, package_checks=False)
    notes = {number: items[before.get(number, 0):] for number, items in pkg.notes.items()}
    for number, count in before.items():  # the caller merges them in share order
        del pkg.notes[number][count:]
    for number in [n for n in pkg.notes if n not in before]:
        del pkg.notes[number]
    return found, notes
