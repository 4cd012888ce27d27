"""status, submit and runs: their arguments and handlers (listed in cli/table.py); the work is
mlpstorage_py.submission's."""

from __future__ import annotations

import argparse

from mlpstorage_py.cli.command import Args, tree
from mlpstorage_py.cli.common import positive_int

STATES = ("ok", "failed", "incomplete", "extra")


def yes_argument(p: argparse.ArgumentParser) -> None:
    """--yes: the acting runs commands are dry runs without it (purge and gc take only this)."""
    p.add_argument("--yes", "-y", action="store_true", help="act; without it, only say what would be done")


def status_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--runs", action="store_true", help="also list each leaf: ok, failed, incomplete or extra")
    p.add_argument("--json", action="store_true", help="print the rows (and every leaf) as JSON")


def status(args: Args) -> int:
    """Print the table (or JSON). Informational: exit 0 whatever the verdicts (submit is the gate)."""
    import json

    from mlpstorage_py.submission import status as report

    root = tree(args)
    table = report.table(root)
    if args.get("json"):
        print(json.dumps({"root": str(root), "results": table}, indent=2))
    else:
        print(report.text(table, bool(args.get("runs"))))
    return 0


def submit_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--org", help="the organization to submit, when the tree holds several")
    p.add_argument("--output", "-o", metavar="DIR",
                   help="where the tarball goes (default: <results-dir>/.mlps/submissions, outside the package)")
    p.add_argument("--dry-run", action="store_true", help="list what would go in; write nothing")


def submit(args: Args) -> int:
    from mlpstorage_py.submission.submit import submit as write_package

    return write_package(tree(args), args.get("org"), args.get("output"), bool(args.get("dry_run")))


def runs_list_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--status", choices=STATES, help="only leaves in this state")
    p.add_argument("--json", action="store_true", help="print as JSON")


def runs_list(args: Args) -> int:
    import json

    from mlpstorage_py.results.tree.untrusted import shown
    from mlpstorage_py.submission.leaves import human
    from mlpstorage_py.submission.runs import listing

    entries = listing(tree(args), args.get("status"))
    if args.get("json"):
        print(json.dumps(entries, indent=2))
        return 0
    for e in entries:
        image = e["code_image"] + ("" if e["code_image_dir"] or e["code_image"] == "none" else " (not in the pool)")
        print(shown(f"{e['state']:<10} {human(e['size']):>10}  {image:<26} {e['id']}"))
    print(f"{len(entries)} leaves, {human(sum(e['size'] for e in entries))}")
    return 0


def runs_show_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("id", help="leaf ID (its path in the tree, as `runs list` prints it) or its unique timestamp")


def runs_show(args: Args) -> int:
    from mlpstorage_py.results.tree.untrusted import shown
    from mlpstorage_py.submission.runs import facts

    for key, value in facts(tree(args), args["id"]).items():
        if value not in (None, ""):  # the failure and the command are the leaf's: shown, never obeyed
            print(f"{key + ':':<16}{shown(value)}")
    return 0


def runs_rm_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("ids", nargs="*", metavar="ID", help="leaf IDs or unique timestamps")
    p.add_argument("--status", choices=("failed", "incomplete", "extra"), help="leaves in this state")
    p.add_argument("--older-than", metavar="AGE", help="leaves whose timestamp is older than AGE (e.g. 7d, 12h, 30m)")
    p.add_argument("--keep-last", type=positive_int, metavar="N", help="all but the newest N leaves of each phase directory")
    yes_argument(p)


def runs_rm(args: Args) -> int:
    from mlpstorage_py.submission.runs import rm

    return rm(tree(args), args.get("ids") or [], args.get("status"), args.get("older_than"), args.get("keep_last"),
              bool(args.get("yes")))


def runs_purge(args: Args) -> int:
    from mlpstorage_py.submission.runs import purge

    return purge(tree(args), bool(args.get("yes")))


def runs_gc(args: Args) -> int:
    from mlpstorage_py.submission.runs import gc

    return gc(tree(args), bool(args.get("yes")))
