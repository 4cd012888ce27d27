"""block_yaml reads a text only when libyaml's safe loader reads it without error, and then to the
same data, types included: checked against PyYAML itself on generated documents, mangled ones,
hand-written edge cases and the published packages' YAML files."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mlpstorage_py.results.tree import block_yaml, fast_yaml

REALDATA = Path(__file__).resolve().parents[2] / "shared" / "realdata"
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def agrees(text: str) -> bool:
    """Whether block_yaml took the text (True) or left it to libyaml (False); fails the test when
    it took a text libyaml refuses or read other data than libyaml does."""
    try:
        expected, refused = yaml.load(text, Loader=LOADER), None
    except yaml.YAMLError as exc:
        expected, refused = None, exc
    try:
        got = block_yaml.load(text)
    except block_yaml.Unhandled:
        return False
    assert refused is None, f"read a text libyaml refuses ({refused}):\n{text}"
    assert _typed(got) == _typed(expected), text
    return True


def _typed(value: object) -> object:
    """The value with every scalar's type beside it (1 == 1.0 == True in Python)."""
    if isinstance(value, dict):
        return [("map", _typed(k), _typed(v)) for k, v in value.items()]
    if isinstance(value, list):
        return [("seq", _typed(v)) for v in value]
    return type(value).__name__, repr(value)


# Scalars that a resolver claims, or that look like structure: the reader must type or refuse them.
TRICKY = ["yes", "No", "on", "OFF", "true", "False", "null", "~", "", "-", "--", "---", "...", "1", "-1", "+1",
          "0x1F", "017", "0o17", "1_000", "1:30", "190:20:30", "1e3", "1.5e3", "1.0", ".5", "-.inf", ".NaN",
          "2026-07-01", "2026-07-01 09:00:00", "2026-07-01T09:00:00Z", "=", "<<", "a: b", "a #b", "#a", "a#b",
          "'q'", '"q"', "it's", 'say "hi"', "[]", "{}", "[1]", "{a: 1}", "&a", "*a", "!x", "|", ">", "%x", "@x",
          "`x", "?", "? x", ":x", "a:", "a:b", ",", "x,y", " lead", "trail ", "two  spaces", "tab\tin",
          "new\nline", "back\\slash", "caf\u00e9", "\u2028", "x" * 1100, "${now:%Y-%m-%d}", "/results/a/b"]
SCALARS = st.one_of(st.sampled_from(TRICKY), st.integers(-10**20, 10**20), st.floats(allow_nan=False),
                    st.booleans(), st.none(), st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=12),
                    st.dates(), st.datetimes(timezones=st.just(datetime.timezone.utc)))
KEYS = st.one_of(st.sampled_from(["a", "name", "b_c", "x.y", "k-1", "1", "true", "null", "<<", "a b", "'q'", "x" * 1100]),
                 st.text(st.characters(min_codepoint=32, max_codepoint=126), min_size=1, max_size=8))
DATA = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                     st.dictionaries(KEYS, inner, max_size=4)), max_leaves=20)


def dumped(data: object, indent: int, width: int) -> str:
    return yaml.safe_dump(data, default_flow_style=False, indent=indent, width=width, sort_keys=False, allow_unicode=True)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(DATA.filter(lambda d: isinstance(d, (dict, list))), st.sampled_from([2, 4]), st.sampled_from([20, 80, 10000]))
def test_documents_as_pyyaml_writes_them(data: object, indent: int, width: int) -> None:
    agrees(dumped(data, indent, width))


NAME = st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True)
PLAIN = st.recursive(st.one_of(st.integers(-10**6, 10**6), st.booleans(), st.none(), st.from_regex(r"[a-z][a-z0-9_/.]{0,10}", fullmatch=True)),
                     lambda inner: st.one_of(st.lists(inner, min_size=1, max_size=3),
                                             st.dictionaries(NAME, inner, min_size=1, max_size=3)), max_leaves=15)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(PLAIN.filter(lambda d: isinstance(d, dict)))
def test_records_of_names_numbers_and_words_are_read_here(data: object) -> None:
    """The form the fast path exists for: a regression that left every text to libyaml would
    pass the tests above."""
    assert agrees(dumped(data, 2, 80))


MANGLES = st.sampled_from(["indent", "outdent", "drop", "dup", "comment", "trail", "dash", "colon", "hash", "tab", "blank"])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(DATA.filter(lambda d: isinstance(d, dict)), st.lists(st.tuples(MANGLES, st.integers(0, 50)), min_size=1, max_size=3))
def test_mangled_documents_are_refused_or_read_as_libyaml_reads_them(data: object, mangles: list) -> None:
    lines = dumped(data, 2, 80).splitlines()
    for how, at in mangles:
        if not lines:
            break
        i = at % len(lines)
        line = lines[i]
        lines[i:i + 1] = {
            "indent": [" " + line], "outdent": [line[1:]], "drop": [], "dup": [line, line],
            "comment": [line, "  # note"], "trail": [line + "   "], "dash": ["- " + line], "colon": [line + ":"],
            "hash": [line + " #x"], "tab": ["\t" + line], "blank": [line, ""],
        }[how]
    agrees("\n".join(lines) + "\n")


@pytest.mark.parametrize("text, read", [
    ("a: 1\nb:\n- x\n- y\nc: d\n", True),  # a sequence at its key's own indentation
    ("- a: 1\n  b: [] \n-\n  c: {}\n- - x\n  - - y\n-\n", True),  # compact, nested and empty items
    ("- - x\n - y\n", False),  # an item between two columns
    ("- a:\n  - 1\n- b\n", True),
    ("top:\n  k: 'it''s'\n  q: \"x: y\"\n  'quoted key': 2\n", True),
    ("a: 1\na: 2\n", False),  # a duplicate key: the last wins in PyYAML, and libyaml decides
    ("a: &x 1\nb: *x\n", False),
    ("<<: {a: 1}\n", False),
    ("a: b\n  c: d\n", False),  # a continued scalar
    ("a: 1\n  - x\n", False),
    ("a:\n    b: 1\n  c: 2\n", False),  # irregular indentation: libyaml refuses it
    ("a: =\n", False),  # the value tag, which the safe loader cannot construct
    ("--- \na: 1\n", False),
    ("a: 1 # note\n", False),
    ("# only a comment\n", False),
    ("plain scalar\n", False),
    ("  a: 1\n  b: 2\n", True),  # the whole document indented
    ("a: 2026-07-01\nb: 1_000\nc: 0x1F\nd: .inf\ne: ~\nf: Yes\n", True),
])
def test_hand_written_cases(text: str, read: bool) -> None:
    assert agrees(text) is read


def test_fast_yaml_gives_the_same_data_on_either_path() -> None:
    """A text in the block form and one with an anchor (libyaml's events) load alike."""
    plain = "a: 1\nb:\n- 2026-07-01\n- 'x'\n"
    anchored = "a: &one 1\nb:\n- 2026-07-01\n- 'x'\nc: *one\n"
    assert fast_yaml.load(plain) == yaml.safe_load(plain)
    assert fast_yaml.load(anchored) == yaml.safe_load(anchored) == {**yaml.safe_load(plain), "c": 1}


@pytest.mark.skipif(not REALDATA.is_dir(), reason="no published packages at ../shared/realdata")
def test_the_published_packages_yaml_files() -> None:
    read = 0
    for path in sorted(REALDATA.rglob("*.yaml")):
        if path.is_file() and not path.is_symlink():
            read += agrees(path.read_text(errors="replace"))
    assert read >= 10, "the plain block form covers the published DLIO configs and overrides"
