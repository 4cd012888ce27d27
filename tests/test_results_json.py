"""results.tree.files reads JSON with orjson where it is installed: every text gives the value,
or the error, that json gives (the cases where orjson differs are left to json)."""

from __future__ import annotations

import json

import pytest

from mlpstorage_py.results.tree import files

TEXTS = ['{"a": 1, "a": 2}', "18446744073709551616", "[-9223372036854775809, 1.5]", "NaN", "[Infinity, -Infinity]",
         "1e400", "-0", "-0.0", '"\\ud800"', "\ufeff{}", "[1,]", '{"a" 1}', '"\x01"', "", " [1] ",
         "[" * 500 + "]" * 500, '{"k": [1, 2.5e-3, true, null, "\\u00e9"]}', "0.30000000000000004"]


def _outcome(loads, text: str) -> tuple[str, str]:
    try:
        return "value", repr(loads(text))
    except ValueError as exc:
        return "error", f"{type(exc).__name__}: {exc}"


@pytest.mark.parametrize("text", TEXTS)
def test_same_as_json(text: str):
    assert _outcome(files._json_loads, text) == _outcome(json.loads, text)


def test_without_orjson(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(files, "orjson", None)
    assert [_outcome(files._json_loads, t) for t in TEXTS] == [_outcome(json.loads, t) for t in TEXTS]
