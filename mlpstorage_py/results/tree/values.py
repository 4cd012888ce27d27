"""Values as records hold them: numbers and times that may be strings, nesting that may be
missing. Shared by the checker and the reports, so both read a record the same way."""

from __future__ import annotations

import functools
import re
from datetime import datetime, timezone
from pathlib import PurePosixPath
from typing import Any

from mlpstorage_py.results.leaf import DATETIME_FORMAT
from mlpstorage_py.results.tree.layout import TIMESTAMP


@functools.cache
def leaf_time(name: str) -> datetime | None:
    """The local date-time a timestamp directory's name states, or None when it is not one
    (remembered: every rule that orders runs asks about every leaf)."""
    if not TIMESTAMP.match(name):
        return None
    try:
        return datetime.strptime(name, DATETIME_FORMAT)
    except ValueError:
        return None


def apart(a: str, b: str) -> bool:
    """Two recorded paths neither of which is, or is inside, the other (the rules' "separate")."""
    pa, pb = PurePosixPath(a), PurePosixPath(b)
    return not (pa == pb or pa in pb.parents or pb in pa.parents)


def dig(data: Any, *keys: str) -> Any:
    """data[k1][k2]...; None as soon as a level is missing or not a mapping."""
    for key in keys:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"\s*[+-]?\d+\s*", value):
        return int(value)
    return None


def as_number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float, str)):
        try:
            return float(value)
        except (ValueError, OverflowError):  # not a number, or an integer beyond any float
            return None
    return None


def parse_time(value: Any) -> datetime | None:
    """An ISO-8601 string (naive = the host's local time, or with Z/offset) or epoch seconds."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        try:
            return datetime.fromtimestamp(float(value), tz=timezone.utc)
        except (OverflowError, OSError, ValueError):
            return None
    if isinstance(value, str) and value.strip():
        text = value.strip()
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        try:
            return datetime.fromisoformat(text)
        except ValueError:
            return None
    return None
