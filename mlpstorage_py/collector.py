"""The cyclic garbage collector, paused while a package is read and checked.

A package reading builds millions of small long-lived objects: the collector's passes over them
cost a quarter to a third of validate's time and free almost nothing, so it is paused meanwhile.
It resumes with what exists frozen (gc.freeze): resumed plainly, its next pass would first walk
every object the reading left (0.2 s for 10,000 leaves, 2 s for 100,000). A frozen object is
never collected, so one that later becomes cyclic garbage (the command's argument parser, for
one) would stay for good: the next reading in the same process hands the frozen objects back
and collects once. Without that pass, a process that reads package after package (the tests,
the fuzzer) grew by every command it ran, until the fuzzer's 10,000 cases ran out of memory.
"""

from __future__ import annotations

import contextlib
import gc
from typing import Iterator


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """Pause collection for the block; inside an outer pause, leave it to the outer one."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    if gc.get_freeze_count():
        gc.unfreeze()
        gc.collect()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()
