"""A large package checked in forked worker processes, one per task: the rules that run over
the whole package (Rule.parts false), then, part by part (Package.parts), the others.

Each worker inherits the package as listed and its submission.yaml as parsed, checks its task,
sends the findings and exits without tearing its readings down: freeing millions of parsed
objects one by one cost each process a tenth of its time, and a process's exit returns its
memory at once. Workers run as many at once as there are cores (at most MOST_WORKERS), so
memory is that of a few parts however large the package. A worker that dies or cannot be
started costs nothing: its task is checked here instead.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import time
from multiprocessing.connection import Connection, wait
from typing import Any, Callable

from mlpstorage_py.results.tree import files
from mlpstorage_py.results.tree.package import Package
from mlpstorage_py.checker.registry import RULES, Finding, run_rule

MOST_WORKERS = 4
# A worker still at its task after this long is ended and the task checked here instead (a
# part of 2,000 leaves takes about a second on a local disk).
TASK_DEADLINE_S = 600.0
# Parts per worker, at least: smaller parts even out the workers' shares.
PARTS_PER_WORKER = 4
# Whole-package rules that ask nothing of submission.yaml: a worker checks them while this
# process parses the manifests every other task needs (at 100,000 leaves, 2 s in which the
# other cores would wait). Should one come to ask, that worker parses them itself: slower,
# never wrong.
BEFORE_MANIFESTS = frozenset({"2.1.1", "2.1.2", "2.1.5.a", "2.1.5.b", "2.1.7", "RPT-01"})
Task = tuple[Package, list[str]]


def workers_here() -> int:
    """Worker processes this process may run at once: its cores, at most MOST_WORKERS; none
    where fork is not the way (not Linux) or in a daemonic process (which may not start one)."""
    if os.name != "posix" or not hasattr(os, "sched_getaffinity") or multiprocessing.current_process().daemon:
        return 0
    return min(len(os.sched_getaffinity(0)), MOST_WORKERS)


def check(pkg: Package, numbers: list[str], most_leaves: int, workers: int) -> dict[str, list[Finding]]:
    """{rule: findings} of `numbers` on the package, in `workers` forked processes."""
    size = max(1, min(most_leaves, math.ceil(len(pkg.leaves) / (workers * PARTS_PER_WORKER))))
    parts = pkg.parts(size)
    whole = [number for number in numbers if not RULES[number].parts]
    by_part = [number for number in numbers if RULES[number].parts]
    tasks: list[Task] = [(pkg, [n for n in whole if n in BEFORE_MANIFESTS]),
                         (pkg, [n for n in whole if n not in BEFORE_MANIFESTS])]
    tasks += [(part, by_part) for part in parts]

    def parse_manifests() -> None:  # once, here: every later task asks for them
        for division, org, _ in pkg.orgs:
            pkg.manifest(division, org)

    done = _run_tasks(tasks, workers, parse_manifests)
    found: dict[str, list[Finding]] = {number: [] for number in numbers}
    for result in done:
        for number, findings in result.items():
            found[number].extend(findings)
    return found


def _run_tasks(tasks: list[Task], workers: int,
               prepare: Callable[[], None] | None) -> list[dict[str, list[Finding]]]:
    """Each task's findings, in task order; prepare() runs once the first task is under way.
    A task whose worker gave none (it died, could not be started, or ran past TASK_DEADLINE_S
    and was ended) is checked here."""
    context = multiprocessing.get_context("fork")
    done: list[dict[str, list[Finding]] | None] = [None] * len(tasks)
    waiting = list(range(len(tasks)))
    running: dict[Connection, tuple[int, Any, float]] = {}
    try:
        while waiting or running:
            while waiting and len(running) < (1 if prepare else workers):
                index = waiting.pop(0)
                started = _start(context, tasks[index])
                if started is None:
                    done[index] = _check_here(tasks[index])
                else:
                    running[started[0]] = (index, started[1], time.monotonic() + TASK_DEADLINE_S)
            if prepare:
                prepare()
                prepare = None
                continue
            if not running:
                continue
            ready = wait(list(running), timeout=max(0.0, min(d for _, _, d in running.values()) - time.monotonic()))
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
                    done[index] = _check_here(tasks[index])
    finally:
        for receive, (_, process, _) in running.items():  # interrupted: end the workers still running
            receive.close()
            process.terminate()
            process.join()
    return [result or {} for result in done]


def _start(context: Any, task: Task) -> tuple[Connection, Any] | None:
    """A worker checking the task, with the end of its pipe; None when no process is to be had."""
    try:
        receive, send = context.Pipe(duplex=False)
    except OSError:
        return None
    try:
        process = context.Process(target=_work, args=(task, send), daemon=True)
        process.start()
    except OSError:
        receive.close()
        return None
    finally:
        send.close()
    return receive, process


def _work(task: Task, send: Connection) -> None:
    send.send(_check(task))


def _check(task: Task) -> dict[str, list[Finding]]:
    target, numbers = task
    return {number: run_rule(number, target) for number in numbers}


def _check_here(task: Task) -> dict[str, list[Finding]]:
    """A task checked in this process, a part's readings released after."""
    since = files.mark()
    found = _check(task)
    task[0].release(since)
    return found
