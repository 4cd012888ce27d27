"""A function of some systems mapped over a large package's systems in forked workers, cut
into checker.workers' consecutive shares: each worker reads its share's records and sends back
what the function makes of them (small), the parent never reads them. A worker that dies or
cannot be started costs nothing: its share is walked here, when its turn comes.
"""

from __future__ import annotations

import multiprocessing
from multiprocessing.connection import Connection, wait
from typing import Any, Callable, Iterator, TypeVar

from mlpstorage_py.checker.workers import SHARES_PER_WORKER, shares, workers_here
from mlpstorage_py.results.tree.package import Package, System

# A package of fewer leaves is walked here: the forks would cost more than they save.
POOL_MIN_LEAVES = 1000
T = TypeVar("T")


def walk(pkg: Package, func: Callable[[list[System]], T]) -> Iterator[T]:
    """func of the package's systems, share by share in order (one share, here, for a small package)."""
    count = workers_here() if len(pkg.leaves) >= POOL_MIN_LEAVES else 0
    if count < 2:
        yield func(pkg.systems)
        return
    parts = shares(pkg.systems, count * SHARES_PER_WORKER)
    for index, sent in enumerate(_forked(parts, func, count)):
        yield sent[0] if sent is not None else func(parts[index])


def _forked(parts: list[list[System]], func: Callable[[list[System]], T], count: int) -> list[tuple[T] | None]:
    """(func(share),) of each share from a worker, None where none sent it."""
    context = multiprocessing.get_context("fork")
    done: list[tuple[T] | None] = [None] * len(parts)
    waiting = list(range(len(parts)))
    running: dict[Connection, tuple[int, Any]] = {}
    try:
        while waiting or running:
            while waiting and len(running) < count:
                index = waiting.pop(0)
                started = _start(context, func, parts[index])
                if started is not None:
                    running[started[0]] = (index, started[1])
            if not running:  # no process to be had: the rest are walked here
                break
            for receive in wait(list(running)):
                index, process = running.pop(receive)
                try:
                    done[index] = (receive.recv(),)
                except (EOFError, OSError):  # it died, or met an error the parent is to raise itself
                    pass
                receive.close()
                process.join()
    finally:
        for receive, (_, process) in running.items():  # interrupted: end the workers still running
            receive.close()
            process.terminate()
            process.join()
    return done


def _start(context: Any, func: Callable[[list[System]], Any], share: list[System]) -> tuple[Connection, Any] | None:
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


def _work(func: Callable[[list[System]], Any], share: list[System], send: Connection) -> None:
    try:
        sent = func(share)
    except Exception:  # noqa: BLE001 - the parent walks the share again and raises it where it belongs
        return
    send.send(sent)
