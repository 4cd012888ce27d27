"""A leaf's record is the first name of its listing that one of the layout table's shell patterns
matches (package._first_match: lookups and endswith where the pattern allows); it must be the
name one compiled alternation of fnmatch's translations finds, as the reader first did."""

from __future__ import annotations

import re
from fnmatch import translate

from hypothesis import given, settings
from hypothesis import strategies as st

from mlpstorage_py.results.tree import layout
from mlpstorage_py.results.tree.package import _first_match

PARTS = ["_metadata.json", "metadata.json", "summary.json", "kvcache_run_summary", ".json", "provenance.json",
         "fs_separation.json", "x", "training_20260701_090000", "*", "?", "[ab]", "\n", "a*b", "."]
PATTERNS = st.lists(st.lists(st.sampled_from(PARTS), min_size=1, max_size=3).map("".join), min_size=1, max_size=3)
NAMES = st.lists(st.lists(st.sampled_from(PARTS + ["a", "b", "-", " "]), max_size=4).map("".join), max_size=8)


def as_first_written(patterns: list[str], names: dict[str, str]) -> str | None:
    matches = re.compile("|".join(f"(?:{translate(p)})" for p in patterns)).match
    return next(filter(matches, names), None)


@settings(max_examples=500, deadline=None)
@given(PATTERNS, NAMES)
def test_generated_patterns_and_listings(patterns: list[str], names: list[str]) -> None:
    listing = {name: "file" for name in sorted(set(names))}
    assert _first_match(tuple(patterns))(listing) == as_first_written(patterns, listing)


def test_the_layout_tables_patterns() -> None:
    names = sorted(["0_output.json", "metadata.json", "training_20260701_090000_metadata.json", "summary.json",
                    "kvcache_run_summary_2.json", "x_summary.json", "provenance.json", "fs_separation.json", "dlio.log"])
    listing = dict.fromkeys(names, "file")
    for kind, spec in layout.record_kinds().items():
        for patterns in [spec["names"], *(spec.get("older") or {}).values()]:
            assert _first_match(tuple(patterns))(listing) == as_first_written(patterns, listing), (kind, patterns)
            assert _first_match(tuple(patterns))({}) is None
