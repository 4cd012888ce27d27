"""`mlpstorage systems describe <system>`: its arguments and handler (listed in cli/table.py)."""

from __future__ import annotations

import argparse

from mlpstorage_py.cli.command import Args, results_dir


def describe_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("system", help="system name (the results/<system>/ directory)")
    p.add_argument("--division", choices=["closed", "open"], help="only this division (default: every one with runs)")
    p.add_argument("--force", action="store_true", help="replace an existing description")


def describe(args: Args) -> int:
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
