"""What every utility command shares: where its results tree is (the flag, the variable, the
default `init` recorded), resolved one way for all of them."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def results_dir(args: dict[str, Any]) -> Path:
    """--results-dir, else MLPSTORAGE_RESULTS_DIR, else the default `init` recorded."""
    from mlpstorage_py.results.sentinel import resolve_results_dir

    return resolve_results_dir(args.get("results_dir"))[0]


def tree(args: dict[str, Any]) -> Path:
    """The package positional where the command has one, else the results directory; it must exist."""
    from mlpstorage_py.errors import NotFoundError

    given = args.get("package")
    root = Path(given).expanduser().resolve() if given else results_dir(args)
    if not root.is_dir():
        raise NotFoundError(f"results directory {root} does not exist")
    return root
