"""From the parsed arguments to a typed Request (benchmarks/base.py): the one place a
benchmark's settings are read by name. Each argparse dest fills the field of the same name of
the Request, of its LaunchOptions or of the benchmark's options class (benchmarks/options.py
says how to add one); a value argparse left None keeps the field's default; lists become tuples.
tests/test_requests.py checks that every dest has exactly one field and every field a dest."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from mlpstorage_py.benchmarks.base import Request
from mlpstorage_py.launch.options import LaunchOptions

# Parsed settings no Request field takes: --debug is main()'s (tracebacks and logging).
NOT_FIELDS = frozenset({"debug"})


def fields(cls: type) -> list[str]:
    """The names of a dataclass's fields."""
    return [f.name for f in dataclasses.fields(cls)]


def _filled(cls: type, args: Mapping[str, Any], **given: Any) -> Any:
    """cls with each field from the dest of its name (or `_<name>`, what dispatch derived),
    None left to the field's default."""
    values = dict(given)
    for name in fields(cls):
        if name in values:
            continue
        value = args.get(name, args.get(f"_{name}"))
        if value is not None:
            values[name] = tuple(value) if isinstance(value, list) else value
    return cls(**values)


def build(args: Mapping[str, Any], options_type: type, started: float) -> Request:
    """The typed request of a parsed benchmark command line; `recorded_args` keeps the parsed
    values (underscored ones left out) only for the metadata's `args` record."""
    recorded = {k: v for k, v in args.items() if not k.startswith("_")}
    return _filled(Request, args, options=_filled(options_type, args), launch=_filled(LaunchOptions, args),
                   started_at=started, recorded_args=recorded)
