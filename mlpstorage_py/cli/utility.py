"""init, validate, reports and version: their arguments and handlers (listed in cli/table.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from mlpstorage_py.cli.command import Args, results_dir


def init_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("org", help="organization name ([A-Za-z0-9._-]+)")
    p.add_argument("dir", nargs="?", default="~/mlpstorage-results", help="results directory (default ~/mlpstorage-results)")
    p.add_argument("--set-default", action="store_true",
                   help="make <dir> the default results directory even when the default names another results tree")


def init(args: Args) -> int:
    from mlpstorage_py.results.sentinel import create_results_dir, record_default

    path, created = create_results_dir(args["org"], Path(args["dir"]))
    default = record_default(path, args.get("set_default", False))
    verb = "initialised" if created else "already initialised"
    print(f"{path} {verb} for organization {args['org']}; {default}")
    return 0


def validate_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("package", nargs="?", help="package or results directory (default: the resolved results directory)")
    p.add_argument("--list-rules", action="store_true", help="list every numbered rule and whether validate checks it")
    p.add_argument("--json", nargs="?", const="-", metavar="FILE",
                   help="also write the findings as JSON to FILE (or to stdout with no FILE)")
    p.add_argument("--submitters", metavar="A,B", help="check only these organizations")
    p.add_argument("--reference-checksum", metavar="MD5",
                   help="the sanctioned release's md5-tree-v2 digest, when not yet in code-images/reference-digests.yaml")
    p.add_argument("--letter", action="store_true",
                   help="judge the sentences the v3.0 review did not enforce as written (INVALID, not WARNING); "
                        "see Rules.md Calibrations")


def validate(args: Args) -> int:
    """Print the findings (and write them as JSON); exit 1 when any is INVALID."""
    import re

    from mlpstorage_py import checker
    from mlpstorage_py.errors import NotFoundError, UsageError
    from mlpstorage_py.results.sentinel import ORG_PATTERN

    if args["list_rules"]:
        print(checker.coverage_text())
        return 0
    root = Path(args["package"]).expanduser().resolve() if args.get("package") else results_dir(args)
    if not root.is_dir():
        raise NotFoundError(f"package directory {root} does not exist")
    digest = args.get("reference_checksum")
    if digest and not re.fullmatch(r"[0-9a-f]{32}", digest):
        raise UsageError(f"--reference-checksum must be 32 lowercase hex digits, got {digest!r}")
    submitters = {s for s in (args.get("submitters") or "").split(",") if s} or None
    bad = sorted(s for s in submitters or () if not ORG_PATTERN.match(s))
    if bad:
        raise UsageError(f"--submitters: {', '.join(map(repr, bad))} is not an organization name ([A-Za-z0-9._-]+)")
    target = _json_target(args["json"])
    pkg, findings = checker.validate(root, submitters, reference=digest, letter=bool(args.get("letter")))
    if args["json"] == "-":
        print(checker.findings_json(pkg, findings))
    else:
        print(checker.findings_text(pkg, findings))
        if target is not None:
            _write_findings(target, checker.findings_json(pkg, findings))
    return 1 if any(f.severity == "INVALID" for f in findings) else 0


def _json_target(value: str | None) -> Path | None:
    """--json FILE, refused before the package is read when it cannot take the file: a large
    package's validation takes a while, and its findings would be printed before the error."""
    from mlpstorage_py.errors import NotFoundError, UsageError

    if value in (None, "-"):
        return None
    path = Path(value)
    if path.is_dir():
        raise UsageError(f"--json {path}: is a directory, not a file")
    if not path.parent.is_dir():
        raise NotFoundError(f"--json {path}: its directory does not exist")
    return path


def _write_findings(path: Path, text: str) -> None:
    """--json FILE: a path that cannot take the file (or stopped being able to while the package
    was read) is a one-line error naming the flag."""
    from mlpstorage_py.errors import PermissionDenied

    try:
        path.write_text(text + "\n", encoding="utf-8")
    except (FileNotFoundError, IsADirectoryError):
        _json_target(str(path))  # says which, as before the package was read
        raise
    except PermissionError:
        raise PermissionDenied(f"--json {path}: permission denied") from None


def reportgen(args: Args) -> int:
    from mlpstorage_py.report import reportgen as report
    from mlpstorage_py.results.sentinel import resolve_orgs

    root = results_dir(args)
    orgs = resolve_orgs(root)  # the sentinel's, else the tree's own: a published package needs no init
    print(f"{root}: organization(s) {', '.join(orgs)}")
    for path in report.generate(root):
        print(f"wrote {path}")
    return 0


def html_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--output", "-o", metavar="FILE",
                   help="the page to write, outside the tree (default ./<results-dir name>-report.html)")
    p.add_argument("--force", action="store_true", help="replace an existing FILE")


def reports_html(args: Args) -> int:
    from mlpstorage_py.errors import NotFoundError
    from mlpstorage_py.report import html

    root = results_dir(args).resolve()
    if not root.is_dir():
        raise NotFoundError(f"results directory {root} does not exist")
    output, counts = html.write(root, args.get("output"), bool(args.get("force")))
    print(f"wrote {output}: {counts['results']} results, {counts['charts']} charts, {counts['findings']} findings")
    return 0


def version(args: Args) -> int:
    """`mlpstorage version`: it imports nothing beyond the parser."""
    from mlpstorage_py import LAYOUT_VERSION, RULES_EDITION, __version__

    print(f"mlpstorage {__version__} (rules edition {RULES_EDITION}, layout version {LAYOUT_VERSION})")
    return 0
