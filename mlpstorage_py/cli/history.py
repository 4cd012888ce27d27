"""history show and history rerun: their arguments and handlers (listed in cli/table.py).

A history file lives in its results tree, and trees travel between people: a recorded command is
data until the user confirms it. rerun shows the command and the directory it runs in, asks on a
terminal (elsewhere it needs --yes), and refuses a recorded program (configs/tool.yaml
history.program_flags) that is not the one this installation would use for the same command,
unless the user names it again on its own command line (issue 39)."""

from __future__ import annotations

import argparse
import functools
import os
import shlex
import sys
import time
from typing import Any

from mlpstorage_py.cli.command import Args, results_dir
from mlpstorage_py.cli.common import mpi_bin_arg, positive_int
from mlpstorage_py.cli.training import add_dlio_bin_path
from mlpstorage_py.errors import Refused, UsageError, missing_directory

NAMED_LAUNCHERS = ("mpirun", "mpiexec", "srun")  # --mpi-bin by name: this installation's PATH finds them


@functools.cache
def program_flags() -> dict[str, str]:
    """configs/tool.yaml history.program_flags: flag -> the parsed setting it fills."""
    import yaml  # only for a rerun: the parser and --help stay light

    from mlpstorage_py.rules.configs import source_root

    with open(source_root() / "configs" / "tool.yaml", encoding="utf-8") as fh:
        return {str(k): str(v) for k, v in yaml.safe_load(fh)["history"]["program_flags"].items()}


def history_show_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--limit", "-n", type=positive_int, help="only the last N entries")
    p.add_argument("--id", "-i", type=positive_int, help="only entry ID")


def history_show(args: Args) -> int:
    from mlpstorage_py.results import history
    from mlpstorage_py.results.sentinel import require_org

    root = results_dir(args)
    require_org(root)
    entries = history.entries(root)
    if args.get("id"):
        entries = [history.find(root, args["id"])]
    elif args.get("limit"):
        entries = entries[-args["limit"]:]
    for entry in entries:
        print(f"{entry['id']:>5}  {entry['at']}  mlpstorage {shlex.join(entry['argv'])}")
    return 0


def history_rerun_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("id", type=positive_int, help="entry ID from `history show`")
    p.add_argument("--yes", "-y", action="store_true",
                   help="run it without asking (needed where standard input is not a terminal)")
    group = p.add_argument_group("programs: a recorded one that this installation would not use runs only when "
                                 "named again here (the value given replaces the recorded one)")
    group.add_argument("--mpi-bin", type=mpi_bin_arg, metavar="{mpirun,mpiexec,srun,PATH}", help="the launcher")
    add_dlio_bin_path(group)
    group.add_argument("--mpi-params", action="append", metavar="'ARGS'", help="extra launcher arguments")


def without(argv: list[str], flag: str) -> list[str]:
    """argv less every `flag VALUE` and `flag=VALUE`."""
    out: list[str] = []
    skip = False
    for token in argv:
        if skip:
            skip = False
        elif token == flag:
            skip = True
        elif not token.startswith(flag + "="):
            out.append(token)
    return out


def installed(key: str, value: Any, default: Any) -> bool:
    """Whether a recorded setting is what this installation would use: the value the same command
    gets without the flag (its default, MLPSTORAGE_* or the user's config), or a launcher by name."""
    if value in (None, "", []) or value == default:
        return True
    return key == "mpi_bin" and value in NAMED_LAUNCHERS


def vetted(entry_id: int, argv: list[str], given: Args) -> list[str]:
    """argv with every program setting either this installation's, or replaced by the value the
    user named on rerun's own command line; a Refused naming each recorded one that is neither."""
    from mlpstorage_py.cli.dispatch import parse

    recorded = parse(argv)
    refused = []
    for flag, key in program_flags().items():
        if given.get(key):
            values = given[key] if isinstance(given[key], list) else [given[key]]
            argv = without(argv, flag) + [f"{flag}={v}" for v in values]
        elif not installed(key, recorded.get(key), parse(without(argv, flag)).get(key)):
            value = recorded[key]
            refused.append(f"{flag} {shlex.join(value) if isinstance(value, list) else shlex.quote(str(value))}")
    if refused:
        again = " ".join(f"{r.split(' ', 1)[0]}={shlex.quote(r.split(' ', 1)[1])}" for r in refused)
        raise Refused(f"history entry {entry_id} names {'; '.join(refused)}, not what this installation would use: "
                      f"nothing run (to run it, name it again: mlpstorage history rerun {entry_id} {again})")
    return argv


def confirmed(yes: bool) -> bool:
    """--yes, or the user's answer on a terminal; without either, a usage error."""
    if yes:
        return True
    if not sys.stdin.isatty():
        raise UsageError("history rerun runs a command read from the results tree only once confirmed: "
                         "give --yes where there is no terminal to ask on")
    try:
        answer = input("run it? [y/N] ")
    except EOFError:
        answer = ""
    return answer.strip().lower() in ("y", "yes")


def history_rerun(args: Args) -> int:
    """Show a recorded command, and run it again once confirmed, from the directory it was run in."""
    from mlpstorage_py.cli.dispatch import parse, run
    from mlpstorage_py.results import history

    root = results_dir(args)
    entry = history.find(root, args["id"])
    argv = [str(a) for a in entry.get("argv") or []]
    if argv[:1] == ["history"]:
        raise UsageError("a history command cannot be re-run")
    if not {"--results-dir", "-rd"} & {a.split("=")[0] for a in argv}:
        argv += ["--results-dir", str(root)]
    argv = vetted(entry["id"], argv, args)
    cwd = str(entry.get("cwd") or os.getcwd())
    if not os.path.isdir(cwd):
        raise missing_directory(f"the directory entry {entry['id']} was run from,", cwd)
    print(f"re-running {entry['id']}: mlpstorage {shlex.join(argv)}\n  in {cwd}", flush=True)
    if not confirmed(bool(args.get("yes"))):
        print("not confirmed: nothing run")
        return 1
    previous = os.getcwd()
    os.chdir(cwd)  # relative paths in argv mean what they meant then
    try:
        return run(parse(argv), argv, time.time())
    finally:
        os.chdir(previous)
