"""From argv to what runs it: parse into a plain dict of settings, then run the command table's
entry argparse picked, or the benchmark with the typed request built from them (cli/requests.py).
main() and `history rerun` both come through here."""

from __future__ import annotations

import os
from typing import Any

from mlpstorage_py.cli import build_parser
from mlpstorage_py.cli.common import OPEN_ONLY_FLAGS
from mlpstorage_py.errors import UsageError

# Settings that fall back to an environment variable only (the per-user defaults, with their
# variables and the user config, are mlpstorage_py/cli/user_config.py KEYS).
ENV_FALLBACKS = {
    "dlio_bin_path": "MLPSTORAGE_DLIO_BIN_PATH",
}


def parse(argv: list[str]) -> dict[str, Any]:
    """argv -> a plain dict of settings; explains flags CLOSED deliberately does not have."""
    if not argv:
        raise UsageError("a mode or command is required (see mlpstorage --help)")
    parser = build_parser(argv)
    if next((t for t in argv if not t.startswith("-")), None) == "closed":
        flag = next((t.split("=")[0] for t in argv if t.split("=")[0] in OPEN_ONLY_FLAGS), None)
        if flag:
            raise UsageError(f"{flag} is not allowed in the closed division (it exists only in open and whatif)")
    namespace, extras = parser.parse_known_args(argv)
    if extras:
        raise UsageError(f"unrecognized arguments: {' '.join(extras)} (see --help)")
    args = vars(namespace)
    if not args.get("_command"):  # a benchmark: the per-user defaults are its settings; other commands stay light
        from mlpstorage_py.cli.user_config import apply_defaults

        apply_defaults(args)  # flag > MLPSTORAGE_* > user config, each value checked by its flag's validator
    for key, env in ENV_FALLBACKS.items():
        if key in args and not args[key] and os.environ.get(env):
            args[key] = os.environ[env]
            args[f"_{key}_origin"] = env  # where it came from, for what the run prints
    return args


def run(args: dict[str, Any], argv: list[str], started: float) -> int:
    """Run the parsed command: a utility command's handler, else the benchmark; its exit code."""
    command = args.get("_command")
    if command:
        return command.run(args)
    from mlpstorage_py.benchmarks import table
    from mlpstorage_py.cli.requests import build
    from mlpstorage_py.commands import run_benchmark

    row = table.row(args["benchmark"])
    row.check_storage(args.get("storage") or "file")
    benchmark_class = row.load()
    return run_benchmark(benchmark_class, build(args, benchmark_class.options_type, started), argv)
