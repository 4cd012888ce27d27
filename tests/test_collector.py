"""The cyclic collector paused around a package reading (mlpstorage_py/collector.py): frozen
garbage is collected once it has doubled, so a process that runs command after command
in-process keeps at most twice what it holds, without a pass before every reading."""

from __future__ import annotations

import gc
import weakref

from mlpstorage_py import collector


class Node:
    pass


def cycles(count: int) -> list[weakref.ref]:
    """count objects that are garbage at once, yet only the cyclic collector can free."""
    refs = []
    for _ in range(count):
        node = Node()
        node.me = node
        refs.append(weakref.ref(node))
    return refs


def test_frozen_garbage_is_collected_once_it_doubles():
    for _ in range(2):  # the first leaves objects frozen; the second collects (nothing survived a pass yet)
        with collector.paused():
            pass
    held = collector._survived
    assert held > 0
    with collector.paused():
        few = cycles(100)  # made while paused: frozen at the end, never seen by the collector
    with collector.paused():
        assert all(r() is not None for r in few)  # not worth a pass yet
        many = cycles(held + 1000)
    assert all(r() is not None for r in many)
    with collector.paused():  # frozen now more than twice what survived the last pass
        assert not any(r() is not None for r in few + many)


def test_an_inner_pause_leaves_it_to_the_outer():
    assert gc.isenabled()
    with collector.paused():
        assert not gc.isenabled()
        with collector.paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled() and gc.get_freeze_count() > 0
    with collector.paused():
        assert gc.get_freeze_count() == 0  # handed back to the collector for this reading
