"""results.tree.package.uncollected: the cycle collector paused while a reader builds long-lived
objects, and back as it was afterwards; and a process that reads package after package (a
long-lived caller, the test runner) still collects the packages it has dropped: a reading's
objects are cyclic (a leaf holds its package, the package its leaves)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from synthetic import make_package


def _run(body: str, *args: str) -> dict:
    """The snippet's printed JSON, run in a fresh interpreter: the collector's counts and
    generations are the process's own, not those of the test runner."""
    code = "import gc, json, sys\nfrom mlpstorage_py.results.tree.package import uncollected\n" + textwrap.dedent(body)
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_paused_inside_and_back_after():
    got = _run("""
        with uncollected():
            inside = gc.isenabled()
            with uncollected():
                pass
            between = gc.isenabled()
        print(json.dumps({"inside": inside, "between": between, "after": gc.isenabled()}))
    """)
    assert got == {"inside": False, "between": False, "after": True}


def test_a_collector_turned_off_by_the_caller_stays_off():
    got = _run("""
        gc.disable()
        with uncollected():
            made = [[i] for i in range(1_000)]
        print(json.dumps({"after": gc.isenabled(), "frozen": gc.get_freeze_count()}))
    """)
    assert got == {"after": False, "frozen": 0}


def test_packages_read_one_after_another_are_collected(tmp_path: Path):
    """Forty readings of one package, each dropped: what is left uncollected after the last is
    a few readings' worth, not forty (a pause that ended by moving its objects to the oldest
    generation, unscanned, also reset the collector's counts, and no pass ever came)."""
    make_package(tmp_path / "pkg")
    got = _run("""
        from pathlib import Path
        from mlpstorage_py.results.tree.package import Package
        root = Path(sys.argv[1])
        gc.collect()
        base = len(gc.get_objects())
        held = Package.load(root, None)
        reading = len(gc.get_objects()) - base
        del held
        for _ in range(40):
            pkg = Package.load(root, None)
            del pkg
        left = len(gc.get_objects())
        gc.collect()
        print(json.dumps({"reading": reading, "left": left - len(gc.get_objects())}))
    """, str(tmp_path / "pkg"))
    assert got["reading"] > 50
    assert got["left"] < 10 * got["reading"], got
