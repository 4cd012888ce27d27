"""The command table (mlpstorage_py/cli/table.py) is the only wiring of the utility commands:
each of its entries has one parser, and every utility parser comes from an entry."""

from __future__ import annotations

import argparse

import pytest

from mlpstorage_py.cli import build_parser
from mlpstorage_py.cli.command import Command
from mlpstorage_py.cli.common import MODES
from mlpstorage_py.cli.dispatch import parse
from mlpstorage_py.cli.table import COMMANDS


def _leaves(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], argparse.ArgumentParser]:
    """Every parser without subcommands below parser, by its path (the modes' trees left out)."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return {path: parser}
    found: dict[tuple[str, ...], argparse.ArgumentParser] = {}
    for name, child in subs[0].choices.items():
        if not path and name in MODES:
            continue
        found.update(_leaves(child, path + (name,)))
    return found


def test_every_utility_parser_is_one_table_entry() -> None:
    entries = {entry.path: entry for entry in COMMANDS if isinstance(entry, Command)}
    leaves = _leaves(build_parser([]))
    assert set(leaves) == set(entries)
    for path, parser in leaves.items():
        assert parser.get_default("_command") is entries[path]
