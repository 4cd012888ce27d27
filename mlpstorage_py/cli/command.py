"""The base every utility command shares: an entry of the command table (cli/table.py) that
says where the command sits, which shared flags it takes and which handler runs it, and the
results-tree resolution its handler uses. Errors become exit codes in one place, main().

A handler is a function of the cli layer that takes the parsed arguments and returns the exit
code; it imports the work it calls when it runs, so building the parser imports none of it.
Entries are NamedTuples: a dataclass would bring `inspect` into every start-up, `--help` too.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from mlpstorage_py.cli.common import add_universal

Args = dict[str, Any]
Handler = Callable[[Args], int]
Arguments = Callable[[argparse.ArgumentParser], None]

# The shared flags of a command (Command.flags).
RESULTS = "results"  # --results-dir, --debug and --verbose, after the command's own arguments
TREE = "tree"        # a `package` positional and the RESULTS flags, before the command's own arguments
DEBUG = "debug"      # --debug only: the command reads no results tree
NONE = "none"        # nothing: its group takes --debug


def no_arguments(parser: argparse.ArgumentParser) -> None:
    """A command with only the shared flags."""


class Group(NamedTuple):
    """A command word that only selects a subcommand (`reports`, `runs`, ...)."""

    name: str
    help: str
    description: str | None = None
    debug: bool = False  # the group itself takes --debug (`config --debug show`)

    def add_to(self, subparsers: Any) -> Any:
        """Its parser under subparsers; returns the subparsers its commands are added to."""
        parser = subparsers.add_parser(self.name, help=self.help, description=self.description)
        if self.debug:
            parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks")
        return parser.add_subparsers(dest=f"{self.name}_command", metavar="<command>", required=True)


class Command(NamedTuple):
    """One utility command: its path (group, then name), help, arguments, shared flags and handler."""

    path: tuple[str, ...]
    help: str
    handler: Handler
    arguments: Arguments = no_arguments
    description: str | None = None
    flags: str = RESULTS

    def add_to(self, subparsers: Any) -> None:
        """Its parser, with the shared flags where they have always been in its usage line."""
        parser = subparsers.add_parser(self.path[-1], help=self.help, description=self.description)
        if self.flags == TREE:
            parser.add_argument("package", nargs="?", help="results tree or package (default: the resolved results directory)")
            add_universal(parser, writes_leaf=False)
        self.arguments(parser)
        if self.flags == RESULTS:
            add_universal(parser, writes_leaf=False)
        elif self.flags == DEBUG:
            parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks")
        parser.set_defaults(_command=self)

    def run(self, args: Args) -> int:
        """The handler's exit code."""
        return self.handler(args)


def results_dir(args: Args) -> Path:
    """--results-dir, else MLPSTORAGE_RESULTS_DIR, else the default `init` recorded."""
    from mlpstorage_py.results.sentinel import resolve_results_dir

    return resolve_results_dir(args.get("results_dir"))[0]


def tree(args: Args) -> Path:
    """The package positional where the command has one, else the results directory; it must exist."""
    from mlpstorage_py.errors import NotFoundError

    given = args.get("package")
    root = Path(given).expanduser().resolve() if given else results_dir(args)
    if not root.is_dir():
        raise NotFoundError(f"results directory {root} does not exist")
    return root
