"""A large package's systems walked on every core: cut into consecutive shares, large ones first
and small ones last (shares()), each share handed to a forked worker that reads its records and sends back what a
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
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from typing import Any, TypeVar, cast

from mlpstorage_py.results.tree.aside import settle
from mlpstorage_py.results.tree.package import Package, System, uncollected

MOST_WORKERS = 4
# The smallest share handed out, in leaves and as a part of the package's: the last shares are
# this small, so the workers run out of work at about the same time, and each share costs a
# fork (tens of milliseconds in a large package), so there are not too many.
MIN_SHARE_LEAVES = 250
MIN_SHARE_PART = 128
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


def shares(systems: list[System], workers: int) -> list[Share]:
    """The systems as consecutive shares (none empty) for `workers` processes, each of about
    1/(2 x workers) of the leaves not yet handed out and at least the smallest share: large
    shares go first and small ones last, so the workers finish together (equal shares left one
    idle for up to a share's length at the end: a tenth of the time at 100,000 leaves)."""
    total = sum(len(s.leaves) for s in systems)
    smallest = max(MIN_SHARE_LEAVES, total // MIN_SHARE_PART)
    found: list[Share] = []
    left, i = total, 0
    while i < len(systems):
        want = max(smallest, -(-left // (2 * workers)))
        share: Share = []
        held = 0
        while i < len(systems) and (not share or held < want):
            share.append(systems[i])
            held += len(systems[i].leaves)
            i += 1
        found.append(share)
        left -= held
    return found


def walk(systems: list[System], func: Callable[[Share], T], workers: int,
         meanwhile: Callable[[], None] = lambda: None) -> list[T]:
    """func of each share of the systems, in share order: in `workers` forked processes, or
    here (one share) when workers < 2. `meanwhile`, work of the caller's that needs no share's
    answer, is done here while the first workers run (left to the caller where none started)."""
    if workers < 2:
        meanwhile()
        return [func(systems)]
    parts = shares(systems, workers)
    # The collector paused while the workers run: this process only takes in their answers, and
    # a full collection over a large package's listing held the next share's start by 0.6 s.
    with uncollected():
        sent = _forked(parts, func, workers, meanwhile)
    return [got[0] if got is not None else func(part) for part, got in zip(parts, sent, strict=True)]


def _forked(parts: list[Share], func: Callable[[Share], T], workers: int,
            meanwhile: Callable[[], None]) -> list[tuple[T] | None]:
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
            meanwhile()
            meanwhile = _nothing
            soonest = min(d for _, _, d in running.values())
            ready = cast(list[Connection], wait(list(running), timeout=max(0.0, soonest - time.monotonic())))
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


def _nothing() -> None:
    """meanwhile, once it has run."""


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
    except Exception:  # the caller walks the share again and raises it where it belongs
        return
    send.send(sent)
