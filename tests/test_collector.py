"""The cyclic collector paused around a package reading (mlpstorage_py/collector.py): a process
that runs command after command in-process must not keep what each of them left."""

from __future__ import annotations

import gc

import synthetic

from mlpstorage_py import collector


def test_command_after_command_keeps_nothing(cli):
    base = synthetic.pristine()
    counts = []
    for _ in range(6):
        for argv in (("validate", "-rd", base), ("status", "-rd", base)):
            assert cli(*argv).rc in (0, 1)  # read to the end (1: findings)
        counts.append(gc.get_freeze_count())
    # each round's parser and readings (about a thousand objects) used to stay frozen for good
    assert max(counts[1:]) - min(counts[1:]) < 200, counts


def test_the_pause_freezes_what_exists_and_an_inner_pause_leaves_it_to_the_outer():
    assert gc.isenabled()
    with collector.paused():
        assert not gc.isenabled()
        with collector.paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner pause neither resumed nor froze
        kept = [[i] for i in range(1000)]
    assert gc.isenabled() and gc.get_freeze_count() >= len(kept)
    with collector.paused():
        assert gc.get_freeze_count() == 0  # handed back to the collector for this reading
    gc.unfreeze()
