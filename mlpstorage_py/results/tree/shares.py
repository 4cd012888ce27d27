"""A large package's systems walked on every core: cut into consecutive shares of about equal
leaf counts, each share handed to a forked worker that reads its records and sends back what a
function makes of them (small), so the parent never holds them. A worker exits when its share
is done, which returns its memory at once. A worker that dies, cannot be started, raises or
runs past the deadline costs nothing: its share is walked in the parent instead, in its turn,
so an error is raised where it belongs. validate (checker.workers), status and reportgen walk
packages this way.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from multiprocessing.connection import Connection, wait
from typing import Any, Callable, TypeVar

from mlpstorage_py.results.tree.aside import settle
from mlpstorage_py.results.tree.package import Package, System

MOST_WORKERS = 4
# Shares per worker: smaller shares even out the workers' loads.
SHARES_PER_WORKER = 4
# A package of fewer leaves is walked in one process: the forks would cost more than they save.
POOL_MIN_LEAVES = 1000
# A worker still at its share after this long is ended and the share walked here (a share of
# 2,500 leaves takes about a second on a local disk).
TASK_DEADLINE_S = 600.0
Share = list[System]
T = TypeVar("T")


def workers_here() -> int:
    """Worker processes this process may run at once: its cores, at most MOST_WORKERS; none
    where fork is not the way (not Linux) or in a daemonic process (which may not start one)."""
    if os.name != "posix" or not hasattr(os, "sched_getaffinity") or multiprocessing.current_process().daemon:
        return 0
    return min(len(os.sched_getaffinity(0)), MOST_WORKERS)


def pool_for(pkg: Package) -> int:
    """Workers to walk this package with: 0 (walk it here) for a small one or a single core."""
    count = workers_here() if len(pkg.leaves) >= POOL_MIN_LEAVES else 0
    return count if count > 1 else 0


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


def walk(systems: list[System], func: Callable[[Share], T], workers: int) -> list[T]:
    """func of each share of the systems, in share order: in `workers` forked processes, or
    here (one share) when workers < 2."""
    if workers < 2:
        return [func(systems)]
    parts = shares(systems, workers * SHARES_PER_WORKER)
    sent = _forked(parts, func, workers)
    return [got[0] if got is not None else func(part) for part, got in zip(parts, sent)]


def _forked(parts: list[Share], func: Callable[[Share], T], workers: int) -> list[tuple[T] | None]:
    """(func(share),) of each share from a worker, None where none sent it."""
    context = multiprocessing.get_context("fork")
    done: list[tuple[T] | None] = [None] * len(parts)
    waiting = list(range(len(parts)))
    running: dict[Connection, tuple[int, Any, float]] = {}
    try:
        while waiting or running:
            while waiting and len(running) < workers:
                index = waiting.pop(0)
                started = _start(context, func, parts[index])
                if started is not None:
                    running[started[0]] = (index, started[1], time.monotonic() + TASK_DEADLINE_S)
            if not running:  # no process to be had: the rest are walked by the caller
                break
            soonest = min(d for _, _, d in running.values())
            ready = wait(list(running), timeout=max(0.0, soonest - time.monotonic()))
            overdue = [r for r, (_, _, d) in running.items() if r not in ready and d <= time.monotonic()]
            for receive in ready + overdue:
                index, process, _ = running.pop(receive)
                if receive in ready:
                    try:
                        done[index] = (receive.recv(),)
                    except (EOFError, OSError):  # it died, or met an error the caller is to raise itself
                        pass
                receive.close()
                if done[index] is None:
                    process.terminate()
                process.join()
    finally:
        for receive, (_, process, _) in running.items():  # interrupted: end the workers still running
            receive.close()
            process.terminate()
            process.join()
    return done


def _start(context: Any, func: Callable[[Share], Any], share: Share) -> tuple[Connection, Any] | None:
    """A worker running func on the share, with the end of its pipe; None when no process is to be had."""
    try:
        receive, send = context.Pipe(duplex=False)
    except OSError:
        return None
    try:
        process = context.Process(target=_work, args=(func, share, send), daemon=True)
        process.start()
    except OSError:
        receive.close()
        return None
    finally:
        send.close()
    return receive, process


def _work(func: Callable[[Share], Any], share: Share, send: Connection) -> None:
    settle()
    try:
        sent = func(share)
    except Exception:  # noqa: BLE001 - the caller walks the share again and raises it where it belongs
        return
    send.send(sent)
