"""status, submit and runs: from a results tree to a submitted package (handlers in mlpstorage_py.submission)."""

from __future__ import annotations

import argparse
from typing import Any

from mlpstorage_py.cli.command import tree
from mlpstorage_py.cli.common import add_universal, positive_int

STATES = ("ok", "failed", "incomplete", "extra")


def _tree(p: argparse.ArgumentParser) -> None:
    p.add_argument("package", nargs="?", help="results tree or package (default: the resolved results directory)")
    add_universal(p, writes_leaf=False)


def _act(p: argparse.ArgumentParser) -> None:
    p.add_argument("--yes", "-y", action="store_true", help="act; without it, only say what would be done")


def register(top: Any) -> None:
    p = top.add_parser("status", help="per result: runs present/required, findings, paperwork and a verdict",
                       description="One row per result (division, organization, system, benchmark, model): run leaves "
                                   "present / required, the checker's INVALID and WARNING counts, missing system "
                                   "paperwork, and a verdict: short, invalid, paperwork or ready.")
    _tree(p)
    p.add_argument("--runs", action="store_true", help="also list each leaf: ok, failed, incomplete or extra")
    p.add_argument("--json", action="store_true", help="print the rows (and every leaf) as JSON")
    p.set_defaults(_handler="mlpstorage_py.cli.submission:status")

    p = top.add_parser("submit", help="regenerate the rollups, validate, and write the submission tarball",
                       description="Regenerate the rollups (reportgen), run the checker and, only when nothing is "
                                   "INVALID, write <org>-<edition>-<timestamp>.tar.gz with its .sha256 and a manifest.")
    _tree(p)
    p.add_argument("--org", help="the organization to submit, when the tree holds several")
    p.add_argument("--output", "-o", metavar="DIR",
                   help="where the tarball goes (default: <results-dir>/.mlps/submissions, outside the package)")
    p.add_argument("--dry-run", action="store_true", help="list what would go in; write nothing")
    p.set_defaults(_handler="mlpstorage_py.cli.submission:submit")

    p = top.add_parser("runs", help="list, show and tidy run leaves: list, show, rm, purge, gc")
    sub = p.add_subparsers(dest="runs_command", metavar="<command>", required=True)
    s = sub.add_parser("list", help="every leaf with its state, size and code image")
    _tree(s)
    s.add_argument("--status", choices=STATES, help="only leaves in this state")
    s.add_argument("--json", action="store_true", help="print as JSON")
    s.set_defaults(_handler="mlpstorage_py.cli.submission:runs_list")
    s = sub.add_parser("show", help="one leaf in detail")
    s.add_argument("id", help="leaf ID (its path in the tree, as `runs list` prints it) or its unique timestamp")
    add_universal(s, writes_leaf=False)
    s.set_defaults(_handler="mlpstorage_py.cli.submission:runs_show")
    s = sub.add_parser("rm", help="move leaves to the trash (.mlps/trash in the tree); a dry run without --yes",
                       description="Select leaves by ID, or by filters that must all hold; selected leaves move to "
                                   "<results-dir>/.mlps/trash/<stamp>/, keeping their paths.")
    s.add_argument("ids", nargs="*", metavar="ID", help="leaf IDs or unique timestamps")
    s.add_argument("--status", choices=("failed", "incomplete", "extra"), help="leaves in this state")
    s.add_argument("--older-than", metavar="AGE", help="leaves whose timestamp is older than AGE (e.g. 7d, 12h, 30m)")
    s.add_argument("--keep-last", type=positive_int, metavar="N", help="all but the newest N leaves of each phase directory")
    _act(s)
    add_universal(s, writes_leaf=False)
    s.set_defaults(_handler="mlpstorage_py.cli.submission:runs_rm")
    s = sub.add_parser("purge", help="delete the trash for good; a dry run without --yes")
    _act(s)
    add_universal(s, writes_leaf=False)
    s.set_defaults(_handler="mlpstorage_py.cli.submission:runs_purge")
    s = sub.add_parser("gc", help="move code images no leaf points to into the trash; a dry run without --yes")
    _act(s)
    add_universal(s, writes_leaf=False)
    s.set_defaults(_handler="mlpstorage_py.cli.submission:runs_gc")


def status(args: dict[str, Any], argv: list[str]) -> int:
    """Print the table (or JSON). Informational: exit 0 whatever the verdicts (submit is the gate)."""
    import json

    from mlpstorage_py import checker
    from mlpstorage_py.submission import status as report

    root = tree(args)
    pkg, findings = checker.validate(root)
    table = report.rows(pkg, findings)
    if args.get("json"):
        print(json.dumps({"root": str(root), "results": table}, indent=2))
    else:
        print(report.text(table, bool(args.get("runs"))))
    return 0


def submit(args: dict[str, Any], argv: list[str]) -> int:
    from mlpstorage_py.submission.submit import submit as write_package

    return write_package(tree(args), args.get("org"), args.get("output"), bool(args.get("dry_run")))


def runs_list(args: dict[str, Any], argv: list[str]) -> int:
    import json

    from mlpstorage_py.submission.leaves import human
    from mlpstorage_py.submission.runs import listing

    entries = listing(tree(args), args.get("status"))
    if args.get("json"):
        print(json.dumps(entries, indent=2))
        return 0
    for e in entries:
        image = e["code_image"] + ("" if e["code_image_dir"] or e["code_image"] == "none" else " (not in the pool)")
        print(f"{e['state']:<10} {human(e['size']):>10}  {image:<26} {e['id']}")
    print(f"{len(entries)} leaves, {human(sum(e['size'] for e in entries))}")
    return 0


def runs_show(args: dict[str, Any], argv: list[str]) -> int:
    from mlpstorage_py.submission.runs import facts

    for key, value in facts(tree(args), args["id"]).items():
        if value not in (None, ""):
            print(f"{key + ':':<16}{value}")
    return 0


def runs_rm(args: dict[str, Any], argv: list[str]) -> int:
    from mlpstorage_py.submission.runs import rm

    return rm(tree(args), args.get("ids") or [], args.get("status"), args.get("older_than"), args.get("keep_last"),
              bool(args.get("yes")))


def runs_purge(args: dict[str, Any], argv: list[str]) -> int:
    from mlpstorage_py.submission.runs import purge

    return purge(tree(args), bool(args.get("yes")))


def runs_gc(args: dict[str, Any], argv: list[str]) -> int:
    from mlpstorage_py.submission.runs import gc

    return gc(tree(args), bool(args.get("yes")))
