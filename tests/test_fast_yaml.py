"""The checker's YAML loader gives exactly what yaml.load(SafeLoader) gives (the same types and
values, or the same exception) for generated documents in every dump style and for YAML-ish
noise full of anchors, tags, merge keys and second documents (bench/validate_speed.py measures
what it saves)."""

from __future__ import annotations

import datetime

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mlpstorage_py.results.tree import fast_yaml

SAFE = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def outcome(load, text: str) -> str:
    """repr of the data (which tells 1 from 1.0, True and '1') or the exception's type."""
    try:
        return repr(load(text))
    except Exception as exc:  # noqa: BLE001 - the type is what is compared
        return f"raises {type(exc).__name__}"


def same_as_pyyaml(text: str) -> None:
    assert outcome(fast_yaml.load, text) == outcome(lambda t: yaml.load(t, Loader=SAFE), text), text


scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True),
                    st.text(max_size=12), st.dates(min_value=datetime.date(1900, 1, 1)),
                    st.sampled_from(["yes", "No", "on", "0x1F", "0o17", "017", "1_000", "1:20", "1:20.5", ".inf",
                                     "-.Inf", ".NaN", "~", "null", "", "<<", "=", "2001-12-14t21:59:43.10-05:00",
                                     "3.0", "1e3", "+12", "-0", "0b101", "y", "n", "True", "FALSE"]))
documents = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4),
    st.dictionaries(st.one_of(st.text(max_size=8), st.integers(), st.booleans(), st.none()), inner, max_size=4)),
    max_leaves=20)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=documents, flow=st.sampled_from([False, True, None]), unicode=st.booleans(), width=st.sampled_from([20, 80]))
def test_dumped_documents_load_the_same(data, flow, unicode, width):
    same_as_pyyaml(yaml.safe_dump(data, default_flow_style=flow, allow_unicode=unicode, width=width))


TOKENS = ["a", "b", "1", "0x1", "yes", "~", ": ", "- ", "\n", "  ", "'q'", '"q\\n"', "&x ", "*x", "<<: ", "= ",
          "---\n", "...\n", "!!str ", "!!int ", "!custom ", "[", "]", "{", "}", ", ", "# c", "? ", "|\n  ", ">\n  ",
          "2001-12-14", ".nan", "\t", "%YAML 1.1\n", "\ufeff", "[a]: 1", "{a: 1}: 2"]


@settings(max_examples=1500, deadline=None)
@given(st.lists(st.sampled_from(TOKENS), max_size=30).map("".join))
def test_yaml_noise_loads_or_fails_the_same(text):
    same_as_pyyaml(text)


def test_what_only_the_full_loader_handles_is_still_right():
    for text in ["a: &x [1, 2]\nb: *x\n", "base: &b {x: 1}\nd:\n  <<: *b\n  y: 2\n", "a: !!str 12\n",
                 "a: 1\n---\nb: 2\n", "[1]: x\n", "a: *undefined\n", "!!python/object:os.system x\n", ""]:
        same_as_pyyaml(text)
