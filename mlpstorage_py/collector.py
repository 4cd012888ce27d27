"""The cyclic garbage collector, paused while a package is read and checked.

A package reading builds millions of small long-lived objects: the collector's passes over them
cost a quarter to a third of validate's time and free almost nothing, so it is paused meanwhile.
It resumes with what exists frozen (gc.freeze): resumed plainly, its next pass would first walk
every object the reading left (0.2 s for 10,000 leaves, 2 s for 100,000). A frozen object is
never collected, so one that later becomes cyclic garbage (the command's argument parser, for
one) would stay: a process that reads package after package (the tests, the fuzzer) grew by
every command it ran, until the fuzzer's 10,000 cases ran out of memory. So the next reading
hands the frozen objects back, and collects once they have doubled since the last collection:
what a process keeps stays within twice what it holds, and each object is walked a bounded
number of times (a pass before every reading cost the fuzzer 25 ms a command).
"""

from __future__ import annotations

import contextlib
import gc
from typing import Iterator


# Objects the collector tracked after its last pass here.
_survived = 0


def _tracked() -> int:
    """How many objects the collector tracks (counted by freezing them, which moves a list)."""
    gc.freeze()
    count = gc.get_freeze_count()
    gc.unfreeze()
    return count


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """Pause collection for the block; inside an outer pause, leave it to the outer one."""
    if not gc.isenabled():
        yield
        return
    global _survived
    gc.disable()
    frozen = gc.get_freeze_count()
    if frozen:
        gc.unfreeze()
        if frozen > 2 * _survived:
            gc.collect()
            _survived = _tracked()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()
