"""The argparse tree: `mlpstorage <mode> <benchmark> ...` plus the utility commands.

Parsing only: each leaf parser sets `_handler` (utility) or `_benchmark` (benchmarks), and
main() dispatches. Nothing here imports an engine.
"""

from __future__ import annotations

import argparse

from mlpstorage_py import __version__
from mlpstorage_py.cli import checkpointing, kvcache, training, utility, vectordb
from mlpstorage_py.cli.common import MODES, Parser


def build_parser() -> Parser:
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
        training.register(benches, mode)
        checkpointing.register(benches, mode)
        vectordb.register(benches, mode)
        kvcache.register(benches, mode)
    utility.register(top)
    return parser


__all__ = ["build_parser", "__version__"]
