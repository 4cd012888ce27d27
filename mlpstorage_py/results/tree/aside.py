"""One function's answer worked out in a forked process while the caller goes on with other work:
validate parses a large submission.yaml (2 s at 100,000 leaves) while the package is listed,
on the other core. The answer comes back pickled (a tenth of the parse), after a small part of
it that the caller needs sooner (head: the editions the manifests declare, which every check
asks, while the whole manifest is wanted only by the package's own checks, at the end). Where
no second core or no fork is to be had, or the process dies or fails, the caller works it out
itself, so an error is raised where it belongs.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any, Generic, TypeVar

T = TypeVar("T")
H = TypeVar("H")


def forkable() -> bool:
    """Whether a forked process can run beside this one: Linux's fork, a second core, and not
    a daemonic process (which may not start one)."""
    return (os.name == "posix" and hasattr(os, "sched_getaffinity") and len(os.sched_getaffinity(0)) > 1
            and not multiprocessing.current_process().daemon)


# Net allocations between a forked child's collections: a child reads and releases one system's
# records after another, so few outlive a system; collected every 700 (the default), a
# share's records were walked some 270 times per 300 systems, 2% of its time.
CHILD_GC_THRESHOLD = 10_000


def settle() -> None:
    """In a forked child: the objects it inherited are never collected there (gc.freeze), so a
    collection does not walk, and copy, the parent's whole heap page by page; and its own
    young objects are collected less often (CHILD_GC_THRESHOLD)."""
    gc.freeze()
    gc.set_threshold(CHILD_GC_THRESHOLD, *gc.get_threshold()[1:])


class Aside(Generic[T, H]):
    """func() started in a forked process at once; head() what head_of makes of its answer,
    which comes first, and result() the answer (func() here if none came)."""

    def __init__(self, func: Callable[[], T], head_of: Callable[[T], H]) -> None:
        self._func = func
        self._head_of = head_of
        self._receive: Connection | None = None
        self._process: Any = None
        self._head: tuple[H] | None = None
        self._pid = os.getpid()
        context = multiprocessing.get_context("fork")
        try:
            receive, send = context.Pipe(duplex=False)
        except OSError:
            return
        try:
            self._process = context.Process(target=_work, args=(func, head_of, send, receive), daemon=True)
            self._process.start()
            self._receive = receive
        except OSError:
            receive.close()
            self._process = None
        finally:
            send.close()

    def head(self) -> H:
        if self._head is None:
            got = self._take()
            self._head = (got[0],) if got is not None else (self._head_of(self.result()),)
        return self._head[0]

    def result(self) -> T:
        if self._head is None:  # the head comes first
            head = self._take()
            if head is None:
                return self._func()
            self._head = head
        got = self._take()
        self._close(got is None)
        return got[0] if got is not None else self._func()

    def _take(self) -> tuple[Any] | None:
        """The next message, None when the process died, failed or is not to be asked: a forked
        child of the caller (a worker) works the answer out itself, never reading the caller's pipe."""
        if self._receive is None or os.getpid() != self._pid:
            return None
        try:
            return (self._receive.recv(),)
        except (EOFError, OSError):  # it died, or met an error func() is to raise here
            self._close(True)
            return None

    def _close(self, failed: bool) -> None:
        if self._receive is None or os.getpid() != self._pid:
            return
        self._receive.close()
        self._receive = None
        if failed:
            self._process.terminate()
        self._process.join()


def _work(func: Callable[[], Any], head_of: Callable[[Any], Any], send: Connection, inherited: Connection) -> None:
    inherited.close()  # the caller's end: with it closed here, a caller gone before taking the answer ends this process
    settle()
    try:
        sent = func()
        head = head_of(sent)
    except Exception:  # the caller works it out again and raises it where it belongs
        return
    try:
        send.send(head)
        send.send(sent)
    except OSError:  # the caller went away without the answer (a broken pipe): nothing to tell
        pass
