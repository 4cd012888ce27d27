"""Handlers for the utility commands (init, validate, reports, history, version)."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path
from typing import Any

from mlpstorage_py.errors import NotFoundError, PermissionDenied, UsageError
from mlpstorage_py.results import history
from mlpstorage_py.results.sentinel import (ORG_PATTERN, create_results_dir, record_default, require_org,
                                            resolve_results_dir)


def init(args: dict[str, Any], argv: list[str]) -> int:
    path, created = create_results_dir(args["org"], Path(args["dir"]))
    default = record_default(path, args.get("set_default", False))
    verb = "initialised" if created else "already initialised"
    print(f"{path} {verb} for organization {args['org']}; {default}")
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
    digest = args.get("reference_checksum")
    if digest and not re.fullmatch(r"[0-9a-f]{32}", digest):
        raise UsageError(f"--reference-checksum must be 32 lowercase hex digits, got {digest!r}")
    submitters = {s for s in (args.get("submitters") or "").split(",") if s} or None
    bad = sorted(s for s in submitters or () if not ORG_PATTERN.match(s))
    if bad:
        raise UsageError(f"--submitters: {', '.join(map(repr, bad))} is not an organization name ([A-Za-z0-9._-]+)")
    pkg, findings = checker.validate(root, submitters, reference=digest)
    if args["json"] == "-":
        print(checker.findings_json(pkg, findings))
    else:
        print(checker.findings_text(pkg, findings))
        if args["json"]:
            _write_findings(Path(args["json"]), checker.findings_json(pkg, findings))
    return 1 if any(f.severity == "INVALID" for f in findings) else 0


def _write_findings(path: Path, text: str) -> None:
    """--json FILE: a path that cannot take the file is a one-line error naming the flag."""
    try:
        path.write_text(text + "\n", encoding="utf-8")
    except FileNotFoundError:
        raise NotFoundError(f"--json {path}: its directory does not exist") from None
    except IsADirectoryError:
        raise UsageError(f"--json {path}: is a directory, not a file") from None
    except PermissionError:
        raise PermissionDenied(f"--json {path}: permission denied") from None


def reportgen(args: dict[str, Any], argv: list[str]) -> int:
    from mlpstorage_py.report import reportgen as report
    from mlpstorage_py.results.sentinel import resolve_orgs

    root, _ = resolve_results_dir(args.get("results_dir"))
    orgs = resolve_orgs(root)  # the sentinel's, else the tree's own: a published package needs no init
    print(f"{root}: organization(s) {', '.join(orgs)}")
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
