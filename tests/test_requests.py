"""Typed requests (cli/requests.py, benchmarks/options.py, launch/options.py): every flag a
benchmark's parser registers fills exactly one field, every field is filled by some flag, the
built request carries typed values while the metadata's `args` record keeps the command line
as parsed, and nothing below cli/ reads settings by name."""

from __future__ import annotations

import argparse
import dataclasses
import re
from pathlib import Path

import pytest

from mlpstorage_py.benchmarks import table
from mlpstorage_py.benchmarks.base import Request
from mlpstorage_py.cli import build_parser
from mlpstorage_py.cli.common import MODES
from mlpstorage_py.cli.dispatch import parse
from mlpstorage_py.cli.requests import NOT_FIELDS, build, fields
from mlpstorage_py.launch.options import LaunchOptions

PACKAGE = Path(__file__).resolve().parents[1] / "mlpstorage_py"
# Fields no flag fills: what the CLI derives (where a value came from) or builds itself.
DERIVED = {"options", "launch", "started_at", "recorded_args", "dlio_bin_path_origin"}


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(subs[0].choices) if subs else {}


def _dests(parser: argparse.ArgumentParser) -> set[str]:
    return {a.dest for a in parser._actions if a.dest not in (argparse.SUPPRESS, "help")} | set(parser._defaults)


def _leaves(parser: argparse.ArgumentParser, above: set[str]) -> list[set[str]]:
    """The dests every command parser below `parser` fills, with those of the parsers above it."""
    here = above | _dests(parser)
    children = _subparsers(parser)
    return [d for child in children.values() for d in _leaves(child, here)] if children else [here]


def _commands() -> dict[str, list[set[str]]]:
    """benchmark -> the dests of each of its command parsers, over every mode."""
    found: dict[str, list[set[str]]] = {row.cli_name: [] for row in table.BENCHMARKS}
    for mode in MODES:
        top = build_parser([mode])
        mode_parser = _subparsers(top)[mode]
        for name, bench in _subparsers(mode_parser).items():
            found[name] += _leaves(bench, _dests(top) | _dests(mode_parser))
    return found


def test_every_dest_is_one_field_and_every_field_a_dest() -> None:
    shared, launch = set(fields(Request)), set(fields(LaunchOptions))
    assert not shared & launch
    seen: set[str] = set()
    for row in table.BENCHMARKS:
        options = set(fields(row.load().options_type))
        assert not options & (shared | launch), row.cli_name
        dests = set().union(*_commands()[row.cli_name])
        unknown = dests - shared - launch - options - NOT_FIELDS
        assert not unknown, f"{row.cli_name}: flags without a field (benchmarks/options.py): {sorted(unknown)}"
        assert options - DERIVED <= dests, f"{row.cli_name}: fields no flag fills: {sorted(options - DERIVED - dests)}"
        seen |= dests
    assert (shared | launch) - DERIVED <= seen, sorted((shared | launch) - DERIVED - seen)


def test_the_request_is_typed_and_the_record_is_the_command_line(monkeypatch) -> None:
    monkeypatch.setenv("MLPSTORAGE_DLIO_BIN_PATH", "/opt/dlio/bin")
    args = parse(["open", "training", "unet3d", "run", "-at", "b200", "-na", "4", "-cm", "16", "--hosts", "a,b", "c",
                  "--params", "reader.read_threads=4", "--deadline", "30", "--loops", "2"])
    request = build(args, table.row("training").load().options_type, 12.5)
    assert (request.mode, request.benchmark, request.model, request.command) == ("open", "training", "unet3d", "run")
    assert request.launch == LaunchOptions(hosts=("a", "b", "c"), deadline=30.0)
    assert request.options.num_accelerators == 4 and request.options.client_host_memory_in_gb == 16.0
    assert request.options.dlio_bin_path == "/opt/dlio/bin"
    assert request.options.dlio_bin_path_origin == "MLPSTORAGE_DLIO_BIN_PATH"
    assert request.params == ("reader.read_threads=4",) and request.loops == 2 and request.started_at == 12.5
    recorded = request.recorded_args
    assert recorded["hosts"] == ["a", "b", "c"] and recorded["params"] == ["reader.read_threads=4"]
    assert not [k for k in recorded if k.startswith("_")]
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.options.num_accelerators = 8  # type: ignore[misc]


def test_a_flag_left_out_keeps_the_fields_default() -> None:
    args = parse(["closed", "vectordb", "HNSW", "run"])
    options = build(args, table.row("vectordb").load().options_type, 0.0).options
    # CLOSED has no --seed or --search-limit: None, and the plan takes the edition's CLOSED value
    assert (options.seed, options.search_limit, options.batch_size, options.host) == (None, None, 1, None)


BELOW_CLI = [p for p in PACKAGE.rglob("*.py") if p.parent.name in ("benchmarks", "launch", "trace")
             or p.name == "commands.py"]


@pytest.mark.parametrize("path", BELOW_CLI, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_nothing_below_cli_reads_settings_by_name(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert not re.findall(r"request\.args?\b|\.arg\(|from_args\(|\bargs\[\"|\bargs\.get\(", text), path
