"""results.tree.package.uncollected: the cycle collector paused while a reader builds long-lived
objects, and on the way out those objects handed to the oldest generation without a pass over
them; never the frozen heap of a process that froze one (a forked worker's)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap


def _run(body: str) -> dict:
    """The snippet's printed JSON, run in a fresh interpreter: the collector's counts and
    generations are the process's own, not those of the test runner."""
    code = "import gc, json\nfrom mlpstorage_py.results.tree.package import uncollected\n" + textwrap.dedent(body)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_what_was_made_goes_to_the_oldest_generation_without_a_pass():
    got = _run("""
        gc.collect()
        with uncollected():
            enabled_inside = gc.isenabled()
            made = [[i] for i in range(200_000)]
        young = gc.get_count()[0]
        probe = made[123_456]
        print(json.dumps({"inside": enabled_inside, "after": gc.isenabled(), "young": young,
                          "oldest": any(o is probe for o in gc.get_objects(generation=2)),
                          "frozen": gc.get_freeze_count()}))
    """)
    assert got["inside"] is False and got["after"] is True
    assert got["young"] < 700  # not the 200,000 made while paused, which a first pass would walk
    assert got["oldest"] is True and got["frozen"] == 0


def test_cycles_made_meanwhile_are_still_collected():
    got = _run("""
        import weakref
        class Node: pass
        gc.collect()
        with uncollected():
            a, b = Node(), Node()
            a.other, b.other = b, a
            gone = weakref.ref(a)
            del a, b
        alive_before = gone() is not None
        gc.collect()
        print(json.dumps({"before": alive_before, "after": gone() is not None}))
    """)
    assert got == {"before": True, "after": False}


def test_a_process_with_a_frozen_heap_keeps_it_frozen():
    got = _run("""
        kept = [[i] for i in range(50_000)]
        gc.freeze()  # as a forked worker does with the heap it inherits (results.tree.aside.settle)
        frozen = gc.get_freeze_count()
        with uncollected():
            made = [[i] for i in range(1_000)]
        print(json.dumps({"before": frozen, "after": gc.get_freeze_count(), "enabled": gc.isenabled()}))
    """)
    assert got["before"] >= 50_000
    assert got["after"] == got["before"] and got["enabled"] is True


def test_nested_pauses_end_with_the_outermost():
    got = _run("""
        with uncollected():
            with uncollected():
                pass
            between = gc.isenabled()
        print(json.dumps({"between": between, "after": gc.isenabled()}))
    """)
    assert got == {"between": False, "after": True}


def test_a_collector_turned_off_by_the_caller_stays_off():
    got = _run("""
        gc.disable()
        with uncollected():
            made = [[i] for i in range(1_000)]
        print(json.dumps({"after": gc.isenabled(), "frozen": gc.get_freeze_count()}))
    """)
    assert got == {"after": False, "frozen": 0}
