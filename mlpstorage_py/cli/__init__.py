"""The argparse tree: `mlpstorage <mode> <benchmark> ...` plus the utility commands.

Parsing only: each utility command's parser carries its entry of the command table (cli/table.py)
as `_command`; a benchmark's parser is one row of the benchmark table (benchmarks/table.py), its
flags added by the cli module the row names; cli/dispatch.py runs what argparse picked.
Nothing here imports an engine. Given argv, only the mode it names gets its
benchmark tree (read from the YAML tables), so `--help`, `version` and the utility commands
start without loading them.
"""

from __future__ import annotations

import argparse
import importlib

from mlpstorage_py import __version__
from mlpstorage_py.cli import table
from mlpstorage_py.cli.common import MODES, Parser


def build_parser(argv: list[str] | None = None) -> Parser:
    """The whole tree, or with ``argv`` only the branch its mode selects (every mode is listed)."""
    parser = Parser(
        prog="mlpstorage",
        description="Run MLPerf Storage workloads and build submission packages that validate.",
        epilog="Modes: closed and open write results leaves; whatif prints the plan and commands only.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logging")
    top = parser.add_subparsers(dest="mode", metavar="<mode|command>", required=True)
    for mode, text in MODES.items():
        mode_parser = top.add_parser(mode, help=text, description=text)
        benches = mode_parser.add_subparsers(dest="benchmark", metavar="<benchmark>", required=True)
        if argv is not None and _selected_mode(argv) != mode:
            continue
        from mlpstorage_py.benchmarks.table import BENCHMARKS  # only once a mode is named

        for row in BENCHMARKS:
            bench = benches.add_parser(row.cli_name, help=row.summary, description=row.description)
            importlib.import_module(row.flags).register(bench, mode)
    table.register(top)
    return parser


def _selected_mode(argv: list[str]) -> str | None:
    """The first positional token, the mode or utility command argparse will pick."""
    return next((token for token in argv if not token.startswith("-")), None)


__all__ = ["build_parser", "__version__"]
