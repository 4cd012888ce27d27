"""`mlpstorage systems describe <system>`: the system description from the runs' host records."""

from __future__ import annotations

import argparse
from typing import Any

from mlpstorage_py.cli.command import results_dir
from mlpstorage_py.cli.common import add_universal


def register(top: Any) -> None:
    p = top.add_parser("systems", help="system descriptions: `systems describe <system>`")
    sub = p.add_subparsers(dest="systems_command", metavar="<command>", required=True)
    d = sub.add_parser("describe", help="write systems/<system>.yaml from the client hosts the runs recorded",
                       description="Write <division>/<org>/systems/<system>.yaml from the host records of the system's "
                                   "runs (clients: count, CPU, cores, memory, OS, kernel, NICs), with FILL IN "
                                   "placeholders for what only the submitter knows. Never overwrites without --force.")
    d.add_argument("system", help="system name (the results/<system>/ directory)")
    d.add_argument("--division", choices=["closed", "open"], help="only this division (default: every one with runs)")
    d.add_argument("--force", action="store_true", help="replace an existing description")
    add_universal(d, writes_leaf=False)
    d.set_defaults(_handler="mlpstorage_py.cli.systems:describe")
    p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks")


def describe(args: dict[str, Any], argv: list[str]) -> int:
    """One description (and its sidecar) per division the system has runs in."""
    from mlpstorage_py.errors import ConfigurationError
    from mlpstorage_py.results.leaf import check_name
    from mlpstorage_py.systems.describe import describe as write_descriptions

    system = check_name("system name", args["system"])
    root = results_dir(args)
    if not root.is_dir():
        raise ConfigurationError(f"results directory {root} does not exist")
    write_descriptions(root, system, args.get("division"), bool(args.get("force")))
    return 0
