"""Handlers for the utility commands (init, validate, reports, history, version)."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Any

from mlpstorage_py.errors import NotFoundError, UsageError
from mlpstorage_py.results import history
from mlpstorage_py.results.sentinel import init_results_dir, require_org, resolve_results_dir


def init(args: dict[str, Any], argv: list[str]) -> int:
    path, created = init_results_dir(args["org"], Path(args["dir"]))
    verb = "initialised" if created else "already initialised"
    print(f"{path} {verb} for organization {args['org']}; recorded as the default results directory")
    return 0


def version(args: dict[str, Any], argv: list[str]) -> int:
    from mlpstorage_py.main import version_text
    print(version_text())
    return 0


def validate(args: dict[str, Any], argv: list[str]) -> int:
    from mlpstorage_py import checker

    if args["list_rules"]:
        print(checker.coverage_text())
        return 0
    if args.get("package"):
        root = Path(args["package"]).expanduser().resolve()
    else:
        root, _ = resolve_results_dir(args.get("results_dir"))
    if not root.is_dir():
        raise NotFoundError(f"package directory {root} does not exist")
    findings = checker.validate(root)
    if args["json"]:
        print(json.dumps([f.as_dict() for f in findings], indent=2))
    else:
        print(checker.findings_text(root, findings))
    return 1 if any(f.severity == "FAIL" for f in findings) else 0


def reportgen(args: dict[str, Any], argv: list[str]) -> int:
    from mlpstorage_py.report import reportgen as report

    root, _ = resolve_results_dir(args.get("results_dir"))
    require_org(root)
    for path in report.generate(root):
        print(f"wrote {path}")
    return 0


def history_show(args: dict[str, Any], argv: list[str]) -> int:
    root, _ = resolve_results_dir(args.get("results_dir"))
    require_org(root)
    entries = history.entries(root)
    if args.get("id"):
        entries = [history.find(root, args["id"])]
    elif args.get("limit"):
        entries = entries[-args["limit"]:]
    for entry in entries:
        print(f"{entry['id']:>5}  {entry['at']}  mlpstorage {shlex.join(entry['argv'])}")
    return 0


def history_rerun(args: dict[str, Any], argv: list[str]) -> int:
    from mlpstorage_py.main import dispatch
    import time

    root, _ = resolve_results_dir(args.get("results_dir"))
    entry = history.find(root, args["id"])
    if entry["argv"][:1] == ["history"]:
        raise UsageError("a history command cannot be re-run")
    argv = list(entry["argv"])
    if not {"--results-dir", "-rd"} & {a.split("=")[0] for a in argv}:
        argv += ["--results-dir", str(root)]
    print(f"re-running {entry['id']}: mlpstorage {shlex.join(argv)}")
    previous = os.getcwd()
    os.chdir(entry.get("cwd") or previous)  # relative paths in argv mean what they meant then
    try:
        return dispatch(argv, time.time())
    finally:
        os.chdir(previous)
